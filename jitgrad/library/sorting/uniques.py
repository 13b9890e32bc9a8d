"""Set-like and frequency functions: ``argwhere``, ``unique``, ``unique_consecutive`` (functions and Tensor
methods) and ``mode``.

``argwhere``, ``unique`` and ``unique_consecutive`` return as many elements as the data holds.  Inside
``@jitgrad.compile``, ``argwhere`` and ``unique`` (over all elements) give a data-dependent size bounded by the
input's, as ``nonzero`` and ``masked_select`` do (``ir/unbacked.py``); ``unique(dim=...)`` and
``unique_consecutive`` read their input's values, so a traced input is refused with the traced-value error that
names the op and the user's line (compute them outside the compiled function, or pass ``fullgraph=False``).
Their results carry no gradient.  ``mode`` has a fixed output shape: it is a composition (an all-pairs equality
count along ``dim``), so it traces, compiles and differentiates (the gradient goes to the returned index, as
torch's ``ModeBackward0``).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...declarations import published
from ..dim_args import torch_dim
from ..elementary import where
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

_mode_result = namedtuple("mode", ["values", "indices"])


def _host(input, what):
    """``input``'s NumPy value; the traced-value error when ``input`` is traced (its result's shape would depend
    on the data)."""
    if type(input._data) is not np.ndarray:
        from ...runtime.traced import traced_read
        traced_read(input, what)
        return input.detach().cpu().numpy()      # a device tensor: read back
    return input._data


def _out(a, like, dtype=None):
    t = Tensor._make(np.array(a, dtype=dtype, order="C"))
    return like._same_device(t)


@published("jitgrad", "Tensor")
def argwhere(input, **torch_kw):
    """The indices of ``input``'s non-zero elements, one row each (shape ``(count, input.ndim)``), in row-major
    order; ``nonzero(input)``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(argwhere, "argwhere", (input,), {}, torch_kw)
    if _bounded(input):
        return input.nonzero()
    return _out(np.argwhere(_host(input, "argwhere()")), input, np.int64)


def _results(values, inverse, counts, return_inverse, return_counts, like):
    out = [_out(values, like)]
    if return_inverse:
        out.append(_out(inverse, like, np.int64))
    if return_counts:
        out.append(_out(counts, like, np.int64))
    return out[0] if len(out) == 1 else tuple(out)


@published("jitgrad", "Tensor")
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None, **torch_kw):
    """The distinct elements of ``input`` in ascending order (with ``dim``: the distinct slices along ``dim``, in
    lexicographic order); ``return_inverse``: where each element (slice) of ``input`` went; ``return_counts``: how
    often each occurs.  NaNs are all distinct, as in torch.  (``sorted=False`` sorts too, as torch's CPU kernel.)"""
    if torch_kw:
        return torch_kwargs(unique, "unique", (input, sorted, return_inverse, return_counts, dim), {}, torch_kw)
    if (dim is None or input.ndim == 0) and _bounded(input):
        return _traced_unique(input, return_inverse, return_counts)
    a = _host(input, "unique()")
    if dim is None or a.ndim == 0:
        v, inv, cnt = np.unique(a.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False)
        return _results(v, inv.reshape(a.shape), cnt, return_inverse, return_counts, input)
    ax = torch_dim(input, dim)
    v, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, axis=ax)
    return _results(v, inv.reshape(-1), cnt, return_inverse, return_counts, input)


def _bounded(input) -> bool:
    """Whether ``input`` is traced by @jitgrad.compile, where a data-dependent size is bounded (ir/unbacked.py)."""
    from ...runtime.symbolic_values import bounded_nonzero_here
    from ...runtime.traced import is_traced
    return is_traced(input) and bounded_nonzero_here()


def _traced_unique(input, return_inverse, return_counts):
    """unique over all elements in a compiled function: sorted, the first of each run kept (``s[new]``: a
    data-dependent size, at most ``input.numel()``); the inverse puts each run's rank back in the input's order,
    the counts add ones per rank (NaNs all distinct, as torch)."""
    from ...runtime.symbolic_values import arange
    flat = input.reshape(-1)
    s, perm = flat.sort()
    new = s.new_ones(s.shape, dtype=bool)
    if s.shape[0] != 0:
        new[1:] = s[1:] != s[:-1]
    out = [s[new]]
    rank = new.long().cumsum(0) - 1
    if return_inverse:
        inv = rank.new_zeros(rank.shape)
        inv[perm] = rank
        out.append(inv.reshape(input.shape))
    if return_counts:
        counts = rank.new_zeros(rank.shape).index_add(0, rank, rank.new_ones(rank.shape))
        out.append(counts[arange(out[0].shape[0])])
    return out[0] if len(out) == 1 else tuple(out)


@published("jitgrad", "Tensor")
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None, **torch_kw):
    """``input`` with each run of equal consecutive elements (with ``dim``: slices along ``dim``) kept once, as a
    1-d tensor (with ``dim``: along ``dim``); ``return_inverse``: the run each element belongs to;
    ``return_counts``: each run's length."""
    if torch_kw:
        return torch_kwargs(unique_consecutive, "unique_consecutive", (input, return_inverse, return_counts, dim),
                            {}, torch_kw)
    a = _host(input, "unique_consecutive()")
    if dim is None:
        flat = a.reshape(-1)
        new = np.ones(flat.shape[0], bool)
        new[1:] = flat[1:] != flat[:-1]
        inv = np.cumsum(new) - 1
        starts = np.flatnonzero(new)
        cnt = np.diff(np.append(starts, flat.shape[0]))
        return _results(flat[new], inv.reshape(a.shape), cnt, return_inverse, return_counts, input)
    ax = torch_dim(input, dim)
    m = np.moveaxis(a, ax, 0).reshape(a.shape[ax] if a.ndim else 1, -1)
    new = np.ones(m.shape[0], bool)
    new[1:] = (m[1:] != m[:-1]).any(axis=1)
    inv = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    cnt = np.diff(np.append(starts, m.shape[0]))
    return _results(np.compress(new, a, axis=ax), inv, cnt, return_inverse, return_counts, input)


@published("jitgrad", "Tensor")
def mode(input, dim=-1, keepdim=False, **torch_kw):
    """``(values, indices)``: the most frequent value of each slice along ``dim`` (ties: the smallest such value)
    and the index of its last occurrence, as torch.  Differentiable in ``values`` (the gradient goes to that
    index)."""
    if torch_kw:
        return torch_kwargs(mode, "mode", (input, dim, keepdim), {}, torch_kw)
    ax = torch_dim(input, dim)
    if input.ndim == 0:
        r = input.clone() if input.requires_grad else input.detach().clone()
        return _mode_result(named(r, "ModeBackward0"), _out(np.zeros((), np.int64), input))
    if input.shape[ax] == 0:
        raise IndexError(f"mode(): Expected reduction dim {ax} to have non-zero size.")
    x = input.detach()
    xa = x.unsqueeze(ax + 1)            # (.., n, 1, ..) against (.., 1, n, ..): counts along ax
    xb = x.unsqueeze(ax)
    count = (xa == xb).long().sum(ax + 1)
    best = count.amax(ax, keepdim=True)
    value = where(count == best, x, x.amax(ax, keepdim=True)).amin(ax, keepdim=True)
    n = input.shape[ax]
    pos = x._same_device(Tensor._make(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (input.ndim - ax - 1))))
    idx = where(x == value, pos, -1).amax(ax, keepdim=True)
    values = input.gather(ax, idx)
    if not keepdim:
        values, idx = values.squeeze(ax), idx.squeeze(ax)
    return _mode_result(named(values, "ModeBackward0"), idx)


__all__ = ["argwhere", "unique", "unique_consecutive", "mode"]
