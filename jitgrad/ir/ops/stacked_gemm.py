"""Stacks of small products in eager mode (attention's ``q @ k.mT`` and ``att @ v`` over (batch, head)), split over
their leading axis between the eager threads (``ir/eager_threads.py``; issue 32, item 3) where jitgrad's pool does
not run them (``jit/pooled_gemm.py`` serves them first: one ``?gemm`` per matrix on the pool's threads).

NumPy runs a stack as a loop of one single-threaded BLAS call per matrix, on one thread.  Here each eager thread
runs one ``np.matmul`` of its part of the leading axis into its slice of the result.  NumPy computes every matrix by
the same call whichever part holds it (the BLAS call is chosen from the matrix's own strides and sizes), so the bits
are those of one ``np.matmul`` call whatever the thread count, and while the eager pacer holds splits (another
process holds a core) the whole stack is that one call.  Only products OpenBLAS would not thread itself (at most
``blas.BLAS_THREADED_MACS`` multiply-adds each: one level of threads, never BLAS threads inside a part), and each
part at least that much work (what OpenBLAS itself gives a thread; the row blocks of a big eager GEMM use the same
bound, ``blas._rows_on_threads``).  The compiled path runs its stacks on the worker pool instead
(``codegen/native`` batched GEMM).
"""
from __future__ import annotations

import numpy as np

from .. import eager_threads
from .blas import BLAS_THREADED_MACS

STATS = {"split_calls": 0, "parts": 0}      # eager stacks split between threads (counted, for tests)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def splits(a_shape, b_shape, a_dtype, b_dtype) -> bool:
    """Whether ``a @ b`` of these shapes and dtypes is a stack of small float products that :func:`matmul` may
    split: one batch shape (no broadcasting), each product at most ``BLAS_THREADED_MACS`` multiply-adds, at least
    two parts' work in all."""
    if len(a_shape) < 3 or len(a_shape) != len(b_shape) or a_shape[:-2] != b_shape[:-2]:
        return False
    if a_dtype != b_dtype or np.dtype(a_dtype) not in _FLOATS:
        return False
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if b_shape[-2] != k or a_shape[0] < 2 or k < 2:
        return False
    macs = m * k * n
    count = 1
    for d in a_shape[:-2]:
        count *= d
    return 0 < macs <= BLAS_THREADED_MACS and macs * count >= 2 * BLAS_THREADED_MACS


def _matmul_into(a, b, out):
    np.matmul(a, b, out=out)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` of a stack :func:`splits` accepts, split over the leading axis between the eager threads
    (one call on the calling thread when the threads are one or their pacer holds them): one call's bits."""
    count = a.size // (a.shape[-2] * a.shape[-1]) if a.size else 0
    macs = a.shape[-2] * a.shape[-1] * b.shape[-1]
    lead = a.shape[0]
    parts = eager_threads.split_threads(min(lead, macs * count // BLAS_THREADED_MACS))
    if parts < 2:
        return np.matmul(a, b)
    out = np.empty(a.shape[:-1] + (b.shape[-1],), np.result_type(a, b))
    step = -(-lead // parts)
    tasks = [(_matmul_into, (a[s:s + step], b[s:s + step], out[s:s + step])) for s in range(0, lead, step)]
    STATS["split_calls"] += 1
    STATS["parts"] += len(tasks)
    eager_threads.run_split(tasks)
    return out


__all__ = ["splits", "matmul", "STATS"]
