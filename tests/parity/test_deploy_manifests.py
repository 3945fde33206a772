"""deploy/ against the server it deploys (models/tiny):

- the Kustomize base and overlay render (`kubectl kustomize` when kubectl is installed, else the
  base's files read with PyYAML);
- the Deployment's probes name routes that /openapi.json lists, every flag of its args (and of the
  Containerfile's CMD) is in `clef serve --help`, its port is the container port the Service
  targets, terminationGracePeriodSeconds >= preStop sleep + --drain-delay + --timeout;
- the HPA's metric is a series /metrics has, and it targets the Deployment; the PDB and the Service
  select the pods;
- the Containerfile runs Debian as a non-root user;
- HAProxy's file is valid (`haproxy -c`), hashes on X-Clef-State-Key with consistent hashing and a
  bounded load, and its health check is a route /openapi.json lists; the Gateway API example hashes
  on the same header.
Building and running the image: tests/parity/test_image_build.py (CLEF_BUILD_IMAGE=1, not in CI).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import CLEF, MODEL, ROOT, Server  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")
# what the lifecycle work adds to clef serve (issue #33 item 2); until it is merged the checks that
# need it are reported as pending and the test skips instead of passing
LIFECYCLE = {"/livez", "/readyz", "--drain-delay"}

failures, pending = [], []


def check(cond, what, needs=None):
    if cond:
        print("ok: " + what)
    elif needs and needs & LIFECYCLE:
        print("pending: " + what)
        pending.append(what)
    else:
        print("FAIL: " + what)
        failures.append(what)


def render(path):
    kubectl = shutil.which("kubectl")
    if kubectl:
        p = subprocess.run([kubectl, "kustomize", path], capture_output=True, timeout=60)
        if p.returncode != 0:
            check(False, f"kubectl kustomize {path}: {p.stderr.decode()[-400:]}")
            return []
        return [d for d in yaml.safe_load_all(p.stdout) if d]
    docs = []  # no kubectl: the base's resources as written (no labels or patches applied)
    k = yaml.safe_load(open(os.path.join(path, "kustomization.yaml")))
    for r in k.get("resources", []):
        rp = os.path.join(path, r)
        if os.path.isdir(rp):
            docs += render(rp)
        else:
            docs += [d for d in yaml.safe_load_all(open(rp)) if d]
    return docs


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def flags_of(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def flag_value(args, name):
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read().decode()


def main():
    if not os.path.exists(CLEF) or not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: needs build/clef and models/tiny")
        sys.exit(77)
    help_text = subprocess.run([CLEF, "serve", "--help"], capture_output=True, text=True).stdout
    known_flags = set(re.findall(r"^\s+(?:-[a-zA-Z], )?(--[a-z0-9-]+)", help_text, re.M))  # "  -m, --model DIR"
    srv = Server(threads=1, start_s=120)
    try:
        openapi = json.loads(get(srv.port, "/openapi.json"))
        metrics = get(srv.port, "/metrics")
    finally:
        srv.stop()
    routes = set(openapi.get("paths", {}))
    series = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", metrics, re.M))

    docs = render(os.path.join(DEPLOY, "kubernetes", "base"))
    deps = by_kind(docs, "Deployment")
    check(len(deps) == 1, "the base renders one Deployment")
    dep = deps[0]
    spec = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    c = [x for x in spec["containers"] if x["name"] == "clef"][0]
    args = c["args"]
    check(args[0] == "serve", "the container runs clef serve")
    for f in flags_of(args):
        check(f in known_flags, f"Deployment flag {f} is in clef serve --help", needs={f})
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        path = c.get(probe, {}).get("httpGet", {}).get("path")
        check(path in routes, f"{probe} path {path} is in /openapi.json", needs={path})
    check(c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/livez",
          "readiness on /readyz, liveness on /livez (split: a loading or draining pod is alive, not ready)")
    drain = float(flag_value(args, "--drain-delay") or 0)
    timeout = float(flag_value(args, "--timeout") or 30)
    pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    check(drain > 0, f"--drain-delay is set ({drain})")
    check(grace >= pre + drain + timeout,
          f"terminationGracePeriodSeconds {grace} >= preStop {pre} + --drain-delay {drain} + --timeout {timeout}")
    cport = int(flag_value(args, "--port"))
    check(any(pp.get("containerPort") == cport for pp in c.get("ports", [])), f"containerPort is --port {cport}")
    check(flag_value(args, "--host") == "0.0.0.0", "listens on the pod's addresses (--host 0.0.0.0)")
    sc = spec.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0, "the pod runs as a non-root user")
    for ic in spec.get("initContainers", []):
        check(ic["args"][0] == "pull" and "--dir" in ic["args"], "the init container runs clef pull --dir")

    svc = by_kind(docs, "Service")[0]
    sel = svc["spec"].get("selector", {})
    check(sel and all(pod_labels.get(k) == v for k, v in sel.items()), f"the Service selects the pods ({sel})")
    check(any(pp.get("targetPort") in ("http", cport) for pp in svc["spec"]["ports"]), "the Service targets http")
    pdb = by_kind(docs, "PodDisruptionBudget")[0]
    ml = pdb["spec"]["selector"].get("matchLabels", {})
    check(ml and all(pod_labels.get(k) == v for k, v in ml.items()), "the PodDisruptionBudget selects the pods")
    hpa = by_kind(docs, "HorizontalPodAutoscaler")[0]
    check(hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], "the HPA scales the Deployment")
    for m in hpa["spec"]["metrics"]:
        name = m[m["type"].lower()]["metric"]["name"]
        check(name in series, f"the HPA's metric {name} is on /metrics")

    over = render(os.path.join(DEPLOY, "kubernetes", "overlays", "model-volume"))
    ospec = by_kind(over, "Deployment")[0]["spec"]["template"]["spec"]
    check(not ospec.get("initContainers") and ospec["volumes"][0].get("persistentVolumeClaim"),
          "the model-volume overlay mounts a claim and pulls nothing")

    cf = open(os.path.join(DEPLOY, "Containerfile")).read()
    froms = re.findall(r"^FROM\s+(\S+)", cf, re.M)
    check(froms and all("debian" in f for f in froms), f"the Containerfile builds on Debian ({froms})")
    user = re.findall(r"^USER\s+(\S+)", cf, re.M)
    check(user and not user[-1].startswith(("0", "root")), f"the image runs as a non-root user ({user})")
    cmd = json.loads(re.findall(r"^CMD\s+(\[.*\])", cf, re.M)[-1])
    for f in flags_of(cmd):
        check(f in known_flags, f"Containerfile CMD flag {f} is in clef serve --help", needs={f})

    hcfg = os.path.join(DEPLOY, "haproxy", "haproxy.cfg")
    if shutil.which("haproxy"):
        r = subprocess.run(["haproxy", "-c", "-f", hcfg], capture_output=True, text=True)
        check(r.returncode == 0, f"haproxy -c accepts deploy/haproxy/haproxy.cfg {r.stderr[-300:]}")
    h = open(hcfg).read()
    check(re.search(r"^\s*balance\s+hdr\(X-Clef-State-Key\)", h, re.M | re.I) is not None, "HAProxy hashes on the key")
    check(re.search(r"^\s*hash-type\s+consistent", h, re.M) is not None, "HAProxy hashes consistently")
    check(re.search(r"^\s*hash-balance-factor\s+\d+", h, re.M) is not None, "HAProxy bounds the load")
    chk = re.search(r"option httpchk GET (\S+)", h)
    check(chk is not None and chk.group(1) in routes, f"HAProxy's health check is a route of /openapi.json",
          needs={chk.group(1)} if chk else None)
    gw = [d for d in yaml.safe_load_all(open(os.path.join(DEPLOY, "gateway", "gateway.yaml"))) if d]
    btp = [d for d in gw if d["kind"] == "BackendTrafficPolicy"][0]
    check(btp["spec"]["loadBalancer"]["consistentHash"]["header"]["name"] == "X-Clef-State-Key",
          "the Envoy Gateway example hashes on X-Clef-State-Key")

    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    if pending:
        print(f"skip: {len(pending)} checks wait for /livez, /readyz and --drain-delay (branch h-serve, issue #33 item 2)")
        sys.exit(77)
    print("deploy manifests: probes, flags, metric and grace period match the server")


if __name__ == "__main__":
    main()
