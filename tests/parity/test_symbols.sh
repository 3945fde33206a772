#!/usr/bin/env bash
# Every global symbol that the internal archive ($CLEF_BUILD/libclef.a: what the CLI, the tests and
# the fuzzers link) defines carries the clef_ prefix (issue #20 item 5), so that a program linking
# the library, or any one of its objects, never meets a name of ours it did not ask for. The shipped
# libraries are checked by test_install.sh; this checks the archive every build makes, the sanitizer
# build's too (its instrumentation's own symbols start with "__" and are left out), and the CUDA
# build's: its C++ lives in the namespace clefcu (mangled _ZN6clefcu..., and nvcc's launch stubs
# _Z<n>__device_stub__ZN6clefcu...), the C++ spelling of the prefix; weak symbols (W, V, u: the
# standard library's template instantiations, merged by the linker) are left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${CLEF_BUILD:-$(pwd)/build}
lib="$build/libclef.a"
[ -f "$lib" ] || { echo "skip: no $lib (make builds it)"; exit 77; }
command -v nm >/dev/null || { echo "skip: no nm"; exit 77; }
syms=$(nm -g --defined-only "$lib" | awk 'NF >= 3 && $2 !~ /^[WVu]$/ { print $3 }' | grep -v '^__' | sort -u)
n=$(printf '%s\n' "$syms" | grep -c . || true)
[ "$n" -gt 50 ] || { echo "FAIL: only $n global symbols read from $lib: nm's output not understood"; exit 1; }
bad=$(printf '%s\n' "$syms" | grep -v -E '^(clef_|_ZN6clefcu|_Z[0-9]+__device_stub__ZN6clefcu)' || true)
if [ -n "$bad" ]; then
  echo "FAIL: global symbols of $lib without the clef_ prefix:"
  printf '  %s\n' $bad
  exit 1
fi
echo "ok: $n global symbols in $(basename "$build")/libclef.a, all clef_ (or clefcu:: in C++)"
