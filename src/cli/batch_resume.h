/* clef batch's resume decision (src/cli/cmd_batch.c), apart from the run so that it can be fuzzed
 * in-process (fuzz/fuzz_batch.c): given what a run finds (IN's and OUT's identities, OUT's bytes
 * through a file descriptor it only reads, the record OUT.clef-batch holds and the identity this run
 * would record), decide to start fresh, to start over (--restart), to resume after K complete answer
 * lines cutting OUT at byte X, or to refuse with a message. batch_resume_decide never writes;
 * batch_resume_apply carries out a decision on OUT.
 *
 * The record is two JSON lines: the identity (IN's sha256 and the settings that change answers,
 * batch_record_render) and the state of OUT it vouches for (batch_state_render: K lines, X bytes,
 * the sha256 of OUT's first X bytes), rewritten (atomically) after every synced batch. A resume keeps
 * exactly those X bytes, and only when OUT's first X bytes hash to the record's sha256: lines after X
 * (written by a run killed before it updated the record) are answered again, never trusted. */
#ifndef CLEF_CLI_BATCH_RESUME_H
#define CLEF_CLI_BATCH_RESUME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/sha256.h"

/* The record's first bytes that are read and compared (one JSON line, far shorter). */
#define BATCH_RECORD_MAX 4096
/* The longest OUT line a resume reads back (an answer line longer than this is not one clef wrote). */
#define BATCH_OUT_LINE_MAX ((size_t)1 << 26)

typedef enum {
    BATCH_FRESH = 0, /* OUT is empty: write the record, then every answer */
    BATCH_RESTART,   /* --restart: empty OUT, write the record, then every answer */
    BATCH_RESUME,    /* keep OUT's first `have` lines (cut it at `cut_at`), skip their requests */
    BATCH_REFUSE,    /* change nothing; `msg` says why */
} batch_action;

typedef struct {
    const char *in_path, *out_path, *rec_path; /* for messages only */
    dev_t in_dev, out_dev;                     /* IN and the opened OUT (fstat) */
    ino_t in_ino, out_ino;
    int restart;       /* --restart */
    int in_is_pipe;    /* IN is read once from a pipe (or stdin): no resume */
    uint64_t in_lines; /* IN's lines (a last line without '\n' counts) */
    int out_fd;        /* OUT opened; read from offset 0, never written here */
    uint64_t out_size; /* OUT's size when opened */
    const char *rec;   /* what OUT.clef-batch holds (NULL when there is none or it is empty) */
    size_t rec_len;
    const char *want; /* the identity line of this run (batch_record_render); the record starts with it */
    size_t want_len;
    size_t line_max; /* longest OUT line read back (BATCH_OUT_LINE_MAX) */
} batch_resume_in;

typedef struct {
    batch_action action;
    uint64_t have;   /* BATCH_RESUME: OUT's complete answer lines kept */
    uint64_t cut_at; /* BATCH_RESUME: the end of the last of them (OUT's size after the cut) */
    uint64_t errors; /* BATCH_RESUME: how many of the kept lines are error lines ({"error": ...}) */
    clef_sha256 out_sha; /* BATCH_RESUME: OUT's first cut_at bytes hashed (to go on with); else empty */
    char msg[3 * 4200 + 512]; /* BATCH_REFUSE: the reason, one line without "clef batch: " or '\n' */
} batch_decision;

/* 1 when the line is one clef batch writes: a JSON object with "model" and "answers" (a response) or
 * "error". */
int batch_is_answer(const char *line, size_t len);

/* Decides. A read error or running out of memory while reading OUT back is a refusal too (d->msg). */
void batch_resume_decide(const batch_resume_in *in, batch_decision *d);

/* Carries out a decision on OUT (fd): BATCH_RESTART empties it, BATCH_RESUME cuts it at cut_at when
 * it is longer; the offset is left at OUT's end. 0, or -1 (errno). BATCH_FRESH and BATCH_REFUSE do
 * nothing (0). */
int batch_resume_apply(int out_fd, const batch_decision *d);

/* Lines of a regular file read from fd (a last line without '\n' counts) and its SHA-256 in hex;
 * the offset goes back to 0. 0, or -1 (errno). */
int batch_count_lines(int fd, uint64_t *lines, char hex[65]);

/* The identity line of the record: IN's hash (NULL: null, IN is a pipe) and the settings that change
 * answers, one JSON line. 0, or -1 out of memory. */
int batch_record_render(clef_buf *b, const char *in_hex, int max_length, int tile, const char *split, int text_only,
                        int allow_image_paths, const char *precision);

/* The state line of the record: OUT's first `bytes` bytes hold `lines` answer lines and hash to hex
 * (64 lowercase digits). 0, or -1 out of memory. */
int batch_state_render(clef_buf *b, uint64_t lines, uint64_t bytes, const char *hex);

/* The first BATCH_RECORD_MAX bytes of the record at path, appended to b (nothing when there is none).
 * 1 when it had bytes, 0 when it is missing or empty, -1 out of memory. */
int batch_record_read(const char *path, clef_buf *b);

#endif
