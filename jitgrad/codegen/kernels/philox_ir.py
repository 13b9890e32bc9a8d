"""Philox4x32-10 as kernel IR: the scalar body of ``rand_uniform`` for the LLVM renderer (``ir_loops.py``), so a
loop drawing uniform numbers compiles without Numba (the compiled path's cold build, and eager mode's native draws,
``jit/eager_kernels.py``, which never import Numba).

The same scheme as ``ir/philox.py`` (NumPy, over arrays) and ``philox.py`` (Numba, one element): uint64
arithmetic on 32-bit values, so every multiply of two 32-bit words is exact and the words are the same bits.  The
uniform's conversion is exact too (an integer below 2**24 / 2**53 to float, times a power of two), and it is built
without fast-math flags, as Numba's function is compiled: no contraction with the loop's arithmetic around it.

``rng_normal`` is not here: Box-Muller calls log and cos, whose last bits differ between libm (Numba's kernels)
and mathlib's IR, so normal draws keep the Numba-compiled kernel (``ir_loops.Unsupported``).
"""
from __future__ import annotations

from . import kernel_ir as ki

U64 = ki.U64
_M0, _M1 = 0xD2511F53, 0xCD9E8D57          # the round multipliers (ir/philox.py)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85          # the key increments
_MASK = 0xFFFFFFFF


def _u(v: int) -> ki.Val:
    return ki.const(v, U64)


def words(seed, offset, index):
    """The four Philox words (uint64 values holding 32 bits) of element ``index`` of the draw at (``seed``,
    ``offset``): int64 IR values, their bits taken as unsigned."""
    s, o, i = (ki.cast(v, U64) for v in (seed, offset, index))
    mask, s32 = _u(_MASK), _u(32)
    c0, c1, c2, c3 = i & mask, i >> s32, o & mask, o >> s32
    k0, k1 = s & mask, s >> s32
    for r in range(10):
        if r:
            k0 = (k0 + _u(_W0)) & mask
            k1 = (k1 + _u(_W1)) & mask
        p0 = c0 * _u(_M0)       # 32 x 32 -> 64 bits: exact
        p1 = c2 * _u(_M1)
        c0, c1, c2, c3 = (p1 >> s32) ^ c1 ^ k0, p1 & mask, (p0 >> s32) ^ c3 ^ k1, p0 & mask
    return c0, c1, c2, c3


def uniform(precision: str, seed, offset, index) -> ki.Val:
    """One uniform number in [0, 1) at ``precision`` (f32: 24 bits of word 0; f64: 53 bits of words 0 and 1)."""
    x0, x1, _, _ = words(seed, offset, index)
    with ki.fastmath(()):
        if precision == "f32":
            return ki.cast(x0 >> _u(8), ki.F32) * ki.const(2.0 ** -24, ki.F32)
        return ki.cast((x0 << _u(21)) | (x1 >> _u(11)), ki.F64) * ki.const(2.0 ** -53, ki.F64)


def expand(name: str, precision: str, args):
    """Math call ``name`` (``rng_uniform``) at ``precision`` on IR values (seed, offset, index) as kernel IR; None
    for a draw this module does not build (``rng_normal``)."""
    if name == "rng_uniform":
        return uniform(precision, *args)
    return None


__all__ = ["words", "uniform", "expand"]
