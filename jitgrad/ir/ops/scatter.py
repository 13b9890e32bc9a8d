"""The scattering reduction: ``scatter_reduce(x, src, *key; reduce, include_self)``.

``out = x.copy(); out[key[0][j], key[1][j], ...] (reduce)= src[j]`` for every position ``j`` of ``src``, with
``reduce`` one of "prod", "amax", "amin" (torch.scatter_reduce / index_reduce; "sum" is an accumulating
``index_put`` and "mean" a sum divided by counts, so they stay compositions).  ``key`` holds one integer tensor per
dim of ``x``, broadcasting to ``src``'s shape (the runtime builds it from torch's ``(dim, index)``); with
``include_self=False`` the targets' own values are left out of the reduction.

The gradient is torch's (``scatter_reduce_backward``): amax/amin split the gradient evenly among every element
equal to the result (including, as torch does, a ``self`` value that ``include_self=False`` left out); prod
divides the result by each factor, and computes the products of the others without division where a factor is 0.
Where two zeros of ``src`` meet at one target torch refuses double backward, and so does eager mode here (through
``delayed_error``: an identity whose gradient raises); a traced backward, which cannot look at the data, keeps a
gradient written so that its own derivative is exact (see ``_vjp``).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import BY_TRANSPOSE, LINEAR, Aval, OpDef, OpError, broadcast_shapes, fmt_shape, register

REDUCES = ("prod", "amax", "amin")
_UFUNC = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}     # maximum/minimum propagate NaN, as torch


def _rule(avals, params):
    x, src, *key = avals
    reduce = params["reduce"]
    if reduce not in REDUCES:
        raise OpError(f"scatter_reduce: reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    if src.dtype is not x.dtype:
        raise OpError(f"scatter_reduce: Expected self.dtype to be equal to src.dtype ({x.dtype.name} vs "
                      f"{src.dtype.name})")
    if len(key) != x.ndim:
        raise OpError(f"scatter_reduce: expected one index tensor per dimension of self {fmt_shape(x.shape)}, got "
                      f"{len(key)}")
    for a in key:
        if a.dtype not in (dt.int64, dt.int32):
            raise OpError(f"scatter_reduce: Expected dtype int64 for index, got {a.dtype.name}")
    kshape = broadcast_shapes("scatter_reduce", [a.shape for a in key]) if key else ()
    if kshape != src.shape:
        raise OpError(f"scatter_reduce: the index positions {fmt_shape(kshape)} do not match src "
                      f"{fmt_shape(src.shape)}")
    return [Aval(x.shape, x.dtype)]


def _identity(reduce, dtype):
    """The value a reduction starts from when the target's own value is left out (include_self=False)."""
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _impl(x, src, *key, reduce, include_self, api="scatter_reduce"):
    out = np.array(x, copy=True)
    for d, k in enumerate(key):     # checked here, so a compiled graph's host step raises as eager mode does
        if k.size and (k.min() < 0 or k.max() >= x.shape[d]):
            bad = int(k.max() if k.max() >= x.shape[d] else k.min())
            raise IndexError(f"scatter_reduce: index {bad} is out of bounds for dimension {d} with size {x.shape[d]}")
    ix = tuple(np.asarray(k, dtype=np.intp) for k in key)
    if not include_self:
        out[ix] = _identity(reduce, out.dtype)
    _UFUNC[reduce].at(out, ix, np.asarray(src))
    return out


def _vjp(c, g):
    x, src, key, result = c.inputs[0], c.inputs[1], c.inputs[2:], c.outputs[0]
    reduce, include_self, api = c.params["reduce"], c.params["include_self"], c.params.get("api", "scatter_reduce")
    spec = tuple(("tensor", k) for k in range(len(key)))

    def gather(t):          # t at every src position's target: torch's t.gather(dim, index)
        return c.bind("getitem", t, *key, spec=spec)

    def scatter_add(base, v):
        return c.bind("index_put", base, v, *key, spec=spec, accumulate=True)

    grad_self = grad_src = None
    if reduce == "prod":
        if c.needs_grad[0]:
            masked_self = x.where(x != 0, 1.0)
            grad_self = g * c.bind("scatter_reduce", masked_self, src, *key, reduce=reduce,
                                   include_self=include_self, api=api) / masked_self
        if c.needs_grad[1]:
            grad_src = _prod_src_grad(c, g, x, src, key, result, gather, scatter_add)
    else:
        value = gather(result)
        self_is = (x == result).to(c.dtypes[0])
        src_is = (src == value).to(c.dtypes[0])
        share = g / scatter_add(self_is, src_is)        # the gradient split evenly among the tied elements
        grad_self = self_is * share if c.needs_grad[0] else None
        grad_src = src_is * gather(share) if c.needs_grad[1] else None
    if grad_self is not None and not include_self:      # the targets' own values took no part: no gradient
        grad_self = c.bind("index_put", grad_self, 0.0, *key, spec=spec, accumulate=False)
    return (grad_self, grad_src) + (None,) * len(key)


def _prod_src_grad(c, g, x, src, key, result, gather, scatter_add):
    """src's gradient for prod: the product of the other factors at its target, times g."""
    reduce, include_self, api = c.params["reduce"], c.params["include_self"], c.params.get("api", "scatter_reduce")
    src_zero = src == 0
    zeros = gather(scatter_add(g.new_zeros(c.shapes[0]), src_zero.to(c.dtypes[0])))     # zeros per target
    single_zero = src_zero & (zeros == 1)
    pair_zero = src_zero & (zeros == 2)
    # a lone zero's gradient is the product of the others, computed with the zero replaced by 1 (division
    # by it would give nan); elsewhere result / src
    others = c.bind("scatter_reduce", x, src.where(~single_zero, 1.0), *key, reduce=reduce,
                    include_self=include_self, api=api)
    by_division = gather(g * result) / src.where(~src_zero, 1.0)
    # two zeros at a target: each one's gradient is 0, but its derivative in the other zero is the product
    # of the rest.  Written as (product of the rest) * (the other zero), the other zero being "the target's
    # zeros summed, minus mine" (0, with derivative 1 in the other), it is exact to every order.  Three or
    # more zeros: result / src is exact to second order; a third derivative across three zeros reads 0.
    # Eager mode raises torch's error on double backward instead wherever two or more zeros meet.
    rest = c.bind("scatter_reduce", x, src.where(~pair_zero, 1.0), *key, reduce=reduce,
                  include_self=include_self, api=api)
    paired = src.where(pair_zero, 0.0)
    other_zero = gather(scatter_add(g.new_zeros(c.shapes[0]), paired)) - paired
    grad_src = gather(g * others).where(single_zero, (gather(g * rest) * other_zero).where(pair_zero, by_division))
    if type(src._data) is np.ndarray and bool((zeros._data > 1).any()):
        # eager mode keeps torch's refusal (a compiled backward keeps the exact derivative above)
        what = "source" if api == "index_reduce" else "src"
        grad_src = c.bind("delayed_error", grad_src, msg=f"{api}(): Double backward is unsupported for {what} "
                          f"when >1 zeros in {what} are scattered to the same position in self")
    return grad_src


register(OpDef("scatter_reduce", "index", _rule, _impl, _vjp, saves_in=tuple(range(64)), saves_out=(0,), jvp=BY_TRANSPOSE,
               grad_name="ScatterReduceBackward0",
               doc="out[key] (reduce)= src for reduce in prod, amax, amin (torch.scatter_reduce)"))


def _delayed_error_vjp(c, g):
    if c.params.get("not_implemented"):
        raise NotImplementedError(c.params["msg"])
    raise RuntimeError(c.params["msg"])


register(OpDef("delayed_error", "shape", lambda avals, params: [Aval(avals[0].shape, avals[0].dtype)],
               lambda x, msg, not_implemented=False: np.array(x, copy=True), _delayed_error_vjp,
               grad_name="DelayedErrorBackward0", jvp=LINEAR,
               doc="identity whose gradient raises RuntimeError(msg) (NotImplementedError with not_implemented): "
                   "a gradient that must not be differentiated"))
