"""Kernel source of a row-wise chain (``ir/passes/row_chains.RowGroup``): one loop nest over rows, several
sweeps of each row.

    for each row (outer dims, the first one ``prange`` when parallel):
        load the row's broadcast operands (row values, a mask's column...) once
        row eqns ready before pass 0
        pass 0: for i in range(n): load, compute, accumulate the pass's reductions (in registers)
        row eqns that read them (``rsqrt(var + eps)``), once per row
        pass 1 ... last pass: the same, storing the values the group writes
        store the row values the group writes

The text is built from the same pieces as ``loops.gen_group`` (scalar bodies, typed literals, alias-scoped
accesses, the row-reduction forms that vectorise: a register accumulator, max/min as a select plus a NaN
count), and stays inside what ``ir_loops`` translates.  As there, sizes and strides come from the argument
block, so the text depends on structure only.

Row outputs: the layout places each row value the group writes in a buffer of its own (row) shape, with stride 0
along the row axis (one of them as the group's reduction, ``RowGroup.reduce``), so a row's element of it is at
the row's offset.
"""
from __future__ import annotations

from ..ir import dtypes as dt
from .loops import (BCAST, Kernel, _compute_dtype, _load, _store, _tname, group_nest, load_at, row_minmax,
                    scalar_expr, store_at, value_text)
from .math_table import MathCalls

_INIT = {"sum": "0", "amax": "-np.inf", "amin": "np.inf"}

def gen_rows(g, classes, parallel, rank, red_axes, alias=None) -> Kernel:
    """The kernel of row group ``g`` over iteration rank ``rank`` (after the layout merged dims), whose row axis
    is the last (``red_axes`` must say so).  ``classes``/``alias``: per operand, as for ``loops.gen_group``."""
    r = rank
    if r < 1 or tuple(red_axes or ()) != (r - 1,):
        raise ValueError(f"gen_rows: {g.name}: expected the row axis last, got reduced axes {red_axes} of rank {r}")
    parallel = bool(parallel) and r >= 2 and not g.columns     # rows would race on a column sum
    arrays_in, operands, nest = group_nest(g, classes, parallel, r, alias, "gen_rows")
    nest.slot += 1          # the layout's count of the reduction's output (a plain group initialises it; not here)
    slot_of = {v: j for j, v in enumerate(operands)}
    consts, math_ = {}, MathCalls("cpu")
    order = {e: k for k, e in enumerate(g.eqns)}
    local = {}
    ref = value_text(local, consts)

    def compute(e):
        cd, od = _compute_dtype(e), e.outs[0].aval.dtype
        expr = scalar_expr(e, cd, od, ref, math_)
        t = f"t{order[e]}"
        local[e.outs[0]] = t
        return f"{t} = " + (f"bool({expr})" if od is dt.bool_ else f"{_tname(od)}({expr})")

    def at(j, idx):             # operand j's element idx, read or written at an index of our own
        return load_at(j, nest, idx)

    def put(j, idx, val):
        return store_at(j, nest, idx, val)

    columns = set(g.columns)
    pre = []
    for e in g.columns:     # a column sum's output: one element per row position (its stride along the row)
        j = slot_of[e.outs[0]]
        pre += [f"for j in range(n{r - 1}):", "    " + put(j, f"j * s{j}_{r - 1}", f"{_tname(e.outs[0].aval.dtype)}(0)")]
    # a row value's place has stride 0 along the row axis (``places.Places.group``): its row's offset is b_{r-2}
    row_idx = {v: f"b{slot_of[v]}_{r - 2}" if r >= 2 else "0" for v in g.row_outputs}
    lines = ["def kernel(A):", f"    # rows of axis {r - 1} of rank {r}: {len(g.passes)} passes"]
    lines += ["    " + p for p in nest.pre + pre]
    ind = "    "
    for d in range(r - 1):
        rng = "prange" if (d == 0 and parallel) else "range"
        lines.append(f"{ind}for i{d} in {rng}(n{d}):")
        ind += "    "
        for j in range(len(operands)):
            prev = f"b{j}_{d - 1} + " if d > 0 else ""
            lines.append(f"{ind}b{j}_{d} = {prev}i{d} * s{j}_{d}")
    row = []            # the lines of one row, at the row's indentation
    in_slot = {v: j for j, v in enumerate(arrays_in)}
    for v, j in in_slot.items():            # broadcast along the row: read once per row
        if nest.classes[j] == BCAST:
            local[v] = f"x{j}"
            row.append(f"x{j} = {_load(j, nest, v.aval.dtype)}")
    last = len(g.passes) - 1
    for p, ps in enumerate(g.passes):
        row += [compute(e) for e in g.row_eqns[p]]
        inner, init, after = [], [], []
        used = {v for e in ps.eqns for v in e.ins} | {e.ins[0] for e in ps.reductions}
        for v in arrays_in:
            j = in_slot[v]
            if v in used and nest.classes[j] != BCAST:
                local[v] = f"x{j}"
                inner.append(f"x{j} = {_load(j, nest, v.aval.dtype)}")
        for v in ps.loads:          # written by an earlier pass of this row: read back from cache
            e = next(e for e in g.eqns if e.outs[0] is v)
            local[v] = f"t{order[e]}"
            inner.append(f"t{order[e]} = {_load(slot_of[v], nest, v.aval.dtype)}")
        inner += [compute(e) for e in ps.eqns]
        for e in ps.reductions:
            k = order[e]
            od = e.outs[0].aval.dtype
            if e in columns:
                j = slot_of[e.outs[0]]
                inner += [f"rv{k} = {_tname(od)}({ref(e.ins[0], None)})", f"cs{k} = {at(j, f'i{r - 1} * s{j}_{r - 1}')}",
                          put(j, f"i{r - 1} * s{j}_{r - 1}", f"{_tname(od)}(cs{k} + rv{k})")]
                continue
            init.append(f"a{k} = {_tname(od)}({_INIT[e.op.name]})")
            inner.append(f"rv{k} = {_tname(od)}({ref(e.ins[0], None)})")
            if e.op.name == "sum":
                inner.append(f"a{k} = a{k} + rv{k}")
            else:
                before, each, last_ = row_minmax(e.op.name, od, math_.uses, f"rv{k}", f"a{k}", f"h{k}", f"kb{k}",
                                                 f"m{k}")
                init[-1:] = before
                inner += each
                after += last_
        for v in ps.stores:
            inner.append(_store(slot_of[v], nest, v.aval.dtype, local[v]))
        row += init + [f"for i{r - 1} in range(n{r - 1}):"] + ["    " + x for x in inner] + after
        for e in ps.reductions:
            if e not in columns:
                local[e.outs[0]] = f"a{order[e]}"
    row += [compute(e) for e in g.row_eqns[last + 1]]
    for v in g.row_outputs:
        j = slot_of[v]
        val = local[v]
        val = f"uint8(1 if {val} else 0)" if v.aval.dtype is dt.bool_ else val
        row.append(put(j, row_idx[v], val))
    if math_.guards:
        raise ValueError(f"gen_rows: {g.name}: a guarded (integer) operation has no place in a row chain")
    lines += [ind + x for x in row]
    return Kernel("rows", "\n".join(lines), rank=r, operands=operands, classes=classes, parallel=parallel,
                  red_axes=tuple(red_axes), consts=consts, label=g.name, uses=math_.uses, alias=nest.alias)

__all__ = ["gen_rows"]
