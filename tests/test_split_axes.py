"""Elementwise runs moved into the split shape of the reshape that borders them (``ir/passes/split_axes.py``):
the same values, fewer loops and fewer pair-sized arrays in B11's compiled step."""
import functools
import importlib.util
import os

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.passes import fusion_plan
from jitgrad.ir.passes.split_axes import lift_split_reshapes

_FF = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "force_field.py")
_spec = importlib.util.spec_from_file_location("force_field_split_axes", _FF)
ff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ff)


def _pair_features(x, w, mu):
    """B11's pattern on small sizes: pair values over (B, P, K), summed over j in (B, A, A-1, K), a loss whose
    gradient broadcasts the features' cotangent back over the pairs."""
    g = jg.exp(-(x[..., None] - mu) ** 2) * w[..., None]
    f = g.reshape(2, 4, 3, 5).sum(2)
    return (f * f).sum()


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_lifted_step_equals_eager(backend):
    rng = np.random.default_rng(0)
    x0, w0, mu = rng.standard_normal((2, 12)), rng.standard_normal((2, 12)), jg.tensor(rng.standard_normal(5))

    def step(x, w):
        loss = _pair_features(x, w, mu)
        gx, gw = jg.autograd.grad(loss, (x, w))
        return loss, gx, gw

    want = step(jg.tensor(x0, requires_grad=True), jg.tensor(w0, requires_grad=True))
    f = jg.compile(step, backend=backend, background=False)
    got = f(jg.tensor(x0, requires_grad=True), jg.tensor(w0, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    (entries,) = f._cache.values()
    shapes = [tuple(g.shape) for g in fusion_plan(entries[0].graph).groups]
    assert (2, 4, 3, 5) in shapes and (2, 12, 5) not in shapes, shapes     # the pair loops run split


def test_a_graph_without_split_reshapes_is_left_alone():
    f = jg.compile(lambda x: (x.exp() * 2).sum(), backend="interpret", background=False)
    f(jg.ones(3, 4))
    (entries,) = f._cache.values()
    g = entries[0].graph
    assert lift_split_reshapes(g) is g


@pytest.fixture(scope="module")
def b11_plan():
    call, fn, _, _ = ff.torch_style(jg, "compiled", np.float32,
                                    compile_=functools.partial(jg.compile, backend="interpret", background=False))
    call()
    (entries,) = fn._cache.values()
    return fusion_plan(entries[0].graph)


def test_b11_pair_loops(b11_plan):
    """B11's compiled step runs 3 loops over its (B, P, K) pair Gaussians, as many as the math needs: the features
    (exp once, summed over j in the same loop), the force's two sums over K (one sweep, ``row_chains``), and the
    parameter gradient's sum over j; the features' cotangent is broadcast by index, never written out (7 loops
    before, one a broadcast copy)."""
    n = ff.B * ff.A * (ff.A - 1) * ff.K
    pair = [g for g in b11_plan.groups if int(np.prod(g.shape)) == n]
    assert len(pair) == 3
    assert sum(e.op.name == "exp" for g in b11_plan.groups for e in g.all_eqns) == 1
    assert not [g for g in pair if [e.op.name for e in g.all_eqns] == ["broadcast_to"]]
    # every sum over j or K runs in the loop that computes its terms
    assert all(any(e.op.name == "sum" for e in g.all_eqns) for g in pair)
    # pair-sized arrays written: exp(...) only (read by the two backward loops); not g, nor a broadcast, nor
    # r - mu, which the loops that read it recompute from r and mu (5 before); read: exp, once per backward loop
    # (8 pair-sized reads before)
    stored = [v for g in pair for v in g.outputs if v.aval.size == n]
    assert [_producer(b11_plan, v) for v in stored] == ["exp"]
    assert sum(v.aval.size == n for g in pair for v in g.inputs) == 2


def _producer(plan, v):
    return next(e.op.name for e in plan.graph.eqns if v in e.outs)


def _fors(body):
    from jitgrad.codegen.kernels import kernel_ir as ki
    for s in body:
        if isinstance(s, ki.For):
            yield s
            yield from _fors(s.body)
        elif isinstance(s, ki.If):
            yield from _fors(s.then)
            yield from _fors(s.orelse)


def test_b11_pair_loops_run_their_16_gaussians_in_full_vectors(b11_plan):
    """The three pair loops' innermost loop runs over the K = 16 Gaussians: fewer elements than one interleaved
    vector step (``ir_loops.SHORT_TRIP``), so they are marked short and rendered without interleaving (LLVM's
    8-lane body interleaved 4 times needs 32; the 16 ran in its 4-lane remainder loop).  Loops over long rows
    keep their interleaving."""
    from jitgrad.codegen.kernels import ir_loops
    from jitgrad.codegen.program.cpu import lay_out
    assert ff.K < ir_loops.SHORT_TRIP
    prog = lay_out(b11_plan)
    n = ff.B * ff.A * (ff.A - 1) * ff.K
    by_name = {g.name: g for g in b11_plan.groups}
    kernels = [st.kernel for st in prog.steps if st.kind == "kernel"]
    pair = [k for k in kernels if k.label in by_name and int(np.prod(by_name[k.label].shape)) == n]
    assert len(pair) == 3
    for k in pair:
        assert [f.short for f in _fors(k.ir.body)][-1], k.label     # the innermost loop of the nest
        text = ir_loops.render(k.ir, k.key)
        assert '"llvm.loop.interleave.count", i32 1' in text, k.label
    # a loop over B * P pairs, one long row after the layout merged its dims, stays interleaved
    flat = [k for k in kernels if k.label in by_name and tuple(by_name[k.label].shape) == (ff.B, ff.A * (ff.A - 1))]
    assert flat and not any(f.short for k in flat for f in _fors(k.ir.body))


def test_b11_cutoff_sine_and_cosine_share_one_loop(b11_plan):
    """The cutoff's cosine (forward) and the sine of its derivative (backward) are of one value: one loop over
    the pairs computes both (``schedule``: the sine joins the cosine), so the argument is range-reduced once a
    step, not twice (B11: 2 loops with a transcendental over the (B, P) pairs -> 1)."""
    trig = [g for g in b11_plan.groups if {e.op.name for e in g.all_eqns} & {"sin", "cos"}]
    assert len(trig) == 1
    names = [e.op.name for e in trig[0].all_eqns]
    assert names.count("sin") == 1 and names.count("cos") == 1


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_sine_moved_beside_its_cosine_gives_the_same_values(backend):
    rng = np.random.default_rng(3)
    x0 = rng.uniform(-20.0, 20.0, (3, 7))

    def step(x):
        y = (x.cos() * 2.0).exp().sum()
        (gx,) = jg.autograd.grad(y, (x,), create_graph=True)
        return y, gx, (gx * gx.sin()).sum()
    want = step(jg.tensor(x0, requires_grad=True))
    f = jg.compile(step, backend=backend, background=False)
    got = f(jg.tensor(x0, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    x = jg.tensor(x0, requires_grad=True)
    assert jg.autograd.gradcheck(lambda x: f(x)[2], (x,))


def test_b11_pair_indices_are_read_once_per_pair(b11_plan):
    """B11's three loops over (B, P, 3) by a pair index (the differences' two gathers, the forces' two
    scatter-adds, the second-order pass's two gathers) read and check each index once per pair, before the loop
    over x, y, z: no index load left in their innermost loops (2 per element before: 142,848 a step -> 47,616)."""
    from jitgrad.codegen.program.cpu import lay_out
    from test_indexed_loops import _innermost_index_loads
    indexed = {g.name for g in b11_plan.groups if g.gathers or g.scatters}
    kernels = [st.kernel for st in lay_out(b11_plan).steps if st.kind == "kernel" and st.kernel.label in indexed]
    assert len(kernels) == 3
    assert [_innermost_index_loads(k) for k in kernels] == [0, 0, 0]


def test_b11_cutoff_loop_is_vectorised(b11_plan):
    """The loop computing the cutoff's cosine and sine runs in SIMD vectors: float32's Payne-Hanek words are
    computed (``mathlib_trig._ph32_word``), not gathered from a table, which kept the loop scalar (~120
    instructions a pair before, ~72 after, counted under callgrind)."""
    import re
    from jitgrad.codegen.native import llvm_build
    from jitgrad.codegen.program.cpu import lay_out
    trig = {g.name for g in b11_plan.groups if {e.op.name for e in g.all_eqns} & {"sin", "cos"}}
    (k,) = [st.kernel for st in lay_out(b11_plan).steps if st.kind == "kernel" and st.kernel.label in trig]
    asm = llvm_build.assembly(k.ir, k.key)
    assert re.search(r"\bv?mulps\b", asm) and re.search(r"\bv?(fmadd\d+|add)ps\b", asm)
