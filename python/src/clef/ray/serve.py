"""clef on Ray Serve: POST /v1/systemone answered like `clef serve` by replicas that each hold one
engine, requests routed by the routing key (docs/deploy.md "Ray Serve").

Two deployments:
- ClefIngress (the HTTP route): checks what `clef serve` checks before the body reaches the engine
  (method 405, Content-Type 415, --max-body 413), computes the request's routing key
  (clef.state_key: the tokenizer only, no weights) and calls ClefEngine with that key as the
  handle's session id. Answers carry X-Request-Id, X-Clef-State-Key and Retry-After as `clef serve`'s
  do. GET /metrics renders each engine replica's state-cache counters as last reported (one
  series per replica), GET /health and /readyz answer 200 once the application runs, /livez always.
- ClefEngine (one clef.Engine per replica): @serve.batch gathers concurrent requests and answers
  them with Engine.decide_many (one packed forward per batch). Requests are routed by Ray Serve's
  ConsistentHashRouter on the session id (a ring of virtual nodes; a replica at its
  max_ongoing_requests rejects and the request goes to the next replica on the ring: the load is
  bounded), so one state's question sets meet one replica's state cache. Autoscaling on ongoing
  requests (Ray Serve's autoscaler) when max_replicas > min_replicas.

    serve run clef.ray.serve:app model=/models/clef-flash      (or: python -m clef.ray serve --model DIR)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import sys
from typing import Dict, List, Optional, Tuple

from ray import serve
from ray.serve.config import RequestRouterConfig
from starlette.requests import Request
from starlette.responses import Response

from .._defaults import defaults

ROUTE = "/v1/systemone"
ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")  # clef_request_id_sane
# The library's defaults (clef serve's): the decorators below need them when the module loads.
_DEFAULTS = defaults()


def _json_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _error_body(etype: str, message: str) -> str:
    return '{"error":{"type":' + _json_string(etype) + ',"message":' + _json_string(message) + "}}"


def _json_content_type(ct: Optional[str]) -> bool:
    """clef serve's test: application/json, case-insensitive, then nothing, ';' or a blank."""
    if ct is None:
        return False
    ct = ct.lstrip(" \t")
    n = len("application/json")
    return ct[:n].lower() == "application/json" and (len(ct) == n or ct[n] in "; \t")


# max_ongoing_requests: one full batch per replica (build's max_ongoing, the library's max_batch)
@serve.deployment(name="ClefEngine", max_ongoing_requests=_DEFAULTS.max_batch)
class ClefEngine:
    def __init__(self, model: str, engine_kwargs: dict, batch_tokens: Optional[int] = None,
                 max_batch: Optional[int] = None):
        import clef

        self._clef = clef
        self.engine = clef.Engine(model, **engine_kwargs)
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch
        self.replica = serve.get_replica_context().replica_id.unique_id

    @serve.batch(max_batch_size=_DEFAULTS.max_batch, batch_wait_timeout_s=0.02)
    async def decide(self, bodies: List[bytes]) -> List[Tuple[int, str, str, dict]]:
        res = await asyncio.to_thread(self.engine.decide_many, bodies, batch_tokens=self.batch_tokens,
                                      max_batch=self.max_batch, raw=True, return_exceptions=True)
        cache = self.engine.cache_info()
        return [(r.status, r.body, self.replica, cache) if isinstance(r, self._clef.Error) else (200, r, self.replica, cache)
                for r in res]


@serve.deployment(name="ClefIngress")
class ClefIngress:
    def __init__(self, engine, model: str, key_kwargs: dict, max_body: int = _DEFAULTS.max_body):
        import clef

        self._clef = clef
        self.engine = engine
        self.model = model
        self.key_kwargs = key_kwargs
        self.max_body = max_body
        self.cache: Dict[str, dict] = {}  # engine replica -> its state cache's counters, as last reported

    def _answer(self, request: Request, status: int, body: str, ctype: str = "application/json",
                extra: Optional[dict] = None) -> Response:
        rid = request.headers.get("x-request-id")
        headers = {"X-Request-Id": rid if rid and _SANE_ID.match(rid) else secrets.token_hex(16)}
        if status in (429, 503):
            headers["Retry-After"] = "1"
        headers.update(extra or {})
        return Response(content=body.encode("utf-8"), status_code=status, media_type=ctype, headers=headers)

    def _metrics(self) -> str:
        out = []
        for name, field in (("clef_state_cache_hits_total", "hits"), ("clef_state_cache_misses_total", "misses"),
                            ("clef_state_cache_tokens_reused_total", "tokens_reused")):
            out.append(f"# TYPE {name} counter")
            for replica, c in sorted(self.cache.items()):
                out.append(f'{name}{{replica="{replica}"}} {c.get(field, 0)}')
        return "\n".join(out) + "\n"

    async def __call__(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        if path in ("/health", "/readyz", "/livez"):
            return self._answer(request, 200, '{"status":"ok"}')
        if path == "/metrics":
            return self._answer(request, 200, self._metrics(), "text/plain; version=0.0.4; charset=utf-8")
        if path != ROUTE:
            return self._answer(request, 404, _error_body("NotFound", f"no route {path}"))
        if method != "POST":
            return self._answer(request, 405, _error_body("MethodNotAllowed", f"{ROUTE} takes POST, not {method}"),
                                extra={"Allow": "POST"})
        ct = request.headers.get("content-type")
        if not _json_content_type(ct):
            return self._answer(request, 415, _error_body("UnsupportedMediaType",
                                                          f"Content-Type must be application/json, not {ct or 'missing'}"))
        cl = request.headers.get("content-length")
        if cl is not None and cl.isdigit() and int(cl) > self.max_body:
            return self._answer(request, 413, _error_body("RequestTooLong",
                                                          f"body is {int(cl)} bytes; the limit is {self.max_body} bytes"))
        body = await request.body()
        if len(body) > self.max_body:
            return self._answer(request, 413, _error_body(
                "RequestTooLong", f"body is over {self.max_body} bytes; the limit is {self.max_body} bytes"))
        try:
            key = self._clef.state_key(body, model=self.model, **self.key_kwargs)
        except self._clef.Error:
            key = None  # refused: the engine refuses it with clef serve's bytes; any replica will do
        handle = self.engine.options(session_id=key) if key else self.engine
        status, text, replica, cache = await handle.decide.remote(body)
        self.cache[replica] = cache
        return self._answer(request, status, text, extra={"X-Clef-State-Key": key} if key else None)


def build(model: str, *, replicas: int = 1, max_replicas: Optional[int] = None, target_ongoing: float = 8,
          threads: int = 0, engine_cpus: float = 1, max_body: int = _DEFAULTS.max_body,
          batch_tokens: int = _DEFAULTS.batch_tokens, max_batch: int = _DEFAULTS.max_batch,
          max_ongoing: int = _DEFAULTS.max_batch, engine_kwargs: Optional[dict] = None,
          route_prefix: str = "/") -> "serve.Application":
    """The application: an ingress and `replicas` engines (autoscaled up to max_replicas on ongoing
    requests when it is larger). The sizes default to the library's, those of `clef serve`;
    max_ongoing (requests one replica holds) to one full batch."""
    model = os.path.abspath(model)
    kw = dict(engine_kwargs or {})
    kw["threads"] = threads
    key_kwargs = {k: kw[k] for k in ("max_length", "image_tile", "split", "allow_image_paths") if k in kw}
    opts = dict(ray_actor_options={"num_cpus": engine_cpus}, max_ongoing_requests=max_ongoing,
                request_router_config=RequestRouterConfig(request_router_class=ROUTER,
                                                          request_router_kwargs={"num_virtual_nodes": 100,
                                                                                 "num_fallback_replicas": 2}))
    if max_replicas and max_replicas > replicas:
        opts["autoscaling_config"] = {"min_replicas": replicas, "max_replicas": max_replicas,
                                      "target_ongoing_requests": target_ongoing}
    else:
        opts["num_replicas"] = replicas
    engine = ClefEngine.options(**opts).bind(model, kw, batch_tokens, max_batch)
    return ClefIngress.options(ray_actor_options={"num_cpus": 0}).bind(engine, model, key_kwargs, max_body)


def app_builder(args: Dict[str, str]) -> "serve.Application":
    """For `serve run clef.ray.serve:app_builder model=DIR replicas=3 ...`."""
    ints = {"replicas", "max_replicas", "threads", "max_body", "batch_tokens", "max_batch", "max_ongoing"}
    kw = {k: (int(v) if k in ints else float(v) if k in ("target_ongoing", "engine_cpus") else v)
          for k, v in args.items() if k != "model"}
    return build(args["model"], **kw)


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m clef.ray serve",
                                description="Run the Ray Serve application (POST /v1/systemone) on a Ray cluster.")
    p.add_argument("--model", required=True)
    p.add_argument("--address", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=None)
    p.add_argument("--target-ongoing", type=float, default=8)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--engine-cpus", type=float, default=1)
    p.add_argument("--max-ongoing", type=int, default=_DEFAULTS.max_batch,
                   help="requests one engine replica holds at once (default %(default)s: one full batch)")
    a = p.parse_args(argv)
    import ray

    ray.init(address=a.address, logging_level="ERROR")
    serve.start(http_options={"host": a.host, "port": a.port})
    serve.run(build(a.model, replicas=a.replicas, max_replicas=a.max_replicas, target_ongoing=a.target_ongoing,
                    threads=a.threads, engine_cpus=a.engine_cpus, max_ongoing=a.max_ongoing), name="clef",
              route_prefix="/")
    print(json.dumps({"event": "listening", "host": a.host, "port": a.port}), flush=True)
    try:
        while True:
            import time

            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
