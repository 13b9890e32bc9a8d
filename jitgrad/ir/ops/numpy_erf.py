"""erf, GELU and GELU's vjp of float32 arrays in NumPy for eager mode: the compiled kernels' algorithm
(``codegen/kernels/mathlib_exp_log.py``'s ``erf_f32``) but for the tail's polynomial, evaluated with NumPy's SIMD
loops a cache-sized block at a time.

SciPy's ``erf`` on float32 goes element by element through a double-precision routine: ~12 ns an element, which
made GELU (its forward and backward each take an erf) the costliest op of an eager GPT step after the GEMMs.
This agrees with the compiled kernels' erf to rounding (max error 2.5 ulp against the exact value; SciPy's is
0.5 ulp).  float64 keeps SciPy's erf (gradcheck's precision).

erf x = x P(x^2) on |x| < 0.92; erf x = 1 - exp(-x^2) H(1 / (1 + |x|/2)) beyond; the sign bit copied from x; nan
stays nan.  (The compiled erf takes exp(x^2) erfc x beyond 0.92 as a degree-8 polynomial in |x|, without the
divide; in NumPy the divide is one pass against that polynomial's 5 more Horner passes.  Both agree to rounding.)
Both branches are evaluated on every element of a block, then one is kept: NumPy has no per-element branch.  The
slow NumPy loops are avoided (a masked ``copyto``, ``copysign`` and the NaN-propagating ``minimum`` cost 2-20x a
multiply): the branch is picked with ``putmask`` and the sign is OR-ed in as a bit.  Beyond |x| = 4,
where the compiled kernel clamps, both give 1 (exp(-x^2) H < 2^-25 there).

GELU and its vjp run the same block loop around the erf, in the order their decompositions
(``normalization.py``) bind the primitives, so the fused eager ops and the decomposed graph give the same bits.
"""
from __future__ import annotations

import math

import numpy as np

_F = np.float32
# the coefficients of mathlib_exp_log's _F_A (the same float32 values), and H's
_A = tuple(_F(c) for c in (1.1283792, -0.37612632, 0.112836875, -0.02685894, 0.005199907, -0.0008130013,
                           8.316775e-05))
_B = tuple(_F(c) for c in (0.0017120629, 0.2606605, 0.39347643, -0.05872, 0.6317423, -0.22910842))
_SMALL_MAX, _HALF, _ONE = _F(0.92), _F(0.5), _F(1.0)
_SIGN = np.int32(-2 ** 31)
# GELU's constants as its decomposition's Python floats become in float32 arithmetic
_SQRT_HALF, _INV_SQRT_2PI = _F(1.0 / math.sqrt(2.0)), _F(1.0 / math.sqrt(2.0 * math.pi))
_MINUS_HALF = _F(-0.5)
BLOCK = 32768           # elements per block: a block's temporaries stay in L2


class _Scratch:
    """The per-call block temporaries (float32, and a bool mask)."""

    def __init__(self, n):
        self.a, self.z, self.p, self.t = (np.empty(n, _F) for _ in range(4))
        self.large = np.empty(n, np.bool_)
        self.extra = np.empty(n, _F)


def _erf_block(xb, out, s: _Scratch, m: int):
    """erf of the block ``xb`` (m elements) into ``out`` (which may be ``xb``'s own buffer only if not read
    after); uses every scratch array but ``extra``."""
    ab, zb, pb, tb, lb = s.a[:m], s.z[:m], s.p[:m], s.t[:m], s.large[:m]
    np.abs(xb, out=ab)
    np.multiply(ab, ab, out=zb)
    np.multiply(zb, _A[6], out=pb)                  # Horner: p = ((A6 z + A5) z + ...) z + A0
    for c in _A[5:0:-1]:
        pb += c
        pb *= zb
    pb += _A[0]
    pb *= ab                                        # the small-|x| branch, a P(a^2)
    np.greater_equal(ab, _SMALL_MAX, out=lb)        # nan: False, the small branch's nan is kept
    np.multiply(ab, _HALF, out=tb)
    tb += _ONE
    np.reciprocal(tb, out=tb)                       # t = 1 / (1 + a/2)
    np.multiply(tb, _B[5], out=ab)                  # (a is not read again)
    for c in _B[4:0:-1]:
        ab += c
        ab *= tb
    ab += _B[0]                                     # H(t)
    np.negative(zb, out=zb)
    np.exp(zb, out=zb)
    zb *= ab
    np.subtract(_ONE, zb, out=zb)                   # the large-|x| branch, 1 - exp(-a^2) H(t)
    np.putmask(pb, lb, zb)
    np.bitwise_and(xb.view(np.int32), _SIGN, out=tb.view(np.int32))
    np.bitwise_or(pb.view(np.int32), tb.view(np.int32), out=out.view(np.int32))


def _blockwise(block_fn, *arrays):
    """``block_fn(*input_blocks, out_block, scratch, m)`` over cache-sized blocks of the arrays (one shape, read
    as C-ordered float32): a new C-ordered float32 array of that shape."""
    flats = [np.ascontiguousarray(a, dtype=_F).reshape(-1) for a in arrays]
    out = np.empty(flats[0].shape, _F)
    n = out.size
    bs = max(1, min(BLOCK, n))
    s = _Scratch(bs)
    for i in range(0, n, bs):
        m = min(bs, n - i)
        block_fn(*(f[i:i + m] for f in flats), out[i:i + m], s, m)
    return out.reshape(np.shape(arrays[0]))


def erf_float32(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array (a new C-ordered float32 array of x's shape)."""
    return _blockwise(_erf_block, x)


def _gelu_block(xb, ob, s: _Scratch, m: int):
    e = s.extra[:m]
    np.multiply(xb, _SQRT_HALF, out=e)
    _erf_block(e, e, s, m)
    e += _ONE
    np.multiply(xb, _HALF, out=ob)
    ob *= e


def gelu_float32(x: np.ndarray) -> np.ndarray:
    """GELU of a float32 array: ``0.5 * x * (1 + erf(x * sqrt(1/2)))``, the decomposition's order."""
    return _blockwise(_gelu_block, x)


def _gelu_backward_block(xb, gb, ob, s: _Scratch, m: int):
    cdf = s.extra[:m]                               # 0.5 * (1 + erf(x * sqrt(1/2)))
    np.multiply(xb, _SQRT_HALF, out=cdf)
    _erf_block(cdf, cdf, s, m)
    cdf += _ONE
    cdf *= _HALF
    np.multiply(xb, xb, out=ob)                     # the pdf, built in the output block
    ob *= _MINUS_HALF
    np.exp(ob, out=ob)
    ob *= _INV_SQRT_2PI
    ob *= xb
    ob += cdf
    ob *= gb


def gelu_backward_float32(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """GELU's vjp of float32 arrays of one shape: ``g * (cdf + x * pdf)``, cdf = 0.5 (1 + erf(x sqrt(1/2))),
    pdf = exp(x * x * -0.5) / sqrt(2 pi), the decomposition's order."""
    return _blockwise(_gelu_backward_block, x, g)
