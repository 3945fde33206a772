/* Prefill benchmark of the CUDA backend on synthetic weights with the real Qwen3.5-9B text config
 * (32 layers: 24 Gated DeltaNet + 8 gated attention, hidden 4096, MLP 12288), created directly in
 * GPU memory (no checkpoint file). Built by `make CUDA=1` as $(BUILD)/bench/bench_cuda.
 *
 *   bench_cuda [--precision fast|bf16|fp32|both|all] [--tokens 436,2048,16384] [--reps N]
 *              [--records N] [--layers N] [--long-reps N (reps at T >= 8192, default 1)]
 *              [--graph 0|1] [--packed N]
 * both = fast and fp32, all = fast, bf16 and fp32. --graph 1 runs each forward through
 * clef_cuda_graph_run keyed by the token count (the timed reps replay the captured graph; the warm-up
 * runs eagerly and the capture is untimed). Kernel variants come from the environment
 * (CLEF_CUDA_LINEAR=bf16, CLEF_CUDA_ATTN=simt|v2|v3|v4, CLEF_CUDA_DELTA=v1|v2|v3|v4|v5, CLEF_CUDA_GEMM_TOPN=N;
 * cuda_ops.h says which are verified and default); every line names them in "kernels". Kernels inside an op are reported
 * as "op.X" lines (delta_rule.A / .B) and are not added to the total.
 *
 * One JSON object per line on stdout:
 *   {"kind":"prefill", precision, tokens, seconds (median of reps), tflop, tflops, peak_pct,
 *    mfu_pct, issued_tflop, issued_pct, linear_ms, linear_tflops, linear_pct, ...}
 *   {"kind":"kernel", precision, tokens, op, calls, ms, ms_per_call, pct, tflop, tflops}
 *       per-op time from CUDA events around each op, summed over one profiled forward
 *   {"kind":"throughput", precision, records, tokens_each, seconds, records_per_s, tokens_per_s}
 *       records one after another, one forward each
 *   {"kind":"packed", precision, records, tokens_each, seconds, records_per_s, tokens_per_s}
 *       --packed N: N records of 436 tokens packed into one forward (median of reps)
 *   {"kind":"device", name, arena_bytes, weight_bytes, graph counters, gemm_* (CLEF_CUDA_GEMM_TOPN's choices)}
 * Work and utilisation:
 *   - tflop is the model's analytic work (GEMMs 2*M*N*K, causal attention 2*T^2*hd*heads per layer,
 *     the chunked delta rule's matrix products); mfu_pct = tflop / seconds / peak (peak_pct is the
 *     same figure, kept for older summaries).
 *   - issued_tflop is what the kernels really do, counted by the backend per op in the profiled
 *     forward: the fast precision's GEMMs do two products per weight (x = h + l), bf16 one, fp32
 *     one; 3xTF32 attention three MMAs per product. issued_pct = issued_tflop / seconds / peak.
 *   - linear_tflops = the Linear ops' issued work / their kernel time; linear_pct against the peak:
 *     how busy the tensor cores are inside the GEMMs.
 *   peak: the H200's dense bf16 989 TFLOP/s for fast and bf16, the FP32 non-tensor 67 TFLOP/s for
 *   fp32. The head is not run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/cuda/cuda_ops.h"
#include "model/config.h"
#include "model/text.h"
#include "model/weights.h"

#define PEAK_BF16 989.0
#define PEAK_FP32 67.0

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void real_config(clef_config *cfg, int layers) {
    memset(cfg, 0, sizeof *cfg);
    clef_text_config *t = &cfg->text;
    t->hidden_size = 4096;
    t->num_hidden_layers = layers;
    for (int i = 0; i < layers; i++) t->layer_types[i] = (i % 4 == 3) ? CLEF_LAYER_FULL : CLEF_LAYER_LINEAR;
    t->vocab_size = 248320;
    t->intermediate_size = 12288;
    t->num_attention_heads = 16;
    t->num_key_value_heads = 4;
    t->head_dim = 256;
    t->linear_num_key_heads = 16;
    t->linear_num_value_heads = 32;
    t->linear_key_head_dim = 128;
    t->linear_value_head_dim = 128;
    t->linear_conv_kernel_dim = 4;
    t->rms_norm_eps = 1e-6;
    t->rope_theta = 1e7;
    t->partial_rotary_factor = 0.25;
    t->rotary_dim = 64;
    t->mrope_section[0] = 11;
    t->mrope_section[1] = 11;
    t->mrope_section[2] = 10;
    t->eos_token_id = -1;
    t->q_dim = 16 * 256;
    t->kv_dim = 4 * 256;
    t->linear_key_dim = 2048;
    t->linear_value_dim = 4096;
    t->linear_conv_dim = 8192;
    for (int i = 0; i < layers; i++) {
        if (t->layer_types[i] == CLEF_LAYER_FULL) t->n_full_layers++;
        else t->n_linear_layers++;
    }
}

static uint64_t seed_ctr = 1;
static int mk(clef_ops *ops, clef_tensor *t, int dtype, int64_t d0, int64_t d1, int64_t d2, float center,
              float scale) {
    int64_t shape[3] = {d0, d1, d2};
    int nd = d2 ? 3 : d1 ? 2 : 1;
    clef_err err;
    clef_err_clear(&err);
    if (clef_cuda_synthetic_weight(ops, t, dtype, shape, nd, 0x9e3779b97f4a7c15ull * seed_ctr++, center, scale, &err)) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int make_weights(clef_ops *ops, const clef_config *cfg, clef_text_weights *w) {
    const clef_text_config *t = &cfg->text;
    const int64_t H = t->hidden_size, I = t->intermediate_size, CD = t->linear_conv_dim, Vd = t->linear_value_dim;
    const int64_t Hv = t->linear_num_value_heads, dv = t->linear_value_head_dim, hd = t->head_dim;
    const float sH = 1.0f / sqrtf((float)H), sI = 1.0f / sqrtf((float)I);
    memset(w, 0, sizeof *w);
    w->n_layers = t->num_hidden_layers;
    w->layers = calloc((size_t)w->n_layers, sizeof *w->layers);
    if (!w->layers) return -1;
    int bad = 0;
    bad |= mk(ops, &w->embed_tokens, CLEF_ST_BF16, t->vocab_size, H, 0, 0.0f, 0.05f);
    bad |= mk(ops, &w->final_norm, CLEF_ST_BF16, H, 0, 0, 0.0f, 0.1f);
    for (int i = 0; i < w->n_layers && !bad; i++) {
        clef_text_layer *L = &w->layers[i];
        L->type = t->layer_types[i];
        bad |= mk(ops, &L->input_norm, CLEF_ST_BF16, H, 0, 0, 0.0f, 0.1f);
        bad |= mk(ops, &L->post_norm, CLEF_ST_BF16, H, 0, 0, 0.0f, 0.1f);
        bad |= mk(ops, &L->mlp_gate, CLEF_ST_BF16, I, H, 0, 0.0f, sH);
        bad |= mk(ops, &L->mlp_up, CLEF_ST_BF16, I, H, 0, 0.0f, sH);
        bad |= mk(ops, &L->mlp_down, CLEF_ST_BF16, H, I, 0, 0.0f, sI);
        if (L->type == CLEF_LAYER_LINEAR) {
            bad |= mk(ops, &L->gdn.in_proj_qkv, CLEF_ST_BF16, CD, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->gdn.in_proj_z, CLEF_ST_BF16, Vd, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->gdn.in_proj_b, CLEF_ST_BF16, Hv, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->gdn.in_proj_a, CLEF_ST_BF16, Hv, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->gdn.conv1d, CLEF_ST_BF16, CD, 1, t->linear_conv_kernel_dim, 0.0f, 0.5f);
            bad |= mk(ops, &L->gdn.dt_bias, CLEF_ST_BF16, Hv, 0, 0, 0.0f, 1.0f);
            bad |= mk(ops, &L->gdn.A_log, CLEF_ST_F32, Hv, 0, 0, 0.0f, 1.0f);
            bad |= mk(ops, &L->gdn.norm, CLEF_ST_F32, dv, 0, 0, 1.0f, 0.1f);
            bad |= mk(ops, &L->gdn.out_proj, CLEF_ST_BF16, H, Vd, 0, 0.0f, 1.0f / sqrtf((float)Vd));
        } else {
            bad |= mk(ops, &L->attn.q_proj, CLEF_ST_BF16, 2 * t->q_dim, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->attn.k_proj, CLEF_ST_BF16, t->kv_dim, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->attn.v_proj, CLEF_ST_BF16, t->kv_dim, H, 0, 0.0f, sH);
            bad |= mk(ops, &L->attn.o_proj, CLEF_ST_BF16, H, t->q_dim, 0, 0.0f, 1.0f / sqrtf((float)t->q_dim));
            bad |= mk(ops, &L->attn.q_norm, CLEF_ST_BF16, hd, 0, 0, 0.0f, 0.1f);
            bad |= mk(ops, &L->attn.k_norm, CLEF_ST_BF16, hd, 0, 0, 0.0f, 0.1f);
        }
    }
    return bad ? -1 : 0;
}

/* Analytic FLOPs of one prefill of T tokens. */
static double flops(const clef_config *cfg, double T) {
    const clef_text_config *t = &cfg->text;
    double H = t->hidden_size, I = t->intermediate_size, CD = t->linear_conv_dim, Vd = t->linear_value_dim;
    double Hv = t->linear_num_value_heads, dk = t->linear_key_head_dim, dv = t->linear_value_head_dim;
    double qd = t->q_dim, kvd = t->kv_dim, hd = t->head_dim, nh = t->num_attention_heads, C = 64;
    double mlp = 2 * T * H * I * 3, total = 0;
    for (int i = 0; i < t->num_hidden_layers; i++) {
        total += mlp;
        if (t->layer_types[i] == CLEF_LAYER_FULL) {
            total += 2 * T * H * (2 * qd + 2 * kvd) + 2 * T * qd * H; /* projections */
            total += 2 * T * T * hd * nh;                               /* causal QK^T + PV */
        } else {
            total += 2 * T * H * (CD + Vd + 2 * Hv) + 2 * T * Vd * H;
            double chunks = ceil(T / C);
            double per = 4 * C * C * dk + C * C * (dk + dv) + 6 * C * dk * dv + C * C * dv;
            total += chunks * Hv * per;
        }
    }
    return total;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct fwd_ctx {
    const clef_config *cfg;
    const clef_text_weights *w;
    clef_forward_in in;
    float *hidden;
    clef_err err;
} fwd_ctx;

static int fwd_pass(clef_ops *ops, void *vctx) {
    fwd_ctx *c = vctx;
    clef_err_clear(&c->err);
    return clef_text_forward(ops, c->cfg, c->w, &c->in, c->hidden, &c->err);
}

static int use_graph = 0; /* --graph */

/* One forward of T rows: one record, or nseg packed records (segs). */
static int forward_segs(clef_ops *ops, const clef_config *cfg, const clef_text_weights *w, const int32_t *ids,
                        size_t T, size_t nseg, const clef_forward_seg *segs, float *hidden, double *secs) {
    fwd_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.w = w;
    c.in.ids = ids;
    c.in.n = T;
    c.in.nseg = nseg;
    c.in.segs = segs;
    c.hidden = hidden;
    double t0 = now();
    /* the graph key: the shape (rows, and the record count of a packed forward) */
    int rc = use_graph ? clef_cuda_graph_run(ops, (uint64_t)T ^ ((uint64_t)nseg << 40), fwd_pass, &c) : fwd_pass(ops, &c);
    if (rc == 0) rc = clef_cuda_sync(ops);
    *secs = now() - t0;
    if (rc) fprintf(stderr, "bench_cuda: forward of %zu tokens failed: %s %s\n", T, c.err.msg, clef_cuda_last_error(ops));
    return rc;
}

static int forward(clef_ops *ops, const clef_config *cfg, const clef_text_weights *w, const int32_t *ids, size_t T,
                   float *hidden, double *secs) {
    return forward_segs(ops, cfg, w, ids, T, 0, NULL, hidden, secs);
}

static const char *prec_name(int precision) {
    return precision == CLEF_CUDA_FAST ? "fast" : precision == CLEF_CUDA_BF16 ? "bf16" : "fp32";
}

static int long_reps = 1; /* --long-reps: repetitions at T >= 8192 */

static int packed = 0; /* --packed N: N records of 436 tokens in one forward */

static int run_precision(int precision, const size_t *Ts, int nT, int reps, int records, int layers) {
    const char *pname = prec_name(precision);
    char kern[160]; /* which kernel variants ran (env CLEF_CUDA_LINEAR / ATTN / DELTA at create) */
    double peak = precision == CLEF_CUDA_FP32 ? PEAK_FP32 : PEAK_BF16;
    clef_err err;
    clef_err_clear(&err);
    clef_ops *ops = clef_cuda_ops_create(0, precision, NULL, &err);
    if (!ops) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return 1;
    }
    clef_cuda_kernels kv;
    clef_cuda_get_kernels(ops, &kv);
    clef_cuda_set_graph(ops, use_graph);
    clef_cuda_gemm_info gi0;
    clef_cuda_gemm_stats(ops, &gi0);
    char gemm[24] = ""; /* CLEF_CUDA_GEMM_TOPN: the GEMM algorithm choice, when not the heuristic's first */
    if (gi0.topn > 1) snprintf(gemm, sizeof gemm, ",gemm=top%d", gi0.topn);
    snprintf(kern, sizeof kern, "\"kernels\":\"linear=%s%s,attn=%s,delta=%s\",\"graph\":%s",
             precision == CLEF_CUDA_FP32 ? "fp32" : precision == CLEF_CUDA_BF16 || !kv.linear_split ? "bf16" : "split", gemm,
             kv.attn == CLEF_CUDA_ATTN_SIMT ? "simt" : kv.attn == CLEF_CUDA_ATTN_V2 ? "v2" : kv.attn == CLEF_CUDA_ATTN_V4 ? "v4" : "v3", kv.delta == CLEF_CUDA_DELTA_V1   ? "v1"
             : kv.delta == CLEF_CUDA_DELTA_V2 ? "v2"
             : kv.delta == CLEF_CUDA_DELTA_V4 ? "v4"
             : kv.delta == CLEF_CUDA_DELTA_V5 ? "v5"
                                              : "v3", use_graph ? "true" : "false");
    clef_config cfg;
    real_config(&cfg, layers);
    clef_text_weights w;
    double t0 = now();
    if (make_weights(ops, &cfg, &w) || clef_cuda_sync(ops)) {
        fprintf(stderr, "bench_cuda: could not create the synthetic weights\n");
        ops->destroy(ops);
        return 1;
    }
    double tw = now() - t0;
    size_t maxT = 0;
    for (int i = 0; i < nT; i++) maxT = Ts[i] > maxT ? Ts[i] : maxT;
    if ((size_t)packed * 436 > maxT) maxT = (size_t)packed * 436;
    int32_t *ids = malloc(maxT * sizeof(int32_t));
    float *hidden = ops->alloc(ops, maxT * (size_t)cfg.text.hidden_size);
    float probe[4];
    if (!ids || !hidden) {
        fprintf(stderr, "bench_cuda: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < maxT; i++) ids[i] = (int32_t)((i * 2654435761u) % (uint32_t)cfg.text.vocab_size);
    int rc = 0;
    for (int ti = 0; ti < nT && !rc; ti++) {
        size_t T = Ts[ti];
        double s, times[64];
        int n = reps < 64 ? reps : 64;
        if (T >= 8192 && n > long_reps) n = long_reps; /* a 16k prefill takes seconds: keep the run short */
        if (forward(ops, &cfg, &w, ids, T, hidden, &s)) { rc = 1; break; } /* warm-up: weights, plans, arena */
        double first = s, capture = 0;
        if (use_graph) { /* the capture (untimed): the reps replay the graph */
            if (forward(ops, &cfg, &w, ids, T, hidden, &capture)) { rc = 1; break; }
        }
        for (int r = 0; r < n && !rc; r++) rc = forward(ops, &cfg, &w, ids, T, hidden, &times[r]);
        if (rc) break;
        qsort(times, (size_t)n, sizeof times[0], cmp_d);
        double med = times[n / 2], fl = flops(&cfg, (double)T);
        ops->download(ops, probe, hidden + (T - 1) * (size_t)cfg.text.hidden_size, 4);
        int finite = isfinite(probe[0]) && isfinite(probe[1]) && isfinite(probe[2]) && isfinite(probe[3]);
        /* one profiled run (eager): per-op kernel time and issued work */
        clef_cuda_profile_reset(ops);
        clef_cuda_profile(ops, 1);
        rc = forward(ops, &cfg, &w, ids, T, hidden, &s);
        clef_cuda_op_time ot[32];
        size_t no = clef_cuda_profile_read(ops, ot, 32);
        clef_cuda_profile(ops, 0);
        double tot = 0, issued = 0, lin_ms = 0, lin_fl = 0;
        for (size_t i = 0; i < no; i++) { /* "op.X" are kernels inside op X, already in its time */
            if (strchr(ot[i].op, '.')) continue;
            tot += ot[i].ms;
            issued += ot[i].flop;
            if (!strcmp(ot[i].op, "linear")) { lin_ms = ot[i].ms; lin_fl = ot[i].flop; }
        }
        printf("{\"kind\":\"prefill\",\"precision\":\"%s\",%s,\"layers\":%d,\"tokens\":%zu,\"reps\":%d,\"seconds\":%.6f,"
               "\"seconds_min\":%.6f,\"seconds_first\":%.6f,\"seconds_capture\":%.6f,\"tokens_per_s\":%.1f,"
               "\"tflop\":%.4f,\"tflops\":%.2f,\"peak_tflops\":%.0f,\"peak_pct\":%.2f,\"mfu_pct\":%.2f,"
               "\"issued_tflop\":%.4f,\"issued_pct\":%.2f,\"linear_ms\":%.3f,\"linear_tflops\":%.1f,"
               "\"linear_pct\":%.2f,\"kernel_ms\":%.3f,\"last_row_finite\":%s}\n",
               pname, kern, layers, T, n, med, times[0], first, capture, (double)T / med, fl * 1e-12, fl * 1e-12 / med,
               peak, 100.0 * fl * 1e-12 / med / peak, 100.0 * fl * 1e-12 / med / peak, issued * 1e-12,
               100.0 * issued * 1e-12 / med / peak, lin_ms, lin_ms > 0 ? lin_fl * 1e-9 / lin_ms : 0.0,
               lin_ms > 0 ? 100.0 * lin_fl * 1e-9 / lin_ms / peak : 0.0, tot, finite ? "true" : "false");
        for (size_t i = 0; i < no; i++)
            printf("{\"kind\":\"kernel\",\"precision\":\"%s\",%s,\"tokens\":%zu,\"op\":\"%s\",\"calls\":%llu,\"ms\":%.3f,"
                   "\"ms_per_call\":%.4f,\"pct\":%.2f,\"tflop\":%.4f,\"tflops\":%.1f}\n",
                   pname, kern, T, ot[i].op, (unsigned long long)ot[i].calls, ot[i].ms,
                   ot[i].calls ? ot[i].ms / (double)ot[i].calls : 0.0, tot > 0 ? 100.0 * ot[i].ms / tot : 0.0,
                   ot[i].flop * 1e-12, ot[i].ms > 0 ? ot[i].flop * 1e-9 / ot[i].ms : 0.0);
        printf("{\"kind\":\"kernel_total\",\"precision\":\"%s\",%s,\"tokens\":%zu,\"ms\":%.3f,\"wall_ms\":%.3f}\n", pname,
               kern, T, tot, s * 1e3);
        fflush(stdout);
    }
    /* throughput: many records of 436 tokens back to back (one forward each, as the engine runs them) */
    if (!rc && records > 0) {
        size_t T = 436 <= maxT ? 436 : maxT;
        double s, tot = 0;
        for (int r = 0; r < records && !rc; r++) {
            rc = forward(ops, &cfg, &w, ids, T, hidden, &s);
            tot += s;
        }
        if (!rc)
            printf("{\"kind\":\"throughput\",\"precision\":\"%s\",%s,\"records\":%d,\"tokens_each\":%zu,\"seconds\":%.4f,"
                   "\"records_per_s\":%.2f,\"tokens_per_s\":%.1f,\"tflops\":%.2f}\n",
                   pname, kern, records, T, tot, records / tot, (double)records * (double)T / tot,
                   records * flops(&cfg, (double)T) * 1e-12 / tot);
    }
    /* packed: `packed` records of 436 tokens in one forward (block-diagonal attention, per-record delta
     * rule and conv), the serving engine's batch */
    if (!rc && packed > 0) {
        const size_t each = 436, T = (size_t)packed * each;
        clef_forward_seg *segs = calloc((size_t)packed, sizeof *segs);
        double s, times[64];
        int n = reps < 64 ? reps : 64;
        if (!segs) {
            rc = 1;
        } else {
            for (int i = 0; i < packed; i++) segs[i].n = each;
            rc = forward_segs(ops, &cfg, &w, ids, T, (size_t)packed, segs, hidden, &s); /* warm-up */
            if (!rc && use_graph) rc = forward_segs(ops, &cfg, &w, ids, T, (size_t)packed, segs, hidden, &s);
            for (int r = 0; r < n && !rc; r++) rc = forward_segs(ops, &cfg, &w, ids, T, (size_t)packed, segs, hidden, &times[r]);
            if (!rc) {
                qsort(times, (size_t)n, sizeof times[0], cmp_d);
                double med = times[n / 2];
                printf("{\"kind\":\"packed\",\"precision\":\"%s\",%s,\"records\":%d,\"tokens_each\":%zu,\"reps\":%d,"
                       "\"seconds\":%.6f,\"seconds_min\":%.6f,\"records_per_s\":%.2f,\"tokens_per_s\":%.1f,\"tflops\":%.2f,"
                       "\"mfu_pct\":%.2f}\n",
                       pname, kern, packed, each, n, med, times[0], packed / med, (double)T / med,
                       packed * flops(&cfg, (double)each) * 1e-12 / med,
                       100.0 * packed * flops(&cfg, (double)each) * 1e-12 / med / peak);
                fflush(stdout);
            }
            free(segs);
        }
    }
    size_t ab = 0, wb = 0;
    clef_cuda_memory(ops, &ab, &wb);
    clef_cuda_graph_info gi;
    clef_cuda_graph_stats(ops, &gi);
    clef_cuda_gemm_info gm;
    clef_cuda_gemm_stats(ops, &gm);
    printf("{\"kind\":\"device\",\"precision\":\"%s\",%s,\"name\":\"%s\",\"arena_bytes\":%zu,\"weight_bytes\":%zu,"
           "\"weights_seconds\":%.3f,\"graph_captured\":%llu,\"graph_replayed\":%llu,\"graph_fallbacks\":%llu,"
           "\"graph_unsafe\":%zu,\"graph_pool_bytes\":%zu,\"graph_unsafe_why\":\"%s\",\"gemm_topn\":%d,"
           "\"gemm_shapes\":%llu,\"gemm_picked_other\":%llu,\"gemm_same_bits\":%llu,\"gemm_tried\":%llu,"
           "\"gemm_first_us\":%.1f,\"gemm_best_us\":%.1f%s%s%s}\n",
           pname, kern, clef_cuda_device_name(ops), ab, wb, tw, (unsigned long long)gi.captured,
           (unsigned long long)gi.replayed, (unsigned long long)gi.fallbacks, gi.unsafe, gi.pool_bytes,
           gi.last_unsafe_why, gm.topn, (unsigned long long)gm.shapes, (unsigned long long)gm.picked_other,
           (unsigned long long)gm.same_bits, (unsigned long long)gm.tried, gm.first_us, gm.best_us,
           rc ? ",\"error\":\"" : "", rc ? clef_cuda_last_error(ops) : "", rc ? "\"" : "");
    fflush(stdout);
    ops->free(ops, hidden);
    free(ids);
    free(w.layers);
    ops->destroy(ops);
    return rc;
}

int main(int argc, char **argv) {
    const char *prec = "fast";
    size_t Ts[16] = {436, 2048, 16384};
    int nT = 3, reps = 3, records = 32, layers = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--precision")) prec = v;
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--records")) records = atoi(v);
        else if (!strcmp(a, "--long-reps")) long_reps = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--graph")) use_graph = atoi(v) != 0;
        else if (!strcmp(a, "--packed")) packed = atoi(v);
        else if (!strcmp(a, "--tokens")) {
            nT = 0;
            for (const char *p = v; *p && nT < 16;) {
                long x = strtol(p, NULL, 10);
                if (x >= 3) Ts[nT++] = (size_t)x;
                p = strchr(p, ',');
                if (!p) break;
                p++;
            }
        } else {
            fprintf(stderr, "usage: bench_cuda [--precision fast|bf16|fp32|both|all] [--tokens a,b,c] [--reps N] [--records N] "
                            "[--layers N] [--graph 0|1] [--packed N]\n");
            return 2;
        }
    }
    if (argc % 2 == 0 || nT == 0 || reps < 1 || long_reps < 1 || layers < 1 || layers > 32 || packed < 0 || packed > 256) {
        fprintf(stderr, "usage: bench_cuda [--precision fast|bf16|fp32|both|all] [--tokens a,b,c] [--reps N] [--records N] "
                        "[--layers 1..32] [--graph 0|1] [--packed 0..256]\n");
        return 2;
    }
    if (clef_cuda_device_count() <= 0) {
        printf("{\"kind\":\"skip\",\"reason\":\"no CUDA device\"}\n");
        return 77;
    }
    int rc = 0;
    int all = !strcmp(prec, "all"), both = !strcmp(prec, "both");
    if (!strcmp(prec, "fast") || both || all) rc |= run_precision(CLEF_CUDA_FAST, Ts, nT, reps, records, layers);
    if (!strcmp(prec, "bf16") || all) rc |= run_precision(CLEF_CUDA_BF16, Ts, nT, reps, records, layers);
    if (!strcmp(prec, "fp32") || both || all) rc |= run_precision(CLEF_CUDA_FP32, Ts, nT, reps, records, layers);
    return rc;
}
