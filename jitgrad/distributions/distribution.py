"""``Distribution``, the base class of every distribution: shapes (``batch_shape``, ``event_shape``), the
sampling/scoring interface and torch's argument validation (the same ValueError texts).

Validation reads values, so it runs on concrete tensors only: inside ``@jitgrad.compile`` the parameters are
symbolic and their checks are skipped (shape checks still run)."""
from __future__ import annotations

import warnings

import jitgrad as _jg
from ..runtime.tensor import Tensor
from . import constraints
from .parameters import as_size, is_concrete, lazy_property

__all__ = ["Distribution"]


def _all_true(valid) -> bool:
    return not is_concrete(valid) or bool(valid.all())


def _size_repr(shape) -> str:
    return repr(_jg.Size(tuple(shape)))


class Distribution:
    """Abstract base class for probability distributions (torch.distributions.Distribution).

    Args:
        batch_shape: the shape over which parameters are batched.
        event_shape: the shape of a single sample (without batching).
        validate_args: whether to validate arguments (default: the class-wide default, see
            :meth:`set_default_validate_args`).
    """
    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Sets whether validation is enabled or disabled by default (on, unless Python runs with ``-O``)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = as_size(batch_shape)
        self._event_shape = as_size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with `validate_args=False` "
                              "to turn off validation.", stacklevel=2)
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue
                value = getattr(self, param)
                if not is_concrete(value):
                    continue
                if not _all_true(constraint.check(value)):
                    raise ValueError(f"Expected parameter {param} ({type(value).__name__} of shape "
                                     f"{tuple(value.shape)}) of distribution {repr(self)} to satisfy the "
                                     f"constraint {repr(constraint)}, but found invalid values:\n{value}")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution with batch dimensions expanded to ``batch_shape`` (parameters are expanded views,
        arguments are not checked again)."""
        raise NotImplementedError

    @property
    def batch_shape(self):
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self):
        """A dict from argument names to the constraints each must satisfy."""
        raise NotImplementedError

    @property
    def support(self):
        """The constraint of this distribution's support."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{self.__class__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{self.__class__} does not implement variance")

    @property
    def stddev(self):
        """The standard deviation, ``variance.sqrt()``."""
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """A sample of shape ``sample_shape + batch_shape + event_shape`` (no gradient)."""
        with _jg.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """A reparameterised sample: differentiable w.r.t. the parameters (where ``has_rsample``)."""
        raise NotImplementedError

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning, stacklevel=2)
        return self.sample((n,))

    def log_prob(self, value):
        """The log of the probability density/mass function at ``value``."""
        raise NotImplementedError

    def cdf(self, value):
        """The cumulative distribution function at ``value``."""
        raise NotImplementedError

    def icdf(self, value):
        """The inverse cumulative distribution function at ``value``."""
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        """All values of a discrete distribution's support, along a new dim 0."""
        raise NotImplementedError

    def entropy(self):
        """The entropy, batched over ``batch_shape``."""
        raise NotImplementedError

    def perplexity(self):
        """``exp(entropy())``."""
        return _jg.exp(self.entropy())

    def _extended_shape(self, sample_shape=()):
        return _jg.Size(tuple(as_size(sample_shape)) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value):
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = value.dim() - len(self._event_shape)
        if tuple(value.shape[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: {_size_repr(value.shape)} vs "
                             f"{_size_repr(self._event_shape)}.")
        actual_shape = tuple(value.shape)
        expected_shape = tuple(self._batch_shape) + tuple(self._event_shape)
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{_size_repr(actual_shape)} vs {_size_repr(expected_shape)}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample validation. Please "
                          "initialize the distribution with `validate_args=False` to turn off validation.",
                          stacklevel=2)
            return
        if not is_concrete(value):
            return
        if not _all_true(support.check(value)):
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to "
                             f"be within the support ({repr(support)}) of the distribution {repr(self)}, but "
                             f"found invalid values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a "
                                      "custom __init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        param_names = [k for k in self.arg_constraints if k in self.__dict__]
        args_string = ", ".join(
            f"{p}: {self.__dict__[p] if self.__dict__[p].numel() == 1 else _size_repr(self.__dict__[p].shape)}"
            for p in param_names)
        return self.__class__.__name__ + "(" + args_string + ")"
