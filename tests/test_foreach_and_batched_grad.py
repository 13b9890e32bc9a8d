"""torch's list functions and autograd helpers PyTorch's autograd tests use (issue 20, missing API):
``torch._foreach_*`` and ``autograd.grad(..., is_grads_batched=True)``.  Values and gradients against torch,
torch's errors, eager against compiled.  (The deprecated ``get_numerical_jacobian`` / ``get_analytical_jacobian``
are ptharness's, tested in test_torch_suite_gaps.py.)
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def lists(seed=0):
    arrays = [rnd(2, 3, seed=seed), rnd(4, seed=seed + 1), np.array(0.7)]
    return arrays, [jg.tensor(a, requires_grad=True) for a in arrays], \
        [torch.tensor(a, requires_grad=True) for a in arrays]


# ---- _foreach_* -----------------------------------------------------------------------------------------

CALLS = [("exp", ()), ("sqrt", ()), ("neg", ()), ("sigmoid", ()), ("add", (1.5,)), ("sub", ([1.0, 2.0, 3.0],)),
         ("mul", ("tensor",)), ("div", ("list",)), ("maximum", ("list",)), ("pow", (2.0,)), ("clamp_min", (0.1,)),
         ("addcmul", ("list", "list")), ("addcdiv", ("list", "list", 0.5)), ("lerp", ("list", 0.3)), ("norm", ())]


def _args(args, ts, m):
    out = []
    for a in args:
        if a == "tensor":
            out.append(m.tensor(1.25, dtype=m.float64))
        elif a == "list":
            out.append([m.tensor(np.abs(rnd(*t.shape, seed=9)) + 0.5) for t in ts])
        else:
            out.append(a)
    return out


@pytest.mark.parametrize("name,args", CALLS)
def test_foreach_matches_torch_values_and_gradients(name, args):
    arrays, xs, ts = lists()
    if name == "sqrt":
        xs = [jg.tensor(np.abs(a) + 0.1, requires_grad=True) for a in arrays]
        ts = [torch.tensor(np.abs(a) + 0.1, requires_grad=True) for a in arrays]
    got = getattr(jg, f"_foreach_{name}")(xs, *_args(args, xs, jg))
    ref = getattr(torch, f"_foreach_{name}")(ts, *_args(args, ts, torch))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.detach().numpy(), r.detach().numpy(), rtol=1e-13)
    sum(g.sum() for g in got).backward()
    sum(r.sum() for r in ref).backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-13)


@pytest.mark.parametrize("name,args", [("exp", ()), ("add", (2.0,)), ("mul", ("list",)), ("sub", ("tensor",)),
                                       ("addcmul", ("list", "list", 2.0)), ("lerp", ("list", "list"))])
def test_foreach_in_place_matches_torch(name, args):
    arrays, _, _ = lists(seed=3)
    xs = [jg.tensor(a) for a in arrays]
    ts = [torch.tensor(a) for a in arrays]
    if name == "lerp":      # a list of tensor weights
        assert getattr(jg, "_foreach_lerp_")(xs, _args(["list"], xs, jg)[0], _args(["list"], xs, jg)[0]) is None
        torch._foreach_lerp_(ts, _args(["list"], ts, torch)[0], _args(["list"], ts, torch)[0])
    else:
        assert getattr(jg, f"_foreach_{name}_")(xs, *_args(args, xs, jg)) is None
        getattr(torch, f"_foreach_{name}_")(ts, *_args(args, ts, torch))
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-13)
        assert x._version == 1


def test_foreach_alpha_zero_copy_and_errors():
    xs = [jg.ones(2), jg.ones(3)]
    ys = jg._foreach_add(xs, xs, alpha=2)
    assert [y.tolist() for y in ys] == [[3.0, 3.0], [3.0, 3.0, 3.0]]
    jg._foreach_zero_(ys)
    assert [y.tolist() for y in ys] == [[0.0, 0.0], [0.0, 0.0, 0.0]]
    jg._foreach_copy_(ys, xs)
    assert ys[1].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="Tensor list must have same number of elements as scalar list."):
        jg._foreach_add(xs, [1.0])
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of tensors, got 2 and 1"):
        jg._foreach_mul(xs, [jg.ones(2)])
    with pytest.raises(RuntimeError, match="Tensor list must have at least one tensor."):
        jg._foreach_exp([])
    with pytest.raises(TypeError, match="unexpected keyword argument 'alpha'"):
        jg._foreach_mul(xs, 2.0, alpha=3)


def test_foreach_in_place_on_saved_outputs_under_allow_mutation():
    with jg.autograd.graph.allow_mutation_on_saved_tensors():
        a = [jg.tensor(1.0, requires_grad=True), jg.tensor(1.0, requires_grad=True)]
        b = jg._foreach_exp(a)
        jg._foreach_add_(b, 1)
        (b[0] + b[1]).backward()
    assert [g.item() for g in (a[0].grad, a[1].grad)] == [t.item() for t in jg._foreach_exp(a)]


def test_foreach_compiles():
    xs = [jg.tensor(rnd(3, seed=5)), jg.tensor(rnd(2, seed=6))]
    f = jg.compile(lambda a, b: jg._foreach_mul(jg._foreach_exp([a, b]), 2.0), backend="interpret")
    for g, x in zip(f(*xs), xs):
        np.testing.assert_allclose(g.numpy(), np.exp(x.numpy()) * 2.0, rtol=1e-15)


# ---- grad(..., is_grads_batched=True) -------------------------------------------------------------------

def test_batched_grad_matches_torch_per_entry():
    x = jg.randn(2, 2, requires_grad=True)
    out = x.clone()
    batched = jg.arange(3).expand(2, 2, 3).transpose(0, 2)        # integer cotangents: cast as torch does
    (g,) = jg.autograd.grad(out, (x,), (batched,), is_grads_batched=True)
    assert g.shape == (3, 2, 2) and g.dtype is jg.float32
    assert np.array_equal(g.numpy(), batched.numpy().astype(np.float32))
    s = x.sum()
    (g,) = jg.autograd.grad(s, (x,), (jg.arange(3),), is_grads_batched=True)
    assert np.array_equal(g.numpy(), np.arange(3.0)[:, None, None] * np.ones((3, 2, 2)))


def test_batched_grad_of_a_nonlinear_function_and_create_graph():
    a = rnd(3, seed=7)
    v = rnd(4, 3, seed=8)
    x = jg.tensor(a, requires_grad=True)
    y = x.sin() * x
    (g,) = jg.autograd.grad(y, x, jg.tensor(v), is_grads_batched=True, create_graph=True)
    tx = torch.tensor(a, requires_grad=True)
    ty = tx.sin() * tx
    ref = np.stack([torch.autograd.grad(ty, tx, torch.tensor(vi), retain_graph=True)[0].numpy() for vi in v])
    np.testing.assert_allclose(g.detach().numpy(), ref, rtol=1e-14)
    (h,) = jg.autograd.grad(g.sum(), x)          # the stacked result is differentiable
    th = (torch.tensor(v).sum(0) * (2 * tx.cos() - tx * tx.sin()))
    np.testing.assert_allclose(h.numpy(), th.detach().numpy(), rtol=1e-13)


def test_batched_grad_shape_mismatch_and_unused():
    x = jg.randn(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="If `is_grads_batched=True`, we interpret the first"):
        jg.autograd.grad(x.clone(), (x,), (jg.ones(2, 2),), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="If `is_grads_batched=True`, we interpret the first"):
        jg.autograd.grad(x.sum(), (x,), (jg.ones(2).unsqueeze(1),), is_grads_batched=True)
    z = jg.randn(2, requires_grad=True)
    g = jg.autograd.grad(x.sum(), (x, z), (jg.ones(3),), is_grads_batched=True, allow_unused=True)
    assert g[1] is None and g[0].shape == (3, 2, 2)
    g = jg.autograd.grad(x.sum(), (x, z), (jg.ones(3),), is_grads_batched=True, materialize_grads=True)
    assert g[1].shape == (3, 2) and not g[1].numpy().any()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        jg.autograd.grad(x.sum(), (x, z), (jg.ones(3),), is_grads_batched=True)


def test_gradcheck_still_passes_on_the_new_functions():
    # the foreach functions are per-tensor ops: their derivatives are those ops' (checked in float64)
    xs = tuple(jg.tensor(rnd(3, seed=s) ** 2 + 0.5, requires_grad=True) for s in (13, 14))
    assert gradcheck(lambda a, b: tuple(jg._foreach_addcdiv([a, b], [b, a], [a, b], 0.5)), xs)
    assert gradgradcheck(lambda a, b: tuple(jg._foreach_lerp([a, b], [b, a], 0.25)), xs)
