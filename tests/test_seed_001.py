"""Every example and documented rule of seed 001 (the torch.autograd reference), adapted to ``import jitgrad as jg``.

Where the seed's example uses an integer tensor with ``requires_grad=True`` (which current PyTorch rejects) the
tests use a float tensor; where it uses ``.cuda()`` the same ``is_leaf`` rule is shown with a differentiable op
(``.to(jg.float64)``, ``+ 2``), and ``.cuda()`` is tested separately to raise a clear error.
"""
import threading
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import autograd
from jitgrad.autograd import Function, Variable


def close(a, b, **kw):
    a = a.detach().numpy() if isinstance(a, jg.Tensor) else np.asarray(a)
    np.testing.assert_allclose(a, np.asarray(b, dtype=a.dtype), rtol=1e-6, atol=1e-7, **kw)


# ---- torch.autograd.backward ------------------------------------------------------------------------------

def test_backward_sums_gradients_into_leaves():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    autograd.backward([(x * x).sum()])
    close(x.grad, [2., 4., 6.])
    # "This function accumulates gradients in the leaves - you might need to zero them before calling it."
    autograd.backward([(x * 3).sum()])
    close(x.grad, [5., 7., 9.])


def test_backward_non_scalar_needs_grad_tensors():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        autograd.backward([y])
    autograd.backward([y], grad_tensors=[jg.tensor([1., 0.5, 0.])])
    close(x.grad, [2., 1., 0.])


def test_backward_several_tensors_with_none_for_scalars():
    x = jg.tensor([1., 2.], requires_grad=True)
    a = (x * x).sum()          # scalar: None is acceptable
    b = x * 10                 # non-scalar: needs a vector
    autograd.backward([a, b], grad_tensors=[None, jg.tensor([1., 1.])])
    close(x.grad, [12., 14.])


def test_backward_none_for_tensor_that_does_not_require_grad_is_error_free_when_alone():
    x = jg.tensor([1., 2.], requires_grad=True)
    autograd.backward((x * 2).sum(), grad_tensors=None)    # a single tensor, not a sequence
    close(x.grad, [2., 2.])


def test_backward_grad_variables_is_deprecated_alias():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.warns(FutureWarning):
        autograd.backward([x * 2], grad_variables=[jg.tensor([1., 3.])])
    close(x.grad, [2., 6.])


def test_backward_retain_graph_defaults_to_create_graph():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x * x).sum()
    autograd.backward([y], create_graph=True)        # retain_graph defaults to True here
    autograd.backward([y], create_graph=True)
    close(x.grad, [4., 8.])
    assert x.grad.requires_grad                      # the derivative has a graph
    z = (x * x).sum()
    autograd.backward([z])                           # retain_graph defaults to False: graph freed
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        autograd.backward([z])


def test_backward_retain_graph_true_allows_second_pass():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x * x).sum()
    autograd.backward([y], retain_graph=True)
    autograd.backward([y])
    close(x.grad, [4., 8.])
    assert not x.grad.requires_grad


def test_backward_create_graph_builds_derivative_graph():
    x = jg.tensor(2., requires_grad=True)
    y = x ** 3
    y.backward(create_graph=True)
    g = x.grad                                        # 3x^2 = 12, with a graph
    assert g.requires_grad and g.grad_fn is not None
    close(g, 12.)
    (g2,) = autograd.grad(g, x)                       # 6x = 12
    close(g2, 12.)


# ---- torch.autograd.grad ----------------------------------------------------------------------------------

def test_grad_returns_and_does_not_accumulate():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    y = (x ** 2).sum()
    (g,) = autograd.grad(y, x)
    close(g, [2., 4., 6.])
    assert x.grad is None                             # "(and not accumulated into .grad)"


def test_grad_outputs_is_the_vector_of_the_vjp():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    y = x * x
    (g,) = autograd.grad([y], [x], grad_outputs=[jg.tensor([1., 0., 2.])])
    close(g, [2., 0., 12.])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        autograd.grad(x * x, x)


def test_grad_outputs_none_for_scalar_outputs():
    x = jg.tensor([1., 2.], requires_grad=True)
    a = (x * x).sum()
    b = x * 3
    (g,) = autograd.grad([a, b], [x], grad_outputs=[None, jg.tensor([1., 1.])])
    close(g, [5., 7.])


def test_grad_allow_unused():
    x = jg.tensor([1., 2.], requires_grad=True)
    unused = jg.tensor([5.], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        autograd.grad(y, [x, unused], retain_graph=True)
    gx, gu = autograd.grad(y, [x, unused], allow_unused=True)
    close(gx, [2., 2.])
    assert gu is None


def test_grad_retain_graph_defaults_to_create_graph():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = (x * x).sum()
    autograd.grad(y, x, create_graph=True)
    autograd.grad(y, x)                               # graph was retained (create_graph=True)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        autograd.grad(y, x)                           # ... but not by the call before


def test_grad_create_graph_higher_order():
    x = jg.tensor([0.5, 1.5], requires_grad=True)
    y = x.sin().sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    close(g, np.cos([0.5, 1.5]).astype(np.float32))
    (g2,) = autograd.grad(g.sum(), x)
    close(g2, -np.sin([0.5, 1.5]).astype(np.float32))


def test_grad_only_inputs_is_deprecated_and_ignored():
    x = jg.tensor([1., 2.], requires_grad=True)
    w = jg.tensor([3., 4.], requires_grad=True)
    y = (x * w).sum()
    with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
        (g,) = autograd.grad(y, x, only_inputs=False)
    close(g, [3., 4.])
    assert w.grad is None and x.grad is None


def test_grad_of_output_not_requiring_grad_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        autograd.grad(jg.ones(2).sum(), x)


def test_grad_wrt_input_not_requiring_grad_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require grad"):
        autograd.grad((x * 2).sum(), jg.ones(2))


# ---- no_grad / enable_grad / set_grad_enabled -------------------------------------------------------------

def test_no_grad_context_manager_example():
    x = jg.tensor([1.], requires_grad=True)
    with jg.no_grad():
        y = x * 2
    assert y.requires_grad is False


def test_no_grad_decorator_example():
    x = jg.tensor([1.], requires_grad=True)

    @jg.no_grad()
    def doubler(x):
        return x * 2
    z = doubler(x)
    assert z.requires_grad is False
    assert jg.is_grad_enabled()


def test_no_grad_is_in_autograd_namespace():
    assert autograd.no_grad is jg.no_grad
    assert autograd.enable_grad is jg.enable_grad
    assert autograd.set_grad_enabled is jg.set_grad_enabled


def test_no_grad_has_no_effect_inside_enable_grad_and_vice_versa():
    x = jg.tensor([1.], requires_grad=True)
    with jg.enable_grad():
        with jg.no_grad():
            assert (x * 2).requires_grad is False
        assert (x * 2).requires_grad is True


def test_enable_grad_example():
    x = jg.tensor([1.], requires_grad=True)
    with jg.no_grad():
        with jg.enable_grad():
            y = x * 2
    assert y.requires_grad is True
    y.backward()                        # a one-element tensor: implicit gradient of ones
    close(x.grad, [2.])


def test_enable_grad_decorator_example():
    x = jg.tensor([1.], requires_grad=True)

    @jg.enable_grad()
    def doubler(x):
        return x * 2
    with jg.no_grad():
        z = doubler(x)
        assert not jg.is_grad_enabled()
    assert z.requires_grad is True


def test_set_grad_enabled_context_manager_example():
    x = jg.tensor([1.], requires_grad=True)
    is_train = False
    with jg.set_grad_enabled(is_train):
        y = x * 2
    assert y.requires_grad is False
    assert jg.is_grad_enabled()


def test_set_grad_enabled_plain_call_example():
    x = jg.tensor([1.], requires_grad=True)
    jg.set_grad_enabled(True)
    y = x * 2
    assert y.requires_grad is True
    jg.set_grad_enabled(False)
    y = x * 2
    assert y.requires_grad is False
    assert not jg.is_grad_enabled()
    jg.set_grad_enabled(True)
    assert jg.is_grad_enabled()


def test_set_grad_enabled_false_has_no_effect_inside_enable_grad_block_it_wraps():
    x = jg.tensor([1.], requires_grad=True)
    with jg.set_grad_enabled(False):
        with jg.enable_grad():
            assert (x * 2).requires_grad


def test_grad_modes_are_thread_local():
    x = jg.tensor([1.], requires_grad=True)
    seen = {}

    def worker():
        seen["enabled"] = jg.is_grad_enabled()
        seen["rg"] = (x * 2).requires_grad

    with jg.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert not jg.is_grad_enabled()
    assert seen == {"enabled": True, "rg": True}


# ---- in-place correctness checks --------------------------------------------------------------------------

def test_inplace_on_saved_tensor_raises_at_backward():
    x = jg.tensor([1., 2.], requires_grad=True)
    h = x * 1
    y = h.exp()                         # ExpBackward0 saves its output
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_saved_input_raises_at_backward():
    x = jg.tensor([1., 2.], requires_grad=True)
    h = x * 1
    y = (h * h).sum()                   # MulBackward0 saves h
    h.mul_(2)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been "
                                           "modified by an inplace operation"):
        y.backward()


def test_no_error_means_gradients_are_correct():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * 2
    y.add_(1)                           # y is not saved by anything
    z = (y * y).sum()
    z.backward()
    close(x.grad, 2 * 2 * (np.array([1., 2.]) * 2 + 1))


def test_inplace_on_leaf_requiring_grad_raises():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place "
                                           "operation."):
        x.add_(1)
    with jg.no_grad():
        x.add_(1)                       # allowed in no_grad (how optimisers update parameters)
    close(x.detach(), [2., 3.])


def test_version_counter_counts_inplace_ops():
    t = jg.zeros(3)
    assert t._version == 0
    t.add_(1)
    t.mul_(2)
    t[0] = 5.
    assert t._version == 3


# ---- Variable (deprecated) --------------------------------------------------------------------------------

def test_variable_returns_tensor():
    t = jg.ones(3)
    v = Variable(t)
    assert isinstance(v, jg.Tensor)
    assert v.requires_grad is False
    close(v, [1., 1., 1.])


def test_variable_with_requires_grad():
    t = jg.ones(3)
    v = Variable(t, requires_grad=True)
    assert isinstance(v, jg.Tensor)
    assert v.requires_grad and v.is_leaf
    assert not t.requires_grad          # as in torch: the argument itself is left alone
    (v * 2).sum().backward()
    close(v.grad, [2., 2., 2.])


def test_variable_shares_storage_and_data_is_tensor_data():
    t = jg.ones(3)
    v = Variable(t, requires_grad=True)
    t[0] = 5.
    close(v.detach(), [5., 1., 1.])
    d = v.data
    assert isinstance(d, jg.Tensor) and not d.requires_grad
    close(d, [5., 1., 1.])


def test_variable_methods_are_tensor_methods():
    v = Variable(jg.tensor([1., 2.]), requires_grad=True)
    y = v * v
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    close(v.grad, [20., 40.])
    assert not v.detach().requires_grad


def test_factories_take_requires_grad():
    t = jg.randn((2, 3, 4), requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.shape == (2, 3, 4)
    for f in (jg.zeros, jg.ones, jg.rand, jg.randn):
        assert f(2, 3, requires_grad=True).requires_grad


# ---- Tensor autograd attributes ---------------------------------------------------------------------------

def test_grad_is_none_by_default_then_accumulates():
    x = jg.tensor([1., 2.], requires_grad=True)
    assert x.grad is None
    (x * 3).sum().backward()
    close(x.grad, [3., 3.])
    (x * 3).sum().backward()
    close(x.grad, [6., 6.])


def test_requires_grad_attribute():
    assert not jg.ones(2).requires_grad
    x = jg.ones(2, requires_grad=True)
    assert x.requires_grad
    assert (x * 2).requires_grad
    assert not (jg.ones(2) * 2).requires_grad


def test_requires_grad_does_not_mean_grad_is_populated():
    x = jg.ones(2, requires_grad=True)
    y = x * 2
    assert y.requires_grad
    y.sum().backward()
    with pytest.warns(UserWarning, match="is not a leaf Tensor"):
        assert y.grad is None


def test_is_leaf_a_user_created_tensor_requiring_grad():
    a = jg.rand(10, requires_grad=True)
    assert a.is_leaf


def test_is_leaf_b_result_of_a_cast_of_a_tensor_requiring_grad():
    # seed: torch.rand(10, requires_grad=True).cuda() -> not a leaf (created by the device cast)
    b = jg.rand(10, requires_grad=True).to(jg.float64)
    assert not b.is_leaf
    assert b.grad_fn.name() == "ToCopyBackward0"


def test_is_leaf_c_result_of_addition():
    c = jg.rand(10, requires_grad=True) + 2
    assert not c.is_leaf
    assert c.grad_fn.name() == "AddBackward0"


def test_is_leaf_d_no_grad_means_leaf_even_after_ops():
    # seed: torch.rand(10).cuda() -> leaf (doesn't require grad, no tracked operation created it)
    d = jg.rand(10).to(jg.float64)
    assert d.is_leaf and d.grad_fn is None
    assert (jg.rand(10) + 2).is_leaf


def test_is_leaf_e_requires_grad_set_after_ops():
    # seed: torch.rand(10).cuda().requires_grad_() -> leaf
    e = jg.rand(10).to(jg.float64).requires_grad_()
    assert e.is_leaf and e.requires_grad


def test_is_leaf_f_created_with_requires_grad_and_device():
    # seed: torch.rand(10, requires_grad=True, device="cuda") -> leaf
    f = jg.rand(10, requires_grad=True, dtype=jg.float64)
    assert f.is_leaf
    g = jg.zeros(10, requires_grad=True, device="cpu")
    assert g.is_leaf


def test_only_leaves_get_grad_populated():
    a = jg.rand(10, requires_grad=True)
    c = a + 2
    (c * c).sum().backward()
    assert a.grad is not None
    with pytest.warns(UserWarning):
        assert c.grad is None


def test_cuda_raises_a_clear_error():
    x = jg.rand(3)
    with pytest.raises(RuntimeError, match="CUDA"):
        x.cuda()
    with pytest.raises(RuntimeError, match="CUDA"):
        jg.rand(3, requires_grad=True).cuda()
    with pytest.raises(RuntimeError, match="CUDA"):
        jg.rand(3, device="cuda")


# ---- Tensor.backward --------------------------------------------------------------------------------------

def test_tensor_backward_non_scalar_requires_gradient():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * x
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(jg.tensor([1., 1.]))
    close(x.grad, [2., 4.])


def test_tensor_backward_gradient_requiring_grad_is_detached_unless_create_graph():
    x = jg.tensor([1., 2.], requires_grad=True)
    v = jg.tensor([1., 1.], requires_grad=True)
    (x * 3).backward(v)
    assert not x.grad.requires_grad
    assert v.grad is None
    x.grad = None
    (x * 3).backward(v, create_graph=True)
    assert x.grad.requires_grad        # d(x.grad)/dv exists
    x.grad.sum().backward()
    close(v.grad, [3., 3.])


def test_tensor_backward_retain_graph_and_create_graph():
    x = jg.tensor(3., requires_grad=True)
    y = x * x
    y.backward(retain_graph=True)
    y.backward()
    close(x.grad, 12.)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    x.grad = None
    y = x * x * x
    y.backward(create_graph=True)
    y.backward()                         # retained because create_graph=True
    close(x.grad.detach(), 54.)


def test_tensor_backward_gradient_shape_mismatch():
    x = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(jg.ones(3))


# ---- detach / detach_ -------------------------------------------------------------------------------------

def test_detach_never_requires_grad():
    x = jg.tensor([1., 2.], requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert not (d * 2).requires_grad


def test_detach_shares_storage_both_ways():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    d = x.detach()
    d[0] = 10.                                   # an in-place change of the detached tensor ...
    close(x.detach(), [10., 2., 3.])             # ... is seen by the original
    d.add_(1)
    close(x.detach(), [11., 3., 4.])
    with jg.no_grad():
        x.mul_(2)
    close(d, [22., 6., 8.])


def test_detach_shares_version_counter_and_triggers_checks():
    x = jg.tensor([1., 2.], requires_grad=True)
    h = x * 1
    y = h.exp()
    d = y.detach()
    v0 = y._version
    assert d._version == v0
    d.add_(1)                                    # modifies the saved output of ExpBackward0 through d
    assert y._version == v0 + 1 == d._version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_detach_inplace_makes_a_leaf():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * 2
    r = y.detach_()
    assert r is y
    assert y.is_leaf and not y.requires_grad and y.grad_fn is None
    close(y, [2., 4.])


def test_detach_inplace_refuses_views():
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    v = (x * 1)[0:2]
    with pytest.raises(RuntimeError, match="Can't detach views in-place. Use detach\\(\\) instead."):
        v.detach_()


# ---- register_hook / retain_grad --------------------------------------------------------------------------

def test_register_hook_example():
    v = jg.tensor([0., 0., 0.], requires_grad=True)
    h = v.register_hook(lambda grad: grad * 2)   # double the gradient
    v.backward(jg.tensor([1., 2., 3.]))
    close(v.grad, [2., 4., 6.])
    h.remove()                                   # removes the hook
    v.grad = None
    v.backward(jg.tensor([1., 2., 3.]))
    close(v.grad, [1., 2., 3.])


def test_hook_is_called_every_time_and_returning_none_keeps_grad():
    x = jg.tensor([1., 2.], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(g.detach().numpy().copy()))
    (x * 3).sum().backward()
    (x * 5).sum().backward()
    assert len(calls) == 2
    close(calls[0], [3., 3.])
    close(calls[1], [5., 5.])
    close(x.grad, [8., 8.])


def test_retain_grad_enables_grad_of_non_leaf():
    x = jg.tensor([1., 2.], requires_grad=True)
    y = x * 3
    y.retain_grad()
    assert y.retains_grad
    (y * y).sum().backward()
    close(y.grad, [6., 12.])
    close(x.grad, [18., 36.])


# ---- Function ---------------------------------------------------------------------------------------------

class Exp(Function):

    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result


def test_function_exp_example():
    x = jg.tensor([0., 1., -1.], requires_grad=True)
    y = Exp.apply(x)
    close(y, np.exp([0., 1., -1.]).astype(np.float32))
    assert y.grad_fn is not None and not y.is_leaf
    assert "Exp" in y.grad_fn.name()
    y.sum().backward()
    close(x.grad, np.exp([0., 1., -1.]).astype(np.float32))


def test_function_exp_is_differentiable_twice():
    # the backward uses jitgrad ops, so it records a graph with create_graph=True
    x = jg.tensor([0.5, -0.25], requires_grad=True)
    y = Exp.apply(x).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (gg,) = autograd.grad(g.sum(), x)
    close(gg, np.exp([0.5, -0.25]).astype(np.float32))


def test_function_exp_matches_torch():
    torch = pytest.importorskip("torch")

    class TExp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, i):
            result = i.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            result, = ctx.saved_tensors
            return grad_output * result

    data = np.array([0.3, -1.2, 2.0], dtype=np.float64)
    xt = torch.tensor(data, requires_grad=True)
    (TExp.apply(xt) * torch.tensor([1., 2., 3.], dtype=torch.float64)).sum().backward()
    xj = jg.tensor(data, requires_grad=True)
    (Exp.apply(xj) * jg.tensor([1., 2., 3.], dtype=jg.float64)).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_function_backward_has_needs_input_grad():
    seen = {}

    class Mul(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            seen["nig"] = ctx.needs_input_grad
            a, b = ctx.saved_tensors
            return (g * b if ctx.needs_input_grad[0] else None,
                    g * a if ctx.needs_input_grad[1] else None)

    a = jg.tensor([2.], requires_grad=True)
    b = jg.tensor([5.])
    Mul.apply(a, b).sum().backward()
    assert seen["nig"] == (True, False)
    close(a.grad, [5.])


def test_function_takes_non_tensor_arguments():
    class Scale(Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = jg.tensor([1., 2.], requires_grad=True)
    Scale.apply(x, 4.0).sum().backward()
    close(x.grad, [4., 4.])


def test_ctx_mark_dirty():
    class AddOne_(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    a = jg.tensor([1., 2.], requires_grad=True)
    h = a * 2
    v = h._version
    out = AddOne_.apply(h)
    assert out is h
    assert h._version > v
    close(h, [3., 5.])
    assert "AddOne_" in h.grad_fn.name()
    h.sum().backward()
    close(a.grad, [2., 2.])


def test_ctx_mark_dirty_on_leaf_requiring_grad_raises():
    class AddOne_(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    a = jg.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        AddOne_.apply(a)


def test_ctx_mark_non_differentiable_and_zero_grad():
    got = {}

    class Sort(Function):
        @staticmethod
        def forward(ctx, x):
            idx = jg.tensor(np.argsort(x.detach().numpy()))
            vals = x[idx]
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            ctx.n = x.shape[0]
            return vals, idx

        @staticmethod
        def backward(ctx, g_vals, g_idx):
            got["g_idx"] = g_idx
            idx, = ctx.saved_tensors
            out = jg.zeros(ctx.n)
            out[idx] = g_vals
            return out

    x = jg.tensor([3., 1., 2.], requires_grad=True)
    vals, idx = Sort.apply(x)
    assert vals.requires_grad
    assert not idx.requires_grad
    (vals * jg.tensor([1., 10., 100.])).sum().backward()
    close(x.grad, [100., 1., 10.])
    # "You still need to accept a gradient for each output in backward(), but it's always going to be a zero
    # tensor with the same shape as the shape of a corresponding output."
    assert got["g_idx"] is not None and got["g_idx"].shape == (3,)
    assert not np.any(got["g_idx"].numpy())


def test_ctx_save_for_backward_accepts_none():
    class F(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, None)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            x, nothing = ctx.saved_tensors
            assert nothing is None
            return g * 2

    x = jg.tensor([1.], requires_grad=True)
    F.apply(x).sum().backward()
    close(x.grad, [2.])


def test_ctx_saved_tensors_checks_inplace_modification():
    class F(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 2

    a = jg.tensor([1., 2.], requires_grad=True)
    h = a * 1
    y = F.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_function_object_instantiation_is_legacy_error():
    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        f = Exp()
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward method"):
        f(jg.ones(1))


# ---- anomaly detection (seed example) ---------------------------------------------------------------------

class MyFunc(autograd.Function):
    @staticmethod
    def forward(ctx, inp):
        return inp.clone()

    @staticmethod
    def backward(ctx, gO):
        # Error during the backward pass
        raise RuntimeError("Some error in backward")
        return gO.clone()


def run_fn(a):
    out = MyFunc.apply(a)
    return out.sum()


def test_detect_anomaly_example_without_anomaly_mode():
    inp = jg.rand(10, 10, requires_grad=True)
    out = run_fn(inp)
    with pytest.raises(RuntimeError) as ei:
        out.backward()
    assert str(ei.value) == "Some error in backward"


def test_detect_anomaly_example_with_anomaly_mode():
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        cm = autograd.detect_anomaly()
    with pytest.raises(RuntimeError) as ei, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cm:
            inp = jg.rand(10, 10, requires_grad=True)
            out = run_fn(inp)
            out.backward()
    msg = str(ei.value)
    assert "Some error in backward" in msg
    assert "Traceback of forward call that caused the error" in msg
    assert "out = MyFunc.apply(a)" in msg
    assert "out = run_fn(inp)" in msg
    assert "in run_fn" in msg


def test_set_detect_anomaly_as_call_and_context_manager():
    assert not jg.is_anomaly_enabled()
    with autograd.set_detect_anomaly(True):
        assert jg.is_anomaly_enabled()
    assert not jg.is_anomaly_enabled()
    autograd.set_detect_anomaly(True)
    assert jg.is_anomaly_enabled()
    autograd.set_detect_anomaly(False)
    assert not jg.is_anomaly_enabled()
