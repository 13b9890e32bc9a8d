"""Chains of ``index_put`` regions that write every element of a zero base once: a split's backward written in
place (issue 32).

``q, k, v = x.split(C, dim=2)`` has the backward ``index_put(index_put(index_put(zeros, dv, [..., 2C:3C]), dk,
[..., C:2C]), dq, [..., :C])`` (accumulating, each into the previous result).  Lowered one eqn at a time, that is
a copy of a materialised zero literal into the output (a read and a write of the whole array), then one pass per
region reading the value and the zeros under it and writing their sum.  When the regions tile the output (one
axis, disjoint slices that cover it) and each result but the last is read only by the next ``index_put``, every
element is written exactly once: the buffer needs no zeros and each region is a plain write (``0 + v`` is ``v``,
up to the sign of a zero: ``0.0 + -0.0`` is ``0.0``).  Better still, a batched product whose result reaches its
region through a permute and a reshape writes straight into it (``batched_gemm.permuted_c``): no pass at all.

``zero_chain(prog, e)``: the chain of region eqn ``e`` (None when it is in none); the chain's buffer is allocated
by whichever step needs it first (``ZeroChain.place``), so a product emitted before the chain's first
``index_put`` can already write into it.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Lit, Var
from ..lowering import step_kind
from ..places import Place, region_place


class ZeroChain:
    """The ``index_put`` eqns of one chain (``members``, in order) and, once allocated, the buffer they share."""
    __slots__ = ("members", "_place")

    def __init__(self, members):
        self.members = members
        self._place = None

    def place(self, prog) -> Place:
        """The chain's buffer: the last member's (fresh when the graph returns it, else a workspace slot held
        until its last reader, so every member and every product written into it finds it alive)."""
        if self._place is None:
            last = self.members[-1].outs[0]
            self._place = prog.places.buffer(last, last.aval.shape, last.aval.dtype)
        return self._place


def zero_chain(prog, e):
    """The ``ZeroChain`` region eqn ``e`` belongs to, or None (see the module docstring)."""
    if prog.region_chains is None:
        prog.region_chains = _find_chains(prog)
    return prog.region_chains.get(id(e))


def _find_chains(prog) -> dict:
    chains = {}
    places = prog.places
    steps = prog.plan_steps
    for s in steps:
        if not _region_put(s) or not _zero_literal(s.ins[0], s.outs[0]):
            continue
        members = [s]
        while True:
            o = members[-1].outs[0]
            uses = places.uses.get(o, ())
            if id(o) in places.out_ids or len(uses) != 1:
                break
            nxt = steps[uses[0]]
            if not _region_put(nxt) or nxt.ins[0] is not o or any(v is o for v in nxt.ins[1:]):
                break
            members.append(nxt)
        if _tiles(members):
            chain = ZeroChain(members)
            for m in members:
                chains[id(m)] = chain
    return chains


def _region_put(s) -> bool:
    """A plan step the ``region`` emitter takes (``region_steps.region``): a basic index, one dtype."""
    if getattr(s, "op", None) is None or s.op.name != "index_put" or step_kind(s) != "region":
        return False
    out = s.outs[0]
    return s.ins[1].aval.dtype is out.aval.dtype and out.aval.dtype.name != "bool" \
        and all(type(d) is int for d in out.aval.shape)


def _zero_literal(base, out) -> bool:
    """``base`` is a literal of +0.0s (no -0.0: the chain's plain writes keep ``0 + v``'s bits but for that)."""
    if not isinstance(base, Lit):
        return False
    a = np.asarray(base.value)
    return a.size in (1, out.aval.size) and not a.any() and not np.signbit(a).any()


def _interval(spec, shape):
    """``(axis, lo, hi)`` for a spec of step-1 slices that is whole on every axis but one (``axis`` None: the
    whole array); None for anything else."""
    if len(spec) > len(shape):
        return None
    cut = (None, 0, 0)
    for k, s in enumerate(spec):
        if type(s) is not tuple or s[0] != "slice" or s[3] not in (None, 1) \
                or any(x is not None and type(x) is not int for x in s[1:3]):
            return None
        lo, hi, _ = slice(s[1], s[2]).indices(shape[k])
        if (lo, hi) == (0, shape[k]):
            continue
        if cut[0] is not None or hi <= lo:
            return None
        cut = (k, lo, hi)
    return cut


def _tiles(members) -> bool:
    """Whether the members' regions are disjoint and cover the output (every element written once)."""
    shape = members[0].outs[0].aval.shape
    cuts = [_interval(m.params["spec"], shape) for m in members]
    if any(c is None for c in cuts):
        return False
    if len(cuts) == 1 and cuts[0][0] is None:
        return True
    axes = {c[0] for c in cuts}
    if len(axes) != 1 or None in axes:
        return False
    at = 0
    for _, lo, hi in sorted(cuts, key=lambda c: c[1]):
        if lo != at:
            return False
        at = hi
    return at == shape[cuts[0][0]]


def value_place(prog, v, shape):
    """Where a product may write ``v`` (of ``shape``: the product's result permuted) when ``v``, or its single
    reshape, is the value of a ``ZeroChain`` member and nothing else reads it: the member's region of the chain's
    buffer, seen with ``shape``; None otherwise."""
    places = prog.places
    w = v
    for _ in range(2):
        uses = places.uses.get(w, ())
        if len(uses) != 1 or id(w) in places.out_ids:
            return None
        s = prog.plan_steps[uses[0]]
        if getattr(s, "op", None) is not None and s.op.name == "reshape" and w is v:
            w = s.outs[0]
            continue
        break
    if getattr(s, "op", None) is None or s.op.name != "index_put" or s.ins[1] is not w \
            or any(x is w for x in (s.ins[0],) + tuple(s.ins[2:])):
        return None
    chain = zero_chain(prog, s)
    if chain is None:
        return None
    area = region_place(chain.place(prog), s.params["spec"])
    if area is None or tuple(area.shape) != tuple(w.aval.shape):
        return None
    strides = _split_strides(area.shape, area.strides, shape)
    return None if strides is None else Place(area.root, area.offset, shape, strides, area.dtype)


def _split_strides(shape, strides, fine):
    """Strides of ``fine`` (a shape whose dims split each dim of ``shape`` into consecutive factors, dims of 1
    aside) over a place of ``shape`` and ``strides``; None when ``fine`` is not such a split."""
    out = [0] * len(fine)
    real = [i for i, d in enumerate(fine) if d != 1]
    k = len(real)
    for d, st in reversed([(d, st) for d, st in zip(shape, strides) if d != 1]):
        run = 1
        while run < d:
            if k == 0:
                return None
            k -= 1
            out[real[k]] = st * run
            run *= fine[real[k]]
        if run != d:
            return None
    return None if k else out


def is_place(p: Place, q: Place) -> bool:
    """Whether two places are the same elements in the same order (a value already where a region wants it)."""
    return p.root is q.root and p.offset == q.offset and tuple(p.shape) == tuple(q.shape) \
        and all(a == b or n == 1 for a, b, n in zip(p.strides, q.strides, p.shape))


__all__ = ["ZeroChain", "zero_chain", "value_place", "is_place"]
