"""Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11) in NumPy,
and the mapping from a generator state to the numbers of one draw.

A counter-based generator: the output is a pure function of a 128-bit counter and a 64-bit key, so element ``i``
of a draw can be computed anywhere, in any order: here over whole arrays (eager mode and the reference
interpreter), and in ``codegen/kernels/philox.py`` one element at a time inside a fused Numba loop.  Both follow the
same scheme, so they produce the same bits:

    key     = (seed & 0xffffffff, seed >> 32)                  the generator's 64-bit seed
    counter = (i & 0xffffffff, i >> 32, offset & 0xffffffff, offset >> 32)
    words   = philox4x32_10(counter, key)                      four uint32 words x0..x3 per element

``offset`` is the generator's draw counter (each draw uses a fresh one), ``i`` the element's row-major index
in the drawn tensor.  From the words:

    uniform float32   (x0 >> 8) * 2**-24                      24 bits, in [0, 1 - 2**-24]
    uniform float64   ((x0 << 21) | (x1 >> 11)) * 2**-53      53 bits, in [0, 1 - 2**-53]
    normal            Box-Muller in float64 on two 53-bit uniforms, u1 from (x0, x1), u2 from (x2, x3):
                      sqrt(-2 log(1 - u1)) * cos(2 pi u2)      (1 - u1 is in (0, 1]: the log is finite)
                      then rounded to the requested dtype.
"""
from __future__ import annotations

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57          # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # the Weyl key increments (golden ratio, sqrt(3) - 1)
MASK32 = 0xFFFFFFFF
TWO_PI = 6.283185307179586

_U = np.uint64


_CHUNK = 1 << 13     # elements per pass: the lanes of a chunk stay in the L1/L2 cache across the ten rounds


def philox4x32(ctr, key, rounds=10):
    """Philox4x32-``rounds`` on arrays: ``ctr`` four arrays of uint32 values, ``key`` two (any integer dtype,
    broadcast together).  Returns the four output words as uint64 arrays holding 32-bit values."""
    shape = np.broadcast_shapes(*(np.shape(c) for c in ctr), *(np.shape(k) for k in key))
    lanes = [np.array(np.broadcast_to(np.asarray(c).astype(_U) & _U(MASK32), shape)).reshape(-1) for c in ctr]
    keys = [np.asarray(k).astype(_U) & _U(MASK32) for k in key]
    # one key for every element (a draw's seed) stays a scalar; per-element keys are walked like the lanes
    keys = [k.reshape(()) if k.size == 1 else np.broadcast_to(k, shape).reshape(-1) for k in keys]
    n = lanes[0].size
    scratch = (np.empty(min(n, _CHUNK), _U), np.empty(min(n, _CHUNK), _U))
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        _rounds(*(c[lo:hi] for c in lanes), *(k[lo:hi] if k.ndim else k for k in keys),
                *(w[:hi - lo] for w in scratch), rounds)
    return tuple(c.reshape(shape) for c in lanes)


def _rounds(c0, c1, c2, c3, k0, k1, p0, p1, rounds):
    """The rounds on one chunk, in place (no temporaries: the lanes are the output)."""
    m0, m1, mask, s32 = _U(M0), _U(M1), _U(MASK32), _U(32)
    for r in range(rounds):
        if r:
            k0 = (k0 + _U(W0)) & mask
            k1 = (k1 + _U(W1)) & mask
        np.multiply(c0, m0, out=p0)     # 32 x 32 -> 64-bit products: exact in uint64
        np.multiply(c2, m1, out=p1)
        np.right_shift(p1, s32, out=c0)     # c0' = hi(p1) ^ c1 ^ k0
        c0 ^= c1
        c0 ^= k0
        np.right_shift(p0, s32, out=c2)     # c2' = hi(p0) ^ c3 ^ k1
        c2 ^= c3
        c2 ^= k1
        np.bitwise_and(p1, mask, out=c1)    # c1' = lo(p1)
        np.bitwise_and(p0, mask, out=c3)    # c3' = lo(p0)


def words(seed, offset, n):
    """The four Philox words of elements ``0..n-1`` of the draw at (``seed``, ``offset``)."""
    return words_at(seed, offset, np.arange(n, dtype=_U))


def words_at(seed, offset, index):
    """The four Philox words of the elements at row-major indices ``index`` (an integer array, any shape) of the
    draw at (``seed``, ``offset``): a block of a draw without the rest of it (the key-tiled attention's dropout)."""
    s = int(np.asarray(seed).astype(np.int64)) & 0xFFFFFFFFFFFFFFFF
    o = int(np.asarray(offset).astype(np.int64)) & 0xFFFFFFFFFFFFFFFF
    i = np.asarray(index).astype(_U, copy=False)
    return philox4x32((i & _U(MASK32), i >> _U(32), o & MASK32, o >> 32), (s & MASK32, s >> 32))


def uniform(seed, offset, shape, dtype=np.float32):
    """Uniform numbers in [0, 1) of ``shape`` and ``dtype`` (float32 or float64)."""
    n = int(np.prod(shape, dtype=np.int64))
    return _owned(uniform_at(seed, offset, np.arange(n, dtype=_U), dtype), shape, dtype)


def _owned(flat, shape, dtype):
    """``flat`` cast to ``dtype`` in an array of ``shape`` that owns its memory: a reshaped view would make every
    tensor drawn from it look like a view of a larger storage (``p.data`` then shares storage, per step)."""
    out = np.empty(shape, dtype=dtype)
    out.reshape(-1)[...] = flat
    return out


def uniform_at(seed, offset, index, dtype=np.float32):
    """``uniform(seed, offset, shape, dtype)`` at the row-major indices ``index`` only (the same numbers)."""
    x0, x1, _, _ = words_at(seed, offset, index)
    if np.dtype(dtype) == np.float32:
        u = (x0 >> _U(8)).astype(np.float32) * np.float32(2.0 ** -24)
    else:
        u = ((x0 << _U(21)) | (x1 >> _U(11))).astype(np.float64) * (2.0 ** -53)
    return u.astype(dtype, copy=False)


def normal(seed, offset, shape, dtype=np.float32):
    """Standard normal numbers (Box-Muller, computed in float64) of ``shape`` and ``dtype``."""
    n = int(np.prod(shape, dtype=np.int64))
    x0, x1, x2, x3 = words(seed, offset, n)
    u1 = ((x0 << _U(21)) | (x1 >> _U(11))).astype(np.float64) * (2.0 ** -53)
    u2 = ((x2 << _U(21)) | (x3 >> _U(11))).astype(np.float64) * (2.0 ** -53)
    z = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(TWO_PI * u2)
    return _owned(z, shape, dtype)


def bits64(seed, offset, n):
    """``n`` random 64-bit integers (as uint64): the words (x0, x1) of each element."""
    x0, x1, _, _ = words(seed, offset, n)
    return (x0 << _U(32)) | x1


__all__ = ["philox4x32", "words", "uniform", "normal", "bits64", "M0", "M1", "W0", "W1"]
