"""Batched and N-D matmul as BLAS calls from the compiled driver (the CPU ``gemm`` emitter, ``gemm_steps.py``,
hands matmuls with batch dims here).

A matmul with batch dims (``x @ W.T`` on ``[B, T, C]`` activations, attention's ``q @ k.mT`` on ``[B, H, T, D]``)
becomes one of two native steps, never a NumPy host step:

- **rows folded**: when the right operand has no batch dims (or a zero batch stride: broadcast) and the left
  operand's batch dims and row dim walk memory as one dim (a contiguous ``[B, T, C]`` activation), the batch is
  just more rows: one ``?gemm`` with ``M = B * T``.  A ``Linear`` on 3-D input costs one GEMM, as in torch.
- **batched**: otherwise a ``bgemm`` step: one ``?gemm`` argument block, the batch sizes and each operand's byte
  stride per batch dim (0 for a broadcast dim), 13 scratch slots, the last entry's own size (a split GEMM's
  last block: ``split_rows``) and the item size to prefetch with (small products: each entry fetches the next
  one's operands, ``batch_prefetch.py``); ``abi.call_gemm_batched`` loops over the
  batch inside the driver, pointing the scratch block's A, B, C at each matrix.  Operands are passed by leading
  dimension, so strided views (a head of a ``[B, T, 3C]`` projection, a transposed key) are read in place.
  When the products may be small (OpenBLAS runs each on one thread) and the batch may have work enough
  (``layout.Program.batch_choice``: sizes that vary, or that pay now), the step is ``parallel``: the entry splits
  the batch into one chunk per worker of the pool (attention's (batch, head) products), each product on one
  thread, in the calls where both hold (``entry.py``: the test is made per call, so it needs no guard on sizes).

The table layout of a ``bgemm`` block is documented on ``abi.call_gemm_batched``.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.ops import blas
from ...ir.symbolic import hint_of, size_arg
from . import round_groups
from .layout import GEMM_BLOCKS, Program, Step
from ..native import workpool
from ..places import Place, c_strides, coalesce
from ..kernels import small_gemm
from .region_chains import value_place

MAX_BATCH_DIMS = 6
# the ``?gemm`` argument a ``bgemm`` block's last entry may size on its own (``abi.call_gemm_batched``): BLAS's
# ``n`` is C's rows (C^T is what BLAS computes), its ``m`` C's columns
LAST_ROWS, LAST_COLUMNS = 3, 2
# a product's needed half (``Plan.triangles``, row-major ``C = A B``) as the small kernel's variant (column-major
# ``C^T = B^T A^T``: its rows are C's columns, its B is A transposed), and as the same half of ``C^T = B^T A^T``
KERNEL_TRIANGLE = {"a_lower": "p_le_col", "a_upper": "p_ge_col", "b_lower": "p_ge_row", "b_upper": "p_le_row",
                   "out_lower": "rows_le_col", "out_upper": "rows_ge_col"}
TRANSPOSED_TRIANGLE = {"a_lower": "b_upper", "a_upper": "b_lower", "b_lower": "a_upper", "b_upper": "a_lower",
                       "out_lower": "out_upper", "out_upper": "out_lower"}


def _gemm_flag(strides, rows, cols):
    """``(transpose flag, leading dim)`` for a row-major matrix view with element ``strides`` and shape
    ``rows x cols`` as BLAS's column-major operand, or None when BLAS cannot read it in place."""
    s0, s1 = strides
    if (s1 == 1 or cols == 1) and (s0 >= max(1, cols) or rows == 1):
        return "N", max(s0, cols, 1)
    if (s0 == 1 or rows == 1) and (s1 >= max(1, rows) or cols == 1):
        return "T", max(s1, rows, 1)
    return None


def batched_gemm(prog: Program, e) -> bool:
    """A matmul with batch dims as one ``gemm`` (rows folded) or ``bgemm`` step; False: a host step."""
    a, b = e.ins
    out = e.outs[0]
    if a.aval.ndim < 2 or b.aval.ndim < 2:       # 1-D operands with batched partners: rare, NumPy's impl
        return False
    m, k = a.aval.shape[-2:]
    n = b.aval.shape[-1]
    bs = tuple(out.aval.shape[:-2])
    if 0 in (m, n, k) or 0 in bs:
        return False
    pa, pb = prog.place(a), prog.place(b)

    def batch_strides(p):
        lead = len(bs) - (len(p.shape) - 2)
        st = [0] * lead
        for d, s in zip(p.shape[:-2], p.strides[:-2]):
            st.append(0 if d == 1 else s)
        return st

    def readable(v, p):
        if _gemm_flag(p.strides[-2:], *p.shape[-2:]) is None:
            p = prog.places.materialize(v, p)
        return p

    pa, pb = readable(a, pa), readable(b, pb)
    sa, sb = batch_strides(pa), batch_strides(pb)
    # rows folded: B shared by every batch entry and A's batch dims continue its rows
    if not any(sb):
        fshape, fst = coalesce(list(bs) + [m], [sa + [pa.strides[-2]]])
        if len(fshape) <= 1:
            rows = math.prod(bs) * m
            ra = fst[0][0] if fshape else max(k, 1)
            flag_a = _gemm_flag((ra, pa.strides[-1]), rows, k)
            flag_b = _gemm_flag(pb.strides[-2:], k, n)
            if flag_a is not None and flag_a[0] == "N":
                pc = prog.places.assign(out)        # rows folded: C's rows one run of memory
                pa2 = Place(pa.root, pa.offset, (rows, k), (ra, pa.strides[-1]), pa.dtype)
                if not split_rows(prog, e, pa2, flag_a, pb, flag_b, pc, rows, n, k) \
                        and not row_blocks(prog, e, pa2, flag_a, pb, flag_b, pc, rows, n, k):
                    st = _emit_gemm_block(prog, e, "gemm", pa2, flag_a, pb, flag_b, pc, rows, n, k, None)
                    prog.gemm_outs[out] = (st, prog.places.n, st.fold[0], st.fold[1], st.fold[2])
                return True
    pc = (len(bs) <= MAX_BATCH_DIMS and permuted_c(prog, out)) or prog.places.assign(out)
    tri = prog.triangles.get(out)       # each product whole (never cut in blocks here): its half may be skipped
    if pc.strides[-1] != 1:         # C column-major (``_writable``): C^T = B^T A^T, written row-major
        pa, pb, sa, sb, pc, m, n = _transposed(pb), _transposed(pa), sb, sa, _transposed(pc), n, m
        tri = TRANSPOSED_TRIANGLE.get(tri)
    flag_a = _gemm_flag(pa.strides[-2:], m, k)
    flag_b = _gemm_flag(pb.strides[-2:], k, n)
    sc = list(pc.strides[:-2])
    shape, (cb, ca, cc) = coalesce(list(bs), [sb, sa, sc])
    if len(shape) > MAX_BATCH_DIMS:
        return False
    st = _emit_gemm_block(prog, e, "bgemm", pa, flag_a, pb, flag_b, pc, m, n, k, (shape, cb, ca, cc),
                          ldc=pc.strides[-2], triangle=KERNEL_TRIANGLE.get(tri))
    # one level of parallelism: the batch is split between the pool's workers only when OpenBLAS runs each
    # product on the calling thread (below its threading threshold), so no product starts BLAS threads of its own
    count = math.prod(shape)
    st.work *= hint_of(count)
    st.parallel, gated = prog.batch_choice(m * n * k, count)
    if gated:
        st.gate = (m * n * k, count)
    return True


def permuted_c(prog: Program, out):
    """A place for a batched product's ``out`` in the order its one reader permutes it to (attention's
    ``(att @ v).transpose(1, 2)``, the heads' gradients on their way back into ``[B, T, C]``): a contiguous buffer
    of the permuted shape, seen through the inverse permutation, so the permute is contiguous and the reshape
    after it a free view, not a layout copy.  Only where BLAS can write each product there (a unit column
    stride); None: out gets a buffer of its own order."""
    places = prog.places
    uses = places.uses.get(out, ())
    if len(uses) != 1 or id(out) in places.out_ids or out in places.inplace:
        return None
    e = prog.plan_steps[uses[0]]
    if getattr(e, "op", None) is None or e.op.name != "permute" or e.ins[0] is not out:
        return None
    perm = tuple(e.params["perm"])
    pshape = [out.aval.shape[d] for d in perm]
    pst = c_strides(pshape)
    strides = [0] * len(perm)
    for i, d in enumerate(perm):
        strides[d] = pst[i]
    if not _writable(strides, out.aval.shape):
        return None
    # a split's gradient (the heads' way back into qkv's): written straight into its region of the chain's buffer
    area = value_place(prog, e.outs[0], pshape)
    if area is not None:
        st = [0] * len(perm)
        for i, d in enumerate(perm):
            st[d] = area.strides[i]
        if _writable(st, out.aval.shape):
            p = places[out] = Place(area.root, area.offset, out.aval.shape, tuple(st), out.aval.dtype)
            return p
    buf = places.buffer(out, pshape, out.aval.dtype)
    p = places[out] = Place(buf.root, 0, out.aval.shape, tuple(strides), out.aval.dtype)
    return p


def _writable(strides, shape) -> bool:
    """Whether BLAS can write a product of ``shape`` at ``strides``: each matrix row-major (a unit column stride,
    the row stride spanning the row) or column-major (``batched_gemm`` then computes its transpose, ``B^T A^T``:
    a key's gradient ``q^T dS`` on its way back into qkv as ``dS^T q``)."""
    m, n = shape[-2:]
    return (strides[-1] == 1 and strides[-2] >= n) or (strides[-2] == 1 and strides[-1] >= m)


def _transposed(p: Place) -> Place:
    """The place of ``p``'s matrices transposed (its last two dims swapped: a view, no copy)."""
    sh, st = list(p.shape), list(p.strides)
    sh[-2:], st[-2:] = sh[:-3:-1], st[:-3:-1]
    return Place(p.root, p.offset, tuple(sh), tuple(st), p.dtype)


def split_rows(prog: Program, e, pa, flag_a, pb, flag_b, pc, m, n, k) -> bool:
    """A big ``C = A B`` (``m`` x ``n``, row-major ``C``) as one parallel ``bgemm`` step over blocks of C
    (``Program.split_rows``: equal blocks, the last one the rows left), one single-threaded BLAS call per block on
    the pool's workers; the last block is as high as the rows left (its own row count: ``_emit_gemm_block``'s
    ``last``), so every row runs inside the one launch.  Each call packs the operand the blocks share, so the
    split is along the side whose shared operand is the smaller where OpenBLAS's unit allows both: blocks of rows
    (entry ``j``: A's rows ``[j r, (j + 1) r)`` times all of B) when ``n <= m``, else blocks of columns (all of A
    times B's columns ``[j c, (j + 1) c)``).  Every block starts at a multiple of OpenBLAS's unit, and the cut is
    tried once on the product's shape (``blas.blocks_exact``), so the result has one single-threaded call's bits
    whatever the workers.  Per call, the blocks go to the pool when the whole
    product's multiply-adds reach the pool's threshold (``workpool.takes_split``) and its pacer does not hold
    launches off it; else they run one after the other on the calling thread (the same calls, the same bits).
    False: not split (one call)."""
    macs = float(hint_of(m * n * k))
    dtype = e.outs[0].aval.dtype.np
    prefer_rows = not (type(m) is int and type(n) is int and n > m)
    shape = [int(hint_of(x)) for x in (m, k, n)]       # (a symbolic size at its hint: the blocks' side is concrete)
    for by_rows in (prefer_rows, not prefer_rows):
        side = m if by_rows else n
        nb, h = prog.split_rows(side, macs, dtype, by_rows)
        # the blocks' bits tried on the product's shape once (OpenBLAS's unit alone does not settle them)
        if nb and blas.blocks_exact(dtype, by_rows, *shape, blas.cut(side, h, macs / side)):
            break
    else:
        # no cut gives one call's bits: blocks of a height fixed by the product (``Program.fixed_blocks``)
        by_rows = prefer_rows
        nb, h = prog.fixed_blocks(m if by_rows else n, macs)
        if not nb or type(m if by_rows else n) is not int:
            return False
    last = (m if by_rows else n) - (nb - 1) * h
    if by_rows:
        row_a = flag_a[1] if flag_a[0] == "N" else 1       # A's row stride (elements): ld, or 1 if transposed
        st = _emit_gemm_block(prog, e, "bgemm", pa, flag_a, pb, flag_b, pc, h, n, k,
                              ((nb,), [0], [h * row_a], [h * max(n, 1)]), split=True, last=(LAST_ROWS, last))
        st.label = "matmul (BLAS, rows on the pool)"
        if last == h:       # equal blocks: rows of a split axis a loop's chunks may share a round with
            st.rows = round_groups.gemm_rows(pa, flag_a, pb, pc, nb, h, n, k)
    else:
        col_b = 1 if flag_b[0] == "N" else flag_b[1]       # B's column stride (elements): 1, or ld if transposed
        st = _emit_gemm_block(prog, e, "bgemm", pa, flag_a, pb, flag_b, pc, m, h, k,
                              ((nb,), [h * col_b], [0], [h]), ldc=n, split=True, last=(LAST_COLUMNS, last))
        st.label = "matmul (BLAS, columns on the pool)"
    st.work = macs
    st.parallel = st.split = True
    if prog.parallel is None:
        # the whole product's work compared with the pool's threshold per call, as a loop's (and held off the pool
        # by its pacer while the cores are contended: pool_abi.launch); blocks of rows or columns alike
        st.gate = (m * n * k, nb)
    # an SGD update of the product may still fold into it (gemm_steps.fold_update_into_gemm: alpha, beta and C's
    # slot; the blocks' C offsets are the updated weight's own, a contiguous array of C's shape)
    prog.gemm_outs[e.outs[0]] = (st, prog.places.n, st.fold[0], st.fold[1], st.fold[2])
    return True


def row_blocks(prog: Program, e, pa, flag_a, pb, flag_b, pc, m, n, k) -> bool:
    """A small ``C = A B`` (each block on one thread: at most OpenBLAS's threading threshold in all) of ``m``
    rows as a ``bgemm`` batch of equal blocks of rows (``Program.fixed_blocks``' geometry: the product's alone,
    never the workers'), so the pool splits it like attention's batches, each block on one thread, in the calls
    where the blocks' work reaches its threshold (``workpool.takes_batch``).  Only where that threshold is reached
    now (else one call, as before) and the blocks are equal.  False: not cut."""
    if prog.parallel is False or not all(type(x) is int for x in (m, n, k)) or m < 2 * blas.MIN_BLOCK_ROWS:
        return False
    h = max(blas.MIN_BLOCK_ROWS, -(-m // GEMM_BLOCKS))
    nb = m // h
    most = blas.BLAS_THREADED_MACS
    if m % h or m * n * k > most or not workpool.takes_batch(h * n * k, nb, most):
        return False
    row_a = flag_a[1] if flag_a[0] == "N" else 1       # A's row stride (elements): ld, or 1 if transposed
    st = _emit_gemm_block(prog, e, "bgemm", pa, flag_a, pb, flag_b, pc, h, n, k,
                          ((nb,), [0], [h * row_a], [h * max(n, 1)]))
    st.label = st.label.replace("batched", "blocks of rows")
    st.work *= nb
    st.parallel, gated = prog.batch_choice(h * n * k, nb)
    if gated:
        st.gate = (h * n * k, nb)
    if st.parallel:
        st.rows = round_groups.gemm_rows(pa, flag_a, pb, pc, nb, h, n, k)
    return True


def _emit_gemm_block(prog: Program, e, kind, pa, flag_a, pb, flag_b, pc, m, n, k, batch, ldc=None, split=False,
                     last=None, triangle=None):
    """Append a ``?gemm`` argument block (``C = A B`` row-major, i.e. ``C^T = B^T A^T`` column-major: B goes
    first) and, for ``bgemm``, the batch sizes, byte strides, scratch slots and the last entry's size; ``ldc``:
    C's row stride when it is not ``n`` (a block of C's columns); ``split``: the blocks of a split GEMM (always
    OpenBLAS's routine); ``last``: ``(argument, size)``, the last batch entry's own C rows (``LAST_ROWS``) or
    columns (``LAST_COLUMNS``) where they differ from the others' (a split GEMM's rows left); ``triangle``: the
    small kernel's variant for a product the plan found half-needed (``KERNEL_TRIANGLE``)."""
    out = e.outs[0]
    ta, lda = flag_a
    tb, ldb = flag_b
    f32 = out.aval.dtype.name == "float32"
    sc = np.float32 if f32 else np.float64
    offs = {}
    for name, data in (("ta", tb.encode()), ("tb", ta.encode()), ("m", n), ("n", m), ("k", k),
                       ("alpha", np.array([1.0], sc).tobytes()), ("lda", ldb), ("ldb", lda),
                       ("beta", np.array([0.0], sc).tobytes()), ("ldc", max(n if ldc is None else ldc, 1))):
        offs[name] = prog.put_param(data)
    work = float(hint_of(m * n * k))    # multiply-adds (a batch's: times the batch, below)
    # a split GEMM's blocks are all OpenBLAS's (a small last block on another kernel would change its bits)
    routine = "sgemm" if f32 else "dgemm"
    if not split:
        routine = small_gemm.routine(routine, work, triangle)
    if triangle and routine.startswith("small_") and all(type(x) is int for x in (m, n, k)):
        work = float(small_gemm.macs(triangle, n, m, k, "sgemm" if f32 else "dgemm"))      # the kernel's own (its m is C's columns)
    how = "small kernel" if routine.startswith("small_") else "BLAS"
    how += f", {triangle}" if triangle and routine.startswith("small_") else ""
    label = f"matmul ({how})" if kind == "gemm" else f"matmul (batched, {how})"
    st = Step(kind, label=label, eqn=e, shapes=[list(v.aval.shape) for v in e.ins], scope=e.scope)
    st.work, st.gemm = work, routine
    st.block = len(prog.table)
    for item in ("ta", "tb", "m", "n", "k", "alpha", pb, "lda", pa, "ldb", "beta", pc, "ldc"):
        if isinstance(item, str):
            prog.param_slots.append((len(prog.table), offs[item]))
            prog.table.append(0)
        else:
            slot = prog.slot_addr(item)
            if item is pc:
                st.fold = (offs["alpha"], offs["beta"], slot)
    if batch is not None:
        shape, cb, ca, cc = batch
        item = pc.dtype.np.itemsize
        prog.table.append(len(shape))
        prog.table.extend(size_arg(d) for d in shape)
        for strides in (cb, ca, cc):
            prog.table.extend(size_arg(s) * item for s in strides)
        prog.table.extend([0] * 13)          # scratch: the block of the gemm call being made
        if last is None:
            prog.table.extend([0, 0])
        else:                                # the last entry's size argument: its address
            prog.table.append(last[0])
            prog.param_slots.append((len(prog.table), prog.put_param(last[1])))
            prog.table.append(0)
        # the item size with which each entry prefetches the next one's operands (``batch_prefetch.py``): small
        # products only (OpenBLAS packs its own blocks, which are too big to fetch ahead whole)
        prog.table.append(item if routine.startswith("small_") else 0)
    prog.add(st)
    return st


__all__ = ["batched_gemm", "permuted_c", "split_rows", "row_blocks", "MAX_BATCH_DIMS", "KERNEL_TRIANGLE"]
