"""The elementwise-chain workloads, one home for the benchmarks that time them (``codegen_fresh.py``) and the
tests that count their compile work (``tests/test_compile_scaling.py``).

- ``tanh_scale_step(n)``: ``n`` ops alternating ``* 1.0001`` and ``tanh`` and the backward of their sum: a long
  chain whose graph (forward and backward) grows linearly with ``n``; ``tanh_scale_reference`` is its value in
  NumPy float64.
- ``mixed_chain``: 16 ops cycling ``tanh``, ``sigmoid``, ``* 1.5`` (a forward-only chain: one fused loop).
"""
from __future__ import annotations

import numpy as np


def tanh_scale_step(n):
    """A step function ``step(x)``: ``y = x`` then ``n`` ops (``y * 1.0001`` at even positions, ``y.tanh()`` at
    odd ones), ``y.sum().backward()`` (so ``x.grad`` fills when ``x`` requires grad); returns ``y.detach()``."""
    def step(x):
        y = x
        for i in range(n):
            y = y.tanh() if i % 2 else y * 1.0001
        y.sum().backward()
        return y.detach()
    return step


def tanh_scale_reference(x, n):
    """``tanh_scale_step(n)``'s value for the NumPy array ``x``, in float64."""
    want = np.asarray(x, dtype=np.float64)
    for i in range(n):
        want = np.tanh(want) if i % 2 else want * 1.0001
    return want


def mixed_chain(x, n=16):
    """``n`` ops cycling ``tanh``, ``sigmoid``, ``* 1.5`` on ``x``."""
    for i in range(n):
        x = x.tanh() if i % 3 == 0 else (x.sigmoid() if i % 3 == 1 else x * 1.5)
    return x
