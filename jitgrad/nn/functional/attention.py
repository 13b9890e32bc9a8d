"""``F.scaled_dot_product_attention``: torch's signature and errors over the fused ``sdpa`` primitive
(``ir/ops/attention.py``), or, for long sequences, the key-tiled ``sdpa_tiled`` (``ir/ops/tiled_attention.py``).

The choice is made per call from the size of the score matrix the untiled path would hold (see ``TILING``): at
or above ``TILING.min_score_bytes`` the tiled primitives run (eager, and in traces: a compiled graph then holds
``sdpa_tiled`` as one host step, BLAS per block), below it the fused op (eager) or its decomposition (traced).
Tensors on a device always take the decomposition (the device's kernels).  Dropout (``0 < dropout_p < 1``) is
tiled too (each block draws its part of the same Philox draw, so the mask is bit for bit the untiled path's),
from the eager threshold in eager mode but, traced, only from ``TILING.traced_dropout_min_score_bytes``: the
composition's draw is a fused Numba loop, NumPy's Philox in a host step roughly doubles the step.
``F.multi_head_attention_forward`` (the forward of ``nn.MultiheadAttention``), with torch's parameters, masks and
errors, is a composition of existing ops (linear, reshape, cat, softmax, ``F.scaled_dot_product_attention``).  As
torch does, it takes the fused ``scaled_dot_product_attention`` when the weights are not asked for, and the
explicit softmax when they are.  Masks follow torch's convention: in a bool mask ``True`` means "may not attend"
(the opposite of ``scaled_dot_product_attention``'s), a float mask is added to the scores.  torch's native "fast
path" (inference only) computes the same numbers as this ordinary path, so jitgrad has only the latter.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ...ir.ops.attention import causal_additive, attention_weights
from ...ir.ops.opdef import OpError, broadcast_shapes
from ...ir.ops.tiled_attention import packed_sizes
from ...library.creation import factories
from ...library import elementary as F
from ...runtime.devices import backend_of_payload
from ...runtime.dispatch import bind
from ...runtime.generator import generator_of
from ...runtime.symbolic_values import arange as symbolic_arange, symbolic_size
from ...library.shaping.views import cat
from ...runtime.tensor import Tensor
from ...tracer import STATE as _TR
from ..attention import TILING
from .dropouts import dropout as _dropout, dropout
from .linear_forms import linear
from .padding import pad


def _size(shape):
    """A shape as torch prints it in its messages."""
    return f"torch.Size({list(shape)})"


def _canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
    """A bool mask (True: masked) as an additive float mask of ``target_type`` (0 or -inf); a float mask as is.
    Warns, as torch, when the mask's dtype differs from its companion's (``other_type``)."""
    if mask is None:
        return None
    is_float = mask.is_floating_point()
    if mask.dtype.name != "bool" and not is_float:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask.dtype is not other_type:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for both "
                      "instead.", stacklevel=2)
    if not is_float:
        mask = factories.zeros(*mask.shape, dtype=target_type, device=mask.device).masked_fill(mask, -math.inf)
    return mask


def _none_or_dtype(t):
    return None if t is None else t.dtype


def _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """torch's ``_mha_shape_check``: whether the input is batched (3-D query) or not (2-D), with its errors."""
    if query.dim() == 3:
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError("For batched (3-D) `query`, expected `key` and `value` to be 3-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError("For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError("For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but "
                                 f"found {attn_mask.dim()}-D tensor instead")
        return True
    if query.dim() == 2:
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError("For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found "
                                 f"{key.dim()}-D and {value.dim()}-D tensors respectively")
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError("For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D but "
                                 f"found {key_padding_mask.dim()}-D tensor instead")
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError("For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                                     f"but found {attn_mask.dim()}-D tensor instead")
            expected = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
                raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got {_size(attn_mask.shape)}")
        return False
    raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D query "
                         "tensor")


def _in_projection_packed(q, k, v, w, b):
    """q, k, v through the three row blocks of the packed ``w`` (and ``b``): one product for self-attention
    (q is k is v), two for encoder-decoder attention (k is v), three otherwise."""
    E = q.shape[-1]
    if k is v:
        if q is k:
            return linear(q, w, b).chunk(3, dim=-1)
        w_q, w_kv = w.split([E, 2 * E])
        b_q, b_kv = (None, None) if b is None else b.split([E, 2 * E])
        return (linear(q, w_q, b_q),) + tuple(linear(k, w_kv, b_kv).chunk(2, dim=-1))
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = (None, None, None) if b is None else b.chunk(3)
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _in_projection(q, k, v, w_q, w_k, w_v, b_q, b_k, b_v):
    Eq, Ek, Ev = q.shape[-1], k.shape[-1], v.shape[-1]
    for what, w, shape in (("query", w_q, (Eq, Eq)), ("key", w_k, (Eq, Ek)), ("value", w_v, (Eq, Ev))):
        if tuple(w.shape) != shape:
            raise AssertionError(f"expecting {what} weights shape of {shape}, but got {_size(w.shape)}")
    for what, b in (("query", b_q), ("key", b_k), ("value", b_v)):
        if b is not None and tuple(b.shape) != (Eq,):
            raise AssertionError(f"expecting {what} bias shape of {(Eq,)}, but got {_size(b.shape)}")
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _static(t, name, rows, head_dim):
    if t.shape[0] != rows:
        raise AssertionError(f"expecting {name}.size(0) of {rows}, but got {t.shape[0]}")
    if t.shape[2] != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {t.shape[2]}")
    return t


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """Multi-head attention of sequence-first ``query`` (L, N, E) or unbatched (L, E) over ``key``/``value``
    (S, N, E_k/E_v): returns ``(output, weights)``, ``weights`` None unless ``need_weights`` (averaged over the
    heads with ``average_attn_weights``).  See :class:`MultiheadAttention` for the masks.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> x, w, b = jg.randn(3, 2, 4), jg.randn(12, 4), jg.zeros(12)
    >>> out, weights = F.multi_head_attention_forward(x, x, x, 4, 2, w, b, None, None, False, 0.0, jg.eye(4), None)
    >>> out.shape, weights.shape
    (jitgrad.Size([3, 2, 4]), jitgrad.Size([2, 3, 3]))
    """
    is_batched = _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not is_batched:          # a batch of one on dim 1, squeezed out at the end
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", _none_or_dtype(attn_mask),
                                       "attn_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None        # the hint stands for the mask: sdpa's is_causal
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, check_other=False)
        if key_padding_mask is not None:
            is_causal = False   # the merged mask is no longer causal
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {_size(key.shape[:2])} do not match value's "
                                 f"{_size(value.shape[:2])}")
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(f"use_separate_proj_weight is True but {name}_proj_weight is None")
        b_q, b_k, b_v = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight, v_proj_weight, b_q, b_k, b_v)
    else:
        if tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {_size(key.shape)} does not match value shape {_size(value.shape)}")
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    src_len = key.shape[0]
    if attn_mask is not None:       # as (1 or N * heads, L, S)
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {_size(attn_mask.shape)}, but should be "
                                   f"{(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {_size(attn_mask.shape)}, but should be "
                                   f"{(bsz * num_heads, tgt_len, src_len)}.")
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    if bias_k is not None and bias_v is not None:       # one more key and value, learnt, for every batch entry
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = cat([k, bias_k.repeat(1, bsz, 1)])
        v = cat([v, bias_v.repeat(1, bsz, 1)])
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    elif bias_k is not None:
        raise AssertionError("bias_k is set but bias_v is None")
    elif bias_v is not None:
        raise AssertionError("bias_v is set but bias_k is None")
    rows = bsz * num_heads          # (seq, N, E) -> (N * heads, seq, head_dim)
    q = q.reshape(tgt_len, rows, head_dim).transpose(0, 1)
    k = k.reshape(k.shape[0], rows, head_dim).transpose(0, 1) if static_k is None else \
        _static(static_k, "static_k", rows, head_dim)
    v = v.reshape(v.shape[0], rows, head_dim).transpose(0, 1) if static_v is None else \
        _static(static_v, "static_v", rows, head_dim)
    if add_zero_attn:               # one more key and value, zeros
        zeros = factories.zeros(rows, 1, head_dim, dtype=k.dtype, device=k.device)
        k, v = cat([k, zeros], dim=1), cat([v, zeros.to(v.dtype)], dim=1)
        attn_mask = None if attn_mask is None else pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else pad(key_padding_mask, (0, 1))
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if key_padding_mask.shape[0] != bsz:
            raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                                 f"{key_padding_mask.shape[0]}")
        if key_padding_mask.shape[1] != src_len:
            raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                                 f"{key_padding_mask.shape[1]}")
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1).reshape(rows, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = (q * math.sqrt(1.0 / float(head_dim))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = attn_mask + scores
        weights = F.softmax(scores, -1)
        if dropout_p > 0.0:
            weights = _dropout(weights, p=dropout_p)
        out = (weights @ v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not is_batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:       # (1, L, S) broadcasts over batch and heads; (N * heads, L, S) splits
        attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 and attn_mask.dim() == 3 else \
            attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, bool(is_causal))
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
    return (out if is_batched else out.squeeze(1)), None


def _tiles(query, key, value, mask, L, S, dropout=False):
    """Whether this call takes the tiled primitives."""
    for t in (query, key, value) if mask is None else (query, key, value, mask):
        if _device(t) is not None:
            return False            # a device tensor: the decomposition, on the device's kernels
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        return False                # the fused op reports the error
    try:        # (the IR's rule: symbolic sizes of a trace stay symbolic)
        batch = broadcast_shapes("scaled_dot_product_attention", [query.shape[:-2], key.shape[:-2],
                                                                  value.shape[:-2]])
    except OpError:
        return False
    n = math.prod(batch) * L * S * np.dtype(query.dtype.np).itemsize
    if n == 0 and dropout:
        return False                # F.dropout draws nothing for empty weights: neither may the tiled path
    if _TR.active is None:
        return n >= TILING.eager_min_score_bytes
    return n >= (TILING.traced_dropout_min_score_bytes if dropout else TILING.min_score_bytes)


_CAUSAL: dict = {}     # (L, S, numpy dtype, device) -> additive causal mask, 0 on and below the diagonal, -inf above


def _torch_name(dtype):
    """torch's C++ name of a dtype in its messages (``double``, ``float``, ``c10::Half``, ``long int``...)."""
    return dt.torch_cpp_name(dtype)


def _device(t):
    """``t``'s device when it is a device tensor, else None (a CPU array or a traced value)."""
    d = t._data
    return None if type(d) is np.ndarray or backend_of_payload(d) is None else t.device


def _causal_mask(L, S, dtype, query):
    """The causal mask on ``query``'s device (a device query: the decomposition adds it there)."""
    if symbolic_size((L, S)):       # a trace's symbolic lengths: computed per call, not a cached constant
        d = symbolic_arange(S).reshape(1, S) - symbolic_arange(L).reshape(L, 1)
        return F.where(d <= 0, 0.0, float("-inf")).to(dt.as_dtype(dtype))
    dev = _device(query)
    dev = None if dev is None else str(dev)
    key = (L, S, dtype, dev)
    m = _CAUSAL.get(key)
    if m is None:
        a = causal_additive(L, S, dtype)
        a.flags.writeable = False
        m = Tensor._make(a)
        if dev is not None:
            m = m.to(query.device)
        if len(_CAUSAL) > 64:
            _CAUSAL.clear()
        _CAUSAL[key] = m
    return m


def _repeat_kv_heads(query, key, value):
    """``enable_gqa=True``: key and value with fewer heads (dim -3) than the query, each head repeated for its group
    of query heads (torch's ``pre_process_group_query_attention_input``: ``repeat_interleave`` on dim -3)."""
    for t in (query, key, value):
        if t.ndim < 3:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-t.ndim}, {t.ndim - 1}], "
                             f"but got -3)")
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hq == hk == hv:
        return key, value
    if hq % hk or hq % hv:
        raise RuntimeError("Number of heads in key and value must divide the number of heads in ")

    def repeat(t, r):       # (..., h, S, E) -> (..., h * r, S, E), head i at rows i*r ... i*r + r - 1
        if r == 1:
            return t
        s = t.shape
        return t.unsqueeze(-3).expand(*s[:-2], r, *s[-2:]).reshape(*s[:-3], s[-3] * r, *s[-2:])
    return repeat(key, hq // hk), repeat(value, hq // hv)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``softmax(query @ key^T * scale + mask) @ value`` over the last two dims (torch's math definition).

    ``attn_mask``: boolean (True: the key takes part) or additive float, broadcast to ``(..., L, S)``;
    ``is_causal``: the lower-triangular mask (no ``attn_mask`` with it); ``scale``: default
    ``1 / sqrt(E)``; ``dropout_p``: dropout on the attention weights (always applied, as in torch: pass 0.0 in
    eval mode); ``enable_gqa``: key and value may have fewer heads (dim -3) than the query, a divisor of its
    heads, each repeated for its group of query heads.  Differentiable to any order.  Above a size (``TILING``)
    it runs key-tiled with an online softmax (``sdpa_tiled``): no ``(..., L, S)`` score matrix, forward or backward."""
    for name, t in (("query", query), ("key", key), ("value", value), ("attn_mask", attn_mask)):
        if not isinstance(t, Tensor) and (name != "attn_mask" or t is not None):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be Tensor, not "
                            f"{type(t).__name__}")
    # torch's validate_sdpa_input, in its order and with its texts (dtypes by their C++ names)
    if not query.dtype is key.dtype is value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{_torch_name(query.dtype)} key.dtype: {_torch_name(key.dtype)} and value.dtype: "
                           f"{_torch_name(value.dtype)} instead.")
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead.")
    # a mask may be bool, float32 or of the query's dtype; a float32 mask on another float query is added in the
    # query's dtype (its gradient comes back float32)
    if attn_mask is not None and attn_mask.dtype.name not in ("bool", "float32") and attn_mask.dtype is not query.dtype:
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {_torch_name(attn_mask.dtype)} and  query.dtype: "
                           f"{_torch_name(query.dtype)} instead.")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if not 0.0 <= dropout_p <= 1.0:     # torch's at::dropout check (a RuntimeError, not F.dropout's ValueError)
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if enable_gqa:
        key, value = _repeat_kv_heads(query, key, value)
    L, S = query.shape[-2] if query.ndim >= 2 else 1, key.shape[-2] if key.ndim >= 2 else 1
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    mask = None
    if attn_mask is not None:
        if attn_mask.dtype.name == "bool":     # True: takes part (0 added), False: -inf
            zero = Tensor._make(np.zeros(attn_mask.shape, np.dtype(query.dtype.np)))
            if _device(attn_mask) is not None:
                zero = zero.to(attn_mask.device)        # masked_fill on the mask's device
            mask = zero.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            mask = attn_mask if attn_mask.dtype is query.dtype else attn_mask.to(query.dtype)
    if dropout_p < 1.0 and _tiles(query, key, value, mask, L, S, dropout=dropout_p > 0.0):
        args = (query, key, value) if mask is None else (query, key, value, mask)
        kw = dict(scale=sc, causal=bool(is_causal), block_q=TILING.block_q, block_k=TILING.block_k)
        if dropout_p > 0.0:
            # clones: the generator's offset advances in place after the draw, and the backward reads the state
            flat = generator_of(None)._draw(lambda seed, offset: bind(
                O["sdpa_tiled"], *args, seed.clone(), offset.clone(), dropout_p=float(dropout_p), **kw))
        else:
            flat = bind(O["sdpa_tiled"], *args, **kw)
        shape, n = packed_sizes(query.shape, key.shape, value.shape)
        return flat[:n].reshape(shape)      # the output part (a contiguous view); the rest is the lse
    if is_causal:
        mask = _causal_mask(L, S, np.dtype(query.dtype.np), query)
    if dropout_p > 0.0:     # dropout sits between the softmax and the product: the composition, no fused op
        weights = attention_weights(lambda name, *a, **p: bind(O[name], *a, **p), query, key, mask, sc)
        return dropout(weights, dropout_p, True) @ value
    args = (query, key, value) if mask is None else (query, key, value, mask)
    return bind(O["sdpa"], *args, scale=sc)


__all__ = ["multi_head_attention_forward", "scaled_dot_product_attention"]
