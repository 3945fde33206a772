/* Placeholder until the encode verb lands: refuses clearly instead of pretending. */
#include <stdio.h>

#include "cli/cmds.h"

int cmd_encode(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef encode: not built yet\n");
    return 2;
}
