"""``F.scaled_dot_product_attention``: torch's signature and errors over the fused ``sdpa`` primitive
(``ir/ops/attention.py``)."""
from __future__ import annotations

import math

import numpy as np

from ..ir.ops import OPS as O
from ..ir.ops.attention import attention_weights
from ..runtime.dispatch import bind
from ..runtime.tensor import Tensor
from .dropout import dropout

_CAUSAL: dict = {}     # (L, S, numpy dtype) -> additive causal mask, 0 on and below the diagonal, -inf above


def _causal_mask(L, S, dtype):
    key = (L, S, dtype)
    m = _CAUSAL.get(key)
    if m is None:
        a = np.where(np.tri(L, S, 0, dtype=bool), 0.0, -np.inf).astype(dtype)
        a.flags.writeable = False
        if len(_CAUSAL) > 64:
            _CAUSAL.clear()
        m = _CAUSAL[key] = Tensor._make(a)
    return m


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(query @ key^T * scale + mask) @ value`` over the last two dims (torch's math definition).

    ``attn_mask``: boolean (True: the key takes part) or additive float, broadcast to ``(..., L, S)``;
    ``is_causal``: the lower-triangular mask (no ``attn_mask`` with it); ``scale``: default
    ``1 / sqrt(E)``; ``dropout_p``: dropout on the attention weights (always applied, as in torch: pass 0.0 in
    eval mode).  Differentiable to any order."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be Tensor, not "
                            f"{type(t).__name__}")
    if enable_gqa:
        from ..runtime.torch_surface import UnsupportedError
        raise UnsupportedError("jitgrad does not support the argument 'enable_gqa=True' of "
                               "nn.functional.scaled_dot_product_attention() yet")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    L, S = query.shape[-2] if query.ndim >= 2 else 1, key.shape[-2] if key.ndim >= 2 else 1
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    mask = None
    if is_causal:
        mask = _causal_mask(L, S, np.dtype(query.dtype.np))
    elif attn_mask is not None:
        if attn_mask.dtype.name == "bool":     # True: takes part (0 added), False: -inf
            zero = Tensor._make(np.zeros(attn_mask.shape, np.dtype(query.dtype.np)))
            mask = zero.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            mask = attn_mask
    if dropout_p > 0.0:     # dropout sits between the softmax and the product: the composition, no fused op
        weights = attention_weights(lambda name, *a, **p: bind(O[name], *a, **p), query, key, mask, sc)
        return dropout(weights, dropout_p, True) @ value
    args = (query, key, value) if mask is None else (query, key, value, mask)
    return bind(O["sdpa"], *args, scale=sc)


__all__ = ["scaled_dot_product_attention"]
