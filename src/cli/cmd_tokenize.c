/* Placeholder until the tokenize verb lands: refuses clearly instead of pretending. */
#include <stdio.h>

#include "cli/cmds.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef tokenize: not built yet\n");
    return 2;
}
