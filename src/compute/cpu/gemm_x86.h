/* AVX-512 helpers shared by the GEMM kernels that read the checkpoint's bf16 weights as (k, k+1)
 * pairs: gemm_avx512.c (widened to fp32 panels) and gemm_amx.c (VNNI tiles for AMX). Included by
 * those files only; every function carries its own target attribute. */
#ifndef CLEF_COMPUTE_CPU_GEMM_X86_H
#define CLEF_COMPUTE_CPU_GEMM_X86_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define GEMM_X86_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define GEMM_X86_INL static inline __attribute__((always_inline))

/* 16 x 16 transpose of dwords: c[j] lane i = r[i] lane j. */
GEMM_X86_INL GEMM_X86_TGT void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int m = 0; m < 4; m++) {
        __m512i s0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44);
        __m512i s1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
        __m512i s2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
        __m512i s3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
        r[m] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        r[4 + m] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
        r[8 + m] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        r[12 + m] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
    }
}

/* Loads rows [0, rows) (zeros beyond) of W at columns [k0, k0 + nk), nk <= 32, as 16 dwords each
 * and transposes: r[j] lane i = the bf16 pair (W[i, k0 + 2j], W[i, k0 + 2j + 1]). */
GEMM_X86_INL GEMM_X86_TGT void load_pairs16(__m512i r[16], const uint16_t *w, size_t ldw, int rows, size_t k0,
                          size_t nk) {
    __mmask32 km = nk >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << nk) - 1u);
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_maskz_loadu_epi16(km, w + (size_t)i * ldw + k0)
                        : _mm512_setzero_si512();
    transpose16(r);
}

#endif
