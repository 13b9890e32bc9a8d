"""``jitgrad.optim.Adam`` and ``AdamW``."""
from __future__ import annotations

from ..ir import dtypes as dt
from ..library import elementary as F
from ..runtime import grad_mode
from . import multi_tensor
from .multi_tensor_rules import ADAM
from .optimizer import Optimizer, _check_adam_args, _check_unsupported, _scalar, _zeros_like


class Adam(Optimizer):
    """Like ``torch.optim.Adam`` (its single-tensor algorithm, the CPU default).  Per parameter:
    ``step += 1``; ``g = grad (+ weight_decay * p)`` (or ``p *= 1 - lr * weight_decay`` when
    ``decoupled_weight_decay``); ``exp_avg`` and ``exp_avg_sq`` moving averages; with ``amsgrad`` the running
    maximum of ``exp_avg_sq``; ``p -= lr / (1 - beta1**step) * exp_avg / (sqrt(v) / sqrt(1 - beta2**step) + eps)``.
    State: ``step`` (0-d float32 tensor, as torch), ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``), all
    tensors, so a compiled step reads and writes them as graph state; bias corrections are computed from the
    ``step`` tensor inside the graph."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        _check_adam_args(lr, betas, eps, weight_decay)
        _check_unsupported(differentiable, fused=fused, foreach=foreach)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable,
                        fused=fused, decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    # changed by CyclicLR/OneCycleLR (beta1) or by hand: graph inputs of a compiled step once they change
    runtime_hypers = frozenset({"betas", "eps", "weight_decay"})

    def _state_for(self, p, group):
        amsgrad = group["amsgrad"]
        state = self.state[p]
        if len(state) == 0:      # made concretely, even inside a trace: zeros are the first step's input
            state["step"] = _scalar(0.0, dt.DEFAULT_FLOAT)
            state["exp_avg"] = _zeros_like(p)
            state["exp_avg_sq"] = _zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = _zeros_like(p)
        elif amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = _zeros_like(p)
        return state

    @staticmethod
    def _step_scalars(lr, beta1, beta2, step_t):
        """(step_size, sqrt(bias_correction2)) as 0-d float64 arrays, by the tensor ops of the loop below."""
        step = step_t.to(dt.float64)
        return (lr / (1 - beta1 ** step))._data, F.sqrt(1 - beta2 ** step)._data

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule)."""
        beta1, beta2 = group["betas"]
        return self._step_scalars(group.lr_tensor, beta1, beta2, scalar_state[0]), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, ADAM):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr = group.lr_tensor
                wd, amsgrad = group["weight_decay"], group["amsgrad"]
                wd_v = group.hyper("weight_decay")
                beta1, beta2 = group.hyper("betas")     # (tensors when dynamic inside a trace)
                eps = group.hyper("eps")
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = -p.grad if group["maximize"] else p.grad
                    state = self._state_for(p, group)
                    step_t, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
                    step_t.add_(1)
                    if wd != 0:
                        if group["decoupled_weight_decay"]:
                            p.mul_(1 - lr * wd_v)
                        else:
                            g = g + wd_v * p
                    exp_avg.add_((g - exp_avg) * (1 - beta1))          # lerp_(g, 1 - beta1)
                    exp_avg_sq.mul_(beta2).add_(g * g * (1 - beta2))   # addcmul_(g, g, value=1 - beta2)
                    step = step_t.to(dt.float64)
                    bias_correction1 = 1 - beta1 ** step
                    bias_correction2_sqrt = F.sqrt(1 - beta2 ** step)
                    step_size = lr / bias_correction1
                    if amsgrad:
                        m = state["max_exp_avg_sq"]
                        m.copy_(F.maximum(m, exp_avg_sq))
                        denom = F.sqrt(m) / bias_correction2_sqrt + eps
                    else:
                        denom = F.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
                    p.sub_(step_size * (exp_avg / denom))
        self._guard_trace()
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``, default ``weight_decay=1e-2``):
    ``p *= 1 - lr * weight_decay`` before the Adam update."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)


__all__ = ["Adam", "AdamW"]
