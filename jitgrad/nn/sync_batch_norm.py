"""``nn.SyncBatchNorm``: batch normalisation whose statistics torch reduces over every process of a group.

In one process (no ``jitgrad.distributed`` group, or a group of one) it is ``BatchNorm`` over any ``(N, C, *)``
input, exactly as torch's falls back to ``F.batch_norm`` there.  Synchronising the statistics across processes
is not implemented: training with a group of more than one process raises rather than silently normalising each
process with its own batch.  ``SyncBatchNorm.convert_sync_batchnorm(module)`` swaps every ``BatchNorm*d`` of a
model for one, sharing its parameters and buffers, as torch's.

>>> import jitgrad as jg
>>> m = jg.nn.SyncBatchNorm.convert_sync_batchnorm(jg.nn.Sequential(jg.nn.Conv2d(3, 4, 1), jg.nn.BatchNorm2d(4)))
>>> m[1]
SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
"""
from __future__ import annotations

from .layers import _BatchNorm


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation of ``(N, C, *)`` input whose statistics torch syncs over ``process_group``; in one
    process it is ``BatchNorm`` (see the module docstring).

    >>> import jitgrad as jg
    >>> jg.nn.SyncBatchNorm(3)(jg.randn(4, 3, 5)).shape
    jitgrad.Size([4, 3, 5])
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _check_non_zero_input_channels(self, input):
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def forward(self, input):
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        if self.training:
            from .. import distributed as dist
            if dist.is_initialized() and dist.get_world_size(self.process_group) > 1:
                raise NotImplementedError("jitgrad.nn.SyncBatchNorm: synchronising the batch statistics across "
                                          "processes is not implemented (one process only)")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every ``BatchNorm1d/2d/3d`` in it replaced by a ``SyncBatchNorm`` that shares its
        parameters and buffers (``module`` itself when it is one)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return out


__all__ = ["SyncBatchNorm"]
