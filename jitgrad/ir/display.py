"""Listings for notebooks: the IR, a fusion plan or generated source as a ``str`` that Jupyter shows readably.

A :class:`Listing` *is* the text (a ``str`` subclass), so ``print(f.ir(x))``, ``==``, ``in`` and
``.splitlines()`` behave exactly as before; it adds ``_repr_html_`` (a monospace table: code, the
``file:line`` note, and the text of the user's line each row comes from) and ``_repr_pretty_`` (IPython's
plain-text view prints the text rather than one quoted line full of ``\\n``).
"""
from __future__ import annotations

import html

import numpy as np

from .graph import Graph, Lit, format_graph, graph_rows

_TABLE = ('<table class="jitgrad-listing" style="font-family:monospace;border-collapse:collapse;'
          'font-size:12px;line-height:1.35">')
_TD = 'style="text-align:left;white-space:pre;padding:0 1em 0 0;vertical-align:top;border:none"'
_NOTE = 'style="text-align:left;white-space:pre;padding:0 1em 0 0;vertical-align:top;border:none;color:#6a737d"'
_USER = 'style="text-align:left;white-space:pre;padding:0;vertical-align:top;border:none;color:#22863a"'


class Listing(str):
    """Text with a notebook view.  ``str(listing)`` is the text; ``rows`` (or None) holds, per printed line,
    ``(code, notes, locs)``: the code, its trailing comment without ``# `` (or None), and the SourceLocs of
    the user's lines it came from (shown in HTML with their source text)."""

    def __new__(cls, text: str, rows=None):
        obj = super().__new__(cls, text)
        obj.rows = rows
        return obj

    def __reduce__(self):
        return (Listing, (str(self), self.rows))

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def _repr_html_(self) -> str:
        if self.rows is None:
            return f'<pre class="jitgrad-listing">{html.escape(str(self))}</pre>'
        out = [_TABLE]
        for code, notes, locs in self.rows:
            user = "\n".join(f"{loc.short()}: {loc.text}" if len(locs) > 1 else loc.text
                             for loc in locs if loc.text) if locs else ""
            out.append(f"<tr><td {_TD}>{html.escape(code)}</td>"
                       f"<td {_NOTE}>{html.escape('# ' + notes) if notes else ''}</td>"
                       f"<td {_USER}>{html.escape(user)}</td></tr>")
        out.append("</table>")
        return "".join(out)


def _locs(*candidates) -> tuple:
    seen = []
    for loc in candidates:
        if loc is not None and loc not in seen:
            seen.append(loc)
    return tuple(seen)


def graphs_listing(graphs, sep: str = "\n\n") -> Listing:
    """``(graph, name)`` pairs printed as :func:`format_graph` prints them, joined by ``sep``."""
    texts, rows = [], []
    for g, name in graphs:
        texts.append(format_graph(g, name))
        if rows:
            rows.append(("", None, ()))
        rows.extend((body, notes, _locs(loc)) for body, notes, loc in graph_rows(g, name))
    return Listing(sep.join(texts), rows)


def graph_listing(g: Graph, name: str = "graph") -> Listing:
    return graphs_listing([(g, name)])


def plan_listing(plan) -> Listing:
    """A fusion plan (``ir.passes.fuse.Plan``): its ``str()`` text, and per step its user lines."""
    from .passes.fuse import Group
    rows = [("plan {", None, ())]
    for s in plan.steps:
        if isinstance(s, Group):
            locs = sorted(_locs(*(e.loc for e in s.all_eqns)), key=lambda lo: (lo.file, lo.line))
            rows.append((f"  {s.name}  over {list(s.shape)}", s.where(), tuple(locs)))
        else:
            rows.append((f"  {s.op.name}", s.loc.short() if s.loc else "", _locs(s.loc)))
    rows.append(("}", None, ()))
    return Listing(str(plan), rows)


def straight_line_listing(g: Graph, name: str) -> Listing:
    """The straight-line program the reference interpreter runs: one primitive call per line, with the
    user's file:line."""
    lines = _straight_lines(g, name)
    text = "\n".join(code + (f"  # {loc.short()}" if loc is not None else "") for code, loc in lines)
    return Listing(text, [(code, loc.short() if loc is not None else None, _locs(loc)) for code, loc in lines])


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


__all__ = ["Listing", "graph_listing", "graphs_listing", "plan_listing", "straight_line_listing"]
