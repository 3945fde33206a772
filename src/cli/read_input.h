/* Reading a whole request file (or stdin) for the CLI verbs, with a size cap. */
#ifndef CLEF_CLI_READ_INPUT_H
#define CLEF_CLI_READ_INPUT_H

#include <stddef.h>

/* The largest request or logits file the CLI verbs read. */
#define CLI_MAX_INPUT_BYTES ((size_t)256 << 20)

/* Reads path ("-" = stdin) into a malloc'd NUL-terminated buffer; NULL with a message on stderr
 * when it cannot be read or exceeds max_bytes. */
char *cli_read_all(const char *path, size_t max_bytes, size_t *len);

#endif
