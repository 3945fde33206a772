/* Softmax attention with fp32 products: the default path's attention on CPUs with AVX-512
 * (cpu_ops.c chooses it; CPUs with AVX2 + FMA but no AVX-512 run cpu_attention_f32_avx2.c, the
 * same operations per element in the same order, so the same bits; the parity path,
 * CLEF_LINEAR=double, keeps cpu_attention.c's double accumulation).
 *
 * Why: the vision tower attends over every patch of an image in each of its 27 blocks, O(patches²)
 * (8,160 patches for a 1920 x 1080 image), and there the double products were two thirds of the
 * time; fp32 FMA has twice the lanes. The arithmetic is then the reference's class (torch's SDPA
 * runs in fp32): S = Q·Kᵀ and O += P·V summed in fp32 in a fixed order (k, then keys, ascending),
 * the softmax's running max and sum in double, p = expf(s - m) with glibc's expf
 * (clef_simd_expf). Measured against the double path: max|d| / max 2.3e-6 at 1,200 patches, 3.5e-6
 * at 8,160 (bench_mixers --vision; docs/performance.md "Attention at the vision tower's shape"); the
 * tower, final-norm and probability bounds of test_tiny_vision and test_real4 hold with it.
 *
 * Structure as cpu_attention.c: work item = (kv head j, block of query rows, all query heads of
 * the group), keys in tiles of 64, online softmax, per kv head K (transposed) and V copied once
 * into tile-major panels. Each output element is computed inside one work item in a fixed order,
 * so the bits depend neither on the thread count nor on the blocking. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"

#define TGT __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"), optimize("fp-contract=fast")))
#define KB 64        /* keys per tile */
#define ROWS 256     /* target query rows per work item (all heads of the group) */
#define MR 6         /* the kernel's register tile: 6 rows x 64 (or 16) columns */

static inline size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

typedef float vf __attribute__((vector_size(64)));
typedef float vfu __attribute__((vector_size(64), aligned(4), may_alias));
#define LD(p) (*(const vfu *)(p))
#define ST(p, x) (*(vfu *)(p) = (x))

/* C[r, c] (+)= sum_{p < P} A[r, p] B[p, c] for r < m, c < ncols (a multiple of 16), one FMA per p in
 * p order per element; B row-major (ldb). Rows up to the next multiple of MR past m are read from
 * A (never stored), so A needs that slack. Written out per accumulator as cpu_gdn.c's kernel. */
#define R4_DECL(r) vf c##r##0, c##r##1, c##r##2, c##r##3;
#define R4_INIT(r) if (accum && r0 + r < m) { const float *cr = C + (r0 + r) * ldc + c0; \
    c##r##0 = LD(cr); c##r##1 = LD(cr + 16); c##r##2 = LD(cr + 32); c##r##3 = LD(cr + 48); } \
    else { c##r##0 = c##r##1 = c##r##2 = c##r##3 = z; }
#define R4_FMA(r) { float a = ab[r * lda + p]; c##r##0 += b0 * a; c##r##1 += b1 * a; \
    c##r##2 += b2 * a; c##r##3 += b3 * a; }
#define R4_STORE(r) if (r0 + r < m) { float *cr = C + (r0 + r) * ldc + c0; \
    ST(cr, c##r##0); ST(cr + 16, c##r##1); ST(cr + 32, c##r##2); ST(cr + 48, c##r##3); }
#define R1_DECL(r) vf c##r##0;
#define R1_INIT(r) if (accum && r0 + r < m) c##r##0 = LD(C + (r0 + r) * ldc + c0); else c##r##0 = z;
#define R1_FMA(r) { float a = ab[r * lda + p]; c##r##0 += b0 * a; }
#define R1_STORE(r) if (r0 + r < m) ST(C + (r0 + r) * ldc + c0, c##r##0);
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define NEST(NV, DECL, INIT, FMA, STORE, LOADB)                                                    \
    for (; c0 + NV * 16 <= ncols; c0 += NV * 16)                                                   \
        for (size_t r0 = 0; r0 < m; r0 += MR) {                                                    \
            const float *ab = A + r0 * lda;                                                        \
            ROWS6(DECL)                                                                            \
            ROWS6(INIT)                                                                            \
            const float *bp = B + c0;                                                              \
            for (size_t p = 0; p < P; p++, bp += ldb) {                                            \
                LOADB                                                                              \
                ROWS6(FMA)                                                                         \
            }                                                                                      \
            ROWS6(STORE)                                                                           \
        }

static TGT void gemm_f32(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb,
                         size_t m, size_t P, size_t ncols, int accum) {
    const vf z = {0};
    size_t c0 = 0;
    NEST(4, R4_DECL, R4_INIT, R4_FMA, R4_STORE,
         vf b0 = LD(bp); vf b1 = LD(bp + 16); vf b2 = LD(bp + 32); vf b3 = LD(bp + 48);)
    NEST(1, R1_DECL, R1_INIT, R1_FMA, R1_STORE, vf b0 = LD(bp);)
}

/* The online-softmax step of one row for one tile (KB scores in s, the first nv valid): scale,
 * running max m and sum l (double), the row's output rescaled when the max grows, s := p =
 * expf(s - m) (0 past nv). NaN scores give NaN (max_ps returns its second operand for a NaN). */
static TGT void row_step(float *s, size_t nv, float scale, double *m, double *l, float *orow, size_t hp) {
    __m512 x[KB / 16], vmax = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < KB / 16; i++) {
        long left = (long)nv - 16 * i;
        __mmask16 valid = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * i), _mm512_set1_ps(scale));
        x[i] = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), v);
        vmax = _mm512_max_ps(vmax, x[i]);
    }
    float mt = _mm512_reduce_max_ps(vmax);
    double mn = *m > mt ? *m : mt;
    if (nv == 0 || mn == -INFINITY) {
        memset(s, 0, KB * sizeof(float));
        return;
    }
    if (mn != *m) {
        double alpha = exp(*m - mn); /* 0 when m was -inf */
        __m512 av = _mm512_set1_ps((float)alpha);
        for (size_t d = 0; d < hp; d += 16) _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), av));
        *l *= alpha;
        *m = mn;
    }
    float e[KB] __attribute__((aligned(64)));
    __m512 mf = _mm512_set1_ps((float)mn);
    for (int i = 0; i < KB / 16; i++) _mm512_store_ps(e + 16 * i, _mm512_sub_ps(x[i], mf));
    clef_simd_expf(s, e, KB); /* expf(-inf) = 0 for the masked keys */
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < KB / 8; i++) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_loadu_ps(s + 8 * i)));
    *l += _mm512_reduce_add_pd(acc);
}

#define ATT32_ENTRY clef_cpu_attention_f32
#include "compute/cpu/cpu_attention_f32_pass.h"
