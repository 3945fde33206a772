#!/usr/bin/env python3
"""clef pull against a local server in the Hugging Face hub's URL layout, serving models/tiny.

The server (a ThreadingHTTPServer subclass, loopback only) answers GET /{repo}/resolve/{rev}/{name}
with Range support, and can, per file: redirect to /cdn/{name} on another host name (127.0.0.1 while
the endpoint is localhost, as the hub sends LFS files to its CDN), serve corrupted bytes, drop the
connection after half the file (once, or every time), or 404; and, as a hostile hub, answer an error
page of terminal escapes and a forged "done" line, or ignore every Range. The test builds a manifest
of models/tiny (name, size, sha256: the release manifest's form) and passes it with --manifest.

Checks:
 1. a full pull: every file byte-equal to models/tiny, no .part left; a redirect followed (the token
    sent to the endpoint, not to the redirect's host); a dropped connection resumed with a Range
    request in the same run; plain progress lines (no terminal); a second run fetches nothing;
 2. a corrupted file: HashMismatch, exit 1, nothing under its final name, no .part;
 3. a 404: NotFound naming HTTP 404, exit 1, nothing written;
 4. no network (a closed port): NoNetwork, exit 1;
 5. disk full (a tmpfs with room for one file's inode, in a user and mount namespace the test makes):
    DiskFull, exit 1;
 6. --retries 0 and a drop: ConnectionDropped, the .part kept; the next run resumes it (Range) and
    verifies;
 7. on a terminal (a pty), a progress bar drawn with carriage returns;
 8. the built-in manifest lists the release (14 files, 19.08 GB); a manifest naming ../escape and a
    revision other than the manifest's are refused (exit 2);
 9. what sits at DIR/.NAME.part or DIR/NAME (issue #35): a symbolic link to a file outside DIR that
    holds the file's first half (with a hub that honours Range and one that ignores it), a FIFO, a
    link to /dev/null or /dev/full, a character device, a hard link to a file outside: refused
    (UnsafePath, exit 1), never "verified", nothing outside DIR changed, no link or FIFO left under
    the final name; a final name that is a link to a good copy outside is fetched again and replaced
    by a regular file; a .part left by a drop is refetched from 0 by a hub that ignores Range; a
    hub's error page of ESC sequences, newlines and a forged "done" line printed escaped.
Runs with .venv-test's python; the binary from $CLEF_BUILD (default build/)."""
import hashlib
import http.server
import json
import os
import pty
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
REPO, REV = "Cloudflare/clef-flash", "17f0b0ad64efb65d273590632833508766b2aae6"
TOKEN = "hf_test_token_123"
HOSTILE_BODY = (b"\x1b[2J\x1b[H\r\nclef pull: done: 14 files verified in clef-flash (14 fetched, 0 already present)\n"
                b"\x1b]0;owned\x07\x9b31m\xff")


def skip(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL (CI): {why}")
        sys.exit(1)
    print(f"skip: {why}")
    sys.exit(77)


class Hub(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder):
        super().__init__(("127.0.0.1", 0), Handler)
        self.folder = folder
        self.port = self.server_address[1]
        self.redirect, self.corrupt, self.missing = set(), set(), set()
        self.drop_once, self.drop_always = set(), set()
        self.hostile, self.ignore_range = set(), False
        self.log = []
        self.lock = threading.Lock()

    def reset(self):
        self.redirect, self.corrupt, self.missing = set(), set(), set()
        self.drop_once, self.drop_always = set(), set()
        self.hostile, self.ignore_range = set(), False
        with self.lock:
            self.log = []


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        s = self.server
        with s.lock:
            s.log.append({"path": self.path, "host": self.headers.get("Host"), "range": self.headers.get("Range"),
                          "auth": self.headers.get("Authorization")})
        prefix = f"/{REPO}/resolve/{REV}/"
        if self.path.startswith(prefix):
            name = self.path[len(prefix):]
            if name in s.redirect:
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{s.port}/cdn/{name}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        elif self.path.startswith("/cdn/"):
            name = self.path[len("/cdn/"):]
        else:
            name = None
        if name in s.hostile:  # an error page meant for the terminal that prints it
            body = HOSTILE_BODY
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        path = os.path.join(s.folder, name) if name and "/" not in name else None
        if not path or name in s.missing or not os.path.isfile(path):
            body = b"Entry not found"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        with open(path, "rb") as f:
            data = f.read()
        if name in s.corrupt:
            data = bytearray(data)
            data[len(data) // 2] ^= 0x5A
            data = bytes(data)
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-") and not s.ignore_range:
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        part = data[start:]
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        drop = name in s.drop_always or name in s.drop_once
        if drop:
            s.drop_once.discard(name)
            self.wfile.write(part[: len(part) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(part)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def pull(dirpath, manifest, endpoint, extra=(), token=TOKEN):
    env = dict(os.environ, HF_ENDPOINT=endpoint)
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    p = subprocess.run([CLEF, "pull", "--dir", dirpath, "--manifest", manifest, *extra], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return p.returncode, p.stderr.decode("utf-8", "replace")


failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def main():
    if not os.access(CLEF, os.X_OK):
        skip(f"no {CLEF} (build first)")
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        skip(f"no {MODEL} (make tiny)")
    tmp = tempfile.mkdtemp(prefix="clef-pull-test-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'all pull checks pass' if not failures else f'{len(failures)} pull checks FAIL'}")
    sys.exit(1 if failures else 0)


def run(tmp):
    names = sorted(n for n in os.listdir(MODEL) if os.path.isfile(os.path.join(MODEL, n)))
    files = {n: {"bytes": os.path.getsize(os.path.join(MODEL, n)), "sha256": sha256(os.path.join(MODEL, n))}
             for n in names}
    manifest = os.path.join(tmp, "manifest.json")
    with open(manifest, "w") as f:
        json.dump({"what": "models/tiny, for test_pull", "repository": REPO, "revision": REV, "files": files}, f)
    big = max(names, key=lambda n: files[n]["bytes"])          # the largest shard: drop it mid-file
    lfs = "tokenizer.json"                                      # redirected, as the hub does for LFS files
    hub = Hub(MODEL)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    endpoint = f"http://localhost:{hub.port}"

    # 1. a full pull with a redirect and a dropped connection
    d1 = os.path.join(tmp, "d1")
    hub.redirect.add(lfs)
    hub.drop_once.add(big)
    rc, err = pull(d1, manifest, endpoint)
    check(rc == 0, "1: full pull exits 0", err[-2000:])
    same = all(os.path.isfile(os.path.join(d1, n)) and sha256(os.path.join(d1, n)) == files[n]["sha256"]
               for n in names)
    check(same, f"1: all {len(names)} files byte-equal to models/tiny")
    check(not [n for n in os.listdir(d1) if n.endswith(".part")] if os.path.isdir(d1) else False, "1: no .part left")
    log = list(hub.log)
    resolve = f"/{REPO}/resolve/{REV}/"
    cdn = [e for e in log if e["path"] == f"/cdn/{lfs}"]
    check(len(cdn) == 1 and cdn[0]["host"].startswith("127.0.0.1"), "1: the redirect to the CDN host was followed")
    check(all(e["auth"] == f"Bearer {TOKEN}" for e in log if e["path"].startswith(resolve)),
          "1: HF_TOKEN sent as Authorization: Bearer to the endpoint")
    check(all(e["auth"] is None for e in cdn), "1: the token is not sent to the redirect's other host")
    big_gets = [e for e in log if e["path"] == resolve + big]
    check(len(big_gets) == 2 and big_gets[0]["range"] is None and
          big_gets[1]["range"] == f"bytes={files[big]['bytes'] // 2}-",
          f"1: the dropped {big} resumed with a Range request from byte {files[big]['bytes'] // 2}",
          json.dumps(big_gets))
    check("ConnectionDropped" in err and "resuming" in err, "1: the drop and the resume are reported")
    check("\r" not in err and f"pull: {big}: " in err and "sha256 verified" in err,
          "1: plain progress lines without a terminal")
    hub.reset()
    rc, err = pull(d1, manifest, endpoint)
    check(rc == 0 and not hub.log and err.count("present, size and sha256 verified") == len(names),
          "1: a second run verifies what is there and fetches nothing", err[-1000:])

    # 2. a corrupted file
    d2 = os.path.join(tmp, "d2")
    hub.reset()
    hub.corrupt.add("config.json")
    rc, err = pull(d2, manifest, endpoint)
    check(rc == 1 and "HashMismatch" in err and "config.json" in err, "2: corrupted file refused (HashMismatch)",
          err[-1000:])
    check(not os.path.exists(os.path.join(d2, "config.json")) and
          not os.path.exists(os.path.join(d2, ".config.json.part")),
          "2: nothing under the final name, no .part")

    # 3. a 404
    d3 = os.path.join(tmp, "d3")
    hub.reset()
    hub.missing.add(names[0])
    rc, err = pull(d3, manifest, endpoint)
    check(rc == 1 and "NotFound" in err and "404" in err and names[0] in err, "3: 404 reported as NotFound",
          err[-1000:])
    check(not os.path.exists(os.path.join(d3, names[0])) and not os.path.exists(os.path.join(d3, f".{names[0]}.part")),
          "3: nothing written for the missing file")

    # 4. no network: a port nobody listens on
    s = __import__("socket").socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    rc, err = pull(os.path.join(tmp, "d4"), manifest, f"http://127.0.0.1:{dead}")
    check(rc == 1 and "NoNetwork" in err and "cannot reach" in err, "4: no network reported as NoNetwork",
          err[-1000:])

    # 5. disk full: DIR a tmpfs with inodes for itself and one file, in a user and mount namespace made
    #    here (the first file fits, the second's .part cannot be created: ENOSPC)
    d5 = os.path.join(tmp, "d5")
    os.makedirs(d5)
    hub.reset()
    env = dict(os.environ, HF_ENDPOINT=endpoint)
    ns = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=256m,nr_inodes=2 none "$1" && '
                         'exec "$2" pull --dir "$1" --manifest "$3"', "sh", d5, CLEF, manifest],
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    err = ns.stderr.decode("utf-8", "replace")
    if "mount" in err and "pull:" not in err or "unshare" in err:
        print("note: no user and mount namespace here (%s), disk-full case not run" % err.strip()[-200:])
    else:
        check(ns.returncode == 1 and "DiskFull" in err and "no space left" in err and names[1] in err,
              "5: disk full reported as DiskFull", err[-1000:])
        check(not os.listdir(d5), "5: nothing left outside the namespace's tmpfs")

    # 6. --retries 0: the drop is reported, the .part kept; the next run resumes
    d6 = os.path.join(tmp, "d6")
    hub.reset()
    hub.drop_once.add(big)
    rc, err = pull(d6, manifest, endpoint, ["--retries", "0"])
    partf = os.path.join(d6, f".{big}.part")
    check(rc == 1 and "ConnectionDropped" in err and "run clef pull again to resume" in err,
          "6: --retries 0: the drop is an error", err[-1000:])
    check(os.path.isfile(partf) and os.path.getsize(partf) == files[big]["bytes"] // 2 and
          not os.path.exists(os.path.join(d6, big)), "6: the .part is kept with the bytes received")
    hub.reset()
    rc, err = pull(d6, manifest, endpoint, ["--retries", "0"])
    gets = [e for e in hub.log if e["path"] == resolve + big]
    check(rc == 0 and len(gets) == 1 and gets[0]["range"] == f"bytes={files[big]['bytes'] // 2}-" and
          sha256(os.path.join(d6, big)) == files[big]["sha256"] and not os.path.exists(partf),
          "6: the next run resumes the .part (Range) and verifies", err[-1000:])
    check(f"resuming at {files[big]['bytes'] // 2} of" in err, "6: the resume is reported")

    # 7. on a terminal: a bar drawn with carriage returns
    d7 = os.path.join(tmp, "d7")
    hub.reset()
    master, slave = pty.openpty()
    env = dict(os.environ, HF_ENDPOINT=endpoint)
    p = subprocess.Popen([CLEF, "pull", "--dir", d7, "--manifest", manifest], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 120)
        if not r:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    os.close(master)
    text = out.decode("utf-8", "replace")
    check(p.returncode == 0 and "\r" + big in text and "100.0%" in text and "MB/s" in text,
          "7: a progress bar on a terminal", text[-600:])

    # 8. manifests: the built-in one (the release's 14 files), a bad name, another revision
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{dead}")
    p = subprocess.run([CLEF, "pull", "--dir", os.path.join(tmp, "d8")], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode()
    check(p.returncode == 1 and f"Cloudflare/clef-flash@{REV}" in err and "14 files, 19.08 GB" in err and
          ("NoNetwork" in err or "DiskFull" in err), "8: the built-in manifest: the release's 14 files, 19.08 GB",
          err[-600:])
    evil = os.path.join(tmp, "evil.json")
    with open(evil, "w") as f:
        json.dump({"revision": REV, "files": {"../escape": {"bytes": 1, "sha256": "0" * 64}}}, f)
    rc, err = pull(os.path.join(tmp, "d8"), evil, endpoint)
    check(rc == 2 and "not a plain name" in err, "8: a manifest naming ../escape is refused", err[-600:])
    rc, err = pull(os.path.join(tmp, "d8"), manifest, endpoint, ["--revision", "main"])
    check(rc == 2 and "needs --manifest FILE" in err, "8: a revision other than the manifest's is refused", err[-600:])
    hostile(tmp, hub, manifest, endpoint, files, names, big)
    hub.shutdown()


def snapshot(path):
    st = os.lstat(path)
    with open(path, "rb") as f:
        return f.read(), st.st_mtime_ns, st.st_size


def hostile(tmp, hub, manifest, endpoint, files, names, big):
    name = "config.json"  # the manifest's first file, small enough for a pipe's buffer
    with open(os.path.join(MODEL, name), "rb") as f:
        full = f.read()
    outside = os.path.join(tmp, "outside")
    os.makedirs(outside)
    victim = os.path.join(outside, "victim")

    def place(kind, d):
        part = os.path.join(d, f".{name}.part")
        with open(victim, "wb") as f:  # what a resume through a link would extend to the right bytes
            f.write(full[: len(full) // 2])
        if kind == "symlink":
            os.symlink(victim, part)
        elif kind == "hardlink":
            os.link(victim, part)
        elif kind == "fifo":
            os.mkfifo(part)
        elif kind == "devnull":
            os.symlink("/dev/null", part)
        elif kind == "devfull":
            os.symlink("/dev/full", part)
        elif kind == "chardev":
            try:
                os.mknod(part, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
            except OSError as e:
                print(f"note: cannot make a device node here ({e}), that case not run")
                return False
        return True

    cases = [("symlink", False), ("symlink", True), ("hardlink", False), ("fifo", False), ("devnull", False),
             ("devnull", True), ("devfull", False), ("chardev", False)]
    for i, (kind, ignore) in enumerate(cases):
        d = os.path.join(tmp, f"d9{i}")
        os.makedirs(d)
        hub.reset()
        hub.ignore_range = ignore
        if not place(kind, d):
            continue
        before = snapshot(victim)
        what = f"9: {kind} at .{name}.part" + (" (a hub ignoring Range)" if ignore else "")
        try:
            rc, err = pull(d, manifest, endpoint, ["--retries", "0"])
        except subprocess.TimeoutExpired:
            rc, err = -1, "timed out"
        final = os.path.join(d, name)
        check(rc == 1 and "UnsafePath" in err and "verified" not in err and "done:" not in err,
              f"{what}: refused, never verified", err[-800:])
        check(snapshot(victim) == before and sorted(os.listdir(outside)) == ["victim"],
              f"{what}: nothing outside --dir changed")
        check(not os.path.lexists(final) or stat.S_ISREG(os.lstat(final).st_mode),
              f"{what}: no link, FIFO or device under the final name")
    hub.ignore_range = False

    # a final name that is a link to a good copy outside: fetched again, replaced by a regular file
    d = os.path.join(tmp, "d9l")
    os.makedirs(d)
    hub.reset()
    with open(victim, "wb") as f:
        f.write(full)
    before = snapshot(victim)
    os.symlink(victim, os.path.join(d, name))
    rc, err = pull(d, manifest, endpoint)
    final = os.path.join(d, name)
    check(rc == 0 and stat.S_ISREG(os.lstat(final).st_mode) and sha256(final) == files[name]["sha256"] and
          f"pull: {name}: present, size and sha256 verified" not in err,
          "9: a final name that is a link: fetched again, now a regular file", err[-800:])
    check(snapshot(victim) == before, "9: the link's target is untouched")

    # a .part left by a drop, and a hub that ignores Range: refetched from byte 0, verified
    d = os.path.join(tmp, "d9r")
    hub.reset()
    hub.drop_once.add(big)
    rc, err = pull(d, manifest, endpoint, ["--retries", "0"])
    partf = os.path.join(d, f".{big}.part")
    check(rc == 1 and os.path.isfile(partf), "9: a drop leaves a .part", err[-600:])
    hub.reset()
    hub.ignore_range = True
    rc, err = pull(d, manifest, endpoint, ["--retries", "0"])
    gets = [e for e in hub.log if e["path"].endswith("/" + big)]
    check(rc == 0 and len(gets) == 1 and gets[0]["range"] and sha256(os.path.join(d, big)) == files[big]["sha256"]
          and not os.path.exists(partf), "9: a hub ignoring Range: the .part restarted from 0 and verified",
          err[-800:])
    hub.ignore_range = False

    # a hostile error page: escapes, newlines, a forged "done" line, OSC, C1, a stray byte
    d = os.path.join(tmp, "d9h")
    hub.reset()
    hub.hostile.add(name)
    env = dict(os.environ, HF_ENDPOINT=endpoint)
    p = subprocess.run([CLEF, "pull", "--dir", d, "--manifest", manifest], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    raw = p.stderr
    check(p.returncode == 1 and b"HttpError" in raw and b"HTTP 500" in raw, "9: a hub's error page: HttpError, exit 1",
          raw[-600:].decode("utf-8", "replace"))
    check(not any(c in raw for c in (b"\x1b", b"\r", b"\x07", b"\x9b", b"\xff")),
          "9: no control or non-ASCII byte from the hub reaches stderr", repr(raw[-600:]))
    lines = raw.decode("ascii", "replace").split("\n")
    check(not [ln for ln in lines if ln.startswith(("clef pull: done", "pull: done"))] and
          "\\x1b[2J" in raw.decode("ascii", "replace") and "\\r\\nclef pull: done" in raw.decode("ascii", "replace"),
          "9: the page is shown escaped on the error's line, its forged \"done\" line is not a line", repr(lines[-3:]))


if __name__ == "__main__":
    main()
