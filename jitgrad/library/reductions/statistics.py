"""Small statistics and sequence helpers: ``cov`` and ``corrcoef`` (functions and Tensor methods), ``trapezoid``
/ ``trapz`` / ``cumulative_trapezoid``, ``vander`` and ``combinations``, each a composition of existing ops (so
torch's gradients follow from the ops', and they compile), with torch's checks and messages."""
from __future__ import annotations

import itertools
import warnings

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.dtypes import torch_scalar_name
from ..dim_args import torch_dim
from ...runtime.grad_names import named
from ..shaping.views import cat
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _weights(name, w, n, integral):
    if w is None:
        return None
    if w.ndim > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
                           f"{w.ndim} dimensions")
    if w.numel() != n:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the input "
                           f"but got {w.numel()} != {n}")
    if integral and w.is_floating_point():
        raise RuntimeError(f"cov(): expected {name} to have integral dtype but got {name} with "
                           f"{torch_scalar_name(w.dtype)} dtype")
    if not integral and not w.is_floating_point():
        raise RuntimeError(f"cov(): expected {name} to have floating point dtype but got {name} with "
                           f"{torch_scalar_name(w.dtype)} dtype")
    if type(w._data) is np.ndarray and w.numel() and (w._data < 0).any():
        raise RuntimeError(f"cov(): {name} cannot be negative")
    return w


@published("jitgrad", "Tensor")
def cov(input, *, correction=1, fweights=None, aweights=None, **torch_kw):
    """The covariance matrix of the variables in ``input``'s rows (observations in its columns; one variable
    gives a 0-d result: torch squeezes), with ``correction`` (1: Bessel's), integer frequency weights ``fweights``
    and float observation weights ``aweights``, as torch.cov."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cov, "cov", (input,), {"correction": correction, "fweights": fweights,
                                                   "aweights": aweights}, torch_kw)
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.ndim} dimensions")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    if not x.is_floating_point():
        x = x.to(dt.DEFAULT_FLOAT)
    n = x.shape[1]
    fw = _weights("fweights", fweights, n, True)
    aw = _weights("aweights", aweights, n, False)
    w = fw if aw is None else aw if fw is None else fw * aw
    if w is None:
        avg = x.mean(1)
        w_sum = float(n)
        norm = w_sum - correction
    else:
        w = w.to(x.dtype)
        w_sum = w.sum()
        avg = (x * w).sum(1) / w_sum
        norm = w_sum - correction if aw is None else w_sum - correction * (w * aw).sum() / w_sum
    if isinstance(norm, float) or type(getattr(norm, "_data", None)) is np.ndarray:
        if float(norm) <= 0:
            warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number "
                          "of observations.", UserWarning, stacklevel=2)
            norm = 0.0 if isinstance(norm, float) else norm * 0
    xm = x - avg.unsqueeze(1)
    c = ((xm if w is None else xm * w) @ xm.t()) / norm
    return named(c.squeeze(), "SqueezeBackward0")      # torch squeezes: one variable gives a 0-d result


@published("jitgrad", "Tensor")
def corrcoef(input, **torch_kw):
    """Pearson's correlation coefficients of the variables in ``input``'s rows: ``cov`` scaled by the standard
    deviations, clipped to [-1, 1] (a 1-d input gives ``cov / cov``, 1 or nan)."""
    if torch_kw:
        return torch_kwargs(corrcoef, "corrcoef", (input,), {}, torch_kw)
    if input.ndim > 2:
        raise RuntimeError(f"corrcoef(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.ndim} dimensions")
    c = cov(input)
    if c.ndim == 0:
        return c / c
    sd = c.diagonal().sqrt()
    c = c / sd.unsqueeze(1)
    c = c / sd.unsqueeze(0)
    return c.clamp(-1, 1)


# ---- integration -------------------------------------------------------------------------------------------
def _spacing(name, y, x, dx, ax):
    """The spacing between samples along ``ax``: a number, or a tensor broadcasting against ``y``'s ``n - 1``
    differences."""
    if x is None:
        return 1.0 if dx is None else dx
    if not isinstance(x, Tensor):        # trapezoid(y, 0.5): a number is dx
        return x
    n = y.shape[ax]
    if x.ndim == 1:
        if x.shape[0] != n:
            raise RuntimeError(f"{name}: There must be one `x` value for each sample point")
        d = x[1:] - x[:-1]
        return d.reshape((n - 1,) + (1,) * (y.ndim - ax - 1)) if n else d
    xa = torch_dim(x, ax - y.ndim) if x.ndim >= y.ndim - ax else None
    if xa is None or x.shape[xa] != n:
        raise RuntimeError(f"{name}: There must be one `x` value for each sample point")
    return x.narrow(xa, 1, n - 1) - x.narrow(xa, 0, n - 1)


def _pairs(y, ax):
    n = y.shape[ax]
    return y.narrow(ax, 1, n - 1) + y.narrow(ax, 0, n - 1)


@published("jitgrad")
def trapezoid(y, x=None, *, dx=None, dim=-1, **torch_kw):
    """The trapezoid rule along ``dim``: sample points ``x`` (a tensor) or a constant spacing ``dx`` (default 1)."""
    if torch_kw:
        return torch_kwargs(trapezoid, "trapezoid", (y, x), {"dx": dx, "dim": dim}, torch_kw)
    if x is not None and dx is not None:
        raise TypeError("trapezoid() received an invalid combination of arguments: x and dx")
    ax = torch_dim(y, dim)
    if y.shape[ax] == 0:
        return y.sum(ax) * 0
    h = _spacing("trapezoid", y, x, dx, ax)
    if isinstance(h, Tensor):
        return (_pairs(y, ax) * h).sum(ax) / 2
    return (y.sum(ax) - (y.narrow(ax, 0, 1) + y.narrow(ax, y.shape[ax] - 1, 1)).squeeze(ax) * 0.5) * h


@published("jitgrad")
def trapz(y, x=None, *, dx=None, dim=-1, **torch_kw):
    """``trapezoid`` (its older name)."""
    if torch_kw:
        return torch_kwargs(trapz, "trapz", (y, x), {"dx": dx, "dim": dim}, torch_kw)
    return trapezoid(y, x, dx=dx, dim=dim)


@published("jitgrad")
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1, **torch_kw):
    """The running trapezoid rule along ``dim`` (one element fewer than ``y`` there)."""
    if torch_kw:
        return torch_kwargs(cumulative_trapezoid, "cumulative_trapezoid", (y, x), {"dx": dx, "dim": dim},
                            torch_kw)
    if x is not None and dx is not None:
        raise TypeError("cumulative_trapezoid() received an invalid combination of arguments: x and dx")
    ax = torch_dim(y, dim)
    if y.shape[ax] == 0:
        return y * 1
    h = _spacing("cumulative_trapezoid", y, x, dx, ax)
    if isinstance(h, Tensor):
        return (_pairs(y, ax) * h).cumsum(ax) / 2
    return (_pairs(y, ax) * (h / 2)).cumsum(ax)


# ---- vander, combinations -------------------------------------------------------------------------------------
@published("jitgrad")
def vander(x, N=None, increasing=False, **torch_kw):
    """The Vandermonde matrix of the 1-d ``x``: columns ``x**(N-1), ..., x**0`` (``increasing``: the other way),
    ``N`` defaulting to ``len(x)``; made by a running product, as torch (integer and bool inputs give int64)."""
    if torch_kw:
        return torch_kwargs(vander, "vander", (x, N, increasing), {}, torch_kw)
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    if not x.is_floating_point():
        x = x.long()
    if n == 0:
        return x.new_zeros((x.shape[0], 0))
    ones = x.new_ones((x.shape[0], 1))
    r = ones if n == 1 else cat([ones, x.unsqueeze(1).expand((x.shape[0], n - 1))], 1).cumprod(1)
    return r if increasing else r.flip(1)


@published("jitgrad")
def combinations(input, r=2, with_replacement=False, **torch_kw):
    """The length-``r`` combinations of the 1-d ``input``'s elements (``itertools.combinations``, or
    ``combinations_with_replacement``), one per row; differentiable (a gather)."""
    if torch_kw:
        return torch_kwargs(combinations, "combinations", (input, r, with_replacement), {}, torch_kw)
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return input.new_zeros((0,))
    gen = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    idx = np.array(list(gen(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    return named(input[input._same_device(Tensor._make(idx))], "StackBackward0")


__all__ = ["cov", "corrcoef", "trapezoid", "trapz", "cumulative_trapezoid", "vander", "combinations"]
