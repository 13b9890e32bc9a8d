"""Layers with parameters and state: ``Linear``, ``Embedding``, ``LayerNorm``, ``BatchNorm1d/2d``; and the
shape-only ``Identity``, ``Flatten``, ``Unflatten``."""
from __future__ import annotations

import math

from ..ir import dtypes as dt
from ..library.creation import factories
from . import init
from . import functional_layers as FL
from .module import Module
from .parameter import Parameter


def _empty(*shape, device=None, dtype=None):
    """An uninitialised parameter payload on ``device`` (the module's reset_parameters fills it)."""
    return factories.empty(*shape, dtype=dtype if dtype is not None else dt.DEFAULT_FLOAT, device=device)


class Identity(Module):
    """Returns its input; takes and ignores any arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    """Flattens dims ``start_dim`` to ``end_dim`` (by default all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size`` (the inverse of ``Flatten``): ``Unflatten(1, (2, 5))`` maps
    (N, 10) to (N, 2, 5)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``, initialised like
    torch: kaiming_uniform_(a=sqrt(5)) for the weight, U(-1/sqrt(in), 1/sqrt(in)) for the bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return FL.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim``, initialised N(0, 1); the
    ``padding_idx`` row starts at zero and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, max_norm=None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("jitgrad.nn.Embedding: max_norm, scale_grad_by_freq and sparse are not "
                                      "supported")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if padding_idx > 0:
                if padding_idx >= num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
            elif padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(_empty(num_embeddings, embedding_dim, device=device, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            from ..runtime import grad_mode
            with grad_mode.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return FL.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None):
        """An Embedding whose weight is (a copy-free view of) ``embeddings`` (2-D)."""
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, _weight=embeddings, _freeze=freeze, padding_idx=padding_idx)


class LayerNorm(Module):
    """Layer normalisation over the trailing ``normalized_shape`` dims; ``weight`` ones and ``bias`` zeros."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_empty(*self.normalized_shape, device=device, dtype=dtype))
            if bias:
                self.bias = Parameter(_empty(*self.normalized_shape, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return FL.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class _NormBase(Module):
    """What BatchNorm1d and the InstanceNorms (instance_norm.py) share, as torch's ``_NormBase``: the
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
            from ..runtime import grad_mode
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


__all__ = ["Identity", "Flatten", "Linear", "Embedding", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]
