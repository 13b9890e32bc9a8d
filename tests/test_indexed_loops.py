"""Gathers by an index (``x[:, idx]``, ``index_select``) and their scatter-add transposes (``index_add``) inside
fused loops: the planner (``ir/passes/fuse.py``: ``gather_load``, ``scatter_store``) makes a gather a load of
the index then of the array, and a scatter-add the store that closes its value's loop, so B11's pair features
(gather -> differences -> norm) and the forces' backward (... -> scatter-add) run with no gathered array in
memory.  Checked: the plans, the kernels against eager (values, gradcheck and gradgradcheck through the
compiled function), index errors as clear as the standalone kernels', and B11's step counted (kernels, no
step outside native code)."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.passes import fusion_plan
from jitgrad.ir.plan import Group, LoopBatch

from test_second_order_steps import ff


def _compiled(fn, **kw):
    return jg.compile(fn, backend="numba", background=False, **kw)


def _graph(f):
    (entries,) = f._cache.values()
    return entries[0].graph


def _pairs(n):
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return jg.tensor(i), jg.tensor(j)


def _features(x, i, j):
    d = x[:, i] - x[:, j]                       # B11's pair differences
    r = ((d * d).sum(-1) + 1e-3).sqrt()
    return (-(r[..., None] - jg.tensor(np.linspace(0.0, 2.0, 4))) ** 2).exp()


def test_gathers_are_loads_of_the_loop_that_reads_them():
    i, j = _pairs(4)
    x = jg.tensor(np.random.default_rng(0).standard_normal((2, 4, 3)))
    f = _compiled(lambda x: _features(x, i, j))
    np.testing.assert_allclose(f(x).numpy(), _features(x, i, j).numpy(), rtol=1e-12)
    plan = fusion_plan(_graph(f))
    assert not [s for s in plan.steps if not isinstance(s, (Group, LoopBatch)) and s.op.name == "getitem"
                and s.ins[1:]], str(plan)                       # no gather step left
    (g,) = [s for s in plan.groups if s.gathers]
    assert len(g.gathers) == 2 and g.reduce is not None          # both gathers and the norm's sum: one loop
    assert not [v for e in g.gathers for v in e.outs if v in g.outputs]   # the gathered arrays never stored


def test_scatter_adds_close_the_loop_of_their_value():
    i, j = _pairs(4)
    x = jg.tensor(np.random.default_rng(1).standard_normal((2, 4, 3)), requires_grad=True)

    def forces(x):
        e = _features(x, i, j).sum()
        return jg.autograd.grad(e, x, create_graph=True)[0]
    f = _compiled(forces)
    np.testing.assert_allclose(f(x).detach().numpy(), forces(x).detach().numpy(), rtol=1e-10, atol=1e-12)
    plan = fusion_plan(_graph(f))
    assert not [s for s in plan.steps if not isinstance(s, (Group, LoopBatch)) and s.op.name == "index_put"], str(plan)
    (g,) = [s for s in plan.groups if s.scatters]
    assert len(g.scatters) == 2             # x[:, i] and x[:, j]'s transposes, one loop over the pairs


def test_index_add_and_index_select_compiled_equal_eager():
    rng = np.random.default_rng(2)
    src = jg.tensor(rng.standard_normal((3, 5, 2)))
    idx = jg.tensor(np.array([4, 0, 4, 1, 1, 3]))
    back = jg.tensor(np.array([0, 2, 2, 1, 0, 2]))

    def f(src):
        g = src.index_select(1, idx).sin() * 2.0          # (3, 6, 2)
        return jg.zeros((3, 3, 2), dtype=src.dtype).index_add(1, back, g.tanh()), g.sum()
    cf = _compiled(f)
    for a, b in zip(cf(src), f(src)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    plan = fusion_plan(_graph(cf))
    assert any(g.gathers and g.scatters for g in plan.groups), str(plan)


@pytest.mark.parametrize("second", [False, True])
def test_gradcheck_through_the_fused_forms(second):
    """gradcheck / gradgradcheck (float64) of compiled functions whose loops gather and scatter by index."""
    i, j = _pairs(3)
    rng = np.random.default_rng(3)
    x = jg.tensor(rng.standard_normal((2, 3, 3)), requires_grad=True)
    w = jg.tensor(rng.standard_normal((2, 3, 3)), requires_grad=True)

    def energy(x, w):
        d = x[:, i] * w[:, j] - x[:, j]
        per_pair = (d * d).sum(-1).tanh()                                   # (2, 6)
        per_atom = jg.zeros((2, 3), dtype=x.dtype).index_add(1, i, per_pair.exp())
        return (per_atom * per_atom).sum(-1)
    f = _compiled(energy)
    check = jg.autograd.gradgradcheck if second else jg.autograd.gradcheck
    assert check(f, (x, w))
    assert check(energy, (x, w))


def test_an_index_out_of_range_in_a_fused_loop_raises_and_writes_nothing():
    x = jg.tensor(np.arange(12.0).reshape(2, 3, 2))
    w = jg.tensor(np.ones(3))

    def f(x, idx):
        with jg.no_grad():
            w.mul_(2.0)
        return (x[:, idx] * 2.0).sum(-1)
    cf = _compiled(f)
    good = jg.tensor(np.array([0, 2, -1]))
    np.testing.assert_allclose(cf(x, good).numpy(), (x[:, good] * 2.0).sum(-1).numpy())
    assert any(g.gathers for g in fusion_plan(_graph(cf)).groups)
    before = w.numpy().copy()
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 0 with size 3"):
        cf(x, jg.tensor(np.array([0, 3, 1])))
    np.testing.assert_array_equal(w.numpy(), before)        # the update is written back only on success
    with pytest.raises(IndexError, match=r"index -4 is out of bounds for dimension 0 with size 3"):
        cf(x, jg.tensor(np.array([0, -4, 1])))
    # the range-checked ops raise eager mode's error (torch's type and text) from a fused scatter-add and gather
    src = jg.tensor(np.ones((2, 3)))

    def add(s, k):
        return jg.zeros((2, 2), dtype=s.dtype).index_add(1, k, s.exp())

    def sel(s, k):
        return s.index_select(1, k).exp()
    for fn in (add, sel):
        cfn = _compiled(fn)
        cfn(src, jg.tensor(np.array([0, 1, 1])))
        assert any(g.gathers or g.scatters for g in fusion_plan(_graph(cfn)).groups)
        for bad in ([0, 5, 1], [0, -1, 1]):
            k = jg.tensor(np.array(bad))
            with pytest.raises(Exception) as want:
                fn(src, k)
            with pytest.raises(type(want.value)) as got:
                cfn(src, k)
            assert str(got.value).startswith(str(want.value).split("\n")[0]), (got.value, want.value)


def test_scatter_loops_split_only_by_rows_they_own_and_agree_at_every_thread_count():
    """Adds by an index may meet: a loop that scatters splits between threads only when each position of its split
    axis adds into its own rows of the output (``loop_steps.scatters_own_rows``): each row's sums run on one
    thread in the serial order, so they never depend on threads.  Along the split axis it stays serial
    (``test_parallel_scatter.py`` has the rule's cases)."""
    rng = np.random.default_rng(4)
    v = jg.tensor(rng.standard_normal((64, 4096)).astype(np.float32))
    idx = jg.tensor(rng.integers(0, 7, 4096))

    def f(v):
        return jg.zeros((64, 7)).index_add(1, idx, v.sin() * 3.0)

    def g(v):       # a 1-D output: every position of the split axis may add into any element
        return jg.zeros((7,)).index_add(0, idx, v[0].sin() * 3.0)
    for fn, splits in ((f, True), (g, False)):
        a = _compiled(fn, parallel=True)
        b = _compiled(fn, parallel=False)
        np.testing.assert_array_equal(a(v).numpy(), b(v).numpy())
        assert any("index_put" in ln.label and ln.parallel for ln in a.launches(v)) == splits


# ------------------------------------------------------------------------------------------------ B11 counted

def test_b11_step_runs_its_gathers_and_scatter_adds_inside_loops():
    """B11's compiled step: the pair gathers are loads of the loops over pairs and the forces' scatter-adds
    their stores; no gather or scatter is a step of its own, none runs outside native code, and no gathered
    array is stored.  Before (main, 2026-11-29): 69 launches, 6 of them NumPy host steps (4 gathers, 2
    scatter-adds), which made the whole step run under a Python driver."""
    call, fn, args, _ = ff.torch_style(jg, "compiled", np.float32,
                                       compile_=lambda f: jg.compile(f, background=False))
    call()
    plan = fusion_plan(_graph(fn))
    loose = [s.op.name for s in plan.steps if not isinstance(s, (Group, LoopBatch)) and s.op.name in ("getitem", "index_put")
             and len(s.ins) > 1 + (s.op.name == "index_put")]
    assert loose == [], str(plan)
    gathers = sum(len(g.gathers) for g in plan.groups)
    scatters = sum(len(g.scatters) for g in plan.groups)
    assert (gathers, scatters) == (4, 2)
    assert not [v for g in plan.groups for e in g.gathers for v in e.outs if v in g.outputs]
    launches = fn.launches(*args)
    assert not [ln for ln in launches if ln.kind == "py"], launches      # one native call runs the step
    assert len(launches) <= 63, len(launches)     # (69 before: 6 host steps; the zeros to add into cleared in the loop)


def test_a_state_gathered_and_updated_by_one_loop_reads_its_old_values():
    """``w.add_(w[idx])``: the loop gathers w at other positions than it writes; a loop that may raise (an index
    out of range) never writes a state in place, so every gathered value is the old one."""
    idx = jg.tensor(np.array([5, 4, 3, 2, 1, 0]))
    w = jg.tensor(np.arange(6.0))
    want = jg.tensor(np.arange(6.0))

    def f(w, idx):
        with jg.no_grad():
            w.add_(w[idx])
        return idx + 1
    cf = _compiled(lambda idx: f(w, idx))
    for _ in range(2):
        cf(idx)
        f(want, idx)
        np.testing.assert_array_equal(w.numpy(), want.numpy())
    assert any(g.gathers for g in fusion_plan(_graph(cf)).groups)


def test_a_scatter_add_of_values_computed_elsewhere_is_a_loop_of_its_own():
    """index_add of a matmul's result (message passing): no loop computes the values, so the scatter-add is a
    loop of its own reading them (natively: no NumPy step), and its transpose a gather loop."""
    rng = np.random.default_rng(5)
    h = jg.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    w = jg.tensor(rng.standard_normal((4, 6)))
    dst = jg.tensor(np.array([0, 2, 2, 1, 0, 1]))

    def step(h):
        loss = jg.zeros((5, 3), dtype=h.dtype).index_add(1, dst, h @ w).tanh().sum()
        loss.backward()
        return loss.detach()
    cs = _compiled(step)
    h1, h2 = (jg.tensor(h.detach().numpy(), requires_grad=True) for _ in range(2))
    np.testing.assert_allclose(cs(h1).numpy(), step(h2).numpy(), rtol=1e-12)
    np.testing.assert_allclose(h1.grad.numpy(), h2.grad.numpy(), rtol=1e-12)
    plan = fusion_plan(_graph(cs))
    assert [len(g.scatters) for g in plan.groups if g.scatters] == [1]
    assert any(g.gathers for g in plan.groups)
    assert not [ln for ln in cs.launches(h1) if ln.kind == "py"]


def _innermost_index_loads(kernel):
    """Index loads (int64 loads: the data here are floats) inside the innermost loops of a kernel's IR."""
    from jitgrad.codegen.kernels import kernel_ir as ki

    def inner(body):
        for s in body:
            if isinstance(s, ki.For):
                if any(isinstance(t, ki.For) for t in s.body):
                    yield from inner(s.body)
                else:
                    yield s
            elif isinstance(s, ki.If):
                yield from inner(s.then + s.orelse)
    n = 0
    for f in inner(kernel.ir.body):
        seen = set()
        for top in ki.statement_values(f.body):
            n += sum(v.op == "load" and v.t == ki.I64 for v in ki.walk_values(top, seen))
    return n


def test_an_index_the_same_along_the_inner_axis_is_read_and_checked_once_per_run():
    """``x[:, i]`` over (B, P, 3) reads i[p] once per run of the 3 coordinates, before it, for the gathers and
    for their scatter-add transposes (B11's pair loops: two index loads and checks per element before); the
    values, gradients (repeated and negative indices) and second derivatives are eager's."""
    from jitgrad.codegen.program.cpu import lay_out
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((2, 5, 3))
    i = jg.tensor(np.array([0, 1, -1, 3, 1, 0]))
    j = jg.tensor(np.array([4, 2, 2, -5, 0, 3]))

    def energy(x):
        d = x[:, i] - x[:, j]
        return ((d * d).sum(-1) + 0.5).sqrt().sin().sum()

    def step(x):
        (gx,) = jg.autograd.grad(energy(x), (x,), create_graph=True)
        return energy(x), gx, (gx * gx).sum()
    want = step(jg.tensor(x0, requires_grad=True))
    cf = _compiled(step)
    got = cf(jg.tensor(x0, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    plan = fusion_plan(_graph(cf))
    indexed = {g.name for g in plan.groups if g.gathers or g.scatters}
    kernels = [st.kernel for st in lay_out(plan).steps if st.kind == "kernel" and st.kernel.label in indexed]
    assert len(kernels) >= 2 and any(k.ir for k in kernels)
    assert [_innermost_index_loads(k) for k in kernels] == [0] * len(kernels)
    x = jg.tensor(x0, requires_grad=True)
    assert jg.autograd.gradcheck(lambda x: cf(x)[2], (x,))
    assert jg.autograd.gradgradcheck(lambda x: cf(x)[0], (x,))
