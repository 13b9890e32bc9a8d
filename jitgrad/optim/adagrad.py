"""``jitgrad.optim.Adagrad``, ``Adadelta`` and ``Adamax``: torch's single-tensor update rules written as tensor
ops, with every per-step scalar (step counts, bias corrections) computed from the ``step`` state tensor in the
graph, so a training step that calls ``opt.step()`` compiles to one graph (see :mod:`.optimizer`).  Eagerly, a
group takes the multi-tensor path (:mod:`.multi_tensor_rules`: the same values, one NumPy update per parameter).

``foreach`` and ``capturable`` are accepted and recorded in the param groups as torch does; they do not change
the arithmetic here (one algorithm: torch's variants agree with it to rounding).  ``differentiable=True`` is
refused, as by the other jitgrad optimisers."""
from __future__ import annotations

from ..ir import dtypes as dt
from ..library.creation import factories
from ..library import elementary as F
from ..runtime import grad_mode
from ..jit.guards import outside_trace
from . import multi_tensor
from .multi_tensor_rules import ADADELTA, ADAGRAD, ADAMAX
from .optimizer import Optimizer, _check_adam_args, _check_lr, _check_unsupported, _lerp_, _scalar, _zeros_like


def _grad(p, group):
    return -p.grad if group["maximize"] else p.grad


class Adagrad(Optimizer):
    """Like ``torch.optim.Adagrad``: ``g = grad (+ weight_decay * p)``; ``sum += g * g``;
    ``p -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps)``.  State (made for every parameter when
    the optimiser is built, as torch does): ``step`` (0-d float32) and ``sum`` (starting at
    ``initial_accumulator_value``).  ``foreach`` and ``fused`` are accepted and change nothing (same values)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_lr(lr)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        _check_unsupported(differentiable, fused=fused, foreach=foreach)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._state_for(p, group)

    def _initial_state(self, p, group):
        step = _scalar(0.0, dt.DEFAULT_FLOAT)
        with outside_trace():
            total = factories.full(tuple(p.shape), float(group["initial_accumulator_value"]), dtype=p.dtype)
        return {"step": step, "sum": total}

    @staticmethod
    def _clr(lr, lr_decay, step_t):
        return lr / (1 + (step_t.to(dt.float64) - 1) * lr_decay)

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule), by the tensor ops of the loop below."""
        return (self._clr(group.lr_tensor, group["lr_decay"], scalar_state[0])._data,), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, ADAGRAD):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, wd, lr_decay, eps = group.lr_tensor, group["weight_decay"], group["lr_decay"], group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    step_t, state_sum = state["step"], state["sum"]
                    step_t.add_(1)
                    g = _grad(p, group)
                    if wd != 0:
                        g = g + wd * p
                    clr = self._clr(lr, lr_decay, step_t)
                    state_sum.add_(g * g)
                    std = F.sqrt(state_sum) + eps
                    p.sub_(clr * (g / std))
        self._guard_trace()
        return loss


class Adadelta(Optimizer):
    """Like ``torch.optim.Adadelta``: ``square_avg = rho * square_avg + (1 - rho) * g**2``;
    ``delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g``;
    ``acc_delta = rho * acc_delta + (1 - rho) * delta**2``; ``p -= lr * delta``.  State: ``step``,
    ``square_avg``, ``acc_delta``.  ``foreach``/``capturable`` are accepted and change nothing (same values)."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _initial_state(self, p, group):
        return {"step": _scalar(0.0, dt.DEFAULT_FLOAT), "square_avg": _zeros_like(p), "acc_delta": _zeros_like(p)}

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule): none but ``lr``."""
        return (), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, ADADELTA):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, rho, eps, wd = group.lr_tensor, group["rho"], group["eps"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    square_avg, acc_delta = state["square_avg"], state["acc_delta"]
                    state["step"].add_(1)
                    g = _grad(p, group)
                    if wd != 0:
                        g = g + wd * p
                    square_avg.mul_(rho).add_(g * g * (1 - rho))
                    std = F.sqrt(square_avg + eps)
                    delta = F.sqrt(acc_delta + eps) / std * g
                    acc_delta.mul_(rho).add_(delta * delta * (1 - rho))
                    p.sub_(lr * delta)
        self._guard_trace()
        return loss


class Adamax(Optimizer):
    """Like ``torch.optim.Adamax`` (Adam with the infinity norm): ``exp_avg`` moving average of g;
    ``exp_inf = max(beta2 * exp_inf, |g| + eps)``; ``p -= lr / (1 - beta1**step) * exp_avg / exp_inf``.
    State: ``step``, ``exp_avg``, ``exp_inf``.  ``foreach``/``capturable`` are accepted and change nothing."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    # changed by CyclicLR/OneCycleLR (beta1) or by hand: graph inputs of a compiled step once they change
    runtime_hypers = frozenset({"betas", "eps", "weight_decay"})

    def _initial_state(self, p, group):
        return {"step": _scalar(0.0, dt.DEFAULT_FLOAT), "exp_avg": _zeros_like(p), "exp_inf": _zeros_like(p)}

    @staticmethod
    def _clr(lr, beta1, step_t):
        return lr / (1 - beta1 ** step_t.to(dt.float64))

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule), by the tensor ops of the loop below."""
        return (self._clr(group.lr_tensor, group["betas"][0], scalar_state[0])._data,), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, ADAMAX):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, (beta1, beta2) = group.lr_tensor, group.hyper("betas")     # (tensors when dynamic in a trace)
                eps, wd, wd_v = group.hyper("eps"), group["weight_decay"], group.hyper("weight_decay")
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    step_t, exp_avg, exp_inf = state["step"], state["exp_avg"], state["exp_inf"]
                    step_t.add_(1)
                    g = _grad(p, group)
                    if wd != 0:
                        g = g + wd_v * p
                    _lerp_(exp_avg, g, 1 - beta1)
                    exp_inf.copy_(F.maximum(exp_inf * beta2, F.abs(g) + eps))
                    clr = self._clr(lr, beta1, step_t)
                    p.sub_(clr * (exp_avg / exp_inf))
        self._guard_trace()
        return loss


__all__ = ["Adagrad", "Adadelta", "Adamax"]
