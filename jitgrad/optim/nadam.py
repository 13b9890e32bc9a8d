"""``jitgrad.optim.NAdam`` and ``RAdam``: Adam variants, torch's single-tensor rules as tensor ops (the step
count, bias corrections, NAdam's ``mu_product`` and RAdam's rectification are computed in the graph, so a
compiled step stays one graph; RAdam's ``rho_t > 5`` choice is a ``where``, not a Python branch).  Eagerly, a
group takes the multi-tensor path (:mod:`.multi_tensor_rules`: the same values, one NumPy update per parameter).

``foreach`` and ``capturable`` are accepted and recorded; they do not change the values (one algorithm, which
agrees with torch's variants to rounding).  ``differentiable=True`` is refused."""
from __future__ import annotations

from ..ir import dtypes as dt
from ..library import elementary as F
from ..runtime import grad_mode
from . import multi_tensor
from .multi_tensor_rules import NADAM, RADAM
from .optimizer import Optimizer, _check_adam_args, _check_unsupported, _lerp_, _scalar, _zeros_like


def _decay(p, g, group, lr):
    """Weight decay: L2 added to the gradient, or decoupled (``p *= 1 - lr * weight_decay``)."""
    if group["weight_decay"] != 0:     # (the branch on the number; the value a graph input once it changed)
        wd = group.hyper("weight_decay")
        if group["decoupled_weight_decay"]:
            p.mul_(1 - lr * wd)
        else:
            g = g + wd * p
    return g


class NAdam(Optimizer):
    """Like ``torch.optim.NAdam`` (Adam with Nesterov momentum): ``mu_t = beta1 * (1 - 0.5 * 0.96 **
    (step * momentum_decay))``, ``mu_product *= mu_t``; ``p -= lr * (1 - mu_t) / (1 - mu_product) * g / denom
    + lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * exp_avg / denom`` with ``denom = sqrt(exp_avg_sq /
    (1 - beta2**step)) + eps``.  ``decoupled_weight_decay`` gives NAdamW.  State: ``step``, ``mu_product``
    (0-d float32 tensors, as torch), ``exp_avg``, ``exp_avg_sq``.  ``foreach``/``capturable`` are accepted and
    change nothing (the same values); ``differentiable=True`` is refused."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    # changed by CyclicLR/OneCycleLR (beta1) or by hand: graph inputs of a compiled step once they change
    runtime_hypers = frozenset({"betas", "eps", "weight_decay", "momentum_decay"})

    def _initial_state(self, p, group):
        return {"step": _scalar(0.0, dt.DEFAULT_FLOAT),
                "mu_product": _scalar(1.0, dt.DEFAULT_FLOAT),
                "exp_avg": _zeros_like(p),
                "exp_avg_sq": _zeros_like(p)}

    @staticmethod
    def _momentum(beta1, momentum_decay, step):
        """``(mu_t, mu_{t+1})`` at the float64 step count ``step``."""
        return (beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay))),
                beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay))))

    @staticmethod
    def _coefficients(lr, mu, mu_next, mu_product):
        """The update's coefficients of ``g / denom`` and ``exp_avg / denom`` (``mu_product`` already updated)."""
        mp = mu_product.to(dt.float64)
        return -lr * (1.0 - mu) / (1.0 - mp), -lr * mu_next / (1.0 - mp * mu_next)

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule) ``(bias_correction2, the gradient's and
        exp_avg's coefficients)`` and the new ``mu_product``, by the tensor ops of the loop below."""
        step_t, mu_product = scalar_state
        (beta1, beta2), momentum_decay = group["betas"], group["momentum_decay"]
        step = step_t.to(dt.float64)
        bias_correction2 = 1 - beta2 ** step
        mu, mu_next = self._momentum(beta1, momentum_decay, step)
        new_mu_product = mu_product * mu.to(mu_product.dtype)
        c_grad, c_avg = self._coefficients(group.lr_tensor, mu, mu_next, new_mu_product)
        return (bias_correction2._data, c_grad._data, c_avg._data), (new_mu_product._data,)

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, NADAM):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, (beta1, beta2) = group.lr_tensor, group.hyper("betas")     # (tensors when dynamic in a trace)
                eps, momentum_decay = group.hyper("eps"), group.hyper("momentum_decay")
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    step_t, mu_product = state["step"], state["mu_product"]
                    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                    g = -p.grad if group["maximize"] else p.grad
                    step_t.add_(1)
                    step = step_t.to(dt.float64)
                    bias_correction2 = 1 - beta2 ** step
                    g = _decay(p, g, group, lr)
                    mu, mu_next = self._momentum(beta1, momentum_decay, step)
                    # torch multiplies the 0-d state by a Python float: in the state's dtype
                    mu_product.mul_(mu.to(mu_product.dtype))
                    _lerp_(exp_avg, g, 1 - beta1)
                    exp_avg_sq.mul_(beta2).add_(g * g * (1 - beta2))
                    denom = F.sqrt(exp_avg_sq / bias_correction2) + eps
                    c_grad, c_avg = self._coefficients(lr, mu, mu_next, mu_product)
                    p.add_(c_grad * (g / denom))
                    p.add_(c_avg * (exp_avg / denom))
        self._guard_trace()
        return loss


class RAdam(Optimizer):
    """Like ``torch.optim.RAdam`` (rectified Adam): Adam's moving averages; while the variance's degrees of
    freedom ``rho_t <= 5`` the step is the bias-corrected momentum ``p -= lr * exp_avg / (1 - beta1**step)``,
    after that it is scaled by the adaptive rate and the rectification term.  ``decoupled_weight_decay`` gives
    RAdamW.  State: ``step``, ``exp_avg``, ``exp_avg_sq``.  ``foreach``/``capturable`` are accepted and change
    nothing (the same values); ``differentiable=True`` is refused."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    # changed by CyclicLR/OneCycleLR (beta1) or by hand: graph inputs of a compiled step once they change
    runtime_hypers = frozenset({"betas", "eps", "weight_decay"})

    def _initial_state(self, p, group):
        return {"step": _scalar(0.0, dt.DEFAULT_FLOAT), "exp_avg": _zeros_like(p), "exp_avg_sq": _zeros_like(p)}

    @staticmethod
    def _rectification(beta1, beta2, step):
        """``(bias_correction1, bias_correction2, rho_t, rect)`` at the float64 step count ``step``."""
        rho_inf = 2 / (1 - beta2) - 1
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        # the rectification is only used where rho_t > 5 (its square root's argument is positive)
        rect = F.sqrt(F.clamp((rho_t - 4) * (rho_t - 2) * rho_inf
                              / ((rho_inf - 4) * (rho_inf - 2) * rho_t), min=0.0))
        return bias_correction1, bias_correction2, rho_t, rect

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule) ``(bias_correction1,
        sqrt(bias_correction2), rect, rho_t > 5)``, by the tensor ops of the loop below."""
        bc1, bc2, rho_t, rect = self._rectification(*group["betas"], scalar_state[0].to(dt.float64))
        return (bc1._data, F.sqrt(bc2)._data, rect._data, bool(rho_t._data > 5.0)), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, RADAM):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, (beta1, beta2), eps = group.lr_tensor, group.hyper("betas"), group.hyper("eps")
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    step_t, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
                    g = -p.grad if group["maximize"] else p.grad
                    step_t.add_(1)
                    step = step_t.to(dt.float64)
                    g = _decay(p, g, group, lr)
                    _lerp_(exp_avg, g, 1 - beta1)
                    exp_avg_sq.mul_(beta2).add_(g * g * (1 - beta2))
                    bias_correction1, bias_correction2, rho_t, rect = self._rectification(beta1, beta2, step)
                    bias_corrected_exp_avg = exp_avg / bias_correction1
                    adaptive_lr = F.sqrt(bias_correction2) / (F.sqrt(exp_avg_sq) + eps)
                    plain = bias_corrected_exp_avg * lr
                    p.sub_(F.where(rho_t > 5.0, plain * adaptive_lr * rect, plain))
        self._guard_trace()
        return loss


__all__ = ["NAdam", "RAdam"]
