"""Key-tiled attention (``ir/ops/tiled_attention.py``; issue 18, deliverable 4): ``F.scaled_dot_product_attention``
above ``TILING.min_score_bytes`` binds ``sdpa_tiled`` / ``sdpa_tiled_backward`` (online softmax over query x key
blocks).  Values and gradients against the untiled path and torch, gradcheck / gradgradcheck with several blocks
per row, eager == compiled, the blocks causal masking skips (counted), the memory it does not allocate (traced
by tracemalloc, which sees NumPy's buffers), and its errors."""
from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck
from jitgrad.ir.ops import OPS
from jitgrad.ir.ops import tiled_attention as TA
from jitgrad.nn.attention import TILING, attention_tiling
from jitgrad.runtime.dispatch import bind


def _rng(seed=0):
    return np.random.default_rng(seed)


def _sdpa(q, k, v, tiled, blocks=(3, 2), **kw):
    """F.scaled_dot_product_attention with tiling forced on (``blocks`` = block_q, block_k) or off."""
    with attention_tiling(0 if tiled else 1 << 62, *blocks):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _ops_in(t):
    """The primitives on the autograd graph behind ``t``."""
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        names.add(n.op.name if getattr(n, "op", None) is not None else type(n).__name__)
        stack.extend(f for f, _ in n.next_functions)
    return names


# the cases: (q, k, v shapes, mask kind); odd sizes, L != S, broadcast batch dims, sizes not multiples of a block
CASES = {
    "plain": ((2, 3, 7, 5), (2, 3, 9, 5), (2, 3, 9, 4), None),
    "causal": ((2, 3, 7, 5), (2, 3, 9, 5), (2, 3, 9, 4), "causal"),
    "causal-L>S": ((1, 2, 11, 3), (1, 2, 6, 3), (1, 2, 6, 2), "causal"),
    "causal-square": ((2, 1, 8, 4), (2, 1, 8, 4), (2, 1, 8, 4), "causal"),
    "broadcast-batch": ((2, 3, 5, 4), (1, 3, 7, 4), (2, 1, 7, 6), None),
    "unbatched": ((6, 3), (5, 3), (5, 2), None),
    "bool-mask": ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), "bool"),
    "float-mask-broadcast": ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), "float"),
    "key-padding-mask": ((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), "keypad"),
    "scale": ((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), "scale"),
    "no-keys": ((2, 3, 4), (2, 0, 4), (2, 0, 3), None),
    "no-queries": ((2, 0, 4), (2, 3, 4), (2, 3, 3), None),
    "vector-mask": ((2, 5, 4), (2, 6, 4), (2, 6, 3), "vector"),
    "scalar-mask": ((2, 5, 4), (2, 6, 4), (2, 6, 3), "scalar"),
}


def _case(name, seed=0):
    qs, ks, vs, kind = CASES[name]
    r = _rng(seed)
    arrays = [r.standard_normal(s) for s in (qs, ks, vs)]
    L, S = qs[-2], ks[-2]
    kw = {}
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "bool":
        m = r.random((L, S)) > 0.4
        m[2] = False                    # a row that sees no key: 0, as torch
        kw["attn_mask"] = m
    elif kind == "float":
        kw["attn_mask"] = r.standard_normal((3, 1, S))
    elif kind == "keypad":
        m = np.ones((2, 1, 1, S), bool)
        m[1, ..., :4] = False           # the first key blocks of batch 1 wholly masked
        kw["attn_mask"] = m
    elif kind == "vector":              # a mask with fewer than 2 dims: broadcast over the queries too
        m = r.standard_normal(S)
        m[1] = -np.inf
        kw["attn_mask"] = m
    elif kind == "scalar":
        kw["attn_mask"] = np.array(0.7)
    elif kind == "scale":
        kw["scale"] = 0.3
    return arrays, kw


def _run(lib, arrays, kw, fn, w):
    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    kw = {n: (lib.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    out = fn(*ts, **kw)
    (out * lib.tensor(w)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_grads_match_untiled_and_torch(name):
    arrays, kw = _case(name)
    untiled = None
    for blocks in ((3, 2), (4, 5), (64, 64)):       # several blocks per row and per column; one block
        w = _rng(9).uniform(0.5, 1.5, _run(jg, arrays, kw, lambda *a, **k: _sdpa(*a, False, **k), 1.0)[0].shape)
        got = _run(jg, arrays, kw, lambda *a, **k: _sdpa(*a, True, blocks, **k), w)
        untiled = _run(jg, arrays, kw, lambda *a, **k: _sdpa(*a, False, **k), w)
        for g, u in zip(got, untiled):
            np.testing.assert_allclose(g, u, rtol=1e-11, atol=1e-13)
    torch = pytest.importorskip("torch")
    want = _run(torch, arrays, kw, torch.nn.functional.scaled_dot_product_attention, w)
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-11, atol=1e-13)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_shapes_blocks_and_masks_match_untiled(data):
    """Any block sizes (1 up to past the sizes), broadcast batch dims, causal or a broadcast mask with -inf
    entries: values and gradients equal the untiled path's."""
    L, S, E, Ev = (data.draw(st.integers(1, 7)) for _ in range(4))
    qb, kb, vb = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=2, max_side=3)).input_shapes
    kind = data.draw(st.sampled_from(["none", "causal", "mask"]))
    blocks = (data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8)))
    r = _rng(data.draw(st.integers(0, 1000)))
    arrays = [r.standard_normal(b + t) for b, t in ((qb, (L, E)), (kb, (S, E)), (vb, (S, Ev)))]
    kw = {}
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "mask":
        batch = np.broadcast_shapes(qb, kb, vb)
        mshape = tuple(d if r.random() < 0.5 else 1 for d in batch + (L, S))
        m = r.standard_normal(mshape)
        m[r.random(mshape) < 0.3] = -np.inf
        kw["attn_mask"] = m
    if kind == "mask":      # the mask's own gradient too (summed over its broadcast dims, block by block)
        arrays.append(kw.pop("attn_mask"))

    def f(tiled):
        return lambda q, k, v, *m, **kw: _sdpa(q, k, v, tiled, blocks, attn_mask=m[0] if m else None, **kw)
    ref = _run(jg, arrays, kw, f(False), 1.0)
    w = _rng(1).uniform(0.5, 1.5, ref[0].shape)
    ref = _run(jg, arrays, kw, f(False), w)
    got = _run(jg, arrays, kw, f(True), w)
    for g, u in zip(got, ref):
        assert g.shape == u.shape
        np.testing.assert_allclose(g, u, rtol=1e-10, atol=1e-12)


def test_the_tiled_primitives_are_what_runs():
    arrays, kw = _case("causal")
    q, k, v = (jg.tensor(a, requires_grad=True) for a in arrays)
    out = _sdpa(q, k, v, True, **kw)
    assert "sdpa_tiled" in _ops_in(out) and "sdpa" not in _ops_in(out)
    assert out.is_contiguous() and out.shape == (2, 3, 7, 4)
    assert "sdpa" in _ops_in(_sdpa(q, k, v, False, **kw))


def test_threshold_is_the_score_bytes_eager_and_traced():
    q = jg.zeros(1, 4, 64, 8, requires_grad=True)        # scores: 4 * 64 * 64 * 4 bytes = 64 KiB
    for limit, tiled in ((64 << 10, True), ((64 << 10) + 1, False), (0, True)):
        with attention_tiling(limit):
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        assert ("sdpa_tiled" in _ops_in(out)) is tiled, limit
        for eager_limit in (0, 1 << 62):     # a trace reads min_score_bytes only
            with attention_tiling(limit, eager_min_score_bytes=eager_limit):
                text = jg.compile(lambda a: F.scaled_dot_product_attention(a, a, a, is_causal=True),
                                  backend="interpret").ir(q)
            assert ("sdpa_tiled" in text) is tiled, (limit, eager_limit)
        with attention_tiling(1 << 62, eager_min_score_bytes=limit):
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        assert ("sdpa_tiled" in _ops_in(out)) is tiled, limit
    if "JITGRAD_SDPA_TILE_MIN_MB" not in os.environ:
        assert TILING.min_score_bytes == 16 << 20     # the defaults
    if "JITGRAD_SDPA_TILE_MIN_MB_EAGER" not in os.environ:
        assert TILING.eager_min_score_bytes == 2 << 20
    with pytest.raises(ValueError, match="block_q must be an int >= 1"):
        with attention_tiling(block_q=0):
            pass


def _grad_fns(kind):
    r = _rng(3)
    boolm = jg.tensor(np.array([[True, False, True, True, False], [False] * 5, [True] * 5, [False, True] * 2 + [True]]))

    def f(q, k, v, *m):
        with attention_tiling(0, 2, 2):
            if kind == "causal":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if kind == "bool":
                return F.scaled_dot_product_attention(q, k, v, attn_mask=boolm)
            if kind == "float-mask-grad":
                return F.scaled_dot_product_attention(q, k, v, attn_mask=m[0])
            return F.scaled_dot_product_attention(q, k, v)
    xs = [jg.tensor(r.standard_normal(s), requires_grad=True) for s in ((2, 4, 3), (1, 5, 3), (2, 5, 2))]
    if kind == "float-mask-grad":
        xs.append(jg.tensor(r.standard_normal((4, 5)), requires_grad=True))
    return f, tuple(xs)


@pytest.mark.parametrize("kind", ["plain", "causal", "bool", "float-mask-grad"])
def test_gradcheck_and_gradgradcheck(kind):
    f, xs = _grad_fns(kind)
    assert gradcheck(f, xs)
    assert gradgradcheck(f, xs)       # the backward primitive's own vjp (the decomposed maths)


def test_the_packed_result_differentiates_through_the_log_sum_exp():
    """The flat [out | lse] result as a whole: the lse part's cotangent enters the backward (delta -= g_lse)."""
    r = _rng(4)
    xs = [jg.tensor(r.standard_normal(s), requires_grad=True) for s in ((2, 5, 3), (2, 4, 3), (2, 4, 2), (5, 4))]

    def f(q, k, v, m):
        return bind(OPS["sdpa_tiled"], q, k, v, m, scale=0.7, causal=True, block_q=2, block_k=3)
    assert gradcheck(f, tuple(xs)) and gradgradcheck(f, tuple(xs))
    flat = f(*xs).detach().numpy()
    s = xs[0].detach().numpy() @ np.swapaxes(xs[1].detach().numpy(), -1, -2) * 0.7 + xs[3].detach().numpy()
    s = np.where(np.tri(5, 4, dtype=bool), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    np.testing.assert_allclose(flat[2 * 5 * 2:], (mx + np.log(np.exp(s - mx).sum(-1, keepdims=True))).reshape(-1),
                               rtol=1e-13)


def test_third_order_matches_the_untiled_path():
    r = _rng(5)
    arrays = [r.standard_normal(s) for s in ((1, 4, 2), (1, 5, 2), (1, 5, 2))]
    dirs = [r.standard_normal(a.shape) for a in arrays]

    def third(tiled):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        out = _sdpa(*xs, tiled, (2, 2), is_causal=True)
        g1 = jg.autograd.grad((out * out).sum(), xs, create_graph=True)
        g2 = jg.autograd.grad(sum((g * jg.tensor(d)).sum() for g, d in zip(g1, dirs)), xs, create_graph=True)
        g3 = jg.autograd.grad(sum((g * g).sum() for g in g2), xs)
        return [g.numpy() for g in g3]
    for a, b in zip(third(True), third(False)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# ---- compiled -------------------------------------------------------------------------------------------

def _step(q, k, v, w):
    with attention_tiling(0, 3, 2):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = (out * w).sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_eager_equals_compiled(backend):
    arrays, _ = _case("causal")
    w = jg.tensor(_rng(9).uniform(0.5, 1.5, (2, 3, 7, 4)))
    results = []
    for fn in (_step, jg.compile(_step, backend=backend, background=False)):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        loss = fn(*xs, w)
        results.append([loss.detach().numpy()] + [x.grad.numpy() for x in xs])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def test_the_trace_binds_the_tiled_primitives_not_the_decomposition():
    arrays, _ = _case("causal")
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]
    w = jg.tensor(np.ones((2, 3, 7, 4)))
    text = jg.compile(_step, backend="interpret").ir(*xs, w)
    assert "= sdpa_tiled[" in text and "= sdpa_tiled_backward[" in text
    assert "softmax" not in text and "f64[2,3,7,9]" not in text      # no (..., L, S) value in the graph


def test_compiled_double_backward_goes_through_the_backward_primitives_vjp():
    f, xs = _grad_fns("causal")
    assert gradgradcheck(jg.compile(f, backend="interpret"), xs)


# ---- work and memory --------------------------------------------------------------------------------------

def test_causal_skips_the_blocks_above_the_diagonal(monkeypatch):
    calls = []
    real = TA._scores

    def counted(qb, kt, mask, causal, i0, i1, j0, j1):
        calls.append((i0, j0, causal and j1 - 1 > i0))
        return real(qb, kt, mask, causal, i0, i1, j0, j1)
    monkeypatch.setattr(TA, "_scores", counted)
    q = jg.tensor(_rng().standard_normal((1, 2, 8, 3)), requires_grad=True)
    for causal, n_blocks, n_masked in ((False, 16, 0), (True, 10, 4)):
        calls.clear()
        out = _sdpa(q, q, q, True, (2, 2), is_causal=causal)
        assert len(calls) == n_blocks          # causal: 1 + 2 + 3 + 4 of the 4 x 4 blocks
        assert sum(c[2] for c in calls) == n_masked    # only the diagonal blocks get the triangular mask
        calls.clear()
        out.sum().backward()
        assert len(calls) == n_blocks          # the backward walks the same blocks


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("mode", ["eager", "compiled", "eager-dropout"])
def test_no_score_matrix_is_allocated(mode):
    """Forward and backward at L = S = 2048, 2 heads, float64: one (2, 2048, 2048) score matrix is 64 MiB.  The
    tiled path's peak of NumPy allocations stays under an eighth of that (its blocks are 2 x 128 x 128, with
    dropout 2 x 64 x 64); the untiled path's exceeds it (the check can fail)."""
    r = _rng(6)
    arrays = [r.standard_normal((1, 2, 2048, 8)) for _ in range(3)]
    score = 2 * 2048 * 2048 * 8
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.2 if "dropout" in mode else 0.0)
        out.sum().backward()
        return out.detach()
    blocks = (64, 64) if "dropout" in mode else (128, 128)     # (Philox's lanes: 48 bytes per weight of a block)
    with attention_tiling(0, *blocks):
        fn = jg.compile(step, background=False) if mode == "compiled" else step
        fn(*xs)                  # compiled: build first, measure a later call
        for x in xs:
            x.grad = None
        tiled = _peak_bytes(lambda: fn(*xs))
    assert tiled < score / 8, (tiled, score)       # (a boolean L x S array would be score / 8)
    if mode.startswith("eager"):
        for x in xs:
            x.grad = None
        with attention_tiling(1 << 62):
            untiled = _peak_bytes(lambda: step(*xs))
        assert untiled > score, (untiled, score)


# ---- dropout and errors --------------------------------------------------------------------------------

def _dropout_step(q, k, v, w, causal):
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=causal)
    (out * w).sum().backward()
    return out.detach(), jg.rand(3, dtype=jg.float64)     # the next draw: the generator advanced the same


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_tiled_equals_untiled_eager_and_compiled(causal):
    """Tiled dropout draws each block's part of the same Philox draw: the mask is bit for bit the untiled
    composition's, eager and compiled (traced: the composition's fused Philox loop below
    ``traced_dropout_min_score_bytes``, the tiled host steps above it)."""
    arrays, _ = _case("plain")
    w = jg.tensor(_rng(9).uniform(0.5, 1.5, (2, 3, 7, 4)))
    results, kinds = [], []
    for tiled, compiled in ((True, None), (False, None), (False, "interpret"), (True, "interpret"), (False, "numba"),
                            (True, "numba")):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        fn = jg.compile(_dropout_step, backend=compiled, background=False) if compiled else _dropout_step
        jg.manual_seed(11)
        with attention_tiling(0 if tiled else 1 << 62, 3, 2):
            if compiled:
                kinds.append("sdpa_tiled" in jg.compile(_dropout_step, backend="interpret").ir(*xs, w, causal))
            out, nxt = fn(*xs, w, causal)
            if not compiled:
                kinds.append("sdpa_tiled" in _ops_in(F.scaled_dot_product_attention(*xs, dropout_p=0.3)))
        results.append([out.numpy(), nxt.numpy()] + [x.grad.numpy() for x in xs])
    assert kinds == [True, False, False, True, False, True]
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    with attention_tiling(0, 3, 2):
        plain = F.scaled_dot_product_attention(*(jg.tensor(a) for a in arrays), is_causal=causal).numpy()
    assert np.abs(results[0][0] - plain).max() > 0.1        # the dropout did something


def test_dropout_gradcheck_and_gradgradcheck():
    f0, xs = _grad_fns("plain")

    def f(q, k, v):
        jg.manual_seed(5)       # the same mask at every evaluation
        with attention_tiling(0, 2, 2):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True)
    assert gradcheck(f, xs) and gradgradcheck(f, xs)


def test_dropout_thresholds_and_p_one():
    q = jg.tensor(_rng().standard_normal((1, 2, 6, 3)), requires_grad=True)      # scores: 576 bytes
    with attention_tiling(0):
        assert "sdpa_tiled" not in _ops_in(F.scaled_dot_product_attention(q, q, q, dropout_p=1.0))   # no draw
        assert "sdpa_tiled" not in _ops_in(F.scaled_dot_product_attention(q[:, :, :0], q, q, dropout_p=0.5))

    def traced(**limits):
        with attention_tiling(**limits):
            f = jg.compile(lambda a: F.scaled_dot_product_attention(a, a, a, dropout_p=0.5), backend="interpret")
            return f.ir(q)
    text = traced(min_score_bytes=0, traced_dropout_min_score_bytes=577)
    assert "sdpa_tiled" not in text and "rand_uniform" in text      # the composition, its draw in the graph
    text = traced(min_score_bytes=1 << 62, traced_dropout_min_score_bytes=576)
    assert "sdpa_tiled" in text and "rand_uniform" not in text
    with attention_tiling(1 << 62, eager_min_score_bytes=576):
        assert "sdpa_tiled" in _ops_in(F.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    if "JITGRAD_SDPA_TILE_DROPOUT_MIN_MB" not in os.environ:
        assert TILING.traced_dropout_min_score_bytes == 256 << 20


def test_errors_name_the_op_the_shapes_and_the_line():
    q, k, v = (jg.tensor(a) for a in _case("plain")[0])
    with attention_tiling(0):
        with pytest.raises(RuntimeError, match=r"sdpa_tiled: query \[2, 3, 7, 5\], key \[2, 3, 5, 9\] and value "
                                               r"\[2, 3, 9, 4\] do not fit(.|\n)*test_tiled_attention.py:\d+"):
            F.scaled_dot_product_attention(q, k.transpose(-1, -2), v)
        with pytest.raises(RuntimeError, match=r"sdpa_tiled: the shapes \[2, 2, 7, 9\] and \[2, 3, 7, 9\] cannot be "
                                               r"broadcast together(.|\n)*test_tiled_attention.py:\d+"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=jg.zeros(2, 2, 7, 9, dtype=jg.float64))
        with pytest.raises(RuntimeError, match=r"sdpa_tiled: the mask \[5, 1, 1, 7, 9\] must broadcast to the scores' "
                                               r"shape \[2, 3, 7, 9\]"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=jg.zeros(5, 1, 1, 7, 9, dtype=jg.float64))
        with pytest.raises(RuntimeError, match=r"^Expected query, key, and value to have the same dtype, but got "
                                               r"query.dtype: double key.dtype: float and value.dtype: double"):
            F.scaled_dot_product_attention(q, k.float(), v)     # torch's text (the function checks first)
    with pytest.raises(RuntimeError, match=r"sdpa_tiled: Expected query, key, and value to have the same dtype"):
        bind(OPS["sdpa_tiled"], q, k.float(), v, scale=1.0, causal=False, block_q=2, block_k=2)
    with pytest.raises(RuntimeError, match=r"sdpa_tiled: block_k must be a positive int, got 0"):
        bind(OPS["sdpa_tiled"], q, k, v, scale=1.0, causal=False, block_q=2, block_k=0)
    with pytest.raises(RuntimeError, match=r"sdpa_tiled_backward: the cotangent must be float64\[210\] \(query "
                                           r"\[2, 3, 7, 5\], key \[2, 3, 9, 5\], value \[2, 3, 9, 4\]\), got "
                                           r"float64\[10\]"):
        flat = bind(OPS["sdpa_tiled"], q, k, v, scale=1.0, causal=False, block_q=2, block_k=2)
        bind(OPS["sdpa_tiled_backward"], q, k, v, flat, flat[:10], scale=1.0, causal=False, block_q=2, block_k=2,
             mask_grad=False)


_CUDA_SCRIPT = r'''
import numpy as np, jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.nn.attention import attention_tiling
arrays = [np.random.default_rng(s).standard_normal((1, 2, 5, 3)) for s in range(3)]

def step(q, k, v):
    with attention_tiling(0, 2, 2):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out * out).sum().backward()
    return out

res = []
for dev in ("cpu", "cuda"):
    for fn in (step, jg.compile(step, background=False)):
        xs = [jg.tensor(a, device=dev, requires_grad=True) for a in arrays]
        o = fn(*xs)
        assert str(o.device).startswith(dev) and all(str(x.grad.device).startswith(dev) for x in xs)
        res.append([o.detach().cpu().numpy()] + [x.grad.cpu().numpy() for x in xs])
for r in res[1:]:
    for a, b in zip(res[0], r):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
print("ok")
'''


def test_cuda_tensors_on_the_simulator():
    """CUDA tensors: eager keeps the decomposition (the device's kernels, the causal mask uploaded), a compiled
    graph traced at a tiled size runs sdpa_tiled / sdpa_tiled_backward as host steps; both equal the CPU."""
    pytest.importorskip("numba.cuda")
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", _CUDA_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_gpt_training_with_tiled_attention_eager_compiled_and_torch(monkeypatch):
    """tests/test_gpt_training.py's GPT (20 AdamW steps, float64, context 8) with every attention tiled in 3 x 4
    blocks: with dropout, eager == compiled (the whole step, and model = jg.compile(model)), the same Philox masks;
    without, compiled == torch."""
    import test_gpt_training as G
    blocks = []
    real = TA._scores
    monkeypatch.setattr(TA, "_scores", lambda *a: blocks.append(1) or real(*a))
    with attention_tiling(0, 3, 4):
        eager = G.train_jitgrad(0.1, True, "eager")
        assert len(blocks) >= 20 * 2 * 2 * 5      # steps x layers x (forward, backward) x blocks of a causal 8 x 8
        assert eager[0][-1] < eager[0][0] - 0.3           # it learns
        G._same(eager, G.train_jitgrad(0.1, True, "compile-step"), 1e-10)
        G._same(eager, G.train_jitgrad(0.1, True, "compile-model"), 1e-10)
        losses, state, init = G.train_jitgrad(0.0, True, "compile-step", backend="numba")
    pytest.importorskip("torch")
    G._same((losses, state), G.train_torch(True, init), 1e-9)


@pytest.mark.parametrize("mshape", [(6,), ()])
def test_masks_of_fewer_than_two_dims_with_their_gradients_dropout_and_second_order(mshape):
    """A 1-d (per key) or 0-d additive mask broadcasts over the queries: the tiled kernels' per-block slicing
    of it, its gradient and the double backward equal the untiled path's, with and without dropout."""
    r = _rng(4)
    arrays = [r.standard_normal(s) for s in ((2, 5, 4), (2, 6, 4), (2, 6, 3), mshape)]

    def grads(tiled, p):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        jg.manual_seed(2)
        with attention_tiling(0 if tiled else 1 << 62, 3, 2):
            out = F.scaled_dot_product_attention(*xs[:3], attn_mask=xs[3], dropout_p=p)
            gs = jg.autograd.grad(out.sin().sum(), xs, create_graph=True)
            ggs = jg.autograd.grad(sum((g * g).sum() for g in gs), xs)
        return [out.detach().numpy()] + [g.detach().numpy() for g in gs + ggs]
    for p in (0.0, 0.3):
        for g, u in zip(grads(True, p), grads(False, p)):
            assert g.shape == u.shape
            np.testing.assert_allclose(g, u, rtol=1e-10, atol=1e-12)


def test_a_float_mask_of_another_dtype_than_the_query_is_torchs_error_tiled_or_not():
    """torch refuses an additive mask whose dtype is not the query's (the untiled backward would meet a float64
    mask gradient with float32 scores; the tiled one would cast silently): the same error either way."""
    torch = pytest.importorskip("torch")
    q, k, v = (_rng(s).standard_normal(sh).astype(np.float32) for s, sh in ((0, (2, 5, 4)), (1, (2, 6, 4)), (2, (2, 6, 3))))
    m = _rng(3).standard_normal((5, 6))
    with pytest.raises(RuntimeError) as want:
        torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)),
                                                         attn_mask=torch.tensor(m))
    for tiled in (True, False):
        with pytest.raises(RuntimeError) as got:
            _sdpa(*(jg.tensor(a) for a in (q, k, v)), tiled, attn_mask=jg.tensor(m))
        assert str(got.value).splitlines()[0] == str(want.value)


@pytest.mark.parametrize("tiled", [False, True])
def test_a_float32_mask_on_a_float64_query_is_accepted_as_torch(tiled):
    """torch accepts a bool mask, a mask of the query's dtype, and a float32 mask on any float query (added in
    the query's dtype; the mask's gradient stays float32), eager and compiled; other dtypes are its error, the
    dtypes by their C++ names."""
    torch = pytest.importorskip("torch")
    q, k, v = (_rng(s).standard_normal(sh) for s, sh in ((0, (2, 5, 4)), (1, (2, 6, 4)), (2, (2, 6, 3))))
    m = _rng(3).standard_normal((5, 6)).astype(np.float32)
    m[1] = -np.inf
    ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v, m)]
    want = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=ts[3])
    want.sin().sum().backward()

    def f(q, k, v, m):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        out.sin().sum().backward()
        return out.detach()
    for fn in (f, jg.compile(f, backend="interpret")):
        xs = [jg.tensor(a, requires_grad=True) for a in (q, k, v, m)]
        with attention_tiling(0 if tiled else 1 << 62, 3, 2):
            out = fn(*xs)
        assert out.dtype is jg.float64 and xs[3].grad.dtype is jg.float32
        for a, b, tol in zip([out] + [x.grad for x in xs], [want] + [t.grad for t in ts], [1e-11] * 4 + [1e-6]):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=tol, atol=tol)
    for dtype in ("int64", "int32", "uint8", "float16"):
        with pytest.raises(RuntimeError) as exp:
            torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=torch.ones(5, 6, dtype=getattr(
                torch, dtype)))
        with pytest.raises(RuntimeError) as got:
            _sdpa(*xs[:3], tiled, attn_mask=jg.ones(5, 6, dtype=getattr(jg, dtype)))
        assert str(got.value).splitlines()[0] == str(exp.value)
