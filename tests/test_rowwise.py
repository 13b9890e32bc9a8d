"""Row-wise chains (ir/passes/row_chains.py, codegen/kernels/rowwise_loops.py): softmax, log_softmax, LayerNorm, the
attention softmax and their backward passes as one kernel each, an outer loop over rows and a few sweeps of each
row.  Structure is counted in the plan (kernels, full-size reads and writes) against the plain planner's; values
are checked against NumPy, eager mode and finite differences; nothing is timed."""
import re

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.native import build, llvm_build
from jitgrad.ir.passes import fusion_plan
from jitgrad.ir.plan import Group, RowGroup


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _graph(f, *args):
    f(*args)
    (entries,) = f._cache.values()
    return entries[0].graph


def _kernels(f, *args):
    from jitgrad.jit.graph_code import compiled_graph
    e = f._entry_for(tuple(args), {})
    return compiled_graph(e.graph, e.gf.writes, e.gf.parallel).kernels


def _sweeps(p, size):
    """Full-size values the plan's loops read or write: each is one sweep over main memory."""
    return sum(sum(1 for v in list(g.inputs) + list(g.outputs) if getattr(v.aval, "size", 0) == size)
               for g in p.groups)


def _fwd_bwd(fn):
    """A step: ``fn(x)``, backward inside with cotangent ``g``; returns the output and x's gradient."""
    def step(x, g, *rest):
        y = fn(x, *rest)
        (y * g).sum().backward()
        return y.detach(), x.grad
    return step


def _rand(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _run_both(step, arrays, grad_first=True):
    """``step`` eagerly and compiled (Numba), fresh leaf tensors each; the outputs as NumPy arrays."""
    out = []
    for f in (step, jg.compile(step, backend="numba")):
        ts = [jg.tensor(a, requires_grad=(k == 0 and grad_first)) for k, a in enumerate(arrays)]
        out.append([np.array(t) for t in f(*ts)])
    return out


# ---- structure ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_forward_and_backward_take_fewer_kernels_and_sweeps(name):
    """Softmax forward+backward: 4 loops, 9 sweeps of main memory -> 1 loop, 5 sweeps (read x and the cotangent,
    write y and dx, and the exponentials: two later passes need them, and two exps cost more than a store read
    back from cache).  LayerNorm: 9 loops (5 over the whole tensor), 10 sweeps -> 1 loop, 4 sweeps."""
    fn = {"softmax": lambda x: F.softmax(x, -1), "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],))}[name]
    shape = (16, 40)
    x = jg.tensor(_rand(shape, np.float32), requires_grad=True)
    g = jg.tensor(_rand(shape, np.float32, 1))
    graph = _graph(jg.compile(_fwd_bwd(fn), backend="numba"), x, g)
    plain, rows = fusion_plan(graph, rowwise=False), fusion_plan(graph)
    size = 16 * 40
    want_plain = {"softmax": (4, 9), "layer_norm": (9, 10)}[name]
    assert (len(plain.groups), _sweeps(plain, size)) == want_plain, str(plain)
    assert (len(rows.groups), _sweeps(rows, size)) == {"softmax": (1, 5), "layer_norm": (1, 4)}[name], str(rows)
    (rg,) = rows.groups
    assert isinstance(rg, RowGroup) and len(rg.passes) >= 3 and "by rows" in str(rows)
    if name == "softmax":       # the stored exponentials are read back, not recomputed, by the later passes
        exps = [e for e in rg.eqns if e.op.name == "exp"]
        assert len(exps) == 1 and exps[0].outs[0] in rg.outputs
        assert [sum(e.op.name == "exp" for e in ps.eqns) for ps in rg.passes] == [0, 1, 0, 0]
        assert [len(ps.loads) for ps in rg.passes] == [0, 0, 1, 1]


def test_training_step_softmax_forward_and_backward_are_one_kernel_each():
    """With matmuls around it (the forward and the backward apart), each side is one row kernel; the forward
    stores what the backward reads (the exponentials and their row sums), nothing else."""
    w = jg.tensor(_rand((24, 24), np.float32, 2), requires_grad=True)

    def step(x):
        (F.softmax(x @ w, -1) @ w).sum().backward()
        return w.grad
    x = jg.tensor(_rand((32, 24), np.float32))
    p = fusion_plan(_graph(jg.compile(step, backend="numba"), x))
    rows = [g for g in p.groups if isinstance(g, RowGroup)]
    assert len(rows) == 2 and len(p.groups) == 3, str(p)     # and w.grad's sum of its two contributions
    fwd = rows[0]
    assert sorted(tuple(v.aval.shape) for v in fwd.outputs) == [(32, 1), (32, 24), (32, 24)], str(p)


def test_layer_norm_training_step_writes_row_values_its_backward_reads():
    """LayerNorm's mean and rstd are read by later loops: the row kernel writes both (two row outputs, one of them
    placed by the layout as a reduction, the other as a plain output) and the values are eager mode's."""
    n = 20
    w = jg.tensor(_rand((n, n), seed=3), requires_grad=True)
    lw = jg.tensor(_rand((n,), seed=4), requires_grad=True)
    lb = jg.tensor(_rand((n,), seed=5), requires_grad=True)

    def step(x):
        (F.layer_norm(x @ w, (n,), lw, lb) @ w).tanh().sum().backward()
        return w.grad, lw.grad, lb.grad
    x = jg.tensor(_rand((12, n), seed=6))
    f = jg.compile(step, backend="numba")
    p = fusion_plan(_graph(f, x))
    first = next(g for g in p.groups if isinstance(g, RowGroup))
    assert len(first.row_outputs) >= 2, str(p)
    for params in (w, lw, lb):
        params.grad = None
    got = [np.array(t) for t in f(x)]
    for params in (w, lw, lb):
        params.grad = None
    want = [np.array(t) for t in step(x)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_cuda_plans_without_row_groups():
    x = jg.tensor(_rand((8, 16), np.float32), requires_grad=True)
    g = jg.tensor(_rand((8, 16), np.float32, 1))
    graph = _graph(jg.compile(_fwd_bwd(lambda x: F.softmax(x, -1)), backend="numba"), x, g)
    assert not any(isinstance(s, RowGroup) for s in fusion_plan(graph, rowwise=False).steps)
    assert all(type(s) is Group for s in fusion_plan(graph, rowwise=False).groups)


def test_a_value_compared_with_its_row_max_is_stored_not_recomputed():
    """``h == h.amax(-1)`` in a later pass must compare the bits the max saw: a pass that recomputed ``h = t + b``
    (with ``t = x * w`` returned, so stored, in that pass) rounded differently from the pass that took the max
    (an FMA where ``t`` has one use), and rows had no element equal to their max.  ``h`` is stored in the max's
    pass and read back; a chain that returns ``h`` (written in the last pass) is not merged."""
    rng = np.random.default_rng(90)
    w, b = jg.tensor(_rand((1000,), seed=91)), jg.tensor(_rand((1000,), seed=92))

    def fn(x):
        t = x * w
        h = t + b
        return ((h == h.amax(-1, keepdim=True)) * 1.0).sum(-1, keepdim=True), t

    x = jg.tensor(rng.standard_normal((64, 1000)))
    f = jg.compile(fn, backend="numba")
    (rg,) = fusion_plan(_graph(f, x)).groups
    h = next(e for e in rg.eqns if e.op.name == "amax").ins[0]
    assert isinstance(rg, RowGroup) and h in rg.passes[0].stores and h in rg.passes[1].loads, str(fusion_plan(_graph(f, x)))
    for seed in (93, 94):
        x = jg.tensor(np.random.default_rng(seed).standard_normal((64, 1000)))
        np.testing.assert_array_equal(f(x)[0].numpy(), fn(x)[0].numpy())
    p = fusion_plan(_graph(jg.compile(lambda x: fn(x) + (x * w + b,), backend="numba"), x))
    assert not any(isinstance(g, RowGroup) for g in p.groups), str(p)


def test_a_chain_that_reads_no_reduction_back_is_not_merged():
    """A row sum and a loop over the same space that reads nothing of it: no pass to save, the plain loops stay."""
    def fn(x):
        return x.exp().sum(-1, keepdim=True), (x * 2.0).sin()
    x = jg.tensor(_rand((8, 16), np.float32))
    p = fusion_plan(_graph(jg.compile(fn, backend="numba"), x))
    assert not any(isinstance(s, RowGroup) for s in p.steps), str(p)


def test_sibling_row_reductions_share_one_sweep():
    """Two row reductions of one input, nothing reading them back along the row (B11's two force sums over the
    pair Gaussians, a reshape of the first between them): one kernel of one pass, the input read once (twice as
    two plain loops), the values those loops compute."""
    def fn(x):
        s = x.exp().sum(-1, keepdim=True).reshape(8, 2, 1)
        return s, (x * 2.0).amax(-1, keepdim=True)
    x = _rand((16, 32), np.float32)
    f = jg.compile(fn, backend="numba")
    p = fusion_plan(_graph(f, jg.tensor(x)))
    (rg,) = [s for s in p.steps if isinstance(s, RowGroup)]
    assert len(rg.passes) == 1 and len(rg.passes[0].reductions) == 2, str(p)
    assert _sweeps(p, x.size) == 1 < _sweeps(fusion_plan(p.graph, rowwise=False), x.size)
    got = f(jg.tensor(x))
    np.testing.assert_allclose(got[0].numpy(), np.exp(x).sum(-1).reshape(8, 2, 1), rtol=1e-5)
    np.testing.assert_array_equal(got[1].numpy(), (x * 2).max(-1, keepdims=True))


def test_row_kernels_translate_without_numba_and_vectorise(tmp_path, monkeypatch):
    """A cold build of softmax's and LayerNorm's forward+backward compiles every kernel from LLVM IR (none refused),
    and each pass of a row is packed vector arithmetic."""
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    before = dict(build.COUNTS)
    refused = llvm_build.STATS["kernels_refused"]
    kernels = []
    for fn in (lambda x: F.softmax(x * 0.75, -1), lambda x: F.layer_norm(x, (x.shape[-1],), eps=1e-3)):
        f = jg.compile(_fwd_bwd(fn), backend="numba", background=False)
        x = jg.tensor(_rand((6, 96), np.float32, 7), requires_grad=True)
        g = jg.tensor(_rand((6, 96), np.float32, 8))
        f(x, g)
        kernels += [k for k in _kernels(f, x, g) if k.kind == "rows"]
    after = build.COUNTS
    assert after["kernels_ir"] - before["kernels_ir"] == after["kernels_compiled"] - before["kernels_compiled"] >= 2
    assert llvm_build.STATS["kernels_refused"] == refused
    assert len(kernels) == 2
    for k in kernels:
        asm = llvm_build.assembly(k.ir)
        loops = k.source.count("for i1 in range(n1):")
        assert loops >= 3
        assert sum(bool(re.search(r"\tv\w+p[sd]\s", ln)) for ln in asm.splitlines()) >= 2 * loops, k.label


# ---- values ------------------------------------------------------------------------------------------------

FNS = {
    "softmax": lambda x: F.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
    "softmax_scaled": lambda x: F.softmax(x * 0.125 - 1.0, -1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 33), (3, 4, 7), (1, 9), (7, 1), (1, 1), (2, 3, 1, 5)])
@pytest.mark.parametrize("name", sorted(FNS))
def test_values_match_eager_and_numpy(name, shape, dtype):
    x, g = _rand(shape, dtype, 11), _rand(shape, dtype, 12)
    (ey, egx), (cy, cgx) = _run_both(_fwd_bwd(FNS[name]), [x, g])
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cy, ey, **tol)
    np.testing.assert_allclose(cgx, egx, **tol)
    if name == "softmax":
        np.testing.assert_allclose(cy, _softmax_np(x), **tol)
        y = _softmax_np(x)
        np.testing.assert_allclose(cgx, y * (g - (g * y).sum(-1, keepdims=True)), **tol)
    if name == "layer_norm":
        d = x - x.mean(-1, keepdims=True)
        np.testing.assert_allclose(cy, d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5), **tol)


def test_rows_of_minus_infinity():
    """A row of -inf: softmax gives nan (torch's), log_softmax nan; finite rows beside it are exact."""
    x = _rand((4, 6), seed=13)
    x[1] = -np.inf
    x[2, 3] = -np.inf
    g = _rand((4, 6), seed=14)
    for name in ("softmax", "log_softmax"):
        (ey, egx), (cy, cgx) = _run_both(_fwd_bwd(FNS[name]), [x, g])
        np.testing.assert_array_equal(np.isnan(cy), np.isnan(ey))
        np.testing.assert_allclose(cy, ey, rtol=1e-12, atol=1e-14)
        assert np.isnan(cy[1]).all() and np.isfinite(cy[[0, 3]]).all()
        np.testing.assert_allclose(cgx[[0, 2, 3]], egx[[0, 2, 3]], rtol=1e-11, atol=1e-12)


def _sdpa_step(mask_kind, dtype):
    def step(q, k, v, g):
        L, S = q.shape[-2], k.shape[-2]
        if mask_kind == "causal":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif mask_kind == "bool":
            m = np.tril(np.ones((L, S), bool))
            m[2] = False            # a row that masks every key: weights 0, output 0
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=jg.tensor(m))
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=jg.tensor(_rand((L, S), dtype, 15)), scale=0.3)
        (o * g).sum().backward()
        return o.detach(), q.grad, k.grad, v.grad
    return step


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask_kind", ["causal", "bool", "additive"])
def test_attention_softmax_with_scale_and_mask(mask_kind, dtype):
    shapes = [(2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), (2, 3, 5, 6)]
    arrays = [_rand(s, dtype, 20 + i) for i, s in enumerate(shapes)]
    step = _sdpa_step(mask_kind, dtype)
    res = []
    for f in (step, jg.compile(step, backend="numba")):
        ts = [jg.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)]
        res.append([np.array(t) for t in f(*ts)])
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, **tol)
    if mask_kind == "bool":
        assert (res[1][0][:, :, 2] == 0).all() and np.isfinite(res[1][1]).all()
    f = jg.compile(step, backend="numba")
    ts = [jg.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)]
    p = fusion_plan(_graph(f, *ts))
    assert sum(isinstance(g, RowGroup) for g in p.groups) == 2, str(p)


@pytest.mark.parametrize("folded", [False, True])
def test_masked_fill_softmax_backward_is_one_row_kernel_past_the_masks_loop(folded, monkeypatch):
    """nanoGPT's attention without SDPA (``masked_fill`` of a causal mask, then softmax): the backward's row sums
    and their use are one row kernel, although the mask's ``logical_not`` is planned between them (a small loop
    that reads none of the chain's values runs before the merged kernel).  Forward and backward equal eager.
    ``folded``: the causal mask folded into the graph (``jit/constant_masks.py``): no mask loop at all."""
    from jitgrad.ir.passes import causal
    monkeypatch.setattr(causal, "ENABLED", folded)
    T = 12
    mask = jg.tensor(np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T))

    def step(a, v):
        att = (a * 0.5).masked_fill(mask == 0, float("-inf"))
        y = F.softmax(att, dim=-1)
        (y @ v).sum().backward()        # (a product between the forward's chain and the backward's)
        return y.detach(), a.grad
    arrays = [_rand((2, 3, T, T), np.float32, 3), _rand((2, 3, T, 5), np.float32, 4)]
    eager, compiled = _run_both(step, arrays)
    for a, b in zip(eager, compiled):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    a = jg.tensor(arrays[0], requires_grad=True)
    p = fusion_plan(_graph(jg.compile(step, backend="numba"), a, jg.tensor(arrays[1])))
    rows = [g for g in p.groups if isinstance(g, RowGroup)]
    assert len(rows) == 2, str(p)            # the forward's, and the backward's
    back = rows[1]
    assert [e.op.name for e in back.eqns if e.op.name in ("sum", "where")] == ["sum", "where"], str(p)
    nots = [g for g in p.groups if any(e.op.name == "logical_not" for e in g.eqns)]
    if folded:
        assert not nots, str(p)
    else:
        assert len(nots) == 1 and p.steps.index(nots[0]) < p.steps.index(back), str(p)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm"])
def test_gradcheck_and_gradgradcheck_compiled(name):
    fn = {"softmax": lambda x: F.softmax(x * 1.5, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
          "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],))}[name]
    f = jg.compile(fn, backend="numba")
    x = jg.tensor(_rand((3, 7), seed=30), requires_grad=True)
    assert jg.autograd.gradcheck(f, (x,))
    assert jg.autograd.gradgradcheck(f, (x,))


def test_gradcheck_and_gradgradcheck_compiled_sdpa():
    m = jg.tensor(np.where(np.tril(np.ones((4, 5))) > 0, 0.0, -np.inf))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7)
    f = jg.compile(fn, backend="numba")
    q, k, v = (jg.tensor(_rand(s, seed=40 + i), requires_grad=True)
               for i, s in enumerate([(1, 2, 4, 3), (1, 2, 5, 3), (1, 2, 5, 2)]))
    assert jg.autograd.gradcheck(f, (q, k, v))
    assert jg.autograd.gradgradcheck(f, (q, k, v))


def test_state_updated_in_place_through_a_row_kernel():
    """A state update whose value needs a row reduction (p -= 0.1 * softmax(p)): the output is written in the
    last pass, after every pass read the old row, so computing it straight into p is right; calls agree with
    eager mode call after call."""
    def make():
        return jg.tensor(_rand((6, 10), seed=50))

    def step(p):
        with jg.no_grad():
            p.sub_(0.1 * F.softmax(p * 3.0, -1) + 0.01 * F.layer_norm(p, (10,)))
        return p.sum()
    pe, pc = make(), make()
    f = jg.compile(step, backend="numba")
    for _ in range(3):
        step(pe)
        f(pc)
        np.testing.assert_allclose(pc.numpy(), pe.numpy(), rtol=1e-12, atol=1e-14)
    assert any(isinstance(g, RowGroup) for g in fusion_plan(_graph(f, pc)).groups)


def test_parallel_row_kernel_matches_serial():
    """The outer loop over rows in parallel (``prange``, Numba's build) gives the serial loop's values."""
    x = _rand((128, 40), np.float32, 60)
    g = _rand((128, 40), np.float32, 61)
    step = _fwd_bwd(lambda x: F.layer_norm(F.softmax(x, -1) * 40.0, (40,)))
    res = []
    for par in (False, True):
        f = jg.compile(step, backend="numba", parallel=par)
        res.append([np.array(t) for t in f(jg.tensor(x, requires_grad=True), jg.tensor(g))])
        ks = [k for k in _kernels(f, jg.tensor(x, requires_grad=True), jg.tensor(g)) if k.kind == "rows"]
        assert ks and all(k.parallel == par for k in ks)
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_and_broadcast_operands(dtype):
    """Rows read through a transpose (strided along the row) and a bias broadcast along the rows."""
    x, g = _rand((9, 6), dtype, 70), _rand((6, 9), dtype, 71)
    bias = jg.tensor(_rand((6, 1), dtype, 72))

    def fn(x):
        t = x.transpose(0, 1)               # (6, 9), strided along its rows
        return F.softmax(t * 2.0 + bias, -1) * F.layer_norm(t, (9,))
    (ey, egx), (cy, cgx) = _run_both(_fwd_bwd(fn), [x, g])
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cy, ey, **tol)
    np.testing.assert_allclose(cgx, egx, **tol)
    f = jg.compile(_fwd_bwd(fn), backend="numba")
    p = fusion_plan(_graph(f, jg.tensor(x, requires_grad=True), jg.tensor(g)))
    assert any(isinstance(s, RowGroup) for s in p.steps), str(p)


def _layer_norm_training(n=20, rows=12, eps=1e-5):
    """A LayerNorm between two matmuls, its backward and the affine gradients: the backward row kernel also
    accumulates the column sums (bias and weight gradients)."""
    w = jg.tensor(_rand((n, n), seed=80), requires_grad=True)
    lw = jg.tensor(_rand((n,), seed=81), requires_grad=True)
    lb = jg.tensor(_rand((n,), seed=82), requires_grad=True)

    def step(x):
        (F.layer_norm(x @ w, (n,), lw, lb, eps=eps) @ w).tanh().sum().backward()
        out = w.grad, lw.grad, lb.grad
        w.grad = lw.grad = lb.grad = None
        return out
    return step, jg.tensor(_rand((rows, n), seed=83))


def test_column_sums_join_the_backward_row_kernel():
    step, x = _layer_norm_training()
    f = jg.compile(step, backend="numba")
    p = fusion_plan(_graph(f, x))
    rows = [g for g in p.groups if isinstance(g, RowGroup)]
    assert len(rows) == 2 and len(p.groups) == 4, str(p)      # and tanh's vjp, w.grad's sum of two GEMMs
    assert len(rows[1].columns) == 2
    got, want = [np.array(t) for t in f(x)], [np.array(t) for t in step(x)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    k = [k for k in _kernels(f, x) if k.kind == "rows"]
    assert len(k) == 2 and not any(k_.parallel for k_ in k)


def test_numba_builds_the_row_kernels_too(tmp_path, monkeypatch):
    """The row kernels' text means to Numba what it means to ir_loops (JITGRAD_IR_LOOPS=0 builds every kernel
    with Numba; literals no other test uses, so the kernels are new to this process): eager mode's values."""
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "IR_LOOPS", False)
    before = dict(build.COUNTS)
    sm = _fwd_bwd(lambda x: F.softmax(x * 0.4375, -1) + F.layer_norm(x, (37,), eps=7e-4))
    arrays = [_rand((5, 37), np.float32, 84), _rand((5, 37), np.float32, 85)]
    (ey, egx), (cy, cgx) = _run_both(sm, arrays)
    assert build.COUNTS["kernels_compiled"] - before["kernels_compiled"] >= 1
    assert build.COUNTS["kernels_ir"] == before["kernels_ir"]
    np.testing.assert_allclose(cy, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cgx, egx, rtol=1e-4, atol=1e-5)
    step, x = _layer_norm_training(eps=3e-4)         # column sums in the backward's row kernel
    got, want = [np.array(t) for t in jg.compile(step, backend="numba")(x)], [np.array(t) for t in step(x)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert build.COUNTS["kernels_ir"] == before["kernels_ir"]


def test_a_stash_only_later_passes_read_is_one_row_per_outer_index():
    """The attention softmax stores its exponentials for its own last pass (row_chains._schedule: cheaper than a
    second exp); nothing else reads them, so they go to a scratch row per index of the outer loop (strides
    ``[row, 0, 1]`` over the kernel's merged dims ``[B*H, T, T]``: 8 rows of 16, not the whole space), and the
    values are eager's."""
    from jitgrad.jit.graph_code import compiled_graph
    rng = np.random.default_rng(3)
    x = jg.tensor(rng.standard_normal((2, 4, 8, 16)).astype(np.float32))
    mask = jg.tensor(np.tril(np.ones((8, 16), bool)).reshape(1, 1, 8, 16))

    def f(x):
        return x.masked_fill(mask.logical_not(), float("-inf")).softmax(-1)
    cf = jg.compile(f, backend="numba")
    np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6, atol=1e-7)
    e = cf._entry_for((x,), {})
    prog = compiled_graph(e.graph, e.gf.writes, e.gf.parallel).program
    (st,) = [s for s in prog.steps if s.kind == "kernel" and "by rows" in s.label]
    rank = 3
    assert prog.table[st.block:st.block + rank] == [8, 8, 16]
    ops = prog.table[st.block + rank:]
    strides = [list(ops[1 + k * (rank + 1):1 + k * (rank + 1) + rank]) for k in range(5)]
    assert strides.count([16, 0, 1]) == 1, strides
