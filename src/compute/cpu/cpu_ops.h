/* The CPU backend: fp32 activations; bf16 weights through the GEMM kernels of gemm.h (fp32
 * accumulation; AMX, AVX-512, AVX2 or C by the CPU's features), through gemm_int8.h in the int8
 * precision, or, on the parity path
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

/* The precisions of the CPU backend (the same numbers as clef.h's CLEF_PRECISION_*). */
enum { CLEF_CPU_FP32 = 0, CLEF_CPU_FAST = 1, CLEF_CPU_BF16 = 2, CLEF_CPU_INT8 = 3 };
/* The same with a precision: FP32 is the exact path above (the default, its bits unchanged); INT8
 * runs every BF16 Linear through gemm_int8.h (weights quantized at load by prepare_weight, or per
 * call where a weight was not prepared: the same bits); FAST and BF16 have no kernel on the CPUs
 * this backend has run on (no AMX, no AVX512-BF16 path in the library), so they run FP32 and say so
 * in *note (a static line; NULL when the precision runs as asked). ops->name is "cpu" for the exact
 * path, "cpu-int8" for INT8. */
clef_ops *clef_cpu_ops_create_prec(int nthreads, int precision, const clef_knobs *knobs, const char **note,
                                   clef_err *err);

#endif
