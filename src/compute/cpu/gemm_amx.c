/* AMX-BF16 GEMM with the fp32 activations split exactly into three bf16 terms ("amx" kernel).
 *
 * Why: on this project's machine kind (Sapphire-Rapids-class Xeon) tdpbf16ps does 16 x 16 x 32
 * bf16 multiply-adds per instruction, about 16x the fp32 FMA rate (bench/bench_peak.c). The
 * weights are bf16 already; the activations are not. Rounding x to bf16 would cost ~2^-9
 * relative per product (the vdpbf16ps error class), so instead every fp32 x is written as
 *
 *     x = h + m + l,   h = x with its low 16 bits cleared, m = (x - h) likewise, l = x - h - m
 *
 * Each step is exact (x - h has at most 16 significant bits, x - h - m at most 8, and bf16 has
 * fp32's exponent range), so h, m, l are bf16 values whose sum is x exactly, and every product
 * h w, m w, l w of two bf16 values is exact in fp32. The tile unit adds them into fp32
 * accumulators: the inputs are the exact fp32 activations and bf16 weights, the accumulation is
 * fp32 — the same class as the exact FMA kernels (gemm.h), in a different order, over 3K terms
 * instead of K. The bits therefore differ from the exact kernels, but they are fixed: every
 * output element is the sum, in this order, over 32-wide k blocks kb = 0, 1, ...: the 32 h terms
 * of kb, then its 32 m terms, then its 32 l terms (partial sums stored between K blocks are fp32
 * and reloaded exactly), then + bias. Nothing depends on T, the row's position, the thread count
 * or the blocking, so 1 vs N threads and a row alone vs in a batch give the same bits (test_gemm).
 * Exceptions: non-finite x gives h = x (NaN made quiet) and m = l = 0, so Inf and NaN propagate
 * as in the FMA kernels; the tile unit treats bf16 denormals as zero, which only touches
 * |x| < ~2^-110 or products below 2^-126.
 *
 * Layout. A = the x terms (rows t, 16 x 32 bf16 per tile), B = the weights in the VNNI pair
 * layout (tile row r = the (k = 2r, 2r + 1) pairs of 16 columns: a 16 x 16 dword transpose of W's
 * rows), C = y (16 x 16 fp32). The micro-kernel holds a 32 x 32 block of y in 4 C tiles; per k
 * block it loads the two weight tiles once and uses them with the two row tiles of each of the
 * three terms (12 tdpbf16ps per 8 tile loads). The x terms of a chunk of up to CLEF_AMX_TC rows
 * are packed once per call, for all K, by all workers (clef_gemm_amx_pack); then each worker
 * takes blocks of CLEF_AMX_NCB 32-column panels (clef_gemm_amx_panels: the loop order is at the
 * function), keeping partial sums in a per-worker [NCB][rows][32] fp32 buffer; after the last K
 * block it adds the bias and writes y. Weights packed once (clef_gemm_amx_pack_w, gemm.c
 * clef_gemm_pack: the model's Linear weights at load) skip the per-block packing. */
#include <immintrin.h>
#include <string.h>

#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_amx_step.h"
#include "compute/cpu/gemm_x86.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")))

enum { KB_PER_KC = CLEF_AMX_KC / 32, TILE = 16 * 32 /* bf16 per tile */ };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

TGT void clef_gemm_amx_tile_config(void) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* gcc 12 drops the stores otherwise */
    _tile_loadconfig(&cfg);
}

/* Offset (in tiles) of x-term tile (kb, tp, s, j) in the packed chunk: K blocks of KB_PER_KC
 * outermost, then 32-row blocks, then kb inside the K block, then the 6 tiles (3 terms x 2 row
 * tiles) of one (kb, 32 rows). A worker's inner loop reads one run of KB_PER_KC * 6 KB. */
static inline size_t xtile(size_t nkb, size_t ntp, size_t kb, size_t tp, size_t s, size_t j) {
    size_t kcb = kb / KB_PER_KC, kbl = kb % KB_PER_KC;
    size_t nkbl = nkb - kcb * KB_PER_KC < KB_PER_KC ? nkb - kcb * KB_PER_KC : KB_PER_KC;
    return ((kcb * KB_PER_KC * ntp + tp * nkbl + kbl) * 3 + s) * 2 + j;
}

size_t clef_gemm_amx_xp_elems(size_t rows, size_t K) {
    size_t ntp = (rows + 31) / 32, nkb = (K + 31) / 32;
    return ntp * nkb * 6 * TILE;
}

/* Packs rows [r0, r1) (< the chunk's rows rounded up to 32) of the chunk whose row 0 is x; rows
 * past `rows` are written as zeros. */
TGT void clef_gemm_amx_pack(uint16_t *xp, const float *x, size_t ldx, size_t rows, size_t K,
                            size_t r0, size_t r1) {
    size_t ntp = (rows + 31) / 32, nkb = (K + 31) / 32;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i expo = _mm512_set1_epi32(0x7f800000);
    const __m512i qnan = _mm512_set1_epi32(0x7fc00000);
    /* the high halves of 32 dwords, in order: word 2i + 1 of the concatenation a:b */
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37,
                                         35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7,
                                         5, 3, 1);
    for (size_t r = r0; r < r1; r++) {
        size_t tp = r / 32, j = (r % 32) / 16, row = r % 16;
        const float *xr = r < rows ? x + r * ldx : x; /* padding rows load nothing (mask 0) */
        for (size_t kb = 0; kb < nkb; kb++) {
            __m512i h[2], m[2], l[2];
            for (int half = 0; half < 2; half++) {
                size_t k0 = kb * 32 + (size_t)half * 16;
                __mmask16 km = 0;
                if (r < rows && k0 < K) km = K - k0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k0)) - 1u);
                __m512 v = _mm512_maskz_loadu_ps(km, xr + (km ? k0 : 0));
                __m512i vi = _mm512_castps_si512(v);
                __m512i hb = _mm512_and_si512(vi, hi);
                __m512 r1v = _mm512_sub_ps(v, _mm512_castsi512_ps(hb));
                __m512i mb = _mm512_and_si512(_mm512_castps_si512(r1v), hi);
                __m512 lv = _mm512_sub_ps(r1v, _mm512_castsi512_ps(mb));
                __m512i lb = _mm512_castps_si512(lv);
                /* Inf and NaN: h carries it (NaN quiet, whatever its payload), m = l = 0 */
                __mmask16 nf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(vi, expo), expo);
                __mmask16 isnan = _mm512_mask_cmpneq_epi32_mask(nf, _mm512_andnot_si512(expo,
                                  _mm512_and_si512(vi, _mm512_set1_epi32(0x7fffffff))), _mm512_setzero_si512());
                hb = _mm512_mask_or_epi32(hb, isnan, hb, qnan);
                mb = _mm512_mask_mov_epi32(mb, nf, _mm512_setzero_si512());
                lb = _mm512_mask_mov_epi32(lb, nf, _mm512_setzero_si512());
                h[half] = hb; m[half] = mb; l[half] = lb;
            }
            uint16_t *d0 = xp + xtile(nkb, ntp, kb, tp, 0, j) * TILE + row * 32;
            _mm512_storeu_si512(d0, _mm512_permutex2var_epi16(h[0], odd, h[1]));
            _mm512_storeu_si512(d0 + 2 * TILE, _mm512_permutex2var_epi16(m[0], odd, m[1]));
            _mm512_storeu_si512(d0 + 4 * TILE, _mm512_permutex2var_epi16(l[0], odd, l[1]));
        }
    }
}

/* The weights of panels [p0, p0 + np) (columns 32 p0 .., zero rows at n >= N) for all of K:
 * wb[panel][kb][i][16 pair rows][16 columns x 2], i = the column tile. Each 16-row group is
 * read along the whole of K before the next: 16 sequential streams, which the hardware
 * prefetcher follows (12-14 GB/s here). Read K block by K block instead, as the products use
 * them, the rows are 512-byte pieces 8 KB apart and the packing ran at ~3 GB/s, a fifth of the
 * GEMM's time at T = 512 (bench: /tmp experiments noted in docs/performance.md). */
static TGT void pack_w(uint16_t *wb, const uint16_t *W, size_t ldw, size_t N, size_t K, size_t p0,
                       size_t np) {
    const size_t nkb = (K + 31) / 32;
    for (size_t pi = 0; pi < np; pi++)
        for (size_t i = 0; i < 2; i++) {
            size_t c0 = (p0 + pi) * 32 + i * 16;
            int rows = c0 >= N ? 0 : N - c0 >= 16 ? 16 : (int)(N - c0);
            for (size_t kb = 0; kb < nkb; kb++) {
                uint16_t *d = wb + ((pi * nkb + kb) * 2 + i) * TILE;
                __m512i r[16];
                if (rows == 0) {
                    for (int q = 0; q < 16; q++) _mm512_storeu_si512(d + q * 32, _mm512_setzero_si512());
                    continue;
                }
                size_t k0 = kb * 32;
                load_pairs16(r, W + c0 * ldw, ldw, rows, k0, K - k0 < 32 ? K - k0 : 32);
                for (int q = 0; q < 16; q++) _mm512_storeu_si512(d + q * 32, r[q]);
            }
        }
}

size_t clef_gemm_amx_scratch_bytes(size_t K, int packed_weights) {
    return (packed_weights ? 0 : (size_t)CLEF_AMX_NCB * clef_gemm_amx_panel_elems(K) * sizeof(uint16_t)) +
           (size_t)CLEF_AMX_NCB * CLEF_AMX_TC * 32 * sizeof(float);
}

size_t clef_gemm_amx_panel_elems(size_t K) { return (K + 31) / 32 * 2 * TILE; }

/* The whole matrix in pack_w's layout, panel after panel: a panel block of the kernel below is
 * then one contiguous run of it, exactly what pack_w would have written into the scratch. */
TGT void clef_gemm_amx_pack_w(uint16_t *wp, const uint16_t *W, size_t ldw, size_t N, size_t K, size_t p0,
                          size_t np) {
    pack_w(wp + p0 * clef_gemm_amx_panel_elems(K), W, ldw, N, K, p0, np);
}

/* Columns [32 p0, 32 p1) of the chunk, for all its rows. scratch: clef_gemm_amx_scratch_bytes(K,
 * c->wp != NULL).
 * Loop order: blocks of CLEF_AMX_NCB panels, their weights packed for all of K first (or, with
 * c->wp, read in place: the same bytes, so only where the tiles come from changes, not a bit of
 * what is computed); in each, K blocks of CLEF_AMX_KC; in each, the 32-row blocks of the chunk;
 * in each, the block's panels.
 * A row block's x terms for one K block (32 x KC x 6 bytes) are read from L2 once and used by
 * all the panels; the packed weights of the K block (NCB x 16 KB) and the partial sums
 * (NCB x rows x 32 floats) stay in L2. */
TGT void clef_gemm_amx_panels(const clef_gemm_amx_chunk *c, size_t p0, size_t p1, void *scratch) {
    clef_gemm_amx_tile_config();

    const size_t ntp = (c->rows + 31) / 32, nkb = (c->K + 31) / 32;
    uint16_t *wb = c->wp ? NULL : scratch; /* [NCB][nkb][2 tiles] */
    float *csall = c->wp ? scratch : (void *)(wb + (size_t)CLEF_AMX_NCB * nkb * 2 * TILE); /* [NCB][ntp * 32][32] */
    for (size_t nb0 = p0; nb0 < p1; nb0 += CLEF_AMX_NCB) {
        const size_t nbp = p1 - nb0 < CLEF_AMX_NCB ? p1 - nb0 : CLEF_AMX_NCB;
        const uint16_t *wblk = c->wp ? c->wp + nb0 * nkb * 2 * TILE : wb;
        if (!c->wp) pack_w(wb, c->W, c->ldw, c->N, c->K, nb0, nbp);
        for (size_t kb0 = 0; kb0 < nkb; kb0 += KB_PER_KC) {
            const size_t nkbl = nkb - kb0 < KB_PER_KC ? nkb - kb0 : KB_PER_KC;
            for (size_t tp = 0; tp < ntp; tp++) {
                for (size_t pi = 0; pi < nbp; pi++) {
                    const uint16_t *wp = wblk + (pi * nkb + kb0) * 2 * TILE;
                    float *ct = csall + (pi * ntp + tp) * 32 * 32;
                    if (kb0 == 0) {
                        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
                    } else {
                        _tile_loadd(0, ct, 128);
                        _tile_loadd(1, ct + 16, 128);
                        _tile_loadd(2, ct + 16 * 32, 128);
                        _tile_loadd(3, ct + 16 * 32 + 16, 128);
                    }
                    const uint16_t *xt = c->xp + xtile(nkb, ntp, kb0, tp, 0, 0) * TILE;
                    for (size_t b = 0; b < nkbl; b++, xt += 6 * TILE) clef_amx_step(wp + b * 2 * TILE, xt);
                    _tile_stored(0, ct, 128);
                    _tile_stored(1, ct + 16, 128);
                    _tile_stored(2, ct + 16 * 32, 128);
                    _tile_stored(3, ct + 16 * 32 + 16, 128);
                }
            }
        }
        /* + bias (one rounding, as in every kernel), into y */
        for (size_t pi = 0; pi < nbp; pi++) {
            const size_t n0 = (nb0 + pi) * 32;
            const float *cs = csall + pi * ntp * 32 * 32;
            size_t nn = c->N - n0 < 32 ? c->N - n0 : 32;
            __mmask16 m0 = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1u);
            __mmask16 m1 = nn >= 32 ? (__mmask16)0xffff : nn > 16 ? (__mmask16)((1u << (nn - 16)) - 1u) : 0;
            __m512 b0 = c->bias ? _mm512_maskz_loadu_ps(m0, c->bias + n0) : _mm512_setzero_ps();
            __m512 b1 = c->bias && m1 ? _mm512_maskz_loadu_ps(m1, c->bias + n0 + 16) : _mm512_setzero_ps();
            for (size_t t = 0; t < c->rows; t++) {
                float *yr = c->y + t * c->ldy + n0;
                __m512 v0 = _mm512_loadu_ps(cs + t * 32), v1 = _mm512_loadu_ps(cs + t * 32 + 16);
                if (c->bias) { v0 = _mm512_add_ps(v0, b0); v1 = _mm512_add_ps(v1, b1); }
                _mm512_mask_storeu_ps(yr, m0, v0);
                if (m1) _mm512_mask_storeu_ps(yr + 16, m1, v1);
            }
        }
    }
    _tile_release();
}
