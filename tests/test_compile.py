"""@jg.compile: composition orders, stateful step functions, caching and retracing, pytrees and static arguments,
introspection, autograd through compiled functions, write-backs, and clear errors for what cannot be traced."""
import inspect
import os
import warnings

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad import autograd
from jitgrad.tracer import TraceError, TracedValueError
from jitgrad.ir.unbacked import DataDependentSizeError

THIS = os.path.basename(__file__)


def close(a, b, rtol=1e-10, atol=1e-12):
    a = a.detach().numpy() if isinstance(a, jg.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, jg.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def rnd(*shape, seed=0, requires_grad=False, dtype=jg.float64):
    a = np.random.default_rng(seed).standard_normal(shape)
    return jg.tensor(a, dtype=dtype, requires_grad=requires_grad)


def line_of(fn, text):
    """The absolute line number of the first line of ``fn``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return start + k
    raise AssertionError(f"{text!r} not in {fn.__name__}")


# ---- composition orders: grad of compiled == compiled grad == eager grad, to second order ---------------

def _f_mlp(x, w):
    return ((x @ w).tanh() ** 2).sum() + (x.exp() * w.sum(0)).sum()


def _f_softmax(x, w):
    return (F.log_softmax(x @ w, dim=1) * (x @ w).sigmoid()).sum()


def _f_norm(x, w):
    h = x @ w
    return ((h - h.mean(1, keepdim=True)) / (h.var(1, keepdim=True) + 1.0).sqrt()).sin().sum()


@pytest.mark.parametrize("f", [_f_mlp, _f_softmax, _f_norm], ids=lambda f: f.__name__)
def test_composition_orders_agree_to_second_order(f):
    x0, w0 = rnd(4, 3, seed=1), rnd(3, 3, seed=2)
    v = rnd(4, 3, seed=3)

    def grads(loss_fn):
        x = x0.detach().requires_grad_()
        w = w0.detach().requires_grad_()
        (gx,) = autograd.grad(loss_fn(x, w), x, create_graph=True)
        hx, hw = autograd.grad((gx * v).sum(), (x, w))
        return gx, hx, hw

    # eager
    ge = grads(f)
    # grad of a compiled function
    cf = jg.compile(f)
    ga = grads(cf)
    # a compiled function that returns the gradient (create_graph inside), differentiated outside
    cg = jg.compile(lambda x, w: autograd.grad(f(x, w), x, create_graph=True)[0])
    x = x0.detach().requires_grad_()
    w = w0.detach().requires_grad_()
    gx = cg(x, w)
    hx, hw = autograd.grad((gx * v).sum(), (x, w))
    gb = (gx, hx, hw)

    # the whole second-order computation compiled
    @jg.compile
    def hvp(x, w, v):
        (g,) = autograd.grad(f(x, w), x, create_graph=True)
        return g, autograd.grad((g * v).sum(), (x, w))

    x = x0.detach().requires_grad_()
    w = w0.detach().requires_grad_()
    g, (hx, hw) = hvp(x, w, v)
    gc = (g, hx, hw)
    # a compiled function calling a compiled function (traced through) then differentiated
    cc = jg.compile(lambda x, w: cf(x, w) * 1.0)
    gd = grads(cc)
    for got in (ga, gb, gc, gd):
        for a, b in zip(got, ge):
            close(a, b)
    assert cf.stats["traces"] == 1 and cg.stats["traces"] == 1 and hvp.stats["traces"] == 1


def test_double_backward_through_compiled_function_with_backward_create_graph():
    x0 = rnd(5, seed=4)
    f = lambda x: (x.sin() * x.exp()).sum()  # noqa: E731
    res = []
    for g in (f, jg.compile(f)):
        x = x0.detach().requires_grad_()
        g(x).backward(create_graph=True)
        gx = x.grad
        assert gx.requires_grad
        x.grad = None
        (gx * gx).sum().backward()
        res.append((gx.detach(), x.grad))
    close(res[0][0], res[1][0])
    close(res[0][1], res[1][1])


def test_third_order_through_compiled_function():
    x0 = rnd(3, seed=5)
    f = lambda x: (x ** 4).sum() + x.tanh().sum()  # noqa: E731
    outs = []
    for g in (f, jg.compile(f)):
        x = x0.detach().requires_grad_()
        y = g(x)
        for _ in range(3):
            (y,) = autograd.grad(y.sum(), x, create_graph=True)
        outs.append(y)
    close(outs[0], outs[1])


# ---- stateful step functions: SGD with momentum written by hand ----------------------------------------

def _make_sgd(lazy, seed=0):
    rng = np.random.default_rng(seed)
    w1 = jg.tensor(rng.standard_normal((4, 8)) * 0.5, requires_grad=True)
    b1 = jg.zeros(8, requires_grad=True)
    w2 = jg.tensor(rng.standard_normal((8, 3)) * 0.5, requires_grad=True)
    params = [w1, b1, w2]
    bufs = {} if lazy else {id(p): jg.zeros_like(p) for p in params}
    lr, mom = 0.1, 0.9

    def step(x, y):
        loss = F.cross_entropy((x @ w1 + b1).relu() @ w2, y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                buf = bufs.get(id(p))
                if buf is None:
                    buf = bufs[id(p)] = p.grad.clone()
                else:
                    buf.mul_(mom).add_(p.grad)
                p.sub_(lr * buf)
                p.grad = None
        return loss.detach()
    return params, bufs, step


@pytest.mark.parametrize("lazy", [False, True], ids=["buffers_outside", "buffers_created_inside"])
def test_sgd_momentum_matches_eager_step_by_step(lazy):
    pe, be, step_e = _make_sgd(lazy)
    pc, bc, step_c = _make_sgd(lazy)
    step_c = jg.compile(step_c)
    rng = np.random.default_rng(7)
    for i in range(24):
        x = jg.tensor(rng.standard_normal((5, 4)))
        y = jg.tensor(rng.integers(0, 3, 5))
        le, lc = step_e(x, y), step_c(x, y)
        close(lc, le, rtol=1e-5, atol=1e-6)
        for a, b in zip(pc, pe):
            close(a, b, rtol=1e-5, atol=1e-6)
            assert a.grad is None and a.is_leaf and a.requires_grad
        assert len(bc) == len(be) == 3
        for k in range(3):
            close(bc[id(pc[k])], be[id(pe[k])], rtol=1e-5, atol=1e-6)
            assert type(bc[id(pc[k])]._data) is np.ndarray
    # buffers outside: one trace.  Created inside: the first trace makes state that outlives it, so it is
    # one-shot (its value is written into the new buffers) and the second call retraces with them captured.
    assert step_c.stats["traces"] == (2 if lazy else 1)
    assert step_c.stats["hits"] == 24 - step_c.stats["traces"]
    assert step_c.stats["calls"] == 24


def test_sgd_float64_bitwise_close_and_versions_bumped():
    pe, _, step_e = _make_sgd(False, seed=3)
    pc, _, step_c = _make_sgd(False, seed=3)
    for p in pe + pc:
        p.data = p.data.double()
    step_c = jg.compile(step_c)
    rng = np.random.default_rng(8)
    v0 = [p._version for p in pc]
    for _ in range(20):
        x = jg.tensor(rng.standard_normal((5, 4)), dtype=jg.float64)
        y = jg.tensor(rng.integers(0, 3, 5))
        close(step_c(x, y), step_e(x, y))
    for a, b in zip(pc, pe):
        close(a, b, rtol=1e-12, atol=1e-13)
    assert all(p._version > v for p, v in zip(pc, v0))
    assert step_c.stats["traces"] == 1


def test_state_stored_in_a_dict_inside_is_materialized():
    """A value computed inside and stored in a closure's dict (not returned) gets its concrete value."""
    log = {}

    @jg.compile
    def f(x):
        y = (x * 2).sum()
        log["last"] = y.detach()
        return x + 1

    for k in range(3):
        x = jg.tensor([1.0, 2.0]) * (k + 1)
        close(f(x), x + 1)
        assert type(log["last"]._data) is np.ndarray
        close(log["last"], 6.0 * (k + 1))
    # the stored value escapes on every call: each trace is one-shot
    assert f.stats["traces"] == 3


def test_temporaries_do_not_make_a_trace_one_shot():
    w = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)

    @jg.compile
    def f(x):
        y = x * w
        y[0] = y[1] * 2        # in-place on a temporary
        z = y.exp()
        z.add_(1)
        return z.sum()

    for _ in range(5):
        f(jg.tensor([0.1, 0.2, 0.3]))
    assert (f.stats["traces"], f.stats["hits"]) == (1, 4)


# ---- .grad write-backs -----------------------------------------------------------------------------

def test_grad_set_to_none_and_accumulation_written_back():
    p = jg.tensor([1.0, -2.0, 0.5], requires_grad=True)

    @jg.compile
    def acc(x):
        (p * x).sum().backward()

    x = jg.tensor([1.0, 2.0, 3.0])
    acc(x)
    close(p.grad, [1.0, 2.0, 3.0])
    g_obj = p.grad
    acc(x)
    acc(x * 2)
    assert p.grad is g_obj               # accumulated into the existing tensor, as eager does
    close(p.grad, [4.0, 8.0, 12.0])
    assert acc.stats["traces"] == 2      # .grad None -> not None changes the signature once

    @jg.compile
    def clear():
        p.grad = None

    clear()
    assert p.grad is None


def test_grad_accumulates_into_argument_grads_of_each_call():
    """.backward() inside accumulates into the .grad of *this call's* arguments, not the first call's."""
    @jg.compile
    def f(x):
        (x * x).sum().backward()

    xs = [jg.tensor([1.0, 2.0], requires_grad=True) * 1 for _ in range(3)]
    xs = [x.detach().requires_grad_() for x in xs]
    for k, x in enumerate(xs):
        x.grad = jg.tensor([10.0 * k, 0.0])
        f(x)
        close(x.grad, [2.0 + 10 * k, 4.0])
    assert (f.stats["traces"], f.stats["hits"]) == (1, 2)
    y = jg.tensor([3.0, 4.0], requires_grad=True)     # grad None: another signature
    f(y)
    close(y.grad, [6.0, 8.0])
    assert f.stats["traces"] == 2


def test_grad_assigned_a_new_tensor_inside():
    p = jg.tensor([1.0, 2.0], requires_grad=True)

    @jg.compile
    def f(x):
        p.grad = x * 3

    f(jg.tensor([1.0, 1.0]))
    close(p.grad, [3.0, 3.0])
    assert not p.grad.requires_grad


# ---- in-place writes inside ---------------------------------------------------------------------------

def test_setitem_and_add_on_closure_state_and_arguments():
    def make():
        state = jg.zeros(4, 3)
        count = jg.zeros(())

        def f(x, i):
            state[i] = x * 2 + state[i]
            count.add_(1)
            x.add_(state.sum(0))
            return state.sum()
        return state, count, f

    se, ce, fe = make()
    sc, cc, fc = make()
    fc = jg.compile(fc)
    for k in range(6):
        xe = jg.tensor([1.0, 2.0, 3.0]) * k
        xc = jg.tensor([1.0, 2.0, 3.0]) * k
        close(fc(xc, k % 4), fe(xe, k % 4))
        close(sc, se)
        close(cc, ce)
        close(xc, xe)             # the argument was updated in place too
    assert float(cc.item()) == 6.0
    assert fc.stats["traces"] == 4        # the static index i takes 4 values


def test_index_assignment_with_tensor_index_on_state():
    buf = jg.zeros(5)
    idx = jg.tensor([0, 3])

    @jg.compile
    def f(v):
        buf[idx] = v
        buf.mul_(2)

    f(jg.tensor([1.0, 2.0]))
    f(jg.tensor([1.0, 1.0]))
    close(buf, [2.0, 0.0, 0.0, 2.0, 0.0])
    assert f.stats["traces"] == 1


# ---- pytrees and static arguments -----------------------------------------------------------------------

def test_nested_inputs_and_outputs_with_static_args():
    def f(inp, scale, mode="sum"):
        a, (b, c) = inp["pair"], inp["list"]
        r = (a * b).sum() * scale + c.exp().sum()
        if mode == "sum":
            out = r
        else:
            out = r * 2
        return {"r": out, "parts": [a * scale, (b, c + 1)], "mode": mode, "n": 3}

    cf = jg.compile(f)
    a, b, c = rnd(3, seed=1), rnd(3, seed=2), rnd(2, seed=3)
    for scale, mode in [(2.0, "sum"), (2.0, "sum"), (3.0, "sum"), (3.0, "double"), (2.0, "sum")]:
        inp = {"pair": a, "list": [b, c]}
        got, want = cf(inp, scale, mode=mode), f(inp, scale, mode=mode)
        assert set(got) == {"r", "parts", "mode", "n"}
        assert got["mode"] == mode and got["n"] == 3
        assert isinstance(got["parts"], list) and isinstance(got["parts"][1], tuple)
        close(got["r"], want["r"])
        close(got["parts"][0], want["parts"][0])
        close(got["parts"][1][1], want["parts"][1][1])
        assert got["parts"][1][0] is not None
    # (2.0, sum), (3.0, sum), (3.0, double): three static signatures; the repeats hit
    assert (cf.stats["traces"], cf.stats["hits"]) == (3, 2)


def test_same_tensor_twice_and_kwargs():
    f = jg.compile(lambda x, y, *, z: x * y + z)
    x = rnd(3, seed=1)
    close(f(x, x, z=x), x * x + x)
    close(f(x, rnd(3, seed=2), z=x), x * rnd(3, seed=2) + x)
    assert f.stats["traces"] == 2       # aliasing is part of the signature


def test_returning_an_input_and_a_constant():
    f = jg.compile(lambda x: (x, jg.ones(2), 3))
    x = rnd(2)
    a, b, c = f(x)
    close(a, x)
    close(b, [1.0, 1.0])
    assert c == 3


@pytest.mark.parametrize("change", ["shape", "dtype", "requires_grad"])
def test_retrace_on_signature_change(change):
    f = jg.compile(lambda x: (x * 2).sum())
    x = jg.ones(3)
    variant = {"shape": jg.ones(4), "dtype": jg.ones(3, dtype=jg.float64),
               "requires_grad": jg.ones(3, requires_grad=True)}[change]
    f(x)
    f(x)
    assert f.stats["traces"] == 1
    r = f(variant)
    assert f.stats["traces"] == 2
    assert r.dtype is (jg.float64 if change == "dtype" else jg.float32)
    assert r.requires_grad == (change == "requires_grad")
    f(x)
    f(variant)
    assert (f.stats["traces"], f.stats["hits"]) == (2, 3)


def test_grad_mode_is_part_of_the_signature():
    w = jg.ones(3, requires_grad=True)
    f = jg.compile(lambda x: (x * w).sum())
    assert f(jg.ones(3)).requires_grad
    with jg.no_grad():
        assert not f(jg.ones(3)).requires_grad
    assert f.stats["traces"] == 2


def test_recompile_limit_warns_once_names_the_change_and_runs_eagerly():
    # torch._dynamo.config.recompile_limit: past 8 traces new signatures run eagerly, with one warning
    # (dynamic=False: every shape is a signature of its own, as torch's; by default one trace serves them all)
    f = jg.compile(lambda x: x.sum(), dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in range(1, 9):
            f(jg.ones(n))
    with pytest.warns(UserWarning) as rec:
        close(f(jg.ones(9)), 9.0)
        close(f(jg.ones(10)), 10.0)
    msgs = [str(r.message) for r in rec]
    assert len(msgs) == 1
    assert "recompile limit (8)" in msgs[0] and "'<lambda>'" in msgs[0] and "test_compile.py" in msgs[0]
    assert "tensor argument 0 changed from shape [8]" in msgs[0] and "to shape [9]" in msgs[0]
    assert f.stats["traces"] == 8 and f.stats["eager_fallbacks"] == 2
    f(jg.ones(3))                     # a compiled signature still serves
    assert f.stats["traces"] == 8 and f.stats["hits"] == 1


def test_closure_tensor_replaced_by_a_new_object_retraces():
    w = jg.tensor([1.0, 2.0])
    old = w
    f = jg.compile(lambda x: x * w)
    close(f(jg.ones(2)), [1.0, 2.0])
    w = jg.tensor([5.0, 6.0])     # rebinding the closure variable (the old tensor is still alive)
    close(f(jg.ones(2)), [5.0, 6.0])
    assert f.stats["traces"] == 2
    w = old
    close(f(jg.ones(2)), [1.0, 2.0])
    assert f.stats["traces"] == 2      # back to the first entry


G_WEIGHT = jg.tensor([1.0, 1.0])


def test_global_tensor_replaced_retraces():
    global G_WEIGHT
    f = jg.compile(lambda x: x * G_WEIGHT)
    close(f(jg.ones(2)), [1.0, 1.0])
    keep = G_WEIGHT
    G_WEIGHT = jg.tensor([2.0, 3.0])
    try:
        close(f(jg.ones(2)), [2.0, 3.0])
    finally:
        G_WEIGHT = keep
    assert f.stats["traces"] == 2


def test_closure_tensor_updated_in_place_outside_is_read_afresh():
    w = jg.tensor([1.0, 2.0])
    f = jg.compile(lambda x: x * w)
    f(jg.ones(2))
    w.mul_(10)
    close(f(jg.ones(2)), [10.0, 20.0])
    w.data = jg.tensor([7.0, 7.0])
    close(f(jg.ones(2)), [7.0, 7.0])
    assert f.stats["traces"] == 1


# ---- introspection ----------------------------------------------------------------------------------------

def test_ir_names_ops_types_and_source_lines():
    w = jg.randn(16, 4, requires_grad=True)

    def step(x):
        h = x @ w
        return h.relu().sum()

    f = jg.compile(step)
    x = jg.randn(8, 16)
    text = f.ir(x)
    assert "matmul" in text and "relu" in text
    assert "f32[8,16]" in text and "f32[16,4]" in text and "f32[8,4]" in text
    assert f"{THIS}:{line_of(step, 'x @ w')} step" in text
    assert "step_backward" in text         # w requires grad: the transposed graph is shown too
    assert f.stats["traces"] == 1
    f(x)
    assert f.stats["traces"] == 1          # ir() traced the signature the call then reused
    src = f.source(x)
    assert src.startswith("def step(") or "def " in src
    assert "matmul" in src


def test_ir_of_a_step_with_backward_inside_shows_the_update():
    w = jg.tensor([1.0, 2.0], requires_grad=True)

    def step(x):
        loss = (x * w).sum()
        loss.backward()
        with jg.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None
        return loss.detach()

    f = jg.compile(step)
    text = f.ir(jg.tensor([1.0, 1.0]))
    assert "nograd" in text and "sub" in text
    assert f"{THIS}:{line_of(step, 'w.sub_')}" in text
    close(w, [1.0, 2.0])      # ir() does not run the step


def test_ir_before_the_first_call_of_a_step_that_creates_state():
    w = jg.tensor([1.0, 2.0], requires_grad=True)
    state = {}

    def step(x):
        (x * w).sum().backward()
        with jg.no_grad():
            if "m" not in state:
                state["m"] = w.grad.clone()
            else:
                state["m"].mul_(0.9).add_(w.grad)
            w.sub_(0.1 * state["m"])
            w.grad = None

    f = jg.compile(step)
    with pytest.warns(UserWarning, match="creates state"):
        f.ir(jg.tensor([1.0, 1.0]))
    assert type(state["m"]._data) is np.ndarray      # never left holding a traced value
    close(state["m"], [1.0, 1.0])
    close(w, [1.0, 2.0])
    f(jg.tensor([1.0, 1.0]))
    close(state["m"], [1.9, 1.9], rtol=1e-6)


# ---- autograd through compiled functions -----------------------------------------------------------------

def test_hooks_on_compiled_inputs_fire_on_outer_backward():
    f = jg.compile(lambda x, w: (x @ w).tanh().sum())
    x, w = rnd(2, 3, seed=1, requires_grad=True), rnd(3, 2, seed=2, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.detach()))
    w.register_hook(lambda g: g * 2)
    f(x, w).backward()
    xe, we = x.detach().requires_grad_(), w.detach().requires_grad_()
    (xe @ we).tanh().sum().backward()
    assert len(seen) == 1
    close(seen[0], xe.grad)
    close(x.grad, xe.grad)
    close(w.grad, we.grad * 2)


def test_hooks_and_retain_grad_on_compiled_outputs():
    f = jg.compile(lambda x: x.exp())
    x = rnd(3, requires_grad=True)
    y = f(x)
    y.retain_grad()
    y.register_hook(lambda g: g * 3)
    (y * 2).sum().backward()
    close(y.grad, [6.0, 6.0, 6.0])      # retain_grad runs after the tensor's hooks, as in torch
    close(x.grad, 6 * x.exp())


def test_compiled_output_inside_a_larger_eager_graph():
    f = jg.compile(lambda a, b: (a @ b).sigmoid())
    a0, b0, c0 = rnd(3, 4, seed=1), rnd(4, 2, seed=2), rnd(3, 2, seed=3)
    res = []
    for g in ((lambda a, b: (a @ b).sigmoid()), f):
        a, b, c = (t.detach().requires_grad_() for t in (a0, b0, c0))
        h = g(a.exp(), b) * c
        loss = (h ** 2).sum() + g(a, b).sum()
        loss.backward()
        res.append((loss, a.grad, b.grad, c.grad))
    for u, v in zip(*res):
        close(u, v)
    assert f.stats["traces"] == 1 and f.stats["hits"] == 1


def test_compiled_output_grad_fn_and_version_check():
    f = jg.compile(lambda x: x * 2)
    x = rnd(3, requires_grad=True)
    y = f(x)
    assert y.grad_fn is not None and y.grad_fn.name() == "CompiledFunctionBackward"
    assert not y.is_leaf
    g = jg.compile(lambda x: (x * x).sum())
    z = x.detach().requires_grad_()
    out = g(z)
    with jg.no_grad():
        z.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_retain_graph_through_compiled_function():
    f = jg.compile(lambda x: (x.sin() * x).sum())
    x = rnd(3, requires_grad=True)
    y = f(x)
    y.backward(retain_graph=True)
    g1 = x.grad.clone()
    y.backward()
    close(x.grad, 2 * g1)


def test_gradient_penalty_inside_compiled_step():
    w = rnd(3, 1, seed=5, requires_grad=True)

    def step(x):
        x = x.detach().requires_grad_()
        out = (x @ w).tanh().sum()
        (gx,) = autograd.grad(out, x, create_graph=True)
        pen = ((gx.norm(dim=1) - 1) ** 2).mean()
        pen.backward()
        with jg.no_grad():
            g = w.grad.clone()
            w.grad = None
        return pen.detach(), g

    we = w.detach().requires_grad_()
    ref = []
    for k in range(3):
        x = rnd(4, 3, seed=10 + k)
        xe = x.detach().requires_grad_()
        out = (xe @ we).tanh().sum()
        (gx,) = autograd.grad(out, xe, create_graph=True)
        pen = ((gx.norm(dim=1) - 1) ** 2).mean()
        (gw,) = autograd.grad(pen, we)
        ref.append((pen, gw))
    f = jg.compile(step)
    for k in range(3):
        pen, g = f(rnd(4, 3, seed=10 + k))
        close(pen, ref[k][0])
        close(g, ref[k][1])
    assert f.stats["traces"] == 1


# ---- what cannot be traced: clear errors ------------------------------------------------------------------

def _reads():
    def f_bool(x):
        return bool(x.sum() > 0)

    def f_item(x):
        return x.sum().item()

    def f_numpy(x):
        return x.numpy()

    def f_tolist(x):
        return x.tolist()

    def f_if(x):
        if x.sum():
            return x
        return -x

    def f_float(x):
        return float(x.sum())

    def f_index(x):
        return [1, 2, 3][x.argmax()]
    return [(f_bool, "return bool("), (f_item, ".item()"), (f_numpy, ".numpy()"), (f_tolist, ".tolist()"),
            (f_if, "if x.sum()"), (f_float, "return float("), (f_index, "[1, 2, 3]")]


@pytest.mark.parametrize("fn,text", _reads(), ids=lambda v: getattr(v, "__name__", "") or None)
def test_reading_a_traced_value_names_the_line_and_the_fix(fn, text):
    f = jg.compile(fn)
    with pytest.raises(TracedValueError) as ei:
        f(jg.tensor([1.0, 2.0, 3.0]))
    assert isinstance(ei.value, RuntimeError) and isinstance(ei.value, TraceError)
    msg = str(ei.value)
    assert f"{THIS}:{line_of(fn, text)}" in msg
    assert "jitgrad.where" in msg and "fullgraph=False" in msg
    assert f.stats["traces"] == 1


def test_failed_trace_leaves_closure_state_untouched():
    w = jg.tensor([1.0, 2.0], requires_grad=True)

    @jg.compile
    def f(x):
        loss = (x * w).sum()
        loss.backward()
        with jg.no_grad():
            w.sub_(w.grad)
        if loss > 0:
            return loss
        return -loss

    with pytest.raises(TracedValueError):
        f(jg.ones(2))
    assert type(w._data) is np.ndarray and w.grad is None and w.is_leaf
    close(w, [1.0, 2.0])
    assert w._version == 0
    close((w * 2).sum(), 6.0)       # the tensor works eagerly afterwards


def test_fullgraph_false_runs_eagerly_with_one_warning():
    w = jg.tensor([1.0, -1.0], requires_grad=True)

    def step(x):
        loss = (x * w).sum()
        loss.backward()
        with jg.no_grad():
            if loss > 0:            # data-dependent control flow
                w.sub_(0.5 * w.grad)
            else:
                w.add_(0.5 * w.grad)
            w.grad = None
        return loss.detach()

    f = jg.compile(step, fullgraph=False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        l1 = f(jg.tensor([2.0, 1.0]))       # loss 1 > 0: w -= 0.5 x
        l2 = f(jg.tensor([2.0, 1.0]))
        l3 = f(jg.tensor([1.0, 2.0, 3.0])[:2])
        f(jg.ones(3)[:2] * 0)
    ours = [r for r in rec if "fullgraph=False" in str(r.message)]
    assert len(ours) == 1, [str(r.message) for r in rec]
    assert "runs eagerly" in str(ours[0].message)
    close(l1, 1.0)
    close(l2, -1.5)                       # w = [0, -1.5] after the first step: the other branch
    assert l3 is not None
    assert f.stats["eager_fallbacks"] >= 1 and f.stats["calls"] == 4
    assert "eagerly" in f.ir(jg.tensor([2.0, 1.0]))


def test_fullgraph_false_compiles_what_it_can():
    f = jg.compile(lambda x: x * 2, fullgraph=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(jg.ones(2))
        f(jg.ones(2))
    assert f.stats["eager_fallbacks"] == 0 and f.stats["hits"] == 1


@pytest.mark.parametrize("what", ["mask_getitem", "nonzero"])
def test_data_dependent_shapes_compile_with_a_bounded_size(what):
    # (``y[x > 0] = v`` is a where: tests/test_traced_views.py; tests/test_data_dependent_sizes.py has the rest)
    def mask_getitem(x):
        return x[x > 0]

    def nonzero(x):
        return x.nonzero()
    fn = {"mask_getitem": mask_getitem, "nonzero": nonzero}[what]
    f = jg.compile(fn)
    for v in ([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [1.0, 2.0, 3.0]):
        x = jg.tensor(v)
        got, want = f(x), fn(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        close(got, want)
    assert f.stats["traces"] == 1


def test_python_decisions_on_a_data_dependent_size_are_a_clear_error():
    def fn(x):
        y = x[x > 0]
        return y * 2 if y.shape[0] > 1 else y
    x = jg.tensor([1.0, -2.0, 3.0])
    with pytest.raises(DataDependentSizeError) as ei:
        jg.compile(fn)(x)
    assert f"{THIS}:{line_of(fn, 'y.shape[0] > 1')}" in str(ei.value) and "data-dependent" in str(ei.value)
    # fullgraph=False: eager, with the eager result
    with pytest.warns(UserWarning, match="fullgraph=False"):
        got = jg.compile(fn, fullgraph=False)(x)
    close(got, fn(x))


def test_a_constant_mask_made_inside_is_fine():
    f = jg.compile(lambda x: x[jg.tensor([True, False, True])] * 2)
    close(f(jg.tensor([1.0, 2.0, 3.0])), [2.0, 6.0])
    close(f(jg.tensor([1.0, 2.0, 4.0])), [2.0, 8.0])


def test_reading_a_tensor_from_outside_is_refused_not_baked_in():
    """A closure tensor is read afresh at every call, so its trace-time value must not become a constant."""
    lr = jg.tensor(0.1)
    mask = jg.tensor([True, False, True])

    def scaled(x):
        return x * lr.item()

    def masked(x):
        return x[mask]

    for fn, text in ((scaled, "lr.item()"),):
        with pytest.raises(TracedValueError) as ei:
            jg.compile(fn)(jg.ones(3))
        assert "outside" in str(ei.value) and f"{THIS}:{line_of(fn, text)}" in str(ei.value)
    # a mask from outside indexes by its values at each call (a data-dependent size, not a constant)
    g = jg.compile(masked)
    close(g(jg.arange(3.0)), [0.0, 2.0])
    mask[1] = True
    close(g(jg.arange(3.0)), [0.0, 1.0, 2.0])
    assert g.stats["traces"] == 1
    # the supported forms: use it as a tensor (a graph input, read at each call)
    f = jg.compile(lambda x: x * lr)
    close(f(jg.ones(2)), [0.1, 0.1], rtol=1e-6)
    lr.fill_(1.0)
    close(f(jg.ones(2)), [1.0, 1.0])
    assert f.stats["traces"] == 1
    with pytest.raises(TracedValueError, match="allclose"):
        jg.compile(lambda x: jg.allclose(x, x))(jg.ones(2))


def test_random_factories_inside_draw_at_every_call():
    # the generator's state is graph state (read and advanced per call); tests/test_random.py has the rest
    f = jg.compile(lambda x: x + jg.randn(3))
    a, b = f(jg.ones(3)), f(jg.ones(3))
    assert not np.array_equal(a.numpy(), b.numpy())
    assert f.stats["traces"] == 1


def test_unsupported_python_gives_clear_errors():
    # a traced tensor stored by one compiled function and read by another
    class Box:
        pass
    box = Box()

    @jg.compile
    def leak(x):
        box.t = x * 2          # stored state: materialized after the call
        return x

    leak(jg.ones(2))
    assert type(box.t._data) is np.ndarray
    close(box.t, [2.0, 2.0])
    # argument types that are not tensors, scalars or containers of them are static: unhashable ones still work
    f = jg.compile(lambda x, opts: x * opts["k"])
    close(f(jg.ones(2), {"k": 3.0}), [3.0, 3.0])
    # copying a traced tensor with jg.tensor
    g = jg.compile(lambda x: jg.tensor(x) * 2)
    close(g(jg.ones(2)), [2.0, 2.0])
    # an op given a Python object it cannot take names the op and the line
    h = jg.compile(lambda x: x + "a")
    with pytest.raises(TypeError, match="add"):
        h(jg.ones(2))


def test_custom_function_inside_compile_uses_its_backward():
    class StraightThrough(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sign()

        @staticmethod
        def backward(ctx, g):
            return g            # not the derivative of sign: the custom rule must win

    f = jg.compile(lambda x: (StraightThrough.apply(x) * x).sum())
    x = jg.tensor([0.5, -2.0], requires_grad=True)
    f(x).backward()
    close(x.grad, [0.5 + 1.0, -2.0 - 1.0])
    text = f.ir(x)
    assert "custom_function" in text and "StraightThrough" in text


def test_backend_argument_is_checked():
    with pytest.raises(ValueError, match="backend"):
        jg.compile(lambda x: x, backend="tpu")


def test_zero_grad_first_step_retraces_once():
    # torch's idiom: opt.zero_grad() at the start of the step.  The guard on a parameter's .grad must record the
    # state a call starts from (a grad left by the previous step), not the None the trace itself set
    w = jg.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    w_ref = w.detach().clone().requires_grad_(True)

    def make(p):
        def step(x):
            p.grad = None
            loss = (x @ p).tanh().sum()
            loss.backward()
            with jg.no_grad():
                p.sub_(0.1 * p.grad)
            return loss.detach()
        return step

    f, ref = jg.compile(make(w), backend="interpret"), make(w_ref)
    x = jg.tensor([[1.0, 2.0], [-1.0, 0.5]])
    for _ in range(5):
        np.testing.assert_allclose(f(x).numpy(), ref(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), w_ref.detach().numpy(), rtol=1e-6)
    assert f.stats["traces"] == 2 and f.stats["hits"] == 3     # grad None on the first call, a tensor after


def test_a_first_call_under_the_profiler_keeps_the_short_call_path_for_later_calls(monkeypatch):
    # GraphFunction.direct declines while a profiler is active (the profiled call needs per-kernel events): that
    # is no reason to give up the short path for every later call of the entry
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    f = jg.compile(lambda x: x * 2 + 1, backend="numba")
    x = jg.tensor(np.arange(6, dtype=np.float32))
    with jg.autograd.profiler.profile():
        f(x)
    np.testing.assert_array_equal(f(x).numpy(), np.arange(6, dtype=np.float32) * 2 + 1)
    (e,) = next(iter(f._cache.values()))
    assert e.direct


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_two_results_computing_one_value_are_two_arrays_one_result_twice_is_one_tensor(backend, monkeypatch):
    # the passes merge x * 2 and x * 2 into one graph output; eager mode returns two tensors there (writing one
    # leaves the other), and one tensor for ``return y, y``
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    x = jg.tensor(np.ones(4, np.float32))
    a, b = jg.compile(lambda x: (x * 2, x * 2), backend=backend)(x)
    a.add_(1)
    np.testing.assert_array_equal(b.numpy(), np.full(4, 2, np.float32))

    def g(x):
        y = x * 2
        return y, y
    a, b = jg.compile(g, backend=backend)(x)
    assert a is b


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_two_grads_the_passes_merge_are_two_arrays(backend, monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    a = jg.tensor(np.ones(4, np.float32), requires_grad=True)
    b = jg.tensor(np.ones(4, np.float32), requires_grad=True)

    @jg.compile(backend=backend)
    def f(x):
        ((a * x * x).sum() + (b * x * x).sum()).backward()
    f(jg.tensor(np.arange(4, dtype=np.float32)))
    a.grad.add_(1)
    np.testing.assert_array_equal(b.grad.numpy(), np.arange(4, dtype=np.float32) ** 2)


def test_torch_compile_arguments_are_accepted_as_torch_checks_them():
    """Scripts call torch.compile(model, mode="max-autotune", fullgraph=True, dynamic=False, backend=...): the
    same call compiles here; torch's argument errors are torch's."""
    x = jg.tensor([0.5, 1.0])
    default = jg.compile(lambda t: t).backend          # (the suite may set JITGRAD_BACKEND)
    for kw in ({"mode": "reduce-overhead"}, {"mode": "max-autotune", "dynamic": False, "fullgraph": True},
               {"options": {"triton.cudagraphs": False}}, {"backend": "inductor"}, {"dynamic": True}):
        f = jg.compile(lambda t: t.sin() * 2, **kw)
        assert f.backend == default
        np.testing.assert_allclose(f(x).numpy(), np.sin(x.numpy()) * 2, rtol=1e-6)
    assert jg.compile(backend="eager")(lambda t: t).backend == "interpret"
    assert jg.compile(backend="aot_eager")(lambda t: t).backend == "interpret"
    g = (lambda t: t)
    assert jg.compile(g, disable=True) is g and jg.compile(disable=True)(g) is g
    with pytest.raises(RuntimeError, match="Unrecognized mode=fast, should be one of: default, lite, "
                                           "reduce-overhead, max-autotune-no-cudagraphs"):
        jg.compile(g, mode="fast")
    with pytest.raises(RuntimeError, match="Either mode or options can be specified"):
        jg.compile(g, mode="default", options={})
