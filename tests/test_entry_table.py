"""The compiled graph's C entry as a loop over the program's step table (``codegen/program/entry.py``): its text
grows with the step kinds a program has, not with its steps; and it runs the very steps the Python driver runs,
in the same order, with the same guards (same bits)."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.program import entry
from jitgrad.jit.graph_code import compiled_graph

RNG = np.random.default_rng(0)
pytestmark = pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")


def _graph(f, args):
    """``f``'s compiled graph for ``args`` (built, its C entry ready)."""
    e = f._entry_for(tuple(args), {})
    gf = e.gf
    cg = compiled_graph(e.graph, gf.writes, gf.parallel, gf.disk_cache, gf.background)
    assert cg.wait(60) and cg.nopython and cg.run is not cg._python_run
    return cg


def _chain(n):
    """``n`` matrix products in a row, each followed by tanh: 2n steps of two kinds."""
    def f(x, *ws):
        for w in ws:
            x = (x @ w).tanh()
        return x.sum()
    return f


def _chain_args(n):
    return [jg.tensor(RNG.standard_normal((4, 6)).astype(np.float32))] + [
        jg.tensor(RNG.standard_normal((6, 6)).astype(np.float32) * 0.3) for _ in range(n)]


def test_entry_text_does_not_grow_with_steps():
    """A chain of 2 products and one of 12: 6x the steps, the same entry text (its step table grows)."""
    small, big = (_graph(jg.compile(_chain(n), backend="numba", background=False), _chain_args(n)) for n in (2, 12))
    assert len(big.program.steps) >= len(small.program.steps) + 20
    assert entry.kinds_of(small.program) == entry.kinds_of(big.program) == ("kernel", "gemm")
    texts = [entry.entry_ir(g.program, len(g.graph.inputs), len(g.checks), "e") for g in (small, big)]
    assert texts[0] == texts[1]
    assert len(big.S) - len(small.S) >= 4 * 20
    assert entry.code_listing(small.program) == entry.code_listing(big.program)


def _bits(outs):
    return [np.asarray(o).tobytes() for o in outs]


def _same_as_python_driver(cg, arrays):
    """The C entry and the Python driver (the same kernels, called one by one from Python) on copies of
    ``arrays``: the same outputs and the same in-place updates, bit for bit."""
    a1 = [np.array(a, copy=True) for a in arrays]
    a2 = [np.array(a, copy=True) for a in arrays]
    out1 = cg.run(*a1)
    out2 = cg._python_run(*a2)
    assert _bits(out1) == _bits(out2)
    assert _bits(a1) == _bits(a2)
    return out1, a1


def test_entry_runs_what_the_python_driver_runs_gemm_batched_gather_and_update():
    """Matrix products, a batched product, a bounds-checked gather, an in-place state update after it (guarded
    by the index-error word), a row kernel: the entry's bits equal the Python driver's; an index out of range
    raises from both and leaves the state untouched."""
    def f(x, w, q, i):
        h = (x @ w).tanh()
        att = (q @ q.transpose(-2, -1)).softmax(-1)
        y = h[i].sum() + att.sum()
        w.mul_(0.5)
        return y
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    q = RNG.standard_normal((3, 4, 6, 8)).astype(np.float32)
    i = np.array([0, 4, 2], np.int64)
    args = [jg.tensor(a.copy()) for a in (x, w, q, i)]
    fc = jg.compile(f, backend="numba", background=False)
    want = f(*[jg.tensor(a.copy()) for a in (x, w, q, i)]).numpy()
    got = fc(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    cg = _graph(fc, [jg.tensor(a.copy()) for a in (x, w, q, i)])
    kinds = entry.kinds_of(cg.program)
    assert "gemm" in kinds and ("bgemm" in kinds or "pbgemm" in kinds or "gbgemm" in kinds)
    assert cg.program.index_steps and any(st.state_write for st in cg.program.steps + cg.program.writes)
    arrays = [a.copy() for a in (x, w, q, i)]
    assert len(cg.graph.inputs) == 4
    _same_as_python_driver(cg, arrays)
    bad = [x.copy(), w.copy(), q.copy(), np.array([0, 5, 2], np.int64)]
    for run in (cg.run, cg._python_run):
        with pytest.raises(IndexError):
            run(*bad)
        assert bad[1].tobytes() == w.tobytes()


def test_entry_runs_what_the_python_driver_runs_with_anomaly_checks():
    """Anomaly mode's checks (the err array patched into their slots) and the write-backs they guard: the
    entry's bits equal the Python driver's, with finite values and with a NaN (no write-back then)."""
    def f(x, w):
        y = (x @ w).exp().sum()
        w.add_(1.0)
        return y
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    with jg.autograd.detect_anomaly(check_forward=True):
        fc = jg.compile(f, backend="numba", background=False)
        fc(jg.tensor(x.copy()), jg.tensor(w.copy()))
        cg = _graph(fc, [jg.tensor(x.copy()), jg.tensor(w.copy())])
    assert cg.checks and cg.program.err_slots
    _same_as_python_driver(cg, [x, w])
    xn = x.copy()
    xn[0, 0] = np.nan
    outs, after = _same_as_python_driver(cg, [xn, w])
    assert after[1].tobytes() == w.tobytes()      # a failed check: the state is left as it was
    assert int(outs[-1][0]) != len(cg.checks)


def test_step_table_lists_each_step_once_in_order():
    """The table's records are the program's steps then its write-backs, each with its block and F index."""
    g = _graph(jg.compile(_chain(3), backend="numba", background=False), _chain_args(3))
    p, S = g.program, g.S
    n_patches, n_errs, n_steps = (int(v) for v in S[:3])
    assert n_steps == len(p.steps) + len(p.writes) and n_patches == len(p.dynamic)
    recs = S[entry.HEADER + 2 * n_patches + n_errs:].reshape(-1, 4)
    assert recs[:, 1].tolist() == list(range(n_steps))
    assert recs[:, 2].tolist() == [st.block for st in p.steps + p.writes]
    assert [entry.KINDS[k] for k in recs[:, 0]] == [entry._kind(st) for st in p.steps] + ["kernel"] * len(p.writes)


def test_a_gated_batch_and_a_split_gemm_share_one_branch(request):
    """A gated batch of small products and a split GEMM: one branch of the loop, which bounds the products' size
    for the batch only (the split GEMM's whole product is far over OpenBLAS's threaded size and still takes the
    pool).  The pool rounds a call makes are the parallel launches ``f.launches`` lists, at a low threshold and
    at a high one, and the bits are the Python driver's either way."""
    from jitgrad.codegen.native import workpool
    from jitgrad.codegen.program import layout
    from jitgrad.ir.ops.blas import BLAS_THREADED_MACS
    if not layout.POOL_GEMMS or workpool.default_threads() < 2:
        pytest.skip("no pooled GEMMs here")
    prev = workpool.set_min_work(1 << 12, 1 << 8)
    request.addfinalizer(lambda: workpool.set_min_work(*prev))

    def f(q, k, a, b):
        return (q @ k.transpose(-2, -1)).tanh().sum() + (a @ b).tanh().sum()
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in ((3, 5, 16, 8), (3, 5, 16, 8), (257, 300),
                                                                    (300, 100))]
    ts = [jg.tensor(a) for a in arrays]
    fc = jg.compile(f, backend="numba", background=False)
    fc(*ts)
    cg = _graph(fc, ts)
    assert {"gbgemm", "sbgemm"} <= set(entry.kinds_of(cg.program))
    assert ("gated", ("gbgemm", "sbgemm")) in entry._branches(entry.kinds_of(cg.program))
    split = [st for st in cg.program.steps if st.split]
    assert split and split[0].gate[0] > BLAS_THREADED_MACS
    for threshold in (1 << 12, 1 << 60):
        workpool.set_min_work(threshold)
        pooled = sum(x.parallel for x in fc.launches(*ts))
        assert (pooled >= 2) == (threshold == 1 << 12)
        r0 = workpool.rounds()
        cg.run(*[a.copy() for a in arrays])
        assert workpool.rounds() - r0 == pooled
        _same_as_python_driver(cg, arrays)
