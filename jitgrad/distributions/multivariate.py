"""MultivariateNormal, parameterised by exactly one of ``covariance_matrix``, ``precision_matrix`` or
``scale_tril``; everything is computed from the lower Cholesky factor with ``jitgrad.linalg.cholesky`` and
``jitgrad.linalg.solve_triangular`` (differentiable primitives)."""
from __future__ import annotations

import math

import numpy as np

import jitgrad as _jg
from . import constraints
from .distribution import Distribution
from .parameters import as_size, lazy_property, standard_normal

__all__ = ["MultivariateNormal"]


def batch_mv(bmat, bvec):
    """Batched matrix-vector product with broadcasting batch shapes."""
    return _jg.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def batch_mahalanobis(bL, bx):
    """``x^T (L L^T)^-1 x`` for lower-triangular ``bL``, batch shapes broadcast."""
    n = bx.size(-1)
    shape = np.broadcast_shapes(tuple(bL.shape[:-2]), tuple(bx.shape[:-1]))
    L = bL.expand(shape + (n, n))
    x = bx.expand(shape + (n,))
    return _jg.linalg.solve_triangular(L, x.unsqueeze(-1), upper=False).squeeze(-1).pow(2).sum(-1)


def precision_to_scale_tril(P):
    Lf = _jg.linalg.cholesky(_jg.flip(P, (-2, -1)))
    L_inv = _jg.transpose(_jg.flip(Lf, (-2, -1)), -2, -1)
    Id = _jg.eye(P.shape[-1], dtype=P.dtype)
    return _jg.linalg.solve_triangular(L_inv, Id, upper=False)


class MultivariateNormal(Distribution):
    """The multivariate normal distribution with mean ``loc`` and covariance given by one of
    ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (lower Cholesky factor of the covariance)."""
    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if scale_tril is not None:
            if scale_tril.dim() < 2:
                raise ValueError("scale_tril matrix must be at least two-dimensional, with optional leading "
                                 "batch dimensions")
            matrix = scale_tril
        elif covariance_matrix is not None:
            if covariance_matrix.dim() < 2:
                raise ValueError("covariance_matrix must be at least two-dimensional, with optional leading "
                                 "batch dimensions")
            matrix = covariance_matrix
        else:
            if precision_matrix.dim() < 2:
                raise ValueError("precision_matrix must be at least two-dimensional, with optional leading "
                                 "batch dimensions")
            matrix = precision_matrix
        batch_shape = np.broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1]))
        m = tuple(matrix.shape[-2:])
        if scale_tril is not None:
            self.scale_tril = scale_tril.expand(batch_shape + m)
        elif covariance_matrix is not None:
            self.covariance_matrix = covariance_matrix.expand(batch_shape + m)
        else:
            self.precision_matrix = precision_matrix.expand(batch_shape + m)
        self.loc = loc.expand(batch_shape + tuple(loc.shape[-1:]))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = _jg.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = precision_to_scale_tril(precision_matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(as_size(batch_shape))
        loc_shape = batch_shape + tuple(self.event_shape)
        cov_shape = batch_shape + tuple(self.event_shape) * 2
        new.loc = self.loc.expand(loc_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for n in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if n in self.__dict__:
                setattr(new, n, getattr(self, n).expand(cov_shape))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return _jg.matmul(L, L.mT).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        Linv = _jg.linalg.solve_triangular(L, _jg.eye(L.shape[-1], dtype=L.dtype), upper=False)
        return _jg.matmul(Linv.mT, Linv).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = standard_normal(shape, self.loc)
        return self.loc + batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - half_log_det

    def entropy(self):
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det
        if len(self._batch_shape) == 0:
            return H
        return H.expand(tuple(self._batch_shape))
