#!/usr/bin/env python3
"""Images end to end on the tiny checkpoint against the reference fixtures (tests/fixtures/tiny).

For every fixture request that carries images and succeeded in the reference:
  1. tests/vision_tool --request (the engine's parse + encode + image processor, then the tower and
     the M-RoPE planes on their own):
       image_grid_thw and the pad runs equal; pixel_values sha256 equal (so the tower below runs on
       the reference's exact pixel_values: the tower is checked in isolation from the resize);
       position planes T, H, W equal to get_rope_index's;
       merger rows (the tower's output) within 1e-5 relative L2, per row.
  2. clef decide --model models/tiny --request F: response bytes equal to the reference's. A
     difference is tolerated only as a near-tie: the request's probabilities pass (3), every
     differing number is one unit of the 4th decimal away, and some reference probability lies
     within TOL_P of a rounding midpoint.
  3. clef decide on the same request with "raw": true inserted (our extension: unrounded fp32
     probabilities) and --dump-layers: probabilities within TOL_P absolute; decoder-layer and
     final-norm rows (relative L2 per row) reported, with a loose bound that only catches gross
     errors (a wrong replacement row or position).
Tolerances: the tower target is 1e-5 (measured ~1.5e-6; the fp32 reference itself is ~1.4e-6 from
an fp64 run of the same tower, ours ~1.5e-7). Probabilities and final-norm rows are bounded against
the reference "within its own fp32 rounding", measured by the float64 oracle of the same reference
code (tests/fixtures/tiny64, tools/reference/make_fixtures64.py): for every option
|p - p32| <= 1e-6 + |p32 - p64|, and for every stored final-norm row
relL2(ours, ref32) <= 1e-5 + relL2(ref32, ref64). The random tiny decoder amplifies the tower's
1e-6 differences at a few ill-conditioned rows (up to ~7e-5 by layer 7 in both the reference and
ours), so the per-layer rows are only checked for gross errors (LAYERS_BOUND) and reported.
Prints the worst values measured (last line: summary). Run with .venv-test/bin/python; binaries from
$CLEF_BUILD (default build/), checkpoint from $CLEF_TINY (default models/tiny). Exit 0 pass, 1
fail, 77 skip.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from near_tie import near_tie

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
MODEL = os.environ.get("CLEF_TINY", os.path.join(ROOT, "models", "tiny"))
FIX = os.path.join(ROOT, "tests", "fixtures", "tiny")
CORPUS = os.path.join(ROOT, "tests", "corpus")

TOL_ROWS = 1e-5      # tower (merger) rows: relative L2 per row
LAYERS_BOUND = 1e-3  # decoder layer and final-norm rows: relative L2 per row (gross errors only)
# Steps 1-3 run the parity path (every Linear accumulated in double, CLEF_LINEAR=double), whose error
# is below the reference's own fp32 rounding. Step 4 runs the default path (fp32 FMA GEMM): a faster
# path in issue 8's sense, bounded by |p - p64| <= TOL_P_FAST, response bytes reported.
PARITY_ENV = dict(os.environ, CLEF_LINEAR="double")
FAST_ENV = {k: v for k, v in os.environ.items() if k != "CLEF_LINEAR"}
TOL_P_FAST = 1e-4
TOL_P = 1e-6         # probabilities: |p - p32| <= TOL_P + |p32 - p64|
TOL_FN = 1e-5        # final-norm rows: relL2(ours, ref32) <= TOL_FN + relL2(ref32, ref64)
FIX64 = os.path.join(ROOT, "tests", "fixtures", "tiny64")


def skip(msg):
    print(f"skip: {msg}")
    sys.exit(77)


def rel_l2_rows(got, ref):
    """Worst per-row ||got - ref|| / max(||ref||, tiny)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    num = np.linalg.norm(got - ref, axis=-1)
    den = np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)
    return float((num / den).max()) if len(num) else 0.0


def main():
    clef = os.path.join(BUILD, "clef")
    tool = os.path.join(BUILD, "tests", "vision_tool")
    for p in (clef, tool):
        if not os.path.exists(p):
            skip(f"{p} not built (make)")
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        skip(f"{MODEL} missing (make tiny)")
    if not os.path.exists(os.path.join(FIX, "index.json")):
        skip(f"{FIX}/index.json missing")
    ix = json.load(open(os.path.join(FIX, "index.json"), encoding="utf-8"))
    data = open(os.path.join(FIX, ix["bin"]["file"]), "rb").read()

    def arr(ref):
        n = int(np.prod(ref["shape"]))
        return np.frombuffer(data, dtype="<f4", count=n, offset=ref["off"]).reshape(ref["shape"])

    def pick(a, rows):
        return a if rows == "all" else a[rows]

    ix64 = json.load(open(os.path.join(FIX64, "index.json"), encoding="utf-8"))
    data64 = open(os.path.join(FIX64, ix64["bin"]["file"]), "rb").read()
    by64 = {r["name"]: r for r in ix64["requests"]}

    def arr64(ref):
        n = int(np.prod(ref["shape"]))
        return np.frombuffer(data64, dtype="<f8", count=n, offset=ref["off"]).reshape(ref["shape"])

    reqs = [r for r in ix["requests"] if r.get("ok") and r.get("media") and r["media"].get("image_grid_thw")]
    if not reqs:
        skip("no image requests in the fixtures")
    fails = []
    worst = {"merger": (0.0, ""), "final_norm": (0.0, ""), "final_norm64": (0.0, ""), "layers": (0.0, ""),
             "dp": (0.0, ""), "dp_fast": (0.0, "")}
    n_pix_equal = n_bytes_equal = n_pixels_mode = 0
    ties = []
    tmpdir = tempfile.TemporaryDirectory(prefix="clef_vis_")
    tmp = tmpdir.name

    def note(key, val, name):
        if val > worst[key][0] or not worst[key][1]:
            worst[key] = (max(val, worst[key][0]), name if val >= worst[key][0] else worst[key][1])

    for r in reqs:
        name, m = r["name"], r["media"]
        path = os.path.join(CORPUS, r["file"])
        out = os.path.join(tmp, name)
        os.makedirs(out, exist_ok=True)
        # 1. tower and positions on their own
        p = subprocess.run([tool, "--model", MODEL, "--request", path, "--out", out], capture_output=True, text=True, env=PARITY_ENV)
        if p.returncode != 0:
            fails.append(f"{name}: vision_tool failed: {p.stderr.strip()}")
            continue
        info = json.loads(p.stdout)
        grids = [im["grid_thw"] for im in info["images"]]
        runs = [[im["pad_start"], im["pad_start"] + im["n_pad"]] for im in info["images"]]
        if grids != m["image_grid_thw"]:
            fails.append(f"{name}: grid_thw {grids} != {m['image_grid_thw']}")
        if runs != m["image_runs"]:
            fails.append(f"{name}: pad runs {runs} != {m['image_runs']}")
        n_ids = info["n_ids"]
        pos = np.fromfile(os.path.join(out, "positions.i32"), dtype="<i4").reshape(3, n_ids)
        if n_ids != r["n_tokens"] or not np.array_equal(pos, np.array(m["positions"])):
            fails.append(f"{name}: position planes differ")
        px = np.fromfile(os.path.join(out, "pixels.f32"), dtype="<f4").reshape(-1, 1536)
        pv = m["pixel_values"]
        pix_ok = hashlib.sha256(px.tobytes()).hexdigest() == pv["sha256"] and list(px.shape) == pv["full_shape"]
        if pix_ok:
            n_pix_equal += 1
        else:
            d = np.abs(px[pv["rows"]] - arr(pv)).max() if px.shape == tuple(pv["full_shape"]) else float("nan")
            fails.append(f"{name}: pixel_values differ from the reference (stored rows max |d| {d:.3g}); "
                         "the tower check below mixes resize and tower errors")
        rows = np.fromfile(os.path.join(out, "rows.f32"), dtype="<f4").reshape(info["rows"])
        mref = m["merger"]
        if list(rows.shape) != mref["full_shape"]:
            fails.append(f"{name}: merger rows {list(rows.shape)} != {mref['full_shape']}")
        else:
            e = rel_l2_rows(pick(rows, mref["rows"]), arr(mref))
            note("merger", e, name)
            if e > TOL_ROWS:
                fails.append(f"{name}: merger rows rel L2 {e:.3g} > {TOL_ROWS}")
        # the tower on given pixel rows (vision_tool --pixels) gives the same bits
        if len(grids) == 1:
            p = subprocess.run([tool, "--model", MODEL, "--pixels", os.path.join(out, "pixels.f32"), "--grid",
                                ",".join(map(str, grids[0])), "--threads", "2", "--out", os.path.join(out, "rows2.f32")],
                               capture_output=True, text=True, env=PARITY_ENV)
            if p.returncode != 0 or open(os.path.join(out, "rows2.f32"), "rb").read() != rows.tobytes():
                fails.append(f"{name}: vision_tool --pixels differs from --request: {p.stderr.strip()}")
            else:
                n_pixels_mode += 1
        # 3. raw probabilities and layer rows
        raw = open(path, "rb").read()
        i = raw.index(b"{")
        rawp = os.path.join(out, "raw.json")
        open(rawp, "wb").write(raw[:i + 1] + b'"raw":true,' + raw[i + 1:])
        dump = os.path.join(out, "layers")
        os.makedirs(dump, exist_ok=True)
        p = subprocess.run([clef, "decide", "--model", MODEL, "--request", rawp, "--dump-layers", dump],
                           capture_output=True, env=PARITY_ENV)
        # 4. the default (fast) path on the same request: probabilities against the float64 oracle
        pf = subprocess.run([clef, "decide", "--model", MODEL, "--request", rawp], capture_output=True, env=FAST_ENV)
        try:
            fast_answers = json.loads(pf.stdout)["answers"]
            for q in r["questions"]:
                ref64 = arr64({qq["question_id"]: qq for qq in by64[name]["questions"]}[q["question_id"]]["probs"])
                g = np.array([fast_answers[q["question_id"]]["raw"][o] for o in q["option_ids"]], dtype=np.float64)
                d = float(np.abs(g - ref64).max())
                note("dp_fast", d, name)
                if d > TOL_P_FAST:
                    fails.append(f"{name}/{q['question_id']}: fast path |p - p64| {d:.3g} > {TOL_P_FAST}")
        except Exception:  # noqa: BLE001
            fails.append(f"{name}: fast-path run failed: {pf.stdout[:200]!r} {pf.stderr[:200]!r}")
        try:
            resp = json.loads(p.stdout)
            answers = resp["answers"]
        except Exception:  # noqa: BLE001
            fails.append(f"{name}: raw run failed: {p.stdout[:200]!r} {p.stderr[:200]!r}")
            continue
        req_dp = 0.0
        r64 = by64.get(name)
        if r64 is None:
            fails.append(f"{name}: missing from the float64 oracle (tests/fixtures/tiny64)")
            continue
        q64 = {q["question_id"]: q for q in r64["questions"]}
        for q in r["questions"]:
            rawq = answers[q["question_id"]]["raw"]
            ref = arr(q["probs"]).astype(np.float64)
            ref64 = arr64(q64[q["question_id"]]["probs"])
            g = np.array([rawq[o] for o in q["option_ids"]], dtype=np.float64)
            dp = float(np.abs(g - ref).max())
            note("dp", dp, name)
            req_dp = max(req_dp, dp)
            over = np.abs(g - ref) - (TOL_P + np.abs(ref - ref64))
            if over.max() > 0:
                j = int(over.argmax())
                fails.append(f"{name}/{q['question_id']} option {q['option_ids'][j]}: |p - p32| "
                             f"{abs(g[j] - ref[j]):.3g} > {TOL_P} + |p32 - p64| ({abs(ref[j] - ref64[j]):.3g})")
        # 2. response bytes
        p = subprocess.run([clef, "decide", "--model", MODEL, "--request", path], capture_output=True, env=PARITY_ENV)
        got = p.stdout.decode("utf-8", "surrogatepass").rstrip("\n")
        ref_probs = [float(x) for q in r["questions"] for x in arr(q["probs"])]
        if got == r["response"]:
            n_bytes_equal += 1
        elif not any(f.startswith(name + "/") for f in fails) and near_tie(got, r["response"], ref_probs):
            ties.append(name)
        else:
            fails.append(f"{name}: response differs:\n  got: {got[:300]}\n  ref: {r['response'][:300]}")
        L = r["n_tokens"]
        fn = np.fromfile(os.path.join(dump, "final_norm.f32"), dtype="<f4").reshape(L, -1)
        e = rel_l2_rows(pick(fn, r["final_norm"].get("rows", "all")), arr(r["final_norm"]))
        note("final_norm", e, name)
        if e > LAYERS_BOUND:
            fails.append(f"{name}: final-norm rows rel L2 {e:.3g} > {LAYERS_BOUND}")
        # principled per-row bound on the rows the float64 oracle stores
        fn64 = r64["final_norm"]
        rows32 = r["final_norm"].get("rows", "all")
        ref32_all = arr(r["final_norm"]).astype(np.float64)
        ref64_all = arr64(fn64)
        rows64 = range(ref64_all.shape[0]) if fn64["rows"] == "all" else fn64["rows"]
        for k, row in enumerate(rows64):
            i32 = row if rows32 == "all" else rows32.index(row)
            ref32_row, ref64_row = ref32_all[i32], ref64_all[k]
            ours = fn[row].astype(np.float64)
            e_ours = float(np.linalg.norm(ours - ref32_row) / max(np.linalg.norm(ref32_row), 1e-30))
            e_ref = float(np.linalg.norm(ref32_row - ref64_row) / max(np.linalg.norm(ref64_row), 1e-30))
            note("final_norm64", e_ours - e_ref, f"{name} row {row}")
            if e_ours > TOL_FN + e_ref:
                fails.append(f"{name}: final-norm row {row}: rel L2 {e_ours:.3g} > {TOL_FN} + ref32 vs ref64 ({e_ref:.3g})")
        for li, lref in enumerate(r["layers"]):
            lg = np.fromfile(os.path.join(dump, f"layer_{li:02d}.f32"), dtype="<f4").reshape(L, -1)
            e = rel_l2_rows(pick(lg, lref.get("rows", "all")), arr(lref))
            note("layers", e, f"{name} layer {li}")
            if e > LAYERS_BOUND:
                fails.append(f"{name}: layer {li} rows rel L2 {e:.3g} > {LAYERS_BOUND}")

    print(f"{len(reqs)} image requests; pixel_values sha256 equal: {n_pix_equal}/{len(reqs)}; "
          f"response bytes equal: {n_bytes_equal}/{len(reqs)}; near-ties: {len(ties)} {ties}; "
          f"tower on given pixel rows (2 threads) bit-equal: {n_pixels_mode}")
    for k, label in (("merger", f"tower (merger) rows, rel L2 per row (<= {TOL_ROWS})"),
                     ("layers", f"decoder layer rows, rel L2 per row (<= {LAYERS_BOUND})"),
                     ("final_norm", f"final-norm rows, rel L2 per row (<= {LAYERS_BOUND})"),
                     ("final_norm64", f"final-norm rows, rel L2 minus the reference's own fp32 error (<= {TOL_FN})"),
                     ("dp", f"probabilities, max |dp| (<= {TOL_P} + |p32 - p64|)"),
                     ("dp_fast", f"fast path (fp32 GEMM) probabilities, max |p - p64| (<= {TOL_P_FAST})")):
        print(f"  worst {label}: {worst[k][0]:.3g} ({worst[k][1]})")
    for f in fails:
        print("FAIL", f)
    tmpdir.cleanup()
    print(f"{'PASS' if not fails else f'FAIL ({len(fails)})'}: {len(reqs)} image requests, tower {worst['merger'][0]:.2g}, "
          f"|dp| {worst['dp'][0]:.2g}, layers {worst['layers'][0]:.2g}, bytes {n_bytes_equal}+{len(ties)} near-tie"
          f"/{len(reqs)}, pixels {n_pix_equal}/{len(reqs)}")
    return 0 if not fails else 1

if __name__ == "__main__":
    sys.exit(main())
