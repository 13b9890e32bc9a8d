"""Pullback plans (``runtime/backward/pullback_plans.py``) and what a plan must not hold: the values of saved Python numbers
(a KL weight on a schedule, an annealed temperature: one plan serves every value, with the rule's bits for each),
and the process's warnings state (only the tracing thread's warnings cost a plan; another thread's reach the user,
and nothing of the trace stays behind in the warnings module).

Each gradient is compared bit for bit with ``create_graph=True``'s (the rule run on tensors), as in
``test_eager_vjps.py``.
"""

import threading
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.ops import OPS
from jitgrad.runtime.backward import pullback_plans, rule_traces

_SPECIAL = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, -3.0]


def _schedule(n):
    """A value per step: a warm-up ramp, then the special values (signed zeros, NaN, infinities, a subnormal)."""
    return [0.05 + 0.013 * i for i in range(n)] + _SPECIAL


def _same_bits(fn, x, g):
    (fast,) = jg.autograd.grad(fn(x), x, g)
    (rule,) = jg.autograd.grad(fn(x), x, g, create_graph=True)
    assert fast.dtype == rule.dtype and fast.numpy().tobytes() == rule.detach().numpy().tobytes()


def _plans_of(name):
    return [p for k, p in pullback_plans._PLANS.items() if k[0] is OPS[name]]


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda x, s: (x.tanh() * s)),                   # a KL weight
    ("mul", lambda x, s: s * x.sin()),
    ("div", lambda x, s: (x / s).exp()),                    # a temperature
    ("maximum", lambda x, s: jg.maximum(x, s)),
    ("minimum", lambda x, s: jg.minimum(s, x)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_saved_float_that_changes_every_step_traces_one_plan(name, fn, dtype):
    """The number is an input of the plan: the first step traces the rule (on the number, then on a symbol), later
    steps trace nothing, whatever the value, and each value's gradient is the rule's bits."""
    pullback_plans._PLANS.clear()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(dtype)
    a[0, :3] = [0.0, -0.0, np.nan]
    x = jg.tensor(a, requires_grad=True)
    g = jg.tensor(rng.standard_normal((3, 4)).astype(dtype))
    traced = []
    for s in _schedule(40):
        before = pullback_plans.COUNTS["traces"]
        _same_bits(lambda x: fn(x, s), x, g)
        traced.append(pullback_plans.COUNTS["traces"] - before)
    assert traced[0] > 0 and not any(traced[1:]), traced
    (plan,) = _plans_of(name)
    assert type(plan) is pullback_plans.Plan and plan.numbers


@pytest.mark.parametrize("fn", [
    lambda x, p: x ** p,                # pow's rule decides on its exponent (an exponent 0 gives zeros)
    lambda x, s: s / x,                 # div's rule tells a Python-number numerator from a tensor by its type
    lambda x, k: x * k,                 # an int (planned per value, as bools are)
], ids=["reads", "by_type", "int"])
def test_a_rule_that_must_see_its_number_is_planned_per_value_and_bounded(fn):
    """Such a signature keeps a plan per value, for NUMBER_VALUES_MAX values; later values run the rule on tensors
    and trace nothing more.  Every value gets the rule's bits either way."""
    pullback_plans._PLANS.clear()
    x = jg.tensor(np.linspace(0.5, 2.0, 12).reshape(3, 4), requires_grad=True)
    g = jg.tensor(np.random.default_rng(1).standard_normal((3, 4)))
    cap = pullback_plans.NUMBER_VALUES_MAX
    values = list(range(-cap, 2 * cap)) if fn(x, 2).grad_fn.op is OPS["mul"] else \
        [0.0] + [0.25 * i for i in range(1, 3 * cap)]
    before = pullback_plans.COUNTS["traces"]
    late = None
    for i, v in enumerate(values):
        _same_bits(lambda x: fn(x, v), x, g)
        if i == 2 * cap:
            late = pullback_plans.COUNTS["traces"]
    assert pullback_plans.COUNTS["traces"] == late          # past the bound: no trace
    assert cap <= late - before <= cap + 2, late - before   # (one more: the symbolic try, where the numbers are floats)
    (table,) = _plans_of(fn(x, 2).grad_fn.op.name)
    assert type(table) is pullback_plans._Values and len(table) == cap


def test_signed_zero_and_nan_values_are_told_apart_per_value():
    """A rule planned per value keys a float by its bits: -0.0 is not 0.0 (the key would find the other's plan) and a
    NaN finds its plan again (NaN != NaN would trace it at every step)."""
    pullback_plans._PLANS.clear()
    x = jg.tensor(np.array([0.5, 2.0, 3.0]), requires_grad=True)
    g = jg.tensor(np.array([1.0, -1.0, 2.0]))
    for _ in range(3):
        for p in (0.0, -0.0, float("nan")):
            _same_bits(lambda x: x ** p, x, g)
    (table,) = _plans_of("pow")
    assert len(table) == 3


def _patched_exp(monkeypatch, extra, once=True):
    """exp's rule with ``extra()`` run first in it, in its first call only where ``once`` (a new signature's rule is
    traced twice: on symbolic sizes, and on its shapes to check that trace); exp's plans cleared."""
    op = OPS["exp"]
    rule = op.vjp
    calls = []

    def patched(c, g):
        if not (once and calls):
            calls.append(extra())
        return rule(c, g)
    monkeypatch.setattr(op, "vjp", patched)
    pullback_plans._PLANS.clear()
    return op


def _in_another_thread(fn):
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_the_rules_own_warning_costs_its_plan_and_is_shown(monkeypatch):
    _patched_exp(monkeypatch, lambda: warnings.warn("the rule's own warning"), once=False)
    x = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    for _ in range(2):      # (no plan: the rule runs, and warns, at every call)
        with pytest.warns(UserWarning, match="the rule's own warning"):
            (gx,) = jg.autograd.grad(x.exp().sum(), x)
        np.testing.assert_array_equal(gx.numpy(), x.detach().exp().numpy())
    assert _plans_of("exp") == [pullback_plans._NO_PLAN]


def test_another_threads_warning_during_a_trace_reaches_the_user_and_costs_no_plan(monkeypatch):
    """A build thread's warning given while this thread traces a rule is the user's to see, and the rule's plan
    stands (a process-wide catch_warnings took it for the rule's: no plan, and the warning recorded, never shown)."""
    _patched_exp(monkeypatch, lambda: _in_another_thread(lambda: warnings.warn("a build thread's warning")))
    x = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="a build thread's warning") as shown:
        (gx,) = jg.autograd.grad(x.exp().sum(), x)
    assert len(shown) == 1
    np.testing.assert_array_equal(gx.numpy(), x.detach().exp().numpy())
    (plan,) = _plans_of("exp")
    assert type(plan) is pullback_plans.Plan


def test_a_warnings_window_of_another_thread_across_a_trace_leaves_the_warnings_module_as_it_was(monkeypatch):
    """Another thread opens a ``catch_warnings`` window while this thread traces a rule and closes it after the trace
    (Numba's compiles in the eager kernel build thread open one each).  A trace that swapped the process's filters and
    ``showwarning`` for its length had them restored by that late exit: the trace's (its "always" filter, its
    recorder) stayed, and this thread's later warnings went to a dead trace's list.  Now the trace swaps nothing."""
    opened, close, closed = threading.Event(), threading.Event(), threading.Event()

    def window():
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            opened.set()
            close.wait(60)
        closed.set()

    def open_a_window():
        threading.Thread(target=window).start()
        opened.wait(60)
    with warnings.catch_warnings():         # (the test's own: whatever happens, nothing leaks out of it)
        before = ([f for f in warnings.filters if f is not rule_traces._WARNED], warnings.showwarning,
                  warnings._showwarnmsg_impl)
        _patched_exp(monkeypatch, open_a_window)
        x = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)
        (gx,) = jg.autograd.grad(x.exp().sum(), x)
        close.set()
        closed.wait(60)
        after = ([f for f in warnings.filters if f is not rule_traces._WARNED], warnings.showwarning,
                 warnings._showwarnmsg_impl)
        assert after == before
        with pytest.warns(UserWarning, match="this thread's later warning"):
            warnings.warn("this thread's later warning")
    assert type(_plans_of("exp")[0]) is pullback_plans.Plan


@pytest.mark.parametrize("fn", [
    lambda x, v: x.clamp(min=v),
    lambda x, v: x.clamp(-2.0, v + 1.5),
], ids=["min", "min_max"])
def test_params_that_change_every_step_are_bounded(fn):
    """An op's params are part of its signature by value (clamp's bound, a slope): a value per step plans the rule
    for at most NUMBER_VALUES_MAX values, then runs it on tensors and traces nothing more; every value's gradient
    is the rule's bits."""
    pullback_plans._PLANS.clear()
    x = jg.tensor(np.linspace(-1.5, 1.5, 12).reshape(3, 4), requires_grad=True)
    g = jg.tensor(np.random.default_rng(2).standard_normal((3, 4)))
    cap = pullback_plans.NUMBER_VALUES_MAX
    op = fn(x, 0.5).grad_fn.op
    counts = []
    for i in range(3 * cap):
        before = pullback_plans.COUNTS["traces"]
        _same_bits(lambda x: fn(x, -1.0 + 0.01 * i), x, g)
        counts.append(pullback_plans.COUNTS["traces"] - before)
    assert all(counts[:cap]) and not any(counts[cap:]), counts
    assert len(_plans_of(op.name)) == cap
