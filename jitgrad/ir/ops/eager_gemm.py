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
from .blas_gemv import matvec_for_signature

_N, _T = b"N", b"T"
_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


_MADE: dict = {}        # (m, k, n, dtype) -> its function: one per signature, however many callers ask
_MADE_MAX = 4096


def gemm_for_signature(m: int, k: int, n: int, dtype):
    """A function ``(x, y) -> x @ y`` for ``(m, k) @ (k, n)`` matrices of float ``dtype`` (float32 or float64)
    that ``blas.matmul2d`` runs as one single-threaded GEMM (or ``?gemv``), or as its threaded GEMM (over
    ``blas.BLAS_THREADED_MACS``: ``_threaded_gemm``); None where it does something else (fewer multiply-adds, no
    raw GEMM).  One function per signature: a forward product and a pullback plan's step of the same shapes share
    it (and a plan made from a rule's trace on symbolic sizes is seen to be the plan of the rule's trace at those
    sizes: the same calls)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64) or m * n * k < blas.EAGER_MIN_MACS or min(m, n, k) < 1:
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
    if m * n * k > blas.BLAS_THREADED_MACS:
        return _threaded_gemm(m, n, dtype)
    pacer = blas.BlasPacer
    if m == 1 or n == 1:
        # blas.matmul2d's ?gemv (blas_gemv.py): the same call, the same bits
        return matvec_for_signature(m, k, n, dtype, pacer)
    gemm, one, zero = blas._raw_gemm(dtype)
    # per (x transposed, y transposed): C^T = op(y^T) op(x^T) in column-major, as blas._gemm_rows calls it
    arrays = tuple(blas._SIZES(n, m, k, k if ty else n, m if tx else k, n) for tx in (False, True)
                   for ty in (False, True))
    sizes = tuple(map(_addressof, arrays))
    shape = (m, n)

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


def _threaded_gemm(m: int, n: int, dtype):
    """``blas.matmul2d``'s path for a product over ``BLAS_THREADED_MACS`` (row blocks on the eager threads, or all
    of OpenBLAS's threads), called without ``_matmul_impl``, ``blas.matmul``, ``matmul2d`` and its operand
    helpers' frames (five a product): the same calls, so the same bits."""
    shape = (m, n)

    def gemm_threaded(x, y):
        x, tx, ldx, y, ty, ldy = operands(x, y, m, n)
        c = np.empty(shape, dtype)
        # (blas's functions read per call, as matmul2d reads them: a spy set on them sees these calls too)
        if not blas.BLAS_PACER and blas._rows_on_threads(x, tx, ldx, y, ty, ldy, c):
            return c
        with blas.eager_threads(m, n, x.shape[1]):
            blas._gemm_rows(x, tx, ldx, y, ty, ldy, c, 0, m)
        return c
    return gemm_threaded


def operands(x, y, m: int, n: int):
    """``(x, tx, ldx, y, ty, ldy)`` as ``blas._gemm_rows`` takes the operands of an ``(m, k) @ (k, n)`` product:
    a C-ordered array (an F-ordered one's transpose view, a strided one copied), its flag and leading dimension."""
    f = x.flags
    if f.c_contiguous:
        tx, ldx = _N, x.shape[1]
    elif f.f_contiguous:
        tx, ldx = _T, m
    else:
        x = np.ascontiguousarray(x)
        tx, ldx = _N, x.shape[1]
    f = y.flags
    if f.c_contiguous:
        ty, ldy = _N, n
    elif f.f_contiguous:
        ty, ldy = _T, y.shape[0]
    else:
        y = np.ascontiguousarray(y)
        ty, ldy = _N, n
    return x, tx, ldx, y, ty, ldy


__all__ = ["gemm_for_signature", "operands"]
