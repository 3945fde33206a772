/* The knob registry (knobs.h). The only place in src/ (besides the drivers' own entries in the
 * table below) that reads the environment. */
#include "base/knobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const clef_knob_info clef_knob_table[] = {
    {"CLEF_DEVICE", "unset (auto: CUDA when built with it and a GPU is present, else CPU)",
     "the backend when the caller asks for device auto (clef batch / serve): cpu or cuda", "user", "clef_knobs"},
    {"CLEF_PRECISION", "fp32", "the precision when the caller asks for device auto: fp32, fast, bf16 or int8 (int8: CPU only)",
     "user", "clef_knobs"},
    {"CLEF_MODEL", "unset", "the --model (-m) of a verb that loads the model, when the command line gives none", "user",
     "src/base/knobs.c"},
    {"CLEF_THREADS", "0 (every online core)", "the --threads (-t) of a verb, when the command line gives none", "user",
     "src/base/knobs.c"},
    {"CLEF_HOST", "unset (--host's default)", "clef serve's --host, when the command line gives none", "user", "src/base/knobs.c"},
    {"CLEF_PORT", "unset (--port's default)", "clef serve's --port (-p), when the command line gives none", "user", "src/base/knobs.c"},
    {"CLEF_API_KEY", "unset", "clef serve's --api-key, when the command line gives neither it nor --api-key-file",
     "user", "src/base/knobs.c"},
    {"CLEF_CPU_CACHE_MB", "1024", "MiB the CPU backend holds for activation buffers, kept for the next forward (0: none)",
     "user", "clef_knobs"},
    {"CLEF_CUDA_POOL_MB", "1024", "MiB of the CUDA arena's first block (grown on demand)", "user", "clef_knobs"},
    {"CLEF_LINEAR", "unset", "=double: every Linear and the attention accumulate in double (the parity path)",
     "diagnostic", "clef_knobs"},
    {"CLEF_UNGATED", "unset", "=int8: clef_open runs the int8 precision although it did not pass its fidelity gate (for measuring it)",
     "diagnostic", "clef_knobs"},
    {"CLEF_GEMM", "unset (the fastest exact kernel: amx; else avx512 or avx2, whichever a short timing finds faster; ref)",
     "=ref|avx2|avx512|amx: the CPU GEMM kernel, when this CPU runs it", "diagnostic", "clef_knobs"},
    {"CLEF_AMX_PACKED", "1", "=0: the AMX kernel packs weights per call instead of once at load",
     "diagnostic", "clef_knobs"},
    {"CLEF_ARENA_POISON", "0",
     "=1: every CPU activation buffer (ops->alloc, fresh or reused) is handed out filled with NaN (tests: no op reads what it did not write)",
     "diagnostic", "clef_knobs"},
    {"CLEF_CPU_MASK", "unset", "comma-separated CPU features to pretend absent (dispatch tests), process-wide",
     "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_LINEAR", "split", "=bf16: the fast CUDA GEMMs take one bf16 term per activation, not two",
     "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_ATTN", "v4", "=simt|v2|v3|v4: the CUDA attention kernel", "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_DELTA", "v4", "=v1|v2|v3|v4|v5: the CUDA delta-rule kernels", "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_GRAPH", "0", "=1: CUDA forwards run through CUDA graphs keyed by shape (run 2026-12-04a: -1.7 ms at 436 tokens)",
     "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_GRAPH_MAX", "8", "CUDA graphs kept per backend (later shapes run eagerly)", "diagnostic", "clef_knobs"},
    {"CLEF_CUDA_GEMM_TOPN", "0",
     "2..16: the fastest of cuBLASLt's top N algorithms per GEMM shape with the first's bits (unverified on a GPU)",
     "diagnostic", "clef_knobs"},
    {"CLEF_SERVE_TEST_LOAD_DELAY_MS", "0", "clef serve waits this long before loading the model (tests of /health)",
     "diagnostic", "src/cli/cmd_serve.c"},
    {"CLEF_SERVE_TEST_SUBMIT_DELAY_MS", "0",
     "clef serve's prepare threads wait this long after queueing a request (tests of the hand-off to the batch)",
     "diagnostic", "src/cli/cmd_serve.c"},
    {"HF_ENDPOINT", "https://huggingface.co", "clef pull: the hub to download from (docs/pull.md)", "user",
     "src/cli/cmd_pull.c"},
    {"HF_TOKEN", "unset", "clef pull: sent as Authorization: Bearer to HF_ENDPOINT's host only", "user",
     "src/cli/cmd_pull.c"},
};
const size_t clef_knob_count = sizeof clef_knob_table / sizeof clef_knob_table[0];

const char *clef_knob_getenv(const char *name) {
    for (size_t i = 0; name && i < clef_knob_count; i++)
        if (!strcmp(clef_knob_table[i].name, name)) return getenv(name);
    return NULL;
}

void clef_knobs_default(clef_knobs *k) {
    memset(k, 0, sizeof *k);
    k->cpu_cache_mb = -1;
    k->cuda_pool_mb = 1024;
    k->amx_packed = 1;
    k->cuda_linear_split = 1;
    k->cuda_attn = 3; /* CLEF_CUDA_ATTN_V4 */
    k->cuda_delta = 3; /* CLEF_CUDA_DELTA_V4 */
    k->cuda_graph_max = 8;
}

static int is(const char *v, const char *s) { return v && !strcmp(v, s); }

void clef_knobs_parse(clef_knobs *k, const char *(*lookup)(const char *name, void *ctx), void *ctx) {
    clef_knobs_default(k);
    const char *v = lookup("CLEF_DEVICE", ctx);
    if (v && *v) {
        k->device = is(v, "cpu") ? CLEF_KNOB_DEVICE_CPU : is(v, "cuda") ? CLEF_KNOB_DEVICE_CUDA : CLEF_KNOB_BAD;
        snprintf(k->device_raw, sizeof k->device_raw, "%s", v);
    }
    v = lookup("CLEF_PRECISION", ctx);
    if (v && *v) {
        k->precision = is(v, "fp32")   ? CLEF_KNOB_PRECISION_FP32
                       : is(v, "fast") ? CLEF_KNOB_PRECISION_FAST
                       : is(v, "bf16") ? CLEF_KNOB_PRECISION_BF16
                       : is(v, "int8") ? CLEF_KNOB_PRECISION_INT8
                                       : CLEF_KNOB_BAD;
        snprintf(k->precision_raw, sizeof k->precision_raw, "%s", v);
    }
    v = lookup("CLEF_CPU_CACHE_MB", ctx);
    if (v && *v) { /* a whole number of MiB that fits a size_t in bytes; anything else: the default */
        char *end;
        unsigned long long mb = strtoull(v, &end, 10);
        if (!*end && mb <= ((size_t)-1 >> 21)) k->cpu_cache_mb = (long long)mb;
    }
    v = lookup("CLEF_CUDA_POOL_MB", ctx);
    if (v && atol(v) > 0) k->cuda_pool_mb = atol(v);
    k->linear_double = is(lookup("CLEF_LINEAR", ctx), "double");
    k->ungated_int8 = is(lookup("CLEF_UNGATED", ctx), "int8");
    v = lookup("CLEF_GEMM", ctx);
    if (v && strlen(v) < sizeof k->gemm) snprintf(k->gemm, sizeof k->gemm, "%s", v);
    k->amx_packed = !is(lookup("CLEF_AMX_PACKED", ctx), "0");
    k->arena_poison = is(lookup("CLEF_ARENA_POISON", ctx), "1");
    v = lookup("CLEF_CPU_MASK", ctx);
    if (v) snprintf(k->cpu_mask, sizeof k->cpu_mask, "%s", v);
    k->cuda_linear_split = !is(lookup("CLEF_CUDA_LINEAR", ctx), "bf16");
    v = lookup("CLEF_CUDA_ATTN", ctx);
    k->cuda_attn = is(v, "simt") ? 0 : is(v, "v2") ? 1 : is(v, "v3") ? 2 : 3;
    v = lookup("CLEF_CUDA_DELTA", ctx);
    k->cuda_delta = is(v, "v1") ? 0 : is(v, "v2") ? 1 : is(v, "v3") ? 2 : is(v, "v5") ? 4 : 3;
    k->cuda_graph = is(lookup("CLEF_CUDA_GRAPH", ctx), "1");
    v = lookup("CLEF_CUDA_GRAPH_MAX", ctx);
    if (v && *v) { /* a whole number; anything else: the default */
        char *end;
        long n = strtol(v, &end, 10);
        if (!*end && n >= 0 && n <= 1024) k->cuda_graph_max = n;
    }
    v = lookup("CLEF_CUDA_GEMM_TOPN", ctx);
    if (v && *v) { /* a whole number in 0..16; anything else: the default (0) */
        char *end;
        long n = strtol(v, &end, 10);
        if (!*end && n >= 0 && n <= 16) k->cuda_gemm_topn = (int)n;
    }
}

static const char *env_lookup(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

static clef_knobs g_knobs;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void read_env(void) { clef_knobs_parse(&g_knobs, env_lookup, NULL); }

const clef_knobs *clef_knobs_env(void) {
    pthread_once(&g_once, read_env);
    return &g_knobs;
}
