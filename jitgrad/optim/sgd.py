"""``jitgrad.optim.SGD``: stochastic gradient descent with momentum, dampening, Nesterov, weight decay."""
from __future__ import annotations

from ..jit.guards import is_compiling
from ..runtime import grad_mode
from . import multi_tensor
from .multi_tensor_rules import SGD as _SGD_RULE
from .optimizer import Optimizer, _check_unsupported, _zeros_like


class SGD(Optimizer):
    """Like ``torch.optim.SGD`` (its single-tensor algorithm, the CPU default):

    ``g = grad (+ weight_decay * p)``; with momentum ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g``
    on the first step), ``g = g + momentum * buf`` (nesterov) or ``g = buf``; ``p -= lr * g`` (``+=`` with
    ``maximize``).  State: ``momentum_buffer`` per parameter (when momentum != 0).

    >>> import jitgrad as jg
    >>> w = jg.nn.Parameter(jg.tensor([1.0, 2.0]))
    >>> opt = jg.optim.SGD([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w
    Parameter containing:
    tensor([0.8000, 1.6000], requires_grad=True)
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
                 foreach=None, differentiable=False, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        _check_unsupported(differentiable, fused=fused, foreach=foreach)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=maximize, foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    # changed by CyclicLR/OneCycleLR (momentum) or by hand: graph inputs of a compiled step once they change
    runtime_hypers = frozenset({"momentum", "weight_decay"})

    def _state_for(self, p, group):
        return self.state[p]        # (the momentum buffer is made by the per-parameter path's first step)

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss when given."""
        loss = self._run_closure(closure)
        before = self._trace_key() if is_compiling() else None
        first_copy = False
        eager = multi_tensor.eager_ready()
        with grad_mode.no_grad():
            for group in self.param_groups:
                if eager and multi_tensor.run_rule(self, group, _SGD_RULE):
                    continue        # every parameter updated by the multi-tensor path (same values)
                lr = group.lr_tensor
                wd, momentum, dampening = group["weight_decay"], group["momentum"], group["dampening"]
                wd_v, momentum_v = group.hyper("weight_decay"), group.hyper("momentum")    # (tensors when dynamic)
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = -p.grad if group["maximize"] else p.grad
                    if wd != 0:
                        g = g + wd_v * p
                    if momentum != 0:
                        state = self.state[p]
                        buf = state.get("momentum_buffer")
                        if buf is None:
                            if dampening == 0:
                                # momentum * 0 + g == g exactly: the same graph as every later step
                                buf = state["momentum_buffer"] = _zeros_like(p)
                                buf.mul_(momentum_v).add_(g)
                            else:
                                # torch's first step, buf = g whatever the dampening: a graph of its own; made
                                # inside a trace, the buffer gets its value after the call (a one-shot trace)
                                buf = state["momentum_buffer"] = g.clone()
                                first_copy = True
                        else:
                            buf.mul_(momentum_v).add_(g, alpha=1 - dampening)
                        g = g + momentum_v * buf if group["nesterov"] else buf
                    p.sub_(lr * g)
        # the first-step copy is a different graph from later steps: valid only while the buffers are absent
        self._guard_trace(before if first_copy else None)
        return loss


__all__ = ["SGD"]
