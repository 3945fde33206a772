#!/usr/bin/env bash
# Runs the whole suite against one or more build folders (build/, build-asan/).
#   tests/unit/test_*.c      C unit tests, one program each (built by make)
#   tests/parity/test_*.py   parity tests: our binaries against CPython / HF tokenizers /
#                            the committed reference fixtures; run with .venv-test's python
#   tests/parity/test_*.sh   shell-level tests (CLI behaviour)
# Each program exits 0 (pass), 77 (skipped: prints why) or anything else (fail); one is stopped
# after 900 s.
#
# Every folder's tests go into one queue, longest first (the seconds each took last time: the
# file CLEF_TEST_TIMES, default build/test-times.txt, written at the end of every run; else
# tests/test-times.txt, committed; else 30 s), taken by CLEF_TEST_JOBS workers (default: the
# CPUs). Longest first keeps the last minutes from being one long test alone on one CPU.
# CLEF_TEST_SERIAL=1 is one worker. A test's lines are printed when it ends; the failed ones' logs
# again at the end, then the slowest, then "N passed, N failed, N skipped" (the last line: CI
# reads it).
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
py="$root/.venv-test/bin/python"
[ -x "$py" ] || { echo "missing .venv-test: run tools/setup.sh first" >&2; exit 2; }
[ $# -gt 0 ] || set -- build
for b in "$@"; do [ -d "$b/tests" ] || { echo "no $b/tests: build first" >&2; exit 2; }; done
times_out="${CLEF_TEST_TIMES:-$root/build/test-times.txt}"
jobs_n="${CLEF_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "${CLEF_TEST_SERIAL:-0}" = 1 ] && jobs_n=1
# The fuzz corpus replays build their own sanitized targets whatever the suite, so they run once: in
# the last suite named (build-asan under make check).
export CLEF_FUZZ_SUITE="${!#}"

tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT

# ---- the queue: "estimate<TAB>folder<TAB>kind<TAB>path", longest first
known="$tmpd/known"
{ [ -f "$times_out" ] && cat "$times_out"; [ -f tests/test-times.txt ] && cat tests/test-times.txt; } > "$known"
for b in "$@"; do
  for t in "$b"/tests/test_*; do [ -x "$t" ] && printf '%s\tbin\t%s\n' "$b" "$t"; done
  for t in tests/parity/test_*.py; do [ -f "$t" ] && printf '%s\tpy\t%s\n' "$b" "$t"; done
  for t in tests/parity/test_*.sh; do [ -f "$t" ] && printf '%s\tsh\t%s\n' "$b" "$t"; done
done | awk -F'\t' -v known="$known" '
  BEGIN { while ((getline l < known) > 0) { split(l, f, " "); k = f[1] " " f[2]; if (!(k in est)) est[k] = f[3] } }
  { n = split($3, p, "/"); k = $1 " " p[n]; printf "%d\t%s\n", (k in est) ? est[k] : 30, $0 }' |
  sort -t"$(printf '\t')" -k1,1nr -s > "$tmpd/queue"
total=$(wc -l < "$tmpd/queue")
echo 1 > "$tmpd/next"

# ---- a worker takes the next line of the queue until none is left
run_job() { # folder, kind, path -> one result line in results, the test's line on stdout
  local b=$1 kind=$2 t=$3 name rc log t0 dt line
  name="$b: $(basename "$t")"
  log="$tmpd/log.$(basename "$b").$(basename "$t")"
  t0=$SECONDS
  case $kind in
    bin) CLEF_BUILD="$root/$b" timeout 900 "$t" > "$log" 2>&1 ;;
    py) CLEF_BUILD="$root/$b" timeout 900 "$py" "$t" > "$log" 2>&1 ;;
    sh) CLEF_BUILD="$root/$b" timeout 900 bash "$t" > "$log" 2>&1 ;;
  esac
  rc=$?
  dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    line=$(printf 'ok    %-55s %4ds  %s' "$name" "$dt" "$(tail -n 1 "$log")"); rm -f "$log"
  elif [ $rc -eq 77 ]; then
    line=$(printf 'skip  %-55s %4ds  %s' "$name" "$dt" "$(tail -n 1 "$log")"); rm -f "$log"
  else
    line=$(printf 'FAIL  %-55s %4ds  (exit %d)\n%s' "$name" "$dt" "$rc" "$(tail -n 40 "$log" | sed 's/^/      | /')")
    echo "$name" > "$log.name"
  fi
  { flock 9; printf '%s\n' "$line"; printf '%s %s %s %s\n' "$rc" "$(basename "$b")" "$(basename "$t")" "$dt" \
      >> "$tmpd/results"; } 9> "$tmpd/out.lock"
}
worker() {
  local n job
  while :; do
    n=$({ flock 9; n=$(cat "$tmpd/next"); echo $((n + 1)) > "$tmpd/next"; echo "$n"; } 9> "$tmpd/next.lock")
    [ "$n" -le "$total" ] || break
    job=$(sed -n "${n}p" "$tmpd/queue")
    IFS=$'\t' read -r _ b kind t <<< "$job"
    run_job "$b" "$kind" "$t"
  done
}
# What the suite runs from each folder (programs, libraries): no test may rebuild one of them while
# the others run it (an execve of a half-linked binary fails with EACCES, at random).
built() { for b in "$@"; do find "$b/clef" "$b/libclef.a" "$b/dist" "$b/tests" -maxdepth 1 -type f \
  -printf '%p %i %T@\n' 2>/dev/null; done | sort; }
built "$@" > "$tmpd/built.before"
t_start=$SECONDS
for _ in $(seq 1 "$jobs_n"); do worker & done
wait
: >> "$tmpd/results"
built "$@" > "$tmpd/built.after"
rebuilt=0
if ! cmp -s "$tmpd/built.before" "$tmpd/built.after"; then
  echo "---- the build under test changed while the suite ran (a test rebuilt it):"
  diff "$tmpd/built.before" "$tmpd/built.after" | sed 's/^/      | /' | head -n 20
  rebuilt=1
fi

# ---- the summary
pass=$(awk '$1 == 0' "$tmpd/results" | wc -l)
skip=$(awk '$1 == 77' "$tmpd/results" | wc -l)
fail=$(awk '$1 != 0 && $1 != 77' "$tmpd/results" | wc -l)
missing=$((total - pass - skip - fail))
mkdir -p "$(dirname "$times_out")" && awk '{ print $2, $3, $4 }' "$tmpd/results" | sort > "$times_out.tmp" &&
  mv "$times_out.tmp" "$times_out"
echo "slowest (seconds; $jobs_n workers, $((SECONDS - t_start)) s in all):"
sort -k4,4nr "$tmpd/results" | head -n 12 | awk '{ printf "  %5d  %s: %s\n", $4, $2, $3 }'
failed=()
for f in "$tmpd"/log.*.name; do
  [ -f "$f" ] || continue
  failed+=("$(cat "$f")")
  echo "---- $(cat "$f") (the end of its log)"
  tail -n 40 "${f%.name}" | sed 's/^/      | /'
done
[ $missing -eq 0 ] || { fail=$((fail + missing)); failed+=("$missing tests did not report"); }
[ $rebuilt -eq 0 ] || { fail=$((fail + 1)); failed+=("a test rebuilt the build under test (above)"); }
if [ $fail -gt 0 ]; then printf 'failed: %s\n' "${failed[@]}"; fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
