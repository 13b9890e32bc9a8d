"""Forward mode: the jvp pass over the IR (``ir/passes/jvp.py``), ``jitgrad.func.jvp``/``linearize``/``jacfwd``/
``hessian`` on it and on eager dual tensors, nested both ways, eager == interpreter == compiled.

Random programs (``test_random_programs.programs``) are pushed forward four ways that must agree: eager dual
tensors, the jvp pass's tangent graph on the reference interpreter, ``@jg.compile`` of ``func.jvp``, and central
differences; the same for jvp-of-vjp (forward over reverse) against differences of the eager vjp.
"""
import numpy as np
import pytest
from hypothesis import given, settings

import jitgrad as jg
from jitgrad import func as jf
from jitgrad.ir.graph import Lit
from jitgrad.ir.interpret import interpret
from jitgrad.ir.ops import Aval
from jitgrad.ir.passes import jvp as jvp_pass, split_linear
from jitgrad.jit.graph_function import FRONT
from jitgrad.func.tracing import result_marker, trace_function

from test_random_programs import build, programs


def _t(a):
    return jg.tensor(np.asarray(a, dtype=np.float64))


def _np(x):
    return x.detach().numpy() if isinstance(x, jg.Tensor) else np.asarray(x)


def _tangent_graph(fn, arrays):
    leaves = [_t(a) for a in arrays]
    graph, sources, out, ft = trace_function(fn, leaves, [a.shape for a in arrays], lambda s: (s, {}))
    assert not sources
    graph.outputs = []
    for o in out:
        kind, v = result_marker(ft, o)
        graph.outputs.append(v if kind == "var" else Lit(v.numpy(), Aval(tuple(v.shape), v.dtype)))
    return jvp_pass(graph, graph.inputs, FRONT), len(out)


def _fd(fn, arrays, ts, eps=1e-6):
    hi = fn(*[_t(a + eps * t) for a, t in zip(arrays, ts)])
    lo = fn(*[_t(a - eps * t) for a, t in zip(arrays, ts)])
    return [(_np(h) - _np(l)) / (2 * eps) for h, l in zip(hi, lo)]


def _close(got, want, what, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(_np(g), _np(w), rtol=rtol, atol=atol, err_msg=f"{what}[{k}]")


def _check_program(prog, numba=False):
    shapes, ops, outs, seed = prog
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    ts = [rng.standard_normal(s) for s in shapes]
    fn = build(ops, outs)
    n = len(arrays)
    # eager dual tensors
    o_e, t_e = jf.jvp(fn, tuple(_t(a) for a in arrays), tuple(_t(t) for t in ts))
    fd = _fd(fn, arrays, ts)
    scale = max(1.0, max(float(np.abs(f).max(initial=0)) for f in fd))
    _close(t_e, fd, "eager jvp vs differences", 1e-5, 1e-6 * scale)
    # the jvp pass on the interpreter
    tg, n_out = _tangent_graph(fn, arrays)
    res = interpret(tg, list(arrays) + list(ts))
    _close(res[:n_out], o_e, "interpreted tangent graph: values", 1e-12, 1e-12)
    _close(res[n_out:], t_e, "interpreted tangent graph: tangents", 1e-10, 1e-12)
    # linearize: the linear part alone
    parts = split_linear(tg, n, n_out)
    prim = interpret(parts.primal, list(arrays))
    lin = interpret(parts.linear, list(ts) + prim[n_out:])
    _close(lin, t_e, "linear graph", 1e-10, 1e-12)
    # compiled
    for backend in ("interpret",) + (("numba",) if numba else ()):
        cf = jg.compile(lambda *a: jf.jvp(fn, a[:n], a[n:]), backend=backend)
        o_c, t_c = cf(*[_t(a) for a in arrays], *[_t(t) for t in ts])
        _close(o_c, o_e, f"compiled ({backend}) values", 1e-10, 1e-12)
        _close(t_c, t_e, f"compiled ({backend}) tangents", 1e-10, 1e-12)
    # jvp of vjp (forward over reverse) against differences of the eager vjp
    us = [rng.standard_normal(np.shape(_np(o))) for o in o_e]

    def pull(*xs):
        return jf.vjp(fn, *xs)[1](tuple(_t(u) for u in us))
    _, fr = jf.jvp(pull, tuple(_t(a) for a in arrays), tuple(_t(t) for t in ts))
    fd2 = _fd(pull, arrays, ts)
    scale = max(1.0, max(float(np.abs(f).max(initial=0)) for f in fd2))
    _close(fr, fd2, "jvp of vjp vs differences", 1e-4, 1e-5 * scale)
    cf = jg.compile(lambda *a: jf.jvp(pull, a[:n], a[n:])[1], backend="interpret")
    _close(cf(*[_t(a) for a in arrays], *[_t(t) for t in ts]), fr, "compiled jvp of vjp", 1e-9, 1e-11)
    tg2, _ = _tangent_graph(pull, arrays)
    _close(interpret(tg2, list(arrays) + list(ts))[n:], fr, "interpreted jvp of vjp", 1e-9, 1e-11)


@settings(max_examples=25, deadline=None)
@given(programs())
def test_random_programs_jvp_and_jvp_of_vjp(prog):
    _check_program(prog)


@pytest.mark.parametrize("prog", [
    ([(2, 3), (3,)], [("binary", "mul", 0, 1), ("matmul", 2, 1), ("unary", "log_sq1", 3)], [4], 1),
    ([(3, 1), (1, 3)], [("binary", "add", 0, 1), ("softmax", 2, 1, True), ("reduce", "logsumexp", 3, 0, False)],
     [4, 2], 2),
    ([(2, 2)], [("shape", "expand", 0), ("reduce", "var0", 1, 0, True), ("cat", 2), ("index0", 3)], [4], 3),
])
def test_fixed_programs_with_numba(prog):
    _check_program(prog, numba=True)


def _mlp_loss():
    rng = np.random.default_rng(0)
    w1, w2 = _t(rng.standard_normal((4, 5)) * 0.5), _t(rng.standard_normal((5, 2)) * 0.5)
    return lambda x: (jg.tanh(x @ w1) @ w2).softmax(-1).log().sum()


def test_hvp_every_nesting_agrees():
    """H v four ways: forward over reverse, reverse over forward, reverse over reverse, forward over forward
    (as v^T H v), eager and compiled."""
    f = _mlp_loss()
    rng = np.random.default_rng(1)
    x, v = _t(rng.standard_normal((3, 4))), _t(rng.standard_normal((3, 4)))
    H = jf.hessian(f)(x).numpy().reshape(12, 12)
    want = (H @ v.numpy().reshape(-1)).reshape(3, 4)
    fwd_rev = lambda a, t: jf.jvp(jf.grad(f), (a,), (t,))[1]          # noqa: E731
    rev_fwd = lambda a, t: jf.grad(lambda b: jf.jvp(f, (b,), (t,))[1])(a)  # noqa: E731
    rev_rev = lambda a, t: jf.grad(lambda b: (jf.grad(f)(b) * t).sum())(a)  # noqa: E731
    for fn in (fwd_rev, rev_fwd, rev_rev):
        np.testing.assert_allclose(fn(x, v).numpy(), want, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(jg.compile(fn, backend="interpret")(x, v).numpy(), want, rtol=1e-9, atol=1e-11)
    fwd_fwd = lambda a, t: jf.jvp(lambda b: jf.jvp(f, (b,), (t,))[1], (a,), (t,))[1]   # noqa: E731
    np.testing.assert_allclose(float(fwd_fwd(x, v)), v.numpy().reshape(-1) @ want.reshape(-1), rtol=1e-9)
    # torch.func's hessian is jacfwd(jacrev): check it against reverse over reverse
    H2 = jf.jacrev(jf.jacrev(f))(x).detach().numpy().reshape(12, 12)
    np.testing.assert_allclose(H, H2, rtol=1e-9, atol=1e-11)


def test_compiled_forward_over_reverse_saves_nothing_and_interleaves():
    """Under @jg.compile, func.jvp leaves one graph: primal and tangent eqns in one straight line, with as many
    matmuls as a hand-written forward-over-reverse HVP of a 2-layer MLP needs (x w1, t w1, h w2, th w2, and the
    backward's two products, each with its tangent): no second reverse pass."""
    f = _mlp_loss()
    x, v = _t(np.ones((3, 4))), _t(np.full((3, 4), 0.5))
    cf = jg.compile(lambda a, t: jf.jvp(jf.grad(f), (a,), (t,))[1], backend="interpret")
    cf(x, v)
    text = str(cf.ir(x, v))
    assert text.count("= matmul") <= 8, text


def test_linearize_evaluates_only_the_linear_graph():
    f = lambda a, b: (a.sin() * b).cumsum(0).exp()   # noqa: E731
    rng = np.random.default_rng(2)
    a, b = _t(rng.standard_normal((3, 2))), _t(rng.standard_normal(2))
    out, lin = jf.linearize(f, a, b)
    ta, tb = _t(rng.standard_normal((3, 2))), _t(rng.standard_normal(2))
    np.testing.assert_allclose(out.numpy(), f(a, b).numpy())
    np.testing.assert_allclose(lin(ta, tb).numpy(), jf.jvp(f, (a, b), (ta, tb))[1].numpy(), rtol=1e-12)
    calls = []
    from jitgrad.runtime import dispatch
    orig = dispatch._bind
    try:
        dispatch._bind = lambda op, args, params: (calls.append(op.name), orig(op, args, params))[1]
        lin(ta, tb)
    finally:
        dispatch._bind = orig
    assert "sin" not in calls and "exp" not in calls, calls      # the primal is not recomputed


# ---- eager forward over reverse: memory (counted with tracemalloc, never timed) ----------------------------------

def _b13_like(n=128, d_in=96, hidden=128, classes=10):
    """B13's MLP loss (relu, cross-entropy) on small sizes: the loss of the six parameters, the parameters and
    random directions (float32)."""
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((n, d_in)).astype(np.float32))
    y = jg.tensor(rng.integers(0, classes, n))
    shapes = [(d_in, hidden), (hidden,), (hidden, hidden), (hidden,), (hidden, classes), (classes,)]
    ps = tuple(jg.tensor((rng.standard_normal(s) * 0.1).astype(np.float32)) for s in shapes)
    ts = tuple(jg.tensor((rng.standard_normal(s) * 0.05).astype(np.float32)) for s in shapes)

    def f(w1, b1, w2, b2, w3, b3):
        h = jg.relu(x @ w1 + b1)
        h = jg.relu(h @ w2 + b2)
        return jg.nn.functional.cross_entropy(h @ w3 + b3, y)
    return f, ps, ts


def _hvp_fwd_rev(f, ps, ts):
    return jf.jvp(jf.grad(f, argnums=tuple(range(6))), ps, ts)[1]


def _hvp_rev_rev(f, ps, ts):
    g = jf.grad(f, argnums=tuple(range(6)))
    return jf.grad(lambda *p: sum((gi * vi).sum() for gi, vi in zip(g(*p), ts)), argnums=tuple(range(6)))(*ps)


def _no_background_builds():
    """Wait for the build thread to go idle: tracemalloc counts every thread's allocations, and a build an earlier
    test queued in this process renders its LLVM text (hundreds of kB of Python strings) while a peak is taken."""
    from jitgrad.codegen.native import build_thread
    assert build_thread.wait_background(300)


def _peak_bytes(fn):
    """Peak bytes allocated while ``fn()`` runs, the cycle collector off: values kept alive only by reference
    cycles count until the call returns, as they do whenever the collector does not happen to run.  The warm-up
    runs with the build thread idle, as the measured call does, and twice: a pooled GEMM's plan is made per thread
    count, which is one while the build thread works or the eager pacer holds splits (``pooled_gemm.
    block_threads``), so a warm-up beside an earlier test's build made no two-thread plan and the measured call
    made it, with its one-time probe of the cut's bits (110 kB: forward over reverse over the line in 2 CI runs
    of 9, 2026-12-02; scripted, a busy warm-up adds 410 kB to the peak)."""
    import gc
    import tracemalloc
    _no_background_builds()
    fn()
    fn()
    _no_background_builds()
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        gc.enable()


def test_eager_forward_over_reverse_makes_no_reference_cycles():
    """The jvp rules' contexts hold the op's inputs and outputs; a context referring to itself (a closure over it
    stored on it) kept every one of them alive until the cycle collector ran: B13's forward over reverse peaked
    at 1.3-2.1x reverse over reverse."""
    import gc
    f, ps, ts = _b13_like(n=8, d_in=6, hidden=5)
    _hvp_fwd_rev(f, ps, ts)
    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        _hvp_fwd_rev(f, ps, ts)
        gc.collect()
        contexts = [o for o in gc.garbage if type(o).__name__ == "RuleCtx"]
        # (func.grad's fresh leaves and their AccumulateGrad nodes refer to each other: views of the arguments)
        values = [o for o in gc.garbage if isinstance(o, jg.Tensor)
                  and not any(np.shares_memory(o.detach().numpy(), a.numpy()) for a in ps + ts)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert contexts == [] and values == []


@pytest.mark.parametrize("m,k,n", [(40, 40, 40), (256, 200, 300)])
def test_gemm_adds_a_product_into_an_array_in_place(m, k, n):
    """``blas.matmul_add_into``: ``c += a @ b`` by the GEMM (beta = 1), for C- and F-ordered operands, below and
    above the threaded size; nothing written (False) where it cannot (a strided or read-only ``c``, an operand
    sharing ``c``'s memory, mixed dtypes, an integer product)."""
    from jitgrad.ir.ops import blas
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        for a_, b_ in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b)), (a.T.copy().T, b)):
            c = rng.standard_normal((m, n)).astype(dtype)
            want = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
            buf = c.ctypes.data
            assert blas.matmul_add_into(c, a_, b_)
            assert c.ctypes.data == buf
            np.testing.assert_allclose(c, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4)
        c = np.zeros((m, 2 * n), dtype)[:, ::2]
        assert not blas.matmul_add_into(c, a, b) and not c.any()
        c = np.zeros((m, n), dtype)
        c.flags.writeable = False
        assert not blas.matmul_add_into(c, a, b)
        sq = rng.standard_normal((m, m)).astype(dtype)
        assert not blas.matmul_add_into(sq, sq, sq[:, :m])
    assert not blas.matmul_add_into(np.zeros((m, n), np.float32), a.astype(np.float32), b.astype(np.float64))
    assert not blas.matmul_add_into(np.zeros((m, n), np.int64), np.ones((m, k), np.int64), np.ones((k, n), np.int64))


def test_eager_matmul_jvp_in_a_plain_backward_makes_one_array():
    """matmul's tangent t_x @ y + x @ t_y where the rule's binds record nothing (a backward without create_graph,
    under one dual level): the second product is added by the GEMM into the first's array, so the rule leaves one
    array of the output's size and allocates no other; with history to record, the same values as two products."""
    import tracemalloc
    from jitgrad.autograd import forward_ad as fwAD
    rng = np.random.default_rng(4)
    x, tx = (_t(rng.standard_normal((96, 64))) for _ in range(2))
    y, ty = (_t(rng.standard_normal((64, 80))) for _ in range(2))
    want = tx.numpy() @ y.numpy() + x.numpy() @ ty.numpy()
    with fwAD.dual_level():
        dx, dy = fwAD.make_dual(x, tx), fwAD.make_dual(y, ty)
        dx @ dy
        with jg.no_grad():
            _no_background_builds()
            tracemalloc.start()
            try:
                out = dx @ dy
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            t = fwAD.unpack_dual(out).tangent
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-12)
        assert peak < 2 * 96 * 80 * 8 + 8192, peak     # the primal and the tangent, no third product
        w = y.clone().requires_grad_()
        dw = fwAD.make_dual(w, ty)
        t2 = fwAD.unpack_dual(dx @ dw).tangent
        assert t2.requires_grad
        np.testing.assert_allclose(t2.detach().numpy(), want, rtol=1e-12)


def test_saved_output_read_only_as_a_mask_carries_no_tangent():
    """relu's node reads its saved output only as ``out <= 0``, so under forward mode the saved output gets no
    tangent (it would keep the output's tangent alive until relu's backward runs); exp's reads its output's value,
    so the saved one carries the tangent a forward over reverse needs."""
    from jitgrad.autograd import forward_ad as fwAD
    x = _t([-1.0, 2.0]).requires_grad_()
    with fwAD.dual_level():
        d = fwAD.make_dual(x, _t([1.0, 1.0]))
        r, e = d.relu(), d.exp()
        assert fwAD.unpack_dual(r).tangent is not None
        assert fwAD.unpack_dual(r.grad_fn.outputs[0]).tangent is None
        np.testing.assert_allclose(fwAD.unpack_dual(e.grad_fn.outputs[0]).tangent.detach().numpy(), np.exp([-1.0, 2.0]))


def test_eager_forward_over_reverse_value_keeps_its_tangent_and_drops_its_history():
    """``jvp(grad_and_value(f))``: the value's tangent is f's directional derivative (it was dropped: zero), and
    neither it nor the loss's tangent during the backward keeps the forward's tangent chain (history reaching only
    grad's own leaves, which nothing can differentiate with respect to once grad returns)."""
    x, v = jg.tensor([1., 2.]), jg.tensor([1., 0.5])

    def f(x):
        return ((x.sin() * x) ** 3).sum()
    (g, val), (tg, tval) = jf.jvp(jf.grad_and_value(f), (x,), (v,))
    xs, vs = x.numpy(), v.numpy()
    h, dh = np.sin(xs) * xs, np.cos(xs) * xs + np.sin(xs)
    np.testing.assert_allclose(val.numpy(), (h ** 3).sum(), rtol=1e-6)
    np.testing.assert_allclose(tval.numpy(), (3 * h ** 2 * dh * vs).sum(), rtol=1e-6)
    assert not tval.requires_grad       # (its history reached only grad's leaves: dropped before the backward)


def test_eager_forward_over_reverse_hvp_peaks_no_higher_than_reverse_over_reverse():
    """B13's eager target (peak memory of the forward-over-reverse HVP <= reverse over reverse's), counted: the
    tangent of a product's parameter gradient (t_h^T g + h^T t_g) is summed into its first term, not a third
    array, no value waits for the cycle collector, the loss's tangent does not hold the forward's tangent chain
    through the backward, and no eager worker thread holds its last part's arrays."""
    f, ps, ts = _b13_like()
    fr = _hvp_fwd_rev(f, ps, ts)
    rr = _hvp_rev_rev(f, ps, ts)
    for a, b in zip(fr, rr):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    assert _peak_bytes(lambda: _hvp_fwd_rev(f, ps, ts)) <= _peak_bytes(lambda: _hvp_rev_rev(f, ps, ts))


# ---- compiled forward mode: the programs counted (GEMMs, their multiply-adds, loops, copies; never timed) ---------

def _program(fn, *args):
    """The graph and the CPU program ``jg.compile(fn, backend="numba")`` runs for ``args``."""
    from jitgrad.jit.graph_code import compiled_graph
    cf = jg.compile(fn, backend="numba", background=False)
    cf(*args)
    (entries,) = cf._cache.values()
    e = entries[0]
    return e.graph, compiled_graph(e.graph, e.gf.writes, e.gf.parallel, e.gf.disk_cache, e.gf.background).program


def _gemms(prog):
    return [s for s in prog.steps if s.kind in ("gemm", "bgemm")]


def _copies(prog):
    return [s.label for s in prog.steps if "copy" in s.label or s.kind == "pycopy"]


def test_compiled_jvp_runs_the_chain_rules_products_and_nothing_more():
    """B13's ``jvp(f)`` compiled (f: the MLP's loss as a function of its six parameters, tangents on all of them):
    f's 3 GEMMs plus one tangent product per layer for the weight's tangent and one for the activation's (none for
    the input batch's: its tangent is a symbolic zero, not a zero array multiplied), so the multiply-adds are
    (x W1 + 2 h W2 + 2 h W3) / (x W1 + h W2 + h W3) = 2.40x f's at B1's sizes: the arithmetic alone is above the
    1.3x target.  With the tangent on the input only (torch.func's ``jvp(f, (x,), (v,))``), one product per layer
    with the same weight: exactly 2x.  The tangents' bias, relu and cross-entropy work rides f's own loops (as many
    loops over the hidden activations as f runs), nothing is copied, and nothing is saved: one graph of two outputs."""
    n, d, h, c = 32, 64, 48, 10
    f, ps, ts = _b13_like(n, d, h, c)
    g_f, p_f = _program(f, *ps)
    g_j, p_j = _program(lambda *a: jf.jvp(f, a[:6], a[6:]), *ps, *ts)
    f_macs = n * (d * h + h * h + h * c)
    assert [len(_gemms(p)) for p in (p_f, p_j)] == [3, 8]
    assert sum(s.work for s in _gemms(p_f)) == f_macs
    assert sum(s.work for s in _gemms(p_j)) == f_macs + n * (d * h + 2 * h * h + 2 * h * c)
    hidden_loops = [sum(1 for s in p.steps if s.kind != "gemm" and s.shapes and s.shapes[0] == [n, h])
                    for p in (p_f, p_j)]
    assert hidden_loops == [2, 2], hidden_loops
    assert _copies(p_f) == _copies(p_j) == []
    assert len(g_j.outputs) == 2
    D, H, C = 784, 512, 10       # B1's sizes: the jvp's multiply-adds over f's, per batch row
    assert round((2 * (D * H + H * H + H * C) + H * H + H * C) / (D * H + H * H + H * C), 2) == 2.40

    # the tangent on the input batch only, the weights closed over
    rng = np.random.default_rng(5)
    x = jg.tensor(rng.standard_normal((n, d)).astype(np.float32))
    v = jg.tensor(rng.standard_normal((n, d)).astype(np.float32))
    w1, b1, w2, b2, w3, b3 = ps
    y = jg.tensor(rng.integers(0, c, n))

    def loss(x):
        a = jg.relu(jg.relu(x @ w1 + b1) @ w2 + b2)
        return jg.nn.functional.cross_entropy(a @ w3 + b3, y)
    _, p_x = _program(lambda x, v: jf.jvp(loss, (x,), (v,)), x, v)
    assert len(_gemms(p_x)) == 6
    assert sum(s.work for s in _gemms(p_x)) == 2 * f_macs
    assert _copies(p_x) == []
    out, tan = jg.compile(lambda x, v: jf.jvp(loss, (x,), (v,)), backend="numba", background=False)(x, v)
    want = jf.jvp(loss, (x,), (v,))
    np.testing.assert_allclose(float(out), float(want[0]), rtol=1e-5)
    np.testing.assert_allclose(float(tan), float(want[1]), rtol=1e-4, atol=1e-6)


def test_compiled_hvp_forward_over_reverse_does_no_more_work_than_reverse_over_reverse():
    """B13's HVPs compiled: forward over reverse runs the same 18 GEMMs as reverse over reverse, and no more
    multiply-adds (nothing done twice; the primal parameter gradients, dead in both, are not computed), in fewer
    loops and without reverse over reverse's copies of the parameters (``func.grad``'s fresh leaves); values equal
    to eager's.  The GEMMs
    are most of the time at B1's sizes, so the 0.8x time target is below what the arithmetic allows."""
    f, ps, ts = _b13_like(32, 64, 48, 10)
    _, fr = _program(lambda *a: _hvp_fwd_rev(f, a[:6], a[6:]), *ps, *ts)
    _, rr = _program(lambda *a: _hvp_rev_rev(f, a[:6], a[6:]), *ps, *ts)
    assert len(_gemms(fr)) == len(_gemms(rr)) == 18
    assert sum(s.work for s in _gemms(fr)) <= sum(s.work for s in _gemms(rr))
    assert len(fr.steps) < len(rr.steps)
    # fr's one copy is the zeros the cross-entropy gather's scatter-add starts from; rr has it too
    assert _copies(fr) == ["copy (index_put)"] and len(_copies(rr)) == 2
    # the tangents of W2's and W3's gradients (h_t^T g + h^T g_t): the second product accumulates into the first
    # (gemm_steps.fold_sum_into_gemm), no add loop of their own (15 steps besides the GEMMs before, 13 now)
    assert sum(s.label.endswith(" + accumulate") for s in _gemms(fr)) == 2
    assert len(fr.steps) - len(_gemms(fr)) == 13
    got = jg.compile(lambda *a: _hvp_fwd_rev(f, a[:6], a[6:]), backend="numba", background=False)(*ps, *ts)
    for a, b in zip(got, _hvp_fwd_rev(f, ps, ts)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def _gpt_loss(vocab=65, context=8, width=16, heads=2, layers=2, batch=2):
    """B13's other function: B9's GPT (benchmarks/gpt_model.py, loaded by path) as a loss of its parameters, on
    tiny sizes; the parameters and random directions."""
    from benchmark_model import gpt_model
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, vocab, context, width, heads, layers, dropout=0.0, sdpa=False)
    names = [n for n, _ in model.named_parameters()]
    ps = tuple(p.detach() for _, p in model.named_parameters())
    rng = np.random.default_rng(0)
    ts = tuple(jg.tensor((rng.standard_normal(p.shape) * 0.02).astype(np.float32)) for p in ps)
    x, y = (jg.tensor(rng.integers(0, vocab, (batch, context))) for _ in range(2))
    return (lambda *p: jf.functional_call(model, dict(zip(names, p)), (x, y))), ps, ts


def test_compiled_gpt_jvp_and_hvp_counted(monkeypatch):
    """B13 on B9's GPT (tangents on every parameter): every product of f has both operands varying, so the jvp is
    3x f's GEMMs and multiply-adds exactly; forward over reverse runs reverse over reverse's GEMMs and
    multiply-adds in fewer loops and copies.  No weight's HVP is a transposed view copied into its output (8 copies
    here before simplify wrote ``(x^T g_t + x_t^T g)^T`` as products of transposes).  Values against eager.
    Counted with every product whole (``JITGRAD_CAUSAL=0``): the causal mask's triangular products skip other
    shares of f's and of the tangents' products."""
    from jitgrad.ir.passes import causal
    monkeypatch.setattr(causal, "ENABLED", False)
    f, ps, ts = _gpt_loss()
    k = len(ps)
    jvp_f = lambda *a: jf.jvp(f, a[:k], a[k:])                                       # noqa: E731
    fr_f = lambda *a: jf.jvp(jf.grad(f, argnums=tuple(range(k))), a[:k], a[k:])[1]  # noqa: E731

    def rr_f(*a):
        g = jf.grad(f, argnums=tuple(range(k)))
        return jf.grad(lambda *p: sum((gi * vi).sum() for gi, vi in zip(g(*p), a[k:])), argnums=tuple(range(k)))(
            *a[:k])
    _, p_f = _program(f, *ps)
    _, p_j = _program(jvp_f, *ps, *ts)
    _, p_fr = _program(fr_f, *ps, *ts)
    _, p_rr = _program(rr_f, *ps, *ts)
    macs = [sum(s.work for s in _gemms(p)) for p in (p_f, p_j, p_fr, p_rr)]
    assert [len(_gemms(p)) for p in (p_f, p_j)] == [13, 39] and macs[1] == 3 * macs[0]
    assert len(_gemms(p_fr)) == len(_gemms(p_rr)) and macs[2] <= macs[3]
    assert len(p_fr.steps) < len(p_rr.steps) and len(_copies(p_fr)) < len(_copies(p_rr))
    assert not [s for s in p_fr.steps if s.label == "copy (output)"]
    got = jg.compile(fr_f, backend="numba", background=False)(*ps, *ts)
    for a, b in zip(got, fr_f(*ps, *ts)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-6)
