"""``jitgrad.optim.RMSprop``."""
from __future__ import annotations

from ..ir import dtypes as dt
from ..library import elementary as F
from ..runtime import grad_mode
from . import multi_tensor
from .multi_tensor_rules import RMSPROP
from .optimizer import Optimizer, _check_unsupported, _scalar, _zeros_like


class RMSprop(Optimizer):
    """Like ``torch.optim.RMSprop`` (single-tensor algorithm): ``square_avg = alpha * square_avg + (1 - alpha)
    * g**2``; ``centered`` subtracts the square of ``grad_avg`` (a moving average of g); ``avg = sqrt(...) +
    eps``; with momentum ``buf = momentum * buf + g / avg``, ``p -= lr * buf``, else ``p -= lr * g / avg``.
    State: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered): tensors, all
    starting at zero, so the first step is the same graph as the others."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if alpha < 0.0:
            raise ValueError(f"Invalid alpha value: {alpha}")
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay,
                        capturable=capturable, foreach=foreach, maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    # graph inputs of a compiled step once they change (a scheduler cycling momentum, a hand edit)
    runtime_hypers = frozenset({"alpha", "eps", "weight_decay", "momentum"})

    def _initial_state(self, p, group):
        state = {"step": _scalar(0.0, dt.DEFAULT_FLOAT), "square_avg": _zeros_like(p)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = _zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = _zeros_like(p)
        return state

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule): none but ``lr``."""
        return (), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, RMSPROP):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr = group.lr_tensor
                wd, momentum = group["weight_decay"], group["momentum"]
                # (tensors when dynamic inside a trace; the branches read the plain values)
                alpha, eps, wd_v, momentum_v = (group.hyper(k) for k in ("alpha", "eps", "weight_decay", "momentum"))
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = -p.grad if group["maximize"] else p.grad
                    state = self._state_for(p, group)
                    state["step"].add_(1)
                    if wd != 0:
                        g = g + wd_v * p
                    square_avg = state["square_avg"]
                    square_avg.mul_(alpha).add_(g * g * (1 - alpha))
                    if group["centered"]:
                        grad_avg = state["grad_avg"]
                        grad_avg.add_((g - grad_avg) * (1 - alpha))     # lerp_(g, 1 - alpha)
                        avg = F.sqrt(square_avg - grad_avg * grad_avg)
                    else:
                        avg = F.sqrt(square_avg)
                    avg = avg + eps
                    if momentum > 0:
                        buf = state["momentum_buffer"]
                        buf.mul_(momentum_v).add_(g / avg)
                        p.sub_(lr * buf)
                    else:
                        p.sub_(lr * (g / avg))
        self._guard_trace()
        return loss


__all__ = ["RMSprop"]
