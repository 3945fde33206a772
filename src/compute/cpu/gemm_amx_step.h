/* One 32-k step of the AMX kernel's micro-kernel (gemm_amx.c), in a header so that
 * bench/bench_amx_ceiling.c times exactly this code rather than a copy.
 * Tiles 0-3 hold a 32 x 32 block of partial sums (C), tiles 4/5 the step's two weight tiles
 * (w: 2 tiles, column tiles 0 and 1), tiles 6/7 the x terms in turn (xt: 6 tiles, term-major:
 * h row tiles 0, 1, then m, then l): 8 loads and 12 products, each C tile taking the step's h,
 * m, l products in that order (the order gemm_amx.c's header promises). Loads sit just before
 * their first use: tile registers are not renamed, so a load into tile 6 or 7 waits for the
 * products still reading it. The caller has loaded the tile configuration. */
#ifndef CLEF_COMPUTE_CPU_GEMM_AMX_STEP_H
#define CLEF_COMPUTE_CPU_GEMM_AMX_STEP_H

#include <immintrin.h>
#include <stdint.h>

enum { CLEF_AMX_TILE_ELEMS = 16 * 32 /* bf16 per tile */ };

__attribute__((target("amx-tile,amx-bf16"), always_inline)) static inline void
clef_amx_step(const uint16_t *w, const uint16_t *xt) {
    enum { T = CLEF_AMX_TILE_ELEMS };
    _tile_loadd(4, w, 64);
    _tile_loadd(6, xt, 64);
    _tile_dpbf16ps(0, 6, 4);
    _tile_loadd(5, w + T, 64);
    _tile_dpbf16ps(1, 6, 5);
    _tile_loadd(7, xt + T, 64);
    _tile_dpbf16ps(2, 7, 4); _tile_dpbf16ps(3, 7, 5);
    _tile_loadd(6, xt + 2 * T, 64);
    _tile_dpbf16ps(0, 6, 4); _tile_dpbf16ps(1, 6, 5);
    _tile_loadd(7, xt + 3 * T, 64);
    _tile_dpbf16ps(2, 7, 4); _tile_dpbf16ps(3, 7, 5);
    _tile_loadd(6, xt + 4 * T, 64);
    _tile_dpbf16ps(0, 6, 4); _tile_dpbf16ps(1, 6, 5);
    _tile_loadd(7, xt + 5 * T, 64);
    _tile_dpbf16ps(2, 7, 4); _tile_dpbf16ps(3, 7, 5);
}

#endif
