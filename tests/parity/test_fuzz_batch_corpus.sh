#!/usr/bin/env bash
# fuzz/fuzz_batch.c (clef batch's resume decision, src/cli/batch_resume.c, on real files: OUT as its
# own file, a hard link or a symlink to IN, the record OUT.clef-batch absent, matching or not, torn and
# junk lines; see the file for its invariants) run once over the committed corpus fuzz/corpus/batch
# and the inputs fuzzing has found (fuzz/regress/batch, when there). Deterministic: libFuzzer executes
# each file once and stops. Then, with models/tiny, its second mode (-DCLEF_FUZZ_BATCH_RUN: the whole
# verb in-process on the tiny model, each input run, rerun, cut and resumed) over fuzz/corpus/batch-run.
# Built here with clang's libFuzzer + ASan + UBSan; skipped (77) where clang cannot link one.
set -u
cd "$(dirname "$0")/../.."
. tests/parity/fuzz_suite.sh # replayed once, not in every suite
command -v clang >/dev/null || { echo "no clang: the fuzz target is not built"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! clang -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -Iinclude -Isrc fuzz/fuzz_batch.c src/cli/batch_resume.c src/base/buf.c \
    src/base/err.c src/base/json.c src/base/json_render.c src/base/sha256.c src/base/utf8.c src/base/pyfmt.c -lm \
    -o "$dir/fuzz_batch" >"$dir/build.log" 2>&1; then
  if grep -q -i "fuzzer" "$dir/build.log" && grep -q -i "cannot find\|no such file" "$dir/build.log"; then
    echo "clang has no libFuzzer runtime here"; exit 77
  fi
  tail -n 40 "$dir/build.log"; exit 1
fi
inputs=(fuzz/corpus/batch/*)
[ -d fuzz/regress/batch ] && inputs+=(fuzz/regress/batch/*)
n=${#inputs[@]}
[ "$n" -gt 0 ] || { echo "no inputs in fuzz/corpus/batch"; exit 1; }
TMPDIR="$dir" "$dir/fuzz_batch" -rss_limit_mb=2048 "${inputs[@]}" >"$dir/run.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -n 40 "$dir/run.log"; echo "fuzz_batch failed on a fixed input (exit $rc)"; exit 1; fi
ran=$(grep -c "^Running: " "$dir/run.log")
[ "$ran" -eq "$n" ] || { echo "ran $ran of $n inputs"; exit 1; }
[ -f models/tiny/config.json ] || { echo "fuzz_batch: $ran fixed inputs; no models/tiny: the run mode is skipped"; exit 0; }
pkgs="oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif zlib libavformat libavcodec libswscale libavutil"
make -s build/gen/serve/web_assets.h >"$dir/gen.log" 2>&1 || { cat "$dir/gen.log"; exit 1; }
# The library's files with ASan + UBSan like the target, but without libFuzzer's coverage
# instrumentation (-fsanitize=fuzzer on them): it only guides mutation, a replay of fixed inputs never
# reads it, and it was a fifth of this test's time. Compiled in $dir/obj (their base names differ).
root=$(pwd)
mkdir -p "$dir/obj"
# shellcheck disable=SC2046
(cd "$dir/obj" && clang -c -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
  -DCLEF_FUZZ_BATCH_RUN -I"$root/include" -I"$root/src" -I"$root/build/gen" $(pkg-config --cflags $pkgs) \
  "$root/src/cli/batch_resume.c" "$root/src/cli/cmd_batch.c" "$root/src/cli/cli_opts.c" \
  $(find "$root/src" -name '*.c' -not -path "$root/src/cli/*" -not -path "$root/src/compute/cuda/*" | sort)) \
  >"$dir/build_run.log" 2>&1 || { tail -n 40 "$dir/build_run.log"; exit 1; }
# shellcheck disable=SC2046
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DCLEF_FUZZ_BATCH_RUN -Iinclude -Isrc -Ibuild/gen $(pkg-config --cflags $pkgs) fuzz/fuzz_batch.c "$dir"/obj/*.o \
  $(pkg-config --libs $pkgs) -lm -pthread -o "$dir/fuzz_batch_run" >>"$dir/build_run.log" 2>&1 \
  || { tail -n 40 "$dir/build_run.log"; exit 1; }
rin=(fuzz/corpus/batch-run/*)
[ -d fuzz/regress/batch-run ] && rin+=(fuzz/regress/batch-run/*)
rn=${#rin[@]}
TMPDIR="$dir" CLEF_FUZZ_MODEL=models/tiny "$dir/fuzz_batch_run" -rss_limit_mb=4096 "${rin[@]}" >"$dir/run_run.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -n 40 "$dir/run_run.log"; echo "fuzz_batch (run mode) failed on a fixed input (exit $rc)"; exit 1; fi
rran=$(grep -c "^Running: " "$dir/run_run.log")
[ "$rran" -eq "$rn" ] || { echo "run mode: ran $rran of $rn inputs"; exit 1; }
echo "fuzz_batch: $ran fixed inputs (decision) and $rran (the verb on models/tiny), every invariant held"
