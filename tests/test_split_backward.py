"""The gradient of ``q, k, v = x.split(C, dim=1)`` in compiled code: one buffer, zero-filled once, each part's
gradient added into its region (ir/passes/simplify.py folds ``x + index_put(zeros, g)``; codegen/program/region_steps.py
adds into a dead base's buffer), not three zero-filled full-size buffers and two adds of them."""
import numpy as np

import jitgrad as jg


def _w_grad(W, loss_of):
    """A step body: ``loss_of(x @ W)``'s backward; returns W's gradient and clears it."""
    def body(x):
        loss_of(x @ W).backward()
        g = W.grad
        W.grad = None
        return g
    return body


def test_split_gradient_is_one_buffer(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    W = jg.randn(8, 24, dtype=jg.float64, requires_grad=True)

    def loss_of(h):
        q, k, v = h.split(8, dim=1)
        return (q.tanh() * k).sum() + (v.exp() * q).sum()

    body = _w_grad(W, loss_of)

    x = jg.randn(4, 8, dtype=jg.float64)
    ref = body(x).numpy()
    f = jg.compile(body, backend="numba")
    f(x)
    got = f(x).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    import gc
    from jitgrad.codegen.program.cpu import CompiledGraph
    graphs = [o for o in gc.get_objects() if type(o) is CompiledGraph and o.run is not None
              and any("split_backward" in (s.label or "") or "index_put" in (s.label or "") for s in o.program.steps)
              and any(s.shapes == [[4, 24]] for s in o.program.steps)]
    assert graphs
    labels = [s.label for s in graphs[-1].program.steps]
    assert labels.count("index_put (region)") == 3, labels
    assert labels.count("copy (index_put)") == 1, labels          # the zero fill, once
    assert not any(lb.startswith("fused") and "add" in lb and "[add" in lb and lb.count("add") == 2 and
                   "mul" not in lb for lb in labels), labels    # no add of full-size buffers


def test_fold_keeps_values_when_regions_overlap(monkeypatch):
    # x[:, :6] and x[:, 4:] overlap: the second gradient is added onto the first in the shared columns
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    W = jg.randn(8, 10, dtype=jg.float64, requires_grad=True)

    body = _w_grad(W, lambda h: (h[:, :6].sin()).sum() + (h[:, 4:] ** 2).sum())

    x = jg.randn(3, 8, dtype=jg.float64)
    ref = body(x).numpy()
    f = jg.compile(body, backend="numba")
    f(x)
    np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-12, atol=1e-12)
