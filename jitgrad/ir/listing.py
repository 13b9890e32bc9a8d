"""Listings for notebooks: the IR, a fusion plan or generated source as a ``str`` that Jupyter shows readably.

A :class:`Listing` *is* the text (a ``str`` subclass), so ``print(f.ir(x))``, ``==``, ``in`` and
``.splitlines()`` behave exactly as before; it adds ``_repr_html_`` (a monospace table: code, the
``file:line`` note, and the text of the user's line each row comes from) and ``_repr_pretty_`` (IPython's
plain-text view prints the text rather than one quoted line full of ``\\n``).  The graph printer
(``graph.py``) and ``display.py`` (plans, straight-line programs) make them.
"""
from __future__ import annotations

import html

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


def distinct_locs(*candidates) -> tuple:
    seen = []
    for loc in candidates:
        if loc is not None and loc not in seen:
            seen.append(loc)
    return tuple(seen)


__all__ = ["Listing", "distinct_locs"]
