"""Max and min over floats as integer reductions: a float's bits, the magnitude bits of negatives flipped, order
as the float does, so a row's max/min accumulates over integer keys (int32 for float32, int64 for float64; LLVM
vectorises them; over floats it needs ``nnan``, which the kernels never carry), with NaNs flagged apart.  Used by
the fused and row-wise loops."""
from __future__ import annotations

import numpy as np

from ...ir import dtypes as dt
from . import kernel_ir as ki
from .kernel_ir import I64, cast, const, read, select


def _assign(b, name, value) -> ki.Assign:
    """``name = value`` as a statement (not emitted: for statement lists built apart)."""
    value = ki.val(value)
    return ki.Assign(b.var(name, value.t), value)


def ordered_key(od: dt.DType):
    """``(bits, flip, from_bits)``: builders of a float of dtype ``od`` as an integer ``flip(bits(v))`` that orders
    as the float does (its bits, the magnitude bits of negatives flipped; ``flip`` undoes itself) and back,
    ``from_bits(flip(k))``, bit for bit.  A row max/min over such keys is an integer reduction, which LLVM
    vectorises; over floats it needs ``nnan``, which the kernels never carry.  NaNs are flagged apart (their
    keys order anywhere); +0 > -0."""
    if od.name == "float32":
        # int32 keys (each step cast back to int32: the IR's integer arithmetic is int64, as Numba's), so the
        # reduction vectorises over twice the lanes of int64 keys; the same keys, so the same max/min
        return (lambda v: ki.bitcast(v, ki.I32), lambda k: cast(k ^ ((k >> 31) & 2147483647), ki.I32),
                lambda k: ki.bitcast(cast(k, ki.I32), ki.F32))
    return (lambda v: ki.bitcast(v, I64), lambda k: k ^ ((k >> 63) & 9223372036854775807),
            lambda k: ki.bitcast(k, ki.F64))


def row_minmax(b, op: str, od: dt.DType, rv, acc: str, h: str, kb: str, nans: str):
    """``(before, each, after)``: the statements of a row's max/min (``op``) of float values ``rv`` into ``acc``,
    over ordered integer keys (``ordered_key``; accumulated in ``h``, ``kb`` the element's) plus a NaN flag
    (``nans``): both vectorise; a NaN wins after the row."""
    bits, flip, from_bits = ordered_key(od)
    kt = ki.I32 if od.name == "float32" else I64        # the keys' type, and the NaN flag's (float32: int32 lanes)
    H, KB, NANS = (read(b.var(n, kt)) for n in (h, kb, nans))
    before = [_assign(b, h, const(key_of(-np.inf if op == "amax" else np.inf, od), kt)),
              _assign(b, nans, const(0, kt))]
    each = [_assign(b, kb, bits(rv)), _assign(b, kb, flip(KB)),
            _assign(b, h, select(KB > H if op == "amax" else KB < H, KB, H)),
            _assign(b, nans, cast(NANS | select(rv == rv, 0, 1), kt))]     # a flag: OR never overflows
    ACC = read(b.var(acc, ki.OF_DTYPE[od.name]))
    after = [_assign(b, h, flip(H)), _assign(b, acc, from_bits(H)),
             _assign(b, acc, select(NANS == 0, ACC, const(np.nan, ki.OF_DTYPE[od.name])))]
    return before, each, after


def key_of(value: float, od: dt.DType) -> int:
    """The ``ordered_key`` of a constant (a reduction's initial value), as a Python int."""
    bits = int(np.array(value, od.np).view(np.int32 if od.name == "float32" else np.int64))
    width = 31 if od.name == "float32" else 63
    return bits ^ ((1 << width) - 1) if bits < 0 else bits


__all__ = ["ordered_key", "row_minmax", "key_of"]
