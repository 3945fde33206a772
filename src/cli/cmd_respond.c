/* Placeholder until the respond verb lands: refuses clearly instead of pretending. */
#include <stdio.h>

#include "cli/cmds.h"

int cmd_respond(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef respond: not built yet\n");
    return 2;
}
