"""Accesses by an index inside kernels, as kernel IR: the bounds check around a load or store at an index read
from memory, and the record of the first index error (kernels cannot raise: the driver raises after the step,
``codegen/lowering.step_error``).  Used by the fused loops' gathers and scatters (``loops.gen_group``), the
standalone gather/scatter kernels (``index_loops.py``) and the region kernels (``region_loops.py``).
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Lit
from . import kernel_ir as ki
from .kernel_ir import I64, cast, const, select


def record_index_error(b, IE, code, k, extra=()):
    """Statements recording the first index error in the index-error array (block slot ``IE``: its address,
    then step ids): ``[code, step id (slot IE + 1 + k), extra...]`` when nothing was recorded yet."""
    A = b.A
    ie = A[IE].ptr(I64)
    f = ki.If(ie[0] == 0)
    f.then += [ki.Store(ie, const(0), const(code)), ki.Store(ie, const(1), A[IE + 1 + k])]
    f.then += [ki.Store(ie, const(2 + n), v) for n, v in enumerate(extra)]
    return f


def by_index(b, index, j, axis, IE, k, access, otherwise=()):
    """Statements of one access by an index (a fused loop's gather load or scatter store): ``index`` (the
    value read at the loop's position from operand ``j``), wrapped when negative (Python's indexing), checked
    against the indexed axis (``axis``: its stride and size); ``access(offset)`` (statements; the offset of the
    indexed element along that axis) when in range, else ``otherwise`` and the first bad index is recorded (block
    slot ``IE``, step ``k``: ``[1, step id, index, 0]``)."""
    stride, size = axis
    with b.capture() as out:
        raw = b.let(f"ir{j}", cast(index, I64))
        at = b.let(f"ij{j}", select(raw < 0, raw + size, raw))
        with b.if_(ki.and_(at >= 0, at < size)) as s:
            b.emit(access(at * stride))
        with b.else_(s):
            b.emit(list(otherwise) + [record_index_error(b, IE, 1, k, (raw, const(0)))])
    return out


def index_once(b, index, j, axis, IE, k, runs):
    """``(statements, offset, ok)`` for an index that is the same along a loop's innermost run (its operand
    broadcasts along the inner axis: B11's pair index over the 3 coordinates): the statements read it once,
    before the run, wrap it when negative and check it, recording the first bad one (as ``by_index`` does) when
    ``runs`` (the run has elements); inside the run ``by_checked(ok, offset, ...)`` accesses by it."""
    stride, size = axis
    with b.capture() as out:
        raw = b.let(f"ir{j}", cast(index, I64))
        at = b.let(f"ij{j}", select(raw < 0, raw + size, raw))
        ok = b.let(f"ok{j}", ki.and_(at >= 0, at < size))
        with b.if_(ki.and_(ki.not_(ok), runs)):
            b.emit([record_index_error(b, IE, 1, k, (raw, const(0)))])
    return out, at * stride, ok


def by_checked(b, ok, offset, access, otherwise=()):
    """Statements of one access by an index checked before the loop (``index_once``): ``access(offset)`` when it
    is in range, else ``otherwise``."""
    with b.capture() as out:
        with b.if_(ok) as s:
            b.emit(access(offset))
        if otherwise:
            with b.else_(s):
                b.emit(list(otherwise))
    return out


def adds_into_zeros(e) -> bool:
    """Whether scatter-add ``e`` (a fused loop's store by an index) adds into zeros, a literal: its loop clears
    its output itself (no copy of the base; B11's force transposes)."""
    b = e.ins[0]
    return isinstance(b, Lit) and not np.any(b.value)


__all__ = ["record_index_error", "by_index", "index_once", "by_checked", "adds_into_zeros"]
