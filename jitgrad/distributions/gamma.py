"""The gamma family: Gamma, Chi2, Beta, Dirichlet and StudentT.

Gamma draws are Marsaglia and Tsang's rejection method written with jitgrad ops and a fixed number of rounds
(``_ROUNDS`` candidates per element, the first accepted one kept; acceptance is above 95% per round, so a
fallback is taken with probability below 1e-13), which keeps it one straight-line program that also traces into
``@jitgrad.compile``.  Shapes below 1 are boosted (``Gamma(a + 1) * U ** (1 / a)``).

``rsample`` is reparameterised as torch's: the gradient of a draw ``x`` w.r.t. the concentration is the implicit
one, ``-(dF/da) / f`` (torch's ``_standard_gamma_grad`` approximation: a Taylor series for small ``x``, Rice's
saddle point for large ``a``, a rational fit otherwise), attached to the draw as a first-order term.  Like
torch's, that gradient is not itself differentiable (second derivatives through a draw are zero).  Dirichlet
(and Beta) draws normalise independent gamma draws, so their gradients are the implicit gamma gradients pushed
through the normalisation (unbiased, not torch's exact ``_dirichlet_grad``)."""
from __future__ import annotations

import math

import jitgrad as _jg
from . import constraints
from .continuous import expand_params
from .distribution import Distribution
from .parameters import broadcast_all, standard_normal, standard_uniform, open_uniform, tiny_of

__all__ = ["Gamma", "Chi2", "Beta", "Dirichlet", "StudentT"]

_ROUNDS = 10


def _marsaglia_tsang(alpha):
    """Gamma(alpha, 1) draws of alpha's shape (alpha concrete or traced, no gradient)."""
    with _jg.no_grad():
        boost = alpha < 1
        a = _jg.where(boost, alpha + 1, alpha)
        d = a - 1.0 / 3
        c = 1.0 / _jg.sqrt(9 * d)
        shape = (_ROUNDS,) + tuple(alpha.shape)
        x = standard_normal(shape, alpha)
        u = open_uniform(shape, alpha)
        v = (1 + c * x) ** 3
        ok = v > 0
        vs = _jg.where(ok, v, _jg.ones_like(v))
        accept = ok & (_jg.log(u) < 0.5 * x * x + d - d * vs + d * _jg.log(vs))
        first = _jg.argmax(accept.to(_jg.int32), dim=0, keepdim=True)
        any_ok = accept.any(0)
        draw = _jg.gather(d * vs, 0, first).squeeze(0)
        draw = _jg.where(any_ok, draw, d)
        b = open_uniform(tuple(alpha.shape), alpha)
        draw = _jg.where(boost, draw * b ** (1 / alpha), draw)
        return draw.clamp(min=tiny_of(alpha))


def _digamma(x):
    return _jg.digamma(x)


def _standard_gamma_grad(alpha, x):
    """d x / d alpha of a Gamma(alpha, 1) draw ``x`` (torch's standard_gamma_grad_one, elementwise)."""
    with _jg.no_grad():
        # Taylor series for small x
        numer = _jg.ones_like(x)
        denom = alpha
        series1 = numer / denom
        series2 = numer / (denom * denom)
        for i in range(1, 6):
            numer = numer * (-x / i)
            denom = denom + 1
            series1 = series1 + numer / denom
            series2 = series2 + numer / (denom * denom)
        pow_x_alpha = x ** alpha
        gamma_pdf = x ** (alpha - 1) * _jg.exp(-x)
        gamma_cdf = pow_x_alpha * series1
        gamma_cdf_alpha = (_jg.log(x) - _digamma(alpha)) * gamma_cdf - pow_x_alpha * series2
        small = -gamma_cdf_alpha / gamma_pdf
        small = _jg.where(_jg.isnan(small), _jg.zeros_like(small), small)
        # Rice saddle point expansion for large alpha
        numer_1 = 1 + 24 * alpha * (1 + 12 * alpha)
        numer_2 = 1440 * (alpha * alpha) + 6 * x * (53 - 120 * x) - 65 * x * x / alpha + alpha * (107 + 3600 * x)
        band = numer_1 * numer_2 / (1244160 * (alpha * alpha) * (alpha * alpha))
        den = _jg.sqrt(8 * alpha)
        term2 = den / (alpha - x)
        term3 = (x - alpha - alpha * _jg.log(x / alpha)).abs() ** -1.5
        term23 = _jg.where(x < alpha, term2 - term3, term2 + term3)
        term1 = _jg.log(x / alpha) * term23 - _jg.sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x))
        stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
        rice = -stirling * (x * term1) / den
        large = _jg.where((0.9 * alpha <= x) & (x <= 1.1 * alpha), band, rice)
        # bivariate rational approximation otherwise
        u = _jg.log(x / alpha)
        v = _jg.log(alpha)
        coef = ((0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084),
                (0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915,
                 -0.00058392623),
                (0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
                 0.00085092367, -1.5247877e-07))
        cv = [coef[0][i] + u * (coef[1][i] + u * coef[2][i]) for i in range(8)]
        p = cv[0] + v * (cv[1] + v * (cv[2] + v * cv[3]))
        q = cv[4] + v * (cv[5] + v * (cv[6] + v * cv[7]))
        rational = _jg.exp(p / q)
        return _jg.where(x < 0.8, small, _jg.where(alpha > 8, large, rational))


def standard_gamma(alpha):
    """Gamma(alpha, 1) draws of alpha's shape; differentiable w.r.t. ``alpha`` by implicit reparameterisation."""
    a = alpha.detach()
    x = _marsaglia_tsang(a)
    if _jg.is_grad_enabled() and alpha.requires_grad:
        x = x + (alpha - a) * _standard_gamma_grad(a, x)        # value x, gradient dx/dalpha
    return x


class Gamma(Distribution):
    """The gamma distribution with shape ``concentration`` and ``rate`` (density ~ x^(c-1) e^(-rate x))."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Gamma, batch_shape, ("concentration", "rate"), _instance)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)

    def log_prob(self, value):
        value = _jg.as_tensor(value, dtype=self.rate.dtype)
        if self._validate_args:
            self._validate_sample(value)
        return (_jg.xlogy(self.concentration, self.rate) + _jg.xlogy(self.concentration - 1, value)
                - self.rate * value - _jg.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - _jg.log(self.rate) + _jg.lgamma(self.concentration)
                + (1.0 - self.concentration) * _jg.digamma(self.concentration))


class Chi2(Gamma):
    """The chi-squared distribution with ``df`` degrees of freedom (``Gamma(df / 2, 1 / 2)``)."""
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, _jg.full_like(df, 0.5), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Chi2, _instance)
        return super().expand(batch_shape, new)

    @property
    def df(self):
        return self.concentration * 2


class Dirichlet(Distribution):
    """The Dirichlet distribution over the simplex, with ``concentration`` (last dim: the categories)."""
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Dirichlet, batch_shape, ("concentration",), _instance)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        g = standard_gamma(self.concentration.expand(shape))
        x = g / g.sum(-1, keepdim=True)
        return x.clamp(min=tiny_of(x))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (_jg.xlogy(self.concentration - 1.0, value).sum(-1) + _jg.lgamma(self.concentration.sum(-1))
                - _jg.lgamma(self.concentration).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        concentrationm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        mask = (self.concentration < 1).all(dim=-1, keepdim=True)
        onehot = _jg.nn.functional.one_hot(self.concentration.argmax(dim=-1),
                                           self.concentration.shape[-1]).to(mode.dtype)
        return _jg.where(mask, onehot, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return (_jg.lgamma(self.concentration).sum(-1) - _jg.lgamma(a0) - (k - a0) * _jg.digamma(a0)
                - ((self.concentration - 1.0) * _jg.digamma(self.concentration)).sum(-1))


class Beta(Distribution):
    """The beta distribution on [0, 1] with shapes ``concentration1`` (alpha) and ``concentration0`` (beta)."""
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        c1, c0 = broadcast_all(concentration1, concentration0)
        self._dirichlet = Dirichlet(_jg.stack([c1, c0], -1), validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        heads_tails = _jg.stack([value, 1.0 - value], -1)
        return self._dirichlet.log_prob(heads_tails)

    def entropy(self):
        return self._dirichlet.entropy()

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]


class StudentT(Distribution):
    """Student's t-distribution with ``df`` degrees of freedom, location ``loc`` and scale ``scale``."""
    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = expand_params(self, StudentT, batch_shape, ("df", "loc", "scale"), _instance)
        new._chi2 = self._chi2.expand(batch_shape)
        return new

    @property
    def mean(self):
        return _jg.where(self.df > 1, self.loc, math.nan)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        v = self.scale.pow(2) * self.df / (self.df - 2)
        v = _jg.where(self.df > 2, v, math.inf)
        return _jg.where(self.df <= 1, math.nan, v)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        X = standard_normal(shape, self.df)
        Z = self._chi2.rsample(sample_shape)
        Y = X * _jg.rsqrt(Z / self.df)
        return self.loc + self.scale * Y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        Z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi) + _jg.lgamma(0.5 * self.df)
             - _jg.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * _jg.log1p(y ** 2.0 / self.df) - Z

    def entropy(self):
        lbeta = _jg.lgamma(0.5 * self.df) + math.lgamma(0.5) - _jg.lgamma(0.5 * (self.df + 1))
        return (self.scale.log() + 0.5 * (self.df + 1) * (_jg.digamma(0.5 * (self.df + 1))
                                                         - _jg.digamma(0.5 * self.df))
                + 0.5 * self.df.log() + lbeta)
