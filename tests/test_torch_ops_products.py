"""Products, distances and index factories against torch: tensordot, kron, inner, mv, ger, vdot, cross, cdist,
block_diag, cartesian_prod, tril/triu_indices, count_nonzero and masked_select.  Each: values and gradients equal
torch's (float64; int64 values), eager == compiled on the interpreter (Numba for one shared program),
gradcheck/gradgradcheck, torch's exception type and text for bad arguments."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradgradcheck
from torch_agreement import agree, raises_as_torch, rng

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dims, sa, sb", [(2, (2, 3, 4), (3, 4, 2)), (0, (2,), (3,)),
                                          (([0, 2], [2, 0]), (4, 3, 2), (2, 3, 4)), (([1], [0]), (2, 1), (3, 2))])
def test_tensordot_matches_torch(dims, sa, sb):
    x, y = rng(1).standard_normal(sa), rng(2).standard_normal(sb)
    agree(lambda a, b: jg.tensordot(a, b, dims), lambda a, b: torch.tensordot(a, b, dims), [x, y])


def test_tensordot_int_and_tensor_dims():
    a, b = torch.arange(6).reshape(2, 3), torch.arange(12).reshape(3, 4)
    r = jg.tensordot(jg.tensor(a.numpy()), jg.tensor(b.numpy()), dims=jg.tensor(1))
    assert r.dtype is jg.int64 and r.tolist() == torch.tensordot(a, b, 1).tolist()


def test_tensordot_errors_match_torch():
    a, b = torch.ones(2, 3, dtype=torch.float64), torch.ones(3, 4, dtype=torch.float64)
    ja, jb = jg.ones(2, 3, dtype=jg.float64), jg.ones(3, 4, dtype=jg.float64)
    for dims in (-1, 2, 3, 1.5, ([0], [1]), ([1], [0, 1])):
        raises_as_torch(lambda: jg.tensordot(ja, jb, dims), lambda: torch.tensordot(a, b, dims))
    raises_as_torch(lambda: jg.tensordot(ja, jg.ones(3, dtype=jg.int64), 1),
                    lambda: torch.tensordot(a, torch.ones(3, dtype=torch.long), 1))


@pytest.mark.parametrize("sa, sb", [((2, 3), (2, 2)), ((3,), (2, 1, 2)), ((), (2, 3)), ((2, 1, 3), (2, 2))])
def test_kron_matches_torch(sa, sb):
    agree(jg.kron, torch.kron, [rng(3).standard_normal(sa), rng(4).standard_normal(sb)])


def test_kron_inner_ger_vdot_integer_values():
    for f in ("kron", "inner", "ger", "vdot"):
        a, b = torch.tensor([1, -2, 3]), torch.tensor([4, 0, 5])
        r, t = getattr(jg, f)(jg.tensor(a.numpy()), jg.tensor(b.numpy())), getattr(torch, f)(a, b)
        assert r.dtype is jg.int64 and r.tolist() == t.tolist(), f
    assert jg.kron(jg.tensor(2.0), jg.tensor([1, 2])).tolist() == [2.0, 4.0]     # promotion, as torch


@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 3)), ((3,), (3,)), ((), (2, 3)), ((2, 2, 3), (3,))])
def test_inner_matches_torch(sa, sb):
    agree(jg.inner, torch.inner, [rng(5).standard_normal(sa), rng(6).standard_normal(sb)])


def test_mv_ger_vdot_match_torch():
    m, v, w = rng(7).standard_normal((2, 3)), rng(8).standard_normal(3), rng(9).standard_normal(2)
    agree(lambda a, b: a.mv(b), lambda a, b: a.mv(b), [m, v])
    agree(lambda a, b: a.ger(b), lambda a, b: a.ger(b), [v, w])
    agree(lambda a, b: a.vdot(b), lambda a, b: a.vdot(b), [v, v * 2.0])


def test_mv_inner_vdot_errors_match_torch():
    f64 = dict(dtype=torch.float64)
    for jf, tf in ((lambda: jg.mv(jg.ones(2, 3), jg.ones(4)), lambda: torch.mv(torch.ones(2, 3), torch.ones(4))),
                   (lambda: jg.mv(jg.ones(2, 3), jg.ones(2, 3)),
                    lambda: torch.mv(torch.ones(2, 3), torch.ones(2, 3))),
                   (lambda: jg.mv(jg.ones(2, 3, dtype=jg.int64), jg.ones(3)),
                    lambda: torch.mv(torch.ones(2, 3, dtype=torch.long), torch.ones(3))),
                   (lambda: jg.inner(jg.ones(2, 3), jg.ones(3, 4)),
                    lambda: torch.inner(torch.ones(2, 3), torch.ones(3, 4))),
                   (lambda: jg.vdot(jg.ones(3), jg.ones(3, dtype=jg.float64)),
                    lambda: torch.vdot(torch.ones(3), torch.ones(3, **f64))),
                   (lambda: jg.vdot(jg.ones(3), jg.ones(4)), lambda: torch.vdot(torch.ones(3), torch.ones(4))),
                   (lambda: jg.vdot(jg.ones(2, 2), jg.ones(2, 2)),
                    lambda: torch.vdot(torch.ones(2, 2), torch.ones(2, 2)))):
        raises_as_torch(jf, tf)


def test_dot_checks_and_names_as_torch():
    # vdot calls dot: dot itself checks dtypes and sizes with torch's texts and names its node DotBackward0
    f64 = dict(dtype=torch.float64)
    raises_as_torch(lambda: jg.dot(jg.ones(3), jg.ones(3, dtype=jg.float64)),
                    lambda: torch.dot(torch.ones(3), torch.ones(3, **f64)))
    raises_as_torch(lambda: jg.dot(jg.ones(3), jg.ones(4)), lambda: torch.dot(torch.ones(3), torch.ones(4)))
    for fn in ("dot", "vdot"):
        a, ta = jg.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        assert getattr(jg, fn)(a, jg.ones(2)).grad_fn.name() == getattr(torch, fn)(ta, torch.ones(2)).grad_fn.name()


@pytest.mark.parametrize("sa, sb, dim", [((4, 3), (4, 3), 1), ((3, 2), (3, 1), 0), ((2, 3), (1, 3), -1)])
def test_cross_matches_torch(sa, sb, dim):
    agree(lambda a, b: jg.cross(a, b, dim=dim), lambda a, b: torch.cross(a, b, dim=dim),
          [rng(10).standard_normal(sa), rng(11).standard_normal(sb)])


def test_cross_default_dim_warns_as_torch_and_errors():
    a = rng(12).standard_normal((2, 3))
    with pytest.warns(UserWarning, match="without specifying the dim arg is deprecated"):
        r = jg.cross(jg.tensor(a), jg.tensor(a[::-1].copy()))
    with pytest.warns(UserWarning):
        t = torch.cross(torch.tensor(a), torch.tensor(a[::-1].copy()))
    np.testing.assert_allclose(r.numpy(), t.numpy(), rtol=1e-12)
    assert jg.cross(jg.tensor([1, 0, 0]), jg.tensor([0, 1, 0]), dim=0).tolist() == [0, 0, 1]
    for jf, tf in ((lambda: jg.cross(jg.ones(2, 3), jg.ones(2, 3), dim=0),
                    lambda: torch.cross(torch.ones(2, 3), torch.ones(2, 3), dim=0)),
                   (lambda: jg.cross(jg.ones(3), jg.ones(3, dtype=jg.float64), dim=0),
                    lambda: torch.cross(torch.ones(3), torch.ones(3, dtype=torch.float64), dim=0)),
                   (lambda: jg.cross(jg.ones(3), jg.ones(2, 3), dim=-1),
                    lambda: torch.cross(torch.ones(3), torch.ones(2, 3), dim=-1))):
        raises_as_torch(jf, tf)
    with pytest.warns(UserWarning):
        raises_as_torch(lambda: jg.cross(jg.ones(2, 2), jg.ones(2, 2)),
                        lambda: torch.cross(torch.ones(2, 2), torch.ones(2, 2)))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, float("inf"), 0.0])
def test_cdist_matches_torch(p):
    x1, x2 = rng(13).standard_normal((2, 3, 4)), rng(14).standard_normal((1, 2, 4))
    x2[0, 0] = x1[1, 2]                   # a zero distance: torch's gradient there is 0
    x1[0, 1, 0] = x2[0, 1, 0]              # one equal coordinate (|diff| = 0 inside the p-norm)
    # first order at the kinks; finite differences of the second order are meaningless there
    agree(lambda a, b: jg.cdist(a, b, p), lambda a, b: torch.cdist(a, b, p), [x1, x2], second_order=False)
    if p not in (0.0, float("inf")):
        y1, y2 = (jg.tensor(rng(s).standard_normal((3, 2)), requires_grad=True) for s in (24, 25))
        assert gradgradcheck(lambda a, b: jg.cdist(a, b, p), [y1, y2])


def test_cdist_errors_match_torch():
    a, i = torch.ones(2, 3), torch.ones(1, 3, dtype=torch.long)
    ja, ji = jg.ones(2, 3), jg.ones(1, 3, dtype=jg.int64)
    for jf, tf in ((lambda: jg.cdist(ja, ja.T), lambda: torch.cdist(a, a.T)),
                   (lambda: jg.cdist(ji, ji), lambda: torch.cdist(i, i)),
                   (lambda: jg.cdist(ja, ja, p=-1), lambda: torch.cdist(a, a, p=-1)),
                   (lambda: jg.cdist(ja[0], ja), lambda: torch.cdist(a[0], a)),
                   (lambda: jg.cdist(ja, ja.double()), lambda: torch.cdist(a, a.double()))):
        raises_as_torch(jf, tf)


def test_block_diag_and_cartesian_prod_match_torch():
    a, b, c = rng(15).standard_normal((2, 3)), rng(16).standard_normal(2), rng(17).standard_normal(())
    agree(lambda x, y, z: jg.block_diag(x, y, z), lambda x, y, z: torch.block_diag(x, y, z), [a, b, c])
    agree(lambda x, y: jg.cartesian_prod(x, y), lambda x, y: torch.cartesian_prod(x, y), [b, a[0]])
    ti = [torch.tensor([True, False]), torch.tensor([[1, 2]], dtype=torch.int32)]
    r = jg.block_diag(*[jg.tensor(t.numpy()) for t in ti])
    assert r.dtype is jg.int32 and r.tolist() == torch.block_diag(*ti).tolist()
    assert tuple(jg.block_diag().shape) == tuple(torch.block_diag().shape) == (1, 0)
    ji = jg.tensor([1, 2, 3])
    assert jg.cartesian_prod(ji) is ji
    assert jg.cartesian_prod(ji, jg.tensor([4, 5])).tolist() == torch.cartesian_prod(
        torch.tensor([1, 2, 3]), torch.tensor([4, 5])).tolist()
    raises_as_torch(lambda: jg.block_diag(jg.ones(2), jg.ones(1, 1, 1)),
                    lambda: torch.block_diag(torch.ones(2), torch.ones(1, 1, 1)))
    raises_as_torch(lambda: jg.cartesian_prod(jg.ones(2, 2)), lambda: torch.cartesian_prod(torch.ones(2, 2)))
    raises_as_torch(lambda: jg.cartesian_prod(ji, jg.ones(2)),
                    lambda: torch.cartesian_prod(torch.tensor([1]), torch.ones(2)))


@pytest.mark.parametrize("fn", ["tril_indices", "triu_indices"])
def test_triangle_indices_match_torch(fn):
    for args in ((3, 3), (3, 4, -1), (4, 2, 1), (0, 3), (2, 5, 7), (3, 3, -5)):
        r, t = getattr(jg, fn)(*args), getattr(torch, fn)(*args)
        assert r.dtype is jg.int64 and r.tolist() == t.tolist() and tuple(r.shape) == tuple(t.shape), args
    assert getattr(jg, fn)(3, 3, dtype=jg.int32).dtype is jg.int32
    for args, kw in (((-1, 3), {}), ((3, -2), {}), ((3, 3), {"dtype": "float32"})):
        tkw = {k: getattr(torch, v) for k, v in kw.items()}
        jkw = {k: getattr(jg, v) for k, v in kw.items()}
        raises_as_torch(lambda: getattr(jg, fn)(*args, **jkw), lambda: getattr(torch, fn)(*args, **tkw))


def test_count_nonzero_matches_torch():
    x = rng(18).integers(-1, 2, (3, 4)).astype("float64")
    x[0, 0] = float("nan")                 # NaN counts as nonzero
    for dim in (None, 0, -1, (0, 1), [1]):
        for a in (x, x.astype("int64") * 0 + (x == 0), x != 0):
            r, t = jg.count_nonzero(jg.tensor(a), dim), torch.count_nonzero(torch.tensor(a), dim)
            assert r.dtype is jg.int64 and r.tolist() == t.tolist(), dim
    assert jg.tensor(x).count_nonzero(dim=0).tolist() == torch.tensor(x).count_nonzero(dim=0).tolist()
    raises_as_torch(lambda: jg.count_nonzero(jg.tensor(x), 5), lambda: torch.count_nonzero(torch.tensor(x), 5))
    raises_as_torch(lambda: jg.count_nonzero(jg.tensor(x), (0, -2)),
                    lambda: torch.count_nonzero(torch.tensor(x), (0, -2)))
    f = jg.compile(lambda a: jg.count_nonzero(a, 1), backend="interpret")
    assert f(jg.tensor(x)).tolist() == torch.count_nonzero(torch.tensor(x), 1).tolist()


def test_masked_select_matches_torch():
    x, m = rng(19).standard_normal((2, 3)), rng(20).standard_normal((1, 3)) > 0
    m[0, 0] = True
    agree(lambda a: jg.masked_select(a, jg.tensor(m)), lambda a: torch.masked_select(a, torch.tensor(m)), [x],
          modes=("eager",))
    agree(lambda a: a.masked_select(jg.tensor(m.T[:2])), lambda a: a.masked_select(torch.tensor(m.T[:2])), [x[0]],
          modes=("eager",), second_order=None)
    r = jg.masked_select(jg.tensor(x, requires_grad=True), jg.tensor(m))
    assert r.grad_fn.name() == "MaskedSelectBackward0"
    xi = torch.tensor([[1, 0], [3, 4]])
    assert jg.masked_select(jg.tensor(xi.numpy()), jg.tensor(xi.numpy()) > 1).tolist() == [3, 4]
    for jf, tf in ((lambda: jg.masked_select(jg.ones(2, 3), jg.tensor([1, 0, 1])),
                    lambda: torch.masked_select(torch.ones(2, 3), torch.tensor([1, 0, 1]))),
                   (lambda: jg.masked_select(jg.ones(2, 3), jg.tensor([True, False])),
                    lambda: torch.masked_select(torch.ones(2, 3), torch.tensor([True, False])))):
        raises_as_torch(jf, tf)


def test_masked_select_with_a_traced_mask_compiles_with_a_bounded_size():
    # (its length is a data-dependent size: tests/test_data_dependent_sizes.py)
    f = jg.compile(lambda a: jg.masked_select(a, a > 0).sum(), backend="interpret")
    for v in ([1.0, -2.0, 3.0], [-1.0, -1.0, -1.0]):
        np.testing.assert_allclose(float(f(jg.tensor(v))), sum(x for x in v if x > 0))
    assert f.stats["traces"] == 1
    # a mask made outside the function is read afresh at every call
    m = jg.tensor([True, False, True])
    g = jg.compile(lambda a: jg.masked_select(a, m), backend="interpret")
    np.testing.assert_array_equal(g(jg.arange(3.0)).numpy(), [0.0, 2.0])
    m[0] = False
    np.testing.assert_array_equal(g(jg.arange(3.0)).numpy(), [2.0])
    assert g.stats["traces"] == 1


def test_products_numba_match_eager():
    a, b, c = rng(21).standard_normal((2, 3)), rng(22).standard_normal((4, 3)), rng(23).standard_normal(3)

    def f(x, y, v):
        return (jg.tensordot(x, y, ([1], [1])), jg.kron(x, v), x.mv(v), jg.cross(x, y[:2], dim=1), jg.cdist(x, y))
    agree(f, lambda x, y, v: (torch.tensordot(x, y, ([1], [1])), torch.kron(x, v), x.mv(v),
                              torch.cross(x, y[:2], dim=1), torch.cdist(x, y)),
          [a, b, c], modes=("numba",), second_order=None)
