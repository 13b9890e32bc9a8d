"""Eager matmuls over OpenBLAS's threading threshold as blocks of rows (or columns) on the worker pool, and stacks
of small products (attention's (batch, head) products) as runs of their matrices there.

``blas.matmul2d`` splits such a product into blocks of C's rows, each a single-threaded OpenBLAS call starting at
a multiple of OpenBLAS's row unit (so the result has one call's bits, ``blas.row_blocks``), and ran the blocks on
Python threads (``ir/eager_threads.py``).  Each block then woke a sleeping thread: 0.2-0.5 ms on this VM's idle
vCPUs, more than the work of a B3 product's block (~25 us), so products under ``blas.EAGER_SPLIT_MACS`` were not
split at all and B3's eager step ran its five 4.2M multiply-add products on one core (275 of its 660 us, counted
2026-12-01).  Here the blocks go to the pool's workers in one native call (``codegen/native/gemm_blocks.py``), and
the workers spin after each round (1 ms after an eager one: ``threads.spin_for``), longer than most gaps between
an eager step's products, so they are awake when the next product comes.  Where C is wider than tall the blocks
are of its columns, as the compiled path cuts (each call packs the operand its blocks share: by rows, both threads
packed all of a weight gradient's 2 MB operand).  The bits are one call's: only who runs the blocks changes.

The seam is the one of ``eager_kernels.py``: a chooser published into the ``matmul`` OpDef's ``eager_kernel``
slot, asked once per signature (``(..., m, k) @ (k, n)`` of one float dtype, concrete sizes) for the callable
eager dispatch keeps; forward products and pullback plans' products alike.  Per call the product is one call on the
calling thread (the same bits) at ``set_num_threads(1)``, while the pool's busy sign stands (another process holds
a core: ``gemm_blocks.busy``), while the eager splits' pacer holds splits (a call whose blocks finished long after
the caller's own: ``eager_threads.note_split``) and while a launch holds the pool (another thread's compiled call).
A product under ``WAKE_MACS`` that finds a worker asleep (after a long stretch of other work) runs alone too, and
nudges the worker awake for the next one: its round would wait for the wake-up, longer than its block.
While the build thread works (a script's first steps run eagerly while their compiled code builds) the blocks
leave it a core.  ``JITGRAD_POOLED_GEMM=0`` turns the path off.

A stack (``stacked_gemm.splits``: one batch shape, each product too small for OpenBLAS's own threads) is one
``?gemm`` call per matrix, each addressed by its own row's offsets (any strided stack of C- or F-laid matrices:
attention's ``k.mT`` cut from a fused QKV projection needs no copy), a run of the matrices per thread, in the same
native call (``_stacked``); at one thread, or when the pool is not to be used, the calling thread runs the same
calls alone (``gemm_blocks.alone``), so a stack's bits never depend on the thread count, and each matrix has the
bits of its own 2-D product (``x[i] @ y[i]``, as torch promises for ``bmm``).  The calls are jitgrad's BLAS
(SciPy's OpenBLAS, whose kernels ``blas_library`` may switch to AVX-512), not NumPy's: on an AVX-512 AMD host
NumPy's runs its Haswell kernels, which took 113-157 us for B9's (16, 4) stack of 64x32 @ 32x64 at two threads
where SciPy's took 47-54 us (``np.matmul`` at one thread: 174-215 us; 2026-12-02).  A layout the rows cannot
address (a broadcast matrix, a negative stride) runs ``fallback``: NumPy's stack, its bits, for that layout always.
It replaces the eager Python threads' split (``ir/ops/stacked_gemm.py``, still the path, with NumPy's bits, under
``JITGRAD_POOLED_STACKS=0``), whose hand-off (a sleeping thread's wake-up, then the GIL) made the split slower than
one thread on the Intel host (a part of 200-350 us, the whole call 550-1200 us) and tripped the eager pacer, which
then held the step's big products on one thread as well (B9 eager, 30 steps: 1-14 pacer trips against 7-41,
2026-12-01).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..codegen.native import build_thread, busy_sign, gemm_blocks
from ..codegen.native.threads import LAUNCH_LOCK
from ..declarations import published
from ..ir import eager_threads, settings
from ..ir.ops import blas, stacked_gemm
from ..ir.ops.eager_gemm import operands

ENABLED = os.environ.get("JITGRAD_POOLED_GEMM", "1") != "0"
# stacks of small products on the pool (read per call; off: ``stacked_gemm``'s split between Python threads)
STACKS = os.environ.get("JITGRAD_POOLED_STACKS", "1") != "0"
_N = b"N"
# the transpose flags' bytes, at addresses that live as long as the process (a block's row points at them)
_FLAG = {f: ctypes.create_string_buffer(f) for f in (b"N", b"T")}
_FLAG_AT = {f: ctypes.addressof(b) for f, b in _FLAG.items()}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# A round's blocks run on the pool, so the pacer judges a round by the pool's own late-round rule (``busy_sign``):
# late when the caller waited more than LATE_SHARE x its own block + LATE_S, + WAKE_S when the round woke a
# sleeping worker (an idle vCPU wakes in 0.2-0.5 ms).  A core taken by another process costs scheduler slices
# (1.5-4.4 ms measured), so a taken core still shows.  The pacer's own rule for Python threads' splits (2.5 x the
# own part + 50 us) held a quiet host's blips: on the Intel host of 2026-12-01 one back-to-back 1024x128 @ 128x512
# product's block in a few hundred finished ~1.3 ms late (663 us own at the median), and each such blip held the
# next 32-1024 products on one thread.
WAKE_S = busy_sign.WAKE_NS * 1e-9
LATE_S = busy_sign.LATE_NS * 1e-9
LATE_SHARE = busy_sign.LATE_SHARE
# a product with fewer multiply-adds than this that finds a worker asleep runs on the calling thread alone and nudges
# the worker awake for the next one (``gemm_blocks``): a round waits for the wake-up (0.2-0.5 ms on this VM) and
# then the worker's block (~90 GMAC/s a core here), one call for the whole product; at 2^25 (0.36 ms alone) about
# even.  Timed (quiet, 2026-12-01, fresh processes): B9 eager 48-49 ms at 2^27 (its 67M products alone after every
# eager kernel's round, whose worker sleeps at once), 39.0-39.7 at 2^25, 40.1 at 0 (always a round); B1 eager 5.5,
# 4.0, 3.6 ms; B3 (4.2M products, workers awake between them) 1.10-1.13x PyTorch with the rule, 1.10-1.15x at 0
WAKE_MACS = int(float(os.environ.get("JITGRAD_POOLED_WAKE_MACS", 1 << 25)))
# counted, for tests: products pooled and alone; stacks pooled, alone, and on ``fallback`` (NumPy's stack)
STATS = {"pooled_calls": 0, "one_thread_calls": 0, "stacked_calls": 0, "stacked_one_thread": 0, "stacked_numpy": 0}
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


@published("OpDef.eager_kernel", name="matmul")
def matmul_eager_kernel(avals, params, fallback):
    """The pooled GEMM of eager ``matmul`` for a signature it serves (``(..., m, k) @ (k, n)`` of one float dtype,
    more multiply-adds than OpenBLAS threads at, rows enough for blocks; or a stack of small products:
    ``_stack_kernel``), else None (``fallback`` serves it)."""
    if not ENABLED or len(avals) != 2:
        return None
    x, y = avals
    if x.ndim < 2 or y.ndim < 2 or x.dtype is not y.dtype or x.dtype.np not in _FLOATS:
        return None
    if any(type(d) is not int for d in x.shape + y.shape):
        return None
    if y.ndim != 2:
        return _stack_kernel(x, y, fallback)
    k, (k2, n) = x.shape[-1], y.shape
    m = 1
    for d in x.shape[:-1]:      # (..., m, k) @ (k, n): a Linear layer on a batch of sequences, one GEMM over all rows
        m *= d
    if k != k2 or k < 2 or m * n * k <= blas.BLAS_THREADED_MACS:
        return None
    dtype = x.dtype.np
    if blas.BLAS_PACER or not blas.raw_gemm_ready() or blas.row_blocks(m, dtype, 2, n * k) is None:
        return None
    if gemm_blocks.runner() is None:
        return None
    return _pooled(m, k, n, dtype, fallback, x.shape[:-1] + (n,) if x.ndim > 2 else None)


def _allowed(own: float, woke: bool) -> float:
    """The longest wait for a round's blocks that is not a taken core (the pool's late-round rule)."""
    return LATE_SHARE * own + LATE_S + (WAKE_S if woke else 0.0)


def block_threads(most: int) -> int:
    """The threads a pooled product's blocks run on now, at most ``most``: one while the pool's busy sign stands
    and while the eager splits' pacer holds them (a call waited long for its other blocks: another process took a
    core); a core fewer while the build thread works (a script's first steps run eagerly while their compiled code
    builds: the build must not wait)."""
    return 1 if gemm_blocks.busy() else eager_threads.split_threads(most - build_thread.busy())


def _pooled(m: int, k: int, n: int, dtype, fallback, folded):
    """The callable of one signature: ``(x, y) -> x @ y``; ``folded``: the result's shape when ``x`` has more than
    two dims (its leading ones folded into rows: a view of a C-ordered ``x``, else ``fallback``)."""
    gemm = blas.gemm_address("sgemm" if dtype == np.float32 else "dgemm")
    _, one, zero = blas._raw_gemm(dtype)
    item = dtype.itemsize
    shape = (m, n)
    runner = gemm_blocks.runner()
    address = blas.array_address
    run, asleep, nudge = runner.run, runner.asleep, runner.nudge
    macs = m * n * k
    use = blas.BlasPacer.use
    state = settings.STATE
    pool_threads = gemm_blocks.threads()
    # (x's flag, y's flag, threads) -> (the blocks' rows, their address, how many), or None: one call.  The rows
    # are only read (each call adds its operands' addresses to their offsets): one buffer per plan serves every call
    plans: dict = {}
    sizes_kept = []         # the size arrays the rows point at

    def plan(tx, ldx, ty, ldy, threads):
        # each call packs the operand its blocks share: blocks of C's columns (all of x, y's columns) when C is
        # wider than tall, as the compiled path cuts (``batched_gemm``), else of its rows; the other way when that
        # one has no exact cut.  B9's weight gradients (128 x 1024 @ 1024 x 512) by rows: both threads packed all
        # 2 MB of y, 1.19x at two threads; by columns 1.6-1.8x (2026-12-02)
        for by_rows in (n <= m, n > m):
            blocks = blas.row_blocks(m if by_rows else n, dtype, threads, (n if by_rows else m) * k, by_rows)
            if blocks and len(blocks) >= 2 and blas.blocks_exact(dtype, by_rows, m, k, n, blocks):
                break
        else:
            return None
        rows = np.zeros((len(blocks), gemm_blocks.ROW), np.int64)
        for i, (s0, s1) in enumerate(blocks):
            # blas._gemm_rows' call: C^T = op(y^T) op(x^T) column-major, x's rows [s0, s1) or y's columns; the
            # addresses of x, y and C (arguments 8, 6, 11) are the call's, x's, y's and C's plus the offsets after
            # the arguments
            if by_rows:
                sizes = blas._SIZES(n, s1 - s0, k, ldy, ldx, n)
                offsets = (s0 * (ldx if tx == _N else 1) * item, 0, s0 * n * item)
            else:
                sizes = blas._SIZES(s1 - s0, m, k, ldy, ldx, n)
                offsets = (0, s0 * (1 if ty == _N else ldy) * item, s0 * item)
            sizes_kept.append(sizes)
            ad = _addressof(sizes)
            rows[i] = (_FLAG_AT[ty], _FLAG_AT[tx], ad, ad + 4, ad + 8, one, 0, ad + 12, 0, ad + 16, zero, 0,
                       ad + 20) + offsets
        return rows, _addressof(_from_buffer(rows)), len(blocks)

    def gemm_pooled(x, y):
        threads = state.num_threads or pool_threads
        if threads < 2 or (folded is not None and not x.flags.c_contiguous):
            STATS["one_thread_calls"] += 1
            return fallback(x, y)       # (one call; or a batch that does not fold into rows)
        if folded is not None:
            x = x.reshape(m, k)
        x, tx, ldx, y, ty, ldy = operands(x, y, m, n)
        c = np.empty(shape, dtype)
        key = (tx, ty, block_threads(min(threads, pool_threads)))
        p = plans.get(key, False)
        if p is False:
            p = plans[key] = plan(tx, ldx, ty, ldy, key[2]) if key[2] > 1 else None
        if p is not None and macs < WAKE_MACS and asleep():     # (the module's value: tests set it)
            nudge()         # (awake for the next product; this one would wait for the wake-up)
            p = None
        if p is None or not LAUNCH_LOCK.enter_now():
            STATS["one_thread_calls"] += 1
            use(1)
            blas._gemm_rows(x, tx, ldx, y, ty, ldy, c, 0, m)      # one call: the blocks' bits
            return c if folded is None else c.reshape(folded)
        try:
            use(1)      # each block on one OpenBLAS thread (a no-op when it is already)
            own, whole, woke = run(p[1], p[2], gemm, address(x), address(y), _addressof(_from_buffer(c)))
        finally:
            LAUNCH_LOCK.__exit__(None, None, None)
        eager_threads.note_split(own, whole, _allowed(own, woke))     # (read per call: tests script it)
        STATS["pooled_calls"] += 1
        return c if folded is None else c.reshape(folded)
    gemm_pooled.__name__ = "matmul_pooled"
    return gemm_pooled


def _stack_kernel(x, y, fallback):
    """The pooled stack of ``x @ y`` (avals): attention's (batch, head) products, a stack ``stacked_gemm.splits``
    accepts (one batch shape, each product too small for OpenBLAS's threads), else None."""
    dtype = x.dtype.np
    if not stacked_gemm.splits(x.shape, y.shape, dtype, dtype) or not blas.raw_gemm_ready():
        return None
    if x.shape[-2] * x.shape[-1] * y.shape[-1] < blas.EAGER_MIN_MACS:
        return None         # (tiny matrices: a BLAS call each costs more than their work; NumPy loops them itself)
    if gemm_blocks.alone() is None:
        return None
    return _stacked(x.shape[:-2], x.shape[-2], x.shape[-1], y.shape[-1], dtype, fallback)


def _layout(a, item: int):
    """The BLAS flag and leading dimension of stack ``a``'s matrices (one unit stride, the other a whole number of
    elements past the row or column), or None (``fallback`` runs such a stack)."""
    r, c = a.shape[-2], a.shape[-1]
    s0, s1 = a.strides[-2], a.strides[-1]
    if s1 == item and s0 % item == 0 and s0 >= c * item:
        return _N, s0 // item
    if s0 == item and s1 % item == 0 and s1 >= r * item:
        return b"T", s1 // item
    return None


def _stacked(lead, m: int, k: int, n: int, dtype, fallback):
    """The callable of one stack signature: ``(x, y) -> x @ y``, the (m, k) @ (k, n) products of a stack of shape
    ``lead``, each one single-threaded ``?gemm`` call of jitgrad's BLAS (each matrix the bits of its own 2-D
    product), runs of them on the pool's threads, as ``gemm_pooled`` runs a big product's row blocks (the same rules
    for one thread), else all of them on the calling thread (``gemm_blocks.alone``: the same calls)."""
    gemm = blas.gemm_address("sgemm" if dtype == np.float32 else "dgemm")
    _, one, zero = blas._raw_gemm(dtype)
    item = dtype.itemsize
    runner, alone = gemm_blocks.runner(), gemm_blocks.alone()     # (no pool: every call alone, the same calls)
    address = blas.array_address
    count = int(np.prod(lead))
    shape = tuple(lead) + (m, n)
    macs = count * m * n * k
    use = blas.BlasPacer.use
    state = settings.STATE
    pool_threads = gemm_blocks.threads()
    index = np.indices(lead).reshape(len(lead), count).T        # each matrix's index in the stack
    plans: dict = {}        # the operands' strides and layouts -> (the rows, their address)
    sizes_kept = []

    def plan(xs, ys, tx, ldx, ty, ldy):
        sizes = blas._SIZES(n, m, k, ldy, ldx, n)
        sizes_kept.append(sizes)
        ad = _addressof(sizes)
        rows = np.zeros((count, gemm_blocks.ROW), np.int64)
        # blas._gemm_rows' call for each matrix: C_i^T = op(y_i^T) op(x_i^T), column-major, at its offsets
        rows[:] = (_FLAG_AT[ty], _FLAG_AT[tx], ad, ad + 4, ad + 8, one, 0, ad + 12, 0, ad + 16, zero, 0, ad + 20,
                   0, 0, 0)
        rows[:, -3] = index @ np.array(xs, np.int64)
        rows[:, -2] = index @ np.array(ys, np.int64)
        rows[:, -1] = np.arange(count) * (m * n * item)
        return rows, _addressof(_from_buffer(rows))

    def stack_pooled(x, y):
        lx = _layout(x, item) if STACKS else None
        ly = _layout(y, item) if lx is not None else None
        if ly is None or x.dtype != dtype or y.dtype != dtype or min(x.strides[:-2] + y.strides[:-2]) < 0:
            STATS["stacked_numpy"] += 1
            return fallback(x, y)       # (a layout the rows cannot address: NumPy's stack, its bits)
        key = x.strides[:-2] + y.strides[:-2] + lx + ly
        p = plans.get(key)
        if p is None:
            p = plans[key] = plan(x.strides[:-2], y.strides[:-2], *lx, *ly)
        c = np.empty(shape, dtype)
        at = (address(x), address(y), _addressof(_from_buffer(c)))
        threads = state.num_threads or pool_threads
        t = block_threads(min(threads, pool_threads, count)) if threads >= 2 and runner is not None else 1
        if t > 1 and macs < WAKE_MACS and runner.asleep():
            runner.nudge()      # (awake for the next product; this one would wait for the wake-up)
            t = 1
        use(1)
        if t > 1 and LAUNCH_LOCK.enter_now():
            try:
                own, whole, woke = runner.run(p[1], count, gemm, *at, -(-count // t))
            finally:
                LAUNCH_LOCK.__exit__(None, None, None)
            eager_threads.note_split(own, whole, _allowed(own, woke))
            STATS["stacked_calls"] += 1
            return c
        alone(p[1], count, gemm, *at)
        STATS["stacked_one_thread"] += 1
        return c
    stack_pooled.__name__ = "matmul_stack_pooled"
    return stack_pooled


__all__ = ["matmul_eager_kernel", "block_threads", "ENABLED", "STATS"]
