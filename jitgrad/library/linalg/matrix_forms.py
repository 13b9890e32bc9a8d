"""The BLAS-style sums and matrix helpers torch has beyond ``addmm``: ``addmv``, ``addr``, ``addbmm``,
``baddbmm`` (functions, Tensor methods and in-place ``_`` forms), ``chain_matmul``, ``dist`` and ``renorm`` /
``renorm_``.  Compositions of matmul, bmm, norm and elementwise ops, so they differentiate to any order and
compile; each names its node as torch does.  As torch, ``beta=0`` ignores ``input`` (a NaN there does not
propagate)."""
from __future__ import annotations

import warnings

from ...declarations import published
from ...ir import dtypes as dt

from ..elementary import where
from ...runtime.grad_names import named
from ..torch_kwargs import torch_kwargs


def _blend(input, prod, beta, alpha, name):
    target, have = tuple(prod.shape), tuple(input.shape)
    if len(have) > len(target) or any(a != 1 and a != b for a, b in zip(have[::-1], target[::-1])):
        k = next((i for i, (a, b) in enumerate(zip(have[::-1], target[::-1])) if a != 1 and a != b), None)
        d = len(target) - 1 - k if k is not None else 0
        raise RuntimeError(f"The expanded size of the tensor ({target[d] if target else 1}) must match the existing "
                           f"size ({have[len(have) - len(target) + d] if k is not None else have[0]}) at "
                           f"non-singleton dimension {d}.  Target sizes: {list(target)}.  Tensor sizes: {list(have)}")
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:       # torch ignores input (a NaN there does not propagate) but still gives it a zero gradient
        return named(where(prod.new_zeros((), dtype=dt.bool_), input, prod), name)
    return named((input if beta == 1 else input * beta) + prod, name)


@published("jitgrad", "Tensor")
def addmv(input, mat, vec, *, beta=1, alpha=1, **torch_kw):
    """``beta * input + alpha * (mat @ vec)``, ``mat`` 2-d and ``vec`` 1-d."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(addmv, "addmv", (input, mat, vec), {"beta": beta, "alpha": alpha}, torch_kw)
    if mat.ndim != 2 or vec.ndim != 1 or input.ndim > 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {input.ndim}, {mat.ndim}, {vec.ndim}")
    return _blend(input, mat @ vec, beta, alpha, "AddmvBackward0")


@published("jitgrad", "Tensor")
def addr(input, vec1, vec2, *, beta=1, alpha=1, **torch_kw):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    if torch_kw:
        return torch_kwargs(addr, "addr", (input, vec1, vec2), {"beta": beta, "alpha": alpha}, torch_kw)
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D" if vec1.ndim != 1 else
                           f"addr: Expected 1-D argument vec2, but got {vec2.ndim}-D")
    return _blend(input, vec1.unsqueeze(1) * vec2.unsqueeze(0), beta, alpha, "AddrBackward0")


def _batches(batch1, batch2):
    for i, b in ((1, batch1), (2, batch2)):
        if b.ndim != 3:
            raise RuntimeError(f"batch{i} must be a 3D tensor")
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got {batch1.shape[0]} and "
                           f"{batch2.shape[0]}")
    if batch1.shape[2] != batch2.shape[1]:
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({batch1.shape[1]}x{batch1.shape[2]} and "
                           f"{batch2.shape[1]}x{batch2.shape[2]})")


@published("jitgrad", "Tensor")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, **torch_kw):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]``."""
    if torch_kw:
        return torch_kwargs(addbmm, "addbmm", (input, batch1, batch2), {"beta": beta, "alpha": alpha}, torch_kw)
    _batches(batch1, batch2)
    return _blend(input, (batch1 @ batch2).sum(0), beta, alpha, "AddbmmBackward0")


@published("jitgrad", "Tensor")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, **torch_kw):
    """``beta * input + alpha * (batch1 @ batch2)`` per batch."""
    if torch_kw:
        return torch_kwargs(baddbmm, "baddbmm", (input, batch1, batch2), {"beta": beta, "alpha": alpha}, torch_kw)
    _batches(batch1, batch2)
    return _blend(input, batch1 @ batch2, beta, alpha, "BaddbmmBackward0")


def _inplace(fn):
    def method(self, a, b, *, beta=1, alpha=1):
        return self._apply_inplace(lambda s, x, y: fn(s, x, y, beta=beta, alpha=alpha), a, b)
    method.__name__ = fn.__name__ + "_"
    method.__doc__ = f"In place: writes ``{fn.__name__}(self, ...)`` into ``self``."
    return method


_CHAIN_WARNED = False


@published("jitgrad")
def chain_matmul(*matrices, **torch_kw):
    """The product of the 2-d ``matrices`` in order (deprecated in torch for ``torch.linalg.multi_dot``; warns
    once as torch does)."""
    global _CHAIN_WARNED
    if torch_kw:
        return torch_kwargs(chain_matmul, "chain_matmul", matrices, {}, torch_kw)
    if not _CHAIN_WARNED:
        _CHAIN_WARNED = True
        warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
                      "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than "
                      "multiple parameters.", UserWarning, stacklevel=2)
    if len(matrices) == 0:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for i, m in enumerate(matrices):
        if m.ndim != 2:
            raise RuntimeError(f"chain_matmul(): Tensor {i} must be 2D but got {m.ndim}D")
    if len(matrices) == 1:
        return matrices[0].clone()
    r = matrices[0]
    for m in matrices[1:]:
        r = r @ m
    return r


@published("jitgrad", "Tensor")
def dist(input, other, p=2, **torch_kw):
    """The ``p``-norm of ``input - other`` (broadcast), as a 0-d tensor."""
    if torch_kw:
        return torch_kwargs(dist, "dist", (input, other, p), {}, torch_kw)
    return named((input - other).norm(p), "DistBackward0")


@published("jitgrad", "Tensor")
def renorm(input, p, dim, maxnorm, **torch_kw):
    """``input`` with each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled down to norm
    ``maxnorm`` (torch's factor ``maxnorm / (norm + 1e-7)``); differentiable through the norm, as torch."""
    if torch_kw:
        return torch_kwargs(renorm, "renorm", (input, p, dim, maxnorm), {}, torch_kw)
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if input.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    from ..dim_args import torch_dim
    ax = torch_dim(input, dim)
    others = tuple(i for i in range(input.ndim) if i != ax)
    norm = input.norm(p, dim=others, keepdim=True)
    factor = where(norm > maxnorm, maxnorm / (norm + 1e-7), norm.new_ones(()))
    return named(input * factor, "RenormBackward0")


@published("Tensor", name="renorm_")
def _renorm_(self, p, dim, maxnorm):
    """In place: writes ``renorm(self, p, dim, maxnorm)`` into ``self``."""
    return self._apply_inplace(lambda s: renorm(s, p, dim, maxnorm))


# the in-place forms: x.addmv_(...), ... (torch.addmv_ is a function too)
addmv_ = published("jitgrad", "Tensor")(_inplace(addmv))
published("Tensor")(_inplace(addr))
published("Tensor")(_inplace(addbmm))
published("Tensor")(_inplace(baddbmm))


__all__ = ["addmv", "addr", "addbmm", "baddbmm", "dist", "renorm", "chain_matmul", "addmv_"]
