"""jitgrad's own worker pool: workers that spin briefly between rounds, then sleep on a futex.

Numba's ``workqueue`` (the pool this one replaced) sleeps its workers on a condition variable after every round
and its caller in ``synchronize``: a wake-up each way a round.  Rounds come back to back (a step's kernels run one
after the other), so here a worker that finished its chunk watches the round counter for a while (``spin_ns``,
``pause`` between reads) before it sleeps, and so does the caller waiting for it: a round that starts within the
spin costs no system call.  Why (counted 2026-11-30, callgrind per thread, warm B9 steps at 2 threads on
``workqueue``): the instructions allowed 1.95x, and what the measured 1.43-1.51x lost (~50 us a round) was those
two wake-ups.  ``set_linger(False)`` makes the workers of the rounds started then sleep at once (eager kernels'
rounds did while eager GEMMs ran on OpenBLAS's own threads; now eager rounds spin longer: ``threads.spin_for``).

Same C interface as ``workqueue`` (``add_task``: a task on the next queue, round robin; ``ready``: start the round;
``synchronize``: wait for every queue), so kernels and entries need no change: ``workpool`` registers these
functions' addresses under the kernels' symbols.  Written in LLVM IR (text, compiled once per process by llvmlite's
MCJIT, a few milliseconds): no C compiler needed, nothing from Numba.  Linux only (futex); elsewhere ``build``
returns None and ``workpool`` keeps ``workqueue``.

**Protocol.**  ``gen`` counts rounds; ``ready`` stores ``pending`` = the workers, then increments ``gen`` and, only
when a worker announced it sleeps (``wsleep`` > 0), wakes them (``FUTEX_WAKE`` on ``gen``).  A worker waits for
``gen`` to move: spinning up to ``spin_ns``, then it announces itself (``wsleep``), reads ``gen`` again and sleeps
on it (``FUTEX_WAIT`` with the value it saw, so a round started in between returns at once).  It runs its queue's
tasks, then decrements ``pending``; the one that brings it to 0 wakes the caller only when the caller announced it
sleeps (``csleep``).  Each announce-then-check pair is sequentially consistent against the other side's
change-then-check, so a wake-up is never lost.  Chunks are whatever the caller queued: who runs them, and whether
anyone spun, changes no result bit.

**Fewer threads than workers** (``set_num_threads(n)`` under the pool's size at run time: ``Pool.set_active``,
between rounds).  The first ``active`` workers take part; ``ready`` counts only them in ``pending``; the ``k``-th task
queued since ``ready`` (chunk ``k mod nq + 1`` of its launch, every launch queueing one per queue) goes to queue
``(k mod nq) mod (active + 1)``, so chunk ``i`` of launches sharing a round stays on one thread, in order, and queue
``active`` (a parked worker's) is the calling thread's share, run in ``synchronize`` before it waits.  A worker at
or past ``active`` that sees a round start parks (``park``: a futex wait on ``active`` itself, no spin) without
touching ``pending``; ``set_active`` records the round count (``active_gen``) before it raises ``active`` and wakes
the parked, which resume from that count, so a round started before one wakes still counts it.

**A busy machine: stop spinning.**  Each waiting thread samples its own run-queue wait now and then (``busy_sign.py``);
when another process shares its core (a quarter of a window waited, in slices, not wake-ups), every wait for a hold
(31 ms, doubling to a quarter of a second as the sign comes back) sleeps at once (``stats()['busy']``) and a spin
under way stops.  A spin that outlasts its budget sleeps for that wait only: a serial stretch is no busy core.  A core
taken by another process costs us about what the sleeping pool costs (the pacer's rule: at most 2x).
``JITGRAD_POOL_SPIN`` (microseconds, default ``SPIN_US``) sets the spin; 0 sleeps at once, as ``workqueue`` does;
``JITGRAD_POOL=workqueue`` keeps Numba's library altogether (``workpool.py``).

**Fork and exit.**  A forked child has no workers: ``forget`` (run at ``os.register_at_fork``) resets the state and
the child's first ``ready`` starts new ones.  ``stop`` (run ``atexit``) ends the workers and joins them, when no round
is in flight; a later ``ready`` starts them again.  ``gemm_blocks`` reads the pool's clock (``Pool.now``) and wakes
its workers without a round (``Pool.nudge``).
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import platform
import sys
import threading

from .busy_sign import QUIET_NS
from . import ir_engine
from .spin_pool_ir import MAX_QUEUES, MAX_TASKS, PROBE_SLOT, STAT_NAMES, FUTEX, source

# how long a thread spins before it sleeps, microseconds (JITGRAD_POOL_SPIN): of the serial stretches between two
# of B9's 106 rounds a step (counted from its launch records), 14 are over ~50 us and none over ~190 us: a 250 us
# spin lets about none pay a wake-up.  OpenBLAS's threads spin ~400 us after a call (threads.py).
SPIN_US = 250
def spin_setting() -> int:
    """The spin from ``JITGRAD_POOL_SPIN`` (microseconds; 0: sleep at once), in nanoseconds."""
    try:
        return max(0, int(float(os.environ.get("JITGRAD_POOL_SPIN", SPIN_US)) * 1000))
    except ValueError:
        return SPIN_US * 1000


class Pool:
    """The built pool: its C functions' addresses (``add_task``, ``ready``, ``synchronize``: ``workqueue``'s
    interface), and Python handles on its start, stop, spin and counters."""

    def __init__(self, engine, spin_ns: int):
        self._engine = engine       # keeps the code mapped
        fn = engine.get_function_address
        self.add_task, self.ready, self.synchronize = (fn("jitgrad_pool_" + n)
                                                       for n in ("add_task", "ready", "synchronize"))
        self._start = ctypes.CFUNCTYPE(None, ctypes.c_int32)(fn("jitgrad_pool_start"))
        self._stop = ctypes.CFUNCTYPE(ctypes.c_int32)(fn("jitgrad_pool_stop"))
        self._forget = ctypes.CFUNCTYPE(None)(fn("jitgrad_pool_forget"))
        self._set_active = ctypes.CFUNCTYPE(None, ctypes.c_int32)(fn("jitgrad_pool_set_active"))
        glob = engine.get_global_value_address
        self._spin = ctypes.c_int64.from_address(glob("jitgrad_pool_spin_ns"))
        self._nq = ctypes.c_int32.from_address(glob("jitgrad_pool_nq"))
        self._active = ctypes.c_int32.from_address(glob("jitgrad_pool_active"))
        self._started = ctypes.c_int32.from_address(glob("jitgrad_pool_started"))
        self._stats = (ctypes.c_int64 * len(STAT_NAMES)).from_address(glob("jitgrad_pool_stats"))
        self._clock = ctypes.c_void_p.from_address(glob("jitgrad_pool_clock"))
        self._clock.value = ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value
        self._linger = ctypes.c_int32.from_address(glob("jitgrad_pool_linger_next"))
        self.quiet_until = glob("jitgrad_pool_quiet_until")     # (its address: the busy rule, workpool.py)
        self._run_queue = ctypes.c_void_p.from_address(glob("jitgrad_pool_run_queue"))
        self._read_run_queue = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p)(fn("read_run_queue"))
        self._spin.value = spin_ns
        self._late = ctypes.c_int32.from_address(glob("jitgrad_pool_late_on"))     # (busy_sign.LATE_ON; tests set it)
        wake = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(fn("jitgrad_pool_futex_wake"))
        self.now, self.nudge = fn("jitgrad_pool_now"), functools.partial(wake, glob("jitgrad_pool_gen"), 2**31 - 1)
        self.wsleep = ctypes.c_int32.from_address(glob("jitgrad_pool_wsleep"))

    def start(self, workers: int) -> int:
        """Start ``workers`` threads (once; a no-op while they run) and return how many run."""
        self._start(int(workers))
        return int(self._nq.value)

    def workers(self) -> int:
        """The workers of a started pool (its queues), else 0."""
        return int(self._nq.value) if self._started.value else 0

    def set_active(self, workers: int | None) -> None:
        """How many workers take part in the rounds from now on (None: all): ``set_num_threads(n)`` below the
        pool's size at run time (``workpool.follow_threads``).  The chunks stay as many: the other workers' share
        goes round to those taking part and the calling thread, and the others sleep (``park``) until the count
        rises.  Between rounds only (under ``threads.LAUNCH_LOCK``)."""
        self._set_active(MAX_QUEUES if workers is None else max(0, min(int(workers), MAX_QUEUES)))

    def active(self) -> int:
        """The workers taking part in rounds (at most ``workers()``)."""
        return min(int(self._active.value), self.workers())

    def stop(self) -> bool:
        """End and join the workers unless a round is in flight; a later round starts them again."""
        return bool(self._stop())

    def forget(self) -> None:
        """In a forked child: drop the parent's workers (not copied by the fork); the next round starts new ones."""
        self._forget()

    def spin_ns(self) -> int:
        """How long a waiting thread spins before it sleeps (nanoseconds)."""
        return int(self._spin.value)

    def set_spin_ns(self, ns: int) -> int:
        """Set ``spin_ns`` (read at every wait); returns the previous value."""
        prev = int(self._spin.value)
        self._spin.value = max(0, int(ns))
        return prev

    def set_linger(self, linger: bool) -> bool:
        """Whether the workers of the rounds started from now on spin after their chunk (the default) or sleep at
        once (eager launches: see the module docstring); returns the previous setting."""
        prev = bool(self._linger.value)
        self._linger.value = 1 if linger else 0
        return prev

    def set_clock(self, address: int) -> None:
        """The ``clock_gettime``-like function spinners read (tests script it)."""
        self._clock.value = int(address)

    def set_run_queue(self, address: int | None) -> None:
        """The function waiting threads read their run-queue wait through (``busy_sign.py``: ``i32 (i64 slot,
        i64 *out)``, filling time on a core, time waiting and times run; 0, 1 for a new thread's baseline, -1 for
        nothing); None: the thread's own ``schedstat`` again.  Tests script it."""
        self._run_queue.value = int(address) if address else ctypes.cast(self._read_run_queue, ctypes.c_void_p).value

    def run_queue(self):
        """The calling thread's ``(time on a core, time waiting to run, times run)`` as the busy sign reads them
        (nanoseconds; ``busy_sign.py``), or None where they cannot be read."""
        out = (ctypes.c_int64 * 3)()
        if self._read_run_queue(PROBE_SLOT, ctypes.addressof(out)) < 0:
            return None
        return tuple(int(v) for v in out)

    def counter(self, name: str):
        """One of ``stats()``'s counters as a live ``c_int64`` (a read without building the dict)."""
        return ctypes.c_int64.from_address(ctypes.addressof(self._stats) + 8 * STAT_NAMES.index(name))

    def stats(self) -> dict:
        """Cumulative counts: worker futex sleeps and the caller's wake calls for them, the caller's sleeps and
        the workers' wake calls for it, rounds, busy signs raised (``busy_sign.py``), waits that ended in their spin
        (or found the round already there), waits that spun, run-queue samples taken."""
        return {name: int(self._stats[i]) for i, name in enumerate(STAT_NAMES)}


_lock = threading.Lock()
_POOL = None


def build() -> Pool | None:
    """The pool (compiled once per process), or None where it cannot (not Linux, no futex number known, no llvmlite)."""
    global _POOL
    if _POOL is None:
        with _lock:
            if _POOL is None:
                _POOL = _build() or False
    return _POOL or None


def _build():
    machine = platform.machine()
    if not sys.platform.startswith("linux") or machine not in FUTEX:
        return None
    try:
        engine = ir_engine.compile_module(source(machine))
    except ImportError:
        return None
    pool = Pool(engine, spin_setting())
    atexit.register(pool.stop)
    return pool


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()
    if _POOL:
        _POOL.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["Pool", "build", "spin_setting", "MAX_QUEUES", "MAX_TASKS", "SPIN_US", "QUIET_NS", "STAT_NAMES"]
