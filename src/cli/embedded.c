/* The data files of embedded.h, pulled in by the assembler's .incbin (the path is relative to the
 * repository root, where make runs the compiler). Why not a generated C array: the author's fixture is
 * 1.3 MB, which as C source would be ~6 MB of text to commit and compile; .incbin takes the file as it
 * is. (make does not see this dependency: after changing a file under data/, touch this one.) */
#include "cli/embedded.h"

#define CLI_INCBIN(sym, path)                                                                          \
    __asm__(".pushsection .rodata\n"                                                                   \
            ".balign 16\n"                                                                             \
            ".globl " #sym "_begin\n" #sym "_begin:\n"                                                 \
            ".incbin \"" path "\"\n"                                                                   \
            ".globl " #sym "_end\n" #sym "_end:\n"                                                     \
            ".byte 0\n"                                                                                \
            ".popsection\n");                                                                          \
    extern const char sym##_begin[], sym##_end[]

CLI_INCBIN(cli_release_manifest, "data/clef-flash/release-manifest.json");
CLI_INCBIN(cli_author_fixture, "data/clef-flash/fixtures-clef-flash.json");

cli_blob cli_embedded_release_manifest(void) {
    return (cli_blob){cli_release_manifest_begin, (size_t)(cli_release_manifest_end - cli_release_manifest_begin),
                      "data/clef-flash/release-manifest.json"};
}

cli_blob cli_embedded_author_fixture(void) {
    return (cli_blob){cli_author_fixture_begin, (size_t)(cli_author_fixture_end - cli_author_fixture_begin),
                      "data/clef-flash/fixtures-clef-flash.json"};
}
