"""Notebook listings (``listing.Listing``) of a fusion plan and of the straight-line program the reference
interpreter runs.  A graph's own listing is the printer's (``graph.graphs_listing``)."""
from __future__ import annotations

import numpy as np

from .graph import Graph, Lit
from .listing import Listing, distinct_locs
from .plan import Group, LoopBatch


def plan_listing(plan) -> Listing:
    """A fusion plan (``ir/plan.Plan``): its ``str()`` text, and per step its user lines."""
    rows = [("plan {", None, ())]
    for s in plan.steps:
        if isinstance(s, LoopBatch):
            rows.append((f"  batch of {len(s.members)} loops:", None, ()))
            for g in s.members:
                locs = sorted(distinct_locs(*(e.loc for e in g.all_eqns)), key=lambda lo: (lo.file, lo.line))
                rows.append((f"    {g.name}  over {list(g.shape)}", g.where(), tuple(locs)))
        elif isinstance(s, Group):
            locs = sorted(distinct_locs(*(e.loc for e in s.all_eqns)), key=lambda lo: (lo.file, lo.line))
            rows.append((f"  {s.name}  over {list(s.shape)}", s.where(), tuple(locs)))
        else:
            rows.append((f"  {s.op.name}", s.loc.short() if s.loc else "", distinct_locs(s.loc)))
    rows.append(("}", None, ()))
    return Listing(str(plan), rows)


def straight_line_listing(g: Graph, name: str) -> Listing:
    """The straight-line program the reference interpreter runs: one primitive call per line, with the
    user's file:line."""
    lines = _straight_lines(g, name)
    text = "\n".join(code + (f"  # {loc.short()}" if loc is not None else "") for code, loc in lines)
    return Listing(text, [(code, loc.short() if loc is not None else None, distinct_locs(loc)) for code, loc in lines])


def _straight_lines(g: Graph, name: str) -> list:
    names = {}

    def nm(v):
        if isinstance(v, Lit):
            return repr(v.value) if not isinstance(v.value, np.ndarray) else f"const_{len(names)}"
        if v not in names:
            names[v] = f"v{len(names)}"
        return names[v]
    args = ", ".join(nm(v) for v in g.inputs)
    lines = [(f"def {name}({args}):", None)]
    for eq in g.eqns:
        params = "".join(f", {k}={v!r}" for k, v in eq.params.items())
        lines.append((f"    {nm(eq.outs[0])} = {eq.op.name}({', '.join(nm(v) for v in eq.ins)}{params})", eq.loc))
    lines.append((f"    return {', '.join(nm(v) for v in g.outputs)}", None))
    return lines


__all__ = ["plan_listing", "straight_line_listing"]
