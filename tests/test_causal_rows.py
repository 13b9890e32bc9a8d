"""Row kernels under a causal mask (ir/passes/causal.row_diagonal, codegen/kernels/rowwise_loops.gen_rows): the
passes of a causal softmax and of its backward that need only each row's lower part stop at the diagonal and
store the zeros known above it; the bits are the whole rows' (``JITGRAD_CAUSAL=0``), for finite values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.kernels.kernel_listing import format_kernel
from jitgrad.ir.passes import causal, fusion_plan
from jitgrad.jit.graph_code import compiled_graph
from jitgrad.ir.plan import RowGroup

from test_causal_products import _attention, _causal_buffer, _qkv, _run, T


def _row_groups(cf, args):
    e = [e for es in cf._cache.values() for e in es][0]
    return [g for g in fusion_plan(e.graph).groups if isinstance(g, RowGroup)]


def _softmax_rows(cf, args):
    return {tuple(x.op.name for x in g.eqns): g.diagonal for g in _row_groups(cf, args)}


def test_softmax_passes_stop_at_the_diagonal_with_the_whole_rows_bits(monkeypatch):
    """Forward: the max pass and the dividing pass stop at the diagonal, the summing pass runs whole rows (a
    sum's order is its bits); backward: the pass that writes the score gradient stops, its sum does not.  The
    probabilities and every gradient have the bits of the whole rows, == eager and the interpreter."""
    f = _attention(_causal_buffer(2 * T))
    qkv = _qkv(t=2 * T)
    got, _, cf = _run(f, qkv, True, monkeypatch)
    rows = _softmax_rows(cf, qkv)
    assert rows[("mul", "where", "amax", "sub", "exp", "sum", "div")] == (True, False, True), rows
    assert rows[("mul", "sum", "sub", "mul", "where", "mul")] == (False, True), rows
    want, _, off = _run(f, qkv, False, monkeypatch)
    assert all(d is None for d in _softmax_rows(off, qkv).values())
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    interp = jg.compile(f, backend="interpret")
    for a, b in zip(got, interp(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
    for t in qkv:
        t.grad = None
    for a, b in zip(got, f(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_the_kernel_stops_its_rows_at_the_diagonal(monkeypatch):
    """The row kernel's listing: a bounded pass runs to the row's diagonal and stores zeros after it."""
    monkeypatch.setattr(causal, "ENABLED", True)
    t = 2 * T       # rows 0-15 stop at 16, store zeros after it
    mask = _causal_buffer(t)

    def f(s):
        return jg.nn.functional.softmax(s.masked_fill(mask == 0, float("-inf")), dim=-1)
    s = jg.tensor(np.random.default_rng(1).standard_normal((2, 3, t, t)).astype(np.float32))
    cf = jg.compile(f, backend="numba", background=False)
    p = cf(s).numpy()
    e = [e for es in cf._cache.values() for e in es][0]
    prog = compiled_graph(e.graph, e.gf.writes, e.gf.parallel).program
    (k,) = [st.kernel for st in prog.steps if st.kind == "kernel" and st.kernel.kind == "rows"]
    text = format_kernel(k.ir)
    assert text.count("diag0") >= 2 and text.count("diag2") >= 3, text     # two loops bounded, zeros after one
    assert "range(diag0) short" in text, text
    assert np.array_equal(p[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]], np.zeros((2, 3, t * (t - 1) // 2)))
    (g,) = _row_groups(cf, (s,))
    assert g.diagonal == (True, False, True)
    monkeypatch.setattr(causal, "ENABLED", False)
    np.testing.assert_array_equal(jg.compile(f, backend="numba", background=False)(s).numpy(), p)


@pytest.mark.parametrize("make", [lambda t: jg.triu(jg.ones(t, t)).view(1, 1, t, t),
                                  lambda t: jg.ones(t, t).view(1, 1, t, t)])
def test_rows_not_under_a_causal_mask_run_whole(make, monkeypatch):
    """An upper-triangular mask (its rows' known half is the other one) or none: every pass runs whole rows."""
    f = _attention(make(T))
    qkv = _qkv()
    _, _, cf = _run(f, qkv, True, monkeypatch)
    assert all(d is None for d in _softmax_rows(cf, qkv).values())


def test_gradcheck_through_causal_rows_float64(monkeypatch):
    """float64: the compiled causal softmax (its passes bounded) against finite differences, to second order."""
    monkeypatch.setattr(causal, "ENABLED", True)
    t = 18          # rows 0-15 stop at 16 (a whole DIAGONAL_BLOCK), the last two run to 18
    mask = _causal_buffer(t)

    def f(s, v):
        att = (s * (1.0 / math.sqrt(3))).masked_fill(mask == 0, float("-inf"))
        return jg.nn.functional.softmax(att, dim=-1) @ v
    rng = np.random.default_rng(5)
    s = jg.tensor(rng.standard_normal((1, 1, t, t)), requires_grad=True)
    v = jg.tensor(rng.standard_normal((1, 1, t, 2)), requires_grad=True)
    cf = jg.compile(f, backend="numba", background=False)
    cf(s, v)
    assert any(g.diagonal for g in _row_groups(cf, (s, v)))
    assert jg.autograd.gradcheck(cf, (s, v))
    assert jg.autograd.gradgradcheck(cf, (s, v))
