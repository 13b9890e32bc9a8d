"""Triangular masks a compiled graph holds as constants: a captured tensor that is a causal mask (nanoGPT's
``tril(ones(T, T))`` buffer, or the triangle ``tril``/``triu`` build inside a trace) is folded into the graph as a
literal, so the graph itself shows which of attention's products are half-needed (``ir/passes/causal.py``) and the
small-product kernels skip the other half.

The fold holds only while the tensor is the same array at the same version: a guard per mask retraces a call after
an in-place write to it (``copy_``, ``fill_``, ``load_state_dict``) or a new ``.data``.  Writes that bypass the
version counter (through ``.numpy()``) are not seen, as torch's own version checks do not see them.
"""
from __future__ import annotations

import weakref

from ..ir.graph import Graph, Lit
from ..ir.passes import causal

WHAT = "a triangular mask the compiled graph holds as a constant was written in place or replaced"


def _unchanged(t, arr, version):
    ref = weakref.ref(t)

    def same() -> bool:
        x = ref()
        return x is not None and x._data is arr and x._vc[0] == version
    same.mask_key = (id(t), id(arr), version)
    return same


def fold_masks(raw: Graph, entry) -> Graph:
    """``raw`` with each captured triangular mask (read, never written, no grad) replaced in its eqns by a literal
    of its value; a guard per mask on ``entry`` (its array and version unchanged).  The guards go into the entry's
    own list, which a symbolic template shares with the instances built from it (``symbolic_entries._concrete``):
    a call checks the template's guards, so each mask's guard is added once."""
    if not causal.ENABLED:
        return raw
    written = {ci - entry.n_args for ci, _ in entry.writes}      # (indices among the arguments and captured)
    lits = {}
    have = {getattr(fn, "mask_key", None) for fn, _ in entry.guards}
    for k, (c, src) in enumerate(zip(entry.captured, entry.grad_src)):
        t = c.ref()
        if src is not None or k in written or t is None or t.requires_grad or c.var not in raw.inputs:
            continue
        arr = t._data
        if causal.triangle_kind(arr) is None:
            continue
        frozen = arr.copy()
        frozen.flags.writeable = False
        lits[c.var] = Lit(frozen, c.var.aval)
        guard = _unchanged(t, arr, t._vc[0])
        if guard.mask_key not in have:
            entry.guard_what[len(entry.guards)] = WHAT
            entry.guards.append((guard, True))
    if not lits:
        return raw
    eqns = [e.replace(ins=[lits.get(v, v) if not isinstance(v, Lit) else v for v in e.ins])
            if any(not isinstance(v, Lit) and v in lits for v in e.ins) else e for e in raw.eqns]
    return Graph(raw.inputs, eqns, raw.outputs)


__all__ = ["fold_masks"]
