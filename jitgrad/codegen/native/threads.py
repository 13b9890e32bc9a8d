"""The thread policy of parallel kernels: which threading layer runs ``prange`` loops, and how many threads.

Policy (knobs in parentheses):
- **Layer: fork-safe, and sleeping rather than spinning.**  Numba's default picks GNU OpenMP when it is present; its
  workers spin while they wait, so a busy machine (another process on one core, or OpenBLAS's own spinning workers)
  makes a kernel wait for descheduled spinners: 5-10x slower instead of 2x.  And a process that ran a GNU OpenMP region
  cannot fork: the child is killed ("fork() called from a process already using GNU OpenMP"). jitgrad's parallel
  kernels run on jitgrad's own pool (``spin_pool.py``; or Numba's built-in ``workqueue``, loaded without Numba:
  ``workpool.py``), whose workers take equal static chunks of a loop and sleep between rounds (jitgrad's after a
  short spin, which ends at once while a spinner sees it lost its core), so a loop slows down at most in proportion
  to the cores taken from it.  The few parallel kernels Numba builds (sin/cos/tan, random draws) run on Numba's
  ``forksafe`` layer: TBB when installed, else Intel OpenMP, else ``workqueue`` (Numba's instance of the library:
  jitgrad's pool is a private copy with one worker fewer, ``workpool.py``). Not ``workqueue`` for every process: it
  aborts when two threads launch at once, and the layer is process-wide, so the user's own Numba ``prange`` code would
  inherit that.  (``JITGRAD_THREADING_LAYER`` picks another Numba layer for those; ``NUMBA_THREADING_LAYER``, when set,
  is the user's choice and always wins; kernels built from IR stay on ``workqueue`` either way, and
  ``JITGRAD_IR_PARALLEL=0`` has Numba build them all.)
- **Threads: one per core this process may run on** (``os.sched_getaffinity``), Numba's default, or
  ``NUMBA_NUM_THREADS``, the calling thread one of them: it runs chunk 0 of each pooled launch, the pool's workers the
  others (``workpool.launch``).  ``torch.set_num_threads`` (``ir/settings.py``) sets OpenBLAS's count at once and, at
  1, keeps graphs compiled later serial and those compiled before off the pool from their next call
  (``workpool.follow_threads``); under the pool's size it parks the workers left out (``spin_pool``'s
  ``set_active``: the same chunks, the same bits).  A kernel runs serially unless its work pays for
  waking the threads (``workpool.py``: ``PARALLEL_GRAIN``, ``PARALLEL_WORK``, tested by each parallel-capable kernel
  per call).
- **OpenBLAS workers sleep soon when idle** (``OPENBLAS_THREAD_TIMEOUT``, set to 20 by ``import jitgrad``
  unless already set): by default they spin ~0.1 s after every BLAS call, taking the cores Numba's workers need;
  at 20 they spin ~0.4 ms, enough to stay awake between one step's GEMMs (4, sleeping at once, made every small
  GEMM pay a wake-up) (``tests/test_threads.py`` counts the CPU time a process burns while it sleeps after a GEMM).
- **One parallel launch at a time per process.**  ``workqueue`` is not thread-safe (two threads launching
  parallel loops at once abort the process), so compiled calls whose graph has a parallel kernel take
  ``LAUNCH_LOCK``; concurrent calls of such graphs would compete for the same cores anyway.
- **The workers are pinned, one per core, the first core left to the calling thread** (which is never pinned;
  ``JITGRAD_PIN_THREADS=0`` turns it off).  Its workers sleep between launches and Linux wakes a sleeping thread on the
  core of the thread that woke it when it can: measured on 2 cores, about half the processes ran both workers on one
  core for every call, so a 2-thread B2 step took its 1-thread time (3.4 ms instead of 1.8 ms, bimodal from one
  process to the next). Before the first launch of a process (and again in a forked child, whose workers are new
  threads) each worker pins itself to its own core of the process's affinity mask (``place_workers``).  With one core
  taken by another process, the worker on that core shares it and the loop takes at most its 1-thread time (2x), which
  is the proportional slowdown the policy aims for.  The caller, never pinned, may still be run by Linux on a
  worker's core and left there (2 processes in 5, the LM step of ``benchmarks/variable_length.py``: every call 3.5x
  slower, time-sliced with its worker); each launch asks where the caller runs (one vDSO call) and moves that worker
  to the core no worker has (``keep_apart``).  TBB and OpenMP layers place their own threads and are left alone.

- **The pool's launches stay on the calling thread while the cores are contended** (``pool_pacer.py``;
  ``JITGRAD_POOL_PACER=1`` turns it on: off by default until a quiet machine's run counts what it holds). With one
  core taken by another process, the pinned worker there shares it and each pooled launch waits for its chunk: B1
  with its GEMMs on the pool took 1.86x its quiet time. Each compiled graph with gated launches reads the pool's
  launch clock (two reads per pooled launch) around its calls and, while pooled launches run much slower per unit of
  work than their recent median and than the calling thread alone, call after call, keeps them (split GEMMs
  included) on the calling thread for a number of calls that doubles while the contention lasts.  It changes no
  bit: a held launch runs the chunks the pool would.

- **BLAS runs on a thread count fixed by the configuration** (``ir/ops/blas.py``): a graph with a GEMM large
  enough for OpenBLAS to thread itself sets OpenBLAS to ``blas.all_threads()`` at every call (an eager GEMM or
  another graph may have left another count), one whose big GEMMs are split on the pool sets it to one.
  OpenBLAS's last bits depend on its thread count, so a count that followed the machine's load would make the
  bits follow it too.  ``JITGRAD_BLAS_PACER=1`` trades them for speed on a busy machine (``blas.BlasPacer``):
  OpenBLAS's threads spin-wait for each other inside a GEMM, so one descheduled thread stalls the call (measured,
  2 cores, one spinning hog: a B1 step went from 2.7 ms to a median of 7-69 ms on two BLAS threads and to 12 ms on
  one, when OpenBLAS threaded B1's GEMMs itself), and the pacer runs BLAS on one thread for a while after a call
  3x slower than its best.  Graphs whose big GEMMs are split on the pool (the default with two workers or more)
  never thread OpenBLAS, so the pool's own pacer, which changes no bit, is theirs: their blocks start at
  multiples of OpenBLAS's row unit (``blas.block_unit``), so they give one single-threaded call's bits whatever
  the workers, as eager's big GEMMs, split the same way on the eager threads, do.

The layer is chosen once, before this process's first parallel launch; if other code already launched one with
another layer, that layer stays (Numba cannot switch).
"""
from __future__ import annotations

import os
import sys
import threading

from ...ir import settings as _settings
from ...ir.ops import blas as _blas
from ...ir.symbolic import is_symbolic
from . import pool_pacer as _pool_pacer
from . import workpool as _workpool

_configured = False
_placed = False
PIN = os.environ.get("JITGRAD_PIN_THREADS", "1") != "0"
STATS = {"placements": 0, "moves": 0}   # worker placements, workers moved off the caller's core (for tests)
_PINS: dict = {}        # core -> the native id of the worker pinned there (``place_workers``)
_CORES: tuple = ()      # the process's affinity mask when they were placed
_getcpu = None          # libc's ``sched_getcpu`` (~70 ns through ctypes)


# How long the pool's threads spin after an eager round (a pooled GEMM's blocks, a stack's runs, an eager kernel's
# chunks, Adam's pieces) before they sleep, microseconds (JITGRAD_POOL_EAGER_SPIN; never more than 0 when
# JITGRAD_POOL_SPIN is 0).  An eager round is followed by Python and NumPy, and the next eager product comes
# 0.3-2 ms later, past a compiled step's 250 us spin: with it, 25 of B9 eager's ~75 products a step found the worker
# asleep, ran on one thread and nudged it (2026-12-02, Intel host, 2 threads).  Spinning 1 ms: 0-1.3 of them,
# step 53.9-54.7 ms against 58-61 ms; 4 ms: 2-13 products ran alone again (likely the busy sign, raised by a long
# spin's run-queue samples; not counted).  Compiled calls put the pool's own spin back (``LAUNCH_LOCK``).
EAGER_SPIN_US = 1000
_EAGER_SPIN = [None, None]      # [the eager spin in ns, the pool's own], once a pool runs
_SPIN_EAGER = [False]           # whether the pool spins the eager spin now


def spin_for(eager: bool) -> None:
    """Give the pool's threads the eager spin (``eager``) or the pool's own, from the next wait on (under
    ``LAUNCH_LOCK``: the launch about to run decides; nothing when the pool is not jitgrad's)."""
    if _SPIN_EAGER[0] is eager:
        return
    pool = _workpool.spinning()
    if pool is None:
        return
    if _EAGER_SPIN[1] is None:
        own = pool.spin_ns()
        try:
            eager_ns = int(float(os.environ.get("JITGRAD_POOL_EAGER_SPIN", EAGER_SPIN_US)) * 1000)
        except ValueError:
            eager_ns = EAGER_SPIN_US * 1000
        _EAGER_SPIN[:] = [max(own, eager_ns) if own > 0 else 0, own]
    pool.set_spin_ns(_EAGER_SPIN[0] if eager else _EAGER_SPIN[1])
    _SPIN_EAGER[0] = eager


class _Launch:
    """``with LAUNCH_LOCK:`` around a parallel launch: one launch at a time per process, and the workers placed
    (``place_workers``) before this process's first launch and a forked child's first."""

    def __init__(self):
        self._lock = threading.Lock()

    def __enter__(self):
        return self.enter(False)

    def enter(self, eager: bool):
        """``__enter__`` for a compiled call's launches or (``eager``) an eager one's."""
        self._lock.acquire()
        self._placed_or_released(eager)
        return self

    def _placed_or_released(self, eager: bool):
        """The workers placed once the lock is held (the lock released again if placing them fails), kept off
        the calling thread's core (``keep_apart``), the launches' thresholds in step with ``set_num_threads``
        (``workpool.follow_threads``: at one thread a graph laid out for the pool keeps off it), and the pool's
        spin the one for the launch's kind (``spin_for``: eager rounds spin longer)."""
        _workpool.follow_threads(_settings.STATE.num_threads)
        if _SPIN_EAGER[0] is not eager:
            spin_for(eager)
        if not _placed:
            try:
                place_workers()
            except BaseException:
                self._lock.release()
                raise
        if _PINS:
            keep_apart()

    def __exit__(self, *exc):
        self._lock.release()

    def enter_now(self) -> bool:
        """``enter(True)`` if no launch holds the lock now (True), else nothing (False): for an eager caller that
        has another way to run its work (an eager GEMM's one call) and must never wait on, or deadlock with, a
        launch."""
        if not self._lock.acquire(False):
            return False
        self._placed_or_released(True)
        return True

    def _after_fork_in_child(self):
        self._lock = threading.Lock()       # a thread of the parent may have held it at the fork


LAUNCH_LOCK = _Launch()


class _EagerLaunch:
    """``with EAGER_LAUNCH:`` around an eager kernel's parallel launch: ``LAUNCH_LOCK`` for an eager launch (the
    workers spin ``EAGER_SPIN_US`` after it, for the eager product that comes next), with the eager
    kernels' own pool threshold in force (``workpool.eager_min_work``).  (Their workers used to sleep at once after
    the round, when eager GEMMs ran on OpenBLAS's own threads, which needed the core; now those run on the pool.)"""

    def __enter__(self):
        LAUNCH_LOCK.enter(True)
        self._compiled = _workpool.eager_thresholds(True)      # the eager kernels' own threshold for the launch
        return self

    def __exit__(self, *exc):
        _workpool.eager_thresholds(False, self._compiled)
        LAUNCH_LOCK.__exit__(*exc)


EAGER_LAUNCH = _EagerLaunch()


def configure():
    """Choose Numba's threading layer (see the module docstring): now if Numba is imported, else when it is
    (``numba_build`` calls this before Numba compiles a parallel kernel); cheap after the first call."""
    global _configured
    if _configured or "numba" not in sys.modules:
        return
    _configured = True
    if os.environ.get("NUMBA_THREADING_LAYER"):
        return
    from numba import config
    config.THREADING_LAYER = os.environ.get("JITGRAD_THREADING_LAYER", "forksafe")


def place_workers() -> list:
    """Pin each worker thread of the pool (``workpool.py``, Numba's ``workqueue``) to its own core of this
    process's affinity mask (see the module docstring), once per process; returns ``[(worker, core)]`` (empty when
    there is nothing to do: one thread, one core, or ``JITGRAD_PIN_THREADS=0``).  Each worker pins itself: a task
    that calls ``sched_setaffinity(0, ...)`` runs once on every worker, so no thread id has to be guessed."""
    global _placed
    _placed = True
    if not PIN:
        return []
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:          # pragma: no cover - not Linux
        return []
    from . import workpool
    if not workpool.available():
        return []
    n = workpool.launch()
    if n < 2 or len(cores) < 2:
        return []
    first = 1 if workpool.caller() else 0       # the calling thread runs a chunk too: the first core is left to it

    def pin(i):
        core = cores[(i + first) % len(cores)]
        os.sched_setaffinity(0, {core})     # 0: the calling thread
        return (i, core, threading.get_native_id())
    placed = workpool.run_on_each(pin)
    STATS["placements"] += 1
    _watch_caller(cores, placed)
    return sorted((i, core) for i, core, _ in placed)


def _watch_caller(cores, placed) -> None:
    global _getcpu, _CORES
    _PINS.clear()
    if len(placed) >= len(cores):       # no core left for the caller: nothing to keep apart
        return
    try:
        import ctypes
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):   # pragma: no cover - not glibc/musl
        return
    fn.restype, fn.argtypes = ctypes.c_int, ()
    _getcpu, _CORES = fn, tuple(cores)
    _PINS.update({core: tid for _, core, tid in placed})


def keep_apart() -> None:
    """Move the worker pinned to the calling thread's core to a core no worker has (called at each launch, under
    ``LAUNCH_LOCK``).  The caller is never pinned, so Linux may run it on a worker's core and leave it there:
    measured on 2 cores (the LM step of ``benchmarks/variable_length.py``, a round a call), 2 processes in 5 ran
    their caller on the worker's core for every call, which then took 0.47-0.50 ms against 0.13-0.14 ms (the worker,
    woken or spinning after its round, time-sliced with the caller: ~60 involuntary switches per 100 calls).  Where
    the caller runs now is one vDSO call; a move (a system call) only when it sits on a worker's core."""
    cpu = _getcpu()
    tid = _PINS.get(cpu)
    if tid is None:
        return
    global _placed
    free = [c for c in _CORES if c not in _PINS]
    try:
        os.sched_setaffinity(tid, {free[0]})
    except OSError:     # the worker is gone (the pool stopped and started anew): place the new ones next launch
        _PINS.clear()
        _placed = False
        return
    del _PINS[cpu]
    _PINS[free[0]] = tid
    STATS["moves"] += 1


class CallGuard:
    """``with guard:`` around one compiled graph's call: ``LAUNCH_LOCK`` when it has a parallel kernel;
    ``blas``: a GEMM large enough for OpenBLAS to thread, run on ``blas.all_threads()`` (or under its own
    ``BlasPacer`` with ``JITGRAD_BLAS_PACER=1``); ``single_blas``: its big GEMMs run on the pool's workers (rows
    split, ``layout.Program.split_rows``), so OpenBLAS runs each call on the calling thread (no thread of its own,
    no pacer: one set of threads for the whole call); ``paced``: it has gated pool launches, which its own
    ``pool_pacer.PoolPacer`` keeps on the calling thread while the cores are contended (inside the lock)."""

    def __init__(self, parallel: bool, blas: bool, single_blas: bool = False, paced: bool = False):
        self.lock = LAUNCH_LOCK if parallel else None
        self.single = single_blas
        self.threaded = blas and not single_blas
        self.pacer = _blas.BlasPacer() if self.threaded and _blas.BLAS_PACER else None
        self.pool_pacer = _pool_pacer.pacer() if paced and parallel else None

    def __enter__(self):
        if self.lock is not None:
            self.lock.__enter__()
        try:
            if self.single:
                _blas.BlasPacer.use(1)
            elif self.pacer is not None:
                self.pacer.__enter__()
            elif self.threaded:
                _blas.BlasPacer.use(_blas.all_threads())
            if self.pool_pacer is not None:
                self.pool_pacer.__enter__()
        except BaseException:
            if self.lock is not None:
                self.lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.pool_pacer is not None:
                self.pool_pacer.__exit__(*exc)
            if self.pacer is not None:
                self.pacer.__exit__(*exc)
        finally:
            if self.lock is not None:
                self.lock.__exit__(*exc)


# OpenBLAS runs a GEMM on one thread below BLAS_THREADED_MACS multiply-adds whatever its count: graphs whose GEMMs
# are all below it need no guard (it costs ~1 us a call, which B5's 16 us steps feel)
def blas_threaded(steps, size=None) -> bool:
    """Whether any BLAS step of a program (``layout.Step``) is large enough for OpenBLAS to thread.  A GEMM of
    symbolic size may be, at some sizes: it counts unless ``size`` (symbolic size -> int, a call's) says."""
    for st in steps:
        if st.kind in ("gemm", "bgemm") and st.eqn is not None and not st.split:
            a, out = st.eqn.ins[0].aval.shape, st.eqn.outs[0].aval.shape
            k = a[-1] if a else 1
            m = out[-2] if len(out) >= 2 else 1
            n = out[-1] if out else 1
            if size is not None:
                m, n, k = size(m), size(n), size(k)
            elif any(is_symbolic(d) for d in (m, n, k)):
                return True
            if m * n * k > _blas.BLAS_THREADED_MACS:
                return True
    return False


def call_guard(parallel: bool, blas: bool, single_blas: bool = False, paced: bool = False):
    """What a compiled graph's call is wrapped in (``CallGuard``), or None when it needs nothing.  ``paced``:
    some of its pool launches are gated (``layout.Step.gate``), so a ``PoolPacer`` may hold them off the pool."""
    if not parallel and not blas and not single_blas:
        return None
    return CallGuard(parallel, blas, single_blas, paced)


def _after_fork_in_child():
    global _placed
    _placed = False                 # the child's workqueue starts new worker threads, unpinned
    _PINS.clear()
    LAUNCH_LOCK._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def layer() -> str | None:
    """The threading layer in use once a parallel loop ran (None before): Numba's, when Numba launched one, else
    the pool jitgrad's own parallel kernels started (``workpool.py``): ``spin`` (its own, ``spin_pool.py``, the
    default) or ``workqueue`` (``JITGRAD_POOL=workqueue``: Numba's library, a private copy)."""
    if "numba" in sys.modules:
        import numba
        try:
            return numba.threading_layer()
        except ValueError:
            pass
    from . import workpool
    if not workpool.threads():
        return None
    return "spin" if workpool.spinning() is not None else "workqueue"


__all__ = ["configure", "layer", "place_workers", "call_guard", "blas_threaded", "CallGuard", "LAUNCH_LOCK",
           "EAGER_LAUNCH", "EAGER_SPIN_US", "spin_for", "PIN", "STATS"]
