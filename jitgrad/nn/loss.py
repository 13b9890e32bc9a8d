"""Loss modules: ``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``BCEWithLogitsLoss``, ``KLDivLoss`` (thin
wrappers over ``nn.functional``)."""
from __future__ import annotations

from . import functional
from .loss_reduction import legacy_reduction
from .module import Module


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = legacy_reduction(size_average, reduce)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error; ``reduction`` 'mean' | 'sum' | 'none'."""

    def forward(self, input, target):
        return functional.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of class indices under log-probabilities; ``weight`` per class,
    ``ignore_index``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return functional.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                   reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits against class indices or probabilities; ``weight``, ``ignore_index``,
    ``label_smoothing``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction="mean",
                 label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                        reduction=self.reduction, label_smoothing=self.label_smoothing)


__all__ = ["MSELoss", "NLLLoss", "CrossEntropyLoss"]


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy on logits; ``weight`` (per element) and ``pos_weight`` (per class) are buffers."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return functional.binary_cross_entropy_with_logits(input, target, self.weight, pos_weight=self.pos_weight,
                                                           reduction=self.reduction)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities ``input`` from ``target``; ``reduction='batchmean'`` is the true KL."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return functional.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
