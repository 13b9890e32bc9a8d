"""``jitgrad.distributions``: torch.distributions over jitgrad tensors.

Parameters, ``log_prob``, ``cdf``/``icdf``, ``entropy`` and ``rsample`` are compositions of jitgrad ops, so they
are differentiable and run eagerly and inside ``@jitgrad.compile``; draws come from jitgrad's default generator
(``jitgrad.manual_seed`` makes them repeatable).

>>> import jitgrad as jg
>>> from jitgrad.distributions import Normal, kl_divergence
>>> p, q = Normal(jg.tensor(0.), jg.tensor(1.)), Normal(jg.tensor(1.), jg.tensor(2.))
>>> kl_divergence(p, q)
tensor(0.4431)
"""
from . import constraints
from .distribution import Distribution
from .continuous import Normal, Uniform, Laplace, Cauchy, Exponential, Gumbel, HalfNormal
from .gamma import Gamma, Chi2, Beta, Dirichlet, StudentT
from .discrete import Bernoulli, Categorical, OneHotCategorical, Binomial, Multinomial, Poisson, Geometric
from .transforms import (Transform, ComposeTransform, ExpTransform, AffineTransform, SigmoidTransform,
                         TanhTransform, SoftplusTransform, AbsTransform, PowerTransform, StickBreakingTransform,
                         identity_transform)
from .structured import Independent, TransformedDistribution, LogNormal, MixtureSameFamily
from .multivariate import MultivariateNormal
from .lowrank import LowRankMultivariateNormal
from .relaxed import LogitRelaxedBernoulli, RelaxedBernoulli, ExpRelaxedCategorical, RelaxedOneHotCategorical
from .kl import kl_divergence, register_kl

__all__ = ["constraints", "Distribution", "Normal", "Uniform", "Laplace", "Cauchy", "Exponential", "Gumbel",
           "HalfNormal", "Gamma", "Chi2", "Beta", "Dirichlet", "StudentT", "Bernoulli", "Categorical",
           "OneHotCategorical", "Binomial", "Multinomial", "Poisson", "Geometric", "Transform", "ComposeTransform",
           "ExpTransform", "AffineTransform", "SigmoidTransform", "TanhTransform", "SoftplusTransform",
           "AbsTransform", "PowerTransform", "StickBreakingTransform", "identity_transform", "Independent",
           "TransformedDistribution", "LogNormal", "MixtureSameFamily", "MultivariateNormal",
           "LowRankMultivariateNormal", "RelaxedBernoulli", "RelaxedOneHotCategorical", "kl_divergence",
           "register_kl"]
