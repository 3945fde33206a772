#!/usr/bin/env bash
# The CUDA backend's device check (docs/cuda.md), in two halves:
#
#   tools/device-check.sh prep     HERE (no GPU needed): builds `make CUDA=1 BUILD=build-cuda`, and
#                                  fills build-cuda/devcheck/ (~10-20 MB) with what the GPU machine
#                                  lacks: the clef / test_cuda_ops / bench_cuda binaries, the shared
#                                  libraries they need beyond glibc and CUDA (oniguruma, utf8proc,
#                                  microhttpd + gnutls, png, jpeg, webp, gif), the tiny checkpoint's
#                                  tokenizer (gzip) and manifest. models/tiny itself (82 MB) is over
#                                  the 64 MiB a device call may carry: its weights are regenerated
#                                  there by tools/reference/write_tiny.py (numpy; deterministic,
#                                  checked against the carried manifest.sha256).
#   tools/device-check.sh [run]    THERE (the device tool's machine, $OUT set), carrying
#                                  build-cuda/devcheck; about 2.5 minutes (must stay < 200 s):
#       1. nvidia-smi; builds test_cuda_ops + bench_cuda from source with nvcc (sm_90), the full
#          `make CUDA=1` when pkg-config finds the host libraries; falls back to the carried binaries
#       2. test_cuda_ops (every op vs the CPU backend, both precisions)
#       3. every request of tests/corpus/requests through `clef decide` with "raw": true on
#          --device cpu, --device cuda --precision fp32 and --precision fast (tiny checkpoint):
#          fp32 bar max |dp| <= 1e-5, fast bar max |dp| <= 2e-3 and the same argmax per question,
#          error bodies byte-identical
#       4. bench_cuda (synthetic 9B: prefill at 436 / 2048 / 16384 tokens, 16-record throughput,
#          per-op times incl. delta_rule.A / .B), fast and fp32, with the newest kernels and again
#          at 436 / 2048 with the previous run's (CLEF_CUDA_ATTN=simt CLEF_CUDA_DELTA=v2)
#     Everything lands in $OUT (<= 8 files): summary.txt, device-check.log, build.log,
#     test_cuda_ops.txt, corpus.json, bench.jsonl, nvidia-smi.txt.
#
# The device tool call (from the repo root, after `prep`):
#   run(command="bash tools/device-check.sh", carry=["build-cuda/devcheck"], timeout_s=540)
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-run}
DC=build-cuda/devcheck
PKGS="oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif"

if [ "$mode" = prep ]; then
  set -e
  jobs=${JOBS:-2}
  make CUDA=1 BUILD=build-cuda -j"$jobs" all   # every arch (80 89 90): the -Werror build check
  # the carried binaries for the device's arch only ($DEVCHECK_ARCHS, default 90 = H200): with all
  # three archs they are ~3x bigger (31 MB instead of ~20 MB carried)
  DB=build-cuda/dc
  make CUDA=1 CUDA_ARCHS="${DEVCHECK_ARCHS:-90}" BUILD=$DB -j"$jobs" $DB/clef $DB/tests/test_cuda_ops $DB/bench/bench_cuda
  rm -rf "$DC"
  mkdir -p "$DC/bin" "$DC/lib"
  cp $DB/clef $DB/tests/test_cuda_ops $DB/bench/bench_cuda "$DC/bin/"
  strip --strip-debug "$DC"/bin/* 2>/dev/null || true
  # shared libraries beyond glibc / the toolchain runtime / CUDA (those are on the GPU machine)
  for b in "$DC"/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | while read -r so; do
    case "$(basename "$so")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*) ;;
      *) cp -L "$so" "$DC/lib/" ;;
    esac
  done
  [ -f models/tiny/tokenizer.json ] || { echo "prep: models/tiny missing (make tiny)" >&2; exit 1; }
  gzip -9 -c models/tiny/tokenizer.json > "$DC/tokenizer.json.gz"
  cp models/tiny/tokenizer_config.json models/tiny/manifest.sha256 "$DC/"
  for b in "$DC"/bin/*; do objdump -T "$b" | grep -o 'GLIBC_[0-9.]*' ; done | sort -uV | tail -1 > "$DC/glibc-needed.txt"
  git rev-parse HEAD > "$DC/commit.txt" 2>/dev/null || echo "(no git)" > "$DC/commit.txt"
  du -sh "$DC"
  echo "prep done: now run(command=\"bash tools/device-check.sh\", carry=[\"$DC\"], timeout_s=540)"
  exit 0
fi

# ------------------------------------------------------------------------------------- device side
OUT=${OUT:-$root/build-cuda/devcheck-out}
mkdir -p "$OUT"
LOG=$OUT/device-check.log
SUM=$OUT/summary.txt
: > "$LOG"; : > "$SUM"
T0=$SECONDS
say() { echo "$*" | tee -a "$SUM"; }
log() { echo "[$((SECONDS - T0))s] $*" >> "$LOG"; }
export PATH=/usr/local/cuda/bin:$PATH
# The newest kernels, whether a device run has verified them yet or not (the library's defaults are
# the verified ones: src/compute/cuda/cuda_ops.h); test_cuda_ops selects its own.
export CLEF_CUDA_ATTN=${CLEF_CUDA_ATTN:-v3} CLEF_CUDA_DELTA=${CLEF_CUDA_DELTA:-v3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# CUDA libraries: the toolkit's, else the pip wheels next to PyTorch
extra_ld="$root/$DC/lib:$CUDA_HOME/lib64"
for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, s, "lib") for s in ("cublas", "cuda_runtime", "cu13")))' 2>/dev/null); do
  [ -d "$d" ] && extra_ld="$extra_ld:$d"
done
export LD_LIBRARY_PATH="$extra_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

{ nvidia-smi; nvidia-smi -q -d CLOCK,MEMORY | head -60; nvcc --version; } > "$OUT/nvidia-smi.txt" 2>&1
say "device-check $(cat "$DC/commit.txt" 2>/dev/null || git rev-parse HEAD 2>/dev/null) on $(nvidia-smi -L 2>/dev/null | head -1)"

# ---- 1. build
BLD=build-dev
BIN_CLEF="" BIN_TEST="" BIN_BENCH=""
carried_ok=0
if [ -z "${DEVCHECK_BUILD:-}" ] && [ -x "$DC/bin/test_cuda_ops" ] && ! ldd "$DC"/bin/* 2>&1 | grep -q 'not found'; then
  carried_ok=1   # the binaries built by `prep` run here: skip the device build (a minute of device time)
fi
[ $carried_ok = 1 ] && echo "carried binaries resolve every library: no device build (DEVCHECK_BUILD=1 forces one)" > "$OUT/build.log"
[ $carried_ok = 1 ] || {
  echo "== build on the device ($(nproc) cores)"
  if pkg-config --exists $PKGS 2>/dev/null; then
    echo "pkg-config finds the host libraries: full make CUDA=1"
    timeout 300 make CUDA=1 CUDA_ARCHS=90 BUILD=$BLD -j"$(nproc)" all && {
      BIN_CLEF=$BLD/clef BIN_TEST=$BLD/tests/test_cuda_ops BIN_BENCH=$BLD/bench/bench_cuda; }
  else
    echo "host libraries missing (pkg-config $PKGS): building only test_cuda_ops and bench_cuda"
    mkdir -p $BLD/mini
    ok=1
    for f in src/compute/cuda/*.cu; do
      o=$BLD/mini/$(basename "$f" .cu).cu.o
      nvcc -std=c++17 -O3 -lineinfo -fmad=false -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc -c "$f" -o "$o" &
    done
    wait
    for f in src/compute/cuda/*.cu; do [ -f $BLD/mini/$(basename "$f" .cu).cu.o ] || ok=0; done
    # every C source that compiles without the host libraries (the rest is not needed by these two)
    for f in $(find src -name '*.c' -not -path 'src/cli/*' | sort); do
      o=$BLD/mini/$(echo "$f" | tr / _).o
      cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -DCLEF_HAVE_CUDA -c "$f" -o "$o" 2>/dev/null &
    done
    wait
    rm -f $BLD/mini/libmini.a
    ar rcs $BLD/mini/libmini.a $BLD/mini/*.o
    L="-L$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt -lm -pthread"
    if [ $ok = 1 ] && cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -Itests/unit -DCLEF_HAVE_CUDA \
         tests/unit/test_cuda_ops.c $BLD/mini/libmini.a -o $BLD/test_cuda_ops $L \
       && cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -DCLEF_HAVE_CUDA \
         bench/bench_cuda.c $BLD/mini/libmini.a -o $BLD/bench_cuda $L; then
      BIN_TEST=$BLD/test_cuda_ops BIN_BENCH=$BLD/bench_cuda
    fi
  fi
} > "$OUT/build.log" 2>&1
if [ $carried_ok = 1 ]; then say "build: carried binaries used"
elif [ -n "$BIN_TEST" ]; then say "build: ok on the device ($((SECONDS - T0))s)"
else say "build: FAILED on the device (build.log); using the carried binaries"; fi
[ -n "$BIN_CLEF" ] || BIN_CLEF=$DC/bin/clef
[ -n "$BIN_TEST" ] || BIN_TEST=$DC/bin/test_cuda_ops
[ -n "$BIN_BENCH" ] || BIN_BENCH=$DC/bin/bench_cuda
for b in "$BIN_CLEF" "$BIN_TEST" "$BIN_BENCH"; do
  if [ ! -x "$b" ]; then say "missing binary $b (run tools/device-check.sh prep here and carry $DC)"; fi
  ldd "$b" 2>/dev/null | grep -q 'not found' && { say "unresolved libraries in $b:"; ldd "$b" | grep 'not found' | tee -a "$SUM"; }
done
log "binaries: $BIN_CLEF $BIN_TEST $BIN_BENCH"

# ---- 2. op tests
timeout 120 "$BIN_TEST" > "$OUT/test_cuda_ops.txt" 2>&1
rc=$?
say "test_cuda_ops: exit $rc ($((SECONDS - T0))s): $(tail -n 1 "$OUT/test_cuda_ops.txt")"
grep -E 'worst rel' "$OUT/test_cuda_ops.txt" | tee -a "$SUM" > /dev/null
grep -c 'FAIL' "$OUT/test_cuda_ops.txt" | sed 's/^/op comparisons over their bar: /' | tee -a "$SUM" > /dev/null

# ---- 3. corpus: cpu vs cuda fp32 vs cuda fast on the tiny checkpoint
MODEL=models/tiny
if [ ! -f $MODEL/config.json ]; then
  MODEL=/tmp/clef-tiny
  rm -rf $MODEL && mkdir -p $MODEL
  gzip -dc "$DC/tokenizer.json.gz" > $MODEL/tokenizer.json
  cp "$DC/tokenizer_config.json" $MODEL/
  python3 tools/reference/write_tiny.py $MODEL >> "$LOG" 2>&1
  if (cd $MODEL && sha256sum -c --quiet "$root/$DC/manifest.sha256") >> "$LOG" 2>&1; then
    say "tiny checkpoint regenerated: sha256 matches models/tiny's manifest"
  else
    say "tiny checkpoint regenerated: sha256 DIFFERS from models/tiny's manifest (cpu vs cuda still compare like with like)"
  fi
fi
REQ=/tmp/clef-req; RES=/tmp/clef-res
rm -rf $REQ $RES && mkdir -p $REQ $RES/cpu $RES/fp32 $RES/fast
python3 - "$REQ" tests/corpus/requests/*.json <<'EOF'
import json, os, sys
out = sys.argv[1]
for p in sys.argv[2:]:
    b = open(p, "rb").read()
    try:
        d = json.loads(b)
        if isinstance(d, dict) and isinstance(d.get("questions"), dict):
            d["raw"] = True
            b = json.dumps(d, ensure_ascii=False).encode()
    except Exception:
        pass
    open(os.path.join(out, os.path.basename(p)), "wb").write(b)
EOF
export CLEF_CUDA_POOL_MB=256
run_all() { # name, decide flags...
  local name=$1; shift
  ls $REQ | xargs -P "${JOBS:-8}" -I{} sh -c "$BIN_CLEF decide --model $MODEL --threads 2 --allow-image-paths $* --request $REQ/{} > $RES/$name/{} 2> $RES/$name/{}.err; echo \$? > $RES/$name/{}.rc"
}
t=$SECONDS; timeout 120 bash -c "$(declare -f run_all); REQ=$REQ RES=$RES BIN_CLEF=$BIN_CLEF MODEL=$MODEL; run_all cpu --device cpu"
log "corpus cpu: $((SECONDS - t))s"
t=$SECONDS; timeout 120 bash -c "$(declare -f run_all); REQ=$REQ RES=$RES BIN_CLEF=$BIN_CLEF MODEL=$MODEL; run_all fp32 --device cuda --precision fp32"
log "corpus cuda fp32: $((SECONDS - t))s"
t=$SECONDS; timeout 120 bash -c "$(declare -f run_all); REQ=$REQ RES=$RES BIN_CLEF=$BIN_CLEF MODEL=$MODEL; run_all fast --device cuda --precision fast"
log "corpus cuda fast: $((SECONDS - t))s"
python3 - "$REQ" "$RES" "$OUT/corpus.json" <<'EOF' | tee -a "$SUM"
import json, os, sys
req, res, out = sys.argv[1:4]
def load(mode, name):
    p = os.path.join(res, mode, name)
    try:
        rc = int(open(p + ".rc").read().strip() or -1)
    except Exception:
        rc = None
    try:
        body = open(p, "rb").read().strip()
    except Exception:
        body = b""
    try:
        err = open(p + ".err", "rb").read().decode("utf-8", "replace")[-400:]
    except Exception:
        err = ""
    return rc, body, err
def probs(body):
    d = json.loads(body)
    out = {}
    for qn, a in (d.get("answers") or d).items() if isinstance(d, dict) else []:
        if isinstance(a, dict) and isinstance(a.get("raw"), dict):
            out[qn] = {k: float(v) for k, v in a["raw"].items() if isinstance(v, (int, float))}
    return out
rows, bad = [], {"fp32": 0, "fast": 0}
worst = {"fp32": 0.0, "fast": 0.0}
compared = 0
for name in sorted(os.listdir(req)):
    rc0, b0, e0 = load("cpu", name)
    row = {"request": name, "cpu_rc": rc0}
    try:
        p0 = probs(b0) if rc0 == 0 else None
    except Exception as ex:
        p0 = None
        row["cpu_parse"] = str(ex)
    for mode, bar in (("fp32", 1e-5), ("fast", 2e-3)):
        rc1, b1, e1 = load(mode, name)
        r = {"rc": rc1}
        ok = True
        if rc0 != 0 or p0 is None:
            ok = (rc1 == rc0 and b1 == b0)
            r["same_body"] = b1 == b0
        else:
            try:
                p1 = probs(b1)
            except Exception as ex:
                p1, ok = None, False
                r["parse"] = str(ex)
                r["stderr"] = e1
            if p1 is not None:
                md, argmax_ok, n = 0.0, True, 0
                if set(p1) != set(p0):
                    ok = False
                for q in p0:
                    a, b = p0[q], p1.get(q, {})
                    for k in a:
                        if k in b:
                            md = max(md, abs(a[k] - b[k])); n += 1
                        else:
                            ok = False
                    if a and b and max(a, key=a.get) != max(b, key=b.get):
                        argmax_ok = False
                r.update({"max_dp": md, "argmax_equal": argmax_ok, "n_probs": n})
                worst[mode] = max(worst[mode], md)
                ok = ok and md <= bar and (mode == "fp32" or argmax_ok) and n > 0
        r["ok"] = ok
        if not ok:
            bad[mode] += 1
            r["stderr"] = e1
        row[mode] = r
    if rc0 == 0 and p0:
        compared += 1
    rows.append(row)
json.dump({"requests": len(rows), "with_probabilities": compared, "failures": bad, "worst_max_dp": worst,
           "bars": {"fp32": 1e-5, "fast": 2e-3}, "rows": rows}, open(out, "w"), indent=1)
print(f"corpus: {len(rows)} requests, {compared} with probabilities; cuda fp32: worst max|dp| {worst['fp32']:.3e} "
      f"(bar 1e-5), {bad['fp32']} failing; cuda fast: worst max|dp| {worst['fast']:.3e} (bar 2e-3, argmax equal), "
      f"{bad['fast']} failing")
EOF

# ---- 4. benchmark (synthetic 9B): the newest kernels, then the previous run's ones (SIMT attention
#         for fp32, delta rule v2 = kernel A v1) at 436 / 2048 only, for the side-by-side; 16k
#         prefills once each (--long-reps 1). Run 2026-11-30b measured the older ones already.
timeout 100 "$BIN_BENCH" --precision both --tokens 436,2048,16384 --reps 3 --long-reps 1 --records 16 \
  > "$OUT/bench.jsonl" 2>> "$LOG"
say "bench_cuda (new kernels): exit $? ($((SECONDS - T0))s)"
timeout 40 env CLEF_CUDA_ATTN=simt CLEF_CUDA_DELTA=v2 \
  "$BIN_BENCH" --precision both --tokens 436,2048 --reps 1 --records 0 >> "$OUT/bench.jsonl" 2>> "$LOG"
say "bench_cuda (previous kernels: attn=simt, delta=v2): exit $? ($((SECONDS - T0))s)"
python3 - "$OUT/bench.jsonl" <<'EOF'  | tee -a "$SUM"
import json, sys
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except Exception:
        pass
for d in rows:
    if d.get("kind") == "prefill":
        print("  prefill %-4s %-30s %6d tok: %9.1f ms %9.0f tok/s %7.1f TFLOP/s (%.1f%% of peak) finite=%s" % (
            d["precision"], d.get("kernels", "?"), d["tokens"], d["seconds"] * 1e3, d["tokens_per_s"], d["tflops"],
            d["peak_pct"], d["last_row_finite"]))
    elif d.get("kind") == "throughput":
        print("  throughput %-4s %-30s %d x %d tok: %.1f records/s, %.0f tok/s" % (
            d["precision"], d.get("kernels", "?"), d["records"], d["tokens_each"], d["records_per_s"], d["tokens_per_s"]))
# per-op kernel time of the three big ops, new vs old
ops = {}
for d in rows:
    if d.get("kind") == "kernel" and d["op"] in ("linear", "delta_rule", "delta_rule.A", "delta_rule.B", "attention"):
        ops[(d["precision"], d["tokens"], d["op"], d.get("kernels", "?"))] = d["ms"]
for (p, t, op, k), ms in sorted(ops.items()):
    print("  kernel %-4s %6d %-12s %-30s %9.2f ms" % (p, t, op, k, ms))
EOF
say "total $((SECONDS - T0))s"
cat "$SUM"
