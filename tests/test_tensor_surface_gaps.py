"""scatter / scatter_, the *_scatter functions, comparison aliases and in-place comparisons, cumsum_/cumprod_/
addmm_, swapdims/adjoint/H, tensor queries (is_signed, get_device, nbytes, is_nonzero, ...), narrow_copy,
new_empty_strided, resize_as_, nonzero_static, hardshrink/prelu methods, apply_/map_/map2_ against torch: values,
dtypes, gradients (gradcheck/gradgradcheck in float64), in-place semantics, errors, and one Numba program."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck
from torch_agreement import agree, raises_as_torch, rng

torch = pytest.importorskip("torch")

X = rng(1).standard_normal((3, 4))
IDX = np.array([[0, 1, 2, 0], [2, 0, 1, 1]])          # no repeated target along dim 0 within a column


def _pair(a):
    return jg.tensor(a), torch.tensor(a)


# ---- scatter ---------------------------------------------------------------------------------------------------
SCATTER = {
    "src_dim0": (lambda m, a, b: m.scatter(a, 0, m.tensor(IDX), b), [X, rng(2).standard_normal((2, 4))]),
    "src_dim1_method": (lambda m, a, b: a.scatter(1, m.tensor(IDX[:, :3]), b), [X, rng(3).standard_normal((2, 3))]),
    "value": (lambda m, a: m.scatter(a, 0, m.tensor(IDX), 2.5), [X]),
    "value_kw": (lambda m, a: a.scatter(-1, m.tensor(IDX[:, :2]), value=-1.0), [X]),
    "neg_dim_src": (lambda m, a, b: a.scatter(-2, m.tensor(IDX), src=b), [X, rng(4).standard_normal((2, 4))]),
    "select": (lambda m, a, b: m.select_scatter(a, b, 0, -1), [X, rng(5).standard_normal(4)]),
    "select_dim1": (lambda m, a, b: a.select_scatter(b, 1, 2), [X, rng(6).standard_normal(3)]),
    "slice": (lambda m, a, b: m.slice_scatter(a, b, 1, 1, None, 2), [X, rng(7).standard_normal((3, 2))]),
    "slice_default": (lambda m, a, b: a.slice_scatter(b, start=1), [X, rng(8).standard_normal((2, 4))]),
    "slice_clip": (lambda m, a, b: m.slice_scatter(a, b, -1, -1, 100), [X, rng(9).standard_normal((3, 1))]),
    "diagonal": (lambda m, a, b: m.diagonal_scatter(a, b), [X, rng(10).standard_normal(3)]),
    "diagonal_offset": (lambda m, a, b: a.diagonal_scatter(b, 1), [X, rng(11).standard_normal(3)]),
    "diagonal_neg": (lambda m, a, b: m.diagonal_scatter(a, b, -1, 1, 0), [X, rng(12).standard_normal(3)]),
    "diagonal_3d": (lambda m, a, b: m.diagonal_scatter(a, b, 0, 0, 2),
                    [rng(13).standard_normal((2, 3, 4)), rng(14).standard_normal((3, 2))]),
}


@pytest.mark.parametrize("name", sorted(SCATTER))
def test_scatter_family_matches_torch(name):
    f, arrays = SCATTER[name]
    agree(lambda *a: f(jg, *a), lambda *a: f(torch, *a), arrays)


def test_scatter_grad_names_and_src_larger_than_index():
    x, s = jg.tensor(X, requires_grad=True), jg.tensor(rng(2).standard_normal((2, 5)), requires_grad=True)
    assert jg.scatter(x, 0, jg.tensor(IDX), s).grad_fn.name() == "ScatterBackward0"
    assert x.scatter(0, jg.tensor(IDX), 1.0).grad_fn.name() == "ScatterBackward1"
    for f, name in ((lambda: jg.select_scatter(x, s[0, :4], 0, 0), "SelectScatterBackward0"),
                    (lambda: jg.slice_scatter(x, s[:, :4], 0, 1), "SliceScatterBackward0"),
                    (lambda: jg.diagonal_scatter(x, s[0, :3]), "DiagonalScatterBackward0"),
                    (lambda: jg.as_strided_scatter(x, s[:, :2], (2, 2), (1, 2)), "AsStridedScatterBackward0")):
        assert f().grad_fn.name() == name
    # src larger than index: torch's values; its gradient to src has src's shape, zero outside the index
    # (torch's own backward returns index's shape there and fails its shape check)
    y = jg.scatter(x, 0, jg.tensor(IDX), s)
    want = torch.scatter(torch.tensor(X), 0, torch.tensor(IDX), torch.tensor(s.detach().numpy()))
    np.testing.assert_array_equal(y.detach().numpy(), want.numpy())
    y.sum().backward()
    np.testing.assert_array_equal(s.grad.numpy()[:, 4], 0.0)
    np.testing.assert_array_equal(s.grad.numpy()[:, :4], 1.0)
    assert gradcheck(lambda a, b: jg.scatter(a, 0, jg.tensor(IDX), b), [jg.tensor(X, requires_grad=True),
                                                                          jg.tensor(s.detach().numpy(),
                                                                                    requires_grad=True)])


def test_scatter_repeated_index_last_write_wins_as_torch():
    idx = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    s = rng(3).standard_normal((3, 4))
    j = jg.scatter(jg.tensor(X), 0, jg.tensor(idx), jg.tensor(s))
    t = torch.scatter(torch.tensor(X), 0, torch.tensor(idx), torch.tensor(s))
    np.testing.assert_array_equal(j.numpy(), t.numpy())


def test_as_strided_scatter_values_match_torch_and_gradients_are_right():
    a, b = X, rng(4).standard_normal((2, 2))
    for args in (((2, 2), (1, 2)), ((2, 2), (1, 2), 1), ((2, 2), (4, 1), 5)):
        np.testing.assert_array_equal(jg.as_strided_scatter(jg.tensor(a), jg.tensor(b), *args).numpy(),
                                      torch.as_strided_scatter(torch.tensor(a), torch.tensor(b), *args).numpy())
        # torch's as_strided_scatter backward fails torch's own gradcheck for a storage offset; ours passes
        ins = [jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)]
        assert gradcheck(lambda x, y: x.as_strided_scatter(y, *args), ins)
        assert gradgradcheck(lambda x, y: x.as_strided_scatter(y, *args), ins)


def test_scatter_inplace_and_reduce_match_torch():
    for reduce, src in (("add", rng(5).standard_normal((2, 4))), ("multiply", rng(6).standard_normal((2, 4))),
                        ("add", 2.0), ("multiply", 3.0), (None, 1.5), (None, rng(7).standard_normal((2, 4)))):
        j, t = _pair(X.copy())
        sj = jg.tensor(src) if isinstance(src, np.ndarray) else src
        st = torch.tensor(src) if isinstance(src, np.ndarray) else src
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # the deprecation: test_..._warns_once_as_torch
            rj = j.scatter_(0, jg.tensor(IDX), sj, reduce=reduce) if reduce else j.scatter_(0, jg.tensor(IDX), sj)
            t.scatter_(0, torch.tensor(IDX), st, reduce=reduce) if reduce else t.scatter_(0, torch.tensor(IDX), st)
        assert rj is j and j._version == 1
        np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-15)
    # the out-of-place reduce form: values, and backward raises torch's error
    xj, xt = jg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    yj, yt = jg.scatter(xj, 0, jg.tensor(IDX), 2.0, reduce="add"), torch.scatter(xt, 0, torch.tensor(IDX), 2.0,
                                                                                  reduce="add")
    np.testing.assert_array_equal(yj.detach().numpy(), yt.detach().numpy())
    raises_as_torch(lambda: yj.sum().backward(), lambda: yt.sum().backward())
    # in place on a non-leaf: torch's gradient; on a leaf: torch's error
    xj, xt = jg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    (xj * 2.0).scatter_(1, jg.tensor(IDX), 0.0).sum().backward()
    (xt * 2.0).scatter_(1, torch.tensor(IDX), 0.0).sum().backward()
    np.testing.assert_array_equal(xj.grad.numpy(), xt.grad.numpy())
    raises_as_torch(lambda: jg.tensor(X, requires_grad=True).scatter_(0, jg.tensor(IDX), 1.0),
                    lambda: torch.tensor(X, requires_grad=True).scatter_(0, torch.tensor(IDX), 1.0))


def test_scatter_reduce_with_a_tensor_src_warns_once_as_torch():
    from jitgrad.library.indexing import scatter_writes
    scatter_writes._WARNED[0] = False
    code = ("import warnings, torch\nwarnings.simplefilter('always')\ni = torch.tensor([[0, 1]])\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    torch.ones(2, 2).scatter_(0, i, torch.ones(1, 2), reduce='add')\n"
            "    torch.scatter(torch.ones(2, 2), 0, i, torch.ones(1, 2), reduce='multiply')\n"
            "    torch.scatter(torch.ones(2, 2), 0, i, 2.0, reduce='add')\n"
            "print(len(w), str(w[0].message).split(' (Triggered')[0], w[0].category.__name__)\n")
    import subprocess
    import sys
    want = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    i = jg.tensor([[0, 1]])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        jg.ones(2, 2).scatter_(0, i, jg.ones(1, 2), reduce="add")
        jg.scatter(jg.ones(2, 2), 0, i, jg.ones(1, 2), reduce="multiply")
        jg.scatter(jg.ones(2, 2), 0, i, 2.0, reduce="add")
    assert f"{len(w)} {w[0].message} {w[0].category.__name__}" == want
    assert w[0].filename == __file__


def test_scatter_errors_match_torch():
    for f in (lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX), m.ones(2, 4), reduce="mean"),
              lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX).float(), m.tensor(X)),
              lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX), m.ones(2, 4)),        # float32 into float64
              lambda m: m.scatter(m.tensor(X), 2, m.tensor(IDX), 1.0),
              lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX) + 5, 1.0),
              lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX)[0], 1.0),
              lambda m: m.scatter(m.tensor(X), 0, m.tensor(IDX), m.tensor(X)[:, :3]),
              lambda m: m.select_scatter(m.tensor(X), m.ones(3, dtype=m.float64), 0, 0),
              lambda m: m.select_scatter(m.tensor(X), m.ones(4, dtype=m.float64), 0, 5),
              lambda m: m.slice_scatter(m.tensor(X), m.ones(3, 4, dtype=m.float64), 0, 0, 2),
              lambda m: m.diagonal_scatter(m.tensor(X), m.ones(4, dtype=m.float64)),
              lambda m: m.diagonal_scatter(m.tensor(X), m.ones(3, dtype=m.float64), 0, 0, 0),
              lambda m: m.as_strided_scatter(m.tensor(X), m.ones(2, 2, dtype=m.float64), (2, 2), (1, 20)),
              lambda m: m.as_strided_scatter(m.tensor(X), m.ones(3, dtype=m.float64), (2, 2), (1, 2))):
        raises_as_torch(lambda: f(jg), lambda: f(torch))


def test_scatter_dtype_cast_and_zero_dim():
    j = jg.select_scatter(jg.zeros(3, 4), jg.ones(4, dtype=jg.int64), 0, 0)
    t = torch.select_scatter(torch.zeros(3, 4), torch.ones(4, dtype=torch.int64), 0, 0)
    assert j.dtype.name == str(t.dtype).split(".")[1]
    np.testing.assert_array_equal(j.numpy(), t.numpy())
    np.testing.assert_array_equal(jg.scatter(jg.tensor(0.0), 0, jg.tensor(0), 1.5).numpy(),
                                  torch.scatter(torch.tensor(0.0), 0, torch.tensor(0), 1.5).numpy())
    i = np.zeros((0, 4), np.int64)
    np.testing.assert_array_equal(jg.scatter(jg.tensor(X), 0, jg.tensor(i), 1.0).numpy(), X)


# ---- comparisons, in place ---------------------------------------------------------------------------------
CMP = ["eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal"]


@pytest.mark.parametrize("name", CMP)
def test_comparison_aliases_and_inplace_match_torch(name):
    a, b = np.array([1.0, 2.0, 3.0, 2.0]), np.array([2.0, 2.0, 1.0, 5.0])
    if hasattr(torch, name):
        np.testing.assert_array_equal(getattr(jg, name)(jg.tensor(a), jg.tensor(b)).numpy(),
                                      getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy())
    for other in (2.0, b):
        for dtype in ("float64", "int64"):
            j = jg.tensor(a).to(getattr(jg, dtype))
            t = torch.tensor(a).to(getattr(torch, dtype))
            oj = jg.tensor(other) if isinstance(other, np.ndarray) else other
            ot = torch.tensor(other) if isinstance(other, np.ndarray) else other
            assert getattr(j, name + "_")(oj) is j and j._version == 1
            getattr(t, name + "_")(ot)
            assert j.dtype.name == str(t.dtype).split(".")[1]
            np.testing.assert_array_equal(j.numpy(), t.numpy())
    # a non-leaf that requires grad: torch's node and a zero gradient; a leaf: torch's error
    xj, xt = jg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    for other_j, other_t in ((2.0, 2.0), (jg.tensor(b), torch.tensor(b))):
        yj, yt = xj * 1.0, xt * 1.0
        getattr(yj, name + "_")(other_j)
        getattr(yt, name + "_")(other_t)
        assert yj.grad_fn.name() == yt.grad_fn.name()
        yj.sum().backward()
        yt.sum().backward()
        np.testing.assert_array_equal(xj.grad.numpy(), xt.grad.numpy())
    raises_as_torch(lambda: getattr(jg.tensor(a, requires_grad=True), name + "_")(2.0),
                    lambda: getattr(torch.tensor(a, requires_grad=True), name + "_")(2.0))
    raises_as_torch(lambda: getattr(jg.tensor(a), name + "_")(jg.ones(2, 4)),
                    lambda: getattr(torch.tensor(a), name + "_")(torch.ones(2, 4)))


def test_logical_inplace_match_torch():
    for name, args in (("logical_and_", (np.array([1.0, 0.0, 2.0]),)), ("logical_or_", (np.array([0.0, 0.0, 1.0]),)),
                       ("logical_not_", ())):
        for a in (np.array([1.0, 0.0, 0.0]), np.array([True, False, False]), np.array([3, 0, 0])):
            j, t = _pair(a)
            rj = getattr(j, name)(*[jg.tensor(x) for x in args])
            getattr(t, name)(*[torch.tensor(x) for x in args])
            assert rj is j and j._version == 1 and j.dtype.name == str(t.dtype).split(".")[1]
            np.testing.assert_array_equal(j.numpy(), t.numpy())


def test_cumsum_cumprod_addmm_inplace_match_torch():
    for name, args in (("cumsum_", (0,)), ("cumsum_", (-1,)), ("cumprod_", (1,))):
        j, t = _pair(X.copy())
        assert getattr(j, name)(*args) is j and j._version == 1
        getattr(t, name)(*args)
        np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-14)
        xj, xt = jg.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
        getattr(xj * 2.0, name)(*args).sum().backward()
        getattr(xt * 2.0, name)(*args).sum().backward()
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-13)
    m1, m2 = rng(3).standard_normal((3, 2)), rng(4).standard_normal((2, 4))
    j, t = _pair(X.copy())
    j.addmm_(jg.tensor(m1), jg.tensor(m2), beta=0.5, alpha=2.0)
    t.addmm_(torch.tensor(m1), torch.tensor(m2), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-14)
    agree(lambda a, b, c: (a * 1.0).addmm_(b, c), lambda a, b, c: (a * 1.0).addmm_(b, c), [X, m1, m2])


# ---- views, copies and shapes ------------------------------------------------------------------------------
def test_swapdims_adjoint_H_narrow_copy_match_torch():
    a = rng(5).standard_normal((2, 3, 4))
    agree(lambda x: jg.swapdims(x, 0, 2) * 2.0, lambda x: torch.swapdims(x, 0, 2) * 2.0, [a])
    agree(lambda x: x.adjoint() * 2.0, lambda x: x.adjoint() * 2.0, [a])
    agree(lambda x: jg.adjoint(x).H * x, lambda x: torch.adjoint(x).H * x, [X])
    agree(lambda x: x.narrow_copy(1, 1, 2), lambda x: torch.narrow_copy(x, 1, 1, 2), [a])
    j = jg.tensor(a)
    assert j.swapdims(0, 1)._base is j and j.adjoint()._base is j       # views, as torch
    assert jg.narrow_copy(j, 0, 0, 1)._base is None
    s = jg.tensor(a.copy())
    s.swapdims_(0, 2)
    assert tuple(s.shape) == (4, 3, 2)
    raises_as_torch(lambda: jg.zeros(3).adjoint(), lambda: torch.zeros(3).adjoint())
    raises_as_torch(lambda: jg.zeros(3).H, lambda: torch.zeros(3).H)
    raises_as_torch(lambda: jg.zeros(2, 2, 2).H, lambda: torch.zeros(2, 2, 2).H)


def test_new_empty_strided_and_resize_as_match_torch():
    t = torch.zeros(3, 4, dtype=torch.float64)
    j = jg.zeros(3, 4, dtype=jg.float64)
    for kw in ({}, {"dtype": jg.int64}):
        e = j.new_empty_strided((2, 3), (1, 2), **kw)
        et = t.new_empty_strided((2, 3), (1, 2), **{k: torch.int64 for k in kw})
        assert tuple(e.shape) == tuple(et.shape) and e.stride() == et.stride()
        assert e.dtype.name == str(et.dtype).split(".")[1]
    x = jg.zeros(3, 4)
    assert x.resize_as_(jg.zeros(2, 2)) is x and tuple(x.shape) == (2, 2)
    assert tuple(jg.resize_as_(jg.zeros(3), jg.zeros(1, 1)).shape) == tuple(
        torch.resize_as_(torch.zeros(3), torch.zeros(1, 1)).shape)


@pytest.mark.parametrize("case", [([0, 1, 0, 3], 3, -1), ([0, 1, 0, 3], 1, -1), ([[0, 1], [2, 3]], 2, -5),
                                  ([[0.0, 1.5], [0.0, 0.0]], 4, 7), ([], 2, -1), ([0, 1], 0, -1), (5, 2, -1),
                                  ([[True, False], [True, True]], 3, 0)])
def test_nonzero_static_matches_torch(case):
    a, size, fill = case
    got = jg.nonzero_static(jg.tensor(a), size=size, fill_value=fill)
    want = torch.nonzero_static(torch.tensor(a), size=size, fill_value=fill)
    assert got.dtype.name == str(want.dtype).split(".")[1] and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(jg.tensor(a).nonzero_static(size=size, fill_value=fill).numpy(), want.numpy())
    np.testing.assert_array_equal(jg.compile(lambda x: jg.nonzero_static(x, size=size, fill_value=fill),
                                             backend="interpret")(jg.tensor(a)).numpy(), want.numpy())


def test_nonzero_static_errors_match_torch():
    raises_as_torch(lambda: jg.nonzero_static(jg.tensor([0, 1]), size=-1),
                    lambda: torch.nonzero_static(torch.tensor([0, 1]), size=-1))


# ---- queries ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool"])
def test_queries_match_torch(dtype):
    j = jg.zeros(2, 3).to(getattr(jg, dtype))
    t = torch.zeros(2, 3).to(getattr(torch, dtype))
    assert (j.is_signed(), jg.is_signed(j)) == (t.is_signed(), torch.is_signed(t))
    assert (j.itemsize, j.nbytes, j.get_device(), jg.get_device(j), j.is_cpu) == \
        (t.itemsize, t.nbytes, t.get_device(), torch.get_device(t), t.is_cpu)
    assert (j.is_neg(), jg.is_neg(j), j.is_conj(), jg.is_conj(j)) == (t.is_neg(), torch.is_neg(t), t.is_conj(),
                                                                      torch.is_conj(t))
    assert j.resolve_neg() is j and jg.resolve_conj(j) is j
    assert (j.is_same_size(jg.ones(2, 3)), jg.is_same_size(j, jg.ones(3, 2))) == \
        (t.is_same_size(torch.ones(2, 3)), torch.is_same_size(t, torch.ones(3, 2)))


@pytest.mark.parametrize("value", [[], [1, 2], [0.0], 1.5, [float("nan")], [[0]], [True], -0.0])
def test_is_nonzero_matches_torch(value):
    try:
        want = torch.tensor(value).is_nonzero()
    except RuntimeError:
        raises_as_torch(lambda: jg.tensor(value).is_nonzero(), lambda: torch.tensor(value).is_nonzero())
        raises_as_torch(lambda: jg.is_nonzero(jg.tensor(value)), lambda: torch.is_nonzero(torch.tensor(value)))
        return
    assert jg.tensor(value).is_nonzero() is want and jg.is_nonzero(jg.tensor(value)) is want


# ---- nn methods, Python callables ----------------------------------------------------------------------------
def test_hardshrink_prelu_methods_match_torch():
    agree(lambda x: x.hardshrink(0.7), lambda x: x.hardshrink(0.7), [X])
    agree(lambda x: x.hardshrink(), lambda x: x.hardshrink(), [X])
    agree(lambda x, w: x.prelu(w), lambda x, w: x.prelu(w), [X.reshape(1, 3, 4), np.array([0.1, 0.2, 0.3])])


def test_apply_map_map2_match_torch():
    cases = [("apply_", (lambda v: v * 2 + 0.5,), np.array([1.0, 2.0, 3.0])),
             ("apply_", (lambda v: v / 2,), np.array([1, 2, 3])),
             ("apply_", (lambda v: 2.7,), np.array([1, 2])),
             ("apply_", (lambda v: not v,), np.array([True, False])),
             ("map_", (np.array([10.0, 20.0, 30.0]), lambda a, b: a + b), np.ones((2, 3))),
             ("map2_", (np.array([1.0, 1.0, 1.0]), np.array(2.0), lambda a, b, c: a * c + b), np.arange(3.0))]
    for name, args, a in cases:
        j, t = _pair(a.copy())
        rj = getattr(j, name)(*[jg.tensor(x) if isinstance(x, np.ndarray) else x for x in args])
        getattr(t, name)(*[torch.tensor(x) if isinstance(x, np.ndarray) else x for x in args])
        assert rj is j and j._version == t._version
        assert j.dtype.name == str(t.dtype).split(".")[1]
        np.testing.assert_array_equal(j.numpy(), t.numpy())
    g = np.array([1.0, 2.0])
    for f in (lambda m: m.tensor(g, requires_grad=True).apply_(lambda v: v),
              lambda m: (m.tensor(g, requires_grad=True) * 1).apply_(lambda v: v),
              lambda m: m.ones(2, dtype=m.float64).map_(m.tensor(g, requires_grad=True), lambda a, b: a),
              lambda m: m.ones(2).map_(m.ones(3), lambda a, b: a),
              lambda m: m.ones(2).map_(m.ones(2, dtype=m.int64), lambda a, b: a),
              lambda m: m.ones(2).map2_(m.ones(2), m.ones(2, dtype=m.float64), lambda a, b, c: a),
              lambda m: m.ones(2).apply_(3)):
        raises_as_torch(lambda: f(jg), lambda: f(torch))


# ---- eager == compiled by Numba: one program over the differentiable new functions ----------------------------
def _program(a, b, d):
    i = jg.tensor(IDX)
    outs = [jg.scatter(a, 0, i, b), a.scatter(1, i, 1.5), jg.select_scatter(a, b[0], 0, 1),
            jg.slice_scatter(a, b, 0, 1), jg.diagonal_scatter(a, d), jg.as_strided_scatter(a, b[:, :2], (2, 2), (1, 2), 1),
            a.adjoint() * 2.0, a.H + 1.0, jg.swapdims(a, 0, 1) * a.T, a.narrow_copy(1, 1, 2),
            a.hardshrink(0.3), jg.greater(a, 0.1).to(a.dtype) * a]
    c = a * 1.0
    c.gt_(0.2)
    y = a * 1.0
    y.cumsum_(1)
    outs += [c * a, y]
    loss = sum((o * (k + 1.0)).sum() for k, o in enumerate(outs))
    loss.backward()
    return [o.detach() for o in outs] + [a.grad, b.grad, d.grad, jg.nonzero_static(a > 0.5, size=5)]


def test_numba_compiled_program_matches_eager():
    def run(f):
        a = jg.tensor(X, requires_grad=True)
        b = jg.tensor(rng(8).standard_normal((2, 4)), requires_grad=True)
        d = jg.tensor(rng(9).standard_normal(3), requires_grad=True)
        return f(a, b, d)
    eager, compiled = run(_program), run(jg.compile(_program))
    for k, (x, y) in enumerate(zip(eager, compiled)):
        assert x.dtype is y.dtype and tuple(x.shape) == tuple(y.shape), k
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12, atol=1e-12, err_msg=str(k))


@pytest.mark.parametrize("module", ["pointwise.trig", "indexing.scatter_writes", "tensor_info.queries", "aliases"])
def test_docstring_examples_run(module):
    import doctest
    import importlib
    r = doctest.testmod(importlib.import_module(f"jitgrad.library.{module}"))
    assert r.attempted > 0 and r.failed == 0
