"""Matrix products with a unit dimension as loops (``ir/passes/unit_products.py``), and a sum over rows that
closes the pool round before it (``chunk_checks.round_share``, ``round_groups.column_rows``): counted by launch
records and pool rounds, never timed."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir import settings
from jitgrad.ir.graph import Graph, Var, verify
from jitgrad.ir.ops import OPS, Aval
from jitgrad.ir.passes.unit_products import unit_products
from jitgrad.ir import dtypes as dt


def _compiled(fn):
    return jg.compile(fn, backend="numba", background=False)


def _products(f, *args):
    return [la.kind for la in f.launches(*args) if la.kind in ("gemm", "bgemm")]


CASES = [
    ("outer", (8, 32, 1), (1, 64), lambda a, b: a @ b),
    ("column", (8, 32, 64), (64, 1), lambda a, b: a @ b),
    ("row", (1, 256), (256, 64), lambda a, b: a @ b),
    ("column of a transposed matrix", (256, 64), (256, 1), lambda a, b: a.T @ b),
    ("row of a transposed column", (256, 1), (256, 64), lambda a, b: a.T @ b),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,sa,sb,fn", CASES, ids=[c[0] for c in CASES])
def test_products_with_a_unit_dimension_run_as_loops_and_agree_with_eager(name, sa, sb, fn, dtype):
    """Each product with one contraction term, one result column or one result row compiles to loops (no GEMM
    launch) with eager's values (the outer product: its bits, one multiply an element; the sums: to rounding)."""
    rng = np.random.default_rng(0)
    a = jg.tensor(rng.standard_normal(sa).astype(dtype))
    b = jg.tensor(rng.standard_normal(sb).astype(dtype))
    f = _compiled(lambda a, b: fn(a, b) * 2.0)
    out = f(a, b).numpy()
    want = fn(a, b).numpy() * 2.0
    assert out.shape == want.shape and out.dtype == want.dtype
    assert _products(f, a, b) == []
    if name == "outer":
        assert np.array_equal(out, want)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    ref = np.matmul(*(np.asarray(v.numpy(), np.float64) for v in ((a.T, b) if "transposed" in name else (a, b))))
    np.testing.assert_allclose(out, 2.0 * ref, rtol=10 * tol, atol=10 * tol)


def test_the_gradients_of_a_layer_to_one_output_have_no_small_products():
    """A linear layer to one output and its gradients (B11's and the PINN's last layer): the forward product, the
    input's gradient (an outer product of the cotangent of a sum, a literal of ones) and the weight's (a sum over
    rows) compile to loops; eager's gradients to rounding."""
    rng = np.random.default_rng(1)
    x = jg.tensor(rng.standard_normal((256, 64)).astype(np.float32), requires_grad=True)
    w = jg.tensor(rng.standard_normal((1, 64)).astype(np.float32), requires_grad=True)

    def step(x, w):
        y = jg.tanh(x @ w.T)
        gx, gw = jg.autograd.grad(y.sum(), (x, w))
        return y.detach(), gx, gw

    f = _compiled(step)
    got = [t.numpy() for t in f(x, w)]
    want = [t.numpy() for t in step(x, w)]
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    assert _products(f, x, w) == []


def test_the_pass_keeps_the_graph_valid_and_leaves_other_products():
    """At graph level: a (4, 1) @ (1, 3) product becomes one ``mul`` with the product's output Var, a (4, 5) @ (5, 3)
    product stays, and the graph verifies."""
    f32 = dt.float32
    x, y = Var(Aval((4, 1), f32)), Var(Aval((1, 3), f32))
    p, q = Var(Aval((4, 5), f32)), Var(Aval((5, 3), f32))
    outer, full = Var(Aval((4, 3), f32)), Var(Aval((4, 3), f32))
    from jitgrad.ir.graph import Eqn
    g = Graph([x, y, p, q], [Eqn(OPS["matmul"], [x, y], [outer], {}), Eqn(OPS["matmul"], [p, q], [full], {})],
              [outer, full])
    h = unit_products(g)
    verify(h)
    assert [e.op.name for e in h.eqns] == ["mul", "matmul"] and h.eqns[0].outs == [outer]
    assert unit_products(Graph([p, q], [g.eqns[1]], [full])).eqns == [g.eqns[1]]


@pytest.fixture
def low_thresholds():
    prev = workpool.set_min_work(1 << 17, 1 << 11)
    yield
    workpool.set_min_work(*prev)


def test_a_sum_over_rows_closes_the_pool_round_of_the_product_before_it(low_thresholds):
    """``(x @ w * 2).sum(0)`` at thresholds both reach: the product's blocks of rows start a pool round, the sum
    over rows (fixed chunks of rows into partial rows) queues its chunks into it as its last launch and runs it
    before adding the partial rows: one round a call where there were two.  The bits are those of the serial run
    (the same chunks, one after another on the calling thread)."""
    if settings.default_threads() < 2 or not workpool.available():
        pytest.skip("needs two cores and the worker pool")
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.standard_normal((256, 64)).astype(np.float32))
    w = jg.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    f = _compiled(lambda x, w: (x @ w * 2.0).sum(0))
    f(x, w)
    records = f.launches(x, w)
    assert [(la.kind, bool(la.parallel), bool(la.joined)) for la in records] == [("bgemm", True, False),
                                                                                ("fused", True, True)]
    r0, j0 = workpool.rounds(), workpool.joined()
    pooled = f(x, w).numpy()
    assert (workpool.rounds() - r0, workpool.joined() - j0) == (1, 1)
    workpool.set_min_work(1 << 40, 1 << 40)
    r0 = workpool.rounds()
    serial = f(x, w).numpy()
    assert workpool.rounds() == r0
    assert np.array_equal(pooled, serial)
    np.testing.assert_allclose(pooled, (x.numpy().astype(np.float64) @ w.numpy() * 2).sum(0), rtol=1e-4, atol=1e-3)
