#!/usr/bin/env bash
# Runs the whole suite against one or more build folders (build/, build-asan/).
#   tests/unit/test_*.c      C unit tests, one program each (built by make)
#   tests/parity/test_*.py   parity tests: our binaries against CPython / HF tokenizers /
#                            the committed reference fixtures; run with .venv-test's python
#   tests/parity/test_*.sh   shell-level tests (CLI behaviour)
# Each program exits 0 (pass), 77 (skipped: prints why) or anything else (fail).
# The last line is "N passed, N failed, N skipped" for CI to read.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
py="$root/.venv-test/bin/python"
[ -x "$py" ] || { echo "missing .venv-test: run tools/setup.sh first" >&2; exit 2; }
[ $# -gt 0 ] || set -- build
pass=0; fail=0; skip=0; failed=()
run_one() { # name, command...
  local name=$1; shift
  local log; log=$(mktemp)
  local t0=$SECONDS
  timeout 900 "$@" >"$log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); printf 'ok    %-55s %4ds  %s\n' "$name" "$dt" "$(tail -n 1 "$log")"
  elif [ $rc -eq 77 ]; then
    skip=$((skip + 1)); printf 'skip  %-55s %4ds  %s\n' "$name" "$dt" "$(tail -n 1 "$log")"
  else
    fail=$((fail + 1)); failed+=("$name"); printf 'FAIL  %-55s %4ds  (exit %d)\n' "$name" "$dt" "$rc"
    tail -n 40 "$log" | sed 's/^/      | /'
  fi
  rm -f "$log"
}
# One build's whole suite; the counts and failed names go to $2 for the summary.
run_suite() { # build dir, counts file
  local b=$1
  pass=0; fail=0; skip=0; failed=()
  [ -d "$b/tests" ] || { echo "no $b/tests: build first" >&2; exit 2; }
  export CLEF_BUILD="$root/$b"
  for t in "$b"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$b: $(basename "$t")" "$t"
  done
  for t in tests/parity/test_*.py; do
    [ -f "$t" ] || continue
    run_one "$b: $(basename "$t")" "$py" "$t"
  done
  for t in tests/parity/test_*.sh; do
    [ -f "$t" ] || continue
    run_one "$b: $(basename "$t")" bash "$t"
  done
  { echo "$pass $fail $skip"; printf '%s\n' "${failed[@]+"${failed[@]}"}"; } > "$2"
}
# Several builds' suites run side by side (each test is mostly one thread), their logs printed in
# order afterwards; CLEF_TEST_SERIAL=1 runs them one after another.
tmpd=$(mktemp -d)
# The fuzz corpus replays build their own sanitized targets whatever the suite, so they run once: in
# the last suite named (build-asan under make check; with them the two suites take about as long).
export CLEF_FUZZ_SUITE="${!#}"
serial=0
[ "${CLEF_TEST_SERIAL:-0}" = 1 ] || [ $# -eq 1 ] && serial=1
i=0
for b in "$@"; do
  i=$((i + 1))
  if [ $serial = 1 ]; then
    run_suite "$b" "$tmpd/counts.$i"
  else
    ( run_suite "$b" "$tmpd/counts.$i" ) > "$tmpd/log.$i" 2>&1 &
  fi
done
wait
pass=0; fail=0; skip=0; failed=()
j=0
for b in "$@"; do
  j=$((j + 1))
  [ $serial = 1 ] || cat "$tmpd/log.$j"
  if [ ! -f "$tmpd/counts.$j" ]; then fail=$((fail + 1)); failed+=("$b: the suite did not finish"); continue; fi
  read -r p f s < "$tmpd/counts.$j"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  while IFS= read -r name; do [ -n "$name" ] && failed+=("$name"); done < <(tail -n +2 "$tmpd/counts.$j")
done
rm -rf "$tmpd"
if [ $fail -gt 0 ]; then printf 'failed: %s\n' "${failed[@]}"; fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
