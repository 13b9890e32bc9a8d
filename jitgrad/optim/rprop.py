"""``jitgrad.optim.Rprop`` and ``ASGD``: torch's single-tensor rules as tensor ops.  torch's data-dependent
pieces (Rprop's masked assignments, ASGD's ``mu != 1`` test) are written with ``where``, which gives the same
values eagerly and keeps a compiled step one graph.  Eagerly, a group takes the multi-tensor path
(:mod:`.multi_tensor_rules`: the same values, one NumPy update per parameter).

``foreach`` and ``capturable`` are accepted and recorded; they do not change the values.
``differentiable=True`` is refused."""
from __future__ import annotations

from ..ir import dtypes as dt
from ..jit.guards import outside_trace
from ..library.creation import factories
from ..library import elementary as F
from ..runtime import grad_mode
from . import multi_tensor
from .multi_tensor_rules import ASGD as _ASGD_RULE, RPROP
from .optimizer import Optimizer, _as_float, _check_lr, _check_unsupported, _scalar, _zeros_like


class Rprop(Optimizer):
    """Like ``torch.optim.Rprop`` (resilient backpropagation): per element, the step size grows by
    ``etaplus`` while the gradient keeps its sign and shrinks by ``etaminus`` when it flips (clamped to
    ``step_sizes``); after a flip the gradient is taken as zero for that step; ``p -= sign(g) * step_size``.
    State: ``step``, ``prev`` (the last gradient used), ``step_size`` (starting at ``lr``).
    ``foreach``/``capturable`` are accepted and change nothing (the same values); ``differentiable=True`` is
    refused."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False,
                 foreach=None, maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _initial_state(self, p, group):
        state = {"step": _scalar(0.0, dt.DEFAULT_FLOAT), "prev": _zeros_like(p)}
        with outside_trace():
            state["step_size"] = factories.full(tuple(p.shape), _as_float(group["lr"]), dtype=p.dtype)
        return state

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule): none."""
        return (), ()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, RPROP):
                    continue        # every parameter updated by the multi-tensor path (same values)
                etaminus, etaplus = group["etas"]
                step_size_min, step_size_max = group["step_sizes"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    prev, step_size = state["prev"], state["step_size"]
                    state["step"].add_(1)
                    g = -p.grad if group["maximize"] else p.grad
                    sign = F.sign(g * prev)
                    flipped = sign < 0
                    # torch's step_size.mul_(sign with etaplus / etaminus / 1 written in): the same products
                    step_size.copy_(F.where(sign > 0, step_size * etaplus,
                                            F.where(flipped, step_size * etaminus, step_size)))
                    step_size.clamp_(step_size_min, step_size_max)
                    g = F.where(flipped, 0.0, g)
                    p.sub_(F.sign(g) * step_size)
                    prev.copy_(g)
        self._guard_trace()
        return loss


class ASGD(Optimizer):
    """Like ``torch.optim.ASGD`` (averaged SGD): ``p *= 1 - lambd * eta``; ``p -= eta * g``; the average ``ax``
    follows ``p`` (``ax += mu * (p - ax)``, a copy while ``mu == 1``); then ``eta = lr / (1 + lambd * lr *
    step) ** alpha`` and ``mu = 1 / max(1, step - t0)``.  State: ``step``, ``eta``, ``mu`` (0-d float32, as
    torch), ``ax``.  ``foreach``/``capturable`` are accepted and change nothing (the same values);
    ``differentiable=True`` is refused."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
                 maximize=False, differentiable=False, capturable=False):
        _check_lr(lr)
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _check_unsupported(differentiable)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def _initial_state(self, p, group):
        return {"step": _scalar(0.0, dt.DEFAULT_FLOAT),
                "eta": _scalar(_as_float(group["lr"]), dt.DEFAULT_FLOAT),
                "mu": _scalar(1.0, dt.DEFAULT_FLOAT),
                "ax": _zeros_like(p)}

    @staticmethod
    def _next_eta_mu(lr, lambd, alpha, t0, step_t):
        """The next ``(eta, mu)`` (float32 0-d tensors) after step count ``step_t``."""
        step = step_t.to(dt.float64)
        # torch.as_tensor(python float): the new values are float32, whatever the state's dtype
        return ((lr / ((1 + lambd * lr * step) ** alpha)).to(dt.DEFAULT_FLOAT),
                (1 / F.clamp(step - t0, min=1.0)).to(dt.DEFAULT_FLOAT))

    def _multi_tensor_scalars(self, group, scalar_state):
        """The multi-tensor path's per-step scalars (multi_tensor.Rule) ``(1 - lambd * eta, eta, mu, mu == 1)``
        (the values before this step's) and the new ``eta`` and ``mu``, by the tensor ops of the loop below."""
        step_t, eta, mu = scalar_state
        lambd = group["lambd"]
        eta_value = eta.to(dt.float64)
        new_eta, new_mu = self._next_eta_mu(group.lr_tensor, lambd, group["alpha"], group["t0"], step_t)
        # (copies: run_rule writes the new values into the state before the arrays are updated)
        return ((1 - lambd * eta_value)._data, eta_value._data.copy(), mu._data.copy(), float(mu._data) == 1), \
            (new_eta._data, new_mu._data)

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, _ASGD_RULE):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr, lambd, alpha, t0 = group.lr_tensor, group["lambd"], group["alpha"], group["t0"]
                wd = group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self._state_for(p, group)
                    step_t, eta, mu, ax = state["step"], state["eta"], state["mu"], state["ax"]
                    g = -p.grad if group["maximize"] else p.grad
                    step_t.add_(1)
                    if wd != 0:
                        g = g + wd * p
                    eta_value = eta.to(dt.float64)
                    p.mul_(1 - lambd * eta_value)
                    p.sub_(eta_value * g)
                    ax.copy_(F.where(mu == 1, p, ax + (p - ax) * mu))
                    new_eta, new_mu = self._next_eta_mu(lr, lambd, alpha, t0, step_t)
                    eta.copy_(new_eta)
                    mu.copy_(new_mu)
        self._guard_trace()
        return loss


__all__ = ["Rprop", "ASGD"]
