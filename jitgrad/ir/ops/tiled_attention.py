"""Key-tiled scaled dot-product attention: the forward and the backward never hold the ``(..., L, S)`` scores.

``sdpa`` (``attention.py``) computes ``softmax(q @ k^T * scale + mask) @ v`` with the whole score matrix; for
long sequences that matrix dominates memory (batch 1, 4 heads, T = 4096, float32: 256 MiB per copy, and the
softmax makes several).  The two primitives here walk blocks of ``block_q`` queries by ``block_k`` keys with an
online softmax (the running row maximum ``m``, the running sum ``l`` of ``exp(s - m)`` and the accumulator
``acc = sum exp(s - m) v`` rescaled by ``exp(m_old - m_new)`` when the maximum grows), each block's products
one BLAS call (``np.matmul``).  Memory is O(batch x block_q x block_k) for the scores plus the inputs and
outputs; with ``causal`` the blocks wholly above the diagonal are skipped (about half the work) and only the
blocks that cross it get a triangular mask, built per block.

Both primitives return ONE flat array, because a primitive has one output (``bind`` returns one tensor):

- ``sdpa_tiled(q, k, v[, mask][, seed, offset]; scale, causal, block_q, block_k[, dropout_p])`` -> ``[out |
  lse]``: the ``batch + (L, Ev)``
  output, C order, then the per-row log-sum-exp ``batch + (L,)`` (``lse = m + log(l)``, the value the backward
  needs to rebuild each block's weights as ``exp(s - lse)`` without a second pass).  A row that masks every key
  has out 0 (torch's ``_safe_softmax``) and lse 0 (finite, so anomaly mode does not flag it; its weights
  ``exp(-inf - 0)`` are 0 all the same).  ``F.scaled_dot_product_attention`` returns the output part as a
  contiguous view (``flat[:n].reshape(...)``).
- ``sdpa_tiled_backward(q, k, v[, mask][, seed, offset], packed, gpacked; scale, causal, block_q, block_k,
  mask_grad[, dropout_p])`` ->
  ``[dq | dk | dv (| dmask)]``, each summed to its input's shape, from the forward's packed result and the
  cotangent of it (the part for ``lse`` is honoured: ``d lse / d s = p``, so it enters as ``delta -= g_lse``).

Dropout (``dropout_p`` > 0, two more inputs after the mask: the generator's seed and offset): each block's
weights are multiplied by ``keep / (1 - p)`` from the uniforms of the same Philox draw ``F.dropout`` would make
on the whole weights, at that block's indices (``philox.uniform_at``), so the mask is bit for bit the untiled
path's; the backward draws its blocks again (counter-based: nothing is stored).

Differentiability: the forward's vjp binds the backward primitive (first order, tiled).  The backward
primitive's own vjp (second order: ``create_graph=True``, gradgradcheck, a transposed compiled backward) is the
derivative of the same maths written with jitgrad ops on whole ``(..., L, S)`` matrices: the score matrix is
materialised only when a double backward is asked for, and that vjp is itself differentiable (any order).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .. import philox
from .attention import causal_additive, check_qkv
from .opdef import BY_TRANSPOSE, Aval, OpDef, OpError, fmt_shape, register


def _check_blocks(name, params):
    for p in ("block_q", "block_k"):
        b = params[p]
        if type(b) is not int or b < 1:
            raise OpError(f"{name}: {p} must be a positive int, got {b!r}")


def _parts(xs, dropout_p, n_tail):
    """(q, k, v, mask or None, (seed, offset) or None, tail) of the inputs ``q, k, v, [mask], [seed, offset],
    *tail`` (the generator state comes with ``dropout_p > 0``; ``n_tail``: the backward's result and cotangent)."""
    body, tail = xs[:len(xs) - n_tail], xs[len(xs) - n_tail:]
    rng = None
    if dropout_p > 0.0:
        rng, body = tuple(body[-2:]), body[:-2]
    return body[0], body[1], body[2], (body[3] if len(body) == 4 else None), rng, tail


def _check_inputs(name, avals, params, n_tail, what):
    p = params.get("dropout_p", 0.0)
    n = len(avals) - n_tail - (2 if p > 0.0 else 0)
    if n not in (3, 4):
        raise OpError(f"{name}: expected {what}, got {len(avals)} inputs")
    _check_blocks(name, params)
    if not 0.0 <= p < 1.0:
        raise OpError(f"{name}: dropout_p must be in [0, 1), got {p!r}")
    if p > 0.0:
        for a in avals[n:n + 2]:
            if a.shape != () or a.dtype is not dt.int64:
                raise OpError(f"{name}: the generator's seed and offset must be int64 scalars, got "
                              f"{a.dtype.name}{fmt_shape(a.shape)}")
    return check_qkv(name, avals[:n])


def _fwd_rule(avals, params):
    batch, L, S = _check_inputs("sdpa_tiled", avals, params, 0,
                                "query, key, value, an optional mask and, with dropout, the generator state")
    q, v = avals[0], avals[2]
    return [Aval((math.prod(batch) * L * (v.shape[-1] + 1),), q.dtype)]


def _bwd_rule(avals, params):
    batch, L, S = _check_inputs("sdpa_tiled_backward", avals, params, 2,
                                "query, key, value, an optional mask, with dropout the generator state, the "
                                "forward's result and its cotangent")
    q, k, v = avals[:3]
    n = math.prod(batch) * L * (v.shape[-1] + 1)
    for name, a in (("forward result", avals[-2]), ("cotangent", avals[-1])):
        if a.shape != (n,) or a.dtype is not q.dtype:
            raise OpError(f"sdpa_tiled_backward: the {name} must be {q.dtype.name}{fmt_shape((n,))} (query "
                          f"{fmt_shape(q.shape)}, key {fmt_shape(k.shape)}, value {fmt_shape(v.shape)}), got "
                          f"{a.dtype.name}{fmt_shape(a.shape)}")
    size = q.size + k.size + v.size
    if params["mask_grad"]:
        if len(avals) - (2 if params.get("dropout_p", 0.0) > 0.0 else 0) != 6:
            raise OpError("sdpa_tiled_backward: mask_grad=True needs a mask")
        size += avals[3].size
    return [Aval((size,), q.dtype)]


# ---- the NumPy kernels ------------------------------------------------------------------------------

def _sum_to(a, shape):
    """``a`` summed over the dims ``shape`` broadcast (leading extra dims, and dims of size 1)."""
    if a.shape == tuple(shape):
        return a
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=axes, keepdims=True).reshape(shape) if axes else a.reshape(shape)


def _as_mask(mask, dtype):
    """The additive mask in ``dtype`` with at least 2 dims (a per-key or scalar mask broadcasts over the queries:
    size-1 dims in front, so ``_mask_block`` can slice rows and keys; the flat order is unchanged)."""
    mask = mask.astype(dtype, copy=False)
    return mask if mask.ndim >= 2 else mask.reshape((1,) * (2 - mask.ndim) + mask.shape)


def _mask_block(mask, i0, i1, j0, j1):
    r = mask if mask.shape[-2] == 1 else mask[..., i0:i1, :]
    return r if r.shape[-1] == 1 else r[..., j0:j1]


def _scores(qb, kt, mask, causal, i0, i1, j0, j1):
    """The block's scores ``(scale q) k^T + mask`` (a fresh array, written in place after the product)."""
    s = np.matmul(qb, kt[..., j0:j1])
    if mask is not None:
        mb = _mask_block(mask, i0, i1, j0, j1)
        if np.broadcast_shapes(s.shape, mb.shape) == s.shape:
            s += mb
        else:
            s = s + mb
    if causal and j1 - 1 > i0:      # the block crosses the diagonal: keys j > i do not take part
        cut = np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None]
        np.copyto(s, -np.inf, where=cut)     # (broadcast over the batch dims: no fancy-index gather)
    return s


def _keep_scale(rng, p, wbatch, L, S, i0, i1, j0, j1, dtype):
    """Dropout's factors on a block of the weights ``wbatch + (L, S)``: ``1 / (1 - p)`` where the draw's uniform
    is ``>= p``, else 0.  The uniforms are those of ``rand(wbatch + (L, S))`` at the block's row-major indices
    (``philox.uniform_at``), so the mask is bit for bit ``F.dropout``'s on the whole weights (the untiled path's
    and the compiled Philox loop's)."""
    u64 = np.uint64
    base = (np.arange(math.prod(wbatch), dtype=u64) * u64(L * S)).reshape(wbatch + (1, 1))
    idx = base + (np.arange(i0, i1, dtype=u64) * u64(S))[:, None] + np.arange(j0, j1, dtype=u64)[None, :]
    keep = philox.uniform_at(rng[0], rng[1], idx, dtype) >= dtype.type(p)
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


def _key_end(causal, S, i1):
    return min(S, i1) if causal else S      # causal: query i sees keys j <= i, so a block of rows < i1 keys < i1


def _layout(q, k, v):
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return batch, q.shape[-2], k.shape[-2], v.shape[-1]


def _tiled_forward(*xs, scale, causal, block_q, block_k, dropout_p=0.0):
    q, k, v, mask, rng, _ = _parts(xs, dropout_p, 0)
    batch, L, S, Ev = _layout(q, k, v)
    dt = q.dtype
    n = math.prod(batch) * L * Ev
    flat = np.empty(n + math.prod(batch) * L, dt)
    out = flat[:n].reshape(batch + (L, Ev))
    lse = flat[n:].reshape(batch + (L, 1))
    if mask is not None:
        mask = _as_mask(mask, dt)
    kt = np.swapaxes(k, -1, -2)
    sc = dt.type(scale)
    for i0 in range(0, L, block_q):
        i1 = min(L, i0 + block_q)
        qb = q[..., i0:i1, :] * sc           # the scale on the (block_q, E) queries, not on the scores
        m = acc = l = None
        for j0 in range(0, _key_end(causal, S, i1), block_k):
            j1 = min(S, j0 + block_k)
            s = _scores(qb, kt, mask, causal, i0, i1, j0, j1)
            bm = s.max(axis=-1, keepdims=True)
            m_new = bm if m is None else np.maximum(m, bm)
            # a row with no key yet (all -inf): subtract 0, not -inf (exp(-inf - -inf) would be nan)
            shift = np.where(m_new == -np.inf, dt.type(0), m_new)
            s -= shift
            p = np.exp(s, out=s)
            rs = p.sum(axis=-1, keepdims=True)
            if rng is not None:     # dropout after the softmax: the sum is of the weights before it
                p *= _keep_scale(rng, dropout_p, p.shape[:-2], L, S, i0, i1, j0, j1, dt)
            pv = np.matmul(p, v[..., j0:j1, :])
            if m is None:
                l, acc = rs, pv
            else:
                alpha = np.exp(m - shift)       # m = -inf (no key so far) -> 0: the empty accumulator stays 0
                l = l * alpha + rs
                acc *= alpha
                acc += pv
            m = m_new
        if m is None:       # no key at all (S = 0)
            out[..., i0:i1, :] = 0
            lse[..., i0:i1, :] = 0
            continue
        dead = l == 0       # every key masked: output 0 and lse 0, as the untiled path's _safe_softmax
        if dead.any():
            l = np.where(dead, dt.type(1), l)
            m = np.where(dead, dt.type(0), m)
        out[..., i0:i1, :] = acc / l
        lse[..., i0:i1, :] = m + np.log(l)
    return flat


def _tiled_backward(*xs, scale, causal, block_q, block_k, mask_grad, dropout_p=0.0):
    q, k, v, mask, rng, (packed, gpacked) = _parts(xs, dropout_p, 2)
    batch, L, S, Ev = _layout(q, k, v)
    E = q.shape[-1]
    dt = q.dtype
    n = math.prod(batch) * L * Ev
    o = packed[:n].reshape(batch + (L, Ev))
    lse = packed[n:].reshape(batch + (L, 1))
    do = gpacked[:n].reshape(batch + (L, Ev))
    delta = (do * o).sum(axis=-1, keepdims=True)
    delta -= gpacked[n:].reshape(batch + (L, 1))        # the lse part of the cotangent: d lse / d s = p
    if mask is not None:
        mask = _as_mask(mask, dt)
    dq = np.zeros(batch + (L, E), dt)
    dk = np.zeros(batch + (S, E), dt)
    dv = np.zeros(batch + (S, Ev), dt)
    dmask = np.zeros(mask.shape, dt) if mask_grad else None
    kt = np.swapaxes(k, -1, -2)
    vt = np.swapaxes(v, -1, -2)
    sc = dt.type(scale)
    for i0 in range(0, L, block_q):
        i1 = min(L, i0 + block_q)
        qb = q[..., i0:i1, :] * sc
        dob = do[..., i0:i1, :]
        lb = lse[..., i0:i1, :]
        db = delta[..., i0:i1, :]
        dqb = None
        for j0 in range(0, _key_end(causal, S, i1), block_k):
            j1 = min(S, j0 + block_k)
            s = _scores(qb, kt, mask, causal, i0, i1, j0, j1)
            ks = None if rng is None else _keep_scale(rng, dropout_p, s.shape[:-2], L, S, i0, i1, j0, j1, dt)
            if s.shape[:-2] == lb.shape[:-2]:
                s -= lb
            else:                               # value's batch dims broadcast q k^T's: the weights grow to them
                s = s - lb
            p = np.exp(s, out=s)                # the forward's weights of this block, exactly
            pd = p if ks is None else p * ks
            dv[..., j0:j1, :] += np.matmul(np.swapaxes(pd, -1, -2), dob)
            ds = np.matmul(dob, vt[..., j0:j1])
            if ks is not None:
                ds *= ks
            ds -= db
            ds *= p                             # softmax's vjp: p * (dp - rowsum(dp * p))
            if mask_grad:
                mb = _mask_block(dmask, i0, i1, j0, j1)
                mb += _sum_to(ds, mb.shape)
            t = np.matmul(ds, k[..., j0:j1, :])
            if dqb is None:
                dqb = t
            else:
                dqb += t
            dk[..., j0:j1, :] += np.matmul(np.swapaxes(ds, -1, -2), qb)     # qb holds scale * q already
        if dqb is not None:
            dqb *= sc
            dq[..., i0:i1, :] = dqb
    parts = [_sum_to(dq, q.shape), _sum_to(dk, k.shape), _sum_to(dv, v.shape)]
    if mask_grad:
        parts.append(dmask)
    return np.concatenate([x.reshape(-1) for x in parts])


# ---- derivatives --------------------------------------------------------------------------------------

def _split(flat, shapes):
    """The pieces of a flat packed tensor, reshaped (contiguous views in eager mode)."""
    out, at = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(flat[at:at + n].reshape(s))
        at += n
    return out


def _tiled_forward_vjp(c, g):
    p = c.params
    dropout_p = p.get("dropout_p", 0.0)
    mask = _parts(c.inputs, dropout_p, 0)[3]
    mask_grad = mask is not None and c.needs_grad[3]
    extra = {"dropout_p": dropout_p} if dropout_p > 0.0 else {}
    flat = c.bind("sdpa_tiled_backward", *c.inputs, c.outputs[0], g, scale=p["scale"], causal=p["causal"],
                  block_q=p["block_q"], block_k=p["block_k"], mask_grad=mask_grad, **extra)
    parts = _split(flat, c.shapes[:4] if mask_grad else c.shapes[:3])
    return tuple(parts[i] if i < len(parts) and c.needs_grad[i] else None for i in range(len(c.inputs)))


def _tiled_backward_vjp(c, gflat):
    """The derivative of ``sdpa_tiled_backward`` with jitgrad ops on whole score matrices (double backward only).

    With ``s = scale q k^T + mask``, ``p = exp(s - lse)``, ``dp = dO v^T``, ``delta = rowsum(dO * O) - g_lse``,
    ``ds = p * (dp - delta)``, the primitive returns ``dq = scale ds k``, ``dk = scale ds^T q``, ``dv = p^T dO``
    (and ``dmask = ds``); this is that function's reverse mode, step by step, treating O and lse (the forward's
    packed result) and dO, g_lse (its cotangent) as the independent inputs they are here: their own
    dependence on q, k, v reaches the forward through its vjp."""
    ins = c.inputs
    p = c.params
    dropout_p = p.get("dropout_p", 0.0)
    q, k, v, mask, rng, (packed, gpacked) = _parts(ins, dropout_p, 2)
    has_mask = mask is not None
    scale = p["scale"]
    L, S, Ev = c.shapes[0][-2], c.shapes[1][-2], c.shapes[2][-1]
    batch = tuple(np.broadcast_shapes(c.shapes[0][:-2], c.shapes[1][:-2], c.shapes[2][:-2]))
    o, lse = _split(packed, [batch + (L, Ev), batch + (L, 1)])
    do, dl = _split(gpacked, [batch + (L, Ev), batch + (L, 1)])
    shapes = list(c.shapes[:3]) + ([c.shapes[3]] if p["mask_grad"] else [])
    gs = _split(gflat, shapes)
    gq, gk, gv = gs[:3]

    s = (q @ k.mT) * scale
    if mask is not None:
        s = s + mask
    if p["causal"]:
        s = c.bind("add", s, causal_additive(L, S, np.dtype(c.dtypes[0].np)))
    w = (s - lse).exp()                                  # the weights p
    if rng is None:
        keep = None
        wd = w
    else:       # dropout's factors D on the whole weights: the forward's draw again (rand_uniform, same bits)
        wshape = tuple(np.broadcast_shapes(c.shapes[0][:-2], c.shapes[1][:-2],
                                           c.shapes[3][:-2] if has_mask else ())) + (L, S)
        u = c.bind("rand_uniform", rng[0], rng[1], shape=wshape, dtype=c.dtypes[0])
        keep = (u >= dropout_p).to(c.dtypes[0]) * (1.0 / (1.0 - dropout_p))
        wd = w * keep
    dp_raw = do @ v.mT
    dp = dp_raw if keep is None else dp_raw * keep
    delta = (do * o).sum(-1, keepdim=True) - dl
    ds = w * (dp - delta)
    # dq = scale ds k, dk = scale ds^T q, dmask = ds
    gds = (gq @ k.mT + q @ gk.mT) * scale
    if p["mask_grad"]:
        gds = gds + gs[3]
    gk_acc = (ds.mT @ gq) * scale
    gq_acc = (ds @ gk) * scale
    # dv = (p D)^T dO
    gw = do @ gv.mT
    if keep is not None:
        gw = gw * keep
    gdo = wd @ gv
    # ds = p * (dp - delta)
    gw = gw + gds * (dp - delta)
    gdp = gds * w
    gdelta = -gdp.sum(-1, keepdim=True)
    # delta = rowsum(dO * O) - g_lse
    gdo = gdo + gdelta * o
    go = gdelta * do
    gdl = -gdelta
    # dp = (dO v^T) D
    gdp_raw = gdp if keep is None else gdp * keep
    gdo = gdo + gdp_raw @ v
    gv_acc = gdp_raw.mT @ do
    # p = exp(s - lse)
    gsc = gw * w
    glse = -gsc.sum(-1, keepdim=True)
    # s = scale q k^T + mask
    gq_acc = gq_acc + (gsc @ k) * scale
    gk_acc = gk_acc + (gsc.mT @ q) * scale

    nd = c.needs_grad
    grads = [None] * len(ins)
    if nd[0]:
        grads[0] = gq_acc.sum_to_size(c.shapes[0])
    if nd[1]:
        grads[1] = gk_acc.sum_to_size(c.shapes[1])
    if nd[2]:
        grads[2] = gv_acc.sum_to_size(c.shapes[2])
    if has_mask and nd[3]:
        grads[3] = gsc.sum_to_size(c.shapes[3])
    if nd[-2]:      # (the generator state, int64, never needs one)
        grads[-2] = c.bind("cat", go.reshape(-1), glse.reshape(-1), axis=0)
    if nd[-1]:
        grads[-1] = c.bind("cat", gdo.reshape(-1), gdl.reshape(-1), axis=0)
    return tuple(grads)


register(OpDef("sdpa_tiled", "linalg", _fwd_rule, _tiled_forward, _tiled_forward_vjp, saves_in=(0, 1, 2, 3, 4, 5), jvp=BY_TRANSPOSE,
               saves_out=(0,), grad_name="ScaledDotProductFlashAttentionForCpuBackward0",
               doc="sdpa_tiled(q, k, v[, mask][, seed, offset]; scale, causal, block_q, block_k[, dropout_p]): "
                   "attention tiled over queries and keys with an online softmax; one flat result [out | per-row "
                   "log-sum-exp]"))
register(OpDef("sdpa_tiled_backward", "linalg", _bwd_rule, _tiled_backward, _tiled_backward_vjp, jvp=BY_TRANSPOSE,
               saves_in=tuple(range(8)), grad_name="SdpaTiledBackwardBackward0",
               doc="sdpa_tiled_backward(q, k, v[, mask][, seed, offset], result, cotangent; scale, causal, block_q, "
                   "block_k, mask_grad[, dropout_p]): the tiled gradients, one flat result [dq | dk | dv (| dmask)]"))


def packed_sizes(q_shape, k_shape, v_shape):
    """(output shape, output size): the first part of ``sdpa_tiled``'s flat result; the rest is the lse."""
    batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
    L, Ev = q_shape[-2], v_shape[-1]
    return batch + (L, Ev), math.prod(batch) * L * Ev


__all__ = ["packed_sizes"]
