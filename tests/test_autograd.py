"""Autograd engine semantics: graphs, higher order, retain_graph, hooks, leaves, in-place checks, custom Functions,
grad modes.  PyTorch (when installed) is the oracle for names, structure and error texts."""
import threading

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import autograd
from jitgrad.autograd import Function

FREED = "Trying to backward through the graph a second time"
INPLACE = "one of the variables needed for gradient computation has been modified by an inplace operation"
LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."


def close(a, b, rtol=1e-6, atol=1e-7):
    a = a.detach().numpy() if isinstance(a, jg.Tensor) else np.asarray(a)
    np.testing.assert_allclose(a, np.asarray(b, dtype=a.dtype), rtol=rtol, atol=atol)


def _torch():
    return pytest.importorskip("torch")


# ---- higher order ----------------------------------------------------------------------------------------

def test_create_graph_third_order():
    x = jg.tensor([0.5, 2.0], dtype=jg.float64, requires_grad=True)
    y = (x ** 4).sum()
    (g1,) = autograd.grad(y, x, create_graph=True)
    (g2,) = autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = autograd.grad(g2.sum(), x, create_graph=True)
    xs = np.array([0.5, 2.0])
    close(g1, 4 * xs ** 3)
    close(g2, 12 * xs ** 2)
    close(g3, 24 * xs)
    assert g3.requires_grad
    (g4,) = autograd.grad(g3.sum(), x)
    close(g4, [24., 24.])


def test_create_graph_third_order_matches_torch():
    torch = _torch()
    data = np.array([0.3, -0.8, 1.7])

    def f(m, x):
        return (x.sin() * x.exp() + x.tanh() * x * x).sum()

    res = []
    for m in (torch, jg):
        x = m.tensor(data, requires_grad=True)
        y = f(m, x)
        gs = []
        for _ in range(3):
            (y,) = m.autograd.grad(y.sum() if y.dim() else y, x, create_graph=True)
            gs.append(y.detach().numpy().copy())
        res.append(gs)
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, rtol=1e-10)


def test_backward_create_graph_then_backward_of_grad():
    x = jg.tensor(1.5, requires_grad=True)
    w = jg.tensor(2.0, requires_grad=True)
    y = (w * x) ** 2                      # dy/dx = 2 w^2 x
    y.backward(create_graph=True)
    gx = x.grad
    assert gx.requires_grad
    x.grad = None
    w.grad = None
    gx.backward()                         # d(2 w^2 x)/dx = 2 w^2, /dw = 4 w x
    close(x.grad, 8.)
    close(w.grad, 12.)


def test_mixed_partial_with_grad():
    x = jg.tensor(1.0, requires_grad=True)
    y = jg.tensor(2.0, requires_grad=True)
    z = x * x * y + y * y * y
    gx, gy = autograd.grad(z, (x, y), create_graph=True)
    close(gx, 4.)                        # 2xy
    close(gy, 13.)                       # x^2 + 3y^2
    (gxy,) = autograd.grad(gx, y)        # 2x
    close(gxy, 2.)


def test_hessian_vector_product_via_double_backward():
    A = jg.tensor([[2., 1.], [1., 3.]], dtype=jg.float64)
    x = jg.tensor([1., -1.], dtype=jg.float64, requires_grad=True)
    f = 0.5 * (x @ (A @ x))
    (g,) = autograd.grad(f, x, create_graph=True)
    v = jg.tensor([1., 2.], dtype=jg.float64)
    (hv,) = autograd.grad((g * v).sum(), x)
    close(hv, np.array([[2., 1.], [1., 3.]]) @ np.array([1., 2.]))


# ---- retain_graph / freed graphs -------------------------------------------------------------------------

def test_second_backward_through_freed_graph_raises_torch_text():
    torch = _torch()
    msgs = []
    for m in (torch, jg):
        x = m.tensor([1., 2.], requires_grad=True)
        y = (x * x).sum()
        y.backward()
        with pytest.raises(RuntimeError) as ei:
            y.backward()
        msgs.append(str(ei.value))
    assert msgs[1].startswith(FREED)
    assert msgs[0].split(".")[0] == msgs[1].split(".")[0]
    assert "Specify retain_graph=True" in msgs[1]


def test_graph_with_nothing_saved_can_be_backwarded_twice():
    # as in torch: add/sum save nothing, so there is nothing to free
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x + 1).sum()
    y.backward()
    y.backward()
    close(x.grad, [2., 2.])
    torch = pytest.importorskip("torch")
    xt = torch.tensor([1., 2.], requires_grad=True)
    yt = (xt + 1).sum()
    yt.backward()
    yt.backward()
    np.testing.assert_allclose(xt.grad.numpy(), x.grad.numpy())


def test_freed_shared_subgraph_raises_for_other_root():
    x = jg.tensor([1., 2.], requires_grad=True)
    e = x.exp()
    a = e.sum()
    b = (e * 2).sum()
    a.backward()
    with pytest.raises(RuntimeError, match=FREED):
        b.backward()


def test_retain_graph_allows_repeated_backward_and_accumulates():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x * x * x).sum()
    for _ in range(3):
        y.backward(retain_graph=True)
    close(x.grad, 3 * 3 * np.array([1., 4.]))
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


def test_grad_retain_graph_then_backward():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x.exp()).sum()
    (g,) = autograd.grad(y, x, retain_graph=True)
    y.backward()
    close(x.grad, g)


# ---- allow_unused / grad_outputs / inputs ----------------------------------------------------------------

def test_allow_unused():
    x = jg.tensor([1., 2.], requires_grad=True)
    z = jg.tensor([3.], requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="^The differentiated Tensor at index 1 .*appears to not have been used "
                                           "in the graph. Set allow_unused=True"):
        autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = autograd.grad(y, [x, z], allow_unused=True)
    close(gx, [2., 4.])
    assert gz is None


def test_allow_unused_materialize_grads():
    x = jg.tensor([1., 2.], requires_grad=True)
    z = jg.tensor([3.], requires_grad=True)
    gx, gz = autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
    close(gz, [0.])


def test_input_reached_only_through_non_differentiable_path_is_unused():
    x = jg.tensor([1., 2.], requires_grad=True)
    w = jg.tensor([1., 1.], requires_grad=True)
    y = (w * (x > 1.5)).sum()         # comparison: not differentiable
    gx, gw = autograd.grad(y, [x, w], allow_unused=True)
    assert gx is None
    close(gw, [0., 1.])


def test_grad_outputs_weights_each_output():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    y1 = x * 2
    y2 = x ** 2
    (g,) = autograd.grad([y1, y2], x, grad_outputs=[jg.tensor([1., 1., 1.]), jg.tensor([0., 1., 10.])])
    close(g, [2., 2. + 4., 2. + 60.])


def test_grad_outputs_shape_mismatch_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape: grad_output\\[0\\] has a shape of"):
        autograd.grad(x * 2, x, grad_outputs=jg.ones(3))


def test_grad_outputs_with_create_graph_is_differentiable_in_v():
    x = jg.tensor([1., 2.], requires_grad=True)
    v = jg.tensor([3., 4.], requires_grad=True)
    (g,) = autograd.grad(x * x, x, grad_outputs=v, create_graph=True)   # 2 x v
    (gv,) = autograd.grad(g.sum(), v)
    close(gv, [2., 4.])


def test_backward_inputs_accumulates_only_into_those():
    a = jg.tensor([1., 2.], requires_grad=True)
    b = jg.tensor([3., 4.], requires_grad=True)
    y = (a * b).sum()
    y.backward(inputs=[a])
    close(a.grad, [3., 4.])
    assert b.grad is None
    y2 = (a * b).sum()
    autograd.backward(y2, inputs=b)
    close(b.grad, [1., 2.])
    close(a.grad, [3., 4.])


def test_backward_inputs_non_leaf():
    torch = _torch()
    out = []
    for m in (torch, jg):
        a = m.tensor([1., 2.], requires_grad=True)
        b = a * 3
        c = (b * b).sum()
        c.backward(inputs=[b])
        out.append((a.grad, b.grad.detach().numpy().copy()))
    assert out[0][0] is None and out[1][0] is None
    np.testing.assert_allclose(out[1][1], out[0][1])


def test_backward_inputs_empty_raises():
    a = jg.tensor([1.], requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        (a * 2).sum().backward(inputs=[])


def test_accumulation_into_leaves_over_several_backward_calls():
    w = jg.tensor([1., -1.], requires_grad=True)
    total = np.zeros(2, np.float32)
    for k in range(1, 4):
        (w * k).sum().backward()
        total += k
        close(w.grad, total)
    g = w.grad
    (w * 10).sum().backward()
    assert w.grad is g                   # accumulated in place into the same tensor
    w.grad = None
    (w * 2).sum().backward()
    close(w.grad, [2., 2.])


def test_leaf_used_several_times_sums_gradients():
    x = jg.tensor([2.], requires_grad=True)
    y = x * x + x * 3 + x.exp() * 0 + x
    y.sum().backward()
    close(x.grad, [2 * 2 + 3 + 1])


def test_diamond_graph():
    x = jg.tensor([0.5], dtype=jg.float64, requires_grad=True)
    a = x.sin()
    b = a * 2
    c = a.exp()
    (b + c).sum().backward()
    close(x.grad, np.cos(0.5) * (2 + np.exp(np.sin(0.5))))


def test_backward_non_scalar_without_gradient():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    (x * 2)[0:1].backward()              # one element: fine
    close(x.grad, [2., 0.])


def test_backward_of_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a "
                                           "grad_fn"):
        jg.ones(2).sum().backward()
    with jg.no_grad():
        y = (jg.ones(2, requires_grad=True) * 2).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_grad_of_output_that_does_not_require_grad_raises():
    x = jg.tensor([1.], requires_grad=True)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        autograd.grad(jg.ones(1).sum(), x)


def test_grad_leaves_grad_untouched_and_gradient_dtype_follows_input():
    x = jg.tensor([1., 2.], dtype=jg.float64, requires_grad=True)
    (g,) = autograd.grad((x.float() * 2).sum(), x)
    assert g.dtype == jg.float64
    assert x.grad is None


# ---- hooks -----------------------------------------------------------------------------------------------

def test_leaf_hook_replaces_gradient():
    x = jg.tensor([1., 2.], requires_grad=True)
    x.register_hook(lambda g: g * 0 + 7)
    (x * 3).sum().backward()
    close(x.grad, [7., 7.])


def test_non_leaf_hook_sees_and_replaces_gradient_flowing_on():
    x = jg.tensor([1., 2.], requires_grad=True)
    h = x * 2
    seen = []
    h.register_hook(lambda g: seen.append(g.detach().numpy().copy()))
    h.register_hook(lambda g: g * 10)
    (h * 3).sum().backward()
    close(seen[0], [3., 3.])
    close(x.grad, [60., 60.])           # 3 * 10 * 2


def test_hooks_run_in_registration_order():
    x = jg.tensor([1.], requires_grad=True)
    x.register_hook(lambda g: g * 2)
    x.register_hook(lambda g: g + 1)
    (x * 1).sum().backward()
    close(x.grad, [3.])


def test_hook_handle_remove():
    x = jg.tensor([1., 2.], requires_grad=True)
    h = x * 1
    handle = h.register_hook(lambda g: g * 100)
    (h * 1).sum().backward(retain_graph=True)
    close(x.grad, [100., 100.])
    handle.remove()
    handle.remove()                      # removing twice is harmless
    x.grad = None
    (h * 1).sum().backward()
    close(x.grad, [1., 1.])


def test_hook_also_applies_to_autograd_grad():
    x = jg.tensor([1., 2.], requires_grad=True)
    x.register_hook(lambda g: g * 10)
    (g,) = autograd.grad((x * 3).sum(), x)
    close(g, [30., 30.])
    h = x * 2
    h.register_hook(lambda g: g + 100)
    (gh,) = autograd.grad((h * 3).sum(), h)
    close(gh, [103., 103.])


def test_hooks_fire_with_create_graph():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * x
    calls = []

    def hook(g):
        calls.append(g)
        return g * 2
    y.register_hook(hook)
    (g,) = autograd.grad(y.sum(), x, create_graph=True)
    assert len(calls) == 1
    close(g, [4., 8.])                   # 2 * 2x
    assert g.requires_grad
    (gg,) = autograd.grad(g.sum(), x)
    close(gg, [4., 4.])


def test_hook_changing_shape_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    x.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the size of value"):
        (x * 1).sum().backward()


def test_register_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        jg.ones(2).register_hook(lambda g: g)


def test_hook_matches_torch_order_with_retain_grad():
    torch = _torch()
    res = []
    for m in (torch, jg):
        x = m.tensor([1., 2.], requires_grad=True)
        h = x * 2
        h.retain_grad()
        h.register_hook(lambda g: g + 100)
        (h * 3).sum().backward()
        res.append((h.grad.numpy().copy(), x.grad.numpy().copy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a)


def test_node_hooks():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * 3
    seen = {}
    y.grad_fn.register_prehook(lambda gouts: seen.update(pre=gouts[0].numpy().copy()))
    y.grad_fn.register_hook(lambda gins, gouts: seen.update(post=gins[0].numpy().copy()))
    y.sum().backward()
    close(seen["pre"], [1., 1.])
    close(seen["post"], [3., 3.])


# ---- retain_grad / retains_grad --------------------------------------------------------------------------

def test_retain_grad():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * 2
    z = y * y
    assert not y.retains_grad
    y.retain_grad()
    z.retain_grad()
    assert y.retains_grad and z.retains_grad
    z.sum().backward()
    close(y.grad, [4., 8.])
    close(z.grad, [1., 1.])
    assert not y.grad.requires_grad


def test_retain_grad_accumulates():
    x = jg.tensor([1.], requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y * 3).sum().backward(retain_graph=True)
    (y * 3).sum().backward()
    close(y.grad, [6.])


def test_retain_grad_on_leaf_is_noop_and_no_grad_raises():
    x = jg.tensor([1.], requires_grad=True)
    x.retain_grad()
    assert not x.retains_grad            # torch: leaves report False
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        jg.ones(1).retain_grad()


def test_non_leaf_grad_access_warns():
    x = jg.tensor([1.], requires_grad=True)
    y = x * 2
    y.sum().backward()
    with pytest.warns(UserWarning, match="is not a leaf Tensor is being accessed"):
        assert y.grad is None


def test_retain_grad_with_create_graph_keeps_graph():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * x
    y.retain_grad()
    (y * y).sum().backward(create_graph=True)
    assert y.grad.requires_grad           # 2y, a function of x
    close(y.grad, [2., 8.])


# ---- is_leaf, requires_grad ------------------------------------------------------------------------------

def test_is_leaf_rules():
    a = jg.rand(3, requires_grad=True)
    assert a.is_leaf and a.grad_fn is None
    assert not (a + 2).is_leaf
    assert not a.to(jg.float64).is_leaf
    assert a.to(jg.float32).is_leaf       # no change: the same tensor
    d = jg.rand(3) + 2
    assert d.is_leaf                      # no grad required: a leaf by convention
    e = jg.rand(3).to(jg.float64).requires_grad_()
    assert e.is_leaf
    assert a.detach().is_leaf
    with jg.no_grad():
        assert (a * 2).is_leaf


def test_requires_grad_on_non_leaf():
    x = jg.tensor([1.], requires_grad=True)
    y = x * 2
    y.requires_grad_(True)                # allowed no-op
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        y.requires_grad_(False)


def test_requires_grad_on_integer_tensor_raises():
    with pytest.raises(RuntimeError, match="floating point"):
        jg.tensor([1, 2]).requires_grad_()


def test_integer_and_bool_results_never_require_grad():
    x = jg.tensor([1.5, -2.], requires_grad=True)
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    assert (x.long().grad_fn is None) and not x.long().requires_grad


# ---- grad_fn names and next_functions --------------------------------------------------------------------

@pytest.mark.parametrize("name,fn", [
    ("mul", lambda m, x, y: x * y), ("add", lambda m, x, y: x + y), ("sub", lambda m, x, y: x - y),
    ("div", lambda m, x, y: x / y), ("neg", lambda m, x, y: -x), ("sum", lambda m, x, y: x.sum()),
    ("exp", lambda m, x, y: x.exp()), ("log", lambda m, x, y: x.log()), ("sin", lambda m, x, y: x.sin()),
    ("cos", lambda m, x, y: x.cos()), ("tanh", lambda m, x, y: x.tanh()), ("sigmoid", lambda m, x, y: x.sigmoid()),
    ("relu", lambda m, x, y: x.relu()), ("sqrt", lambda m, x, y: x.sqrt()), ("abs", lambda m, x, y: x.abs()),
    ("pow", lambda m, x, y: x ** 2), ("clamp", lambda m, x, y: x.clamp(0.1, 0.5)),
    ("clone", lambda m, x, y: x.clone()), ("mm", lambda m, x, y: x @ y.T), ("view", lambda m, x, y: x.view(6)),
    ("reshape", lambda m, x, y: x.reshape(-1)), ("permute", lambda m, x, y: x.permute(1, 0)),
    ("expand", lambda m, x, y: x[m.tensor([0])].expand(4, 3)), ("cat", lambda m, x, y: m.cat([x, y])),
    ("where", lambda m, x, y: m.where(x > 0.5, x, y)), ("maximum", lambda m, x, y: m.maximum(x, y)),
    ("amax", lambda m, x, y: x.amax(0)), ("prod", lambda m, x, y: x.prod()),
    ("to", lambda m, x, y: x.to(m.float64)), ("reciprocal", lambda m, x, y: x.reciprocal()),
    ("erf", lambda m, x, y: x.erf()), ("index", lambda m, x, y: x[m.tensor([1, 0])]),
    ("sign", lambda m, x, y: x.sign()), ("minimum", lambda m, x, y: m.minimum(x, y)),
    ("flatten", lambda m, x, y: x.flatten()), ("contiguous", lambda m, x, y: x.T.contiguous()),
    ("radd", lambda m, x, y: 1 + x), ("rmul", lambda m, x, y: 2 * x), ("sum_all_keepdim", lambda m, x, y: x.sum()),
])
def test_grad_fn_names_match_torch(name, fn):
    torch = _torch()
    a = np.random.RandomState(0).rand(2, 3).astype(np.float32) + 0.1
    b = np.random.RandomState(1).rand(2, 3).astype(np.float32) + 0.1
    names = []
    for m in (torch, jg):
        x = m.tensor(a, requires_grad=True)
        y = m.tensor(b, requires_grad=True)
        names.append(fn(m, x, y).grad_fn.name())
    assert names[1] == names[0]


def test_grad_fn_names_fixed():
    x = jg.tensor([1., 2.], requires_grad=True)
    assert (x * 2).grad_fn.name() == "MulBackward0"
    assert (x + 2).grad_fn.name() == "AddBackward0"
    assert x.sum().grad_fn.name() == "SumBackward0"
    assert "MulBackward0" in repr((x * 2).grad_fn)
    assert "grad_fn=<MulBackward0>" in repr(x * 2)


def test_next_functions_structure():
    x = jg.tensor([1., 2.], requires_grad=True)
    c = jg.tensor([3., 4.])
    z = (x * c).sum()
    (mul, nr), = z.grad_fn.next_functions
    assert mul.name() == "MulBackward0" and nr == 0
    (acc, anr), (none, _) = mul.next_functions
    assert type(acc).__name__ == "AccumulateGrad" and acc.name() == "torch::autograd::AccumulateGrad"   # as torch
    assert acc.variable is x and anr == 0
    assert none is None                               # a constant: no edge
    # one AccumulateGrad per leaf, shared by every use
    w = x * x
    a1, a2 = w.grad_fn.next_functions
    assert a1[0] is a2[0] is acc


def test_next_functions_structure_matches_torch():
    torch = _torch()

    def describe(fn, depth=0):
        if fn is None:
            return None
        return (fn.name().replace("torch::autograd::", ""),
                tuple((describe(f, depth + 1), n) for f, n in fn.next_functions) if depth < 6 else ())

    shapes = []
    for m in (torch, jg):
        x = m.tensor([1., 2.], requires_grad=True)
        w = m.tensor([[1., 0.], [2., 1.]], requires_grad=True)
        c = m.tensor([3., 4.])
        y = ((w @ x) * c + x.exp() - 1).sum()
        shapes.append(describe(y.grad_fn))
    # torch names a matrix-vector product MvBackward0; jitgrad has one matmul primitive
    assert shapes[1] == tuple(shapes[0]) or str(shapes[1]).replace("MmBackward0", "MvBackward0") == str(shapes[0])


def test_output_nr_for_multi_output_function():
    class Split(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 + 2 * g2

    x = jg.tensor([1.], requires_grad=True)
    a, b = Split.apply(x)
    assert a.grad_fn is b.grad_fn
    assert a.output_nr == 0 and b.output_nr == 1
    (a.sum() + b.sum() * 10).backward()
    close(x.grad, [21.])


# ---- version counters and in-place checks ----------------------------------------------------------------

def test_version_counter_shared_by_views_and_detach():
    t = jg.zeros(4)
    v = t[1:3]
    r = t.reshape(2, 2)
    d = t.detach()
    v.add_(1)
    assert t._version == v._version == r._version == d._version == 1
    close(t, [0., 1., 1., 0.])
    d.mul_(2)
    assert t._version == 2
    close(r, [[0., 2.], [2., 0.]])


def test_data_has_its_own_version_counter_and_allows_inplace():
    torch = _torch()
    for m in (torch, jg):
        x = m.tensor([1., 2.], requires_grad=True)
        y = x.exp()
        y.data.mul_(2)                     # bypasses the checks (the point of .data)
        assert y._version == 0
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1., 2.]), rtol=1e-6)
        with m.no_grad():
            x.data.add_(1)
        x.data.add_(1)                     # no leaf error through .data
        np.testing.assert_allclose(x.detach().numpy(), [3., 4.])


def test_inplace_modified_saved_input_raises_torch_error():
    torch = _torch()
    msgs = []
    for m in (torch, jg):
        x = m.tensor([1., 2.], requires_grad=True)
        h = x * 1
        y = h * h
        h.add_(1)
        with pytest.raises(RuntimeError) as ei:
            y.sum().backward()
        msgs.append(str(ei.value))
    assert msgs[1].startswith(INPLACE)
    assert "is at version 1; expected version 0 instead" in msgs[1]
    assert "is at version 1; expected version 0 instead" in msgs[0]


def test_inplace_modified_saved_output_raises():
    x = jg.tensor([1., -2., 3.], requires_grad=True)
    y = x.exp()                        # ExpBackward0 saves its output
    y.mul_(2)
    with pytest.raises(RuntimeError, match=INPLACE) as ei:
        y.sum().backward()
    assert "output 0 of ExpBackward0" in str(ei.value)   # names the node that saved it, like torch
    y = x.sigmoid()
    z = y * 1
    y.zero_()
    with pytest.raises(RuntimeError, match=INPLACE):
        z.sum().backward()


def test_inplace_on_saved_constant_raises():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    c = jg.tensor([1., 2., 3.])
    y = x * c                          # c is saved for x's gradient
    c.add_(1)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


def test_inplace_on_input_not_saved_is_fine():
    # torch saves h for MulBackward0 only when c requires grad
    torch = _torch()
    grads = []
    for m in (torch, jg):
        x = m.tensor([1., 2., 3.], requires_grad=True)
        c = m.tensor([2., 3., 4.])
        h = x * 2
        y = h * c
        h.add_(1)
        y.sum().backward()
        grads.append(x.grad.numpy().copy())
    np.testing.assert_allclose(grads[1], grads[0])
    x = jg.tensor([1., 2.], requires_grad=True)
    W = jg.tensor([[1., 2.], [3., 4.]])
    h = x * 1
    y = h @ W                          # matmul with a constant W: h not saved
    h.mul_(5)
    y.sum().backward()
    close(x.grad, [3., 7.])
    a = x * 1
    b = a / jg.tensor([2., 4.])       # the numerator is not saved when the denominator needs no grad
    a.mul_(3)
    x.grad = None
    b.sum().backward()
    close(x.grad, [0.5, 0.25])


def test_inplace_on_non_leaf_not_saved_gives_right_gradients():
    x = jg.tensor([1., -2., 3.], requires_grad=True)
    y = x * 2
    y.add_(1)
    assert y.grad_fn.name() == "AddBackward0" and y._version == 1
    y.sum().backward()
    close(x.grad, [2., 2., 2.])

    x.grad = None
    y = x * 2
    y[0] = 0
    (y * y).sum().backward()
    close(x.grad, [0., -16., 24.])

    x.grad = None
    y = x * 2
    y.mul_(3)                           # MulBackward0 saves the scalar only
    y.sum().backward()
    close(x.grad, [6., 6., 6.])

    y = x * 2
    y.mul_(y)                           # y is also the saved "other": torch raises too
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


def test_masked_assignment_relu_pattern_matches_torch():
    torch = _torch()
    xd = np.array([1., -2., 3.], np.float32)
    Wd = np.array([[1., -1.], [2., 0.5], [-1., 1.]], np.float32)
    res = []
    for m in (torch, jg):
        x = m.tensor(xd, requires_grad=True)
        W = m.tensor(Wd, requires_grad=True)
        h = x @ W
        h[h < 0] = 0
        (h * m.tensor([1., 2.])).sum().backward()
        res.append((h.detach().numpy().copy(), x.grad.numpy().copy(), W.grad.numpy().copy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a)


def test_inplace_ops_on_non_leaf_match_torch():
    torch = _torch()
    data = np.array([0.5, -1.5, 2.5], np.float32)

    def f(m, x):
        y = x * 3
        y += 1
        y *= x
        y -= 2
        y /= 4
        y.clamp_(-1, 5)
        z = y * 1
        z.fill_(2.)                     # overwrites everything: no gradient flows through z
        w = x * 1
        w.copy_(y)
        return (y * y).sum() + z.sum() + w.sum()

    grads = []
    for m in (torch, jg):
        x = m.tensor(data, requires_grad=True)
        f(m, x).backward()
        grads.append(x.grad.numpy().copy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)


def test_inplace_with_grad_requiring_rhs_on_plain_tensor():
    x = jg.tensor([1., 2.], requires_grad=True)
    base = jg.zeros(2)
    base.add_(x)                        # base now depends on x
    assert base.requires_grad and not base.is_leaf
    (base * base).sum().backward()
    close(x.grad, [2., 4.])
    x.grad = None
    buf = jg.zeros(3)
    buf[1] = x[0]
    assert buf.grad_fn is not None
    (buf * jg.tensor([1., 5., 1.])).sum().backward()
    close(x.grad, [5., 0.])


def test_inplace_on_leaf_requiring_grad_raises_torch_text():
    for op in (lambda x: x.add_(1), lambda x: x.mul_(2), lambda x: x.zero_(), lambda x: x.fill_(3.),
               lambda x: x.copy_(jg.ones(2)), lambda x: x.clamp_(0, 1), lambda x: x.sub_(1), lambda x: x.div_(2)):
        x = jg.tensor([1., 2.], requires_grad=True)
        with pytest.raises(RuntimeError, match=LEAF_INPLACE):
            op(x)
        assert x._version == 0
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x += 1
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 5.


def test_inplace_on_view_of_leaf_raises():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an "
                                           "in-place operation."):
        x[0:2].add_(1)


def test_inplace_on_leaf_in_no_grad_is_allowed_and_bumps_version():
    x = jg.tensor([1., 2.], requires_grad=True)
    with jg.no_grad():
        x.add_(1)
        x[0] = 10.
        x.zero_()
    assert x._version == 3
    assert x.is_leaf and x.requires_grad


def test_inplace_on_detached_leaf_is_allowed():
    torch = _torch()
    for m in (torch, jg):
        x = m.tensor([1., 2., 3.], requires_grad=True)
        d = x.detach()
        d.add_(1)
        d[0] = 0.
        x.detach()[1:].mul_(2)
        np.testing.assert_allclose(x.detach().numpy(), [0., 6., 8.])


def test_saved_leaf_modified_through_detach_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x * x).sum()
    x.detach().add_(1)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.backward()


# ---- autograd.Function -----------------------------------------------------------------------------------

class MulAdd(Function):
    """out = a * b + k, with a non-tensor argument and the full ctx API."""

    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        ctx.tag = "muladd"
        return a * b + k

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        assert ctx.tag == "muladd"
        ga = g * b if ctx.needs_input_grad[0] else None
        gb = g * a if ctx.needs_input_grad[1] else None
        return ga, gb, None


def test_function_basic_and_needs_input_grad():
    a = jg.tensor([1., 2.], requires_grad=True)
    b = jg.tensor([3., 4.], requires_grad=True)
    y = MulAdd.apply(a, b, 5.0)
    close(y, [8., 13.])
    assert y.grad_fn.name() == "MulAddBackward"
    assert len(y.grad_fn.next_functions) == 3 and y.grad_fn.next_functions[2][0] is None
    assert y.grad_fn.needs_input_grad == (True, True, False)
    assert y.grad_fn.k == 5.0              # torch: the grad_fn is the ctx
    y.sum().backward()
    close(a.grad, [3., 4.])
    close(b.grad, [1., 2.])


def test_function_matches_torch():
    torch = _torch()

    class TMulAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            ctx.save_for_backward(a, b)
            return a * b + k

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a, None

    ad, bd = np.array([1., -2.]), np.array([0.5, 3.])
    at, bt = torch.tensor(ad, requires_grad=True), torch.tensor(bd, requires_grad=True)
    (TMulAdd.apply(at, bt, 2.0) ** 2).sum().backward()
    aj, bj = jg.tensor(ad, requires_grad=True), jg.tensor(bd, requires_grad=True)
    (MulAdd.apply(aj, bj, 2.0) ** 2).sum().backward()
    np.testing.assert_allclose(aj.grad.numpy(), at.grad.numpy())
    np.testing.assert_allclose(bj.grad.numpy(), bt.grad.numpy())


def test_function_double_backward_through_jitgrad_ops():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x * x

    x = jg.tensor([2.], dtype=jg.float64, requires_grad=True)
    (g,) = autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    close(g, [12.])
    (gg,) = autograd.grad(g.sum(), x, create_graph=True)
    close(gg, [12.])                      # 6x
    (ggg,) = autograd.grad(gg.sum(), x)
    close(ggg, [6.])


def test_once_differentiable():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @autograd.function.once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    x = jg.tensor([3.], requires_grad=True)
    (g,) = autograd.grad(Sq.apply(x).sum(), x, create_graph=True)
    close(g, [6.])
    assert not g.requires_grad
    assert autograd.once_differentiable is autograd.function.once_differentiable


def test_function_wrong_number_of_gradients():
    class Two(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    a = jg.ones(2, requires_grad=True)
    b = jg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^function TwoBackward returned an incorrect number of gradients "
                                           r"\(expected 2, got 1\)"):
        Two.apply(a, b).sum().backward()


def test_function_extra_none_gradients_are_allowed():
    class One(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None, None

    a = jg.ones(2, requires_grad=True)
    One.apply(a).sum().backward()
    close(a.grad, [2., 2.])


def test_function_wrong_gradient_shape():
    class Shape(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return jg.ones(3)

    a = jg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^Function ShapeBackward returned an invalid gradient at index 0 - got "
                                           r"\[3\] but expected shape compatible with \[2\]"):
        Shape.apply(a).sum().backward()


def test_function_broadcastable_gradient_is_summed_like_torch():
    class Bcast(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return jg.ones(4, 2)

    a = jg.ones(2, requires_grad=True)
    Bcast.apply(a).sum().backward()
    close(a.grad, [4., 4.])


def test_function_gradient_for_non_tensor_input_raises():
    class NT(Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, jg.ones(1)

    a = jg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned a gradient different than None at position 2, but the "
                                           "corresponding forward input was not a Variable"):
        NT.apply(a, 2.0).sum().backward()


def test_function_multiple_outputs_and_materialize_grads():
    seen = []

    class Two(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2, a * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append(g2)
            return g1 * 2 + g2 * 3

    a = jg.ones(2, requires_grad=True)
    o1, o2 = Two.apply(a)
    o1.sum().backward()
    close(a.grad, [2., 2.])
    assert isinstance(seen[0], jg.Tensor)          # materialized zeros
    close(seen[0], [0., 0.])


def test_function_set_materialize_grads_false():
    seen = []

    class Two(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.set_materialize_grads(False)
            return a * 2, a * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append(g2)
            out = g1 * 2 if g1 is not None else None
            if g2 is not None:
                out = g2 * 3 if out is None else out + g2 * 3
            return out

    a = jg.ones(2, requires_grad=True)
    o1, o2 = Two.apply(a)
    o1.sum().backward()
    assert seen == [None]
    close(a.grad, [2., 2.])


def test_function_non_tensor_outputs():
    class NT(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2, 7, "s"

        @staticmethod
        def backward(ctx, g, g2, g3):
            assert g2 is None and g3 is None
            return g

    a = jg.ones(2, requires_grad=True)
    t, n, s = NT.apply(a)
    assert (n, s) == (7, "s")
    t.sum().backward()
    close(a.grad, [1., 1.])


def test_function_mark_non_differentiable():
    class MaxIdx(Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            v = x.amax()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x, idx)
            return v, idx

        @staticmethod
        def backward(ctx, gv, gidx):
            x, idx = ctx.saved_tensors
            out = jg.zeros(x.shape[0])
            out[idx] = gv
            return out

    x = jg.tensor([1., 5., 2.], requires_grad=True)
    v, idx = MaxIdx.apply(x)
    assert v.requires_grad and not idx.requires_grad
    v.backward()
    close(x.grad, [0., 1., 0.])


def test_function_mark_non_differentiable_float_output():
    class F(Function):
        @staticmethod
        def forward(ctx, x):
            a, b = x * 2, x * 3
            ctx.mark_non_differentiable(b)
            return a, b

        @staticmethod
        def backward(ctx, ga, gb):
            assert gb is not None and not gb.numpy().any()
            return ga * 2

    x = jg.ones(2, requires_grad=True)
    a, b = F.apply(x)
    assert a.requires_grad and not b.requires_grad
    (a.sum() + b.sum()).backward()
    close(x.grad, [2., 2.])


def test_function_mark_dirty():
    class Double_(Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    a = jg.tensor([1., 2.], requires_grad=True)
    h = a + 0
    v0 = h._version
    out = Double_.apply(h)
    assert out is h and h._version == v0 + 1
    assert h.grad_fn.name() == "Double_Backward"
    close(h, [2., 4.])
    (h * 1).sum().backward()
    close(a.grad, [2., 2.])


def test_function_mark_dirty_invalidates_earlier_saves():
    class Double_(Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    a = jg.tensor([1., 2.], requires_grad=True)
    h = a * 1
    y = h * h                                   # saves h
    Double_.apply(h)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


def test_function_saved_tensors_freed_after_backward():
    class Sv(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            a, = ctx.saved_tensors
            return g * 2

    x = jg.tensor([1.], requires_grad=True)
    y = Sv.apply(x)
    assert y.grad_fn.saved_tensors[0] is x
    y.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.grad_fn.saved_tensors


def test_function_without_saved_tensors_can_backward_twice():
    class Ns(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = jg.tensor([1.], requires_grad=True)
    y = Ns.apply(x)
    y.sum().backward()
    y.sum().backward()
    close(x.grad, [4.])


def test_function_returning_its_input():
    class Ident(Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 5

    a = jg.tensor([1., 2.], requires_grad=True)
    o = Ident.apply(a)
    assert o is not a and o.grad_fn.name() == "IdentBackward"
    o.sum().backward()
    close(a.grad, [5., 5.])
    with jg.no_grad():
        o = Ident.apply(a)
    assert not o.requires_grad


def test_function_in_no_grad_and_without_grad_inputs():
    a = jg.tensor([1.], requires_grad=True)
    with jg.no_grad():
        assert not MulAdd.apply(a, a, 1.0).requires_grad
    assert not MulAdd.apply(jg.ones(1), jg.ones(1), 1.0).requires_grad


def test_function_setup_context_style():
    class Sq(Function):
        @staticmethod
        def forward(x, k):
            return x * x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.save_for_backward(x)
            ctx.k = k

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g * ctx.k, None

    x = jg.tensor([3.], requires_grad=True)
    Sq.apply(x, 2.0).sum().backward()
    close(x.grad, [12.])


def test_function_instantiation_is_an_error():
    # as torch: instantiating warns, calling the instance (a legacy Function) is the error
    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        f = MulAdd()
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward method is deprecated"):
        f(jg.ones(1))


def test_function_error_in_backward_propagates():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            raise ValueError("nope")

    with pytest.raises(ValueError, match="^nope$"):
        Bad.apply(jg.ones(1, requires_grad=True)).sum().backward()


# ---- grad modes ------------------------------------------------------------------------------------------

def test_no_grad_forms():
    x = jg.tensor([1.], requires_grad=True)
    with jg.no_grad():
        assert not jg.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert jg.is_grad_enabled()

    @jg.no_grad()
    def f(x):
        return x * 2

    @jg.no_grad
    def g(x):
        return x * 2
    assert not f(x).requires_grad and not g(x).requires_grad
    assert jg.is_grad_enabled()


def test_enable_grad_forms():
    x = jg.tensor([1.], requires_grad=True)

    @jg.enable_grad()
    def f(x):
        return x * 2

    @jg.enable_grad
    def g(x):
        return x * 2
    with jg.no_grad():
        assert f(x).requires_grad and g(x).requires_grad
        assert not jg.is_grad_enabled()
        with jg.enable_grad():
            assert jg.is_grad_enabled()
        assert not jg.is_grad_enabled()


def test_set_grad_enabled_forms():
    x = jg.tensor([1.], requires_grad=True)
    jg.set_grad_enabled(False)
    assert not jg.is_grad_enabled() and not (x * 2).requires_grad
    jg.set_grad_enabled(True)
    assert jg.is_grad_enabled()
    with jg.set_grad_enabled(False):
        assert not jg.is_grad_enabled()
    assert jg.is_grad_enabled()
    with jg.no_grad():
        with jg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not jg.is_grad_enabled()


def test_set_grad_enabled_decorator_only_applies_to_calls():
    x = jg.tensor([1.], requires_grad=True)

    @jg.set_grad_enabled(False)
    def f(x):
        return x * 2
    assert jg.is_grad_enabled()            # decorating did not switch grad off
    assert not f(x).requires_grad
    assert jg.is_grad_enabled()
    with jg.no_grad():
        @jg.set_grad_enabled(True)
        def g(x):
            return x * 2
        assert not jg.is_grad_enabled()
        assert g(x).requires_grad


def test_grad_mode_restored_after_exception():
    with pytest.raises(KeyError):
        with jg.no_grad():
            raise KeyError

    @jg.no_grad()
    def f():
        raise KeyError
    with pytest.raises(KeyError):
        f()
    assert jg.is_grad_enabled()


def test_no_grad_decorates_generators_and_methods():
    @jg.no_grad()
    def gen():
        yield jg.is_grad_enabled()
        yield jg.is_grad_enabled()
    assert list(gen()) == [False, False]
    assert jg.is_grad_enabled()

    class M:
        @jg.no_grad()
        def step(self, x):
            return x * 2
    assert not M().step(jg.ones(1, requires_grad=True)).requires_grad


def test_grad_mode_is_thread_local():
    x = jg.tensor([1.], requires_grad=True)
    results = {}
    barrier = threading.Barrier(2)

    def worker():
        barrier.wait()
        results["enabled"] = jg.is_grad_enabled()
        y = (x * 3).sum()
        results["rg"] = y.requires_grad
        (g,) = autograd.grad(y, x)
        results["g"] = float(g)
        with jg.no_grad():
            barrier.wait()              # main thread checks its own state meanwhile
            barrier.wait()

    with jg.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        barrier.wait()
        barrier.wait()
        assert not jg.is_grad_enabled()
        assert not (x * 2).requires_grad
        barrier.wait()
        t.join()
    assert results == {"enabled": True, "rg": True, "g": 3.0}
    assert jg.is_grad_enabled()


def test_main_thread_unaffected_by_worker_no_grad():
    x = jg.tensor([1.], requires_grad=True)
    ev_in, ev_out = threading.Event(), threading.Event()

    def worker():
        with jg.no_grad():
            ev_in.set()
            ev_out.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    ev_in.wait(5)
    assert jg.is_grad_enabled() and (x * 2).requires_grad
    ev_out.set()
    t.join()


def test_inference_mode():
    x = jg.tensor([1., 2.], requires_grad=True)
    with jg.inference_mode():
        assert not jg.is_grad_enabled() and jg.is_inference_mode_enabled()
        y = x * 2
        assert not y.requires_grad and y.is_inference()
        with jg.enable_grad():
            assert not (x * 2).requires_grad          # inference mode wins, as in torch
        with jg.inference_mode(False):
            assert jg.is_grad_enabled() and not jg.is_inference_mode_enabled()
    assert jg.is_grad_enabled() and not jg.is_inference_mode_enabled()
    assert not x.is_inference()
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (y * x).sum()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        y.add_(1)
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor outside InferenceMode"):
        y.requires_grad_()
    z = y.clone()
    assert not z.is_inference()
    (z * x).sum().backward()
    close(x.grad, [2., 4.])


def test_inference_mode_decorator_forms():
    x = jg.tensor([1.], requires_grad=True)

    @jg.inference_mode
    def f(x):
        return x * 2

    @jg.inference_mode()
    def g(x):
        return x * 2

    @jg.inference_mode(False)
    def h(x):
        return x * 2
    assert f(x).is_inference() and not f(x).requires_grad
    assert g(x).is_inference()
    assert h(x).requires_grad and not h(x).is_inference()
    assert jg.is_grad_enabled() and not jg.is_inference_mode_enabled()


def test_backward_restores_grad_mode():
    x = jg.tensor([1.], requires_grad=True)
    (x * 2).sum().backward(create_graph=True)
    assert jg.is_grad_enabled()
    with jg.no_grad():
        y = None
    y = (x * 2).sum()
    with jg.no_grad():
        y.backward()                        # backward works inside no_grad
        assert not jg.is_grad_enabled()
    assert jg.is_grad_enabled()


# ---- Variable --------------------------------------------------------------------------------------------

def test_variable_shim():
    t = jg.tensor([1., 2.])
    v = autograd.Variable(t)
    assert isinstance(v, jg.Tensor) and not v.requires_grad
    v2 = autograd.Variable(t, requires_grad=True)
    assert v2.requires_grad and v2.is_leaf and not t.requires_grad
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        autograd.Variable([1., 2.])


# ---- graph traversal -------------------------------------------------------------------------------------

def test_grad_on_deep_graph_visits_each_node_once(monkeypatch):
    # it was quadratic in the depth when inputs were given: count the work instead of timing it
    from jitgrad.runtime.backward import engine
    x = jg.tensor([1.], requires_grad=True)
    a = jg.tensor([0.5], requires_grad=True)
    y = x
    for _ in range(2000):
        y = y * a + (y * 0.1).tanh()
    calls = []
    real = engine._apply_node
    monkeypatch.setattr(engine, "_apply_node", lambda n, g, c: calls.append(n) or real(n, g, c))
    gx, ga = autograd.grad(y.sum(), [x, a])
    assert len(calls) == len(set(calls)) <= 5 * 2000 + 2
    assert gx.shape == (1,) and ga.shape == (1,)


def test_grad_with_intermediate_inputs_on_dag_matches_torch():
    torch = _torch()
    data = np.array([0.3, -0.4, 0.9])
    res = []
    for m in (torch, jg):
        x = m.tensor(data, requires_grad=True)
        w = m.tensor([1.5], dtype=m.float64, requires_grad=True)
        hs = [x]
        for k in range(6):
            h = hs[-1]
            hs.append((h * w).sin() + h * 0.5 + (hs[k // 2] * 0.1 if k % 2 else 0.))
        out = (hs[-1] ** 2).sum() + hs[3].sum()
        gs = m.autograd.grad(out, [hs[2], w, x, hs[4]])
        res.append([g.numpy() for g in gs])
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, rtol=1e-10)


# ---- views of a base modified in place -------------------------------------------------------------------

def _view_cases(m):
    out = {}
    x = m.tensor([1., 2., 3.], requires_grad=True)
    y = x * 2
    v = y[0:2]
    y.mul_(3)                                       # v now holds 6x: its gradient must say so
    v.sum().backward()
    out["slice"] = x.grad.numpy().copy()
    x.grad = None
    y = x * 2
    v = y.reshape(3, 1)
    y.mul_(3)
    v.sum().backward()
    out["reshape"] = x.grad.numpy().copy()
    x.grad = None
    y = x * 2
    v = y[0:2]
    y[0] = 100.
    v.sum().backward()
    out["setitem"] = x.grad.numpy().copy()
    x.grad = None
    y = x * 2
    v = y[0:2]
    w = v.reshape(2, 1)                             # a view of a view
    y.mul_(3)
    w.sum().backward()
    out["view_of_view"] = x.grad.numpy().copy()
    x.grad = None
    y = x * 2
    v = y[0:2]
    z = v * 2                                       # used before the in-place: keeps the old history
    y.mul_(3)
    (z.sum() + v.sum()).backward()
    out["before_and_after"] = x.grad.numpy().copy()
    x.grad = None
    y = x * 2
    v = y[0:2]
    v.retain_grad()
    y.mul_(3)
    v.sum().backward()
    out["retain_grad"] = (x.grad.numpy().copy(), v.grad.numpy().copy())
    x.grad = None
    y = x * 2
    v = y[0:2]
    y.mul_(3)
    out["root"] = m.autograd.grad(v, x, m.ones(2))[0].numpy().copy()
    x.grad = None
    y = x * 2
    v = y[0:2]
    with m.no_grad():
        y.mul_(3)                                   # not recorded: v keeps its history
    v.sum().backward()
    out["no_grad"] = x.grad.numpy().copy()
    return out


def test_view_of_base_modified_in_place_differentiates_current_value():
    res = _view_cases(jg)
    close(res["slice"], [6., 6., 0.])
    close(res["setitem"], [0., 2., 0.])
    close(res["before_and_after"], [10., 10., 0.])
    close(res["no_grad"], [2., 2., 0.])


def test_view_of_base_modified_in_place_matches_torch():
    torch = _torch()
    rt, rj = _view_cases(torch), _view_cases(jg)
    assert rt.keys() == rj.keys()
    for k in rt:
        a, b = (rt[k], rj[k]) if isinstance(rt[k], tuple) else ((rt[k],), (rj[k],))
        for p, q in zip(a, b):
            np.testing.assert_allclose(q, p, err_msg=k)


def test_reentrant_backward_inside_function_backward():
    # checkpointing pattern: a custom backward recomputes the forward and calls autograd.grad
    class Ckpt(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin() * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            with jg.enable_grad():
                xd = x.detach().requires_grad_()
                y = xd.sin() * xd
            (gx,) = autograd.grad(y, xd, g)
            return gx

    data = np.array([0.5, 1.0])
    x = jg.tensor(data, requires_grad=True)
    Ckpt.apply(x).sum().backward()
    close(x.grad, np.cos(data) * data + np.sin(data))
    assert jg.is_grad_enabled()
