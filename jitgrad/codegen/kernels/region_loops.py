"""Kernels of region steps (``region_steps.py``), built as kernel IR: a strided region read, written or added
into (``index_put`` with a basic index), and row moves by an index (an embedding's lookup and its backward)."""
from __future__ import annotations

from ...ir import dtypes as dt
from . import kernel_ir as ki
from .index_checks import record_index_error
from .loops import CONTIG, Kernel, _elem, _load, _Nest, _store, _T


def gen_region(dtype: dt.DType, rank: int, src_cls: str, dst_cls: str, accumulate: bool) -> Kernel:
    """``dst[...] = src`` or ``dst[...] += src`` over ``rank`` dims, both operands strided."""
    b = ki.Builder()
    nest = _Nest(b, rank, [src_cls, dst_cls], False)
    nest.operand(0, dtype)
    nest.operand(1, dtype)
    with b.capture() as body:
        v = _load(0, nest, dtype)
        if accumulate:
            v = ki.cast(v + _load(1, nest, dtype), _T(dtype))
        v = b.let("v", v)
        b.emit([_store(1, nest, dtype, v)])
    nest.loops(body, (0, 1))
    return Kernel("copy", b.finish(), rank=rank, operands=[None, None], classes=[src_cls, dst_cls],
                  parallel=False, label="index_put (region)")


def row_kernel(kind, dtype: dt.DType, idx_dtype: dt.DType, accumulate=False) -> Kernel:
    """Rows ``x[idx[i]]`` copied out (``gather``) or written/added in (``scatter``), the row loop contiguous.
    Block: n (indices), c (row length), x/out (address, row stride, rows), idx (address, stride), the other
    operand (address, row stride), IE (the index-error array's address, step id)."""
    b = ki.Builder()
    A = b.A
    t = _elem(dtype)
    n, c = b.let("n", A[0]), b.let("c", A[1])
    px, sx, nx = b.let("px", A[2].ptr(t)), b.let("sx", A[3]), b.let("nx", A[4])
    pi, si = b.let("pi", A[5].ptr(_elem(idx_dtype))), b.let("si", A[6])
    po, so = b.let("po", A[7].ptr(t)), b.let("so", A[8])
    with b.loop("i", n) as i:
        r0 = b.let("r0", ki.cast(pi[i * si], ki.I64))
        j0 = b.let("j0", ki.select(r0 < 0, r0 + nx, r0))
        with b.if_(ki.or_(j0 < 0, j0 >= nx)):
            b.emit([record_index_error(b, 9, 1, 0, (r0, ki.const(0)))])
            b.continue_()
        base = b.let("b", j0 * sx)
        o = b.let("o", i * so)
        with b.loop("j", c) as j:
            if kind == "gather":
                b.store(po, o + j, px[base + j])
            elif accumulate:
                b.store(px, base + j, ki.cast(px[base + j] + po[o + j], _T(dtype)))
            else:
                b.store(px, base + j, po[o + j])
    return Kernel(kind, b.finish(), rank=2, operands=[None, None, None], classes=[CONTIG] * 3,
                  parallel=False, label=f"row {kind}")


__all__ = ["gen_region", "row_kernel"]
