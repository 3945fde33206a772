/* Placeholder until the decide verb lands: refuses clearly instead of pretending. */
#include <stdio.h>

#include "cli/cmds.h"

int cmd_decide(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "clef decide: not built yet\n");
    return 2;
}
