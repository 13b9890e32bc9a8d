"""Store or recompute (ir/passes/fuse.py): a value that a later loop over the same space reads is recomputed
there when its chain costs less than the store and load it saves (LayerNorm's x - mean), and stored otherwise
(a softmax's exponentials).  Counted in the plan, values checked against eager mode, never timed.  The plans
are the plain planner's (``rowwise=False``, as CUDA plans): on the CPU these chains become row-wise kernels
(tests/test_rowwise.py), and the rule applies to the loops that are not."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.passes.fuse import plan


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _plan(f, *args):
    f(*args)
    (entries,) = f._cache.values()
    return plan(entries[0].graph)


def _x(shape=(16, 96), seed=0):
    return jg.tensor(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def layer_norm(x):
    y = x - x.mean(-1, keepdim=True)
    v = (y * y).mean(-1, keepdim=True)
    return y * (v + 1e-5).rsqrt()


def softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _full_size_outputs(p, shape):
    return [[tuple(v.aval.shape) for v in g.outputs if tuple(v.aval.shape) == shape] for g in p.groups]


def test_cheap_values_are_recomputed_not_stored():
    x = _x()
    f = jg.compile(layer_norm, backend="numba")
    p = _plan(f, x)
    full = _full_size_outputs(p, (16, 96))
    assert sum(len(o) for o in full) == 1, p      # only the result: x - mean is recomputed, not stored
    last = [g for g in p.groups if g.shape == (16, 96)][-1]
    assert [e.op.name for e in last.eqns][:1] == ["sub"], p
    np.testing.assert_allclose(f(x).numpy(), layer_norm(x).numpy(), rtol=1e-5, atol=1e-6)


def test_transcendental_values_are_stored_not_recomputed():
    x = _x()
    f = jg.compile(softmax, backend="numba")
    p = _plan(f, x)
    full = _full_size_outputs(p, (16, 96))
    assert sum(len(o) for o in full) == 2, p      # the exponentials (an exp costs more than a store) and the result
    np.testing.assert_allclose(f(x).numpy(), softmax(x).numpy(), rtol=1e-5, atol=1e-7)


def test_backward_with_recomputed_values_matches_eager():
    xs = _x((8, 40), seed=1).numpy().astype(np.float64)
    w = jg.tensor(np.random.default_rng(2).standard_normal(40))

    def step(x):
        y = layer_norm(x) * w
        (g,) = jg.autograd.grad((y * y.tanh()).sum(), [x])
        return g

    f = jg.compile(step, backend="numba")
    p = _plan(f, jg.tensor(xs, requires_grad=True))
    # x - mean is read by the variance loop and, in the backward, by two later loops: each of those recomputes
    # it (one subtraction) rather than the first storing it (a write and two reads)
    first = next(g for g in p.groups if g.reduce is not None and "sub" in [e.op.name for e in g.eqns])
    assert [tuple(v.aval.shape) for v in first.outputs] == [(8, 1)], p
    assert sum(bool(g.eqns) and g.eqns[0].op.name == "sub" for g in p.groups if g.shape == (8, 40)) >= 3, p
    for seed in (1, 3):
        x = jg.tensor(np.random.default_rng(seed).standard_normal((8, 40)), requires_grad=True)
        want = step(x).numpy()
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-10, atol=1e-12)


def test_a_value_other_steps_read_stays_stored_by_its_loop():
    """x - mean is also read by a matmul (not a loop): the loop that computes it still stores it."""
    m = jg.tensor(np.random.default_rng(4).standard_normal((96, 8), dtype=np.float32))

    def fn(x):
        y = x - x.mean(-1, keepdim=True)
        v = (y * y).mean(-1, keepdim=True)
        return y * v.rsqrt(), y @ m

    x = _x()
    f = jg.compile(fn, backend="numba")
    p = _plan(f, x)
    stored = [v for g in p.groups for v in g.outputs if tuple(v.aval.shape) == (16, 96)]
    assert len(stored) == 2, p                    # y (for the matmul) and the normalised result
    got, want = f(x), fn(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_a_value_compared_with_its_max_is_stored_not_recomputed():
    """amax's backward compares its input with the max (``eq``): both must read the same bits, and a recomputation
    in another loop may round differently (fast-math contraction: ``x * w + b`` is an FMA in a loop where
    ``x * w`` has one use and not in the one that also stores it), leaving rows without a maximum: a tie count of
    0 and NaN gradients.  Such a value is stored by the loop that computes it, whatever the recomputation costs."""
    rng = np.random.default_rng(5)
    w, b = (jg.tensor(rng.standard_normal(300)) for _ in range(2))

    def ties(x):
        t = x * w
        h = t + b
        return (h == h.amax(-1, keepdim=True)).sum(-1), t

    def grad(x):
        t = x * w
        (t + b).amax(-1).sum().backward()
        return x.grad, t.detach()

    x = jg.tensor(rng.standard_normal((64, 300)))
    p = _plan(jg.compile(ties, backend="numba"), x)
    amax = next(g for g in p.groups if g.reduce is not None and g.reduce.op.name == "amax")
    assert amax.reduce.ins[0] in amax.outputs, p
    assert not any(e.outs[0] is amax.reduce.ins[0] for g in p.groups if g is not amax for e in g.eqns), p
    for fn in (ties, grad):
        f = jg.compile(fn, backend="numba")
        for seed in (6, 7):
            xa = np.random.default_rng(seed).standard_normal((64, 300))
            got = f(jg.tensor(xa, requires_grad=True))
            want = fn(jg.tensor(xa, requires_grad=True))
            for a, e in zip(got, want):
                np.testing.assert_allclose(a.detach().numpy(), e.detach().numpy(), rtol=1e-12, atol=1e-12)


def _gelu_mlp(n):
    rng = np.random.default_rng(8)
    w = jg.tensor(rng.standard_normal((128, n), dtype=np.float32) * 0.1, requires_grad=True)
    b = jg.tensor(rng.standard_normal(n, dtype=np.float32) * 0.1, requires_grad=True)
    w2 = jg.tensor(rng.standard_normal((n, 16), dtype=np.float32) * 0.1, requires_grad=True)

    def step(x):
        loss = (jg.nn.functional.gelu(x @ w + b) @ w2).square().sum()
        return jg.autograd.grad(loss, [w, b, w2])
    return step


def _stored_full(p, shape):
    return sum(tuple(v.aval.shape) == shape for g in p.groups for v in g.outputs)


def test_a_big_stored_value_pays_for_its_lines_read_before_written():
    """A value of at least a core's L2 is not in cache when its loop stores it: the store reads each line first
    (write-allocate), so it costs twice its item size, and GELU's backward recomputes ``1 + erf(x / sqrt 2)`` from
    the ``x = h + b`` it recomputes anyway for the pdf (B9: 2 MiB a layer, written by the forward, read by the
    backward) instead of loading it; over a small space (in cache) the forward still stores it."""
    x = jg.tensor(np.random.default_rng(9).standard_normal((1024, 128), dtype=np.float32))
    big = _gelu_mlp(512)                  # 1024 x 512 float32: 2 MiB
    f = jg.compile(big, backend="numba")
    p = _plan(f, x)
    assert _stored_full(p, (1024, 512)) == 2, p      # the GEMM's h and GELU's output (1 + erf: not stored)
    back = next(g for g in p.groups if g.shape == (1024, 512) and g.reduce is not None)
    assert "erf" in [e.op.name for e in back.eqns], p
    for a, b in zip(f(x), big(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=2e-5)
    xs = jg.tensor(np.random.default_rng(9).standard_normal((32, 128), dtype=np.float32))
    small = _gelu_mlp(64)
    fs = jg.compile(small, backend="numba")
    ps = _plan(fs, xs)
    assert _stored_full(ps, (32, 64)) == 3, ps       # h, GELU's output and 1 + erf, stored for the backward
    for a, b in zip(fs(xs), small(xs)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=2e-5)
