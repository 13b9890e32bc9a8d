"""The backward runs nodes in torch's order where hooks can tell: of the nodes that become ready together, an
AccumulateGrad first, then the most recently created; ``F.linear`` on a matrix is torch's one AddmmBackward0 node
with edges (bias, input, weight.t()), and AccumulateGrad is named as torch names it."""

import numpy as np

import jitgrad as jg
import jitgrad.nn.functional as F


def _names(fn, depth=2):
    if fn is None or depth < 0:
        return None
    return fn.name(), tuple(_names(c, depth - 1) for c, _ in fn.next_functions)


def test_linear_is_one_addmm_node_with_torchs_edges():
    x = jg.randn(4, 3, requires_grad=True)
    w = jg.randn(2, 3, requires_grad=True)
    b = jg.randn(2, requires_grad=True)
    y = F.linear(x, w, b)
    acc = "torch::autograd::AccumulateGrad"
    assert _names(y.grad_fn) == ("AddmmBackward0", ((acc, ()), (acc, ()), ("TBackward0", ((acc, ()),))))
    assert F.linear(x, w).grad_fn.name() == "MmBackward0"
    assert repr(y.grad_fn.next_functions[0][0]).startswith("<AccumulateGrad object at")


def test_linear_gradients_through_the_joined_node():
    rng = np.random.default_rng(0)
    xv, wv, bv = rng.standard_normal((4, 3)), rng.standard_normal((2, 3)), rng.standard_normal(2)
    x, w, b = (jg.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    g = rng.standard_normal((4, 2))
    F.linear(x, w, b).backward(jg.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ wv)
    np.testing.assert_allclose(w.grad.numpy(), g.T @ xv)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0))
    # second order: d/dx of sum((x W^T + b)^2) twice
    x.grad = None
    y = F.linear(x, w, b)
    gx, = jg.autograd.grad((y ** 2).sum(), x, create_graph=True)
    hx, = jg.autograd.grad(gx.sum(), w)
    np.testing.assert_allclose(gx.detach().numpy(), 2 * (xv @ wv.T + bv) @ wv)
    assert hx.shape == (2, 3)
    assert jg.autograd.gradcheck(lambda x, w, b: F.linear(x, w, b), (x, w, b))
    assert jg.autograd.gradgradcheck(lambda x, w, b: F.linear(x, w, b), (x, w, b))


def test_linear_refuses_a_second_backward_and_sees_in_place_writes():
    x = jg.randn(4, 3, requires_grad=True)
    w = jg.randn(2, 3, requires_grad=True)
    b = jg.randn(2, requires_grad=True)
    y = F.linear(x, w, b).sum()
    y.backward()
    try:
        y.backward()
    except RuntimeError as e:
        assert "backward through the graph a second time" in str(e)
    else:
        raise AssertionError("a second backward ran")
    x2 = x * 1
    y2 = F.linear(x2, w, b).sum()
    x2.mul_(2)
    try:
        y2.backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
    else:
        raise AssertionError("a stale saved input was used")


def test_accumulate_grad_runs_before_its_siblings_then_newest_first():
    order = []
    x = jg.randn(3, requires_grad=True)
    early = x * 2                          # created before `late`
    late = x * 3
    early.grad_fn.register_prehook(lambda g: order.append("early"))
    late.grad_fn.register_prehook(lambda g: order.append("late"))
    x.register_hook(lambda g: order.append("leaf"))
    leaf_too = jg.randn(3, requires_grad=True)
    leaf_too.register_hook(lambda g: order.append("leaf_too"))
    (early + late + leaf_too).sum().backward()
    assert order[0] == "leaf_too" and order[1:3] == ["late", "early"]


def test_the_newest_ready_node_runs_first_across_branches():
    order = []
    x = jg.randn(3, requires_grad=True)
    early = x * 2
    late = x * 3
    early.grad_fn.register_prehook(lambda g: order.append("early"))
    late.grad_fn.register_prehook(lambda g: order.append("late"))
    s = (x * 1 + early) + late      # the inner add is newer than `late`: it runs first, then late, then early
    s.grad_fn.next_functions[0][0].register_prehook(lambda g: order.append("inner add"))
    s.sum().backward()
    assert order == ["inner add", "late", "early"]


def test_linear_with_a_broadcast_bias_and_a_float64_input():
    rng = np.random.default_rng(1)
    xv, wv = rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
    x = jg.tensor(xv, requires_grad=True)
    w = jg.tensor(wv, requires_grad=True)
    b = jg.tensor(np.array([[0.5, -1.0, 2.0]]), requires_grad=True)      # (1, 3): broadcast over rows
    y = F.linear(x, w, b)
    y.backward(jg.ones(5, 3, dtype=jg.float64))
    np.testing.assert_allclose(b.grad.numpy(), [[5.0, 5.0, 5.0]])
    np.testing.assert_allclose(w.grad.numpy(), np.ones((5, 3)).T @ xv)
    with jg.no_grad():
        assert F.linear(x, w, b).grad_fn is None


def test_a_plain_leafs_gradient_lands_before_the_next_op_node_runs():
    """A leaf with no hooks is accumulated as soon as its last gradient arrives (not through the ready heap), which
    is where torch's order puts its AccumulateGrad: before any op node that is ready or becomes ready; a leaf fed
    twice gets both gradients, and a hooked sibling leaf still runs its hooks."""
    p = jg.randn(3, requires_grad=True)
    r = jg.randn(3, requires_grad=True)
    hooked = jg.randn(3, requires_grad=True)
    seen, hook_saw = [], []
    hooked.register_hook(lambda g: hook_saw.append(g.numpy().copy()))
    first = r * 3                           # created first: runs last
    second = p * 2 + p * hooked             # its nodes feed p's accumulator (twice) and hooked's
    first.grad_fn.register_prehook(lambda g: seen.append(None if p.grad is None else p.grad.numpy().copy()))
    (first + second).sum().backward()
    want = 2 + hooked.detach().numpy()
    assert len(seen) == 1 and seen[0] is not None and np.array_equal(seen[0], want)
    np.testing.assert_array_equal(p.grad.numpy(), want)
    assert len(hook_saw) == 1 and np.array_equal(hook_saw[0], p.detach().numpy())
    np.testing.assert_array_equal(r.grad.numpy(), np.full(3, 3.0, np.float32))
    before = p.grad
    (p * 4).sum().backward()                # a second backward adds into the same .grad, in place
    assert p.grad is before
    np.testing.assert_array_equal(p.grad.numpy(), want + 4)
