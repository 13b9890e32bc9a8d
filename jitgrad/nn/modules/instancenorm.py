"""``InstanceNorm1d/2d/3d`` over ``F.instance_norm``, as torch has them: with ``affine=True`` a per-channel
``weight`` and ``bias``; with ``track_running_stats=True`` running statistics updated in training and
used in eval.
"""
from __future__ import annotations

import warnings

from ..functional.normalization import instance_norm
from .batchnorm import _NormBase


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


__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
