"""Big GEMMs as blocks of rows, each one single-threaded OpenBLAS call (``ir/ops/blas.py``, issue 32 items 2 and 4):
blocks that start at multiples of OpenBLAS's row unit give the bits of one single-threaded call of the whole
product, so a GEMM's bits do not depend on how many threads run its blocks, nor on the pacer that keeps them on
the calling thread while another process holds a core.  Counted and compared, never timed: the eager split's
clock is scripted."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import eager_threads, settings
from jitgrad.ir.ops import blas, blas_library

from gemm_reference import one_call as _one_thread_whole  # noqa: E402 - the reference bits

# (rows, k, n): rows a multiple of float32's unit (12) and of float64's (2) or not, K past OpenBLAS's K block
SHAPES = [(256, 784, 512), (257, 300, 100), (100, 500, 300), (784, 256, 512), (73, 1000, 64), (999, 64, 70),
          (200, 300, 1500)]


class _Clock:
    """The eager split's clock: a call reads it three times (start, its own block done, every block done); ``late``
    makes the last read late, as when a helper thread's core is taken by another process."""
    now, reads, late = 0.0, 0, 0.0

    @classmethod
    def perf_counter(cls):
        cls.reads += 1
        cls.now += 1e-3 + (cls.late if cls.reads % 3 == 0 else 0.0)
        return cls.now


@pytest.fixture
def two_threads(monkeypatch):
    if settings.default_threads() < 2:
        pytest.skip("needs two cores")
    before = settings.STATE.num_threads
    jg.set_num_threads(2)
    monkeypatch.setattr(eager_threads, "time", _Clock)
    monkeypatch.setattr(eager_threads, "note_split", lambda own, whole, allowed=None: None)     # (the pool's GEMMs' own clock)
    from jitgrad.jit import pooled_gemm
    monkeypatch.setattr(pooled_gemm, "WAKE_MACS", 0)    # (a worker found asleep: its own test, test_pooled_gemm)
    monkeypatch.setattr(eager_threads._PACER, "left", 0)
    monkeypatch.setattr(eager_threads._PACER, "hold", eager_threads._Pacer.HOLD)
    monkeypatch.setattr(blas, "BLAS_PACER", False)
    # these products are a few million multiply-adds: split at the smallest part the policy allows, whatever the
    # default part (EAGER_SPLIT_MACS); cuts are cached per shape, so made afresh
    monkeypatch.setattr(blas, "EAGER_SPLIT_MACS", blas.BLAS_THREADED_MACS)
    monkeypatch.setattr(blas, "_CUTS", {})
    yield
    settings.STATE.num_threads = before
    blas.BlasPacer.use(blas.all_threads())


def test_a_product_under_two_split_parts_runs_whole_on_the_calling_thread(two_threads, monkeypatch):
    """An eager GEMM over OpenBLAS's threaded size but under two ``EAGER_SPLIT_MACS`` parts (a hand-off wakes a
    sleeping thread: 0.2-0.5 ms on a VM's idle vCPU, more than B3's 4M-multiply-add products take) runs as one
    single-threaded call here; twice the part splits in two.  Counted; the bits are one thread's either way."""
    monkeypatch.setattr(blas, "EAGER_SPLIT_MACS", 1 << 22)
    a = np.ones((256, 64), np.float32)
    b = np.ones((64, 256), np.float32)      # 2^22 multiply-adds: one part
    if blas.row_blocks(256, np.float32, 1) is None:
        pytest.skip("not split on this BLAS")
    s0 = dict(blas.STATS)
    assert (blas.matmul2d(a, b) == 64).all()
    assert blas.STATS["gemm_whole_one_thread"] - s0["gemm_whole_one_thread"] == 1
    assert blas.STATS["gemm_split_calls"] == s0["gemm_split_calls"]
    b2 = np.ones((64, 512), np.float32)     # 2^23: two parts
    assert (blas.matmul2d(a, b2) == 64).all()
    assert blas.STATS["gemm_split_calls"] - s0["gemm_split_calls"] == 1


def test_the_units_found_reproduce_the_probe_products():
    """A unit per dtype (this OpenBLAS has one for rows in both float dtypes); blocks of a unit's multiples give the
    probe products' bits (what the derivation checked), and a unit is derived once per process."""
    for dt in (np.float32, np.float64):
        u = blas.block_unit(dt)
        if u is None:
            pytest.skip(f"this BLAS has no row unit for {np.dtype(dt).name}")
        assert u in blas.UNIT_CANDIDATES and blas.block_unit(dt) is u
        blocks = blas.row_blocks(100, dt, 3)
        assert blocks[0][0] == 0 and blocks[-1][1] == 100
        assert all(r0 % u == 0 and r1 - r0 >= blas.MIN_BLOCK_ROWS for r0, r1 in blocks[:-1])
        assert all(p[1] == q[0] for p, q in zip(blocks, blocks[1:]))
    assert blas.row_blocks(40, np.float32, 2) is None        # fewer rows than two blocks: OpenBLAS threads it


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_eager_gemm_bits_are_one_threads_whatever_runs_the_blocks(two_threads, monkeypatch, m, k, n, dtype):
    """The same bits from blocks on two threads, from one call on the calling thread while the pacer holds, and at
    ``set_num_threads(1)``: those of one single-threaded call, for either layout of A.  Counted: the blocks run,
    the calls held; OpenBLAS is on one thread inside the blocks (the two threads are all the threads)."""
    if blas.row_blocks(m, dtype, 1) is None:
        pytest.skip("not split on this BLAS")
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    split_sizes = []        # tasks per split call: the caller runs one, a worker each of the others
    run_split = eager_threads.run_split
    monkeypatch.setattr(eager_threads, "run_split", lambda tasks: (split_sizes.append(len(tasks)), run_split(tasks)))
    for a_ in (a, np.asfortranarray(a)):
        want = _one_thread_whole(a_, b).tobytes()
        s0 = dict(blas.STATS)
        split = blas.matmul2d(a_, b)             # quiet clock: on two threads
        assert blas.STATS["gemm_split_calls"] - s0["gemm_split_calls"] == 1
        assert blas.STATS["gemm_blocks"] - s0["gemm_blocks"] == len(blas.row_blocks(m, dtype, 2)) == 2
        assert blas_library.thread_control()[0]() == 1
        assert split_sizes[-1] == 2 <= settings.num_threads()      # at once: the caller's block and one worker's
        _Clock.late = 1.0                        # a helper finishes late: the next calls stay on this thread
        blas.matmul2d(a_, b)
        _Clock.late = 0.0
        s1 = dict(blas.STATS)
        held = blas.matmul2d(a_, b)
        assert blas.STATS["gemm_whole_one_thread"] - s1["gemm_whole_one_thread"] == 1
        assert blas.STATS["gemm_split_calls"] == s1["gemm_split_calls"]
        eager_threads._PACER.left = 0
        jg.set_num_threads(1)
        single = blas.matmul2d(a_, b)
        jg.set_num_threads(2)
        assert split.tobytes() == held.tobytes() == single.tobytes() == want
        np.testing.assert_allclose(split, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_eager_matmul_of_tensors_splits_and_keeps_its_bits(two_threads):
    """Through ``Tensor.__matmul__`` (a batch of sequences folded into rows, and a transposed view as A), forward
    and backward: every big product's bits are those of one single-threaded call."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 75, 96)).astype(np.float32)     # 300 rows: not a multiple of 12 per block
    w = rng.standard_normal((96, 700)).astype(np.float32)
    from jitgrad.jit import pooled_gemm

    def splits():       # (on the eager threads, or on the pool)
        return blas.STATS["gemm_split_calls"] + pooled_gemm.STATS["pooled_calls"]
    s0 = splits()
    xt, wt = jg.tensor(x, requires_grad=True), jg.tensor(w, requires_grad=True)
    y = xt @ wt
    y.backward(jg.tensor(np.ones(y.shape, np.float32)))
    assert splits() - s0 == 3     # y, and both gradients
    assert y.detach().numpy().tobytes() == _one_thread_whole(x.reshape(300, 96), w).reshape(4, 75, 700).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", SHAPES + [(64, 500, 700)])
def test_compiled_split_gemm_bits_are_one_threads_on_the_pool_or_held(two_threads, request, m, k, n, dtype):
    """A compiled GEMM split on the pool (blocks starting at multiples of OpenBLAS's unit, the last one as high as
    the rows left, all in one launch): the same bits whether the blocks run on the pool's workers or are held on
    the calling thread (the pool pacer's hold), at ``set_num_threads(1)`` (one call, not split), and eagerly: one
    single-threaded call's.  Counted: one GEMM launch, one pool round, the threads (the pool's, never more;
    OpenBLAS on one inside the blocks)."""
    from jitgrad.codegen.native import workpool
    from jitgrad.codegen.program import layout
    if not layout.POOL_GEMMS or workpool.default_threads() < 2:
        pytest.skip("no split GEMMs here")
    prev = workpool.set_min_work(1 << 12, 1 << 8)
    request.addfinalizer(lambda: workpool.set_min_work(*prev))
    rng = np.random.default_rng(m * k + n + 1)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ta, tb = jg.tensor(a), jg.tensor(b)
    f = jg.compile(lambda x, y: x @ y, backend="numba", background=False)
    pooled = f(ta, tb).numpy()
    launches = [la for la in f.launches(ta, tb) if la.kind in ("gemm", "bgemm")]
    if not launches[0].label.endswith("on the pool)"):
        pytest.skip("not split on this BLAS (no unit in either direction, or too few rows)")
    (blocks,) = launches            # the rows left run inside the launch: no call of their own
    assert blocks.parallel and blocks.threads == workpool.threads()
    assert blas_library.thread_control()[0]() == 1
    r0 = workpool.rounds()
    assert f(ta, tb).numpy().tobytes() == pooled.tobytes() and workpool.rounds() == r0 + 1     # on the pool
    r0 = workpool.rounds()
    before = workpool.pace()
    workpool.set_pace(workpool.PACE_HELD)
    try:
        held = f(ta, tb).numpy()
    finally:
        workpool.set_pace(before)
    assert workpool.rounds() == r0                  # held: nothing launched on the pool
    jg.set_num_threads(1)
    g = jg.compile(lambda x, y: x @ y, backend="numba", background=False)
    single = g(ta, tb).numpy()
    assert [la.label for la in g.launches(ta, tb) if la.kind in ("gemm", "bgemm")] == ["matmul (BLAS)"]
    jg.set_num_threads(2)
    want = _one_thread_whole(a, b).tobytes()
    assert pooled.tobytes() == held.tobytes() == single.tobytes() == want
    if blas.row_blocks(m, dtype, 1) is not None:    # eager splits by rows only
        assert (ta @ tb).numpy().tobytes() == want


def test_eager_gemm_too_small_for_two_blocks_runs_whole_on_one_thread(two_threads):
    """A GEMM just over OpenBLAS's threading threshold, with rows enough for two blocks but work for one thread:
    one single-threaded call (the same bits as blocks would give), no hand-off to a thread."""
    if blas.row_blocks(96, np.float32, 1) is None:
        pytest.skip("not split on this BLAS")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((96, 64)).astype(np.float32)       # 96 * 64 * 64: over 2^18, under 2 x 2^18
    b = rng.standard_normal((64, 64)).astype(np.float32)
    assert blas.BLAS_THREADED_MACS < 96 * 64 * 64 < 2 * blas.BLAS_THREADED_MACS
    s0 = dict(blas.STATS)
    got = blas.matmul2d(a, b)
    assert blas.STATS["gemm_whole_one_thread"] - s0["gemm_whole_one_thread"] == 1
    assert blas.STATS["gemm_split_calls"] == s0["gemm_split_calls"]
    assert got.tobytes() == _one_thread_whole(a, b).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [(257, 300, 100), (100, 500, 300), (73, 1000, 64)])
def test_compiled_split_gemm_runs_its_rows_left_inside_the_one_launch(two_threads, request, m, k, n, dtype):
    """Rows (or columns) not a multiple of the block: the last block is as high as the rows left, an entry of the one pooled
    launch (no GEMM call of its own after it), and the pool's threshold counts the whole product, the last
    block's rows too (a threshold one multiply-add over it keeps the blocks on the calling thread, one at it
    takes the pool).  The bits, on the pool, held, and through the Python driver (the profiler's run: the
    batched GEMM's native loop), are one single-threaded call's."""
    from jitgrad.codegen.native import workpool
    from jitgrad.codegen.program import layout
    from jitgrad.jit.graph_code import compiled_graph
    if not layout.POOL_GEMMS or workpool.default_threads() < 2 or blas.block_unit(dtype) is None:
        pytest.skip("no split GEMMs here")
    prev = workpool.set_min_work(1 << 12, 1 << 8)
    request.addfinalizer(lambda: workpool.set_min_work(*prev))
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ta, tb = jg.tensor(a), jg.tensor(b)
    f = jg.compile(lambda x, y: x @ y, backend="numba", background=False)
    pooled = f(ta, tb).numpy()
    (entries,) = f._cache.values()
    cg = compiled_graph(entries[0].graph, entries[0].gf.writes)
    (st,) = [s for s in cg.program.steps if s.kind in ("gemm", "bgemm")]
    by_rows = st.label == "matmul (BLAS, rows on the pool)"         # (else columns, where n > m allows)
    assert st.split and st.kind == "bgemm" and (by_rows or st.label == "matmul (BLAS, columns on the pool)")
    side = m if by_rows else n
    nb, h = cg.program.split_rows(side, m * k * n, dtype, by_rows)
    last = side - (nb - 1) * h
    # the rows left: a lower last block (or, under OpenBLAS's small-matrix path, joined to the one before: higher;
    # equal where the unit is 1 and the halves even)
    assert nb >= 2 and h % blas.block_unit(dtype, by_rows) == 0 and 0 < last < 2 * h
    assert last * (m * k * n // side) > blas.small_path_macs() and h * (m * k * n // side) > blas.small_path_macs()
    assert st.gate == (m * k * n, nb)
    want = _one_thread_whole(a, b).tobytes()
    assert pooled.tobytes() == want
    for threshold, rounds in ((m * k * n + 1, 0), (m * k * n, 1)):
        workpool.set_min_work(threshold)
        (la,) = [x for x in f.launches(ta, tb) if x.kind in ("gemm", "bgemm")]
        assert la.parallel == bool(rounds)
        r0 = workpool.rounds()
        assert f(ta, tb).numpy().tobytes() == want
        assert workpool.rounds() - r0 == rounds
    (out,) = cg._python_run(a, b)
    assert np.asarray(out).tobytes() == want


@pytest.mark.parametrize("m, k, n", [(257, 300, 100), (999, 64, 70), (1024, 128, 384), (96, 64, 64)])
def test_blocks_stay_over_openblas_small_matrix_path(monkeypatch, m, k, n):
    """On a core with small-matrix kernels (OpenBLAS sums products of at most 100^3 multiply-adds in another order
    there: SkylakeX), no block is cut at or under that size: a short last block joins the one before, and a product
    whose rows cannot give two such blocks is not split.  Counted on the blocks, with the path's size scripted (so
    the rule is checked on any core); the bits on this core are the tests above."""
    monkeypatch.setattr(blas, "_SMALL_PATH", [blas.SMALL_PATH_MACS])
    for dt in (np.float32, np.float64):
        if blas.block_unit(dt) is None:
            continue
        for parts in (1, 2, 3):
            blocks = blas.row_blocks(m, dt, parts, n * k)
            if blocks is None:
                assert m < 2 * blas.least_height(blas.block_unit(dt), n * k)
                continue
            assert blocks[0][0] == 0 and blocks[-1][1] == m and all(p[1] == q[0] for p, q in zip(blocks, blocks[1:]))
            assert all((e - s) * n * k > blas.SMALL_PATH_MACS for s, e in blocks)
            assert all(s % blas.block_unit(dt) == 0 for s, _ in blocks)
    assert blas.cut(100, 40, 30_000) == [(0, 40), (40, 100)]       # the last 20 rows: 600,000 multiply-adds
    assert blas.cut(100, 40, None) == [(0, 40), (40, 80), (80, 100)]
    monkeypatch.setattr(blas, "_SMALL_PATH", [0])                  # a core without the path: no rule
    assert blas.cut(100, 40, 30_000) == [(0, 40), (40, 80), (80, 100)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_exact_says_what_the_blocks_give(dtype):
    """``blas.blocks_exact`` (a split GEMM's cut tried once per shape) answers as the blocks' own products do:
    one block is the whole call, and for cuts of rows or columns with tails thin and wide (SkylakeX's kernels
    move some of them) the answer is whether their bits are the whole single-threaded call's."""
    m = k = n = 300
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    assert blas.blocks_exact(dtype, True, m, k, n, [(0, m)]) and blas.blocks_exact(dtype, False, m, k, n, [(0, n)])
    blas.BlasPacer.use(1)
    try:
        assert blas.blocks_exact(dtype, True, m, k, n, [(0, m)]) and blas.blocks_exact(dtype, False, m, k, n, [(0, n)])
        for by_rows in (True, False):
            for cut in ([(0, 48), (48, 300)], [(0, 192), (192, 300)], [(0, 144), (144, 288), (288, 300)]):
                full, got = np.empty((m, n), dtype), np.empty((m, n), dtype)
                blas._gemm_rows(a, b"N", k, b, b"N", n, full, 0, m)
                for r0, r1 in cut:
                    if by_rows:
                        blas._gemm_rows(a, b"N", k, b, b"N", n, got, r0, r1)
                    else:
                        blas._gemm_rows(a, b"N", k, b, b"N", n, got, 0, m, r0, r1)
                same = got.tobytes() == full.tobytes()
                assert blas.blocks_exact(dtype, by_rows, m, k, n, cut) == same, (by_rows, cut)
    finally:
        blas.BlasPacer.use(blas.all_threads())


def test_a_shapes_cut_is_made_once(two_threads, monkeypatch):
    """An eager GEMM's blocks are made once per shape, dtype and thread count (``blas._CUTS``): a second product of
    the shape finds them without ``row_blocks`` (~15 Python calls a product), and cuts as the first did."""
    m, k, n = 256, 784, 512
    if blas.row_blocks(m, np.float32, 1) is None:
        pytest.skip("not split on this BLAS")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    blas.matmul2d(a, b)
    asked = []
    row_blocks = blas.row_blocks
    monkeypatch.setattr(blas, "row_blocks", lambda *args: (asked.append(args), row_blocks(*args))[1])
    s0 = dict(blas.STATS)
    c = blas.matmul2d(a, b)
    assert asked == []
    assert blas.STATS["gemm_split_calls"] - s0["gemm_split_calls"] == 1
    assert blas.STATS["gemm_blocks"] - s0["gemm_blocks"] == len(row_blocks(m, np.float32, 2, n * k)) == 2
    assert c.tobytes() == _one_thread_whole(a, b).tobytes()
