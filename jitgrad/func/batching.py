"""The batching interpreter behind ``jitgrad.func.vmap`` (JAX's design).

A function traced at per-example shapes (``tracing.py``) is evaluated eqn by eqn on values that may carry a batch
dimension, always in front: each value is ``(tensor, batched)``.  An eqn none of whose inputs is batched is bound
as traced; otherwise its primitive's batching rule binds the same primitive (or a few) on the batched tensors.
Every step goes through ``bind``, so the result is recorded by autograd and traced by ``@jitgrad.compile`` like any
other op.  A primitive with a decomposition and no rule is batched through that decomposition; one with neither
loops over the batch and stacks (``FALLBACK`` lists them).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Lit
from ..ir.ops import OPS
from ..ir.ops.opdef import result_dtype
from ..runtime.dispatch import bind
from ..runtime.grad_mode import no_grad
from ..runtime.tensor import Tensor
from . import index_rules
from .batch_values import align, bind_op, outs, to_batched

RANDOM = frozenset({"rand_uniform", "rand_normal", "multinomial", "randperm"})
RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                "'different' randomness flags on vmap or perform the randomness operation out of vmap")


def _pe_ndim(v):
    return len(v.aval.shape)


# ---- rules: rule(eqn, vals, B) -> list of (tensor, batched) -------------------------------------------------

def _elementwise(e, vals, B):
    R = max((_pe_ndim(v) for v in e.ins), default=0)
    args = [align(t, B, _pe_ndim(v), R) if b else t for (t, b), v in zip(vals, e.ins)]
    out = outs(bind(e.op, *args, **e.params))
    if _np_dtype(out[0]) != e.outs[0].aval.dtype.np:
        # a batched 0-dim value now has a dim and would win dtype promotion: cast the operands to the
        # per-example result type first (as torch's vmap computes), then bind again
        skip = {0} if e.op.name == "where" else set()
        target = result_dtype([v.aval for i, v in enumerate(e.ins) if i not in skip])
        args = [bind_op("cast", a, dtype=target) if isinstance(a, Tensor) and i not in skip
                and _np_dtype(a) != target.np else a for i, a in enumerate(args)]
        out = outs(bind(e.op, *args, **e.params))
    return [(o, True) for o in out]


def _np_dtype(t):
    return t._data.dtype


def _shift(ax, nd):
    return (ax % nd if nd else 0) + 1


def _axes_rule(e, vals, B):
    """Reductions, scans, softmax, flip: every tensor input batched, axis params shifted past the batch dim."""
    nd = _pe_ndim(e.ins[0])
    args = [to_batched(t, b, B, v.aval.shape) if isinstance(t, Tensor) or b else t
            for (t, b), v in zip(vals, e.ins)]
    params = dict(e.params)
    flat = False
    for k in ("axes", "axis"):
        if k not in params:
            continue
        a = params[k]
        if a is None:
            if e.op.name in ("argmax", "argmin"):
                args[0] = bind_op("reshape", args[0], shape=(B, int(np.prod(e.ins[0].aval.shape))))
                params[k] = 1
                flat = True
            else:
                params[k] = tuple(range(1, nd + 1))
        elif isinstance(a, (tuple, list)):
            params[k] = tuple(_shift(x, nd) for x in a)
        else:
            params[k] = _shift(a, nd)
    out = outs(bind(e.op, *args, **params))
    if flat:
        out = [bind_op("reshape", o, shape=(B,) + tuple(e.outs[0].aval.shape)) for o in out]
    return [(o, True) for o in out]


def _keep_trailing(e, vals, B):
    """Ops over the last dims, batched over (and broadcasting) the leading ones (layer_norm, the linalg
    factorizations and solvers): the batch dim is one more leading dim, the operands aligned to one rank."""
    R = max(_pe_ndim(v) for v in e.ins)
    args = [align(to_batched(t, b, B, v.aval.shape), B, _pe_ndim(v), R) for (t, b), v in zip(vals, e.ins)]
    return [(o, True) for o in outs(bind(e.op, *args, **e.params))]


def _reshape(e, vals, B):
    (t, _), = vals
    return [(bind_op("reshape", t, shape=(B,) + tuple(e.params["shape"])), True)]


def _permute(e, vals, B):
    (t, _), = vals
    return [(bind_op("permute", t, perm=(0,) + tuple(p + 1 for p in e.params["perm"])), True)]


def _broadcast_to(e, vals, B):
    (t, _), = vals
    shape = tuple(e.params["shape"])
    t = align(t, B, _pe_ndim(e.ins[0]), len(shape))
    return [(bind_op("broadcast_to", t, shape=(B,) + shape), True)]


def _cat(e, vals, B):
    nd = _pe_ndim(e.ins[0])
    args = [to_batched(t, b, B, v.aval.shape) for (t, b), v in zip(vals, e.ins)]
    return [(bind_op("cat", *args, axis=_shift(e.params["axis"], nd)), True)]


def _matmul(e, vals, B):
    (x, bx), (y, by) = vals
    xs, ys = e.ins[0].aval.shape, e.ins[1].aval.shape
    squeeze = []
    if bx and len(xs) == 1:         # per-example vector: a 1-row matrix
        x = bind_op("reshape", x, shape=(B, 1) + tuple(xs))
        xs = (1,) + tuple(xs)
        squeeze.append(-2)
    if by and len(ys) == 1:
        y = bind_op("reshape", y, shape=(B,) + tuple(ys) + (1,))
        ys = tuple(ys) + (1,)
        squeeze.append(-1)
    # the batch dim left of every per-example batch dim of either operand
    r = max(len(xs), len(ys))
    if bx:
        x = align(x, B, len(xs), r)
    if by:
        y = align(y, B, len(ys), r)
    out = bind_op("matmul", x, y)
    if squeeze:
        out = bind_op("reshape", out, shape=(B,) + tuple(e.outs[0].aval.shape))
    return [(out, True)]


def _isin(e, vals, B):
    """Elementwise in its first operand: only a batched first operand has a rule."""
    if vals[1][1]:
        return None
    return [(bind(e.op, vals[0][0], vals[1][0], **e.params), True)]


def _random(e, vals, B, randomness):
    if randomness == "error":
        raise RuntimeError(RANDOM_ERROR)
    if randomness == "different" and e.op.name not in ("rand_uniform", "rand_normal"):
        raise NotImplementedError(f"vmap: randomness='different' is not supported for {e.op.name}; use "
                                  "randomness='same' or draw the numbers outside vmap")
    if randomness == "same":
        if any(b for _, b in vals):
            return None     # batched inputs (multinomial's probabilities): the rule or the loop
        return [(o, False) for o in outs(bind(e.op, *[t for t, _ in vals], **e.params))]
    params = dict(e.params, shape=(B,) + tuple(e.params["shape"]))
    return [(o, True) for o in outs(bind(e.op, *[t for t, _ in vals], **params))]


RULES = {}
for _name, _o in OPS.items():
    if _o.family == "elementwise" and _name not in RANDOM:
        RULES[_name] = _elementwise
for _name in ("sum", "amax", "amin", "prod", "prod_others", "norm2", "normp", "argmax", "argmin", "log_softmax",
              "softmax", "softmax_backward", "log_softmax_backward", "cumsum", "cumprod", "flip", "argsort"):
    RULES[_name] = _axes_rule
RULES.update(layer_norm=_keep_trailing, reshape=_reshape, permute=_permute, broadcast_to=_broadcast_to, cat=_cat,
             matmul=_matmul, getitem=index_rules.getitem, index_put=index_rules.index_put, isin=_isin)
for _name in ("delayed_error", "cholesky", "qr", "svd", "eigh", "matrix_exp", "inv", "solve", "solve_triangular", "det",
              "slogdet", "pinv", "linalg_info"):
    RULES[_name] = _keep_trailing
del _name, _o

# primitives batched by a loop over the batch (correct, one op per example): no rule and no decomposition
FALLBACK = frozenset(n for n, o in OPS.items() if n not in RULES and n not in RANDOM and o.decompose is None)


# ---- the interpreter ---------------------------------------------------------------------------------------

def _lit(v: Lit):
    if isinstance(v.value, np.ndarray):
        return Tensor._make(v.value)
    return v.value


def _loop(e, vals, B):
    """The fallback: the op once per example, results stacked along a new first dim."""
    from ..library.elementary import stack
    per = []
    for i in range(B):
        args = [t[i] if b else t for t, b in vals]
        per.append(outs(bind(e.op, *args, **e.params)))
    return [(stack([p[k] for p in per], 0), True) for k in range(len(e.outs))]


def _decomposed(e, vals, B, randomness):
    """A fused primitive without a rule: trace its decomposition at per-example shapes and batch that."""
    from .tracing import trace_function
    ts = [t for (t, b), v in zip(vals, e.ins)]
    tensors = [i for i, t in enumerate(ts) if isinstance(t, Tensor)]
    stand = [Tensor._make(np.zeros(e.ins[i].aval.shape, e.ins[i].aval.dtype.np)) for i in tensors]

    def build(sym):
        args = list(ts)
        for i, s in zip(tensors, sym):
            args[i] = s
        return args, {}
    from ..runtime.dispatch import _bind_by_name
    g, sources, out, ft = trace_function(lambda *a: e.op.decompose(_bind_by_name, *a, **e.params), stand,
                                         [e.ins[i].aval.shape for i in tensors], build)
    from .tracing import result_marker
    g.outputs = [result_marker(ft, o) for o in outs(out)]
    ins = [vals[i] for i in tensors] + [(s, False) for s in sources]
    return run_graph(g, ins, B, randomness, ft.grad_off)


def apply_eqn(e, vals, B, randomness):
    name = e.op.name
    if name in RANDOM:
        r = _random(e, vals, B, randomness)
        if r is not None:
            return r
    if not any(b for _, b in vals):
        return [(o, False) for o in outs(bind(e.op, *[t for t, _ in vals], **e.params))]
    rule = RULES.get(name)
    if rule is not None:
        r = rule(e, vals, B)
        if r is not None:
            return r
    elif e.op.decompose is not None:
        return _decomposed(e, vals, B, randomness)
    return _loop(e, vals, B)


def run_graph(graph, in_vals, B, randomness, grad_off=frozenset()):
    """Evaluate ``graph`` (its ``outputs`` are ``("var", Var)`` / ``("const", tensor)`` markers) on
    ``(tensor, batched)`` inputs; returns one ``(tensor, batched)`` per output marker.  The eqns whose first output
    is in ``grad_off`` were traced under ``no_grad`` (a vjp's backward without create_graph) and run under it, so
    a captured tensor that requires grad does not make their results require grad."""
    env = dict(zip(graph.inputs, in_vals))
    for e in graph.eqns:
        vals = [env[v] if type(v) is not Lit else (_lit(v), False) for v in e.ins]
        if e.outs and e.outs[0] in grad_off:
            with no_grad():
                rs = apply_eqn(e, vals, B, randomness)
        else:
            rs = apply_eqn(e, vals, B, randomness)
        for o, r in zip(e.outs, rs):
            env[o] = r
    res = []
    for kind, x in graph.outputs:
        res.append(env[x] if kind == "var" else (x, False))
    return res


__all__ = ["RULES", "FALLBACK", "RANDOM", "run_graph", "apply_eqn"]
