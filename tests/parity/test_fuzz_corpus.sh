#!/usr/bin/env bash
# fuzz/fuzz_request.c (the request's host side with its invariants, see the file) run once over
# fixed inputs: the corpus requests (tests/corpus/requests) and the inputs fuzzing has found
# (fuzz/regress/request); then fuzz/fuzz_video.c (src/video under small limits) over the fixture clips
# (tests/fixtures/video) and fuzz/regress/video. Deterministic: libFuzzer executes each file once and stops. Built here with
# clang's libFuzzer + ASan + UBSan; skipped (77) where clang cannot link a fuzzer.
set -u
cd "$(dirname "$0")/../.."
. tests/parity/fuzz_suite.sh # replayed once, not in every suite
tok=models/tiny/tokenizer.json
[ -f "$tok" ] || { echo "no $tok (make tiny)"; exit 77; }
command -v clang >/dev/null || { echo "no clang: the fuzz target is not built"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pkgs="oniguruma libutf8proc libpng libjpeg libwebp libwebpdemux libgif libavformat libavcodec libswscale libavutil"
# shellcheck disable=SC2046
if ! clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -Isrc $(pkg-config --cflags $pkgs) fuzz/fuzz_request.c src/decision/*.c src/text/*.c src/image/*.c src/video/*.c \
    src/base/*.c $(pkg-config --libs $pkgs) -lm -pthread \
    -o "$dir/fuzz_request" >"$dir/build.log" 2>&1; then
  if grep -q -i "fuzzer" "$dir/build.log" && grep -q -i "cannot find\|no such file" "$dir/build.log"; then
    echo "clang has no libFuzzer runtime here"; exit 77
  fi
  cat "$dir/build.log"; exit 1
fi
n=$(ls tests/corpus/requests/*.json fuzz/regress/request/* | wc -l)
CLEF_FUZZ_TOKENIZER=$tok "$dir/fuzz_request" -rss_limit_mb=2048 tests/corpus/requests/*.json fuzz/regress/request/* \
  >"$dir/run.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -n 40 "$dir/run.log"; echo "fuzz_request failed on a fixed input (exit $rc)"; exit 1; fi
ran=$(grep -c "^Running: " "$dir/run.log")
[ "$ran" -eq "$n" ] || { echo "ran $ran of $n inputs"; exit 1; }
echo "fuzz_request: $ran fixed inputs, every invariant held"
# shellcheck disable=SC2046
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc $(pkg-config --cflags $pkgs) fuzz/fuzz_video.c src/video/*.c src/image/*.c src/base/err.c \
  src/base/buf.c src/base/bufpool.c src/base/sha256.c src/base/pyfmt.c $(pkg-config --libs $pkgs) -lm -pthread \
  -o "$dir/fuzz_video" >"$dir/build_video.log" 2>&1 || { cat "$dir/build_video.log"; exit 1; }
vin=$(ls tests/fixtures/video/*.mp4 tests/fixtures/video/*.mkv tests/fixtures/video/*.webm tests/fixtures/video/*.avi \
  tests/fixtures/video/*.h264 tests/fixtures/video/*.m4v fuzz/regress/video/*)
n=$(echo "$vin" | wc -l)
# shellcheck disable=SC2086
"$dir/fuzz_video" -rss_limit_mb=2048 $vin >"$dir/run_video.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -n 40 "$dir/run_video.log"; echo "fuzz_video failed on a fixed input (exit $rc)"; exit 1; fi
ran=$(grep -c "^Running: " "$dir/run_video.log")
[ "$ran" -eq "$n" ] || { echo "fuzz_video: ran $ran of $n inputs"; exit 1; }
echo "fuzz_video: $ran fixed inputs, every invariant held"
