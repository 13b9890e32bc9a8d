"""Sorting and counting primitives; none of them has a gradient of its own.

``argsort(x; axis, descending, stable)``: int64 indices that sort ``x`` along ``axis`` (NaN counts as the largest
value, as in torch).  The sorted values are ``gather(x, axis, indices)``, whose gradient is the gather's: so sort
and topk are differentiable without a rule here.

``histc(x, [weight]; bins, lo, hi, pad, search)``: counts (or summed weights) of ``x`` in ``bins`` equal bins over
[lo, hi] (the last bin closed); ``lo == hi`` means the data's min and max (widened by ``pad`` when they are equal).
``search`` corrects each bin against the edges as torch.histogram (and NumPy) do; without it the bin is torch.histc's
plain ``int((x - lo) * bins / (hi - lo))``.

In compiled code both run as a Python step (their NumPy impl) of the graph's driver; their output shapes do not
depend on the data, so they trace.  ``bincount`` (output length depends on the data) is eager-only.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import Aval, OpDef, OpError, fmt_shape, register


def _argsort_rule(avals, params):
    (x,) = avals
    if not 0 <= params["axis"] < max(x.ndim, 1):
        raise OpError(f"argsort: dim {params['axis']} out of range for a tensor of shape {list(x.shape)}")
    return [Aval(x.shape, dt.int64)]


def _argsort_impl(x, axis, descending, stable):
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if descending:
        # a stable ascending sort of the reversed input, reversed back: the largest (NaN, as NumPy and torch
        # order it) come first and equal elements keep their input order (a -x key would tie NaN with +inf)
        n = x.shape[axis]
        rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        return (n - 1 - np.flip(rev, axis)).astype(np.int64)
    return np.argsort(x, axis=axis, kind="stable").astype(np.int64)


register(OpDef("argsort", "sort", _argsort_rule, _argsort_impl, None,
               doc="Indices that sort along ``axis`` (stable; NaN sorts as the largest value)."))


def _histc_rule(avals, params):
    x = avals[0]
    if not x.dtype.is_floating_point:
        raise OpError(f"histc: \"histogram_cpu\" not implemented for '{x.dtype.name}' (expected a floating point "
                      f"input)")
    if params["bins"] <= 0:
        raise OpError(f"histc: bins must be > 0, but got {params['bins']}")
    if len(avals) == 2 and avals[1].shape != x.shape:
        raise OpError(f"histogram: if weight tensor is provided it should have the same shape as the input tensor "
                      f"(input {fmt_shape(x.shape)}, weight {fmt_shape(avals[1].shape)})")
    if params["lo"] > params["hi"]:
        raise OpError(f"histc: max must be larger than min (min {params['lo']}, max {params['hi']})")
    return [Aval((params["bins"],), x.dtype)]


def data_range(x, lo, hi, pad, finite_only=False):
    """[lo, hi], or the data's [min, max] when lo == hi (widened by ``pad`` each side when still equal).
    ``finite_only``: the range of the finite elements (histogram); else a non-finite data range is an error, as
    in torch.histc."""
    if lo == hi:
        finite = x[np.isfinite(x)] if finite_only else x
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
        else:
            lo = hi = 0.0
    if lo == hi:
        lo, hi = lo - pad, hi + pad
    return lo, hi


def _histc_impl(x, *weight, bins, lo, hi, pad, search):
    if search:      # torch.histogram: bins located, then corrected against the edges (NumPy's way)
        lo, hi = data_range(x, lo, hi, pad, finite_only=True)
        flat = x.reshape(-1).astype(np.float64)
        w = weight[0].reshape(-1).astype(np.float64) if weight else None
        counts, _ = np.histogram(flat, bins=bins, range=(lo, hi), weights=w)
        return counts.astype(x.dtype)
    # torch.histc: bin = int((x - lo) * bins / (hi - lo)) in the input's dtype, no correction against the edges
    # (so a point on an edge can land one bin lower or higher than NumPy puts it); NaN and points outside
    # [lo, hi] are skipped, x == hi counts in the last bin
    lo, hi = data_range(x, lo, hi, pad)
    t = x.dtype.type
    flat = x.reshape(-1)
    inside = flat[(flat >= t(lo)) & (flat <= t(hi))]
    pos = ((inside - t(lo)) * t(bins) / (t(hi) - t(lo))).astype(np.int64)
    np.minimum(pos, bins - 1, out=pos)
    return np.bincount(pos, minlength=bins).astype(x.dtype)


register(OpDef("histc", "sort", _histc_rule, _histc_impl, None,
               doc="Counts in ``bins`` equal bins over [lo, hi]; values outside and NaN are ignored."))


# ---- lookups: searchsorted, isin (integer / bool results, no gradient) -----------------------------------
def _searchsorted_rule(avals, params):
    seq, vals = avals
    if seq.ndim == 0:
        raise OpError("searchsorted: boundaries tensor should have positive dimension, but got 0 dimension")
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(vals.shape[:-1]):
        raise OpError(f"searchsorted: boundaries tensor should be 1 dimension or the first N-1 dimensions of "
                      f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
                      f"{fmt_shape(seq.shape)} and input value tensor {fmt_shape(vals.shape)}")
    if seq.dtype is dt.bool_ or vals.dtype is dt.bool_:
        raise OpError(f"searchsorted: \"searchsorted_out_cpu\" not implemented for 'Bool' (boundaries "
                      f"{seq.dtype.name}, input {vals.dtype.name})")
    return [Aval(vals.shape, dt.int32 if params["out_int32"] else dt.int64)]


def _searchsorted_impl(seq, vals, right, out_int32):
    # torch's binary search, not NumPy's: a comparison with NaN is false, so NaN (in the values or the boundaries)
    # moves the search right ("left": the first i with not seq[i] < v, written !(seq[i] >= v) -> go right)
    n = seq.shape[-1]
    rows = seq.reshape(-1, n)
    v = vals.reshape(rows.shape[0], -1) if seq.ndim > 1 else vals.reshape(1, -1)
    lo = np.zeros(v.shape, np.int64)
    hi = np.full(v.shape, n, np.int64)
    r = np.arange(rows.shape[0])[:, None]
    with np.errstate(invalid="ignore"):
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) >> 1
            m = rows[r, np.minimum(mid, n - 1)]
            go_right = ~(m > v) if right else ~(m >= v)
            lo = np.where(active & go_right, mid + 1, lo)
            hi = np.where(active & ~go_right, mid, hi)
    return lo.reshape(vals.shape).astype(np.int32 if out_int32 else np.int64)


register(OpDef("searchsorted", "sort", _searchsorted_rule, _searchsorted_impl, None,
               doc="Indices where ``vals`` would be inserted into the last dim of ``seq`` (sorted) to keep it "
                   "sorted; ``right``: after equal elements."))


def _isin_rule(avals, params):
    el, test = avals
    return [Aval(el.shape, dt.bool_)]


def _isin_impl(el, test, invert):
    return np.asarray(np.isin(el, test, invert=invert), dtype=np.bool_)


register(OpDef("isin", "sort", _isin_rule, _isin_impl, None,
               doc="Whether each element of ``el`` occurs in ``test`` (``invert``: does not occur)."))
