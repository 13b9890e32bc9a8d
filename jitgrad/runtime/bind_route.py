"""Which route ``bind`` takes: straight to the eager dispatch, or through an interceptor.

Two things intercept every bind: a profiler that is recording (``profiler_state``) and a forward-AD level whose
tangents must go along (``forward_state``).  The flat call sites (Tensor's operators, the elementary functions,
basic indexing) and ``bind`` itself read one flag, ``ROUTE.plain``, instead of both states: one attribute read per
op on the hot path.  The flag is kept true to the states by setting them only through :func:`set_profiler` and
:func:`set_forward` (``tests/test_eager_budget.py`` checks the invariant).
"""
from __future__ import annotations

from .forward_state import STATE as _FWD
from .profiler_state import STATE as _PROF


class _Route:
    __slots__ = ("plain",)

    def __init__(self):
        self.plain = True   # no profiler recording and no forward-AD level open


ROUTE = _Route()


def set_profiler(profiler) -> None:
    """Make ``profiler`` (or None) the recording profiler."""
    _PROF.active = profiler
    ROUTE.plain = profiler is None and _FWD.active is None


def set_forward(handler) -> None:
    """Make ``handler`` (runtime/dual.Duals, or None) the forward-AD handler every bind calls."""
    _FWD.active = handler
    ROUTE.plain = handler is None and _PROF.active is None


__all__ = ["ROUTE", "set_profiler", "set_forward"]
