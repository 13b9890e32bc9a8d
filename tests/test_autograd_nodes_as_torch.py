"""The backward graph has torch's nodes where users can see them: one node for all the pieces of unbind / split /
chunk (so hooks on sibling pieces behave as torch's), and torch's names for the double-backward nodes of threshold
and relu."""

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F


def test_unbind_pieces_share_one_node():
    x = jg.randn(4, requires_grad=True)
    pieces = x.unbind()
    node = pieces[0].grad_fn
    assert node.name() == "UnbindBackward0"
    assert all(p.grad_fn is node for p in pieces)
    assert [p._out_nr for p in pieces] == [0, 1, 2, 3]
    assert len(node.next_functions) == 1


def test_a_hook_on_one_piece_sees_none_when_a_sibling_is_differentiated():
    x = jg.randn(4, requires_grad=True)
    pieces = x.unbind()
    seen = []
    pieces[0].register_hook(seen.append)
    pieces[0].backward()
    assert len(seen) == 1 and float(seen[0]) == 1.0
    pieces[2].backward()            # the shared node runs again: piece 0 got no gradient this time
    assert len(seen) == 2 and seen[1] is None
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1, 0])
    assert pieces[2].grad is None


@pytest.mark.parametrize("make, name", [
    (lambda w: w.split(2), "SplitBackward0"),
    (lambda w: w.split([1, 2, 3]), "SplitWithSizesBackward0"),
    (lambda w: w.chunk(3), "SplitBackward0"),
    (lambda w: w.unbind(1), "UnbindBackward0"),
])
def test_split_pieces_differentiate_to_second_order(make, name):
    v = np.linspace(-1, 1, 12).reshape(6, 2)
    w = jg.tensor(v, requires_grad=True)
    pieces = make(w)
    assert pieces[0].grad_fn.name() == name and len({id(p.grad_fn) for p in pieces}) == 1
    y = (pieces[0].exp()).sum() + (pieces[-1] ** 3).sum()
    g, = jg.autograd.grad(y, w, create_graph=True)
    gg, = jg.autograd.grad(g.sum(), w)
    # the pieces are disjoint regions of w: find them by splitting the element numbers the same way
    where = make(jg.tensor(np.arange(v.size).reshape(v.shape)))
    first = np.isin(np.arange(v.size), where[0].numpy()).reshape(v.shape)
    last = np.isin(np.arange(v.size), where[-1].numpy()).reshape(v.shape)
    np.testing.assert_allclose(g.detach().numpy(), np.where(first, np.exp(v), 0) + np.where(last, 3 * v ** 2, 0))
    np.testing.assert_allclose(gg.numpy(), np.where(first, np.exp(v), 0) + np.where(last, 6 * v, 0))


def test_retain_grad_on_a_piece():
    w = jg.randn(3, 2, requires_grad=True)
    cols = w.unbind(1)
    cols[1].retain_grad()
    (cols[1] * 3).sum().backward()
    np.testing.assert_array_equal(cols[1].grad.numpy(), [3, 3, 3])
    assert cols[0].grad is None


def test_a_piece_reads_its_base_after_the_base_is_written():
    leaf = jg.randn(3, 2, requires_grad=True)
    base = leaf.clone()
    rows = base.unbind()
    base.mul_(2)
    (rows[1] * jg.tensor([1.0, 5.0])).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [[0, 0], [2, 10], [0, 0]])


def test_writing_into_a_piece_is_still_refused():
    x = jg.randn(3, requires_grad=True).clone()
    with pytest.raises(RuntimeError, match="Output 1 of Unbind is a view and is being modified inplace"):
        x.unbind()[1].add_(1)      # (the installed torch's text; PyTorch's older suite says UnbindBackward0)


def test_threshold_names_its_nodes_as_torch():
    x = jg.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    assert F.threshold(x * 1, 0.25, -3.0).grad_fn.name() == "ThresholdBackward0"
    h = x * 1
    g, = jg.autograd.grad((F.threshold(h, 0.25, -3.0) ** 2).sum(), h, create_graph=True)
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"    # (its incoming gradient 2 * y has a history)
    np.testing.assert_array_equal(g.detach().numpy(), [0, 1, 4])


def test_relu_gradient_node_is_threshold_backward():
    x = jg.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    h = x * 2
    g, = jg.autograd.grad((jg.relu(h) ** 2).sum(), h, create_graph=True)
    assert g.grad_fn.name() == "ThresholdBackwardBackward0"
    np.testing.assert_array_equal(g.detach().numpy(), [0, 2, 8])


def test_threshold_in_place_on_a_view_in_a_gradient_penalty():
    inputs = jg.ones((1, 3, 4, 4), requires_grad=True)
    tmp1 = (inputs + 1).view_as(inputs)
    tmp2 = F.threshold(tmp1, 0.0, 0.0, True)
    p = jg.sigmoid(tmp2)
    g, = jg.autograd.grad(p, inputs, grad_outputs=jg.ones(p.shape), create_graph=True)
    penalty = g.sum()
    penalty.backward()
    names = [n.name() for n, _ in penalty.grad_fn.next_functions[0][0].next_functions]
    assert "ThresholdBackwardBackward0" in names
