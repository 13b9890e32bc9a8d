"""Kernels of row-wise chains (``ir/passes/row_chains.RowGroup``), built as kernel IR: one loop nest over rows,
several sweeps of each row.

    for each row (outer dims, the first one parallel when parallel):
        load the row's broadcast operands (row values, a mask's column...) once
        row eqns ready before pass 0
        pass 0: for i in range(n): load, compute, accumulate the pass's reductions (in registers)
        row eqns that read them (``rsqrt(var + eps)``), once per row
        pass 1 ... last pass: the same, storing the values the group writes
        store the row values the group writes

Built from the same pieces as ``loops.gen_group`` (scalar bodies, typed literals, alias-scoped accesses, the
row-reduction forms that vectorise: a register accumulator, max/min as a select plus a NaN count).  As there,
sizes and strides come from the argument block, so the kernel depends on structure only.

Row outputs: the layout places each row value the group writes in a buffer of its own (row) shape, with stride 0
along the row axis (one of them as the group's reduction, ``RowGroup.reduce``), so a row's element of it is at
the row's offset.
"""
from __future__ import annotations

from . import kernel_ir as ki
from .kernel_ir import I64, cast, const, read
from .ordered_keys import row_minmax
from .loops import (BCAST, Kernel, chunked_rows, _compute_dtype, _load, _store, _stored, _T, group_nest, load_at, reduce_init,
                    scalar_expr, store_at, value_ref)


def gen_rows(g, classes, parallel, rank, red_axes, alias=None, per_element=None, short=False) -> Kernel:
    """The kernel of row group ``g`` over iteration rank ``rank`` (after the layout merged dims), whose row axis
    is the last (``red_axes`` must say so).  ``classes``/``alias``/``per_element``/``short``: as for
    ``loops.gen_group`` (``short``: the rows are)."""
    r = rank
    if r < 1 or tuple(red_axes or ()) != (r - 1,):
        raise ValueError(f"gen_rows: {g.name}: expected the row axis last, got reduced axes {red_axes} of rank {r}")
    # rows would race on a column sum: with one outer dim, each of COLUMN_CHUNKS fixed chunks of rows sums its
    # columns into its own partial row, added in chunk order after the parallel loop (``loops.chunked_rows``)
    chunked = bool(parallel) and r == 2 and bool(g.columns)
    parallel = bool(parallel) and r >= 2 and (not g.columns or chunked)
    b = ki.Builder()
    b.comment(f"rows of axis {r - 1} of rank {r}: {len(g.passes)} passes")
    arrays_in, operands, nest = group_nest(b, g, classes, parallel, r, alias, "gen_rows", per_element)
    nest.slot += 1          # the layout's count of the reduction's output (a plain group initialises it; not here)
    slot_of = {v: j for j, v in enumerate(operands)}
    partial = {}            # column sum eqn -> its partial rows' pointer (``loops.COLUMN_CHUNKS`` x row length)
    if chunked:
        for k, e in enumerate(g.columns):
            partial[e] = b.let(f"q{k}", b.A[nest.slot].ptr(_T(e.outs[0].aval.dtype)))
            nest.slot += 1
        chunk = read(b.var("c", I64))
    guards = []
    order = {e: k for k, e in enumerate(g.eqns)}
    local = {}
    ref = value_ref(local)
    i_row = nest.i(r - 1)

    def compute(e):
        cd, od = _compute_dtype(e), e.outs[0].aval.dtype
        x = scalar_expr(e, cd, od, ref, guards)
        local[e.outs[0]] = b.let(f"t{order[e]}", cast(x, _T(od)))

    columns = set(g.columns)
    for e in ([] if chunked else g.columns):     # a column sum's output: one element per row position
        j = slot_of[e.outs[0]]
        with b.loop("j", nest.n[r - 1]) as jv:
            b.emit([store_at(j, nest, jv * nest.s[j][r - 1], cast(const(0), _T(e.outs[0].aval.dtype)))])
    # a row value's place has stride 0 along the row axis (``places.Places.group``): its row's offset is b_{r-2}
    row_idx = {v: nest.base(slot_of[v], r - 2) if r >= 2 else const(0) for v in g.row_outputs}
    in_slot = {v: j for j, v in enumerate(arrays_in)}
    with b.capture() as row:            # the statements of one row
        for v, j in in_slot.items():            # broadcast along the row: read once per row
            if nest.classes[j] == BCAST:
                local[v] = b.let(f"x{j}", _load(j, nest, v.aval.dtype))
        last = len(g.passes) - 1
        for p, ps in enumerate(g.passes):
            for e in g.row_eqns[p]:
                compute(e)
            after = []
            used = {v for e in ps.eqns for v in e.ins} | {e.ins[0] for e in ps.reductions}
            with b.capture() as init:
                pass
            with b.capture() as inner:
                for v in arrays_in:
                    j = in_slot[v]
                    if v in used and nest.classes[j] != BCAST:
                        local[v] = b.let(f"x{j}", _load(j, nest, v.aval.dtype))
                for v in ps.loads:          # written by an earlier pass of this row: read back from cache
                    e = next(e for e in g.eqns if e.outs[0] is v)
                    local[v] = b.let(f"t{order[e]}", _load(slot_of[v], nest, v.aval.dtype))
                for e in ps.eqns:
                    compute(e)
                for e in ps.reductions:
                    k = order[e]
                    od = e.outs[0].aval.dtype
                    T = _T(od)
                    rv = b.let(f"rv{k}", cast(ref(e.ins[0], None), T))
                    if e in columns and chunked:
                        at = chunk * nest.n[r - 1] + i_row
                        cs = b.let(f"cs{k}", ki.load(partial[e], at))
                        b.store(partial[e], at, cast(cs + rv, T))
                        continue
                    if e in columns:
                        j = slot_of[e.outs[0]]
                        at = i_row * nest.s[j][r - 1]
                        cs = b.let(f"cs{k}", load_at(j, nest, at))
                        b.emit([store_at(j, nest, at, cast(cs + rv, T))])
                        continue
                    acc = b.var(f"a{k}", T)
                    if e.op.name == "sum":
                        init.append(ki.Assign(acc, reduce_init("sum", od)))
                        b.set(acc, read(acc) + rv)
                    else:
                        before, each, last_ = row_minmax(b, e.op.name, od, rv, f"a{k}", f"h{k}", f"kb{k}", f"m{k}")
                        init += before
                        b.emit(each)
                        after += last_
                for v in ps.stores:
                    b.emit([_store(slot_of[v], nest, v.aval.dtype, local[v])])
            b.emit(init)
            f = ki.For(b.var(f"i{r - 1}", I64), const(0), nest.n[r - 1], short=short)
            f.body += inner
            b.emit([f] + after)
            for e in ps.reductions:
                if e not in columns:
                    local[e.outs[0]] = read(b.var(f"a{order[e]}", _T(e.outs[0].aval.dtype)))
        for e in g.row_eqns[last + 1]:
            compute(e)
        for v in g.row_outputs:
            j = slot_of[v]
            b.emit([store_at(j, nest, row_idx[v], _stored(v.aval.dtype, local[v]))])
    if guards:
        raise ValueError(f"gen_rows: {g.name}: a guarded (integer) operation has no place in a row chain")
    # the outer dims (all but the row axis): their loops accumulate every operand's offset
    if chunked:
        chunked_rows(b, nest, row, len(operands), [(partial[e], slot_of[e.outs[0]], e.outs[0].aval.dtype)
                                                   for e in g.columns])
    else:
        outer = _Outer(nest, r - 1)
        outer.emit(row, range(len(operands)))
    return Kernel("rows", b.finish(), rank=r, operands=operands, classes=classes, parallel=parallel,
                  red_axes=tuple(red_axes), label=g.name, alias=nest.alias, per_element=per_element)


class _Outer:
    """The loops over a nest's first ``dims`` dims, each accumulating operand offsets ``b{j}_{d}``."""

    def __init__(self, nest, dims):
        self.nest, self.dims = nest, dims

    def emit(self, body, ids):
        nest, b = self.nest, self.nest.b
        block = b._blocks[-1]
        for d in range(self.dims):
            par = d == 0 and nest.parallel
            f = ki.For(b.var(f"i{d}", I64), const(0), nest.n[d], 1, par, (), nest.gate() if par else None)
            if par:
                b.parallel = True
            block.append(f)
            block = f.body
            for j in ids:
                off = nest.i(d) * nest.s[j][d]
                block.append(ki.Assign(b.var(f"b{j}_{d}", I64), nest.base(j, d - 1) + off if d > 0 else off))
        block.extend(body)


__all__ = ["gen_rows"]
