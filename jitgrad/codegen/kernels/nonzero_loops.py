"""The kernel of ``nonzero_bounded`` (a data-dependent size: ``ir/passes/bounded_sizes.py``), built as kernel IR.

One serial walk of ``x`` in row-major order: each nonzero element's coordinates go to the next row of the output
(a (bound, rank) int64 buffer), then the rows left repeat the first one (zeros when there is none): the padding
indexes a selected element, so what is computed from it is what the data gives (no spurious NaN for anomaly
mode, no zero divisor).
Block: x's dims; x (address, strides); out (address, row stride, column stride); out's rows.  Like every kernel
here it depends on structure only (rank, dtype), never on sizes.
"""
from __future__ import annotations

from ...ir import dtypes as dt
from . import kernel_ir as ki
from .kernel_ir import I64, const, read
from .loops import STRIDED, Kernel, _Nest, _elem, _load


def gen_nonzero(e) -> Kernel:
    """nonzero_bounded(x, n; size) into a fresh (size, x.ndim) int64 output (``n``, the count, is computed by
    the graph beside it)."""
    x, out = e.ins[0], e.outs[0]
    r = x.aval.ndim
    b = ki.Builder()
    nest = _Nest(b, r, [STRIDED], False)
    nest.operand(0, x.aval.dtype)
    s = nest.slot
    po = b.let("po", b.A[s].ptr(_elem(dt.int64)))
    s_row, s_col, rows = (b.let(n, b.A[s + k]) for k, n in enumerate(("s_row", "s_col", "rows"), 1))
    nest.slot += 4
    k = b.var("k", I64)
    b.set(k, const(0))
    with b.capture() as body:
        v = _load(0, nest, x.aval.dtype)
        with b.if_(v if x.aval.dtype is dt.bool_ else v != 0):
            for d in range(r):
                b.store(po, read(k) * s_row + d * s_col, nest.i(d))
            b.set(k, read(k) + 1)
    nest.loops(body, (0,))
    with b.loop("j", rows, start=read(k)) as j:
        for d in range(r):      # the first row again (zeros when there is none)
            b.store(po, j * s_row + d * s_col, ki.select(read(k) > 0, ki.load(po, d * s_col), const(0)))
    return Kernel("nonzero", b.finish(), rank=r, operands=[x, out], classes=[STRIDED, STRIDED], parallel=False,
                  label=e.op.name)


__all__ = ["gen_nonzero"]
