/* clef version / clef --version: the version, the git commit this binary was built from (baked in
 * by the Makefile as build/gen/cli/clef_commit.h), the compute backends of this build and the CPU
 * features the kernels use here. */
#include <stdio.h>
#include <string.h>

#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"

#if defined(__has_include)
#if __has_include("cli/clef_commit.h")
#include "cli/clef_commit.h"
#endif
#endif
#ifndef CLEF_GIT_COMMIT
#define CLEF_GIT_COMMIT "unknown"
#endif

int cmd_version(int argc, char **argv) {
    const cli_opt opts[] = {CLI_OPT_END};
    const cli_cmd cmd = {.verb = "version", .usage = "", .opts = opts,
                         .about = "Prints the version, the git commit of the build, the compute backends and the CPU\n"
                                  "features in use.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    char info[1024];
    clef_build_info(info, sizeof info);
    printf("clef %s\n", CLEF_VERSION);
    printf("commit: %s\n", CLEF_GIT_COMMIT);
    fputs(info, stdout);
    return fflush(stdout) ? 1 : 0;
}
