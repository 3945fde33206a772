#!/usr/bin/env python3
"""clef.Engine across processes (issue #35 item 3; docs/python.md "Processes"), on the tiny checkpoint:

- fork: a multiprocessing pool of 4 children (start method "fork") calls the engine the parent
  opened (threads=2, used before the fork, so its thread pool's helpers exist in the parent only);
  every answer byte-equal to the parent's, within a timeout (a hang is a failure, not a stall);
  again while another thread of the parent keeps running forwards on the same engine when the pool
  forks; and a bare os.fork() child;
- forkserver and spawn: pools of 4 whose children open their own engine (an Engine cannot be
  pickled: the TypeError says what to do), answers byte-equal to the parent's.
Exit 0 pass, 1 fail, 77 skip."""
import glob
import multiprocessing as mp
import os
import pickle
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import BUILD, MODEL, ROOT, TALLY, check  # noqa: E402

LIB = os.path.join(BUILD, "dist", "libclef.so")
TIMEOUT = int(os.environ.get("CLEF_FORK_TEST_TIMEOUT", "240"))  # s for a pool's answers; a hang never ends
sys.path.insert(0, os.path.join(ROOT, "python", "src"))
os.environ.setdefault("CLEF_LIBRARY", LIB)

import clef  # noqa: E402

ENGINE = None  # the parent's (inherited by fork children); spawn/forkserver children open their own


def answer(body):
    """In a pool's child: the response body, or the error body."""
    global ENGINE
    if ENGINE is None:
        ENGINE = clef.Engine(MODEL, threads=2)
    try:
        return os.getpid(), ENGINE.decide_raw(body)
    except clef.Error as e:
        return os.getpid(), e.body


def bodies():
    names = ["t001_basic.json", "t002_spec_example.json", "t029_many_questions.json", "t051_len_128.json",
             "t053_len_256.json", "t055_state_600.json", "e007_questions_empty.json", "m002_small_100x80_png.json"]
    out = []
    for n in names:
        f = os.path.join(ROOT, "tests", "corpus", "requests", n)
        if os.path.exists(f):
            out.append(open(f, "rb").read())
    return out * 2  # each twice: the second on a state the child's cache may hold


def run_pool(method, reqs, want, what):
    ctx = mp.get_context(method)
    t0 = time.time()
    pool = ctx.Pool(4)
    try:
        res = pool.map_async(answer, reqs, chunksize=1).get(timeout=TIMEOUT)
    except mp.TimeoutError:
        check(False, "%s: no answers in %d s (a child hangs)" % (what, TIMEOUT))
        return
    except Exception as e:  # a child's exception, re-raised here
        check(False, "%s: %s: %s" % (what, type(e).__name__, e))
        return
    finally:
        pool.terminate()
        pool.join()
    pids = {pid for pid, _ in res}
    got = [body for _, body in res]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    check(not bad, "%s: answers byte-equal to the parent's (differ: %s)" % (what, bad))
    check(os.getpid() not in pids and len(pids) >= 2, "%s: answered by %d children" % (what, len(pids)))
    print("%s: %d answers from %d children in %.1fs" % (what, len(got), len(pids), time.time() - t0), flush=True)


def bare_fork(body, want):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = ENGINE.decide_raw(body).encode()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = repr(e).encode()
        os.write(w, out)
        os._exit(0)
    os.close(w)
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        check(False, "os.fork(): the child did not answer in %d s" % TIMEOUT)
        os.close(r)
        return
    got = os.read(r, 1 << 20).decode()
    os.close(r)
    check(got == want, "os.fork(): the child's answer %r == the parent's" % got[:120])


def main():
    global ENGINE
    if not os.path.exists(LIB):
        print("skip: no %s (make)" % LIB)
        sys.exit(77)
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: no models/tiny (make tiny)")
        sys.exit(77)
    reqs = bodies()
    ENGINE = clef.Engine(MODEL, threads=2)
    want = [answer(b)[1] for b in reqs]  # the parent's answers: its thread pool has run
    try:
        pickle.dumps(ENGINE)
        check(False, "an Engine cannot be pickled")
    except Exception as e:  # noqa: BLE001 - which one is checked
        check(isinstance(e, TypeError) and "spawn" in str(e) and "initializer" in str(e),
              "pickling an Engine: a TypeError that says what to do (%s: %s)" % (type(e).__name__, e))

    bare_fork(reqs[0], want[0])
    run_pool("fork", reqs, want, "fork pool of 4")

    # forks while another thread runs forwards on the same engine
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            ENGINE.decide_many(reqs[:4], return_exceptions=True)
    th = threading.Thread(target=busy)
    th.start()
    try:
        for i in range(3):
            run_pool("fork", reqs, want, "fork pool of 4 while the parent runs forwards (%d)" % (i + 1))
    finally:
        stop.set()
        th.join()

    methods = mp.get_all_start_methods()
    for method in ("forkserver", "spawn"):
        if method in methods:
            ENGINE_saved, ENGINE = ENGINE, None  # not inherited: each child opens its own
            run_pool(method, reqs, want, "%s pool of 4" % method)
            ENGINE = ENGINE_saved
    ENGINE.close()
    print("%d checks, %d failed" % (TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
