"""Data-dependent sizes under @jitgrad.compile (issue 30, deliverable 4): ``nonzero``, ``x[mask]``,
``masked_select`` and one-argument ``where`` give a size bounded by the mask's (``ir/unbacked.py``), laid out at
the bound with the run's count (``ir/passes/bounded_sizes.py``): one trace serves every mask, never a retrace per
value; what cannot take such a size is refused naming the op, the shapes and the user's line.  Counts, never
times: each compiled function here is traced once and shared by its test's cases."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.ir.unbacked import DataDependentSizeError

THIS = __file__

# every density a mask can have, the empty and the full one included
DENSITIES = (0.0, 1.0, 0.05, 0.3, 0.5, 0.8, 0.97, 0.0, 1.0)


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _masked_loss(x, w, m):
    y = x[m] * w
    loss = (y * y).mean() + x[m].sum() * 0.25
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_masked_losses_are_one_trace_for_every_density(backend):
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((6, 5)).astype(np.float32), requires_grad=True)
    w = jg.tensor(np.float32(1.5), requires_grad=True)
    f = jg.compile(_masked_loss, backend=backend, background=False)
    for dens in DENSITIES:
        mn = rng.random((6, 5)) < dens
        m = jg.tensor(mn)
        x.grad = w.grad = None
        got = float(f(x, w, m))
        gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
        x.grad = w.grad = None
        want = float(_masked_loss(x, w, m))
        xs = x.detach().numpy()[mn]
        ref = np.mean((xs * 1.5) ** 2) + xs.sum() * 0.25 if mn.any() else np.nan
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(got, ref, rtol=1e-5, equal_nan=True)
        np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-6, atol=1e-7, equal_nan=True)
        np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-6, equal_nan=True)
        if mn.any():        # d/dx of the loss: 2 w^2 x / n + 0.25 where selected, 0 elsewhere
            np.testing.assert_allclose(gx, np.where(mn, 2 * 2.25 * x.detach().numpy() / mn.sum() + 0.25, 0), rtol=1e-5)
    assert f.stats["traces"] == 1 and f.stats["eager_fallbacks"] == f.stats["eager_calls"] == 0
    assert backend == "interpret" or f.stats["compiled_calls"] == len(DENSITIES)


def _lm_step(h, w, tgt, m):
    # a masked language-model loss: the rows a mask selects, a linear layer, cross-entropy over them
    loss = F.cross_entropy(h[m] @ w, tgt[m])
    loss.backward()
    return loss.detach()


def test_a_masked_cross_entropy_step_matches_eager_with_one_trace():
    rng = np.random.default_rng(1)
    B, T, C, V = 3, 5, 4, 7
    h = jg.tensor(rng.standard_normal((B, T, C)).astype(np.float32), requires_grad=True)
    w = jg.tensor(rng.standard_normal((C, V)).astype(np.float32), requires_grad=True)
    f = jg.compile(_lm_step, backend="numba", background=False)
    for dens in DENSITIES[:6]:
        m = jg.tensor(rng.random((B, T)) < dens)
        tgt = jg.tensor(rng.integers(0, V, (B, T)))
        h.grad = w.grad = None
        got = float(f(h, w, tgt, m))
        gh, gw = h.grad.numpy().copy(), w.grad.numpy().copy()
        h.grad = w.grad = None
        np.testing.assert_allclose(got, float(_lm_step(h, w, tgt, m)), rtol=1e-5, equal_nan=True)
        np.testing.assert_allclose(gh, h.grad.numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)
        np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-5, atol=1e-7, equal_nan=True)
    assert f.stats["traces"] == 1 and f.stats["compiled_calls"] == 6


def test_gradcheck_of_a_compiled_masked_op_in_float64():
    # the compiled function's output needs grad: its backward is the transpose pass over the graph at the bound,
    # and the output is trimmed to the mask's count by an autograd-recorded slice
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    f = jg.compile(lambda x, m: (x[m] ** 2).sin() * x[m].sum(), background=False)
    for dens in (0.5, 0.0, 1.0):
        m = jg.tensor(rng.random((4, 3)) < dens)
        assert jg.autograd.gradcheck(lambda x: f(x, m), (x,))
        y, e = f(x, m), (x[m] ** 2).sin() * x[m].sum()
        assert y.shape == e.shape
        np.testing.assert_allclose(y.detach().numpy(), e.detach().numpy(), rtol=1e-12)
    m = jg.tensor(rng.random((4, 3)) < 0.5)
    assert jg.autograd.gradgradcheck(lambda x: f(x, m), (x,))
    assert f.stats["eager_fallbacks"] == 0


def _selections(x, m):
    rows = x.reshape(3, -1)[m.reshape(3, -1).any(1)]        # a mask over the leading dim: whole rows
    return (x.nonzero(), m.nonzero(as_tuple=True)[1] * 1, jg.where(m)[0] + 1, jg.masked_select(x, m),
            x[m] * 2, rows.sum(0), m.nonzero().shape[0] + x[m].sum())


SELECT = jg.compile(_selections, backend="numba", background=False)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.booleans(), min_size=12, max_size=12), st.integers(0, 2 ** 31 - 1))
def test_selections_match_eager_over_random_masks(bits, seed):
    x = jg.tensor(np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32))
    x = jg.where(jg.tensor(np.random.default_rng(seed + 1).random((3, 4)) < 0.2), 0.0, x)   # zeros: nonzero
    m = jg.tensor(np.array(bits).reshape(3, 4))
    for got, want in zip(SELECT(x, m), _selections(x, m)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert SELECT.stats["traces"] == 1 and SELECT.stats["compiled_calls"] == SELECT.stats["calls"]


def _uniques(x):
    v, inv, cnt = jg.unique(x, return_inverse=True, return_counts=True)
    return v * 2, inv, cnt, jg.unique(x), jg.argwhere(x > 1)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_unique_and_argwhere_are_bounded_too(backend):
    rng = np.random.default_rng(4)
    f = jg.compile(_uniques, backend=backend, background=False)
    for x in (rng.integers(0, 4, (3, 5)), np.full((3, 5), 2), rng.integers(0, 15, (3, 5)), [[1, np.nan, np.nan]]):
        x = jg.tensor(np.asarray(x, np.float32))
        for got, want in zip(f(x), _uniques(x)):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert f.stats["traces"] == 2       # (the last input's shape differs)


def test_symbolic_and_data_dependent_sizes_together():
    # a batch dim that varies (a backed symbol) and a mask's count bounded by it: one trace
    def step(x, m):
        loss = (x[m] ** 2).mean()
        loss.backward()
        return loss.detach()
    f = jg.compile(step, dynamic=True, background=False)
    rng = np.random.default_rng(3)
    for n in (5, 9, 17, 6):
        x = jg.tensor(rng.standard_normal((n, 3)).astype(np.float32), requires_grad=True)
        m = jg.tensor(rng.random((n, 3)) < 0.4)
        got = float(f(x, m))
        g = x.grad.numpy().copy()
        x.grad = None
        np.testing.assert_allclose(got, float(step(x, m)), rtol=1e-6)
        np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-6)
    assert f.stats["traces"] == 1


def _masked_write(x, w):
    y, m = x.clone(), x > 0.3
    y[m] = (x[m] * w).exp().cumsum(0)       # cumsum's gradient: a reverse scan over the selected elements
    loss = (y * y).sum()
    loss.backward()
    return loss.detach(), y.detach()


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_writes_by_a_mask_match_eager(backend):
    # y[m] = v with v of the mask's count: the padding writes what the first selected element gets (or, with none,
    # element 0's own value back)
    rng = np.random.default_rng(6)
    f = jg.compile(_masked_write, backend=backend, background=False)
    for dens in (0.5, 1.0, 0.0, 0.2):
        xn = rng.standard_normal((4, 3)).astype(np.float32)
        xn = np.abs(xn) + 0.5 if dens == 1.0 else -np.abs(xn) if dens == 0.0 else xn
        x, w = jg.tensor(xn, requires_grad=True), jg.tensor(np.float32(0.7), requires_grad=True)
        loss, y = f(x, w)
        gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
        x.grad = w.grad = None
        want, ye = _masked_write(x, w)
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
        np.testing.assert_allclose(y.numpy(), ye.numpy(), rtol=1e-5)
        np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-5)
    assert f.stats["traces"] == 1


def test_a_mask_computed_twice_is_one_size_and_writes_differentiate():
    # y[x > 0] = ... x[x > 0]: two evaluations of one mask give one data-dependent size (the ops agree)
    def write(x, w):
        y = x * 1
        y[x > 0] = w * x[x > 0]
        y[x < -0.5] = w         # a value broadcast over the selected elements
        return y
    rng = np.random.default_rng(7)
    f = jg.compile(write, background=False)
    for dens in (0.5, 0.0, 1.0):
        xn = rng.standard_normal((3, 4))
        xn = np.abs(xn) + 1 if dens == 1.0 else -np.abs(xn) if dens == 0.0 else xn
        x, w = jg.tensor(xn, requires_grad=True), jg.tensor(0.5, dtype=jg.float64, requires_grad=True)
        np.testing.assert_allclose(f(x, w).detach().numpy(), write(x, w).detach().numpy())
        assert jg.autograd.gradcheck(lambda x, w: f(x, w), (x, w))
    # (gradcheck's evaluations under no_grad are another mode: one more trace, never one per mask)
    assert f.stats["trace_reasons"] == {"first call": 1, "modes": 1}


def _log_loss(x):
    loss = (x[x > 0].log() * 2).sum()
    loss.backward()
    return loss.detach()


def test_the_padding_computes_like_the_data():
    # the padding repeats the first selected element: log of the unselected -1 is never computed, so anomaly mode
    # sees no NaN; nor does an integer division meet a zero divisor the mask left out
    x = jg.tensor([[-1.0, 2.0, 3.0], [0.5, -4.0, 6.0]], requires_grad=True)
    with jg.autograd.detect_anomaly():
        got = float(jg.compile(_log_loss, backend="numba", background=False)(x))
        g = x.grad.numpy().copy()
        x.grad = None
        np.testing.assert_allclose(got, float(_log_loss(x)), rtol=1e-6)
        np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-6)
    k = jg.tensor([[0, 2, 3], [4, 0, 6]])
    assert int(jg.compile(lambda k: (12 // k[k != 0]).sum(), background=False)(k)) == 6 + 4 + 3 + 2


def test_what_cannot_take_a_data_dependent_size_is_refused_clearly():
    x = jg.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4) - 5)

    def reshaped(x):
        return x[x > 0].reshape(2, -1)

    def first(x):
        return x[x > 0][0] * 2

    def branch(x):
        y = x[x > 0]
        return y * 2 if y.shape[0] > 2 else y

    def sorted_(x):
        return x[x > 0].sort().values

    def flipped(x):
        m = x > 0
        return x[m].flip(0) * 2

    def two_masks(x):
        return x[x > 0] + x[x < 1]

    cases = [(reshaped, "reshape(2, -1)", "data-dependent size"), (first, "[0] * 2", "getitem on f32[u"),
             (branch, "y.shape[0] > 2", "data-dependent size"), (sorted_, ".sort()", "argsort on f32[u"),
             (flipped, ".flip(0)", "flip on f32[u"), (two_masks, "x[x < 1]", "u")]
    for fn, text, what in cases:
        with pytest.raises(DataDependentSizeError) as ei:
            jg.compile(fn, background=False)(x)
        msg = str(ei.value)
        assert f"{THIS}:{_line(fn, text)}" in msg and what in msg and "Traceback" not in msg, (fn.__name__, msg)
    with pytest.warns(UserWarning, match="fullgraph=False"):
        g = jg.compile(first, fullgraph=False)
        np.testing.assert_allclose(g(x).numpy(), first(x).numpy())
