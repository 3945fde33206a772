#!/usr/bin/env bash
# Packed vs serial serving (issue #16): the same `clef serve` flags with the default batching and with
# --max-batch 1 (every forward one record), alternating A B A B in one run, at each client count, with
# bench_serve.py's load. Prints one JSON line per run and a table.
#   bench/bench_packed.sh MODEL_DIR SECONDS REQUEST_GLOB [extra clef serve flags...]
# Env: CLEF_BUILD (default build), LEVELS ("1 16"), ROUNDS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1; secs=$2; glob=$3; shift 3
clef=${CLEF_BUILD:-build}/clef
py=${PY:-.venv-test/bin/python}; [ -x "$py" ] || py=python3
levels=${LEVELS:-"1 16"}; rounds=${ROUNDS:-2}
echo "# $(uname -m), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg), model $model, requests $glob, serve flags $*"
start() { # flags... -> sets pid, port
  log=$(mktemp)
  "$clef" serve --model "$model" --port 0 --quiet "$@" 2>"$log" &
  pid=$!
  port=""
  for _ in $(seq 1 1500); do
    port=$(grep -o '"event":"listening"[^}]*"port":[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && "$py" -c "import http.client,sys;c=http.client.HTTPConnection('127.0.0.1',$port,timeout=2);c.request('GET','/health');sys.exit(c.getresponse().status!=200)" 2>/dev/null && break
    sleep 0.2
  done
  [ -n "$port" ] || { echo "server did not start:"; cat "$log"; exit 1; }
  rm -f "$log"
}
rows=()
for r in $(seq 1 "$rounds"); do
  for mode in packed serial; do
    if [ $mode = packed ]; then start "$@"; else start --max-batch 1 "$@"; fi
    "$py" bench/bench_serve.py "$port" 2 3 "$glob" >/dev/null   # warm-up
    for c in $levels; do
      line=$("$py" bench/bench_serve.py "$port" "$c" "$secs" "$glob")
      line="{\"mode\":\"$mode\",\"round\":$r,${line#\{}"
      echo "$line"; rows+=("$line")
    done
    kill -TERM $pid; wait $pid 2>/dev/null || true
  done
done
echo
echo "| mode | round | clients | requests | req/s | p50 ms | p99 ms | tokens/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for x in "${rows[@]}"; do
  "$py" -c "import json,sys;d=json.loads(sys.argv[1]);print('| %s | %d | %d | %d | %.2f | %.1f | %.1f | %.0f |'%(d['mode'],d['round'],d['clients'],d['requests'],d['req_per_s'],d['p50_ms'],d['p99_ms'],d['tokens_per_s']))" "$x"
done
