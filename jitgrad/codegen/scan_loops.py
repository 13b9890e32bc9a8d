"""Kernel source for scans along one axis (``cumsum``, ``cumprod``).

The iteration space is the input's shape without the scan axis; each point runs the scan serially along the
axis.  Block: outer dims; x (address, outer strides); out (address, outer strides); the axis length, x's and
out's strides along it.  Both operands are read through strides (a reversed or transposed view costs nothing),
and ``reverse`` walks the axis from its end.  Like every kernel here its text depends on structure only.
"""
from __future__ import annotations

from .loops import STRIDED, Kernel, _Nest, _load, _tname


def gen_scan(e) -> Kernel:
    """cumsum(x; axis, reverse) or cumprod(x; axis) into a fresh output."""
    x, out = e.ins[0], e.outs[0]
    r = max(x.aval.ndim - 1, 0)
    classes = [STRIDED, STRIDED]
    nest = _Nest(r, classes, False)
    nest.operand(0, x.aval.dtype)
    nest.operand(1, out.aval.dtype)
    base = nest.slot
    nest.pre += [f"m = A[{base}]", f"sx = A[{base + 1}]", f"so = A[{base + 2}]"]
    nest.slot += 3
    od = out.aval.dtype
    tgt_index = nest.index(1)
    rng = "range(m - 1, -1, -1)" if e.params.get("reverse") else "range(m)"
    prod = e.op.name == "cumprod"
    x_at = _load(0, nest, x.aval.dtype, " + t * sx")
    body = [f"acc = {_tname(od)}({1 if prod else 0})",
            f"for t in {rng}:",
            f"    acc = {_tname(od)}(acc {'*' if prod else '+'} {_tname(od)}({x_at}))",
            f"    p1[{tgt_index} + t * so] = acc"]
    lines = ["def kernel(A):"] + nest.loops(body, (0, 1))
    return Kernel("scan", "\n".join(lines), rank=r, operands=[x, out], classes=classes, parallel=False,
                  label=e.op.name)


__all__ = ["gen_scan"]
