/* linear: y[T, N] = x[T, K] W[row0 .. row0+N, K]^T (+ b).
 *
 * Column-major view (cuBLAS): y^T (N x T, ld N) = op(A) B with A = W rows as a K x N column-major
 * matrix (ld K, op = T) and B = x^T (K x T, ld K).
 *  - CLEF_CUDA_FP32 (parity): the weight widened to fp32 once (cached), cublasGemmEx in
 *    CUBLAS_COMPUTE_32F_PEDANTIC (plain fp32 FMA, no TF32, no split into lower precision).
 *  - CLEF_CUDA_FAST: x split into two bf16 terms x = h + l (h = bf16(x), l = bf16(x - h), both
 *    round to nearest; x - h is exact in fp32), and y = W h + W l with the bf16 weight as stored,
 *    cuBLASLt with fp32 accumulation and fp32 output (tensor cores). The weight is exact in bf16, so
 *    the only input error left is |x - h - l| <= u^2 |x| (u = 2^-8, bf16's unit roundoff) instead of
 *    u |x| with one term: the first device run (2026-11-30a) showed one term moves the tiny
 *    checkpoint's probabilities by up to 1.6e-2 (bar 2e-3). T <= SPLIT_CONCAT_T: one GEMM over the
 *    2T columns [h | l] into scratch and a pass adding the halves (the weight is read once: small T
 *    is bound by the weight's bandwidth); larger T: two GEMMs into y, the second with beta = 1 (no
 *    T x N scratch). $CLEF_CUDA_LINEAR=bf16 selects the old single-term path (speed comparisons).
 *    cublasGemmEx in bf16 is the fallback when cuBLASLt offers no algorithm. F32 weights take the
 *    parity path in either mode.
 *  - CLEF_CUDA_BF16: one term, h = bf16(x), and one cuBLASLt GEMM per Linear (half the fast path's
 *    tensor-core work; input error u |x| instead of u^2 |x|), the bias added in the GEMM's epilogue
 *    (CUBLASLT_EPILOGUE_BIAS: fp32, one rounding) when cuBLASLt has an algorithm for it, else by
 *    the separate kernel (verified by run 2026-12-04a, docs/cuda.md).
 * cuBLASLt's algorithm for a shape: the heuristic's first, or with CLEF_CUDA_GEMM_TOPN = N > 1 the fastest
 * of its top N among those that give the first's bits (pick_algo), chosen once per shape and kept.
 * The bias is added by a separate kernel. No floating-point atomics (cuBLAS's default atomics mode is
 * "not allowed"; cuBLASLt's reduction schemes are sequential; pick_algo's output hash adds integers), so the bits repeat. */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

static const size_t LT_WORKSPACE = (size_t)32 << 20;
/* Up to this many rows the split product is one GEMM over [h | l] (reads the weight once). */
static const size_t SPLIT_CONCAT_T = 64;

static bool blas_ok(clef_ops *ops, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    char buf[64];
    snprintf(buf, sizeof buf, "cuBLAS status %d", (int)s);
    return fail_code(ops, s == CUBLAS_STATUS_ALLOC_FAILED ? CLEF_OPS_OOM : CLEF_OPS_DEVICE, what, buf);
}

bool linear_init(clef_ops *ops) {
    Impl *im = IM(ops);
    if (!blas_ok(ops, cublasCreate(&im->blas), "cublasCreate")) return false;
    if (!blas_ok(ops, cublasSetStream(im->blas, im->stream), "cublasSetStream")) return false;
    if (!blas_ok(ops, cublasSetAtomicsMode(im->blas, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode")) return false;
    if (!blas_ok(ops, cublasLtCreate(&im->lt), "cublasLtCreate")) return false;
    if (!cuda_ok(ops, cudaMalloc(&im->lt_ws, LT_WORKSPACE), "cudaMalloc (cuBLASLt workspace)")) return false;
    im->lt_ws_size = LT_WORKSPACE;
    /* cuBLAS's own workspace: fixed, so its choice of kernels does not depend on what is free */
    if (!blas_ok(ops, cublasSetWorkspace(im->blas, im->lt_ws, im->lt_ws_size), "cublasSetWorkspace")) return false;
    return true;
}

void linear_destroy(clef_ops *ops) {
    Impl *im = IM(ops);
    if (im->blas) cublasDestroy(im->blas);
    if (im->lt) cublasLtDestroy(im->lt);
    if (im->lt_ws) cudaFree(im->lt_ws);
    im->blas = nullptr;
    im->lt = nullptr;
    im->lt_ws = nullptr;
}

__global__ void k_to_bf16(__nv_bfloat16 *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* x = h + l with h = bf16(x), l = bf16(x - h) (x - h is exact in fp32: h has the leading 8 bits).
 * A non-finite h (x NaN, inf, or rounding up past bf16's max) gets l = 0, so y is inf/NaN as on the
 * CPU instead of NaN from inf - inf. */
__global__ void k_split_bf16(__nv_bfloat16 *hi, __nv_bfloat16 *lo, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        float hf = __bfloat162float(h);
        hi[i] = h;
        lo[i] = __float2bfloat16_rn(isfinite(hf) ? v - hf : 0.0f);
    }
}

/* y[t, n] = a[t, n] + a[T + t, n] (+ b[n]): the halves of the concatenated product. */
__global__ void k_add_halves(float *y, const float *a, const float *b, size_t T, size_t N) {
    size_t n = T * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = a[i] + a[n + i];
        y[i] = b ? s + b[i % N] : s;
    }
}

__global__ void k_add_bias(float *y, const float *b, size_t T, size_t N) {
    size_t n = T * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = y[i] + b[i % N];
}

static unsigned cap_grid(size_t n) {
    unsigned g = grid1d(n, 256);
    return g > 8192 ? 8192 : g;
}

static uint32_t ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}

/* An order-independent hash of n floats' bits into *h (+=): each word mixed with its index, the mixes
 * summed mod 2^64 (integer adds commute, so the atomics give the same value every time). */
__global__ void k_bits_hash(unsigned long long *h, const float *y, size_t n) {
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long v = (unsigned long long)__float_as_uint(y[i]) ^ ((unsigned long long)i << 32);
        v ^= v >> 33;
        v *= 0xff51afd7ed558ccdull;
        v ^= v >> 33;
        v *= 0xc4ceb9fe1a85ec53ull;
        v ^= v >> 33;
        s += v;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(h, s);
}

static const int TOPN_MAX = 16, TOPN_REPS = 3;

/* CLEF_CUDA_GEMM_TOPN (cuda_ops.h clef_cuda_set_gemm_topn): of the heuristic's candidates res[0 .. count),
 * the index of the fastest whose output has res[0]'s bits, on this call's own operands (y is the output:
 * the caller writes it again with the pick). Each candidate: one run, its output hashed, then TOPN_REPS runs
 * between two events. Different algorithms may sum in different orders and so round differently: only
 * those with the first's bits are eligible, so whichever wins, the answers are those of the heuristic's
 * first (the hash compares every word; an order that differs shows in essentially any output of more than
 * a few elements). 0 (the first) when anything cannot be measured. */
static int pick_algo(clef_ops *ops, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                     cublasLtMatrixLayout_t lc, const cublasLtMatmulHeuristicResult_t *res, int count, float *y,
                     const __nv_bfloat16 *xb, const __nv_bfloat16 *wb, size_t ny) {
    Impl *im = IM(ops);
    GemmTuneStats &st = im->gemm_tune;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (count < 2 || cudaStreamIsCapturing(im->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        st.skipped++;
        return 0; /* a sync cannot be captured; the first's bits are what any pick would give */
    }
    unsigned long long *hd = (unsigned long long *)scratch_alloc(ops, TOPN_MAX * sizeof(unsigned long long));
    if (!hd) return 0;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    unsigned long long hh[TOPN_MAX];
    float ms[TOPN_MAX];
    bool ran[TOPN_MAX] = {false};
    const float alpha = 1.0f, beta = 0.0f;
    int best = 0;
    bool measured = cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess &&
                    cudaMemsetAsync(hd, 0, TOPN_MAX * sizeof(unsigned long long), im->stream) == cudaSuccess;
    for (int i = 0; measured && i < count; i++) {
        auto run = [&]() {
            return cublasLtMatmul(im->lt, op, &alpha, wb, la, xb, lb, &beta, y, lc, y, lc, &res[i].algo, im->lt_ws,
                                  im->lt_ws_size, im->stream) == CUBLAS_STATUS_SUCCESS;
        };
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > im->lt_ws_size || !run()) {
            if (i == 0) measured = false; /* no reference bits */
            continue;
        }
        k_bits_hash<<<cap_grid(ny), 256, 0, im->stream>>>(hd + i, y, ny);
        bool ok = cudaEventRecord(ev[0], im->stream) == cudaSuccess;
        for (int r = 0; ok && r < TOPN_REPS; r++) ok = run();
        ok = ok && cudaEventRecord(ev[1], im->stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&ms[i], ev[0], ev[1]) == cudaSuccess;
        if (!ok) {
            if (i == 0) measured = false;
            continue;
        }
        ran[i] = true;
        st.tried++;
    }
    measured = measured && cudaMemcpyAsync(hh, hd, TOPN_MAX * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                           im->stream) == cudaSuccess &&
               cudaStreamSynchronize(im->stream) == cudaSuccess;
    if (measured && ran[0]) {
        for (int i = 1; i < count; i++) {
            if (!ran[i] || hh[i] != hh[0]) continue;
            st.same_bits++;
            if (ms[i] < 0.97f * ms[best]) best = i; /* 3%: timing noise alone does not move the pick */
        }
        st.same_bits++; /* the first */
        st.shapes++;
        st.picked_other += best != 0;
        st.first_us += 1e3 * ms[0] / TOPN_REPS;
        st.best_us += 1e3 * ms[best] / TOPN_REPS;
    } else {
        st.skipped++;
        best = 0;
    }
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    scratch_free(ops, hd);
    return best;
}

/* One bf16 x bf16 -> fp32 product y = W x (+ y when accumulate) (+ bias[n] in the epilogue when bias is
 * not NULL) through cuBLASLt; false when cuBLASLt has no algorithm for it. */
static bool lt_bf16(clef_ops *ops, float *y, const __nv_bfloat16 *xb, const __nv_bfloat16 *wb, int N, int T, int K,
                    bool accumulate, const float *bias = nullptr) {
    Impl *im = IM(ops);
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    bool ok = false;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    uint32_t aa = ptr_align(wb), ab = ptr_align(xb), ac = ptr_align(y);
    /* alignments select the admissible algorithms; beta != 0 may rule some out, so it is in the key */
    GemmKey key{N, T, K, aa | (ab << 10) | (ac << 20) | (accumulate ? 1u << 30 : 0u) | (bias ? 1u << 31 : 0u)};
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) goto out;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS)
        goto out;
    if (bias) { /* fp32 bias (the D type), one value per output row n of the column-major N x T result */
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) != CUBLAS_STATUS_SUCCESS)
            goto out;
    }
    if (cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, (int64_t)K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)T, (int64_t)K) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)T, (int64_t)N) != CUBLAS_STATUS_SUCCESS)
        goto out;
    {
        auto it = im->plans.find(key);
        if (it == im->plans.end()) {
            GemmPlan plan;
            if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
                size_t ws = im->lt_ws_size;
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac);
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac);
                cublasLtMatmulHeuristicResult_t res[TOPN_MAX];
                int count = 0, want = im->gemm_topn > 1 && !accumulate ? im->gemm_topn : 1;
                memset(res, 0, sizeof res);
                if (want > TOPN_MAX) want = TOPN_MAX;
                if (cublasLtMatmulAlgoGetHeuristic(im->lt, op, la, lb, lc, lc, pref, want, res, &count) ==
                        CUBLAS_STATUS_SUCCESS &&
                    count > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
                    plan.ok = true;
                    plan.algo = res[want > 1 ? pick_algo(ops, op, la, lb, lc, res, count, y, xb, wb, (size_t)N * T) : 0].algo;
                }
            }
            try {
                it = im->plans.emplace(key, plan).first;
            } catch (...) {
                goto out;
            }
        }
        if (!it->second.ok) goto out;
        ok = cublasLtMatmul(im->lt, op, &alpha, wb, la, xb, lb, &beta, y, lc, y, lc, &it->second.algo, im->lt_ws,
                            im->lt_ws_size, im->stream) == CUBLAS_STATUS_SUCCESS;
    }
out:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
    return ok;
}

/* cuBLASLt, else cublasGemmEx in bf16; false (ops->status set) when neither ran. */
static bool gemm_bf16(clef_ops *ops, float *y, const __nv_bfloat16 *xb, const __nv_bfloat16 *wb, int N, int T, int K,
                      bool accumulate) {
    if (lt_bf16(ops, y, xb, wb, N, T, K, accumulate)) return true;
    Impl *im = IM(ops);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return blas_ok(ops,
                   cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, wb, CUDA_R_16BF, K, xb, CUDA_R_16BF,
                                K, &beta, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (bf16)");
}

void op_linear(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w, size_t row0, size_t N,
               const clef_tensor *b) {
    ProfScope ps(ops, OP_LINEAR);
    if (T == 0 || N == 0) return;
    Impl *im = IM(ops);
    size_t K = (size_t)(w->numel / w->shape[0]);
    if (K > 0x7fffffff || N > 0x7fffffff || T > 0x3fffffff) { /* 2T columns in the split product */
        fail_code(ops, CLEF_OPS_SHAPE, "linear", "dimension over 2^31");
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    bool done = false;
    if (im->precision != CLEF_CUDA_FP32 && w->dtype == CLEF_ST_BF16) {
        int dt = 0;
        const uint16_t *wr = (const uint16_t *)weight_raw(ops, w, &dt);
        if (!wr) return;
        const __nv_bfloat16 *wb = (const __nv_bfloat16 *)(wr + row0 * K);
        if (im->precision == CLEF_CUDA_BF16 || !im->linear_split) {
            /* one term: the bf16 precision, or the fast path's old single-term variant
             * ($CLEF_CUDA_LINEAR=bf16); the bias in the epilogue in the bf16 precision only (the fast
             * path keeps what run 2026-11-30b verified) */
            __nv_bfloat16 *xb = (__nv_bfloat16 *)scratch_alloc(ops, T * K * sizeof(__nv_bfloat16));
            if (!xb) return;
            k_to_bf16<<<cap_grid(T * K), 256, 0, im->stream>>>(xb, x, T * K);
            if (b && im->precision == CLEF_CUDA_BF16) {
                const float *bf = weight_f32(ops, b);
                if (!bf) {
                    scratch_free(ops, xb);
                    return;
                }
                if (lt_bf16(ops, y, xb, wb, (int)N, (int)T, (int)K, false, bf + row0)) {
                    prof_flop(ops, OP_LINEAR, 2.0 * (double)T * (double)N * (double)K);
                    scratch_free(ops, xb);
                    launch_ok(ops, "linear");
                    return; /* bias added */
                }
            }
            done = gemm_bf16(ops, y, xb, wb, (int)N, (int)T, (int)K, false);
            scratch_free(ops, xb);
            if (!done) return;
            prof_flop(ops, OP_LINEAR, 2.0 * (double)T * (double)N * (double)K);
        } else {
            /* h in rows [0, T), l in rows [T, 2T) of one [2T, K] operand (contiguous, so the concatenated
             * product is one GEMM with 2T columns) */
            __nv_bfloat16 *xb = (__nv_bfloat16 *)scratch_alloc(ops, 2 * T * K * sizeof(__nv_bfloat16));
            if (!xb) return;
            k_split_bf16<<<cap_grid(T * K), 256, 0, im->stream>>>(xb, xb + T * K, x, T * K);
            if (T <= SPLIT_CONCAT_T) {
                float *y2 = (float *)scratch_alloc(ops, 2 * T * N * sizeof(float));
                if (!y2) {
                    scratch_free(ops, xb);
                    return;
                }
                done = gemm_bf16(ops, y2, xb, wb, (int)N, (int)(2 * T), (int)K, false);
                prof_flop(ops, OP_LINEAR, 4.0 * (double)T * (double)N * (double)K); /* two products per weight */
                const float *bf = nullptr;
                if (done && b) {
                    bf = weight_f32(ops, b);
                    done = bf != nullptr;
                }
                if (done) k_add_halves<<<cap_grid(T * N), 256, 0, im->stream>>>(y, y2, bf ? bf + row0 : nullptr, T, N);
                scratch_free(ops, y2);
                scratch_free(ops, xb);
                if (done) launch_ok(ops, "linear");
                return; /* bias already added */
            }
            done = gemm_bf16(ops, y, xb, wb, (int)N, (int)T, (int)K, false) &&
                   gemm_bf16(ops, y, xb + T * K, wb, (int)N, (int)T, (int)K, true);
            scratch_free(ops, xb);
            if (!done) return;
            prof_flop(ops, OP_LINEAR, 4.0 * (double)T * (double)N * (double)K);
        }
    } else {
        const float *wf = weight_f32(ops, w);
        if (!wf) return;
        if (!blas_ok(ops,
                     cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &one, wf + row0 * K,
                                  CUDA_R_32F, (int)K, x, CUDA_R_32F, (int)K, &zero, y, CUDA_R_32F, (int)N,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (fp32)"))
            return;
        prof_flop(ops, OP_LINEAR, 2.0 * (double)T * (double)N * (double)K);
    }
    if (b) {
        const float *bf = weight_f32(ops, b);
        if (!bf) return;
        k_add_bias<<<cap_grid(T * N), 256, 0, im->stream>>>(y, bf + row0, T, N);
    }
    launch_ok(ops, "linear");
}

} // namespace clefcu

using namespace clefcu;

extern "C" void clef_cuda_set_gemm_topn(clef_ops *ops, int n) {
    Impl *im = IM(ops);
    im->gemm_topn = n < 0 ? 0 : n > TOPN_MAX ? TOPN_MAX : n;
    im->plans.clear(); /* the shapes choose again under the new setting */
}

extern "C" void clef_cuda_gemm_stats(const clef_ops *ops, clef_cuda_gemm_info *s) {
    const Impl *im = static_cast<const Impl *>(ops->impl);
    const GemmTuneStats &t = im->gemm_tune;
    s->topn = im->gemm_topn;
    s->shapes = t.shapes;
    s->tried = t.tried;
    s->same_bits = t.same_bits;
    s->picked_other = t.picked_other;
    s->skipped = t.skipped;
    s->first_us = t.first_us;
    s->best_us = t.best_us;
}
