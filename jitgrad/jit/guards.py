"""Hooks for library code that runs inside a ``@jitgrad.compile`` trace (optimisers, modules).

- :func:`guard`: the graph being traced is valid only while a Python condition holds (an optimiser's
  hyperparameters and which state tensors exist); a later call where it does not hold retraces.
- :func:`on_trace_abort`: undo Python-level state changes when the trace fails.
- :func:`outside_trace`: tensors made inside are ordinary concrete state (an optimiser's buffers created on its
  first step), captured by identity when the trace first uses them, instead of constants of the graph.
"""
from __future__ import annotations

import contextlib

from ..tracer import STATE as _TR


def _compile_trace():
    tr = _TR.active
    while tr is not None and getattr(tr, "guards", None) is None:
        tr = tr.parent
    return tr


def is_compiling() -> bool:
    """Whether a ``@jitgrad.compile`` trace is running (the Python code now runs once, then is replayed)."""
    return _compile_trace() is not None


def guard(fn, value=None, what=None):
    """While a ``@jitgrad.compile`` trace runs: the graph is valid only while ``fn() == value`` (default: ``fn()``
    now); the compiled function checks ``fn()`` at each call and retraces when it differs.  Outside a trace this
    does nothing.  ``fn`` must be cheap and must not read traced values.  ``what``: a str naming the condition,
    or a function ``(old, new) -> str`` saying what changed, for the retrace's explanation
    (``JITGRAD_LOG=recompiles``)."""
    tr = _compile_trace()
    if tr is not None:
        if what is not None:      # kept beside the guards, so checking them per call costs nothing more
            tr.guard_what[len(tr.guards)] = what
        tr.guards.append((fn, fn() if value is None else value))


def explain_guard(what, old, new) -> str:
    """What changed for a failed guard whose value went from ``old`` to ``new`` (``what`` as given to
    :func:`guard`; the generic text when it was given none)."""
    if what is None:
        return "a condition the library guards changed (train()/eval(), optimiser hyperparameters or state)"
    return what if type(what) is str else what(old, new)


def scalar_input(t):
    """While a ``@jitgrad.compile`` trace runs: the graph reads ``t`` (a concrete 0-dim float64 tensor mirroring
    a Python number, such as an optimiser's hyperparameter) as an input at every call, promoted as the Python
    float it stands for (``f32_tensor * t`` is float32).  Returns ``t``.  Outside a trace it does nothing."""
    tr = _compile_trace()
    if tr is not None:
        var = tr.on_capture(t)
        if tr.python_floats is None:
            tr.python_floats = set()
        tr.python_floats.add(var)
    return t


def on_trace_abort(fn):
    """While a ``@jitgrad.compile`` trace runs: call ``fn()`` if the trace fails (``loss.item()`` inside the
    step), so library code can undo the Python-level state it changed (an optimiser's new state entries).
    Tensors the trace captured are restored by the compiler itself.  Outside a trace this does nothing."""
    tr = _compile_trace()
    if tr is not None:
        tr.on_abort.append(fn)


@contextlib.contextmanager
def outside_trace():
    """Run a block as if no trace were active: tensors made inside are concrete state, not graph constants.
    Only for making new concrete tensors (zeros for optimiser state); traced values must not flow in."""
    prev = _TR.active
    _TR.active = None
    try:
        yield
    finally:
        _TR.active = prev


__all__ = ["guard", "outside_trace", "is_compiling", "on_trace_abort", "explain_guard", "scalar_input"]
