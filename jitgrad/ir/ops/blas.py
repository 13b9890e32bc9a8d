"""The BLAS behind ``matmul`` in every backend: SciPy's OpenBLAS, with kernels chosen for this CPU.

Eager 2-D float matmuls (and the reference interpreter) call SciPy's ``sgemm``/``dgemm`` through
:func:`matmul2d`; compiled graphs call the same routines by address (``blas_library.gemm_address``). One library,
so eager and compiled agree to the last bit on a GEMM, and one place that decides which kernels run.

The library itself (loading SciPy's OpenBLAS, its kernel choice for this CPU, its entry points) is
``blas_library.py``.

On how many threads: the end of this module holds the thread policy eager and compiled GEMMs share (small ones on
one thread, large ones as blocks of rows on single-threaded OpenBLAS where its row unit is known, so their bits
are one thread's whatever runs the blocks: ``row_blocks``; others on every thread, a count fixed by the
configuration so the bits are: ``all_threads``, ``eager_threads``; ``BlasPacer`` paces it with the load when asked
to).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import numpy as np

from .. import eager_threads as _eager_split, settings
from .blas_gemv import matvec
from .blas_library import LIBRARY, gemm_address, info, load, thread_control, told_count

# below this many multiply-adds the f2py call costs more than NumPy's own matmul saves
EAGER_MIN_MACS = 32 * 32 * 32
_GEMM = {}
_KEEP: list = []        # the ctypes constants whose addresses _raw_gemm hands out


def _operand(x):
    """``(F-ordered array M, trans)`` with ``op(M) = x.T``: BLAS sees row-major data as its transpose."""
    if x.flags.c_contiguous:
        return x.T, 0
    if x.flags.f_contiguous:
        return x, 1
    return np.ascontiguousarray(x).T, 0


def _raw_operand(x):
    """``(array, trans, ld)``: BLAS (column-major) sees a C-ordered matrix as its transpose, an F-ordered one as is
    (then transposed by flag)."""
    if x.flags.c_contiguous:
        return x, b"N", max(1, x.shape[1])
    if x.flags.f_contiguous:
        return x, b"T", max(1, x.shape[0])
    x = np.ascontiguousarray(x)
    return x, b"N", max(1, x.shape[1])


def _raw_gemm(dtype):
    """``(gemm, &1.0, &0.0)``: SciPy OpenBLAS's Fortran ``?gemm`` called through ctypes (the routine SciPy's
    wrappers call, without importing ``scipy.linalg``, ~0.3 s) and the addresses of the alpha and beta it is
    called with, made once per dtype (read-only: calls on any thread share them)."""
    hit = _GEMM.get(("raw", dtype))
    if hit is None:
        name = "sgemm" if dtype == np.float32 else "dgemm"
        fn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))(gemm_address(name))
        ctype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        one, zero = ctype(1.0), ctype(0.0)
        _KEEP.extend((one, zero))       # the addresses stay valid while the module lives
        hit = _GEMM[("raw", dtype)] = (fn, ctypes.addressof(one), ctypes.addressof(zero))
    return hit


def matmul2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D float32/float64 arrays of one dtype, through SciPy's BLAS (transposed views by flag)."""
    if "raw" not in _GEMM and np.float32 not in _GEMM:     # (``_raw_gemm`` may have filled in its own entries)
        raw_gemm_ready()
    if "raw" in _GEMM:
        # C = A B computed as C^T = B^T A^T in column-major, written straight into a C-ordered result
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        if (m == 1 or n == 1) and k and m * n * k <= BLAS_THREADED_MACS:
            # one row or column of output: ?gemv, which packs nothing (blas_gemv.py)
            if BlasPacer._current != 1:
                BlasPacer.use(1)
            c = matvec(a, b)
            if c is not None:
                return c
        c = np.empty((m, n), a.dtype)
        if m == 0 or n == 0:
            return c
        if k == 0:
            c[...] = 0
            return c
        a, ta, lda = _raw_operand(a)
        b, tb, ldb = _raw_operand(b)
        if m * n * k <= BLAS_THREADED_MACS:     # eager_threads' one thread, without its context manager's calls
            if BlasPacer._current != 1:
                BlasPacer.use(1)
            _gemm_rows(a, ta, lda, b, tb, ldb, c, 0, m)
            return c
        if not BLAS_PACER and _rows_on_threads(a, ta, lda, b, tb, ldb, c):
            return c
        with eager_threads(m, n, k):
            _gemm_rows(a, ta, lda, b, tb, ldb, c, 0, m)
        return c
    mb, tb = _operand(b)
    ma, ta = _operand(a)
    with eager_threads(a.shape[0], b.shape[1], a.shape[1]):
        return _GEMM[a.dtype](1.0, mb, ma, trans_a=tb, trans_b=ta).T


def raw_gemm_ready() -> bool:
    """Whether GEMMs call SciPy's routine by ctypes (else its f2py wrappers); decided on the first call."""
    if "raw" not in _GEMM and np.float32 not in _GEMM:
        load()
        if LIBRARY["lib"] is None or getattr(LIBRARY["lib"], "scipy_sgemm_", None) is None:
            from scipy.linalg import blas as fblas
            _GEMM[np.dtype(np.float32)] = fblas.sgemm
            _GEMM[np.dtype(np.float64)] = fblas.dgemm
        else:
            _GEMM["raw"] = True
    return "raw" in _GEMM


def matmul_add_into(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """``c += a @ b`` in place by the GEMM itself (beta = 1: no array for the product), for the products
    :func:`matmul` runs as :func:`matmul2d` (2-D float32/float64 of one dtype, at least ``EAGER_MIN_MACS``), ``c``
    C-ordered, writable and apart from ``a`` and ``b``; the same blocks and threads as :func:`matmul2d`.  False
    (nothing written) for anything else, or without the raw GEMM."""
    if not (a.ndim == b.ndim == c.ndim == 2 and a.dtype == b.dtype == c.dtype and a.dtype.kind == "f"
            and a.dtype.itemsize in (4, 8) and a.shape[1] == b.shape[0] and c.shape == (a.shape[0], b.shape[1])
            and a.size * b.shape[1] >= EAGER_MIN_MACS and c.flags.c_contiguous and c.flags.writeable
            and 0 not in a.strides and 0 not in b.strides):
        return False
    if "raw" not in _GEMM and np.float32 not in _GEMM:
        matmul2d(a[:0], b[:, :0])       # (the GEMM's one-time set-up)
    if "raw" not in _GEMM or np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return False
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a, ta, lda = _raw_operand(a)
    b, tb, ldb = _raw_operand(b)
    if m * n * k > BLAS_THREADED_MACS and not BLAS_PACER and _rows_on_threads(a, ta, lda, b, tb, ldb, c, True):
        return True
    with eager_threads(m, n, k):
        _gemm_rows(a, ta, lda, b, tb, ldb, c, 0, m, 0, None, True)
    return True


def _gemm_rows(a, ta, lda, b, tb, ldb, c, r0, r1, c0=0, c1=None, add=False) -> None:
    """``c[r0:r1, c0:c1] = a[r0:r1] @ b[:, c0:c1]`` (``+=`` with ``add``: GEMM's beta = 1) through SciPy's OpenBLAS
    (``a``, ``b`` as :func:`_raw_operand` hands them, ``c`` C-ordered), on the thread count OpenBLAS has now.
    Releases the GIL (a ctypes call)."""
    gemm, one, zero = _raw_gemm(c.dtype)
    n = c.shape[1]
    c1 = n if c1 is None else c1
    k = a.shape[1]
    item = c.itemsize
    # A's row r0: r0 rows of lda down a C-ordered A, r0 elements along an F-ordered one (BLAS sees its transpose);
    # B's column c0 likewise
    # (array_address inline: three frames fewer a call)
    x = a if ta == b"N" else a.T
    try:
        a_at = _addressof(_from_buffer(x))
    except (TypeError, ValueError):     # read-only, or empty
        a_at = x.ctypes.data
    x = b if tb == b"N" else b.T
    try:
        b_at = _addressof(_from_buffer(x))
    except (TypeError, ValueError):
        b_at = x.ctypes.data
    try:
        c_at = _addressof(_from_buffer(c))
    except (TypeError, ValueError):
        c_at = c.ctypes.data
    x = None
    a_at += r0 * (lda if ta == b"N" else 1) * item
    b_at += c0 * (1 if tb == b"N" else ldb) * item
    ints = _SIZES(c1 - c0, r1 - r0, k, ldb, lda, n)     # per call: the sizes (Fortran passes pointers)
    ad = _addressof(ints)
    gemm(tb, ta, ad, ad + 4, ad + 8, one, b_at, ad + 12, a_at, ad + 16, one if add else zero,
         c_at + (r0 * n + c0) * item, ad + 20)


_SIZES = ctypes.c_int * 6
_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


def array_address(x) -> int:
    """The address of C-ordered ``x``'s first element: through a ctypes view of its buffer where it is writable
    (~4,000 instructions), else ``x.ctypes.data`` (~11,000: NumPy builds a Python object per read)."""
    try:
        return _addressof(_from_buffer(x))
    except (TypeError, ValueError):     # read-only, or empty
        return x.ctypes.data


def matmul(a, b):
    """NumPy ``matmul`` semantics; large 2-D float GEMMs go to :func:`matmul2d`, small ones to :func:`dot2d`."""
    if (b.ndim == 2 and a.ndim >= 2 and a.dtype == b.dtype and a.dtype.kind == "f" and a.dtype.itemsize in (4, 8)
            and a.shape[-1] == b.shape[0]):
        if a.size * b.shape[1] >= EAGER_MIN_MACS:
            if a.ndim == 2:
                return matmul2d(a, b)
            if a.flags.c_contiguous:
                # (..., m, k) @ (k, n), a Linear layer on a batch of sequences: one GEMM over all rows (a view, no
                # copy) through the same BLAS as 2-D products, not NumPy's loop of small GEMMs
                return matmul2d(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))
        elif a.ndim == 2:
            return dot2d(a, b)
    return np.matmul(a, b)


# ndarray.dot of two float matrices calls the same GEMM as np.matmul without the generalized ufunc's iterator
# setup (about 4,000 instructions of an 8x8 product's 10,000); an operand with a zero stride is copied to a
# contiguous one, as _matmul_impl does for matmul
dot2d = np.ndarray.dot


def small_gemm_is_dot(a_ndim, b_ndim, a_dtype, b_dtype) -> bool:
    """Whether :func:`matmul` runs a product below its GEMM threshold as :func:`dot2d` (two float32 or float64
    matrices of one dtype)."""
    return a_ndim == 2 and b_ndim == 2 and a_dtype == b_dtype and np.dtype(a_dtype).itemsize in (4, 8) \
        and np.dtype(a_dtype).kind == "f"


# ------------------------------------------------------------------------------------------------ threads
# The thread policy of SciPy's OpenBLAS, for eager matmuls and compiled graphs alike (the same library, one
# process-wide thread count; ``codegen/native/threads.py`` sets it around compiled calls):
# - GEMMs of at most BLAS_THREADED_MACS multiply-adds run on one thread (OpenBLAS's own threshold, 65536 *
#   GEMM_MULTITHREAD_THRESHOLD (4); set explicitly for eager calls, so a count raised by other code, or another
#   OpenBLAS build's threshold, never wakes workers for them);
# - larger ones with rows enough for two blocks run as blocks of rows, each on one OpenBLAS thread (eager: on the
#   eager threads, ``_rows_on_threads``; compiled: on the pool, ``layout.Program.split_rows``): one thread's bits
#   whatever runs the blocks (the row blocks section at the end);
# - the others run on every thread: ``torch.set_num_threads``'s count, else the count OpenBLAS had when jitgrad
#   first used it (``all_threads``), set before every such call, so a count another call left behind (a small
#   GEMM's 1) never decides a large one's.
# A fixed configuration gives the same bits whatever the load: OpenBLAS's result depends on its thread count
# (its threads split the result into blocks whose edges take other kernels: measured 2026-11-30 on its Haswell
# kernels, 14 of 15 float32 shapes and 2 of 15 float64 ones differ between 1 and 2 threads, each count giving the
# same bits every call), so no pacer may change the count a GEMM runs on by default.  ``JITGRAD_BLAS_PACER=1``
# trades those bits for speed on a busy machine: one call ``SLOW`` x slower than the best of its kind means
# another process took a core, and the next calls run on one thread for a while (``BlasPacer``; eager GEMMs paced
# per size class).  Idle workers sleep after ~0.4 ms (``OPENBLAS_THREAD_TIMEOUT``, set by ``import jitgrad``).
BLAS_THREADED_MACS = 65536 * 4
# multiply-adds an eager GEMM's row block does at least: each wakes a sleeping thread, 0.2-0.5 ms on a VM's idle vCPU
EAGER_SPLIT_MACS = int(float(os.environ.get("JITGRAD_EAGER_SPLIT_MACS", 1 << 22)))
BLAS_PACER = os.environ.get("JITGRAD_BLAS_PACER", "0") == "1"
STATS = {"blas_backoffs": 0}    # drops to one thread (counted, for tests)


class BlasPacer:
    """Times one kind of BLAS work (a compiled graph's calls, or one shape of eager GEMM) and lowers SciPy's
    OpenBLAS to one thread while the calls show contention.  ``with pacer:`` around each call.  Only with
    ``JITGRAD_BLAS_PACER=1``: OpenBLAS's last bits depend on its thread count, so pacing it makes a GEMM's bits
    depend on the machine's load (see above).

    OpenBLAS splits a GEMM between its threads, which hand packed panels to each other through spin-waits
    several times per call: when another process takes a core, the thread there is descheduled for whole
    scheduler slices while the other spins.  Measured (2 cores, one spinning hog): a B1 step went from 2.7 ms to a
    median of 7-69 ms on two BLAS threads, and to 12 ms on one thread.  So a call slower than ``SLOW`` times the
    best at that thread count means contention, and the next ``HOLD`` calls run BLAS on one thread (doubled each
    time a retry on all threads is slow again, at most ``MAX_HOLD``), then one call tries all threads again.  The
    thread count is process-wide; the pacer's maximum is the count OpenBLAS had when it first ran (untold, the
    process's share of the cores: ``told_count``), and ``torch.set_num_threads``'s count when one is set."""
    SLOW = 3.0
    HOLD = 32
    MAX_HOLD = 1024
    _control = None             # (get, set) of OpenBLAS's thread count, or False: none
    _max = 1
    _current = None
    _lock = threading.Lock()

    def __init__(self):
        self.best = {}          # thread count -> fastest call seen (seconds per unit of work)
        self.left = 0           # calls still to run on one thread
        self.hold = self.HOLD
        self.n = 1
        self.t0 = 0.0
        self.work = 1           # the coming call's work (an eager GEMM's multiply-adds; 1: a graph's call)

    @classmethod
    def _init(cls):
        ctl = thread_control()
        cls._control = ctl or False
        if ctl:
            cls._max = cls._current = max(1, int(ctl[0]()))
            cls._max = cls._max if told_count() else min(cls._max, settings.core_share())

    @classmethod
    def use(cls, n: int) -> None:
        """Run SciPy's OpenBLAS on ``n`` threads from now on (a ctypes call only when the count changes)."""
        if cls._control is None:
            cls._init()
        if cls._control and n != cls._current:
            with cls._lock:
                if n != cls._current:
                    cls._control[1](n)
                    cls._current = n

    def __enter__(self):
        if BlasPacer._control is None:
            BlasPacer._init()
        if self.left > 0:
            self.left -= 1
            want = 1
        else:
            want = settings.STATE.num_threads or BlasPacer._max     # torch.set_num_threads wins
        if BlasPacer._control and want != BlasPacer._current:
            BlasPacer.use(want)
        self.n = want
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        dt = (time.perf_counter() - self.t0) / self.work
        n = self.n
        best = self.best.get(n)
        if best is None or dt < best:
            self.best[n] = dt
        if n > 1 and best is not None:
            if dt > self.SLOW * best:           # contended: one thread for a while, longer each time
                self.left = self.hold
                self.hold = min(2 * self.hold, self.MAX_HOLD)
                STATS["blas_backoffs"] += 1
            else:
                self.hold = self.HOLD


def all_threads() -> int:
    """The thread count GEMMs large enough for OpenBLAS to thread run on: ``torch.set_num_threads``'s, else the
    count OpenBLAS had when jitgrad first used it (``OPENBLAS_NUM_THREADS``, or its cores)."""
    if BlasPacer._control is None:
        BlasPacer._init()
    return settings.STATE.num_threads or BlasPacer._max


class _Threads:
    """A GEMM run on a thread count fixed by the configuration: one (too small for threads) or ``all_threads()``
    (the same count every call, whatever count an earlier call left)."""

    def __init__(self, one: bool):
        self.one = one

    def __enter__(self):
        BlasPacer.use(1 if self.one else all_threads())
        return self

    def __exit__(self, *exc):
        return None


_ONE_THREAD = _Threads(True)
ALL_THREADS = _Threads(False)
_EAGER_PACERS: dict = {}        # size class -> BlasPacer of the eager GEMMs of that class


def eager_threads(m: int, n: int, k: int):
    """What an eager ``(m, k) @ (k, n)`` GEMM on SciPy's OpenBLAS runs under (see the policy above): one thread, or
    ``all_threads()``.

    With ``JITGRAD_BLAS_PACER=1`` large GEMMs are paced per size class (their multiply-adds within a factor of
    two) and timed per multiply-add, so a sequence of ever new shapes (variable lengths) still shares what was
    learnt: a class's first call after a contended one runs on one thread, as a repeated shape's would."""
    macs = m * n * k
    if macs <= BLAS_THREADED_MACS:
        return _ONE_THREAD
    if not BLAS_PACER:
        return ALL_THREADS
    c = macs.bit_length()
    p = _EAGER_PACERS.get(c)
    if p is None:
        p = _EAGER_PACERS[c] = BlasPacer()
    p.work = macs
    return p


def set_threads(n: int) -> None:
    """``torch.set_num_threads``: OpenBLAS's thread count now (the pacers' maximum from then on)."""
    BlasPacer.use(n)


# ------------------------------------------------------------------------------------------------ row blocks
# A big GEMM split into blocks of C's rows, each one single-threaded OpenBLAS call, gives the bits of one
# single-threaded call of the whole product whatever the number of threads the blocks run on, when every block
# starts at a multiple of OpenBLAS's row unit: its micro-kernel computes C in tiles of that many rows (C's rows
# are the columns of the C^T BLAS computes: GEMM_UNROLL_N), and the rows after the last whole tile take narrower
# kernels whose sums differ in the last bits; a block starting on a tile edge is tiled as the whole product is.
# Measured 2026-11-30 on this VM's Haswell kernels: float32 12 rows, float64 2 (blocks of columns: float64 4,
# float32 none, every width up to 256 differs somewhere).  The unit is no part of OpenBLAS's interface, so it is
# derived once per process and dtype (``block_unit``: the smallest candidate whose blocks reproduce the whole
# product bit for bit on probe products), and a dtype without one is not split (OpenBLAS threads it itself).
# Eager GEMMs run their blocks on the eager threads (``ir/eager_threads.py``, whose pacer keeps them on the
# calling thread while another process holds a core: the same bits); compiled graphs on the pool's workers
# (``codegen/program/layout.Program.split_rows``).
MIN_BLOCK_ROWS = 32             # rows a block has at least (a thinner one packs B for little work)
UNIT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_UNITS: dict = {}               # (dtype, rows) -> unit, or None: no unit found
_UNIT_LOCK = threading.Lock()
# (m, k, n): edges in every direction, K past OpenBLAS's K block, blocks of MIN_BLOCK_ROWS rows or columns over
# SMALL_PATH_MACS (below), and 300 columns (float64 blocks of those differ on SkylakeX kernels from any start)
_PROBES = ((75, 800, 100), (100, 400, 90), (110, 300, 300))
STATS.update(gemm_split_calls=0, gemm_blocks=0, gemm_whole_one_thread=0)   # eager row splits (counted, for tests)
# OpenBLAS computes a product of at most SMALL_PATH_MACS multiply-adds on its small-matrix kernels where the core
# has them (its ``gemm_small_kernel_permit``: SkylakeX and later), which sum in another order than its blocked
# path: a block at or under it has other bits than the same rows of the whole product.  So no block is cut at or
# under it (a short last block joins the one before it: ``cut``), and the probes' blocks are over it.  Measured
# 2026-11-30 on an AVX-512 host (SkylakeX kernels): float32 blocks over it reproduce the whole product from any
# start, blocks under it nowhere; the old probes' blocks were all under it, so no row unit was found and B9's
# eager GEMMs ran on OpenBLAS's own threads.  Other cores (Haswell...) have no such path: the rule is off there.
SMALL_PATH_MACS = 100 ** 3
_SMALL_PATH_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})
_SMALL_PATH: list = []


def small_path_macs() -> int:
    """``SMALL_PATH_MACS`` when SciPy's OpenBLAS runs a core with small-matrix kernels, else 0 (no block rule)."""
    if not _SMALL_PATH:
        core = str(info()["corename"] or "").lower()
        _SMALL_PATH.append(SMALL_PATH_MACS if core in _SMALL_PATH_CORES else 0)
    return _SMALL_PATH[0]


def cut(total: int, height: int, per=None) -> list:
    """Blocks ``[(s, e)]`` of ``total`` rows (or columns) ``height`` apart, the last one the rows left; ``per``:
    the multiply-adds of one row, when the blocks must each be over ``small_path_macs()``: a last block at or under
    it joins the one before."""
    blocks = [(r, min(r + height, total)) for r in range(0, total, height)]
    if per and len(blocks) > 1 and (blocks[-1][1] - blocks[-1][0]) * per <= small_path_macs():
        blocks[-2:] = [(blocks[-2][0], total)]
    return blocks


def _probe(rows: bool, unit: int, products) -> bool:
    """Whether blocks starting at multiples of ``unit`` rows (or columns), at least ``MIN_BLOCK_ROWS`` high and
    each over ``SMALL_PATH_MACS`` as real splits cut them, give each probe product's one-call bits: two heights
    (the least multiple of the unit, and one unit more), so the starts are not all multiples of a larger unit."""
    for a, b, full in products:
        m, n = full.shape
        per = a.shape[1] * (n if rows else m)
        low = least_height(unit, per)
        for h in (low, low + unit):
            if _by_blocks(a, b, cut(m if rows else n, h, per), rows).tobytes() != full.tobytes():
                return False
    return True


def _by_blocks(a, b, blocks, rows: bool):
    """``a @ b`` (C-ordered operands), one OpenBLAS call per block of C's rows (``rows``) or columns, on the
    thread count OpenBLAS has now."""
    m, k = a.shape
    n = b.shape[1]
    c = np.empty((m, n), a.dtype)
    for s, e in blocks:
        if rows:
            _gemm_rows(a, b"N", k, b, b"N", n, c, s, e)
        else:
            _gemm_rows(a, b"N", k, b, b"N", n, c, 0, m, s, e)
    return c


def block_unit(dtype, rows: bool = True):
    """The row unit of SciPy's OpenBLAS for ``dtype`` (``rows=False``: the column unit): blocks of C starting at
    its multiples give the bits of one single-threaded call (see above); derived once per process from probe
    products (~2 ms), None when no candidate reproduces them (or OpenBLAS's thread count cannot be set to one)."""
    key = (np.dtype(dtype), bool(rows))
    if key in _UNITS:
        return _UNITS[key]
    with _UNIT_LOCK:
        if key not in _UNITS:
            _UNITS[key] = _derive_unit(key[0], key[1])
    return _UNITS[key]


def _derive_unit(dtype, rows: bool):
    load()
    if LIBRARY["lib"] is None or getattr(LIBRARY["lib"], "scipy_sgemm_", None) is None or not thread_control():
        return None
    with _one_blas_thread():
        rng = np.random.default_rng(32)
        products = []
        for m, k, n in _PROBES:
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            products.append((a, b, _by_blocks(a, b, [(0, m)], True)))
        return next((u for u in UNIT_CANDIDATES if _probe(rows, u, products)), None)


@contextlib.contextmanager
def _one_blas_thread():
    """OpenBLAS on one thread inside (probes compare single-threaded calls), its count as it was after."""
    if BlasPacer._control is None:
        BlasPacer._init()
    before = BlasPacer._current
    if before != 1:
        BlasPacer.use(1)
    try:
        yield
    finally:
        if before != 1:
            BlasPacer.use(before)


def row_blocks(rows, dtype, parts: int, per_row=None, by_rows=True):
    """Blocks ``[(r0, r1)]`` of a big GEMM's ``rows`` rows (``by_rows=False``: columns) for ``parts`` threads, each
    ``MIN_BLOCK_ROWS`` at least and starting at a multiple of the unit (the last one takes what is left; one block
    when ``parts`` is 1), or None when not split at all (no unit, or fewer rows than two blocks): then OpenBLAS
    threads it itself.  ``per_row``: the multiply-adds of one row (``n k``), when given every block is over
    ``SMALL_PATH_MACS`` (``cut``).  Whether it is None depends on the shape and dtype only, never on ``parts``."""
    if type(rows) is not int or rows < 2 * MIN_BLOCK_ROWS:
        return None
    u = block_unit(dtype, by_rows)
    if u is None:
        return None
    low = least_height(u, per_row)
    if rows < 2 * low:
        return None
    h = max(low, -(-rows // (max(1, parts) * u)) * u)
    return cut(rows, h, per_row)


def least_height(unit: int, per=None) -> int:
    """The least height of a block: a multiple of ``unit``, ``MIN_BLOCK_ROWS`` at least, and over
    ``SMALL_PATH_MACS`` when one row costs ``per`` multiply-adds."""
    low = max(MIN_BLOCK_ROWS, int(small_path_macs() // per) + 1 if per else 0)
    return -(-low // unit) * unit


_EXACT: dict = {}               # (dtype, by_rows, m, k, n, blocks) -> whether those blocks give one call's bits
# (m, k, n, dtype) -> the parts an eager GEMM may be cut into (0: not cut); (m, k, n, dtype, threads) -> its blocks
_CUTS: dict = {}


def blocks_exact(dtype, by_rows: bool, m: int, k: int, n: int, blocks) -> bool:
    """Whether ``blocks`` of the rows (``by_rows=False``: columns) of C = A B, ``m`` x ``k`` by ``k`` x ``n``, each
    one single-threaded call, give one single-threaded call's bits: tried once per shape and cut, on random
    operands, before a split is first made.  The unit and the small-path rule are a model of OpenBLAS's kernels
    drawn from probes; this holds each real cut to what it promises (SkylakeX's kernels also treat a product's
    last columns by its whole width: float64 blocks of 300 columns differ from any start)."""
    key = (np.dtype(dtype), bool(by_rows), m, k, n, tuple(blocks))
    got = _EXACT.get(key)
    if got is not None:
        return got
    load()
    with _UNIT_LOCK, _one_blas_thread():
        if key not in _EXACT:
            a, b = _probe_operands(np.dtype(dtype), m, k, n)
            whole = _by_blocks(a, b, [(0, m)], True)
            _EXACT[key] = _by_blocks(a, b, blocks, by_rows).tobytes() == whole.tobytes()
    return _EXACT[key]


_PROBE_DRAWS: dict = {}     # dtype -> uniform draws in [-0.5, 0.5) that probe operands are views of


def _probe_operands(dtype, m, k, n):
    """``blocks_exact``'s operands: views of draws made once per dtype (any values show a sum's order; a variable
    length loop meets a new shape at most calls, and draws per probe cost ~2M instructions a nanoGPT step)."""
    need = m * k + k * n
    pool = _PROBE_DRAWS.get(dtype)
    if pool is None or pool.size < need:
        pool = np.random.default_rng(7).standard_normal(max(need, 1 << 16)).astype(dtype)
        _PROBE_DRAWS[dtype] = pool
    return pool[:m * k].reshape(m, k), pool[m * k:need].reshape(k, n)


def _rows_on_threads(a, ta, lda, b, tb, ldb, c, add=False) -> bool:
    """An eager GEMM too big for one thread as blocks of rows (``row_blocks``), each a single-threaded OpenBLAS
    call, on the eager threads: the bits of one single-threaded call, however many threads run the blocks (one
    call on the calling thread when the threads are one, the work is too little for two, or their pacer holds
    them).  False: not split."""
    m = c.shape[0]
    # the cut depends on the shape, the dtype and the thread count alone: made once per those (_CUTS)
    key = (m, a.shape[1], c.shape[1], c.dtype)
    parts = _CUTS.get(key)
    if parts is None:
        if row_blocks(m, c.dtype, 1) is None:
            parts = 0
        else:
            # each block at least EAGER_SPLIT_MACS and over OpenBLAS's small-matrix path (else one call)
            parts = min(m // MIN_BLOCK_ROWS, max(1, m * c.shape[1] * a.shape[1] // EAGER_SPLIT_MACS))
        _CUTS[key] = parts
    if not parts:
        return False
    key += (_eager_split.split_threads(parts),)
    blocks = _CUTS.get(key)
    if blocks is None:
        blocks = row_blocks(m, c.dtype, key[-1], c.shape[1] * a.shape[1]) or [(0, m)]
        if len(blocks) >= 2 and not blocks_exact(c.dtype, True, m, a.shape[1], c.shape[1], blocks):
            blocks = [(0, m)]       # (a cut this BLAS does not keep one call's bits in)
        if len(_CUTS) > 4096:
            _CUTS.clear()
        _CUTS[key] = blocks
    BlasPacer.use(1)                # the blocks' threads are all the threads: none of OpenBLAS's own
    if len(blocks) < 2:
        STATS["gemm_whole_one_thread"] += 1
        _gemm_rows(a, ta, lda, b, tb, ldb, c, 0, m, 0, None, add)
        return True
    STATS["gemm_split_calls"] += 1
    STATS["gemm_blocks"] += len(blocks)
    _eager_split.run_split([(_gemm_rows, (a, ta, lda, b, tb, ldb, c, r0, r1, 0, None, add)) for r0, r1 in blocks])
    return True
