/* Placeholder until the preprocess verb lands: refuses clearly instead of pretending. */
#include <stdio.h>

#include "cli/cmds.h"

int cmd_preprocess(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef preprocess: not built yet\n");
    return 2;
}
