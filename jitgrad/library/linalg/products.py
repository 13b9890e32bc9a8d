"""Products and distances torch has as functions: ``tensordot``, ``kron``, ``inner``, ``mv``, ``ger``, ``vdot``,
``cross``, ``cdist``, ``block_diag`` and ``cartesian_prod``, with torch's argument checks and error texts.

Each is a composition of primitives (permute + reshape + one matmul, broadcasting products, narrow + cat), so it
runs eagerly, traces into a compiled graph and differentiates to any order.

>>> import jitgrad as jg
>>> jg.tensordot(jg.ones(2, 3), jg.ones(3, 4), dims=1)
tensor([[3., 3., 3., 3.],
        [3., 3., 3., 3.]])
>>> jg.kron(jg.tensor([1, 2]), jg.tensor([1, 10]))
tensor([ 1, 10,  2, 20])
"""
from __future__ import annotations

import math
import warnings

from ...declarations import published
from ...ir import dtypes as dt
from .. import elementary as F
from ..dim_args import torch_dim
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _shape_text(shape):
    return "[" + ", ".join(map(str, shape)) + "]"


def _broadcast_shape(a, b):
    """The broadcast of two shapes, with torch's RuntimeError text when they do not broadcast."""
    nd = max(len(a), len(b))
    a, b = (1,) * (nd - len(a)) + tuple(a), (1,) * (nd - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton "
                               f"dimension {i}")
        out.append(y if x == 1 else x)
    return tuple(out)


# ---- tensordot, inner, mv, vdot ----------------------------------------------------------------------------------

def _contraction_dims(a, b, dims):
    """torch.tensordot's ``dims`` (an int, a pair of ints or of lists, or a tensor) as two lists of dims."""
    if isinstance(dims, Tensor):
        dims = int(dims.item()) if dims.numel() == 1 else dims.tolist()
    if isinstance(dims, bool) or not isinstance(dims, (int, tuple, list)):
        raise RuntimeError("tensordot expects dims to be int or tuple[list[int], list[int]] or list[list[int]] "
                           f"containing two lists, but got dims={dims}")
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        return list(range(-dims, 0)), list(range(dims))
    dims_a, dims_b = dims
    dims_a = [dims_a] if isinstance(dims_a, int) else list(dims_a)
    dims_b = [dims_b] if isinstance(dims_b, int) else list(dims_b)
    return dims_a, dims_b


@published("jitgrad")
def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` of ``a`` with ``dims`` of ``b``: an int ``n`` pairs the last ``n`` dims of ``a`` with the
    first ``n`` of ``b``; a pair of lists names them.  The free dims of ``a`` come first, then those of ``b``.

    >>> import jitgrad as jg
    >>> jg.tensordot(jg.arange(6.).reshape(2, 3), jg.ones(3, 2), dims=([1], [0]))
    tensor([[ 3.,  3.],
            [12., 12.]])
    """
    if out is not None:
        return torch_kwargs(tensordot, "tensordot", (a, b, dims), {}, {"out": out})
    dims_a, dims_b = _contraction_dims(a, b, dims)
    if len(dims_a) != len(dims_b):
        raise RuntimeError("both dimension lists should have same length")
    if a.dtype is not b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    axes_a = [torch_dim(a, d) for d in dims_a]
    axes_b = [torch_dim(b, d) for d in dims_b]
    for da, db, xa, xb in zip(dims_a, dims_b, axes_a, axes_b):
        sa, sb = a.shape[xa], b.shape[xb]
        if sa != sb:
            if sa != 1 and sb != 1:
                raise RuntimeError(f"contracted dimensions need to match, but first has size {sa} in dim {da} and "
                                   f"second has size {sb} in dim {db}")
            # torch: a size-1 dim broadcasts against the other, which is summed first
            if sa == 1:
                b = b.sum(xb, keepdim=True)
            else:
                a = a.sum(xa, keepdim=True)
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    k = math.prod(a.shape[i] for i in axes_a)
    lhs = a.permute(free_a + axes_a).reshape(math.prod(a.shape[i] for i in free_a), k)
    rhs = b.permute(axes_b + free_b).reshape(k, math.prod(b.shape[i] for i in free_b))
    return (lhs @ rhs).reshape(tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


@published("jitgrad", "Tensor")
def inner(input, other, **torch_kw):
    """The sum over the last dims of ``input`` and ``other`` of their products (a 0-d operand multiplies).

    >>> import jitgrad as jg
    >>> jg.inner(jg.tensor([1., 2.]), jg.tensor([[1., 0.], [0., 1.]]))
    tensor([1., 2.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(inner, "inner", (input, other), {}, torch_kw)
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{_shape_text(input.shape)} and {_shape_text(other.shape)}")
    return tensordot(input, other, ([-1], [-1]))


@published("jitgrad", "Tensor")
def mv(input, vec, **torch_kw):
    """Matrix @ vector: ``input`` (n, m) times ``vec`` (m,) is (n,).

    >>> import jitgrad as jg
    >>> jg.mv(jg.ones(2, 3), jg.tensor([1., 2., 3.]))
    tensor([6., 6.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mv, "mv", (input, vec), {}, torch_kw)
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.ndim}, {vec.ndim}")
    if input.dtype is not vec.dtype:
        v, m = dt.torch_scalar_name(vec.dtype), dt.torch_scalar_name(input.dtype)
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {v}, {m}, and {v}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({input.shape[0]}), mat ({input.shape[0]}x{input.shape[1]}), "
                           f"vec ({vec.shape[0]})")
    return named(input @ vec, "MvBackward0")


@published("jitgrad", "Tensor")
def vdot(input, other, **torch_kw):
    """The dot product of two 1-d tensors of one dtype (for real tensors, ``dot``).

    >>> import jitgrad as jg
    >>> jg.vdot(jg.tensor([1., 2.]), jg.tensor([3., 4.]))
    tensor(11.)
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(vdot, "vdot", (input, other), {}, torch_kw)
    return named(F.dot(input, other), "VdotBackward0")       # (real tensors: no conjugate) torch's dot checks


@published("jitgrad", "Tensor")
def ger(input, vec2, **torch_kw):
    """The outer product of two 1-d tensors (torch's older name of ``outer``).

    >>> import jitgrad as jg
    >>> jg.ger(jg.tensor([1, 2]), jg.tensor([1, 3]))
    tensor([[1, 3],
            [2, 6]])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(ger, "ger", (input, vec2), {}, torch_kw)
    return F.outer(input, vec2)


# ---- kron, block_diag, cartesian_prod ----------------------------------------------------------------------------

@published("jitgrad", "Tensor")
def kron(input, other, **torch_kw):
    """The Kronecker product: block ``(i, j, ...)`` of the result is ``input[i, j, ...] * other`` (the shorter
    shape is padded with leading 1s).

    >>> import jitgrad as jg
    >>> jg.kron(jg.eye(2), jg.tensor([[1., 2.]]))
    tensor([[1., 2., 0., 0.],
            [0., 0., 1., 2.]])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(kron, "kron", (input, other), {}, torch_kw)
    nd = max(input.ndim, other.ndim)
    sa = (1,) * (nd - input.ndim) + tuple(input.shape)
    sb = (1,) * (nd - other.ndim) + tuple(other.shape)
    # interleave: input as (a0, 1, a1, 1, ...), other as (1, b0, 1, b1, ...); their product is block-ordered
    a = input.reshape(tuple(x for s in sa for x in (s, 1)))
    b = other.reshape(tuple(x for s in sb for x in (1, s)))
    return (a * b).reshape(tuple(x * y for x, y in zip(sa, sb)))


@published("jitgrad")
def block_diag(*tensors):
    """The tensors (0-d as 1x1, 1-d as one row, 2-d as they are) on the diagonal of a zero matrix, in the
    promoted dtype.

    >>> import jitgrad as jg
    >>> jg.block_diag(jg.tensor([[1, 2]]), jg.tensor(3))
    tensor([[1, 2, 0],
            [0, 0, 3]])
    """
    from ..creation.factories import zeros
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                               f"{t.ndim} dimensions")
    if not tensors:
        return zeros(1, 0)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = dt._promote2(dtype, t.dtype)
    blocks = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        r, c = b.shape
        parts = [zeros(r, left, dtype=dtype), b.to(dtype), zeros(r, width - left - c, dtype=dtype)]
        rows.append(F.cat(parts, 1))
        left += c
    return F.cat(rows, 0)


@published("jitgrad")
def cartesian_prod(*tensors):
    """Every combination of one element from each 1-d tensor, as rows (the last tensor varies fastest); one
    tensor is returned as it is.

    >>> import jitgrad as jg
    >>> jg.cartesian_prod(jg.tensor([1, 2]), jg.tensor([3, 4]))
    tensor([[1, 3],
            [1, 4],
            [2, 3],
            [2, 4]])
    """
    from ..shaping.rearranging import meshgrid
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {_shape_text(t.shape)}")
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return F.stack([g.reshape(-1) for g in grids], 1)


# ---- cross, cdist ------------------------------------------------------------------------------------------------

@published("jitgrad", "Tensor")
def cross(input, other, dim=None, **torch_kw):
    """The cross product of 3-vectors along ``dim`` (``input`` and ``other`` broadcast).  Without ``dim`` torch
    takes the first dim of size 3 and warns that this is deprecated; so does jitgrad.

    >>> import jitgrad as jg
    >>> jg.cross(jg.tensor([1., 0., 0.]), jg.tensor([0., 1., 0.]), dim=0)
    tensor([0., 0., 1.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cross, "cross", (input, other, dim), {}, torch_kw)
    if input.dtype is not other.dtype:
        raise RuntimeError(f"expected scalar type {dt.torch_scalar_name(input.dtype)} but found "
                           f"{dt.torch_scalar_name(other.dtype)}")
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        shape = _broadcast_shape(input.shape, other.shape)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    if input.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    ax = torch_dim(input, dim)
    if input.shape[ax] != 3 or other.shape[ax] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[ax]} and "
                           f"{other.shape[ax]}")
    shape = _broadcast_shape(input.shape, other.shape)
    a, b = input.expand(shape), other.expand(shape)
    a0, a1, a2 = (a.narrow(ax, i, 1) for i in range(3))
    b0, b1, b2 = (b.narrow(ax, i, 1) for i in range(3))
    r = F.cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], ax)
    return named(r, "LinalgCrossBackward0")


def _masked_pow(x, p):
    """``x ** p`` for ``x >= 0`` whose derivative is 0 where ``x`` is 0 (torch's cdist backward), not inf/NaN."""
    zero = x == 0
    return F.where(zero, 0.0, F.where(zero, 1.0, x) ** p)


@published("jitgrad")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each row of ``x1`` (..., P, M) and each row of ``x2`` (..., R, M), as
    (..., P, R); batch dims broadcast.  ``compute_mode`` is accepted and ignored (jitgrad always takes the
    differences, the exact way).  At a zero distance the gradient is 0, as in torch.

    >>> import jitgrad as jg
    >>> jg.cdist(jg.tensor([[0., 0.]]), jg.tensor([[3., 4.], [1., 0.]]))
    tensor([[5., 1.]])
    """
    if x1.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.ndim}D")
    for t, what in ((x1, "X1"), (x2, "X2")):
        if not t.is_floating_point():
            raise RuntimeError(f"cdist only supports floating-point dtypes, {what} got: "
                               f"{dt.torch_scalar_name(t.dtype)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if x1.dtype is not x2.dtype:
        raise RuntimeError(f"expected scalar type {dt.torch_scalar_name(x1.dtype)} but found "
                           f"{dt.torch_scalar_name(x2.dtype)}")
    p = float(p)
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diff = F.abs(x1.unsqueeze(-2) - x2.unsqueeze(-3))
    if p == 0:       # the count of differing coordinates; torch's gradient is 0
        r = (diff != 0).to(x1.dtype).sum(-1) + (diff * 0.0).sum(-1)
    elif p == 1:
        r = diff.sum(-1)
    elif p == math.inf:
        r = diff.amax(-1)
    else:
        r = _masked_pow(_masked_pow(diff, p).sum(-1), 1.0 / p)
    return named(r, "CdistBackward0")


__all__ = ["kron", "inner", "mv", "ger", "vdot", "cross", "tensordot", "block_diag", "cartesian_prod", "cdist"]
