"""Order statistics torch has: ``aminmax``, ``kthvalue``, ``quantile``/``nanquantile`` and ``cummax``/``cummin``
(functions and Tensor methods), with torch's argument checks and error texts.

Values are gathered from ``input`` at the selected indices, so the gradient flows to the selected element (torch's
rule); ``quantile`` interpolates two gathered neighbours, so both get their share.  ``kthvalue`` and ``quantile``
sort with the ``argsort`` primitive and compile; ``cummax``/``cummin`` compute their indices with NumPy (eager only).

>>> import jitgrad as jg
>>> jg.quantile(jg.tensor([1., 2., 3., 4.]), 0.5)
tensor(2.5000)
>>> jg.tensor([1., 3., 2.]).cummax(0).indices
tensor([0, 1, 1])
"""
from __future__ import annotations

import collections

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ..dim_args import torch_dim
from ..elementary import amax, amin, gather, where
from ...runtime.grad_names import named
from .ordering import argsort
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

aminmax_result = collections.namedtuple("aminmax", ["min", "max"])
kthvalue_result = collections.namedtuple("kthvalue", ["values", "indices"])
cummax_result = collections.namedtuple("cummax", ["values", "indices"])
cummin_result = collections.namedtuple("cummin", ["values", "indices"])


@published("jitgrad", "Tensor")
def aminmax(input, *, dim=None, keepdim=False, **torch_kw):
    """``(min, max)`` of ``input``, over everything or along ``dim`` (NaN propagates, as in amin/amax).

    >>> import jitgrad as jg
    >>> jg.aminmax(jg.tensor([[1, 5], [3, 2]]), dim=1)
    aminmax(min=tensor([1, 2]), max=tensor([5, 3]))
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(aminmax, "aminmax", (input,), {"dim": dim, "keepdim": keepdim}, torch_kw)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        if keepdim:
            return aminmax_result(amin(input, None, True).reshape((1,) * input.ndim),
                                  amax(input, None, True).reshape((1,) * input.ndim))
        return aminmax_result(amin(input), amax(input))
    ax = torch_dim(input, dim)
    if input.ndim and input.shape[ax] == 0:
        raise IndexError(f"aminmax: Expected reduction dim {ax} to have non-zero size.")
    return aminmax_result(amin(input, ax, keepdim), amax(input, ax, keepdim))


@published("jitgrad", "Tensor")
def kthvalue(input, k, dim=-1, keepdim=False, **torch_kw):
    """The ``k``-th smallest element (1-based) along ``dim`` and its index; NaN sorts as the largest value.

    >>> import jitgrad as jg
    >>> jg.kthvalue(jg.tensor([4., 1., 3.]), 2)
    kthvalue(values=tensor(3.), indices=tensor(2))
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(kthvalue, "kthvalue", (input, k, dim, keepdim), {}, torch_kw)
    x = input.reshape(1) if input.ndim == 0 else input
    ax = torch_dim(input, dim) if input.ndim else 0
    k = int(k)
    if not 1 <= k <= x.shape[ax]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {ax}")
    pick = argsort(x, ax).narrow(ax, k - 1, 1)
    values = gather(x, ax, pick)
    if input.ndim == 0:
        values, pick = values.reshape(()), pick.reshape(())
    elif not keepdim:
        values, pick = values.squeeze(ax), pick.squeeze(ax)
    return kthvalue_result(named(values, "KthvalueBackward0"), pick)


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name, input, q, dim, keepdim, interpolation, skip_nan):
    from ..creation.factories import tensor
    name = "quantile"       # torch's texts say quantile() for nanquantile too
    if input.numel() == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if isinstance(q, Tensor) and q.ndim > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    if not input.is_floating_point():
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if isinstance(q, Tensor) and q.dtype is not input.dtype:
        raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest, but "
                           f"got {interpolation}")
    qs = q if isinstance(q, Tensor) else tensor(float(q), dtype=input.dtype)
    if not isinstance(q, Tensor) and not 0 <= float(q) <= 1:
        raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {float(q)}")
    if isinstance(q, Tensor) and type(q._data) is np.ndarray and q.numel() and not (
            (q._data >= 0) & (q._data <= 1)).all():
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    # rows to reduce, last: (..., n); the output keeps the other dims (and the reduced ones as 1 with keepdim)
    if dim is None:
        x, out_shape = input.reshape(1, -1), (1,) * input.ndim if keepdim else ()
    else:
        ax = torch_dim(input, dim)
        x = input.permute([i for i in range(input.ndim) if i != ax] + [ax]) if input.ndim else input.reshape(1)
        kept = list(input.shape)
        if input.ndim:
            kept[ax] = 1
        out_shape = tuple(kept) if keepdim else tuple(s for i, s in enumerate(input.shape) if i != ax)
    n = x.shape[-1]
    srt = gather(x, -1, argsort(x, -1))            # NaN sorts last
    nan = x.isnan()
    if skip_nan:
        last = (n - nan.to(dt.int64).sum(-1, keepdim=True) - 1).clamp(min=0).to(input.dtype)
    else:   # a row holding NaN: every rank points at its last element, a NaN (torch's rule)
        last = where(nan.any(-1, keepdim=True), float(n - 1), -1.0).to(input.dtype)
    qv = qs.reshape(-1)                                               # (Q,)
    if skip_nan:
        ranks = qv * last
    else:
        ranks = where(last >= 0, float(n - 1), qv * (n - 1))
    ranks = ranks.clamp(min=0.0)   # a row of only NaNs (nanquantile) has rank -q; its first element is NaN
    lo = ranks.to(dt.int64)        # ranks are >= 0: truncation is the floor
    frac = ranks - lo.to(input.dtype)
    if interpolation == "nearest":  # round half to even, as torch's round
        up = (frac > 0.5) | ((frac == 0.5) & (lo % 2 == 1))
        lo = where(up, lo + 1, lo)
    hi = where(frac > 0, lo + 1, lo).clamp(max=n - 1)
    below, above = gather(srt, -1, lo), gather(srt, -1, hi)
    if interpolation in ("lower", "nearest"):
        r = below
    elif interpolation == "higher":
        r = above
    else:
        w = frac if interpolation == "linear" else where(hi > lo, 0.5, 0.0).to(input.dtype)
        r = below + w * (above - below)
    # r: (*batch, Q) -> (Q, *out_shape), or out_shape for a scalar q
    r = r.permute([r.ndim - 1] + list(range(r.ndim - 1))).reshape((qv.shape[0],) + out_shape)
    return r.reshape(out_shape) if not (isinstance(q, Tensor) and q.ndim == 1) else r


@published("jitgrad", "Tensor")
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", **torch_kw):
    """The ``q``-th quantiles (``q`` a number or a 1-d tensor in [0, 1]) of all elements or along ``dim``;
    between two order statistics ``interpolation`` picks linear (both get gradient), lower, higher, midpoint or
    nearest.  A row holding NaN gives NaN; a 1-d ``q`` adds a leading dim.

    >>> import jitgrad as jg
    >>> jg.quantile(jg.tensor([[1., 2.], [3., 5.]]), jg.tensor([0.5, 1.0]), dim=1)
    tensor([[1.5000, 4.0000],
            [2.0000, 5.0000]])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(quantile, "quantile", (input, q, dim, keepdim), {"interpolation": interpolation},
                            torch_kw)
    return named(_quantile("quantile", input, q, dim, keepdim, interpolation, False), "QuantileBackward0")


@published("jitgrad", "Tensor")
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", **torch_kw):
    """``quantile`` ignoring NaNs (NaN only where a row is all NaN).

    >>> import jitgrad as jg
    >>> jg.nanquantile(jg.tensor([1., float("nan"), 3.]), 0.5)
    tensor(2.)
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nanquantile, "nanquantile", (input, q, dim, keepdim), {"interpolation": interpolation},
                            torch_kw)
    return named(_quantile("nanquantile", input, q, dim, keepdim, interpolation, True), "NanquantileBackward0")


def _running_index(x: np.ndarray, ax: int, better) -> np.ndarray:
    """The index of the running best along ``ax`` (the latest on ties, as torch; a NaN, once seen, stays)."""
    x = np.moveaxis(x, ax, -1)
    idx = np.zeros(x.shape, np.int64)
    if x.shape[-1]:
        best, at = x[..., 0].copy(), np.zeros(x.shape[:-1], np.int64)
        for j in range(x.shape[-1]):
            v = x[..., j]
            take = ~np.isnan(best) & (better(v, best) | (v == best) | np.isnan(v)) if x.dtype.kind == "f" else \
                better(v, best) | (v == best)
            best, at = np.where(take, v, best), np.where(take, j, at)
            idx[..., j] = at
    return np.moveaxis(idx, -1, ax)


def _cumulative(name, input, dim, better, result):
    from ...runtime.traced import is_traced, traced_read
    if is_traced(input):
        traced_read(input, f"{name}()")       # its indices are computed with NumPy: eager only
    ax = torch_dim(input, dim)
    if input.ndim == 0:
        return result(named(input.clone(), f"{name.capitalize()}Backward0"), Tensor._make(np.zeros((), np.int64)))
    idx = Tensor._make(_running_index(input._host(), ax, better))
    return result(named(gather(input, ax, idx), f"{name.capitalize()}Backward0"), idx)


@published("jitgrad", "Tensor")
def cummax(input, dim, **torch_kw):
    """``(values, indices)`` of the running maximum along ``dim`` (the latest index on ties; NaN propagates).

    >>> import jitgrad as jg
    >>> jg.cummax(jg.tensor([1, 3, 2, 3]), 0)
    cummax(values=tensor([1, 3, 3, 3]), indices=tensor([0, 1, 1, 3]))
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cummax, "cummax", (input, dim), {}, torch_kw)
    return _cumulative("cummax", input, dim, np.greater, cummax_result)


@published("jitgrad", "Tensor")
def cummin(input, dim, **torch_kw):
    """``(values, indices)`` of the running minimum along ``dim`` (the latest index on ties; NaN propagates).

    >>> import jitgrad as jg
    >>> jg.cummin(jg.tensor([2, 1, 3, 1]), 0)
    cummin(values=tensor([2, 1, 1, 1]), indices=tensor([0, 1, 1, 3]))
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cummin, "cummin", (input, dim), {}, torch_kw)
    return _cumulative("cummin", input, dim, np.less, cummin_result)


__all__ = ["aminmax", "kthvalue", "quantile", "nanquantile", "cummax", "cummin"]
