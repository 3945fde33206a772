"""ctypes declarations of include/clef.h and the search for libclef.so.

The structs below mirror clef.h field for field; tests/parity/test_python.py compiles a C program
that prints clef.h's offsets and compares them with these, so a change to clef.h that is not made
here fails the suite. clef_options_default and clef_batch_options_default write the whole C struct:
Options and BatchOptions end with a reserve so that a struct grown by a newer library never writes
past the Python object.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import threading
from pathlib import Path
from typing import List, Optional

_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)


class Options(ctypes.Structure):
    _fields_ = [
        ("model_dir", ctypes.c_char_p),
        ("threads", ctypes.c_int),
        ("split_variant", ctypes.c_int),
        ("max_length", ctypes.c_int),
        ("image_tile", ctypes.c_int),
        ("allow_image_paths", ctypes.c_int),
        ("max_image_bytes", ctypes.c_size_t),
        ("max_image_pixels", ctypes.c_int64),
        ("max_images", ctypes.c_size_t),
        ("text_only", ctypes.c_int),
        ("device", ctypes.c_int),
        ("precision", ctypes.c_int),
        ("gpu", ctypes.c_int),
        ("single_request", ctypes.c_int),
        ("state_cache_mb", ctypes.c_size_t),
        ("progress", _PROGRESS),
        ("progress_ctx", ctypes.c_void_p),
        ("strict", ctypes.c_int),
        ("_reserve", ctypes.c_uint64 * 64),
    ]


class BatchOptions(ctypes.Structure):
    _fields_ = [
        ("batch_tokens", ctypes.c_size_t),
        ("max_batch", ctypes.c_size_t),
        ("queue_len", ctypes.c_size_t),
        ("max_body", ctypes.c_size_t),
        ("_reserve", ctypes.c_uint64 * 16),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("body", ctypes.c_void_p),
        ("body_len", ctypes.c_size_t),
        ("error_type", ctypes.c_char_p),
        ("http_status", ctypes.c_int),
        ("input_tokens", ctypes.c_int),
        ("warnings", ctypes.c_void_p),
    ]


class CacheInfo(ctypes.Structure):
    _fields_ = [
        ("hits", ctypes.c_uint64),
        ("misses", ctypes.c_uint64),
        ("inserts", ctypes.c_uint64),
        ("evictions", ctypes.c_uint64),
        ("tokens_reused", ctypes.c_uint64),
        ("bytes", ctypes.c_size_t),
        ("entries", ctypes.c_size_t),
        ("limit", ctypes.c_size_t),
    ]


DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA = 0, 1, 2
STATE_KEY_LEN = 64  # CLEF_STATE_KEY_LEN
PRECISION_FP32, PRECISION_FAST, PRECISION_BF16, PRECISION_INT8 = 0, 1, 2, 3

_engine_p = ctypes.c_void_p
_job_p = ctypes.c_void_p


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    sigs = {
        "clef_options_default": (None, [ctypes.POINTER(Options)]),
        "clef_batch_options_default": (None, [ctypes.POINTER(BatchOptions)]),
        "clef_open": (_engine_p, [ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_size_t]),
        "clef_close": (None, [_engine_p]),
        "clef_engine_backend": (ctypes.c_char_p, [_engine_p]),
        "clef_engine_note": (ctypes.c_char_p, [_engine_p]),
        "clef_result_free": (None, [ctypes.POINTER(Result)]),
        "clef_decide": (ctypes.c_int, [_engine_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Result)]),
        "clef_job_prepare": (_job_p, [_engine_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Result)]),
        "clef_job_tokens": (ctypes.c_size_t, [_job_p]),
        "clef_run_batch": (ctypes.c_int, [_engine_p, ctypes.POINTER(_job_p), ctypes.c_size_t]),
        "clef_job_finish": (None, [_job_p, ctypes.POINTER(Result)]),
        "clef_job_free": (None, [_job_p]),
        "clef_job_cached_tokens": (ctypes.c_size_t, [_job_p]),
        "clef_engine_cache_info": (None, [_engine_p, ctypes.POINTER(CacheInfo)]),
        "clef_state_key": (ctypes.c_int, [ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_size_t,
                                          ctypes.POINTER(Result)]),
        "clef_job_state_key": (ctypes.c_int, [_job_p, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def candidates() -> List[str]:
    """Where libclef is looked for, in order (the first that loads is used)."""
    out: List[str] = []
    env = os.environ.get("CLEF_LIBRARY")
    if env:
        return [env]  # given explicitly: that one or an error
    here = Path(__file__).resolve().parent
    out.append(str(here / "libclef.so"))  # bundled by `pip install ./python`
    # Run from the repository (PYTHONPATH=python/src, or an editable install): make's build/dist/.
    repo = here.parent.parent.parent
    if (repo / "include" / "clef.h").is_file():
        out.append(str(repo / "build" / "dist" / "libclef.so"))
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "clef"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        if libdir:
            out.append(str(Path(libdir) / "libclef.so"))
    except (OSError, subprocess.SubprocessError):
        pass
    found = ctypes.util.find_library("clef")
    if found:
        out.append(found)
    return out


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def after_fork_in_child() -> None:
    """A fork child: a fresh load lock (the parent's may have been held by another thread)."""
    global _lock
    _lock = threading.Lock()


def load() -> ctypes.CDLL:
    """The loaded library (loaded once). Raises OSError naming every place tried."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            if "/" in path and not Path(path).exists():
                tried.append(f"{path} (absent)")
                continue
            try:
                _lib = _declare(ctypes.CDLL(path))
                return _lib
            except (OSError, AttributeError) as e:
                tried.append(f"{path} ({e})")
        raise OSError("clef: libclef.so not found; set CLEF_LIBRARY, install clef (make install) or "
                      "reinstall the package from the repository. Tried: " + "; ".join(tried or ["nothing"]))
