"""``F.scaled_dot_product_attention``: torch's signature and errors over the fused ``sdpa`` primitive
(``ir/ops/attention.py``), or, for long sequences, the key-tiled ``sdpa_tiled`` (``ir/ops/tiled_attention.py``).

The choice is made per call from the size of the score matrix the untiled path would hold (see ``TILING``): at
or above ``TILING.min_score_bytes`` the tiled primitives run (eager, and in traces: a compiled graph then holds
``sdpa_tiled`` as one host step, BLAS per block), below it the fused op (eager) or its decomposition (traced).
Tensors on a device always take the decomposition (the device's kernels).  Dropout (``0 < dropout_p < 1``) is
tiled too (each block draws its part of the same Philox draw, so the mask is bit for bit the untiled path's),
from the eager threshold in eager mode but, traced, only from ``TILING.traced_dropout_min_score_bytes``: the
composition's draw is a fused Numba loop, NumPy's Philox in a host step roughly doubles the step.
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from ..ir import dtypes as dt
from ..ir.ops import OPS as O
from ..ir.ops.attention import attention_weights, causal_additive
from ..ir.ops.tiled_attention import packed_sizes
from ..runtime.dispatch import bind
from ..runtime.generator import generator_of
from ..runtime.tensor import Tensor
from ..runtime.devices import backend_of_payload
from ..tracer import STATE as _TR
from .dropout import dropout


class AttentionTiling:
    """When ``F.scaled_dot_product_attention`` tiles, and the block sizes it tiles with (read at each call, so at
    trace time for a compiled function: a change takes effect in functions traced after it).

    ``min_score_bytes``: a traced (compiled) call tiles when ``prod(batch) * L * S * itemsize`` (the bytes of
    ONE untiled score matrix; the untiled path holds three or four of that size at once) is at least this.
    Default 16 MiB, or ``JITGRAD_SDPA_TILE_MIN_MB`` (float MiB): below it the compiled decomposition (fused
    loops) is faster, above it the tiled host steps are (BENCHMARKS.md, "Key-tiled attention"); 0 tiles always.
    ``eager_min_score_bytes``: the same for eager calls; default 2 MiB, or ``JITGRAD_SDPA_TILE_MIN_MB_EAGER``:
    eager NumPy's untiled path makes several passes over whole score matrices, so tiling wins from about
    1 MiB (4 heads x 256 x 256 float32); small attentions (a batch of short sequences) stay one fused op.
    ``traced_dropout_min_score_bytes``: a traced call with dropout tiles from this size (default 256 MiB, or
    ``JITGRAD_SDPA_TILE_DROPOUT_MIN_MB``): below it the compiled composition is about twice as fast (its
    Philox draw is fused), above it the memory the composition holds (several score matrices) decides.
    ``block_q`` x ``block_k``: queries and keys per block (default 256 x 256); a block's scores are
    ``prod(batch) * block_q * block_k`` values (4 heads, float32: 1 MiB).  Between 128 and 512 the time
    changes by under 10% (BENCHMARKS.md): the products are BLAS calls either way."""

    __slots__ = ("min_score_bytes", "eager_min_score_bytes", "traced_dropout_min_score_bytes", "block_q", "block_k")

    def __init__(self):
        self.min_score_bytes = int(float(os.environ.get("JITGRAD_SDPA_TILE_MIN_MB", "16")) * (1 << 20))
        self.eager_min_score_bytes = int(float(os.environ.get("JITGRAD_SDPA_TILE_MIN_MB_EAGER", "2")) * (1 << 20))
        self.traced_dropout_min_score_bytes = int(
            float(os.environ.get("JITGRAD_SDPA_TILE_DROPOUT_MIN_MB", "256")) * (1 << 20))
        self.block_q = 256
        self.block_k = 256


TILING = AttentionTiling()


@contextlib.contextmanager
def attention_tiling(min_score_bytes=None, block_q=None, block_k=None, eager_min_score_bytes=None,
                     traced_dropout_min_score_bytes=None):
    """Set ``TILING``'s fields inside a ``with`` block (None: unchanged; ``min_score_bytes`` sets all three
    thresholds unless the other two are given too); tests force tiling with ``attention_tiling(0, 3, 2)``."""
    old = (TILING.min_score_bytes, TILING.eager_min_score_bytes, TILING.traced_dropout_min_score_bytes,
           TILING.block_q, TILING.block_k)
    if eager_min_score_bytes is None:
        eager_min_score_bytes = min_score_bytes
    if traced_dropout_min_score_bytes is None:
        traced_dropout_min_score_bytes = min_score_bytes
    new = (("min_score_bytes", min_score_bytes, 0), ("eager_min_score_bytes", eager_min_score_bytes, 0),
           ("traced_dropout_min_score_bytes", traced_dropout_min_score_bytes, 0),
           ("block_q", block_q, 1), ("block_k", block_k, 1))
    for name, val, low in new:
        if val is not None and (type(val) is not int or val < low):
            raise ValueError(f"attention_tiling: {name} must be an int >= {low}, got {val!r}")
    for name, val, _ in new:
        if val is not None:
            setattr(TILING, name, val)
    try:
        yield TILING
    finally:
        (TILING.min_score_bytes, TILING.eager_min_score_bytes, TILING.traced_dropout_min_score_bytes,
         TILING.block_q, TILING.block_k) = old


def _tiles(query, key, value, mask, L, S, dropout=False):
    """Whether this call takes the tiled primitives."""
    for t in (query, key, value) if mask is None else (query, key, value, mask):
        if _device(t) is not None:
            return False            # a device tensor: the decomposition, on the device's kernels
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        return False                # the fused op reports the error
    try:
        batch = np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
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

__all__ = ["scaled_dot_product_attention", "TILING", "AttentionTiling", "attention_tiling"]
