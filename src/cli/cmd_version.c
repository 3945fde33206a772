/* clef version / clef --version: the version, the git commit this binary was built from (baked in
 * by the Makefile as build/gen/clef_commit.h), the compute backends of this build and the CPU
 * features the kernels use here. */
#include <stdio.h>
#include <string.h>

#include "base/cpu_features.h"
#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "compute/cpu/gemm.h"
#ifdef CLEF_HAVE_CUDA
#include "compute/cuda/cuda_ops.h"
#endif

#if defined(__has_include)
#if __has_include("clef_commit.h")
#include "clef_commit.h"
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
    char feats[512];
    clef_cpu_feature_string(feats, sizeof feats);
    printf("clef %s\n", CLEF_VERSION);
    printf("commit: %s\n", CLEF_GIT_COMMIT);
#ifdef CLEF_HAVE_CUDA
    int n_gpu = clef_cuda_device_count();
    printf("backends: cpu cuda (%d device%s visible)\n", n_gpu, n_gpu == 1 ? "" : "s");
#else
    printf("backends: cpu\n");
#endif
    printf("cpu features: %s\n", feats[0] ? feats : "(none beyond x86-64-v2)");
    printf("cpu gemm kernel: %s\n", clef_gemm_name(clef_gemm_default()));
    return fflush(stdout) ? 1 : 0;
}
