#!/usr/bin/env bash
# Builds the benchmarks into build-bench/ (the main Makefile does not build bench/):
#   bench/build.sh            -> build-bench/bench_peak, bench_amx_ceiling, bench_gemm, bench_mixers
# Uses the library from `make` (build/libclef.a), building it first when missing.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -f "$BUILD/libclef.a" ] || make -s BUILD="$BUILD" "$BUILD/libclef.a"
mkdir -p build-bench
CC=${CC:-cc}
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -g -march=x86-64-v2 -mtune=native -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function -pthread -Isrc"
$CC $CFLAGS bench/bench_peak.c "$BUILD/libclef.a" -o build-bench/bench_peak -lm -pthread
$CC $CFLAGS bench/bench_amx_ceiling.c "$BUILD/libclef.a" -o build-bench/bench_amx_ceiling -lm -pthread
# bench_mixers compares with the scalar references the unit test uses (tests/unit/ref_mixers.c)
$CC $CFLAGS -Itests/unit bench/bench_mixers.c tests/unit/ref_mixers.c "$BUILD/libclef.a" -o build-bench/bench_mixers -lm -pthread
# bench_gemm also measures the AVX512_BF16 kernel, which lives here, not in the library
BLAS_CFLAGS=$(pkg-config --cflags openblas 2>/dev/null || true)
BLAS_LIBS=$(pkg-config --libs openblas 2>/dev/null || true)
if [ -n "$BLAS_LIBS" ]; then
  $CC $CFLAGS -DHAVE_OPENBLAS $BLAS_CFLAGS bench/bench_gemm.c bench/gemm_avx512bf16.c "$BUILD/libclef.a" -o build-bench/bench_gemm $BLAS_LIBS -lm -pthread
else
  echo "openblas not found (pkg-config openblas): bench_gemm built without the cblas_sgemm comparison" >&2
  $CC $CFLAGS bench/bench_gemm.c bench/gemm_avx512bf16.c "$BUILD/libclef.a" -o build-bench/bench_gemm -lm -pthread
fi
echo "built build-bench/bench_peak build-bench/bench_amx_ceiling build-bench/bench_gemm build-bench/bench_mixers"
