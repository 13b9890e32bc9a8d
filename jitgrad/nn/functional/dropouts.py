"""Dropout: ``F.dropout``, ``F.dropout1d/2d/3d``, ``F.alpha_dropout`` and ``F.feature_alpha_dropout``.

The mask is one draw of the generator (``rand`` compared with ``p``), scaled by ``1 / (1 - p)`` and multiplied
into the input; autograd saves that scaled mask for the backward pass (the mul's vjp), so the gradient uses
exactly the mask of the forward pass, eagerly and inside ``@jitgrad.compile`` (where the draw is Philox in the
generated loop and the generator's offset is written back, so every call gets a new mask).
"""
from __future__ import annotations

from ...ir import dtypes as dt
from ...runtime.grad_mode import no_grad
from ...library.creation.sampling import rand
from ...runtime.tensor import Tensor
from ...library.torch_kwargs import torch_kwargs


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, **torch_kw) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (torch's
    ``F.dropout``).  With ``training=False`` (or ``p == 0``) the input is returned as is."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(dropout, 'dropout', (input, p, training, inplace), {}, torch_kw)
    return _masked(input, p, training, inplace, tuple(input.shape))


def _masked(input, p, training, inplace, mask_shape):
    """``input`` times a scaled keep-mask of ``mask_shape`` (``input``'s for dropout, one entry per sample and
    channel for the feature dropouts), drawn in one ``rand``."""
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:    # torch: no draw, all zeros (1 / (1 - p) would be inf)
        return input.mul_(0.0) if inplace else input * 0.0
    md = input.dtype if input.is_floating_point() else dt.DEFAULT_FLOAT
    with no_grad():
        mask = (rand(mask_shape, dtype=md, device=input.device) >= p).to(md) * (1.0 / (1.0 - p))
    return input.mul_(mask) if inplace else input * mask


def _feature_dropout(input, p, training, inplace):
    """Zero whole channels: one draw per (sample, channel), broadcast over the spatial dims."""
    return _masked(input, p, training, inplace, tuple(input.shape[:2]) + (1,) * (input.ndim - 2))


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each channel of ``input (N, C, L)`` or ``(C, L)`` with probability ``p`` (the whole length), scale the
    rest by ``1 / (1 - p)``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.dropout1d(jg.ones(2, 3, 4), 0.5, training=False).shape
    jitgrad.Size([2, 3, 4])
    """
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                           "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                           "channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    if input.ndim == 2:
        out = _feature_dropout(input.unsqueeze(0), p, training, inplace)
        return input if out is input else out.squeeze(0)
    return _feature_dropout(input, p, training, inplace)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each channel of ``input (N, C, H, W)`` with probability ``p`` (the whole plane), scale the rest by
    ``1 / (1 - p)``.  A 3-D input is taken as ``(N, C, L)`` with torch's warning.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> y = F.dropout2d(jg.ones(2, 3, 4, 4), 0.5)
    >>> bool(((y == 0) | (y == 2)).all()) and bool((y.amax((2, 3)) == y.amin((2, 3))).all())
    True
    """
    _check_p(p)
    import warnings
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will result "
                      "in an error in a future release. To retain the behavior and silence this warning, please use "
                      "dropout instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 "
                      "spatial dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D "
                      "inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This "
                      "behavior will change in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please "
                      "switch to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each channel of ``input (N, C, D, H, W)`` or ``(C, D, H, W)`` with probability ``p`` (the whole
    volume), scale the rest by ``1 / (1 - p)``; other ranks warn as torch's.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.dropout3d(jg.ones(2, 3, 2, 2, 2), 0.5, training=False).shape
    jitgrad.Size([2, 3, 2, 2, 2])
    """
    _check_p(p)
    import warnings
    if input.ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and will result "
                      "in an error in a future release. To retain the behavior and silence this warning, please use "
                      "dropout instead. Note that dropout3d exists to provide channel-wise dropout on inputs with 3 "
                      "spatial dimensions, a channel dimension, and an optional batch dimension (i.e. 4D or 5D "
                      "inputs).", stacklevel=2)
    if input.ndim == 5:
        return _feature_dropout(input, p, training, inplace)
    # unbatched: one draw per channel (dim 0), as torch's unsqueeze(0) then feature dropout
    return _masked(input, p, training, inplace, tuple(input.shape[:1]) + (1,) * (input.ndim - 1))


# torch's alpha dropout keeps SELU's self-normalising mean 0 and variance 1: dropped units take SELU's negative
# saturation value -alpha' (alpha' = scale * alpha), then an affine map a * x + b restores the moments
_ALPHA_PRIME = 1.7580993408473766


def _alpha_masked(input, p, training, inplace, mask_shape):
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input.mul_(0.0) if inplace else input * 0.0
    md = input.dtype if input.is_floating_point() else dt.DEFAULT_FLOAT
    a = 1.0 / ((_ALPHA_PRIME * _ALPHA_PRIME * p + 1) * (1 - p)) ** 0.5
    with no_grad():
        keep = (rand(mask_shape, dtype=md, device=input.device) >= p).to(md)
        b = (keep - 1.0) * (_ALPHA_PRIME * a) + _ALPHA_PRIME * a * p
        scale = keep * a
    if inplace:
        return input.mul_(scale).add_(b)
    return input * scale + b


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Dropout for SELU networks: each element is set to SELU's negative saturation with probability ``p``, then
    all are scaled and shifted so the mean and variance are kept (torch's ``F.alpha_dropout``).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.alpha_dropout(jg.ones(3), 0.5).tolist()     # training=False: the identity
    [1.0, 1.0, 1.0]
    """
    return _alpha_masked(input, p, training, inplace, tuple(input.shape))


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """``alpha_dropout`` of whole channels: one draw per (sample, channel) of ``(N, C, *)``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.feature_alpha_dropout(jg.ones(2, 3, 4), 0.2).shape
    jitgrad.Size([2, 3, 4])
    """
    _check_p(p)
    if training and p not in (0.0, 1.0) and input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return _alpha_masked(input, p, training, inplace, tuple(input.shape[:2]) + (1,) * (input.ndim - 2))


__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]
