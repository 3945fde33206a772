/* Run-time CPU feature detection (x86-64 cpuid + xgetbv; everything reads 0 elsewhere). A feature
 * counts only when the CPU has it AND the OS saves the register state it needs (XCR0: ymm for
 * AVX/AVX2/FMA, opmask + zmm for AVX-512), so a kernel chosen from these flags can run.
 *
 * Detected once (thread-safe, lazily) and cached. The knob CLEF_CPU_MASK (base/knobs.h, read with
 * the process's other knobs) clears features for testing dispatch: a comma-separated list of
 * names from clef_cpu_feature_names (e.g. CLEF_CPU_MASK=avx512f,avx512bf16 makes the machine
 * look like an AVX2 one). */
#ifndef CLEF_BASE_CPU_FEATURES_H
#define CLEF_BASE_CPU_FEATURES_H

#include <stddef.h>

enum {
    CLEF_CPU_AVX2 = 1u << 0,
    CLEF_CPU_FMA = 1u << 1,
    CLEF_CPU_F16C = 1u << 2,
    CLEF_CPU_AVX512F = 1u << 3,
    CLEF_CPU_AVX512BW = 1u << 4,
    CLEF_CPU_AVX512VL = 1u << 5,
    CLEF_CPU_AVX512DQ = 1u << 6,
    CLEF_CPU_AVX512BF16 = 1u << 7,
    CLEF_CPU_AVX512FP16 = 1u << 8,
    CLEF_CPU_AVX512VNNI = 1u << 9,
    CLEF_CPU_AVXVNNI = 1u << 10,
    CLEF_CPU_AMX_TILE = 1u << 11, /* cpuid + XCR0 tile state; a process still has to ask
                                   * arch_prctl(ARCH_REQ_XCOMP_PERM) before using AMX */
    CLEF_CPU_AMX_BF16 = 1u << 12,
    CLEF_CPU_AMX_INT8 = 1u << 13,
};

/* The CLEF_CPU_* bits of this machine (after CLEF_CPU_MASK). */
unsigned clef_cpu_features(void);

/* 1 when every bit of `need` is present. */
static inline int clef_cpu_has(unsigned need) { return (clef_cpu_features() & need) == need; }

/* Writes the present features as "avx2 fma ..." (space-separated, NUL-terminated, truncated to
 * cap); returns buf. */
char *clef_cpu_feature_string(char *buf, size_t cap);

/* The name of one CLEF_CPU_* bit ("avx2", "avx512bf16", ...), or NULL. */
const char *clef_cpu_feature_name(unsigned bit);

#endif
