/* The CPU backend: fp32 activations; bf16 weights through the GEMM kernels of gemm.h (fp32
 * accumulation; AMX, AVX-512, AVX2 or C by the CPU's features) or, on the parity path
 * (CLEF_LINEAR=double), a double loop; parallel over output rows/columns with base/threads, so the
 * results are bit-identical for any thread count. docs/precision.md says which arithmetic runs. */
#ifndef CLEF_COMPUTE_CPU_OPS_H
#define CLEF_COMPUTE_CPU_OPS_H

#include "base/err.h"
#include "base/knobs.h"
#include "compute/ops.h"

/* nthreads <= 0: all online CPUs. knobs: the settings to use (CLEF_LINEAR, CLEF_GEMM,
 * CLEF_AMX_PACKED, CLEF_CPU_CACHE_MB; copied), NULL for the process's (clef_knobs_env()). NULL
 * with err set on failure. Free with ops->destroy(ops). */
clef_ops *clef_cpu_ops_create(int nthreads, const clef_knobs *knobs, clef_err *err);

#endif
