"""gradcheck's forward-mode checks beyond the Jacobian itself (``c``: gradcheck's context, its function, inputs,
differentiable positions and tolerances): torch's undefined-tangent check (``check_undefined_grad``: a zero
tangent and no tangent give the same output tangents) and batched forward grad check
(``check_batched_forward_grad``: ``jitgrad.func.vmap`` over jvps equals the jvps one by one).
"""
from __future__ import annotations

import numpy as np

from ..runtime.dual import DUALS
from ..runtime.tensor import Tensor
from .jacobians import GradcheckError, _FAST_SEED, _as_tuple, _fmt, forward_tangents

__all__ = ["undefined_tangent_check", "batched_forward_check"]


def undefined_tangent_check(c):
    """torch's check that forward mode treats a zero tangent and no tangent alike: with every differentiable input
    carrying a random tangent, each in turn is given a zero tangent, then none (a plain tensor); the outputs'
    tangents must agree wherever both runs give one."""
    if not c.diff_pos:
        return True
    rng = np.random.default_rng(_FAST_SEED)
    level = DUALS.enter()
    try:
        def dual(x, tangent):
            with DUALS.hidden():
                d = x.detach()
                d = d.view_as(d)
            level.set(d, tangent)
            return d

        args = list(c.inputs)
        for i in c.diff_pos:
            x = c.inputs[i]
            u = rng.random(x.numel())
            u /= np.linalg.norm(u) or 1.0
            args[i] = dual(x, Tensor._make(u.astype(x._data.dtype).reshape(x._data.shape)))
        for i in c.diff_pos:
            x, kept = c.inputs[i], args[i]
            args[i] = dual(x, Tensor._make(np.zeros_like(x._data)))
            with_zero = [o for o in _as_tuple(c.func(*args)) if _float_tensor(o)]
            args[i] = x.detach()
            without = [o for o in _as_tuple(c.func(*args)) if _float_tensor(o)]
            args[i] = kept
            for o_idx, (o1, o2) in enumerate(zip(with_zero, without)):
                t1, t2 = level.get(o1), level.get(o2)
                if t1 is None or t2 is None:
                    continue
                a1, a2 = t1.detach()._data, t2.detach()._data
                if not np.allclose(a1, a2, rtol=1e-5, atol=1e-8, equal_nan=False):
                    raise GradcheckError(f"Mismatch in tangent values for output with index: {o_idx} when input: {i} "
                                         f"has an undefined tangent value.  Got: {_fmt(a1)} but expected: "
                                         f"{_fmt(a2)}")
    finally:
        DUALS.exit(level)
    return True


def _float_tensor(o) -> bool:
    return isinstance(o, Tensor) and o.is_floating_point()


def batched_forward_check(c):
    """torch's batched forward grad check: the jvps of two random tangents per input, computed at once under
    ``jitgrad.func.vmap``, equal the jvps computed one by one."""
    from ..func import jvp, vmap
    rng = np.random.default_rng(_FAST_SEED)
    for k, i in enumerate(c.diff_pos):
        x = c.inputs[i]
        batch = Tensor._make(rng.standard_normal((2,) + tuple(x.shape)).astype(x._data.dtype))

        def push(t, k=k, i=i):
            def f(xi):
                args = list(c.inputs)
                args[i] = xi
                out = _as_tuple(c.func(*args))
                return tuple(out[p] for p in c.out_pos)
            return jvp(f, (x.detach(),), (t,))[1]
        try:
            batched = vmap(push)(batch)
        except Exception as e:  # noqa: BLE001 - torch's words, then the cause
            raise GradcheckError(f"While computing batched gradients, got: {e}\n\nbatched forward grad check "
                                 f"failed for input {i}") from e
        for b in range(2):
            one = forward_tangents(c.func, c.inputs, c.diff_pos, c.out_pos,
                                   [batch._data[b].reshape(-1) if j == k else None for j in range(len(c.diff_pos))],
                                   zero_tangents=False)
            for o_idx, t in enumerate(one):
                got = batched[o_idx].detach()._data[b].astype(np.float64).reshape(-1)
                if not np.allclose(got, t, rtol=c.rtol, atol=c.atol):
                    raise GradcheckError(f"For output {c.out_pos[o_idx]} and input {i}:\nForward-mode batched grad "
                                         f"computed using vmap does not match the forward grads computed one by one."
                                         f"\nGot: {_fmt(got)}\nExpected: {_fmt(t)}")
