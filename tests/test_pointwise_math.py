"""The pointwise math of library/pointwise/rounding.py, pairs.py and special.py against torch:
values, dtypes and shapes, gradients (float64, eager and compiled by the interpreter), gradcheck/gradgradcheck,
one Numba-compiled program per theme, in-place variants, and torch's exception types and texts."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgrad as jg
from torch_agreement import agree, raises_as_torch, rng

torch = pytest.importorskip("torch")

inf, nan = math.inf, math.nan


def _away_from_integers(a):
    """Values whose rounding is stable under gradcheck's steps (no half-integers, no integers)."""
    f = a - np.floor(a)
    return np.where(np.abs(f - 0.5) < 0.05, a + 0.2, np.where(f < 0.05, a + 0.1, a))


X = _away_from_integers(rng(1).standard_normal((3, 4)) * 3)
Y = rng(2).choice([-1.0, 1.0], (4,)) * rng(2).uniform(0.5, 2.0, (4,))
P = rng(3).uniform(0.05, 0.95, (3, 4))
POS = rng(4).uniform(0.3, 4.0, (3, 4))

# ---- unary: values and gradients against torch --------------------------------------------------------------
UNARY = {
    "floor": (lambda m, a: m.floor(a), X), "ceil": (lambda m, a: a.ceil(), X), "trunc": (lambda m, a: m.trunc(a), X),
    "fix": (lambda m, a: a.fix(), X), "round": (lambda m, a: m.round(a), X),
    "round_decimals": (lambda m, a: m.round(a, decimals=2), X), "round_neg": (lambda m, a: a.round(decimals=-1), X * 40),
    "frac": (lambda m, a: m.frac(a), X), "absolute": (lambda m, a: a.absolute(), X),
    "positive": (lambda m, a: m.positive(a) * 2.0, X), "deg2rad": (lambda m, a: m.deg2rad(a), X),
    "rad2deg": (lambda m, a: a.rad2deg(), X), "exp2": (lambda m, a: m.exp2(a), X), "erfc": (lambda m, a: m.erfc(a), X),
    "logit": (lambda m, a: m.logit(a), P), "logit_eps": (lambda m, a: m.logit(a * 1.2 - 0.1, eps=0.1), P),
    "sinc": (lambda m, a: m.sinc(a), X), "lgamma": (lambda m, a: m.lgamma(a), X),
    "digamma": (lambda m, a: m.digamma(a), X), "polygamma1": (lambda m, a: m.polygamma(1, a), POS),
    "polygamma3": (lambda m, a: a.polygamma(3), POS), "erfinv": (lambda m, a: m.erfinv(a * 2 - 1), P),
    "mvlgamma": (lambda m, a: m.mvlgamma(a + 1.0, 3), POS),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name):
    f, x = UNARY[name]
    # torch's trigamma/polygamma are accurate to ~1e-10 relative (ours, SciPy's and the decomposition's to ulps)
    atol = 1e-8 if name in ("digamma", "polygamma1", "polygamma3", "lgamma", "mvlgamma") else 1e-10
    agree(lambda a: f(jg, a), lambda a: f(torch, a), [x], atol=atol,
          second_order=None if name == "polygamma3" else True)


SPECIAL_POINTS = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e300, -1e300, inf, -inf, nan, 0.49999999999999994])


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "frac", "sgn", "exp2", "erfc", "sinc", "deg2rad",
                                  "lgamma"])
@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_unary_special_values_and_zero_signs(name, mode):
    fn = getattr(jg, name)
    f = fn if mode == "eager" else jg.compile(fn, backend="interpret")
    got = f(jg.tensor(SPECIAL_POINTS)).numpy()
    want = getattr(torch, name)(torch.tensor(SPECIAL_POINTS)).numpy()
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "fix", "exp2", "erfc", "deg2rad", "rad2deg",
                                  "sgn", "logit", "sinc", "lgamma", "digamma", "erfinv", "isneginf", "isposinf",
                                  "isreal", "absolute", "positive"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "float32", "bool"])
def test_unary_dtypes_match_torch(name, dtype):
    a = np.array([3, -4, 0, 1]) if dtype != "bool" else np.array([True, False, True, False])
    j, t = jg.tensor(a).to(getattr(jg, dtype)), torch.tensor(a).to(getattr(torch, dtype))
    try:
        want = getattr(torch, name)(t)
    except Exception:
        raises_as_torch(lambda: getattr(jg, name)(j), lambda: getattr(torch, name)(t))
        return
    got = getattr(jg, name)(j)
    assert got.dtype.name == str(want.dtype).split(".")[1] and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-6)


def test_rounding_and_friends_grad_names_and_zero_gradients():
    x = jg.tensor([1.5, -2.25, inf], requires_grad=True)
    for name, node in (("floor", "FloorBackward0"), ("ceil", "CeilBackward0"), ("trunc", "TruncBackward0"),
                       ("round", "RoundBackward0"), ("frac", "FracBackward0"), ("fix", "TruncBackward0"),
                       ("sgn", "SgnBackward0"), ("erfc", "ErfcBackward0"), ("logit", "LogitBackward0"),
                       ("lgamma", "LgammaBackward0"), ("digamma", "DigammaBackward0"), ("erfinv", "ErfinvBackward0")):
        assert getattr(jg, name)(x).grad_fn.name() == node, name
    assert jg.round(x, decimals=1).grad_fn.name() == "RoundBackward1"
    g, = jg.autograd.grad(jg.floor(x).sum() + jg.round(x, decimals=2).sum(), x)
    assert g.tolist() == [0.0, 0.0, 0.0]        # zeros, also under an infinite input (torch: zeros_like)
    assert jg.positive(x) is x


def test_sgn_matches_torch_with_a_zero_gradient():
    # torch's gradient is a ZeroTensor (no NumPy view): compare the values, and jitgrad's gradient with zeros
    for f in (jg.sgn, jg.compile(jg.sgn, backend="interpret")):
        x = jg.tensor(X, requires_grad=True)
        y = f(x)
        np.testing.assert_array_equal(y.detach().numpy(), torch.sgn(torch.tensor(X)).numpy())
        y.sum().backward()
        assert not x.grad.numpy().any()


def test_logit_eps_clamps_and_zeroes_the_gradient_outside():
    p = np.array([0.0, 0.05, 0.1, 0.5, 0.9, 0.95, 1.0])
    for eps in (None, 0.1):
        agree(lambda a: jg.logit(a, eps), lambda a: torch.logit(a, eps), [p[1:-1] if eps is None else p],
              second_order=None)


# ---- binary -----------------------------------------------------------------------------------------------------
BINARY = {
    "hypot": (lambda m, a, b: m.hypot(a, b), X, Y), "fmod": (lambda m, a, b: m.fmod(a, b), X, Y),
    "fmod_scalar": (lambda m, a, b: a.fmod(1.5) + b, X, Y), "copysign": (lambda m, a, b: m.copysign(a, b), X, Y),
    "copysign_scalar": (lambda m, a, b: a.copysign(-0.0) * b, X, Y),
    "xlogy": (lambda m, a, b: m.xlogy(a, b.abs()), X, Y), "xlogy_scalar_x": (lambda m, a, b: m.xlogy(2.0, b.abs()), X, Y),
    "xlogy_scalar_y": (lambda m, a, b: m.xlogy(a, 3.0) * b, X, Y),
    "float_power": (lambda m, a, b: m.float_power(a.abs(), b), X, Y),
    "logaddexp2": (lambda m, a, b: m.logaddexp2(a, b), X, Y), "fmax": (lambda m, a, b: m.fmax(a, b), X, Y),
    "fmin": (lambda m, a, b: a.fmin(b), X, Y), "ldexp": (lambda m, a, b: m.ldexp(a, b.round()), X, Y),
    "addcmul": (lambda m, a, b: m.addcmul(a, a, b, value=0.5), X, Y),
    "addcdiv": (lambda m, a, b: a.addcdiv(a, b, value=-2), X, Y),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_torch(name):
    f, x, y = BINARY[name]
    agree(lambda a, b: f(jg, a, b), lambda a, b: f(torch, a, b), [x, y],
          second_order=None if name == "fmod" else True)


def test_binary_special_points_match_torch():
    # values and gradients at zeros, ties, infinities and NaNs (tests/singular_samples.py covers hypot, fmod and
    # copysign, the primitives; these are the compositions)
    g = np.array([0.0, -0.0, 1.0, -2.0, inf, -inf, nan, 2.0])
    x, y = [a.reshape(-1) for a in np.meshgrid(g, g, indexing="ij")]
    # not (inf, inf) nor (-inf, -inf): there torch's logaddexp gradients are nan, jitgrad's logaddexp (which
    # logaddexp2 is made of) gives (1, 0)
    keep = ~(np.isinf(x) & (x == y))
    x, y = x[keep], y[keep]
    for name in ("xlogy", "fmax", "fmin", "logaddexp2", "heaviside_values"):
        if name == "heaviside_values":
            np.testing.assert_array_equal(jg.heaviside(jg.tensor(x), jg.tensor(y)).numpy(),
                                          torch.heaviside(torch.tensor(x), torch.tensor(y)).numpy())
            continue
        agree(lambda a, b: getattr(jg, name)(a, b), lambda a, b: getattr(torch, name)(a, b), [x, y], second_order=None)


def test_xlogy_at_zero_is_zero_with_zero_gradient_like_torch():
    x, y = np.array([0.0, 0.0, 0.0, 2.0]), np.array([0.0, 2.0, nan, 0.0])
    agree(jg.xlogy, torch.xlogy, [x, y], second_order=None)


def test_frexp_matches_torch():
    a = np.array([8.0, 0.3, -5.0, 0.0, -0.0, inf, -inf, 1e-310, 3e300, 1.0, 0.5, 2.0 ** -1074])
    for dtype in ("float64", "float32"):
        m, e = jg.frexp(jg.tensor(a).to(getattr(jg, dtype)))
        mt, et = torch.frexp(torch.tensor(a).to(getattr(torch, dtype)))
        np.testing.assert_array_equal(m.numpy(), mt.numpy())
        np.testing.assert_array_equal(e.numpy(), et.numpy())
        assert e.dtype is jg.int32 and m.dtype.name == dtype
    agree(lambda t: jg.frexp(t).mantissa, lambda t: torch.frexp(t).mantissa, [X])


def test_binary_dtypes_match_torch():
    i, f = np.array([3, -4, 5]), np.array([1.5, -2.5, 0.5])
    for call in (lambda m, a, b: m.fmod(a, b), lambda m, a, b: m.copysign(a, b), lambda m, a, b: m.fmax(a, b),
                 lambda m, a, b: m.ldexp(a, b), lambda m, a, b: m.xlogy(a, b), lambda m, a, b: m.float_power(a, b),
                 lambda m, a, b: m.logical_xor(a, b), lambda m, a, b: m.addcmul(a, a, b, value=2)):
        for a, b in ((i, i), (i, f), (f, i)):
            ta, tb = torch.tensor(a), torch.tensor(b)
            want = call(torch, ta, tb)
            got = call(jg, jg.tensor(a), jg.tensor(b))
            assert got.dtype.name == str(want.dtype).split(".")[1]
            np.testing.assert_allclose(got.numpy().astype(float), want.numpy().astype(float), rtol=1e-6)


def test_errors_match_torch():
    i, f = np.array([3, -4, 5]), np.array([1.5, -2.5, 0.5])
    calls = [lambda m: m.frac(m.tensor(i)), lambda m: m.hypot(m.tensor(i), m.tensor(i)),
             lambda m: m.hypot(m.tensor(f), 2), lambda m: m.heaviside(m.tensor(f), m.tensor(1)),
             lambda m: m.heaviside(m.tensor(f), 0.5), lambda m: m.frexp(m.tensor(i)),
             lambda m: m.round(m.tensor(i), decimals=1), lambda m: m.floor(m.tensor([True])),
             lambda m: m.positive(m.tensor([True])), lambda m: m.addcdiv(m.tensor(i), m.tensor(i), m.tensor(i)),
             lambda m: m.logaddexp2(m.tensor(i), m.tensor(i)), lambda m: m.nanmean(m.tensor(i)),
             lambda m: m.logcumsumexp(m.tensor(i), 0), lambda m: m.polygamma(-1, m.tensor(f)),
             lambda m: m.heaviside(m.tensor(f, requires_grad=True), m.tensor(0.5)).sum().backward()]
    for call in calls:
        raises_as_torch(lambda: call(jg), lambda: call(torch))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):      # as jg.remainder: the op named first
        jg.fmod(jg.tensor(i), jg.tensor([1, 0, 2]))


def test_inplace_variants_match_torch():
    names = ["floor_", "ceil_", "trunc_", "fix_", "round_", "frac_", "sgn_", "absolute_", "deg2rad_", "rad2deg_",
             "exp2_", "erfc_", "logit_", "sinc_", "lgamma_", "digamma_", "erfinv_"]
    for n in names:
        assert hasattr(torch.Tensor, n), n
        a, t = jg.tensor(P), torch.tensor(P)
        assert getattr(a, n)() is a
        getattr(t, n)()
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-9, err_msg=n)
    for n, other in (("hypot_", Y[:3]), ("fmod_", Y[:3]), ("copysign_", Y[:3]), ("xlogy_", np.abs(Y[:3])),
                     ("ldexp_", np.round(Y[:3]))):
        a, t = jg.tensor(P[0, :3].copy()), torch.tensor(P[0, :3].copy())
        getattr(a, n)(jg.tensor(other))
        getattr(t, n)(torch.tensor(other))
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-12, err_msg=n)
    a, t = jg.tensor(P), torch.tensor(P)
    a.round_(decimals=1), t.round_(decimals=1)
    a.polygamma_(1), t.polygamma_(1)
    a.addcmul_(a, a, value=0.5), t.addcmul_(t, t, value=0.5)
    a.addcdiv_(a, a + 1.0), t.addcdiv_(t, t + 1.0)
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-9)
    # an in-place op on a leaf's clone records a node, gradients flow through it
    w = jg.tensor(P, requires_grad=True)
    v = w * 1.0
    v.hypot_(jg.tensor(P))
    v.sum().backward()
    tw = torch.tensor(P, requires_grad=True)
    tv = tw * 1.0
    tv.hypot_(torch.tensor(P))
    tv.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


# ---- reductions and scans ---------------------------------------------------------------------------------------
# no all-NaN row or column: there torch's gradient is nan (grad / 0 * mask), jitgrad's 0 (a where)
NANX = np.where(np.eye(3, 4) + np.eye(3, 4, 2) > 0, nan, rng(5).standard_normal((3, 4)))


@pytest.mark.parametrize("args", [(), (0,), (1, True), ((0, 1),)])
def test_nansum_nanmean_match_torch(args):
    agree(lambda a: jg.nansum(a, *args), lambda a: torch.nansum(a, *args), [NANX])
    agree(lambda a: a.nanmean(*args), lambda a: a.nanmean(*args), [NANX])
    assert jg.nansum(jg.tensor([1, 2, 3])).tolist() == 6


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_matches_torch(dim):
    agree(lambda a: jg.logcumsumexp(a, dim), lambda a: torch.logcumsumexp(a, dim), [X])
    far = np.array([[-1000.0, 0.0, 1.0, -inf, 3.0, 700.0, -800.0], [-inf, -inf, 2.0, 5.0, -3.0, nan, 1.0]])
    np.testing.assert_allclose(jg.logcumsumexp(jg.tensor(far), 1).numpy(),
                               torch.logcumsumexp(torch.tensor(far), 1).numpy(), rtol=1e-13)


# ---- eager == compiled by Numba, one program per theme ------------------------------------------------------------
def _program(x, y, p):
    return (jg.floor(x) + jg.ceil(x) * 2 + jg.round(x) * 3 + jg.trunc(x) * 4 + jg.round(x, decimals=1) + jg.frac(x),
            jg.hypot(x, y), jg.fmod(x, y), jg.copysign(x, y), jg.xlogy(p, y.abs()), jg.fmax(x, y), jg.ldexp(x, y.round()),
            jg.erfc(x), jg.exp2(x), jg.sinc(x), jg.logit(p, 0.1), jg.lgamma(x), jg.digamma(x), jg.polygamma(2, p + 1.0),
            jg.erfinv(p * 2 - 1), jg.logaddexp2(x, y), jg.addcdiv(x, x, y, value=0.5), jg.nansum(x, 1),
            jg.logcumsumexp(x, 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numba_compiled_program_matches_eager(dtype):
    ins = [X.astype(dtype), Y.astype(dtype), P.astype(dtype)]
    rtol = 1e-12 if dtype == np.float64 else 2e-5

    def step(x, y, p):
        outs = _program(x, y, p)
        sum((o * 1.5).sum() for o in outs).backward()
        return outs

    def run(f):
        ts = [jg.tensor(a, requires_grad=True) for a in ins]
        outs = f(*ts)
        return [o.detach().numpy() for o in outs] + [t.grad.numpy() for t in ts]
    eager, compiled = run(step), run(jg.compile(step))
    for k, (a, b) in enumerate(zip(eager, compiled)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol, err_msg=str(k))


# ---- jitgrad.special ---------------------------------------------------------------------------------------------
SPECIAL = {
    "erf": X, "erfc": X, "erfinv": P * 2 - 1, "expit": X, "logit": P, "exp2": X, "expm1": X, "log1p": POS,
    "gammaln": X, "digamma": X, "psi": X, "ndtr": X, "log_ndtr": np.concatenate([X.ravel(), [-30.0, -15.0, 8.0]]),
    "sinc": X, "entr": POS, "round": X,
}


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_special_namespace_matches_torch_special(name):
    import jitgrad.special as S
    assert jg.special is S
    agree(getattr(S, name), getattr(torch.special, name), [SPECIAL[name]], atol=1e-8)


def test_special_namespace_functions_with_arguments():
    S = jg.special
    agree(lambda a, b: S.xlog1py(a, b.abs()), lambda a, b: torch.special.xlog1py(a, b.abs()), [X, Y])
    agree(lambda a: S.xlog1py(a, 2.0), lambda a: torch.special.xlog1py(a, 2.0), [X])
    agree(lambda a: S.polygamma(2, a), lambda a: torch.special.polygamma(2, a), [POS], atol=1e-8, second_order=None)
    agree(lambda a: S.multigammaln(a + 1.0, 2), lambda a: torch.special.multigammaln(a + 1.0, 2), [POS], atol=1e-8)
    agree(lambda a: S.softmax(a, 1), lambda a: torch.special.softmax(a, 1), [X])
    agree(lambda a: S.log_softmax(a, 0), lambda a: torch.special.log_softmax(a, 0), [X])
    agree(lambda a: S.logsumexp(a, 1, True), lambda a: torch.special.logsumexp(a, 1, True), [X])
    agree(lambda a: S.round(a, decimals=1), lambda a: torch.special.round(a, decimals=1), [X])
    x = np.array([0.0, -1e-300, 1e-300, 2.0, -40.0, -1e5, inf, -inf, nan])
    np.testing.assert_allclose(S.log_ndtr(jg.tensor(x)).numpy(), torch.special.log_ndtr(torch.tensor(x)).numpy(),
                               rtol=1e-13)
    e = np.array([0.0, -1.0, 0.5, inf, nan])
    np.testing.assert_array_equal(S.entr(jg.tensor(e)).numpy(), torch.special.entr(torch.tensor(e)).numpy())


# ---- igamma / igammac (ir/ops/special.py: SciPy's, a host step when compiled) --------------------------------------
def test_igamma_and_igammac_match_torch_with_gradients_in_x():
    a = rng(5).uniform(0.2, 6.0, (3, 4))
    for jf, tf in ((jg.igamma, torch.igamma), (jg.igammac, torch.igammac),
                   (jg.special.gammainc, torch.special.gammainc), (jg.special.gammaincc, torch.special.gammaincc)):
        agree(lambda x, s: jf(s, x), lambda x, s: tf(s, x), [POS * 3, a], needs_grad=[True, False], atol=1e-12)
        # broadcast: a row of shapes against a column of points, the gradient summed back to x's shape
        agree(lambda x, s: jf(s, x), lambda x, s: tf(s, x), [POS[:1] * 2, a[:, :1]], needs_grad=[True, False],
              atol=1e-12)
    x = np.linspace(0.0, 40.0, 9)
    np.testing.assert_allclose(jg.igamma(jg.tensor(7.5), jg.tensor(x)).numpy() +
                               jg.igammac(jg.tensor(7.5), jg.tensor(x)).numpy(), np.ones(9), rtol=1e-14)


def test_igamma_dtypes_grad_names_and_inplace_like_torch():
    for M in (jg, torch):
        f32, f64 = M.tensor([1.5, 2.0]), M.tensor(3.0, dtype=M.float64)
        assert str(M.igamma(f32, f64).dtype).endswith("float32")
        assert str(M.igamma(M.tensor([1, 2]), f32).dtype).endswith("float32")
        x = M.tensor([0.5, 3.0], dtype=M.float64, requires_grad=True)
        assert M.igamma(f64, x).grad_fn.name() == "IgammaBackward0"
        assert M.igammac(f64, x).grad_fn.name() == "IgammacBackward0"
    for name in ("igamma_", "igammac_"):
        got, want = jg.tensor([0.5, 2.0, 9.0]), torch.tensor([0.5, 2.0, 9.0])
        getattr(got, name)(jg.tensor([1.0, 1.0, 1.0]))
        getattr(want, name)(torch.tensor([1.0, 1.0, 1.0]))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_igamma_errors_match_torch():
    x = np.array([0.5, 2.0])
    for name in ("igamma", "igammac"):
        raises_as_torch(lambda: getattr(jg, name)(jg.tensor(x, requires_grad=True), jg.tensor(x)).sum().backward(),
                        lambda: getattr(torch, name)(torch.tensor(x, requires_grad=True), torch.tensor(x)).sum()
                        .backward())
        with pytest.raises(TypeError, match="argument 'other'"):
            getattr(jg, name)(jg.tensor(x), 2.0)
        for M in (jg, torch):
            with pytest.raises(RuntimeError, match=f"\"{name}_cpu\" not implemented for 'Long'"):
                getattr(M, name)(M.tensor([1, 2]), M.tensor([2, 3]))


def test_igamma_has_no_forward_mode_as_in_torch():
    import jitgrad.autograd.forward_ad as fwAD
    for M, fw in ((jg, fwAD), (torch, torch.autograd.forward_ad)):
        with fw.dual_level():
            d = fw.make_dual(M.tensor([1.0, 2.0]), M.tensor([1.0, 0.0]))
            for fn in (M.igamma, M.igammac):
                for args in ((d, d), (M.tensor([1.0, 2.0]), d), (d, M.tensor([1.0, 2.0]))):
                    with pytest.raises(NotImplementedError, match="Trying to use forward AD with igamma"):
                        fn(*args)
            plain = M.igamma(M.tensor([1.0, 2.0]), M.tensor([0.5, 0.5]))     # no tangent: no refusal
            assert fw.unpack_dual(plain).tangent is None
