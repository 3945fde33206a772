"""clef.Engine: one loaded model, called from any number of threads."""
from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
import threading
import weakref
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib
from ._defaults import defaults

# What a request may be: a mapping (made JSON by the package) or the JSON body as text or bytes.
Request = Union[Mapping[str, Any], str, bytes, bytearray, memoryview]
# What an image may be, in a mapping's "images" list: bytes (the file's content), a path
# (os.PathLike; a plain str is left as the contract reads it: a data: URL or base64).
Image = Union[bytes, bytearray, memoryview, "os.PathLike[str]", str]

_DEVICES = {"auto": _lib.DEVICE_AUTO, "cpu": _lib.DEVICE_CPU, "cuda": _lib.DEVICE_CUDA}
_PRECISIONS = {"fp32": _lib.PRECISION_FP32, "fast": _lib.PRECISION_FAST, "bf16": _lib.PRECISION_BF16,
               "int8": _lib.PRECISION_INT8}
_SPLITS = {"file": 0, "qwen2": 1, "qwen35": 2}
_TILES = (0, 256, 448)


class Error(Exception):
    """A request the engine refused or could not answer, or a model that could not be opened.

    type: the contract's error name ("NoQuestions", "BadJson", ..., docs/errors.md; "BadModel" when
    the model folder cannot be opened); status: the HTTP status a server answers with (422, ...);
    message: the error's message; body: the exact error body ({"error":{...}}) as `clef decide`
    prints it ("" for BadModel).
    """

    def __init__(self, type: str, status: int, message: str, body: str = "") -> None:
        super().__init__(f"{type} ({status}): {message}")
        self.type = type
        self.status = status
        self.message = message
        self.body = body


class RequestWarning(UserWarning):
    """What an answer's bytes do not say (docs/errors.md "Warnings"): an unknown key the engine
    ignored, a state cut to max_length, or beside a refusal where and what was expected. The same
    lines as the server's Clef-Warning headers; strict=True refuses the request instead."""


def _warn(text: Optional[bytes]) -> None:
    if not text:
        return
    # point the warning at the caller's line, the first frame outside this package
    here, level = os.path.dirname(os.path.abspath(__file__)), 1
    f = sys._getframe(0)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f, level = f.f_back, level + 1
    for line in text.decode("ascii", "replace").splitlines():
        warnings.warn(line, RequestWarning, stacklevel=level)


def _image_text(image: Any) -> Any:
    if isinstance(image, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(image)).decode("ascii")
    if isinstance(image, os.PathLike):
        with open(image, "rb") as f:
            return base64.b64encode(f.read()).decode("ascii")
    return image  # a str (data: URL or base64) or anything else: the engine judges it


def encode_request(request: Request) -> bytes:
    """The request body the engine receives: a mapping as compact JSON (its "images" entries given
    as bytes or paths turned into base64), text as UTF-8, bytes as they are."""
    if isinstance(request, (bytes, bytearray, memoryview)):
        return bytes(request)
    if isinstance(request, str):
        return request.encode("utf-8", "surrogatepass")
    if isinstance(request, Mapping):
        images = request.get("images")
        if isinstance(images, (list, tuple)):
            request = dict(request)
            request["images"] = [_image_text(im) for im in images]
        # ensure_ascii: a lone surrogate in a str stays an escape the engine judges (LoneSurrogate)
        return json.dumps(request, separators=(",", ":")).encode("ascii")
    raise TypeError(f"a request is a mapping, str or bytes, not {type(request).__name__}")


def _take(lib: ctypes.CDLL, res: _lib.Result) -> Tuple[str, Optional[str], int]:
    """(body, error type or None, status) of a filled result, which is freed."""
    try:
        body = ctypes.string_at(res.body, res.body_len).decode("utf-8") if res.body else ""
        err = res.error_type.decode("utf-8") if res.error_type else None
        _warn(ctypes.string_at(res.warnings) if res.warnings else None)
        return body, err, int(res.http_status)
    finally:
        lib.clef_result_free(ctypes.byref(res))


def _error(body: str, etype: str, status: int) -> Error:
    message = ""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body
    # The library's advice on image paths names the CLI's flag; a Python caller has its own ways
    # (.body keeps the exact bytes).
    cli_hint = "(clef decide and clef batch read local files with --allow-image-paths; clef serve never does)"
    if etype == "UnsupportedMedia" and cli_hint in message:
        message = message.replace(cli_hint, "(pass the file as a pathlib.Path, or open the Engine with "
                                            "allow_image_paths=True to read str paths)")
    return Error(etype, status, message, body)


# ---- fork (docs/python.md "Processes")
# A fork child has one thread. The C library restarts its thread pools' helpers there (base/threads.c,
# pthread_atfork), and these hooks make the engines' Python side whole: before the fork every live
# engine's model lock is taken, so no forward is half done in the copy, and in the child each engine
# gets fresh locks (the copies of the ones other threads held would stay held for ever).
_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()
_engines_lock = threading.Lock()
_held: List[threading.Lock] = []


def _fork_before() -> None:
    _engines_lock.acquire()
    for e in list(_engines):
        for lock in (e._model, e._info):
            lock.acquire()
            _held.append(lock)


def _fork_after_parent() -> None:
    while _held:
        _held.pop().release()
    _engines_lock.release()


def _fork_after_child() -> None:
    global _engines_lock
    _held.clear()
    _engines_lock = threading.Lock()
    _lib.after_fork_in_child()
    for e in list(_engines):
        e._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_fork_before, after_in_parent=_fork_after_parent, after_in_child=_fork_after_child)


def _host_options(lib: ctypes.CDLL, model_dir: bytes, max_length: int, image_tile: int, split: str,
                  max_image_bytes: int, max_image_pixels: int, allow_image_paths: bool,
                  max_images: int = 0) -> _lib.Options:
    """clef_options with the fields that change a request's record (what clef_state_key and
    clef_encode_request read), checked; the rest the library's defaults."""
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {sorted(_SPLITS)}, not {split!r}")
    if image_tile not in _TILES:
        raise ValueError(f"image_tile must be one of {_TILES}, not {image_tile!r}")
    for name, v in (("max_length", max_length), ("max_image_bytes", max_image_bytes),
                    ("max_image_pixels", max_image_pixels), ("max_images", max_images)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, not {v!r}")
    o = _lib.Options()
    lib.clef_options_default(ctypes.byref(o))
    o.model_dir = model_dir
    o.max_length = max_length
    o.image_tile = image_tile
    o.split_variant = _SPLITS[split]
    o.max_image_bytes = max_image_bytes
    o.max_image_pixels = max_image_pixels
    o.max_images = max_images
    o.allow_image_paths = int(bool(allow_image_paths))
    return o


def state_key(request: Request, model: "Union[str, os.PathLike[str]]", *, max_length: int = 0,
              image_tile: int = 0, split: str = "file", max_image_bytes: int = 0, max_image_pixels: int = 0,
              max_images: int = 0, allow_image_paths: bool = False) -> str:
    """The request's routing key (clef_state_key; docs/serving.md "The routing key"): 64 hex digits,
    what `clef serve` echoes as X-Clef-State-Key and `clef state-key` prints. Reads only
    model/tokenizer.json (kept by the library for the next call); no weights. The options are
    Engine's of the same names: give the serving engine's. Raises clef.Error for a refused request."""
    lib = _lib.load()
    model_dir = os.fsencode(model)
    o = _host_options(lib, model_dir, max_length, image_tile, split, max_image_bytes, max_image_pixels,
                      allow_image_paths, max_images)
    body = encode_request(request)
    res = _lib.Result()
    rc = lib.clef_state_key(ctypes.byref(o), body, len(body), ctypes.byref(res))
    text, etype, status = _take(lib, res)
    if rc != 0:
        raise _error(text, etype or "InternalError", status or 500)
    return text


class Engine:
    """One loaded model (clef_open). Thread-safe: the host side of requests (parsing, tokenizing,
    decoding images) runs concurrently; the model runs one batch at a time (the C engine is not
    reentrant for it), and every C call releases the GIL.

    model_dir: a release-layout folder (models/tiny, or the downloaded clef-flash).
    threads: compute threads (0 = every online core). device: "auto", "cpu" or "cuda".
    precision: None (the library's default: fp32, or $CLEF_PRECISION with device "auto"), "fp32",
    "fast" or "bf16" (bf16 tensor cores on CUDA; the CPU has no kernel for them and runs fp32, saying
    so in .note and with a warnings.warn), or "int8" (CPU; refused until it passes its fidelity gate,
    docs/precision.md). The rest are clef_options fields
    (include/clef.h): gpu, max_length, image_tile (0, 256, 448), text_only, split ("file",
    "qwen2", "qwen35"), max_image_bytes, max_image_pixels, max_images, allow_image_paths, single_request,
    state_cache_mb (None: the library's default, CLEF_STATE_CACHE_MB_DEFAULT; 0 turns the state
    cache off; the answers are the same bits either way). What the engine accepts with a warning
    (clef.RequestWarning: an unknown key, a state cut to max_length) strict=True refuses with
    clef.Error("StrictRefused", 422, ...), as it does a question whose answer would be NaN.
    """

    def __init__(self, model_dir: "Union[str, os.PathLike[str]]", threads: int = 0, device: str = "auto",
                 precision: Optional[str] = None, *, gpu: int = 0, max_length: int = 0, image_tile: int = 0,
                 text_only: bool = False, split: str = "file", max_image_bytes: int = 0,
                 max_image_pixels: int = 0, max_images: int = 0, allow_image_paths: bool = False,
                 single_request: bool = False, state_cache_mb: Optional[int] = None,
                 strict: bool = False) -> None:
        self._handle: Optional[int] = None
        if device not in _DEVICES:
            raise ValueError(f"device must be one of {sorted(_DEVICES)}, not {device!r}")
        if precision is not None and precision not in _PRECISIONS:
            raise ValueError(f"precision must be None or one of {sorted(_PRECISIONS)}, not {precision!r}")
        if state_cache_mb is not None and (not isinstance(state_cache_mb, int) or state_cache_mb < 0):
            raise ValueError(f"state_cache_mb must be None or a non-negative int, not {state_cache_mb!r}")
        for name, v in (("threads", threads), ("gpu", gpu)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative int, not {v!r}")
        lib = _lib.load()
        self._lib = lib
        self._model_dir = os.fsencode(model_dir)
        o = _host_options(lib, self._model_dir, max_length, image_tile, split, max_image_bytes,
                          max_image_pixels, allow_image_paths, max_images)
        o.threads = threads
        o.device = _DEVICES[device]
        if precision is not None:
            o.precision = _PRECISIONS[precision]
        o.gpu = gpu
        o.text_only = int(bool(text_only))
        o.single_request = int(bool(single_request))
        o.strict = int(bool(strict))
        if state_cache_mb is not None:
            o.state_cache_mb = state_cache_mb
        err = ctypes.create_string_buffer(2048)
        handle = lib.clef_open(ctypes.byref(o), err, len(err))  # the GIL is released while it loads
        if not handle:
            raise Error("BadModel", 503, err.value.decode("utf-8", "replace"))
        self._handle = handle
        self._model = threading.Lock()  # one clef_run_batch at a time
        self._info = threading.Lock()  # cache_info's C call (held across a fork: see _fork_before)
        self._state = threading.Condition()  # guards _handle and _active for close()
        self._active = 0
        self._forked: Optional[str] = None  # why this copy cannot run (a CUDA engine in a fork child)
        self.backend: str = (lib.clef_engine_backend(handle) or b"").decode()
        with _engines_lock:
            _engines.add(self)
        # where the engine runs other than asked (e.g. precision "fast" on a CPU): one line, else None
        note = lib.clef_engine_note(handle)
        self.note: Optional[str] = note.decode() if note else None
        if self.note:
            warnings.warn(self.note, RuntimeWarning, stacklevel=2)

    def cache_info(self) -> Dict[str, int]:
        """The state cache's counters (clef_engine_cache_info): hits, misses, inserts, evictions,
        tokens_reused, bytes, entries, limit (all 0 when the cache is off)."""
        handle = self._enter()
        try:
            info = _lib.CacheInfo()
            with self._info:
                self._lib.clef_engine_cache_info(handle, ctypes.byref(info))
            return {name: int(getattr(info, name)) for name, _ in info._fields_}
        finally:
            self._leave()

    # ---- lifetime
    def close(self) -> None:
        """Waits for calls in flight, then frees the engine. Later calls raise ValueError."""
        state = getattr(self, "_state", None)
        if state is None:
            return
        with state:
            handle, self._handle = self._handle, None
            while self._active:
                state.wait()
        if handle:
            self._lib.clef_close(handle)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __reduce__(self) -> Any:
        raise TypeError("a clef.Engine cannot be pickled (it holds a loaded model): with the spawn or forkserver "
                        "start method open one in each process, e.g. in the Pool's initializer; fork children "
                        "use the parent's (docs/python.md \"Processes\")")

    def _after_fork_in_child(self) -> None:
        """This process is a fork child holding a copy of the engine: the locks other threads of the
        parent held are copies that nobody will release, and those threads' calls are not here."""
        self._model = threading.Lock()
        self._info = threading.Lock()
        self._state = threading.Condition()
        self._active = 0
        if self._handle is not None and self.backend.startswith("cuda"):
            # a CUDA context does not survive fork(): the copy is dropped, never closed
            self._handle = None
            self._forked = ("this clef.Engine (CUDA) was opened before fork(); a CUDA context cannot be used in "
                            "a fork child: use the spawn or forkserver start method and open the engine in "
                            "the child (docs/python.md \"Processes\")")

    def _enter(self) -> int:
        if self._forked:
            raise RuntimeError(self._forked)
        with self._state:
            if self._handle is None:
                raise ValueError("clef.Engine is closed")
            self._active += 1
            return self._handle

    def _leave(self) -> None:
        with self._state:
            self._active -= 1
            if not self._active:
                self._state.notify_all()

    # ---- the three steps
    def _prepare(self, handle: int, body: bytes) -> Tuple[Optional[int], Optional[Error]]:
        res = _lib.Result()
        job = self._lib.clef_job_prepare(handle, body, len(body), ctypes.byref(res))
        if job:
            return job, None
        text, etype, status = _take(self._lib, res)
        return None, _error(text, etype or "InternalError", status or 500)

    def _run(self, handle: int, jobs: Sequence[int]) -> None:
        arr = (ctypes.c_void_p * len(jobs))(*jobs)
        with self._model:
            self._lib.clef_run_batch(handle, arr, len(jobs))  # per-job failures are in the jobs

    def _finish(self, job: int) -> Tuple[str, Optional[Error]]:
        res = _lib.Result()
        self._lib.clef_job_finish(job, ctypes.byref(res))
        text, etype, status = _take(self._lib, res)
        if etype:
            return text, _error(text, etype, status)
        return text, None

    # ---- requests
    def state_key(self, request: Request) -> str:
        """The request's routing key as this engine prepares it (clef_job_state_key): equal to
        clef.state_key(request, model=...) with this engine's options. Raises clef.Error."""
        body = encode_request(request)
        handle = self._enter()
        try:
            job, err = self._prepare(handle, body)
            if err is not None:
                raise err
            try:
                key = ctypes.create_string_buffer(_lib.STATE_KEY_LEN + 1)
                if self._lib.clef_job_state_key(job, key, len(key)) != 0:
                    raise Error("OutOfMemory", 500, "out of memory while hashing the request's media")
                return key.value.decode("ascii")
            finally:
                self._lib.clef_job_free(job)
        finally:
            self._leave()

    def decide_raw(self, request: Request) -> str:
        """The response body exactly as `clef decide` prints it (without its newline).
        Raises clef.Error (with .body, the exact error body) when the request is refused."""
        body = encode_request(request)
        handle = self._enter()
        try:
            job, err = self._prepare(handle, body)
            if err is not None:
                raise err
            assert job is not None
            try:
                self._run(handle, [job])
            except BaseException:
                self._lib.clef_job_free(job)
                raise
            text, err = self._finish(job)
        finally:
            self._leave()
        if err is not None:
            raise err
        return text

    def decide(self, request: Request) -> Dict[str, Any]:
        """The response as a dict ({"model", "answers", "usage"}); raises clef.Error."""
        return json.loads(self.decide_raw(request))

    def decide_many(self, requests: Iterable[Request], *, batch_tokens: Optional[int] = None,
                    max_batch: Optional[int] = None, raw: bool = False,
                    return_exceptions: bool = False) -> List[Any]:
        """Answers several requests, in order, through the batch path: every request prepared,
        then the model run on batches of them (in order: the first always joins; the next ones while
        the batch holds at most batch_tokens tokens and max_batch requests; None: the library's
        defaults, those of `clef serve`), then each response built. Each answer equals decide()'s
        for the same request.

        raw: the response bodies as str instead of dicts. return_exceptions: a refused request's
        place holds its clef.Error; otherwise the first refusal is raised once all are done.
        """
        if batch_tokens is None:
            batch_tokens = defaults().batch_tokens
        if max_batch is None:
            max_batch = defaults().max_batch
        if batch_tokens < 1 or max_batch < 1:
            raise ValueError("batch_tokens and max_batch must be at least 1")
        bodies = [encode_request(r) for r in requests]
        out: List[Any] = [None] * len(bodies)
        handle = self._enter()
        pending: Dict[int, int] = {}  # index -> job prepared and not yet finished (freed on an exception)
        try:
            for i, b in enumerate(bodies):
                job, err = self._prepare(handle, b)
                if err is not None:
                    out[i] = err
                else:
                    assert job is not None
                    pending[i] = job
            order = list(pending.items())
            start = 0
            while start < len(order):
                end, total = start + 1, self._lib.clef_job_tokens(order[start][1])
                while end < len(order) and end - start < max_batch:
                    t = self._lib.clef_job_tokens(order[end][1])
                    if total + t > batch_tokens:
                        break
                    total += t
                    end += 1
                self._run(handle, [j for _, j in order[start:end]])
                for i, job in order[start:end]:
                    del pending[i]
                    text, err = self._finish(job)
                    out[i] = err if err is not None else (text if raw else json.loads(text))
                start = end
        finally:
            for job in pending.values():
                self._lib.clef_job_free(job)
            self._leave()
        if not return_exceptions:
            for r in out:
                if isinstance(r, Error):
                    raise r
        return out
