"""A batch of small products fetches each next product's operands while it computes the current one.

A ``bgemm`` step of small products (attention's per-(batch, head) products) reads each operand as a few short
strided runs: a head of ``q`` is 64 rows of 128 bytes, 1536 bytes apart.  In a training step the backward's
products read what the forward saved, long out of cache, and each run's lines are fetched only when the kernel
loads them.  So before calling product ``t``, the batch loop prefetches the lines of product ``t + 1``'s A, B
and C (C for writing): measured in B9's step at one thread (load 11, alternating steps), the 24 batches
took 3.68 ms without and 3.15 ms with (the backward's 12: 2.06 -> 1.64 ms).  The products' arithmetic and its
order are unchanged, so the bits are.

The block's slot after the last entry's size holds the item size to prefetch with, 0 for none
(``batched_gemm._emit_gemm_block``: small products only); a product whose operands span more than
``MAX_LINES`` cache lines is not prefetched (the kernel's own streams are long enough there).  The entry's loops
(``entry._batched_gemm``, ``entry._gemm_chunk``) emit ``prefetch_next`` as LLVM text; the Python driver's loop
(``abi.call_gemm_batched``) does the same in Numba.
"""
from __future__ import annotations

from ..kernels.llvm_text import I1, I8, I32, I64, PTR, VOID, for_loop

LINE = 64               # bytes a prefetch fetches
MAX_LINES = 2048        # 128 KiB of operands: more is not "small", and would crowd out the current product's lines
SLOT = 15               # the prefetch item size: block word ``14 + 4 * nd + SLOT``


def prefetch_next(b, fn, slots, args, addrs, item):
    """At ``b``: prefetch the operands of the product whose 13 ``?gemm`` arguments are ``args`` (i64 addresses,
    as the block holds them) with A, B and C at ``addrs`` (i64 values), ``item`` bytes an element (an i64 value;
    0: nothing).  ``slots``: three i64 allocas of the function's entry block (the loops' counters)."""
    mod = fn.module
    pf = mod.declare("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])

    def arg(k, ty):
        v = b.load(ty, b.cast("inttoptr", I64, args[k], PTR))
        return b.cast("sext", ty, v, I64) if ty != I64 else v

    def is_n(k):            # transposition flag 'N' or 'n'
        c = arg(k, I8)
        return b.op("or", I1, b.icmp("eq", I64, c, "78"), b.icmp("eq", I64, c, "110"))
    m, n, k = arg(2, I32), arg(3, I32), arg(4, I32)
    na, nb = is_n(0), is_n(1)
    # column-major op(A) is m x k, op(B) k x n, C m x n: (columns, elements a column, leading dimension)
    spans = [(b.select(na, I64, k, m), b.select(na, I64, m, k), arg(7, I32)),
             (b.select(nb, I64, n, k), b.select(nb, I64, k, n), arg(9, I32)),
             (n, m, arg(12, I32))]
    lines = "0"
    for cols, rows, _ in spans:
        per = b.op("add", I64, b.op("sdiv", I64, b.op("mul", I64, rows, item), str(LINE)), "2")
        lines = b.op("add", I64, lines, b.op("mul", I64, cols, per))
    ok = b.op("and", I1, b.icmp("sgt", I64, item, "0"), b.icmp("sle", I64, lines, str(MAX_LINES)))
    with b.if_then(ok):
        for (cols, rows, ld), base, write in zip(spans, addrs, ("0", "0", "1")):
            stride = b.op("mul", I64, ld, item)
            length = b.op("mul", I64, rows, item)

            def column(c, base=base, stride=stride, length=length, write=write):
                start = b.op("add", I64, base, b.op("mul", I64, c, stride))
                end = b.op("add", I64, start, length)
                for_loop(b, fn, slots[1], "pf_line{}", b.op("and", I64, start, str(-LINE)),
                      lambda a: b.icmp("slt", I64, a, end),
                      lambda a: b.call(VOID, pf, [f"ptr {b.cast('inttoptr', I64, a, PTR)}", f"i32 {write}", "i32 3",
                                                  "i32 1"]),
                      lambda a: b.op("add", I64, a, str(LINE)))
            for_loop(b, fn, slots[0], "pf_col{}", "0", lambda c, cols=cols: b.icmp("slt", I64, c, cols), column,
                  lambda c: b.op("add", I64, c, "1"))


__all__ = ["prefetch_next", "LINE", "MAX_LINES", "SLOT"]
