"""``jitgrad.optim.Adafactor``: torch's single-tensor rule as tensor ops (its ``.item()`` scalars, the relative
step size and the update clipping, are 0-d tensors in the graph here, so a compiled step stays one graph).

``foreach`` is accepted and recorded; it does not change the values."""
from __future__ import annotations

import math

import numpy as np

from ..ir import dtypes as dt
from ..library import elementary as F
from ..runtime import grad_mode
from .optimizer import Optimizer, _lerp_, _scalar, _zeros_like
from ..jit.guards import outside_trace
from ..library.creation import factories


class Adafactor(Optimizer):
    """Like ``torch.optim.Adafactor``: the second moment of a matrix-shaped (or higher) gradient is kept
    factored, as row and column means of ``g**2`` (``row_var``, ``col_var``, averaged with weight
    ``step**beta2_decay``); vectors keep a full ``variance``.  The update ``g / sqrt(var)`` is scaled by
    ``max(eps2, rms(p)) * min(lr, 1 / sqrt(step))`` and clipped to RMS ``d``; ``weight_decay`` is decoupled.
    ``eps = (eps1, eps2)``, ``eps1=None`` meaning the parameter dtype's machine epsilon.  State: ``step``,
    ``row_var`` and ``col_var`` (or ``variance``).  ``foreach`` is accepted and changes nothing (the same
    values)."""

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        from ..runtime.tensor import Tensor
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize)
        super().__init__(params, defaults)

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        with grad_mode.no_grad():
            for group in self.param_groups:
                lr, beta2_decay, d, wd = group.lr_tensor, group["beta2_decay"], group["d"], group["weight_decay"]
                eps1, eps2 = group["eps"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = -p.grad if group["maximize"] else p.grad
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = _scalar(0.0, dt.DEFAULT_FLOAT)
                        if g.dim() > 1:
                            row_shape, col_shape = list(g.shape), list(g.shape)
                            row_shape[-1], col_shape[-2] = 1, 1
                            with outside_trace():
                                state["row_var"] = factories.zeros(*row_shape, dtype=g.dtype)
                                state["col_var"] = factories.zeros(*col_shape, dtype=g.dtype)
                        else:
                            state["variance"] = _zeros_like(g)
                    if eps1 is None:        # as torch: the first parameter's dtype fixes it for the group
                        eps1 = float(np.finfo(p.dtype.np).eps)
                    step_t = state["step"]
                    step_t.add_(1)
                    step = step_t.to(dt.float64)
                    one_minus_beta2_t = step ** beta2_decay
                    rho_t = F.minimum(lr, 1 / step ** 0.5)
                    rms = p.norm(2).to(dt.float64) / math.sqrt(p.numel())
                    alpha = F.clamp(rms, min=eps2) * rho_t
                    if wd != 0:
                        p.mul_(1 - lr * wd)
                    if g.dim() > 1:
                        row_var, col_var = state["row_var"], state["col_var"]
                        row_mean = F.norm(g, dim=-1, keepdim=True).square() / g.size(-1)
                        _lerp_(row_var, row_mean, one_minus_beta2_t)
                        col_mean = F.norm(g, dim=-2, keepdim=True).square() / g.size(-2)
                        _lerp_(col_var, col_mean, one_minus_beta2_t)
                        var_estimate = row_var @ col_var
                        var_estimate = var_estimate / F.clamp(row_var.mean(dim=-2, keepdim=True), min=eps1)
                    else:
                        variance = state["variance"]
                        _lerp_(variance, g * g, one_minus_beta2_t)
                        var_estimate = variance
                    update = F.rsqrt(F.clamp(var_estimate, min=eps1 * eps1)) * g
                    denom = F.clamp(update.norm(2).to(dt.float64) / (math.sqrt(update.numel()) * d), min=1.0)
                    p.sub_((alpha / denom) * update)
        self._guard_trace()
        return loss


__all__ = ["Adafactor"]
