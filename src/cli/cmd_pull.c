/* clef pull: download the release into a folder, every file verified against the manifest compiled
 * into the binary (data/clef-flash/release-manifest.json) or given with --manifest. docs/pull.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/embedded.h"
#include "cli/pull.h"
#include "cli/read_input.h"

#define DEFAULT_REPO "Cloudflare/clef-flash"
#define DEFAULT_ENDPOINT "https://huggingface.co"

static void usage(FILE *f) {
    fprintf(f,
            "usage: clef pull [--dir DIR] [--revision REV] [--repo OWNER/NAME] [--manifest FILE] [--retries N]\n"
            "\n"
            "Downloads the clef-flash release (Hugging Face repository %s) into DIR (default: clef-flash),\n"
            "resuming partial files, and checks every file's size and sha256 against the release manifest\n"
            "compiled into clef; a file that does not verify is never left under its final name.\n"
            "\n"
            "  --dir DIR          where the files go (created if missing)\n"
            "  --revision REV     the revision to fetch (default: the manifest's, a pinned commit)\n"
            "  --repo OWNER/NAME  the repository (default: the manifest's, %s)\n"
            "  --manifest FILE    verify against FILE instead of the built-in manifest (same JSON form:\n"
            "                     {\"repository\", \"revision\", \"files\": {name: {\"bytes\", \"sha256\"}}}); for mirrors and tests\n"
            "  --retries N        attempts after a dropped connection, each resuming (default 5)\n"
            "\n"
            "Environment: HF_ENDPOINT (default %s), HF_TOKEN (sent as Authorization: Bearer, to that host only).\n",
            DEFAULT_REPO, DEFAULT_REPO, DEFAULT_ENDPOINT);
}

static int bad(const char *what) {
    fprintf(stderr, "clef pull: %s (clef pull --help)\n", what);
    return 2;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return -1;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        p[i] = c;
    }
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

int cmd_pull(int argc, char **argv) {
    const char *dir = "clef-flash", *revision = NULL, *repo = NULL, *manifest_path = NULL;
    int retries = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dir") || !strcmp(a, "--revision") || !strcmp(a, "--repo") || !strcmp(a, "--manifest") ||
            !strcmp(a, "--retries")) {
            if (!v) {
                fprintf(stderr, "clef pull: %s needs a value (clef pull --help)\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--dir")) dir = v;
            else if (!strcmp(a, "--revision")) revision = v;
            else if (!strcmp(a, "--repo")) repo = v;
            else if (!strcmp(a, "--manifest")) manifest_path = v;
            else if (!cli_int(v, 0, 100, &retries)) return bad("--retries must be a whole number in [0, 100]");
        } else {
            fprintf(stderr, "clef pull: unknown option '%s' (clef pull --help)\n", a);
            return 2;
        }
    }

    pull_manifest m;
    clef_err err = {0};
    char *owned = NULL;
    const char *mtext;
    size_t mlen;
    if (manifest_path) {
        owned = cli_read_all(manifest_path, (size_t)64 << 20, &mlen);
        if (!owned) return 2;
        mtext = owned;
    } else {
        cli_blob b = cli_embedded_release_manifest();
        mtext = b.data;
        mlen = b.len;
    }
    int rc = pull_manifest_parse(mtext, mlen, &m, &err);
    free(owned);
    if (rc) {
        fprintf(stderr, "clef pull: %s: %s\n", manifest_path ? manifest_path : "built-in manifest", err.msg);
        return 2;
    }
    if (!repo) repo = m.repository[0] ? m.repository : DEFAULT_REPO;
    if (!revision) revision = m.revision[0] ? m.revision : NULL;
    if (!revision) {
        pull_manifest_free(&m);
        return bad("the manifest names no revision: give --revision");
    }
    if (m.revision[0] && strcmp(revision, m.revision) != 0) {
        fprintf(stderr,
                "clef pull: the %s lists revision %s; revision %s needs --manifest FILE listing that revision's "
                "files and hashes\n",
                manifest_path ? "manifest" : "built-in manifest", m.revision, revision);
        pull_manifest_free(&m);
        return 2;
    }
    if (strlen(repo) > 200 || strlen(revision) > 120 || strchr(repo, '?') || strchr(revision, '/') ||
        strchr(revision, '?')) {
        pull_manifest_free(&m);
        return bad("--repo or --revision is not a plain repository name / revision");
    }
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "clef pull: cannot create the folder %s: %s\n", dir, strerror(errno));
        pull_manifest_free(&m);
        return 1;
    }
    const char *endpoint = getenv("HF_ENDPOINT");
    if (!endpoint || !*endpoint) endpoint = DEFAULT_ENDPOINT;
    pull_opts o = {.endpoint = endpoint, .repo = repo, .revision = revision, .token = getenv("HF_TOKEN"),
                   .dir = dir, .retries = retries, .log = stderr};

    uint64_t total = 0, need = 0;
    for (size_t i = 0; i < m.n; i++) {
        total += m.files[i].bytes;
        need += pull_bytes_needed(&o, &m.files[i]);
    }
    fprintf(stderr, "pull: %s@%s from %s into %s: %zu files, %.2f GB (%.2f GB to fetch)\n", repo, revision, endpoint,
            dir, m.n, (double)total / 1e9, (double)need / 1e9);
    int64_t free_b = pull_free_bytes(dir);
    if (free_b >= 0 && (uint64_t)free_b < need) {
        fprintf(stderr, "clef pull: DiskFull: %s has %.2f GB free, the files still to fetch need %.2f GB\n", dir,
                (double)free_b / 1e9, (double)need / 1e9);
        pull_manifest_free(&m);
        return 1;
    }
    if (pull_global_init(&err)) {
        fprintf(stderr, "clef pull: %s\n", err.msg);
        pull_manifest_free(&m);
        return 1;
    }
    pull_stats st = {0};
    rc = 0;
    for (size_t i = 0; i < m.n && !rc; i++) {
        if (pull_file_get(&o, &m.files[i], &st, &err)) {
            fprintf(stderr, "clef pull: %s: %s\n", err.type, err.msg);
            rc = 1;
        }
    }
    pull_global_cleanup();
    if (!rc)
        fprintf(stderr, "pull: done: %zu files verified in %s (%d fetched, %d already present; %.2f GB downloaded)\n",
                m.n, dir, st.files_fetched, st.files_present, (double)st.bytes_fetched / 1e9);
    pull_manifest_free(&m);
    return rc;
}
