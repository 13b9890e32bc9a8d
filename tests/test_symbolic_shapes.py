"""Compile once for every shape: symbolic sizes in a trace (ir/symbolic.py, jit/symbolic_entries.py).

Trace counts, never times: shape-polymorphic programs agree with eager mode and the interpreter across many
sizes with one symbolic trace; each kind of size guard, broken once, retraces (or raises torch's error);
double backward and anomaly mode under symbolic sizes; a training step with variable batch and length."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.nn.functional as F
from jitgrad.ir import symbolic
from jitgrad.ir.symbolic import ShapeEnv, SymFloat, SymInt, concretize


def arr(t):
    return t.detach().numpy() if isinstance(t, jg.Tensor) else np.asarray(t)


# ---- SymInt arithmetic and guards ------------------------------------------------------------------------

def test_symint_arithmetic_stays_symbolic_and_decisions_are_guarded():
    env = ShapeEnv()
    prev, symbolic.ACTIVE.env = symbolic.ACTIVE.env, env
    try:
        B, T = env.symbol(8, "B"), env.symbol(11, "T")
        n = B * T
        assert type(n) is SymInt and n.hint == 88 and repr(n) == "s0*s1"
        assert (n * 4) // 4 is not None and repr((n * 4) // 4) == "s0*s1"      # exact division stays a poly
        assert type(n // 4) is SymInt and (n // 4).hint == 22                   # inexact: an atom
        assert n - B * T == 0 and not env.guards                                # decided without the symbols
        assert (B == T) is False and len(env.guards) == 1                       # decided by hints: guarded
        assert T > 1 and T <= 64
        assert type(1 / n) is SymFloat and abs((1 / n).hint - 1 / 88) < 1e-15
        assert concretize((n, slice(None, T), {"k": [B]}, 1 / n), {"s0": 2, "s1": 3}) == \
            (6, slice(None, 3, None), {"k": [2]}, 1 / 6)
        assert env.holds({"s0": 8, "s1": 11}) and env.holds({"s0": 4, "s1": 9})
        assert not env.holds({"s0": 5, "s1": 5})                                # B != T was assumed
        assert not env.holds({"s0": 5, "s1": 65})                               # T <= 64 was assumed
        assert "64" in env.failed({"s0": 5, "s1": 65})
        assert int(T) == 11                                                     # a plain int: specialised
        assert not env.holds({"s0": 8, "s1": 12})
    finally:
        symbolic.ACTIVE.env = prev


# ---- shape-polymorphic programs: eager == interpreter == compiled, one symbolic trace ----------------------

MASK = jg.tril(jg.ones(32, 32))


def _attention_like(x, w):
    B, T, C = x.shape
    h = x @ w
    att = h @ h.transpose(1, 2) / C ** 0.5
    att = att.masked_fill(jg.tril(jg.ones(T, T)) == 0, float("-inf"))
    att = att.masked_fill(MASK[:T, :T] == 0, float("-inf"))
    y = F.softmax(att, dim=-1) @ h
    y = y + jg.arange(T).float().view(1, T, 1) * 0.01
    a, b = y.split(y.size(2) // 2, dim=2)
    y = jg.cat([b, a], dim=2).reshape(-1, w.shape[1])
    z = y.view(B * T, -1).mean(0) + y.sum(1).mean()
    return (z * z).sum() + x.size(1)


def _reductions(x, w):
    n = x.shape[0]
    m = x.mean(dim=0, keepdim=True)
    v = ((x - m) ** 2).sum(0) / (n - 1)
    idx = jg.arange(n) % 2 == 0
    s = jg.where(idx.view(n, 1), x, -x).amax(1)
    return (v @ w).sum() + s.mean() + x.numel() * 1e-3


def _rows(x, w):
    rows = x.reshape(x.shape[0] * x.shape[1], -1) if x.ndim == 3 else x
    y = F.layer_norm(rows @ w, (w.shape[1],))
    first, rest = y[:1], y[1:]
    return first.sum() * 2 + rest.abs().mean() + F.log_softmax(y, -1)[:, 0].sum()


PROGRAMS = {"attention_like": (_attention_like, 3), "reductions": (_reductions, 2), "rows": (_rows, 3)}


def _sizes(nd):
    out = []
    for T in (3, 5, 7, 9, 4, 12, 6):
        for B in (2, 3):
            out.append((B, T, 8) if nd == 3 else (B * T, 8))
    return out


@pytest.mark.parametrize("backend", ["interpret", "numba"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_polymorphic_programs_agree_with_one_symbolic_trace(name, backend):
    fn, nd = PROGRAMS[name]
    rng = np.random.default_rng(1)
    w = jg.tensor(rng.standard_normal((8, 8)), dtype=jg.float32)
    f = jg.compile(fn, backend=backend, background=False)
    for shape in _sizes(nd):
        x = jg.tensor(rng.standard_normal(shape), dtype=jg.float32)
        np.testing.assert_allclose(arr(f(x, w)), arr(fn(x, w)), rtol=2e-4, atol=1e-4)
    assert f.stats["traces"] == 2 and f.stats["eager_fallbacks"] == 0, f.stats["trace_reasons"]
    assert f.stats["trace_reasons"] == {"first call": 1, "dynamic shape": 1}
    if backend == "numba" and name != "attention_like":     # (its cat is a host step: concrete builds)
        assert f.stats["shape_bindings"] >= len(_sizes(nd)) - 4, f.stats     # one lowering serves the sizes


def test_dynamic_true_and_mark_dynamic_trace_symbolically_from_the_first_call():
    f = jg.compile(lambda x: x.sum(1) * x.shape[1], backend="interpret", dynamic=True)
    for n in (3, 4, 5):
        np.testing.assert_allclose(arr(f(jg.ones(n, n + 1))), np.full(n, (n + 1.0) ** 2))
    assert f.stats["traces"] == 1
    g = jg.compile(lambda x: x.sum(1), backend="interpret")
    x = jg.ones(5, 3)
    jg._dynamo.mark_dynamic(x, 0)
    g(x)
    g(jg.ones(7, 3))
    assert g.stats["traces"] == 1
    h = jg.compile(lambda x: x.sum(), backend="interpret", dynamic=False)
    h(jg.ones(2))
    h(jg.ones(3))
    assert h.stats["traces"] == 2


def test_mark_static_keeps_a_dim_constant():
    f = jg.compile(lambda x: x * 2, backend="interpret")
    x = jg.ones(4, 3)
    jg._dynamo.mark_static(x, 1)
    f(x)
    f(jg.ones(5, 3))          # dim 0 becomes symbolic; dim 1 stays a constant of the trace
    f(jg.ones(6, 3))
    assert f.stats["traces"] == 2


def test_sizes_zero_and_one_specialise_as_torch():
    f = jg.compile(lambda x, y: (x + y).sum(0), backend="interpret")
    for n in (3, 4, 5):
        f(jg.ones(n, 2), jg.ones(n, 2))
    assert f.stats["traces"] == 2
    # size 1 broadcasts: a trace of its own (its key keeps the 1), correct whatever the other sizes
    np.testing.assert_allclose(arr(f(jg.ones(1, 2), jg.ones(4, 2))), [8.0, 8.0])
    np.testing.assert_allclose(arr(f(jg.ones(0, 2), jg.ones(0, 2))), [0.0, 0.0])
    assert f.stats["traces"] == 4


# ---- guards: each kind broken once ---------------------------------------------------------------------------

def test_guard_sizes_equal_broken_raises_torchs_error():
    f = jg.compile(lambda x, y: x + y, backend="interpret")
    for n in (3, 4, 5):
        f(jg.ones(n), jg.ones(n))
    assert f.stats["traces"] == 2
    with pytest.raises(RuntimeError, match="cannot be broadcast|must match|size"):
        f(jg.ones(5), jg.ones(6))


def test_real_mismatch_keeps_the_dims_symbolic():
    f = jg.compile(lambda x, y: x + y, backend="interpret")
    for n in (3, 4):
        f(jg.ones(n), jg.ones(n))
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        f(jg.ones(3), jg.ones(4))
    for n in (5, 6, 7):
        f(jg.ones(n), jg.ones(n))
    assert f.stats["traces"] == 3 and "shape" not in f.stats["trace_reasons"]


def test_code_that_needs_plain_ints_falls_back_to_a_trace_per_shape(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "recompiles")

    def f(x):
        if not isinstance(x.shape[0], int):
            raise TypeError("this code wants an int")
        return x * x.shape[0]
    cf = jg.compile(f, backend="interpret")
    for n in (2, 3, 4):
        np.testing.assert_allclose(arr(cf(jg.ones(n))), np.full(n, float(n)))
    assert cf.stats["trace_reasons"] == {"first call": 1, "static retry": 1, "shape": 1}
    assert "a trace with symbolic sizes failed (TypeError: this code wants an int)" in capsys.readouterr().err


def test_guard_bounded_by_a_buffer_retraces_and_stays_correct():
    buf = jg.arange(10.0)

    def f(x):
        return x * buf[: x.shape[0]].sum()
    cf = jg.compile(f, backend="interpret")
    for n in (3, 4, 5):
        np.testing.assert_allclose(arr(cf(jg.ones(n))), arr(f(jg.ones(n))))
    assert cf.stats["traces"] == 2
    # n > 10: the slice no longer takes n elements (the guard n <= 10 breaks): a new trace, eager's answer
    np.testing.assert_allclose(arr(cf(jg.ones(12))), arr(f(jg.ones(12))))
    assert cf.stats["traces"] == 3 and cf.stats["trace_reasons"].get("size guard") == 1


def test_guard_divisible_broken_raises_torchs_error():
    f = jg.compile(lambda x: x.view(-1, 4).sum(1), backend="interpret")
    for n in (8, 12, 16):
        np.testing.assert_allclose(arr(f(jg.ones(n))), np.full(n // 4, 4.0))
    assert f.stats["traces"] == 2
    with pytest.raises(RuntimeError, match="invalid for input of size 10"):
        f(jg.ones(10))


def test_guard_python_branch_on_a_size_retraces():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x * 3
    cf = jg.compile(f, backend="interpret")
    for n in (2, 3, 4, 5, 6):
        np.testing.assert_allclose(arr(cf(jg.ones(n))), arr(f(jg.ones(n))))
    assert cf.stats["traces"] == 3      # first, symbolic (n <= 4), symbolic (n > 4)


def test_specialised_size_is_guarded_not_silently_reused():
    def f(x):
        return x * float(len(range(x.shape[0])))     # range() needs a plain int: n is specialised, guarded
    cf = jg.compile(f, backend="interpret")
    for n in (2, 3, 4):
        np.testing.assert_allclose(arr(cf(jg.ones(n))), np.full(n, float(n)))


# ---- autograd under symbolic sizes -----------------------------------------------------------------------

def test_double_backward_under_symbolic_sizes():
    w = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def f(x):
        y = (x @ w).tanh().mean()
        (g,) = jg.autograd.grad(y, w, create_graph=True)
        return (g * g).sum()
    cf = jg.compile(f, backend="interpret")
    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 6):
        x = jg.tensor(rng.standard_normal((n, 3)), dtype=jg.float32)
        np.testing.assert_allclose(arr(cf(x)), arr(f(x)), rtol=1e-5)
    assert cf.stats["traces"] == 2


def test_anomaly_mode_under_symbolic_sizes():
    def f(x):
        return (x.sqrt() * (x.shape[0] - 6)).sum()       # at 0, sqrt's backward gives 0 * inf = nan
    cf = jg.compile(f, backend="interpret")
    with jg.autograd.detect_anomaly():
        for n in (3, 4, 5):
            x = jg.ones(n, requires_grad=True)
            cf(x).backward()
            np.testing.assert_allclose(arr(x.grad), np.full(n, 0.5 * (n - 6)))
        assert cf.stats["traces"] == 2
        with pytest.raises(RuntimeError, match="SqrtBackward0.*nan"):
            cf(jg.zeros(6, requires_grad=True)).backward()
    assert cf.stats["traces"] == 2


# ---- a training step with variable batch and sequence length ---------------------------------------------

def _lm_step(V=40, C=16):
    jg.manual_seed(0)
    emb, lin = nn.Embedding(V, C), nn.Linear(C, V)
    opt = jg.optim.Adam(list(emb.parameters()) + list(lin.parameters()), lr=1e-2)

    def step(idx, tgt):
        opt.zero_grad()
        B, T = idx.shape
        loss = F.cross_entropy(lin(emb(idx)).view(B * T, V), tgt.view(B * T))
        loss.backward()
        opt.step()
        return loss.detach()
    return step


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_variable_length_training_equals_eager_with_two_traces(backend):
    rng = np.random.default_rng(0)
    shapes = [(b, t) for t in (5, 9, 6, 13, 7) for b in (2, 3, 4)]
    data = [(jg.tensor(rng.integers(0, 40, s)), jg.tensor(rng.integers(0, 40, s))) for s in shapes]
    eager, comp = _lm_step(), jg.compile(_lm_step(), backend=backend, background=False)
    le = [float(eager(i, t)) for i, t in data]
    lc = [float(comp(i, t)) for i, t in data]
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    assert comp.stats["traces"] <= 2 and comp.stats["eager_fallbacks"] == 0, comp.stats["trace_reasons"]


def test_data_dependent_sizes_are_bounded_not_retraced_per_value():
    # nonzero's size is a value, not a size: a data-dependent symbol bounded by the mask's size (ir/unbacked.py),
    # never a silent retrace per value; with symbolic sizes too (the bound is a polynomial of them)
    f = jg.compile(lambda x: x[x > 0].sum(), backend="interpret")
    for v in ([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [5.0, 2.0, 3.0]):
        np.testing.assert_allclose(float(f(jg.tensor(v))), sum(a for a in v if a > 0))
    assert f.stats["traces"] == 1
    g = jg.compile(lambda x: (x[x > 0] * 2).mean(), dynamic=True)
    rng = np.random.default_rng(0)
    for n in (5, 9, 17, 33):
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(float(g(jg.tensor(x))), (x[x > 0] * 2).mean(), rtol=1e-6)
    assert g.stats["traces"] == 1


def _gpt_model():
    from benchmark_model import gpt_model
    return gpt_model


@pytest.mark.parametrize("sdpa,backend", [(False, "interpret"), (True, "interpret"), (False, "numba")])
def test_nanogpt_with_variable_length_equals_eager(sdpa, backend):
    # nanoGPT's model (B9's), T drawn per batch from 8..block_size (16, inclusive: the mask buffer sliced whole)
    gm = _gpt_model()

    def build():
        jg.manual_seed(0)
        m = gm.make_gpt(jg, 50, 16, 32, 4, 2, 0.0, sdpa)
        return gm.make_step(jg, m, m, gm.make_optimizer(jg, m, 1e-2))
    rng = np.random.default_rng(0)
    data = []
    for T in (12, 8, 16, 9, 14, 16, 11):
        data.append((jg.tensor(rng.integers(0, 50, (3, T))), jg.tensor(rng.integers(0, 50, (3, T)))))
    eager, comp = build(), jg.compile(build(), backend=backend, background=False)
    le = [float(eager(x, y)) for x, y in data]
    lc = [float(comp(x, y)) for x, y in data]
    np.testing.assert_allclose(lc, le, rtol=2e-5, atol=1e-5)
    assert comp.stats["traces"] == 2 and comp.stats["eager_fallbacks"] == 0, comp.stats["trace_reasons"]


# ---- randomly composed shape-polymorphic programs ---------------------------------------------------------

def _op_menu():
    def mask_t(x):
        B, T, C = x.shape
        return x.masked_fill((jg.arange(T) % 2 == 0).view(1, T, 1), 0.0)

    def causal(x):
        B, T, C = x.shape
        w = jg.tril(jg.ones(T, T)) / jg.arange(1, T + 1).float().view(T, 1)
        return w @ x

    def flatten(x):
        B, T, C = x.shape
        return (x.reshape(B * T, C) * 1.5).view(-1, T, C)

    def slice_cat(x):
        T = x.size(1)
        return jg.cat([x[:, 1:], x[:, :1]], dim=1) if T > 1 else x

    def split_c(x):
        # (split along a symbolic dim returns as many pieces as the size asks: that count is guarded, a trace
        # per count; along C it is fixed)
        parts = x.split(2, dim=2)
        return jg.cat([p * (k + 1) for k, p in enumerate(parts)], dim=2)

    return {
        "tanh": lambda x: x.tanh(),
        "center": lambda x: x - x.mean(1, keepdim=True),
        "cumsum": lambda x: x.cumsum(1) / x.shape[1],
        "softmax": lambda x: F.softmax(x, dim=1),
        "mask_t": mask_t, "causal": causal, "flatten": flatten, "slice_cat": slice_cat, "split_c": split_c,
        "norm": lambda x: x / (x.pow(2).sum(dim=(0, 1), keepdim=True) + 1).sqrt(),
    }


@pytest.mark.parametrize("backend", ["interpret", "numba"])
@pytest.mark.parametrize("seed", range(6))
def test_random_polymorphic_programs_agree_across_sizes_with_one_symbolic_trace(seed, backend):
    # numba: sizes bound to one lowering (codegen/program/sized.py) where the program has no host step
    menu = _op_menu()
    rng = np.random.default_rng(seed)
    names = [str(n) for n in rng.choice(sorted(menu), size=5)]

    def prog(x):
        for n in names:
            x = menu[n](x)
        return x.sum(2).mean(0) + x.numel() * 1e-3
    f = jg.compile(prog, backend=backend, background=False)
    for B, T in ((2, 5), (3, 7), (2, 4), (4, 9), (3, 6), (2, 11)):
        x = jg.tensor(rng.standard_normal((B, T, 4)), dtype=jg.float32)
        np.testing.assert_allclose(arr(f(x)), arr(prog(x)), rtol=1e-4, atol=1e-5, err_msg=str(names))
    assert f.stats["traces"] == 2, (names, f.stats["trace_reasons"])
