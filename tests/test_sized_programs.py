"""A symbolic trace lowered once for every size (jit/symbolic_entries.py ``Lowered``, codegen/program/sized.py):
a new tuple of sizes is bound to the lowering (its tables from a precomputed size plan) and runs no IR pass, no
fusion plan, no layout and no entry build; the workspace grows to the largest size bound and is reused; fresh
outputs of changing shapes come from the output pool by capacity.  Counted, never timed; results equal eager
mode's, and every guard (the trace's and the lowering's) is still checked for each new tuple of sizes."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.codegen.program.cpu as cpu
import jitgrad.codegen.program.entry as entry
import jitgrad.jit.compile as jit_compile
import jitgrad.jit.graph_code as graph_code
from jitgrad.codegen.program import output_pool
from test_symbolic_shapes import _lm_step


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def arr(t):
    return t.detach().numpy() if isinstance(t, jg.Tensor) else np.asarray(t)


class _Counts:
    """Calls of the per-shape build stages, counted by wrapping them where the compile path looks them up."""

    def __init__(self, monkeypatch):
        self.n = {"passes": 0, "fusion_plan": 0, "layout": 0, "entry_build": 0}
        for mod, name, what in ((jit_compile, "run_pipeline", "passes"), (graph_code, "fusion_plan", "fusion_plan"),
                                (cpu, "lay_out", "layout"), (entry, "compile_entry", "entry_build")):
            monkeypatch.setattr(mod, name, self._wrap(getattr(mod, name), what))

    def _wrap(self, fn, what):
        def counted(*a, **k):
            self.n[what] += 1
            return fn(*a, **k)
        return counted

    def total(self):
        return sum(self.n.values())


def test_new_sizes_run_no_pass_no_layout_no_entry_build(monkeypatch):
    rng = np.random.default_rng(0)
    shapes = [(b, t) for t in range(5, 16) for b in (2, 3)][:22]
    rng.shuffle(shapes)
    data = [(jg.tensor(rng.integers(0, 40, s)), jg.tensor(rng.integers(0, 40, s))) for s in shapes]
    eager, comp = _lm_step(), jg.compile(_lm_step(), backend="numba")
    le = [float(eager(i, t)) for i, t in data]
    lc = [float(comp(i, t)) for i, t in data[:3]]      # the first trace, the symbolic one's first instance, lowering
    counts = _Counts(monkeypatch)
    lc += [float(comp(i, t)) for i, t in data[3:]]     # 19 new tuples of sizes
    assert counts.total() == 0, counts.n
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    s = comp.stats
    assert s["traces"] == 2 and s["eager_fallbacks"] == 0, s["trace_reasons"]
    assert s["shape_lowerings"] == 1 and s["shape_instances"] == 1 and s["shape_bindings"] == len(data) - 2, s
    before = dict(s)
    lc2 = [float(comp(i, t)) for i, t in data[3:]]     # repeated sizes: the same bound entries
    assert counts.total() == 0 and comp.stats["shape_bindings"] == before["shape_bindings"]
    assert all(np.isfinite(lc2))


def _elementwise(x, y):
    return ((x * y).tanh() + x.sum(1, keepdim=True)).sum(), (x - y).exp()


def test_workspace_grows_to_the_largest_size_and_is_reused(monkeypatch):
    f = jg.compile(_elementwise, backend="numba")
    rng = np.random.default_rng(1)

    def call(n, m):
        x, y = (jg.tensor(rng.standard_normal((n, m), dtype=np.float32)) for _ in range(2))
        got, want = f(x, y), _elementwise(x, y)
        for g, w in zip(got, want):
            np.testing.assert_allclose(arr(g), arr(w), rtol=2e-5, atol=1e-5)
    call(5, 7)
    call(6, 9)
    call(7, 11)                 # lowered here
    call(40, 60)                # the largest
    counts = _Counts(monkeypatch)
    ws = cpu.ALLOCATIONS["workspaces"]
    for n, m in [(8, 13), (30, 17), (12, 59), (39, 60), (40, 59), (9, 9), (33, 3), (21, 22)]:
        call(n, m)
    assert cpu.ALLOCATIONS["workspaces"] == ws         # every smaller size fits the one workspace
    assert counts.total() == 0, counts.n
    call(80, 90)
    assert cpu.ALLOCATIONS["workspaces"] == ws + 1     # grown once, for a larger size
    call(41, 61)
    assert cpu.ALLOCATIONS["workspaces"] == ws + 1
    assert f.stats["traces"] == 2 and f.stats["shape_lowerings"] == 1 and f.stats["shape_instances"] == 1


def test_outputs_of_changing_shapes_are_pooled_by_capacity():
    f = jg.compile(lambda x: x * 2.0 + 1.0, backend="numba")
    rng = np.random.default_rng(2)
    sizes = [20000, 20001, 20002, 19000, 20003, 19100, 19999, 20004, 19200, 19500]   # float32: one capacity step
    for n in sizes[:4]:
        f(jg.tensor(rng.standard_normal(n, dtype=np.float32)))
    allocated = output_pool.STATS["allocated"]
    for n in sizes[4:]:
        x = jg.tensor(rng.standard_normal(n, dtype=np.float32))
        np.testing.assert_allclose(arr(f(x)), arr(x) * 2 + 1, rtol=1e-6)
    assert output_pool.STATS["allocated"] == allocated     # every output a recycled buffer of its capacity step
    assert f.stats["shape_bindings"] >= len(sizes) - 2
    held = [f(jg.tensor(np.full(n, float(n), np.float32))) for n in (19000, 19001, 19002)]
    for n, h in zip((19000, 19001, 19002), held):          # outputs still held are never handed out again
        np.testing.assert_array_equal(arr(h), np.full(n, 2.0 * n + 1, np.float32))


def test_guards_are_checked_for_every_new_size_after_lowering():
    def f(x):
        if x.shape[0] > 20:                # a trace guard: broken at 21, retraced
            return (x * 3.0).sum(0)
        return (x * 2.0).sum(0)
    cf = jg.compile(f, backend="numba")
    rng = np.random.default_rng(3)
    for n in list(range(3, 15)) + [21, 22, 4, 25]:
        x = jg.tensor(rng.standard_normal((n, 4), dtype=np.float32))
        np.testing.assert_allclose(arr(cf(x)), arr(f(x)), rtol=1e-5)
    assert cf.stats["traces"] == 3 and cf.stats["trace_reasons"].get("size guard") == 1, cf.stats
    assert cf.stats["shape_bindings"] >= 10


def test_a_broken_lowering_guard_lowers_again_for_those_sizes(monkeypatch):
    """A size where the lowering decided otherwise (here: a layout rule patched to decide on the size, a loop
    parallel from 4096 elements, which the real rule leaves to the kernel per call) is not bound to it: the
    template is lowered again with that size's decisions (up to MAX_LOWERINGS, then concrete builds), and each
    size is bound to the lowering whose guards it keeps."""
    from jitgrad.jit import symbolic_entries
    from jitgrad.codegen.program import layout
    from jitgrad.ir import settings
    limit = [4096]
    monkeypatch.setattr(layout.Program, "pool_choice", lambda self, size, per_element=8.0: (size >= limit[0], None))
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    f = jg.compile(lambda x: (x * 1.5).exp(), backend="numba", parallel=None)
    rng = np.random.default_rng(4)
    for n in (100, 200, 300, 400, 5000, 500):
        x = jg.tensor(rng.standard_normal(n, dtype=np.float32) * 0.1)
        np.testing.assert_allclose(arr(f(x)), np.exp(arr(x) * 1.5), rtol=1e-6)
    assert f.stats["traces"] == 2
    assert f.stats["shape_instances"] == 1 and f.stats["shape_lowerings"] == 2, f.stats      # 5000: parallel
    assert f.stats["shape_bindings"] == 4, f.stats
    monkeypatch.setattr(symbolic_entries, "MAX_LOWERINGS", 1)
    limit[0] = 6000       # (a new function: new decisions)
    g = jg.compile(lambda x: (x * 2.5).exp(), backend="numba", parallel=None)
    for n in (100, 200, 300, 7000, 400, 6500, 6600):
        x = jg.tensor(rng.standard_normal(n, dtype=np.float32) * 0.1)
        np.testing.assert_allclose(arr(g(x)), np.exp(arr(x) * 2.5), rtol=1e-6)
    assert g.stats["shape_lowerings"] == 1 and g.stats["shape_bindings"] == 2, g.stats   # 300, 400
    assert g.stats["shape_instances"] == 4, g.stats     # 200 (the first), then 7000, 6500, 6600: concrete


def test_anomaly_mode_and_double_backward_in_bound_entries():
    w = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def hvp(x):
        y = (x @ w).tanh().mean()          # 1 / n: a literal of the trace, an input of the lowering
        (g,) = jg.autograd.grad(y, w, create_graph=True)
        (h,) = jg.autograd.grad((g * g).sum(), w)
        return h.detach()
    cf = jg.compile(hvp, backend="numba")
    rng = np.random.default_rng(5)
    for n in range(3, 12):
        x = jg.tensor(rng.standard_normal((n, 3)), dtype=jg.float32)
        np.testing.assert_allclose(arr(cf(x)), arr(hvp(x)), rtol=1e-4, atol=1e-6)
    assert cf.stats["traces"] == 2 and cf.stats.get("shape_bindings", 0) >= 6, cf.stats

    def sq(x, c):
        x = x.detach().requires_grad_()
        loss = (x.sqrt() * c).sum()         # at x = 0 with c = 0, sqrt's backward gives 0 * inf = nan
        (g,) = jg.autograd.grad(loss, x)
        return g.detach()
    ca = jg.compile(sq, backend="numba")
    with jg.autograd.detect_anomaly():
        for n in (3, 4, 5, 7, 8, 9):
            np.testing.assert_allclose(arr(ca(jg.ones(n), jg.tensor(n - 6.0))), np.full(n, 0.5 * (n - 6)), rtol=1e-6)
        assert ca.stats.get("shape_bindings", 0) >= 3, ca.stats
        with pytest.raises(RuntimeError, match="SqrtBackward0.*nan"):
            ca(jg.zeros(10), jg.tensor(0.0))
    assert ca.stats["traces"] == 2


def test_bound_entry_serves_profiled_and_strided_calls_through_a_concrete_graph():
    f = jg.compile(lambda x: (x * 2.0).sum(0), backend="numba")
    rng = np.random.default_rng(6)
    for n in (3, 4, 5, 6):
        f(jg.tensor(rng.standard_normal((n, 5), dtype=np.float32)))
    assert f.stats["shape_bindings"] >= 2
    x = jg.tensor(rng.standard_normal((7, 5), dtype=np.float32))
    with jg.autograd.profiler.profile():
        np.testing.assert_allclose(arr(f(x)), arr(x).sum(0) * 2, rtol=1e-5)
    assert "mul" in str(f.ir(x))                        # introspection of a bound entry: its concrete graph
    xt = jg.tensor(rng.standard_normal((5, 8), dtype=np.float32)).T    # not C-contiguous
    np.testing.assert_allclose(arr(f(xt)), arr(xt).sum(0) * 2, rtol=1e-5)


def test_nanogpt_new_lengths_are_bound_without_a_build(monkeypatch):
    """nanoGPT's step (B9's model, its heads split by views of the qkv projection, the causal mask sliced to T)
    with T drawn per batch: one lowering serves every new length below the block size, a length equal to the
    batch size (3) too (no shape comparison of different ranks guards the trace on B != T)."""
    from benchmark_model import gpt_model as gm

    def build():
        jg.manual_seed(0)
        m = gm.make_gpt(jg, 50, 16, 32, 4, 2, 0.0, False)
        return gm.make_step(jg, m, m, gm.make_optimizer(jg, m, 1e-2))
    rng = np.random.default_rng(7)
    lengths = (12, 8, 9, 14, 3, 10, 11, 13, 15)
    data = [(jg.tensor(rng.integers(0, 50, (3, T))), jg.tensor(rng.integers(0, 50, (3, T)))) for T in lengths]
    eager, comp = build(), jg.compile(build(), backend="numba")
    le = [float(eager(x, y)) for x, y in data]
    lc = [float(comp(x, y)) for x, y in data[:3]]
    counts = _Counts(monkeypatch)
    lc += [float(comp(x, y)) for x, y in data[3:]]
    assert counts.total() == 0, counts.n
    np.testing.assert_allclose(lc, le, rtol=2e-5, atol=1e-5)
    s = comp.stats
    assert s["traces"] == 2 and s["shape_instances"] == 1 and s["shape_bindings"] == len(lengths) - 2, s


def test_size_dependent_literals_are_inputs_of_the_lowering(monkeypatch):
    """A mean over a symbolic batch scales by 1 / n, and ``(n - 1)`` in arithmetic is a number of the trace: the
    lowering reads them per call (lift_literals) instead of baking one size's value into a kernel."""
    def build():
        jg.manual_seed(0)
        lin = nn.Linear(8, 1)
        opt = jg.optim.SGD(lin.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = ((lin(x) - y) ** 2).mean() + (x.shape[0] - 1) * 1e-3 * lin.weight.pow(2).sum()
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    rng = np.random.default_rng(8)
    data = [(jg.tensor(rng.standard_normal((n, 8), dtype=np.float32)),
             jg.tensor(rng.standard_normal((n, 1), dtype=np.float32))) for n in (5, 9, 6, 13, 7, 11, 8, 12, 10, 14)]
    eager, comp = build(), jg.compile(build(), backend="numba")
    le = [float(eager(x, y)) for x, y in data]
    lc = [float(comp(x, y)) for x, y in data[:3]]
    counts = _Counts(monkeypatch)
    lc += [float(comp(x, y)) for x, y in data[3:]]
    assert counts.total() == 0, counts.n
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    s = comp.stats
    assert s["shape_lowerings"] == 1 and s["shape_instances"] == 1 and s["shape_bindings"] == len(data) - 2, s


def test_errors_of_a_bound_entry_are_eager_modes_with_this_calls_shapes():
    """An index out of range in a bound entry writes no state and raises eager mode's IndexError naming this
    call's sizes (its concrete graph reports it), not the symbols of the lowering."""
    emb = nn.Embedding(10, 4)

    def f(idx):
        return emb(idx).sum(1).detach()
    cf = jg.compile(f, backend="numba")
    for n in (3, 4, 5, 6):
        idx = jg.tensor(np.arange(n) % 10)
        np.testing.assert_allclose(arr(cf(idx)), arr(f(idx)), rtol=1e-6)
    assert cf.stats["shape_bindings"] >= 2
    w = emb.weight.detach().numpy().copy()
    with pytest.raises(IndexError, match="out of range|out of bounds") as err:
        cf(jg.tensor(np.array([1, 2, 3, 4, 5, 6, 12])))
    assert "s0" not in str(err.value)
    np.testing.assert_array_equal(emb.weight.detach().numpy(), w)


# ---- binding a new tuple of sizes: its Python work counted, its results against eager and a static trace -----------
from test_eager_overhead import _count  # noqa: E402


def _opcodes(fn):
    """Bytecodes the interpreter runs while ``fn()`` runs (``sys.settrace``'s opcode events: counted, not timed)."""
    import sys
    n = [0]

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            n[0] += 1
        return trace
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n[0]


def test_binding_a_new_size_costs_a_few_python_calls():
    """A new tuple of sizes bound to a lowering (the LM step of benchmarks/variable_length.py) costs a handful of
    Python calls and a few hundred bytecodes more than a call of sizes bound before: the fill is one native call,
    the caller is made from data (entry.callers), nothing walks an expression or builds a table per size.  When
    this budget was set: 4 Python calls, 5 C calls and 279 bytecodes more (before: 15, 15 and 843)."""
    rng = np.random.default_rng(11)
    shapes = [(b, t) for t in range(5, 40) for b in (2, 3, 4)]
    rng.shuffle(shapes)
    data = [(rng.integers(0, 40, s), rng.integers(0, 40, s)) for s in shapes]
    comp = jg.compile(_lm_step(), backend="numba")
    for i, t in data[:8]:       # a static trace, a symbolic one's concrete instance, then bindings
        comp(jg.tensor(i), jg.tensor(t))
    assert comp.stats["shape_lowerings"] == 1 and comp.stats["shape_bindings"] == 6, comp.stats
    extra = []
    for (i, t), (ri, rt) in zip(data[8:14], data[2:8]):
        bindings = comp.stats["shape_bindings"]
        new_args, rep_args = (jg.tensor(i), jg.tensor(t)), (jg.tensor(ri), jg.tensor(rt))
        new = _count(lambda: comp(*new_args))
        rep = _count(lambda: comp(*rep_args))
        assert comp.stats["shape_bindings"] == bindings + 1          # (the first bound, the second seen before)
        new_args, rep_args = (jg.tensor(i), jg.tensor(t)), (jg.tensor(ri), jg.tensor(rt))
        ops_rep = _opcodes(lambda: comp(*rep_args))
        i2, t2 = data[14 + len(extra)]
        new_args = (jg.tensor(i2), jg.tensor(t2))
        ops_new = _opcodes(lambda: comp(*new_args))
        extra.append((new[0] - rep[0], new[1] - rep[1], ops_new - ops_rep))
    for py, c, ops in extra:
        assert py <= 6, f"binding a new size made {py} more Python calls than a repeated size (budget 6): {extra}"
        assert c <= 7, f"... and {c} more C calls (budget 7): {extra}"
        assert ops <= 360, f"... and {ops} more bytecodes (budget 360): {extra}"


def _multi(x, w):
    """Outputs of every kind a binding makes: symbolic shapes (one large enough for the output pool), a constant
    shape, a scalar, a reduction over a symbolic size, a matmul's BLAS sizes."""
    h = (x @ w).tanh()
    return h * 2.0, h.sum(0), (h.mean() + x.sum()), (x[:, :3] - x[:, 1:4]).exp(), w * h.mean()


def test_bound_results_equal_eager_and_a_static_trace_across_many_sizes():
    rng = np.random.default_rng(12)
    w = jg.tensor(rng.standard_normal((6, 5), dtype=np.float32) * 0.3)
    f = jg.compile(_multi, backend="numba")
    sizes = [3, 4, 5, 9, 4000, 17, 6, 2100, 33, 8, 7, 3001, 12]
    for n in sizes:
        x = jg.tensor(rng.standard_normal((n, 6), dtype=np.float32))
        got = f(x, w)
        want = _multi(x, w)
        static = jg.compile(_multi, backend="numba", dynamic=False)(x, w)
        for g, e, s_ in zip(got, want, static):
            assert g.shape == e.shape
            np.testing.assert_allclose(arr(g), arr(e), rtol=2e-5, atol=2e-5)
            np.testing.assert_allclose(arr(g), arr(s_), rtol=2e-5, atol=2e-5)
    assert f.stats["traces"] == 2 and f.stats["shape_lowerings"] == 1, f.stats
    assert f.stats["shape_bindings"] == len(sizes) - 2, f.stats


def test_bindings_of_many_chunks_follow_a_workspace_growth():
    """Binding buffers are rows of chunks (sized._Chunks); a workspace growth repoints the rows of every live
    chunk, so sizes bound before the growth, in an earlier chunk, still compute right."""
    from jitgrad.codegen.program import sized
    f = jg.compile(_elementwise, backend="numba")
    rng = np.random.default_rng(13)
    xs = {}

    def call(n, m):
        if (n, m) not in xs:
            xs[n, m] = [jg.tensor(rng.standard_normal((n, m), dtype=np.float32)) for _ in range(2)]
        x, y = xs[n, m]
        for g, w in zip(f(x, y), _elementwise(x, y)):
            np.testing.assert_allclose(arr(g), arr(w), rtol=2e-5, atol=1e-5)
    small = [(n, m) for n in range(2, 9) for m in range(3, 9)][:sized.CHUNK_ROWS + 8]
    for n, m in small:
        call(n, m)
    ws = cpu.ALLOCATIONS["workspaces"]
    call(200, 300)                      # a growth: every chunk's rows repointed
    assert cpu.ALLOCATIONS["workspaces"] == ws + 1
    for n, m in small[2:] + [(200, 300)]:
        call(n, m)                      # (bound before the growth: the first chunk's rows and the second's)
    assert f.stats["shape_bindings"] == len(small) - 1, f.stats


# ---- the native size fill (codegen/program/size_fill.py) against the NumPy reference plan ---------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from jitgrad.codegen.program.size_fill import FillLayout, fill_program, float_guard_nodes, size_fill  # noqa: E402
from jitgrad.ir.size_plan import SizePlan, fold_float  # noqa: E402
from jitgrad.ir.symbolic import COMPARISONS, ShapeEnv, SymInt, evaluate  # noqa: E402


def _fill_case():
    """Polynomials with ``//`` and ``%`` atoms (nested, of negative values too) and guards of every comparison."""
    env = ShapeEnv()
    a, b = env.symbol(9, "a"), env.symbol(4, "b")
    exprs = [a, b, a * b - 7 * b, (a * b - 7 * b) // 3, (a - b) % 5, ((a - b) // b) * a + 2, (a * a) % (b + 3),
             ((a + 1) // 2) % 3 - b, 0, 5]
    polys = [x.poly if isinstance(x, SymInt) else ((((), x),) if x else ()) for x in exprs]
    guards = [(polys[i], op, want) for i, op, want in
              [(2, ">", True), (4, "==", False), (5, "<=", True), (6, ">=", True), (7, "!=", True), (3, "<", False)]]
    # float guards as the planner makes them (cost comparisons): sums, differences, products and quotients of
    # sizes and constants; one whose sign is 0 exactly at some sizes, one that divides by a size (b = 0: inf/nan)
    guards += [(("float", ("-", ("/", ("int", polys[2]), ("const", 3.0)), ("*", ("int", polys[1]), ("const", 0.5)))),
                ">=", True),
               (("float", ("+", ("/", ("int", polys[0]), ("int", polys[1])), ("const", -1.25))), "<", False)]
    return env, polys, guards


def _compiled_fill(polys, guards):
    plan = SizePlan(polys)
    masks, floats = [], []
    for p, op, want in guards:
        mask = sum(1 << k for k, v in enumerate((-1, 0, 1)) if COMPARISONS[op](v, 0) == want)
        if p[:1] == ("float",):
            floats.append((float_guard_nodes(fold_float(p[1]), polys.index), mask))
        else:
            masks.append((polys.index(p), mask))
    layout = FillLayout(3, len(polys), 1, 2, 8, 2)
    program = fill_program(plan, ("s0", "s1"), masks, layout, [(0, 2)], [(4, 3)], [(2, 4)], [(1, 4)], [(1, 0, 1)],
                           floats, [5, 2])
    program.template[layout.n_table + 2] = 77       # (a constant entry: OFF's third slot)
    return plan, layout, program, size_fill()


@settings(max_examples=200, deadline=None)
@given(st.integers(-40, 40), st.integers(-40, 40))
def test_native_size_fill_equals_the_reference_plan_and_python_arithmetic(a, b):
    env, polys, guards = _fill_case()
    plan, layout, program, fill = _compiled_fill(polys, guards)
    values = {"s0": a, "s1": b}
    buf = np.full(layout.words, -5, np.int64)
    program.sizes[:] = (a, b)
    r = fill(program.address, buf.ctypes.data, 1000)
    if b == 0 or b == -3:       # an atom divides by b or by b + 3 (Python would raise ZeroDivisionError)
        assert r == -1
        return
    want = [evaluate(p, values) for p in polys]         # Python's own // and % (toward minus infinity)
    np.testing.assert_array_equal(plan(values), want)
    env.guards[:] = guards
    try:
        holds = env.holds(values)
    except ZeroDivisionError:       # (Python's float guard divides by b: the fill's quotient is inf or nan)
        holds = None
    if holds is not None:
        assert r == (1 if holds else 0)
    if r == 1:
        address = buf.ctypes.data
        np.testing.assert_array_equal(program.values, want)
        assert program.read.tolist() == [want[5], want[2]]           # the values read back, in their order
        assert buf[layout.off + 2] == 77 and buf[layout.off] == 0   # the template's entries, copied
        assert buf[0] == want[2]                                    # a table slot from its polynomial
        assert buf[1] == 1000 + want[0] + want[1]                   # a workspace slot: base + root + offset
        assert buf[layout.ws] == want[0] + want[1]                  # (its byte offset kept)
        assert buf[2] == address + 8 * layout.params + 4            # a parameter pointer
        assert buf[layout.off + 1] == want[4]                       # an offset
        params = buf[layout.params:].view(np.uint8)
        assert int(params[4:8].view(np.int32)[0]) == np.int32(want[3])      # an int32 parameter's bytes
        assert buf[layout.ctx] == address and buf[layout.ctx + 2] == address + 8 * layout.off


def test_the_size_fill_is_compiled_once_through_the_quick_pipeline():
    # every process compiles it on its way to a lowering's first compiled call: the quick pipeline, not O2 (counted in
    # a fresh process, where nothing has linked it yet)
    import subprocess
    import sys
    code = ("from jitgrad.codegen.native import llvm_build as lb\n"
            "from jitgrad.codegen.program.size_fill import size_fill\n"
            "before = dict(lb.STATS); size_fill(); size_fill()\n"
            "print(lb.STATS['modules_quick'] - before['modules_quick'], lb.STATS['kernels_quick'] - before['kernels_quick'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "0"]


def test_calls_waiting_for_a_lowerings_code_run_eagerly_and_build_nothing(monkeypatch):
    """While a lowering's code builds (background builds), a new tuple of sizes runs the user's function eagerly:
    no concrete build (passes and layout for one call) per size; once the code is ready, every size binds."""
    from jitgrad.jit import symbolic_entries
    held = {"n": 4}
    ready = symbolic_entries.Lowered.ready

    def slow_ready(self):           # the lowering's code still building for its first few asks
        if held["n"] > 0:
            held["n"] -= 1
            return None
        return ready(self)
    monkeypatch.setattr(symbolic_entries.Lowered, "ready", slow_ready)
    monkeypatch.setattr(symbolic_entries.Lowered, "building", lambda self: held["n"] > 0)
    rng = np.random.default_rng(4)
    shapes = [(2, 5), (3, 7), (2, 9), (4, 6), (3, 11), (2, 12), (4, 8), (3, 5), (2, 13)]
    data = [(jg.tensor(rng.integers(0, 40, s)), jg.tensor(rng.integers(0, 40, s))) for s in shapes]
    eager, comp = _lm_step(), jg.compile(_lm_step(), backend="numba")
    le = [float(eager(i, t)) for i, t in data]
    lc = [float(comp(i, t)) for i, t in data]
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    s = comp.stats
    assert s["traces"] == 2 and s["eager_fallbacks"] == 0, s["trace_reasons"]
    assert s["shape_instances"] == 1 and s["shape_lowerings"] == 1, s     # no concrete build while it built
    assert s["eager_calls"] >= 2 and s["shape_bindings"] >= 3, s
    assert s["eager_calls"] + s["shape_bindings"] == len(data) - 2, s


def test_new_sizes_lower_at_once_while_the_first_instance_builds(monkeypatch):
    """On an empty cache the first symbolic instance's code builds in the background: the next new size lowers
    the template at once (its build queued behind the instance's, not after it), so no new size waits eagerly
    for the instance, and none gets a concrete build (a full pass and layout run)."""
    from jitgrad.jit import build_policy

    class Building:         # a background build still running for its first three looks
        error, looks = None, 0

        @property
        def run(self):
            Building.looks += 1
            return None if Building.looks <= 3 else "built"

        def start(self):
            pass
    real, asked = build_policy.pending_build, []

    def pending_build(gf, inputs, plan, call=None):
        asked.append(call)
        return Building() if len(asked) == 2 else real(gf, inputs, plan, call)     # (the symbolic instance)
    monkeypatch.setattr(build_policy, "pending_build", pending_build)
    rng = np.random.default_rng(5)
    shapes = [(2, 5), (3, 7), (2, 9), (4, 6), (3, 11), (2, 12), (4, 8), (3, 13)]
    data = [(jg.tensor(rng.integers(0, 40, s)), jg.tensor(rng.integers(0, 40, s))) for s in shapes]
    eager, comp = _lm_step(), jg.compile(_lm_step(), backend="numba")
    le = [float(eager(i, t)) for i, t in data]
    lc = [float(comp(i, t)) for i, t in data]
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    s = comp.stats
    assert s["traces"] == 2 and s["shape_instances"] == 1, s         # no concrete build per size
    assert s["eager_calls"] == 1, s                                   # the instance's own call, while it builds
    assert s["shape_lowerings"] == 1 and s["shape_bindings"] == len(data) - 2, s
