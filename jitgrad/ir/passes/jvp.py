"""Forward mode over the IR: a graph's tangent graph, primal and tangent eqns interleaved, nothing saved.

The pass walks the eqns in order; it binds each eqn again and calls its op's jvp rule (``OpDef.jvp``) on the
tangents of its inputs, under one trace, so the result is an ordinary Graph that optimises, fuses, compiles and
transposes like any other.  It needs the same small frontend protocol as ``transpose.py`` (``tracing``, ``wrap``,
``unwrap``, ``bind_name``, ``zeros``), plus ``transpose_vjp(ctx, tangents)`` for the rules derived from a vjp.

``split_linear`` then cuts a tangent graph in two, as JAX's ``linearize`` does: the eqns that do not depend on
the tangents (run once), and the linear graph of the tangents, which reads the former's values as residuals.
"""
from __future__ import annotations

from ..graph import Graph, Lit, Var
from ..ops.opdef import RuleCtx
from .dce import dce


def jvp(g: Graph, wrt, front, out_idx=None) -> Graph:
    """Graph(g.inputs..., tangents of ``wrt``...) -> (g's outputs ``out_idx``..., their tangents...)."""
    out_idx = range(len(g.outputs)) if out_idx is None else out_idx
    with front.tracing() as tb:
        env = {}
        ins = [tb.new_input(v.aval) for v in g.inputs]
        for v, n in zip(g.inputs, ins):
            env[v] = front.wrap(n, v.aval.dtype.is_floating_point)
        t_ins = [tb.new_input(w.aval) for w in wrt]
        tan = {w: front.wrap(t, True) for w, t in zip(wrt, t_ins)}

        def value(v):
            return front.wrap(v, False) if isinstance(v, Lit) else env[v]
        for e in g.eqns:
            args = [value(v) for v in e.ins]
            with tb.located(e.loc):
                r = front.bind_name(e.op.name, *args, **e.params)
            outs = r if isinstance(r, tuple) else (r,)
            for o, t in zip(e.outs, outs):
                env[o] = t
            ts = [tan.get(v) if isinstance(v, Var) else None for v in e.ins]
            if e.op.jvp is None or all(t is None for t in ts) or \
                    not any(o.aval.dtype.is_floating_point for o in e.outs):
                continue
            ctx = RuleCtx()
            ctx.op = e.op
            ctx.inputs = tuple(args)
            ctx.outputs = tuple(outs)
            ctx.shapes = tuple(v.aval.shape for v in e.ins)
            ctx.dtypes = tuple(v.aval.dtype for v in e.ins)
            ctx.params = e.params
            ts = [t if i not in e.op.nondiff_inputs and v.aval.dtype.is_floating_point else None
                  for i, (v, t) in enumerate(zip(e.ins, ts))]
            ctx.needs_grad = tuple(t is not None for t in ts)
            ctx.bind = front.bind_name
            ctx.transposer = front.transpose_vjp
            if not any(ctx.needs_grad):
                continue
            with tb.located(e.loc, f"{e.op.name} (jvp)"):
                res = e.op.jvp(ctx, *ts)
            for o, t in zip(e.outs, res):
                if t is not None and o.aval.dtype.is_floating_point:
                    tan[o] = t
        outs = [g.outputs[i] for i in out_idx]
        prim = [v if isinstance(v, Lit) else front.unwrap(env[v]) for v in outs]
        tang = []
        for v in outs:
            t = tan.get(v) if isinstance(v, Var) else None
            if t is None:
                t = front.zeros(v.aval)
            tang.append(front.unwrap(t))
        res = tb.finish(ins + t_ins, prim + tang)
    return dce(res)


class Linear:
    """A tangent graph cut in two: ``primal`` (Graph(primal inputs) -> (primal outputs..., residuals...)) and
    ``linear`` (Graph(tangents..., residuals...) -> output tangents); ``n_out`` primal outputs."""

    def __init__(self, primal, linear, n_out):
        self.primal = primal
        self.linear = linear
        self.n_out = n_out


def split_linear(tg: Graph, n_in: int, n_out: int) -> Linear:
    """Split tangent graph ``tg`` (``n_in`` primal inputs then the tangents; ``n_out`` primal outputs then their
    tangents) into the part independent of the tangents and the linear rest."""
    tangents = set(tg.inputs[n_in:])
    dep = set(tangents)
    prim_eqns, lin_eqns = [], []
    for e in tg.eqns:
        if any(isinstance(v, Var) and v in dep for v in e.ins):
            dep.update(e.outs)
            lin_eqns.append(e)
        else:
            prim_eqns.append(e)
    lin_outs = tg.outputs[n_out:]
    # residuals: primal values the linear eqns (or the tangent outputs directly) read
    res, seen = [], set()
    for v in [v for e in lin_eqns for v in e.ins] + list(lin_outs):
        if isinstance(v, Var) and v not in dep and v not in seen:
            seen.add(v)
            res.append(v)
    primal = dce(Graph(tg.inputs[:n_in], prim_eqns, list(tg.outputs[:n_out]) + res))
    linear = dce(Graph(list(tg.inputs[n_in:]) + res, lin_eqns, list(lin_outs)))
    return Linear(primal, linear, n_out)
