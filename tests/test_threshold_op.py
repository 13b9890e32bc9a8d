"""``nn.functional.threshold`` as a primitive of its own, ``threshold(x, threshold, value)`` (ir/ops/elementwise.py):
``value`` where ``x <= threshold``, else ``x`` (a NaN passes), both numbers first converted to x's dtype as torch's
kernel converts them; its pullback is ``threshold_backward(g, x, threshold)``, as torch's ``ThresholdBackward0``
computes it, so the gradient's node is ``ThresholdBackwardBackward0`` without any special case in ``where``'s
pullback.  Eager, the interpreter and compiled code agree bit for bit; torch (optional) is the oracle for values
and node names."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck
from jitgrad.ir.ops import OPS

from test_eager_overhead import bound_ops  # noqa: F401 - (a fixture: the ops bound while a test runs)

try:
    import torch
except ImportError:     # (torch is an optional oracle)
    torch = None

BACKENDS = ("interpret", "numba")
A = np.array([np.nan, -1.0, 0.5, 0.25, 2.0, -0.0, np.inf, -np.inf, 0.1])


def _torch_threshold(a, threshold, value):
    return torch.nn.functional.threshold(torch.tensor(a), threshold, value).numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_pass_nan_and_compare_in_xs_dtype(dtype):
    x = A.astype(dtype)
    y = F.threshold(jg.tensor(x), 0.1, -3.0).numpy()
    assert y.dtype == dtype
    # 0.1 is converted to x's dtype first: a float32 0.1 is thresholded (it is not above float32(0.1))
    want = np.where(x <= dtype(0.1), dtype(-3.0), x)
    np.testing.assert_array_equal(y, want)
    assert y[-1] == -3.0 and np.isnan(y[0])
    if torch is not None:
        np.testing.assert_array_equal(y, _torch_threshold(x, 0.1, -3.0))


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_input_keeps_its_dtype_and_truncates_the_numbers(dtype):
    x = np.array([-1, -2, 1, 3], dtype)
    y = F.threshold(jg.tensor(x), -1.5, 2.7).numpy()
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, [2, 2, 1, 3])      # -1 <= int(-1.5); the value int(2.7)
    if torch is not None:
        np.testing.assert_array_equal(y, _torch_threshold(x, -1.5, 2.7))


def test_bool_and_tensor_arguments_are_refused():
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        F.threshold(jg.tensor([True, False]), 0, 1)
    with pytest.raises(RuntimeError, match="must be numbers"):
        jg.runtime.dispatch.bind(OPS["threshold"], jg.ones(3), jg.zeros(()), 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_interpreter_and_compiled_agree_bit_for_bit(backend):
    rng = np.random.default_rng(0)
    x = np.concatenate([A, rng.standard_normal(40)]).astype(np.float32)
    w = rng.standard_normal(x.size).astype(np.float32)
    xi = np.array([-3, -1, 0, 1, 2, 5])

    def f(x, w, xi):
        y = F.threshold(x * 1.5, 0.25, -3.0)
        g, = jg.autograd.grad((y * w).sum(), x)
        return y, g, F.threshold(xi, 0.5, -7.9)

    args = (jg.tensor(x, requires_grad=True), jg.tensor(w), jg.tensor(xi))
    eager = [t.detach().numpy() for t in f(*args)]
    compiled = [t.detach().numpy() for t in jg.compile(f, backend=backend, background=False)(*args)]
    for e, c in zip(eager, compiled):
        assert e.dtype == c.dtype
        np.testing.assert_array_equal(e, c)
    h = x * np.float32(1.5)
    np.testing.assert_array_equal(eager[1], np.where(h <= np.float32(0.25), 0, w) * np.float32(1.5))
    np.testing.assert_array_equal(eager[2], [-7, -7, -7, 1, 2, 5])


def test_compiled_graph_has_the_op_and_threshold_backward_not_where():
    w = jg.tensor(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32), requires_grad=True)

    def step(x):
        loss = F.threshold(x @ w, 0.1, 2.0).sum()
        loss.backward()
        return loss.detach()
    ir = str(jg.compile(step, backend="interpret").ir(jg.ones((2, 3))))
    assert ir.count("= threshold ") == 1 and ir.count("= threshold_backward ") == 1
    assert "= where " not in ir and "= le " not in ir


def test_node_names_as_torch_and_its_pullback_binds_threshold_backward(bound_ops):
    a = np.array([-1.0, 0.5, 2.0, np.nan])
    x = jg.tensor(a, requires_grad=True)
    h = x * 1
    y = F.threshold(h, 0.25, -3.0)
    assert y.grad_fn.name() == "ThresholdBackward0"
    v = jg.tensor(np.array([1.0, 2.0, 3.0, 4.0]), requires_grad=True)
    bound_ops.clear()
    g, = jg.autograd.grad(y, h, v, create_graph=True)
    assert bound_ops == ["threshold_backward"]
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"
    np.testing.assert_array_equal(g.detach().numpy(), [0.0, 2.0, 3.0, 4.0])
    gv, = jg.autograd.grad((g * g).sum(), v, create_graph=True)       # its double backward: the same op again
    assert gv.grad_fn.name() == "ThresholdBackwardBackward0"
    np.testing.assert_array_equal(gv.detach().numpy(), [0.0, 4.0, 6.0, 8.0])
    if torch is not None:
        tx = torch.tensor(a, requires_grad=True)
        th = tx * 1
        ty = torch.nn.functional.threshold(th, 0.25, -3.0)
        tv = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
        tg, = torch.autograd.grad(ty, th, tv, create_graph=True)
        tgv, = torch.autograd.grad((tg * tg).sum(), tv, create_graph=True)
        assert [ty.grad_fn.name(), tg.grad_fn.name(), tgv.grad_fn.name()] == \
            [y.grad_fn.name(), g.grad_fn.name(), gv.grad_fn.name()]
        np.testing.assert_array_equal(g.detach().numpy(), tg.detach().numpy())
        np.testing.assert_array_equal(gv.detach().numpy(), tgv.detach().numpy())


def test_where_keeps_its_own_pullback():
    """The special case that named where's gradients after threshold's is gone: where's are its own."""
    x = jg.tensor([-1.0, 2.0], requires_grad=True)
    y = jg.where(x > 0, x * 2, x * 3)
    g, = jg.autograd.grad(y, x, jg.tensor([1.0, 1.0], requires_grad=True), create_graph=True)
    assert g.grad_fn.name() != "ThresholdBackwardBackward0"
    np.testing.assert_array_equal(g.detach().numpy(), [3.0, 2.0])


def test_gradcheck_gradgradcheck_and_forward_mode():
    rng = np.random.default_rng(2)
    # away from the threshold (the kink): finite differences cross it otherwise
    x = jg.tensor(rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(0.3, 1.5, (3, 4)) + 0.2, requires_grad=True)
    fn = lambda t: F.threshold(t, 0.2, -0.7)     # noqa: E731
    assert gradcheck(fn, (x,)) and gradgradcheck(fn, (x,))
    v = jg.tensor(rng.standard_normal((3, 4)), requires_grad=True)

    def vjp(x, v):
        return jg.autograd.grad((fn(x) * v).sum(), x, create_graph=True)[0]
    assert gradcheck(vjp, (x, v)) and gradgradcheck(vjp, (x, v))
    t = rng.standard_normal((3, 4))
    _, tangent = jg.func.jvp(fn, (x.detach(),), (jg.tensor(t),))
    np.testing.assert_array_equal(tangent.numpy(), np.where(x.detach().numpy() <= 0.2, 0.0, t))


def test_in_place_form_records_the_op():
    x = jg.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    h = x * 1
    r = F.threshold(h, 0.25, -3.0, inplace=True)
    assert r is h and h.grad_fn.name() == "ThresholdBackward0"
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 1.0])
