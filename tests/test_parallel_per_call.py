"""Parallel choices made per call, inside the kernels (issues 30 and 32): counted, never timed.

A loop that may be worth the worker pool (its size is symbolic, or it reaches the threshold now) is built
parallel-capable and compares its work with ``workpool.min_work()`` at every call; a batch of small products does
the same in the entry.  So a program laid out once for every size records no guard on a parallel choice (nanoGPT
with ``T`` drawn from 8..64 needs one lowering), a threshold set at run time applies to built kernels, and whether
a call takes the pool changes no bit of its results (the same chunks run on the calling thread).
"""
from __future__ import annotations


import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir import settings

from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests

two_workers = pytest.mark.skipif(settings.default_threads() < 2, reason="the pool needs two workers")


@pytest.fixture
def min_work():
    """Set the pool's threshold for a test (restored after it)."""
    prev = workpool.set_min_work(workpool.min_work())
    yield workpool.set_min_work
    workpool.set_min_work(*prev)


def _gpt_step(compiled):
    jg.manual_seed(0)
    m = gpt_model.make_gpt(jg, 65, 64, 64, 4, 2, 0.0, False)
    step = gpt_model.make_step(jg, m, m, gpt_model.make_optimizer(jg, m, 1e-3))
    return jg.compile(step, backend="numba", background=False) if compiled else step


def test_variable_length_gpt_is_lowered_once():
    """nanoGPT (2 blocks of width 64, block size 64) trained with T drawn from 8..64: two traces, one program
    lowered for every size (no region per parallel choice: T = 16, 22, 32 and 64 each flipped one before), no
    eager fallback, every later length bound to it, and the losses of eager mode."""
    rng = np.random.default_rng(1)
    lengths = [8, 64, 9, 15, 16, 21, 22, 31, 32, 33, 47, 63, 12]
    data = [(rng.integers(0, 65, (8, t)), rng.integers(0, 65, (8, t))) for t in lengths]
    f, ref = _gpt_step(True), _gpt_step(False)
    got = [float(f(jg.tensor(i), jg.tensor(t))) for i, t in data]
    want = [float(ref(jg.tensor(i), jg.tensor(t))) for i, t in data]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    s = f.stats
    assert s["traces"] == 2 and s["eager_fallbacks"] == 0, s
    assert s["shape_lowerings"] == 1 and s["shape_instances"] == 1, s
    assert s["shape_bindings"] == len(lengths) - 2, s      # (the first length: a static trace; the second: concrete)


def _steps(x, w, v):
    """Every kind of parallel step: an elementwise chain, a full sum, a row kernel with column sums (LayerNorm's
    backward) and a batch of small products (attention's scores)."""
    h = jg.nn.functional.layer_norm(x, (x.shape[-1],), w, None)
    (h * h).sum().backward()
    h = h.detach().view(4, -1, 16)
    return jg.tanh(x.detach() * 1.5).sum(), h @ h.transpose(-2, -1), x.grad, w.grad, jg.sigmoid(v) * v


def _args(rows, n):
    rng = np.random.default_rng(rows)
    x = jg.tensor(rng.standard_normal((rows, 64)).astype(np.float32), requires_grad=True)
    w = jg.tensor(rng.standard_normal(64).astype(np.float32), requires_grad=True)
    v = jg.tensor(rng.standard_normal(n).astype(np.float32))
    return x, w, v


def _run(f, args):
    x, w, _ = args
    x.grad = w.grad = None
    before = workpool.rounds()
    outs = [o.detach().numpy().copy() for o in f(*args)]
    return outs, workpool.rounds() - before


@two_workers
def test_a_threshold_set_at_run_time_moves_calls_off_the_pool_and_changes_no_bit(min_work):
    """A program laid out for every size (its loops and its batch gated) and a static one: with the threshold
    (and the grain) at 0 every gated step takes the pool, with it out of reach none does (counted: the pool's rounds), and the
    results are the same bits; the launch records say which."""
    f = jg.compile(_steps, backend="numba", background=False, dynamic=True)
    for rows in (32, 48):                   # a concrete instance, then the lowering
        _run(f, _args(rows, 5000))
    assert f.stats["shape_lowerings"] == 1, f.stats
    # (dynamic=True: LayerNorm's width is a symbol too, so its forward and backward are one fused loop; at 640
    # rows each product of the batch is past OpenBLAS's threading threshold, so the batch stays on this thread)
    for rows, n, gated_steps in ((80, 5000, 4), (640, 1 << 17, 3)):
        args = _args(rows, n)
        _run(f, args)                       # (bound)
        min_work(0, 0)
        pooled, rounds_pooled = _run(f, args)
        min_work(1 << 62)
        serial, rounds_serial = _run(f, args)
        assert rounds_pooled == gated_steps and rounds_serial == 0, (rounds_pooled, rounds_serial)
        for a, b in zip(pooled, serial):
            np.testing.assert_array_equal(a, b)
    assert f.stats["shape_lowerings"] == 1 and f.stats["shape_bindings"] == 3, f.stats
    # a static program: capable where it reaches the threshold when laid out, and that kernel obeys a new one
    g = jg.compile(lambda v: jg.sigmoid(v) * v + jg.tanh(v), backend="numba", background=False)
    v = jg.tensor(np.linspace(-3, 3, 1 << 20, dtype=np.float32))
    min_work(workpool.PARALLEL_WORK, workpool.PARALLEL_GRAIN)
    g(v)
    on = [(l_.parallel, l_.gated) for l_ in g.launches(v)]
    before = workpool.rounds()
    a = g(v).numpy().copy()
    assert workpool.rounds() - before == 1 and on == [(True, True)]
    min_work(1 << 62)
    before = workpool.rounds()
    b = g(v).numpy().copy()
    assert workpool.rounds() == before and [(l_.parallel, l_.gated) for l_ in g.launches(v)] == [(False, True)]
    np.testing.assert_array_equal(a, b)


@two_workers
def test_symbolic_loops_take_the_pool_by_their_size_at_the_default_threshold(min_work):
    """The same bound program: a small size (under the grain) runs every gated loop on the calling thread, a
    large one takes the pool (no new lowering for it)."""
    min_work(workpool.PARALLEL_WORK, workpool.PARALLEL_GRAIN)
    f = jg.compile(lambda v: (jg.tanh(v) * jg.sigmoid(v) * 2.0).exp(), backend="numba", background=False,
                   dynamic=True)
    rounds = {}
    small = [workpool.PARALLEL_GRAIN // 4, workpool.PARALLEL_GRAIN // 2, workpool.PARALLEL_GRAIN - 3,
             workpool.PARALLEL_GRAIN - 1]
    for n in small[:3] + [1 << 20] + small[3:]:
        v = jg.tensor(np.linspace(-1, 1, n, dtype=np.float32))
        before = workpool.rounds()
        np.testing.assert_allclose(f(v).numpy(), np.exp(np.tanh(v.numpy()) / (1 + np.exp(-v.numpy())) * 2.0),
                                   rtol=1e-5)
        rounds[n] = workpool.rounds() - before
    assert f.stats["shape_lowerings"] == 1 and f.stats["shape_bindings"] == 4, f.stats
    assert rounds[1 << 20] == 1 and rounds[small[2]] == rounds[small[3]] == 0, rounds


@two_workers
def test_a_kernel_numba_builds_splits_every_call_and_its_record_says_so(min_work):
    """Normal draws are built by Numba (its ``prange`` splits the loop at every call, whatever the threshold;
    uniform draws are lowered as other loops): the launch record of such a gated kernel says parallel even when
    the threshold is out of reach."""
    min_work(workpool.PARALLEL_WORK, workpool.PARALLEL_GRAIN)
    g = jg.compile(lambda v: jg.randn_like(v) * v, backend="numba", background=False)
    v = jg.tensor(np.ones(1 << 20, np.float32))
    out = g(v).numpy()
    assert np.isfinite(out).all() and abs(float(out.mean())) < 0.01 and 0.98 < float(out.std()) < 1.02
    def draws():
        return [(l_.parallel, l_.gated) for l_ in g.launches(v) if "rand_normal" in l_.label]
    assert draws() == [(True, True)]
    min_work(1 << 62)
    assert draws() == [(True, True)]
