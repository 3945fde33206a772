#!/usr/bin/env python3
"""The Python half of tools/device-check.sh (docs/cuda.md "Running the device check"): the parts that
read and write JSON. Standard library only, except `make-full` (numpy, through write_tiny.py).

    device_check.py corpus-input REQDIR OUT.jsonl       the corpus as one request a line ("raw": true)
    device_check.py calibrate CLEF MODEL BASE.json TOKENS OUT.json
                                                         BASE's request padded to exactly TOKENS input tokens
    device_check.py compare REF RES OUT.json            cuda answers (RES) vs the carried cpu answers (REF)
    device_check.py tag STEP VARIANT < lines >> bench.jsonl
                                                         adds "step" and "variant" to every JSON line
    device_check.py gpu STEP WHEN CSV                    one nvidia-smi --query-gpu CSV line as a JSON line
    device_check.py summary BENCH.jsonl                 the figures: bar lines, variants, per-op table
    device_check.py client PORT CLIENTS SECONDS BODY LABEL LABEL_LONG
                                                         CLIENTS keep-alive connections POST BODY to clef serve
                                                         on 127.0.0.1:PORT: latency percentiles from the socket
    device_check.py make-full DIR [DIMS]                 a 9B-shape checkpoint (write_tiny.py --full-dims
                                                         layout) with cheap, repeating values: for timing only
    device_check.py stub NAME ARGS...                    DEVCHECK_DRY=1's stand-ins for the GPU programs
"""
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# issue #38's bars (synthetic 9B shape, H100 or H200): (precision, tokens) -> ms; packed tokens/s; served p50
BARS_MS = {("bf16", 436): 11, ("bf16", 16384): 450, ("fast", 436): 20, ("fast", 16384): 900}
BAR_PACKED_BF16 = 45000
BAR_SERVED_P50_MS = 25
# corpus bars vs the CPU (docs/precision.md); bf16 has none: its figures are measured
CORPUS_BARS = {"fp32": 1e-5, "fast": 2e-3, "bf16": None}


# ------------------------------------------------------------------------------------------ corpus

def corpus_input(reqdir, out):
    names = []
    with open(out, "wb") as f:
        for name in sorted(os.listdir(reqdir)):
            if not name.endswith(".json"):
                continue
            b = open(os.path.join(reqdir, name), "rb").read()
            try:
                d = json.loads(b)
                if isinstance(d, dict) and isinstance(d.get("questions"), dict):
                    d["raw"] = True  # raw probabilities: the comparison's figures
                    b = json.dumps(d, ensure_ascii=False).encode()
            except Exception:
                pass  # malformed on purpose (error requests): sent as they are
            if b"\n" in b.strip():
                continue  # not one line: clef batch cannot take it
            f.write(b.strip() + b"\n")
            names.append(name)
    with open(out + ".names", "w") as f:
        f.write("".join(n + "\n" for n in names))
    print(f"corpus-input: {len(names)} requests")


def probs(body):
    """question -> {label: raw probability}; None when the body is not JSON."""
    try:
        d = json.loads(body)
    except Exception:
        return None
    out = {}
    answers = d.get("answers") if isinstance(d, dict) else None
    for q, a in (answers or {}).items() if isinstance(answers, dict) else []:
        if isinstance(a, dict) and isinstance(a.get("raw"), dict):
            out[q] = {k: float(v) for k, v in a["raw"].items() if isinstance(v, (int, float))}
    return out


def compare_answers(ref, got):
    """(max |dp|, probabilities compared, argmax agreements, questions, structure differs)."""
    md, n, agree, qs, differ = 0.0, 0, 0, 0, set(ref) != set(got)
    for q, a in ref.items():
        b = got.get(q, {})
        if set(a) != set(b):
            differ = True
        for k in a:
            if k in b:
                md = max(md, abs(a[k] - b[k]))
                n += 1
        if a and b:
            qs += 1
            agree += max(a, key=a.get) == max(b, key=b.get)
    return md, n, agree, qs, differ


def read_lines(path):
    try:
        return open(path, "rb").read().splitlines()
    except OSError:
        return None


def compare_set(pairs, bar, mode):
    """pairs: [(name, ref body, got body or None)] -> (summary dict, rows)."""
    worst, agree, qs, bad, rows = 0.0, 0, 0, 0, []
    for name, a, b in pairs:
        row = {"request": name}
        pa = probs(a)
        if b is None:
            row.update(ok=False, why="no answer")
        elif not pa:  # an error, or an answer without probabilities: the same bytes
            row.update(ok=a.strip() == b.strip(), same_body=a.strip() == b.strip())
        else:
            pb = probs(b)
            if pb is None:
                row.update(ok=False, why="not JSON")
            else:
                md, n, ag, q, differ = compare_answers(pa, pb)
                worst, agree, qs = max(worst, md), agree + ag, qs + q
                ok = not differ and n > 0 and (bar is None or (md <= bar and (mode == "fp32" or ag == q)))
                row.update(ok=ok, max_dp=md, argmax_agree=ag, questions=q)
        if not row["ok"]:
            bad += 1
            row["got"] = (b or b"")[:300].decode("utf-8", "replace")
        rows.append(row)
    return {"worst_max_dp": worst, "argmax_agree": agree, "questions": qs, "failing": bad, "n": len(pairs),
            "bar": bar}, rows


def compare(ref, res, out):
    names = [n.strip() for n in open(os.path.join(ref, "corpus.jsonl.names")) if n.strip()]
    cpu = read_lines(os.path.join(ref, "cpu-batch.jsonl")) or []
    report = {"requests": len(names), "reference": open(os.path.join(ref, "cpu.txt")).read().strip()
              if os.path.exists(os.path.join(ref, "cpu.txt")) else "?", "batch": {}, "spot": {}}
    lines = []
    got_by_mode = {}
    for mode, bar in CORPUS_BARS.items():
        got = read_lines(os.path.join(res, "batch", mode + ".jsonl"))
        if got is None:
            lines.append(f"corpus (clef batch) cuda {mode}: no output")
            continue
        got_by_mode[mode] = got
        pairs = [(names[i] if i < len(names) else f"#{i}", cpu[i], got[i] if i < len(got) else None)
                 for i in range(len(cpu))]
        s, rows = compare_set(pairs, bar, mode)
        s["lines"], s["rows"] = len(got), rows
        report["batch"][mode] = s
        ok = s["failing"] == 0 and len(got) == len(cpu) > 0
        bars = f"bar {bar:g}" + (", argmax equal" if mode == "fast" else "") if bar else "no bar: measured"
        lines.append(f"corpus (clef batch) cuda {mode}: {len(got)}/{len(cpu)} lines, worst max|dp| {s['worst_max_dp']:.3e} "
                     f"vs cpu ({bars}), argmax {s['argmax_agree']}/{s['questions']} questions, {s['failing']} failing"
                     + ("" if bar is None else (": ok" if ok else ": FAIL")))
    if "bf16" in got_by_mode and "fp32" in got_by_mode:
        pairs = list(zip(names, got_by_mode["fp32"], got_by_mode["bf16"]))
        s, _ = compare_set(pairs, None, "bf16")
        report["batch"]["bf16_vs_cuda_fp32"] = s
        lines.append(f"corpus (clef batch) cuda bf16 vs cuda fp32: worst max|dp| {s['worst_max_dp']:.3e}, "
                     f"argmax {s['argmax_agree']}/{s['questions']}")
    # spot checks: single `clef decide` processes vs the cpu's `clef decide`
    spot_ref = os.path.join(ref, "spot")
    spot_names = sorted(n[:-5] for n in os.listdir(spot_ref) if n.endswith(".json")) if os.path.isdir(spot_ref) else []
    for mode, bar in CORPUS_BARS.items():
        pairs = []
        for n in spot_names:
            a = open(os.path.join(spot_ref, n + ".json"), "rb").read()
            p = os.path.join(res, "spot", mode, n + ".json")
            b = open(p, "rb").read() if os.path.exists(p) else None
            pairs.append((n, a, b))
        if not pairs:
            continue
        s, rows = compare_set(pairs, bar, mode)
        s["rows"] = rows
        report["spot"][mode] = s
        lines.append(f"spot (clef decide) cuda {mode}: {len(pairs) - s['failing']}/{len(pairs)} ok, worst max|dp| "
                     f"{s['worst_max_dp']:.3e}")
    json.dump(report, open(out, "w"), indent=1)
    print("\n".join(lines))


def calibrate(clef, model, base, tokens, out):
    """Pads BASE's state with filler words until `clef decide` on the CPU reports exactly `tokens` input
    tokens (the tokenizer and the prompt template do not depend on the model's dimensions)."""
    req = json.load(open(base))
    state = req["state"] if isinstance(req["state"], dict) else {"text": req["state"]}

    def count(words):
        state["notes"] = " ".join(["the"] * words)
        req["state"] = state
        body = json.dumps(req).encode()
        r = subprocess.run([clef, "decide", "--model", model, "--device", "cpu", "--threads", "2", "--request", "-"],
                           input=body, capture_output=True)
        if r.returncode != 0:
            sys.exit(f"calibrate: clef decide failed: {r.stderr.decode()[-300:]}")
        return json.loads(r.stdout)["usage"]["input_tokens"], body

    words, seen = 0, set()
    for _ in range(20):
        n, body = count(words)
        if n == tokens:
            open(out, "wb").write(body + b"\n")
            print(f"calibrate: {out}: {n} input tokens ({words} filler words)")
            return
        if words in seen or (words == 0 and n > tokens):
            break
        seen.add(words)
        words = max(0, words + (tokens - n))
    sys.exit(f"calibrate: could not reach {tokens} input tokens (last {n} at {words} filler words)")


# ------------------------------------------------------------------------------------------ bench

def tag(step, variant):
    for line in sys.stdin:
        line = line.strip()
        try:
            d = json.loads(line)
        except Exception:
            continue
        if isinstance(d, dict):
            d["step"], d["variant"] = step, variant
            print(json.dumps(d))


def gpu(step, when, csv):
    f = [x.strip() for x in csv.split(",")]
    d = {"kind": "gpu", "step": step, "when": when, "raw": csv.strip()}
    if len(f) >= 5:
        d.update(name=f[0], sm_mhz=f[1], mem_mhz=f[2], power_w=f[3], temp_c=f[4])
    print(json.dumps(d))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def summary(path):
    rows = []
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except Exception:
            pass
    gpu_after = {}
    for d in rows:  # the device's state around each step: the figures carry it
        if d.get("kind") == "gpu":
            gpu_after.setdefault(d["step"], {})[d["when"]] = d

    def state(step):
        g = gpu_after.get(step, {})
        parts = []
        for when in ("before", "after"):
            x = g.get(when)
            if x and "name" in x:
                parts.append(f"{when} sm {x['sm_mhz']} / mem {x['mem_mhz']} MHz, {x['power_w']} W, {x['temp_c']} C")
        name = next((x["name"] for x in g.values() if "name" in x), "?")
        return f"[{name}; {'; '.join(parts) or 'no nvidia-smi sample'}]"

    out = []
    prefill = [d for d in rows if d.get("kind") == "prefill" and not d.get("graph")]
    packed = [d for d in rows if d.get("kind") == "packed" and not d.get("graph")]
    # the bar lines: issue #38's figures from the baseline (the defaults), first run of each
    base = [d for d in prefill if d.get("variant", "base") == "base"]
    for (p, t), bar in sorted(BARS_MS.items()):
        d = next((d for d in base if d["precision"] == p and d["tokens"] == t), None)
        if d:
            ms = d["seconds"] * 1e3
            out.append(f"{p} {t} tok: {ms:.1f} ms (bar {bar}){'' if ms <= bar else ' over'} {state(d.get('step'))}")
        else:
            out.append(f"{p} {t} tok: not measured (bar {bar})")
    d = next((d for d in packed if d.get("variant", "base") == "base" and d["precision"] == "bf16"), None)
    if d:
        out.append(f"bf16 {d['records']} x {d['tokens_each']} packed: {d['tokens_per_s']:.0f} tok/s (bar {BAR_PACKED_BF16})"
                   f"{'' if d['tokens_per_s'] >= BAR_PACKED_BF16 else ' under'} {state(d.get('step'))}")
    else:
        out.append(f"bf16 16 x 436 packed: not measured (bar {BAR_PACKED_BF16})")
    served = [d for d in rows if d.get("kind") == "served"]
    for d in served:
        p50 = num(d.get("p50_ms"))
        bar = ""
        if d.get("label") == "text" and d.get("clients") == 1:
            bar = f" (bar p50 {BAR_SERVED_P50_MS})" + ("" if p50 is not None and p50 <= BAR_SERVED_P50_MS else " over")
        out.append(f"served bf16 {d.get('label_long', d.get('label'))}: p50 {d.get('p50_ms')} ms, p99 {d.get('p99_ms')} ms, "
                   f"{d.get('clients')} client{'s' if d.get('clients') != 1 else ''}, {d.get('requests')} requests, "
                   f"{d.get('errors')} errors, {d.get('req_per_s')} req/s, {d.get('tokens_per_s')} tok/s, "
                   f"mean {d.get('mean_tokens')} tokens{bar} {state(d.get('step'))}")
    if not served:
        out.append("served bf16 436 tok: not measured")
    for d in rows:
        if d.get("kind") == "summary" and "median_seconds_text" in d:  # clef bench: the engine with the head
            out.append(f"engine (clef bench) bf16 {d['tokens']} tok: text {d['median_seconds_text'] * 1e3:.1f} ms, "
                       f"head {d['median_seconds_head'] * 1e3:.2f} ms {state(d.get('step'))}")
    # every bench row, then the variants side by side
    for d in prefill + [d for d in rows if d.get("kind") == "prefill" and d.get("graph")]:
        out.append("  prefill %-4s %-8s %-30s%s %6d tok: %9.1f ms %8.0f tok/s  MFU %5.1f%%  linear %7.1f ms at %5.1f%%" % (
            d["precision"], d.get("variant", "base"), d.get("kernels", "?"), " graph" if d.get("graph") else "",
            d["tokens"], d["seconds"] * 1e3, d["tokens_per_s"], d.get("mfu_pct", 0), d.get("linear_ms", 0),
            d.get("linear_pct", 0)))
    for d in rows:
        if d.get("kind") in ("throughput", "packed"):
            out.append("  %-10s %-4s %-8s %-30s%s %d x %d tok: %.0f tok/s" % (
                d["kind"], d["precision"], d.get("variant", "base"), d.get("kernels", "?"),
                " graph" if d.get("graph") else "", d["records"], d["tokens_each"], d["tokens_per_s"]))
    for d in rows:  # CLEF_CUDA_GEMM_TOPN's choices (bench_cuda's device line)
        if d.get("kind") == "device" and d.get("gemm_topn", 0) > 1:
            out.append(f"  gemm top{d['gemm_topn']} {d['precision']} {d.get('variant', 'base')}: {d.get('gemm_shapes')} shapes tuned, "
                       f"{d.get('gemm_picked_other')} picked another than the first; one call of each: "
                       f"{d.get('gemm_first_us')} us first -> {d.get('gemm_best_us')} us picked")
    variants = []
    for d in prefill:
        if d.get("variant") and d["variant"] not in variants:
            variants.append(d["variant"])
    if len(variants) > 1:
        out.append("variants side by side (ms; each step's own GPU state in bench.jsonl):")
        keys = sorted({(d["precision"], d["tokens"]) for d in prefill if d.get("variant", "base") != "base"})
        out.append("  %-40s " % "variant" + " ".join("%14s" % f"{p} {t}" for p, t in keys) + "  %10s" % "packed tok/s")
        for v in variants:
            cells = []
            for p, t in keys:
                ds = [d for d in prefill if d.get("variant") == v and d["precision"] == p and d["tokens"] == t]
                cells.append("%14s" % ("/".join("%.1f" % (d["seconds"] * 1e3) for d in ds) or "-"))
            pk = [d for d in packed if d.get("variant") == v and (d["precision"], 436) in keys]
            out.append("  %-40s " % v[:40] + " ".join(cells) + "  %10s" % ("/".join("%.0f" % d["tokens_per_s"] for d in pk) or "-"))
    ops = {}
    for d in rows:
        if d.get("kind") == "kernel" and not d.get("graph") and d["op"] in (
                "linear", "delta_rule", "delta_rule.A", "delta_rule.B", "attention", "rmsnorm", "conv1d_silu"):
            ops.setdefault((d["precision"], d["tokens"], d["op"]), []).append((d.get("variant", "base"), d["ms"], d.get("tflops", 0)))
    if ops:
        out.append("per op (ms per forward, variant):")
    for (p, t, op), vs in sorted(ops.items()):
        out.append("  kernel %-4s %6d %-12s " % (p, t, op) + "  ".join("%s %.2f" % (v, ms) for v, ms, _ in vs))
    print("\n".join(out))


# ------------------------------------------------------------------------------------------ served

def client(port, clients, seconds, body_path, label, label_long):
    """`clients` keep-alive connections POST the same body to /v1/systemone for `seconds`; one JSON line:
    latency percentiles from the socket (request written to answer read), throughput, input tokens."""
    import http.client
    import threading

    body = open(body_path, "rb").read().strip()
    lat, toks, errors, lock = [], [], [0], threading.Lock()
    stop_at = time.time() + seconds

    def run():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while time.time() < stop_at:
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
            except Exception:
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                continue
            dt = time.perf_counter() - t0
            with lock:
                if r.status == 200:
                    lat.append(dt)
                    toks.append(json.loads(data).get("usage", {}).get("input_tokens", 0))
                else:
                    errors[0] += 1
        conn.close()

    t0 = time.time()
    ths = [threading.Thread(target=run) for _ in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.time() - t0
    lat.sort()

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3, 2) if lat else None

    print(json.dumps({"kind": "served", "label": label, "label_long": label_long, "clients": clients,
                      "requests": len(lat), "errors": errors[0], "seconds": round(wall, 2),
                      "req_per_s": round(len(lat) / wall, 2), "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99),
                      "min_ms": pct(0.0), "max_ms": round(lat[-1] * 1e3, 2) if lat else None,
                      "tokens_per_s": round(sum(toks) / wall, 1), "mean_tokens": round(sum(toks) / max(1, len(toks)), 1)}))
    return 0 if lat else 1


# ------------------------------------------------------------------------------------------ 9B checkpoint

def make_full(out, dims="--full-dims"):
    """write_tiny.py --full-dims's files (the same names, shapes and dtypes), but each tensor's values are one
    2M-element block of its value rule repeated: seconds instead of the minutes of the exact generator, and no
    manifest (nothing is compared against it). Finite, of the right scale: the times are the real ones."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
    import numpy as np
    import write_tiny as wt

    blocks = {}

    def chunks(self):
        n, esize = self.numel, (2 if self.dtype == "BF16" else 4)
        key = (self.dtype, self.center, self.halfwidth)
        if key not in blocks:
            if self.halfwidth == 0.0:
                x = np.full(wt.CHUNK, self.center, dtype=np.float64)
            else:
                x = self.center + self.halfwidth * wt.uniform(wt.tensor_key("full:" + repr(key)), 0, wt.CHUNK)
            x32 = x.astype(np.float32)
            blocks[key] = (wt.f32_to_bf16_bits(x32).astype("<u2") if self.dtype == "BF16" else x32.astype("<f4")).tobytes()
        blk = memoryview(blocks[key])
        for start in range(0, max(n, 1), wt.CHUNK):
            m = min(wt.CHUNK, n - start) if n else 1
            yield blk[: m * esize]

    wt.T.chunks = chunks
    wt.write_manifest = lambda d: []
    t0 = time.time()
    rc = wt.main([out] + ([dims] if dims else []))
    print(f"make-full: {out} in {time.time() - t0:.1f} s")
    return rc


# ------------------------------------------------------------------------------------------ dry run

def stub(name, args):
    """DEVCHECK_DRY=1: stand-ins for nvidia-smi, test_cuda_ops, bench_cuda, clef (batch / decide / bench /
    serve) and ncu with the real programs' output shapes, so the script's control flow (steps, timeouts,
    budget, summary) runs on a machine without a GPU. $DEVCHECK_STEP names the running step;
    $DEVCHECK_DRY_HANG (a substring of step names) makes the matching steps hang: their timeouts fire."""
    step = os.environ.get("DEVCHECK_STEP", "")
    hang = os.environ.get("DEVCHECK_DRY_HANG", "")
    if hang and hang in step:
        time.sleep(100000)
    opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    if name == "nvidia-smi":
        if any(a.startswith("--query-gpu") for a in args):
            print("DRY stub GPU, 1980, 2619, 123.45, 41")  # --format=csv,noheader,nounits
        else:
            print("GPU 0: DRY stub GPU (UUID: GPU-dry)")
        return 0
    if name == "test_cuda_ops":
        print("worst rel: fp32 1.000e-06, fast 1.000e-05, bf16 1.000e-03 (dry)")
        print("10 passed, 0 failed")
        return 0
    if name == "ncu":
        print("k_dry  (dry)")
        return 0
    if name == "bench_cuda":
        prec = opt.get("--precision", "fast")
        precs = {"all": ["fast", "bf16", "fp32"], "both": ["fast", "fp32"]}.get(prec, [prec])
        variant = os.environ.get("CLEF_CUDA_DELTA", "v4")
        scale = 0.9 if variant == "v5" else 1.0
        for p in precs:
            k = {"kernels": f"linear={p},attn=v4,delta={variant}", "graph": opt.get("--graph") == "1"}
            per = {"fast": 0.0772, "bf16": 0.0525, "fp32": 0.359}[p] * scale  # ms a token, run d's 436 figures
            for t in [int(x) for x in opt.get("--tokens", "436").split(",")]:
                ms = per * t
                print(json.dumps(dict(kind="prefill", precision=p, tokens=t, seconds=ms / 1e3, tokens_per_s=t / ms * 1e3,
                                      mfu_pct=27.0, linear_ms=ms / 2, linear_pct=55.0, last_row_finite=True, **k)))
                for op, f in (("linear", 0.5), ("delta_rule", 0.25), ("delta_rule.A", 0.12), ("delta_rule.B", 0.12),
                              ("attention", 0.03)):
                    print(json.dumps(dict(kind="kernel", precision=p, tokens=t, op=op, ms=ms * f, tflops=1.0, **k)))
            n = int(opt.get("--packed", "0"))
            if n:
                ms = per * 436 * n * 0.8
                print(json.dumps(dict(kind="packed", precision=p, records=n, tokens_each=436, seconds=ms / 1e3,
                                      tokens_per_s=n * 436 / ms * 1e3, records_per_s=n / ms * 1e3, **k)))
            topn = int(os.environ.get("CLEF_CUDA_GEMM_TOPN") or 0)
            gemm = dict(gemm_topn=topn, gemm_shapes=8, gemm_picked_other=3, gemm_first_us=900.0, gemm_best_us=850.0) \
                if topn > 1 else {}
            print(json.dumps(dict(kind="device", precision=p, name="DRY stub GPU", **gemm, **k)))
        return 0
    if name == "clef":
        verb = args[0] if args else ""
        prec = os.environ.get("CLEF_PRECISION") or opt.get("--precision", "fp32")
        dev = os.environ.get("CLEF_DEVICE") or opt.get("--device", "auto")
        # the cpu's answer, moved by a precision's typical error on "cuda" (so the comparison has figures)
        delta = 0.0 if dev == "cpu" else {"fp32": 1e-7, "fast": 1e-5, "bf16": 1e-3}.get(prec, 0.0)

        def answer(body):
            try:
                d = json.loads(body)
            except Exception:
                return b'{"error":{"type":"InvalidJSON","message":"dry"}}'
            if not isinstance(d, dict) or not isinstance(d.get("questions"), dict) or not d["questions"]:
                return b'{"error":{"type":"InvalidRequest","message":"dry"}}'
            ans = {q: {"raw": {"a": 0.6 - delta, "b": 0.4 + delta}} for q in d["questions"]}
            return json.dumps({"answers": ans, "usage": {"input_tokens": 436, "output_tokens": 0}}).encode()

        if verb == "batch":
            inp, outp = args[-2:]
            with open(outp, "wb") as f:
                for line in open(inp, "rb"):
                    f.write(answer(line) + b"\n")
            print('{"event":"batch","dry":true}', file=sys.stderr)
            return 0
        if verb == "decide":
            r = opt.get("--request", "-")
            body = sys.stdin.buffer.read() if r == "-" else open(r, "rb").read()
            sys.stdout.buffer.write(answer(body) + b"\n")
            return 0
        if verb == "bench":
            for t in [int(x) for x in opt.get("--tokens", "436").split(",")]:
                print(json.dumps({"kind": "summary", "tokens": t, "median_seconds_text": 0.0525 * t / 1e3,
                                  "median_seconds_head": 0.0004, "dry": True}))
            return 0
        if verb == "serve":
            return serve_stub()
    print(f"stub: unknown {name} {args}", file=sys.stderr)
    return 2


def serve_stub():
    """`clef serve --port 0` enough for the served step: the listening line, /health, POST answers."""
    import http.server

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.reply(200, b'{"status":"ok"}')

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(0.002)
            self.reply(200, b'{"answers":{},"usage":{"input_tokens":436,"output_tokens":0}}')

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    print('{"event":"listening","host":"127.0.0.1","port":%d}' % srv.server_address[1], file=sys.stderr, flush=True)
    srv.serve_forever()
    return 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, a = argv[0], argv[1:]
    if cmd == "corpus-input" and len(a) == 2:
        corpus_input(*a)
    elif cmd == "calibrate" and len(a) == 5:
        calibrate(a[0], a[1], a[2], int(a[3]), a[4])
    elif cmd == "compare" and len(a) == 3:
        compare(*a)
    elif cmd == "tag" and len(a) == 2:
        tag(*a)
    elif cmd == "gpu" and len(a) == 3:
        gpu(*a)
    elif cmd == "summary" and len(a) == 1:
        summary(a[0])
    elif cmd == "client" and len(a) == 6:
        return client(int(a[0]), int(a[1]), float(a[2]), a[3], a[4], a[5])
    elif cmd == "make-full" and len(a) in (1, 2):  # a second argument: write_tiny's dims flag ("" = tiny)
        return make_full(*a)
    elif cmd == "stub" and a:
        return stub(a[0], a[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
