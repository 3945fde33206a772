/* The scalar references of the CPU token mixers (ref_mixers.c), for tests/unit/test_cpu_mixers.c and
 * bench/bench_mixers.c: the same contracts as clef_cpu_delta_rule and clef_cpu_attention
 * (compute/cpu/cpu_mixers.h); 0, or -1 when scratch memory could not be allocated. */
#ifndef CLEF_TESTS_REF_MIXERS_H
#define CLEF_TESTS_REF_MIXERS_H

#include <stddef.h>

#include "base/threads.h"
#include "compute/cpu/cpu_mixers.h"

int ref_cpu_delta_rule(clef_pool *pool, float *o, const float *q, const float *k, const float *v,
                       const float *beta, const float *g, size_t T, size_t Hk, size_t Hv, size_t dk,
                       size_t dv, size_t chunk);
int ref_cpu_attention(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq, const float *k,
                      size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv,
                      size_t hd, float scale, int causal);

#endif
