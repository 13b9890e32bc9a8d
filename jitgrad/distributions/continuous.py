"""Location-scale and other closed-form continuous distributions: Normal, Uniform, Laplace, Cauchy,
Exponential, Gumbel, HalfNormal.  Every method is a composition of jitgrad ops, so log_prob, cdf, icdf, entropy
and rsample are differentiable, eagerly and inside ``@jitgrad.compile``."""
from __future__ import annotations

import math

import jitgrad as _jg
from . import constraints
from .distribution import Distribution
from .parameters import as_size, broadcast_all, eps_of, open_uniform, standard_normal, standard_uniform

__all__ = ["Normal", "Uniform", "Laplace", "Cauchy", "Exponential", "Gumbel", "HalfNormal"]

_EULER = 0.57721566490153286060


def expand_params(self, cls, batch_shape, names, _instance=None):
    """The shared ``expand``: a new instance of ``cls`` with each parameter in ``names`` expanded."""
    new = self._get_checked_instance(cls, _instance)
    batch_shape = as_size(batch_shape)
    for n in names:
        if n in self.__dict__:
            p = getattr(self, n)
            setattr(new, n, p.expand(tuple(batch_shape) + tuple(p.shape[len(self.batch_shape):])))
    Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
    new._validate_args = self._validate_args
    return new


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``.

    >>> import jitgrad as jg
    >>> from jitgrad.distributions import Normal
    >>> Normal(jg.tensor(0.), jg.tensor(1.)).log_prob(jg.tensor(0.))
    tensor(-0.9189)
    """
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Normal, batch_shape, ("loc", "scale"), _instance)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return self.loc.expand(shape) + standard_normal(shape, self.loc) * self.scale.expand(shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + _jg.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * _jg.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + _jg.log(self.scale)


class Uniform(Distribution):
    """Uniform on the half-open interval ``[low, high)``."""
    has_rsample = True

    @property
    def arg_constraints(self):
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Uniform, batch_shape, ("low", "high"), _instance)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return _jg.nan * self.high

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        rand = standard_uniform(shape, self.low)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = self.low.le(value).to(self.low.dtype)
        ub = self.high.gt(value).to(self.low.dtype)
        return _jg.log(lb * ub) - _jg.log(self.high - self.low)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        result = (value - self.low) / (self.high - self.low)
        return result.clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return _jg.log(self.high - self.low)


class Laplace(Distribution):
    """The Laplace distribution with location ``loc`` and scale ``scale``."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Laplace, batch_shape, ("loc", "scale"), _instance)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return (2 ** 0.5) * self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = eps_of(self.loc)
        u = (standard_uniform(shape, self.loc) * 2 - 1).clamp(min=eps - 1, max=1)     # in (-1, 1)
        return self.loc - self.scale * u.sign() * _jg.log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -_jg.log(2 * self.scale) - _jg.abs(value - self.loc) / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * _jg.expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * _jg.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + _jg.log(2 * self.scale)


class Cauchy(Distribution):
    """The Cauchy (Lorentz) distribution with median ``loc`` and half width ``scale``."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Cauchy, batch_shape, ("loc", "scale"), _instance)

    @property
    def mean(self):
        return _jg.full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return _jg.full(self._extended_shape(), math.inf, dtype=self.loc.dtype)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = open_uniform(shape, self.loc)
        eps = _jg.tan(math.pi * (u - 0.5))
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        return _jg.atan2(y, _jg.ones_like(y)) / math.pi + 0.5

    def icdf(self, value):
        return _jg.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class Exponential(Distribution):
    """The exponential distribution with rate ``rate``."""
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Exponential, batch_shape, ("rate",), _instance)

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return _jg.zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        e = -_jg.log1p(-standard_uniform(shape, self.rate))       # Exp(1): 1 - u lies in (0, 1]
        return e / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - _jg.exp(-self.rate * value)

    def icdf(self, value):
        return -_jg.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - _jg.log(self.rate)


class Gumbel(Distribution):
    """The Gumbel (type-I extreme value) distribution with location ``loc`` and scale ``scale``."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Gumbel, batch_shape, ("loc", "scale"), _instance)

    @property
    def mean(self):
        return self.loc + self.scale * _EULER

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = open_uniform(shape, self.loc)
        return self.loc - self.scale * _jg.log(-_jg.log(u))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (self.loc - value) / self.scale
        return (y - y.exp()) - self.scale.log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _jg.exp(-_jg.exp(-(value - self.loc) / self.scale))

    def icdf(self, value):
        return self.loc - self.scale * _jg.log(-_jg.log(value))

    def entropy(self):
        return self.scale.log() + (1 + _EULER)


class HalfNormal(Distribution):
    """The half-normal distribution: ``|X|`` for ``X ~ Normal(0, scale)``."""
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        (self.scale,) = broadcast_all(scale)
        super().__init__(self.scale.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, HalfNormal, batch_shape, ("scale",), _instance)

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self):
        return _jg.zeros_like(self.scale)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return (standard_normal(shape, self.scale) * self.scale.expand(shape)).abs()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lp = -(value ** 2) / (2 * self.scale ** 2) - self.scale.log() + 0.5 * math.log(2 / math.pi)
        return _jg.where(value >= 0, lp, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _jg.erf(value * self.scale.reciprocal() / math.sqrt(2))

    def icdf(self, prob):
        return self.scale * _jg.erfinv(prob) * math.sqrt(2)

    def entropy(self):
        return 0.5 * math.log(math.pi / 2) + self.scale.log() + 0.5
