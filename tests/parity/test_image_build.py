"""deploy/Containerfile built and run (CLEF_BUILD_IMAGE=1 only; not in CI: it takes minutes and
downloads Debian, by debootstrap where no container registry is reachable):

- tools/build-image.sh builds the image with buildah and exports it as an OCI archive whose
  index.json names a manifest digest;
- the exported archive goes through a registry: Debian's docker-registry (distribution) on
  127.0.0.1 and a free port, its storage in the test's temp folder; `skopeo copy oci-archive:...
  docker://...` pushes it, `skopeo inspect` reads back the manifest digest the archive names, and
  podman pulls it (its own vfs store in the temp folder: a second client loads the image);
- what runs is the image pulled from that registry: `buildah from docker://127.0.0.1:PORT/...`
  (podman's `run` needs cgroups this development container does not give; buildah's chroot
  isolation does not);
- the image declares user 10001:10001 and a command run without --user is that user, whose group
  (clef) has that id too, and who owns /models;
- `clef version` in the image is the host's version and the commit the image was built from;
- the image's own ENTRYPOINT + CMD, with models/tiny bind-mounted read-only at /models/clef-flash
  and only the address changed (127.0.0.1, a free port: loopback only): /livez and /readyz answer
  200, and POST /v1/systemone answers the same bytes as the host's `build/clef decide` on the same
  request, from a process whose uid is 10001.

Needs root (buildah's vfs store, debootstrap), Debian's docker-registry, skopeo and podman (the test
installs them, as tools/build-image.sh installs buildah) and build/clef for the expected bytes.
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.realpath(os.path.join(ROOT, "models", "tiny"))
REQUEST = os.path.join(ROOT, "tests", "corpus", "requests", "t001_basic.json")
BUILDAH = ["buildah", "--storage-driver", "vfs"]
IMAGE = "localhost/clef:image-test"
RUN = ["--isolation", "chroot"]  # what tools/build-image.sh falls back to; works in a container

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def git_commit():
    c = sh(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"]).stdout.strip() or "unknown"
    if c != "unknown" and sh(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--"]).returncode != 0:
        c += "-dirty"
    return c


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def push_to_registry(archive, digest, tmp):
    """A registry on loopback (Debian's docker-registry, storage in tmp); the archive pushed to it
    with skopeo, its manifest read back, the image pulled by podman. Returns (the registry's
    process, the image's reference there)."""
    port = free_port()
    cfg = os.path.join(tmp, "registry.yml")
    with open(cfg, "w") as f:
        f.write(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp}/registry\n"
                f"http:\n  addr: 127.0.0.1:{port}\n")
    registry = subprocess.Popen(["docker-registry", "serve", cfg], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tmp, "registry.log"), "wb"))
    t_end = time.monotonic() + 30
    up = None
    while up != 200 and time.monotonic() < t_end:
        try:
            up, _ = request(port, "GET", "/v2/")
        except OSError:
            time.sleep(0.1)
    check(up == 200, f"docker-registry answers GET /v2/ on 127.0.0.1:{port} ({up})")
    remote = f"127.0.0.1:{port}/clef:image-test"
    t0 = time.monotonic()
    push = sh(["skopeo", "copy", "--dest-tls-verify=false", f"oci-archive:{archive}", f"docker://{remote}"],
              timeout=1800)
    check(push.returncode == 0, f"skopeo pushes the archive to the registry ({time.monotonic() - t0:.0f} s) "
                                f"{push.stderr[-300:]}")
    got = sh(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{remote}"], timeout=300).stdout
    import hashlib

    check(got != "" and "sha256:" + hashlib.sha256(got.encode()).hexdigest() == digest,
          f"the registry serves the manifest the archive names ({digest[:19]}...)")
    pod = ["podman", "--storage-driver", "vfs", "--root", os.path.join(tmp, "podman"),
           "--runroot", os.path.join(tmp, "podman-run"), "--events-backend", "file"]
    pulled = sh(pod + ["pull", "--tls-verify=false", remote], timeout=1800)
    user = sh(pod + ["image", "inspect", "--format", "{{.Config.User}}", remote]).stdout.strip()
    check(pulled.returncode == 0 and user == "10001:10001",
          f"podman pulls it from the registry; its user is 10001:10001 ({user}) {pulled.stderr[-300:]}")
    return registry, remote


def main():
    if os.environ.get("CLEF_BUILD_IMAGE") != "1":
        skip("CLEF_BUILD_IMAGE=1 builds the container image (minutes, downloads Debian; not in CI)")
    if os.geteuid() != 0:
        skip("buildah's vfs store and debootstrap need root")
    if not os.access(CLEF, os.X_OK):
        skip(f"no {CLEF} (make) for the expected bytes")
    missing = [pkg for tool, pkg in (("docker-registry", "docker-registry"), ("skopeo", "skopeo"),
                                     ("podman", "podman")) if not shutil.which(tool)]
    if missing:
        print(f"installing {' '.join(missing)} (Debian)", flush=True)
        sh(["apt-get", "update", "-qq"], timeout=600)
        r = sh(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing, timeout=1800,
               env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if r.returncode != 0:
            skip(f"cannot install {' '.join(missing)}: {r.stderr[-300:]}")

    tmp = tempfile.mkdtemp(prefix="clef-image-")
    archive = os.path.join(tmp, "clef-oci.tar")
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(ROOT, "tools", "build-image.sh"), archive], cwd=ROOT,
                       env=dict(os.environ, CLEF_IMAGE=IMAGE), stdout=subprocess.PIPE, text=True, timeout=7200)
    build_s = time.monotonic() - t0
    print(r.stdout, end="")
    check(r.returncode == 0, f"tools/build-image.sh builds and exports the image ({build_s:.0f} s)")
    if r.returncode != 0:
        sys.exit(1)
    index = json.loads(sh(["tar", "-xOf", archive, "index.json"]).stdout)
    digest = index["manifests"][0]["digest"]
    check(re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is not None,
          f"the OCI archive names its manifest ({digest}, {os.path.getsize(archive)} bytes)")

    # the exported archive, not the store's copy, is what is pushed, pulled and run
    registry, remote = push_to_registry(archive, digest, tmp)
    server, ctr = None, ""
    try:
        ctr = sh(BUILDAH + ["from", "--quiet", "--pull=always", "--tls-verify=false", f"docker://{remote}"],
                 timeout=1800).stdout.strip()
        check(ctr != "", f"buildah from docker://{remote}: {ctr}")
        if not ctr:
            return
        cfg = json.loads(sh(BUILDAH + ["inspect", "--type", "container", ctr]).stdout)["OCIv1"]["config"]
        check(cfg.get("User") == "10001:10001", f"the image declares user 10001 ({cfg.get('User')})")
        ids = sh(BUILDAH + ["run"] + RUN + [ctr, "--", "sh", "-c", "id -u; id -g; id -gn; stat -c %u:%g /models"], timeout=300)
        check(ids.stdout.split() == ["10001", "10001", "clef", "10001:10001"],
              f"a command in the image runs as 10001:10001, group clef, owner of /models ({ids.stdout.split()} {ids.stderr[-200:]})")

        host = sh([CLEF, "version"]).stdout.splitlines()
        ver = sh(BUILDAH + ["run"] + RUN + [ctr, "--", "/usr/local/bin/clef", "version"], timeout=300)
        lines = ver.stdout.splitlines()
        check(ver.returncode == 0 and lines[:1] == host[:1], f"clef version in the image: {lines[:1]} (host {host[:1]})")
        check(f"commit: {git_commit()}" in lines, f"the image's clef knows its commit ({lines[1:2]}, tree {git_commit()})")

        # the image's own command, with the address made loopback and the port free
        argv = list(cfg["Entrypoint"]) + list(cfg["Cmd"])
        for flag, value in (("--host", "127.0.0.1"), ("--port", "0")):
            argv[argv.index(flag) + 1] = value
        log = open(os.path.join(tmp, "serve.log"), "wb+")
        t1 = time.monotonic()
        # its own session: the group (buildah and the clef it starts) is stopped together below
        server = subprocess.Popen(BUILDAH + ["run"] + RUN + ["-v", f"{MODEL}:/models/clef-flash:ro", ctr, "--"] + argv,
                                  stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        port = None
        while port is None and time.monotonic() - t1 < 300 and server.poll() is None:
            m = re.search(rb'"event":"listening".*?"port":(\d+)', open(log.name, "rb").read())
            port = int(m.group(1)) if m else time.sleep(0.1)
        check(port is not None, f"clef serve in the image listens on 127.0.0.1 {open(log.name, 'rb').read()[-400:]!r}")
        if port is None:
            return
        ready = None
        while time.monotonic() - t1 < 300:
            try:
                ready, _ = request(port, "GET", "/readyz")
                if ready == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        check(ready == 200, f"GET /readyz 200 after {time.monotonic() - t1:.1f} s ({ready})")
        live, _ = request(port, "GET", "/livez")
        check(live == 200, f"GET /livez 200 ({live})")

        body = open(REQUEST, "rb").read()
        want = subprocess.run([CLEF, "decide", "--model", MODEL, "--threads", "1", "--request", REQUEST],
                              capture_output=True, timeout=300).stdout.rstrip(b"\n")
        st, got = request(port, "POST", "/v1/systemone", body, {"Content-Type": "application/json"})
        check(st == 200 and got == want and b'"error"' not in got,
              f"POST /v1/systemone in the image: {st}, the bytes of the host's clef decide ({len(got)} bytes)")
        # the listening socket's owner, seen from the host: the image's clef as uid 10001
        owners = sh(["ss", "-Hltnp", f"sport = :{port}"]).stdout
        pids = [int(p) for p in re.findall(r"pid=(\d+)", owners)]
        uids = {open(f"/proc/{p}/status").read().split("Uid:")[1].split()[0] for p in pids}
        check(uids == {"10001"}, f"the serving process runs as uid 10001 ({uids})")
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        if ctr:
            sh(BUILDAH + ["rm", ctr])
        sh(BUILDAH + ["rmi", IMAGE, remote])
        registry.terminate()
        registry.wait()
        sh(["rm", "-rf", tmp])

    print(f"image built and exported in {build_s:.0f} s; whole test {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("image: built with buildah, run as uid 10001, serves the host's bytes")
