"""``torch.lobpcg``: the k largest (or smallest) eigenpairs of a symmetric matrix, differentiable.

torch runs the LOBPCG iteration; jitgrad computes the eigendecomposition exactly with the ``eigh`` primitive
(``ir/ops/linalg.py``: LAPACK through NumPy, and a vjp written with jitgrad ops, so gradients of any order) and
keeps the k pairs asked for.  The result is the one LOBPCG converges to, without its tolerance or iteration
count; ``X``, ``n``, ``niter``, ``tol`` and the other iteration controls are accepted and only checked.  As torch's
autograd for lobpcg, the derivative is taken for symmetric perturbations of ``A`` (it sees ``(A + A^T) / 2``), so
``A.grad`` is symmetric.  The generalized problem (``B``) and a preconditioner (``iK``) are not supported yet.
"""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.tensor import Tensor
from ..torch_kwargs import UnsupportedError


@published("jitgrad")
def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None, method=None,
           tracker=None, ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """``(E, U)``: the ``k`` largest eigenvalues of symmetric ``A`` (descending; the smallest, ascending, with
    ``largest=False``) and their eigenvectors as columns, over any leading batch dims (torch.lobpcg)."""
    if not isinstance(A, Tensor):
        raise TypeError(f"lobpcg(): argument 'A' must be Tensor, not {type(A).__name__}")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be a square matrix or a batch of square matrices, got shape {list(A.shape)}")
    if not A.is_floating_point():
        raise RuntimeError(f"lobpcg: expected a floating point tensor as input, got {A.dtype.name}")
    if B is not None or iK is not None:
        raise UnsupportedError("jitgrad does not support lobpcg with B (the generalized problem) or iK (a "
                               "preconditioner) yet")
    if method not in (None, "ortho", "basic"):
        raise ValueError(f"lobpcg: method must be 'ortho' or 'basic', got {method!r}")
    m = A.shape[-1]
    if k is None:
        k = 1 if X is None else X.shape[-1]
    if X is not None:
        if tuple(X.shape[:-1]) != tuple(A.shape[:-1]):
            raise ValueError(f"X must have the rows of A: A {list(A.shape)}, X {list(X.shape)}")
        if X.shape[-1] < k:
            raise ValueError(f"X must have at least k = {k} columns, got {X.shape[-1]}")
    cols = X.shape[-1] if X is not None else (n if n is not None else k)
    if m < 3 * cols:
        raise ValueError(f"LPBPCG algorithm is not applicable when the number of A rows (={m}) is smaller than 3 x "
                         f"the number of requested eigenpairs (={cols})")
    sym = (A + A.mT) * 0.5
    packed = bind(OPS["eigh"], sym)
    values, vectors = packed[..., 0, :], packed[..., 1:, :]
    order = np.arange(m - 1, m - 1 - k, -1) if largest is None or largest else np.arange(k)
    pick = A._same_device(Tensor._make(order.astype(np.int64)))
    return values[..., pick], vectors[..., pick]


__all__ = ["lobpcg"]
