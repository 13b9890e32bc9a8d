"""Scaled dot-product attention as one fused primitive: ``sdpa(q, k, v[, mask]; scale)``.

``out = softmax(q @ k^T * scale + mask) @ v`` over the last two dims, batch dims broadcast.  Eager CPU mode
runs it as three NumPy calls with one backward node; a trace or a device binds its decomposition (matmul, the
fused softmax, matmul), so compiled graphs hold only primitives codegen knows.  The mask is additive (0 where a
key takes part, -inf where it does not): ``F.scaled_dot_product_attention`` turns boolean masks and
``is_causal`` into one.  A row whose mask excludes every key gets weights 0 (output 0, gradient 0), as torch's
math kernel (``_safe_softmax``) gives.  The vjp recomputes the attention weights with jitgrad ops instead of
saving them, so it is itself differentiable (second order and beyond).
"""
from __future__ import annotations

import numpy as np

from .opdef import BY_TRANSPOSE, Aval, OpDef, OpError, broadcast_shapes, fmt_shape, register


def causal_additive(L, S, dtype):
    """The additive causal mask ``(L, S)`` in NumPy ``dtype``: 0 on and below the diagonal, -inf above."""
    return np.where(np.tri(L, S, 0, dtype=bool), 0.0, -np.inf).astype(dtype)


def check_qkv(name, avals):
    """Check query, key, value (and an additive mask, the 4th aval if present) for attention op ``name``;
    returns (batch shape, L, S).  The errors name the op and the shapes."""
    q, k, v = avals[:3]
    for what, a in (("query", q), ("key", k), ("value", v)):
        if a.ndim < 2 or not a.dtype.is_floating_point:
            raise OpError(f"{name}: {what} must be a floating point tensor with at least 2 dims, got "
                          f"{a.dtype.name}{fmt_shape(a.shape)}")
    if not q.dtype is k.dtype is v.dtype:
        raise OpError(f"{name}: Expected query, key, and value to have the same dtype, but got query.dtype: "
                      f"{q.dtype.name} key.dtype: {k.dtype.name} and value.dtype: {v.dtype.name} instead.")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise OpError(f"{name}: query {fmt_shape(q.shape)}, key {fmt_shape(k.shape)} and value {fmt_shape(v.shape)} "
                      f"do not fit (query and key need the same last dim, key and value the same sequence length)")
    batch = broadcast_shapes(name, [q.shape[:-2], k.shape[:-2], v.shape[:-2]])
    L, S = q.shape[-2], k.shape[-2]
    if len(avals) == 4:
        m = avals[3]
        if not m.dtype.is_floating_point:
            raise OpError(f"{name}: the additive mask must be floating point, got {m.dtype.name}")
        if broadcast_shapes(name, [m.shape, batch + (L, S)]) != batch + (L, S):
            raise OpError(f"{name}: the mask {fmt_shape(m.shape)} must broadcast to the scores' shape "
                          f"{fmt_shape(batch + (L, S))}")
    return batch, L, S


def _sdpa_rule(avals, params):
    if len(avals) not in (3, 4):
        raise OpError(f"sdpa: expected query, key, value and an optional mask, got {len(avals)} inputs")
    batch, L, S = check_qkv("sdpa", avals)
    return [Aval(batch + (L, avals[2].shape[-1]), avals[0].dtype)]


# the C functions under NumPy's Python wrappers (np.swapaxes, ndarray.max / .sum / .any: a frame or two per call)
_matmul, _exp, _divide, _where = np.matmul, np.exp, np.divide, np.where
_max_reduce, _add_reduce, _or_reduce = np.maximum.reduce, np.add.reduce, np.logical_or.reduce


def _sdpa_impl(q, k, v, mask=None, *, scale):
    s = _matmul(q, k.swapaxes(-1, -2))
    s *= s.dtype.type(scale)
    if mask is not None:
        s = s + mask.astype(s.dtype, copy=False)
    if s.shape[-1] == 0:                 # no key: every row is fully masked, output 0 (torch)
        return _matmul(s, v)
    m = _max_reduce(s, -1, None, None, True)
    dead = m == -np.inf                  # a fully masked row: weights 0 (torch's _safe_softmax), not nan
    any_dead = _or_reduce(dead, None)
    if any_dead:
        s = _where(dead, 0, s)
        m = _where(dead, 0, m)
    e = s - m
    _exp(e, out=e)
    p = _divide(e, _add_reduce(e, -1, None, None, True), out=e)
    if any_dead:
        p = _where(dead, 0, p)
    return _matmul(p, v)


def attention_weights(b, q, k, mask, scale):
    """``softmax(q @ k^T * scale + mask)`` with jitgrad ops (``b`` binds a primitive by name), rows that mask
    every key giving 0 as torch's ``_safe_softmax`` does; finite gradients there, to any order."""
    s = (q @ k.mT) * scale
    if s.shape[-1] == 0:        # no key: no weights (the output is 0)
        return s if mask is None else s + mask
    if mask is None:
        return b("softmax", s, axis=s.ndim - 1)
    s = s + mask
    dead = b("amax", s, axes=(s.ndim - 1,), keepdims=True).detach() == -np.inf
    p = b("softmax", s.where(dead.logical_not(), 0.0), axis=s.ndim - 1)
    return p.where(dead.logical_not(), 0.0)


def _sdpa_decompose(b, q, k, v, mask=None, *, scale):
    return attention_weights(b, q, k, mask, scale) @ v


def _sdpa_vjp(c, g):
    q, k, v = c.inputs[:3]
    mask = c.inputs[3] if len(c.inputs) == 4 else None
    scale = c.params["scale"]
    p = attention_weights(c.bind, q, k, mask, scale)
    grads = [None] * len(c.inputs)
    if c.needs_grad[2]:
        grads[2] = (p.mT @ g).sum_to_size(c.shapes[2])
    if any(c.needs_grad[:2]) or (mask is not None and c.needs_grad[3]):
        dp = g @ v.mT
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))       # softmax's vjp
        if c.needs_grad[0]:
            grads[0] = ((ds @ k) * scale).sum_to_size(c.shapes[0])
        if c.needs_grad[1]:
            grads[1] = ((ds.mT @ q) * scale).sum_to_size(c.shapes[1])
        if mask is not None and c.needs_grad[3]:
            grads[3] = ds.sum_to_size(c.shapes[3])
    return tuple(grads)


register(OpDef("sdpa", "linalg", _sdpa_rule, _sdpa_impl, _sdpa_vjp, saves_in=(0, 1, 2, 3), jvp=BY_TRANSPOSE,
               grad_name="ScaledDotProductAttentionBackward0", decompose=_sdpa_decompose,
               doc="sdpa(q, k, v[, mask]; scale): softmax(q @ k^T * scale + mask) @ v over the last two dims"))
