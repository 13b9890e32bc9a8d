"""Which consecutive parallel loops of a compiled step share one pool round (issue 32: fewer hand-offs a step).

A parallel loop kernel splits the outermost axis of its iteration space into one chunk per thread, the same
``[n * t / threads, n * (t + 1) / threads)`` for every kernel of ``n`` positions (``ir_loops._dispatch``).  So when
two consecutive loops split an axis of the same length ``n``, and every buffer one of them writes and the other
touches is walked by both as the same rows (position ``i`` of either loop touches only row ``i``: the same start,
the same row length in bytes, nothing past the row), chunk ``t`` of the second reads and writes only what chunk
``t`` of the first (and the steps before both) left there.  Then worker ``t`` can run its chunk of the first and
then of the second with no barrier between: the second launch joins the first's round (``pool_abi.joining``) and
the step wakes the pool once for both.  Each element is computed by the same instructions in the same order either
way, so the bits are those of separate rounds (and of one thread).

``access_rows`` records, when a loop step is emitted, each operand's rows (``Step.rows``; ``gemm_rows``, a GEMM's
blocks of rows on the pool: ``batched_gemm.py``); ``joins`` marks the steps
that join the round of the step before (the entry's ``JOIN`` guard bit, ``entry._records``).  Proven from the
places' strides and workspace offsets, never assumed: a gathered operand (read by an index: any row), a negative or
symbolic stride, a sum over the split axis (partial sums added after the round), an in-place state update or a
kernel Numba builds (it knows nothing of pending rounds) keeps a step out of any group.  At most
``workpool.JOIN_MAX`` launches share a round (a worker's queue holds ``spin_pool.MAX_TASKS`` tasks a round).
"""
from __future__ import annotations

import math
import os
from typing import NamedTuple

from ...ir.plan import RowGroup
from ..kernels import chunk_checks, ir_loops, pool_abi
from ..kernels.llvm_text import I1, I64
from ..native.workpool import JOIN_MAX

JOIN_ROUNDS = os.environ.get("JITGRAD_JOIN_ROUNDS", "1") != "0"     # 0: every pooled launch wakes its own round


class Access(NamedTuple):
    """One operand of a loop step: its buffer (``root``), the byte where its row 0 starts, its row's bytes (the
    operand's stride along the split axis), the bytes one position reaches past its row's start, whether the
    step writes it, and whether position ``i`` stays in row ``i`` (``local``; else it may touch any byte of the
    root)."""
    root: object
    start: int
    row: int
    reach: int
    written: bool
    local: bool
    cleared: bool = False       # zeroed whole before the loop (a sum's or a scatter's output: ``loops.gen_group``)


def access_rows(g, op, own_rows: bool, columns: bool = False):
    """``(n, accesses)`` of group ``g``'s loop over its placed operands ``op`` (``places.Places.group``): the
    length of the axis the pool splits and each operand's ``Access``; None when the step can share no round.
    ``columns``: sums over the split axis are allowed (``column_rows`` regroups its rows)."""
    shape = op.shape
    if not shape or type(shape[0]) is not int or shape[0] < 2 or (0 in tuple(op.red_axes or ()) and not columns):
        return None
    if isinstance(g, RowGroup) and g.columns and not columns:
        return None         # column sums: fixed chunks of rows, partial rows added after the loop
    n_in = len(op.in_places)
    scattered = len(op.out_places) - len(g.scatters)
    out = []
    for j, (p, strides) in enumerate(zip(op.in_places + op.out_places, op.in_strides + op.out_strides)):
        written = j >= n_in
        size = p.dtype.np.itemsize
        ints = all(type(x) is int for x in (p.offset, *strides, *shape))
        local = ints and all(s >= 0 for s in strides) and strides[0] > 0
        if (not written and g.gathers) or (written and j - n_in >= scattered and not own_rows):
            local = False   # read by an index (any row), or a scatter not proven to stay in its slab
        reach = 0
        if local:
            reach = sum(s * (d - 1) for s, d in zip(strides[1:], shape[1:]))
            if written and j - n_in >= scattered:
                reach = strides[0] - 1          # a scatter that stays in its slab (loop_steps.scatters_own_rows)
            local = reach < strides[0]
        start = p.offset * size if type(p.offset) is int else 0
        # the kernel may zero a sum's or a scatter's output whole before its loop, on the calling thread
        cleared = written and (g.reduce is not None or bool(g.scatters))
        out.append(Access(p.root, start, strides[0] * size if local else 0, reach * size if local else 0,
                          written, local, cleared))
    return shape[0], out


def column_rows(g, op, partials, chunks: int):
    """``(chunks, accesses)`` of loop ``g`` with column sums (a row kernel's, or a sum over the rows) split into ``chunks`` fixed chunks of rows
    (``loops.chunked_rows``): position ``c`` of its parallel loop runs rows ``[c q, (c + 1) q)`` (``q``: the rows
    over ``chunks``; None unless that divides) and writes row ``c`` of each partial buffer (``partials``: places
    of ``chunks`` x row length).  Its column sums are written after its chunks, once the kernel ran the round
    (``chunk_checks.round_share``: it closes the round it joins); they count as written anywhere in their buffers."""
    got = access_rows(g, op, False, columns=True)
    if got is None or got[0] % chunks:
        return None
    q = got[0] // chunks
    acc = [a._replace(row=a.row * q, reach=a.reach + a.row * (q - 1)) if a.local else a for a in got[1]]
    for p in partials:
        if not all(type(x) is int for x in (p.offset, *p.shape)):
            return None
        size = p.dtype.np.itemsize
        row = p.shape[0] // chunks * size
        acc.append(Access(p.root, p.offset * size, row, row - 1, True, True))
    return chunks, acc


def gemm_rows(pa, flag_a, pb, pc, blocks: int, h: int, n: int, k: int):
    """``(blocks, accesses)`` of a ``bgemm`` step over ``blocks`` equal blocks of ``h`` rows of a row-major ``C = A
    B`` (``n`` columns, ``k`` deep; ``flag_a``: A's transpose flag and row stride): block ``j`` reads A's rows
    ``[j h, (j + 1) h)`` (rows of its split axis when A is not transposed, else anywhere), all of B, and writes C's
    rows ``[j h, (j + 1) h)``; None where a size or offset is not a concrete int."""
    ta, lda = flag_a
    if not all(type(x) is int for x in (blocks, h, n, k, lda, pa.offset, pb.offset, pc.offset)) or blocks < 2:
        return None
    sa, sc = pa.dtype.np.itemsize, pc.dtype.np.itemsize
    a_local = ta == "N" and lda >= k
    return blocks, [Access(pa.root, pa.offset * sa, h * lda * sa if a_local else 0,
                           ((h - 1) * lda + k - 1) * sa if a_local else 0, False, a_local),
                    Access(pb.root, pb.offset * pb.dtype.np.itemsize, 0, 0, False, False),
                    Access(pc.root, pc.offset * sc, h * n * sc, (h * n - 1) * sc, True, True)]


def _span(a: Access):
    """The bytes of the workspace ``a``'s root takes (None: not a workspace slot, or of symbolic size)."""
    r = a.root
    if getattr(r, "kind", None) != "ws" or type(r.offset) is not int or type(r.nbytes) is not int:
        return None
    return r.offset, r.offset + r.nbytes


def _may_meet(a: Access, b: Access) -> bool:
    if a.root is b.root:
        return True
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def _same_rows(a: Access, na: int, b: Access, nb: int) -> bool:
    """Both walk the same bytes as rows, ``na`` and ``nb`` of them: the same start and the same span, so when the
    thread count divides both counts, chunk ``t`` of either covers the same bytes (``joins``)."""
    if not (a.local and b.local) or a.row * na != b.row * nb:
        return False
    base_a = a.start + (a.root.offset if a.root is not b.root else 0)
    base_b = b.start + (b.root.offset if a.root is not b.root else 0)
    return base_a == base_b


def conflict(first, n_first, second, n_second) -> bool:
    """Whether accesses ``second`` (a later step's, splitting ``n_second`` positions) may touch what ``first`` (an
    earlier step of the round, ``n_first``) wrote or reads, or write what it reads, outside the same chunk."""
    for a in first:
        for b in second:
            if (a.written or b.written) and _may_meet(a, b) and (b.cleared or not _same_rows(a, n_first, b, n_second)):
                return True
    return False


def joins(steps, ir_built, claims_of=lambda kernel: False, closes_of=lambda kernel: False) -> dict:
    """``{index: (head, divisor)}`` of the ``steps`` (``layout.Step``) that share a pool round: ``head``, the first
    of its group (it runs the round pending from earlier steps first), else it joins the round of the steps before
    it; ``divisor``, the gcd of the group's split lengths: they share the round only when the thread count divides
    it (then every chunk ``t`` is the same fraction ``[t / threads, (t + 1) / threads)`` of every split axis, so the
    rows a chunk of one step touches are the rows its namesake of another touches).  ``ir_built(kernel)``: whether
    a kernel is built from IR (it honours a pending round); ``claims_of(kernel)``: whether its chunks claim
    index-error records (``kernel_ir.Claim``): one such loop a group at most, since it opens its claims before its
    chunks, on the calling thread, where an earlier member's chunks could still be recording into the same slots.
    ``closes_of(kernel)``: whether it runs the round it joins before statements after its chunks
    (``chunk_checks.round_share``): such a step joins a group as its last member and heads none."""
    groups, group, group_claims = [], [], False
    for k, st in enumerate(steps):
        rows = getattr(st, "rows", None)
        if st.kind == "kernel":
            ok = rows is not None and st.kernel is not None and st.kernel.parallel and ir_built(st.kernel)
        else:       # a batch of GEMM blocks on the pool: the entry's own launch (entry_gemms.gemm_batch_on_pool)
            ok = st.kind == "bgemm" and rows is not None and st.parallel
        if not ok or st.state_write:
            group = []
            continue
        m, acc = rows
        claims = st.kind == "kernel" and claims_of(st.kernel)
        closes = st.kind == "kernel" and closes_of(st.kernel)
        if group and not (claims and group_claims) and len(group) < JOIN_MAX \
                and not any(conflict(a, n, acc, m) for _, n, a in group):
            group.append((k, m, acc))
            group_claims = group_claims or claims
            if closes:
                group = []
        elif closes:
            group = []
        else:
            group, group_claims = [(k, m, acc)], claims
            groups.append(group)
    out = {}
    for group in groups:
        if len(group) >= 2:
            divisor = math.gcd(*(n for _, n, _ in group))
            for j, (k, _, _) in enumerate(group):
                out[k] = (j == 0, divisor)
    return out


# the entry's guard bits of steps that share a pool round (``joins``): JOIN, its kernel may queue its chunks into
# the round pending from the steps before; HEAD, the first of such a group (it runs what is pending first); the bits
# from DIVISOR_SHIFT up, the group's divisor.  A step with neither runs the pending round first (``pool_abi.flush``),
# and so does the entry's end.
JOIN, HEAD, DIVISOR_SHIFT = 4, 8, 8


def guard_bits(joined) -> int:
    """A step's guard bits from its ``joins`` entry (None: it shares no round)."""
    if joined is None:
        return 0
    head, divisor = joined
    return (HEAD if head else JOIN) | divisor << DIVISOR_SHIFT


def label(guard: int) -> str:
    """What a step's guard says of its round, for the entry's listing."""
    if not guard & (JOIN | HEAD):
        return ""
    return f" ({'starts' if guard & HEAD else 'joins'} a shared pool round when threads | {guard >> DIVISOR_SHIFT})"


def listing(keep: int) -> list:
    """The lines ``emit_join`` adds to the entry's listing (``entry.code_listing``)."""
    return [f"        if not guard & {JOIN}:         # the pool round the steps before queued into",
            "            flush()",
            f"        join = can_join if guard & {JOIN | HEAD} and (guard >> {DIVISOR_SHIFT}) % threads == 0 else 0",
            f"        guard &= {keep}"]


def emit_join(b, module, guard, keep: int):
    """Emit the entry's round handling before a step (see ``listing``); returns the guard's bits ``keep``."""
    with b.if_then(b.icmp("eq", I64, b.op("and", I64, guard, str(JOIN)), "0")):
        pool_abi.flush(b, module)
    nt = b.load(I64, pool_abi.pool_global(module, "threads"))
    nt = b.select(b.icmp("sgt", I64, nt, "0"), I64, nt, "1")
    shares = b.op("and", I1, b.icmp("ne", I64, b.op("and", I64, guard, str(JOIN | HEAD)), "0"),
                  b.icmp("eq", I64, b.op("srem", I64, b.op("ashr", I64, guard, str(DIVISOR_SHIFT)), nt), "0"))
    b.store(I64, b.select(shares, I64, b.load(I64, pool_abi.pool_global(module, "can_join")), "0"),
            pool_abi.pool_global(module, "join"))
    return b.op("and", I64, guard, str(keep))


def entry_joins(program) -> dict:
    """``joins`` of ``program``'s steps (none when ``JITGRAD_JOIN_ROUNDS=0``)."""
    if not JOIN_ROUNDS:
        return {}
    from ..native import llvm_build
    return joins(program.steps,
                 lambda k: ir_loops.round_share(k.ir) is not None and llvm_build.translatable(k.key, k.source),
                 lambda k: chunk_checks.claims(k.ir.body), lambda k: ir_loops.round_share(k.ir) == "closes")


def launch_joins(joined, pooled, threads: int, pool_joins: bool) -> list:
    """Per step, whether its launch queues into a round already pending when ``pooled[k]`` says which steps take
    the pool this call (``CompiledGraph.launches``): a member of a group (``joined``, ``joins``' answer) after one
    that took the pool, the thread count dividing the group's divisor, on a pool whose rounds launches can share
    (``pool_joins``)."""
    out, pending = [], False
    for k in range(len(pooled)):
        got = joined.get(k)
        if got is None or not pool_joins or got[1] % max(threads, 1):
            out.append(False)
            pending = False
            continue
        # a member that does not take the pool runs the pending round before its chunks (on the calling thread)
        out.append(bool(pooled[k]) and pending and not got[0])
        pending = bool(pooled[k])
    return out


__all__ = ["Access", "access_rows", "column_rows", "conflict", "joins", "entry_joins", "launch_joins", "gemm_rows", "guard_bits", "label", "listing", "emit_join",
           "JOIN_ROUNDS", "JOIN", "HEAD", "DIVISOR_SHIFT"]
