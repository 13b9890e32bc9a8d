"""relu's pullback as one primitive, ``threshold_backward(g, x, threshold)`` (ir/ops/elementwise.py): 0 where
``x <= threshold``, else ``g``, as torch's kernel computes it (a NaN ``x`` passes ``g``; an infinite or NaN ``g`` is
zeroed where ``x <= threshold``).  Eager, the interpreter and compiled code agree bit for bit; relu's eager backward
replays one step per node, and a compiled graph meets one eqn where it met a comparison and a ``where``.  relu's
own eager forward keeps the bits of ``np.maximum(x, 0)``."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck
from jitgrad.ir.ops import OPS, Aval
from jitgrad.runtime.dispatch import bind

from test_eager_overhead import bound_ops  # noqa: F401 - (a fixture: the ops bound while a test runs)

TB = OPS["threshold_backward"]
BACKENDS = ("interpret", "numba")


def _special(rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    a.flat[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, 0.25]
    return a


def _reference(g, x, threshold):
    return np.where(x <= threshold, 0, g).astype(np.result_type(g, x))


@pytest.mark.parametrize("gshape, xshape, gdt, xdt, threshold", [
    ((4, 5), (4, 5), np.float32, np.float32, 0),        # relu's call: the copy-and-put path
    ((4, 5), (4, 5), np.float64, np.float64, 0.25),
    ((5,), (4, 5), np.float32, np.float32, 0),          # g broadcast: np.where's path
    ((4, 5), (4, 5), np.float32, np.float64, 0),        # mixed dtypes: the wider one
    ((), (), np.float64, np.float64, 0)])
def test_eager_impl_is_torchs_select(gshape, xshape, gdt, xdt, threshold):
    rng = np.random.default_rng(0)
    g, x = _special(rng, gshape, gdt) if gshape else np.array(np.inf, gdt), _special(rng, xshape, xdt) \
        if xshape else np.array(-0.0, xdt)
    want = _reference(g, x, threshold)
    out = bind(TB, jg.tensor(g), jg.tensor(x), threshold)
    assert out.dtype.np == want.dtype and out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)
    avals = (Aval(g.shape, jg.tensor(g).dtype), Aval(x.shape, jg.tensor(x).dtype), Aval((), jg.float64, True))
    for impl in (TB.impl, TB.eager_impl(avals, {})):
        if impl is not None:    # (eager_impl: relu's signature only)
            r = impl(g, x, threshold)
            assert r is not g and not np.shares_memory(r, g)     # a result of its own, never the cotangent's buffer
            np.testing.assert_array_equal(r, want.astype(r.dtype))


def test_a_tensor_threshold_is_refused():
    with pytest.raises(RuntimeError, match="threshold must be a number"):
        bind(TB, jg.ones(3), jg.ones(3), jg.zeros(()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_interpreter_and_compiled_agree_bit_for_bit(backend):
    rng = np.random.default_rng(1)
    xs, gs = _special(rng, (6, 7), np.float32), _special(rng, (6, 7), np.float32)[::-1].copy()
    g2, x2 = _special(rng, (7,), np.float32), _special(rng, (6, 7), np.float64)

    def f(x, g, g2, x2):
        gx, = jg.autograd.grad(jg.relu(x * 1.5), x, g)     # relu's vjp, traced by the compiled functions
        return gx, bind(TB, g2, x2, 0.25) * 2.0

    args = (jg.tensor(xs, requires_grad=True), jg.tensor(gs), jg.tensor(g2), jg.tensor(x2))
    eager = [t.numpy() for t in f(*args)]
    compiled = [t.numpy() for t in jg.compile(f, backend=backend, background=False)(*args)]
    for e, c in zip(eager, compiled):
        assert e.dtype == c.dtype
        np.testing.assert_array_equal(e, c)
    np.testing.assert_array_equal(eager[0], _reference(gs, np.maximum(xs * np.float32(1.5), 0), 0) * np.float32(1.5))


def test_gradcheck_and_gradgradcheck_through_relu():
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(0.3, 1.5, (3, 4)), requires_grad=True)
    v = jg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    assert gradcheck(jg.relu, (x,)) and gradgradcheck(jg.relu, (x,))

    def vjp(x, v):      # relu's vjp itself: its gradients are threshold_backward's (in v) and zero (in x)
        return jg.autograd.grad((jg.relu(x) * v).sum(), x, create_graph=True)[0]
    assert gradcheck(vjp, (x, v)) and gradgradcheck(vjp, (x, v))


def test_relu_backward_binds_one_op_and_its_nodes_keep_torchs_names(bound_ops):
    x = jg.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    y = jg.relu(x)
    assert y.grad_fn.name() == "ReluBackward0"
    v = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    bound_ops.clear()
    g, = jg.autograd.grad(y, x, v, create_graph=True)
    assert bound_ops == ["threshold_backward"]
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"
    # its own gradient in v is threshold_backward again (torch's ThresholdBackwardBackward0 too)
    gv, = jg.autograd.grad((g * g).sum(), v, create_graph=True)
    assert gv.grad_fn.name() == "ThresholdBackwardBackward0"
    np.testing.assert_array_equal(gv.detach().numpy(), [0.0, 4.0, 6.0])


def test_relu_pullback_replays_one_step():
    """A first-order eager backward replays relu's vjp as a plan (pullback_plans.py): one step, the new op's."""
    rng = np.random.default_rng(3)
    x = jg.tensor(rng.standard_normal((8, 32)).astype(np.float32), requires_grad=True)
    for _ in range(2):      # (the first backward traces the plan)
        y = jg.relu(x * 1.0)
        node = y.grad_fn
        y.backward(jg.ones((8, 32)))
    plans = list((node.plans or {}).values())
    (step,) = plans[0].steps
    f32 = Aval((8, 32), jg.float32)
    assert len(plans) == 1 and step[0].__code__ is TB.eager_impl((f32, f32, Aval((), jg.int64, True)), {}).__code__


def test_compiled_graph_has_one_eqn_for_relus_pullback():
    rng = np.random.default_rng(4)
    w = jg.tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)

    def step(x):
        loss = jg.relu(x @ w).sum()
        loss.backward()
        return loss.detach()
    f = jg.compile(step, backend="interpret")
    ir = str(f.ir(jg.tensor(rng.standard_normal((8, 16)).astype(np.float32))))
    assert ir.count("= threshold_backward ") == 1 and "= le " not in ir and "= where " not in ir


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_relu_eager_impl_has_the_bits_of_maximum_with_a_python_zero(dtype):
    """relu's forward in eager mode compares against a 0-d zero of x's dtype made once per signature (a Python 0
    is converted by every ufunc call): the dtype and bits of ``np.maximum(x, 0)``, signed zeros and NaN included."""
    rng = np.random.default_rng(1)
    if np.dtype(dtype).kind == "f":
        x = _special(rng, (4, 5), np.float64).astype(dtype)
    else:
        x = rng.integers(0 if np.dtype(dtype).kind == "u" else -50, 50, (4, 5)).astype(dtype)
    want = np.maximum(x, 0)
    impl = OPS["relu"].eager_impl((Aval(x.shape, jg.tensor(x).dtype),), {})
    got = impl(x)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    out = jg.relu(jg.tensor(x)).numpy()
    assert out.dtype == want.dtype and out.tobytes() == want.tobytes()
