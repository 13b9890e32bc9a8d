"""``torch.linalg``'s norms and products: ``vector_norm``, ``matrix_norm``, ``norm``, ``cond``, ``matrix_rank``,
``multi_dot``, ``cross``, ``diagonal``, ``vecdot``, ``matrix_exp``.

All are compositions: the elementwise norms of reductions (``functions.norm``), the spectral ones (ord 2, -2,
'nuc', cond) of the singular values (the ``svd`` primitive), so they trace, compile and differentiate through
the primitives' rules.
"""
from __future__ import annotations

import math

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from .. import elementary as F
from ..dim_args import wrap_dim
from ...runtime.dispatch import bind
from .solve import _publish, _floating, _matrix, _square, _tensor, inv, svdvals
from ...runtime.tensor import Tensor
from ..shaping.triangular import diagonal as _diagonal


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    """The vector ``ord``-norm of ``x`` over ``dim`` (all elements by default): ``sum(|x|^ord)^(1/ord)``, the max
    (``inf``) or min (``-inf``) of ``|x|``, or the count of nonzeros (``0``) (torch.linalg.vector_norm)."""
    _tensor("linalg.vector_norm", x, "x")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not {type(ord).__name__}")
    if not x.is_floating_point():
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{dt.torch_scalar_name(x.dtype)}")
    if isinstance(dim, int):
        dim = (dim,)
    return F.norm(x, ord, None if dim is None else tuple(dim), keepdim, dtype)


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, **torch_kw):
    """The matrix norm of ``A`` over the two dims ``dim`` (torch.linalg.matrix_norm): ``'fro'`` (Frobenius),
    ``'nuc'`` (sum of singular values), ``2`` / ``-2`` (largest / smallest singular value), ``1`` / ``-1``
    (max / min column sum of |A|), ``inf`` / ``-inf`` (max / min row sum of |A|)."""
    _matrix("linalg.matrix_norm", A)
    _floating("linalg.matrix_norm", A)
    if ord not in _MATRIX_ORDS or isinstance(ord, bool):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    dim = tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}")
    d0, d1 = wrap_dim(dim[0], A.ndim), wrap_dim(dim[1], A.ndim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return F.norm(A, 2, (d0, d1), keepdim)
    if ord in (1, -1, math.inf, -math.inf):
        summed, other = (d0, d1) if ord in (1, -1) else (d1, d0)
        sums = A.abs().sum(summed, keepdim=True)
        r = sums.amax(other, keepdim=True) if ord > 0 else sums.amin(other, keepdim=True)
        return r if keepdim else r.squeeze((d0, d1))
    # spectral norms: the singular values of A with dims (d0, d1) moved last
    rest = [i for i in range(A.ndim) if i not in (d0, d1)]
    s = svdvals(A.permute(*rest, d0, d1))
    r = s.sum(-1) if ord == "nuc" else s[..., 0] if ord == 2 else s[..., -1]
    if keepdim:
        for d in sorted((d0, d1)):
            r = r.unsqueeze(d)
    return r


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    """A vector or matrix norm, as torch.linalg.norm chooses: over ``dim`` (an int: vector; a 2-tuple: matrix);
    without ``dim``, the 2-norm of all elements if ``ord`` is None, else the vector norm of 1-D ``A`` or the
    matrix norm of 2-D ``A``."""
    _tensor("linalg.norm", A)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None:
        dim = tuple(dim)
        if len(dim) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    if A.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got {A.ndim}D.")


def cond(A, p=None, **torch_kw):
    """The condition number of ``A`` in the ``p`` norm (torch.linalg.cond): ``s_max / s_min`` for ``p`` None or
    2 (``s_min / s_max`` for -2), else ``norm(A, p) * norm(inv(A), p)`` (square ``A`` only)."""
    _matrix("linalg.cond", A)
    if p in (None, 2, -2):
        _floating("linalg.svd", A)
        s = svdvals(A)
        return s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.cond(ord={p}): A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, **torch_kw):
    """The number of singular values (eigenvalue magnitudes with ``hermitian=True``) above
    ``max(atol, rtol * largest)``, int64 (torch.linalg.matrix_rank; tolerances as ``pinv``)."""
    _tensor("linalg.matrix_rank", A)
    if not A.is_floating_point():
        raise RuntimeError("This function doesn't handle types other than float and double")
    _matrix("linalg.matrix_rank", A)
    from .solve import _tolerances, eigvalsh
    atol, rtol = _tolerances(A, atol, rtol)
    A = A.detach()
    s = eigvalsh(A).abs() if hermitian else svdvals(A)
    if s.shape[-1] == 0:
        return (s.sum(-1) * 0).long()
    smax = s.amax(-1, keepdim=True)
    thr = (smax * rtol).clamp(min=atol)
    return (s > thr).long().sum(-1)


def multi_dot(tensors, **torch_kw):
    """The product of the matrices ``tensors`` (the first may be a row vector, the last a column vector), as
    ``torch.linalg.multi_dot``."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    n = len(tensors)
    for i, t in enumerate(tensors):
        _tensor("multi_dot", t, f"tensors[{i}]")
        lo = 1 if i in (0, n - 1) else 2
        if not lo <= t.ndim <= 2:
            which = "first" if i == 0 else "last" if i == n - 1 else None
            if which:
                raise RuntimeError(f"multi_dot(): the {which} tensor must be 1D or 2D but got {t.ndim}D")
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    for i in range(n - 1):
        a, b = tensors[i], tensors[i + 1]
        if a.shape[-1] != b.shape[0]:
            sa = "[" + ", ".join(map(str, a.shape)) + "]"
            sb = "[" + ", ".join(map(str, b.shape)) + "]"
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {sa} and {sb} cannot be multiplied")
    r = tensors[0]
    for t in tensors[1:]:
        r = r @ t
    return r


def cross(input, other, *, dim=-1, **torch_kw):
    """The cross product of 3-vectors along ``dim`` (default the last), inputs broadcast (torch.linalg.cross)."""
    from .products import cross as _cross
    return _cross(input, other, dim=dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1, **torch_kw):
    """The diagonal of the matrices of ``A`` (over its last two dims by default), a view (torch.linalg.diagonal)."""
    return _diagonal(A, offset, dim1, dim2)


def vecdot(x, y, *, dim=-1, **torch_kw):
    """The dot product of ``x`` and ``y`` along ``dim``, batches broadcast (torch.linalg.vecdot)."""
    _tensor("linalg.vecdot", x, "x")
    _tensor("linalg.vecdot", y, "y")
    if x.dtype is not y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{dt.torch_scalar_name(x.dtype)} and y of type {dt.torch_scalar_name(y.dtype)} instead")
    return (x * y).sum(dim)


def matrix_exp(A, **torch_kw):
    """The matrix exponential of square ``A`` (torch.linalg.matrix_exp), batched: a degree-13 Pade approximant
    after scaling by a power of two chosen from each matrix's norm, squared back (``ir/ops/matrix_functions.py``).

    >>> import jitgrad as jg
    >>> jg.linalg.matrix_exp(jg.zeros(2, 2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    _square("linalg.matrix_exp", A)
    return bind(OPS["matrix_exp"], A)


_publish(["vector_norm", "matrix_norm", "norm", "cond", "matrix_rank", "multi_dot", "cross", "diagonal", "vecdot",
          "matrix_exp"], globals(), "linalg.")

published("jitgrad", "Tensor")(matrix_exp)      # torch.matrix_exp and Tensor.matrix_exp (its torch-keyword form)


__all__ = ["vector_norm", "matrix_norm", "norm", "cond", "matrix_rank", "multi_dot", "cross", "diagonal", "vecdot",
           "matrix_exp"]
