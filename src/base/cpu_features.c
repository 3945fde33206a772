#include "base/cpu_features.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CLEF_X86 1
#endif

static const struct { unsigned bit; const char *name; } names[] = {
    {CLEF_CPU_AVX2, "avx2"},           {CLEF_CPU_FMA, "fma"},
    {CLEF_CPU_F16C, "f16c"},           {CLEF_CPU_AVX512F, "avx512f"},
    {CLEF_CPU_AVX512BW, "avx512bw"},   {CLEF_CPU_AVX512VL, "avx512vl"},
    {CLEF_CPU_AVX512DQ, "avx512dq"},   {CLEF_CPU_AVX512BF16, "avx512bf16"},
    {CLEF_CPU_AVX512FP16, "avx512fp16"}, {CLEF_CPU_AVX512VNNI, "avx512vnni"},
    {CLEF_CPU_AVXVNNI, "avxvnni"},     {CLEF_CPU_AMX_TILE, "amx_tile"},
    {CLEF_CPU_AMX_BF16, "amx_bf16"},   {CLEF_CPU_AMX_INT8, "amx_int8"},
};

const char *clef_cpu_feature_name(unsigned bit) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].bit == bit) return names[i].name;
    return NULL;
}

#ifdef CLEF_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static unsigned detect(void) {
    unsigned f = 0;
#ifdef CLEF_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = xgetbv0();
    int ymm_ok = (xcr0 & 0x6) == 0x6;           /* SSE + AVX state */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!ymm_ok) return 0;
    if (fma) f |= CLEF_CPU_FMA;
    if (f16c) f |= CLEF_CPU_F16C;
    unsigned maxleaf = __get_cpuid_max(0, NULL);
    if (maxleaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned b7 = b, c7 = c, d7 = d;
    if ((b7 >> 5) & 1) f |= CLEF_CPU_AVX2;
    if (zmm_ok) {
        if ((b7 >> 16) & 1) f |= CLEF_CPU_AVX512F;
        if ((b7 >> 17) & 1) f |= CLEF_CPU_AVX512DQ;
        if ((b7 >> 30) & 1) f |= CLEF_CPU_AVX512BW;
        if ((b7 >> 31) & 1) f |= CLEF_CPU_AVX512VL;
        if ((c7 >> 11) & 1) f |= CLEF_CPU_AVX512VNNI;
        if ((d7 >> 23) & 1) f |= CLEF_CPU_AVX512FP16;
    }
    if (((xcr0 >> 17) & 3) == 3) { /* XTILECFG + XTILEDATA enabled by the OS */
        if ((d7 >> 24) & 1) f |= CLEF_CPU_AMX_TILE;
        if ((d7 >> 22) & 1) f |= CLEF_CPU_AMX_BF16;
        if ((d7 >> 25) & 1) f |= CLEF_CPU_AMX_INT8;
    }
    __cpuid_count(7, 1, a, b, c, d);
    if ((a >> 4) & 1) f |= CLEF_CPU_AVXVNNI;
    if (zmm_ok && ((a >> 5) & 1)) f |= CLEF_CPU_AVX512BF16;
#endif
    return f;
}

/* Extensions go with their base: no AVX512F means no AVX-512 at all; no AVX2 / AVX512BW, no
 * bf16 dot product (it is an AVX512BW-era extension). */
static unsigned closure(unsigned f) {
    if (!(f & CLEF_CPU_AVX512F))
        f &= ~(unsigned)(CLEF_CPU_AVX512BW | CLEF_CPU_AVX512VL | CLEF_CPU_AVX512DQ |
                         CLEF_CPU_AVX512BF16 | CLEF_CPU_AVX512FP16 | CLEF_CPU_AVX512VNNI);
    return f;
}

static unsigned g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_features(void) {
    unsigned f = detect();
    const char *m = clef_knobs_env()->cpu_mask; /* CLEF_CPU_MASK (base/knobs.h) */
    if (*m) {
        char tok[32];
        while (*m) {
            size_t n = strcspn(m, ", ");
            if (n > 0 && n < sizeof tok) {
                memcpy(tok, m, n);
                tok[n] = 0;
                for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                    if (strcmp(tok, names[i].name) == 0) f &= ~names[i].bit;
            }
            m += n;
            if (*m) m++;
        }
    }
    g_features = closure(f);
}

unsigned clef_cpu_features(void) {
    pthread_once(&g_once, init_features);
    return g_features;
}

char *clef_cpu_feature_string(char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    buf[0] = 0;
    size_t len = 0;
    unsigned f = clef_cpu_features();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(f & names[i].bit)) continue;
        size_t n = strlen(names[i].name) + (len ? 1 : 0);
        if (len + n + 1 > cap) break;
        if (len) buf[len++] = ' ';
        memcpy(buf + len, names[i].name, strlen(names[i].name) + 1);
        len += strlen(names[i].name);
    }
    return buf;
}
