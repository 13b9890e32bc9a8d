"""A graph dies when its last tensor does (reference counting), not at the next garbage collection.

Nodes keep what their backward reads, never a path back to themselves: an op that saves its output keeps the
output's buffer and version counter without its grad_fn (unpacked with it when a backward builds a graph), a custom
Function's saved outputs and dirty tensors likewise, and a view's node holds its parent weakly.  Every test runs
with the collector off, so a reference cycle shows as an object still alive after ``del``.
"""

import gc
import weakref

import numpy as np
import pytest

import jitgrad as jg


@pytest.fixture(autouse=True)
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Marker:
    pass


def test_a_node_that_saves_its_output_dies_with_it():
    x = jg.randn(3, requires_grad=True)
    for make in (lambda: x.exp(), lambda: x.tanh(), lambda: x.sigmoid(), lambda: jg.relu(x * 1)):
        y = make()
        node = weakref.ref(y.grad_fn)
        del y
        assert node() is None


def test_anomaly_metadata_freed_after_a_create_graph_backward():
    def build():
        x = jg.randn(2, 2, requires_grad=True)
        y = x.exp()
        with jg.autograd.detect_anomaly():
            jg.autograd.grad(y, x, jg.ones_like(y), create_graph=True)    # its nodes name y's node as parent
        m = Marker()
        y.grad_fn.metadata["mine"] = m
        return y, weakref.ref(m)

    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        y, ref = build()
    assert ref() is not None
    del y
    assert ref() is None


@pytest.mark.parametrize("name, d1, d2", [
    ("exp", np.exp, np.exp),
    ("tanh", lambda v: 1 - np.tanh(v) ** 2, lambda v: -2 * np.tanh(v) * (1 - np.tanh(v) ** 2)),
    ("sigmoid", lambda v: (s := 1 / (1 + np.exp(-v))) * (1 - s),
     lambda v: (s := 1 / (1 + np.exp(-v))) * (1 - s) * (1 - 2 * s)),
])
def test_higher_orders_still_differentiate_through_a_saved_output(name, d1, d2):
    v = np.array([-0.7, 0.2, 1.3])
    x = jg.tensor(v, requires_grad=True)
    y = getattr(x, name)()
    g, = jg.autograd.grad(y.sum(), x, create_graph=True)
    gg, = jg.autograd.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), d1(v), rtol=1e-12)
    np.testing.assert_allclose(gg.detach().numpy(), d2(v), rtol=1e-10)
    assert gg.grad_fn is not None       # a third order is still recorded


def test_saved_result_is_unpacked_with_its_node():
    x = jg.randn(3, requires_grad=True)
    y = x.exp()
    r = y.grad_fn._saved_result
    assert r is not y and r.grad_fn is y.grad_fn
    np.testing.assert_array_equal(r.detach().numpy(), y.detach().numpy())
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_in_place_op_on_a_view_frees_the_graph_at_del():
    deleted = []

    class CountsDeletion:
        def __del__(self):
            deleted.append(1)

        def __call__(self, *grads):
            return None

    def build():
        root = jg.randn(3, 3, requires_grad=True)
        copy = root.clone()
        copy.grad_fn.register_hook(CountsDeletion())
        view = copy.view(9)
        jg.nn.functional.relu(view, inplace=True)      # relu saves its output: the written view's new node

    build()
    assert deleted == [1]


class SavesItsDirtyInput(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(3)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        return g * 3 + 0 * out


def test_custom_function_saving_a_view_it_wrote_frees_it_at_del():
    def build():
        x = jg.tensor(1.0, requires_grad=True).clone()
        x = x.view_as(x)
        SavesItsDirtyInput.apply(x)
        return weakref.ref(x)

    assert build()() is None


def test_custom_function_saving_its_output_dies_with_it_and_unpacks_it():
    class Exp(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            r = x.exp()
            ctx.save_for_backward(r)
            return r

        @staticmethod
        def backward(ctx, g):
            r, = ctx.saved_tensors
            return g * r

    x = jg.tensor([0.5, 1.5], requires_grad=True)
    y = Exp.apply(x)
    saved, = y.grad_fn.saved_tensors
    assert saved is not y and saved.grad_fn is y.grad_fn
    g, = jg.autograd.grad(y.sum(), x, create_graph=True)
    gg, = jg.autograd.grad(g.sum(), x)       # through the saved output's history: exp again
    np.testing.assert_allclose(gg.numpy(), np.exp([0.5, 1.5]), rtol=1e-6)
    node = weakref.ref(y.grad_fn)
    del y, saved, g, gg
    assert node() is None


def test_a_view_of_a_view_refreshed_after_its_parent_died():
    leaf = jg.randn(4, 3, requires_grad=True)
    base = leaf.clone()
    parent = base[1:]
    child = parent[0]
    alive = weakref.ref(parent)
    del parent
    assert alive() is None      # the child's node does not keep its parent tensor alive
    base.mul_(2)                # the child now reads the base's new history (by positions)
    (child * jg.tensor([1.0, 2.0, 3.0])).sum().backward()
    expected = np.zeros((4, 3))
    expected[1] = [2, 4, 6]
    np.testing.assert_allclose(leaf.grad.numpy(), expected)


class Sum2(jg.autograd.Function):
    """x + y whose backward hands the same gradient tensor to both inputs and reports its buffer."""
    seen = None

    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        Sum2.seen = g.data_ptr()
        return g, g


def test_an_unshared_first_gradient_becomes_grad_without_a_copy():
    a = jg.randn(4, 3, requires_grad=True)
    b = jg.randn(4, 3, requires_grad=True)
    Sum2.apply(a, b)[2][1].backward()       # the gradient reaching Sum2 is a fresh buffer
    pa, pb = a.grad.data_ptr(), b.grad.data_ptr()
    assert pa != pb                         # one of them copies: the other still held it
    assert Sum2.seen in (pa, pb)            # ... and the last one takes the buffer over
    expected = np.zeros((4, 3))
    expected[2, 1] = 1
    np.testing.assert_array_equal(a.grad.numpy(), expected)
    np.testing.assert_array_equal(b.grad.numpy(), expected)


def test_a_gradient_someone_holds_is_copied():
    kept = []
    x = jg.randn(3, requires_grad=True)
    x.register_hook(lambda g: kept.append(g))
    (x * 2).sum().backward()
    assert x.grad.data_ptr() != kept[0].data_ptr()
    mine = jg.ones(3)
    y = jg.randn(3, requires_grad=True)
    y.backward(mine)                        # the root gradient is the caller's tensor
    assert y.grad.data_ptr() != mine.data_ptr()
    y.grad.add_(1)
    np.testing.assert_array_equal(mine.numpy(), [1, 1, 1])
    w = jg.randn(3, requires_grad=True)
    g = jg.ones(3)

    class Passes(jg.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            return v * 1

        @staticmethod
        def backward(ctx, _):
            return g                        # a tensor the caller holds
    Passes.apply(w).sum().backward()
    assert w.grad.data_ptr() != g.data_ptr()


@pytest.mark.parametrize("grad_on", [True, False])
def test_forward_over_reverse_reads_the_tangent_of_a_saved_output(grad_on):
    # exp's backward reads its saved output: forward over reverse needs that value's tangent too
    x = jg.tensor([[0.0, 1.0], [0.5, -1.0]], dtype=jg.float64, requires_grad=True)
    v = jg.ones(2, 2, dtype=jg.float64)
    with jg.set_grad_enabled(grad_on):
        _, hv = jg.autograd.functional.hvp(lambda a: a.exp().sum(), x, v, create_graph=True)
    np.testing.assert_allclose(hv.detach().numpy(), np.exp(x.detach().numpy()))
