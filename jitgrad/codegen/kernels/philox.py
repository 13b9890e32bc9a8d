"""Philox4x32-10 for the generated loops: one element of a draw from (seed, offset, element index).

The scalar bodies of ``rand_uniform`` / ``rand_normal`` (``ir/ops/random.py``) call these; they compute exactly
what ``ir/philox.py`` computes over whole arrays (the scheme is described there), so eager mode, the
interpreter and compiled code draw the same numbers.  Everything is uint64 arithmetic on 32-bit values (a
mixed int64/uint64 expression would make Numba go through float64).  No fastmath: the functions keep their own
flags when LLVM inlines them into a fastmath loop, so Box-Muller's log/cos are the plain libm calls.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_jit = njit(cache=True, error_model="numpy")

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S21 = np.uint64(21)
_S11 = np.uint64(11)
_S8 = np.uint64(8)


@_jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """One Philox4x32-10 block: uint64 arguments holding 32-bit values -> four 32-bit words (as uint64)."""
    for r in range(10):
        if r > 0:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        p0 = c0 * _M0
        p1 = c2 * _M1
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n2 = (p0 >> _S32) ^ c3 ^ k1
        c1 = p1 & _MASK
        c3 = p0 & _MASK
        c0 = n0
        c2 = n2
    return c0, c1, c2, c3


@_jit
def _words(seed, offset, index):
    s = np.uint64(seed)     # int64 -> uint64 keeps the bits (seeds and offsets are stored as int64)
    o = np.uint64(offset)
    i = np.uint64(index)
    return philox4x32_10(i & _MASK, i >> _S32, o & _MASK, o >> _S32, s & _MASK, s >> _S32)


@_jit
def _u53(a, b):
    return np.float64((a << _S21) | (b >> _S11)) * 1.1102230246251565e-16     # 2**-53


@_jit
def rnguniform_f32(seed, offset, index):
    x0, _, _, _ = _words(seed, offset, index)
    return np.float32(x0 >> _S8) * np.float32(5.960464477539063e-08)          # 2**-24


@_jit
def rnguniform_f64(seed, offset, index):
    x0, x1, _, _ = _words(seed, offset, index)
    return _u53(x0, x1)


@_jit
def _normal(seed, offset, index):
    x0, x1, x2, x3 = _words(seed, offset, index)
    u1 = _u53(x0, x1)
    u2 = _u53(x2, x3)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(6.283185307179586 * u2)


@_jit
def rngnormal_f64(seed, offset, index):
    return _normal(seed, offset, index)


@_jit
def rngnormal_f32(seed, offset, index):
    return np.float32(_normal(seed, offset, index))
