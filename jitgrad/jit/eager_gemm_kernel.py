"""Eager matrix products on the compiled path's small-product kernel (``codegen/kernels/small_gemm.py``) rather
than SciPy's OpenBLAS.

An OpenBLAS ``?gemm`` call packs both operands into its blocked layout and clears C (beta = 0) before its
multiply-add loop, whatever the size.  Counted on B3's five 256 x 64 x 256-class products (callgrind, Haswell
kernels, 2026-11-30): 8.06M instructions a step in OpenBLAS (1.09M packing, 0.73M clearing C, 5.42M multiply-adds)
against 5.96M in the small kernel, which reads its operands in place and holds tiles of C in registers; B3's warm
step 10.64M -> 9.09M instructions (``benchmarks/b3_counts.py --instructions``).

Served (the ``matmul`` OpDef's ``eager_kernel`` chooser, so eager dispatch and pullback plans both ask it once per
signature): ``(m, k) @ (k, n)`` of one float dtype with ``m, n, k >= 2`` (``?gemv`` keeps the one-row and
one-column products, ``ir/ops/blas_gemv.py``; ``matmul``'s impl its outer products) and from ``blas.EAGER_MIN_MACS`` to ``MAX_MACS`` multiply-adds (measured:
``benchmarks/eager_gemm_counts.py``).  The kernel hands a product over its own ``small_gemm.MAX_MACS`` to BLAS,
so a call is cut into blocks of rows under it; each element of C is one sum over ``p`` ascending whichever
block or thread computes it, so the cut changes no bits.  A transposed right operand (``g @ W.T``) the kernel
packs only up to ``small_gemm.PACK_MAX`` elements: a bigger one is copied C-ordered first (the same bits).
Operands that are neither C- nor F-ordered, or unaligned, run the fallback (OpenBLAS).

Linked as ``jit/eager_kernels.py`` links its kernels: the module is one object per machine in the disk cache,
loaded (or built, ~0.5 s of LLVM) on the build thread once calls have spent ``eager_kernels.REQUEST_AFTER_S`` in
OpenBLAS (``JITGRAD_EAGER_KERNELS=sync``: at the first call); calls run OpenBLAS until it is linked.

Bits: a compiled graph calls this kernel for products up to ``small_gemm.SMALL_MACS`` multiply-adds and OpenBLAS
above; eager now calls it up to ``MAX_MACS``.  Between the two (B3's products) eager and compiled GEMMs sum in a
different order (tests compare them with tolerances); below, eager's OpenBLAS GEMMs already differed from the
compiled kernel, and now agree with it for C- and F-ordered operands.

Knobs: ``JITGRAD_EAGER_GEMM_KERNEL=0`` keeps OpenBLAS; ``JITGRAD_EAGER_GEMM_KERNEL_MAX`` the largest product
(multiply-adds) it serves; ``JITGRAD_SMALL_GEMM=0`` (the compiled path's) turns it off too, at link time.
"""
from __future__ import annotations

import ctypes
import os
import threading
from time import perf_counter

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt, eager_threads, settings
from ..ir.ops import blas
from . import eager_kernels

ENABLED = os.environ.get("JITGRAD_EAGER_GEMM_KERNEL", "1").strip().lower() not in ("0", "off", "false", "no")
MIN_MACS = blas.EAGER_MIN_MACS      # below: NumPy's matmul (linalg._matmul_for_signature), not a raw GEMM
# the largest product served (multiply-adds).  Counted per call against OpenBLAS's (benchmarks/eager_gemm_counts.py,
# callgrind, Haswell kernels): 0.76-0.78x its instructions from 64^3 to B3's 256 x 64 x 256, 0.92x at 256^3, 1.02x at
# 512^3; the kernel does not block for caches, so it stops where its operands outgrow L2 (256^3: 2^24)
MAX_MACS = int(os.environ.get("JITGRAD_EAGER_GEMM_KERNEL_MAX", str(1 << 24)))
# (small_gemm's own limits, copied: its module takes ~0.3 s to import, and a chooser runs at a signature's first
# call; a test keeps them equal)
KERNEL_MAX_MACS = 1 << 21
PACK_MAX = 8192
COUNTS = {"kernel_calls": 0, "blas_calls": 0, "copied_operands": 0}
_FN = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))
_N, _T = ctypes.c_char(b"N"), ctypes.c_char(b"T")
_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer
_KEEP: list = []        # alpha and beta per dtype: their addresses stay valid while the module lives


class _Link:
    """The small-product module in this process: ``fns[dtype]`` the ctypes callables once linked (None before);
    ``state`` new -> queued -> ready | failed.  Queued on the build thread as ``eager_kernels``' structures are
    (the attributes its fork and exit handlers read: ``run``, ``pending``, ``error``)."""

    def __init__(self):
        self.fns = None
        self.state = "new"
        self.spent = 0.0
        self.error = None
        self.run = self.pending = None
        self.lock = threading.Lock()

    def request(self) -> None:
        with self.lock:
            if self.state != "new":
                return
            self.state = "queued"
        if eager_kernels.SYNC:
            self._build(False)
            return
        from ..codegen.native import build_thread
        build_thread.queue_background(self, build_thread.EAGER)

    def _build(self, background: bool) -> None:
        try:
            if background:
                from ..codegen.native import build_thread
                with build_thread.compiling() as go:
                    if not go:
                        self.state = "new"
                        return
                    self._link()
            else:
                self._link()
        except Exception as e:  # noqa: BLE001 - calls keep OpenBLAS; the reason is kept for inspection
            self.error = f"{type(e).__name__}: {e}"
            self.state = "failed"

    def _link(self) -> None:
        from ..codegen.kernels import small_gemm
        from ..ir.ops.blas_library import gemm_address
        if not small_gemm.ENABLED:
            raise RuntimeError("JITGRAD_SMALL_GEMM=0")
        if (small_gemm.MAX_MACS, small_gemm.PACK_MAX) != (KERNEL_MAX_MACS, PACK_MAX):
            raise RuntimeError("small_gemm's limits moved: update eager_gemm_kernel's copies")
        fns = {}
        for name, dtype, ctype in (("sgemm", np.float32, ctypes.c_float), ("dgemm", np.float64, ctypes.c_double)):
            one, zero = ctype(1.0), ctype(0.0)
            _KEEP.extend((one, zero))
            fns[np.dtype(dtype)] = (_FN(small_gemm.address(name, gemm_address)), _addressof(one), _addressof(zero))
        self.fns = fns
        self.state = "ready"


LINK = _Link()
_TRANS = (_addressof(_N), _addressof(_T))


def _cut(m: int, parts: int) -> list:
    """``m`` rows as ``parts`` spans of nearly equal height."""
    q, r = divmod(m, parts)
    spans, r0 = [], 0
    for i in range(parts):
        r1 = r0 + q + (i < r)
        spans.append((r0, r1))
        r0 = r1
    return spans


def _sizes_address(n, rows, k, lda, ldb) -> int:
    """The address of a block's sizes (int32 n, rows, k, lda, ldb, ldc), one array per tuple in the process: two
    callables made for one signature (a pullback plan's form checked against its trace at these sizes,
    ``runtime/backward/trace_compare.py``) then hold equal values and compare as the same call."""
    key = (n, rows, k, lda, ldb)
    got = _SIZE_ADDRESSES.get(key)
    if got is None:
        arr = blas._SIZES(n, rows, k, lda, ldb, n)
        _KEEP.append(arr)
        got = _SIZE_ADDRESSES[key] = _addressof(arr)
    return got


_SIZE_ADDRESSES: dict = {}


def _product(m: int, k: int, n: int, dtype, fallback):
    """The callable of one ``(m, k) @ (k, n)`` signature of float ``dtype``: the kernel once linked, else
    ``fallback``."""
    item = dtype.itemsize
    # column-major, as BLAS sees C-ordered arrays: C^T (n x m) = op(y^T) (n x k) op(x^T) (k x m), cut along C^T's
    # columns (x's rows) into blocks each under the kernel's own limit
    block = max(1, KERNEL_MAX_MACS // (n * k))
    parts = min(m // blas.MIN_BLOCK_ROWS, m * n * k // blas.BLAS_THREADED_MACS)     # blas._rows_on_threads' cut
    spans = {}      # (r0, r1, lda, ldb) -> [(first row, its size block's address (int32 n, rows, k, lda, ldb, ldc))]

    def blocks(r0, r1, lda, ldb):
        key = (r0, r1, lda, ldb)
        got = spans.get(key)
        if got is None:
            got = []
            for s0 in range(r0, r1, block):
                got.append((s0, _sizes_address(n, min(s0 + block, r1) - s0, k, lda, ldb)))
            spans[key] = got
        return got

    def kernel_rows(fn, one, zero, ta, tb, pa, pb, pc, step_b, cut):
        for s0, ad in cut:
            fn(ta, tb, ad, ad + 4, ad + 8, one, pa, ad + 12, pb + s0 * step_b, ad + 16, zero, pc + s0 * n * item,
               ad + 20)

    shape = (m, n)
    link, counts, state = LINK, COUNTS, settings.STATE
    whole = {(lda, ldb): blocks(0, m, lda, ldb) for lda in (n, k) for ldb in (k, m)}   # one thread's calls

    def gemm_small_kernel(x, y):
        fns = link.fns
        if fns is None:
            if link.state == "new":
                if eager_kernels.SYNC or link.spent >= eager_kernels.REQUEST_AFTER_S:
                    link.request()
                    fns = link.fns
                else:
                    t0 = perf_counter()
                    out = fallback(x, y)
                    link.spent += perf_counter() - t0
                    counts["blas_calls"] += 1
                    return out
            if fns is None:
                counts["blas_calls"] += 1
                return fallback(x, y)
        fx, fy = x.flags, y.flags
        if not (fx.aligned and fy.aligned):
            counts["blas_calls"] += 1
            return fallback(x, y)
        if fx.c_contiguous:             # B = x^T read in place: element (p, i) at p + i k
            tb, ldb, step_b, xb = _TRANS[0], k, k * item, x
        elif fx.f_contiguous:           # x^T C-ordered (k, m): op(B) = B^T, element (p, i) at i + p m
            tb, ldb, step_b, xb = _TRANS[1], m, item, x.T
        else:
            counts["blas_calls"] += 1
            return fallback(x, y)
        if fy.c_contiguous:             # A = y^T: element (j, p) at j + p n
            ta, lda, ya = _TRANS[0], n, y
        elif fy.f_contiguous:
            if n * k <= PACK_MAX:       # the kernel packs op(A) = A^T, A = y^T C-ordered (n, k)
                ta, lda, ya = _TRANS[1], k, y.T
            else:                       # too big for its pack: a C-ordered copy (the same sums)
                ta, lda, ya = _TRANS[0], n, np.ascontiguousarray(y)
                counts["copied_operands"] += 1
        else:
            counts["blas_calls"] += 1
            return fallback(x, y)
        fn, one, zero = fns[dtype]
        c = np.empty(shape, dtype)
        try:
            pa = _addressof(_from_buffer(ya))
        except (TypeError, ValueError):     # read-only
            pa = ya.ctypes.data
        try:
            pb = _addressof(_from_buffer(xb))
        except (TypeError, ValueError):
            pb = xb.ctypes.data
        pc = _addressof(_from_buffer(c))
        threads = eager_threads.split_threads(parts) if parts >= 2 and state.num_threads != 1 else 1
        if threads < 2:
            for s0, ad in whole[lda, ldb]:      # (kernel_rows inline: a frame fewer a product)
                fn(ta, tb, ad, ad + 4, ad + 8, one, pa, ad + 12, pb + s0 * step_b, ad + 16, zero,
                   pc + s0 * n * item, ad + 20)
        else:
            eager_threads.run_split([(kernel_rows, (fn, one, zero, ta, tb, pa, pb, pc, step_b,
                                                    blocks(r0, r1, lda, ldb))) for r0, r1 in _cut(m, threads)])
        counts["kernel_calls"] += 1
        return c
    return gemm_small_kernel


@published("OpDef.eager_kernel", name="matmul")
def matmul_eager_kernel(avals, params, fallback):
    """The small-product kernel of eager ``matmul`` (``eager_gemm_kernel.py``): for two float matrices of one
    dtype, ``m, n, k >= 2``, from ``MIN_MACS`` to ``MAX_MACS`` multiply-adds; else None."""
    if not (ENABLED and eager_kernels.ENABLED) or len(avals) != 2:
        return None
    x, y = avals
    if x.ndim != 2 or y.ndim != 2 or x.dtype is not y.dtype or x.dtype not in (dt.float32, dt.float64) \
            or x.weak or y.weak:
        return None
    (m, k), n = x.shape, y.shape[1]
    if not all(type(s) is int for s in (m, k, n)) or min(m, k, n) < 2:
        return None
    if not MIN_MACS <= m * k * n <= MAX_MACS:
        return None
    return _product(m, k, n, x.dtype.np, fallback)


def linked() -> bool:
    """Whether the kernel is linked into this process."""
    return LINK.fns is not None


def link() -> bool:
    """Link the kernel now, in the calling thread (tests, benchmarks: without waiting for the build thread's other
    jobs); whether it is linked."""
    if LINK.fns is None:
        LINK.state = "queued"
        LINK._build(False)
    return linked()


__all__ = ["matmul_eager_kernel", "linked", "link", "LINK", "COUNTS", "ENABLED", "MIN_MACS", "MAX_MACS"]
