"""Fresh output arrays that recycle buffers whose previous owners were freed.

Why: a compiled step hands the user new arrays (gradients, losses).  A new large array is fresh memory from the
kernel, and its first write costs one page fault per 4 KiB page: B2's two 16 MB gradients are 7,800 faults a
call, measured at 2-9 us each on a busy virtual machine (15-70 ms, against a 3 ms kernel).  A buffer whose
previous owner has dropped it is already mapped, so writing it costs no faults.

How: the pool keeps a reference to every buffer it handed out (per shape and dtype, a few each).  A buffer is
free again when the pool's reference is the only one left: the user's tensor, any view of it (a view holds its
base) and any buffer export (a memoryview) all count.  ``sys.getrefcount`` tells, under the GIL, and the check
and the hand-out happen under one lock, so two threads never get the same buffer.

A program lowered once for every size (``sized.py``) hands out arrays of a new shape at many calls: it takes them
by capacity (``take_by_capacity``): buffers keyed by dtype and a byte capacity (eight steps per power of two, so at
most 1/8 is unused), an output being a view of the first ``n`` elements of a free one.  A fixed-shape program keeps
the exact-shape buffers above, which are whole arrays (no view: the argument checks' fast path, which wants
arrays that own their memory, stays on for outputs fed back as arguments).

Small arrays (below ``MIN_BYTES``) come from ``np.empty``: malloc recycles them without faults anyway.  The
pool holds at most ``JITGRAD_OUTPUT_POOL_MB`` megabytes (default 1024; 0 turns it off) and ``PER_KEY``
buffers of one shape and dtype; beyond that, outputs are plain fresh arrays.  ``clear()`` drops the pool.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

MIN_BYTES = 1 << 16
PER_KEY = 4
_LIMIT = int(float(os.environ.get("JITGRAD_OUTPUT_POOL_MB", "1024")) * (1 << 20))
_pool: dict = {}
_held = 0
_lock = threading.Lock()
STATS = {"reused": 0, "allocated": 0}      # counted, so tests can check recycling (never timed)

# a free buffer is referenced by the pool's list, the loop variable and getrefcount's own argument
_FREE_REFS = 3


def take(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, recycled when one is free."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < MIN_BYTES or _LIMIT <= 0:
        return np.empty(shape, dtype)
    return _recycled((tuple(shape), dtype.str), shape, dtype, nbytes)


def _recycled(key, shape, dtype, nbytes) -> np.ndarray:
    """A free buffer of the pool's ``key``, else a new ``np.empty(shape, dtype)`` of ``nbytes``, kept in the pool
    while its limits allow."""
    global _held
    with _lock:
        bufs = _pool.get(key)
        if bufs is None:
            bufs = _pool[key] = []
        for a in bufs:
            if sys.getrefcount(a) == _FREE_REFS:
                STATS["reused"] += 1
                return a
        a = np.empty(shape, dtype)
        STATS["allocated"] += 1
        if len(bufs) < PER_KEY and _held + nbytes <= _LIMIT:
            bufs.append(a)
            _held += nbytes
        return a


def capacity(nbytes: int) -> int:
    """``nbytes`` rounded up to the pool's capacity steps: eight per power of two."""
    step = 1 << max(int(nbytes).bit_length() - 4, 0)
    return -(-nbytes // step) * step


def take_by_capacity(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``: a view of a recycled buffer of its
    capacity step when one is free (see the module docstring)."""
    dtype = np.dtype(dtype)
    n = 1
    for d in shape:
        n *= d
    nbytes = n * dtype.itemsize
    if nbytes < MIN_BYTES or _LIMIT <= 0:
        return np.empty(shape, dtype)
    cap = capacity(nbytes)
    return _recycled(("capacity", cap, dtype.str), cap // dtype.itemsize, dtype, cap)[:n].reshape(shape)


def clear():
    """Forget every pooled buffer (arrays still in use stay valid: they are ordinary arrays)."""
    global _held
    with _lock:
        _pool.clear()
        _held = 0


def held_bytes() -> int:
    return _held


__all__ = ["take", "take_by_capacity", "capacity", "clear", "held_bytes", "STATS", "MIN_BYTES", "PER_KEY"]
