#!/usr/bin/env bash
# Prefill tokens/s side by side in one run: our engine (clef bench, BF16 weights), llama.cpp (llama-bench on a
# BF16 GGUF of the same checkpoint) and the reference stack (transformers 5.17.0 + torch 2.9.0 fp32,
# bench/torch_prefill.py), same thread count. Paired rounds: for each round and each token count, the three
# engines run one after the other, each as its own process (open, one untimed 32-token priming forward, the
# timed forward(s) at that count), never two at once; the order of the engines rotates from round to round.
# Each process runs under /usr/bin/time, whose maximum resident set size is the peak RSS reported.
#
#   bench/bench_side_by_side.sh [--model models/real4] [--tokens 512,2048] [--threads 2] [--rounds 2]
#                               [--repeat 1] [--out DIR] [--engines clef,llama,torch]
#                               [--precisions fp32,int8] [--llama-bench PATH] [--llama-gguf PATH]
#
# --precisions: a clef row per precision (clef bench --precision P; default fp32 only). The fp32 row is
# "clef", the others "clef P"; each is its own process in the rotation. int8 runs with CLEF_UNGATED=int8
# (it has not passed its fidelity gate: docs/precision.md), fast and bf16 run fp32 on CPUs without their
# kernels (the row then measures fp32 again; clef's note is in raw/*.err).
#
# llama.cpp is not built here: point LLAMA_BENCH (or --llama-bench) at a llama-bench binary and LLAMA_GGUF
# (or --llama-gguf) at a GGUF converted from the same checkpoint (bench/README.md says how to get both);
# without them the llama.cpp rows are skipped with a message. llama-bench runs with -p 32,N -n 0 -b N -ub N
# --no-warmup (the whole prompt in one batch; the 32-token test pages the weights in and is dropped, like
# the engines' --prime 32) and -o jsonl; its samples_ns become the run lines.
#
# Env: CLEF_BUILD (default build/) for the clef binary, LLAMA_BENCH, LLAMA_GGUF. Writes DIR/results.jsonl
# (every run line, tagged with engine and round), DIR/rss.tsv, DIR/header.txt, DIR/table.md and the raw
# outputs under DIR/raw/, and prints the machine, the load average and the table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="$root/models/real4" tokens="512,2048" threads=2 rounds=2 repeat=1 out="" engines="clef,llama,torch" precisions="fp32"
lbench="${LLAMA_BENCH:-}" lgguf="${LLAMA_GGUF:-}"
usage="usage: $0 [--model DIR] [--tokens N,N] [--threads N] [--rounds R] [--repeat R] [--out DIR] [--engines clef,llama,torch] [--precisions fp32,int8] [--llama-bench PATH] [--llama-gguf PATH]"
while [ $# -gt 0 ]; do
    case "$1" in
        --model) model="$2"; shift 2 ;;
        --tokens) tokens="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --engines) engines="$2"; shift 2 ;;
        --precisions) precisions="$2"; shift 2 ;;
        --llama-bench) lbench="$2"; shift 2 ;;
        --llama-gguf) lgguf="$2"; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
clef="${CLEF_BUILD:-$root/build}/clef"
refpy="$root/.venv-ref/bin/python"
testpy="$root/.venv-test/bin/python"
[ -x /usr/bin/time ] || { echo "bench_side_by_side: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
[ -x "$testpy" ] || { echo "bench_side_by_side: no .venv-test (tools/reference/make_venv.sh test)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "bench_side_by_side: $model missing (tools/reference/make_tiny.sh models/real4 --real-dims)" >&2; exit 1; }
want() { case ",$engines," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
run_engines=()
if want clef; then
    [ -x "$clef" ] || { echo "bench_side_by_side: $clef not built (make)" >&2; exit 1; }
    IFS=, read -r -a precs <<< "$precisions"
    for p in "${precs[@]}"; do
        case "$p" in
            fp32) run_engines+=(clef) ;;
            fast|bf16|int8) run_engines+=("clef-$p") ;;
            *) echo "bench_side_by_side: --precisions: '$p' is not fp32, fast, bf16 or int8" >&2; exit 2 ;;
        esac
    done
fi
if want llama; then
    if [ -z "$lbench" ] || [ ! -x "$lbench" ]; then
        echo "bench_side_by_side: llama.cpp skipped: LLAMA_BENCH ('$lbench') is not an executable llama-bench (see bench/README.md)" >&2
    elif [ -z "$lgguf" ] || [ ! -f "$lgguf" ]; then
        echo "bench_side_by_side: llama.cpp skipped: LLAMA_GGUF ('$lgguf') is not a file (see bench/README.md)" >&2
    else
        run_engines+=(llama)
    fi
fi
if want torch; then
    [ -x "$refpy" ] || { echo "bench_side_by_side: no .venv-ref (tools/reference/make_venv.sh ref)" >&2; exit 1; }
    run_engines+=(torch)
fi
[ ${#run_engines[@]} -gt 0 ] || { echo "bench_side_by_side: no engine to run" >&2; exit 1; }
[ -n "$out" ] || out="$(mktemp -d /tmp/bench_side_by_side.XXXXXX)"
mkdir -p "$out/raw"
res="$out/results.jsonl"
rss="$out/rss.tsv"
: > "$res"
printf 'engine\tround\ttokens\tmax_rss_kb\twall_s\texit\n' > "$rss"

avail_gb() { awk '/MemAvailable/ {printf "%d", $2 / 1048576}' /proc/meminfo; }
wait_mem() { # wait (up to 20 min) until $1 GB are available
    local need="$1" i=0
    while [ "$(avail_gb)" -lt "$need" ]; do
        [ $i -ge 120 ] && { echo "bench_side_by_side: less than ${need} GB available for 20 min" >&2; exit 1; }
        echo "  waiting for ${need} GB of memory ($(avail_gb) GB available)" >&2
        sleep 10; i=$((i + 1))
    done
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
tag() { # engine round: prefix each JSON line with engine and round
    sed -u "s/^{/{\"engine\":\"$1\",\"round\":$2,/"
}
timed() { # engine round tokens cmd...: run cmd under /usr/bin/time, stdout to raw/, max RSS to rss.tsv
    local eng="$1" r="$2" n="$3"; shift 3
    local base="$out/raw/$eng.r$r.t$n" rc=0
    /usr/bin/time -f '%M %e %x' -o "$base.time" "$@" > "$base.out" 2> "$base.err" || rc=$?
    read -r kb wall x < <(tail -n 1 "$base.time")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$eng" "$r" "$n" "$kb" "$wall" "$rc" >> "$rss"
    if [ "$rc" != 0 ]; then
        echo "bench_side_by_side: $eng failed at $n tokens (exit $rc); last lines of $base.err:" >&2
        tail -n 5 "$base.err" >&2
    fi
    return 0
}
llama_lines() { # tokens round: llama-bench jsonl -> run lines shaped like clef bench's
    "$testpy" - "$1" "$out/raw/llama.r$2.t$1.out" <<'EOF'
import json, sys
n = int(sys.argv[1])
for line in open(sys.argv[2]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    t = json.loads(line)
    if t.get("n_prompt") != n or t.get("n_gen", 0) != 0:
        continue  # the 32-token priming test
    for i, ns in enumerate(t["samples_ns"]):
        s = ns / 1e9
        print(json.dumps({"kind": "run", "tokens": n, "threads": t["n_threads"], "rep": i, "seconds_text": round(s, 4),
                          "tokens_per_s": round(n / s, 2)}, separators=(",", ":")))
    print(json.dumps({"kind": "meta", "tokens": n, "build_commit": t.get("build_commit"),
                      "build_number": t.get("build_number"), "model_type": t.get("model_type"),
                      "model_size": t.get("model_size"), "n_batch": t.get("n_batch"), "n_ubatch": t.get("n_ubatch"),
                      "flash_attn": t.get("flash_attn"), "type_k": t.get("type_k"), "backends": t.get("backends"),
                      "cpu_info": t.get("cpu_info"), "load_mode": t.get("load_mode", t.get("use_mmap"))},
                     separators=(",", ":")))
EOF
}

IFS=, read -r -a counts <<< "$tokens"
{
    echo "machine: $(lscpu | grep 'Model name' | sed 's/ \+/ /g'), $(nproc) CPUs online, $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    if want clef; then
        if [ -n "${CLEF_BUILD:-}" ]; then echo "clef: $clef (CLEF_BUILD; built $(date -u -r "$clef" '+%Y-%m-%d %H:%M UTC'))"
        else echo "clef: $clef (tree $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet -- src include || echo ', src/ dirty'))"; fi
    fi
    if [[ " ${run_engines[*]} " == *" llama "* ]]; then echo "llama.cpp: $lbench ($("$lbench" --version 2>&1 | grep -m1 -i 'version' || true)); gguf $lgguf"; fi
    if want torch; then echo "torch: $("$refpy" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "capability", torch.backends.cpu.get_cpu_capability())')"; fi
    echo "model: $model; tokens $tokens; threads $threads; rounds $rounds x repeat $repeat; engines ${run_engines[*]}"
    echo "load average before: $(loadavg)"
} | tee "$out/header.txt"

ne=${#run_engines[@]}
for r in $(seq 1 "$rounds"); do
    for n in "${counts[@]}"; do
        for k in $(seq 0 $((ne - 1))); do
            eng="${run_engines[$(((k + r - 1) % ne))]}"
            case "$eng" in
                clef)
                    wait_mem 8
                    echo "round $r, $n tokens: clef (load $(loadavg))" >&2
                    timed clef "$r" "$n" "$clef" bench --model "$model" --tokens "$n" --threads "$threads" --repeat "$repeat"
                    grep '"kind"' "$out/raw/clef.r$r.t$n.out" | tag clef "$r" | tee -a "$res" || true ;;
                clef-*)
                    p="${eng#clef-}"
                    wait_mem 8
                    echo "round $r, $n tokens: clef --precision $p (load $(loadavg))" >&2
                    timed "$eng" "$r" "$n" env CLEF_UNGATED=int8 "$clef" bench --model "$model" --tokens "$n" \
                        --threads "$threads" --repeat "$repeat" --precision "$p"
                    grep '"kind"' "$out/raw/$eng.r$r.t$n.out" | tag "clef $p" "$r" | tee -a "$res" || true ;;
                llama)
                    wait_mem 8
                    echo "round $r, $n tokens: llama.cpp (load $(loadavg))" >&2
                    timed llama "$r" "$n" "$lbench" -m "$lgguf" -p "32,$n" -n 0 -t "$threads" -b "$n" -ub "$n" \
                        -r "$repeat" --no-warmup -o jsonl
                    llama_lines "$n" "$r" | tag llama.cpp "$r" | tee -a "$res" || true ;;
                torch)
                    wait_mem 11
                    echo "round $r, $n tokens: torch fp32 (load $(loadavg))" >&2
                    timed torch "$r" "$n" "$refpy" "$root/bench/torch_prefill.py" --model "$model" --tokens "$n" \
                        --threads "$threads" --repeat "$repeat"
                    grep '"kind"' "$out/raw/torch.r$r.t$n.out" | sed 's/"engine":"torch",//' | tag "torch fp32" "$r" \
                        | tee -a "$res" || true ;;
            esac
        done
    done
done
echo "load average after: $(loadavg)" | tee -a "$out/header.txt"

"$testpy" - "$res" "$rss" "$out/table.md" <<'EOF'
import csv, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = [r for r in rows if r["kind"] == "run"]
rss = list(csv.DictReader(open(sys.argv[2]), delimiter="\t"))
name = {"clef": "clef", "clef fast": "clef-fast", "clef bf16": "clef-bf16", "clef int8": "clef-int8",
        "llama.cpp": "llama", "torch fp32": "torch"}
order = {"clef": 0, "clef fast": 1, "clef bf16": 2, "clef int8": 3, "llama.cpp": 4, "torch fp32": 5}
keys = sorted({(r["tokens"], r["engine"]) for r in runs}, key=lambda k: (k[0], order.get(k[1], 9)))
lines = ["| tokens | engine | runs | median s | median tokens/s | min-max tokens/s | x clef (paired, median) | peak RSS MB |",
         "|---:|---|---:|---:|---:|---:|---:|---:|"]
for n, eng in keys:
    rs = [r for r in runs if r["tokens"] == n and r["engine"] == eng]
    tps = [r["tokens_per_s"] for r in rs]
    ratios = []
    for rnd in sorted({r["round"] for r in rs}):
        c = [x["tokens_per_s"] for x in runs if x["tokens"] == n and x["engine"] == "clef" and x["round"] == rnd]
        e = [x["tokens_per_s"] for x in rs if x["round"] == rnd]
        if c and e:
            ratios.append(statistics.median(e) / statistics.median(c))
    kb = [int(x["max_rss_kb"]) for x in rss if x["engine"] == name.get(eng) and int(x["tokens"]) == n and x["max_rss_kb"].isdigit()]
    ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
    peak = f"{max(kb) / 1024:.0f}" if kb else "-"
    lines.append(f"| {n} | {eng} | {len(rs)} | {statistics.median(r['seconds_text'] for r in rs):.2f} | "
                 f"{statistics.median(tps):.1f} | {min(tps):.1f}-{max(tps):.1f} | {ratio} | {peak} |")
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "results: $res, rss: $rss, table: $out/table.md"
