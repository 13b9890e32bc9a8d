"""Which consecutive parallel loops share one pool round (codegen/program/round_groups.py): proven from the rows
each loop's operands walk, counted on synthetic steps (no build)."""
from types import SimpleNamespace

from jitgrad.codegen.native import workpool
from jitgrad.codegen.place_types import Root
from jitgrad.codegen.program import round_groups as rg
from jitgrad.codegen.program.round_groups import Access


def _ws(offset, nbytes):
    r = Root("ws", nbytes=nbytes)
    r.offset = offset
    return r


def _step(n, *accesses, parallel=True, state_write=False):
    return SimpleNamespace(kind="kernel", rows=(n, list(accesses)), state_write=state_write,
                           kernel=SimpleNamespace(parallel=parallel))


def _joins(steps):
    return rg.joins(steps, lambda k: True)


X, Y, Z = _ws(0, 4096), _ws(4096, 4096), _ws(8192, 4096)
IN = Root("input", index=0)


def test_loops_that_walk_the_same_rows_share_a_round_whatever_their_granularity():
    # 8 rows of 512 bytes written, then read as 128 rows of 32 bytes (the same bytes): one round when the threads
    # divide 8, the gcd of the split lengths
    a = _step(8, Access(IN, 0, 0, 0, False, False), Access(X, 0, 512, 508, True, True))
    b = _step(128, Access(X, 0, 32, 28, False, True), Access(Y, 0, 32, 28, True, True))
    c = _step(16, Access(Y, 0, 256, 252, False, True), Access(Z, 0, 256, 252, True, True))
    assert _joins([a, b, c]) == {0: (True, 8), 1: (False, 8), 2: (False, 8)}
    assert rg.guard_bits((True, 8)) == rg.HEAD | 8 << rg.DIVISOR_SHIFT
    assert rg.guard_bits((False, 8)) == rg.JOIN | 8 << rg.DIVISOR_SHIFT and rg.guard_bits(None) == 0


def test_a_row_read_across_chunks_a_zeroed_output_or_a_reused_slot_ends_the_round():
    a = _step(8, Access(X, 0, 512, 508, True, True))
    # read by an index (any row) of what the loop before wrote
    assert _joins([a, _step(8, Access(X, 0, 0, 0, False, False), Access(Y, 0, 512, 508, True, True))]) == {}
    # rows of another length over the same bytes (a transposed walk)
    assert _joins([a, _step(8, Access(X, 0, 256, 252, False, True), Access(Y, 0, 512, 508, True, True))]) == {}
    # an output zeroed whole before the loop, which the round before reads
    b = _step(8, Access(X, 0, 512, 508, False, True), Access(Y, 0, 512, 508, True, True))
    assert _joins([b, _step(8, Access(Y, 0, 512, 508, True, True, cleared=True))]) == {}
    assert _joins([b, _step(8, Access(Z, 0, 512, 508, True, True, cleared=True))]) == {0: (True, 8), 1: (False, 8)}
    # a workspace slot reused (another root over bytes the first loop reads), written from another start
    reuse = _ws(2048, 4096)
    assert _joins([b, _step(8, Access(reuse, 0, 512, 508, True, True))]) == {}
    # reads of the same buffer share a round, whatever their rows
    assert _joins([_step(8, Access(IN, 0, 0, 0, False, False), Access(X, 0, 512, 508, True, True)),
                   _step(8, Access(IN, 0, 0, 0, False, False), Access(Y, 0, 512, 508, True, True))]) == \
        {0: (True, 8), 1: (False, 8)}


def test_only_parallel_loop_kernels_built_from_ir_join_and_at_most_join_max_a_round():
    a = _step(8, Access(X, 0, 512, 508, True, True))
    reader = _step(8, Access(X, 0, 512, 508, False, True), Access(Y, 0, 512, 508, True, True))
    for odd in (_step(8, Access(Z, 0, 512, 508, True, True), parallel=False),
                _step(8, Access(Z, 0, 512, 508, True, True), state_write=True),
                SimpleNamespace(kind="gemm", rows=None, state_write=False, kernel=None)):
        assert _joins([a, odd, reader]) == {}
    assert rg.joins([a, reader], lambda k: False) == {}         # a kernel Numba builds knows no pending round
    many = [_step(8, Access(_ws(8192 * (k + 1), 4096), 0, 512, 508, True, True)) for k in range(workpool.JOIN_MAX + 2)]
    got = _joins(many)
    assert [k for k, (head, _) in sorted(got.items()) if head] == [0, workpool.JOIN_MAX]
    assert len(got) == workpool.JOIN_MAX + 2


def test_launch_records_join_where_a_member_before_took_the_pool_and_the_threads_divide():
    joined = {1: (True, 8), 2: (False, 8), 3: (False, 8)}
    assert rg.launch_joins(joined, [True, True, True, True], 2, True) == [False, False, True, True]
    assert rg.launch_joins(joined, [True, False, True, True], 2, True) == [False, False, False, True]
    assert rg.launch_joins(joined, [True, True, False, True], 2, True) == [False] * 4     # the round ran at step 2
    assert rg.launch_joins(joined, [True, True, True, True], 3, True) == [False] * 4     # 3 does not divide 8
    assert rg.launch_joins(joined, [True, True, True, True], 2, False) == [False] * 4    # workqueue: one task a queue


def test_a_gemms_blocks_of_rows_join_the_loop_that_wrote_their_rows_but_not_one_that_wrote_b():
    """``gemm_rows``: 8 blocks of 32 rows of a 256 x 64 product, k = 16: A's rows are rows of the split axis (not
    transposed), B is read whole, C's rows are written.  After a loop writing A as 256 rows of 64 bytes: one
    round (the loop's 256 positions, 8 blocks: threads dividing 8).  After a loop writing B, or before a transposed A
    written by the loop: not."""
    from jitgrad.codegen.place_types import Place
    from jitgrad.ir import dtypes as dt
    f32 = dt.float32

    def place(root, shape):
        return Place(root, 0, shape, (shape[1], 1), f32)
    pa, pb, pc = place(X, (256, 16)), place(Y, (16, 64)), place(Z, (256, 64))
    n_blocks, acc = rg.gemm_rows(pa, ("N", 16), pb, pc, 8, 32, 64, 16)
    assert n_blocks == 8 and [a.local for a in acc] == [True, False, True]
    assert acc[0].row == 32 * 16 * 4 and acc[2].row == 32 * 64 * 4 and acc[2].written
    writes_a = _step(256, Access(IN, 0, 0, 0, False, False), Access(X, 0, 64, 60, True, True))
    gemm = SimpleNamespace(kind="bgemm", rows=(n_blocks, acc), state_write=False, parallel=True, kernel=None)
    assert _joins([writes_a, gemm]) == {0: (True, 8), 1: (False, 8)}
    writes_b = _step(16, Access(Y, 0, 256, 252, True, True))
    assert _joins([writes_b, gemm]) == {}
    _, transposed = rg.gemm_rows(pa, ("T", 256), pb, pc, 8, 32, 64, 16)
    assert _joins([writes_a, SimpleNamespace(kind="bgemm", rows=(8, transposed), state_write=False, parallel=True,
                                             kernel=None)]) == {}


def test_one_loop_that_claims_index_error_records_a_round():
    """A loop whose chunks claim index-error records (``kernel_ir.Claim``) opens its claims on the calling thread
    before its chunks: it shares a round with loops that record nothing, never with an earlier member that claims
    too (whose chunks could still be recording into the same slots): that one starts a new round."""
    def rows(src, dst):
        return Access(src, 0, 512, 508, False, True), Access(dst, 0, 512, 508, True, True)
    a, b, c, d = _step(8, *rows(IN, X)), _step(8, *rows(X, Y)), _step(8, *rows(Y, Z)), _step(8, *rows(Z, X))
    b.kernel.claims = d.kernel.claims = True
    claims = lambda k: getattr(k, "claims", False)      # noqa: E731
    assert rg.joins([a, b, c], lambda k: True, claims) == {0: (True, 8), 1: (False, 8), 2: (False, 8)}
    assert rg.joins([a, b, c, d], lambda k: True) == {k: (k == 0, 8) for k in range(4)}
    assert rg.joins([a, b, c, d], lambda k: True, claims) == {0: (True, 8), 1: (False, 8), 2: (False, 8)}
    assert rg.joins([b, c, d, a], lambda k: True, claims) == {0: (True, 8), 1: (False, 8), 2: (True, 8), 3: (False, 8)}


def test_a_loop_that_adds_partial_rows_after_its_chunks_joins_a_round_as_its_last_launch():
    """``closes_of``: a loop with statements after its chunks (a sum over rows: partial rows added in chunk order,
    ``chunk_checks.round_share`` "closes") joins the group before it and runs the round itself; the next loop starts
    a new group, and such a loop heads none."""
    a = _step(8, Access(IN, 0, 0, 0, False, False), Access(X, 0, 512, 508, True, True))
    closing = _step(32, Access(X, 0, 128, 124, False, True), Access(Y, 0, 64, 60, True, True))
    c = _step(8, Access(X, 0, 512, 508, False, True), Access(Z, 0, 512, 508, True, True))
    closes = lambda k: k is closing.kernel
    assert rg.joins([a, closing, c], lambda k: True, closes_of=closes) == {0: (True, 8), 1: (False, 8)}
    # first of a run, or after a conflict, it shares no round: the loop after it heads the next group
    assert rg.joins([closing, a, c], lambda k: True, closes_of=closes) == {1: (True, 8), 2: (False, 8)}
    # (its chunks and an earlier member's: the same conflicts as any member's)
    clash = _step(32, Access(X, 0, 0, 0, True, False))
    assert rg.joins([a, clash], lambda k: True, closes_of=lambda k: k is clash.kernel) == {}


def test_column_rows_regroup_the_rows_of_a_fixed_chunk_and_add_the_partial_rows(monkeypatch):
    """``column_rows``: a sum over 256 rows in 32 fixed chunks walks 8 rows a position (so it shares rows with a
    loop over the 256 rows, or 8 molecules of 32), writes row ``c`` of its partial buffer, and its sum (written
    after the round) counts as written anywhere; rows that 32 does not divide share no round."""
    from jitgrad.ir.plan import Group
    size = 4
    got = {"rows": (256, [Access(X, 0, 64 * size, 63 * size, False, True), Access(Z, 0, 0, 0, True, False, True)])}
    partial = SimpleNamespace(root=Y, offset=0, shape=(32 * 64,), dtype=SimpleNamespace(np=SimpleNamespace(itemsize=4)))
    # (the rows of each operand as access_rows gives them for a loop with sums over its split axis)
    monkeypatch.setattr(rg, "access_rows", lambda g, op, own_rows, columns=False: got["rows"] if columns else None)
    n, acc = rg.column_rows(Group.__new__(Group), None, [partial], 32)
    assert n == 32
    assert acc[0] == Access(X, 0, 8 * 64 * size, 8 * 64 * size - size, False, True)
    assert acc[1] == Access(Z, 0, 0, 0, True, False, True)
    assert acc[2] == Access(Y, 0, 64 * size, 64 * size - 1, True, True)
    loop = _step(8, Access(IN, 0, 0, 0, False, False), Access(X, 0, 32 * 64 * size, 32 * 64 * size - size, True, True))
    assert rg.conflict(loop.rows[1], 8, acc, 32) is False
    got["rows"] = (250, got["rows"][1])
    assert rg.column_rows(Group.__new__(Group), None, [partial], 32) is None
