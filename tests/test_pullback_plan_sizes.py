"""Pullback plans keyed by the form of a signature's shapes (``runtime/backward/rule_traces.py``): a vjp rule traced
once on symbolic sizes serves every shape of that form, its decisions on sizes guards checked per new shape (a
rule that decides otherwise at other sizes gets another trace), with the bits of the plan a trace on the shapes
themselves gives and of the rule run on tensors.  Counted with ``pullback_plans.COUNTS["traces"]``."""


import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.ir.ops import OPS
from jitgrad.runtime.backward import pullback_plans, rule_traces

from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests

VOCAB, CONTEXT, WIDTH, HEADS = 29, 24, 16, 2
LENGTHS = (5, 7, 9, 11, 13)     # (no length equal to another size of the model: each shape is the same form)


def _traces():
    return pullback_plans.COUNTS["traces"]


def _gpt(sdpa):
    jg.manual_seed(0)
    return gpt_model.make_gpt(jg, VOCAB, CONTEXT, WIDTH, HEADS, 1, 0.0, sdpa)


def _batch(t, b=3, seed=0):
    rng = np.random.default_rng(seed + t)
    return jg.tensor(rng.integers(0, VOCAB, (b, t))), jg.tensor(rng.integers(0, VOCAB, (b, t)))


def _grads(model, idx, tgt, create_graph=False):
    params = list(model.parameters())
    gs = jg.autograd.grad(model(idx, tgt), params, create_graph=create_graph)
    return [g.detach().numpy() for g in gs]


def _concrete_only(monkeypatch):
    """Plans traced per shape, as before forms: a form of no sizes."""
    form = rule_traces.form
    monkeypatch.setattr(rule_traces, "form", lambda *a: (form(*a)[0], []))


@pytest.mark.parametrize("sdpa", [False, True], ids=["masked_fill", "sdpa"])
def test_new_shapes_trace_no_rule_after_the_first(sdpa, monkeypatch):
    """nanoGPT's backward at five sequence lengths: the first traces its rules, the others none (each traced them all
    again before); every gradient is the rule's bits (the rule run on tensors: create_graph=True) and the bits of
    the plans traced on each shape itself."""
    pullback_plans._PLANS.clear()
    model = _gpt(sdpa)
    counts, fast = [], []
    for t in LENGTHS:
        idx, tgt = _batch(t)
        before = _traces()
        fast.append(_grads(model, idx, tgt))
        counts.append(_traces() - before)
        rule = _grads(model, idx, tgt, create_graph=True)
        for a, b in zip(fast[-1], rule):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert counts[0] > 0 and not any(counts[1:]), counts
    pullback_plans._PLANS.clear()
    _concrete_only(monkeypatch)
    for t, sized in zip(LENGTHS, fast):
        before = _traces()
        concrete = _grads(model, *_batch(t))
        assert _traces() > before
        for a, b in zip(sized, concrete):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _lm_grads(emb, lin, idx, tgt):
    import jitgrad.nn.functional as F
    B, T = idx.shape
    loss = F.cross_entropy(lin(emb(idx)).view(B * T, -1), tgt.view(B * T))
    return [g.numpy() for g in jg.autograd.grad(loss, [emb.weight, lin.weight, lin.bias])]


def test_batch_and_length_both_vary_and_an_equal_pair_is_a_form_of_its_own():
    """An embedding + linear + cross-entropy step over batch sizes and lengths: one form for all of them, and one
    more where the batch size equals the length (equal sizes are one symbol, as torch's duck sizing): traced once,
    then served for every such shape."""
    pullback_plans._PLANS.clear()
    jg.manual_seed(0)
    emb, lin = jg.nn.Embedding(23, 10), jg.nn.Linear(10, 23)
    rng = np.random.default_rng(0)
    counts = {}
    for b, t in [(4, 9), (6, 11), (5, 13), (7, 7), (9, 5), (4, 4), (6, 6)]:
        idx, tgt = jg.tensor(rng.integers(0, 23, (b, t))), jg.tensor(rng.integers(0, 23, (b, t)))
        before = _traces()
        _lm_grads(emb, lin, idx, tgt)
        counts[b, t] = _traces() - before
    assert counts[4, 9] > 0 and counts[7, 7] > 0, counts
    assert not any(n for s, n in counts.items() if s not in ((4, 9), (7, 7))), counts


def test_a_size_of_one_is_a_form_of_its_own():
    """Sizes 0 and 1 stay in the form (broadcasting decides on them, as torch specialises them)."""
    pullback_plans._PLANS.clear()
    w = jg.tensor(np.linspace(-1, 1, 5), requires_grad=True)
    counts = []
    for n in (3, 1, 4, 1, 6):
        x = jg.tensor(np.arange(5.0 * n).reshape(n, 5))
        before = _traces()
        (gw,) = jg.autograd.grad((x * w).sum(), w)
        counts.append(_traces() - before)
        np.testing.assert_array_equal(gw.numpy(), x.numpy().sum(0))
    assert counts[0] and counts[1] and not any(counts[2:]), counts


def _patched_exp(monkeypatch, rule):
    op = OPS["exp"]
    monkeypatch.setattr(op, "vjp", rule)
    pullback_plans._PLANS.clear()


def _exp_grad(n):
    """exp's gradient at ``(n, 1)`` (one size: every ``n`` is one form), the trace count, and exp's own."""
    x = jg.tensor(np.linspace(-1.0, 1.0, n).reshape(n, 1), requires_grad=True)
    g = jg.tensor(np.linspace(0.5, 2.0, n).reshape(n, 1))
    before = _traces()
    (fast,) = jg.autograd.grad(x.exp(), x, g)
    traced = _traces() - before
    (rule,) = jg.autograd.grad(x.exp(), x, g, create_graph=True)
    assert fast.numpy().tobytes() == rule.detach().numpy().tobytes()
    return traced, fast.numpy(), (g.numpy() * np.exp(x.detach().numpy()))


def test_a_rule_that_decides_on_a_size_takes_a_new_plan_where_its_guard_fails(monkeypatch):
    """A rule that takes another branch from 4 rows on: the trace at 3 rows guards ``rows <= 4``; 5 rows break it
    and trace again (guarding ``rows > 4``); later sizes find the trace whose guards hold, and each size gets its
    branch's gradient."""
    def rule(c, g):
        scale = 2.0 if c.shapes[0][0] > 4 else 1.0
        return (g * c.outputs[0] * scale,)
    _patched_exp(monkeypatch, rule)
    counts = {}
    for n in (3, 5, 7, 2, 4, 6):
        counts[n], got, want = _exp_grad(n)
        np.testing.assert_array_equal(got, want * (2.0 if n > 4 else 1.0))
    assert counts[3] == 2 and counts[5] == 1, counts      # (the first: the trace on the shapes checks it)
    assert not any(counts[n] for n in (7, 2, 4, 6)), counts
    (templates,) = [v for k, v in pullback_plans._PLANS.sized.items() if k[0][0] is OPS["exp"]]
    assert len(templates) == 2


def test_a_rule_that_needs_a_size_as_an_int_is_planned_per_size_and_bounded(monkeypatch):
    """A rule that reads a size as a plain int (``int(n)``: the trace specialises on it) keeps a trace per size,
    at most NUMBER_VALUES_MAX of them; later sizes are traced on their shapes (as every shape was before)."""
    def rule(c, g):
        n = int(c.shapes[0][0])
        return (g * c.outputs[0] * float(n),)
    _patched_exp(monkeypatch, rule)
    cap = pullback_plans.NUMBER_VALUES_MAX
    for n in range(2, cap + 6):
        traced, got, want = _exp_grad(n)
        assert traced >= 1
        np.testing.assert_array_equal(got, want * n)
    (templates,) = [v for k, v in pullback_plans._PLANS.sized.items() if k[0][0] is OPS["exp"]]
    assert len(templates) == cap
    traced, got, want = _exp_grad(3)       # (a size with a trace: its plan again)
    assert traced == 0


def test_a_rule_that_traces_otherwise_on_symbols_is_planned_per_shape(monkeypatch):
    """A rule that tells a symbolic size from an int by its type (no guard can see that) gives a trace that is not
    the one on the shapes: the form is traced per shape, with the rule's bits."""
    def rule(c, g):
        scale = 1.0 if type(c.shapes[0][0]) is int else 3.0
        return (g * c.outputs[0] * scale,)
    _patched_exp(monkeypatch, rule)
    for n in (3, 5, 6):
        traced, got, want = _exp_grad(n)
        assert traced >= 1
        np.testing.assert_array_equal(got, want)
    assert pullback_plans._UNSIZED in pullback_plans._PLANS.sized.values()


_OPS = {
    "sum_mean": lambda x: x.sum(1).mean() + x.mean(-1, keepdim=True).sum(),
    "var_std": lambda x: x.var(1).sum() + x.std(-1).sum(),
    "amax": lambda x: x.amax(1).sum() + x.max(-1).values.sum(),
    "norm": lambda x: x.norm(dim=-1).sum(),
    "reshape": lambda x: x.reshape(-1, x.shape[-1]).exp().sum() + x.flatten().sin().sum(),
    "view": lambda x: x.view(x.shape[0] * x.shape[1], -1).tanh().sum(),
    "permute": lambda x: x.permute(2, 0, 1).contiguous().cos().sum() + x.transpose(0, 1).sigmoid().sum(),
    "expand": lambda x: (x[:, :1, :].expand(x.shape) * x).sum(),
    "unsqueeze": lambda x: (x.unsqueeze(1) * x.unsqueeze(2)).sum(),
    "cat_stack": lambda x: jg.cat([x, x * 2], dim=1).exp().sum() + jg.stack([x, x.sin()], 0).sum(),
    "split_chunk": lambda x: sum((p * (i + 1)).sum() for i, p in enumerate(x.split([2, x.shape[1] - 2], dim=1)))
    + sum((p * (i + 1)).sum() for i, p in enumerate(x.chunk(2, dim=-1))),
    "softmax": lambda x: F.softmax(x, dim=-1)[..., 0].sum() + F.log_softmax(x, dim=1).mean(),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]).pow(2).sum(),
    "matmul": lambda x: (x @ x.transpose(-2, -1)).sum() + (x @ jg.ones(x.shape[-1], 2)).sum(),
    "where_mask": lambda x: jg.where(x > 0, x, x * 0.1).sum() + x.masked_fill(x < -0.5, 0.0).sum(),
    "cumsum": lambda x: x.cumsum(1).sum() + x.cumprod(-1).sum(),
    "gelu_relu": lambda x: F.gelu(x).sum() + F.relu(x).sum() + F.silu(x).mean(),
    "clamp_abs": lambda x: x.clamp(-0.5, 0.5).sum() + x.abs().sum() + (x * x).sqrt().sum(),
    "tril": lambda x: (x[..., :x.shape[1]] if x.shape[2] >= x.shape[1] else x).tril().sum() + x.triu(1).sum(),
    "pad": lambda x: F.pad(x, (1, 1)).exp().sum(),
    "repeat": lambda x: x.repeat(1, 2, 1).sin().sum(),
    "mse_ce": lambda x: F.mse_loss(x, x.detach() * 0.5) + F.cross_entropy(x.reshape(-1, x.shape[-1]),
                                                                          jg.zeros(x.shape[0] * x.shape[1],
                                                                                   dtype=jg.long)),
}
# (no size of a node equal to another of it at one of them but not the others: T - 2 (the split), C - 1 (var's count))
_SIZES = ((3, 13, 10), (4, 15, 10), (6, 17, 10), (7, 19, 10))


@pytest.mark.parametrize("name", sorted(_OPS))
def test_each_op_across_sizes_gives_the_rules_bits(name, monkeypatch):
    """A program of a family of ops at sizes of one form: its gradients are the rule's bits (create_graph=True) and
    the bits of plans traced on each shape; the sizes after the first trace no rule."""
    fn = _OPS[name]
    pullback_plans._PLANS.clear()
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(s).astype(np.float32) for s in _SIZES]
    sized, counts = [], []
    for a in xs:
        x = jg.tensor(a, requires_grad=True)
        before = _traces()
        (g,) = jg.autograd.grad(fn(x), x)
        counts.append(_traces() - before)
        (rule,) = jg.autograd.grad(fn(x), x, create_graph=True)
        assert g.numpy().tobytes() == rule.detach().numpy().tobytes()
        sized.append(g.numpy())
    assert counts[0] and not any(counts[1:]), counts
    pullback_plans._PLANS.clear()
    _concrete_only(monkeypatch)
    for a, s in zip(xs, sized):
        x = jg.tensor(a, requires_grad=True)
        (g,) = jg.autograd.grad(fn(x), x)
        assert g.numpy().tobytes() == s.tobytes()


def test_a_mean_over_more_sizes_than_values_are_planned_traces_once():
    """A mean saves its count, an int: a size of the form, so one trace serves every count (each count a plan of
    its own before: NUMBER_VALUES_MAX of them, then the rule ran on tensors)."""
    pullback_plans._PLANS.clear()
    cap = pullback_plans.NUMBER_VALUES_MAX
    counts = []
    for n in range(2, cap + 12):
        x = jg.tensor(np.linspace(-1.0, 1.0, n), requires_grad=True)
        before = _traces()
        (g,) = jg.autograd.grad(x.exp().mean(), x)
        counts.append(_traces() - before)
        (rule,) = jg.autograd.grad(x.exp().mean(), x, create_graph=True)
        assert g.numpy().tobytes() == rule.detach().numpy().tobytes()
    assert counts[0] and not any(counts[1:]), counts
    (table,) = _plans_of_op("div")
    assert type(table) is pullback_plans._Values and len(table) == cap + 10
    assert all(type(p) is pullback_plans.Plan for p in table.values())


def _plans_of_op(name):
    return [p for k, p in pullback_plans._PLANS.items() if k[0] is OPS[name]]


def _lm_step_grads(emb, lin, b, t, seed):
    rng = np.random.default_rng(seed)
    idx, tgt = jg.tensor(rng.integers(0, 64, (b, t))), jg.tensor(rng.integers(0, 64, (b, t)))
    return _lm_grads(emb, lin, idx, tgt), (idx, tgt)


def test_a_per_signature_gemm_and_row_kernel_keep_one_trace_for_every_length(sync, monkeypatch):
    """Issue 30's LM (embedding 64x32, linear 32->64, batch 8) at lengths whose weight gradient is a single-threaded
    GEMM with its call worked out per signature (``eager_gemm``), and a layer_norm whose backward is an eager row
    kernel: the first length traces the rules, the next nine none (each traced matmul's and layer_norm's rule
    again before: the form's check took two functions made per signature for two calls); the gradients are the
    rule's bits (create_graph=True) and those of plans traced per shape."""
    from jitgrad.ir.ops import blas
    if not blas.raw_gemm_ready():
        pytest.skip("no raw GEMM here")
    pullback_plans._PLANS.clear()
    jg.manual_seed(0)
    emb, lin = jg.nn.Embedding(64, 32), jg.nn.Linear(32, 64)
    # (8 * 32 * 64 * T multiply-adds: within eager_gemm's range to 16, blas.matmul's after; no length equal to the
    # batch or a width: one form)
    lengths = range(9, 19)
    counts, fast = [], []
    for t in lengths:
        before = _traces()
        got, (idx, tgt) = _lm_step_grads(emb, lin, 8, t, t)
        counts.append(_traces() - before)
        B, T = idx.shape
        loss = F.cross_entropy(lin(emb(idx)).view(B * T, -1), tgt.view(B * T))
        rule = jg.autograd.grad(loss, [emb.weight, lin.weight, lin.bias], create_graph=True)
        for a, r in zip(got, rule):
            assert a.tobytes() == r.detach().numpy().tobytes()
        fast.append(got)
        x = jg.tensor(np.random.default_rng(t).standard_normal((8, t, 64)).astype(np.float32), requires_grad=True)
        before = _traces()
        (gx,) = jg.autograd.grad(F.layer_norm(x, (64,)).sum(), x)
        counts[-1] += _traces() - before
        (rx,) = jg.autograd.grad(F.layer_norm(x, (64,)).sum(), x, create_graph=True)
        assert gx.numpy().tobytes() == rx.detach().numpy().tobytes()
        fast[-1].append(gx.numpy())
    assert counts[0] > 0 and not any(counts[1:]), counts
    pullback_plans._PLANS.clear()
    _concrete_only(monkeypatch)
    for t, sized in zip(lengths, fast):
        got, _ = _lm_step_grads(emb, lin, 8, t, t)
        x = jg.tensor(np.random.default_rng(t).standard_normal((8, t, 64)).astype(np.float32), requires_grad=True)
        got.append(jg.autograd.grad(F.layer_norm(x, (64,)).sum(), x)[0].numpy())
        for a, b in zip(sized, got):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_plan_check_compares_functions_made_per_signature_by_what_they_hold():
    """``same_plan``'s step check: two functions of one code are one call when what they hold is equal, functions
    they hold compared alike; a different value held (or default) is another call."""
    def make(scale, inner_scale):
        def inner(x):
            return x * inner_scale

        def f(x, _k=np.float32(2)):
            return inner(x) + scale
        return f
    from jitgrad.runtime.backward import trace_compare
    same = trace_compare._same_call
    assert same(make(np.float32(1), 3.0), make(np.float32(1), 3.0))
    assert not same(make(np.float32(1), 3.0), make(np.float32(1), 4.0))
    assert not same(make(np.float32(1), 3.0), make(np.float32(2), 3.0))
    from jitgrad.ir.ops import eager_gemm
    f = eager_gemm.gemm_for_signature(40, 32, 64, np.float32)
    assert f is None or f is eager_gemm.gemm_for_signature(40, 32, 64, np.float32)


def test_a_plan_steps_error_names_the_shapes_of_its_size():
    """A step of a plan finished at a later size of its form raises as its bind would, with the shapes of that size
    (the step's avals are made for the message only)."""
    pullback_plans._PLANS.clear()
    for n in (5, 7, 9):
        x = jg.tensor(np.full((n, 3), 3e38, np.float32), requires_grad=True)
        y = (x * x.detach()).sum()
        with np.errstate(over="raise"), pytest.raises(RuntimeError, match=rf"mul: overflow .*float32\[{n}, 3\]"):
            y.backward(jg.tensor(np.float32(3e38)))
