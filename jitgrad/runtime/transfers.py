"""Moving a tensor between devices as an op autograd differentiates: ``x.to("cuda")`` / ``x.cpu()`` record
``ToCopyBackward0``, whose backward moves the gradient back (a custom Function, so it sits above function.py; the
device table it reads is devices.py's).
"""
from __future__ import annotations

from ..ir.graph import Var
from .devices import backend, backend_of_payload
from .function import Function
from .tensor import Tensor


def transfer(t, device):
    """``t`` on ``device`` (a Device): itself if already there, else a copy that autograd differentiates
    (the gradient goes back to ``t``'s device, as torch's ``ToCopyBackward0``)."""
    src = t.device
    if src == device:
        return t
    if type(t._data) is Var:
        raise RuntimeError(f"jitgrad: moving a traced tensor between devices ({src} -> {device}) inside a "
                           "@jitgrad.compile function is not supported; move the arguments before the call, or use "
                           "@jitgrad.compile(device=...)")
    return ToCopy.apply(t, device)


def _move(payload, device):
    b = backend_of_payload(payload)
    host = payload if b is None else b.to_host(payload)
    if device.type == "cpu":
        return host
    return backend(device.type).to_device(host, device)


class ToCopy(Function):
    """The device move as a custom Function (its node is torch's ``ToCopyBackward0``)."""

    @staticmethod
    def forward(ctx, x, device):
        ctx.src = x.device
        return Tensor._make(_move(x._data, device))

    @staticmethod
    def backward(ctx, g):
        return transfer(g, ctx.src), None


ToCopy._op.grad_name = "ToCopyBackward0"


__all__ = ["transfer", "ToCopy"]
