#!/usr/bin/env bash
# Prefill tokens/s on a release-layout checkpoint: our engine (clef bench) and the reference stack
# (transformers 5.17.0 + torch 2.9.0, fp32, bench/torch_prefill.py) side by side, same synthetic ids,
# same thread count. Paired: each round runs clef bench, then torch_prefill, as separate processes
# (never both at once: the fp32 reference peaks at ~12-14 GB RSS for models/real4). Medians over rounds x repeats.
#
#   bench/bench_prefill.sh [--model models/real4] [--tokens 512,2048] [--threads 2] [--rounds 2]
#                          [--repeat 1] [--out DIR] [--no-torch] [--clef-tokens 512]
#
# --clef-tokens: the counts our engine runs, when it should run fewer than the reference (default: --tokens).
#
# Env: CLEF_BUILD (default build/) for the clef binary. Writes DIR/results.jsonl (every run line,
# tagged with engine and round) and DIR/table.md, and prints the machine, load and the table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="$root/models/real4" tokens="512,2048" threads=2 rounds=2 repeat=1 out="" torch=1 ctokens=""
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --tokens) tokens="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --no-torch) torch=0; shift ;;
        --clef-tokens) ctokens="$2"; shift 2 ;;
        *) echo "usage: $0 [--model DIR] [--tokens N,N] [--threads N] [--rounds R] [--repeat R] [--out DIR] [--no-torch] [--clef-tokens N,N]" >&2; exit 2 ;;
    esac
done
[ -n "$ctokens" ] || ctokens="$tokens"
clef="${CLEF_BUILD:-$root/build}/clef"
refpy="$root/.venv-ref/bin/python"
testpy="$root/.venv-test/bin/python"
[ -x "$clef" ] || { echo "bench_prefill: $clef not built (make)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "bench_prefill: $model missing (tools/reference/make_tiny.sh models/real4 --real-dims)" >&2; exit 1; }
if [ "$torch" = 1 ] && [ ! -x "$refpy" ]; then echo "bench_prefill: no .venv-ref (tools/reference/make_venv.sh ref)" >&2; exit 1; fi
[ -n "$out" ] || out="$(mktemp -d /tmp/bench_prefill.XXXXXX)"
mkdir -p "$out"
res="$out/results.jsonl"
: > "$res"

avail_gb() { awk '/MemAvailable/ {printf "%d", $2 / 1048576}' /proc/meminfo; }
wait_mem() { # wait (up to 20 min) until $1 GB are available
    local need="$1" i=0
    while [ "$(avail_gb)" -lt "$need" ]; do
        [ $i -ge 120 ] && { echo "bench_prefill: less than ${need} GB available for 20 min" >&2; exit 1; }
        echo "  waiting for ${need} GB of memory ($(avail_gb) GB available)" >&2
        sleep 10; i=$((i + 1))
    done
}
tag() { # engine round: prefix each JSON line with engine and round
    sed -u "s/^{/{\"engine\":\"$1\",\"round\":$2,/"
}

{
    echo "machine: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs online, $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "clef: $clef ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet -- src include || echo ', dirty'))"
    echo "model: $model; tokens $tokens (clef: $ctokens); threads $threads; rounds $rounds x repeat $repeat"
    echo "load before: $(uptime | sed 's/.*load average/load average/')"
} | tee "$out/header.txt"

for r in $(seq 1 "$rounds"); do
    wait_mem 8
    echo "round $r: clef bench ($(uptime | sed 's/.*load average: //'))" >&2
    "$clef" bench --model "$model" --tokens "$ctokens" --threads "$threads" --repeat "$repeat" \
        | grep --line-buffered '"kind"' | tag clef "$r" | tee -a "$res"
    if [ "$torch" = 1 ]; then
        wait_mem 11
        echo "round $r: torch ($(uptime | sed 's/.*load average: //'))" >&2
        "$refpy" "$root/bench/torch_prefill.py" --model "$model" --tokens "$tokens" --threads "$threads" \
            --repeat "$repeat" | grep --line-buffered '"kind"' | sed -u 's/"engine":"torch",//' | tag torch "$r" | tee -a "$res"
    fi
done
echo "load after: $(uptime | sed 's/.*load average/load average/')" | tee -a "$out/header.txt"

"$testpy" - "$res" "$out/table.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = [r for r in rows if r["kind"] == "run"]
summ = [r for r in rows if r["kind"] == "summary"]
keys = sorted({(r["tokens"], r["engine"]) for r in runs}, key=lambda k: (k[0], k[1] != "clef"))
lines = ["| tokens | engine | runs | median s (text forward) | median tokens/s | min-max tokens/s | median head s | peak RSS MB | open/load s |",
         "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
for n, eng in keys:
    rs = [r for r in runs if r["tokens"] == n and r["engine"] == eng]
    tps = [r["tokens_per_s"] for r in rs]
    head = [r["seconds_head"] for r in rs if "seconds_head" in r]
    ss = [s for s in summ if s["tokens"] == n and s["engine"] == eng]
    rss = max(s["peak_rss_mb"] for s in ss) if ss else max(r["peak_rss_mb"] for r in rs)
    opn = statistics.median(s["open_seconds"] for s in ss) if ss else float("nan")
    lines.append(f"| {n} | {eng} | {len(rs)} | {statistics.median(r['seconds_text'] for r in rs):.2f} | "
                 f"{statistics.median(tps):.1f} | {min(tps):.1f}-{max(tps):.1f} | "
                 f"{statistics.median(head):.2f} | " if head else
                 f"| {n} | {eng} | {len(rs)} | {statistics.median(r['seconds_text'] for r in rs):.2f} | "
                 f"{statistics.median(tps):.1f} | {min(tps):.1f}-{max(tps):.1f} | - | ")
    lines[-1] += f"{rss:.0f} | {opn:.1f} |"
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "results: $res, table: $out/table.md"
