"""The worker threads of parallel kernels built without Numba: jitgrad's own pool, or Numba's ``workqueue`` library.

A parallel kernel (``loops.Kernel.parallel``: its outer loop is a ``prange``) built by ``ir_loops`` splits that loop
into one chunk per thread of a launch (``threads()``) and hands them to the pool through three C functions of
Numba's ``workqueue`` interface: ``add_task`` (one task per worker queue), ``ready`` (wake them) and
``synchronize`` (wait for all).  Two pools implement it:

- **``spin_pool.py``, the default** (``JITGRAD_POOL=spin``): jitgrad's own, in LLVM IR, whose workers spin briefly
  after a round (``JITGRAD_POOL_SPIN`` microseconds, default 250; 0 sleeps at once) before they sleep on a futex,
  and whose caller spins the same way in ``synchronize``, so back-to-back rounds cost no system call; a spinner
  that sees it lost its core stops spinning for a while (a busy machine).  Linux only.
- **``workqueue``** (``JITGRAD_POOL=workqueue``, and where ``spin_pool`` cannot run): Numba's small C extension,
  which imports nothing from Numba, loaded with a ``dlopen``; its workers sleep on a condition after every round.

Counted (``benchmarks/pool_wakeups.py --pin-caller``, B9's step, 106 rounds, 2 threads, 2026-11-30 on a loaded
machine, load average 6-13 on 2 cores): voluntary context switches a step, caller + worker, 103.5 + 118.2 on
``workqueue`` -> 12.7 + 16.9 on ``spin_pool`` (250 us spin; its counters a step: 17.0 worker and 13.3 caller
futex sleeps, as many wake calls: ~61 futex calls against ~940 under ``strace -f`` on ``workqueue``; 89 of the
106 rounds found the worker spinning), the same loss bits.

**The calling thread runs a chunk.**  ``ready`` wakes every queue of the pool, so the only way a launch wakes
fewer workers than it has chunks is a pool with fewer queues: jitgrad's have ``default_threads() - 1`` workers, and
the calling thread runs chunk 0 of every pooled launch between ``ready`` and ``synchronize`` (``pool_abi.round_``)
instead of sleeping there.  At two threads a launch wakes one worker, not two, and the caller's cache stays warm
(B9's step, 110 rounds, counted 2026-11-30 with the caller on the first core: the process's context switches
1005 -> 203 a step, its futex calls 1599 -> 707; ``benchmarks/pool_wakeups.py --pin-caller``).
The chunks are the same whoever runs them (fixed by the thread count, summed in chunk order), so results do not
depend on it, and a chunk reports an error or an anomaly through the same arguments on any thread.  Numba's own
parallel kernels (``threads.py``'s layer) split into ``NUMBA_NUM_THREADS`` chunks, one per queue, and would overrun
a pool one queue short, so on ``workqueue`` jitgrad loads a private copy of the library (``library``: its own C
state, its own threads; ``JITGRAD_PRIVATE_POOL=0`` shares Numba's, where every chunk goes to a worker and the
caller waits).  The
two pools never run at once (``threads.LAUNCH_LOCK``), and Numba's starts only when a Numba-built parallel kernel
runs.

One launch round per kernel (Numba's own ``parallel_for`` makes two: one to sync a thread-local count, one to
run), and no Python on the way: the kernel calls the pool itself.  The kernels reach the pool through symbols this
module registers with llvmlite before code that needs them is linked (``objload.load``):
``jitgrad_wq_add_task``, ``jitgrad_wq_ready``, ``jitgrad_wq_synchronize`` and the ``int64`` globals
``jitgrad_wq_threads`` (the chunks of a pooled launch: one per worker queue, since ``ready`` wakes every queue,
and one for the calling thread when ``jitgrad_wq_caller`` is 1), ``jitgrad_wq_min_work`` and ``jitgrad_wq_grain``
(when a launch is worth the pool, below), ``jitgrad_wq_rounds`` and ``jitgrad_wq_caller_rounds`` (the pool rounds
launched so far, and those the caller ran a chunk of, counted for tests), and the pacer's (below):
``jitgrad_wq_pace``, the clock ``jitgrad_wq_clock`` (libc's ``clock_gettime``) and the four counters of timed
launches.  The object code holds no address, so a kernel from the disk cache links in any process.

**When a loop takes the pool: decided per call, inside the kernel.**  A parallel kernel is *parallel-capable*:
each call it compares its work (elements x the plan's per-element cost, ``layout.py``) with the process-wide
minimum ``min_work()`` and its elements with ``grain()``, and hands its chunks to the workers only when both are
reached (else it runs the same chunks on the calling thread, so its results never depend on the decision).  A
batch of small products (``batched_gemm.py``) does the same in the entry with its multiply-adds.  So a program laid
out once for every size (``codegen/program/sized.py``) needs no guard on a parallel choice, and a measured
threshold (``benchmarks/parallel_threshold.py``, ``JITGRAD_PARALLEL_WORK`` or ``set_min_work``) applies to built
kernels without rebuilding them.  Kernels Numba builds (random draws, integer powers) always split their loop.

**What the pool's pacer sees** (``pool_pacer.py``; ``jitgrad_wq_pace``, set by the pacer under the launch lock):
0, nothing timed (no pacer, the default until one runs); ``PACE_TIMED``, every gated launch that takes the pool
reads the clock before it wakes the workers and after they all finished, and adds the nanoseconds and its work
to ``pool_ns``/``pool_work``; ``PACE_HELD``, gated launches that reach the threshold run on the calling thread
anyway (the pacer saw contention) and add their time and work to ``serial_ns``/``serial_work``.  So a launch
costs two clock reads (vDSO, ~20 ns each, against a wake-up of 5-30 us) when it wakes the workers, none when it
does not, and a graph without a parallel-capable step never reads the clock.  The workers themselves are not
timed: with equal static chunks, the launch's wall time already waits for the slowest worker, which is what a
core taken by another process shows as.

Not thread-safe: one launch at a time per process (``threads.LAUNCH_LOCK``, held around calls of graphs with a
parallel kernel).  After a fork the child's pool is empty and either pool starts new workers at the child's first
launch (``spin_pool``: ``os.register_at_fork``; ``workqueue``: its own ``pthread_atfork`` handler); ``threads.py``
pins them again.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import threading
import time

from ...ir import settings

SYMBOLS = ("jitgrad_wq_add_task", "jitgrad_wq_ready", "jitgrad_wq_synchronize", "jitgrad_wq_threads",
           "jitgrad_wq_caller", "jitgrad_wq_caller_rounds", "jitgrad_wq_min_work", "jitgrad_wq_grain",
           "jitgrad_wq_rounds", "jitgrad_wq_pace", "jitgrad_wq_clock", "jitgrad_wq_pool_ns", "jitgrad_wq_pool_work",
           "jitgrad_wq_serial_ns", "jitgrad_wq_serial_work", "jitgrad_wq_join", "jitgrad_wq_can_join",
           "jitgrad_wq_queued", "jitgrad_wq_joined", "jitgrad_wq_nmine", "jitgrad_wq_nranges", "jitgrad_wq_mine",
           "jitgrad_wq_ranges", "jitgrad_wq_busy_until", "jitgrad_wq_busy_held")
_lock = threading.Lock()
_LIB = None
_PRIVATE = False
# jitgrad's own instance of the pool's library (``library``); JITGRAD_PRIVATE_POOL=0 shares Numba's (every chunk of a
# launch on a worker then, one worker per core: Numba's kernels assume that many)
PRIVATE_POOL = os.environ.get("JITGRAD_PRIVATE_POOL", "1") != "0"
# which pool: "spin", jitgrad's own (``spin_pool.py``: workers spin briefly between rounds, then sleep), or
# "workqueue", Numba's library (a private copy, or Numba's own with JITGRAD_PRIVATE_POOL=0, which implies it)
POOL = os.environ.get("JITGRAD_POOL", "spin")
_FUNCS = None                   # the running pool's (add_task, ready, synchronize) addresses
_THREADS = ctypes.c_int64(0)    # the global the kernels read (its address is the symbol jitgrad_wq_threads)
_CALLER = ctypes.c_int64(0)     # 1: the calling thread runs chunk 0 of a pooled launch (jitgrad_wq_caller)
_QUEUES = 0                     # the pool's worker queues (threads() - caller)

# A loop takes the pool when its work pays for handing it to the workers: at least PARALLEL_GRAIN elements and
# elements x per-element cost >= PARALLEL_WORK (ir/plan.py's cost unit runs at ~0.02 ns on one core of this kind
# of machine: B2's loop, ~26 units, 0.53 ns an element; 2^17 units is ~2.6 us of one core's work).  Every element
# costs at least ``layout.MIN_ELEMENT_COST`` (8), so from 2^20 elements (``loops.PARALLEL_MIN``) every loop takes
# the pool at any threshold up to 2^23.  A compiled step's rounds come back to back and its workers spin between
# them (``spin_pool``: a round handed to a spinning worker in ~1 us), so the threshold is the step's, measured
# (``benchmarks/parallel_threshold.py --step b11|b9|b1``, alternating settings in one process, quiet, 2 cores,
# 2026-11-30): B11 1.66x at 2^17 / 2^11 (0.199 against 0.329 ms serial; 0 rounds at 2^23 / 2^15, 1.0x), B9 and B1
# faster at 2^16-2^21 than at 2^23 (B9 18.96-19.11 against 19.7-19.8 ms, B1 2.54 against 2.63 ms).  In fresh
# processes that needed a busy sign that stays down on a quiet machine: neither "spins ran out" (a step's serial
# stretches raised it) nor the run-queue sign as first built (a sleeping worker's own wake-ups, 0.2-0.5 ms on this
# VM, raised it) did; with windows that held a sleep not judged (``busy_sign.py``), 2^17 / 2^11 and the busy rule
# gave (quiet, fresh processes, warm cache, 2026-12-01) B11 1.49-1.64x, B1 1.82-1.92x, B9 at 2 threads 16.4-16.9 ms
# (the old pair's 16.3-19.3), and one core busy B1 / B2 / B9 / B11 1.87 / 1.55 / 1.90 / 1.63x (without the rule B9
# busy went 4.78x).  The 29.5 and 67 ms B9 runs once read as "bad modes" of these thresholds were the first process
# after a change of the kernels' keys (the thresholds are in them): an empty cache for them, so ``b9_gpt.py``'s
# five warm-up steps ran eagerly and on the first tier (which never uses the pool) while the build ran; the same
# process on a fresh cache dir gives 44 ms, the next ones 16.5.  Counted at 2 threads, pooled launches a step
# (rounds + joined) at 2^23 / 2^15 -> 2^17 / 2^11: B11 0 -> 7 + 21, B1 5 -> 12 + 1, B2 1 -> 1, B9 81 + 25 ->
# 98 + 26.  JITGRAD_PARALLEL_WORK /
# JITGRAD_PARALLEL_GRAIN set them for a process (``set_min_work`` at run time).
PARALLEL_GRAIN = 1 << 11
PARALLEL_WORK = 1 << 17
_MIN_WORK = ctypes.c_int64(int(float(os.environ.get("JITGRAD_PARALLEL_WORK", PARALLEL_WORK))))
_GRAIN = ctypes.c_int64(int(float(os.environ.get("JITGRAD_PARALLEL_GRAIN", PARALLEL_GRAIN))))
# ``set_num_threads(1)`` after a graph was laid out for the pool: at every launch (``follow_threads``, under the
# launch lock) the globals above read NEVER, so no gated launch (every loop, batch and split GEMM a default layout
# makes) reaches its threshold: each runs the chunks it would hand out on the calling thread, the same bits, and
# the workers sleep.  ``_SET`` keeps the thresholds set (``set_min_work``), back in the globals at more threads.
NEVER = 1 << 62
_SET = [int(_MIN_WORK.value), int(_GRAIN.value)]
_FOLLOWED = [None]      # the ``set_num_threads`` count the globals and the pool's active workers follow now
# Eager kernels' launches (``jit/eager_kernels.py``) have a threshold of their own: an eager round may wake sleeping
# workers (5-30 us: after ``threads.EAGER_LAUNCH`` they spin 1 ms, ``threads.spin_for``, then sleep), so what pays for a
# compiled step's back-to-back rounds need not pay for one eager call: about 160 us of one core's work and PyTorch's
# grain (measured 2026-11-24, quiet, 2 cores, on the sleeping pool: waking the workers costs ~5 us at best and ~30 us
# typically; a 3-op tanh/sigmoid loop of 524,288 float32 188 / 190 us serial, 109 / 141 us parallel; of 262,144, 103 /
# 104 vs 64 / 92 us; x + 1 never gains below 1M elements).  The same built kernels serve both: ``EAGER_LAUNCH`` puts
# these values in the globals the kernels read for the launch and the compiled ones back after it
# (``eager_thresholds``).  JITGRAD_EAGER_PARALLEL_WORK / _GRAIN, ``set_eager_min_work``.
EAGER_PARALLEL_WORK = 1 << 23
EAGER_PARALLEL_GRAIN = 1 << 15
_EAGER = [int(float(os.environ.get("JITGRAD_EAGER_PARALLEL_WORK", EAGER_PARALLEL_WORK))),
          int(float(os.environ.get("JITGRAD_EAGER_PARALLEL_GRAIN", EAGER_PARALLEL_GRAIN)))]
_ROUNDS = ctypes.c_int64(0)     # pool rounds launched by kernels built from IR and by entries (tests count them)
_CALLER_ROUNDS = ctypes.c_int64(0)  # those of them in which the calling thread ran chunk 0
# Launches that share one round (``codegen/program/round_groups.py``): while the entry sets JOIN, a kernel that takes
# the pool queues its chunks into the round pending since the last one that did (workers' chunks with ``add_task``,
# the caller's into MINE, each chunk's [start, stop) into RANGES: the kernel's own records die with its frame),
# and the next step that does not join runs that round (``pool_abi.flush``).  CAN_JOIN: the pool runs a queue's
# tasks in order (``spin_pool``, whose queues hold ``spin_pool.MAX_TASKS``; ``workqueue`` holds one).  JOIN_MAX
# launches at most share a round.
JOIN_MAX = 8
_JOIN = ctypes.c_int64(0)
_CAN_JOIN = ctypes.c_int64(0)
_QUEUED = ctypes.c_int64(0)     # worker tasks queued in the pending round (0: none pending)
_JOINED = ctypes.c_int64(0)     # launches that queued their chunks into a pending round (counted, for tests)
_NMINE = ctypes.c_int64(0)
_NRANGES = ctypes.c_int64(0)
RANGE_SLOTS = 3 * JOIN_MAX * 257     # a task record of three words at most a chunk (a GEMM batch's: its routine too)
_MINE = (ctypes.c_int64 * (3 * JOIN_MAX))()
_RANGES = (ctypes.c_int64 * RANGE_SLOTS)()
# The busy rule: while a pool thread saw another process take its core (``busy_sign.py``: it waited in the run
# queue a quarter of a sample window, in a taken core's slices) within the sign's hold (``busy_sign``), gated launches
# run their chunks on the calling thread (``pool_abi.paced``: one load a launch, a clock read only while the sign
# stands): a chunk on the taken core would make every round wait for it.  Their global (``jitgrad_wq_busy_until``)
# is the spin pool's own ``quiet_until`` (with ``workqueue``, a zero).  BUSY_HELD counts them.  On by default
# (JITGRAD_POOL_BUSY_HOLD=0 turns it off; off, the kernels test nothing: ``pool_abi.paced``).  Without it, at the
# thresholds above, B9 with one core taken went 4.78x its quiet step; with it 1.90x.  It was off while its sign stood
# on a quiet machine ("spins that ran out", then the run-queue sign before it left sleeps' windows unjudged).
BUSY_HOLD = os.environ.get("JITGRAD_POOL_BUSY_HOLD", "1") == "1"
_NOT_BUSY = ctypes.c_int64(0)
_BUSY_HELD = ctypes.c_int64(0)
# the pacer's state and counters (see the module docstring): gated launches read PACE at every call
PACE_OFF, PACE_TIMED, PACE_HELD = 0, 1, 2
_PACE = ctypes.c_int64(PACE_OFF)
_TIMES = {name: ctypes.c_int64(0) for name in ("pool_ns", "pool_work", "serial_ns", "serial_work")}
_POOL_NS, _POOL_WORK, _SERIAL_NS, _SERIAL_WORK = _TIMES.values()
# the clock gated launches read: libc's clock_gettime (through the vDSO on Linux: no system call), or the
# function at CLOCK_ADDRESS (the same signature) when one is set before the pool's first launch (tests count the
# reads and script the times through it)
CLOCK_ID = getattr(time, "CLOCK_MONOTONIC", 1)
CLOCK_ADDRESS = None


def min_work() -> int:
    """The work (the plan's cost units) from which a parallel kernel or batch hands its chunks to the workers (at
    more than one thread: ``follow_threads``)."""
    return _SET[0]


def set_min_work(work: int, grain: int | None = None) -> tuple:
    """Set ``min_work()`` (and ``grain()``, when given) for this process: built kernels read them at every call.
    Returns the previous ``(min_work, grain)``."""
    prev = tuple(_SET)
    _SET[0] = max(0, int(work))
    if grain is not None:
        _SET[1] = max(0, int(grain))
    _publish()
    return prev


def grain() -> int:
    """The fewest elements a parallel loop hands to the workers."""
    return _SET[1]


def _publish() -> None:
    """The thresholds the launches read: ``_SET``'s, or NEVER while ``set_num_threads(1)`` is followed."""
    _MIN_WORK.value, _GRAIN.value = _thresholds(_FOLLOWED[0])


def follow_threads(n) -> None:
    """Keep the launches in step with ``set_num_threads`` (``n``: its count, None or 0 when unset), called holding
    ``threads.LAUNCH_LOCK`` before each launch: at one thread no gated launch takes the pool (a graph laid out for
    it runs its chunks on the calling thread, with the same bits); at ``n`` under the pool's size ``n - 1`` of
    jitgrad's workers take part in its rounds (``spin_pool.Pool.set_active``: the same chunks, the others' share
    on those and the calling thread, the rest asleep).  Numba's own parallel kernels (``threads.py``'s layer)
    follow through Numba's thread mask, which is the calling thread's."""
    if n == _FOLLOWED[0]:
        return
    _FOLLOWED[0] = n
    _publish()
    spin = _spin_pool()
    if spin is not None:
        spin.set_active(n - 1 if n and n > 1 else None)
    numba_pool = sys.modules.get("numba.np.ufunc.parallel")
    if numba_pool is not None and getattr(numba_pool, "_is_initialized", False):
        numba_pool.set_num_threads(min(n, numba_pool.NUM_THREADS) if n else numba_pool.NUM_THREADS)


def eager_min_work() -> int:
    """``min_work()`` for eager kernels' launches (their own knob: ``EAGER_PARALLEL_WORK``)."""
    return _EAGER[0]


def eager_grain() -> int:
    """``grain()`` for eager kernels' launches."""
    return _EAGER[1]


def set_eager_min_work(work: int, grain: int | None = None) -> tuple:
    """Set ``eager_min_work()`` (and ``eager_grain()``, when given) for this process; returns the previous pair.
    Compiled steps' thresholds (``set_min_work``) are not touched."""
    prev = tuple(_EAGER)
    _EAGER[0] = max(0, int(work))
    if grain is not None:
        _EAGER[1] = max(0, int(grain))
    return prev


def eager_thresholds(on: bool, prev=None):
    """Put the eager thresholds in the globals the kernels read (``on``; returns what was there) or ``prev`` back
    (``threads.EAGER_LAUNCH``, holding the launch lock, so no compiled launch sees them)."""
    if on:
        was = (_MIN_WORK.value, _GRAIN.value)
        _MIN_WORK.value, _GRAIN.value = _EAGER
        return was
    _MIN_WORK.value, _GRAIN.value = prev
    return None


def rounds() -> int:
    """How many times kernels built from IR and entries woke the workers (one round per pooled launch)."""
    return int(_ROUNDS.value)


def joined() -> int:
    """How many pooled launches queued their chunks into a round another launch had queued into first
    (``codegen/program/round_groups.py``): pooled launches that woke no round of their own, so a step's pooled
    launches are its ``rounds()`` plus these."""
    return int(_JOINED.value)


def busy_held() -> int:
    """How many gated launches ran on the calling thread because the pool's spinners saw another process take
    a core lately (the busy rule, above)."""
    return int(_BUSY_HELD.value)


def can_join() -> bool:
    """Whether launches can share a round on this process's pool (``spin_pool``, the calling thread one of the
    threads)."""
    return bool(_CAN_JOIN.value)


def caller_rounds() -> int:
    """How many of ``rounds()`` had the calling thread run a chunk (chunk 0) itself (all of them when
    ``caller()``)."""
    return int(_CALLER_ROUNDS.value)


def _thresholds(n):
    """``(min_work, grain)`` a compiled launch compares with at ``set_num_threads(n)``: NEVER at one thread.  The
    Python-side tests pass the setting itself (the globals follow it only at the next launch)."""
    return (NEVER, NEVER) if n == 1 else tuple(_SET)


def takes(elements, per_element: float, eager: bool = False) -> bool:
    """Whether a parallel-capable loop of ``elements`` elements, each costing ``per_element``, takes the pool:
    the test the kernel makes per call (``ir_loops._Renderer._dispatch``), less the worker count and the pacer
    (which holds launches off the pool only inside a paced graph's call: never between calls).  ``eager``: at
    the eager kernels' thresholds (``eager_min_work``)."""
    work, least = (_EAGER[0], _EAGER[1]) if eager else _thresholds(settings.STATE.num_threads)
    return elements >= least and float(elements) * per_element >= float(work)


def takes_batch(macs, count, most: int) -> bool:
    """Whether a batch of ``count`` products of ``macs`` multiply-adds each takes the pool, each product on one
    thread: at least two, each at most ``most`` (OpenBLAS would thread a larger one itself), and work enough (the
    entry's test, ``entry_gemms.gemm_batch_on_pool``)."""
    work = _thresholds(settings.STATE.num_threads)[0]
    return count >= 2 and macs <= most and float(macs) * float(count) >= float(work)


def takes_split(macs, blocks) -> bool:
    """Whether a GEMM of ``macs`` multiply-adds split into ``blocks`` blocks of rows (``batched_gemm.split_rows``)
    takes the pool: two blocks at least, and the whole product's work enough (the entry's test, the last block at
    its own height)."""
    return blocks >= 2 and float(macs) >= float(_thresholds(settings.STATE.num_threads)[0])


def pace() -> int:
    """What gated launches do about the pacer now: ``PACE_OFF``, ``PACE_TIMED`` or ``PACE_HELD`` (module
    docstring)."""
    return int(_PACE.value)


def set_pace(state: int) -> None:
    """Set ``pace()`` (the pacer does, holding ``threads.LAUNCH_LOCK``, so no launch reads it half-way)."""
    _PACE.value = int(state)


def launch_times(held: bool = False) -> tuple:
    """``(nanoseconds, work)`` of the timed launches so far: those on the pool, or (``held``) those the pacer
    kept on the calling thread.  Cumulative; a pacer reads them before and after a call."""
    if held:
        return _SERIAL_NS.value, _SERIAL_WORK.value
    return _POOL_NS.value, _POOL_WORK.value


def default_threads() -> int:
    """How many workers: ``NUMBA_NUM_THREADS``, else one per core this process may run on (Numba's rule, so a
    pool Numba launches first has the same size; ``ir/settings.default_threads``).  ``torch.set_num_threads`` does
    not resize the pool: Numba's own parallel kernels may share it and assume its size."""
    return settings.default_threads()


def _library_path() -> str | None:
    mod = sys.modules.get("numba.np.ufunc.workqueue")
    if mod is not None:
        return getattr(mod, "__file__", None)
    spec = importlib.util.find_spec("numba")     # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "np", "ufunc")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "workqueue" + suffix)
        if os.path.exists(path):
            return path
    return None


def _private_copy(path: str):
    """The extension at ``path`` loaded from a private copy of its file: a module with C state of its own (the
    dynamic loader shares one instance per file), or None where the copy cannot be made or loaded (a read-only or
    ``noexec`` temporary directory)."""
    try:
        with open(path, "rb") as f:
            code = f.read()
        fd, copy = tempfile.mkstemp(prefix="jitgrad-pool-", suffix=os.path.basename(path)[len("workqueue"):])
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(code)
            name = "jitgrad.codegen.native._pool.workqueue"     # PyInit_workqueue; never in sys.modules
            loader = importlib.machinery.ExtensionFileLoader(name, copy)
            spec = importlib.util.spec_from_file_location(name, copy, loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        finally:
            os.unlink(copy)                 # the loader keeps it mapped
        return mod
    except (OSError, ImportError):
        return None


def library():
    """The ``workqueue`` extension module (loaded once, without importing Numba), or None when it is missing.
    Jitgrad's own instance of it (``_private_copy``) where it can: its pool has one worker fewer than the cores
    (``launch``), which Numba's parallel kernels, sized by ``NUMBA_NUM_THREADS``, must not share; else the one
    Numba loads (``private()`` is False), whose pool keeps one worker per core."""
    global _LIB, _PRIVATE
    if _LIB is None:
        with _lock:
            if _LIB is None:
                path = _library_path()
                if path is None:
                    _LIB = False
                    return None
                mod = _private_copy(path) if PRIVATE_POOL else None
                _PRIVATE = mod is not None
                if mod is None:
                    mod = sys.modules.get("numba.np.ufunc.workqueue")
                if mod is None:
                    # the same file Numba would load: one copy of the pool's C state, shared with Numba's kernels
                    loader = importlib.machinery.ExtensionFileLoader("numba.np.ufunc.workqueue", path)
                    spec = importlib.util.spec_from_file_location("numba.np.ufunc.workqueue", path, loader=loader)
                    mod = importlib.util.module_from_spec(spec)
                    loader.exec_module(mod)
                _LIB = mod
    return _LIB or None


def private() -> bool:
    """Whether jitgrad's pool is its own (``spin_pool``, or its own instance of ``library``), not Numba's."""
    return _spin_pool() is not None or (library() is not None and _PRIVATE)


def available() -> bool:
    """Whether parallel kernels can run on a pool without Numba: ``spin_pool``'s, or ``workqueue``."""
    return _spin_pool() is not None or library() is not None


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()        # a thread of the parent may have held it (in ``launch``) at the fork
    for pending in (_JOIN, _QUEUED, _NMINE, _NRANGES):     # (a round the parent's entry was queueing is not ours)
        pending.value = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _worker_count(lib) -> int:
    """The number of queues the library launched: its initial thread count, read on a fresh thread (whose
    thread-local count is unset, so the library answers with the launch count)."""
    get = ctypes.CFUNCTYPE(ctypes.c_int)(lib.get_num_threads)
    out = []
    t = threading.Thread(target=lambda: out.append(get()))
    t.start()
    t.join()
    return int(out[0])


def launch() -> int:
    """Start the workers (once per process; a no-op when Numba or an earlier call started them) and return how
    many threads a pooled launch runs on (``threads()``).  Registers the kernels' symbols with llvmlite.

    jitgrad's own pools (``spin_pool``, the default, or its own instance of ``workqueue``: ``private()``) have one
    worker fewer than ``default_threads()``: the calling thread runs chunk 0 of every pooled launch itself
    (``caller()``), so a launch on two cores wakes one worker, not two, and the caller works instead of sleeping.  A
    pool shared with Numba keeps one worker per core (Numba's kernels split into that many chunks) and every chunk
    on a worker."""
    global _QUEUES, _FUNCS
    spin = _spin_pool()
    lib = library() if spin is None else None       # (takes _lock itself)
    if spin is None and lib is None:
        raise RuntimeError("parallel kernels need jitgrad's pool (Linux) or Numba's workqueue library")
    with _lock:
        if _THREADS.value == 0:
            n = default_threads()
            if spin is not None:
                _QUEUES = spin.start(n - 1) if n >= 2 else 0
                _CALLER.value = 1 if n >= 2 else 0
                _FUNCS = (spin.add_task, spin.ready, spin.synchronize)
            else:
                if not _PRIVATE:        # Numba's own instance: its kernels split into Numba's count of chunks
                    n = settings.numba_threads()
                mine = _PRIVATE and n >= 2
                # a no-op when Numba (sharing the library) launched its pool first
                ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.launch_threads)(n - 1 if mine else n)
                _QUEUES = _worker_count(lib)
                _CALLER.value = 1 if mine else 0
                _FUNCS = (lib.add_task, lib.ready, lib.synchronize)
            _THREADS.value = max(1, _QUEUES + _CALLER.value)
            import llvmlite.binding as ll
            for name, address in zip(("add_task", "ready", "synchronize"), _FUNCS):
                ll.add_symbol("jitgrad_wq_" + name, address)
            ll.add_symbol("jitgrad_wq_threads", ctypes.addressof(_THREADS))
            ll.add_symbol("jitgrad_wq_caller", ctypes.addressof(_CALLER))
            ll.add_symbol("jitgrad_wq_caller_rounds", ctypes.addressof(_CALLER_ROUNDS))
            ll.add_symbol("jitgrad_wq_min_work", ctypes.addressof(_MIN_WORK))
            ll.add_symbol("jitgrad_wq_grain", ctypes.addressof(_GRAIN))
            ll.add_symbol("jitgrad_wq_rounds", ctypes.addressof(_ROUNDS))
            ll.add_symbol("jitgrad_wq_pace", ctypes.addressof(_PACE))
            for name, counter in _TIMES.items():
                ll.add_symbol("jitgrad_wq_" + name, ctypes.addressof(counter))
            busy = spin.quiet_until if spin is not None and BUSY_HOLD else ctypes.addressof(_NOT_BUSY)
            ll.add_symbol("jitgrad_wq_busy_until", busy)
            ll.add_symbol("jitgrad_wq_busy_held", ctypes.addressof(_BUSY_HELD))
            # one round for several launches needs queues that hold more than one task each, run in order
            _CAN_JOIN.value = 1 if spin is not None and _CALLER.value else 0
            for name, value in (("join", _JOIN), ("can_join", _CAN_JOIN), ("queued", _QUEUED), ("joined", _JOINED),
                                ("nmine", _NMINE), ("nranges", _NRANGES), ("mine", _MINE), ("ranges", _RANGES)):
                ll.add_symbol("jitgrad_wq_" + name, ctypes.addressof(value))
            clock = CLOCK_ADDRESS or ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value
            ll.add_symbol("jitgrad_wq_clock", clock)
    return int(_THREADS.value)


def _spin_pool():
    """``spin_pool``'s pool when this process uses it (``POOL``, the default), else None (``workqueue``)."""
    if POOL != "spin" or not PRIVATE_POOL:
        return None
    from . import spin_pool
    return spin_pool.build()


def spinning():
    """jitgrad's own pool (``spin_pool.Pool``: its spin and counters) when launches run on it, else None."""
    pool = _spin_pool()
    return pool if pool is not None and _FUNCS is not None and _FUNCS[1] == pool.ready else None


def caller() -> bool:
    """Whether the calling thread runs chunk 0 of each pooled launch (the pool jitgrad started: ``launch``)."""
    return bool(_CALLER.value)


def queues() -> int:
    """The pool's worker threads (``threads()`` less the calling thread when it runs a chunk; 0 before
    ``launch``)."""
    return _QUEUES


def threads() -> int:
    """The threads a pooled launch runs on, one chunk each: the workers, and the calling thread when
    ``caller()`` (0 before ``launch``)."""
    return int(_THREADS.value)


_TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def run_on_each(fn) -> list:
    """Call ``fn(i)`` once on each worker ``i`` of the ``queues()`` (Python, under the GIL; for set-up such as
    pinning; not on the calling thread) and return the results in worker order.  The caller holds
    ``threads.LAUNCH_LOCK``."""
    launch()
    n = queues()
    results, errors = [None] * n, []

    def task(args, dims, steps, data):
        i = int(args or 0)
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - re-raised by the launching thread
            errors.append(e)
    cb = _TASK(task)
    add = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)(_FUNCS[0])
    spin = spinning()
    if spin is not None:    # (the caller runs no chunk here: its wait is the tasks', not a late round's)
        late, quiet = spin.counter("late"), ctypes.c_int64.from_address(spin.quiet_until)
        late0, quiet0 = late.value, quiet.value
    for i in range(n):                  # one task per queue: ``ready`` wakes them all
        add(ctypes.cast(cb, ctypes.c_void_p), i, None, None, None)
    ctypes.CFUNCTYPE(None)(_FUNCS[1])()
    ctypes.CFUNCTYPE(None)(_FUNCS[2])()
    if spin is not None and late.value != late0:
        quiet.value = quiet0
    if errors:
        raise errors[0]
    return results


__all__ = ["available", "launch", "threads", "queues", "caller", "private", "run_on_each", "default_threads", "library",
           "spinning", "POOL", "SYMBOLS", "PARALLEL_GRAIN", "PARALLEL_WORK", "PRIVATE_POOL", "min_work", "set_min_work", "grain", "rounds",
           "follow_threads", "NEVER",
           "EAGER_PARALLEL_WORK", "EAGER_PARALLEL_GRAIN", "eager_min_work", "eager_grain", "set_eager_min_work",
           "eager_thresholds", "joined", "can_join", "JOIN_MAX", "busy_held", "BUSY_HOLD",
           "caller_rounds", "takes", "takes_batch", "takes_split", "pace", "set_pace", "launch_times", "PACE_OFF",
           "PACE_TIMED", "PACE_HELD", "CLOCK_ID", "CLOCK_ADDRESS"]
