"""Eager stacks of small products split over their leading axis between the eager threads (``ir/ops/stacked_gemm.py``,
issue 32 item 3): attention's (batch, head) products, each part one ``np.matmul`` into its slice, so the bits are
one call's at any thread count and while the pacer holds.  Counted and compared, never timed: the eager split's
clock is scripted."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import eager_threads, settings
from jitgrad.ir.ops import linalg, stacked_gemm
from jitgrad.jit import pooled_gemm


class _Clock:
    """The eager split's clock: every part finishes with the caller's (the pacer sees a quiet machine)."""
    now = 0.0

    @classmethod
    def perf_counter(cls):
        cls.now += 1e-3
        return cls.now


@pytest.fixture
def two_threads(monkeypatch):
    if settings.default_threads() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    monkeypatch.setattr(eager_threads, "time", _Clock)
    monkeypatch.setattr(eager_threads, "note_split", lambda own, whole, allowed=None: None)     # (the pool's GEMMs' own clock)
    monkeypatch.setattr(eager_threads._PACER, "left", 0)
    monkeypatch.setattr(eager_threads._PACER, "hold", eager_threads._Pacer.HOLD)
    monkeypatch.setattr(pooled_gemm, "STACKS", False)       # (the pool's own path: tests/test_pooled_gemm.py)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eager_stack_of_small_products_splits_over_its_leading_axis_with_numpys_bits(two_threads, dtype):
    """Attention's (batch, head) products (``stacked_gemm.py``): split between the eager threads over the leading
    axis, one part on the calling thread while the pacer holds, the whole ``np.matmul`` at one thread; the bits of
    one ``np.matmul`` call every time (transposed views as operands, as attention's ``q @ k.mT``)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((15, 4, 64, 96)).astype(dtype)[..., :32]      # strided rows, an odd leading size
    k = rng.standard_normal((15, 4, 64, 32)).astype(dtype)
    kt = k.transpose(0, 1, 3, 2)
    want = np.matmul(q, kt).tobytes()
    assert stacked_gemm.splits(q.shape, kt.shape, q.dtype, kt.dtype)
    s0 = stacked_gemm.STATS["split_calls"]
    assert linalg._matmul_impl(q, kt).tobytes() == want
    assert stacked_gemm.STATS["split_calls"] == s0 + 1
    eager_threads._PACER.left = 3                                            # held: one call on this thread
    assert linalg._matmul_impl(q, kt).tobytes() == want
    assert stacked_gemm.STATS["split_calls"] == s0 + 1
    eager_threads._PACER.left = 0
    settings.STATE.num_threads = 1
    assert linalg._matmul_impl(q, kt).tobytes() == want
    settings.STATE.num_threads = 2
    assert stacked_gemm.STATS["split_calls"] == s0 + 1
    # through tensors, forward and backward (the rule's products run the same impl)
    qt, ktt = jg.tensor(q, requires_grad=True), jg.tensor(k, requires_grad=True)
    y = qt @ ktt.transpose(-2, -1)
    y.backward(jg.tensor(np.ones(y.shape, dtype)))
    assert y.detach().numpy().tobytes() == want
    assert stacked_gemm.STATS["split_calls"] == s0 + 4                         # y, and both gradients
    np.testing.assert_array_equal(qt.grad.numpy(), np.matmul(np.ones(y.shape, dtype), k))


def test_stacks_that_are_not_split():
    """Broadcast batch shapes, products OpenBLAS would thread itself (one level of threads), too little work for two
    parts: NumPy's one call."""
    f4 = np.float32
    assert not stacked_gemm.splits((16, 4, 64, 32), (1, 4, 32, 64), f4, f4)          # broadcast
    assert not stacked_gemm.splits((8, 256, 512), (8, 512, 256), f4, f4)             # each product threaded by BLAS
    assert not stacked_gemm.splits((2, 16, 16), (2, 16, 16), f4, f4)                 # too little work
    assert not stacked_gemm.splits((16, 64, 32), (16, 32, 64), np.int64, np.int64)  # not a float GEMM
    assert stacked_gemm.splits((16, 64, 32), (16, 32, 64), f4, f4)
