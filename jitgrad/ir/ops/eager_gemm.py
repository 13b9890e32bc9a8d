"""One eager GEMM signature: ``x @ y`` for two float matrices of one shape pair and dtype, on one thread.

``blas.matmul2d`` serves every shape: per call it checks the library, reads each operand's layout, builds the
sizes BLAS reads by pointer and picks the thread policy (~43,000 instructions of Python around a 32x30 @ 30x200
product's ~120,000 in BLAS, five frames).  A signature between ``blas.EAGER_MIN_MACS`` and
``blas.BLAS_THREADED_MACS`` multiply-adds always runs the same way (one single-threaded ``?gemm`` call), so
:func:`gemm_for_signature` works out once what only the shapes decide (the sizes for each pair of operand layouts,
the routine, alpha and beta) and hands back one function that reads the layouts and makes the call.  The call is
``matmul2d``'s, argument for argument: the same bits.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import blas

_N, _T = b"N", b"T"
_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


_MADE: dict = {}        # (m, k, n, dtype) -> its function: one per signature, however many callers ask
_MADE_MAX = 4096


def gemm_for_signature(m: int, k: int, n: int, dtype):
    """A function ``(x, y) -> x @ y`` for ``(m, k) @ (k, n)`` matrices of float ``dtype`` (float32 or float64)
    that ``blas.matmul2d`` runs as one single-threaded GEMM, or None where it does something else (fewer or more
    multiply-adds, no raw GEMM).  One function per signature: a forward product and a pullback plan's step of the
    same shapes share it (and a plan made from a rule's trace on symbolic sizes is seen to be the plan of the
    rule's trace at those sizes: the same calls)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64) or not blas.EAGER_MIN_MACS <= m * n * k <= blas.BLAS_THREADED_MACS:
        return None
    key = (m, k, n, dtype)
    f = _MADE.get(key)
    if f is None:
        if not blas.raw_gemm_ready():
            return None
        if len(_MADE) >= _MADE_MAX:
            _MADE.clear()
        f = _MADE[key] = _gemm(m, k, n, dtype)
    return f


def _gemm(m, k, n, dtype):
    """``gemm_for_signature``'s function, made."""
    gemm, one, zero = blas._raw_gemm(dtype)
    # per (x transposed, y transposed): C^T = op(y^T) op(x^T) in column-major, as blas._gemm_rows calls it
    arrays = tuple(blas._SIZES(n, m, k, k if ty else n, m if tx else k, n) for tx in (False, True)
                   for ty in (False, True))
    sizes = tuple(map(_addressof, arrays))
    shape = (m, n)
    pacer = blas.BlasPacer

    def gemm_one_thread(x, y, _arrays=arrays):     # (the size arrays live as long as the function)
        f = x.flags
        if f.c_contiguous:
            tx = 0
        elif f.f_contiguous:
            x, tx = x.T, 2          # (BLAS reads the C-ordered transpose, transposed by flag)
        else:
            x, tx = np.ascontiguousarray(x), 0
        f = y.flags
        if f.c_contiguous:
            ty = 0
        elif f.f_contiguous:
            y, ty = y.T, 1
        else:
            y, ty = np.ascontiguousarray(y), 0
        c = np.empty(shape, dtype)
        try:
            px = _addressof(_from_buffer(x))
        except (TypeError, ValueError):     # read-only
            px = x.ctypes.data
        try:
            py = _addressof(_from_buffer(y))
        except (TypeError, ValueError):
            py = y.ctypes.data
        if pacer._current != 1:
            pacer.use(1)
        ad = sizes[tx + ty]
        gemm(_T if ty else _N, _T if tx else _N, ad, ad + 4, ad + 8, one, py, ad + 12, px, ad + 16, zero,
             _addressof(_from_buffer(c)), ad + 20)
        return c
    return gemm_one_thread


__all__ = ["gemm_for_signature"]
