"""``torch._dynamo``'s shape marks, for ``jitgrad.compile``: ``mark_dynamic(t, dim)`` makes dim ``dim`` of ``t``
symbolic from the first trace that sees ``t`` as an argument (no trace per size first); ``mark_static`` keeps
it out of the automatic dynamic shapes.  See ``jitgrad/jit/symbolic_entries.py``."""
from __future__ import annotations

from ..jit.symbolic_entries import mark as _mark


def mark_dynamic(t, index, *, min=None, max=None):  # noqa: A002 - torch's names
    """Dim ``index`` (an int or a list of them) of tensor ``t`` is a symbol in the traces that take ``t``."""
    _mark(t, index, "dynamic")


def maybe_mark_dynamic(t, index):
    """As :func:`mark_dynamic` (torch's version does not raise when the dim specialises; nor does this one)."""
    _mark(t, index, "dynamic")


def mark_static(t, index=None):
    """Dim ``index`` of ``t`` (every dim when None) stays a constant of the traces, whatever sizes it takes."""
    _mark(t, index, "static")


__all__ = ["mark_dynamic", "mark_static", "maybe_mark_dynamic"]
