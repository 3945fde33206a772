#!/usr/bin/env bash
# Serving benchmark: starts `clef serve` on loopback (any free port), warms it up, then measures
# requests/s and p50/p99 latency at 1, 4 and 16 concurrent clients (bench_serve.py) with valid text
# requests from tests/corpus/requests. Prints one JSON line per level and a markdown table.
#   bench/bench_serve.sh [MODEL_DIR] [SECONDS_PER_LEVEL] [extra clef serve flags...]
# Env: CLEF_BUILD (default build), PY (default .venv-test/bin/python, else python3), LEVELS ("1 4 16").
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/tiny}; secs=${2:-10}; shift $(( $# > 2 ? 2 : $# )) || true
clef=${CLEF_BUILD:-build}/clef
py=${PY:-.venv-test/bin/python}; [ -x "$py" ] || py=python3
levels=${LEVELS:-"1 4 16"}
log=$(mktemp)
"$clef" serve --model "$model" --port 0 --quiet "$@" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(grep -o '"event":"listening"[^}]*"port":[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && "$py" -c "import http.client,sys;c=http.client.HTTPConnection('127.0.0.1',$port,timeout=2);c.request('GET','/health');sys.exit(c.getresponse().status!=200)" 2>/dev/null && break
  sleep 0.2
done
[ -n "$port" ] || { echo "server did not start:"; cat "$log"; exit 1; }
echo "# $(uname -m), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), model $model, clef serve $*"
"$py" bench/bench_serve.py "$port" 2 3 >/dev/null   # warm-up
rows=()
for c in $levels; do
  line=$("$py" bench/bench_serve.py "$port" "$c" "$secs")
  echo "$line"
  rows+=("$line")
done
echo
echo "| clients | requests | req/s | p50 ms | p99 ms | tokens/s | mean tokens |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for r in "${rows[@]}"; do
  "$py" -c "import json,sys;d=json.loads(sys.argv[1]);print('| %d | %d | %.2f | %.1f | %.1f | %.0f | %.0f |'%(d['clients'],d['requests'],d['req_per_s'],d['p50_ms'],d['p99_ms'],d['tokens_per_s'],d['mean_tokens']))" "$r"
done
