"""``jitgrad.nn.functional``: loss and activation functions, written as compositions of primitives."""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from ..library import elementary as F
from ..ir.ops import OPS as O
from ..ir.ops.fused import nll_composition
from ..runtime.dispatch import bind
from ..library.creation.factories import arange
from ..runtime.tensor import Tensor
from ..tracer import STATE as _TR
from . import loss_reduction
from .dropout import dropout, dropout1d, dropout2d, dropout3d, alpha_dropout, feature_alpha_dropout  # noqa: F401
from ..library.torch_kwargs import torch_kwargs
from ..runtime.grad_names import named

relu = F.relu
sigmoid = F.sigmoid
tanh = F.tanh


def softmax(input, dim=None, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softmax, 'softmax', (input, dim, dtype), {}, torch_kw)
    return F.softmax(input, -1 if dim is None else dim, dtype)


def log_softmax(input, dim=None, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(log_softmax, 'log_softmax', (input, dim, dtype), {}, torch_kw)
    return F.log_softmax(input, -1 if dim is None else dim, dtype)


def gelu(input, approximate="none", **torch_kw):
    """GELU: ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula.  One fused op in eager mode; traced
    or on a device, its decomposition (``ir/ops/normalization.py``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(gelu, 'gelu', (input, approximate), {}, torch_kw)
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")     # torch's type and text
    return bind(O["gelu"], input, approximate=approximate)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mse_loss, 'mse_loss', (input, target, size_average, reduce, reduction), {}, torch_kw)
    if input.shape != target.shape:
        import warnings
        warnings.warn(f"Using a target size ({list(target.shape)}) that is different to the input size "
                      f"({list(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", stacklevel=2)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    d = input - target
    return named(loss_reduction.reduce_loss(d * d, reduction), "MseLossBackward0")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(l1_loss, 'l1_loss', (input, target, size_average, reduce, reduction), {}, torch_kw)
    from .regression_losses import warn_size
    warn_size(input, target)      # torch warns when the target broadcasts, as for mse_loss
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    return named(loss_reduction.reduce_loss(F.abs(input - target), reduction), "L1LossBackward0")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
             **torch_kw):
    """Negative log likelihood of class indices ``target`` under log-probabilities ``input`` (N, C, ...)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nll_loss, 'nll_loss', (input, target, weight, size_average, ignore_index, reduce,
                                                   reduction), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    return named(_nll_loss(input, target, weight, ignore_index, reduction), "NllLossBackward0")


def _nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    unbatched = input.ndim == 1
    if unbatched:
        input, target = input.unsqueeze(0), target.reshape(1)
    if target.dtype.name not in ("int64", "int32"):
        raise RuntimeError(f"nll_loss: expected target of dtype int64 (class indices), got {target.dtype.name}")
    if target.shape != input.shape[:1] + input.shape[2:]:
        raise RuntimeError(f"nll_loss: expected target of shape {list(input.shape[:1] + input.shape[2:])} for input "
                           f"of shape {list(input.shape)}, got {list(target.shape)}")
    C = input.shape[1]
    # bounds are checked on concrete targets (inside @compile the value is not known while tracing; a CUDA
    # target is read back for it, or the gather would read out of bounds); ignored entries may lie outside [0, C)
    t = target._data if type(target._data) is np.ndarray or _TR.active is not None else target.cpu()._data
    if type(t) is np.ndarray and t.size \
            and not (0 <= np.minimum.reduce(t, axis=None) and np.maximum.reduce(t, axis=None) < C):
        safe = np.where(t != ignore_index, t, 0)
        lo, hi = int(safe.min()), int(safe.max())
        if lo < 0 or hi >= C:
            raise IndexError(f"nll_loss: Target {hi if hi >= C else lo} is out of bounds (number of classes {C})")
    loss_reduction.check(reduction)
    if weight is None and input.ndim == 2:
        # one fused primitive in eager CPU mode; traced or on a device its decomposition (ir/ops/fused.py)
        loss = bind(O["nll_loss"], input, target, ignore_index=int(ignore_index), reduction=reduction)
    else:
        loss = nll_composition(input, target, weight, int(ignore_index), reduction)
    return loss.reshape(()) if unbatched and reduction == "none" else loss


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0, **torch_kw):
    """Cross entropy between logits ``input`` (N, C, ...) or (C,) and class indices or class probabilities."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cross_entropy, 'cross_entropy', (input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    r = _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)
    # class probabilities as the target: torch's result is not an NLL node either
    return r if getattr(target, "is_floating_point", lambda: False)() else named(r, "NllLossBackward0")


def _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing):
    cdim = 0 if input.ndim == 1 else 1
    logp = F.log_softmax(input, cdim)
    if isinstance(target, Tensor) and target.is_floating_point():
        if target.shape != input.shape:
            raise RuntimeError(f"cross_entropy: probability target shape {list(target.shape)} must match input "
                               f"shape {list(input.shape)}")
        C = input.shape[cdim]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / C
        term = logp * target
        if weight is not None:
            term = term * weight.reshape((C,) + (1,) * (input.ndim - cdim - 1))
        loss = -term.sum(cdim)
        if reduction == "mean":
            return loss.sum() / (loss.numel() / 1 if input.ndim > 1 else 1)
        return loss_reduction.reduce_loss(loss, reduction)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return nll
    C = input.shape[cdim]
    lp = logp if input.ndim > 1 else logp.unsqueeze(0)
    t = target if input.ndim > 1 else target.reshape(1)
    valid = (t != ignore_index).to(input.dtype)
    wsum = lp if weight is None else lp * weight.reshape((C,) + (1,) * (lp.ndim - 2))
    smooth = -wsum.sum(1) * valid
    if reduction == "mean":
        denom = valid.sum() if weight is None else (weight[t.where(t != ignore_index, 0)] * valid).sum()
        smooth = smooth.sum() / denom
    elif reduction == "sum":
        smooth = smooth.sum()
    elif input.ndim == 1:
        smooth = smooth.reshape(())
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / C)


def one_hot(tensor, num_classes=-1, **torch_kw):
    """``[..., num_classes]`` int64 tensor with a 1 at each value of ``tensor`` (an int64 tensor of class
    indices); ``num_classes=-1`` takes the largest value plus one (which reads the values: not inside
    ``@jitgrad.compile``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(one_hot, 'one_hot', (tensor, num_classes), {}, torch_kw)
    if not isinstance(tensor, Tensor) or tensor.dtype is not dt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    concrete = type(tensor._data) is np.ndarray
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max().item()) + 1
    elif num_classes < -1:
        raise RuntimeError("num_classes should be positive")
    if concrete and tensor.numel():
        if tensor._data.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if tensor._data.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    classes = arange(int(num_classes), dtype=dt.int64)
    return (tensor.unsqueeze(-1) == classes).to(dt.int64)


__all__ = ["one_hot", "dropout", "dropout1d", "dropout2d", "relu", "sigmoid", "tanh", "softmax", "log_softmax",
           "gelu", "mse_loss", "l1_loss", "nll_loss",
           "cross_entropy"]

from .functional_layers import linear, embedding, layer_norm, batch_norm  # noqa: E402

__all__ += ["linear", "embedding", "layer_norm", "batch_norm"]
from .instance_norm import instance_norm  # noqa: E402
__all__ += ["instance_norm"]

# torch's inplace= on the pointwise activations (relu here replaces the plain ``relu = F.relu`` above)
from .pointwise_activations import relu, relu_, threshold, threshold_, hardtanh, hardtanh_, relu6, leaky_relu, \
    leaky_relu_, elu, elu_, silu, celu, celu_, selu, selu_, hardsigmoid, hardswish, mish, rrelu, \
    rrelu_  # noqa: E402,F811
from . import pointwise_activations as _pointwise  # noqa: E402

__all__ += [n for n in _pointwise.__all__ if n not in __all__]

from .attention import scaled_dot_product_attention  # noqa: E402

__all__ += ["scaled_dot_product_attention"]

from .multihead_attention import multi_head_attention_forward  # noqa: E402

__all__ += ["multi_head_attention_forward"]

from .padding import pad  # noqa: E402

__all__ += ["pad"]

from .smooth_activations import softplus, logsigmoid  # noqa: E402
from .norm_scaling import rms_norm, normalize  # noqa: E402
from .logit_losses import binary_cross_entropy_with_logits, kl_div  # noqa: E402

__all__ += ["softplus", "logsigmoid", "rms_norm", "normalize", "binary_cross_entropy_with_logits", "kl_div"]

from .convolution import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, unfold, \
    fold  # noqa: E402

__all__ += ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "unfold",
            "fold"]

from .pooling import max_pool1d, max_pool2d, max_pool3d, max_pool1d_with_indices, max_pool2d_with_indices, \
    max_pool3d_with_indices, avg_pool1d, avg_pool2d, avg_pool3d, adaptive_avg_pool1d, adaptive_avg_pool2d, \
    adaptive_avg_pool3d  # noqa: E402
from . import pooling as _pooling  # noqa: E402

__all__ += _pooling.FUNCTIONS

from .pooling_variants import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, \
    adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices, \
    max_unpool1d, max_unpool2d, max_unpool3d, lp_pool1d, lp_pool2d, lp_pool3d  # noqa: E402
from . import pooling_variants as _pooling_variants  # noqa: E402

__all__ += _pooling_variants.FUNCTIONS

from .shrink_gate_activations import hardshrink, softshrink, tanhshrink, softsign, glu, softmin, prelu  # noqa: E402
from . import shrink_gate_activations as _shrink_gate  # noqa: E402

__all__ += _shrink_gate.__all__

from .distance import cosine_similarity, pairwise_distance, pdist  # noqa: E402
from .regression_losses import smooth_l1_loss, huber_loss, binary_cross_entropy, gaussian_nll_loss, \
    poisson_nll_loss, multilabel_soft_margin_loss  # noqa: E402
from .margin_losses import margin_ranking_loss, hinge_embedding_loss, cosine_embedding_loss, soft_margin_loss, \
    multi_margin_loss, triplet_margin_loss  # noqa: E402
from . import distance as _distance, regression_losses as _regression_losses, margin_losses as _margin_losses  # noqa

__all__ += _distance.FUNCTIONS + _regression_losses.FUNCTIONS + _margin_losses.FUNCTIONS

from .group_norm import group_norm, local_response_norm  # noqa: E402
from .pixel_shuffle import pixel_shuffle, pixel_unshuffle, channel_shuffle  # noqa: E402
from .upsampling import interpolate, upsample, upsample_nearest, upsample_bilinear  # noqa: E402
from .bilinear import bilinear  # noqa: E402
from . import group_norm as _group_norm, pixel_shuffle as _pixel_shuffle, upsampling as _upsampling  # noqa: E402

__all__ += _group_norm.FUNCTIONS + _pixel_shuffle.FUNCTIONS + _upsampling.FUNCTIONS + \
    ["bilinear", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]

from .embedding_bag import embedding_bag  # noqa: E402

__all__ += ["embedding_bag"]

from .ctc import ctc_loss  # noqa: E402

__all__ += ["ctc_loss"]


def __getattr__(name):
    """A name torch.nn.functional has and jitgrad lacks raises "not supported yet" (library/torch_surface.py)."""
    from ..library.torch_names import NN_FUNCTIONAL
    from ..library.torch_surface import unsupported_attribute
    raise unsupported_attribute("jitgrad.nn.functional", name, NN_FUNCTIONAL)
