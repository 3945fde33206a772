"""`python -m clef.ray batch` on a Ray cluster (a head and two worker nodes, --num-cpus 1 each, in a
network namespace with only lo: ray_cluster.py) against `clef batch`, on models/tiny.

IN: 2,000 lines (deploy_traffic.batch_lines: 200 states asked 5 times each, states seen once,
refused requests, empty lines, images, one line over --max-line), shuffled.
1. One run through two failures: a worker node SIGKILLed once it has committed a part (its shard in
   flight goes to another engine and is committed in the same run: the driver's shard_requeued
   line, the part's node), later the driver SIGKILLed once OUT has lines; then the same command
   again: OUT byte-equal to clef batch's (so every line exactly once, in order), the same
   OUT.clef-batch record, the kept bytes and committed parts reused, at least two nodes did work;
   exit 1 (IN has error lines; no --allow-errors), as clef batch. Once more with nothing left to
   do: exit 0 with --allow-errors, 1 without (the kept error lines count).
2. clef batch resumes a clef.ray OUT cut short (the two programs share the record and the rules):
   the record vouches for nine tenths of OUT, a torn line follows.
Nothing in the namespace listens or connects beyond loopback (ss).
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_traffic  # noqa: E402
import ray_cluster  # noqa: E402

ROOT = ray_cluster.ROOT
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
LIB = os.path.join(BUILD, "dist", "libclef.so")
MODEL = os.path.join(ROOT, "models", "tiny")
MAX_LINE = str(deploy_traffic.LONG_LINE_MAX)

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


def last_event(stderr: bytes):
    for line in reversed(stderr.decode("utf-8", "replace").splitlines()):
        if line.startswith('{"event": "batch"'):
            return json.loads(line)
    return None


def main():
    why = ray_cluster.missing()
    if why:
        skip(why)
    if not os.path.exists(LIB):
        skip(f"no {LIB} (the sanitizer build ships no shared library; make builds it)")
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        skip("no models/tiny (make tiny)")
    probe = subprocess.run([ray_cluster.PY, "-c", "import sys; sys.path.insert(0, 'python/src'); import clef; "
                            "assert hasattr(clef, 'state_key')"], cwd=ROOT, capture_output=True,
                           env=dict(os.environ, CLEF_LIBRARY=LIB))
    if probe.returncode != 0:
        skip("clef.state_key is missing from the Python package (the routing key, branch h-key)")
    tmp = tempfile.mkdtemp(prefix="clef-ray-batch-")
    inp = os.path.join(tmp, "in.jsonl")
    deploy_traffic.write_jsonl(inp, deploy_traffic.batch_lines())
    ref = os.path.join(tmp, "ref.jsonl")
    t0 = time.time()
    ref_p = subprocess.Popen([CLEF, "batch", "--model", MODEL, "--threads", "1", "--max-line", MAX_LINE, "--allow-errors",
                              inp, ref],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    env = {"CLEF_LIBRARY": LIB, "PYTHONPATH": os.path.join(ROOT, "python", "src")}
    with ray_cluster.RayCluster(workers=2, cpus=1, env=env) as c:
        print(f"cluster up in {time.time() - t0:.0f} s")

        def driver(out, extra=()):
            return c.popen([ray_cluster.PY, "-m", "clef.ray", "batch", inp, out, "--model", MODEL, "--max-line",
                            MAX_LINE, "--shard-lines", "32"] + list(extra), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)

        def parts(out):
            d = out + ".clef-ray"
            return [n for n in os.listdir(d) if n.startswith("part-") and n.endswith(".jsonl")] if os.path.isdir(d) else []

        def part_nodes(out):
            """{part file: the node that answered it} (each part's header line names its node)."""
            got = {}
            for n in parts(out):
                try:
                    with open(os.path.join(out + ".clef-ray", n), "rb") as f:
                        got[n] = json.loads(f.readline())["node"]
                except (OSError, ValueError, KeyError):
                    pass
            return got

        # 1. one run through both failures: a worker node dies mid-run (its shard goes to another
        # engine in the same run), later the driver dies; then the same command again finishes OUT.
        # One pass of the traffic instead of one per failure (CI time), every check kept.
        out_a = os.path.join(tmp, "a.jsonl")
        p = driver(out_a)
        node2 = c.node_id(2)
        t_end = time.time() + 600
        # node 2 is killed once it has committed a part: its engine is up and holds its next shard
        while node2 not in part_nodes(out_a).values() and p.poll() is None and time.time() < t_end:
            time.sleep(0.2)
        n_before = len(parts(out_a))
        killed = c.kill_node(2)
        check(bool(killed) and p.poll() is None,
              f"worker node 2 SIGKILLed mid-run ({len(killed)} processes, {n_before} parts committed before)")
        t_end = time.time() + 600
        while (len(parts(out_a)) < n_before + 10 or not os.path.exists(out_a) or os.path.getsize(out_a) == 0) \
                and p.poll() is None and time.time() < t_end:
            time.sleep(0.1)
        check(p.poll() is None, "the driver was still running when killed")
        p.send_signal(signal.SIGKILL)
        _, err_1 = p.communicate(timeout=60)
        size_at_kill = os.path.getsize(out_a)
        requeued = [json.loads(ln) for ln in err_1.decode("utf-8", "replace").splitlines()
                    if ln.startswith('{"event": "shard_requeued"')]
        by_node = part_nodes(out_a)
        check(bool(requeued) and all(by_node.get(f"part-{e['shard']:06d}.jsonl") not in (None, node2)
                                     for e in requeued),
              f"node 2's shard in flight went to another engine and was committed in the same run: {requeued} "
              f"{err_1.decode()[-600:] * (not requeued)}")
        n_parts = len(parts(out_a))
        p = driver(out_a)
        _, err_a = p.communicate(timeout=3000)
        ev = last_event(err_a)
        # IN has error lines: without --allow-errors both programs exit 1 and say why
        check(p.returncode == 1 and ev is not None and ev["errors"] > 0 and b"are errors (exit 1" in err_a,
              f"the rerun (no --allow-errors) exits 1 over its error lines ({p.returncode}): {err_a.decode()[-800:]}")
        ref_err = ref_p.communicate(timeout=3000)[1]
        check(ref_p.returncode == 0, f"clef batch exits 0 ({ref_p.returncode}): {ref_err.decode()[-300:]}")
        ref_bytes = open(ref, "rb").read()
        total = 10 * deploy_traffic.STATES
        check(ref_bytes.count(b"\n") == total, f"clef batch wrote {total} lines")
        check(open(out_a, "rb").read() == ref_bytes,
              "OUT after a worker's and the driver's SIGKILL and a rerun is byte-equal to clef batch's "
              "(every line once, in order)")
        check(open(out_a + ".clef-batch", "rb").read() == open(ref + ".clef-batch", "rb").read(),
              "OUT.clef-batch record is clef batch's")
        check(ev is not None and ev["skipped"] > 0 and ev["skipped"] + ev["written"] == total,
              f"the rerun kept OUT's {size_at_kill} bytes and wrote the rest: {ev}")
        check(ev is not None and ev["shards_reused"] > 0, f"the rerun reused committed parts ({n_parts} on disk)")
        nodes = (ev or {}).get("nodes", {})
        check(sum(1 for v in nodes.values() if v > 0) >= 2, f"at least two nodes did work in the rerun: {nodes}")
        check(not os.path.exists(out_a + ".clef-ray"), "the part files are removed once OUT is complete")
        # a run with nothing left to do: exit 0 with --allow-errors; without, OUT's kept error lines
        # still count, as in clef batch
        for extra, want in ((["--allow-errors"], 0), ([], 1)):
            p = driver(out_a, extra)
            _, err_k = p.communicate(timeout=600)
            ev = last_event(err_k)
            check(p.returncode == want and ev is not None and ev["written"] == 0 and ev["errors"] > 0,
                  f"a complete OUT with error lines, {extra or 'no --allow-errors'}: exit {want} "
                  f"({p.returncode}, {ev})")
        check(not c.listeners_outside_loopback(), "nothing in the namespace beyond loopback (ss)")

    # 2. clef batch resumes what clef.ray wrote: clef.ray's record (its identity line) vouching for the
    # first nine tenths of OUT, as after an interrupted run, with a torn line after it (the rule is
    # the same wherever the cut is; a late one leaves clef batch the fewest lines to answer)
    out_c = os.path.join(tmp, "c.jsonl")
    cut = ref_bytes.index(b"\n", len(ref_bytes) * 9 // 10) + 1
    with open(out_c, "wb") as f:
        f.write(ref_bytes[:cut] + ref_bytes[cut:cut + 100])
    ident = open(out_a + ".clef-batch", "rb").read().split(b"\n")[0] + b"\n"
    state = ('{"out_lines":%d,"out_bytes":%d,"out_sha256":"%s"}\n'
             % (ref_bytes[:cut].count(b"\n"), cut, hashlib.sha256(ref_bytes[:cut]).hexdigest())).encode()
    with open(out_c + ".clef-batch", "wb") as f:
        f.write(ident + state)
    r = subprocess.run([CLEF, "batch", "--model", MODEL, "--threads", "1", "--max-line", MAX_LINE, "--allow-errors",
                        inp, out_c], capture_output=True, timeout=300)
    check(r.returncode == 0 and open(out_c, "rb").read() == ref_bytes,
          f"clef batch resumes a clef.ray OUT: {r.stderr.decode()[-300:]}")
    print(f"{time.time() - t0:.0f} s")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    subprocess.run(["rm", "-rf", tmp])
    print("ray batch: byte-equal to clef batch through a worker's and the driver's SIGKILL")


if __name__ == "__main__":
    main()
