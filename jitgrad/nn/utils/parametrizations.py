"""``torch.nn.utils.parametrizations``: ``orthogonal``, ``weight_norm`` and ``spectral_norm`` written as
parametrizations (see :mod:`.parametrize`), with torch's maps, buffers and state-dict names."""
from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ...library.creation import factories
from ...runtime import grad_mode
from ...library.linalg.norms import matrix_exp
from ...library.linalg.solve import qr, solve
from ...library.linalg.products import mv, vdot
from ...library.shaping.views import cat
from ...runtime.tensor import Tensor
from ..modules.module import Module
from ..functional.normalization import normalize
from . import parametrize
from .norm_hooks import _weight_norm, norm_except_dim


def _is_orthogonal(Q):
    n, k = Q.shape[-2], Q.shape[-1]
    eye = factories.eye(k, dtype=Q.dtype, device=Q.device)
    eps = 10.0 * n * float(np.finfo(Q.detach().cpu().numpy().dtype).eps)
    return bool(((Q.mT @ Q) - eye).abs().le(eps + 1e-5 * eye.abs()).all())


def _make_orthogonal(A):
    """The Q of A's QR with the signs of R's diagonal folded in (torch's geqrf + householder_product)."""
    q, r = qr(A)
    return q * r.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _householder_product(A, tau):
    """The first k columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i = column i of A below the diagonal
    with a unit diagonal (torch.linalg.householder_product, real case), as a composition of tensor ops."""
    n, k = A.shape[-2], A.shape[-1]
    eye = factories.eye(n, dtype=A.dtype, device=A.device)
    below = factories.ones(n, k, dtype=A.dtype, device=A.device).tril(-1)
    V = A * below + factories.eye(n, k, dtype=A.dtype, device=A.device)
    Q = None
    for i in range(k):
        v = V[..., :, i:i + 1]
        H = eye - tau[..., i, None, None] * (v @ v.mT)
        Q = H if Q is None else Q @ H
    return Q[..., :, :k]


def _geqrf(A):
    """LAPACK's geqrf (the Householder form of QR) of a real matrix or batch, no gradient."""
    import scipy.linalg
    a = A.detach().cpu().numpy()
    flat = a.reshape((-1,) + a.shape[-2:])
    outs, taus = [], []
    for m in flat:
        (qr_, tau), _ = scipy.linalg.qr(m, mode="raw")
        outs.append(qr_)
        taus.append(tau)
    out = np.stack(outs).reshape(a.shape)
    tau = np.stack(taus).reshape(a.shape[:-2] + (min(a.shape[-2:]),))
    return (factories.tensor(out, dtype=A.dtype, device=A.device),
            factories.tensor(tau, dtype=A.dtype, device=A.device))


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True) -> None:
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:
                X = cat([X, factories.zeros(n, n - k, dtype=X.dtype, device=X.device).expand(*X.shape[:-2], -1, -1)],
                        dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = matrix_exp(A)
            else:
                eye = factories.eye(n, dtype=A.dtype, device=A.device)
                Q = solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = _householder_product(A, tau)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if "base" in self._buffers:
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q):
        with grad_mode.no_grad():
            if Q.shape != self.shape:
                raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                                 f"Got a tensor of shape {Q.shape}.")
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if "base" not in self._buffers:
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                              "parametrizations when use_trivialization=False.")
                A, tau = _geqrf(Q)
                d = A.diagonal(dim1=-2, dim2=-1).sign()
                d = d * (1 - 2 * (tau == 0.0).to(d.dtype))
                A = A - A.diagonal(dim1=-2, dim2=-1).diag_embed() + d.diag_embed()
                return A.mT if transpose else A
            if n == k:
                Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
            else:
                N = factories.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype, device=Q.device)
                Q = _make_orthogonal(cat([Q, N], dim=-1))
            self.base = Q
            neg_id = factories.zeros_like(Q_init)
            neg_id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
            return neg_id


def orthogonal(module, name: str = "weight", orthogonal_map=None, *, use_trivialization: bool = True):
    """Constrain ``module.<name>`` (a matrix or batch of them) to be orthogonal (semi-orthogonal when not
    square): ``orthogonal_map`` "matrix_exp" (default for square), "cayley" or "householder" (default
    otherwise) maps an unconstrained ``original`` to an orthogonal matrix; with ``use_trivialization`` the map
    is composed with a stored orthogonal ``base`` (the weight at registration)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


class _WeightNorm(Module):
    def __init__(self, dim=0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name: str = "weight", dim=0):
    """``module.<name> = g * v / ||v||`` as a parametrization: ``parametrizations.<name>.original0`` is g (the
    norms over every dim but ``dim``), ``original1`` is v."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but "
                             f"got n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = self._reshape_weight_to_matrix(weight)
            h, w = mat.shape
            with grad_mode.no_grad():
                u = factories.randn(h, dtype=weight.dtype, device=weight.device)
                v = factories.randn(w, dtype=weight.dtype, device=weight.device)
                self.register_buffer("_u", normalize(u, dim=0, eps=self.eps))
                self.register_buffer("_v", normalize(v, dim=0, eps=self.eps))
            self._power_method(mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, mat, n_power_iterations: int) -> None:
        # in place (torch's out=): a compiled training step writes the buffers back
        with grad_mode.no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(normalize(mv(mat, self._v), dim=0, eps=self.eps))
                self._v.copy_(normalize(mv(mat.mT, self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = vdot(u, mv(mat, v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """Divide ``module.<name>`` by its spectral norm as a parametrization: power iteration on the buffers
    ``parametrizations.<name>[0]._u`` / ``._v`` (15 steps at registration, ``n_power_iterations`` per
    training-mode access, none in eval mode)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if type(module).__name__ in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d") else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


__all__ = ["orthogonal", "spectral_norm", "weight_norm"]
