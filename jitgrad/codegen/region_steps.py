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

import numpy as np

from ..ir import dtypes as dt
from .layout import Program, Step, stride_class
from .loops import CONTIG, Kernel, _load, _Nest, _store, _tname
from .lowering import emits
from .places import bcast_strides, coalesce, region_place


def gen_region(dtype: dt.DType, rank: int, src_cls: str, dst_cls: str, accumulate: bool) -> Kernel:
    """``dst[...] = src`` or ``dst[...] += src`` over ``rank`` dims, both operands strided."""
    nest = _Nest(rank, [src_cls, dst_cls], False)
    nest.operand(0, dtype)
    nest.operand(1, dtype)
    v = _load(0, nest, dtype)
    if accumulate:
        v = f"{_tname(dtype)}({v} + {_load(1, nest, dtype)})"
    body = [f"v = {v}", _store(1, nest, dtype, "v")]
    lines = ["def kernel(A):"] + nest.loops(body, (0, 1))
    return Kernel("copy", "\n".join(lines), rank=rank, operands=[None, None], classes=[src_cls, dst_cls],
                  parallel=False, label="index_put (region)")


def _row_kernel(kind, dtype: dt.DType, idx_dtype: dt.DType, accumulate=False) -> Kernel:
    """Rows ``x[idx[i]]`` copied out (``gather``) or written/added in (``scatter``), the row loop contiguous.
    Block: n (indices), c (row length), x/out (address, row stride, rows), idx (address, stride), the other
    operand (address, row stride), IE (the index-error array's address, step id)."""
    from .loops import _NP_TYPE
    t, it = _NP_TYPE[dtype.name], _NP_TYPE[idx_dtype.name]
    tn = _tname(dtype)
    if kind == "gather":
        move = "store(po, o + j, px[b + j])"
    elif accumulate:
        move = f"store(px, b + j, {tn}(px[b + j] + po[o + j]))"
    else:
        move = "store(px, b + j, po[o + j])"
    lines = ["def kernel(A):", "    n = A[0]", "    c = A[1]", f"    px = ptr_{t}(A[2])", "    sx = A[3]",
             "    nx = A[4]", f"    pi = ptr_{it}(A[5])", "    si = A[6]", f"    po = ptr_{t}(A[7])", "    so = A[8]",
             "    for i in range(n):", "        r0 = int64(pi[i * si])", "        j0 = r0 + nx if r0 < 0 else r0",
             "        if j0 < 0 or j0 >= nx:", "            ie = ptr_i64(A[9])", "            if ie[0] == 0:",
             "                ie[0] = 1", "                ie[1] = A[10]", "                ie[2] = r0",
             "                ie[3] = 0", "            continue", "        b = j0 * sx", "        o = i * so",
             "        for j in range(c):", "            " + move]
    return Kernel(kind, "\n".join(lines), rank=2, operands=[None, None, None], classes=[CONTIG] * 3,
                  parallel=False, label=f"row {kind}")


@emits("region", target="cpu")
def region(prog: Program, e) -> bool:
    """``index_put`` with a basic index: the base copied (or reused), the value written into a strided region."""
    base, v = e.ins[0], e.ins[1]
    out = e.outs[0]
    acc = e.params["accumulate"]
    if out.aval.dtype is dt.bool_ and acc or v.aval.dtype is not out.aval.dtype:
        return False
    reuse = prog.places.base_reusable(base, out)
    po = reuse if reuse is not None else prog.places.buffer(out, out.aval.shape, out.aval.dtype)
    area = region_place(po, e.params["spec"])
    if area is None:
        return False
    prog.places[out] = po
    if reuse is not None:
        # the base is a dead intermediate: add into its buffer, no copy (a chain of index_puts, e.g. the
        # q, k, v gradients of a split written into one qkv gradient)
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
    prog.table.extend(int(d) for d in shape)
    prog.operand(pv, sst)
    prog.operand(area, dst)
    prog.add(st)
    return True

def _row_operands(prog: Program, x, idx, v):
    """(index element stride, value row stride) when BLAS-like row moves can read the operands in place
    (``x``'s rows unit-stride, the index one strided run, the value's rows unit-stride), else None."""
    c = int(np.prod(x.aval.shape[1:]))
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
    st = Step("kernel", _row_kernel(kind, x.aval.dtype, idx.aval.dtype, e.params.get("accumulate", False)),
              label=f"row {kind}", shapes=[list(x.aval.shape), list(idx.aval.shape)], scope=e.scope)
    st.block = len(prog.table)
    prog.table += [int(np.prod(idx.aval.shape)), int(np.prod(x.aval.shape[1:]))]
    prog.slot_addr(pdata)
    prog.table += [int(pdata.strides[0]) if pdata.shape[0] > 1 else 0, int(x.aval.shape[0])]
    prog.slot_addr(prog.place(idx))
    prog.table.append(int(si))
    prog.slot_addr(pother)
    prog.table.append(int(so))
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
    _emit_rows(prog, e, "gather", x, idx, prog.place(x), po, ops[0], int(np.prod(x.aval.shape[1:])))
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


__all__ = ["region", "row_gather", "row_scatter", "gen_region"]
