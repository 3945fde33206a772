#!/usr/bin/env bash
# tools/device-check.sh cannot rot between device runs (issue #38 item 1): its dry run (DEVCHECK_DRY=1:
# stand-ins for nvidia-smi, test_cuda_ops, bench_cuda, clef and ncu from tools/device_check.py stub) runs
# the whole control flow here, without a GPU, and the summary must have its shape:
#   1. run mode with two variants: every step ran, the corpus lines (clef batch per precision, spot checks),
#      the bar lines of issue #38 with the GPU's state beside them, the served lines, the variants table,
#      no timeout and no skip; at most 8 files in $OUT, each with a name the device tool brings back;
#   2. bench mode with a hanging variant and a 40 s budget: that step TIMED OUT within the budget, the
#      steps after it were skipped for the budget (or by name, DEVCHECK_SKIP), the summary was still
#      written, in time.
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v timeout > /dev/null || { echo "skip: no timeout(1)"; exit 77; }
# nothing here runs the build folder's code (the dry run's stand-ins are Python): once per suite
case "${CLEF_BUILD:-}" in *-asan) echo "skip: runs no code of the sanitizer build (the optimized suite runs it)"; exit 77 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # description, regex, file
  if grep -Eq -- "$2" "$3"; then echo "ok: $1"; else echo "FAIL: $1 (no line matching '$2' in $(basename "$3"))"; fail=1; fi
}
absent() {
  if grep -Eq -- "$2" "$3"; then echo "FAIL: $1 ('$2' in $(basename "$3"))"; grep -E -- "$2" "$3" | head -3; fail=1; else echo "ok: $1"; fi
}

# ---- 1. run mode, two variants
out=$tmp/run
DEVCHECK_DRY=1 DEVCHECK_DC=$tmp/no-prep OUT=$out DEVCHECK_WORK=$tmp/work1 DEVCHECK_SERVE_SECONDS=1 \
  DEVCHECK_VARIANTS="CLEF_CUDA_DELTA=v4 CLEF_CUDA_DELTA=v5,CLEF_CUDA_ATTN=v4 CLEF_CUDA_GEMM_TOPN=8 bad;variant" \
  bash tools/device-check.sh run > $tmp/run.stdout 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: dry run exited $rc"; tail -20 $tmp/run.stdout; fail=1; }
S=$out/summary.txt
[ -s "$S" ] || { echo "FAIL: no summary.txt"; cat $tmp/run.stdout | tail -20; exit 1; }
check "first line names the commit and the device" '^device-check run .* on .*DRY RUN' "$S"
check "test_cuda_ops line" '^test_cuda_ops: exit 0 ' "$S"
for p in fp32 fast; do
  check "corpus batch $p within its bar" "^corpus \(clef batch\) cuda $p: 142/142 lines, worst max\|dp\| [0-9.e+-]+ vs cpu \(bar .*0 failing: ok$" "$S"
done
check "corpus batch bf16 measured" '^corpus \(clef batch\) cuda bf16: 142/142 lines, worst max\|dp\| 1\.000e-03 vs cpu \(no bar: measured\)' "$S"
check "bf16 vs cuda fp32" '^corpus \(clef batch\) cuda bf16 vs cuda fp32: worst max\|dp\| ' "$S"
check "spot checks" '^spot \(clef decide\) cuda fast: 4/4 ok' "$S"
G='\[DRY stub GPU; before sm 1980 / mem 2619 MHz, 123.45 W, 41 C; after sm 1980 / mem 2619 MHz, 123.45 W, 41 C\]'
check "bar bf16 436" "^bf16 436 tok: [0-9]+\.[0-9] ms \(bar 11\)( over)? $G$" "$S"
check "bar bf16 16384" "^bf16 16384 tok: [0-9]+\.[0-9] ms \(bar 450\)" "$S"
check "bar fast 436" "^fast 436 tok: [0-9]+\.[0-9] ms \(bar 20\)" "$S"
check "bar fast 16384" "^fast 16384 tok: [0-9]+\.[0-9] ms \(bar 900\)" "$S"
check "bar bf16 packed" "^bf16 16 x 436 packed: [0-9]+ tok/s \(bar 45000\)" "$S"
check "served one client with its bar" '^served bf16 436 tok: p50 [0-9.]+ ms, p99 [0-9.]+ ms, 1 client, [1-9][0-9]* requests, 0 errors, .*mean 436.0 tokens \(bar p50 25\)' "$S"
check "served 16 clients" '^served bf16 436 tok, 16 clients: p50 [0-9.]+ ms, p99 [0-9.]+ ms, 16 clients' "$S"
check "served image" '^served bf16 image 640x480 \(m001\): p50 ' "$S"
check "engine with the head" '^engine \(clef bench\) bf16 436 tok: text [0-9.]+ ms, head [0-9.]+ ms' "$S"
check "the bad variant refused" "^variant 'bad;variant' ignored" "$S"
check "variants table" '^  CLEF_CUDA_DELTA=v5,CLEF_CUDA_ATTN=v4 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+$' "$S"
check "the GEMM choice's figures" '^  gemm top8 bf16 CLEF_CUDA_GEMM_TOPN=8: 8 shapes tuned, 3 picked another than the first; one call of each: 900.0 us first -> 850.0 us picked$' "$S"
check "baseline again after the variants" '^  base-again +[0-9.]+ ' "$S"
check "per-op rows per variant" '^  kernel bf16 +436 delta_rule +base [0-9.]+  CLEF_CUDA_DELTA=v4 [0-9.]+' "$S"
check "no timeouts, no skips" '^steps timed out: 0, skipped for the budget: 0$' "$S"
check "total last" '^total [0-9]+s of a 300s budget$' <(tail -n 1 "$S")
absent "no not-measured bar" 'not measured' "$S"
n=$(find "$out" -type f | wc -l)
[ "$n" -le 8 ] && echo "ok: $n files in OUT (at most 8 come back)" || { echo "FAIL: $n files in OUT (> 8)"; fail=1; }
bad=$(find "$out" -mindepth 1 | sed "s|^$out/||" | grep -Ev '^[A-Za-z0-9._-]+$' || true)
[ -z "$bad" ] && echo "ok: OUT's names come back" || { echo "FAIL: names the device tool would not bring back: $bad"; fail=1; }
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["batch"]["fast"]["failing"] == 0 and d["spot"]["bf16"]["n"] == 4' \
  "$out/corpus.json" && echo "ok: corpus.json" || { echo "FAIL: corpus.json"; fail=1; }
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gpu = [r for r in rows if r["kind"] == "gpu"]
steps = {r["step"] for r in rows if r["kind"] in ("prefill", "served", "summary")}
missing = [s for s in steps if not any(g["step"] == s and g["when"] == w for g in gpu for w in ("before", "after"))]
assert steps and not missing, missing' "$out/bench.jsonl" && echo "ok: every figure's step has GPU samples before and after" \
  || { echo "FAIL: bench.jsonl lacks GPU samples"; fail=1; }

# ---- 2. bench mode: a hanging step times out, the budget skips the rest, the summary is written
out=$tmp/bench
t0=$(date +%s)
# The bench steps' limit (60 s) scaled to 40 s = the budget: the baseline runs (at least half its limit
# is left unless the setup took over 20 s), the hanging variant gets what is left and times out, and the
# steps after it find the budget spent, however fast or loaded this machine is.
DEVCHECK_DRY=1 DEVCHECK_DC=$tmp/no-prep OUT=$out DEVCHECK_WORK=$tmp/work2 DEVCHECK_TIMEOUT_PCT=67 DEVCHECK_BUDGET=40 \
  DEVCHECK_RESERVE=0 DEVCHECK_DRY_HANG=variant-1 DEVCHECK_SKIP=variant-3 DEVCHECK_VARIANTS="CLEF_CUDA_DELTA=v5 CLEF_CUDA_DELTA=v4 CLEF_CUDA_ATTN=v3" \
  bash tools/device-check.sh bench > $tmp/bench.stdout 2>&1
rc=$? took=$(( $(date +%s) - t0 ))
S=$out/summary.txt
[ $rc = 0 ] || { echo "FAIL: dry bench exited $rc"; fail=1; }
check "bench mode header" '^device-check bench .* budget 40s' <(tr '\n' ' ' < "$S")
check "baseline ran" '^base \[base\]: bench_cuda --precision bf16 ' "$S"
check "the hanging variant timed out within the budget" '^variant-1: TIMED OUT after [0-9]+s' "$S"
check "the step after it skipped for the budget" '^variant-2: skipped \(budget: ' "$S"
check "the baseline's rerun skipped for the budget" '^base-again: skipped \(budget: ' "$S"
check "a step skipped by name" '^variant-3: skipped \(DEVCHECK_SKIP\)$' "$S"
check "counts" '^steps timed out: 1, skipped for the budget: 2$' "$S"
check "bar line still written" '^bf16 436 tok: [0-9.]+ ms \(bar 11\)' "$S"
check "total last" '^total [0-9]+s of a 40s budget$' <(tail -n 1 "$S")
[ $took -le 60 ] && echo "ok: the budgeted run took ${took}s" || { echo "FAIL: the budgeted run took ${took}s (budget 40 s)"; fail=1; }
exit $fail
