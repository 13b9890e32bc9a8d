"""The ``torch.*`` names of ``nn.functional`` functions (``torch.conv2d``, ``torch.layer_norm``, ``torch.dropout``,
...), which scripts call directly.

Most take ``F``'s arguments in ``F``'s order and are the same function: those are declared
``@published("jitgrad")`` beside their definitions in ``nn/functional/``.  The ones here are ATen's own signatures, which differ from ``F``'s and are kept as torch has them: ``torch.dropout(input, p, train)`` has no
defaults, ``torch.embedding(weight, indices, ...)`` takes the weight first, ``torch.batch_norm`` the weight before
the running statistics, and ``torch.max_pool1d_with_indices`` always returns the indices
too.  The loss functions are left out: their ``torch.*`` forms take the reduction as an integer enum,
an internal form scripts do not call.

>>> import jitgrad as jg
>>> x = jg.ones(2, 3)
>>> jg.dropout(x, 0.5, False).equal(x)
True
"""
from __future__ import annotations

from ..declarations import published
from . import functional as F



@published("jitgrad")
def dropout(input, p, train):
    """``torch.dropout``: ``F.dropout(input, p, training=train)`` (every argument required, as in torch)."""
    return F.dropout(input, p, train)


@published("jitgrad")
def alpha_dropout(input, p, train):
    """``torch.alpha_dropout``: ``F.alpha_dropout(input, p, training=train)``."""
    return F.alpha_dropout(input, p, train)


@published("jitgrad")
def feature_alpha_dropout(input, p, train):
    """``torch.feature_alpha_dropout``: ``F.feature_alpha_dropout(input, p, training=train)``."""
    return F.feature_alpha_dropout(input, p, train)


@published("jitgrad")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """``torch.layer_norm``: ``F.layer_norm`` (``cudnn_enable`` is accepted and has no effect)."""
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


@published("jitgrad")
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    """``torch.group_norm``: ``F.group_norm`` (``cudnn_enabled`` is accepted and has no effect)."""
    return F.group_norm(input, num_groups, weight, bias, eps)


@published("jitgrad")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``torch.rms_norm``: ``F.rms_norm``."""
    return F.rms_norm(input, normalized_shape, weight, eps)


@published("jitgrad")
def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """``torch.batch_norm``: ``F.batch_norm`` with ATen's argument order (the weight and bias first)."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


@published("jitgrad")
def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    """``torch.instance_norm``: ``F.instance_norm`` with ATen's argument order (the weight and bias first)."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


@published("jitgrad")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding``: the rows of ``weight`` at ``indices`` (weight first; ``padding_idx=-1``: none)."""
    extra = {k: v for k, v in (("scale_grad_by_freq", scale_grad_by_freq), ("sparse", sparse)) if v}
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx, **extra)


@published("jitgrad")
def max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool1d``: ``F.max_pool1d`` (an empty ``stride``, ATen's default, is the kernel size)."""
    return F.max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


@published("jitgrad")
def max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool2d``: ``F.max_pool2d`` (an empty ``stride``, ATen's default, is the kernel size)."""
    return F.max_pool2d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


@published("jitgrad")
def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool1d_with_indices``: ``(values, indices)`` of ``F.max_pool1d``."""
    return F.max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode, return_indices=True)


@published("jitgrad")
def celu(input, alpha=1.0):
    """``torch.celu``: ``F.celu`` (no ``inplace``; ``torch.celu_`` is the in-place form)."""
    return F.celu(input, alpha)


@published("jitgrad")
def selu(input):
    """``torch.selu``: ``F.selu``."""
    return F.selu(input)


@published("jitgrad")
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """``torch.rrelu``: ``F.rrelu`` (a random slope per element in training)."""
    extra = {} if generator is None else {"generator": generator}     # (refused by F.rrelu, naming it)
    return F.rrelu(input, lower, upper, training, **extra)


@published("jitgrad")
def threshold(input, threshold, value):
    """``torch.threshold``: ``value`` where ``input <= threshold``, else ``input``."""
    return F.threshold(input, threshold, value)


@published("jitgrad")
def threshold_(input, threshold, value):
    """``torch.threshold_``: in place."""
    return F.threshold_(input, threshold, value)

