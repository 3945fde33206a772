#!/usr/bin/env bash
# The CUDA backend's device check (docs/cuda.md "Running the device check"; the command the next
# session runs: docs/device-runs/README.md). Three modes:
#
#   tools/device-check.sh prep     HERE (no GPU needed): builds clef / test_cuda_ops / bench_cuda with
#                                  `make CUDA=1 VIDEO=0 CUDA_ARCHS=90` into build-cuda/dc and fills
#                                  build-cuda/devcheck/ (~11 MB, carried to the device) with them (xz), the
#                                  shared libraries they need beyond glibc and CUDA, the tiny checkpoint's
#                                  tokenizer (gzip) and manifest, and ref/: the CPU's answers to the corpus
#                                  (`clef batch --device cpu`, and `clef decide` for the spot checks), the
#                                  served step's requests (a text request of exactly 436 input tokens, an
#                                  image request). DEVCHECK_PREP_ALL_ARCHS=1 also builds every arch
#                                  (`make CUDA=1 BUILD=build-cuda`, the -Werror check CI does too).
#   tools/device-check.sh [run]    THERE (the device tool's machine, $OUT set), carrying build-cuda/devcheck:
#       env       nvidia-smi; the device's name, clocks, power, temperature (nvidia-smi.txt)
#       build     the carried binaries (a device build only when they do not load there, or DEVCHECK_BUILD=1)
#       ops       test_cuda_ops (every op vs the CPU backend in fp32 / fast / bf16; packed = alone bits,
#                 states, resume, graphs = eager bits)
#       corpus    the tiny checkpoint regenerated (write_tiny.py, checked against the carried manifest); the
#                 corpus through `clef batch` once per precision (cuda fp32 / fast / bf16: packed forwards,
#                 the state cache) and a few `clef decide` spot checks, against the carried CPU answers:
#                 fp32 max |dp| <= 1e-5, fast <= 2e-3 and the same argmax, error bodies byte-identical,
#                 bf16 measured (corpus.json)
#       bench     bench_cuda (synthetic 9B shape), the defaults: fast and bf16 at 436 / 2,048 / 16,384
#                 tokens and 16 x 436 packed, fp32 at 436 / 2,048; per-op times (bench.jsonl)
#       served    a 9B-shape checkpoint written on the device (device_check.py make-full, ~19 GB, values
#                 repeated: for timing only); `clef bench --device cuda --precision bf16` (the engine's text
#                 forward and the joint head); `clef serve --device cuda --precision bf16 --state-cache-mb 0`
#                 timed from the socket (device_check.py client): one client with 436-token requests for
#                 $DEVCHECK_SERVE_SECONDS, 16 clients, one client with an image request (the tower)
#       graphs    bf16 with --graph 1 (replayed forwards)
#       variants  $DEVCHECK_VARIANTS side by side with the defaults (below), the defaults again after them
#       ncu       with DEVCHECK_NCU=1: Nsight Compute on $DEVCHECK_NCU_KERNELS (ncu.txt)
#   tools/device-check.sh bench    THERE: only the benchmark A/B: the defaults, each of $DEVCHECK_VARIANTS,
#                                  the defaults again ($DEVCHECK_BENCH_PRECISION, default bf16; tokens
#                                  $DEVCHECK_BENCH_TOKENS, default 436,2048,16384; 16 x 436 packed).
#
# Variants: DEVCHECK_VARIANTS="CLEF_CUDA_DELTA=v4 CLEF_CUDA_DELTA=v5,CLEF_CUDA_ATTN=v3": variants are
# separated by spaces, a variant's VAR=VALUE settings by commas; each runs bench_cuda with them.
# Time: every step runs under `timeout` (its own limit); the script tracks a total budget
# ($DEVCHECK_BUDGET seconds, default 300 for run, 240 for bench) and skips a step when less than half its
# limit is left, so a call with timeout_s = budget + 120 always returns its files. summary.txt is written
# as the steps end: a killed call still brings back what was done. Every bench and served figure has the
# GPU's name, SM / memory clocks, power and temperature sampled before and after its step (bench.jsonl
# "kind":"gpu" lines; the summary prints them beside the figures).
# Files in $OUT (at most 8 come back): summary.txt, device-check.log (+ build and serve logs),
# test_cuda_ops.txt, corpus.json, bench.jsonl, nvidia-smi.txt, ncu.txt.
# DEVCHECK_DRY=1: the whole control flow on a machine without a GPU, with stand-ins
# (tools/device_check.py stub) for nvidia-smi, test_cuda_ops, bench_cuda, clef and ncu;
# DEVCHECK_DRY_HANG=NAME makes the steps whose name contains NAME hang (their timeouts fire);
# DEVCHECK_TIMEOUT_PCT scales every step's limit (tests/parity/test_device_check.sh uses both).
# DEVCHECK_SKIP="served graphs ...": steps not to run (by name, as the summary prints them).
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-run}
DC=${DEVCHECK_DC:-build-cuda/devcheck}
PY="python3 $root/tools/device_check.py"
PKGS="oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif"  # VIDEO=0 builds: no FFmpeg
SPOT=${DEVCHECK_SPOT:-t001 t055 m001 e045}   # name prefixes of the corpus requests also sent through `clef decide`

# ------------------------------------------------------------------------------------------ prep
# The CPU's answers and the served step's requests, made with the carried clef on the CPU ($1).
prep_reference() {
  local clef=$1 ref=$DC/ref model=models/tiny keep=build-cuda/devcheck-ref-kept
  rm -rf "$ref" && mkdir -p "$ref/spot"
  $PY corpus-input tests/corpus/requests "$ref/corpus.jsonl"
  # DEVCHECK_REUSE_REF=1: the previous prep's cpu batch answers when the corpus is the same (the batch
  # takes minutes on a busy 2-core machine; only a change to the CPU backend or the engine changes them)
  if [ -n "${DEVCHECK_REUSE_REF:-}" ] && cmp -s "$keep/corpus.jsonl" "$ref/corpus.jsonl"; then
    cp "$keep/cpu-batch.jsonl" "$ref/" && echo "prep: cpu batch answers reused (DEVCHECK_REUSE_REF=1)"
  else
    "$clef" batch --model $model --device cpu --threads "${JOBS:-2}" --restart --allow-errors "$ref/corpus.jsonl" "$ref/cpu-batch.jsonl" \
      > "$ref/cpu-batch.log" 2>&1 || { cat "$ref/cpu-batch.log" >&2; return 1; }
    rm -f "$ref/cpu-batch.jsonl.clef-batch"
  fi
  rm -rf "$keep" && mkdir -p "$keep" && cp "$ref/corpus.jsonl" "$ref/cpu-batch.jsonl" "$keep/"
  local p i n rc
  for p in $SPOT; do
    i=$(grep -n "^$p" "$ref/corpus.jsonl.names" | head -1 | cut -d: -f1)
    [ -n "$i" ] || { echo "prep: no corpus request starts with $p" >&2; return 1; }
    n=$(sed -n "${i}p" "$ref/corpus.jsonl.names"); n=${n%.json}
    sed -n "${i}p" "$ref/corpus.jsonl" > "$ref/spot/$n.req"
    rc=0
    "$clef" decide --model $model --device cpu --threads "${JOBS:-2}" --request "$ref/spot/$n.req" > "$ref/spot/$n.json" 2>/dev/null || rc=$?
    echo $rc > "$ref/spot/$n.rc"
  done
  $PY calibrate "$clef" $model tests/corpus/requests/t001_basic.json 436 "$ref/serve-436.json"
  tr -d '\n' < tests/corpus/requests/m001_rgb_640x480_png.json > "$ref/serve-image.json"
  echo >> "$ref/serve-image.json"
  echo "cpu answers by $(git rev-parse --short HEAD 2>/dev/null) on $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1) ($(uname -m))" \
    > "$ref/cpu.txt"
}

if [ "$mode" = prep ]; then
  set -e
  jobs=${JOBS:-2}
  [ -z "${DEVCHECK_PREP_ALL_ARCHS:-}" ] || make CUDA=1 BUILD=build-cuda -j"$jobs" all
  # the carried binaries for the device's arch only ($DEVCHECK_ARCHS, default 90 = H100 / H200: all three
  # archs make them ~3x bigger); VIDEO=0: FFmpeg's codec libraries (~160 MB) are over what a call may
  # carry, so the corpus's video requests are refused alike on cpu and cuda (the tower runs for images)
  DB=build-cuda/dc
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
  LD_LIBRARY_PATH="$root/$DC/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" prep_reference "$DC/bin/clef"
  # binaries and libraries as one xz archive: ~35 MB become ~7 (clef links libcurl for `clef pull`, whose
  # TLS / Kerberos / LDAP closure is most of the libraries); the working tree and the carry share 64 MiB
  tar -C "$DC" -cf - bin lib | xz -6 -T"$jobs" > "$DC/binaries.tar.xz"
  rm -rf "$DC/bin" "$DC/lib"
  du -sh "$DC"
  echo "prep done: now run(command=\"bash tools/device-check.sh\", carry=[\"$DC\"], timeout_s=420)"
  exit 0
fi
case "$mode" in run|bench) ;; *) echo "usage: tools/device-check.sh [prep|run|bench]" >&2; exit 2 ;; esac

# ------------------------------------------------------------------------------------------ device side
export OUT=${OUT:-$root/build-cuda/devcheck-out}
mkdir -p "$OUT"
export LOG=$OUT/device-check.log SUM=$OUT/summary.txt BENCH=$OUT/bench.jsonl
: > "$LOG"; : > "$SUM"; : > "$BENCH"
export T0=$(date +%s) DRY=${DEVCHECK_DRY:-} PCT=${DEVCHECK_TIMEOUT_PCT:-100} RESERVE=${DEVCHECK_RESERVE:-10}
if [ "$mode" = bench ]; then export BUDGET=${DEVCHECK_BUDGET:-240}; else export BUDGET=${DEVCHECK_BUDGET:-300}; fi
export WORK=${DEVCHECK_WORK:-/tmp/clef-devcheck}
rm -rf "$WORK" && mkdir -p "$WORK"
export PY DC root SPOT
case $DC in /*) export dc_abs=$DC ;; *) export dc_abs=$root/$DC ;; esac
now() { echo $(( $(date +%s) - T0 )); }
say() { echo "$*" | tee -a "$SUM"; }
log() { echo "[$(now)s] $*" >> "$LOG"; }
# the GPU's state (name, SM / memory clocks, power, temperature) as a bench.jsonl line: STEP WHEN
gpu_sample() {
  local csv
  csv=$(timeout 10 nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu \
        --format=csv,noheader,nounits 2>/dev/null | head -1)
  $PY gpu "$1" "$2" "${csv:-unavailable}" >> "$BENCH"
}
# step NAME LIMIT FUNCTION [ARGS]: FUNCTION in a child bash under `timeout` (the whole process group is
# killed at the limit), or skipped when less than half of LIMIT is left of the budget; its limit is cut
# to what is left. Returns FUNCTION's status, 124 on a timeout, 125 when skipped.
STEPS_SKIPPED=0 STEPS_TIMED_OUT=0
step() {
  local name=$1 t=$(( $2 * PCT / 100 )) w; shift 2
  [ $t -ge 1 ] || t=1
  for w in ${DEVCHECK_SKIP:-}; do
    [ "$w" != "$name" ] || { say "$name: skipped (DEVCHECK_SKIP)"; return 125; }
  done
  local left=$(( BUDGET - $(now) - RESERVE ))
  if [ $left -lt $(( (t + 1) / 2 )) ]; then
    say "$name: skipped (budget: $(now)s of ${BUDGET}s used, limit ${t}s)"
    STEPS_SKIPPED=$((STEPS_SKIPPED + 1))
    return 125
  fi
  [ $t -le $left ] || t=$left
  local t1 rc
  t1=$(now)
  DEVCHECK_STEP=$name timeout -k 5 $t bash -c '"$@"' "$name" "$@"
  rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    say "$name: TIMED OUT after ${t}s (killed; the next steps go on)"
    STEPS_TIMED_OUT=$((STEPS_TIMED_OUT + 1))
    rc=124
  fi
  log "step $name: exit $rc, $(( $(now) - t1 ))s"
  return $rc
}
export -f now say log gpu_sample

export PATH=/usr/local/cuda/bin:$PATH
if [ -n "$DRY" ]; then  # stand-ins for the GPU programs (tools/device_check.py stub)
  mkdir -p "$WORK/stub"
  for s in nvidia-smi ncu clef bench_cuda test_cuda_ops; do
    printf '#!/bin/sh\nexec python3 %s/tools/device_check.py stub %s "$@"\n' "$root" "$s" > "$WORK/stub/$s"
    chmod +x "$WORK/stub/$s"
  done
  export PATH=$WORK/stub:$PATH
fi
# The newest kernels, whether a device run has verified them yet or not (the library's defaults are the
# verified ones: src/compute/cuda/cuda_ops.h); test_cuda_ops selects its own.
export CLEF_CUDA_ATTN=${CLEF_CUDA_ATTN:-v4} CLEF_CUDA_DELTA=${CLEF_CUDA_DELTA:-v4}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# CUDA libraries: the toolkit's, else the pip wheels next to PyTorch
extra_ld="$dc_abs/lib:$CUDA_HOME/lib64"
for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, s, "lib") for s in ("cublas", "cuda_runtime", "cu13")))' 2>/dev/null); do
  [ -d "$d" ] && extra_ld="$extra_ld:$d"
done
export LD_LIBRARY_PATH="$extra_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

{ timeout 20 nvidia-smi; timeout 20 nvidia-smi -q -d CLOCK,MEMORY,POWER,PERFORMANCE | head -120; nvcc --version; } \
  > "$OUT/nvidia-smi.txt" 2>&1
say "device-check $mode $(cat "$DC/commit.txt" 2>/dev/null || git rev-parse HEAD 2>/dev/null) on $(timeout 10 nvidia-smi -L 2>/dev/null | head -1)${DRY:+ (DRY RUN: stand-ins, no GPU)}"
say "budget ${BUDGET}s; kernels CLEF_CUDA_ATTN=$CLEF_CUDA_ATTN CLEF_CUDA_DELTA=$CLEF_CUDA_DELTA; variants: ${DEVCHECK_VARIANTS:-none}"
gpu_sample start before

# ---- build: the carried binaries (unpacked from prep's archive), else a device build
if [ -z "$DRY" ] && [ -f "$DC/binaries.tar.xz" ] && [ ! -x "$DC/bin/clef" ]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$DC/binaries.tar.xz" "$DC" \
    || say "could not unpack $DC/binaries.tar.xz"
fi
export BIN_CLEF="$DC/bin/clef" BIN_TEST="$DC/bin/test_cuda_ops" BIN_BENCH="$DC/bin/bench_cuda"
if [ -n "$DRY" ]; then
  BIN_CLEF=$WORK/stub/clef BIN_TEST=$WORK/stub/test_cuda_ops BIN_BENCH=$WORK/stub/bench_cuda
  say "build: dry run (stand-ins)"
elif [ -z "${DEVCHECK_BUILD:-}" ] && [ -x "$DC/bin/test_cuda_ops" ] && ! ldd "$DC"/bin/* 2>&1 | grep -q 'not found'; then
  say "build: carried binaries used"   # the binaries built by `prep` run here: no device build (a minute of device time)
else
  build_on_device() {  # test_cuda_ops + bench_cuda (+ clef when pkg-config finds the host libraries), sm_90
    local BLD=build-dev
    echo "== build on the device ($(nproc) cores)"
    if pkg-config --exists $PKGS 2>/dev/null; then
      make CUDA=1 VIDEO=0 CUDA_ARCHS=90 BUILD=$BLD -j"$(nproc)" all || return 1
      cp $BLD/clef $BLD/tests/test_cuda_ops $BLD/bench/bench_cuda $BLD/ && return 0
    fi
    echo "host libraries missing (pkg-config $PKGS): building only test_cuda_ops and bench_cuda"
    mkdir -p $BLD/mini
    local f o ok=1
    for f in src/compute/cuda/*.cu; do
      nvcc -std=c++17 -O3 -lineinfo -fmad=false -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc -c "$f" \
        -o $BLD/mini/$(basename "$f" .cu).cu.o &
    done
    wait
    for f in src/compute/cuda/*.cu; do [ -f $BLD/mini/$(basename "$f" .cu).cu.o ] || ok=0; done
    for f in $(find src -name '*.c' -not -path 'src/cli/*' | sort); do  # what compiles without the host libraries
      cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -DCLEF_HAVE_CUDA -DCLEF_NO_VIDEO -c "$f" \
        -o $BLD/mini/$(echo "$f" | tr / _).o 2>/dev/null &
    done
    wait
    rm -f $BLD/mini/libmini.a && ar rcs $BLD/mini/libmini.a $BLD/mini/*.o
    local L="-L$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart -lstdc++ -ldl -lrt -lm -pthread"
    [ $ok = 1 ] && cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -Itests/unit -DCLEF_HAVE_CUDA \
         tests/unit/test_cuda_ops.c $BLD/mini/libmini.a -o $BLD/test_cuda_ops $L \
      && cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude -Isrc -DCLEF_HAVE_CUDA \
         bench/bench_cuda.c $BLD/mini/libmini.a -o $BLD/bench_cuda $L
  }
  export -f build_on_device
  export PKGS CUDA_HOME
  if step build 240 build_on_device > "$WORK/build.log" 2>&1; then say "build: ok on the device"
  else say "build: FAILED or partial on the device (device-check.log); using what exists"; fi
  [ -x build-dev/test_cuda_ops ] && BIN_TEST=build-dev/test_cuda_ops
  [ -x build-dev/bench_cuda ] && BIN_BENCH=build-dev/bench_cuda
  [ -x build-dev/clef ] && BIN_CLEF=build-dev/clef
fi
for b in "$BIN_CLEF" "$BIN_TEST" "$BIN_BENCH"; do
  [ -x "$b" ] || say "missing binary $b (run tools/device-check.sh prep here and carry $DC)"
  [ -n "$DRY" ] || ! ldd "$b" 2>/dev/null | grep -q 'not found' || { say "unresolved libraries in $b:"; ldd "$b" | grep 'not found' | tee -a "$SUM"; }
done
log "binaries: $BIN_CLEF $BIN_TEST $BIN_BENCH"

# bench_cuda with a label: STEP VARIANT (comma-separated VAR=VALUE or "base") ARGS...; the GPU's state
# before and after; the JSON lines tagged with the step and the variant
bench() {
  local name=$1 variant=$2 envs=()
  shift 2
  [ "$variant" = base ] || [ "$variant" = base-again ] || IFS=, read -r -a envs <<< "$variant"
  gpu_sample "$name" before
  env ${envs[@]+"${envs[@]}"} "$BIN_BENCH" "$@" 2>> "$LOG" | $PY tag "$name" "$variant" >> "$BENCH"
  local rc=${PIPESTATUS[0]}
  gpu_sample "$name" after
  say "$name [$variant]: bench_cuda $* : exit $rc ($(now)s)"
  return $rc
}
export -f bench

# variants: checked here (VAR=VALUE with a plain name; no spaces, as the list is split on them)
VARIANTS=()
for v in ${DEVCHECK_VARIANTS:-}; do
  ok=1
  IFS=, read -r -a kv <<< "$v"
  for a in "${kv[@]}"; do [[ $a =~ ^[A-Z_][A-Z0-9_]*=[A-Za-z0-9_.:-]*$ ]] || ok=0; done
  if [ $ok = 1 ]; then VARIANTS+=("$v"); else say "variant '$v' ignored: not VAR=VALUE[,VAR=VALUE]"; fi
done
run_variants() { # precision tokens packed
  local v i=0
  for v in ${VARIANTS[@]+"${VARIANTS[@]}"}; do
    i=$((i + 1))
    step "variant-$i" 60 bench "variant-$i" "$v" --precision "$1" --tokens "$2" --reps 3 --long-reps 1 --records 0 --packed "$3"
  done
  # the defaults again after the variants: drift (clocks, temperature) shows as base vs base-again
  [ $i = 0 ] || step "base-again" 60 bench base-again base-again --precision "$1" --tokens "$2" --reps 3 --long-reps 1 --records 0 --packed "$3"
}

if [ "$mode" = run ]; then
  # ---- ops
  ops_test() {
    "$BIN_TEST" > "$OUT/test_cuda_ops.txt" 2>&1
    local rc=$?
    say "test_cuda_ops: exit $rc ($(now)s): $(tail -n 1 "$OUT/test_cuda_ops.txt")"
    grep -E 'worst rel|^graph |^gemm topn' "$OUT/test_cuda_ops.txt" | tee -a "$SUM" > /dev/null
    grep -c 'FAIL' "$OUT/test_cuda_ops.txt" | sed 's/^/op comparisons over their bar: /' | tee -a "$SUM" > /dev/null
    grep -E 'CHECK failed' "$OUT/test_cuda_ops.txt" | head -5 | tee -a "$SUM" > /dev/null
    return $rc
  }
  export -f ops_test
  step ops 90 ops_test

  # ---- corpus: the tiny checkpoint (regenerated: 82 MB is over what a call carries), cuda vs the carried cpu answers
  export MODEL=models/tiny REF=$DC/ref RES=$WORK/res
  tiny() {
    [ -f $MODEL/config.json ] && return 0
    [ -n "$DRY" ] && { mkdir -p $MODEL; return 0; }
    rm -rf $MODEL && mkdir -p $MODEL
    gzip -dc "$DC/tokenizer.json.gz" > $MODEL/tokenizer.json
    cp "$DC/tokenizer_config.json" $MODEL/
    python3 tools/reference/write_tiny.py $MODEL >> "$LOG" 2>&1 || return 1
    if (cd $MODEL && sha256sum -c --quiet "$dc_abs/manifest.sha256") >> "$LOG" 2>&1; then
      say "tiny checkpoint regenerated: sha256 matches models/tiny's manifest"
    else
      say "tiny checkpoint regenerated: sha256 DIFFERS from models/tiny's manifest (the carried cpu answers do not apply)"
    fi
  }
  [ -f models/tiny/config.json ] || MODEL=$WORK/tiny
  if [ -n "$DRY" ] && [ ! -f "$REF/cpu-batch.jsonl" ]; then  # no prep here: the stand-in's cpu answers
    REF=$WORK/ref && mkdir -p $REF/spot
    $PY corpus-input tests/corpus/requests $REF/corpus.jsonl > /dev/null
    CLEF_DEVICE=cpu "$BIN_CLEF" batch --model $MODEL --allow-errors $REF/corpus.jsonl $REF/cpu-batch.jsonl 2> /dev/null
    for p in $SPOT; do
      n=$(grep "^$p" $REF/corpus.jsonl.names | head -1); n=${n%.json}
      i=$(grep -n "^$p" $REF/corpus.jsonl.names | head -1 | cut -d: -f1)
      sed -n "${i}p" $REF/corpus.jsonl > $REF/spot/$n.req
      "$BIN_CLEF" decide --model $MODEL --device cpu --request $REF/spot/$n.req > $REF/spot/$n.json
    done
    tr -d '\n' < tests/corpus/requests/t001_basic.json > $REF/serve-436.json
    tr -d '\n' < tests/corpus/requests/m001_rgb_640x480_png.json > $REF/serve-image.json
    echo "dry run: the stand-in's answers" > $REF/cpu.txt
  fi
  [ -f "$REF/cpu-batch.jsonl" ] || say "no carried cpu answers in $REF (run tools/device-check.sh prep here)"
  corpus_batch() { # precision: the whole corpus through one `clef batch` process
    mkdir -p $RES/batch
    env CLEF_DEVICE=cuda CLEF_PRECISION=$1 CLEF_CUDA_POOL_MB=256 "$BIN_CLEF" batch --model $MODEL --threads 8 --restart --allow-errors \
      $REF/corpus.jsonl $RES/batch/$1.jsonl > $RES/batch/$1.log 2>&1
    local rc=$?
    log "batch $1: exit $rc: $(tail -n 1 $RES/batch/$1.log)"
    return $rc
  }
  corpus_spot() { # the spot requests through `clef decide` (one process each, all precisions in parallel)
    local p f
    for p in fp32 fast bf16; do
      mkdir -p $RES/spot/$p
      for f in $REF/spot/*.req; do
        f=$(basename $f .req)
        CLEF_CUDA_POOL_MB=256 "$BIN_CLEF" decide --model $MODEL --threads 2 --device cuda --precision $p \
          --request $REF/spot/$f.req > $RES/spot/$p/$f.json 2> $RES/spot/$p/$f.err &
      done
    done
    wait
  }
  export -f tiny corpus_batch corpus_spot
  if step tiny 60 tiny; then
    for p in fp32 fast bf16; do step "corpus-$p" 40 corpus_batch $p; done
    step corpus-spot 40 corpus_spot
    $PY compare $REF $RES "$OUT/corpus.json" 2>> "$LOG" | tee -a "$SUM"
  else
    say "corpus: skipped (no tiny checkpoint)"
  fi

  # ---- bench: the defaults
  step bench-fast 60 bench bench-fast base --precision fast --tokens 436,2048,16384 --reps 3 --long-reps 1 --records 16 --packed 16
  step bench-bf16 45 bench bench-bf16 base --precision bf16 --tokens 436,2048,16384 --reps 3 --long-reps 1 --records 0 --packed 16
  step bench-fp32 30 bench bench-fp32 base --precision fp32 --tokens 436,2048 --reps 1 --records 0

  # ---- served: a 9B-shape checkpoint; the engine with the head; clef serve timed from the socket
  export FULL
  if [ -n "$DRY" ]; then FULL=$WORK/full
  elif [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2{print $4}')" -gt $((24 * 1024 * 1024)) ] 2>/dev/null; then
    FULL=/dev/shm/clef-full   # in memory: the weights are read at page-cache speed
  else FULL=$WORK/full; fi
  full_checkpoint() {
    rm -rf $FULL && mkdir -p $FULL
    if [ -z "$DRY" ]; then
      $PY make-full $FULL >> "$LOG" 2>&1 || return 1
      gzip -dc "$DC/tokenizer.json.gz" > $FULL/tokenizer.json
      cp "$DC/tokenizer_config.json" $FULL/
    fi
    say "9B-shape checkpoint in $FULL: $(du -sh $FULL 2>/dev/null | cut -f1) ($(now)s)"
  }
  engine_head() { # clef bench: the engine's text forward and the joint head, bf16
    gpu_sample engine before
    "$BIN_CLEF" bench --model $FULL --device cuda --precision bf16 --tokens 436,2048 --repeat 5 --warmup 1 \
      2>> "$LOG" | $PY tag engine base >> "$BENCH"
    local rc=${PIPESTATUS[0]}
    gpu_sample engine after
    say "engine: clef bench --device cuda --precision bf16 --tokens 436,2048: exit $rc ($(now)s)"
    return $rc
  }
  served() { # clef serve on the device; one client, 16 clients, an image request; p50 / p99 from the socket
    local secs=${DEVCHECK_SERVE_SECONDS:-10} port="" i rc=0
    "$BIN_CLEF" serve --model $FULL --device cuda --precision bf16 --port 0 --quiet --no-ui --state-cache-mb 0 \
      --deadline 0 > $WORK/serve.log 2>&1 &
    local pid=$!
    for i in $(seq 1 600); do  # the listening line, then /health = 200 (after the server's warm-up request)
      [ -n "$port" ] || port=$(grep -o '"event":"listening"[^}]*"port":[0-9]*' $WORK/serve.log | grep -o '[0-9]*$' | head -1)
      [ -n "$port" ] && python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" \
        2>/dev/null && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.2
    done
    if ! kill -0 $pid 2>/dev/null || [ -z "$port" ]; then
      say "served: clef serve did not come up (device-check.log)"; { echo "== serve.log"; tail -n 40 $WORK/serve.log; } >> "$LOG"
      kill $pid 2>/dev/null; return 1
    fi
    say "served: clef serve up on port $port ($(now)s)"
    client() { # label clients seconds body label_long
      gpu_sample "served-$1" before
      $PY client $port $2 $3 "$4" "$1" "$5" | $PY tag "served-$1" base >> "$BENCH"
      local rc=${PIPESTATUS[0]}
      gpu_sample "served-$1" after
      return $rc
    }
    $PY client $port 1 1 "$REF/serve-436.json" warm warm > /dev/null   # the first requests of this shape: untimed
    client text 1 $secs "$REF/serve-436.json" "436 tok" || rc=1
    client text16 16 $secs "$REF/serve-436.json" "436 tok, 16 clients" || rc=1
    $PY client $port 1 1 "$REF/serve-image.json" warm warm > /dev/null
    client image 1 $(( (secs + 1) / 2 )) "$REF/serve-image.json" "image 640x480 (m001)" || rc=1
    kill $pid; wait $pid 2>/dev/null
    { echo "== serve.log (tail)"; tail -n 20 $WORK/serve.log; } >> "$LOG"
    return $rc
  }
  export -f full_checkpoint engine_head served
  if step full-checkpoint 150 full_checkpoint; then
    step engine 90 engine_head
    step served 90 served
  else
    say "served: skipped (no 9B-shape checkpoint)"
  fi
  rm -rf /dev/shm/clef-full

  # ---- graphs, variants
  step graphs 30 bench graphs base --precision bf16 --tokens 436,2048 --reps 5 --records 0 --packed 16 --graph 1
  run_variants "${DEVCHECK_BENCH_PRECISION:-bf16}" "${DEVCHECK_BENCH_TOKENS:-436,2048,16384}" 16

  # ---- (DEVCHECK_NCU=1) Nsight Compute on the kernels named by $DEVCHECK_NCU_KERNELS (a regex), the first
  # $DEVCHECK_NCU_COUNT launches of a 2,048-token bf16 forward: speed of light, occupancy, warp stalls, memory
  ncu_step() {
    command -v ncu > /dev/null || { say "ncu: not found"; return 1; }
    ncu --target-processes all -k "regex:${DEVCHECK_NCU_KERNELS:-k_delta|k_attention_bf16}" \
      -c "${DEVCHECK_NCU_COUNT:-7}" --section SpeedOfLight --section LaunchStats --section Occupancy \
      --section WarpStateStats --section MemoryWorkloadAnalysis \
      "$BIN_BENCH" --precision bf16 --tokens 2048 --reps 1 --records 0 > "$OUT/ncu.txt" 2>&1
    local rc=$?
    say "ncu: exit $rc ($(now)s), $(grep -c 'k_' "$OUT/ncu.txt") kernel lines in ncu.txt"
    return $rc
  }
  export -f ncu_step
  [ -z "${DEVCHECK_NCU:-}" ] || step ncu 90 ncu_step
else
  # ---- bench mode: the defaults, each variant, the defaults again
  bp=${DEVCHECK_BENCH_PRECISION:-bf16} bt=${DEVCHECK_BENCH_TOKENS:-436,2048,16384}
  step base 60 bench base base --precision "$bp" --tokens "$bt" --reps 3 --long-reps 1 --records 0 --packed 16
  run_variants "$bp" "$bt" 16
fi

# ---- the figures: bar lines (issue #38), every bench row with its GPU state, variants side by side, per op
say "---- figures (bench.jsonl; GPU state [name; sm/mem MHz, W, C] before and after each step)"
$PY summary "$BENCH" 2>> "$LOG" | tee -a "$SUM" > /dev/null
say "steps timed out: $STEPS_TIMED_OUT, skipped for the budget: $STEPS_SKIPPED"
say "total $(now)s of a ${BUDGET}s budget"
# at most 8 files come back: the build log joins device-check.log
[ -f "$WORK/build.log" ] && { echo "== build.log"; cat "$WORK/build.log"; } >> "$LOG"
cat "$SUM"
