"""Big eager elementwise ops split between threads (ir/eager_chunks.py): the same bits as one thread, at
every thread count; the cases that must stay serial stay serial (counted with ``STATS``, never timed)."""

import multiprocessing
import os

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.ir import settings
from jitgrad.ir import eager_chunks

N = (3 * eager_chunks.MIN_CHUNK) // 64 + 7      # rows of 64: a size that does not split evenly


@pytest.fixture(autouse=True)
def _no_pacing(monkeypatch):
    """Split calls are counted here, so a loaded test machine must not switch them to serial (the pacer has a
    test of its own)."""
    monkeypatch.setattr(eager_chunks._PACER, "left", 0)
    monkeypatch.setattr(eager_chunks._Pacer, "SLOW", float("inf"))


def _threads(monkeypatch, n):
    monkeypatch.setattr(settings.STATE, "num_threads", n)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((N, 64), dtype=np.float32)
    b = rng.standard_normal((N, 64), dtype=np.float32)
    return a, b


PROGRAMS = {
    "arith": lambda x, y: (x * y + 1.5) / (y.abs() + 0.5) - x,
    "unary": lambda x, y: x.exp().log1p().sqrt().tanh().sigmoid(),
    "compare_where": lambda x, y: jg.where(x > y, x, y * 2.0),
    "clamp_pow": lambda x, y: x.clamp(-0.5, 0.7) ** 2 + y.pow(3),
    "gelu": lambda x, y: F.gelu(x) + F.gelu(y, approximate="tanh"),
    "cast": lambda x, y: (x * 100).to(jg.int32).to(jg.float64) + y.double(),
    "zero_dim": lambda x, y: x * jg.tensor(3.0) + jg.tensor(1.0, dtype=jg.float64),
    "int": lambda x, y: (x * 10).long() // 3 + (y * 10).long() % 7,
    "bias": lambda x, y: x * y[0] + y[1:2],
    "mask_4d": lambda x, y: x.reshape(N, 1, 8, 8).expand(N, 2, 8, 8).contiguous().masked_fill(
        jg.tril(jg.ones(8, 8)) == 0, float("-inf")),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_chunked_ops_give_the_serial_bits(monkeypatch, name):
    a, b = _data()
    fn = PROGRAMS[name]
    _threads(monkeypatch, 1)
    ref = fn(jg.tensor(a), jg.tensor(b)).numpy()
    for n in (2, 3, 4):
        _threads(monkeypatch, n)
        before = eager_chunks.STATS["chunked_calls"]
        got = fn(jg.tensor(a), jg.tensor(b)).numpy()
        assert eager_chunks.STATS["chunked_calls"] > before, "nothing ran chunked"
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


def test_chunked_forward_and_backward_match_serial(monkeypatch):
    a, b = _data(1)

    def run():
        x, y = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
        loss = (F.gelu(x * y) + (x - y).tanh() * 0.5).sum()
        loss.backward()
        return x.grad.numpy(), y.grad.numpy()
    _threads(monkeypatch, 1)
    ref = run()
    _threads(monkeypatch, 2)
    before = eager_chunks.STATS["chunked_calls"]
    got = run()
    assert eager_chunks.STATS["chunked_calls"] - before >= 6     # forward and backward ops both split
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_what_stays_serial(monkeypatch):
    a, b = _data(2)
    x = jg.tensor(a)
    _threads(monkeypatch, 2)
    serial = {
        "small": lambda: jg.tensor(a[:10]) * 2.0,
        "broadcast along the first axis": lambda: jg.tensor(a[:1]).expand(N, 64) + x[:1],
        "not contiguous": lambda: x.t() * 2.0,
        "random": lambda: jg.rand(N, 64),
    }
    for what, fn in serial.items():
        before = eager_chunks.STATS["chunked_calls"]
        fn()
        assert eager_chunks.STATS["chunked_calls"] == before, what
    _threads(monkeypatch, 1)
    before = eager_chunks.STATS["chunked_calls"]
    x * 2.0
    assert eager_chunks.STATS["chunked_calls"] == before, "one thread"


def test_errstate_still_raises(monkeypatch):
    _threads(monkeypatch, 2)
    big = jg.full((N, 64), 3e38)
    with np.errstate(over="raise"), pytest.raises(RuntimeError, match="overflow"):
        big * 10.0      # per-thread error state: the call runs on this thread, which raises
    assert np.isinf((big * 10.0).numpy()).all()


def _child(q):
    try:
        settings.STATE.num_threads = 2
        a, b = _data(3)
        q.put(bool(np.array_equal((jg.tensor(a) * jg.tensor(b)).numpy(), a * b)))
    except BaseException as e:  # noqa: BLE001
        q.put(repr(e))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_chunked_ops_after_fork(monkeypatch):
    """The workers are threads of the parent: a forked child starts its own (and does not wait on the parent's)."""
    _threads(monkeypatch, 2)
    a, b = _data(3)
    jg.tensor(a) * jg.tensor(b)           # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) is True


ROW_PROGRAMS = {
    "softmax": lambda x: F.softmax(x, dim=-1),
    "log_softmax_3d": lambda x: F.log_softmax(x.reshape(N, 8, 8), dim=1),
    "layer_norm": lambda x: F.layer_norm(x, (64,)),
    "sum_last": lambda x: x.sum(-1),
    "amax_keep": lambda x: x.reshape(N, 4, 16).amax(dim=(1, 2), keepdim=True),
    "cross_entropy_rows": lambda x: F.cross_entropy(x, jg.zeros(N, dtype=jg.int64), reduction="none"),
}


@pytest.mark.parametrize("name", sorted(ROW_PROGRAMS))
def test_row_ops_split_by_rows_give_the_serial_bits(monkeypatch, name):
    a, _ = _data(4)
    fn = ROW_PROGRAMS[name]

    def run(threads):
        monkeypatch.setattr(settings.STATE, "num_threads", threads)
        x = jg.tensor(a, requires_grad=True)
        y = fn(x)
        y.backward(jg.tensor(np.random.default_rng(5).standard_normal(tuple(y.shape), dtype=np.float32)))
        return y.detach().numpy(), x.grad.numpy()
    ref = run(1)
    before = eager_chunks.STATS["chunked_calls"]
    got = run(2)
    assert eager_chunks.STATS["chunked_calls"] > before
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_row_ops_over_the_leading_axis_stay_serial(monkeypatch):
    a, _ = _data(4)
    _threads(monkeypatch, 2)
    x = jg.tensor(a)
    before = eager_chunks.STATS["chunked_calls"]
    F.softmax(x, dim=0), x.sum(0), x.sum()
    assert eager_chunks.STATS["chunked_calls"] == before


def test_random_draws_split_between_threads_give_the_serial_bits(monkeypatch):
    """Philox's rounds run by chunk on several threads: every element is computed alone, so the draw is the same."""
    def draw(threads):
        monkeypatch.setattr(settings.STATE, "num_threads", threads)
        g = jg.Generator().manual_seed(123)
        return [jg.rand(N, 64, generator=g).numpy(), jg.randn(N, 32, generator=g, dtype=jg.float64).numpy(),
                F.dropout(jg.ones(N, 64), 0.3, True).numpy()]
    jg.manual_seed(7)
    one = draw(1)
    jg.manual_seed(7)
    two = draw(2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_a_late_worker_makes_the_next_calls_serial(monkeypatch):
    """A split call whose workers finish long after the caller's own chunk (a core taken by another process)
    runs the next ``HOLD`` calls on one thread, then tries again; a retry that is slow again holds twice as long."""
    import time
    monkeypatch.setattr(eager_chunks._Pacer, "SLOW", 2.5)
    monkeypatch.setattr(eager_chunks, "_PACER", eager_chunks._Pacer())
    _threads(monkeypatch, 2)
    n = 4 * eager_chunks.MIN_CHUNK
    assert eager_chunks.threads_for(n) == 2
    eager_chunks.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    hold = eager_chunks._Pacer.HOLD
    assert [eager_chunks.threads_for(n) for _ in range(hold)] == [1] * hold
    assert eager_chunks.threads_for(n) == 2
    eager_chunks.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    assert eager_chunks._PACER.left == 2 * hold
