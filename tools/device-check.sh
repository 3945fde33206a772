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
#                                  build-cuda/devcheck; about 2.5 minutes (must stay < 200 s; the
#                                  optional steps 6-7 are skipped past 150 / 160 s):
#       1. nvidia-smi; the carried binaries (a device build only when they do not load there, or
#          DEVCHECK_BUILD=1): test_cuda_ops + bench_cuda from source with nvcc (sm_90), the full
#          `make CUDA=1` when pkg-config finds the host libraries
#       2. test_cuda_ops (every op vs the CPU backend in fp32 / fast / bf16; packed segments vs each
#          segment alone bit for bit, states in / out, resume = uninterrupted; CUDA graphs = eager bits)
#       3. corpus: every request of tests/corpus/requests through `clef decide` with "raw": true on
#          --device cpu and --device cuda --precision fp32 / fast / bf16 (tiny checkpoint): fp32 bar
#          max |dp| <= 1e-5, fast bar 2e-3 and the same argmax, error bodies byte-identical; bf16 has
#          no bar: its max |dp| and argmax agreement (vs the CPU and vs cuda fp32) are the figures
#       4. packed on the device: the corpus (one line per request) through `clef batch` (packed
#          forwards, the state cache) with CLEF_DEVICE=cpu, and cuda fp32 / fast, line by line
#       5. bench_cuda (synthetic 9B), newest kernels (CLEF_CUDA_ATTN=v4 CLEF_CUDA_DELTA=v4): fast and
#          bf16 at 436 / 2048 / 16384 tokens (reps 3, 16k once) with per-op times and MFU, 16 x 436
#          records one after another and packed into one forward; fp32 at 436 / 2048
#       6. CUDA graphs: fast at 436 / 2048 and 16 x 436 packed with --graph 1 (replayed forwards)
#       7. other kernels side by side: by default the oldest (CLEF_CUDA_ATTN=simt CLEF_CUDA_DELTA=v2),
#          fast and fp32 at 436 / 2048; $DEVCHECK_PREV_ATTN, _DELTA, _PRECISION, _TOKENS choose (e.g.
#          CLEF_CUDA_ATTN=v4 for the whole run and DEVCHECK_PREV_ATTN=v3 DEVCHECK_PREV_PRECISION=bf16)
#       8. with DEVCHECK_NCU=1: Nsight Compute on chosen kernels (ncu.txt)
#     Everything lands in $OUT (8 files at most come back): summary.txt, device-check.log (with the
#     build log at its end), test_cuda_ops.txt, corpus.json, batch.json, bench.jsonl, nvidia-smi.txt,
#     ncu.txt.
#
# The device tool call (from the repo root, after `prep`):
#   run(command="bash tools/device-check.sh", carry=["build-cuda/devcheck"], timeout_s=540)
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-run}
DC=build-cuda/devcheck
PKGS="oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif"  # VIDEO=0 builds: no FFmpeg

if [ "$mode" = prep ]; then
  set -e
  jobs=${JOBS:-2}
  make CUDA=1 BUILD=build-cuda -j"$jobs" all   # every arch (80 89 90): the -Werror build check
  # the carried binaries for the device's arch only ($DEVCHECK_ARCHS, default 90 = H200): with all
  # three archs they are ~3x bigger (31 MB instead of ~20 MB carried)
  DB=build-cuda/dc
  # VIDEO=0: without FFmpeg, whose codec libraries (~160 MB) are over what a device call may carry;
  # the corpus's video requests are then refused alike on cpu and cuda (the tower runs for images)
  make CUDA=1 VIDEO=0 CUDA_ARCHS="${DEVCHECK_ARCHS:-90}" BUILD=$DB -j"$jobs" $DB/clef $DB/tests/test_cuda_ops $DB/bench/bench_cuda
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
export CLEF_CUDA_ATTN=${CLEF_CUDA_ATTN:-v4} CLEF_CUDA_DELTA=${CLEF_CUDA_DELTA:-v4}
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
    timeout 300 make CUDA=1 VIDEO=0 CUDA_ARCHS=90 BUILD=$BLD -j"$(nproc)" all && {
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
      cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -DCLEF_HAVE_CUDA -DCLEF_NO_VIDEO -c "$f" -o "$o" 2>/dev/null &
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
timeout 90 "$BIN_TEST" > "$OUT/test_cuda_ops.txt" 2>&1
rc=$?
say "test_cuda_ops: exit $rc ($((SECONDS - T0))s): $(tail -n 1 "$OUT/test_cuda_ops.txt")"
grep -E 'worst rel|^graph ' "$OUT/test_cuda_ops.txt" | tee -a "$SUM" > /dev/null
grep -c 'FAIL' "$OUT/test_cuda_ops.txt" | sed 's/^/op comparisons over their bar: /' | tee -a "$SUM" > /dev/null
grep -E 'CHECK failed' "$OUT/test_cuda_ops.txt" | head -5 | tee -a "$SUM" > /dev/null

# ---- 3. corpus: cpu vs cuda fp32 / fast / bf16 on the tiny checkpoint
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
rm -rf $REQ $RES && mkdir -p $REQ $RES/cpu $RES/fp32 $RES/fast $RES/bf16 $RES/batch
python3 - "$REQ" "$RES/batch/in.jsonl" tests/corpus/requests/*.json <<'PYEOF'
import json, os, sys
out, jl = sys.argv[1], sys.argv[2]
with open(jl, "wb") as f:
    for p in sys.argv[3:]:
        b = open(p, "rb").read()
        try:
            d = json.loads(b)
            if isinstance(d, dict) and isinstance(d.get("questions"), dict):
                d["raw"] = True
                b = json.dumps(d, ensure_ascii=False).encode()
        except Exception:
            pass
        open(os.path.join(out, os.path.basename(p)), "wb").write(b)
        # the batch input: one request per line (a body with a newline inside is not one line: skipped)
        if b"\n" not in b.strip():
            f.write(b.strip() + b"\n")
PYEOF
export CLEF_CUDA_POOL_MB=256
run_all() { # name, parallel jobs, decide flags...
  local name=$1 jobs=$2; shift 2
  ls $REQ | xargs -P "$jobs" -I{} sh -c "$BIN_CLEF decide --model $MODEL --threads 2 --allow-image-paths $* --request $REQ/{} > $RES/$name/{} 2> $RES/$name/{}.err; echo \$? > $RES/$name/{}.rc"
}
for mode in cpu fp32 fast bf16; do
  t=$SECONDS
  if [ $mode = cpu ]; then flags="--device cpu"; jobs=8; else flags="--device cuda --precision $mode"; jobs=16; fi
  timeout 45 bash -c "$(declare -f run_all); REQ=$REQ RES=$RES BIN_CLEF=$BIN_CLEF MODEL=$MODEL; run_all $mode $jobs $flags"
  log "corpus $mode: $((SECONDS - t))s"
done
python3 - "$REQ" "$RES" "$OUT/corpus.json" <<'PYEOF' | tee -a "$SUM"
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
def compare(p0, p1):
    md, n, agree, qs, missing = 0.0, 0, 0, 0, set(p1) != set(p0)
    for q in p0:
        a, b = p0[q], p1.get(q, {})
        for k in a:
            if k in b:
                md = max(md, abs(a[k] - b[k])); n += 1
            else:
                missing = True
        if a and b:
            qs += 1
            agree += max(a, key=a.get) == max(b, key=b.get)
    return md, n, agree, qs, missing
BARS = {"fp32": 1e-5, "fast": 2e-3, "bf16": None}   # bf16: measured, no bar
rows, bad = [], {m: 0 for m in BARS}
worst = {m: 0.0 for m in BARS}
agree_tot = {m: [0, 0] for m in BARS}
bf16_vs_fp32 = {"worst_max_dp": 0.0, "argmax_agree": 0, "questions": 0}
compared = 0
for name in sorted(os.listdir(req)):
    rc0, b0, e0 = load("cpu", name)
    row = {"request": name, "cpu_rc": rc0}
    try:
        p0 = probs(b0) if rc0 == 0 else None
    except Exception as ex:
        p0 = None
        row["cpu_parse"] = str(ex)
    parsed = {}
    for mode, bar in BARS.items():
        rc1, b1, e1 = load(mode, name)
        r = {"rc": rc1}
        ok = True
        if rc0 != 0 or p0 is None:
            ok = (rc1 == rc0 and b1 == b0)
            r["same_body"] = b1 == b0
        else:
            try:
                p1 = probs(b1)
                parsed[mode] = p1
            except Exception as ex:
                p1, ok = None, False
                r["parse"] = str(ex)
            if p1 is not None:
                md, n, agree, qs, missing = compare(p0, p1)
                r.update({"max_dp": md, "argmax_equal": agree == qs, "argmax_agree": agree, "questions": qs, "n_probs": n})
                worst[mode] = max(worst[mode], md)
                agree_tot[mode][0] += agree
                agree_tot[mode][1] += qs
                ok = ok and not missing and n > 0 and (bar is None or (md <= bar and (mode == "fp32" or agree == qs)))
        r["ok"] = ok
        if not ok:
            bad[mode] += 1
            r["stderr"] = e1
        row[mode] = r
    if "bf16" in parsed and "fp32" in parsed:
        md, n, agree, qs, _ = compare(parsed["fp32"], parsed["bf16"])
        bf16_vs_fp32["worst_max_dp"] = max(bf16_vs_fp32["worst_max_dp"], md)
        bf16_vs_fp32["argmax_agree"] += agree
        bf16_vs_fp32["questions"] += qs
    if rc0 == 0 and p0:
        compared += 1
    rows.append(row)
json.dump({"requests": len(rows), "with_probabilities": compared, "failures": bad, "worst_max_dp": worst,
           "argmax_agree": agree_tot, "bf16_vs_cuda_fp32": bf16_vs_fp32,
           "bars": {"fp32": 1e-5, "fast": 2e-3, "bf16": "none (measured)"}, "rows": rows}, open(out, "w"), indent=1)
print(f"corpus: {len(rows)} requests, {compared} with probabilities")
print(f"  cuda fp32: worst max|dp| {worst['fp32']:.3e} (bar 1e-5), {bad['fp32']} failing")
print(f"  cuda fast: worst max|dp| {worst['fast']:.3e} (bar 2e-3, argmax equal), {bad['fast']} failing; "
      f"argmax {agree_tot['fast'][0]}/{agree_tot['fast'][1]} questions")
print(f"  cuda bf16: worst max|dp| {worst['bf16']:.3e} vs cpu, argmax agreement {agree_tot['bf16'][0]}/{agree_tot['bf16'][1]} "
      f"questions; vs cuda fp32: {bf16_vs_fp32['worst_max_dp']:.3e}, {bf16_vs_fp32['argmax_agree']}/"
      f"{bf16_vs_fp32['questions']}; {bad['bf16']} requests with a missing answer or a different error body")
PYEOF

# ---- 4. packed forwards on the device: clef batch (the serving engine's packing and state cache)
for mode in cpu fp32 fast; do
  t=$SECONDS
  if [ $mode = cpu ]; then envs="CLEF_DEVICE=cpu"; else envs="CLEF_DEVICE=cuda CLEF_PRECISION=$mode"; fi
  timeout 30 env $envs "$BIN_CLEF" batch --model $MODEL --threads 8 --restart "$RES/batch/in.jsonl" "$RES/batch/$mode.jsonl" \
    > "$RES/batch/$mode.log" 2>&1
  log "batch $mode: exit $? $((SECONDS - t))s: $(tail -n 2 "$RES/batch/$mode.log" | tr '\n' ' ')"
done
python3 - "$RES/batch" "$OUT/batch.json" <<'PYEOF' | tee -a "$SUM"
import json, os, sys
d, out = sys.argv[1:3]
def lines(m):
    try:
        return open(os.path.join(d, m + ".jsonl"), "rb").read().splitlines()
    except Exception:
        return []
def probs(b):
    try:
        j = json.loads(b)
    except Exception:
        return None
    o = {}
    for qn, a in (j.get("answers") or j).items() if isinstance(j, dict) else []:
        if isinstance(a, dict) and isinstance(a.get("raw"), dict):
            o[qn] = {k: float(v) for k, v in a["raw"].items() if isinstance(v, (int, float))}
    return o
ref = lines("cpu")
res = {"lines": len(ref)}
for mode, bar in (("fp32", 1e-5), ("fast", 2e-3)):
    got = lines(mode)
    md, bad, argmax_bad = 0.0, 0, 0
    for a, b in zip(ref, got):
        pa, pb = probs(a), probs(b)
        if not pa or pb is None:
            bad += a != b   # errors and answers without probabilities: the same bytes
            continue
        for q in pa:
            x, y = pa[q], pb.get(q, {})
            if set(x) != set(y):
                bad += 1
                continue
            for k in x:
                md = max(md, abs(x[k] - y[k]))
            if x and max(x, key=x.get) != max(y, key=y.get):
                argmax_bad += 1
    bad += abs(len(ref) - len(got))
    ok = bad == 0 and md <= bar and (mode == "fp32" or argmax_bad == 0) and len(got) == len(ref) > 0
    res[mode] = {"lines": len(got), "worst_max_dp": md, "argmax_differ": argmax_bad, "mismatched": bad, "ok": ok}
    print(f"batch (packed) cuda {mode}: {len(got)}/{len(ref)} lines, worst max|dp| {md:.3e} vs the cpu batch (bar {bar:g}), "
          f"{argmax_bad} argmax differ, {bad} mismatched lines: {'ok' if ok else 'FAIL'}")
json.dump(res, open(out, "w"), indent=1)
PYEOF

# ---- 5. benchmark (synthetic 9B), newest kernels
bench() { # timeout, args...
  local t=$1; shift
  timeout "$t" "$BIN_BENCH" "$@" >> "$OUT/bench.jsonl" 2>> "$LOG"
  say "bench_cuda $* ${EXTRA:-}: exit $? ($((SECONDS - T0))s)"
}
: > "$OUT/bench.jsonl"
bench 45 --precision fast --tokens 436,2048,16384 --reps 3 --long-reps 1 --records 16 --packed 16
bench 40 --precision bf16 --tokens 436,2048,16384 --reps 3 --long-reps 1 --records 0 --packed 16
bench 25 --precision fp32 --tokens 436,2048 --reps 1 --records 0
# ---- 6. CUDA graphs (replays), 7. the previous run's kernels: while the budget allows
if [ $((SECONDS - T0)) -lt 150 ]; then
  EXTRA="(graphs)" bench 20 --precision fast --tokens 436,2048 --reps 5 --records 0 --packed 16 --graph 1
else say "graphs: skipped (over 150 s)"; fi
if [ $((SECONDS - T0)) -lt 160 ]; then
  keep_attn=$CLEF_CUDA_ATTN keep_delta=$CLEF_CUDA_DELTA
  export CLEF_CUDA_ATTN=${DEVCHECK_PREV_ATTN:-simt} CLEF_CUDA_DELTA=${DEVCHECK_PREV_DELTA:-v2}
  EXTRA="(attn=$CLEF_CUDA_ATTN delta=$CLEF_CUDA_DELTA)" bench 25 --precision "${DEVCHECK_PREV_PRECISION:-both}" \
    --tokens "${DEVCHECK_PREV_TOKENS:-436,2048}" --reps 1 --records 0
  export CLEF_CUDA_ATTN=$keep_attn CLEF_CUDA_DELTA=$keep_delta
else say "previous kernels: skipped (over 160 s)"; fi
python3 - "$OUT/bench.jsonl" <<'PYEOF'  | tee -a "$SUM"
import json, sys
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except Exception:
        pass
for d in rows:
    g = " graph" if d.get("graph") else ""
    if d.get("kind") == "prefill":
        print("  prefill %-4s %-30s%s %6d tok: %9.1f ms %8.0f tok/s  MFU %5.1f%%  issued %5.1f%%  linear %7.1f ms at %5.1f%%  "
              "kernels %8.1f ms finite=%s" % (
            d["precision"], d.get("kernels", "?"), g, d["tokens"], d["seconds"] * 1e3, d["tokens_per_s"],
            d.get("mfu_pct", d.get("peak_pct", 0)), d.get("issued_pct", 0), d.get("linear_ms", 0), d.get("linear_pct", 0),
            d.get("kernel_ms", 0), d["last_row_finite"]))
    elif d.get("kind") in ("throughput", "packed"):
        print("  %-10s %-4s %-30s%s %d x %d tok: %.1f records/s, %.0f tok/s" % (
            d["kind"], d["precision"], d.get("kernels", "?"), g, d["records"], d["tokens_each"], d["records_per_s"],
            d["tokens_per_s"]))
    elif d.get("kind") == "device" and (d.get("graph_captured") or d.get("graph_unsafe")):
        print("  graphs %-4s: captured %d, replayed %d, fell back %d, kept eager %d (%s), pools %.0f MiB" % (
            d["precision"], d["graph_captured"], d["graph_replayed"], d["graph_fallbacks"], d["graph_unsafe"],
            d.get("graph_unsafe_why", ""), d.get("graph_pool_bytes", 0) / 2**20))
# per-op kernel time of the big ops (ms per forward, TFLOP/s of the issued work), eager runs only
ops = {}
for d in rows:
    if d.get("kind") == "kernel" and not d.get("graph") and d["op"] in (
            "linear", "delta_rule", "delta_rule.A", "delta_rule.B", "attention", "conv1d_silu"):
        ops[(d["precision"], d["tokens"], d["op"], d.get("kernels", "?"))] = (d["ms"], d.get("tflops", 0))
for (p, t, op, k), (ms, tf) in sorted(ops.items()):
    print("  kernel %-4s %6d %-12s %-30s %9.2f ms %7.1f TFLOP/s" % (p, t, op, k, ms, tf))
PYEOF
# ---- 8. (DEVCHECK_NCU=1) Nsight Compute on the kernels named by $DEVCHECK_NCU_KERNELS (a regex; default
# the delta rule's and the bf16 attention), the first $DEVCHECK_NCU_COUNT launches (default 7: layers 0-2
# kernels A and B and layer 3's attention) of a 2,048-token bf16 forward: speed of light, occupancy, warp stalls, memory; into ncu.txt (<= 60 s)
if [ -n "${DEVCHECK_NCU:-}" ] && [ $((SECONDS - T0)) -lt 200 ]; then
  if command -v ncu >/dev/null; then
    timeout 90 ncu --target-processes all -k "regex:${DEVCHECK_NCU_KERNELS:-k_delta|k_attention_bf16}" \
      -c "${DEVCHECK_NCU_COUNT:-7}" --section SpeedOfLight --section LaunchStats --section Occupancy \
      --section WarpStateStats --section MemoryWorkloadAnalysis \
      "$BIN_BENCH" --precision bf16 --tokens 2048 --reps 1 --records 0 > "$OUT/ncu.txt" 2>&1
    say "ncu: exit $? ($((SECONDS - T0))s), $(grep -c 'k_' "$OUT/ncu.txt") kernel lines in ncu.txt"
  else say "ncu: not found"; fi
fi
say "total $((SECONDS - T0))s"
# at most 8 files come back: the build log joins device-check.log
{ echo "== build.log"; cat "$OUT/build.log"; } >> "$LOG" 2>/dev/null && rm -f "$OUT/build.log"
cat "$SUM"
