"""One place assignment for both targets (``codegen/places.py``): the CPU layout (``layout.Program``) and the
CUDA graph (``cuda.CudaGraph``) lower the same plan and get the same place for every value (root kind and
number, workspace byte offset, element offset, shape, strides, dtype), the same workspace size, outputs and
state updates computed in place; and the workspace stays bounded by the live values, not the graph's length.

Building a Program or a CudaGraph only writes kernel text (nothing is compiled), so these tests are cheap; the
graphs come from ``@jg.compile`` traces run on the interpreter.  A last test runs CUDA graphs on Numba's
simulator in a child process (in-place updates, a vetoed update, reused workspace slots)."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.gpu.cuda import CudaGraph
from jitgrad.codegen.program.cpu import lay_out
from jitgrad.codegen.places import Places
from jitgrad.ir.graph import Var
from jitgrad.ir.passes import fusion_plan
from jitgrad.ir.plan import Group


def _graphs(fn, *args):
    """``[(graph, writes)]`` of the traces ``@jg.compile`` makes of ``fn(*args)`` (writes: (output, input))."""
    f = jg.compile(fn, backend="interpret")
    f(*args)
    return [(e.graph, [(oi, ci) for ci, oi in e.writes]) for es in f._cache.values() for e in es]


def _sig(p):
    r = p.root
    at = r.offset if r.kind == "ws" else (r.index if r.kind in ("input", "fresh") else None)
    return (r.kind, at, p.offset, tuple(p.shape), tuple(p.strides), p.dtype.name)


def _vars(graph):
    seen = list(graph.inputs)
    for e in graph.eqns:
        seen += [v for v in e.outs if isinstance(v, Var)]
    return seen


def _both(graph, writes):
    # the same plan for both: CUDA plans without row-wise kernels and loads by an index inside loops
    # (fusion_plan(rowwise=False, indexed=False)), so the CPU does here
    plan = fusion_plan(graph, rowwise=False, indexed=False)
    prog = lay_out(plan, writes)
    cg = CudaGraph(plan, writes)
    return prog, cg


def _check_in_place_rule(graph, pl):
    """Every update computed in place runs after the last step that may raise, and nothing made before it
    over the state's buffer (the old value, a view of it) is read after it."""
    first = {}
    for k, s in enumerate(fusion_plan(graph, rowwise=False, indexed=False).steps):
        for v in (s.outputs if isinstance(s, Group) else s.outs):
            first.setdefault(v, k)
    for o in pl.inplace_done:
        k, root = first[o], pl[o].root
        assert root.kind == "input" and k > pl.last_raising
        for u, p in pl.items():
            if isinstance(u, Var) and p.root is root and u is not o and first.get(u, -1) < k:
                assert pl.last_use.get(u, -1) <= k, (o, u)


def _same_places(graph, writes):
    prog, cg = _both(graph, writes)
    a, b = prog.places, cg.places
    _check_in_place_rule(graph, a)
    for v in _vars(graph):
        if v in a or v in b:
            assert _sig(a[v]) == _sig(b[v]), (v, a[v], b[v])
    assert a.ws_size == b.ws_size
    assert prog.outputs == cg.outputs
    assert a.inplace_done == b.inplace_done
    assert [(_sig(s), _sig(d)) for s, d in a.write_backs()] == [(_sig(s), _sig(d)) for s, d in b.write_backs()]
    assert [(tuple(r.shape), r.dtype.name) for r in a.fresh] == [(tuple(r.shape), r.dtype.name) for r in b.fresh]
    return prog, cg


rng = np.random.default_rng(0)


def _t(*shape, dtype=np.float32):
    return jg.tensor(rng.standard_normal(shape).astype(dtype))


def test_views_are_free_on_both_targets():
    """Transposes, slices, expands and reshapes are places over their input; a reshape of a transposed
    value is materialised once, into the same workspace slot on both targets."""
    x = _t(6, 4)

    def f(x):
        y = x.T[1:3] * 2.0                  # a strided view read by a loop
        z = x.T.reshape(24) + 1.0           # reshape of a transpose: materialised, then read
        w = x[:, None, :].expand(6, 3, 4)    # broadcast view
        return y, z, (w * 3.0).sum(1), x.reshape(4, 6)
    for g, w in _graphs(f, x):
        prog, cg = _same_places(g, w)
        views = [e for e in fusion_plan(g).steps if not isinstance(e, Group) and e.op.view]    # outside loops
        assert len(views) >= 3 and all(prog.places[e.outs[0]].root is prog.places[e.ins[0]].root for e in views
                             if e.op.name != "reshape" or prog.places[e.ins[0]].contiguous())
        copies = [s for s in prog.steps if s.label == "copy (layout)"]
        assert len(copies) == 1 and len([s for s in cg.steps if s.label == "copy (layout)"]) == 1
        assert prog.outputs[3][0] == "fresh"      # a reshape of an input handed back: copied into a fresh array


def test_state_updates_in_place_on_both_targets():
    """An SGD-style update nothing reads afterwards is computed into the state's own buffer (no write-back
    step) on both targets; an update whose old value is read later is copied back at the end instead."""
    w, v = _t(8, 5), _t(8, 5)
    x = _t(8, 5)

    def f(x):
        y = (w * x).tanh()
        with jg.no_grad():
            w.sub_(0.1 * y)                  # nothing reads w afterwards: in place
            v.mul_(0.5)
        return (y + v).sum()                 # v's new value is read later: v is still computed in place
    for g, wr in _graphs(f, x):
        prog, cg = _same_places(g, wr)
        assert len(prog.places.inplace_done) == 2
        assert not prog.writes and not [s for s in cg.steps if s.guarded]
        assert any(s.state_write for s in cg.steps) and any(s.state_write for s in prog.steps)

    def h(x):
        old = w * 1.0                        # fused with the update: reads w at the element it writes
        with jg.no_grad():
            w.add_(x)
        return w.T.sum(1) + old.sum(0)        # w read through a transpose after the update
    for g, wr in _graphs(h, x):
        _same_places(g, wr)          # in place or written back, by the same rule on both targets


def test_anomaly_checks_and_raising_steps_veto_updates_in_place():
    """With anomaly checks no update runs in place; nor does one planned before a step that can raise (an
    index out of range): those are written back at the end, and only when nothing failed."""
    w = _t(6)
    emb = _t(5, 3)
    idx = jg.tensor(np.array([0, 4]))

    def f(idx):
        with jg.no_grad():
            w.mul_(2.0)
        return emb[idx] * 1.5                # a row gather after the update: it may raise
    for g, wr in _graphs(f, idx):
        prog, cg = _same_places(g, wr)
        assert prog.places.last_raising >= 0
        assert not prog.places.inplace_done and len(prog.writes) == 1
    for g, wr in _graphs(lambda x: (w * x).exp().sum(), _t(6)):
        checks = {e: i for i, e in enumerate(g.eqns)}
        pl = Places(g, fusion_plan(g), wr, checks)
        assert pl.inplace == {}


def test_a_failed_index_leaves_state_untouched_on_the_cpu():
    """The row gather's index check runs after an update planned before it: that update is written back only
    when the call did not raise (it used to be computed in place, so a failed call still changed the state)."""
    w = jg.tensor(np.ones(4, np.float32))
    emb = jg.tensor(np.arange(15, dtype=np.float32).reshape(5, 3))

    def step(idx):
        with jg.no_grad():
            w.mul_(2.0)
        return emb[idx] * 1.5
    f = jg.compile(step, backend="numba", background=False)
    np.testing.assert_array_equal(f(jg.tensor(np.array([0, 1]))).numpy(), emb.numpy()[[0, 1]] * 1.5)
    np.testing.assert_array_equal(w.numpy(), 2.0)
    with pytest.raises(IndexError, match="no state was updated"):
        f(jg.tensor(np.array([0, 7])))
    np.testing.assert_array_equal(w.numpy(), 2.0)
    f(jg.tensor(np.array([4])))
    np.testing.assert_array_equal(w.numpy(), 4.0)


def test_outputs_that_alias_inputs_and_each_other():
    """An input returned as is stays the input; a view of it is copied into a fresh array; one value returned
    twice is one fresh array; a constant output is copied out of its literal."""
    x = _t(3, 4)

    def f(x):
        y = x * 2.0
        return x, x.T, y, y, jg.tensor(np.float32(3.0))
    for g, wr in _graphs(f, x):
        prog, cg = _same_places(g, wr)
        outs = prog.outputs
        assert outs[0] == ("input", 0)
        assert outs[1][0] == "fresh" and outs[2] == outs[3] and outs[2][0] == "fresh"
        assert [s.label for s in prog.steps].count("copy (output)") == [s.label for s in cg.steps].count(
            "copy (output)") >= 2


def test_gathers_scatters_and_reductions_agree():
    x = _t(5, 6)
    i = jg.tensor(np.array([0, 2, 4]))
    j = jg.tensor(np.array([1, 1, 5]))

    def f(x, i, j):
        g = x[i, j] * 2.0
        s = jg.zeros(5, 6)
        s[i, j] = g
        return s.sum(0), (x.exp() / x.exp().sum(1, keepdim=True)).max(1)[0], x.cumsum(1)
    for g, wr in _graphs(f, x, i, j):
        _same_places(g, wr)


def test_matmuls_and_concatenation_agree():
    """BLAS reads a transposed operand in place and CUDA's GEMM reads any strides: no copies on either; ``cat``
    (a host step on the CPU, copies into slabs on CUDA) gets the same output buffer."""
    x, w, v = _t(4, 6), _t(5, 6), _t(5, 3)

    def f(x):
        h = (x @ w.T).relu()
        return jg.cat([h @ v, x[:, :3]], 0).sum(0)
    for g, wr in _graphs(f, x):
        prog, cg = _same_places(g, wr)
        assert not [s for s in prog.steps + cg.steps if s.label == "copy (layout)"]


def _chain(n):
    """``n`` softmax-like rounds over a [32, 64] value: every round leaves workspace intermediates behind."""
    def f(x):
        for _ in range(n):
            e = (x - x.max(1, keepdim=True)[0]).exp()
            x = (e / e.sum(1, keepdim=True)).T.reshape(32, 64) * 3.0
        return x.sum(1)
    return f


def test_workspace_reuse_bounds_memory():
    """The workspace of a chain does not grow with its length (slots are reused once their readers ran), on
    both targets, though the intermediates it holds over time do; and no two values live at once in
    overlapping bytes."""
    x = _t(32, 64)
    sizes = {}
    for n in (2, 8):
        (g, wr), = _graphs(_chain(n), x)
        prog, cg = _same_places(g, wr)
        pl = prog.places
        ws = [r for r in pl.roots if r.kind == "ws"]
        sizes[n] = (pl.ws_size, sum(r.nbytes for r in ws))
        # values over workspace roots: each one's bytes are not reused before its last reader ran
        plan = fusion_plan(g, rowwise=False, indexed=False)
        first = {}
        for k, s in enumerate(plan.steps):
            for v in (s.outputs if hasattr(s, "outputs") else s.outs):
                first.setdefault(v, k)
        live = [(first[v], pl.last_use[v], pl[v].root) for v in first if v in pl and pl[v].root.kind == "ws"]
        for a0, a1, ra in live:
            for b0, b1, rb in live:
                if ra is not rb and ra.offset < rb.offset + rb.nbytes and rb.offset < ra.offset + ra.nbytes:
                    assert a1 < b0 or b1 < a0, (a0, a1, b0, b1)
    assert sizes[8][0] == sizes[2][0] > 0, sizes            # the same workspace for 4x the rounds
    assert sizes[8][1] >= 3 * sizes[2][1], sizes            # while the values it held grew with the chain


def test_a_reshape_that_needs_a_copy_is_never_taken_for_a_view():
    """A reshape of a strided value that its strides cannot express (merging the heads and time of attention's
    ``[B, H, T, D]`` view of a ``[B, T, 3C]`` projection) is a copy, whatever the allocator does: the layout once
    found its place by running NumPy's reshape on a dummy array and asking whether the result shared memory
    with it, and a copy allocated inside the dummy's span (which it does not own) passed for a view at a bogus
    offset (B9's compiled step lost its two copies in some processes and read the wrong memory).  Checked for
    several sizes and repeats, since where a copy lands depends on the allocator; a real view is still found."""
    from jitgrad.codegen.places import Place, Root, view_place
    from jitgrad.ir import dtypes as dt
    from jitgrad.ir.graph import Aval, Eqn
    from jitgrad.ir.ops.opdef import OPS
    f32 = dt.float32
    for B, H, T, D in ((2, 4, 16, 8), (16, 4, 64, 32), (64, 8, 128, 64)):
        root = Root("ws", nbytes=B * T * 3 * H * D * 4, shape=(B * T * 3 * H * D,), dtype=f32)
        src = Place(root, 0, (B, H, T, D), (T * 3 * H * D, D, 3 * H * D, 1), f32)
        merge = Eqn(OPS["reshape"], [Var(Aval((B, H, T, D), f32))], [Var(Aval((B, H * T, D), f32))],
                    {"shape": (B, H * T, D)})
        assert all(view_place(merge, src) is None for _ in range(50)), (B, H, T, D)
        split = Eqn(OPS["reshape"], [Var(Aval((B, H, T, D), f32))], [Var(Aval((B, H, T, D // 2, 2), f32))],
                    {"shape": (B, H, T, D // 2, 2)})
        p = view_place(split, src)
        assert p is not None and p.root is root and p.offset == 0
        assert p.strides == (T * 3 * H * D, D, 3 * H * D, 2, 1)


def test_cuda_reduction_scratch_is_released_after_its_step():
    """A long CUDA reduction takes a scratch buffer for its partial sums: a workspace slot for that step only,
    reused by later values of its size."""
    x = _t(4, 4096)

    def f(x):
        return (x.exp().sum(1) + 1.0).exp().sum(), (x * 2.0).sum(1)
    (g, wr), = _graphs(f, x)
    cg = CudaGraph(fusion_plan(g, rowwise=False, indexed=False), wr)
    roots = cg.places.roots
    held = {id(p.root) for _, p in cg.places.items()}
    scratch = [k for k, r in enumerate(roots) if r.kind == "ws" and id(r) not in held]
    assert len(scratch) == 2, [(r, r.shape) for r in roots]
    ws = [r for r in roots if r.kind == "ws"]
    assert cg.places.ws_size < sum(r.nbytes for r in ws)     # slots shared: the scratch's, or by the scratch
    assert roots[scratch[1]].offset in [r.offset for r in roots[:scratch[1]] if r.kind == "ws"]


_CUDA_RUN = r'''
import numpy as np
from numba import cuda
import jitgrad as jg
from jitgrad.codegen.gpu.cuda import CudaGraph
from jitgrad.ir.interpret import interpret
from jitgrad.ir.passes import fusion_plan

w0 = np.linspace(0.5, 1.5, 6).astype(np.float32)
emb = np.arange(15, dtype=np.float32).reshape(5, 3)
w, E = jg.tensor(w0.copy()), jg.tensor(emb)

def f(x, idx):
    r = E[idx, idx].sum()                # may raise: planned before the update, which then runs in place
    y = (x * w).tanh()
    z = (y - y.max()).exp()
    s = (z / z.sum()).sum() + r          # softmax: workspace values freed and their slots reused
    with jg.no_grad():
        w.sub_(0.5 * y)
    return s

cf = jg.compile(f, backend="interpret")
x = np.linspace(-1, 1, 6).astype(np.float32)
cf(jg.tensor(x), jg.tensor(np.array([1, 2])))
(e,) = [e for es in cf._cache.values() for e in es]
g, writes = e.graph, [(oi, ci) for ci, oi in e.writes]
cg = CudaGraph(fusion_plan(g, rowwise=False, indexed=False), writes)
assert cg.places.inplace_done and any(st.state_write for st in cg.steps), "no update in place"
by_shape = {(6,): w0, (5, 3): emb}
host = [x, np.array([1, 2])] + [by_shape[tuple(v.aval.shape)] for v in g.inputs[2:]]
k_w = 2 + [tuple(v.aval.shape) for v in g.inputs[2:]].index((6,))
(o_w,) = [o for o, i in writes if i == k_w]
ref = interpret(g, [h.copy() for h in host])
dev = [cuda.to_device(h) for h in host]
out = cg.run(*dev)
np.testing.assert_allclose(out[0].copy_to_host(), ref[0], rtol=1e-5)
np.testing.assert_allclose(dev[k_w].copy_to_host(), ref[o_w], rtol=1e-6)
dev = [cuda.to_device(h) for h in host]
dev[1] = cuda.to_device(np.array([1, 9]))
try:
    cg.run(*dev)
    raise SystemExit("no IndexError")
except IndexError as err:
    assert "no state was updated" in str(err), err
np.testing.assert_array_equal(dev[k_w].copy_to_host(), w0)
print("CUDA-SIM-OK")
'''


@pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None, reason="numba-cuda is not installed")
def test_cuda_graph_runs_with_shared_places_on_the_simulator():
    """On the simulator: an update computed in place gives the interpreter's state, and one vetoed by an index
    out of range leaves the state as it was."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + sys.path))
    r = subprocess.run([sys.executable, "-c", _CUDA_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "CUDA-SIM-OK" in r.stdout, (r.stdout + r.stderr)[-4000:]
