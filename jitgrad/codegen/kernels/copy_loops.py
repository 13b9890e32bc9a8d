"""Kernels over one or two operands that no fusion group made: copies (materialising views, writing state back,
BLAS operand copies) and the anomaly check of a value a BLAS call or a gather produced, built as kernel IR with
``loops.py``'s nests."""
from __future__ import annotations

from ...ir import dtypes as dt
from . import kernel_ir as ki
from .kernel_ir import I64, cast, const, read, select
from .loops import CONTIG, Kernel, _Nest, _load, _report, _store, _T
from .math_table import MathCalls


def copy_loop(b, src_dtype: dt.DType, dst_dtype: dt.DType, rank: int, cls: str, parallel=False, per_element=None,
              block=None, rows=None):
    """``dst[...] = src`` (with a cast) emitted into builder ``b`` over argument block ``block`` (default: the
    kernel's; ``rows``: a part of the outer loop, as ``loops._Nest`` takes them); its alias classes (None)."""
    nest = _Nest(b, rank, [cls, CONTIG], parallel, per_element, block, rows)
    nest.operand(0, src_dtype)
    nest.operand(1, dst_dtype)
    with b.capture() as body:
        v = _load(0, nest, src_dtype)
        v = b.let("v", v if dst_dtype is dt.bool_ else cast(v, _T(dst_dtype)))
        b.emit([_store(1, nest, dst_dtype, v)])
    nest.loops(body, (0, 1))
    return nest.alias


def gen_copy(src_dtype: dt.DType, dst_dtype: dt.DType, rank: int, cls: str, parallel=False,
             per_element=None) -> Kernel:
    """``dst[...] = src`` (with a cast): materialising views, writing state back, BLAS operand copies
    (``per_element``: as ``loops.gen_group``'s)."""
    b = ki.Builder()
    copy_loop(b, src_dtype, dst_dtype, rank, cls, parallel, per_element)
    return Kernel("copy", b.finish(), rank=rank, operands=[None, None], classes=[cls, CONTIG],
                  parallel=parallel, label="copy", per_element=per_element)


def gen_check(dtype: dt.DType, rank: int, cls: str) -> Kernel:
    """Anomaly check of a value no fused loop produced (a BLAS result, a gather): count non-finite elements."""
    b = ki.Builder()
    nest = _Nest(b, rank, [cls], False)
    nest.operand(0, dtype)
    k0, q0 = b.var("k0", I64), b.var("q0", I64)
    with b.capture() as body:
        v = b.let("v", _load(0, nest, dtype))
        b.set(k0, read(k0) + select(MathCalls(dtype.name).isfinite(v), 0, 1))
        b.set(q0, read(q0) + select(v == v, 0, 1))
    pre = [ki.Assign(k0, const(0)), ki.Assign(q0, const(0))]
    nest.loops(body, (0,), pre, _report(b, [0], nest.slot))
    return Kernel("check", b.finish(), rank=rank, operands=[None], classes=[cls], parallel=False,
                  checks=[0], label="check")


__all__ = ["copy_loop", "gen_copy", "gen_check"]
