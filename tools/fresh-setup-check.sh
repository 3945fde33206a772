#!/usr/bin/env bash
# Runs the README's "to run" set-up on a fresh Debian 12 machine and times it: a minbase bookworm
# root filesystem made by debootstrap, a clean clone of this repository's HEAD in /root/clef, then,
# inside a chroot, as a new user would:
#     cd /root/clef && tools/setup.sh
#     echo '{...}' | build/clef decide --model models/tiny --request -
# plus three checks: every package `tools/setup.sh --list` names is installed, models/tiny/ is the
# checkpoint the fixtures were made with (tests/parity/test_tiny_manifest.py), and the answer has
# answers.hot. Prints each step's wall time (debootstrap, then setup.sh's own "setup: STEP took N s"
# lines: apt, venv, build, make tiny), the download sizes (the .deb files apt fetched, the pip
# cache) and the machine.
#
#   sudo tools/fresh-setup-check.sh [DIR]    DIR: where the root filesystem (DIR/root) and the logs
#                                            go (default: a new folder under /tmp, removed after a
#                                            pass); DIR/root is removed at the end unless KEEP=1;
#                                            PREINSTALL="PKG ..." installs those first, untimed
#                                            (build-essential pkg-config: a machine with the compiler)
#
# Needs root (debootstrap, mount, chroot), a Debian host (debootstrap is installed when missing)
# and the network: deb.debian.org (MIRROR=... overrides) and PyPI. Downloads ~300 MB; a few minutes.
# Only committed work is tested (git clone of HEAD). Exit 0 when every step passed.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
mirror="${MIRROR:-http://deb.debian.org/debian}"
[ "$(id -u)" -eq 0 ] || { echo "fresh-setup-check: needs root (debootstrap, mount, chroot)" >&2; exit 2; }
made_dir=0
if [ $# -ge 1 ]; then dir="$1"; else dir="$(mktemp -d /tmp/clef-fresh.XXXXXX)"; made_dir=1; fi
root="$dir/root"
[ ! -e "$root" ] || { echo "fresh-setup-check: $root exists; give an empty DIR" >&2; exit 2; }
mkdir -p "$dir"
log="$dir/log"
say() { echo "fresh-setup-check: $*"; }

cleanup() {
  local m
  # deepest first; each one ours (under $root)
  for m in "$root/sys" "$root/dev" "$root/proc"; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" || say "cannot unmount $m"; fi
  done
  if [ "${KEEP:-0}" = 1 ]; then say "kept $root (logs in $dir)"; return; fi
  # never delete through a mount (the bind-mounted /dev is the host's)
  if grep -q " $root/" /proc/mounts; then say "something is still mounted under $root: not removed"; return; fi
  rm -rf --one-file-system "$root"
  # the logs stay when something failed (or DIR was given)
  if [ "$made_dir" = 1 ] && [ "${passed:-0}" = 1 ]; then rm -rf "$dir"; else say "logs in $dir"; fi
}
trap cleanup EXIT

command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

t=$SECONDS
say "debootstrap --variant=minbase bookworm $root $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" > "$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
t_boot=$((SECONDS - t))

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount -t sysfs sysfs "$root/sys"
# the host's network settings, as for resolv.conf: its local CAs (a network that intercepts TLS signs
# PyPI's certificates with one; ca-certificates' install in the chroot adds them) and pip's config.
# On an ordinary network there are none and the chroot stays as debootstrap made it.
cp /etc/resolv.conf "$root/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
[ ! -f /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/pip.conf"
git clone -q "$src" "$root/root/clef"
commit="$(git -C "$root/root/clef" rev-parse --short=12 HEAD)"

in_chroot() { # a login-like environment: nothing from this shell's
  env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    chroot "$root" /bin/bash -c "$1"
}

# PREINSTALL="build-essential pkg-config": a machine that already has the compiler (the issue's "under
# a minute" case), installed before the timed run
if [ -n "${PREINSTALL:-}" ]; then
  say "in the chroot, untimed: apt-get install $PREINSTALL"
  in_chroot "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PREINSTALL" \
    > "$dir/preinstall.log" 2>&1 || { tail -n 30 "$dir/preinstall.log"; exit 1; }
fi

say "in the chroot: cd /root/clef && tools/setup.sh"
t=$SECONDS
in_chroot 'cd /root/clef && tools/setup.sh' > "$dir/setup.log" 2>&1 || { tail -n 40 "$dir/setup.log"; exit 1; }
t_setup=$((SECONDS - t))

request='{"model":"clef-flash","state":"The kettle is boiling.","questions":{"hot":{"type":"noul","instructions":"Is the water hot?"}}}'
t=$EPOCHREALTIME
answer="$(in_chroot "cd /root/clef && echo '$request' | build/clef decide --model models/tiny --request -")"
t_decide=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')

fail=0
missing="$(in_chroot 'cd /root/clef && for p in $(tools/setup.sh --list); do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done')"
[ -z "$missing" ] || { say "FAIL: tools/setup.sh --list names packages it did not install: $missing"; fail=1; }
in_chroot 'cd /root/clef && .venv-tiny/bin/python tests/parity/test_tiny_manifest.py' > "$dir/manifest.log" 2>&1 \
  || { cat "$dir/manifest.log"; say "FAIL: models/tiny/ is not the fixtures' checkpoint"; fail=1; }
printf '%s' "$answer" | grep -q '"answers":{"hot":' \
  || { say "FAIL: the answer has no answers.hot: $answer"; fail=1; }

debs_mb=$(du -sm "$root/var/cache/apt/archives" | cut -f1)
# pip keeps no cache when the index says no-store, so its share is measured by fetching the same wheels again
in_chroot 'cd /root/clef && .venv-tiny/bin/python -m pip download -q --disable-pip-version-check --no-deps \
  -r tools/reference/requirements-tiny.txt -d /tmp/wheels' > /dev/null 2>&1 || true
pip_mb=$(du -sm "$root/tmp/wheels" 2>/dev/null | cut -f1) || pip_mb="?"
echo "---- fresh Debian 12 (minbase bookworm), commit $commit"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; $(date -u +%Y-%m-%d)"
echo "debootstrap (not part of setup.sh): ${t_boot} s"
grep '^setup: .* took ' "$dir/setup.log" || true
echo "tools/setup.sh total: ${t_setup} s"
echo "clef decide --model models/tiny: ${t_decide} s"
echo "downloaded: ${debs_mb} MB of .deb files (apt), ${pip_mb} MB of wheels (pip, .venv-tiny)"
echo "answer: $answer"
if [ $fail = 0 ]; then passed=1; echo "fresh-setup-check: PASS"; else echo "fresh-setup-check: FAIL"; fi
exit $fail
