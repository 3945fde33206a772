/* Data files compiled into the clef binary (src/cli/embedded.c), so `clef pull` and `clef gate` need
 * nothing beside the binary:
 *   data/clef-flash/release-manifest.json   every release file's size and sha256 (clef pull verifies)
 *   data/clef-flash/fixtures-clef-flash.json the author's fp32 readout on the real weights (clef gate)
 * Each is a byte range [begin, end) in .rodata, not NUL-terminated. */
#ifndef CLEF_CLI_EMBEDDED_H
#define CLEF_CLI_EMBEDDED_H

#include <stddef.h>

typedef struct cli_blob {
    const char *data;
    size_t len;
    const char *source; /* the repository path it was compiled from */
} cli_blob;

cli_blob cli_embedded_release_manifest(void);
cli_blob cli_embedded_author_fixture(void);

#endif
