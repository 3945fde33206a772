"""What `clef batch` does with IN and OUT, for `python -m clef.ray batch` (src/cli/cmd_batch.c and
src/cli/batch_resume.c are the definition; this follows them rule for rule so that either program
can resume the other's OUT):

- IN's lines are split on '\\n' only; a last line without '\\n' counts; a line over --max-line bytes is
  not held and gets a RequestTooLong error line.
- OUT.clef-batch holds two lines: IN's SHA-256 and the settings that change answers, then how much
  of OUT the record vouches for (lines, bytes, SHA-256); written (tmp, fsync, rename) before OUT's
  first line and after every append.
- A non-empty OUT is resumed only when its record's first line matches and OUT's first out_bytes
  bytes still hash to out_sha256; what follows them is cut and answered again. Anything else is
  refused (exit 2), never taken as finished work; --restart empties OUT.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
from array import array
from dataclasses import dataclass
from typing import List, Optional, Tuple

RECORD_MAX = 4096  # BATCH_RECORD_MAX: the record's bytes read back and compared


class Refused(Exception):
    """OUT (or IN) refused: the message, without "clef batch: "; exit status 2."""


@dataclass
class Input:
    """IN mapped read-only: each line's offset and length (without its '\\n'), and the SHA-256."""
    path: str
    data: "mmap.mmap | bytes"
    starts: array
    lengths: array
    sha256: str

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, i: int) -> bytes:
        s = self.starts[i]
        return bytes(self.data[s:s + self.lengths[i]])


def read_input(path: str) -> Input:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if os.path.isdir(path):
            raise Refused(f"{path} is a folder, not a JSONL file")
        data = mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ) if st.st_size else b""
    finally:
        os.close(fd)
    starts, lengths = array("Q"), array("Q")
    pos, n = 0, len(data)
    while pos < n:
        nl = data.find(b"\n", pos)
        end = n if nl < 0 else nl
        starts.append(pos)
        lengths.append(end - pos)
        pos = end + 1
    sha = hashlib.sha256(data).hexdigest()
    return Input(path, data, starts, lengths, sha)


def record(in_sha256: str, max_length: int, tile: int, split: str, text_only: bool, allow_image_paths: bool,
           precision: str) -> bytes:
    """The record clef batch writes (batch_record_render), byte for byte."""
    b = lambda v: "true" if v else "false"  # noqa: E731
    return (f'{{"clef_batch":2,"input_sha256":"{in_sha256}","max_length":{max_length},"tile":{tile},'
            f'"split":"{split}","text_only":{b(text_only)},"allow_image_paths":{b(allow_image_paths)},'
            f'"precision":"{precision}"}}\n').encode()


def state_line(lines: int, nbytes: int, sha_hex: str) -> bytes:
    """The record's second line (batch_state_render): how much of OUT the record vouches for."""
    return f'{{"out_lines":{lines},"out_bytes":{nbytes},"out_sha256":"{sha_hex}"}}\n'.encode()


def too_long_line(lineno: int, length: int, max_line: int) -> bytes:
    """clef batch's error line for a request line over --max-line (lineno counts from 1)."""
    msg = f"line {lineno} is {length} bytes; the limit is {max_line} bytes (--max-line)"
    return ('{"error":{"type":"RequestTooLong","message":' + json.dumps(msg) + "}}").encode()


def write_record(rec_path: str, rec: bytes) -> None:
    tmp = rec_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, rec)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, rec_path)
    fsync_dir(os.path.dirname(rec_path) or ".")


def fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


ERROR_START = b'{"error"'


def open_out(in_path: str, inp: Input, out_path: str, want: bytes,
             restart: bool) -> Tuple[int, int, "hashlib._Hash", int]:
    """Opens OUT and decides as batch_resume_decide does: returns (fd at OUT's end, lines kept, the
    SHA-256 of the bytes kept, to go on with, how many of the kept lines are error lines). A fresh or
    restarted OUT gets its record first. Raises Refused."""
    rec_path = out_path + ".clef-batch"
    in_st = os.stat(in_path)
    for p in (out_path, rec_path):
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (in_st.st_dev, in_st.st_ino):
            raise Refused(f"{in_path} and {out_path} are the same file: the answers would overwrite the requests")
    fd = os.open(out_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (in_st.st_dev, in_st.st_ino):
            raise Refused(f"{in_path} and {out_path} are the same file: the answers would overwrite the requests")
        if restart or st.st_size == 0:
            os.ftruncate(fd, 0)
            write_record(rec_path, want + state_line(0, 0, hashlib.sha256(b"").hexdigest()))
            os.lseek(fd, 0, os.SEEK_SET)
            return fd, 0, hashlib.sha256(), 0
        rec = b""
        try:
            with open(rec_path, "rb") as f:
                rec = f.read(RECORD_MAX)
        except OSError:
            pass
        why = None
        ident, _, rest = rec.partition(b"\n")
        state = None
        try:
            state = json.loads(rest.split(b"\n", 1)[0]) if rest else None
        except ValueError:
            pass
        if not rec:
            why = "it has no record "
        elif ident + b"\n" != want or not isinstance(state, dict):
            why = "its record differs (another IN, or other settings, or an older clef's record) "
        if why:
            raise Refused(f"{out_path} holds {st.st_size} bytes that are not answers to {in_path}: {why}"
                          f"{'in ' if rec else ''}{rec_path}; nothing was changed. Use --restart to overwrite it, "
                          "or another OUT")
        # the record vouches for OUT's first out_bytes bytes (out_lines lines): kept only when they
        # still hash to out_sha256, the rest cut and answered again (batch_resume.c's rule)
        have, end = int(state.get("out_lines", -1)), int(state.get("out_bytes", -1))
        kept = os.pread(fd, end, 0) if 0 <= end <= st.st_size else None
        prefix = hashlib.sha256(kept) if kept is not None else None
        if prefix is None or prefix.hexdigest() != state.get("out_sha256") or have > len(inp):
            raise Refused(f"{out_path} is not what its record {rec_path} vouches for (shorter, or its first "
                          f"{end} bytes changed); nothing was changed. Use --restart to overwrite it, or another OUT")
        if st.st_size != end:
            os.ftruncate(fd, end)
        os.lseek(fd, end, os.SEEK_SET)
        # kept error lines count toward the exit status, as clef batch counts them (its answer lines
        # are one JSON object each; an error line starts with {"error")
        kept_errors = kept.startswith(ERROR_START) + kept.count(b"\n" + ERROR_START) if kept else 0
        return fd, have, prefix, kept_errors
    except BaseException:
        os.close(fd)
        raise


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def plan_shards(keys: List[Optional[str]], todo: List[int], shard_lines: int) -> List[List[int]]:
    """Shards of the line numbers in todo: all the lines of one routing key in one shard (a key with
    more lines than shard_lines gets shards of its own), keys in order of first appearance, lines
    without a key (refused requests) one group each; shards of about shard_lines lines."""
    groups: dict = {}
    order: List[object] = []
    for i in todo:
        k = keys[i] if keys[i] is not None else ("line", i)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(i)
    shards: List[List[int]] = []
    cur: List[int] = []
    for k in order:
        g = groups[k]
        while len(g) > shard_lines:  # a hot key: whole shards of its own
            shards.append(g[:shard_lines])
            g = g[shard_lines:]
        if cur and len(cur) + len(g) > shard_lines:
            shards.append(cur)
            cur = []
        cur = cur + g
    if cur:
        shards.append(cur)
    return shards


def rounds(lines: List[int], keys: List[Optional[str]]) -> List[List[int]]:
    """A shard's lines in rounds: round r holds the r-th line of each key, so that a state is in the
    cache (computed in an earlier forward) before its next question set runs; within one forward two
    records of one state would both miss."""
    seen: dict = {}
    out: List[List[int]] = []
    for i in sorted(lines):
        k = keys[i] if keys[i] is not None else ("line", i)
        r = seen.get(k, 0)
        seen[k] = r + 1
        while len(out) <= r:
            out.append([])
        out[r].append(i)
    return out
