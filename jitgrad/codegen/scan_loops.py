"""Kernels for scans along one axis (``cumsum``, ``cumprod``), built as kernel IR.

The iteration space is the input's shape without the scan axis; each point runs the scan serially along the
axis.  Block: outer dims; x (address, outer strides); out (address, outer strides); the axis length, x's and
out's strides along it.  Both operands are read through strides (a reversed or transposed view costs nothing),
and ``reverse`` walks the axis from its end.  Like every kernel here it depends on structure only.
"""
from __future__ import annotations

from . import kernel_ir as ki
from .loops import STRIDED, Kernel, _Nest, _load, _T


def gen_scan(e) -> Kernel:
    """cumsum(x; axis, reverse) or cumprod(x; axis) into a fresh output."""
    x, out = e.ins[0], e.outs[0]
    r = max(x.aval.ndim - 1, 0)
    classes = [STRIDED, STRIDED]
    b = ki.Builder()
    nest = _Nest(b, r, classes, False)
    nest.operand(0, x.aval.dtype)
    nest.operand(1, out.aval.dtype)
    base = nest.slot
    m, sx, so = (b.let(n, b.A[base + k]) for k, n in enumerate(("m", "sx", "so")))
    nest.slot += 3
    T = _T(out.aval.dtype)
    prod = e.op.name == "cumprod"
    acc = b.var("acc", T)
    with b.capture() as body:
        b.set(acc, ki.cast(ki.const(1 if prod else 0), T))
        rev = e.params.get("reverse")
        with b.loop("t", -1 if rev else m, start=m - 1 if rev else 0, step=-1 if rev else 1) as t:
            xv = ki.cast(_load(0, nest, x.aval.dtype, t * sx), T)
            b.set(acc, ki.cast(ki.read(acc) * xv if prod else ki.read(acc) + xv, T))
            b.store(nest.p[1], nest.index(1) + t * so, ki.read(acc))
    nest.loops(body, (0, 1))
    return Kernel("scan", b.finish(), rank=r, operands=[x, out], classes=classes, parallel=False,
                  label=e.op.name)


__all__ = ["gen_scan"]
