"""asin, acos, atan, sinh, cosh, asinh, acosh, atanh (and the arc* aliases, in-place forms), torch.i0 and
jitgrad.special.i0e / i1 / i1e against torch: values, dtypes, gradients (gradcheck/gradgradcheck in float64),
domain edges, in-place semantics, and one Numba-compiled program against eager."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgrad as jg
from torch_agreement import agree, raises_as_torch, rng

torch = pytest.importorskip("torch")

inf, nan = math.inf, math.nan

TRIG = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
           "arctanh": "atanh"}
DOMAIN = {"asin": rng(1).uniform(-0.95, 0.95, (3, 4)), "acos": rng(2).uniform(-0.95, 0.95, (3, 4)),
          "atanh": rng(3).uniform(-0.95, 0.95, (3, 4)), "acosh": rng(4).uniform(1.05, 4.0, (3, 4))}
ANY = rng(5).standard_normal((3, 4)) * 2


def _special(m, name):
    return getattr(m, name) if name == "i0" else getattr(m.special, name)


@pytest.mark.parametrize("name", TRIG + ["i0", "i0e", "i1", "i1e"])
def test_values_and_gradients_match_torch(name):
    x = DOMAIN.get(name, ANY * (4.0 if name.startswith("i") else 1.0))     # Bessel: both Chebyshev ranges
    if name in TRIG:
        agree(lambda a: getattr(jg, name)(a), lambda a: getattr(torch, name)(a), [x])
    else:
        agree(lambda a: _special(jg, name)(a), lambda a: _special(torch, name)(a), [x], atol=1e-9)


EDGES = np.array([1.0, -1.0, 1.5, -2.0, 0.5, 0.0, -0.0, inf, -inf, nan, 800.0, -800.0, 1e-300, 0.9999999, 8.0, 9.0])


@pytest.mark.parametrize("name", TRIG + ["i0", "i0e", "i1", "i1e"])
@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_domain_edges_and_zero_signs(name, mode, dtype):
    fj = getattr(jg, name) if name in TRIG else _special(jg, name)
    ft = getattr(torch, name) if name in TRIG else _special(torch, name)
    f = fj if mode == "eager" else jg.compile(fj, backend="interpret")
    got = f(jg.tensor(EDGES).to(getattr(jg, dtype))).numpy()
    want = ft(torch.tensor(EDGES).to(getattr(torch, dtype))).numpy()
    assert got.dtype == want.dtype
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), ~ok)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))
    np.testing.assert_allclose(got, want, rtol=1e-15 if dtype == "float64" else 3e-7)


@pytest.mark.parametrize("name", TRIG + ["i0"])
def test_gradients_at_the_edges_match_torch(name):
    x = np.array([1.0, -1.0, 1.5, 0.5, -0.0, inf, -inf, nan, 1e-300])
    xt, xj = torch.tensor(x, requires_grad=True), jg.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(getattr(torch, name)(xt).sum(), xt, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), xt)
    (gj,) = jg.autograd.grad(getattr(jg, name)(xj).sum(), xj, create_graph=True)
    (ggj,) = jg.autograd.grad(gj.sum(), xj)
    np.testing.assert_allclose(gj.detach().numpy(), g.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(ggj.numpy(), gg.numpy(), rtol=1e-13)


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_bessel_gradients_at_zero_inf_nan_match_torch_eagerly(name):
    x = np.array([0.0, -0.0, 1e-300, 2.0, -9.0, inf, -inf, nan])
    xt, xj = torch.tensor(x, requires_grad=True), jg.tensor(x, requires_grad=True)
    _special(torch, name)(xt).sum().backward()
    _special(jg, name)(xj).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-13)


def test_bessel_grad_names_match_torch():
    x = jg.tensor([1.0], requires_grad=True)
    xt = torch.tensor([1.0], requires_grad=True)
    for name in ("i0e", "i1", "i1e"):
        assert _special(jg, name)(x).grad_fn.name() == _special(torch, name)(xt).grad_fn.name()


@pytest.mark.parametrize("name", TRIG + ["i0"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "float32"])
def test_dtypes_match_torch(name, dtype):
    a = np.array([1, 0, 1]) if dtype != "bool" else np.array([True, False, True])
    got = getattr(jg, name)(jg.tensor(a).to(getattr(jg, dtype)))
    want = getattr(torch, name)(torch.tensor(a).to(getattr(torch, dtype)))
    assert got.dtype.name == str(want.dtype).split(".")[1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_are_the_same_functions_and_methods(alias):
    x = jg.tensor([0.25, 0.5]) + (1.0 if alias == "arccosh" else 0.0)
    np.testing.assert_array_equal(getattr(jg, alias)(x).numpy(), getattr(jg, ALIASES[alias])(x).numpy())
    np.testing.assert_array_equal(getattr(x, alias)().numpy(), getattr(x, ALIASES[alias])().numpy())


@pytest.mark.parametrize("name", TRIG + sorted(ALIASES) + ["i0"])
def test_inplace_matches_torch(name):
    a = np.array([0.25, 0.5, 0.75]) + (1.0 if "cosh" in name and name != "cosh" else 0.0)
    j, t = jg.tensor(a), torch.tensor(a)
    rj = getattr(j, name + "_")()
    getattr(t, name + "_")()
    assert rj is j and j._version == 1
    np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-15)
    f = getattr(jg, name + "_")     # torch.asin_(x) ... are functions too
    j2 = jg.tensor(a)
    assert f(j2) is j2
    # in place on a leaf that requires grad: torch's error; on a non-leaf: torch's gradient
    raises_as_torch(lambda: getattr(jg.tensor(a, requires_grad=True), name + "_")(),
                    lambda: getattr(torch.tensor(a, requires_grad=True), name + "_")())
    xj, xt = jg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    yj, yt = xj * 1.0, xt * 1.0
    getattr(yj, name + "_")()
    getattr(yt, name + "_")()
    assert yj.grad_fn.name() == yt.grad_fn.name() and yj._version == yt._version
    try:        # torch has no derivative for asinh_, acosh_, atanh_ (NotImplementedError)
        yt.sum().backward()
    except NotImplementedError:
        raises_as_torch(lambda: yj.sum().backward(), lambda: (xt * 1.0).asinh_().sum().backward()
                        if "sinh" in name else (xt * 1.0).acosh_().sum().backward() if "cosh" in name
                        else (xt * 1.0).atanh_().sum().backward())
        return
    yj.sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-13)


def test_errors_match_torch():
    raises_as_torch(lambda: jg.asin(0.5), lambda: torch.asin(0.5))
    raises_as_torch(lambda: jg.i0([1.0]), lambda: torch.i0([1.0]))


# ---- eager == compiled by Numba: one program over every op, float64 and float32 ----------------------------
def _program(a, b):
    outs = [getattr(jg, n)(b if n in ("asin", "acos", "atanh") else a) for n in ("atan", "sinh", "cosh", "asinh")]
    outs += [jg.asin(b), jg.acos(b), jg.atanh(b), jg.acosh(a.abs() + 1.0)]
    outs += [jg.i0(a * 4.0), jg.special.i0e(a * 4.0), jg.special.i1(a * 4.0), jg.special.i1e(a * 4.0)]
    loss = sum((o * (k + 1.0)).sum() for k, o in enumerate(outs))
    loss.backward()
    return [o.detach() for o in outs] + [a.grad, b.grad]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numba_compiled_program_matches_eager(dtype):
    av = np.concatenate([rng(6).standard_normal(10) * 1.5, [0.0, 2.5, -2.5]])
    bv = np.concatenate([rng(7).uniform(-0.95, 0.95, 10), [0.0, 0.5, -0.99]])

    def run(f):
        a = jg.tensor(av, dtype=getattr(jg, dtype), requires_grad=True)
        b = jg.tensor(bv, dtype=getattr(jg, dtype), requires_grad=True)
        return f(a, b)
    eager, compiled = run(_program), run(jg.compile(_program))
    for k, (x, y) in enumerate(zip(eager, compiled)):
        assert x.dtype is y.dtype, k
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12 if dtype == "float64" else 2e-5,
                                   atol=1e-12 if dtype == "float64" else 1e-5, err_msg=str(k))
