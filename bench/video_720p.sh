#!/usr/bin/env bash
# Time and memory of one video request, split (issue #21's 10 s 720p figure, docs/performance.md):
# decode + sampling + resize alone (tests/tools/video_tool, 1 thread); the whole request through
# `clef serve` (its log line: prepare = total - queue - compute; compute = tower + text + head);
# the text alone at the request's token count (`clef bench`), so tower ~ compute - text - head.
#   bench/video_720p.sh MODEL_DIR CLIP [threads]
# Make the clip with the reference venv (PyAV), e.g. a 10 s 1280x720 H.264 clip at 30 fps:
#   (cd tools/reference && ../../.venv-ref/bin/python -c \
#     'import make_video_fixtures as m; m.make_clip("/tmp/clip.mp4", "libx264", "mp4", 1280, 720, 300, 30)')
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1; clip=$2; threads=${3:-2}
clef=${CLEF_BUILD:-build}/clef
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -f "video_tool: %e s wall, %U s user, %M kB peak" "${CLEF_BUILD:-build}"/tests/video_tool "$clip" 2>&1 | tail -2
python3 -c "import base64,json,sys; json.dump({'model':'clef-flash','state':{'note':'a clip'},'videos':[base64.b64encode(open(sys.argv[1],'rb').read()).decode()],'questions':{'q':{'type':'noul'}}}, open(sys.argv[2],'w'))" "$clip" "$work/req.json"
"$clef" serve --model "$model" --port 0 --threads "$threads" --max-body 64M 2>"$work/log" &
pid=$!
port=""
for _ in $(seq 1 1200); do
  port=$(grep -o '"event":"listening"[^}]*"port":[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && curl -sf "localhost:$port/health" >/dev/null && break
  sleep 0.5
done
curl -s -o "$work/answer.json" -w "http %{http_code} total %{time_total} s\n" -H 'Content-Type: application/json' \
  --data-binary @"$work/req.json" "localhost:$port/v1/systemone"
line=$(grep '"event":"request"' "$work/log" | tail -1)
echo "$line"
grep VmHWM "/proc/$pid/status"
kill -TERM $pid; wait $pid || true
tokens=$(echo "$line" | grep -o '"tokens":[0-9]*' | grep -o '[0-9]*$')
/usr/bin/time -f "bench: %e s wall, %M kB peak" "$clef" bench --model "$model" --tokens "$tokens" --repeat 1 --prime 0 --threads "$threads" 2>&1 | tail -2
