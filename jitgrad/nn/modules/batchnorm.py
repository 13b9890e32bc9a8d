"""Batch normalisation: ``BatchNorm1d/2d/3d`` over ``F.batch_norm``, their base classes (``_NormBase`` also serves
``InstanceNorm``), and ``SyncBatchNorm``.

``SyncBatchNorm``: ``nn.SyncBatchNorm``: batch normalisation whose statistics torch reduces over every process of a group.

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

from ...ir import dtypes as dt
from ...library.creation import factories
from .. import init
from ..functional import normalization as FL
from .module import Module
from ..parameter import Parameter, _empty


class _NormBase(Module):
    """What BatchNorm1d and the InstanceNorms (instancenorm.py) share, as torch's ``_NormBase``: the
    ``weight``/``bias`` parameters (ones/zeros; with ``affine``), the ``running_mean``/``running_var``/
    ``num_batches_tracked`` buffers (with ``track_running_stats``), their resets and the repr."""

    def __init__(self, num_features: int, eps, momentum, affine: bool, track_running_stats: bool, device, dtype,
                 bias: bool):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        fdt = dtype if dtype is not None else dt.DEFAULT_FLOAT
        if affine:
            self.weight = Parameter(_empty(num_features, device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(_empty(num_features, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", factories.zeros(num_features, dtype=fdt, device=device))
            self.register_buffer("running_var", factories.ones(num_features, dtype=fdt, device=device))
            self.register_buffer("num_batches_tracked", factories.tensor(0, dtype=dt.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    """Batch normalisation over every dim but the channels (dim 1); the subclasses check the input's rank.
    Buffers ``running_mean`` (zeros), ``running_var`` (ones) and ``num_batches_tracked`` (int64) are updated in
    place in training mode, so inside a ``@jitgrad.compile`` step the update is graph state written back after
    each call.  ``momentum=None`` is the cumulative average (factor ``1 / num_batches_tracked``)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias)

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            from ...runtime import grad_mode
            with grad_mode.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:     # a tensor: read from the buffer in the graph, never baked in
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return FL.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                             self.weight, self.bias, bn_training, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` input (see ``_BatchNorm`` for the running statistics).

    >>> import jitgrad as jg
    >>> jg.nn.BatchNorm1d(4)(jg.randn(8, 4)).shape
    jitgrad.Size([8, 4])
    """

    def _check_input_dim(self, input):
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` input: statistics per channel over the batch and both spatial dims
    (see ``_BatchNorm`` for the running statistics).

    >>> import jitgrad as jg
    >>> jg.nn.BatchNorm2d(3)
    BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of ``(N, C, D, H, W)`` input: statistics per channel over the batch and the three
    spatial dims (see ``_BatchNorm`` for the running statistics).

    >>> import jitgrad as jg
    >>> jg.nn.BatchNorm3d(3)(jg.randn(2, 3, 2, 2, 2)).shape
    jitgrad.Size([2, 3, 2, 2, 2])
    """

    def _check_input_dim(self, input):
        if input.dim() != 5:
            raise ValueError(f"expected 5D input (got {input.dim()}D input)")


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
            from ... import distributed as dist
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


__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"]
