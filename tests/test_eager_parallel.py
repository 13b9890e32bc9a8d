"""Which eager ops of a B9 step run on both threads (issue 32, item 3), counted per op, never timed.

B9's GPT (``benchmarks/gpt_model.py``, its shape: batch 16, context 64, width 128, 4 heads) runs one eager training
step at two threads and at one.  A spy around every eager op (dispatch's ``_bind``, and the pullbacks on arrays the
engine runs) records what each op split: big GEMMs into row blocks (``blas.STATS``), stacks of small products over
their leading axis (attention's (batch, head) products, ``stacked_gemm.matmul``), native kernels on the worker pool
(``workpool.rounds()``; native kernel calls are counted whether pooled or not), and the optimiser's multi-tensor
update by parameter.  The eager split's clock is scripted
(its pacer sees a quiet machine), so the counts do not depend on the load; the two thread counts give the same loss
and parameters bit for bit.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir import eager_threads, settings
from jitgrad.ir.ops import OPS, blas, stacked_gemm
from jitgrad.jit import eager_kernels as ek, pooled_gemm
from jitgrad.optim import adam_native, multi_tensor
from jitgrad.runtime import dispatch
from jitgrad.runtime.backward import pullback_plans

from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests

VOCAB, T, C, H, L, B = 65, 64, 128, 4, 2, 16       # B9's shape, two of its four blocks


class _QuietClock:
    """The eager split's clock: every part finishes with the caller's (its pacer never holds a split)."""
    now = 0.0

    @classmethod
    def perf_counter(cls):
        cls.now += 1e-3
        return cls.now


def _counters():
    # (a big GEMM's row blocks and a stack's matrices run on the eager threads, or on the pool: ``jit/pooled_gemm.py``)
    return (blas.STATS["gemm_split_calls"] + pooled_gemm.STATS["pooled_calls"],
            stacked_gemm.STATS["split_calls"] + pooled_gemm.STATS["stacked_calls"],
            workpool.rounds(),
            multi_tensor.STATS["split_steps"])


_KINDS = ("gemm_rows", "stack", "pool", "update")


class _Spy:
    """Per eager op (its name, with a ``vjp:`` prefix for a pullback on arrays): calls, and the splits each way
    (GEMMs split into row blocks, stacks split, pool launches)."""

    def __init__(self):
        self.calls = collections.Counter()
        self.split = {k: collections.Counter() for k in _KINDS}
        self.native = collections.Counter()     # native kernel calls (eager_kernels), pooled or not
        self.depth = 0
        self.blas_counts = []                   # the thread counts OpenBLAS was set to (``BlasPacer.use``)

    def around(self, name, fn, *args):
        if self.depth:
            return fn(*args)
        self.depth += 1
        before = _counters()
        native = ek.COUNTS["native_calls"]
        try:
            return fn(*args)
        finally:
            self.depth -= 1
            self.calls[name] += 1
            self.native[name] += ek.COUNTS["native_calls"] - native
            for kind, a, b in zip(_KINDS, before, _counters()):
                if b > a:       # (a pullback on arrays may run two products)
                    self.split[kind][name] += b - a


def _step_counts(monkeypatch, threads, batch=B, layers=L):
    """One warm B9 step (after two steps that build the eager kernels) at ``threads``: the spy, the loss and the
    parameters after the update."""
    monkeypatch.setattr(settings.STATE, "num_threads", threads)
    spy = _Spy()
    bind = dispatch._bind
    monkeypatch.setattr(dispatch, "_bind", lambda op, args, params: spy.around(op.name, bind, op, args, params))
    pullback = pullback_plans.pullback
    monkeypatch.setattr(pullback_plans, "pullback",
                        lambda node, gs: spy.around("vjp:" + node.op.name, pullback, node, gs))
    use = blas.BlasPacer.use.__func__
    monkeypatch.setattr(blas.BlasPacer, "use", classmethod(lambda cls, n: (spy.blas_counts.append(n), use(cls, n))))
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, VOCAB, T, C, H, layers, dropout=0.0, sdpa=False)
    opt = gpt_model.make_optimizer(jg, model, lr=3e-4)
    step = gpt_model.make_step(jg, model, model, opt)
    g = jg.Generator().manual_seed(1)
    batches = [(jg.randint(0, VOCAB, (batch, T), generator=g), jg.randint(0, VOCAB, (batch, T), generator=g))
               for _ in range(3)]
    step(*batches[0])
    step(*batches[1])
    spy.__init__()
    updates = multi_tensor.STATS["split_steps"] + adam_native.STATS["pooled"]
    loss = step(*batches[2])
    spy.split["update"]["optimizer step"] = multi_tensor.STATS["split_steps"] + adam_native.STATS["pooled"] - updates
    params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    return spy, loss.numpy().tobytes(), params.tobytes()


@pytest.fixture
def quiet_split(monkeypatch):
    if settings.default_threads() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(eager_threads, "time", _QuietClock)
    monkeypatch.setattr(eager_threads, "note_split", lambda own, whole, allowed=None: None)     # (the pool's GEMMs' own clock)
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 0)    # (a worker found asleep: its own test, test_pooled_gemm)
    monkeypatch.setattr(eager_threads._PACER, "left", 0)
    monkeypatch.setattr(eager_threads._PACER, "hold", eager_threads._Pacer.HOLD)
    monkeypatch.setattr(blas, "BLAS_PACER", False)
    monkeypatch.setattr(ek, "SYNC", True)
    monkeypatch.setattr(ek, "ENABLED", True)
    dispatch._RULES.clear()
    yield
    dispatch._RULES.clear()
    blas.BlasPacer.use(blas.all_threads())


def test_b9_eager_step_splits_its_big_work_at_two_threads_and_keeps_its_bits(quiet_split, monkeypatch):
    """At two threads: every big GEMM runs as row blocks, every attention product stack (2 forward, 4 backward a
    block) split over (batch, head), GELU, its pullback and softmax on the pool (the compiled path's rule: their
    work reaches ``min_work()``), each LayerNorm's pullback one native row kernel, the AdamW update one native
    pass in pieces on the pool.  At one thread nothing splits, and the loss
    and the updated parameters are the same bits."""
    two, loss2, params2 = _step_counts(monkeypatch, 2)
    # (a pullback's products and kernels count under the pullback when it runs on arrays, under the op otherwise)
    stacks, rows, pooled = two.split["stack"], two.split["gemm_rows"], two.split["pool"]
    assert stacks["matmul"] + stacks["vjp:matmul"] == 6 * L, dict(stacks)
    if blas.block_unit(np.float32) is not None:    # (no row unit, as SkylakeX's kernels: OpenBLAS threads them)
        assert rows["matmul"] + rows["vjp:matmul"] >= 12 * L, dict(rows)       # 4 Linears, forward + 2 gradients
    assert pooled["gelu"] == pooled["softmax"] == two.calls["gelu"] == two.calls["softmax"] == L, dict(pooled)
    assert pooled["gelu_backward"] + pooled["vjp:gelu"] == L, dict(pooled)
    # every LayerNorm's backward is one native row kernel (layer_norm_backward), not the rule's 17 NumPy ops; at
    # B9's (1024, 128) rows its work (131,072 elements x 57 cost units, float32) stays under min_work(): serial by
    # the compiled path's rule (test_layer_norm_backward_takes_the_pool_over_twice_the_rows splits it)
    assert two.native["vjp:layer_norm"] == two.calls["vjp:layer_norm"] == 2 * L + 1, dict(two.native)
    assert pooled["vjp:layer_norm"] == 0
    assert two.split["update"]["optimizer step"] == 1
    # no oversubscription: the split GEMMs' blocks run on single-threaded OpenBLAS calls (the eager threads are all
    # the threads), so OpenBLAS's own workers never wake beside the pool's or the eager threads (on a BLAS without
    # a unit they would: its big GEMMs are not split)
    if blas.row_blocks(B * T, np.float32, 1) is not None:
        assert two.blas_counts and set(two.blas_counts) == {1}, collections.Counter(two.blas_counts)
    one, loss1, params1 = _step_counts(monkeypatch, 1)
    assert not any(sum(one.split[k].values()) for k in _KINDS)
    assert loss1 == loss2 and params1 == params2


def test_layer_norm_backward_takes_the_pool_over_twice_the_rows(quiet_split, monkeypatch):
    """At twice B9's batch (2048 rows of 128: 262,144 elements, work 2x ``min_work()``) each LayerNorm's backward
    runs its row kernel on the pool at two threads, rows split between them, and serially at one, with the same
    loss and parameters bit for bit (every row computed by the same instructions on whichever thread)."""
    two, loss2, params2 = _step_counts(monkeypatch, 2, batch=2 * B, layers=1)
    assert two.split["pool"]["vjp:layer_norm"] == two.native["vjp:layer_norm"] == 3, dict(two.split["pool"])
    one, loss1, params1 = _step_counts(monkeypatch, 1, batch=2 * B, layers=1)
    assert one.native["vjp:layer_norm"] == 3 and one.split["pool"]["vjp:layer_norm"] == 0
    assert loss1 == loss2 and params1 == params2
