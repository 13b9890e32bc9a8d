"""The pullback plans a forward signature keeps for its nodes (``Node.plans``, the dispatch entry's table): a node
takes its plan by which inputs need a gradient and its cotangent's shape and dtype, never another pattern's, and the
tables are emptied with the plans.  Gradients are compared bit for bit with ``create_graph=True``'s (the rule run on
tensors)."""

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.runtime.backward import pullback_plans


def _grads(fn, xs, g, create_graph=False):
    out = jg.autograd.grad(fn(*xs), [x for x in xs if x.requires_grad], g, create_graph=create_graph)
    return [t.detach().numpy() for t in out]


@pytest.mark.parametrize("fn", [lambda a, b: a @ b, lambda a, b: a * b, lambda a, b: (a - b).relu()])
def test_one_forward_signature_serves_each_needs_pattern_its_own_plan(fn):
    """The same op over the same shapes and dtypes, first with both inputs needing a gradient, then each alone,
    then both again: every pattern's gradients are the rule's bits (one entry, three tables' rows)."""
    rng = np.random.default_rng(1)
    a0 = rng.standard_normal((4, 4)).astype(np.float32)
    b0 = rng.standard_normal((4, 4)).astype(np.float32)
    g = jg.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    for needs in [(True, True), (True, False), (False, True), (True, True), (False, True)]:
        xs = [jg.tensor(a0, requires_grad=needs[0]), jg.tensor(b0, requires_grad=needs[1])]
        fast = _grads(fn, xs, g)
        rule = _grads(fn, xs, g, create_graph=True)
        assert len(fast) == sum(needs)
        for f, r in zip(fast, rule):
            assert f.tobytes() == r.tobytes()
    node = fn(jg.tensor(a0, requires_grad=True), jg.tensor(b0)).grad_fn
    while len(node.next_functions) < 2:         # (relu's node: its input's, the subtraction's)
        node = node.next_functions[0][0]
    assert {k[0] for k in node.plans} == {(True, True), (True, False), (False, True)}


def test_a_cotangent_of_another_dtype_takes_a_plan_of_its_own():
    """One node's signature entry, cotangents of two dtypes: each gets its plan (the result's dtype the rule's)."""
    x = jg.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
    for gd in (np.float32, np.float64, np.float32):
        g = jg.tensor(np.linspace(0.5, 2, 6).astype(gd))
        (fast,) = jg.autograd.grad(x.tanh(), x, g)
        (rule,) = jg.autograd.grad(x.tanh(), x, g, create_graph=True)
        assert fast.dtype == rule.dtype and fast.numpy().tobytes() == rule.detach().numpy().tobytes()


def test_clearing_the_plans_empties_the_entries_tables():
    """``_PLANS.clear()`` (its bound, or a test) leaves no plan behind in a signature's own table: the next
    backward traces the rule again."""
    x = jg.tensor(np.arange(6, dtype=np.float64), requires_grad=True)
    (x.sin() * 3.0).sum().backward()
    node = x.sin().grad_fn
    assert node.plans
    pullback_plans._PLANS.clear()
    assert not node.plans and not pullback_plans._PLANS.entries
    before = pullback_plans.COUNTS["traces"]
    x.grad = None
    (x.sin() * 3.0).sum().backward()
    assert pullback_plans.COUNTS["traces"] > before
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(np.arange(6)))
