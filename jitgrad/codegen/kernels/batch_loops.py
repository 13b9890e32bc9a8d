"""A batch of fusion groups of one body (``ir/plan.LoopBatch``) as one kernel, parallel over (member, chunk).

The members are the same loop up to sizes and addresses (one kernel text when built alone), so the batch's kernel
is that loop once, run over a table of argument blocks.  Its argument block (``program/batch_steps.py`` fills it):

    A[0] = U                     units: what the pool splits between its workers (contiguous runs of units)
    A[1] = E                     elements of all members together (the gate's work: E x the loop's cost)
    A[2 + u], u = 0..U           unit u runs pieces A[2 + u] .. A[3 + u] - 1
    A[3 + U + 3q ...]            piece q: (its member's block, as a slot of A; c; C): the c-th of C equal parts
                                 of the member's outer loop (``loops._Nest``'s rows)
    ...                          each member's own argument block, as ``loops.gen_group`` reads it

Each element is computed by the member loop's own instructions, whichever piece and thread it lands in, so the
results are those of the members' own kernels, at every thread count.  A member closed by a full sum is one
piece (``whole``): it sums in the order its own kernel does.  The outer loop over units is parallel (gated per
call by its work, ``kernel_ir.For.gate``) or serial when even the sum is below the pool's threshold: one launch
either way, where there were as many as members.
"""
from __future__ import annotations

from . import kernel_ir as ki
from .copy_loops import copy_loop
from .loops import Kernel, Rebased, group_loop

HEADER = 2      # U, E: then the unit table


def gen_batch(member, rank, classes, parallel, per_element=None, whole=False, label="batch") -> Kernel:
    """The batch kernel of members whose loop ``member(b, block, rows)`` emits into builder ``b`` over argument
    block ``block`` (a ``loops.Rebased``), its outer loop over part ``rows`` of its range (None: all), returning
    ``(operands, alias classes, folded axes)``; ``rank``, ``classes``: the members' own kernel's.  ``parallel``:
    the unit loop takes the pool (``per_element``: gated per call by its work); ``whole``: every piece is a whole
    member (full reductions and rank-0 loops)."""
    b = ki.Builder()
    A = b.A
    units = b.let("bu", A[0])
    gate = (b.let("be", A[1]), float(per_element)) if parallel and per_element is not None else None
    made = None
    with b.loop("bk", units, parallel=parallel, gate=gate) as u:
        first = b.let("bq0", A[HEADER + u])
        last = b.let("bq1", A[HEADER + 1 + u])
        with b.loop("bq", last, start=first) as q:
            at = b.let("bat", units + (HEADER + 1) + q * 3)
            base = b.let("bbase", A[at])
            rows = None
            if not whole and rank > 0:
                rows = (b.let("bc", A[at + 1]), b.let("bparts", A[at + 2]))
            made = member(b, Rebased(A, base), rows)
    operands, alias, red_axes = made
    return Kernel("batch", b.finish(), rank=rank, operands=operands, classes=classes, parallel=parallel,
                  red_axes=red_axes, label=label, alias=alias, per_element=per_element)


def group_member(g, classes, rank, red_axes, alias):
    """``gen_batch``'s member: fusion group ``g``'s loop (``loops.group_loop``; the arguments are its kernel's)."""
    def member(b, block, rows):
        made = group_loop(b, g, classes, False, None, rank, red_axes, alias, None, block, rows)
        return made.operands, made.alias, made.red_axes
    return member


def copy_member(src_dtype, dst_dtype, rank, cls):
    """``gen_batch``'s member: a copy's loop (``copy_loops.copy_loop``)."""
    def member(b, block, rows):
        return [None, None], copy_loop(b, src_dtype, dst_dtype, rank, cls, block=block, rows=rows), None
    return member


def plan_pieces(members, target_units, min_piece=4096, whole=False):
    """``(units, pieces)`` for members of ``(elements, outer rows)``: each member cut into equal parts of its outer
    loop (one when ``whole``), the parts packed in order into about ``target_units`` units of similar work.
    ``pieces``: ``(member index, c, C)``; ``units``: the index of each unit's first piece, then the end."""
    total = sum(n for n, _ in members)
    per_unit = max(-(-total // max(target_units, 1)), min_piece)
    pieces = []
    sizes = []
    for m, (n, rows) in enumerate(members):
        parts = 1 if whole else max(1, min(rows, -(-n // per_unit)))
        for c in range(parts):
            pieces.append((m, c, parts))
            sizes.append(n * (c + 1) // parts - n * c // parts)
    units, acc = [0], 0
    for k, sz in enumerate(sizes):
        acc += sz
        if acc >= per_unit and k + 1 < len(sizes):
            units.append(k + 1)
            acc = 0
    units.append(len(pieces))
    return units, pieces


__all__ = ["gen_batch", "group_member", "copy_member", "plan_pieces", "HEADER"]
