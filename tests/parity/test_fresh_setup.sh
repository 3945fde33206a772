#!/usr/bin/env bash
# tools/setup.sh (to run) on a fresh Debian 12 machine passes end to end: tools/fresh-setup-check.sh
# (debootstrap minbase bookworm, a clean clone, tools/setup.sh and `clef decide --model models/tiny` in
# a chroot; every package of --list installed; models/tiny/ the fixtures' checkpoint).
# Downloads ~300 MB from deb.debian.org and PyPI and takes minutes, so it runs only when asked:
#     sudo CLEF_FRESH_SETUP=1 bash tests/parity/test_fresh_setup.sh
# Otherwise (and when not root) it skips: exit 77.
set -u
cd "$(dirname "$0")/../.." || exit 1
if [ "${CLEF_FRESH_SETUP:-0}" != 1 ]; then
  echo "skip: downloads ~300 MB and takes minutes; CLEF_FRESH_SETUP=1 runs it"; exit 77
fi
if [ "$(id -u)" -ne 0 ]; then echo "skip: needs root (debootstrap, mount, chroot)"; exit 77; fi
exec bash tools/fresh-setup-check.sh
