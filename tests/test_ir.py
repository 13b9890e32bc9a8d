"""The IR: every pass keeps ``verify()`` true and values unchanged on real traced graphs, ``verify`` catches broken
graphs, the printer's exact text, the interpreter against eager, ``JITGRAD_DUMP``, and the transpose pass applied
twice (second order) against eager double backward."""
import inspect
import os
import zlib

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import autograd
from jitgrad.ir import dtypes as dt
from jitgrad.ir.graph import Eqn, Graph, GraphError, Lit, Var, format_graph, verify
from jitgrad.ir.interpret import interpret
from jitgrad.ir.ops import OPS, Aval
from jitgrad.ir.passes import PIPELINE, cse, dce, run_pipeline, simplify, transpose
from jitgrad.jit.graph_function import FRONT

from test_compile_agreement import PROGRAMS, _arrays

THIS = os.path.basename(__file__)
PASSES = [("simplify", simplify), ("cse", cse), ("dce", dce)]


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return start + k
    raise AssertionError(text)


def _entries(cf):
    return [e for es in cf._cache.values() for e in es]


def traced_graphs(name, fn, shapes, domain):
    """The graphs @compile makes for one program: forward (no grad), forward with inputs needing grad (and its
    transposed backward), a step with .backward() inside, and one with create_graph=True inside."""
    arrays = _arrays(name, shapes, domain)
    out = []
    cf = jg.compile(fn)
    cf(*[jg.tensor(a) for a in arrays])
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]
    res = cf(*xs)
    outs = list(res) if isinstance(res, (tuple, list)) else [res]
    outs = [o for o in outs if isinstance(o, jg.Tensor) and o.requires_grad]
    for e in _entries(cf):
        out.append((f"{name}/fwd", e.raw_graph, e.graph))
    for e in _entries(cf):
        if not any(a.requires_grad for a in xs):
            continue
        g = e.graph
        wrt = tuple(range(len(arrays)))
        plan = e.gf.plan(wrt)
        if plan.diff_outs:
            out.append((f"{name}/bwd", plan.transposed.bwd, None))
    if outs:
        def step(*xs):
            r = fn(*xs)
            r = list(r) if isinstance(r, (tuple, list)) else [r]
            loss = sum((o * 1.5).sum() for o in r if isinstance(o, jg.Tensor) and o.dtype in (jg.float32,
                                                                                                jg.float64))
            (g,) = autograd.grad(loss, xs[0], create_graph=True)
            return (g * g).sum()
        cs = jg.compile(step)
        cs(*[jg.tensor(a, requires_grad=True) for a in arrays])
        for e in _entries(cs):
            out.append((f"{name}/create_graph", e.raw_graph, e.graph))
    return out, arrays


SUBSET = [p[0] for p in PROGRAMS]
BY_NAME = {p[0]: p for p in PROGRAMS}


def _random_inputs(g, seed=0):
    rng = np.random.default_rng(seed)
    vals = []
    for v in g.inputs:
        a = v.aval
        if a.dtype.is_floating_point:
            vals.append(rng.uniform(0.5, 1.5, a.shape).astype(a.dtype.np))
        elif a.dtype is dt.bool_:
            vals.append(rng.integers(0, 2, a.shape).astype(bool))
        else:
            vals.append(np.zeros(a.shape, a.dtype.np))     # index inputs: 0 is always in range
    return vals


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SUBSET)
def test_every_pass_keeps_graphs_valid_and_values_unchanged(name):
    graphs, _ = traced_graphs(*BY_NAME[name])
    assert graphs
    for label, raw, _ in graphs:
        assert verify(raw), label
        vals = _random_inputs(raw)
        want = interpret(raw, vals)
        for pname, p in PASSES:
            g = p(raw)
            assert verify(g), f"{label} after {pname}"
            assert len(g.outputs) == len(raw.outputs) and g.inputs == raw.inputs
            _same(interpret(g, vals), want)
        g = raw
        for pname, p in PIPELINE:        # and in pipeline order, twice (passes are idempotent enough)
            g = p(g)
            assert verify(g), f"{label} after {pname}"
        g2 = run_pipeline(g, check=True)
        assert len(g2.eqns) <= len(g.eqns)
        _same(interpret(g2, vals), want)


@pytest.mark.parametrize("name", ["mlp", "softmax", "var_std", "setitem_nonleaf", "custom_function"])
def test_transposed_graphs_verify_and_transpose_again(name):
    graphs, _ = traced_graphs(*BY_NAME[name])
    for label, raw, opt in graphs:
        if opt is None:
            continue
        wrt = [v for v in opt.inputs if v.aval.dtype.is_floating_point]
        diff = [k for k, v in enumerate(opt.outputs) if isinstance(v, Var) and v.aval.dtype.is_floating_point]
        t1 = transpose(opt, diff, wrt, FRONT)
        assert verify(t1.bwd), label
        for _, p in PASSES:
            assert verify(p(t1.bwd))
        # the backward graph is differentiable again: transpose it w.r.t. its inputs
        w2 = [v for v in t1.bwd.inputs]
        d2 = list(range(len(t1.bwd.outputs)))
        t2 = transpose(t1.bwd, d2, w2, FRONT)
        assert verify(t2.bwd)


def test_verify_catches_broken_graphs():
    f32 = dt.float32
    a, b = Var(Aval((2, 3), f32)), Var(Aval((2, 3), f32))
    mul, add, sm = OPS["mul"], OPS["add"], OPS["sum"]
    c, d = Var(Aval((2, 3), f32)), Var(Aval((2, 3), f32))
    good = Graph([a, b], [Eqn(mul, [a, b], [c], {}), Eqn(add, [c, a], [d], {})], [d])
    assert verify(good)
    # use before definition
    with pytest.raises(GraphError, match="before it is defined"):
        verify(Graph([a, b], [good.eqns[1], good.eqns[0]], [d]))
    # an input that is not an input
    with pytest.raises(GraphError, match="before it is defined"):
        verify(Graph([a], good.eqns, [d]))
    # wrong aval on an output
    bad = Var(Aval((3, 2), f32))
    with pytest.raises(GraphError, match="rule says"):
        verify(Graph([a, b], [Eqn(mul, [a, b], [bad], {})], [bad]))
    wrong_dtype = Var(Aval((2, 3), dt.float64))
    with pytest.raises(GraphError, match="rule says"):
        verify(Graph([a, b], [Eqn(mul, [a, b], [wrong_dtype], {})], [wrong_dtype]))
    # a Var defined twice
    with pytest.raises(GraphError, match="redefines"):
        verify(Graph([a, b], [Eqn(mul, [a, b], [c], {}), Eqn(add, [a, b], [c], {})], [c]))
    with pytest.raises(GraphError, match="appears twice"):
        verify(Graph([a, a], [], [a]))
    # an undefined output
    with pytest.raises(GraphError, match="not defined"):
        verify(Graph([a, b], [], [c]))
    # inputs the rule rejects (shapes that do not broadcast)
    e = Var(Aval((4,), f32))
    with pytest.raises(GraphError, match="shape/dtype rule"):
        verify(Graph([a, e], [Eqn(mul, [a, e], [c], {})], [c]))
    # bad params
    s = Var(Aval((2,), f32))
    with pytest.raises(GraphError):
        verify(Graph([a], [Eqn(sm, [a], [s], {"axes": (0,), "keepdims": False})], [s]))
    # `needs` of the wrong length
    with pytest.raises(GraphError, match="needs"):
        verify(Graph([a, b], [Eqn(mul, [a, b], [c], {}, needs=(True,))], [c]))
    # something that is neither a Var nor a Lit
    with pytest.raises(GraphError, match="neither"):
        verify(Graph([a], [Eqn(mul, [a, 2.0], [c], {})], [c]))


def test_verify_catches_a_pass_that_breaks_ssa():
    """A deliberately wrong 'pass' (drops the producer of a used value) is caught by verify."""
    cf = jg.compile(lambda x: (x.exp() * 2).sum())
    cf(jg.ones(3))
    g = _entries(cf)[0].graph
    broken = Graph(g.inputs, g.eqns[1:], g.outputs)
    with pytest.raises(GraphError):
        verify(broken)


# ---- printer snapshots ---------------------------------------------------------------------------------

def test_printer_snapshot_hand_built():
    f32 = dt.float32
    x, w = Var(Aval((2, 3), f32)), Var(Aval((3, 4), f32))
    h, r, s = Var(Aval((2, 4), f32)), Var(Aval((2, 4), f32)), Var(Aval((2,), f32))
    g = Graph([x, w], [Eqn(OPS["matmul"], [x, w], [h], {}, diff=True),
                       Eqn(OPS["mul"], [h, Lit(0.5, Aval((), f32, True))], [r], {}, diff=True),
                       Eqn(OPS["sum"], [r], [s], {"axes": (1,), "keepdims": False})],
              [s, Lit(np.array([1.0, 2.0], np.float32), Aval((2,), f32))])
    assert format_graph(g, "snap") == (
        "snap(%0: f32[2,3], %1: f32[3,4]) {\n"
        "  %2: f32[2,4] = matmul %0 %1\n"
        "  %3: f32[2,4] = mul %2 0.5\n"
        + "  %4: f32[2] = sum[axes=(1,), keepdims=False] %3".ljust(60) + "  # nograd\n"
        "  return %4, [1.,2.]:f32[2]\n"
        "}")
    assert str(g).startswith("graph(%0: f32[2,3], %1: f32[3,4]) {")


def _snap_fn(x, w):
    h = x @ w
    return (h.tanh() * 2.0).sum(dim=1)


def test_printer_snapshot_traced_forward_and_backward():
    f = jg.compile(_snap_fn)
    x = jg.ones(2, 3)
    w = jg.ones(3, 4, requires_grad=True)
    l1, l2 = line_of(_snap_fn, "x @ w"), line_of(_snap_fn, "tanh")
    a, b = f"# {THIS}:{l1} _snap_fn", f"# {THIS}:{l2} _snap_fn"

    def row(text, where):
        return text.ljust(60) + "  " + where
    want = "\n".join([
        "_snap_fn(%0: f32[2,3], %1: f32[3,4]) {",
        row("  %2: f32[2,4] = matmul %0 %1", a),
        row("  %3: f32[2,4] = tanh %2", b),
        row("  %4: f32[2,4] = mul %3 2.0", b),
        row("  %5: f32[2] = sum[axes=(1,), keepdims=False] %4", b),
        "  return %5",
        "}",
        "",
        "_snap_fn_backward(%0: f32[2], %1: f32[2,4], %2: f32[2,3]) {",
        row("  %3: f32[2,1] = reshape[shape=(2, 1)] %0", b),
        row("  %4: f32[2,4] = broadcast_to[shape=(2, 4)] %3", b),
        row("  %5: f32[2,4] = mul %4 2.0", b),
        row("  %6: f32[2,4] = mul %1 %1", b),
        row("  %7: f32[2,4] = sub 1.0 %6", b),
        row("  %8: f32[2,4] = mul %5 %7", b),
        row("  %9: f32[3,2] = permute[perm=(1, 0)] %2", a),
        row("  %10: f32[3,4] = matmul %9 %8", a),
        "  return %10",
        "}"])
    assert f.ir(x, w) == want


def _snap_step_fn(x):
    loss = (x * x).sum()
    loss.backward()
    return loss.detach()


def test_printer_snapshot_step_with_backward_inside():
    f = jg.compile(_snap_step_fn)
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    text = f.ir(x)
    ln = line_of(_snap_step_fn, "x * x")
    where = f"# {THIS}:{ln} _snap_step_fn"
    lines = text.splitlines()
    assert lines[0] == "_snap_step_fn(%0: f32[2]) {"
    assert lines[1] == "  %1: f32[2] = mul %0 %0".ljust(60) + "  " + where
    assert lines[2] == "  %2: f32[] = sum[axes=(0,), keepdims=False] %1".ljust(60) + "  " + where
    # the gradient 2x, computed without recording, is the .grad write-back output
    assert any("nograd" in ln for ln in lines[3:])
    assert lines[-2].startswith("  return %2, ")
    assert "_backward" not in text      # the loss is returned detached: nothing to differentiate outside


# ---- the interpreter is eager ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "softmax", "gather", "setitem_nonleaf", "matmul_broadcast_batch",
                                  "max_min_dim", "argmax"])
def test_interpreter_equals_eager(name):
    _, fn, shapes, domain = BY_NAME[name]
    arrays = _arrays(name, shapes, domain)
    cf = jg.compile(fn)
    cf(*[jg.tensor(a) for a in arrays])
    (e,) = _entries(cf)
    want = fn(*[jg.tensor(a) for a in arrays])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    caps = [c.ref()._data for c in e.captured]
    for g in (e.raw_graph, e.graph):
        got = interpret(g, arrays + caps)
        for a, b in zip(got, want):
            assert a.dtype == b.numpy().dtype
            np.testing.assert_array_equal(a, b.numpy())


# ---- JITGRAD_DUMP ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("setting,stages", [("dce", ["dce"]), ("after_cse", ["cse"]),
                                            ("all", ["trace", "simplify", "cse", "dce"]),
                                            ("simplify,dce", ["simplify", "dce"])])
def test_jitgrad_dump_prints_graphs_to_stderr(setting, stages, monkeypatch, capsys):
    monkeypatch.setenv("JITGRAD_DUMP", setting)

    def dumped(x):
        return (x * 1.0 + 0.0).exp().sum()
    f = jg.compile(dumped)
    f(jg.ones(3))
    err = capsys.readouterr().err
    for st in ("trace", "simplify", "cse", "dce"):
        assert (f"# after {st} dumped" in err) == (st in stages), (st, err)
    assert "exp" in err and "graph(%0: f32[3])" in err
    f(jg.ones(3))        # a cache hit prints nothing
    assert capsys.readouterr().err == ""


def test_jitgrad_dump_unset_prints_nothing(monkeypatch, capsys):
    monkeypatch.delenv("JITGRAD_DUMP", raising=False)
    jg.compile(lambda x: x.exp())(jg.ones(2))
    assert capsys.readouterr().err == ""


# ---- the transpose pass, twice: second order equals eager double backward ---------------------------------

def _inline_backward(fwd: Graph, t, n_x):
    """One graph (x..., ct...) -> grads: the forward eqns followed by the backward graph's, its residual
    inputs replaced by the forward values they stand for."""
    n_ct = t.n_ct
    ct_in, res_in = t.bwd.inputs[:n_ct], t.bwd.inputs[n_ct:]
    sub = dict(zip(res_in, t.residuals))
    eqns = list(fwd.eqns)
    for e in t.bwd.eqns:
        eqns.append(Eqn(e.op, [sub.get(v, v) if isinstance(v, Var) else v for v in e.ins], e.outs, e.params,
                        e.loc, e.diff, e.needs, e.fwd))
    outs = [sub.get(v, v) if isinstance(v, Var) else v for v in t.bwd.outputs]
    return Graph(list(fwd.inputs[:n_x]) + list(fwd.inputs[n_x:]) + list(ct_in), eqns, outs)


@pytest.mark.parametrize("name", ["mlp", "softmax", "layernorm_by_hand", "var_std", "pow_tensor", "gelu",
                                  "logsumexp", "custom_function"])
def test_transpose_twice_equals_eager_double_backward(name):
    _, fn, shapes, domain = BY_NAME[name]
    arrays = _arrays(name, shapes, domain)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    cf = jg.compile(fn)
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]
    out = cf(*xs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    (e,) = _entries(cf)
    g = e.graph
    n = len(arrays)
    caps = [c.ref()._data for c in e.captured]
    diff = [k for k, v in enumerate(g.outputs) if isinstance(v, Var) and v.aval.dtype.is_floating_point]
    cts = [rng.uniform(0.5, 1.5, g.outputs[k].aval.shape) for k in diff]
    t1 = transpose(g, diff, list(g.inputs[:n]), FRONT)
    assert all(t1.present)
    # first order: run the backward graph on the residuals
    res_vals = interpret(Graph(g.inputs, g.eqns, list(t1.residuals)), arrays + caps)
    g1 = interpret(run_pipeline(t1.bwd), cts + res_vals)
    xe = [jg.tensor(a, requires_grad=True) for a in arrays]
    oe = fn(*xe)
    oe = list(oe) if isinstance(oe, (tuple, list)) else [oe]
    oe = [oe[k] for k in diff]
    ge = autograd.grad(oe, xe, [jg.tensor(c) for c in cts], create_graph=True)
    for a, b in zip(g1, ge):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-12)
    # second order: transpose (forward + backward) again, with cotangents v on the gradients
    combined = _inline_backward(g, t1, n)
    assert verify(combined)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    t2 = transpose(combined, list(range(n)), list(combined.inputs[:n]), FRONT)
    assert verify(t2.bwd)
    res2 = interpret(Graph(combined.inputs, combined.eqns, list(t2.residuals)), arrays + caps + cts)
    h = interpret(run_pipeline(t2.bwd), vs + res2)
    he = autograd.grad(ge, xe, [jg.tensor(v) for v in vs], allow_unused=True)
    k = 0
    for p, want in zip(t2.present, he):
        if not p:
            assert want is None or not np.any(want.numpy())
            continue
        np.testing.assert_allclose(h[k], want.numpy(), rtol=1e-9, atol=1e-11)
        k += 1


def _matmul_graph(read_twice=False):
    """``out = (A (B.T))^T`` over float64 matrices A [4, 3], B [5, 3]: the transpose of a weight gradient's product."""
    f64 = dt.float64
    a, b = Var(Aval((4, 3), f64)), Var(Aval((5, 3), f64))
    bt, p, out = Var(Aval((3, 5), f64)), Var(Aval((4, 5), f64)), Var(Aval((5, 4), f64))
    eqns = [Eqn(OPS["permute"], [b], [bt], {"perm": (1, 0)}, diff=True),
            Eqn(OPS["matmul"], [a, bt], [p], {}, diff=True),
            Eqn(OPS["permute"], [p], [out], {"perm": (1, 0)}, diff=True)]
    outs = [out]
    if read_twice:
        s = Var(Aval((4, 5), f64))
        eqns.append(Eqn(OPS["mul"], [p, p], [s], {}, diff=True))
        outs.append(s)
    return Graph([a, b], eqns, outs)


def test_simplify_writes_a_transposed_product_as_the_product_of_transposes():
    """``(A B.T)^T`` -> ``B A.T``: one GEMM reading A transposed by flag, no transposed product for a consumer (or a
    graph output's copy) to read with swapped strides; ``(B.T).T`` is B.  Same values and the same gradients; a
    product read elsewhere too is left alone (it would be computed twice)."""
    g = _matmul_graph()
    s = dce(simplify(g))          # (B.T's permute is left dead)
    assert verify(s)
    assert [e.op.name for e in s.eqns] == ["permute", "matmul"]
    (mm,) = [e for e in s.eqns if e.op.name == "matmul"]
    assert mm.ins[0] is g.inputs[1] and mm.outs == g.outputs          # B @ A.T, into the output itself
    vals = _random_inputs(g)
    _same(interpret(s, vals), interpret(g, vals))
    for graph in (g, s):                                          # the rewritten graph transposes to the same grads
        t = transpose(graph, [0], list(graph.inputs), FRONT)
        assert verify(t.bwd)
    ct = np.random.default_rng(3).uniform(-1, 1, (5, 4))
    grads = []
    for graph in (g, s):
        t = transpose(graph, [0], list(graph.inputs), FRONT)
        res = interpret(Graph(graph.inputs, graph.eqns, list(t.residuals)), vals)
        grads.append(interpret(run_pipeline(t.bwd), [ct] + res))
    _same(grads[1], grads[0])
    two = dce(simplify(_matmul_graph(read_twice=True)))
    assert [e.op.name for e in two.eqns].count("matmul") == 1
    assert [e.op.name for e in two.eqns].count("permute") == 2


def test_simplify_transposes_a_sum_of_products_term_by_term():
    """``(A B + C D)^T`` -> ``B^T A^T + D^T C^T``: forward over reverse's tangent of a weight's gradient
    ``(x^T g)^T`` is such a sum, and was a transposed view copied into the output."""
    f64 = dt.float64
    a, b, c, d = (Var(Aval(s, f64)) for s in ((4, 3), (3, 5), (4, 2), (2, 5)))
    p, q, r, out = Var(Aval((4, 5), f64)), Var(Aval((4, 5), f64)), Var(Aval((4, 5), f64)), Var(Aval((5, 4), f64))
    g = Graph([a, b, c, d], [Eqn(OPS["matmul"], [a, b], [p], {}), Eqn(OPS["matmul"], [c, d], [q], {}),
                             Eqn(OPS["sub"], [p, q], [r], {}), Eqn(OPS["permute"], [r], [out], {"perm": (1, 0)})],
              [out])
    s = dce(simplify(g))
    assert verify(s)
    assert [e.op.name for e in s.eqns].count("matmul") == 2 and s.eqns[-1].op.name == "sub"
    assert s.eqns[-1].outs == [out] and all(e.outs[0].aval.shape == (5, 4) for e in s.eqns if e.op.name != "permute")
    vals = _random_inputs(g)
    _same(interpret(s, vals), interpret(g, vals))


def test_simplify_composes_permute_chains():
    f64 = dt.float64
    x = Var(Aval((2, 3, 4), f64))
    y, z, w = Var(Aval((3, 4, 2), f64)), Var(Aval((4, 2, 3), f64)), Var(Aval((2, 3, 4), f64))
    g = Graph([x], [Eqn(OPS["permute"], [x], [y], {"perm": (1, 2, 0)}),
                    Eqn(OPS["permute"], [y], [z], {"perm": (1, 2, 0)}),
                    Eqn(OPS["permute"], [z], [w], {"perm": (1, 2, 0)})], [z, w])
    s = simplify(g)
    assert verify(s)
    # z is one permute of x; w = x itself
    assert [(e.ins[0] is x, e.params["perm"]) for e in s.eqns if e.outs[0] in s.outputs] == [(True, (2, 0, 1))]
    assert s.outputs[1] is x
    vals = _random_inputs(g)
    _same(interpret(s, vals), interpret(g, vals))


def test_cse_keeps_apart_params_and_literals_equal_only_across_kinds():
    # True == 1 and 0.0 == -0.0 in Python: x[True] (a new dim) is not x[1] (a select), x * -0.0 is not x * 0.0
    x = jg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) - 5)
    f = jg.compile(lambda x: (x[1, :] * 2.0, x[True, :] * 2.0, x * 0.0, x * -0.0), backend="interpret",
                   background=False)
    a, b, z, nz = f(x)
    assert tuple(a.shape) == (4,) and tuple(b.shape) == (1, 3, 4)
    assert np.array_equal(np.signbit(z.numpy()), x.numpy() < 0)
    assert np.array_equal(np.signbit(nz.numpy()), x.numpy() >= 0)
