"""`python -m clef.ray batch IN OUT --model DIR`: `clef batch` over a Ray cluster.

OUT gets the bytes `clef batch` writes for the same IN and settings (same order, error lines, the
RequestTooLong line for a line over --max-line, the same OUT.clef-batch record and resume rules:
_files.py), so either program resumes the other's OUT.

How the work goes:
- The driver reads IN (mapped), computes each line's routing key (clef.state_key: the tokenizer
  only, no weights) and cuts the lines still to answer into shards: all the lines of one key in one
  shard, so that a state's question sets meet one engine's state cache.
- One engine per node (per GPU where the node has GPUs) is a Ray actor pinned to that node
  (NodeAffinitySchedulingStrategy); each takes a shard's lines and answers them with decide_many,
  in rounds (the r-th line of each key in round r: a state computed before its next question set).
- The answers come back through Ray's object store; the driver commits each shard as a part file
  (OUT.clef-ray/part-K.jsonl: a header line naming the shard's line numbers, then the answers;
  written to a temporary name, fsync'ed, renamed) and appends to OUT, in order, every line whose
  shard is committed, fdatasync'ed after each append.
- A worker node that dies loses only its shard in flight, which goes to another engine. A driver
  that dies loses nothing committed: the next run resumes OUT as clef batch would (torn line cut)
  and takes the committed parts instead of recomputing them. No line is written twice: OUT only
  grows from its resumed end. The parts are removed once OUT is complete.

Ray does the placement and the transport; the driver only hands shards to the engines that are up.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Dict, List, Optional

from .._defaults import defaults
from . import _files

WORK_SUFFIX = ".clef-ray"


def _parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def parser() -> argparse.ArgumentParser:
    """The options; the defaults that clef batch shares are the library's (loads libclef)."""
    d = defaults()
    p = argparse.ArgumentParser(prog="python -m clef.ray batch",
                                description="clef batch over a Ray cluster: one answer line per request line of IN, "
                                            "in order, the bytes clef batch writes; resumable.")
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("output", metavar="OUT.jsonl")
    p.add_argument("--model", required=True, metavar="DIR", help="the model folder, at the same path on every node")
    p.add_argument("--address", default=None, help="the Ray cluster (ray.init's address; default: RAY_ADDRESS or a "
                                                   "local one)")
    p.add_argument("--threads", type=int, default=0, help="compute threads per engine; 0 = the CPUs Ray counts on "
                                                          "its node")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--precision", choices=("fp32", "fast"), default=os.environ.get("CLEF_PRECISION") or "fp32")
    p.add_argument("--batch-tokens", type=int, default=d.batch_tokens,
                   help="tokens in one packed forward (default %(default)s)")
    p.add_argument("--max-batch", type=int, default=d.max_batch, help="requests in one packed forward (default "
                                                                     "%(default)s)")
    p.add_argument("--state-cache-mb", type=int, default=None,
                   help=f"MiB of saved states per engine, 0 = off (default {d.state_cache_mb})")
    p.add_argument("--max-length", type=int, default=d.max_length, help="tokens per request (default %(default)s)")
    p.add_argument("--max-line", type=_parse_size, default=d.max_body, metavar="BYTES",
                   help="longer lines get a RequestTooLong line (K, M, G suffixes; default %(default)s)")
    p.add_argument("--split", choices=("file", "qwen2", "qwen35"), default="file")
    p.add_argument("--tile", type=int, choices=(0, 256, 448), default=0)
    p.add_argument("--allow-image-paths", action="store_true")
    p.add_argument("--text-only", action="store_true")
    p.add_argument("--restart", action="store_true", help="discard OUT's contents (never IN's) and start over")
    p.add_argument("--allow-errors", action="store_true", help="exit 0 even when OUT holds error lines (else 1, "
                   "as clef batch; the kept lines of a resume count)")
    p.add_argument("--shard-lines", type=int, default=64, help="about this many lines per shard (a unit of work "
                                                               "and of loss when a node dies)")
    p.add_argument("--engines-per-node", type=int, default=1, help="engines on a node without GPUs")
    return p


def _engine_kwargs(a: argparse.Namespace) -> dict:
    kw = dict(device=a.device, precision=a.precision, max_length=a.max_length, image_tile=a.tile,
              text_only=a.text_only, split=a.split, allow_image_paths=a.allow_image_paths)
    if a.state_cache_mb is not None:
        kw["state_cache_mb"] = a.state_cache_mb
    return kw


def _keys(inp: _files.Input, todo: List[int], a: argparse.Namespace) -> List[Optional[str]]:
    """The routing key of each line to answer (None: refused, or over --max-line)."""
    import clef

    keys: List[Optional[str]] = [None] * len(inp)
    for i in todo:
        if inp.lengths[i] > a.max_line:
            continue
        try:
            keys[i] = clef.state_key(inp.line(i), model=a.model, max_length=a.max_length, image_tile=a.tile,
                                     split=a.split, allow_image_paths=a.allow_image_paths)
        except clef.Error:
            keys[i] = None
    return keys


def _make_engine_class():
    import ray

    @ray.remote
    class ClefEngine:
        """One clef.Engine on one node (or GPU)."""

        def __init__(self, model: str, threads: int, kwargs: dict):
            import clef

            self.node = ray.get_runtime_context().get_node_id()
            self.engine = clef.Engine(model, threads=threads, **kwargs)

        def node_id(self) -> str:
            return self.node

        def answer(self, shard: int, rounds: List[List[bytes]], batch_tokens: int, max_batch: int):
            """The answer bytes of each line, round after round, and this node's id."""
            import clef

            out: List[List[bytes]] = []
            for bodies in rounds:
                res = self.engine.decide_many(bodies, batch_tokens=batch_tokens, max_batch=max_batch, raw=True,
                                              return_exceptions=True)
                out.append([(r.body if isinstance(r, clef.Error) else r).encode("utf-8") for r in res])
            return shard, self.node, out

        def cache_info(self) -> dict:
            return self.engine.cache_info()

    return ClefEngine


class _Parts:
    """OUT.clef-ray/: committed part files, one per shard."""

    def __init__(self, out_path: str, want: bytes, shard_lines: int):
        self.dir = out_path + WORK_SUFFIX
        os.makedirs(self.dir, exist_ok=True)
        # a part belongs to this run's plan only: the record (IN and settings) and the shard size
        self.plan = json.dumps({"record": want.decode().strip(), "shard_lines": shard_lines})

    def path(self, shard: int) -> str:
        return os.path.join(self.dir, f"part-{shard:06d}.jsonl")

    def commit(self, shard: int, lines: List[int], answers: Dict[int, bytes], node: str) -> None:
        head = json.dumps({"plan": self.plan, "shard": shard, "node": node, "lines": lines}, separators=(",", ":"))
        body = head.encode() + b"\n" + b"".join(answers[i] + b"\n" for i in lines)
        tmp = f"{self.path(shard)}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _files.write_all(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, self.path(shard))
        _files.fsync_dir(self.dir)

    def load(self, shard: int, lines: List[int]) -> Optional[Dict[int, bytes]]:
        """A committed part of this plan with exactly these lines, else None (it is recomputed)."""
        try:
            with open(self.path(shard), "rb") as f:
                data = f.read().split(b"\n")
        except OSError:
            return None
        try:
            head = json.loads(data[0])
        except ValueError:
            return None
        if head.get("plan") != self.plan or head.get("lines") != lines or len(data) != len(lines) + 2:
            return None
        return dict(zip(lines, data[1:-1]))

    def remove(self) -> None:
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def _start_engines(ray, Engine, a: argparse.Namespace, have: Dict[str, list]) -> list:
    """An engine on every alive node that has none (per GPU where it has GPUs); returns the new ones
    (actor, ready ref)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    made = []
    for node in ray.nodes():
        if not node.get("Alive") or node["NodeID"] in have:
            continue
        res = node.get("Resources", {})
        gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
        n = gpus if gpus else max(1, a.engines_per_node)
        per = max(1, cpus // n) if cpus else 1
        threads = a.threads or per
        have[node["NodeID"]] = []
        for _ in range(n):
            kw = _engine_kwargs(a)
            if gpus:
                kw["device"] = "cuda" if a.device == "auto" else a.device
            opts = dict(num_cpus=min(per, cpus) if cpus else 0, num_gpus=1 if gpus else 0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
            actor = Engine.options(**opts).remote(os.path.abspath(a.model), threads, kw)
            have[node["NodeID"]].append(actor)
            made.append((actor, actor.node_id.remote()))
    return made


def run(argv: List[str]) -> int:
    a = parser().parse_args(argv)
    prog = "clef.ray batch"
    if a.input == "-" or a.output == "-":
        print(f"{prog}: IN and OUT must be files (resumable; clef batch reads stdin)", file=sys.stderr)
        return 2
    try:
        inp = _files.read_input(a.input)
    except _files.Refused as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{prog}: cannot read {a.input}: {e.strerror}", file=sys.stderr)
        return 2
    want = _files.record(inp.sha256, a.max_length, a.tile, a.split, a.text_only, a.allow_image_paths, a.precision)
    try:
        out_fd, have, out_hash, kept_errors = _files.open_out(a.input, inp, a.output, want, a.restart)
    except _files.Refused as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{prog}: cannot open {a.output}: {e.strerror}", file=sys.stderr)
        return 2

    # what OUT holds, for the record's state line after every append (it vouches for that prefix)
    rec_path = a.output + ".clef-batch"
    out_len = os.lseek(out_fd, 0, os.SEEK_CUR)  # open_out leaves it at the end of what it kept
    out_lines = have

    stop = {"sig": 0}

    def on_stop(sig, _frame):
        stop["sig"] = sig

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    t0 = time.time()
    total = len(inp)
    # the plan covers all of IN whatever OUT holds, so that a rerun finds the same shards (and the
    # parts committed before); shards wholly inside OUT's kept lines are not run
    every = list(range(total))
    keys = _keys(inp, every, a) if have < total else []
    # lines over --max-line are answered here, like clef batch does, without an engine
    long_lines = {i for i in every if inp.lengths[i] > a.max_line}
    shards = _files.plan_shards(keys, [i for i in every if i not in long_lines], a.shard_lines) if keys else []
    owner: Dict[int, int] = {i: s for s, lines in enumerate(shards) for i in lines}
    parts = _Parts(a.output, want, a.shard_lines)
    needed = [s for s, lines in enumerate(shards) if max(lines) >= have]
    done: Dict[int, Dict[int, bytes]] = {}
    for s in needed:
        got = parts.load(s, shards[s])
        if got is not None:
            done[s] = got
    reused = len(done)
    pending = [s for s in needed if s not in done]
    lines_by_node: Dict[str, int] = {}
    written = 0
    errors = kept_errors  # OUT's error lines, the kept ones too (clef batch's count)
    next_line = have

    def merge() -> None:
        """Appends to OUT every next line whose answer is known, in order, and syncs."""
        nonlocal next_line, written, errors, out_len, out_lines
        chunk = []
        while next_line < total:
            i = next_line
            if i in long_lines:
                ans = _files.too_long_line(i + 1, inp.lengths[i], a.max_line)
            else:
                part = done.get(owner[i])
                if part is None:
                    break
                ans = part.pop(i)
            if ans.startswith(_files.ERROR_START):
                errors += 1
            chunk.append(ans + b"\n")
            next_line += 1
        if chunk:
            body = b"".join(chunk)
            _files.write_all(out_fd, body)
            os.fdatasync(out_fd)
            written += len(chunk)
            out_hash.update(body)
            out_len += len(body)
            out_lines += len(chunk)
            _files.write_record(rec_path, want + _files.state_line(out_lines, out_len, out_hash.hexdigest()))

    merge()
    rc = 0
    ray = None
    if pending and not stop["sig"]:
        import ray as ray_module

        ray = ray_module
        from ray.exceptions import RayActorError

        ray.init(address=a.address, logging_level="ERROR", log_to_driver=False,
                 runtime_env={"env_vars": {"CLEF_LIBRARY": os.environ["CLEF_LIBRARY"]}}
                 if os.environ.get("CLEF_LIBRARY") else None)
        Engine = _make_engine_class()
        engines: Dict[str, list] = {}
        starting = _start_engines(ray, Engine, a, engines)
        idle: list = []
        inflight: Dict[object, tuple] = {}  # ref -> (actor, shard)
        dead = set()
        last_look = time.time()
        while (pending or inflight) and not stop["sig"]:
            # engines that came up join; a node that joined later gets one
            if starting:
                ready, _ = ray.wait([r for _, r in starting], num_returns=len(starting), timeout=0)
                for actor, ref in list(starting):
                    if ref in ready:
                        starting.remove((actor, ref))
                        try:
                            ray.get(ref)
                            idle.append(actor)
                        except RayActorError:
                            dead.add(actor)
            if time.time() - last_look > 5:
                alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
                for nid in list(engines):
                    if nid not in alive:
                        del engines[nid]
                starting += _start_engines(ray, Engine, a, engines)
                last_look = time.time()
            while idle and pending:
                actor, s = idle.pop(), pending.pop(0)
                rs = _files.rounds(shards[s], keys)
                ref = actor.answer.remote(s, [[inp.line(i) for i in r] for r in rs], a.batch_tokens, a.max_batch)
                inflight[ref] = (actor, s, rs)
            if not inflight:
                if not starting and not idle:
                    if not any(n.get("Alive") for n in ray.nodes()):
                        print(f"\n{prog}: no Ray node is alive", file=sys.stderr)
                        rc = 3
                        break
                time.sleep(0.2)
                continue
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                actor, s, rs = inflight.pop(ref)
                try:
                    _, node, answers = ray.get(ref)
                except RayActorError:  # its node (or process) died: the shard goes to another engine
                    dead.add(actor)
                    pending.insert(0, s)
                    print(json.dumps({"event": "shard_requeued", "shard": s, "lines": len(shards[s]),
                                      "why": "its engine died (node or process lost)"}), file=sys.stderr)
                    for nid, actors in list(engines.items()):  # a node still alive gets a new engine
                        if actor in actors:
                            del engines[nid]
                    continue
                got = {i: ans for r, anss in zip(rs, answers) for i, ans in zip(r, anss)}
                parts.commit(s, shards[s], got, node)
                done[s] = got
                lines_by_node[node] = lines_by_node.get(node, 0) + len(shards[s])
                idle.append(actor)
            merge()
    merge()
    if rc == 0 and stop["sig"]:
        rc = 130
    finished = next_line == total
    if rc == 0 and not finished:  # never report success on an OUT short of IN
        print(f"{prog}: {total - next_line} lines not answered; run again to resume", file=sys.stderr)
        rc = 3
    os.close(out_fd)
    if finished:
        parts.remove()
    event = {"event": "batch", "written": written, "skipped": have, "total": total, "errors": errors,
             "shards": len(shards), "shards_reused": reused, "nodes": lines_by_node,
             "seconds": round(time.time() - t0, 3), "interrupted": bool(stop["sig"])}
    print(json.dumps(event), file=sys.stderr)
    if rc == 0 and errors and not a.allow_errors:
        print(f"{prog}: {errors} of the {next_line} answer lines in {a.output} are errors (exit 1; --allow-errors: "
              "exit 0)", file=sys.stderr)
        rc = 1
    if ray is not None:
        ray.shutdown()
    return rc
