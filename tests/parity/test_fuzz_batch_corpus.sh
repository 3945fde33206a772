#!/usr/bin/env bash
# fuzz/fuzz_batch.c (clef batch's resume decision, src/cli/batch_resume.c, on real files: OUT as its
# own file, a hard link or a symlink to IN, the record OUT.clef-batch absent, matching or not, torn and
# junk lines; see the file for its invariants) run once over the committed corpus fuzz/corpus/batch
# and the inputs fuzzing has found (fuzz/regress/batch, when there). Deterministic: libFuzzer executes
# each file once and stops. Built here with clang's libFuzzer + ASan + UBSan; skipped (77) where clang
# cannot link one.
set -u
cd "$(dirname "$0")/../.."
command -v clang >/dev/null || { echo "no clang: the fuzz target is not built"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if ! clang -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -Iinclude -Isrc fuzz/fuzz_batch.c src/cli/batch_resume.c src/base/buf.c \
    src/base/err.c src/base/json.c src/base/sha256.c src/base/utf8.c src/base/pyfmt.c -lm \
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
echo "fuzz_batch: $ran fixed inputs, every invariant held"
