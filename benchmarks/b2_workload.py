"""B2's workload, defined once for the scripts that time it (b2_elementwise.py, b2_breakdown.py, codegen_fresh.py,
busy_machine.py, b8_as_users_run_it.py): ``loss = sum(tanh(x*w + b) * sigmoid(x))`` over ``N`` float32 elements
and its gradients w.r.t. ``w`` and ``b``; the inputs, the float64 NumPy reference and the output check.

The scripts' child processes import it by name (their ``PYTHONPATH`` or ``sys.path`` holds this folder).
"""
from __future__ import annotations

import numpy as np

N = 4_000_000


def inputs(n=N):
    """``(x, w, b)``: float32 NumPy arrays of ``n`` standard-normal values (seed 0)."""
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(n, dtype=np.float32) for _ in range(3))


def reference(x, w, b):
    """``(loss, grad w, grad b)`` computed in float64 by NumPy."""
    xd, wd, bd = (a.astype(np.float64) for a in (x, w, b))
    t = np.tanh(xd * wd + bd)
    s = 1 / (1 + np.exp(-xd))
    gb = s * (1 - t * t)
    return (t * s).sum(), gb * xd, gb


def matches(got, ref) -> bool:
    """Whether ``got`` = (loss, grad w, grad b) (a float and NumPy arrays) is ``ref``: the loss to 1e-4 of its
    magnitude, the gradients to 1e-5."""
    loss, gw, gb = got
    return bool(abs(loss - ref[0]) <= 1e-4 * max(1.0, abs(ref[0])) and np.abs(gw - ref[1]).max() <= 1e-5
                and np.abs(gb - ref[2]).max() <= 1e-5)


def step(lib):
    """B2's step written against ``lib`` (jitgrad; torch has the same names): the detached loss and the
    gradients of ``w`` and ``b``."""
    def b2(x, w, b):
        loss = (lib.tanh(x * w + b) * lib.sigmoid(x)).sum()
        gw, gb = lib.autograd.grad(loss, [w, b])
        return loss.detach(), gw, gb
    return b2


def floor_kernel():
    """The memory-traffic floor: a parallel Numba loop reading ``x, w, b`` and writing two preallocated arrays
    (the bytes B2 moves, no arithmetic to speak of); ``k(x, w, b, o1, o2)``."""
    import numba

    @numba.njit(parallel=True, fastmath=True)
    def k(x, w, b, o1, o2):
        for i in numba.prange(x.size):
            o1[i] = x[i] + w[i]
            o2[i] = w[i] + b[i]
    return k
