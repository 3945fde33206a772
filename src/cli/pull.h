/* Downloading the release files (clef pull, docs/pull.md). CLI side on purpose: the library never
 * touches the network, and only the clef binary links libcurl.
 *
 * One file at a time, from {endpoint}/{repo}/resolve/{revision}/{name} (the Hugging Face hub's layout;
 * redirects followed, as the hub sends LFS files to its CDN; the token goes only to the endpoint's
 * host, never to a host a redirect names):
 *   - a file already under its final name with the manifest's size and sha256 is kept as it is;
 *   - bytes go to DIR/.{name}.part, created with O_EXCL | O_NOFOLLOW, or, left by an earlier run or a
 *     dropped connection, resumed with an HTTP Range request (a server that ignores the Range restarts
 *     it from 0) only when it is a regular file of this user with one name (fstat on the descriptor
 *     opened without following links); a symbolic link, FIFO, device or hard link there is refused
 *     (UnsafePath), never written through; the .part is flock'ed while it is written;
 *   - the sha256 is computed as the bytes arrive (over the resumed prefix first), then again over the
 *     file as it lies on disk (read back through the same descriptor after fsync), and the .part is
 *     renamed to its final name only when both equal the manifest's (and the name still is that file;
 *     after the rename the final name is checked to be it); on a mismatch the .part is removed;
 *   - a final name that is a symbolic link (or not a regular file) is never taken as present: it is
 *     fetched again and replaced by the rename, its target untouched;
 *   - what the server sends that is printed (an error page's start, curl's message) is escaped to
 *     printable ASCII and cut short.
 * Every failure is a clef_err with one of the PULL_E_* names below and a sentence naming the file. */
#ifndef CLEF_CLI_PULL_H
#define CLEF_CLI_PULL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

#define PULL_E_NO_NETWORK "NoNetwork"       /* host not resolved / not reachable */
#define PULL_E_NOT_FOUND "NotFound"         /* HTTP 404 */
#define PULL_E_UNAUTHORIZED "Unauthorized"  /* HTTP 401 / 403 */
#define PULL_E_HTTP "HttpError"             /* any other HTTP status >= 400, too many redirects */
#define PULL_E_DROPPED "ConnectionDropped"  /* the transfer stopped early (retried, then reported) */
#define PULL_E_NETWORK "NetworkError"       /* any other transfer failure (TLS, protocol) */
#define PULL_E_HASH "HashMismatch"          /* the bytes' sha256 differs from the manifest's */
#define PULL_E_SIZE "SizeMismatch"          /* the server's file is longer or shorter than the manifest's */
#define PULL_E_DISK_FULL "DiskFull"         /* ENOSPC / EDQUOT, or too little room before starting */
#define PULL_E_MANIFEST "BadManifest"
#define PULL_E_UNSAFE "UnsafePath"          /* DIR/.NAME.part is not a regular file of ours with one name */

typedef struct pull_file {
    char name[160];  /* [A-Za-z0-9._-], not starting with '.' (checked: it becomes a path) */
    uint64_t bytes;
    char sha256[65]; /* lowercase hex */
} pull_file;

typedef struct pull_manifest {
    char repository[256]; /* "" when the manifest names none */
    char revision[128];
    pull_file *files;
    size_t n;
} pull_manifest;

/* Parses {"repository"?, "revision"?, "files": {name: {"bytes": N, "sha256": hex}}} (the form of
 * ../shared/spec/release-manifest.json). Returns 0, or -1 with err (BadManifest, OutOfMemory). */
int pull_manifest_parse(const char *text, size_t len, pull_manifest *m, clef_err *err);
void pull_manifest_free(pull_manifest *m);

typedef struct pull_opts {
    const char *endpoint; /* "https://huggingface.co" (no trailing slash needed) */
    const char *repo;     /* "Cloudflare/clef-flash" */
    const char *revision;
    const char *token;    /* NULL or "" = no Authorization header */
    const char *dir;      /* exists */
    int retries;          /* further attempts after a dropped connection, each resuming */
    FILE *log;            /* plain lines (one per event); the bar goes to stderr when it is a terminal */
} pull_opts;

typedef struct pull_stats {
    uint64_t bytes_fetched; /* over the network in this run */
    int files_fetched, files_present;
} pull_stats;

/* Call once before any pull_file_get (curl_global_init) and once after (curl_global_cleanup). */
int pull_global_init(clef_err *err);
void pull_global_cleanup(void);

/* Bytes still to fetch for f in o->dir (0 when the final file has the right size; the .part's length
 * counts as fetched), for a free-space check before starting. */
uint64_t pull_bytes_needed(const pull_opts *o, const pull_file *f);
/* Free bytes on the file system of dir; -1 when unknown. */
int64_t pull_free_bytes(const char *dir);

/* Makes o->dir/f->name a verified copy (see above). Returns 0 or -1 with err. */
int pull_file_get(const pull_opts *o, const pull_file *f, pull_stats *st, clef_err *err);

#endif
