"""A Ray cluster for the tests, inside a network namespace the test creates with only `lo` up, so
that nothing Ray starts can listen on or reach another address (Ray's head otherwise binds the
machine's interface address). Every node is `ray start --node-ip-address=127.0.0.1` in that
namespace; the driver runs there too (run()).

    with RayCluster(workers=2) as c:
        c.run([python, "-m", "clef.ray", "batch", ...])
        c.kill_node(1)               # SIGKILL every process of worker node 1

Cleanup, even on failure: every process in the namespace (`ip netns pids`) is SIGKILLed, the
namespace deleted, the temp dir removed. Nothing outside the namespace is touched.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("CLEF_RAY_VENV", os.path.join(ROOT, ".venv-ray"))
PY = os.path.join(VENV, "bin", "python")
RAY = os.path.join(VENV, "bin", "ray")


def missing():
    """Why the Ray tests cannot run here (None when they can)."""
    if not os.path.exists(RAY):
        return f"no {RAY} (tools/setup.sh makes .venv-ray: tools/reference/make_venv.sh ray)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no ip (iproute2)"
    return None


class RayCluster:
    HEAD_PORT = 6379

    def __init__(self, workers=2, cpus=1, env=None):
        self.ns = f"clef-test-{os.getpid()}"
        self.workers = workers
        self.cpus = cpus
        self.tmp = tempfile.mkdtemp(prefix="clef-ray-")
        # RAY_worker_niceness=0: Ray starts workers niced (15), which on a shared machine starves the
        # engines against the clef processes the tests compare them with
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_ADDRESS=f"127.0.0.1:{self.HEAD_PORT}",
                        RAY_worker_niceness="0", **(env or {}))
        self.node_ports = []

    # ---- namespace
    def _sh(self, *args, check=True, **kw):
        return subprocess.run(list(args), check=check, capture_output=True, **kw)

    def netns(self, argv):
        return ["ip", "netns", "exec", self.ns] + list(argv)

    def __enter__(self):
        self._sh("ip", "netns", "add", self.ns)
        try:
            self._sh(*self.netns(["ip", "link", "set", "lo", "up"]))
            for attempt in range(3):  # a loaded machine can miss ray start's 60 s registration deadline
                try:
                    self._start_node(head=True)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
                    self._kill_all()
                    self.node_ports.clear()
            for _ in range(self.workers):
                self._start_node(head=False)
            self.wait_nodes(1 + self.workers)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start_node(self, head):
        port = 20000 + 100 * len(self.node_ports) + os.getpid() % 50  # the raylet's port names the node
        args = [RAY, "start", "--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}", "--num-gpus=0",
                f"--node-manager-port={port}", "--disable-usage-stats", f"--object-store-memory={80 << 20}"]
        if head:
            args += ["--head", f"--port={self.HEAD_PORT}", "--include-dashboard=false", f"--temp-dir={self.tmp}"]
        else:
            args += [f"--address=127.0.0.1:{self.HEAD_PORT}"]
        p = subprocess.run(self.netns(args), env=self.env, capture_output=True, timeout=180)
        if p.returncode != 0:
            raise RuntimeError("ray start failed: " + p.stdout.decode()[-2000:] + p.stderr.decode()[-2000:])
        self.node_ports.append(port)

    def start_node(self):
        """Another worker node (a restarted one)."""
        self._start_node(head=False)

    def alive_nodes(self):
        code = ("import ray,json; ray.init(logging_level='ERROR'); "
                "print(json.dumps(sum(1 for n in ray.nodes() if n['Alive'])))")
        p = subprocess.run(self.netns([PY, "-c", code]), env=self.env, capture_output=True, timeout=120)
        return int(p.stdout.strip() or 0) if p.returncode == 0 else 0

    def node_id(self, k):
        """Ray's NodeID of node k (0 = head), found by its raylet's port."""
        code = ("import ray,json; ray.init(logging_level='ERROR'); "
                "print(json.dumps({n['NodeManagerPort']: n['NodeID'] for n in ray.nodes() if n['Alive']}))")
        p = subprocess.run(self.netns([PY, "-c", code]), env=self.env, capture_output=True, timeout=120)
        ids = json.loads(p.stdout) if p.returncode == 0 else {}
        return ids.get(str(self.node_ports[k]))

    def wait_nodes(self, n, timeout=120):
        t_end = time.time() + timeout
        while time.time() < t_end:
            if self.alive_nodes() >= n:
                return
            time.sleep(1)
        raise RuntimeError(f"fewer than {n} Ray nodes came up")

    def pids(self):
        p = self._sh("ip", "netns", "pids", self.ns, check=False)
        return [int(x) for x in p.stdout.split()]

    def node_pids(self, k):
        """The processes of node k (0 = head): its raylet (found by its port) and what it started."""
        marker = f"--node_manager_port={self.node_ports[k]}"
        ns = set(self.pids())
        raylet = None
        for pid in ns:
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"raylet") and marker.encode() in cmd:
                raylet = pid
        if raylet is None:
            return []
        out = {raylet}
        grew = True
        while grew:  # the raylet's descendants: workers and agents
            grew = False
            for pid in ns - out:
                try:
                    ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid in out:
                    out.add(pid)
                    grew = True
        return sorted(out)

    def kill_node(self, k):
        pids = self.node_pids(k)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def popen(self, argv, **kw):
        return subprocess.Popen(self.netns(argv), env=self.env, **kw)

    def run(self, argv, **kw):
        return subprocess.run(self.netns(argv), env=self.env, **kw)

    def listeners_outside_loopback(self):
        """Sockets listening or connected in the namespace on an address other than loopback
        (there is none: only lo exists there; `ss` shows it)."""
        p = self._sh(*self.netns(["ss", "-Htanu"]), check=False)
        bad = []
        for line in p.stdout.decode().splitlines():
            cols = line.split()
            for addr in cols[4:6]:
                host = addr.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
                if host not in ("127.0.0.1", "::1", "*", "0.0.0.0", "::", "") and not host.startswith("127."):
                    bad.append(line)
        return bad

    def _kill_all(self):
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)

    def __exit__(self, *exc):
        self._kill_all()
        self._sh("ip", "netns", "del", self.ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False


if __name__ == "__main__":  # a manual look: python ray_cluster.py
    with RayCluster() as c:
        print(json.dumps({"nodes": c.alive_nodes(), "pids": {k: c.node_pids(k) for k in range(3)},
                          "outside_loopback": c.listeners_outside_loopback()}))
        sys.stdout.flush()
