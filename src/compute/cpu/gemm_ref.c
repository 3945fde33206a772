/* Portable GEMM kernel: the definition of the exact kernels' arithmetic (gemm.h), written plainly.
 * fmaf gives the fused multiply-add's single rounding everywhere (a library call when the build
 * targets no FMA unit: slow, but the same bits). */
#include <math.h>
#include <string.h>

#include "compute/cpu/gemm.h"

static inline float bf16f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void clef_gemm_ref_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                        float *scratch) {
    /* Widen CLEF_GEMM_SCRATCH / K weight rows at a time (at least one: then k blocks). */
    size_t K = a->K;
    size_t KB = K < CLEF_GEMM_SCRATCH ? K : CLEF_GEMM_SCRATCH;
    for (size_t n = n0; n < n1; n++) {
        for (size_t t = t0; t < t1; t++) a->y[t * a->ldy + n] = 0.0f;
        for (size_t k0 = 0; k0 < K; k0 += KB) {
            size_t kb = K - k0 < KB ? K - k0 : KB;
            const uint16_t *wr = a->W + n * a->ldw + k0;
            for (size_t k = 0; k < kb; k++) scratch[k] = bf16f(wr[k]);
            for (size_t t = t0; t < t1; t++) {
                const float *xr = a->x + t * a->ldx + k0;
                float acc = a->y[t * a->ldy + n];
                for (size_t k = 0; k < kb; k++) acc = fmaf(xr[k], scratch[k], acc);
                a->y[t * a->ldy + n] = acc;
            }
        }
        if (a->bias)
            for (size_t t = t0; t < t1; t++) a->y[t * a->ldy + n] += a->bias[n];
    }
}
