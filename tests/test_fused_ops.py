"""The fused eager primitives (``ir/ops/fused.py``): softmax, log_softmax, nll_loss and log_softmax's fused vjp.

Eager mode binds them; a trace binds the compositions.  Both must give the same values and gradients (first
and second order), the traced graph must contain only the small primitives, and the eager results must match
torch where it is installed.
"""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck

FUSED = ("softmax", "softmax_backward", "log_softmax", "nll_loss", "log_softmax_backward", "tanh_backward", "gelu",
         "gelu_backward", "layer_norm", "sdpa")


def _logits(shape=(5, 4), seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _eager_and_traced(fn, *arrays):
    """fn's result and input gradients in eager mode and under the interpreter backend (the compositions)."""
    def run(f):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        out = f(*xs)
        out.backward()
        return out.detach().numpy(), [x.grad.numpy() for x in xs]

    def traced(*xs):
        return fn(*xs)
    return run(fn), run(jg.compile(traced, backend="interpret"))


@pytest.mark.parametrize("case", ["softmax", "log_softmax0", "log_softmax1", "ce_mean", "ce_sum", "ce_none",
                                  "ce_ignore", "ce_all_ignored_sum"])
def test_eager_fused_equals_traced_composition(case):
    y = jg.tensor([0, 3, 1, -100, 2])
    yi = jg.tensor([0, -100, 1, -100, 2])
    y_all = jg.tensor([-100] * 5)
    v = _logits(seed=1)
    fns = {
        "softmax": lambda x: (jg.softmax(x, 1) * jg.tensor(v)).sum(),
        "log_softmax0": lambda x: (jg.log_softmax(x, 0) * jg.tensor(v)).sum(),
        "log_softmax1": lambda x: (jg.log_softmax(x, -1) * jg.tensor(v)).sum(),
        "ce_mean": lambda x: F.cross_entropy(x, jg.tensor([0, 3, 1, 1, 2])),
        "ce_sum": lambda x: F.cross_entropy(x, y, reduction="sum"),
        "ce_none": lambda x: (F.cross_entropy(x, y, reduction="none") * jg.tensor(v[:, 0])).sum(),
        "ce_ignore": lambda x: F.cross_entropy(x, yi),
        "ce_all_ignored_sum": lambda x: F.cross_entropy(x, y_all, reduction="sum"),
    }
    (ev, eg), (tv, tg) = _eager_and_traced(fns[case], _logits())
    np.testing.assert_allclose(ev, tv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(eg[0], tg[0], rtol=1e-12, atol=1e-12)


def test_eager_binds_fused_ops_and_traces_bind_primitives():
    x = jg.tensor(_logits(), requires_grad=True)
    loss = F.cross_entropy(x, jg.tensor([0, 3, 1, 1, 2]))
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert loss.grad_fn.next_functions[0][0].name() == "LogSoftmaxBackward0"
    assert jg.softmax(x, 1).grad_fn.name() == "SoftmaxBackward0"

    def step(x, y):
        return F.cross_entropy(x, y) + jg.softmax(x, 0).sum() + F.layer_norm(F.gelu(x), (4,)).sum() \
            + F.scaled_dot_product_attention(x, x, x, is_causal=True).sum()
    text = jg.compile(step, backend="interpret").ir(x, jg.tensor([0, 3, 1, 1, 2]))
    for name in FUSED:
        assert f" {name} " not in text and f"= {name}" not in text, f"the traced graph holds fused op {name}"
    assert "amax" in text and "exp" in text


def test_cross_entropy_second_order():
    y = jg.tensor([0, 2, 1])
    x = jg.tensor(_logits((3, 3), seed=2), requires_grad=True)
    assert gradcheck(lambda a: F.cross_entropy(a, y), (x,))
    assert gradgradcheck(lambda a: F.cross_entropy(a, y), (x,))
    w = jg.tensor(_logits((3, 3), seed=3), requires_grad=True)
    assert gradgradcheck(lambda a, b: (jg.log_softmax(a, 1) * b).sum(), (x, w))
    assert gradgradcheck(lambda a, b: (jg.softmax(a, 0) * b).sum(), (x, w))


def test_fused_ops_keep_float32_and_handle_infinite_rows():
    x = jg.tensor(np.array([[1.0, -np.inf, 0.5], [-np.inf, -np.inf, -np.inf]], np.float32), requires_grad=True)
    ls = jg.log_softmax(x, 1)
    sm = jg.softmax(x, 1)
    assert ls.dtype == jg.float32 and sm.dtype == jg.float32
    with np.errstate(all="ignore"):
        xs = x.detach().numpy()[0].astype(np.float64)
        ref = xs - xs.max() - np.log(np.exp(xs - xs.max()).sum())
    np.testing.assert_allclose(ls.detach().numpy()[0], ref, rtol=1e-6)
    assert np.isnan(ls.detach().numpy()[1]).all() and np.isnan(sm.detach().numpy()[1]).all()


def test_nll_loss_target_out_of_bounds_names_it():
    x = jg.tensor(_logits((2, 3)), requires_grad=True)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.cross_entropy(x, jg.tensor([0, 3]))
    with pytest.raises(IndexError, match="Target -1 is out of bounds"):
        F.nll_loss(x, jg.tensor([-1, 0]))
    assert F.nll_loss(x, jg.tensor([-100, 0])).shape == ()       # ignore_index is not out of bounds


def test_fused_ops_match_torch():
    torch = pytest.importorskip("torch")
    a = _logits((6, 5), seed=4, dtype=np.float32)
    t = np.array([0, 4, -100, 2, 2, 1])
    for red in ("mean", "sum", "none"):
        x = jg.tensor(a, requires_grad=True)
        tx = torch.tensor(a, requires_grad=True)
        out = F.cross_entropy(x, jg.tensor(t), reduction=red)
        tout = torch.nn.functional.cross_entropy(tx, torch.tensor(t), reduction=red)
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
        out.sum().backward()
        tout.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    x = jg.tensor(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    g, = jg.autograd.grad(jg.softmax(x, 0)[1:].sum() + jg.log_softmax(x, 1)[:, 2].sum(), x)
    tg, = torch.autograd.grad(torch.softmax(tx, 0)[1:].sum() + torch.log_softmax(tx, 1)[:, 2].sum(), tx)
    np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-5, atol=1e-6)


def test_a_traced_backward_takes_softmax_s_own_rule():
    """Inside a compiled step, softmax's backward is its own rule, ``y * (g - sum(g * y))`` (``OpDef.trace_vjp``),
    as eager mode's: the one ``div`` left in the graph is the forward's (the composition's rule divided the
    gradient and the output by the sum again, and kept the exponentials for it).  First and second order equal
    eager's, compiled and interpreted."""
    v = jg.tensor(_logits((3, 5), seed=5))
    w = jg.tensor(_logits((3, 5), seed=6))

    def first(x):
        x = x.detach().requires_grad_(True)
        (jg.softmax(x * 2.0, -1) * v).sum().backward()
        return x.grad

    def second(x):
        x = x.detach().requires_grad_(True)
        g, = jg.autograd.grad((jg.softmax(x * 2.0, -1) * v).sum(), x, create_graph=True)
        h, = jg.autograd.grad((g * w).sum(), x)
        return h

    x = jg.tensor(_logits((3, 5), seed=7))
    text = str(jg.compile(first, backend="interpret").ir(x))
    assert sum(" = div " in line for line in text.splitlines()) == 1, text
    for fn in (first, second):
        ref = fn(x).numpy()
        for backend in ("interpret", "numba"):
            got = jg.compile(fn, backend=backend, background=False)(x).numpy()
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# ---- cross_entropy's eager common case: class indices in range, none ignored, mean ------------------------------

def _lsm(x):
    s = x - np.maximum.reduce(x, axis=1, keepdims=True)
    return s - np.log(np.add.reduce(np.exp(s), axis=1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [8, 100])         # a short target is read as a list, a long one reduced
def test_cross_entropy_common_case_keeps_its_bits(dtype, n):
    """The mean without dtype= and with a cached divisor, and its gradient, are the bits of the NumPy reference
    (the formulas of the general path); an ignore_index among the classes that no target takes keeps them."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((n, 5)) * 3).astype(dtype)
    t = rng.integers(0, 4, n)           # class 4 never a target
    logp = _lsm(x)
    rows = np.arange(n)
    want = -(np.add.reduce(logp[rows, t], axis=None, dtype=logp.dtype) / logp.dtype.type(n))
    w = np.zeros((n, 5), dtype)
    w[rows, t] = -1.0 / n
    want_grad = w - np.exp(logp) * np.add.reduce(w, axis=1, keepdims=True)
    for ignore_index in (-100, 4):
        xt = jg.tensor(x, requires_grad=True)
        loss = F.cross_entropy(xt, jg.tensor(t), ignore_index=ignore_index)
        loss.backward()
        assert loss.dtype == jg.tensor(x).dtype
        assert loss.detach().numpy().tobytes() == np.asarray(want).tobytes()
        assert xt.grad.numpy().tobytes() == want_grad.tobytes()


@pytest.mark.parametrize("n", [4, 100])
def test_cross_entropy_ignored_targets_leave_the_common_case(n):
    """Targets equal to ignore_index (torch's -100, or a class) are skipped in every reduction, as the
    composition skips them; their rows' gradients are 0."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 3))
    t = rng.integers(0, 3, n)
    for ignore_index in (-100, 2):
        tt = t.copy()
        tt[1] = ignore_index
        valid = tt != ignore_index
        picked = -_lsm(x)[np.arange(n), np.where(valid, tt, 0)]
        for reduction, want in (("mean", picked[valid].sum() / valid.sum()), ("sum", picked[valid].sum()),
                                ("none", np.where(valid, picked, 0.0))):
            xt = jg.tensor(x, requires_grad=True)
            got = F.cross_entropy(xt, jg.tensor(tt), ignore_index=ignore_index, reduction=reduction)
            np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12)
            got.sum().backward()
            assert not xt.grad.numpy()[1].any()
        f = lambda z: F.cross_entropy(z, jg.tensor(tt), ignore_index=ignore_index)     # noqa: E731
        assert gradcheck(f, (jg.tensor(x[:4], requires_grad=True),)) if n == 4 else True


@pytest.mark.parametrize("n", [4, 100])
def test_out_of_bounds_target_raised_by_the_fused_impl_with_the_user_line(n):
    x = jg.tensor(_logits((n, 3)), requires_grad=True)
    for bad in (7, -3):
        t = np.zeros(n, np.int64)
        t[1] = bad
        for reduction in ("mean", "sum", "none"):
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds") as e:
                F.cross_entropy(x, jg.tensor(t), reduction=reduction)
            assert "test_fused_ops.py" in str(e.value)      # the user's line
        t[2] = -100         # an ignored target may lie outside [0, C); a bad one is still found
        with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
            F.nll_loss(x, jg.tensor(t))
        t[2] = 0
        assert np.isfinite(F.nll_loss(x, jg.tensor(t), ignore_index=bad).item())


@pytest.mark.parametrize("n_cls", [5, 100])     # the rows of a one-hot table; past 64 classes zeros and a scatter
def test_nll_mean_weights_are_the_scatters_bits_in_a_fresh_array(n_cls):
    """nll_loss's backward weights for 'mean' with no target ignored: -1/n at each row's target, +0 elsewhere (the
    bits of zeros and a scatter), in an array of the caller's own (writing it leaves the next call's alone)."""
    from jitgrad.ir.ops.fused import _nll_weights_impl
    t = np.random.default_rng(n_cls).integers(0, n_cls, 12)
    for dtype in (jg.float32, jg.float64):
        want = np.zeros((12, n_cls), dtype.np)
        want[np.arange(12), t] = -1.0 / 12
        for _ in range(2):
            w = _nll_weights_impl(t, n_cls=n_cls, dtype=dtype, ignore_index=-100, reduction="mean")
            assert w.dtype == want.dtype and w.tobytes() == want.tobytes()
            w[...] = 7.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_backward_eager_impl_has_the_impls_bits(dtype):
    """tanh_backward's eager impl of a signature (g laid out as y) subtracts from a 0-d 1 made once: the bits of the
    impl's Python 1, infinities and nan included; other layouts keep the impl."""
    from jitgrad.ir.ops import OPS, Aval
    from jitgrad.ir.ops.fused import _tanh_bwd_impl
    op = OPS["tanh_backward"]
    g, y = _logits((5, 4), 1, dtype), np.tanh(_logits((5, 4), 2, dtype))
    g.flat[:3] = [np.inf, np.nan, -0.0]
    y.flat[3:6] = [1.0, -1.0, np.nan]
    jd = jg.tensor(g).dtype
    fast = op.eager_impl((Aval((5, 4), jd),) * 2, {})
    with np.errstate(invalid="ignore"):
        assert fast(g, y).tobytes() == _tanh_bwd_impl(g, y).tobytes()
    assert op.eager_impl((Aval((4,), jd), Aval((5, 4), jd)), {}) is None


@pytest.mark.parametrize("shape, axis", [((3, 4), 1), ((3, 4), 0), ((80, 3), 1), ((2, 3, 4), 1)])
def test_log_softmax_infinite_max_is_nan_without_a_warning(shape, axis):
    """A row whose max is +inf or all -inf: nan throughout, no NumPy warning, whichever way the finiteness of the
    maxima is told (a few rows: their Python sum; else a dot)."""
    import warnings
    x = _logits(shape, dtype=np.float32)
    idx = [0] * len(shape)
    idx[axis] = slice(None)
    x[tuple(idx)] = -np.inf
    bad = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = jg.log_softmax(jg.tensor(x), axis).numpy()
        x[tuple(idx)] = np.inf
        assert np.isnan(jg.log_softmax(jg.tensor(x), axis).numpy()[tuple(idx)]).all()
    assert np.isnan(got[tuple(idx)]).all() and bad.shape[0] > 1
    ok = np.isfinite(np.moveaxis(got, axis, -1).reshape(-1, shape[axis])).all(axis=1)
    assert ok.sum() == bad.shape[0] - 1


def test_cross_entropy_numpy_reductions_counted(monkeypatch):
    """The B5 loss, forward and backward, on a short target makes 4 NumPy reductions: log_softmax's max and sum,
    the loss's sum and the backward's row sums.  The targets' bounds and 'none ignored' are told once per forward
    (a list's min and max), the backward's by a list search (7 reductions before: F.nll_loss's bound, the impl's
    least target, the weights' least target)."""
    from jitgrad.ir.ops import fused
    from jitgrad.nn.functional import loss as loss_module
    calls = []

    def counted(f, name):
        def reduce(*a, **k):
            calls.append(name)
            return f(*a, **k)
        return reduce
    for mod in (fused, loss_module):
        for name in ("_max_reduce", "_min_reduce", "_add_reduce", "_or_reduce"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, counted(getattr(mod, name), name))
    x = jg.tensor(_logits((8, 4), dtype=np.float32), requires_grad=True)
    t = jg.tensor(np.random.default_rng(0).integers(0, 4, 8))
    for _ in range(2):
        F.cross_entropy(x, t).backward()
    calls.clear()
    F.cross_entropy(x, t).backward()
    assert len(calls) == 4, calls
