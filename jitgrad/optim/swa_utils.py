"""``jitgrad.optim.swa_utils``: stochastic weight averaging and EMA of a model's weights (``AveragedModel``,
the averaging functions), the SWA learning-rate schedule (``SWALR``) and ``update_bn`` (recompute BatchNorm
statistics for averaged weights), as torch has them.

``AveragedModel.update_parameters`` is eager Python over in-place tensor ops; the averaging itself (an
``avg_fn`` / ``multi_avg_fn``) is tensor arithmetic, so it can also run inside a compiled function."""
from __future__ import annotations

import itertools
import math
import warnings
from copy import deepcopy

import numpy as np

from ..ir import dtypes as dt
from ..nn.modules.batchnorm import _BatchNorm
from ..nn.modules.module import Module
from ..library.creation import factories
from ..runtime import grad_mode
from ..runtime.tensor import Tensor
from .scheduler_base import LRScheduler, _format_param
from .optimizer import _lerp_


def _no_grad(fn):
    def wrapper(*args, **kwargs):
        with grad_mode.no_grad():
            return fn(*args, **kwargs)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """An in-place EMA update over lists of tensors: ``ema = lerp(ema, current, 1 - decay)`` (floating
    tensors; others ``ema * decay + current * (1 - decay)``)."""
    _check_decay(decay)

    @_no_grad
    def ema_update(ema_param_list, current_param_list, _):
        if ema_param_list[0].dtype.is_floating_point:
            for p_ema, p_model in zip(ema_param_list, current_param_list):
                _lerp_(p_ema, p_model, 1 - decay)
        else:
            for p_ema, p_model in zip(ema_param_list, current_param_list):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """An in-place running mean over lists of tensors: ``avg = lerp(avg, current, 1 / (n_averaged + 1))``."""
    @_no_grad
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        if averaged_param_list[0].dtype.is_floating_point:
            if isinstance(num_averaged, Tensor):     # torch: 1 / (int64 tensor + 1), a float32 tensor
                w = float(np.float32(1.0) / np.float32(int(num_averaged) + 1))
            else:
                w = 1 / (num_averaged + 1)
            for p_avg, p_model in zip(averaged_param_list, current_param_list):
                _lerp_(p_avg, p_model, w)
        else:
            for p_avg, p_model in zip(averaged_param_list, current_param_list):
                diff = p_model - p_avg
                if isinstance(num_averaged, Tensor):
                    p_avg.add_(diff / (num_averaged + 1))
                else:
                    p_avg.add_(diff, alpha=1.0 / (num_averaged + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """A per-tensor EMA: returns ``decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    @_no_grad
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """A per-tensor running mean: returns ``avg + (current - avg) / (num_averaged + 1)``."""
    @_no_grad
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters (and with ``use_buffers`` its buffers) are averaged by
    ``update_parameters(model)``: the first call copies, later ones apply ``avg_fn(avg, current, n)`` per
    tensor or ``multi_avg_fn(avgs, currents, n)`` per list (default: the running mean, SWA).  ``n_averaged``
    (an int64 buffer) counts the updates; ``forward`` calls the copy.  Without ``use_buffers`` the buffers are
    copied from ``model`` (recompute BatchNorm statistics with :func:`update_bn`).  ``device`` is accepted for
    torch's signature (a CPU copy either way unless given)."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", factories.tensor(0, dtype=dt.int64))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model) -> None:
        """Fold ``model``'s current weights into the average."""
        with grad_mode.no_grad():
            self._update(model)

    def _update(self, model):
        if self.use_buffers:
            self_param = itertools.chain(self.module.parameters(), self.module.buffers())
            model_param = itertools.chain(model.parameters(), model.buffers())
        else:
            self_param, model_param = self.parameters(), model.parameters()
        mine, theirs = [], []
        first = int(self.n_averaged) == 0
        for p_averaged, p_model in zip(self_param, model_param):
            p_model_ = p_model.detach()
            mine.append(p_averaged.detach())
            theirs.append(p_model_)
            if first:
                p_averaged.detach().copy_(p_model_)
        if int(self.n_averaged) > 0:
            if self.multi_avg_fn is not None or self.avg_fn is None:
                by_dtype = {}
                for a, b in zip(mine, theirs):
                    pair = by_dtype.setdefault(a.dtype, ([], []))
                    pair[0].append(a)
                    pair[1].append(b)
                for avgs, currents in by_dtype.values():
                    if self.multi_avg_fn is not None:
                        self.multi_avg_fn(avgs, currents, self.n_averaged)
                    else:       # torch's CPU path: the per-tensor running mean
                        avg_fn = get_swa_avg_fn()
                        for a, b in zip(avgs, currents):
                            a.copy_(avg_fn(a, b, self.n_averaged))
            else:
                for a, b in zip(mine, theirs):
                    a.copy_(self.avg_fn(a, b, self.n_averaged))
        if not self.use_buffers:
            for b_swa, b_model in zip(self.module.buffers(), model.buffers()):
                b_swa.detach().copy_(b_model.detach())
        self.n_averaged.add_(1)


def update_bn(loader, model, device=None) -> None:
    """Recompute every BatchNorm's running statistics with one pass over ``loader`` (the cumulative average:
    momentum None while it runs; batches may be tensors or (input, ...) tuples).  The model's mode and the
    modules' momenta are restored."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with grad_mode.no_grad():
        for input in loader:
            if isinstance(input, (list, tuple)):
                input = input[0]
            if device is not None:
                input = input.to(device)
            model(input)
    for module, m in momenta.items():
        module.momentum = m
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's rate to ``swa_lr`` over ``anneal_epochs`` epochs (``cos`` or ``linear``), then hold
    it (torch's recurrence, which works from the current rate)."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for lr, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha) for group, lr in zip(self.optimizer.param_groups, prev_lrs)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)


__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn", "get_ema_avg_fn",
           "get_swa_avg_fn"]
