#!/usr/bin/env bash
# Installs what clef needs on a fresh Debian machine and builds it.
#
#   tools/setup.sh          to run clef: the compiler and the -dev libraries (Oniguruma, utf8proc,
#                           libmicrohttpd, libpng, libjpeg-turbo, libwebp, giflib, zlib, FFmpeg's
#                           libavformat/libavcodec/libswscale/libavutil for video, libcurl for
#                           `clef pull`), the library and the CLI, and the tiny release-layout
#                           checkpoint in models/tiny/ (written by .venv-test's python if there is
#                           one, else by .venv-tiny: Debian's python3 + python3-venv and three PyPI
#                           packages, made only when models/tiny/ is missing)
#   tools/setup.sh --dev    also what `make check` and CI use (.ci/run): the lists below marked dev
#                           (clang + libFuzzer for test_fuzz_corpus.sh, OpenBLAS for bench_gemm,
#                           chromium + chromium-driver for test_playground.py, nginx for
#                           test_nginx.py, HAProxy for test_haproxy.py, iproute2 for the Ray tests'
#                           network namespaces), the test venv
#                           (.venv-test: tools/reference/requirements-test.txt) kept up to date, the Ray venv
#                           (.venv-ray, ~80 s from PyPI; CLEF_NO_RAY=1 leaves it out and the Ray
#                           tests skip), and
#                           every target of `make` (unit tests, tools)
#   --list                  prints the packages the chosen mode needs and exits
#
# One package list per purpose (a new purpose is a new list and one line in the mode that needs it).
# Safe to run again: each step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0 list=0
for a in "$@"; do
  case "$a" in
    --dev) dev=1 ;;
    --list) list=1 ;;
    *) echo "usage: $0 [--dev] [--list]" >&2; exit 2 ;;
  esac
done

# ---- to run ----
pkgs_build="build-essential pkg-config"
pkgs_libs="libonig-dev libutf8proc-dev libmicrohttpd-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
           zlib1g-dev libcurl4-openssl-dev"
pkgs_video="libavformat-dev libavcodec-dev libswscale-dev libavutil-dev"
pkgs_tls="ca-certificates"                 # https: clef pull, and pip for .venv-tiny
pkgs_tiny="python3 python3-venv"           # .venv-tiny, which writes models/tiny/ (make tiny)
# ---- dev: what make check and CI add ----
pkgs_dev_fuzz="clang libclang-rt-14-dev"   # tests/parity/test_fuzz_corpus.sh, make fuzz
pkgs_dev_bench="libopenblas-dev"           # bench/bench_gemm (bench/build.sh)
pkgs_dev_browser="chromium chromium-driver" # tests/parity/test_playground.py
pkgs_dev_gateways="nginx haproxy"          # tests/parity/test_nginx.py, test_haproxy.py
pkgs_dev_netns="iproute2"                  # the Ray tests' network namespaces (ip netns)

pkgs="$pkgs_build $pkgs_libs $pkgs_video $pkgs_tls $pkgs_tiny"
[ $dev = 0 ] || pkgs="$pkgs $pkgs_dev_fuzz $pkgs_dev_bench $pkgs_dev_browser $pkgs_dev_gateways $pkgs_dev_netns"
if [ $list = 1 ]; then
  echo $pkgs
  exit 0
fi

# each step says how long it took (tools/fresh-setup-check.sh collects these lines)
t0=$SECONDS
took() { echo "setup: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }

missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # to run: the packages named and what they depend on, not what they recommend (the -dev packages
  # recommend ~60 MB more: drivers, docs); --dev keeps Debian's default (chromium wants its fonts)
  recommends=""; [ $dev = 1 ] || recommends="--no-install-recommends"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $recommends $missing
  took "apt"
fi

if [ $dev = 1 ]; then
  # the venvs (pip: mostly the network) are made while the library compiles (the CPUs); their
  # output goes to a log shown after the build. Every time: an existing venv gets what
  # requirements-test.txt gained since (pip skips the rest). Ray for clef.ray's tests (~80 s from
  # PyPI the first time; CLEF_NO_RAY=1 leaves it out: those tests skip).
  venv_log=$(mktemp)
  { tools/reference/make_venv.sh test && { [ "${CLEF_NO_RAY:-0}" = 1 ] || tools/reference/make_venv.sh ray; }; } \
    > "$venv_log" 2>&1 &
  venv_pid=$!
  make -j"$(nproc)" || { wait "$venv_pid" || true; cat "$venv_log"; rm -f "$venv_log"; exit 1; }
  venv_rc=0; wait "$venv_pid" || venv_rc=$?
  cat "$venv_log"; rm -f "$venv_log"
  [ $venv_rc = 0 ] || { echo "setup: making the venvs failed (exit $venv_rc)"; exit 1; }
  took "venvs and build"
else
  # the venv that writes models/tiny (pip: the network) is made while the library compiles (the CPUs)
  venv_pid=""
  if [ ! -f models/tiny/manifest.sha256 ] && [ ! -x .venv-test/bin/python ] && [ ! -x .venv-tiny/bin/python ]; then
    tools/reference/make_venv.sh tiny &
    venv_pid=$!
  fi
  make -j"$(nproc)" build/clef dist
  [ -z "$venv_pid" ] || wait "$venv_pid"
  took "build"
fi
if [ ! -f models/tiny/manifest.sha256 ]; then make tiny; took "make tiny"; fi
if [ $dev = 1 ]; then echo "setup: done (--dev)"; else echo "setup: done (to run; tools/setup.sh --dev adds what make check needs)"; fi
