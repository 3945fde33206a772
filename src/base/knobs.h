/* Every environment knob the library reads, in one place (the table is docs/knobs.md; the test
 * tests/parity/test_knobs.py fails when src/ reads the environment anywhere else).
 *
 * The environment is read once per process, on the first call of clef_knobs_env (thread-safe:
 * pthread_once), into a clef_knobs struct that nothing changes afterwards. clef_open calls it and
 * hands the struct to the backend it creates (clef_cpu_ops_create / clef_cuda_ops_create), which
 * copies what it uses; kernels never read the environment. The one process-wide knob is
 * CLEF_CPU_MASK (read by base/cpu_features.c through this registry: CPU feature detection is
 * process-wide by nature).
 *
 * Parsing keeps the behaviour each knob always had: an unknown value of a diagnostic knob means
 * its default; an unknown CLEF_DEVICE / CLEF_PRECISION is reported by clef_open (knob_bad). */
#ifndef CLEF_BASE_KNOBS_H
#define CLEF_BASE_KNOBS_H

#include <stddef.h>

enum { CLEF_KNOB_UNSET = 0, CLEF_KNOB_BAD = -1 };
enum { CLEF_KNOB_DEVICE_CPU = 1, CLEF_KNOB_DEVICE_CUDA = 2 };      /* clef_knobs.device */
enum { CLEF_KNOB_PRECISION_FP32 = 1, CLEF_KNOB_PRECISION_FAST = 2, CLEF_KNOB_PRECISION_BF16 = 3, CLEF_KNOB_PRECISION_INT8 = 4 }; /* clef_knobs.precision */

typedef struct clef_knobs {
    /* ---- user-facing ---- */
    int device;             /* CLEF_DEVICE=cpu|cuda (device auto only): CLEF_KNOB_DEVICE_*, UNSET or BAD */
    int precision;          /* CLEF_PRECISION=fp32|fast|bf16|int8 (device auto only): CLEF_KNOB_PRECISION_*, UNSET, BAD */
    char device_raw[32];    /* the values as given (truncated), for the error message */
    char precision_raw[32];
    long long cpu_cache_mb; /* CLEF_CPU_CACHE_MB: MiB of freed CPU activation buffers kept; -1 = default */
    long long cuda_pool_mb; /* CLEF_CUDA_POOL_MB: the CUDA arena's first block in MiB; default 1024 */

    /* ---- diagnostic (measuring, parity, dispatch tests) ---- */
    int linear_double;      /* CLEF_LINEAR=double: every Linear (and the attention) in double */
    int ungated_int8;       /* CLEF_UNGATED=int8: open the int8 precision although it failed its gate */
    char gemm[16];          /* CLEF_GEMM=ref|avx2|avx512|amx: the CPU GEMM kernel ("" = auto) */
    int amx_packed;         /* CLEF_AMX_PACKED: 1 (default) = AMX weights packed at load, 0 = per call */
    int arena_poison;       /* CLEF_ARENA_POISON=1: every CPU activation block handed out is filled with NaN */
    char cpu_mask[256];     /* CLEF_CPU_MASK: CPU features to pretend absent ("" = none) */
    int cuda_linear_split;  /* CLEF_CUDA_LINEAR: 1 (default) = two-term bf16 split, 0 (=bf16) = one term */
    int cuda_attn;          /* CLEF_CUDA_ATTN=simt|v2|v3|v4: 0, 1, 2, 3 (default) = CLEF_CUDA_ATTN_* */
    int cuda_delta;         /* CLEF_CUDA_DELTA=v1|v2|v3|v4|v5: 0, 1, 2, 3 (default), 4 = CLEF_CUDA_DELTA_* */
    int cuda_graph;         /* CLEF_CUDA_GRAPH=1: forwards through CUDA graphs where the caller asks (default 0) */
    long cuda_graph_max;    /* CLEF_CUDA_GRAPH_MAX: graphs kept per backend (default 8) */
    int cuda_gemm_topn;     /* CLEF_CUDA_GEMM_TOPN: 0..16, cuBLASLt algorithms timed per GEMM shape (default 0: the first) */
} clef_knobs;

/* One row of the registry: every knob clef (library, CLI, server) reads from the environment. */
typedef struct clef_knob_info {
    const char *name;     /* "CLEF_LINEAR" */
    const char *dflt;     /* its default, as a value or in words */
    const char *changes;  /* what it changes */
    const char *kind;     /* "user" or "diagnostic" */
    const char *read_by;  /* "clef_knobs" (this registry) or the driver file that reads it */
} clef_knob_info;
extern const clef_knob_info clef_knob_table[];
extern const size_t clef_knob_count;

/* Every knob at its default (the environment unset). */
void clef_knobs_default(clef_knobs *k);

/* Fills k from lookup(name, ctx) (getenv-like: NULL when unset). */
void clef_knobs_parse(clef_knobs *k, const char *(*lookup)(const char *name, void *ctx), void *ctx);

/* The process's knobs: the environment, read on the first call (thread-safe) and fixed after. */
const clef_knobs *clef_knobs_env(void);
/* The environment's value of a knob of the table (a driver's own entry, or a flag's documented
 * mirror), or NULL when unset or not a registered knob: the one door to the environment. */
const char *clef_knob_getenv(const char *name);

#endif
