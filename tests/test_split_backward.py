"""The gradient of ``q, k, v = x.split(C, dim=1)`` in compiled code: one buffer, each part's gradient written into
its region (ir/passes/simplify.py folds ``x + index_put(zeros, g)``; codegen/program/region_chains.py: regions that
tile a zero base need no zeros and no adds, and a batched product writes its part in place), not three zero-filled
full-size buffers and two adds of them."""
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
    assert labels.count("copy (index_put)") == 0, labels          # the regions tile it: no zero fill
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


def _attention(W, B=2, T=6, H=2, D=3):
    """A causal attention layer's loss as B9 writes it: ``x @ W`` split into q, k, v, each viewed as heads."""
    C = H * D

    def loss_of(h):
        h = h.view(B, T, 3 * C)
        q, k, v = h.split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * 0.5
        att = att.masked_fill(jg.tril(jg.ones(T, T)).view(1, 1, T, T) == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B * T, C)
        return (y.tanh() * jg.arange(C, dtype=W.dtype)).sum()
    return _w_grad(W, loss_of)


def test_heads_gradients_are_written_in_place_by_their_products(monkeypatch):
    """Attention's q, k and v gradients are batched products whose results reach qkv's gradient through a permute
    and a reshape: they are written straight into their regions (no step).  k's arrives transposed (``q^T dS``, a
    column-major C there): its product is computed as ``dS^T q``, row-major, so it is no region write either;
    nothing is zero-filled.  The gradient is eager's and the interpreter's."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    W = jg.randn(5, 18, dtype=jg.float64, requires_grad=True)
    body = _attention(W)
    x = jg.randn(12, 5, dtype=jg.float64)
    ref = body(x).numpy()
    f = jg.compile(body, backend="numba")
    f(x)
    np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-12, atol=1e-12)
    labels = [la.label for la in f.launches(x)]
    assert labels.count("index_put (region)") == 0, labels
    assert labels.count("copy (index_put)") == 0, labels
    interp = jg.compile(body, backend="interpret")
    np.testing.assert_allclose(interp(x).numpy(), ref, rtol=1e-12, atol=1e-12)


def test_a_region_that_does_not_cover_its_base_keeps_the_zeros(monkeypatch):
    """``h[:, 2:5]`` alone: the rest of the gradient is zeros, so the buffer is filled and the region added."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    W = jg.randn(8, 10, dtype=jg.float64, requires_grad=True)
    body = _w_grad(W, lambda h: (h[:, 2:5].sin()).sum())
    x = jg.randn(3, 8, dtype=jg.float64)
    ref = body(x).numpy()
    f = jg.compile(body, backend="numba")
    f(x)
    np.testing.assert_allclose(f(x).numpy(), ref, rtol=1e-12, atol=1e-12)
    labels = [la.label for la in f.launches(x)]
    assert labels.count("copy (index_put)") == 1 and labels.count("index_put (region)") == 1, labels
