"""jitgrad.nn.functional: cross_entropy, nll_loss, mse_loss, softmax, log_softmax, relu, gelu.

Values are checked against NumPy references written here (and torch when importable); gradients against
central differences in float64 (and ``jg.autograd.gradcheck`` once it is implemented).
"""
import math

import numpy as np
import pytest
from scipy import special

import jitgrad as jg
import jitgrad.nn.functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover - torch is optional
    torch = TF = None


# ---- helpers -------------------------------------------------------------------------------------

def numeric_grads(fn, arrays, eps=1e-6):
    """Central differences of sum(fn(*arrays)) w.r.t. each float array (float64)."""
    def f(*xs):
        out = fn(*[jg.tensor(x) for x in xs])
        return float(out.sum().item())
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[i][j] += eps
            lo[i][j] -= eps
            g[j] = (f(*hi) - f(*lo)) / (2 * eps)
        grads.append(g)
    return grads


def _gradcheck_available():
    try:
        return bool(jg.autograd.gradcheck(lambda x: x * 2, (jg.tensor([1.0], dtype=jg.float64, requires_grad=True),)))
    except NotImplementedError:
        return False


GRADCHECK = _gradcheck_available()


def check_grads(fn, *arrays, atol=1e-6, rtol=1e-5):
    """Analytic gradients of sum(fn(*inputs)) == central differences; also jg.autograd.gradcheck if available."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    ts = [jg.tensor(a, requires_grad=True) for a in arrays]
    fn(*ts).sum().backward()
    for t, num in zip(ts, numeric_grads(fn, arrays)):
        assert t.grad is not None and t.grad.dtype is jg.float64
        np.testing.assert_allclose(t.grad.numpy(), num, atol=atol, rtol=rtol)
    if GRADCHECK:
        assert jg.autograd.gradcheck(fn, tuple(jg.tensor(a, requires_grad=True) for a in arrays), eps=1e-6, atol=1e-5)


def np_log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def np_cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy, written out in NumPy."""
    x = np.asarray(x, np.float64)
    target = np.asarray(target)
    unbatched = x.ndim == 1
    if unbatched:
        x, target = x[None], target[None]
    C = x.shape[1]
    logp = np_log_softmax(x, 1)
    w = np.ones(C) if weight is None else np.asarray(weight, np.float64)
    wb = w.reshape((1, C) + (1,) * (x.ndim - 2))
    if target.dtype.kind == "f":
        t = target * (1 - label_smoothing) + label_smoothing / C
        loss = -(logp * t * wb).sum(1)
        if reduction == "mean":
            return loss.sum() / loss.size
        if reduction == "sum":
            return loss.sum()
        return loss[0] if unbatched else loss
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[:, None], 1)[:, 0]
    wt = w[safe] * valid
    nll = -picked * wt
    smooth = -(logp * wb).sum(1) * valid
    if reduction == "mean":
        nll, smooth = nll.sum() / wt.sum(), smooth.sum() / wt.sum()
    elif reduction == "sum":
        nll, smooth = nll.sum(), smooth.sum()
    loss = (1 - label_smoothing) * nll + label_smoothing / C * smooth
    return loss[0] if unbatched and reduction == "none" else loss


def torch_or_none(fn, *args, **kw):
    if torch is None:
        return None
    conv = [torch.from_numpy(np.asarray(a).copy()) if isinstance(a, np.ndarray) else a for a in args]
    kw = {k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    return fn(*conv, **kw).detach().numpy()


RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((5, 4))
TARGET = np.array([0, 3, 1, 3, 2])
WEIGHT = np.array([0.5, 1.0, 2.0, 1.5])


# ---- cross_entropy -------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["noweight", "weight"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignore", [False, True])
def test_cross_entropy_class_indices(reduction, weight, label_smoothing, ignore):
    target = TARGET.copy()
    kw = {}
    if ignore:
        target[1] = -1
        kw["ignore_index"] = -1
    want = np_cross_entropy(LOGITS, target, weight, reduction=reduction, label_smoothing=label_smoothing, **kw)
    got = F.cross_entropy(jg.tensor(LOGITS), jg.tensor(target), weight=None if weight is None else jg.tensor(weight),
                          reduction=reduction, label_smoothing=label_smoothing, **kw)
    assert got.shape == np.shape(want) and got.dtype is jg.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    ref = torch_or_none(TF.cross_entropy if TF else None, LOGITS, target, weight=weight, reduction=reduction,
                        label_smoothing=label_smoothing, **kw)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)
    check_grads(lambda x: F.cross_entropy(x, jg.tensor(target), weight=None if weight is None else jg.tensor(weight),
                                          reduction=reduction, label_smoothing=label_smoothing, **kw), LOGITS)


def test_cross_entropy_known_value():
    # uniform logits: loss = log(C)
    got = F.cross_entropy(jg.zeros(3, 4), jg.tensor([0, 1, 2]))
    assert got.dtype is jg.float32 and math.isclose(got.item(), math.log(4), rel_tol=1e-6)
    # default ignore_index is -100
    got = F.cross_entropy(jg.tensor([[0.0, 0.0], [5.0, 0.0]]), jg.tensor([-100, 0]))
    assert math.isclose(got.item(), math.log1p(math.exp(-5.0)), rel_tol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # x / 0 and 0 / 0 on purpose
def test_cross_entropy_all_ignored_mean_is_nan():
    got = F.cross_entropy(jg.tensor([[1.0, 2.0]]), jg.tensor([-100]))
    assert math.isnan(got.item())


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["noweight", "weight"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_probability_targets(reduction, weight, label_smoothing):
    probs = special.softmax(RNG.standard_normal((5, 4)), axis=1)
    want = np_cross_entropy(LOGITS, probs, weight, reduction=reduction, label_smoothing=label_smoothing)
    got = F.cross_entropy(jg.tensor(LOGITS), jg.tensor(probs), weight=None if weight is None else jg.tensor(weight),
                          reduction=reduction, label_smoothing=label_smoothing)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    ref = torch_or_none(TF.cross_entropy if TF else None, LOGITS, probs, weight=weight, reduction=reduction,
                        label_smoothing=label_smoothing)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10)
    check_grads(lambda x, p: F.cross_entropy(x, p, weight=None if weight is None else jg.tensor(weight),
                                             reduction=reduction, label_smoothing=label_smoothing), LOGITS, probs)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("probs", [False, True])
def test_cross_entropy_spatial(reduction, probs):
    x = RNG.standard_normal((2, 3, 4))        # (N, C, d)
    if probs:
        target = special.softmax(RNG.standard_normal((2, 3, 4)), axis=1)
    else:
        target = np.array([[0, 2, 1, 2], [1, 1, 0, -100]])
    kw = dict(weight=np.array([1.0, 2.0, 0.5]), reduction=reduction, label_smoothing=0.05)
    want = np_cross_entropy(x, target, **kw)
    got = F.cross_entropy(jg.tensor(x), jg.tensor(target), weight=jg.tensor(kw["weight"]), reduction=reduction,
                          label_smoothing=0.05)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    ref = torch_or_none(TF.cross_entropy if TF else None, x, target, **kw)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10)
    check_grads(lambda a: F.cross_entropy(a, jg.tensor(target), weight=jg.tensor(kw["weight"]), reduction=reduction,
                                          label_smoothing=0.05), x)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("probs", [False, True])
def test_cross_entropy_unbatched(reduction, label_smoothing, probs):
    x = np.array([1.0, 2.0, 0.5])
    target = np.array([0.2, 0.3, 0.5]) if probs else np.array(1)
    want = np_cross_entropy(x, target, reduction=reduction, label_smoothing=label_smoothing)
    got = F.cross_entropy(jg.tensor(x), jg.tensor(target), reduction=reduction, label_smoothing=label_smoothing)
    assert got.shape == () and np.shape(want) == ()
    np.testing.assert_allclose(got.item(), want, rtol=1e-12)
    ref = torch_or_none(TF.cross_entropy if TF else None, x, target, reduction=reduction,
                        label_smoothing=label_smoothing)
    if ref is not None:
        np.testing.assert_allclose(got.item(), ref, rtol=1e-10)
    check_grads(lambda a: F.cross_entropy(a, jg.tensor(target), reduction=reduction,
                                          label_smoothing=label_smoothing), x)


def test_cross_entropy_float32_and_large_logits_are_stable():
    x = jg.tensor([[1000.0, 0.0], [0.0, -1000.0]])
    got = F.cross_entropy(x, jg.tensor([0, 1]), reduction="none")
    assert got.dtype is jg.float32
    np.testing.assert_allclose(got.numpy(), [0.0, 1000.0], rtol=1e-6)


def test_cross_entropy_errors():
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        F.cross_entropy(jg.tensor([[1.0, 2.0]]), jg.tensor([5]))
    with pytest.raises((RuntimeError, ValueError), match=r"\[1, 2\]"):
        F.cross_entropy(jg.tensor([[1.0, 2.0]]), jg.tensor([1, 0]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(jg.tensor([[1.0, 2.0]]), jg.tensor([1]), reduction="avg")


# ---- nll_loss ------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [None, WEIGHT], ids=["noweight", "weight"])
def test_nll_loss(reduction, weight):
    logp = np_log_softmax(LOGITS, 1)
    target = TARGET.copy()
    target[2] = 7
    w = np.ones(4) if weight is None else weight
    valid = target != 7
    safe = np.where(valid, target, 0)
    per = -logp[np.arange(5), safe] * w[safe] * valid
    want = {"none": per, "sum": per.sum(), "mean": per.sum() / (w[safe] * valid).sum()}[reduction]
    got = F.nll_loss(jg.tensor(logp), jg.tensor(target), weight=None if weight is None else jg.tensor(weight),
                     ignore_index=7, reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    ref = torch_or_none(TF.nll_loss if TF else None, logp, target, weight=weight, ignore_index=7, reduction=reduction)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    check_grads(lambda a: F.nll_loss(a, jg.tensor(target), weight=None if weight is None else jg.tensor(weight),
                                     ignore_index=7, reduction=reduction), logp)


def test_nll_loss_spatial_and_unbatched():
    x = RNG.standard_normal((2, 3, 4))
    t = np.array([[0, 1, 2, 0], [2, 2, 1, 0]])
    want = -np.take_along_axis(x, t[:, None], 1)[:, 0]
    np.testing.assert_allclose(F.nll_loss(jg.tensor(x), jg.tensor(t), reduction="none").numpy(), want)
    np.testing.assert_allclose(F.nll_loss(jg.tensor(x), jg.tensor(t)).item(), want.mean())
    u = F.nll_loss(jg.tensor([0.1, -0.2, 0.3]), jg.tensor(1), reduction="none")
    assert u.shape == () and math.isclose(u.item(), 0.2, rel_tol=1e-6)
    check_grads(lambda a: F.nll_loss(a, jg.tensor(t)), x)


def test_nll_loss_rejects_float_target():
    with pytest.raises(RuntimeError, match="float32"):
        F.nll_loss(jg.tensor([[0.1, 0.2]]), jg.tensor([1.0]))


# ---- mse_loss ------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_mse_loss(reduction):
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    d2 = (a - b) ** 2
    want = {"none": d2, "sum": d2.sum(), "mean": d2.mean()}[reduction]
    got = F.mse_loss(jg.tensor(a), jg.tensor(b), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    ref = torch_or_none(TF.mse_loss if TF else None, a, b, reduction=reduction)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    check_grads(lambda x, y: F.mse_loss(x, y, reduction=reduction), a, b)


def test_mse_loss_known_value_and_broadcast_warning():
    assert F.mse_loss(jg.tensor([1.0, 2.0]), jg.tensor([1.0, 3.0])).item() == 0.5
    assert F.mse_loss(jg.tensor([1.0, 2.0]), jg.tensor([1, 3])).dtype is jg.float32
    with pytest.warns(UserWarning, match="target size"):
        r = F.mse_loss(jg.tensor([[1.0], [2.0]]), jg.tensor([1.0, 3.0]))
    assert math.isclose(r.item(), (0 + 4 + 1 + 1) / 4)


# ---- softmax / log_softmax -----------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_softmax_log_softmax(dim):
    x = RNG.standard_normal((2, 3, 4))
    want_log = np_log_softmax(x, dim)
    np.testing.assert_allclose(F.log_softmax(jg.tensor(x), dim=dim).numpy(), want_log, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(F.softmax(jg.tensor(x), dim=dim).numpy(), np.exp(want_log), rtol=1e-12)
    np.testing.assert_allclose(jg.tensor(x).softmax(dim).numpy(), special.softmax(x, axis=dim), rtol=1e-12)
    np.testing.assert_allclose(jg.log_softmax(jg.tensor(x), dim).numpy(), special.log_softmax(x, axis=dim),
                               rtol=1e-12, atol=1e-14)
    if torch is not None:
        np.testing.assert_allclose(F.softmax(jg.tensor(x), dim=dim).numpy(),
                                   TF.softmax(torch.from_numpy(x), dim=dim).numpy(), rtol=1e-12)
    w = RNG.standard_normal(x.shape)
    check_grads(lambda a: F.softmax(a, dim=dim) * jg.tensor(w), x)
    check_grads(lambda a: F.log_softmax(a, dim=dim) * jg.tensor(w), x)


def test_softmax_stability_and_infinities():
    x = jg.tensor([[1000.0, 1001.0], [-1000.0, -1001.0]])
    np.testing.assert_allclose(F.softmax(x, dim=1).numpy(), special.softmax([[0.0, 1.0], [1.0, 0.0]], axis=1),
                               rtol=1e-6)
    np.testing.assert_allclose(F.log_softmax(x, dim=1).numpy(), special.log_softmax([[0.0, 1.0], [1.0, 0.0]], axis=1),
                               rtol=1e-6)
    y = jg.tensor([-math.inf, 0.0, 0.0])
    assert F.softmax(y, dim=0).tolist() == [0.0, 0.5, 0.5]
    assert F.log_softmax(y, dim=0).tolist()[0] == -math.inf


def test_softmax_dtype_argument_and_default_dim():
    x = jg.tensor([[1.0, 2.0, 3.0]])
    r = F.softmax(x, dim=1, dtype=jg.float64)
    assert r.dtype is jg.float64
    np.testing.assert_allclose(r.numpy(), special.softmax([[1.0, 2.0, 3.0]], axis=1), rtol=1e-12)
    assert F.softmax(x, dim=-1).dtype is jg.float32
    np.testing.assert_allclose(F.softmax(x, dim=-1).sum(-1).numpy(), [1.0], rtol=1e-6)


# ---- relu / gelu ---------------------------------------------------------------------------------

def test_relu():
    a = np.array([-2.0, -0.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(F.relu(jg.tensor(a)).numpy(), np.maximum(a, 0))
    assert F.relu(jg.tensor([1, -1])).tolist() == [1, 0] and F.relu(jg.tensor([1, -1])).dtype is jg.int64
    x = jg.tensor(a, requires_grad=True)
    F.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]     # torch: relu'(0) = 0
    check_grads(F.relu, np.array([-1.5, -0.3, 0.2, 2.0]))
    assert jg.relu(jg.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0] and jg.tensor([-1.0]).relu().tolist() == [0.0]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    a = np.linspace(-4, 4, 17)
    if approximate == "none":
        want = 0.5 * a * (1 + special.erf(a / math.sqrt(2)))
    else:
        want = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    got = F.gelu(jg.tensor(a), approximate=approximate)
    assert got.dtype is jg.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)
    ref = torch_or_none(TF.gelu if TF else None, a, approximate=approximate)
    if ref is not None:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-15)
    got32 = F.gelu(jg.tensor(a, dtype=jg.float32), approximate=approximate)
    assert got32.dtype is jg.float32
    np.testing.assert_allclose(got32.numpy(), want, rtol=1e-5, atol=1e-6)
    check_grads(lambda x: F.gelu(x, approximate=approximate), a)


def test_gelu_known_values_and_bad_approximate():
    assert F.gelu(jg.tensor([0.0])).tolist() == [0.0]
    assert math.isclose(F.gelu(jg.tensor([1.0], dtype=jg.float64)).item(), 0.8413447460685429, rel_tol=1e-12)
    for f in (lambda x: F.gelu(x, approximate="fast"), jg.nn.GELU(approximate="Tanh")):   # torch's type and text
        with pytest.raises(RuntimeError, match=r"^approximate argument must be either none or tanh\.$"):
            f(jg.tensor([1.0]))


def test_losses_are_differentiable_end_to_end():
    """A tiny classifier step: loss decreases after one gradient step (float32)."""
    rng = np.random.default_rng(3)
    X = jg.tensor(rng.standard_normal((16, 5)).astype(np.float32))
    y = jg.tensor(rng.integers(0, 3, 16))
    W = jg.tensor(rng.standard_normal((5, 3)).astype(np.float32) * 0.1, requires_grad=True)
    loss0 = F.cross_entropy(F.gelu(X) @ W, y)
    loss0.backward()
    with jg.no_grad():
        W -= 0.5 * W.grad
    loss1 = F.cross_entropy(F.gelu(X) @ W, y)
    assert loss1.item() < loss0.item()


@pytest.mark.skipif(not GRADCHECK, reason="jg.autograd.gradcheck not implemented yet")
@pytest.mark.parametrize("fn", [
    lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"), lambda x: F.softmax(x, dim=1),
    lambda x: F.log_softmax(x, dim=0), lambda x: F.cross_entropy(x, jg.tensor([0, 2, 1]), label_smoothing=0.1),
    lambda x: F.mse_loss(x, jg.ones(3, 3, dtype=jg.float64)), lambda x: F.relu(x) * x],
    ids=["gelu", "gelu_tanh", "softmax", "log_softmax", "cross_entropy", "mse_loss", "relu"])
def test_second_order(fn):
    x = jg.tensor(np.random.default_rng(5).standard_normal((3, 3)), requires_grad=True)
    assert jg.autograd.gradgradcheck(fn, (x,))


# torch's deprecated size_average/reduce pair: the functional losses honour it (they returned the mean whatever it
# said) and take torch's positional order (weight, size_average, ignore_index, reduce, reduction)
_LEGACY = [dict(reduce=False), dict(size_average=False), dict(size_average=True, reduce=True),
           dict(size_average=False, reduce=False)]


@pytest.mark.parametrize("legacy", _LEGACY, ids=str)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "nll_loss", "cross_entropy",
                                  "binary_cross_entropy_with_logits", "kl_div"])
def test_functional_losses_honour_size_average_and_reduce_as_torch(name, legacy):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3))
    if name in ("nll_loss", "cross_entropy"):
        y = np.array([0, 2, 1, 2])
    elif name == "binary_cross_entropy_with_logits":
        y = rng.uniform(size=(4, 3))
    elif name == "kl_div":
        x, y = np.log(special.softmax(x, 1)), special.softmax(rng.standard_normal((4, 3)), 1)
    else:
        y = rng.standard_normal((4, 3))
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        got = getattr(F, name)(jg.tensor(x), jg.tensor(y), **legacy)
    with pytest.warns(UserWarning):
        want = getattr(torch.nn.functional, name)(torch.tensor(x), torch.tensor(y), **legacy)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_nll_and_l1_loss_take_torchs_positional_order():
    torch = pytest.importorskip("torch")
    x = np.log(special.softmax(np.random.default_rng(4).standard_normal((3, 4)), 1))
    t = np.array([1, 3, 0])
    w = np.array([1.0, 2.0, 0.5, 1.5])
    # nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction)
    got = F.nll_loss(jg.tensor(x), jg.tensor(t), jg.tensor(w), None, 3, None, "sum")
    want = torch.nn.functional.nll_loss(torch.tensor(x), torch.tensor(t), torch.tensor(w), None, 3, None, "sum")
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    # l1_loss(input, target, size_average, reduce, reduction)
    got = F.l1_loss(jg.tensor(x), jg.tensor(x * 0), None, None, "sum")
    want = torch.nn.functional.l1_loss(torch.tensor(x), torch.tensor(x * 0), None, None, "sum")
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "nll_loss", "cross_entropy"])
def test_unknown_reduction_is_torchs_value_error(name):
    x, t = jg.tensor([[0.1, 0.2], [0.3, 0.4]]), jg.tensor([0, 1])
    with pytest.raises(ValueError, match="^bogus is not a valid value for reduction$"):
        getattr(F, name)(x, t if "entropy" in name or "nll" in name else x, reduction="bogus")
