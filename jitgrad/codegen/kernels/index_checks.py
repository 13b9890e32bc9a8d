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


# the index-error array (codegen/program/cpu.py): [code, step id, index, dim, the least key claimed, its lock]
KEY_AT = 4
NO_KEY = 2 ** 63 - 1


def record_index_error(b, IE, code, k, extra=(), key=None):
    """Statements recording an index error in the index-error array (block slot ``IE``: its address, then step
    ids): ``[code, step id (slot IE + 1 + k), extra...]``.  ``key`` None (a serial loop): when nothing was recorded
    yet, so the first in the loop's order wins.  In a parallel loop, chunks record at once: ``key`` is the record's
    position in the loop's order (its outer index: a chunk runs a range of it, in order), and the least key claims
    the record whole (``kernel_ir.Claim``; the loop opens the claims first, ``open_claims``): the serial loop's
    report at every thread count."""
    A = b.A
    ie = A[IE].ptr(I64)
    fields = [ki.Store(ie, const(0), const(code)), ki.Store(ie, const(1), A[IE + 1 + k])]
    fields += [ki.Store(ie, const(2 + n), v) for n, v in enumerate(extra)]
    if key is not None:
        return ki.Claim(ie, const(KEY_AT), key, fields)
    f = ki.If(ie[0] == 0)
    f.then += fields
    return f


def open_claims(b, IE):
    """The statement a parallel loop recording index errors starts with, before its chunks: its claims may lower
    the key slot from ``NO_KEY`` when nothing is recorded yet; when an earlier step's record stands, no key is
    below the slot's -1 (a chunk's outer index is not negative)."""
    ie = b.A[IE].ptr(I64)
    return ki.Store(ie, const(KEY_AT), select(ie[0] == 0, const(NO_KEY), const(-1)))


def claim_keys(g, outer, n_outer, parallel):
    """The claim key of each index access's record in group ``g``'s loop (its gathers, then its scatters), or None
    where a plain first record keeps the loop's order (a serial loop with one such access).  Eager mode runs the
    ops one after the other, so the first bad index it meets is the first op's: the key is the op's place in the
    program (``g.all_eqns``), then the loop's outer index ``outer`` (of ``n_outer``: a parallel loop's chunks run
    ranges of it, in order), so the least key is eager's record at any thread count."""
    ops = list(g.gathers) + list(g.scatters)
    if not ops or not parallel and len(ops) < 2:
        return None
    order = sorted(range(len(ops)), key=lambda n: g.all_eqns.index(ops[n]))
    return [const(order.index(n)) * n_outer + outer if len(ops) > 1 else outer for n in range(len(ops))]


def by_index(b, index, j, axis, IE, k, access, otherwise=(), key=None):
    """Statements of one access by an index (a fused loop's gather load or scatter store): ``index`` (the
    value read at the loop's position from operand ``j``), wrapped when negative (Python's indexing), checked
    against the indexed axis (``axis``: its stride and size); ``access(offset)`` (statements; the offset of the
    indexed element along that axis) when in range, else ``otherwise`` and the first bad index is recorded (block
    slot ``IE``, step ``k``: ``[1, step id, index, 0]``; ``key``: see ``record_index_error``)."""
    stride, size = axis
    with b.capture() as out:
        raw = b.let(f"ir{j}", cast(index, I64))
        at = b.let(f"ij{j}", select(raw < 0, raw + size, raw))
        with b.if_(ki.and_(at >= 0, at < size)) as s:
            b.emit(access(at * stride))
        with b.else_(s):
            b.emit(list(otherwise) + [record_index_error(b, IE, 1, k, (raw, const(0)), key)])
    return out


def index_once(b, index, j, axis, IE, k, runs, key=None):
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
            b.emit([record_index_error(b, IE, 1, k, (raw, const(0)), key)])
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


__all__ = ["record_index_error", "open_claims", "claim_keys", "KEY_AT", "NO_KEY", "by_index", "index_once", "by_checked", "adds_into_zeros"]
