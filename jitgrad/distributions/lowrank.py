"""LowRankMultivariateNormal: covariance ``cov_factor @ cov_factor.T + diag(cov_diag)``, scored through the
small capacitance matrix ``I + W.T D^-1 W`` (Woodbury identity, matrix determinant lemma)."""
from __future__ import annotations

import math

import numpy as np

import jitgrad as _jg
from . import constraints
from .distribution import Distribution
from .multivariate import batch_mahalanobis, batch_mv
from .parameters import as_size, lazy_property, standard_normal

__all__ = ["LowRankMultivariateNormal"]


def _capacitance_tril(W, D):
    """Cholesky factor of ``I + W.T @ inv(D) @ W`` (batched)."""
    m = W.size(-1)
    K = _jg.matmul(W.mT / D.unsqueeze(-2), W) + _jg.eye(m, dtype=W.dtype)
    return _jg.linalg.cholesky(K)


def _lowrank_logdet(W, D, capacitance_tril):
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _lowrank_mahalanobis(W, D, x, capacitance_tril):
    Wt_Dinv_x = batch_mv(W.mT / D.unsqueeze(-2), x)
    return (x.pow(2) / D).sum(-1) - batch_mahalanobis(capacitance_tril, Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    """A multivariate normal with mean ``loc`` and covariance ``cov_factor @ cov_factor.T + diag(cov_diag)``."""
    arg_constraints = {"loc": constraints.real_vector, "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = tuple(loc.shape[-1:])
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != event_shape:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m")
        if tuple(cov_diag.shape[-1:]) != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {as_size(event_shape)}")
        try:
            shape = np.broadcast_shapes(tuple(loc.shape) + (1,), tuple(cov_factor.shape), tuple(cov_diag.shape) + (1,))
        except ValueError as e:
            raise ValueError(f"Incompatible batch shapes: loc {as_size(loc.shape)}, cov_factor "
                             f"{as_size(cov_factor.shape)}, cov_diag {as_size(cov_diag.shape)}") from e
        self.cov_factor = cov_factor.expand(shape)
        self.loc = loc.expand(shape[:-1])
        self.cov_diag = cov_diag.expand(shape[:-1])
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _capacitance_tril(cov_factor, cov_diag)
        super().__init__(shape[:-2], event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        loc_shape = tuple(as_size(batch_shape)) + tuple(self.event_shape)
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self, t, matrix=True):
        shape = tuple(self._batch_shape) + tuple(self._event_shape) * (2 if matrix else 1)
        return t.expand(shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        return self._full(self._unbroadcasted_cov_factor.pow(2).sum(-1) + self._unbroadcasted_cov_diag, False)

    @lazy_property
    def scale_tril(self):
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / d_sqrt
        K = _jg.matmul(Dinvsqrt_W, Dinvsqrt_W.mT) + _jg.eye(n, dtype=Dinvsqrt_W.dtype)
        return self._full(d_sqrt * _jg.linalg.cholesky(K))

    @lazy_property
    def covariance_matrix(self):
        W = self._unbroadcasted_cov_factor
        return self._full(_jg.matmul(W, W.mT) + _jg.diag_embed(self._unbroadcasted_cov_diag))

    @lazy_property
    def precision_matrix(self):
        Wt_Dinv = self._unbroadcasted_cov_factor.mT / self._unbroadcasted_cov_diag.unsqueeze(-2)
        A = _jg.linalg.solve_triangular(self._capacitance_tril, Wt_Dinv, upper=False)
        return self._full(_jg.diag_embed(self._unbroadcasted_cov_diag.reciprocal()) - A.mT @ A)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        eps_W = standard_normal(shape[:-1] + tuple(self.cov_factor.shape[-1:]), self.loc)
        eps_D = standard_normal(shape, self.loc)
        return (self.loc + batch_mv(self._unbroadcasted_cov_factor, eps_W)
                + self._unbroadcasted_cov_diag.sqrt() * eps_D)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, diff,
                                 self._capacitance_tril)
        log_det = _lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                  self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + log_det + M)

    def entropy(self):
        log_det = _lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                  self._capacitance_tril)
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + log_det)
        return H if len(self._batch_shape) == 0 else H.expand(tuple(self._batch_shape))
