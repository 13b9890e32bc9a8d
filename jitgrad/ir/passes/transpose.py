"""Reverse mode over the IR: walk the eqns backwards, call each op's vjp under a trace, sum cotangents.

The vjp rules are written with tensor methods, so they run on the *frontend's* symbolic tensors; the pass
only needs a small protocol from whoever calls it (the runtime provides it, keeping ``ir`` free of it):

  front.tracing()            context manager: a fresh trace; returns a builder with ``new_input(aval)``
                             and ``finish(inputs, outputs) -> Graph``
  front.wrap(var_or_lit, requires_grad)   a symbolic tensor for a Var of the trace (or a constant)
  front.unwrap(tensor)       the Var (or Lit) a tensor of the trace stands for
  front.bind                 bind(op, *args, **params), for rules that call primitives directly

The result is an ordinary Graph (inputs: output cotangents, then residual forward values), so it is
optimised, executed and transposed again like any other.
"""
from __future__ import annotations

from ..graph import Graph, Lit, Var
from .dce import dce


# views whose base is no larger than the view: the backward takes them again from the base (a slice's base can be
# much larger than the slice, so a slice stays a residual of its own)
REDERIVED_VIEWS = frozenset({"reshape", "permute", "broadcast_to", "flip"})


class _Ctx:
    """What a vjp rule sees: the ``ctx`` protocol of ``ir/ops/opdef.py``."""

    __slots__ = ("inputs", "outputs", "shapes", "dtypes", "params", "needs_grad", "bind")


class Transposed:
    """bwd: Graph(cotangents..., residuals...) -> cotangents of ``wrt`` (only those in ``present``);
    residuals: the forward Vars the bwd graph reads, in its input order after the cotangents."""

    def __init__(self, bwd, residuals, present, n_ct):
        self.bwd = bwd
        self.residuals = residuals
        self.present = present
        self.n_ct = n_ct


def active_vars(g: Graph, wrt) -> set:
    """Vars that depend differentiably on ``wrt`` (through eqns recorded with grad, on inputs that needed it)."""
    act = set(wrt)
    for e in g.eqns:
        if e.diff and any(n and v in act for v, n in zip(e.ins, e.needs)):
            act.update(e.outs)
    return act


def transpose(g: Graph, out_idx, wrt, front, loc_of=None) -> Transposed:
    """Transpose ``g`` from outputs ``out_idx`` back to the input Vars ``wrt``."""
    act = active_vars(g, wrt)
    outs = [g.outputs[i] for i in out_idx]
    views = {e.outs[0]: e for e in g.eqns if e.op.name in REDERIVED_VIEWS and isinstance(e.ins[0], Var)}
    with front.tracing() as tb:
        ct_inputs = [tb.new_input(o.aval) for o in outs]
        residual = {}    # forward Var -> bwd input Var
        rederived = {}   # forward view Var -> the bwd tensor taking the same view of its lifted base

        def lift(v):
            if isinstance(v, Lit):
                return front.wrap(v, False)
            e = views.get(v)
            if e is not None:
                # a view (a linear layer's W.T, an activation's transpose) is taken again in the backward from
                # its base: the forward saves the base, never a copy of the view
                t = rederived.get(v)
                if t is None:
                    base = lift(e.ins[0])
                    with tb.located(e.loc, None, e.stack):      # the forward view's line, not the caller's
                        t = rederived[v] = front.bind_name(e.op.name, base, **e.params)
                return t
            r = residual.get(v)
            if r is None:
                r = residual[v] = tb.new_input(v.aval)
            return front.wrap(r, v.aval.dtype.is_floating_point)

        ct = {}
        for o, c in zip(outs, ct_inputs):
            if isinstance(o, Var) and o in act:
                t = front.wrap(c, True)
                ct[o] = t if o not in ct else ct[o] + t
        for e in reversed(g.eqns):
            if not e.diff or e.op.vjp is None:
                continue
            gs = [ct.pop(o, None) for o in e.outs]
            if all(x is None for x in gs):
                continue
            needs = tuple(bool(n) and isinstance(v, Var) and v in act for v, n in zip(e.ins, e.needs))
            if not any(needs):
                continue
            ctx = _Ctx()
            ctx.inputs = tuple(lift(v) if i in e.op.saves_in else None for i, v in enumerate(e.ins))
            ctx.outputs = tuple(lift(o) if k in e.op.saves_out else None for k, o in enumerate(e.outs))
            ctx.shapes = tuple(v.aval.shape for v in e.ins)
            ctx.dtypes = tuple(v.aval.dtype for v in e.ins)
            ctx.params = e.params
            ctx.needs_grad = needs
            ctx.bind = front.bind_name
            name = e.op.grad_name
            if e.fwd is not None:     # differentiating a backward eqn: say whose backward it was part of
                name = f"{name} (double backward, through {e.check.name if e.check else 'a backward function'})"
            with tb.located(e.loc, name, e.stack):
                start = len(tb.eqns)
                gs = [front.zeros(o.aval) if x is None else x for x, o in zip(gs, e.outs)]
                res = e.op.vjp(ctx, *gs)
                tb.mark_results(start, [(i, front.unwrap(r)) for i, r in enumerate(res)
                                        if r is not None and isinstance(front.unwrap(r), Var)], name, e.loc, e.stack)
                for v, n, r in zip(e.ins, needs, res):
                    if n and r is not None:
                        ct[v] = r if v not in ct else ct[v] + r
        present = [w in ct for w in wrt]
        out_vars = [front.unwrap(ct[w]) for w in wrt if w in ct]
        res_items = list(residual.items())
        bwd = tb.finish(ct_inputs + [r for _, r in res_items], out_vars)
    bwd = dce(bwd)
    used = set()
    for e in bwd.eqns:
        used.update(v for v in e.ins if isinstance(v, Var))
    used.update(v for v in bwd.outputs if isinstance(v, Var))
    kept = [(f, r) for f, r in res_items if r in used]
    bwd = Graph(ct_inputs + [r for _, r in kept], bwd.eqns, bwd.outputs)
    return Transposed(bwd, [f for f, _ in kept], present, len(ct_inputs))
