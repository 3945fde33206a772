#!/usr/bin/env python3
"""Splits `perf record -g` profiles of clef into GEMM, mixers, pool sync and everything else.

  perf record -g -o prof.data ./build/clef bench --model models/real4 --tokens 2048 --threads 2 --repeat 1
  python3 bench/perf_split.py prof.data [more.data ...]

Rules (docs/performance.md "Everything else at 2,048 tokens"): the leaf symbol decides (the GEMM's
kernels and packing -> GEMM; the mixers' kernels -> mixers; memmove under a GEMM frame -> GEMM);
kernel samples go by their path: page faults on the mapped weights taken in the GEMM's packing ->
GEMM, faults on anonymous pages (first touch of activation buffers) -> everything else,
futex/schedule -> sync, interrupts and other kernel time -> the category of the interrupted user
frame. Samples under clef_model_prepare or the pool's run_pack_w (the weights packed once at
open, session 4: the packing and the first touch of its fresh memory) are a one-time cost of loading, not of a forward: they
go to their own line, "load:pack", and the four shares are printed once over all samples and once
over the rest. Prints the shares and the largest pieces of "everything else". Needs only perf."""
import collections
import subprocess
import sys

GEMM = {"clef_gemm_amx_panels", "pack_w", "clef_gemm_amx_pack", "clef_gemm_bf16", "run_amx_pack",
        "gemm_avx512_f32", "gemm_avx2_f32"}
# the packing at open: clef_model_prepare on the opening thread, run_pack_w on the pool's workers
PREP = {"clef_model_prepare", "cpu_prepare_weight", "clef_gemm_pack", "run_pack_w"}
MIX = {"gemm_avx512", "gemm_avx2", "gemm_generic", "chunk_avx512", "row_avx512", "att_fn", "prep_fn",
       "dfast_fn", "clef_mix_gemm", "chunk_ref"}


def samples(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym,dso"], capture_output=True,
                         text=True, check=True).stdout
    cur = []
    for line in out.split("\n"):
        if not line.strip():
            if cur:
                yield cur
            cur = []
            continue
        parts = line.split(None, 1)
        if len(parts) < 2:
            continue
        sym, _, dso = parts[1].rpartition(" (")
        cur.append((sym.strip(), dso))
    if cur:
        yield cur


def user_cat(sym, chain):
    if sym in GEMM:
        return "gemm"
    if sym in MIX:
        return "mixers"
    if ("memmove" in sym or "memcpy" in sym) and any(x in GEMM for x in chain):
        return "gemm"
    return "else"


def split(path):
    top, det, n = collections.Counter(), collections.Counter(), 0
    for smp in samples(path):
        n += 1
        syms = [s for s, _ in smp]
        user = [s for s, d in smp if "kernel" not in d]
        u = user[0] if user else "?"
        if any(x in PREP for x in user):
            t, d = "load:pack", "weights packed at open"
        elif "kernel" in smp[0][1]:
            if any("futex" in s or s == "schedule" for s in syms):
                t, d = "sync", "futex/schedule"
            elif any(s in ("do_anonymous_page", "clear_page_erms") for s in syms):
                t, d = "else", "anonymous page faults (buffer first touch)"
            elif any("fault" in s for s in syms):
                t, d = ("gemm", "weight page faults") if u in GEMM and u != "clef_gemm_amx_panels" \
                    else ("else", "other page faults")
            elif any("unmap" in s for s in syms):
                t, d = "else", "munmap"
            elif any("entry_SYSCALL" in s for s in syms):
                t, d = "else", f"syscalls ({u})"
            else:
                t, d = user_cat(u, user[1:]), "interrupts/kernel"
        else:
            leaf = syms[0]
            t, d = user_cat(leaf, syms[1:]), leaf
            if leaf.startswith("__expf") or leaf == "expf@plt":
                d = "expf (libm)"
            elif t == "else" and ("memmove" in leaf or "memcpy" in leaf):
                d = "memmove (copy2d, ...)"
        top[t] += 1
        det[(t, d)] += 1
    return n, top, det


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for path in sys.argv[1:]:
        n, top, det = split(path)
        if n == 0:
            print(f"{path}: no samples")
            continue
        print(f"== {path}: {n} samples")
        rest = n - top["load:pack"]
        print(f"  load:pack {100 * top['load:pack'] / n:6.2f}%  (the shares: of all samples / without it)")
        for t in ("gemm", "mixers", "sync", "else"):
            print(f"  {t:7s} {100 * top[t] / n:6.2f}% / {100 * top[t] / rest if rest else 0:6.2f}%")
        print("  everything else, pieces >= 0.08%:")
        for (t, d), v in det.most_common():
            if t == "else" and 100 * v / n >= 0.08:
                print(f"    {100 * v / n:5.2f}% {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
