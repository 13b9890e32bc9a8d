"""``linearize`` as JAX has it: trace once, take the tangent graph (the jvp pass), keep its linear part.

The function is traced at its arguments' shapes (``tracing.trace_function``); ``ir/passes/jvp.py`` turns the graph
into its tangent graph and cuts it into the eqns that do not depend on the tangents, run here once, and the linear
graph of the tangents, which reads the former's values as residuals.  ``jvp_fn`` evaluates only that linear graph,
with jitgrad's ops (so it records autograd history and traces under ``@jitgrad.compile``).
"""
from __future__ import annotations

from ..ir.graph import Lit
from ..ir.passes import jvp as jvp_pass, split_linear
from ..jit.graph_function import FRONT
from ..runtime.dispatch import bind
from ..runtime.tensor import Tensor
from ..tracer import pytree
from .tracing import result_marker, trace_function


def _flatten(tree):
    return pytree.flatten(tree, lambda x: isinstance(x, Tensor))


def evaluate(graph, values):
    """Run ``graph`` on ``values`` (tensors or Python numbers, one per input) by binding its eqns in order."""
    env = dict(zip(graph.inputs, values))

    def val(v):
        if isinstance(v, Lit):
            return FRONT.wrap(v, False)
        return env[v]
    for e in graph.eqns:
        r = bind(e.op, *[val(v) for v in e.ins], **e.params)
        for o, t in zip(e.outs, r if isinstance(r, tuple) else (r,)):
            env[o] = t
    return [val(v) for v in graph.outputs]


def linearize(func, primals):
    """``(func(*primals), jvp_fn)``; ``jvp_fn(*tangents)`` returns ``J @ tangents`` shaped like the output."""
    leaves, p_def = _flatten(primals)
    graph, sources, out, ft = trace_function(
        lambda *a: func(*a), leaves, [tuple(x.shape) for x in leaves],
        lambda stand_ins: (pytree.unflatten(p_def, stand_ins), {}))
    out_leaves, out_def = _flatten(out)
    markers = [result_marker(ft, o) for o in out_leaves]
    graph.outputs = [m[1] if m[0] == "var" else Lit(m[1]._data, _aval(m[1])) for m in markers]
    n_in = len(graph.inputs)
    wrt = graph.inputs[:len(leaves)]
    tg = jvp_pass(graph, wrt, FRONT)
    parts = split_linear(tg, n_in, len(graph.outputs))
    vals = evaluate(parts.primal, list(leaves) + list(sources))
    n = parts.n_out
    primal_out, residuals = vals[:n], vals[n:]
    result = pytree.unflatten(out_def, [v if isinstance(v, Tensor) else Tensor._make(v) for v in primal_out])

    def jvp_fn(*tangents):
        t_leaves, t_def = _flatten(tangents)
        if len(t_leaves) != len(leaves):
            raise RuntimeError(f"Expected {len(leaves)} tangents to match the primals' structure, got "
                               f"{len(t_leaves)}")
        for p, t in zip(leaves, t_leaves):
            if tuple(p.shape) != tuple(t.shape) or p.dtype is not t.dtype:
                raise RuntimeError(f"Expected tangent of shape {list(p.shape)} and dtype {p.dtype} to match the "
                                   f"primal, got {list(t.shape)} and {t.dtype}")
        outs = evaluate(parts.linear, list(t_leaves) + list(residuals))
        return pytree.unflatten(out_def, outs)
    return result, jvp_fn


def _aval(t):
    from ..ir.ops import Aval
    return Aval(tuple(t.shape), t.dtype)
