"""Eager matmuls over OpenBLAS's threading threshold as row blocks on the worker pool (``jit/pooled_gemm.py``,
``codegen/native/gemm_blocks.py``): the bits of one single-threaded OpenBLAS call whoever runs the blocks, forward
and backward, and the calling thread alone (the same bits) at one thread, while the pool's busy sign stands, and
while a launch holds the pool.  Counted, never timed."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import build_thread, gemm_blocks, workpool
from jitgrad.codegen.native.threads import LAUNCH_LOCK
from jitgrad.ir import eager_threads, settings
from jitgrad.ir.ops import blas, blas_library
from jitgrad.jit import pooled_gemm
from jitgrad.runtime import dispatch
from jitgrad.runtime.backward import pullback_plans

from gemm_reference import one_call as _one_call  # noqa: E402 - the reference bits


def _choose_afresh():
    """Signatures' and pullback plans' callables chosen again (they keep what the chooser gave)."""
    dispatch._RULES.clear()
    pullback_plans._PLANS.clear()

# (rows, k, n): rows a multiple of float32's unit or not, K past OpenBLAS's K block; B3's products
_REAL_NOTE = eager_threads.note_split
SHAPES = [(256, 64, 256), (256, 256, 64), (300, 96, 700), (257, 300, 100), (999, 64, 70)]


@pytest.fixture
def pooled(monkeypatch):
    if settings.default_threads() < 2 or not blas.raw_gemm_ready() or blas.block_unit(np.float32) is None:
        pytest.skip("needs two cores and OpenBLAS's row unit")
    if gemm_blocks.runner() is None:
        pytest.skip("no pool to run blocks on here")
    before = settings.STATE.num_threads
    jg.set_num_threads(2)
    monkeypatch.setattr(blas, "BLAS_PACER", False)
    monkeypatch.setattr(pooled_gemm, "ENABLED", True)
    # the pacer reads wall times, which a loaded test machine stretches: off (its own test scripts them)
    monkeypatch.setattr(eager_threads._PACER, "left", 0)
    monkeypatch.setattr(eager_threads, "note_split", lambda own, whole, allowed=None: None)
    # a loaded test machine raises the pool's busy signs, whose waits sleep at once: a product would find the
    # worker asleep and run alone (``WAKE_MACS``); the rule's own test scripts the signs
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 0)
    _choose_afresh()
    yield
    _choose_afresh()
    settings.STATE.num_threads = before
    blas.BlasPacer.use(blas.all_threads())


def _counts():
    return pooled_gemm.STATS["pooled_calls"], pooled_gemm.STATS["one_thread_calls"], gemm_blocks.STATS["rounds"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_pooled_product_has_one_calls_bits(pooled, m, k, n, dtype):
    """``x @ y`` on the pool: one round, two blocks at least, OpenBLAS on one thread, and the bits of one call."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    want = _one_call(a, b)
    p0, _, r0 = _counts()
    b0 = gemm_blocks.STATS["blocks"]
    got = (jg.tensor(a) @ jg.tensor(b)).numpy()
    if blas.row_blocks(m, dtype, 2, n * k) is None:
        pytest.skip("too few rows for two blocks of this dtype")
    assert got.tobytes() == want.tobytes()
    p1, _, r1 = _counts()
    assert (p1 - p0, r1 - r0) == (1, 1)
    assert gemm_blocks.STATS["blocks"] - b0 >= 2
    assert blas_library.thread_control()[0]() == 1
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_wide_product_splits_its_columns(pooled, monkeypatch, dtype):
    """C wider than tall (a weight's gradient, x^T g: 128 x 1024 @ 1024 x 512, x^T a transposed view): blocks of
    C's columns, so each call packs its own columns of the big operand, with one call's bits; a tall one splits
    its rows."""
    if blas.block_unit(dtype, False) is None:
        pytest.skip("no column unit for this dtype")
    tried = []
    real = blas.blocks_exact
    monkeypatch.setattr(blas, "blocks_exact", lambda *a: tried.append(a[1]) or real(*a))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1024, 128)).astype(dtype)
    g = rng.standard_normal((1024, 512)).astype(dtype)
    p0, _, r0 = _counts()
    got = (jg.tensor(x).T @ jg.tensor(g)).numpy()
    assert got.tobytes() == _one_call(np.ascontiguousarray(x.T), g).tobytes()
    assert _counts()[0] - p0 == 1 and _counts()[2] - r0 == 1
    assert tried[:1] == [False]
    tried.clear()
    tall = (jg.tensor(g).T @ jg.tensor(x)).numpy()          # 512 x 1024 @ 1024 x 128
    assert tall.tobytes() == _one_call(np.ascontiguousarray(g.T), x).tobytes()
    assert tried[:1] == [True]


def test_layouts_and_a_batch_of_rows(pooled):
    """Transposed views (F-ordered operands, BLAS's flags), a batch of sequences folded into rows (a view of a
    C-ordered x), and a non-contiguous batch (not folded: the one-thread path), all with one call's bits."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((96, 300)).astype(np.float32)       # a.T: (300, 96), F-ordered
    b = rng.standard_normal((700, 96)).astype(np.float32)       # b.T: (96, 700), F-ordered
    want = _one_call(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T))
    p0, _, _ = _counts()
    assert (jg.tensor(a).T @ jg.tensor(b).T).numpy().tobytes() == want.tobytes()
    assert _counts()[0] - p0 == 1
    x = rng.standard_normal((4, 75, 96)).astype(np.float32)
    w = rng.standard_normal((96, 700)).astype(np.float32)
    p0, o0, _ = _counts()
    y = (jg.tensor(x) @ jg.tensor(w)).numpy()
    assert y.shape == (4, 75, 700) and _counts()[0] - p0 == 1
    assert y.tobytes() == _one_call(x.reshape(300, 96), w).reshape(4, 75, 700).tobytes()
    xs = jg.tensor(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(0, 1)     # (4, 75, 96), not C-ordered
    p0, o0, _ = _counts()
    ys = (xs @ jg.tensor(w)).numpy()
    assert _counts()[:2] == (p0, o0 + 1)
    np.testing.assert_allclose(ys, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_gradients_through_pooled_products(pooled):
    """B3's gradient penalty (a product's gradient's gradient): every big product on the pool, and the loss and
    gradients the same bits as with the pooled path off."""
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((256, 64)).astype(np.float32)
    w10 = (rng.standard_normal((64, 256)) * 0.1).astype(np.float32)
    w20 = (rng.standard_normal((256, 1)) * 0.1).astype(np.float32)

    def step():
        x = jg.tensor(x0, requires_grad=True)
        w1, w2 = jg.tensor(w10, requires_grad=True), jg.tensor(w20, requires_grad=True)
        d = jg.tanh(x @ w1) @ w2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        g1, g2 = jg.autograd.grad(loss, [w1, w2])
        return b"".join(t.detach().numpy().tobytes() for t in (loss, g1, g2))
    p0, _, _ = _counts()
    on = step()
    assert _counts()[0] - p0 == 5       # x @ w1, gx = u @ w1.T, and three in the second gradient
    pooled_gemm.ENABLED = False
    _choose_afresh()
    p0, _, _ = _counts()
    off = step()
    assert _counts()[0] == p0
    assert on == off


def test_one_thread_busy_sign_and_a_held_pool_keep_the_calling_thread(pooled, monkeypatch):
    """``set_num_threads(1)``, a build on the build thread (two cores), the pool's busy sign standing, and a
    launch holding the pool (another thread's): the product runs on the calling thread (no round, no wait for the
    lock) with the same bits."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    ta, tb = jg.tensor(a), jg.tensor(b)
    want = (ta @ tb).numpy().tobytes()
    assert want == _one_call(a, b).tobytes()

    def on_caller():
        p0, o0, r0 = _counts()
        got = (ta @ tb).numpy().tobytes()
        assert _counts() == (p0, o0 + 1, r0) and got == want

    jg.set_num_threads(1)
    on_caller()
    jg.set_num_threads(2)
    with monkeypatch.context() as m:        # a build on the build thread takes the second core
        m.setattr(build_thread, "_QUEUED", [object()])
        on_caller()
    monkeypatch.setattr(workpool, "BUSY_HOLD", True)    # (tests turn the rule off: conftest.py)
    monkeypatch.setattr(gemm_blocks, "_QUIET", [])
    quiet = ctypes.c_int64.from_address(workpool.spinning().quiet_until)
    before = quiet.value
    quiet.value = time.clock_gettime_ns(workpool.CLOCK_ID) + 60 * 10 ** 9     # the sign stands for a minute
    try:
        on_caller()
    finally:
        quiet.value = before
    # (the real sign off again: on a loaded test machine it may stand)
    monkeypatch.setattr(workpool, "BUSY_HOLD", False)
    monkeypatch.setattr(gemm_blocks, "_QUIET", [])
    held, release = threading.Event(), threading.Event()

    def hold():
        with LAUNCH_LOCK:
            held.set()
            release.wait(60)
    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(60)
        on_caller()
    finally:
        release.set()
        t.join()
    p0, _, _ = _counts()
    assert (ta @ tb).numpy().tobytes() == want and _counts()[0] == p0 + 1      # the pool again


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pooled_products_in_a_forked_child(pooled):
    """A forked child has no workers: its first round starts new ones, and its products keep their bits."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    want = (jg.tensor(a) @ jg.tensor(b)).numpy().tobytes()
    pid = os.fork()
    if pid == 0:        # pragma: no cover - the child
        code = 1
        try:
            p0 = pooled_gemm.STATS["pooled_calls"]
            ok = all((jg.tensor(a) @ jg.tensor(b)).numpy().tobytes() == want for _ in range(3))
            code = 0 if ok and pooled_gemm.STATS["pooled_calls"] == p0 + 3 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_long_wait_for_the_blocks_holds_them_on_the_calling_thread(pooled, monkeypatch):
    """The eager splits' pacer (``eager_threads.note_split``), judging by the pool's late-round rule: a call whose
    other blocks finished long after the caller's own (another process took the worker's core) makes the next
    ``HOLD`` products one call each on the calling thread (the same bits); a wait that was a sleeping worker's
    wake-up (under ``WAKE_S``) holds nothing, and neither does a quiet host's blip (a block 1.3 ms late after 0.66 ms
    of the caller's own, measured on the Intel host, which the Python threads' rule of 2.5x held)."""
    monkeypatch.setattr(eager_threads, "note_split", _REAL_NOTE)
    monkeypatch.setattr(eager_threads, "_PACER", eager_threads._Pacer())
    runner = gemm_blocks.runner()
    real = runner.run
    script = []

    def scripted(*args):
        real(*args)             # (the product itself)
        return script.pop(0)
    monkeypatch.setattr(runner, "run", scripted)
    _choose_afresh()
    rng = np.random.default_rng(13)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((64, 256)).astype(np.float32)
    ta, tb = jg.tensor(a), jg.tensor(b)
    want = _one_call(a, b).tobytes()

    def product():
        p0, o0, _ = _counts()
        assert (ta @ tb).numpy().tobytes() == want
        p1, o1, _ = _counts()
        return "pool" if p1 > p0 else "caller" if o1 > o0 else "?"
    script.append((25e-6, 0.6e-3, True))           # a worker's wake-up: excused
    assert product() == "pool"
    script.append((25e-6, 30e-6, False))
    assert product() == "pool"
    script.append((663e-6, 2.011e-3, False))       # a quiet host's blip: not held
    assert product() == "pool"
    script.append((25e-6, 30e-6, False))
    assert product() == "pool" and not script      # (the next one: still on the pool)
    script.append((25e-6, 4e-3, False))            # a scheduler slice's wait: held
    assert product() == "pool"
    held = [product() for _ in range(eager_threads._Pacer.HOLD)]
    assert held == ["caller"] * eager_threads._Pacer.HOLD and not script
    script.append((25e-6, 30e-6, False))
    assert product() == "pool"                     # then the pool again


def test_a_worker_found_asleep_is_nudged_and_the_product_runs_alone(pooled, monkeypatch):
    """A product under ``WAKE_MACS`` that finds the worker asleep (after a long stretch of other work) runs on the
    calling thread (its round would wait for the wake-up) and nudges the worker awake; the next one finds it
    spinning and runs on the pool.  The same bits either way.  (The busy signs scripted off: a raised sign makes
    every wait sleep at once.)"""
    import llvmlite.binding as ll
    pool, runner = workpool.spinning(), gemm_blocks.runner()
    engine = ll.create_mcjit_compiler(ll.parse_assembly("define i32 @none(i64 %s, ptr %o) {\n  ret i32 -1\n}"),
                                      ll.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    quiet = ctypes.c_int64.from_address(pool.quiet_until)
    late, spin = pool._late.value, pool.spin_ns()
    pool.set_run_queue(engine.get_function_address("none"))     # (nothing to read: that sign never stands)
    pool._late.value = 0
    quiet.value = 0
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 1 << 27)
    _choose_afresh()
    try:
        rng = np.random.default_rng(17)
        a = rng.standard_normal((256, 64)).astype(np.float32)
        b = rng.standard_normal((64, 256)).astype(np.float32)
        ta, tb = jg.tensor(a), jg.tensor(b)
        want = _one_call(a, b).tobytes()
        pool.set_spin_ns(0)             # the worker sleeps after the next round
        while not runner.asleep():      # (the first product found it awake, or nudged it)
            assert (ta @ tb).numpy().tobytes() == want
            time.sleep(0.01)
        pool.set_spin_ns(10 ** 13)      # (once woken, it spins until the next round)
        p0, o0, r0 = _counts()
        n0 = gemm_blocks.STATS["nudges"]
        assert (ta @ tb).numpy().tobytes() == want
        assert _counts() == (p0, o0 + 1, r0) and gemm_blocks.STATS["nudges"] == n0 + 1
        deadline = time.monotonic() + 30
        while runner.asleep() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert (ta @ tb).numpy().tobytes() == want and _counts()[0] == p0 + 1
    finally:
        pool.set_spin_ns(spin)
        pool.set_run_queue(None)
        pool._late.value = late


def _stack_counts():
    return (pooled_gemm.STATS["stacked_calls"], pooled_gemm.STATS["stacked_one_thread"], gemm_blocks.STATS["rounds"],
            gemm_blocks.STATS["blocks"], eager_threads.STATS["split_calls"])


def _attention_operands(dtype, seed=3):
    """B9's attention operands as a model makes them: q and k heads of one (B, T, 3C) projection, so k.mT's
    (batch, head) axes are not one evenly strided axis, and each matrix has a leading dimension past its width."""
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((16, 64, 3 * 128)).astype(dtype)
    q, k, _ = (qkv[..., i * 128:(i + 1) * 128].reshape(16, 64, 4, 32).transpose(0, 2, 1, 3) for i in range(3))
    return q, k


def _per_matrix(x, y):
    """Each matrix's own 2-D product through jitgrad's BLAS (``blas.matmul2d``: one call, one thread), stacked."""
    blas.BlasPacer.use(1)
    lead = x.shape[:-2]
    out = np.empty(lead + (x.shape[-2], y.shape[-1]), x.dtype)
    for i in np.ndindex(*lead):
        out[i] = blas.matmul2d(x[i], y[i])
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_stacks_run_on_the_pool_with_each_matrix_its_own_products_bits(pooled, dtype):
    """Attention's (batch, head) products (``q @ k.mT``, ``att @ v``): one pool round, each thread a run of the
    stack's matrices, no Python thread, each matrix the bits of its own 2-D product (``x[i] @ y[i]``); at one
    thread the calling thread runs the same calls alone (no round): the same bits.  NumPy's stack is close (its
    own OpenBLAS may run other kernels: an AVX-512 AMD host's NumPy runs Haswell's)."""
    q, k = _attention_operands(dtype)
    want = _per_matrix(q, k.transpose(0, 1, 3, 2))
    s0 = _stack_counts()
    got = (jg.tensor(q) @ jg.tensor(k).transpose(-2, -1)).numpy()
    s1 = _stack_counts()
    assert got.tobytes() == want.tobytes()
    assert [b - a for a, b in zip(s0, s1)] == [1, 0, 1, 2, 0]      # one pooled stack, one round of two blocks
    np.testing.assert_allclose(got, np.matmul(q, k.transpose(0, 1, 3, 2)), rtol=1e-5 if dtype == np.float32 else
                               1e-12, atol=1e-4 if dtype == np.float32 else 1e-12)
    att = np.ascontiguousarray(want[..., :32])                      # (16, 4, 64, 32) @ k: (.., 32, 64)... as att @ v
    v = np.ascontiguousarray(k)
    assert (jg.tensor(att.transpose(0, 1, 3, 2)) @ jg.tensor(v)).numpy().tobytes() == _per_matrix(
        att.transpose(0, 1, 3, 2), v).tobytes()
    jg.set_num_threads(1)
    s0, a0 = _stack_counts(), gemm_blocks.STATS["alone"]
    one = (jg.tensor(q) @ jg.tensor(k).transpose(-2, -1)).numpy()
    s1 = _stack_counts()
    assert one.tobytes() == want.tobytes()
    assert [b - a for a, b in zip(s0, s1)] == [0, 1, 0, 0, 0] and gemm_blocks.STATS["alone"] == a0 + 1


def test_a_stack_the_pool_cannot_take_runs_the_same_calls_alone(pooled, monkeypatch):
    """A stack whose workers sleep (under ``WAKE_MACS``), or while another thread's launch holds the pool, runs its
    calls on the calling thread alone, with the pooled run's bits."""
    q, k = _attention_operands(np.float32, seed=5)
    want = (jg.tensor(q) @ jg.tensor(k).transpose(-2, -1)).numpy().tobytes()
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 1 << 62)
    monkeypatch.setattr(gemm_blocks._Runner, "asleep", lambda self: True)
    monkeypatch.setattr(gemm_blocks._Runner, "nudge", lambda self: None)
    s0 = _stack_counts()
    assert (jg.tensor(q) @ jg.tensor(k).transpose(-2, -1)).numpy().tobytes() == want
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 0)
    with LAUNCH_LOCK:
        held = threading.Thread(target=lambda: out.append((jg.tensor(q) @ jg.tensor(k).transpose(-2, -1)).numpy()))
        out = []
        held.start()
        held.join()
    assert out[0].tobytes() == want
    s1 = _stack_counts()
    assert [b - a for a, b in zip(s0, s1)] == [0, 2, 0, 0, 0]


def test_attention_gradients_at_one_and_two_threads(pooled):
    """Forward and backward of ``softmax(q @ k.mT) @ v`` with the stacks on the pool and at one thread: the same
    bits, and the pooled run splits nothing on Python threads; with them split between the eager Python threads
    (``JITGRAD_POOLED_STACKS=0``: NumPy's stacks) the values are close."""
    q0, k0 = _attention_operands(np.float32, seed=4)

    def run():
        q = jg.tensor(np.ascontiguousarray(q0), requires_grad=True)
        k = jg.tensor(np.ascontiguousarray(k0), requires_grad=True)
        att = jg.softmax(q @ k.transpose(-2, -1) * 0.1, dim=-1)
        y = att @ k
        (y * y).sum().backward()
        return b"".join(t.numpy().tobytes() for t in (y.detach(), q.grad, k.grad))
    s0 = _stack_counts()
    on = run()
    s1 = _stack_counts()
    assert s1[0] - s0[0] >= 4 and s1[4] == s0[4]         # two products forward, their gradients' on the pool
    jg.set_num_threads(1)
    assert run() == on
    assert _stack_counts()[0] == s1[0] and _stack_counts()[1] - s1[1] >= 4
    jg.set_num_threads(2)
    pooled_gemm.STACKS = False
    try:
        off = run()
    finally:
        pooled_gemm.STACKS = True
    assert _stack_counts()[0] == s1[0]
    np.testing.assert_allclose(np.frombuffer(off, np.float32), np.frombuffer(on, np.float32), rtol=1e-4, atol=1e-4)


def test_stack_views_addressed_by_rows_and_a_broadcast_matrix_that_is_not(pooled):
    """Every other matrix of a stack (its leading axes strided, not one even axis) is addressed by rows: on the
    pool, each matrix its own product's bits.  A matrix broadcast along its columns (a stride of 0) is not: the
    eager impl runs it, with NumPy's values (counted: ``stacked_numpy``)."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((8, 4, 64, 64)).astype(np.float32)
    b = rng.standard_normal((8, 4, 64, 32)).astype(np.float32)
    s0, n0 = _stack_counts(), pooled_gemm.STATS["stacked_numpy"]
    got = (jg.tensor(a)[::2, 1:] @ jg.tensor(b)[1::2, :3]).numpy()
    assert got.tobytes() == _per_matrix(a[::2, 1:], b[1::2, :3]).tobytes()
    assert _stack_counts()[0] == s0[0] + 1
    col = rng.standard_normal((8, 4, 64, 1)).astype(np.float32)
    got = (jg.tensor(a) @ jg.tensor(col).expand(8, 4, 64, 64)).numpy()
    want = np.matmul(a.astype(np.float64), np.broadcast_to(col, (8, 4, 64, 64)).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert _stack_counts()[0] == s0[0] + 1 and pooled_gemm.STATS["stacked_numpy"] == n0 + 1
