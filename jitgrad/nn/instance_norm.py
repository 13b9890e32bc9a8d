"""Instance normalisation: ``F.instance_norm`` and ``nn.InstanceNorm1d/2d/3d``, as torch has them.

Each (sample, channel) plane is normalised over its spatial dims with its own mean and biased variance; with
``affine=True`` a per-channel ``weight`` and ``bias`` follow.  With ``track_running_stats=True`` the running
statistics are the batch average of the instance statistics (unbiased variance), updated in place in training
and used in eval, as torch does.  It is a composition of reductions and elementwise ops, so it differentiates
to any order and compiles.
"""
from __future__ import annotations

import warnings

from ..library.torch_kwargs import torch_kwargs
from .functional_layers import update_running_stats
from .layers import _NormBase


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5, **torch_kw):
    """Normalise each ``input[n, c]`` over its spatial dims (torch.nn.functional.instance_norm).  With
    ``use_input_stats=False`` the running statistics normalise instead (eval with tracked statistics)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(instance_norm, "instance_norm", (input, running_mean, running_var, weight, bias,
                                                              use_input_stats, momentum, eps), {}, torch_kw)
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input with a batch, a channel and at least one spatial dim "
                         f"(got {input.ndim}D input of shape {list(input.shape)})")
    n, c = input.shape[0], input.shape[1]
    dims = tuple(range(2, input.ndim))
    per_channel = (1, c) + (1,) * len(dims)
    if use_input_stats:
        spatial = input.numel() // max(n * c, 1)
        if spatial <= 1 and input.numel():
            raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        d = input - mean
        var = (d * d).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            # the batch average of the instance statistics
            update_running_stats(running_mean, running_var, mean.detach().reshape(n, c).mean(0),
                                 var.detach().reshape(n, c).mean(0), spatial, momentum)
        out = d / (var + eps).sqrt()
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        out = (input - running_mean.reshape(per_channel)) / (running_var.reshape(per_channel) + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


class _InstanceNorm(_NormBase):
    _spatial = 0        # the number of spatial dims of a batched input

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias)

    def forward(self, input):
        batched = self._spatial + 2
        if input.dim() not in (batched - 1, batched):
            raise ValueError(f"expected {batched - 1}D or {batched}D input (got {input.dim()}D input)")
        feature_dim = input.dim() - self._spatial - 1
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = input.dim() == batched - 1
        x = input.unsqueeze(0) if unbatched else input
        out = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            0.0 if self.momentum is None else self.momentum, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of ``(N, C, L)`` or ``(C, L)`` input (torch.nn.InstanceNorm1d)."""
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of ``(N, C, H, W)`` or ``(C, H, W)`` input (torch.nn.InstanceNorm2d)."""
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input (torch.nn.InstanceNorm3d)."""
    _spatial = 3


__all__ = ["instance_norm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
