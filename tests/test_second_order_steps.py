"""Second-order training steps (issue 29's B11 and B12): losses equal to PyTorch's in float64 after several Adam
steps, eager and compiled, and the compiled step graphs no larger than a hand-derived program: each forward
primitive once (no duplicate forward recomputation), as many matmuls as the chain rule needs, no tangent or
cotangent chain computed from zeros.  Counted, never timed.

The workloads are the benchmarks' (benchmarks/force_field.py, benchmarks/pinn.py, loaded by path: putting
benchmarks/ on sys.path would shadow test modules with its harness.py)."""
from __future__ import annotations

import collections
import functools
import importlib.util
import os

import numpy as np
import pytest

import jitgrad as jg

_BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_BENCH, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ff = _load("force_field")
pinn = _load("pinn")
STEPS = 4

# (workload module, keyword arguments of its torch_style)
WORKLOADS = {"B11": (ff, {}), "B12": (pinn, {"laplacian": "reverse"}), "B12 fwd-over-rev": (pinn, {"laplacian": "forward"})}


def _losses(lib, workload, mode="eager", backend=None, steps=STEPS):
    mod, kw = WORKLOADS[workload]
    compile_ = functools.partial(jg.compile, backend=backend, background=False) if lib is jg else None
    call, fn, args, _ = mod.torch_style(lib, mode, np.float64, compile_=compile_, **kw)
    return [float(call()) for _ in range(steps)], fn, args


@pytest.fixture(scope="module")
def torch_losses():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return {w: _losses(torch, w)[0] for w in WORKLOADS}


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("mode,backend", [("eager", None), ("compiled", "interpret"), ("compiled", "numba"),
                                          ("model", "interpret")])
def test_losses_equal_torch_float64(workload, mode, backend, torch_losses):
    got = _losses(jg, workload, mode, backend)[0]
    np.testing.assert_allclose(got, torch_losses[workload], rtol=1e-10)
    assert got[-1] < got[0]          # the steps train


# ------------------------------------------------------------------------------------------------ graph sizes

def _step_graph(workload):
    """The compiled whole step's graph after the passes (simplify, cse, dce)."""
    _, fn, args = _losses(jg, workload, "compiled", "interpret", steps=1)
    (entries,) = fn._cache.values()
    return entries[0].graph


def _count(g, name, shape=None):
    return sum(1 for e in g.eqns if e.op.name == name and (shape is None or e.outs[0].aval.shape == shape))


def _duplicates(g):
    """Eqns that compute what an earlier eqn computed (same op, same inputs, same params)."""
    seen, dups = set(), []
    for e in g.eqns:
        key = (e.op.name, tuple(id(v) if not hasattr(v, "value") else repr(v.value) for v in e.ins),
               repr(sorted(e.params.items())))
        if key in seen:
            dups.append(e)
        seen.add(key)
    return dups


def _is_zero_const(g, v, defs):
    if hasattr(v, "value"):
        a = np.asarray(v.value)
        return a.size > 0 and not np.any(a)
    d = defs.get(v)
    return d is not None and d.op.name == "broadcast_to" and _is_zero_const(g, d.ins[0], defs)


def _zero_chains(g):
    """Eqns that read an all-zero constant where it is not a buffer to accumulate into (index_put's base) or a
    select's other branch: a tangent or cotangent chain computed from zeros."""
    defs = {o: e for e in g.eqns for o in e.outs}
    bad = []
    for e in g.eqns:
        for k, v in enumerate(e.ins):
            if (e.op.name == "index_put" and k == 0) or e.op.name == "where":
                continue
            if _is_zero_const(g, v, defs):
                bad.append(e)
    return bad


def _identity_pows(g):
    return [e for e in g.eqns if e.op.name == "pow" and hasattr(e.ins[1], "value")
            and np.all(np.asarray(e.ins[1].value) == 1)]


@pytest.fixture(scope="module")
def graphs():
    return {w: _step_graph(w) for w in WORKLOADS}


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_step_graph_computes_nothing_twice(workload, graphs):
    g = graphs[workload]
    assert not _duplicates(g), [(e.op.name, e.loc) for e in _duplicates(g)]
    assert not _zero_chains(g), [(e.op.name, e.loc) for e in _zero_chains(g)]
    assert not _identity_pows(g)


def test_b11_step_graph_is_the_hand_derived_program(graphs):
    g = graphs["B11"]
    B, P = ff.B, ff.A * (ff.A - 1)
    # each transcendental of the forward once: its derivatives reuse it (exp' = exp, cos'' = -cos, tanh' from tanh)
    assert [_count(g, n) for n in ("exp", "cos", "sin", "tanh")] == [1, 1, 1, 2]
    assert _count(g, "sqrt", (B, P)) == 1          # the distance; the other sqrts are Adam's
    # 3 forward, 3 for the forces (input gradients only), then the parameter gradient: 2 per matmul whose
    # operands both depend on the parameters, 1 where one does not (the ones seeding dE/dx, the features: x is
    # not differentiated): 10
    assert _count(g, "matmul") == 16
    gathers = [e for e in g.eqns if e.op.name == "getitem" and any(s[0] == "tensor" for s in e.params["spec"]
                                                                    if isinstance(s, tuple))]
    scatters = [e for e in g.eqns if e.op.name == "index_put" and e.params.get("accumulate")
                and any(isinstance(s, tuple) and s[0] == "tensor" for s in e.params["spec"])]
    # x[:, i], x[:, j]; their transposes for the forces (scatter-adds); the scatter-adds' transposes (gathers)
    assert (len(gathers), len(scatters)) == (4, 2)
    # and no other scatter: the transposes of r[..., None] and fc[..., None] are reshapes of their cotangents
    assert _count(g, "index_put") == 2


@pytest.mark.parametrize("workload", ["B12", "B12 fwd-over-rev"])
def test_b12_step_graph_is_the_hand_derived_program(workload, graphs):
    g = graphs[workload]
    # u at the collocation and at the boundary points: 3 tanh layers each; derivatives reuse them
    assert _count(g, "tanh") == 6
    # forward 4 + 4 (boundary), u_x/u_t 4, u_xx 6 (reverse over reverse and forward over reverse alike: 3 along
    # the forward chain, 3 along the backward one), then the parameter gradient: 2 per matmul whose operands both
    # depend on the parameters, 1 where one is a constant (the points, the ones seeding u_x, e_x): 32
    assert _count(g, "matmul") == 50


# ------------------------------------------------------------------------------------------------ compiled inside jvp

@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_compiled_function_called_inside_jvp_carries_the_tangents(backend):
    """jg.compile(model) inside func.jvp / forward_ad (B12's forward-over-reverse with a compiled model): the
    tangents flow through the compiled function as through eager code, never dropped (torch.compile drops them)."""
    rng = np.random.default_rng(0)
    w = jg.tensor(rng.standard_normal((3, 4)))
    x, t = jg.tensor(rng.standard_normal((5, 3))), jg.tensor(rng.standard_normal((5, 3)))

    def f(x):
        return jg.tanh(x @ w).sum(1)
    cf = jg.compile(f, backend=backend, background=False)
    cf(x)                                            # compiled for these arguments before the jvp
    want = jg.func.jvp(f, (x,), (t,))
    got = jg.func.jvp(cf, (x,), (t,))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    with jg.autograd.forward_ad.dual_level():
        y = cf(jg.autograd.forward_ad.make_dual(x, t))
        np.testing.assert_allclose(jg.autograd.forward_ad.unpack_dual(y).tangent.numpy(), want[1].numpy(),
                                   rtol=1e-12)
    # forward over reverse through it: the Hessian-vector product of sum(f)
    hvp = jg.func.jvp(jg.func.grad(lambda x: cf(x).sum()), (x,), (t,))[1]
    want_hvp = jg.func.jvp(jg.func.grad(lambda x: f(x).sum()), (x,), (t,))[1]
    np.testing.assert_allclose(hvp.numpy(), want_hvp.numpy(), rtol=1e-12)


# ------------------------------------------------------------------------------------------------ compile(model)

def _matmul_calls(fn):
    """Matmuls run by ``fn()`` (eager ops and the eqns of compiled graphs, counted by the profiler)."""
    with jg.autograd.profiler.profile() as prof:
        fn()
    return sum(1 for e in prof.function_events if e.name.split()[0] == "matmul")


def test_compiled_model_backward_computes_only_the_cotangents_asked_for():
    """autograd.grad(u.sum(), x, create_graph=True) through jg.compile(model), the parameters requiring grad too:
    the compiled backward computes d/dx only (one matmul per layer), not the parameters' gradients (eager nodes
    compute those too: two matmuls per layer), and recomputes nothing: the residuals it reads (the activations)
    are differentiable as outputs of the forward's own node, which reads only values the forward saved."""
    data = pinn.make_data(np.float64)
    model = pinn.make_model(jg, data["params"], jg.float64)
    cm = jg.compile(model, backend="interpret")
    x = jg.tensor(data["xt"][:64], requires_grad=True)
    calls = {}
    for name, net in (("eager", model), ("compiled", cm)):
        def first():
            return jg.autograd.grad(net(x)[:, 0].sum(), x, create_graph=True)[0]
        first()                     # (the first call traces the backward graphs)
        u = net(x)[:, 0].sum()
        calls[name] = _matmul_calls(lambda: jg.autograd.grad(u, x, create_graph=True))
    assert calls["compiled"] == pinn.DEPTH + 1 <= calls["eager"]
    # the values: the same as eager, to second order
    gm = jg.autograd.grad(cm(x)[:, 0].sum(), x, create_graph=True)[0]
    ge = jg.autograd.grad(model(x)[:, 0].sum(), x, create_graph=True)[0]
    np.testing.assert_allclose(gm.detach().numpy(), ge.detach().numpy(), rtol=1e-12)
    params = list(model.parameters())
    for wrt in (params, [x], params + [x]):
        hm = jg.autograd.grad((gm[:, 0] ** 2).sum(), wrt, retain_graph=True, allow_unused=True)
        he = jg.autograd.grad((ge[:, 0] ** 2).sum(), wrt, retain_graph=True, allow_unused=True)
        for a, b in zip(hm, he):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-14)


def test_compiled_model_in_an_eager_pinn_step_matmul_calls():
    """B12's eager step with jg.compile(model): 120 matmuls a step when the compiled backward computed every
    input's cotangent and recomputed the residuals for create_graph, 75 when the residuals' backward ran apart from
    the forward's; 50 now, eager 61 (eager's backward nodes compute both operands' cotangents of a matmul)."""
    counts = {}
    for mode in ("eager", "model"):
        call = pinn.torch_style(jg, mode, np.float64, compile_=functools.partial(jg.compile, backend="interpret"))[0]
        call()
        counts[mode] = _matmul_calls(call)
    assert counts["eager"] == 61
    assert counts["model"] <= 50 <= counts["eager"]


def test_compiled_model_in_an_eager_pinn_step_copies_no_weight_gradient():
    """B12's eager step with jg.compile(model), numba: the compiled backward graphs return each nn.Linear weight's
    gradient ``(x.T g).T`` as the product ``g.T x`` written straight into its output (simplify's rewrite of a
    transposed product), not as a transposed view copied into a fresh array: 18 output copies a step before, 0 now;
    42 GEMMs (50 before the products with a single result row or column, the last layer's to one output and its
    gradients, became loops: ``ir/passes/unit_products.py``)."""
    from jitgrad.jit.graph_code import _COMPILED
    before = set(_COMPILED)
    call = pinn.torch_style(jg, "model", np.float32,
                            compile_=functools.partial(jg.compile, backend="numba", background=False))[0]
    call()
    call()
    programs = [cg.program for k, cg in _COMPILED.items() if k not in before]
    steps = [s for p in programs for s in p.steps]
    assert [s.label for s in steps if "copy" in s.label or s.kind == "pycopy"] == []
    # (a product split over the pool's rows is one step, its rows left the last block: layout.split_rows)
    assert sum(s.kind in ("gemm", "bgemm") for s in steps) == 42


def _tiny_pinn(net, x, xb, gb, params):
    """A B12-like step on tiny sizes: u_x, u_t by a first and u_xx by a second create_graph backward through
    ``net``, the residual loss and a boundary term, backward to ``params``; returns the loss and the gradients."""
    u = net(x)[:, 0]
    du = jg.autograd.grad(u.sum(), x, create_graph=True)[0]
    u_xx = jg.autograd.grad(du[:, 0].sum(), x, create_graph=True)[0][:, 0]
    r = du[:, 1] + u * du[:, 0] - 0.01 * u_xx
    loss = (r ** 2).mean() + ((net(xb)[:, 0] - gb) ** 2).mean()
    loss.backward(inputs=params)
    grads = [p.grad.numpy().copy() for p in params]
    for p in params:
        p.grad = None
    return float(loss), grads


def test_compiled_model_in_a_double_backward_step_runs_no_more_matmuls_than_eager():
    """jg.compile(model) inside an eager double-backward step (B12-like, tiny sizes): its compiled graphs make
    fewer matmuls than eager's nodes, with the same loss and gradients.  The cotangents that reach the saved
    activations from the second and third order backward meet the output's at the forward's one node, so the
    forward is transposed once per backward pass (it was twice, the residuals' graph apart), and a linear layer's
    saved W.T is not differentiated when only the input's cotangent is asked for."""
    rng = np.random.default_rng(0)
    model = jg.nn.Sequential(jg.nn.Linear(2, 6), jg.nn.Tanh(), jg.nn.Linear(6, 6), jg.nn.Tanh(),
                             jg.nn.Linear(6, 1)).double()
    params = list(model.parameters())
    x = jg.tensor(rng.uniform(-1, 1, (9, 2)), requires_grad=True)
    xb, gb = jg.tensor(rng.uniform(-1, 1, (4, 2))), jg.tensor(rng.uniform(-1, 1, 4))
    cm = jg.compile(model, backend="interpret")
    want = _tiny_pinn(model, x, xb, gb, params)
    got = _tiny_pinn(cm, x, xb, gb, params)       # (traces the forward and its backward graphs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    eager = _matmul_calls(lambda: _tiny_pinn(model, x, xb, gb, params))
    compiled = _matmul_calls(lambda: _tiny_pinn(cm, x, xb, gb, params))
    # compiled: 51 when the residuals' graph was transposed apart from the forward's (and W.T differentiated)
    assert eager == 43
    assert compiled <= 35 < eager


def test_gradgradcheck_through_a_compiled_module():
    """Second and third order through jg.compile(model), against finite differences: gradgradcheck of the model,
    and of its input gradient taken with create_graph (whose residuals are then differentiated through the
    forward's node)."""
    rng = np.random.default_rng(1)
    model = jg.nn.Sequential(jg.nn.Linear(2, 3), jg.nn.Tanh(), jg.nn.Linear(3, 1)).double()
    cm = jg.compile(model, backend="interpret")
    x = jg.tensor(rng.uniform(-1, 1, (4, 2)), requires_grad=True)
    assert jg.autograd.gradgradcheck(lambda x: cm(x), (x,))

    def input_gradient(x):
        return jg.autograd.grad(cm(x).sum(), x, create_graph=True)[0]
    assert jg.autograd.gradgradcheck(input_gradient, (x,))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_gradgradcheck_of_a_compiled_input_gradient_with_every_input(backend):
    """A compiled MLP of explicit parameters: its input gradient (create_graph) differentiated twice more with
    respect to every input; the saved transposed weights and activations are outputs of the forward's node."""
    rng = np.random.default_rng(2)

    def mlp(x, w1, b1, w2):
        return (jg.tanh(x @ w1.t() + b1) @ w2.t()).sum()
    cf = jg.compile(mlp, backend=backend, background=False)

    def input_gradient(x, w1, b1, w2):
        return jg.autograd.grad(cf(x, w1, b1, w2), x, create_graph=True)[0]
    xs = tuple(jg.tensor(rng.uniform(-1, 1, s), requires_grad=True) for s in ((3, 2), (4, 2), (4,), (1, 4)))
    assert jg.autograd.gradcheck(input_gradient, xs)
    assert jg.autograd.gradgradcheck(input_gradient, xs)


def test_a_double_backward_reading_a_value_the_forward_did_not_save_recomputes_it():
    """A compiled graph whose residual's own backward reads a forward value the first order never needed (here
    ``sin(x0)``'s input, where only the other factor of ``sin(x0) * q`` is differentiated): that value is recomputed
    as a differentiable function of the inputs, and the second derivative is right."""
    from jitgrad.ir import dtypes as dt
    from jitgrad.ir.graph import Eqn, Graph, Lit, Var
    from jitgrad.ir.ops import OPS, Aval
    from jitgrad.jit.graph_function import GraphFunction

    av = Aval((3,), dt.float64)
    x, x0, p, q, r = (Var(av) for _ in range(5))
    out = Var(Aval((), dt.float64))
    two, three = (Lit(np.float64(c), Aval((), dt.float64)) for c in (2.0, 3.0))
    g = Graph([x], [Eqn(OPS["mul"], [x, two], [x0], {}, diff=True, needs=(True, False)),
                    Eqn(OPS["sin"], [x0], [p], {}, diff=True),
                    Eqn(OPS["mul"], [x, three], [q], {}, diff=True, needs=(True, False)),
                    Eqn(OPS["mul"], [p, q], [r], {}, diff=True, needs=(False, True)),
                    Eqn(OPS["sum"], [r], [out], {"axes": (0,), "keepdims": False}, diff=True)], [out])
    gf = GraphFunction(g, [True], "interpret")
    xv = np.array([0.1, 0.7, -1.2])
    xt = jg.tensor(xv, requires_grad=True)
    (first,) = jg.autograd.grad(gf([xt])[0], xt, create_graph=True)
    np.testing.assert_allclose(first.detach().numpy(), 3 * np.sin(2 * xv), rtol=1e-14)   # through q only
    plan = gf.plan((0,))
    assert [v is p for v in plan.transposed.residuals] == [True]      # x0 is not saved
    (second,) = jg.autograd.grad(first.sum(), xt)
    np.testing.assert_allclose(second.numpy(), 6 * np.cos(2 * xv), rtol=1e-14)
    assert any(bk.recomputed for bk in plan._backward.values())
