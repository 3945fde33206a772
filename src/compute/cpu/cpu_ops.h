/* The plain CPU backend: fp32 activations, double accumulation for long sums, bf16 weights
 * converted on the fly, parallel over output rows/columns with base/threads (results
 * bit-identical for any thread count). The parity path; speed work comes later. */
#ifndef CLEF_COMPUTE_CPU_OPS_H
#define CLEF_COMPUTE_CPU_OPS_H

#include "base/err.h"
#include "compute/ops.h"

/* nthreads <= 0: all online CPUs. NULL with err set on failure. Free with ops->destroy(ops). */
clef_ops *clef_cpu_ops_create(int nthreads, clef_err *err);

#endif
