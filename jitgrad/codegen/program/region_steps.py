"""``index_put`` with a basic index (slices, integers, None, Ellipsis), and row indexing ``w[idx]`` /
``index_put(w, v, idx)`` (an embedding and its backward), as native steps of the CPU target (emitters of the
``region``, ``row_gather`` and ``row_scatter`` kinds, ``lowering.emits``).

The backward of basic indexing (``q, k, v = x.split(C, dim=2)``, ``x[:, -1]``) is ``index_put(zeros, g;
spec, accumulate=True)``.  Without a native form it was a NumPy host step, and one host step gives the whole graph
a Python driver.  Here it is two loops: the base copied into the output's buffer, then the value written (or
added) into the region the index selects, a strided view of that buffer, read and written in place by a
``region`` kernel whose destination may have any strides.
"""
from __future__ import annotations

import math

from ...ir import dtypes as dt
from ...ir.symbolic import size_arg
from .layout import Program, Step, stride_class
from ..lowering import emits
from ..places import bcast_strides, coalesce, region_place
from ..kernels.region_loops import gen_region, row_kernel
from .region_chains import is_place, zero_chain


@emits("region", target="cpu")
def region(prog: Program, e) -> bool:
    """``index_put`` with a basic index: the base copied (or reused), the value written into a strided region."""
    base, v = e.ins[0], e.ins[1]
    out = e.outs[0]
    acc = e.params["accumulate"]
    if out.aval.dtype is dt.bool_ and acc or v.aval.dtype is not out.aval.dtype:
        return False
    chain = zero_chain(prog, e)
    if chain is not None:
        # every element of a zero base written once (region_chains): no zeros and a plain write, or nothing at
        # all where a product already wrote the value in place
        po = chain.place(prog)
        area = region_place(po, e.params["spec"])      # (slices: always a view)
        prog.places[out] = po
        if is_place(prog.place(v), area):
            return True
        acc = False
    else:
        reuse = prog.places.base_reusable(base, out)
        po = reuse if reuse is not None else prog.places.buffer(out, out.aval.shape, out.aval.dtype)
        area = region_place(po, e.params["spec"])
        if area is None:
            return False
        prog.places[out] = po
        if reuse is not None:
            # the base is a dead intermediate: add into its buffer, no copy (a chain of index_puts that does
            # not start from zeros)
            prog.places.hold(po.root, out)
        else:
            prog.copy_step(prog.place(base), po, "copy (index_put)")
    pv = prog.place(v)
    it = area.shape
    sst = bcast_strides(pv, it) if tuple(pv.shape) != tuple(it) else list(pv.strides)
    shape, (sst, dst) = coalesce(list(it), [sst, list(area.strides)])
    k = gen_region(out.aval.dtype, len(shape), stride_class(sst), stride_class(dst), acc)
    st = Step("kernel", k, label="index_put (region)", shapes=[list(out.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table.extend(size_arg(d) for d in shape)
    prog.operand(pv, sst)
    prog.operand(area, dst)
    prog.add(st)
    return True

def _row_operands(prog: Program, x, idx, v):
    """(index element stride, value row stride) when BLAS-like row moves can read the operands in place
    (``x``'s rows unit-stride, the index one strided run, the value's rows unit-stride), else None."""
    c = math.prod(x.aval.shape[1:])
    if v is None:
        px = prog.place(x)
        col = _row_stride(px.strides[1:], px.shape[1:])
        if col is None or (c > 1 and col != 1):
            return None
    pi = prog.place(idx)
    si = _row_stride(pi.strides, pi.shape)
    if si is None:
        return None
    sv = 0
    if v is not None:
        pv = prog.place(v)
        ni = idx.aval.ndim
        full = tuple(idx.aval.shape) + tuple(x.aval.shape[1:])
        vst = bcast_strides(pv, full) if tuple(pv.shape) != full else list(pv.strides)
        sv, col = _row_stride(vst[:ni], full[:ni]), _row_stride(vst[ni:], full[ni:])
        if sv is None or col is None or (c > 1 and col != 1):
            return None
    return si, sv

def _emit_rows(prog: Program, e, kind, x, idx, pdata, pother, si, so):
    st = Step("kernel", row_kernel(kind, x.aval.dtype, idx.aval.dtype, e.params.get("accumulate", False)),
              label=f"row {kind}", shapes=[list(x.aval.shape), list(idx.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table += [size_arg(math.prod(idx.aval.shape)), size_arg(math.prod(x.aval.shape[1:]))]
    prog.slot_addr(pdata)
    prog.table += [size_arg(pdata.strides[0]) if pdata.shape[0] > 1 else 0, size_arg(x.aval.shape[0])]
    prog.slot_addr(prog.place(idx))
    prog.table.append(size_arg(si))
    prog.slot_addr(pother)
    prog.table.append(size_arg(so))
    prog.index_check_slot(e)
    prog.add(st)

@emits("row_gather", target="cpu")
def row_gather(prog: Program, e) -> bool:
    """``x[idx]`` (rows): one row copy per index, bounds-checked."""
    x, idx = e.ins
    out = e.outs[0]
    ops = _row_operands(prog, x, idx, None)
    if ops is None or not out.aval.size:
        return False
    po = prog.places.assign(out)
    _emit_rows(prog, e, "gather", x, idx, prog.place(x), po, ops[0], math.prod(x.aval.shape[1:]))
    return True

@emits("row_scatter", target="cpu")
def row_scatter(prog: Program, e) -> bool:
    """``index_put(base, v, idx)`` (rows, optionally accumulating): the base copied, then one row write or add
    per index, in index order (repeated indices accumulate as ``np.add.at`` does)."""
    base, v, idx = e.ins
    out = e.outs[0]
    if v.aval.dtype is not out.aval.dtype or out.aval.dtype is dt.bool_ or not out.aval.size:
        return False
    ops = _row_operands(prog, base, idx, v)
    if ops is None:
        return False
    po = prog.places.assign(out)
    prog.copy_step(prog.place(base), po, "copy (index_put)")
    _emit_rows(prog, e, "scatter", base, idx, po, prog.place(v), ops[0], ops[1])
    return True


def _row_stride(strides, shape):
    """The one element stride that walks ``shape`` with ``strides`` as a single run (0 for a single element), or
    None."""
    sh, (st,) = coalesce(list(shape), [list(strides)])
    if not sh:
        return 0
    return st[0] if len(sh) == 1 else None


__all__ = ["region", "row_gather", "row_scatter"]
