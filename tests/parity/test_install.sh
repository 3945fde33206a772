#!/usr/bin/env bash
# `make install` into a temporary prefix, then what a user of the installed clef does:
#   - the files: bin/clef, lib/libclef.so.X.Y.Z with its soname links, lib/libclef.a,
#     include/clef.h, lib/pkgconfig/clef.pc (DESTDIR staging keeps PREFIX in clef.pc);
#   - nm -D --defined-only libclef.so and nm --defined-only -g libclef.a show only clef_ symbols,
#     exactly the functions include/clef.h declares (a declaration without CLEF_API goes missing);
#   - a C and a C++ program (tests/parity/install/) built with `pkg-config --cflags --libs clef` only,
#     shared, and static with `pkg-config --static` (libclef.a picked with -l:libclef.a; the Debian
#     libraries stay shared, Debian ships no libonig.a), answer models/tiny byte-equal to `clef decide`;
#     they define globals named like libclef's internals (json_object_get ...), which links only when
#     the installed libraries hide those;
#   - make uninstall leaves no file behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${CLEF_BUILD:-$root/build}
rel=$(realpath --relative-to="$root" "$build")
if [ ! -e "$build/dist/libclef.so" ]; then
  echo "skip: no $rel/dist/libclef.so (the sanitizer build ships nothing; make builds it)"; exit 77
fi
[ -f models/tiny/config.json ] || { echo "skip: no models/tiny (make tiny)"; exit 77; }
if [ -d "$build/obj/src/compute/cuda" ]; then  # `make install` here would rebuild it without CUDA=1
  echo "skip: $rel is a CUDA=1 build (install it with the make variables it was built with)"; exit 77
fi
for t in pkg-config cc c++ nm readelf; do
  command -v $t >/dev/null || { echo "skip: no $t"; exit 77; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }
# The suite may run under `make check`: this make is a fresh one, not part of that one's jobserver.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory BUILD="$rel" "$@"; }

mk install PREFIX="$prefix" >/dev/null
version=$(sed -n 's/^#define CLEF_VERSION "\(.*\)"/\1/p' include/clef.h)
major=${version%%.*}
for f in bin/clef lib/libclef.so.$version lib/libclef.a include/clef.h lib/pkgconfig/clef.pc; do
  [ -f "$prefix/$f" ] || fail "make install did not write $f"
done
[ "$(readlink "$prefix/lib/libclef.so.$major")" = "libclef.so.$version" ] || fail "libclef.so.$major link"
[ "$(readlink "$prefix/lib/libclef.so")" = "libclef.so.$major" ] || fail "libclef.so link"
soname=$(readelf -d "$prefix/lib/libclef.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libclef.so.$major" ] || fail "soname is '$soname', want libclef.so.$major"

# ---- symbols: only the API
# every function clef.h declares (a line that starts a declaration: type, then clef_name()
grep -E '^[A-Za-z].*[ *]clef_[a-z0-9_]+\(' include/clef.h | sed -E 's/.*[ *](clef_[a-z0-9_]+)\(.*/\1/' \
  | sort -u > "$tmp/api"
[ "$(wc -l < "$tmp/api")" -ge 10 ] || fail "could not read the API from include/clef.h"
nm -D --defined-only "$prefix/lib/libclef.so" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u > "$tmp/so"
nm --defined-only -g "$prefix/lib/libclef.a" | awk 'NF >= 3 { print $3 }' | sort -u > "$tmp/a"
for kind in so a; do
  bad=$(grep -v '^clef_' "$tmp/$kind" | head -n 5 | tr '\n' ' ' || true)
  [ -z "$bad" ] || fail "libclef.$kind exports non-clef_ symbols ($(grep -vc '^clef_' "$tmp/$kind") of them), e.g. $bad"
  diff "$tmp/api" "$tmp/$kind" > "$tmp/diff" || { cat "$tmp/diff" >&2; fail "libclef.$kind exports differ from clef.h's API (< clef.h, > library)"; }
done

# ---- pkg-config, a C and a C++ program, shared and static
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pkg-config --exists clef || fail "pkg-config does not find clef"
[ "$(pkg-config --modversion clef)" = "$version" ] || fail "clef.pc version"
cflags=$(pkg-config --cflags clef)
libs=$(pkg-config --libs clef)
slibs=$(pkg-config --static --libs clef | sed 's/-lclef\b/-l:libclef.a/')
cc -std=c11 -Wall -Wextra -Werror tests/parity/install/prog.c $cflags $libs -o "$tmp/c_shared"
c++ -std=c++17 -Wall -Wextra -Werror tests/parity/install/prog.cpp $cflags $libs -o "$tmp/cxx_shared"
cc -std=c11 -Wall -Wextra -Werror tests/parity/install/prog.c $cflags $slibs -o "$tmp/c_static"
c++ -std=c++17 -Wall -Wextra -Werror tests/parity/install/prog.cpp $cflags $slibs -o "$tmp/cxx_static"
for p in c_shared cxx_shared; do
  # ldd's whole output first: `ldd | grep -q` under pipefail fails when grep stops reading early and
  # ldd, still writing (libclef's FFmpeg dependencies make its list long), dies of SIGPIPE
  deps=$(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/$p")
  grep -q "libclef.so.$major => $prefix/lib/" <<<"$deps" || fail "$p does not load the installed libclef.so.$major"
done
for p in c_static cxx_static; do
  deps=$(ldd "$tmp/$p")
  ! grep -q libclef <<<"$deps" || fail "$p links libclef dynamically"
done

n=0
for req in \
  '{"model":"clef-flash","state":"The kettle is boiling.","questions":{"hot":{"type":"noul","instructions":"Is the water hot?"}}}' \
  '{"model":"clef-flash","state":{"ticket":"refund please","lang":"en"},"questions":{"intent":{"type":"choice","options":{"refund":"wants money back","other":"anything else"}},"urgency":{"type":"score","levels":["low","mid","high"]}}}' \
  '{"model":"clef-flash","state":"no questions"}'; do
  want=$(printf '%s' "$req" | "$build/clef" decide --model models/tiny --request - || true)
  case $want in '{"model"'*|'{"error"'*) ;; *) fail "clef decide gave no body for $req";; esac
  for p in c_shared cxx_shared c_static cxx_static; do
    got=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/$p" models/tiny "$req" || true)
    [ "$got" = "$want" ] || fail "$p answered
  $got
instead of (clef decide)
  $want"
  done
  n=$((n + 1))
done
"$prefix/bin/clef" decide --model models/tiny --request - <<< "$req" > /dev/null 2>&1 || [ $? -eq 1 ] \
  || fail "the installed clef binary does not run"

# ---- DESTDIR staging and uninstall
mk install PREFIX=/opt/clef-test DESTDIR="$tmp/stage" >/dev/null
grep -qx 'prefix=/opt/clef-test' "$tmp/stage/opt/clef-test/lib/pkgconfig/clef.pc" || fail "clef.pc under DESTDIR does not name PREFIX"
[ -f "$tmp/stage/opt/clef-test/lib/libclef.a" ] || fail "DESTDIR install"
mk uninstall PREFIX=/opt/clef-test DESTDIR="$tmp/stage" >/dev/null
mk uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" "$tmp/stage" \( -type f -o -type l \) | head -n 5)
[ -z "$left" ] || fail "make uninstall left: $left"

echo "installed, $(wc -l < "$tmp/api") clef_ symbols exported (nothing else), C and C++ shared and static: $n requests x 4 programs byte-equal to clef decide"
