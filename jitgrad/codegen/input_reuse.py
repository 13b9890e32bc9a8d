"""A loop's output written over an input the loop is the last to read (issue 32: B9's bytes at one thread).

A value bigger than the cache is not there when its loop writes it: the CPU reads each line of a fresh buffer
before writing it (write-allocate), a pass over memory that carries nothing.  When an input of the loop (the
GEMM result a LayerNorm's backward or a softmax reads, the upstream gradient of GELU's backward) dies in the loop,
the output takes its buffer instead: each line was just read, so the write finds it in cache.  Every element is
read before it is written at the same index (the input is read at the loop's own index, over the whole
iteration space: a CUDA loop's thread reads and writes its own elements), the CPU's kernel sees the pair as one
pointer (``layout.alias_classes``' twins), and nothing reads the input's buffer afterwards.  Both targets' fused
loops (``loop_steps.emit_group``, ``cuda_steps.fused_group``: one rule, the same places); not a batch of loops
(``batch_steps.py``), whose members may read each other's inputs in one launch.
"""
from __future__ import annotations

from ..ir.graph import Var
from ..ir.plan import RowGroup
from ..ir.symbolic import known_equal
from .place_types import c_strides


def over_dying_input(places, o, g, taken):
    """The place of an input of group ``g`` that output ``o`` may be written over (recorded as ``o``'s, held until
    ``o``'s last reader), or None: a whole contiguous workspace buffer of ``o``'s shape and dtype, the iteration
    space's shape, read by nothing after this step (its value or any view of its buffer), not a graph output, and
    not ``taken`` by an earlier output of the loop (places); in a row kernel, read by no pass after the one
    that stores ``o``.  Only for an ``o`` a later step reads."""
    n = places.n
    # (a value no later step reads: a row kernel's stash, ``loop_steps.row_stashes``, which leaves its place)
    shape = tuple(o.aval.shape)
    # (sizes compared without a guard: a program lowered for every size must not depend on their values)
    if g.scatters or g.gathers or id(o) in places.out_ids or o in places.inplace \
            or known_equal(shape, tuple(g.shape)) is not True or places.last_use.get(o, -1) <= n:
        return None
    for x in g.inputs:
        if not isinstance(x, Var) or x not in places or id(x) in places.out_ids or places.last_use.get(x) != n:
            continue
        p = places[x]
        if p.root.kind != "ws" or p.dtype is not o.aval.dtype or known_equal(p.offset, 0) is not True \
                or known_equal(tuple(p.shape), shape) is not True \
                or known_equal(tuple(p.strides), c_strides(shape)) is not True \
                or any(q.root is p.root for q in taken) or places.reads_root_later(p.root, x, n) \
                or not _rows_allow(g, x, o):
            continue
        places[o] = p
        places.hold(p.root, o)
        return p
    return None


def _rows_allow(g, x, o) -> bool:
    """Whether a row kernel's passes read ``x`` no later than the pass that stores ``o`` (a pass loads every
    element before it stores at that element); any plain loop does."""
    if not isinstance(g, RowGroup):
        return True
    stored = [k for k, ps in enumerate(g.passes) if o in ps.stores]
    reads = [k for k, ps in enumerate(g.passes)
             if any(x is v for e in ps.eqns for v in e.ins) or any(x is e.ins[0] for e in ps.reductions)]
    return bool(stored) and max(reads, default=-1) <= stored[0]


__all__ = ["over_dying_input"]
