"""Random-number primitives.  Each takes the generator state as two 0-dim int64 inputs, ``seed`` and
``offset`` (see ``ir/philox.py``): inside a compiled function they are graph inputs read at every call, so the
kernels are keyed by structure and a new call gives new numbers.

``rand_uniform`` and ``rand_normal`` are elementwise: their scalar body computes one element from (seed, offset,
the element's row-major index), so they fuse into loops like any other op; ``codegen/kernels/philox.py`` holds the
Numba side.  ``multinomial`` and ``randperm`` are whole-array ops (their NumPy impls run as Python steps in
compiled code).  None is differentiable: torch gives random draws no gradient either.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import philox
from .opdef import Aval, OpDef, OpError, fmt_shape, register


def _check_state(name, avals):
    for what, a in zip(("seed", "offset"), avals):
        if a.shape != () or a.dtype is not dt.int64:
            raise OpError(f"{name}: the generator {what} must be a 0-dim int64 tensor, got "
                          f"{a.dtype.name}{fmt_shape(a.shape)}")


def _elementwise_rule(name):
    def shape_dtype(avals, params):
        _check_state(name, avals)
        d = params["dtype"]
        if d not in (dt.float32, dt.float64):
            raise OpError(f"{name}: expected a floating-point dtype (float32 or float64), got {d.name}")
        return [Aval(tuple(params["shape"]), d)]
    return shape_dtype


def _scalar(fn):
    """The scalar body: ``index`` is the element's row-major index in the iteration space, which the loop
    generator passes (the group's iteration space is the op's output shape)."""
    def body(m, seed, offset, index="i", shape=None, dtype=None):
        return getattr(m, fn)(seed, offset, index)
    return body


register(OpDef("rand_uniform", "elementwise", _elementwise_rule("rand_uniform"),
               lambda seed, offset, shape, dtype: philox.uniform(seed, offset, shape, dtype.np), None,
               scalar=_scalar("rng_uniform"), doc="uniform numbers in [0, 1) from Philox4x32-10"))
register(OpDef("rand_normal", "elementwise", _elementwise_rule("rand_normal"),
               lambda seed, offset, shape, dtype: philox.normal(seed, offset, shape, dtype.np), None,
               scalar=_scalar("rng_normal"), doc="standard normal numbers (Box-Muller) from Philox4x32-10"))


# ---- whole-array draws -----------------------------------------------------------------------------------------
def _multinomial_rule(avals, params):
    p, seed, offset = avals
    _check_state("multinomial", (seed, offset))
    if not p.dtype.is_floating_point:
        raise OpError(f"multinomial only supports floating-point dtypes for input, got: {p.dtype.name}")
    if p.ndim not in (1, 2):
        raise OpError("prob_dist must be 1 or 2 dim")
    n = params["num_samples"]
    if n <= 0:
        raise OpError("cannot sample n_sample <= 0 samples")
    if not params["replacement"] and n > p.shape[-1]:
        raise OpError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if p.shape[-1] > 1 << 24:
        raise OpError("number of categories cannot exceed 2^24")
    return [Aval(p.shape[:-1] + (n,), dt.int64)]


def multinomial_impl(p, seed, offset, num_samples, replacement):
    """With replacement: inverse CDF, each sample ``searchsorted(cumsum(p), u * sum(p))``.  Without: the
    exponential race torch uses, ``argsort(-p / E)`` with ``E = -log(1 - u)`` exponential (so a category with
    probability 0 comes after every positive one)."""
    p = np.asarray(p, dtype=np.float64)
    rows = p.reshape(-1, p.shape[-1])
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    cdf = np.cumsum(rows, axis=1)
    total = cdf[:, -1]
    if (total <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    r, k = rows.shape
    if replacement:
        u = philox.uniform(seed, offset, (r, num_samples), np.float64)
        out = np.empty((r, num_samples), np.int64)
        for j in range(r):
            # side="right": u * total lands past the categories whose cumulative mass it reaches, so a
            # zero-probability category (a flat step of the CDF) is never drawn
            idx = np.searchsorted(cdf[j], u[j] * total[j], side="right")
            out[j] = np.minimum(idx, k - 1)
    else:
        u = philox.uniform(seed, offset, (r, k), np.float64)
        keys = rows / -np.log1p(-u)
        out = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples].astype(np.int64)
    return out.reshape(p.shape[:-1] + (num_samples,))


register(OpDef("multinomial", "index", _multinomial_rule, multinomial_impl, None, nondiff_inputs=(0, 1, 2),
               doc="indices drawn from the rows of a probability tensor"))


def _randperm_rule(avals, params):
    _check_state("randperm", avals)
    n = params["n"]
    if n < 0:
        raise OpError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    return [Aval((n,), params["dtype"])]


def randperm_impl(seed, offset, n, dtype):
    """A permutation of ``0..n-1``: the order of ``n`` random 64-bit keys (ties, at 2**-64, keep index order)."""
    return np.argsort(philox.bits64(seed, offset, n), kind="stable").astype(dtype.np)


register(OpDef("randperm", "index", _randperm_rule, randperm_impl, None, doc="a random permutation of 0..n-1"))
