"""Order statistics against torch: aminmax, kthvalue, quantile/nanquantile (every interpolation, scalar and 1-d q,
NaN rows), cummax/cummin (ties, NaN).  Values and gradients equal torch's (float64; int64 values), eager ==
compiled on the interpreter (Numba for one program), gradcheck/gradgradcheck, torch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.tracer import TracedValueError
from torch_agreement import agree, raises_as_torch, rng

torch = pytest.importorskip("torch")

_NAN_ROWS = np.array([[1.0, 3.0, 3.0, 2.0], [np.nan, 1.0, 2.0, 0.0], [4.0, np.nan, 2.0, np.nan]])


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
def test_quantile_values_match_torch_with_nan_and_ties(fn, interpolation):
    for q in (0.5, 1 / 6, 0.0, 1.0, np.array([0.1, 0.5, 0.75, 0.125])):
        for dim, keepdim in ((None, False), (None, True), (0, False), (1, True), (-1, False)):
            qj, qt = (jg.tensor(q), torch.tensor(q)) if isinstance(q, np.ndarray) else (q, q)
            r = getattr(jg, fn)(jg.tensor(_NAN_ROWS), qj, dim, keepdim, interpolation=interpolation)
            t = getattr(torch, fn)(torch.tensor(_NAN_ROWS), qt, dim, keepdim, interpolation=interpolation)
            assert tuple(r.shape) == tuple(t.shape), (q, dim, keepdim)
            np.testing.assert_allclose(r.numpy(), t.numpy(), rtol=1e-12, err_msg=f"{q} {dim} {keepdim}")


@pytest.mark.parametrize("interpolation", ["linear", "midpoint", "nearest"])
def test_quantile_gradients_match_torch(interpolation):
    x = rng(1).standard_normal((3, 5))
    q = np.array([0.3, 0.5])
    agree(lambda a, b: jg.quantile(a, b, dim=1, interpolation=interpolation),
          lambda a, b: torch.quantile(a, b, dim=1, interpolation=interpolation), [x, q], needs_grad=[True, False])
    agree(lambda a: a.nanquantile(0.4, interpolation=interpolation),
          lambda a: a.nanquantile(0.4, interpolation=interpolation), [x])


def test_quantile_errors_match_torch():
    x, tx = jg.ones(2, 3), torch.ones(2, 3)
    for jf, tf in ((lambda: jg.quantile(x, 1.5), lambda: torch.quantile(tx, 1.5)),
                   (lambda: jg.quantile(x.long(), 0.5), lambda: torch.quantile(tx.long(), 0.5)),
                   (lambda: jg.quantile(x, 0.5, interpolation="foo"),
                    lambda: torch.quantile(tx, 0.5, interpolation="foo")),
                   (lambda: jg.quantile(x, jg.ones(1, 1)), lambda: torch.quantile(tx, torch.ones(1, 1))),
                   (lambda: jg.quantile(x, jg.ones(1, dtype=jg.float64)),
                    lambda: torch.quantile(tx, torch.ones(1, dtype=torch.float64))),
                   (lambda: jg.nanquantile(jg.ones(0), 0.5), lambda: torch.nanquantile(torch.ones(0), 0.5)),
                   (lambda: jg.quantile(x, 0.5, dim=2), lambda: torch.quantile(tx, 0.5, dim=2))):
        raises_as_torch(jf, tf)


def test_kthvalue_matches_torch():
    x = rng(2).standard_normal((3, 4))
    for k, dim, keepdim in ((1, -1, False), (3, 0, True), (4, 1, False)):
        agree(lambda a: jg.kthvalue(a, k, dim, keepdim), lambda a: torch.kthvalue(a, k, dim, keepdim), [x])
    r, t = jg.kthvalue(jg.tensor(_NAN_ROWS), 4), torch.kthvalue(torch.tensor(_NAN_ROWS), 4)     # NaN is the largest
    np.testing.assert_array_equal(r.values.numpy(), t.values.numpy())
    i = torch.tensor([[5, 1, 4], [2, 8, 0]])
    r = jg.tensor(i.numpy()).kthvalue(2)
    assert r.values.tolist() == i.kthvalue(2).values.tolist() and r.indices.tolist() == i.kthvalue(2).indices.tolist()
    assert jg.kthvalue(jg.tensor(2.5), 1).values.item() == 2.5
    for k in (0, 5):
        raises_as_torch(lambda: jg.kthvalue(jg.ones(2, 4), k), lambda: torch.kthvalue(torch.ones(2, 4), k))


def test_aminmax_matches_torch():
    x = rng(3).standard_normal((3, 4))
    agree(lambda a: jg.aminmax(a, dim=1), lambda a: torch.aminmax(a, dim=1), [x], second_order=False)
    for kw in ({}, {"dim": 0, "keepdim": True}, {"keepdim": True}):
        for a in (_NAN_ROWS, np.array([[3, -1], [2, 7]]), np.array([True, False])):
            r, t = jg.aminmax(jg.tensor(a), **kw), torch.aminmax(torch.tensor(a), **kw)
            for u, v in zip(r, t):
                assert tuple(u.shape) == tuple(v.shape)
                np.testing.assert_array_equal(u.numpy(), v.numpy())
    assert jg.aminmax(jg.tensor([1, 2])).max.dtype is jg.int64
    raises_as_torch(lambda: jg.aminmax(jg.ones(0)), lambda: torch.aminmax(torch.ones(0)))
    raises_as_torch(lambda: jg.aminmax(jg.ones(2, 0), dim=1), lambda: torch.aminmax(torch.ones(2, 0), dim=1))


@pytest.mark.parametrize("fn", ["cummax", "cummin"])
def test_cummax_cummin_match_torch(fn):
    x = rng(4).standard_normal((3, 5))
    agree(lambda a: getattr(jg, fn)(a, 1), lambda a: getattr(torch, fn)(a, 1), [x], modes=("eager",))
    ties = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [2.0, 1.0, 1.0, np.nan, 0.0], [np.nan, 5.0, 5.0, 0.0, 0.0]])
    for a in (ties, np.array([[3, 1, 3, 0], [0, 0, 2, 2]]), np.array([True, False, True])):
        for dim in range(a.ndim):
            r, t = getattr(jg, fn)(jg.tensor(a), dim), getattr(torch, fn)(torch.tensor(a), dim)
            np.testing.assert_array_equal(r.values.numpy(), t.values.numpy())
            np.testing.assert_array_equal(r.indices.numpy(), t.indices.numpy())
    tt = torch.tensor(ties, requires_grad=True)
    getattr(torch, fn)(tt, 1).values.sum().backward()
    jt = jg.tensor(ties, requires_grad=True)
    getattr(jt, fn)(1).values.sum().backward()          # the gradient goes to the selected index (ties: the latest)
    np.testing.assert_array_equal(jt.grad.numpy(), tt.grad.numpy())
    raises_as_torch(lambda: getattr(jg, fn)(jg.ones(2), 1), lambda: getattr(torch, fn)(torch.ones(2), 1))
    with pytest.raises(TracedValueError, match=f"{fn}"):
        jg.compile(lambda a: getattr(jg, fn)(a, 0).values, backend="interpret")(jg.ones(3))


def test_order_statistics_numba_match_eager():
    x = rng(5).standard_normal((4, 5))

    def f(a):
        return (jg.quantile(a, 0.3, dim=1), a.nanquantile(0.5, dim=0, interpolation="midpoint"),
                jg.kthvalue(a, 2, 0).values, jg.aminmax(a, dim=1).max)
    agree(f, lambda a: (torch.quantile(a, 0.3, dim=1), a.nanquantile(0.5, dim=0, interpolation="midpoint"),
                        torch.kthvalue(a, 2, 0).values, torch.aminmax(a, dim=1).max),
          [x], modes=("numba",), second_order=None)
