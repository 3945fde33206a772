#!/usr/bin/env bash
# Tokenizer throughput: clef against HF tokenizers (single-threaded), same texts, one run.
#
#   bench/bench_tokenizer.sh [SIZE_BYTES] [REPEAT]     (defaults 2000000, 20)
#
# Texts (bench/bench_tokenizer_texts.py, deterministic): English-like prose, CJK prose, JSON records,
# SIZE bytes each, plus for each the shortest prefix that is a 16,384-token state. Each is one piece
# (add_special_tokens=False). clef: `clef tokenize --file F --bench N` (best of N, wall and CPU
# time; the first run, with cold caches, in parentheses); HF: Tokenizer.encode on one thread
# (RAYON_NUM_THREADS=1), best of the same count, first run on a fresh Tokenizer in parentheses.
# MB/s and Mtok/s are from the best CPU times. Both sides' ids are compared. "states" = the real
# states of the author's fixture (see bench_tokenizer_texts.py).
# Binary: $CLEF_BUILD/clef (default build/clef); model: models/tiny. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-2000000}
REPEAT=${2:-20}
CLEF=${CLEF_BUILD:-build}/clef
PY=.venv-test/bin/python
MODEL=models/tiny
[ -x "$CLEF" ] || { echo "no $CLEF: build first" >&2; exit 2; }
[ -f $MODEL/tokenizer.json ] || { echo "no $MODEL/tokenizer.json: make tiny" >&2; exit 2; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
FIX=../shared/fixtures/clef-flash/fixtures-clef-flash.json
[ -f "$FIX" ] || FIX=/work/shared/fixtures/clef-flash/fixtures-clef-flash.json
$PY bench/bench_tokenizer_texts.py "$D" "$SIZE" "$FIX"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false $PY bench/bench_tokenizer_hf.py $MODEL/tokenizer.json "$D" "$REPEAT" > "$D/hf.txt"

echo "machine: $(lscpu | grep 'Model name' | sed 's/.*: *//'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/bench_tokenizer.sh $SIZE $REPEAT   (clef $(git rev-parse --short HEAD 2>/dev/null || echo ?), tokenizers $($PY -c 'import tokenizers; print(tokenizers.__version__)'))"
echo
echo "| text | bytes | tokens | clef CPU ms (first) | clef MB/s | clef Mtok/s | HF CPU ms (first) | HF MB/s | HF Mtok/s | clef/HF | same ids |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
clef_load=""
for name in english english_state cjk cjk_state json json_state states states_state; do
  f="$D/$name.txt"
  case $name in *_state) n=$REPEAT ;; *) n=3 ;; esac
  err=$("$CLEF" tokenize --model $MODEL --file "$f" --bench "$n" 2>&1 >"$D/$name.clef.json")
  # "load X ms (cpu Y ms); B bytes -> T tokens; best of N: wall W ms, cpu C ms (...)"
  clef_load=$(echo "$err" | sed -n 's/^load \([0-9.]*\) ms (cpu \([0-9.]*\) ms).*/\1 \2/p')
  bytes=$(echo "$err" | sed -n 's/.*; \([0-9]*\) bytes -> \([0-9]*\) tokens.*/\1/p')
  toks=$(echo "$err" | sed -n 's/.*; \([0-9]*\) bytes -> \([0-9]*\) tokens.*/\2/p')
  ccpu=$(echo "$err" | sed -n 's/.*, cpu \([0-9.]*\) ms (.*/\1/p')
  cfirst=$(echo "$err" | sed -n 's/.*first run: wall [0-9.]* ms, cpu \([0-9.]*\) ms.*/\1/p')
  read -r _ _ hbytes htoks hwall hcpu hfirst < <(grep "^hf $name " "$D/hf.txt")
  same=$($PY -c "import json,sys; a=json.load(open(sys.argv[1]))['ids']; b=json.load(open(sys.argv[2])); print('yes' if a==b else 'NO')" "$D/$name.clef.json" "$D/$name.hf.json")
  awk -v n="$name" -v b="$bytes" -v t="$toks" -v c="$ccpu" -v cf="$cfirst" -v h="$hcpu" -v hf="$hfirst" -v s="$same" 'BEGIN {
    hm = h * 1000;
    printf "| %s | %d | %d | %.2f (%.2f) | %.1f | %.2f | %.1f (%.1f) | %.2f | %.3f | %.0fx | %s |\n", n, b, t, c, cf, b / c / 1000, t / c / 1000, hm, hf * 1000, b / hm / 1000, t / hm / 1000, hm / c, s }'
done
read -r _ _ hlw hlc < <(grep "^hf load" "$D/hf.txt")
read -r clw clc <<<"$clef_load"
echo
echo "load tokenizer.json (20 MB): clef ${clw} ms wall / ${clc} ms CPU; HF Tokenizer.from_file $(awk -v x="$hlw" 'BEGIN{printf "%.0f", x*1000}') ms wall / $(awk -v x="$hlc" 'BEGIN{printf "%.0f", x*1000}') ms CPU"
