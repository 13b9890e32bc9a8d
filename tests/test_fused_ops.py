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
