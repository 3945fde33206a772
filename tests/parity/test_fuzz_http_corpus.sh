#!/usr/bin/env bash
# fuzz/fuzz_http.c (the HTTP request path of `clef serve` in-process: the guard, libmicrohttpd, the
# handlers; see the file) run once over the committed corpus fuzz/corpus/http and the inputs fuzzing
# has found (fuzz/regress/http, when there). Deterministic: libFuzzer executes each file once and
# stops. Built here with clang's libFuzzer + ASan + UBSan; skipped (77) where clang cannot link one.
set -u
cd "$(dirname "$0")/../.."
. tests/parity/fuzz_suite.sh # replayed once, not in every suite
command -v clang >/dev/null || { echo "no clang: the fuzz target is not built"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pkgs="oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif zlib libavformat libavcodec libswscale libavutil"
# the playground's assets as C arrays (src/serve/playground.c includes them): the Makefile makes them
make -s build/gen/serve/web_assets.h >"$dir/gen.log" 2>&1 || { cat "$dir/gen.log"; exit 1; }
# shellcheck disable=SC2046
if ! clang -std=c11 -D_GNU_SOURCE -g -O0 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -Isrc -Ibuild/gen $(pkg-config --cflags $pkgs) fuzz/fuzz_http.c \
    $(find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/compute/cuda/*' | sort) \
    $(pkg-config --libs $pkgs) -lm -pthread -o "$dir/fuzz_http" >"$dir/build.log" 2>&1; then
  if grep -q -i "fuzzer" "$dir/build.log" && grep -q -i "cannot find\|no such file" "$dir/build.log"; then
    echo "clang has no libFuzzer runtime here"; exit 77
  fi
  tail -n 40 "$dir/build.log"; exit 1
fi
inputs=(fuzz/corpus/http/*)
[ -d fuzz/regress/http ] && inputs+=(fuzz/regress/http/*)
n=${#inputs[@]}
"$dir/fuzz_http" -rss_limit_mb=4096 "${inputs[@]}" >"$dir/run.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then tail -n 40 "$dir/run.log"; echo "fuzz_http failed on a fixed input (exit $rc)"; exit 1; fi
ran=$(grep -c "^Running: " "$dir/run.log")
[ "$ran" -eq "$n" ] || { echo "ran $ran of $n inputs"; exit 1; }
echo "fuzz_http: $ran fixed inputs, every invariant held"
