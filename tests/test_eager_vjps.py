"""Pullbacks on arrays: an eager first-order backward replays each op's own vjp rule on arrays
(``runtime/backward/pullback_plans.py``: traced once per signature into a plan of the binds' signature entries) instead of
binding the rule's ops; so the gradients must be the rule's bits, the rules must plan (or decline where marked), and
every gradient semantics must hold (broadcasting, Python-number operands, NaN, hooks that cast the cotangent, native
kernels).

``create_graph=True`` runs the rules on tensors (it needs their graph), so each case compares the two paths bit for bit.
"""

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.ir.ops import OPS
from jitgrad.runtime import dispatch
from jitgrad.runtime.backward import pullback_plans


def _t(rng, shape, dtype=np.float32, grad=True):
    return jg.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=grad)


def _binary(fn, xs, ys, dtypes=(np.float32, np.float32)):
    def make(rng):
        x, y = _t(rng, xs, dtypes[0]), _t(rng, ys, dtypes[1])
        return fn(x, y), (x, y)
    return make


def _with_nans(fn):
    def make(rng):
        a = rng.standard_normal((5, 4)).astype(np.float32)
        a[0, :2] = np.nan
        a[1, 1] = 0.0
        a[2, 3] = -0.0
        x = jg.tensor(a, requires_grad=True)
        return fn(x), (x,)
    return make


def _nll(reduction, ignore=None):
    def make(rng):
        logp = F.log_softmax(_t(rng, (6, 5)), dim=1)
        target = rng.integers(0, 5, 6)
        if ignore is not None:
            target[[1, 4]] = ignore
        x = logp.grad_fn.next_functions[0][0].variable
        kw = {} if ignore is None else {"ignore_index": ignore}
        return F.nll_loss(logp, jg.tensor(target), reduction=reduction, **kw), (x,)
    return make


def _scalar_operand(fn):
    def make(rng):
        x = _t(rng, (3, 4))
        return fn(x), (x,)
    return make


def _linear(rng):
    x, w, b = _t(rng, (6, 5)), _t(rng, (3, 5)), _t(rng, (3,))
    return F.linear(x, w, b), (x, w, b)


def _matmul(xs, ys):
    return _binary(lambda x, y: x @ y, xs, ys)


def _unary(fn, shape, dtype=np.float32):
    def make(rng):
        x = _t(rng, shape, dtype)
        return fn(x), (x,)
    return make


def _masked_fill(xs, ms):
    def make(rng):
        x = _t(rng, xs)
        mask = jg.tensor(rng.random(ms) < 0.4)
        return x.masked_fill(mask, float("-inf")).exp(), (x,)
    return make


def _where_both(rng):
    x, y = _t(rng, (4, 3)), _t(rng, (3,))
    cond = jg.tensor(rng.random((4, 3)) < 0.5)
    return jg.where(cond, x, y), (x, y)


def _embedding(rng):
    w = _t(rng, (11, 6))
    idx = jg.tensor(np.array([[1, 3, 3], [0, 10, 1]]))
    return F.embedding(idx, w), (w,)


def _causal_softmax(rng):
    # nanoGPT's attention weights: a masked row softmax (exactly 0 where masked)
    x = _t(rng, (2, 3, 5, 5))
    mask = jg.tril(jg.ones(5, 5)).view(1, 1, 5, 5) == 0
    return F.softmax(x.masked_fill(mask, float("-inf")), dim=-1), (x,)


def _layer_norm(shape, naxes, affine=False, dtype=np.float32):
    def make(rng):
        x = _t(rng, shape, dtype)
        if affine:
            w, b = _t(rng, shape[-naxes:]), _t(rng, shape[-naxes:])
            return F.layer_norm(x, shape[-naxes:], w, b), (x, w, b)
        return F.layer_norm(x, shape[-naxes:]), (x,)
    return make


# op name -> cases (the ops that had a hand-written pullback before their rules were replayed, and addmm's joined node)
CASES = {
    "add": [_binary(lambda x, y: x + y, (4, 3), (4, 3)), _binary(lambda x, y: x + y, (4, 3), (3,)),
            _binary(lambda x, y: x + y, (4, 1), (1, 3)), _binary(lambda x, y: x + y, (2, 4, 3), (4, 1)),
            _binary(lambda x, y: x + y, (), (3,)), _scalar_operand(lambda x: x + 2.5),
            _binary(lambda x, y: x + y, (4, 3), (3,), (np.float32, np.float64))],
    "sub": [_binary(lambda x, y: x - y, (4, 3), (4, 3)), _binary(lambda x, y: x - y, (4, 3), (1, 3)),
            _scalar_operand(lambda x: 1.0 - x)],
    "mul": [_binary(lambda x, y: x * y, (4, 3), (4, 3)), _binary(lambda x, y: x * y, (4, 3), (3,)),
            _binary(lambda x, y: x * y, (4, 1), (1, 3)), _scalar_operand(lambda x: x * 0.1),
            _scalar_operand(lambda x: 3 * x), _scalar_operand(lambda x: x * x),
            _binary(lambda x, y: x * y, (4, 3), (4, 3), (np.float64, np.float32))],
    "relu": [_with_nans(jg.relu), _binary(lambda x, y: jg.relu(x - y), (4, 3), (3,))],
    "tanh": [_with_nans(jg.tanh), _scalar_operand(lambda x: (x * 3.0).tanh())],
    "nll_loss": [_nll("mean"), _nll("sum"), _nll("none"), _nll("mean", ignore=2), _nll("none", ignore=-100)],
    "matmul": [_matmul((5, 7), (7, 3)), _matmul((4, 1), (1, 6)), _matmul((64, 48), (48, 40)),
               _matmul((2, 3, 5, 4), (2, 3, 4, 6)), _matmul((2, 7, 5), (5, 3)), _matmul((3, 40, 48), (48, 64)),
               _matmul((5,), (5, 3)), _matmul((4, 5), (5,)), _matmul((5,), (5,)), _matmul((2, 1, 4, 5), (3, 5, 2)),
               _matmul((3, 5), (2, 5, 4)), _matmul((2, 4, 5), (5,))],
    "reshape": [_unary(lambda x: (x.view(3, 4) * 2.0).sum(0), (2, 6)),
                _unary(lambda x: x.transpose(0, 1).reshape(-1) * 3.0, (3, 4))],
    "permute": [_unary(lambda x: x.permute(2, 0, 1) * 2.0, (2, 3, 4)), _unary(lambda x: x.transpose(0, 1).tanh(), (3, 4))],
    "layer_norm": [_layer_norm((4, 6), 1), _layer_norm((2, 3, 8), 1, affine=True), _layer_norm((2, 3, 4), 2),
                   _with_nans(lambda x: F.layer_norm(x, (4,))), _layer_norm((3, 5), 1, dtype=np.float64)],
    "softmax": [_unary(lambda x: F.softmax(x, dim=-1), (4, 6)), _unary(lambda x: F.softmax(x, dim=0), (4, 6)),
                _causal_softmax, _with_nans(lambda x: F.softmax(x, dim=1))],
    "log_softmax": [_unary(lambda x: F.log_softmax(x, dim=-1), (4, 6)), _unary(lambda x: F.log_softmax(x, dim=0), (3, 5)),
                    _with_nans(lambda x: F.log_softmax(x, dim=1)),
                    _unary(lambda x: F.log_softmax(x, dim=1), (3, 5), np.float64)],
    "gelu": [_unary(F.gelu, (4, 6)), _with_nans(F.gelu), _unary(F.gelu, (3, 4), np.float64),
             _unary(lambda x: F.gelu(x, approximate="tanh"), (4, 6))],
    "where": [_masked_fill((2, 4, 4), (4, 4)), _masked_fill((3, 4), (3, 4)), _where_both],
    "div": [_binary(lambda x, y: x / y, (4, 3), (4, 3)), _binary(lambda x, y: x / y, (4, 3), (3,)),
            _scalar_operand(lambda x: x / 3.0), _scalar_operand(lambda x: 2.0 / x), _scalar_operand(lambda x: 2 / x),
            _with_nans(lambda x: x / x.detach()), _with_nans(lambda x: 1.0 / x),
            _binary(lambda x, y: x / y, (4, 3), (3,), (np.float32, np.float64))],
    "sum": [_unary(lambda x: x.sum(), (4, 3)), _unary(lambda x: x.sum(0), (4, 3)), _unary(lambda x: x.sum(-1, keepdim=True), (2, 4, 3)),
            _unary(lambda x: x.sum((0, 2)), (2, 4, 3)), _unary(lambda x: x.mean(1), (4, 3))],
    "broadcast_to": [_unary(lambda x: x.expand(4, 3) * 2.0, (1, 3)), _unary(lambda x: x.expand(2, 4, 3) * 2.0, (4, 1))],
    "neg": [_unary(lambda x: -x, (4, 3))],
    "exp": [_unary(jg.exp, (4, 3)), _with_nans(jg.exp)],
    "log": [_unary(lambda x: (x * x + 0.5).log(), (4, 3)), _with_nans(jg.log)],
    "sqrt": [_unary(lambda x: (x * x + 0.5).sqrt(), (4, 3)), _with_nans(jg.sqrt)],
    "rsqrt": [_unary(lambda x: (x * x + 0.5).rsqrt(), (4, 3)), _with_nans(jg.rsqrt)],
    "pow": [_scalar_operand(lambda x: x ** 3.0), _scalar_operand(lambda x: x ** 2), _scalar_operand(lambda x: x ** 0),
            _scalar_operand(lambda x: jg.pow(x, 0.5)), _with_nans(lambda x: x ** -1.5),
            _binary(lambda x, y: x ** y, (4, 3), (3,))],
    "cat": [_binary(lambda x, y: jg.cat([x, y], dim=1), (4, 3), (4, 2)),
            _unary(lambda x: jg.cat([x, jg.ones(1, 3), x], dim=0), (2, 3))],
    "getitem": [_embedding, _unary(lambda x: x[[0, 2, 2]] * 2.0, (4, 3)), _unary(lambda x: x[1:3, ::2] * 2.0, (4, 5))],
    "addmm": [_linear],
}


def _grads(make, seed, create_graph):
    rng = np.random.default_rng(seed)
    out, inputs = make(rng)
    g = jg.tensor(np.random.default_rng(seed + 1).standard_normal(out.shape).astype(out.detach().numpy().dtype))
    return jg.autograd.grad(out, inputs, g, create_graph=create_graph)


def _plans(entries):
    """Plans of signatures: a signature planned per value of its saved numbers holds a plan per value."""
    return [q for p in entries for q in (p.values() if isinstance(p, pullback_plans._Values) else (p,))]


@pytest.mark.parametrize("name,make", [(n, m) for n, ms in CASES.items() for m in ms],
                         ids=[f"{n}-{i}" for n, ms in CASES.items() for i in range(len(ms))])
def test_pullback_on_arrays_matches_the_rule_bit_for_bit(name, make):
    """The first-order backward (the rule replayed on arrays) against create_graph's (the rule on tensors)."""
    op = OPS.get(name)
    pullback_plans._PLANS.clear()
    fast = _grads(make, 7, False)
    if op is not None:      # (addmm's joined node replays add's and matmul's)
        plans = _plans([p for k, p in pullback_plans._PLANS.items() if k[0] is op])
        assert plans and pullback_plans._NO_PLAN not in plans, plans
    again = _grads(make, 7, False)      # (the plan replayed: a second call traces nothing)
    rule = _grads(make, 7, True)
    for f, a, r in zip(fast, again, rule):
        assert f.dtype == r.dtype and f.shape == r.shape and not f.requires_grad
        np.testing.assert_array_equal(f.numpy(), r.detach().numpy())
        np.testing.assert_array_equal(a.numpy(), r.detach().numpy())


def _pos(x):
    return x.abs() + 0.5


# more rules replayed on arrays: (name, function, input shapes); each must plan (no rule declines) and keep its bits
REPLAYED = [
    ("sigmoid", lambda x: x.sigmoid(), [(4, 5)]), ("sin", lambda x: x.sin(), [(4, 5)]),
    ("cos", lambda x: x.cos(), [(4, 5)]), ("tan", lambda x: x.tan(), [(4, 5)]), ("abs", lambda x: x.abs(), [(4, 5)]),
    ("log1p", lambda x: _pos(x).log1p(), [(4, 5)]), ("expm1", lambda x: x.expm1(), [(4, 5)]),
    ("reciprocal", lambda x: _pos(x).reciprocal(), [(4, 5)]), ("erf", lambda x: x.erf(), [(4, 5)]),
    ("clamp", lambda x: x.clamp(-0.3, 0.4), [(4, 5)]), ("maximum", lambda x, y: jg.maximum(x, y), [(4, 5), (5,)]),
    ("minimum", lambda x, y: jg.minimum(x, y), [(4, 5), (4, 1)]), ("atan2", jg.atan2, [(4, 5), (4, 5)]),
    ("amax", lambda x: x.amax(1), [(4, 5)]), ("max", lambda x: x.max(1).values, [(4, 5)]),
    ("mean", lambda x: x.mean((0, 2)), [(3, 4, 5)]), ("var", lambda x: x.var(1), [(4, 5)]),
    ("std", lambda x: x.std(), [(4, 5)]), ("norm", lambda x: x.norm(), [(4, 5)]),
    ("logsumexp", lambda x: x.logsumexp(1), [(4, 5)]), ("prod", lambda x: x.prod(1), [(4, 5)]),
    ("cumsum", lambda x: x.cumsum(1), [(4, 5)]), ("cumprod", lambda x: x.cumprod(1), [(4, 5)]),
    ("flip", lambda x: x.flip(0), [(4, 5)]), ("repeat", lambda x: x.repeat(2, 3), [(4, 5)]),
    ("gather", lambda x: x.gather(1, jg.tensor(np.array([[0, 1], [2, 2], [4, 0], [1, 1]]))), [(4, 5)]),
    ("index_select", lambda x: x.index_select(0, jg.tensor(np.array([0, 2, 2]))), [(4, 5)]),
    ("stack", lambda x, y: jg.stack([x, y]), [(4, 5), (4, 5)]),
    ("split", lambda x: x.split(2, dim=1)[0] * 3 + x.split(2, dim=1)[1].sum(), [(4, 5)]),
    ("unbind", lambda x: x.unbind(1)[2].tanh(), [(4, 5)]),
    ("pad", lambda x: F.pad(x, (1, 2)), [(4, 5)]), ("silu", F.silu, [(4, 5)]), ("elu", F.elu, [(4, 5)]),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1), [(4, 5)]), ("softplus", F.softplus, [(4, 5)]),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [(4, 5)]), ("mse", F.mse_loss, [(4, 5), (4, 5)]),
    ("conv1d", lambda x, w: F.conv1d(x, w, padding=1), [(2, 3, 7), (4, 3, 3)]),
    ("conv2d", lambda x, w: F.conv2d(x, w, stride=2), [(2, 3, 7, 7), (4, 3, 3, 3)]),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), [(4, 5)]),
    ("linear3d", F.linear, [(2, 4, 5), (3, 5), (3,)]),
    ("inv", lambda x: jg.linalg.inv(x + 3 * jg.eye(4)), [(4, 4)]), ("det", jg.linalg.det, [(4, 4)]),
    ("lerp", lambda x, y: jg.lerp(x, y, 0.3), [(4, 5), (4, 5)]), ("hypot", jg.hypot, [(4, 5), (4, 5)]),
    ("pow_tensor", lambda x, y: _pos(x) ** y, [(4, 5), (5,)]), ("rpow", lambda x: 2.0 ** x, [(4, 5)]),
    ("diagonal", lambda x: x.diagonal(), [(4, 4)]), ("bmm", jg.bmm, [(2, 3, 4), (2, 4, 5)]),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 3, 4, 8)] * 3),
    ("contiguous", lambda x: x.t().contiguous() * 2, [(4, 5)]), ("float64", lambda x: (x.double() * 2).tanh(), [(4, 5)]),
]


@pytest.mark.parametrize("fn,shapes", [r[1:] for r in REPLAYED], ids=[r[0] for r in REPLAYED])
def test_more_rules_replayed_on_arrays_keep_their_bits(fn, shapes):
    """The rules of these ops had no hand-written pullback: replayed on arrays, they give create_graph's bits (and
    the same strides), the second call as the first, and no rule declines."""
    def grads(create_graph):
        rng = np.random.default_rng(3)
        xs = [_t(rng, s) for s in shapes]
        out = fn(*xs)
        g = jg.tensor(np.random.default_rng(4).standard_normal(out.shape).astype(out.detach().numpy().dtype))
        return jg.autograd.grad(out, xs, g, create_graph=create_graph)
    pullback_plans._PLANS.clear()
    fast = grads(False)
    assert pullback_plans._PLANS and pullback_plans._NO_PLAN not in _plans(pullback_plans._PLANS.values())
    traces = pullback_plans.COUNTS["traces"]
    again = grads(False)
    assert pullback_plans.COUNTS["traces"] == traces
    rule = grads(True)
    for f, a, r in zip(fast, again, rule):
        r = r.detach().numpy()
        assert f.numpy().tobytes() == a.numpy().tobytes() == r.tobytes() and f.numpy().strides == r.strides


def test_split_pieces_backward_binds_nothing(monkeypatch):
    """split's joined node (one node, an output per piece: nanoGPT's q, k, v) replays its ``cat`` on arrays, the
    pieces without a gradient as zeros."""
    rng = np.random.default_rng(2)
    x = _t(rng, (4, 6))
    binds = []
    real = dispatch._bind

    def grads(create_graph):
        q, k, v = x.split(2, dim=1)
        y = (q * 2.0).sum() + v.tanh().sum()
        binds.clear()
        monkeypatch.setattr(dispatch, "_bind", lambda op, args, params: binds.append(op.name) or real(op, args, params))
        try:
            return jg.autograd.grad(y, x, create_graph=create_graph)[0]
        finally:
            monkeypatch.setattr(dispatch, "_bind", real)
    grads(False)
    fast = grads(False)
    assert binds == []
    rule = grads(True)
    assert "cat" in binds
    np.testing.assert_array_equal(fast.numpy(), rule.detach().numpy())


def test_a_rule_that_reads_a_value_runs_as_it_is(monkeypatch):
    """A rule whose Python reads a value cannot be a plan: the trace refuses it, and that signature's backward runs
    the rule on tensors (its binds), every call, with the rule's result."""
    op = OPS["exp"]
    rule = op.vjp

    def reading(c, g):
        scale = 2.0 if float(g.sum()) > 0 else 3.0      # (a value read: no plan can hold it)
        return (rule(c, g)[0] * scale,)
    monkeypatch.setattr(op, "vjp", reading)
    pullback_plans._PLANS.clear()
    binds = []
    real = dispatch._bind
    monkeypatch.setattr(dispatch, "_bind", lambda o, args, params: binds.append(o.name) or real(o, args, params))
    x = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    for sign in (1.0, -1.0):
        (gx,) = jg.autograd.grad(x.exp(), x, jg.tensor([sign, sign, sign]))
        np.testing.assert_allclose(gx.numpy(), sign * np.exp(x.detach().numpy()) * (2.0 if sign > 0 else 3.0),
                                   rtol=1e-6)
    assert [p for k, p in pullback_plans._PLANS.items() if k[0] is op] == [pullback_plans._NO_PLAN]
    assert binds.count("mul") >= 4       # the rule ran on tensors at both calls


def test_first_order_backward_runs_no_dispatch_for_these_ops(monkeypatch):
    """The B5 MLP's backward (matmul, bias add, relu, log_softmax, nll) binds nothing once its rules' plans are
    traced (the first call traces them); with create_graph every rule binds."""
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    w1, w2 = _t(rng, (16, 32)), _t(rng, (32, 4))
    b1, b2 = _t(rng, (32,)), _t(rng, (4,))
    target = jg.tensor(rng.integers(0, 4, 8))
    binds = []
    real = dispatch._bind

    def spy(op, args, params):
        binds.append(op.name)
        return real(op, args, params)

    def step(create_graph):
        loss = F.cross_entropy(jg.relu(x @ w1 + b1) @ w2 + b2, target)
        binds.clear()
        monkeypatch.setattr(dispatch, "_bind", spy)
        try:
            return jg.autograd.grad(loss, (w1, w2, b1, b2), create_graph=create_graph), list(binds)
        finally:
            monkeypatch.setattr(dispatch, "_bind", real)

    step(False)
    traces = pullback_plans.COUNTS["traces"]
    fast, fast_binds = step(False)
    rule, rule_binds = step(True)
    assert fast_binds == [] and pullback_plans.COUNTS["traces"] == traces
    assert len(rule_binds) > 8 and "threshold_backward" in rule_binds
    for f, r in zip(fast, rule):
        np.testing.assert_array_equal(f.numpy(), r.detach().numpy())


def test_a_hook_may_not_change_the_cotangents_type():
    """torch refuses a tensor hook's result of another dtype (it would reach the pullbacks as an array of the wrong
    type), on both paths, with torch's words."""
    for create_graph in (False, True):
        rng = np.random.default_rng(1)
        x, y = _t(rng, (4, 3)), _t(rng, (3,))
        z = x * y
        z.register_hook(lambda g: g.double())
        with pytest.raises(RuntimeError, match=r"hook '<lambda>' has changed the type of value \(was "
                                               r"torch.FloatTensor got torch.DoubleTensor\)"):
            z.sum().backward(create_graph=create_graph)


def test_gradients_that_meet_are_summed_without_a_bind(monkeypatch):
    """A tensor used twice (a residual stream) gets its two gradients summed on their arrays in plain first order,
    with the bits of the bound add that create_graph runs."""
    rng = np.random.default_rng(3)
    x, w = _t(rng, (5, 4)), _t(rng, (4, 4))
    binds = []
    real = dispatch._bind

    def spy(op, args, params):
        binds.append(op.name)
        return real(op, args, params)

    def grads(create_graph):
        h = x @ w
        y = (h + (h * 0.5).tanh() + h.exp()).sum()      # h's gradient arrives three times
        binds.clear()
        monkeypatch.setattr(dispatch, "_bind", spy)
        try:
            return jg.autograd.grad(y, (x, w), create_graph=create_graph), list(binds)
        finally:
            monkeypatch.setattr(dispatch, "_bind", real)
    grads(False)        # (traces the rules' plans)
    (fx, fw), fast_binds = grads(False)
    (rx, rw), rule_binds = grads(True)
    assert fast_binds == [] and rule_binds.count("add") >= 2
    np.testing.assert_array_equal(fx.numpy(), rx.detach().numpy())
    np.testing.assert_array_equal(fw.numpy(), rw.detach().numpy())


@pytest.fixture
def native_kernels(monkeypatch):
    """Eager kernels built at their first call (jit/eager_kernels.py), signatures chosen afresh."""
    from jitgrad.jit import eager_kernels as ek
    monkeypatch.setattr(ek, "SYNC", True)
    monkeypatch.setattr(ek, "ENABLED", True)
    dispatch._RULES.clear()
    yield ek
    dispatch._RULES.clear()


@pytest.mark.parametrize("name,fn,native", [
    ("log_softmax", lambda x: F.log_softmax(x, dim=-1), True),
    ("softmax", lambda x: F.softmax(x, dim=-1), True),
    ("gelu", F.gelu, True),
    ("layer_norm", lambda x: F.layer_norm(x, (128,)), False)])
def test_pullbacks_run_the_native_kernel_where_the_bind_does(native_kernels, name, fn, native):
    """Large rows: the backward op's bind runs a native kernel (its bits are the compiled kernel's, not NumPy's);
    the pullback runs the same kernel, so both paths still agree bit for bit."""
    ek = native_kernels
    rng = np.random.default_rng(5)
    x = _t(rng, (64, 128))
    g = jg.tensor(rng.standard_normal((64, 128)).astype(np.float32))
    out = fn(x)
    before = ek.COUNTS["native_calls"]
    (fast,) = jg.autograd.grad(out, x, g)
    if native:
        assert ek.COUNTS["native_calls"] == before + 1
    (rule,) = jg.autograd.grad(fn(x), x, g, create_graph=True)
    np.testing.assert_array_equal(fast.numpy(), rule.detach().numpy())

