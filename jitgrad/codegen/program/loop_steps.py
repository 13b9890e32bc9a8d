"""The CPU target's loop-kernel steps, as emitters registered per step kind (``lowering.emits``): fusion groups
(plain loops and row-wise chains), views, gathers and scatters with integer tensors, scans, and the host step
(an op's NumPy impl, which gives the graph a Python driver).  Each takes the ``layout.Program`` being built and
one plan entry, and writes its kernel's argument block into the program's table.
"""
from __future__ import annotations

import math

from ...ir.ops.opdef import broadcast_shapes as _broadcast
from ...ir.plan import Group, RowGroup
from ...ir.symbolic import hint_of, known_equal, size_arg
from .gemm_steps import fold_into_gemm
from .layout import Program, Step, alias_classes, stride_class
from .round_groups import access_rows, column_rows
from ..kernels.index_loops import gen_gather, gen_scatter
from ..kernels.index_checks import adds_into_zeros
from ..kernels.loops import COLUMN_CHUNKS, gen_group
from ..kernels.ir_loops import SHORT_TRIP
from ..lowering import emits
from ..places import bcast_strides, c_strides
from ..kernels.rowwise_loops import gen_rows
from ..kernels.scan_loops import gen_scan
from ..kernels.nonzero_loops import gen_nonzero


@emits("fused", target="cpu")
def fused_group(prog: Program, g: Group):
    """A fusion group as one loop kernel (a ``RowGroup``: one nest over rows, several sweeps of each); an SGD
    update of a GEMM's result is folded into that GEMM instead (``gemm_steps.py``)."""
    if fold_into_gemm(prog, g):
        return
    emit_group(prog, g, prog.places.group(g, reuse=True))


def emit_group(prog: Program, g, op):
    """Group ``g``'s loop kernel over its placed operands ``op`` (``places.Places.group``) as a step."""
    # a scatter adds into its output: the base is copied in first (zeros: the loop clears it itself)
    scattered = op.out_places[len(op.out_places) - len(g.scatters):]
    for e, po in zip(g.scatters, scattered):
        if not adds_into_zeros(e):
            prog.copy_step(prog.place(e.ins[0]), po, "copy (index_put)")
    shape = op.shape
    if isinstance(g, RowGroup) and not g.columns:
        row_stashes(prog, g, op)
    classes, per_element, alias = loop_facts(g, op)
    own_rows = bool(g.scatters) and not isinstance(g, RowGroup) and scatters_own_rows(g, op)
    pooled = len(shape) > 0 and (not g.scatters or own_rows)
    parallel, gate = prog.pool_choice(op.size, per_element) if pooled else (False, None)
    short = len(shape) > 0 and isinstance(shape[-1], int) and shape[-1] < SHORT_TRIP
    if isinstance(g, RowGroup):
        k = gen_rows(g, classes, parallel, len(shape), op.red_axes, alias, gate, short)
    else:
        k = gen_group(g, classes, parallel, prog.check_ids, len(shape), op.red_axes, alias, gate, short, own_rows)
    st = Step("kernel", k, label=f"{g.name} {g.lines()}".strip(), shapes=[list(p.shape) for p in op.in_places],
              scope=g.all_eqns[0].scope)
    st.work = hint_of(op.size) * per_element
    if k.per_element is not None:
        st.gate = (op.size, k.per_element)
    st.block = len(prog.table)
    if k.parallel:
        st.rows = access_rows(g, op, own_rows)
    partials = group_block(prog, g, op, k, scattered)
    if k.parallel and partials:         # column sums over fixed chunks of rows (``loops.chunked_rows``)
        st.rows = column_rows(g, op, partials, COLUMN_CHUNKS)
    st.state_write = op.in_place
    prog.add(st)


def scatters_own_rows(g, op) -> bool:
    """Whether the pool may split group ``g``'s loop (over its placed operands ``op``, ``Places.group``) although
    it stores by an index: each scatter's writes at one position ``i0`` of the split (outermost) axis land in a
    slab of its output, ``[i0 * s0, (i0 + 1) * s0)`` with ``s0`` the output's stride along that axis, that no other
    position reaches.  Then chunks of that axis never write one element, and each element takes its adds from one
    ``i0`` in the serial order, so the sums are the same bits at every thread count.  Proven from the strides: the
    output is a fresh C-contiguous buffer (every stride a product of sizes, so none is negative), and the farthest
    element one position reaches, ``sum(s_d * (n_d - 1) for the other axes) + s_k * (size_k - 1)`` over the
    indexed axis ``k`` (its stride ``s_k``, an index checked and wrapped into ``[0, size_k)``), is under ``s0``.
    An index moving along the split axis leaves the output's stride 0 there (``Places._indexed``): never
    proven, it stays serial.  Symbolic sizes: only when the margin is the same constant for every size."""
    shape = op.shape
    if not shape:
        return False
    ns = len(g.scatters)
    first = len(g.gathers)
    for q in range(ns):
        po = op.out_places[len(op.out_places) - ns + q]
        os_ = op.out_strides[len(op.out_strides) - ns + q]
        stride, size = op.indexed[first + q]
        if known_equal(tuple(po.strides), tuple(c_strides(po.shape))) is not True:
            return False
        reach = stride * (size - 1)
        for d in range(1, len(shape)):
            reach = reach + os_[d] * (shape[d] - 1)
        margin = os_[0] - 1 - reach
        if type(margin) is not int:     # symbolic: a constant for every size, or not proven
            if known_equal(margin, hint_of(margin)) is not True:
                return False
            margin = hint_of(margin)
        if margin < 0:
            return False
    return True


def row_stashes(prog: Program, g, op):
    """A value a row chain stores only for its own later passes (``row_chains._schedule``: a softmax's
    exponentials, read back to divide by their sum) goes to a scratch row per index of the outermost dim (the one
    the pool splits) instead of a buffer of the whole space: each row's passes reuse that row, read back from L1,
    and the value never travels to memory (B9's softmax: 1 MiB a layer)."""
    places = prog.places
    shape = op.shape
    if not shape or not all(type(d) is int for d in shape):
        return
    for j, o in enumerate(g.outputs):
        if tuple(o.aval.shape) != tuple(g.shape) or id(o) in places.out_ids or o in places.inplace \
                or places.last_use.get(o, -1) > places.n or op.out_strides[j][-1] != 1:
            continue
        outer = shape[0] if len(shape) >= 2 else 1
        op.out_places[j] = places.scratch((outer * shape[-1],), o.aval.dtype)
        op.out_strides[j] = ([shape[-1]] if len(shape) >= 2 else []) + [0] * max(len(shape) - 2, 0) + [1]


def loop_facts(g, op):
    """``(classes, per_element, alias)`` of group ``g``'s loop over its operands ``op`` (``places.Places.group``):
    the inner layout class of each operand, the work of one element in the plan's cost unit (bytes moved plus
    arithmetic; a row kernel's counts every sweep of the row) and the operands' alias classes."""
    classes = [stride_class(st) for st in op.in_strides + op.out_strides]
    per_element = sum(p.dtype.itemsize for p in op.in_places + op.out_places) + g.arith_cost()
    if isinstance(g, RowGroup):     # each pass sweeps the row again: its reads and its arithmetic, recomputations too
        per_element += (len(g.passes) - 1) * sum(p.dtype.itemsize for p in op.in_places) \
            + max(g.cost - g.arith_cost(), 0.0)
    return classes, per_element, alias_classes(op.in_places + op.out_places)


def group_block(prog: Program, g, op, k, scattered=()):
    """Append group ``g``'s argument block for kernel ``k`` to the table: sizes, operands, then the slots its
    indexed accesses, reduction, partial sums, checks and guards read (``loops.gen_group``'s order)."""
    shape = op.shape
    prog.table.extend(size_arg(d) for d in shape)
    for p, s_ in zip(op.in_places + op.out_places, op.in_strides + op.out_strides):
        prog.operand(p, s_)
    if op.indexed:      # gathers' and scatters' indexed axes, then their index-error block (loops.gen_group)
        for stride, size in op.indexed:
            prog.table.extend([size_arg(stride), size_arg(size)])
        for e, po in zip(g.scatters, scattered):
            if adds_into_zeros(e):
                prog.table.append(size_arg(math.prod(po.shape)))
        prog.ierr_slots.append(len(prog.table))
        prog.table.append(0)
        for e in list(g.gathers) + list(g.scatters):
            prog.table.append(len(prog.index_steps))
            prog.index_steps.append(e)
    if g.reduce is not None:
        prog.table.append(size_arg(math.prod(g.reduce.outs[0].aval.shape)))
    # each fixed chunk of rows sums its columns into a partial row of its own (``loops.chunked_rows``)
    partials = []
    if isinstance(g, RowGroup) and k.parallel and g.columns:
        for e in g.columns:
            partials.append(prog.places.scratch((COLUMN_CHUNKS * size_arg(shape[-1]),), e.outs[0].aval.dtype))
            prog.slot_addr(partials[-1])
    elif not isinstance(g, RowGroup) and k.parallel and g.reduce is not None and len(shape) == 2 \
            and tuple(op.red_axes) == (0,):
        partials.append(prog.places.scratch((COLUMN_CHUNKS * size_arg(shape[-1]),), g.reduce.outs[0].aval.dtype))
        prog.slot_addr(partials[-1])
    if k.checks:
        prog.err_slots.append(len(prog.table))
        prog.table.append(0)
        prog.table.extend(k.checks)
    if k.guards:
        prog.ierr_slots.append(len(prog.table))
        prog.table.append(0)
        for e in k.guards:
            prog.table.append(len(prog.index_steps))
            prog.index_steps.append(e)
    return partials


@emits("view", target="cpu")
def view(prog: Program, e) -> bool:
    """A view op: a place over its input, no step; False when it is not a view of its input (a host step)."""
    return prog.places.view(e) is not None


@emits("gather", target="cpu")
def gather(prog: Program, e):
    """``x[i0, i1, ...]`` with one integer tensor per dim: a bounds-checked gather loop."""
    x, idx = e.ins[0], e.ins[1:]
    out = e.outs[0]
    k = gen_gather(e)
    it = out.aval.shape
    po = prog.places.assign(out)
    px = prog.place(x)
    st = Step("kernel", k, label="gather", shapes=[list(x.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table.extend(size_arg(d) for d in it)
    prog.slot_addr(px)
    prog.table.extend(px.strides)
    prog.table.extend(px.shape)
    for v in idx:
        prog.operand(prog.place(v), bcast_strides(prog.place(v), it))
    prog.operand(po, c_strides(it))
    prog.index_check_slot(e)
    prog.add(st)


@emits("scatter", target="cpu")
def scatter(prog: Program, e):
    """``x[i0, i1, ...] = v`` (or ``+=``): the base copied into the output, then a bounds-checked scatter loop."""
    base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
    out = e.outs[0]
    po = prog.places.assign(out)
    prog.copy_step(prog.place(base), po, "copy (index_put)")
    k = gen_scatter(e)
    it = _broadcast("index_put", [i.aval.shape for i in idx]) if idx else ()
    st = Step("kernel", k, label="scatter", shapes=[list(out.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table.extend(size_arg(d) for d in it)
    prog.slot_addr(po)
    prog.table.extend(po.strides)
    prog.table.extend(po.shape)
    pv = prog.place(v)
    prog.operand(pv, bcast_strides(pv, it))
    for iv in idx:
        prog.operand(prog.place(iv), bcast_strides(prog.place(iv), it))
    prog.index_check_slot(e)
    prog.add(st)


emits("scatter_reduce", target="cpu")(scatter)     # the same loop, combining with prod / max / min


@emits("scan", target="cpu")
def scan(prog: Program, e):
    """cumsum/cumprod along one axis: the other dims are the iteration space (codegen/kernels/scan_loops.py)."""
    x, out = e.ins[0], e.outs[0]
    ax = e.params["axis"]
    po = prog.places.assign(out)
    px = prog.place(x)
    ost = c_strides(out.aval.shape)
    outer = [d for i, d in enumerate(out.aval.shape) if i != ax]
    st = Step("kernel", gen_scan(e), label=e.op.name, shapes=[list(x.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table.extend(size_arg(d) for d in outer)
    prog.operand(px, [s for i, s in enumerate(px.strides) if i != ax])
    prog.operand(po, [s for i, s in enumerate(ost) if i != ax])
    prog.table.extend([size_arg(out.aval.shape[ax]), size_arg(px.strides[ax]), size_arg(ost[ax])])
    prog.add(st)


@emits("nonzero", target="cpu")
def nonzero(prog: Program, e):
    """nonzero_bounded: a data-dependent count of coordinates into a buffer of the bound's rows
    (codegen/kernels/nonzero_loops.py)."""
    x, out = e.ins[0], e.outs[0]
    po = prog.places.assign(out)
    px = prog.place(x)
    st = Step("kernel", gen_nonzero(e), label=e.op.name, shapes=[list(x.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table.extend(size_arg(d) for d in x.aval.shape)
    prog.operand(px, px.strides)
    prog.operand(po, c_strides(out.aval.shape))
    prog.table.append(size_arg(out.aval.shape[0]))
    prog.add(st)


@emits("host", target="cpu")
def host(prog: Program, e):
    """An op with no loop form runs its NumPy impl: the graph gets a Python driver."""
    prog.native = False
    st = Step("py", label=e.op.name, eqn=e, shapes=[list(v.aval.shape) for v in e.ins], scope=e.scope)
    st.ins = tuple(prog.place(v) for v in e.ins)
    st.out = [prog.places.assign(o) for o in e.outs]
    prog.add(st)


__all__ = ["fused_group", "emit_group", "scatters_own_rows", "loop_facts", "group_block", "view", "gather", "scatter", "scan", "nonzero", "host"]
