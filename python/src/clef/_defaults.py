"""The library's defaults, read once from libclef (clef_options_default, clef_batch_options_default):
their one home is the C library, the values `clef serve` and `clef batch` start from, so the package
writes no copy of its own (tests/parity/test_option_defaults.py fails on one)."""
from __future__ import annotations

import ctypes
from typing import NamedTuple, Optional

from . import _lib


class Defaults(NamedTuple):
    max_length: int      # tokens per request (--max-length)
    state_cache_mb: int  # the state cache's MiB (--state-cache-mb)
    batch_tokens: int    # tokens in one packed forward (--batch-tokens)
    max_batch: int       # requests in one packed forward (--max-batch)
    queue_len: int       # requests waiting for the model (clef serve's --queue)
    max_body: int        # bytes of one request: clef serve's --max-body, clef batch's --max-line


_read: Optional[Defaults] = None  # no lock: two threads reading at once read the same values


def defaults() -> Defaults:
    """The library's defaults (loads libclef on the first call; raises its OSError when absent)."""
    global _read
    if _read is None:
        lib = _lib.load()
        o = _lib.Options()
        lib.clef_options_default(ctypes.byref(o))
        b = _lib.BatchOptions()
        lib.clef_batch_options_default(ctypes.byref(b))
        _read = Defaults(max_length=o.max_length, state_cache_mb=o.state_cache_mb, batch_tokens=b.batch_tokens,
                         max_batch=b.max_batch, queue_len=b.queue_len, max_body=b.max_body)
    return _read
