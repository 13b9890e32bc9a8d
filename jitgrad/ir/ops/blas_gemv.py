"""Eager matrix-vector products: a single-threaded float GEMM with one row or one column of output, as SciPy
OpenBLAS's ``?gemv``.

A ``?gemm`` call packs both operands into its blocked layout before it multiplies, whatever their shapes: for
``(256, 256) @ (256, 1)`` (a critic's ``t @ W2``, the weight's gradient ``t.T @ g``) it copies the whole matrix for
a product that reads it once.  Counted on OpenBLAS's Haswell kernels (callgrind, 2026-11-30): 198,000 / 360,000 /
328,000 instructions for ``t @ w``, ``u @ G``, ``t.T @ g`` at 256 x 256 by ``?gemm``, 82,000 / 76,000 / 76,000
by ``?gemv`` (PyTorch's MKL takes its gemv for them too).

``?gemv``'s sums are not ``?gemm``'s, so the last bits differ from a GEMM of the same product.  Served here are
the products ``blas.matmul2d`` runs on one thread (at most ``blas.BLAS_THREADED_MACS`` multiply-adds), where a
compiled graph calls its own small-product kernel (``codegen/kernels/small_gemm.py``) and no bit agreement with
the eager GEMM is kept; ``blas.matmul2d`` and the per-signature calls (``eager_gemm``) both come here, so eager
calls agree with each other.  The caller holds OpenBLAS at one thread (a threaded ``?gemv`` may split the sums).
"""
from __future__ import annotations

import ctypes

import numpy as np

from .blas_library import LIBRARY, load

_ROUTINES: dict = {}
_KEEP: list = []        # the ctypes constants whose addresses the calls pass
_SIZES = ctypes.c_int * 4
_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer
_N, _T = b"N", b"T"


def _routine(dtype):
    """``(gemv, &1.0, &0.0)`` for float32 / float64 through SciPy's OpenBLAS (``scipy_?gemv_``), or None."""
    hit = _ROUTINES.get(dtype)
    if hit is None:
        load()
        lib = LIBRARY["lib"]
        name = "scipy_sgemv_" if dtype == np.float32 else "scipy_dgemv_"
        fn = getattr(lib, name, None) if lib is not None else None
        if fn is None:
            hit = False
        else:
            call = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 11))(ctypes.cast(fn, ctypes.c_void_p).value)
            ctype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
            one, zero, inc = ctype(1.0), ctype(0.0), ctypes.c_int(1)
            _KEEP.extend((one, zero, inc))
            hit = (call, _addressof(one), _addressof(zero), _addressof(inc))
        _ROUTINES[dtype] = hit
    return hit or None


def _address(x) -> int:
    try:
        return _addressof(_from_buffer(x))
    except (TypeError, ValueError):     # read-only
        return x.ctypes.data


def matvec(a: np.ndarray, b: np.ndarray):
    """``a @ b`` for float32/float64 matrices of one dtype with ``a.shape[0] == 1`` or ``b.shape[1] == 1`` (and
    ``a.shape[1] >= 1``) as one ``?gemv`` call: a C-ordered result, or None where SciPy's OpenBLAS has no
    ``?gemv``."""
    r = _routine(a.dtype)
    if r is None:
        return None
    gemv, one, zero, inc = r
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if n == 1:
        # y = A v: BLAS (column-major) sees a C-ordered A as its transpose
        mat, vec, out = a, b.reshape(k), m
        if mat.flags.c_contiguous:
            trans, rows, cols, ld = _T, k, m, k
        elif mat.flags.f_contiguous:
            mat, trans, rows, cols, ld = mat.T, _N, m, k, m     # (a C-ordered view: its address by buffer)
        else:
            mat = np.ascontiguousarray(mat)
            trans, rows, cols, ld = _T, k, m, k
    else:
        # y^T = B^T u (one row of output)
        mat, vec, out = b, a.reshape(k), n
        if mat.flags.c_contiguous:
            trans, rows, cols, ld = _N, n, k, n
        elif mat.flags.f_contiguous:
            mat, trans, rows, cols, ld = mat.T, _T, k, n, k
        else:
            mat = np.ascontiguousarray(mat)
            trans, rows, cols, ld = _N, n, k, n
    if not vec.flags.c_contiguous:
        vec = np.ascontiguousarray(vec)
    # y zeroed: BLAS may scale y by beta = 0 (0 * NaN) in builds before 0.3.27
    y = np.zeros(out, a.dtype)
    sizes = _SIZES(rows, cols, max(1, ld), 0)
    ad = _addressof(sizes)
    gemv(trans, ad, ad + 4, one, _address(mat), ad + 8, _address(vec), inc, zero, _addressof(_from_buffer(y)), inc)
    return y.reshape(m, n)


def matvec_for_signature(m: int, k: int, n: int, dtype, pacer):
    """:func:`matvec` for one signature (``m == 1`` or ``n == 1``, ``k >= 1``) with its sizes worked out once per
    layout of the matrix (C-ordered, F-ordered): the same call, so the same bits; None without ``?gemv``.  Holds
    OpenBLAS at one thread through ``pacer`` (``blas.BlasPacer``) as ``blas.matmul2d`` does; one frame a call."""
    r = _routine(np.dtype(dtype))
    if r is None:
        return None
    gemv, one, zero, inc = r
    dtype = np.dtype(dtype)
    if n == 1:      # (see matvec) the matrix is x, the vector y
        c_form, f_form, out, on_x = (_T, _SIZES(k, m, max(1, k), 0)), (_N, _SIZES(m, k, max(1, m), 0)), m, True
    else:
        c_form, f_form, out, on_x = (_N, _SIZES(n, k, max(1, n), 0)), (_T, _SIZES(k, n, max(1, k), 0)), n, False
    c_trans, f_trans = c_form[0], f_form[0]
    c_ad, f_ad = _addressof(c_form[1]), _addressof(f_form[1])
    shape = (m, n)

    def gemv_one_signature(x, y, _sizes=(c_form[1], f_form[1])):     # (the size arrays live with the function)
        if on_x:
            mat, vec = x, y.reshape(k)
        else:
            mat, vec = y, x.reshape(k)
        f = mat.flags
        if f.c_contiguous:
            trans, ad = c_trans, c_ad
        elif f.f_contiguous:
            mat, trans, ad = mat.T, f_trans, f_ad     # (the same first element: a C-ordered view for its address)
        else:
            mat = np.ascontiguousarray(mat)
            trans, ad = c_trans, c_ad
        if not vec.flags.c_contiguous:
            vec = np.ascontiguousarray(vec)
        try:
            pm = _addressof(_from_buffer(mat))
        except (TypeError, ValueError):     # read-only
            pm = mat.ctypes.data
        try:
            pv = _addressof(_from_buffer(vec))
        except (TypeError, ValueError):
            pv = vec.ctypes.data
        if pacer._current != 1:
            pacer.use(1)
        out_ = np.zeros(out, dtype)
        gemv(trans, ad, ad + 4, one, pm, ad + 8, pv, inc, zero, _addressof(_from_buffer(out_)), inc)
        return out_.reshape(shape)
    return gemv_one_signature


__all__ = ["matvec", "matvec_for_signature"]
