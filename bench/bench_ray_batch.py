"""Throughput of `python -m clef.ray batch` on 1 and on 3 local Ray nodes (--num-cpus 1 each, in a
network namespace with only lo: tests/parity/ray_cluster.py), next to `clef batch --threads 1`, on
the same input: the 200 states x 5 question sets of tests/parity/deploy_traffic.py (1,000 lines).
docs/deploy.md "Measured". Run as root from the repository root:

    .venv-test/bin/python bench/bench_ray_batch.py [--model models/tiny]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
import deploy_traffic  # noqa: E402
import ray_cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny"))
    a = ap.parse_args()
    model = os.path.abspath(a.model)
    build = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
    lib = os.path.join(build, "dist", "libclef.so")
    tmp = tempfile.mkdtemp(prefix="clef-bench-ray-")
    inp = os.path.join(tmp, "in.jsonl")
    lines = [b for _, b in deploy_traffic.states_traffic()]  # CLEF_DEPLOY_STATES=N: N x 5 lines
    deploy_traffic.write_jsonl(inp, lines, final_newline=True)
    n = len(lines)
    out = {}
    t0 = time.time()
    subprocess.run([os.path.join(build, "clef"), "batch", "--model", model, "--threads", "1", inp,
                    os.path.join(tmp, "ref.jsonl")], check=True, capture_output=True)
    out["clef_batch_threads1_lines_per_s"] = round(n / (time.time() - t0), 1)
    env = {"CLEF_LIBRARY": lib, "PYTHONPATH": os.path.join(ROOT, "python", "src")}
    for workers in (0, 2):
        with ray_cluster.RayCluster(workers=workers, cpus=1, env=env) as c:
            dst = os.path.join(tmp, f"out{workers}.jsonl")
            t0 = time.time()
            p = c.run([ray_cluster.PY, "-m", "clef.ray", "batch", inp, dst, "--model", model, "--shard-lines", "32"],
                      capture_output=True)
            dt = time.time() - t0
            same = open(dst, "rb").read() == open(os.path.join(tmp, "ref.jsonl"), "rb").read()
            out[f"ray_{1 + workers}_nodes_lines_per_s"] = round(n / dt, 1)
            out[f"ray_{1 + workers}_nodes_equal"] = same and p.returncode == 0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
