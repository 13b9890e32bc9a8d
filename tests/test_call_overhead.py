"""The per-call work of a compiled function whose code is ready (issue 17, B5): counted, never timed.

A repeated call with the very same argument tensors computes its signature and the shared-memory check once;
anything that could change the signature or the aliasing (another tensor, a new payload, requires_grad, an
argument that shares memory with state the graph writes) is checked again, and the results stay eager mode's.
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.jit import signatures


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _sgd_step(W):
    @jg.compile(backend="numba", background=False)
    def step(x, s):
        loss = (jg.sigmoid(x @ W) ** 2).mean() * s      # (kernels no other test file compiles)
        loss.backward()
        with jg.no_grad():
            W.sub_(0.5 * W.grad)
            W.grad = None
        return loss.detach()
    return step


def _reference(W0, xs):
    """The same steps in float64 NumPy: (losses, final W)."""
    W = W0.astype(np.float64)
    losses = []
    for x in xs:
        x = x.astype(np.float64)
        h = 1 / (1 + np.exp(-(x @ W)))
        losses.append((h ** 2).mean() * 1.5)
        W = W - 0.5 * (x.T @ (1.5 * 2 * h * h * (1 - h) / h.size))
    return losses, W


def test_repeated_calls_compute_signature_and_aliasing_once(fresh_cache):
    W0 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    W = jg.tensor(W0.copy(), requires_grad=True)
    step = _sgd_step(W)
    xv = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    x, s = jg.tensor(xv), jg.tensor(np.float32(1.5))
    losses = [float(step(x, s)) for _ in range(2)]     # the trace, then the first call through the cache
    c0 = dict(signatures.COUNTS)
    for _ in range(19):
        losses.append(float(step(x, s)))
    c1 = dict(signatures.COUNTS)
    assert c1 == c0         # no signature, shared-memory or write-aliasing check after the first call
    assert step.stats["compiled_calls"] == 21 and step.stats["traces"] == 1
    want, W_end = _reference(W0, [xv] * 21)
    np.testing.assert_allclose(losses, want, rtol=1e-4)
    np.testing.assert_allclose(W.detach().numpy(), W_end, rtol=1e-4, atol=1e-6)

    # another tensor (a new batch) with the same shape: checked again, same entry, no new trace
    x2 = jg.tensor(xv * 2)
    step(x2, s)
    c2 = dict(signatures.COUNTS)
    assert {k: c2[k] - c1[k] for k in c1} == {"signatures": 1, "shared_memory_checks": 1, "write_alias_checks": 1}
    assert step.stats["traces"] == 1
    # the same tensor object with a new payload of another shape: a new signature (not the memo's)
    x2._data = np.ones((5, 3), np.float32)
    step(x2, s)
    assert step.stats["traces"] == 2
    # requires_grad changed on the same tensor object: a new signature too
    x.requires_grad_(True)
    step(x, s)
    assert step.stats["traces"] == 3


def test_an_argument_sharing_memory_with_written_state_still_runs_eagerly(fresh_cache):
    """The shared-memory check is skipped only for the very same arguments: an argument that is a view of the
    state the graph writes (after many fast calls) still gets eager mode's answer."""
    W0 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    b = jg.tensor(np.zeros(2, np.float32), requires_grad=True)

    @jg.compile(backend="numba", background=False)
    def step(x):
        loss = ((x + b) ** 2).sum() * 0.75
        loss.backward()
        with jg.no_grad():
            b.sub_(0.25 * b.grad)
            b.grad = None
        return loss.detach()
    x = jg.tensor(W0[0, :2].copy())
    for _ in range(5):
        step(x)
    calls = step.stats["compiled_calls"]
    checks = signatures.COUNTS["write_alias_checks"]
    alias = jg.from_numpy(b.detach().numpy())       # shares b's buffer: eager mode sees b's update mid-step
    before = b.detach().numpy().copy()
    got = float(step(alias))
    assert step.stats["compiled_calls"] == calls    # not the compiled graph
    assert signatures.COUNTS["write_alias_checks"] == checks + 1
    assert got == pytest.approx(float(((before + before) ** 2).sum()) * 0.75)
