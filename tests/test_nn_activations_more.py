"""The activations torch has and jitgrad lacked (functional, in-place and module forms): celu, selu, hardsigmoid,
hardswish, mish, rrelu, hardshrink, softshrink, tanhshrink, softsign, glu, softmin, prelu and the modules ELU ...
Softmax2d: values, dtypes and gradients (at the kinks too) against torch, gradcheck/gradgradcheck in float64,
eager == compiled (interpreter and Numba), torch's errors."""
import warnings

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# the kinks of every activation below, and ordinary points
POINTS = np.array([-4.0, -3.0, -2.5, -1.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0, 2.5, 3.0, 4.0, 25.0, -25.0])

CASES = [("celu", {}), ("celu", {"alpha": 0.5}), ("selu", {}), ("hardsigmoid", {}), ("hardswish", {}),
         ("mish", {}), ("hardshrink", {}), ("hardshrink", {"lambd": 1.0}), ("softshrink", {}),
         ("softshrink", {"lambd": 1.0}), ("tanhshrink", {}), ("softsign", {}), ("elu", {"alpha": 0.7}),
         ("leaky_relu", {"negative_slope": 0.2}), ("relu6", {}), ("hardtanh", {"min_val": -0.5, "max_val": 2.5}),
         ("threshold", {"threshold": 0.5, "value": -2.0}), ("rrelu", {}), ("rrelu", {"lower": 0.1, "upper": 0.5})]


def pair(a, dtype=np.float64):
    a = np.asarray(a, dtype=dtype)
    return jg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


@pytest.mark.parametrize("name,kw", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_activation_values_and_grads_match_torch(name, kw, dtype):
    x, tx = pair(POINTS, dtype)
    y, ty = getattr(F, name)(x, **kw), getattr(TF, name)(tx, **kw)
    assert y.dtype.name == str(ty.dtype).split(".")[1] and tuple(y.shape) == tuple(ty.shape)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    w = np.linspace(0.5, 1.5, POINTS.size).astype(dtype)
    (y * jg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    if name == "hardsigmoid":     # torch's double kernel multiplies by the float literal 1.0f / 6.0f
        tol = max(tol, 1e-7)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name,kw", [("celu", {"alpha": 2.0}), ("selu", {}), ("hardsigmoid", {}),
                                     ("hardswish", {}), ("mish", {}), ("elu", {}), ("leaky_relu", {}),
                                     ("relu6", {}), ("hardtanh", {}), ("threshold", {"threshold": 0.1, "value": 3.0}),
                                     ("rrelu", {})])
def test_inplace_forms_write_into_the_input(name, kw):
    a = POINTS * 0.9
    x, tx = jg.tensor(a), torch.tensor(a)
    r, tr = getattr(F, name)(x, inplace=True, **kw), getattr(TF, name)(tx, inplace=True, **kw)
    assert r is x
    np.testing.assert_allclose(x.numpy(), tx.numpy(), rtol=1e-13)
    if hasattr(F, name + "_") and name not in ("hardtanh", "threshold"):
        x2 = jg.tensor(a)
        assert getattr(F, name + "_")(x2, **kw) is x2
        np.testing.assert_allclose(x2.numpy(), tx.numpy(), rtol=1e-13)


def test_threshold_passes_nan_and_its_gradient_as_torch():
    """``threshold`` replaces where ``x <= threshold``: a NaN is not, so it passes with its gradient (torch's
    ``threshold`` and ``threshold_backward``), eager and compiled alike."""
    a = np.array([np.nan, -1.0, 0.5, 0.25, 2.0])
    for fn in (lambda t: F.threshold(t, 0.25, -3.0), jg.compile(lambda t: F.threshold(t, 0.25, -3.0))):
        x, tx = pair(a)
        y, ty = fn(x), TF.threshold(tx, 0.25, -3.0)
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())     # [1, 0, 1, 0, 1]


def test_inplace_activation_backward_through_a_non_leaf():
    a = np.array([-2.0, -0.3, 0.4, 2.0])
    x, tx = pair(a)
    y, ty = x * 2, tx * 2
    F.celu_(y, 0.5)
    TF.celu_(ty, 0.5)
    (F.selu(y * 3, inplace=True) * y).sum().backward()
    (TF.selu(ty * 3, inplace=True) * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13)


def test_glu_softmin_prelu_match_torch():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3))
    for dim in (0, 1, -2):
        x, tx = pair(a)
        if a.shape[dim] % 2:
            continue
        y, ty = F.glu(x, dim), TF.glu(tx, dim)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-13)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    x, tx = pair(a)
    y, ty = F.softmin(x, 1), TF.softmin(tx, 1)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-13)
    assert F.softmin(x, 1, dtype=jg.float32).dtype is jg.float32
    for wshape, xa in (((4,), a), ((1,), a), ((1,), a[0, 0]), ((), a), ((1,), np.float64(-2.0))):
        wa = rng.uniform(0.1, 0.5, wshape)
        x, tx = pair(xa)
        w, tw = pair(wa)
        y, ty = F.prelu(x, w), TF.prelu(tx, tw)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-13)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_rrelu_training_draws_slopes_in_range_and_its_gradient_is_the_slope():
    x = jg.tensor(-np.linspace(0.1, 2.0, 200), requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    slope = (y / x).detach().numpy()
    assert slope.min() >= 0.1 and slope.max() <= 0.3 and slope.std() > 0.01
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slope, rtol=1e-12)
    m = jg.nn.RReLU(0.1, 0.3)
    z = m(jg.tensor([-1.0, 1.0]))
    assert not np.isclose(z[0].item(), -0.2)       # training: a random slope (0.2 has probability 0)
    m.eval()
    assert m(jg.tensor([-1.0, 1.0])).tolist() == pytest.approx([-0.2, 1.0])


def test_gradcheck_and_gradgradcheck_float64():
    rng = np.random.default_rng(1)
    # away from the kinks (finite differences across a kink are meaningless)
    a = rng.uniform(0.6, 2.0, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))
    x = jg.tensor(a, requires_grad=True)
    w = jg.tensor(rng.uniform(0.1, 0.4, (4,)), requires_grad=True)
    for f in (lambda x: F.celu(x, 0.7), F.selu, F.mish, F.softsign, F.tanhshrink, lambda x: F.glu(x, 1),
              lambda x: F.softmin(x, 0), F.hardswish, F.hardsigmoid, F.softshrink, F.hardshrink,
              lambda x: F.rrelu(x)):
        assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))
    assert gradcheck(F.prelu, (x, w)) and gradgradcheck(F.prelu, (x, w))


MODULES = [("ELU", (0.5,)), ("CELU", (0.5,)), ("SELU", ()), ("LeakyReLU", (0.2,)), ("ReLU6", ()),
           ("Hardtanh", (-0.5, 2.0)), ("Hardsigmoid", ()), ("Hardswish", ()), ("Hardshrink", (0.3,)),
           ("Softshrink", (0.3,)), ("Tanhshrink", ()), ("Softsign", ()), ("Mish", ()), ("GLU", (1,)),
           ("Threshold", (0.1, 20.0)), ("Softmin", (1,)), ("LogSoftmax", (1,)), ("Softmax2d", ()), ("PReLU", (4,)),
           ("PReLU", ()), ("ELU", (1.0, True)), ("LeakyReLU", (0.2, True)), ("SELU", (True,)), ("Mish", (True,)),
           ("Hardswish", (True,)), ("RReLU", (0.1, 0.3, True)), ("Threshold", (0.1, 2, True))]


@pytest.mark.parametrize("name,args", MODULES)
def test_modules_match_torch(name, args):
    m, t = getattr(jg.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(m) == repr(t)
    if name == "RReLU":
        m.eval()
        t.eval()
    a = np.random.default_rng(2).standard_normal((2, 4, 3, 2))
    x, tx = pair(a, np.float32)
    y, ty = m(x * 1), t(tx * 1)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    for (n, p), (tn, tp) in zip(m.named_parameters(), t.named_parameters()):
        assert n == tn
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5)


def test_legacy_softmax_dims_warn_as_torch():
    x = jg.rand(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
        np.testing.assert_allclose(F.softmin(x).numpy(), TF.softmin(torch.tensor(x.numpy()), 1).numpy(), rtol=1e-6)
    with pytest.warns(UserWarning, match="Implicit dimension choice for log_softmax"):
        jg.nn.LogSoftmax()(x)


def test_errors_as_torch():
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is size 5"):
        F.glu(jg.rand(3, 5))
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(jg.tensor(1.0))
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.glu(jg.rand(2, 2), 2)
    with pytest.raises(RuntimeError, match=r"Found parameter numbers = 3 and channel size = 4\."):
        F.prelu(jg.rand(3, 4), jg.rand(3))
    with pytest.raises(RuntimeError, match=r"Found parameter numbers = 3 and channel size = 1\."):
        F.prelu(jg.rand(3), jg.rand(3))
    with pytest.raises(RuntimeError, match="Expected `weight` to be a scalar or 1D tensor, but got: ndim = 2"):
        F.prelu(jg.rand(3, 4), jg.rand(2, 2))
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D instead"):
        jg.nn.Softmax2d()(jg.rand(3, 4))
    with pytest.raises(RuntimeError, match="ZeroDivisionError: alpha cannot be 0 for CELU"):
        F.celu(jg.rand(3), 0.0)
    with pytest.raises(RuntimeError, match=r"lambda must be in range \[0, 3.40282e\+38\] for input dtype Float, "
                                           "but found -1"):
        F.softshrink(jg.rand(3), -1.0)
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal to the upper bound"):
        F.rrelu(jg.rand(3), 0.5, 0.2)
    with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than min_val \(2.0\)"):
        jg.nn.Hardtanh(2.0, 1.0)
    with pytest.warns(FutureWarning, match="`min_value` is deprecated"):
        assert jg.nn.Hardtanh(min_value=-2.0).min_val == -2.0


def _program(x, w):
    return (F.celu(x, 0.7), F.selu(x), F.hardsigmoid(x), F.hardswish(x), F.mish(x), F.hardshrink(x),
            F.softshrink(x, 0.3), F.tanhshrink(x), F.softsign(x), F.glu(x, 1), F.softmin(x, 1), F.prelu(x, w),
            F.rrelu(x), F.elu(x * 1, inplace=True))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_eager_equals_compiled(backend):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4)) * 3
    a[0, :2] = [-3.0, 3.0]
    wa = rng.uniform(0.1, 0.4, (4,))

    def step(x, w):
        outs = _program(x, w)
        total = sum((o * (i + 1)).sum() for i, o in enumerate(outs))
        total.backward()
        return outs

    xs = [jg.tensor(a, requires_grad=True), jg.tensor(wa, requires_grad=True)]
    eager = step(*xs)
    cs = [jg.tensor(a, requires_grad=True), jg.tensor(wa, requires_grad=True)]
    compiled = jg.compile(step, backend=backend)(*cs)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=1e-12, atol=1e-14)
    for e, c in zip(xs, cs):
        np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-12, atol=1e-14)
