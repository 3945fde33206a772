/* cpu_attention_f32.c's kernel for CPUs with AVX2 + FMA but no AVX-512: the default path's
 * attention there (cpu_ops.c), with the same bits as the AVX-512 kernel.
 *
 * Every output element is the same sequence of fp32 / double operations in the same order:
 *   S = Q·Kᵀ: s = fma(k[p], q[p], s) for p = 0..hd-1 from s = +0 (the AVX-512 kernel's
 *     contracted `c += b * a`); O += P·V: o = fma(v[t], p[t], o) over the tile's keys in order.
 *     Register blocking differs (6 rows x 16 columns here, x 64 there), which changes no element's
 *     sequence.
 *   The online softmax step per row and tile of 64 keys (row_step): x = s * scale (fp32), -inf past
 *     the valid keys; the tile max through the same tree as _mm512_reduce_max_ps (max(hi8, lo8),
 *     then the halves, then the pairs: the same result, NaNs included); the running max / sum in
 *     double with libm's exp for the rescale; p = expf(x - (float)m) with clef_simd2_expf (the
 *     same glibc algorithm as clef_simd_expf, checked equal to libm by test_simd); the tile's sum
 *     as 8 double lanes (lane L = keys L, L+8, ..., in order) reduced as _mm512_reduce_add_pd does:
 *     ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
 *   The final o / l in double.
 * tests/unit/test_attention_f32.c checks this kernel (and the AVX-512 one where the CPU has it)
 * against a scalar reference performing that order, bit for bit. Work items, blocking and thread
 * partitioning: cpu_attention_f32_pass.h, shared with cpu_attention_f32.c (whose comments explain
 * them). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"

/* No contraction: every FMA below is written out (as the AVX-512 kernel's contracted ones). */
#define TGT __attribute__((target("avx2,fma"), optimize("fp-contract=off")))
#define KB 64        /* keys per tile */
#define ROWS 256     /* target query rows per work item (all heads of the group) */
#define MR 6         /* the kernel's register tile: 6 rows x 16 columns */

static inline size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* C[r, c] (+)= sum_{p < P} A[r, p] B[p, c] for r < m, c < ncols (a multiple of 16), one FMA per p in
 * p order per element; B row-major (ldb). Rows up to the next multiple of MR past m are read from
 * A (never stored), so A needs that slack. */
#define R_INIT(r) if (accum && r0 + r < m) { c##r##0 = _mm256_loadu_ps(C + (r0 + r) * ldc + c0); \
    c##r##1 = _mm256_loadu_ps(C + (r0 + r) * ldc + c0 + 8); } else c##r##0 = c##r##1 = _mm256_setzero_ps();
#define R_FMA(r) { __m256 a = _mm256_broadcast_ss(ab + r * lda + p); \
    c##r##0 = _mm256_fmadd_ps(b0, a, c##r##0); c##r##1 = _mm256_fmadd_ps(b1, a, c##r##1); }
#define R_STORE(r) if (r0 + r < m) { _mm256_storeu_ps(C + (r0 + r) * ldc + c0, c##r##0); \
    _mm256_storeu_ps(C + (r0 + r) * ldc + c0 + 8, c##r##1); }
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

static TGT void gemm_f32(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb,
                         size_t m, size_t P, size_t ncols, int accum) {
    for (size_t c0 = 0; c0 < ncols; c0 += 16)
        for (size_t r0 = 0; r0 < m; r0 += MR) {
            const float *ab = A + r0 * lda;
            __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
            ROWS6(R_INIT)
            const float *bp = B + c0;
            for (size_t p = 0; p < P; p++, bp += ldb) {
                __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
                ROWS6(R_FMA)
            }
            ROWS6(R_STORE)
        }
}

/* The online-softmax step of one row for one tile (cpu_attention_f32.c's row_step, 8 lanes). */
static TGT void row_step(float *s, size_t nv, float scale, double *m, double *l, float *orow, size_t hp) {
    __m256 x[KB / 8], vlo = _mm256_set1_ps(-INFINITY), vhi = vlo;
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i = 0; i < KB / 8; i++) {
        long left = (long)nv - 8 * i;
        __m256 valid = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : left <= 0 ? 0 : (int)left), iota));
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * i), _mm256_set1_ps(scale));
        x[i] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, valid);
        /* the AVX-512 kernel's 16-lane running max: lanes 0-7 from even i, 8-15 from odd i */
        if (i & 1) vhi = _mm256_max_ps(vhi, x[i]);
        else vlo = _mm256_max_ps(vlo, x[i]);
    }
    /* _mm512_reduce_max_ps's tree */
    __m256 t3 = _mm256_max_ps(vhi, vlo);
    __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    __m128 t10 = _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
    float mt = _mm_cvtss_f32(t10);
    double mn = *m > mt ? *m : mt;
    if (nv == 0 || mn == -INFINITY) {
        memset(s, 0, KB * sizeof(float));
        return;
    }
    if (mn != *m) {
        double alpha = exp(*m - mn); /* 0 when m was -inf */
        __m256 av = _mm256_set1_ps((float)alpha);
        for (size_t d = 0; d < hp; d += 8) _mm256_storeu_ps(orow + d, _mm256_mul_ps(_mm256_loadu_ps(orow + d), av));
        *l *= alpha;
        *m = mn;
    }
    float e[KB] __attribute__((aligned(32)));
    __m256 mf = _mm256_set1_ps((float)mn);
    for (int i = 0; i < KB / 8; i++) _mm256_store_ps(e + 8 * i, _mm256_sub_ps(x[i], mf));
    clef_simd2_expf(s, e, KB); /* expf(-inf) = 0 for the masked keys */
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(); /* lanes 0-3, 4-7 */
    for (int i = 0; i < KB / 8; i++) {
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(s + 8 * i)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(s + 8 * i + 4)));
    }
    /* _mm512_reduce_add_pd's tree */
    __m256d t = _mm256_add_pd(a1, a0);
    __m128d h = _mm_add_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
    *l += _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

#define ATT32_ENTRY clef_cpu_attention_f32_avx2
#include "compute/cpu/cpu_attention_f32_pass.h"
