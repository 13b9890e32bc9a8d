"""The reference interpreter: runs a Graph with the OpDefs' NumPy impls.  It is ``backend="interpret"`` and
the oracle every other backend is tested against."""
from __future__ import annotations

import numpy as np

from .graph import Graph, Lit


def run_eqn(e, vals):
    out = e.op.impl(*vals, **e.params)
    want = e.outs[0].aval.dtype.np
    if type(out) is not np.ndarray:
        out = np.asarray(out, dtype=want)
    elif out.dtype != want:
        out = out.astype(want)
    return out


def interpret(graph: Graph, args, on_nonfinite=None, profiler=None) -> list:
    """Evaluate ``graph`` on NumPy arrays ``args``; returns the output arrays.  ``on_nonfinite(eqn, value)`` is
    called for an eqn carrying an anomaly check whose value is not all finite (it raises).  ``profiler``: an
    object with ``range(name, shapes, cat)``; each eqn becomes one event."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env = {}
    for v, a in zip(graph.inputs, args):
        env[v] = a
    with np.errstate(all="ignore"):     # inf/nan arise silently, as in torch; anomaly mode is the check
        _run_eqns(graph, env, on_nonfinite, profiler)
    return [env[v] if type(v) is not Lit else np.asarray(v.value, v.aval.dtype.np) for v in graph.outputs]


def eqn_error(e, vals, exc):
    """An error raised while running eqn ``e`` of a compiled graph, re-raised as eager mode raises it: the same
    class, naming the op, the inputs' shapes and dtypes, and the user's line that created the op (for a backward
    eqn, the forward line it differentiates)."""
    text = str(exc)
    if not text.startswith(e.op.name):
        text = f"{e.op.name}: {text}"
    if "(inputs:" not in text:
        ins = ", ".join(f"{np.asarray(v).dtype}{list(np.shape(v))}" for v in vals)
        text += f" (inputs: {ins})"
    if e.loc is not None and " at " not in text:
        text += f"\n  at {e.loc.where()} in {e.loc.function}: {e.loc.text}"
    try:
        return type(exc)(text)
    except Exception:      # noqa: BLE001 - an exception class with another constructor
        return RuntimeError(text)


class ScopeTracker:
    """Opens and closes the profiler ranges of ``record_function`` blocks traced inside a compiled function, as
    consecutive steps enter and leave them (each eqn carries the names of the blocks it was traced in)."""

    def __init__(self, profiler):
        self.profiler = profiler
        self.open = []      # (name, context manager)

    def enter(self, scope):
        k = 0
        while k < len(self.open) and k < len(scope) and self.open[k][0] == scope[k]:
            k += 1
        self.close(k)
        for name in scope[k:]:
            cm = self.profiler.range(name, None, "user_annotation")
            cm.__enter__()
            self.open.append((name, cm))

    def close(self, depth=0):
        while len(self.open) > depth:
            self.open.pop()[1].__exit__(None, None, None)


def _run_eqns(graph, env, on_nonfinite, profiler):
    scopes = ScopeTracker(profiler) if profiler is not None else None
    try:
        _run_all(graph, env, on_nonfinite, profiler, scopes)
    finally:
        if scopes is not None:
            scopes.close()


def _run_all(graph, env, on_nonfinite, profiler, scopes):
    for e in graph.eqns:
        if scopes is not None:
            scopes.enter(e.scope)
        vals = [env[v] if type(v) is not Lit else v.value for v in e.ins]
        try:
            if profiler is not None:
                loc = f" {e.loc.short()}" if e.loc is not None else ""
                with profiler.range(f"{e.op.name}{loc}", [list(np.shape(v)) for v in vals], "kernel"):
                    out = env[e.outs[0]] = run_eqn(e, vals)
            else:
                out = env[e.outs[0]] = run_eqn(e, vals)
        except (IndexError, ValueError, TypeError, ZeroDivisionError, FloatingPointError, OverflowError) as exc:
            raise eqn_error(e, vals, exc) from None
        if e.check is not None and on_nonfinite is not None and out.dtype.kind == "f" and not np.isfinite(out).all():
            on_nonfinite(e, out)
