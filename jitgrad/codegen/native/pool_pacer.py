"""The worker pool's pacer: launches stay on the calling thread while pooled ones show another process took a core.

The pool's workers are pinned one per core and take equal static chunks beside the calling thread's
(``workpool.py``), so when another process takes a core, the thread there shares it and every pooled launch waits
for that thread's chunk: measured (2 cores, one spinning hog, ``benchmarks/busy_machine.py``), B1's compiled step
took 1.86x its quiet time with its GEMMs on the pool, against 1.39x when OpenBLAS dropped to one thread under its
own pacer (``ir/ops/blas.BlasPacer``).  The pool's pacer does for the pool what that one does for OpenBLAS.

**Signal: each pooled launch's wall time per unit of its work.**  A gated launch that wakes the workers reads the
clock before ``ready`` and after ``synchronize`` and adds the nanoseconds and its work (the plan's cost units, a
GEMM's multiply-adds) to the pool's counters (``workpool.launch_times``; ``pool_abi.launch``): two clock
reads per pooled launch, none per chunk and none for a launch that stays on the calling thread.  Work-normalised,
so a program bound to ever new sizes (variable lengths) is judged by one rate.  A compiled graph's call guard
(``threads.CallGuard``) reads the counters before and after each call: the call's pooled rate.  No clock call in
Python, and a graph without a parallel-capable step has no pacer at all (B5's 16 us steps read nothing).

**Policy** (per compiled graph, like ``BlasPacer``), judged against a steady reference: the median of the last
``WINDOW`` pooled calls (no judgement before ``WARMUP`` of them). A pooled call is *slow* when its
rate is ``SLOW`` x that median and slower than running the same launches on the calling thread (the median of
recent held calls, or until one was seen, ``EFFICIENCY`` x the workers x the reference). Every pooled call enters
the reference but those of a run of slow calls long enough to hold (a reference that left out every call over
``SLOW`` x itself would only ever fall: the calls it keeps are the fast ones). ``STREAK`` slow calls in a row mean
contention: the next ``HOLD`` calls run their gated launches on the calling thread (``workpool.PACE_HELD``: the
threshold is out of reach, split GEMMs included), then one call tries the pool again; a slow retry holds again at
once, for twice as long (at most ``MAX_HOLD``), and one quiet pooled call ends the streak and starts the hold again
from ``HOLD``. So entering takes a run of slow calls and leaving a single quiet one: a quiet machine's jitter (a
pooled call's rate varies 1.5-2x from call to call on a VM, and a call now and then takes a scheduler slice) sits
under ``SLOW`` x its median, or comes alone, while a core taken by another process slows every pooled call. (The
reference was first the single best pooled call: on a quiet machine, 2 cores, 2026-11-29,
``benchmarks/busy_machine.py b1``, that held B1's launches off the pool for 261 of 400 calls, 9.3 -> 15.2 ms.)
Comparing with the calling thread's own rate keeps a many-core machine on the pool when one core of sixteen is
taken (a 2x slower launch still beats one thread). Held calls time what they kept off the pool
(``serial_ns``/``serial_work``): that is the calling thread's rate. The pacer sets the pool's pace at each call's
start and restores it at its end, holding ``threads.LAUNCH_LOCK`` (the guard takes it first), so eager kernels
between calls never see a hold and no launch reads a half-set state. Results never depend on it: a held launch runs
the chunks the pool would (a loop that sums adds the same partial sums in the same order; products and blocks are
independent calls; ``tests/test_thread_bits.py``).

**Off by default** (``JITGRAD_POOL_PACER=1`` turns it on) until a quiet machine's count of held calls says the
median reference holds nothing there (``benchmarks/busy_machine.py`` reports the held calls).  Off: no pacer, no
clock read.  ``read``, the counters a pacer reads, can be given (tests drive a pacer through it deterministically,
without timing anything).
"""
from __future__ import annotations

import collections
import os
from statistics import median

from . import workpool

POOL_PACER = os.environ.get("JITGRAD_POOL_PACER", "0") == "1"
STATS = {"pool_backoffs": 0, "held_calls": 0}      # counted, for tests


class PoolPacer:
    """``with pacer:`` around each call of one compiled graph that has gated pool launches (see the module
    docstring).  Not re-entrant; callers hold ``threads.LAUNCH_LOCK``."""
    SLOW = 1.5              # a pooled rate this much over the reference (the recent median) is slow
    STREAK = 4              # slow pooled calls in a row that mean contention (fewer: a quiet VM's jitter)
    WINDOW = 32             # the recent calls a reference is the median of
    WARMUP = 4              # pooled calls seen before the first judgement
    EFFICIENCY = 0.75       # the pool's speedup per worker assumed until a held call measured the calling thread
    HOLD = 32
    MAX_HOLD = 1024

    def __init__(self, read=workpool.launch_times, workers=None):
        self.read = read            # held -> cumulative (nanoseconds, work) of timed launches
        self.workers = workers      # the pool's size (None: workpool.threads() at the first judgement)
        self.pooled = collections.deque(maxlen=self.WINDOW)    # ns per unit of work of recent pooled calls
        self.serial = collections.deque(maxlen=self.WINDOW)    # the same of recent held calls (the calling thread)
        self.slow = 0               # slow pooled calls in a row
        self.pending = []           # their rates, while the run is shorter than STREAK
        self.left = 0               # calls still to hold off the pool
        self.hold = self.HOLD
        self.held = False
        self.held_calls = 0         # calls this pacer held off the pool (counted, for tests and benchmarks)
        self.start = (0, 0)

    def __enter__(self):
        if self.left > 0:
            self.left -= 1
            self.held = True
            self.held_calls += 1
            STATS["held_calls"] += 1
            workpool.set_pace(workpool.PACE_HELD)
        else:
            self.held = False
            if workpool.pace() != workpool.PACE_TIMED:
                workpool.set_pace(workpool.PACE_TIMED)
        self.start = self.read(self.held)
        return self

    def __exit__(self, exc_type, *exc):
        ns, work = self.read(self.held)
        held = self.held
        if held:
            workpool.set_pace(workpool.PACE_TIMED)
        work -= self.start[1]
        if exc_type is not None or work <= 0:
            return
        self.judge((ns - self.start[0]) / work, held)

    def reference(self):
        """The pooled rate calls are judged against: the median of the recent pooled calls but those of a run that
        held (None before any)."""
        return median(self.pooled) if self.pooled else None

    def caller(self):
        """The calling thread's rate: the median of recent held calls, or until one was seen, ``EFFICIENCY`` x the
        workers x the reference (None before any pooled call)."""
        if self.serial:
            return median(self.serial)
        ref = self.reference()
        if ref is None:
            return None
        n = self.workers if self.workers is not None else workpool.threads()
        return ref * max(1.0, self.EFFICIENCY * n)

    def judge(self, rate: float, held: bool) -> None:
        """Take one call's rate (nanoseconds per unit of work of its timed launches; ``held``: run on the calling
        thread) into the policy."""
        if held:
            self.serial.append(rate)
            return
        if len(self.pooled) < self.WARMUP:
            self.pooled.append(rate)
            return
        if rate > self.SLOW * self.reference() and rate > self.caller():
            self.slow += 1
            self.pending.append(rate)
            if self.slow >= self.STREAK:
                self.pending.clear()        # contention: no call of the run is the norm
                self.left = self.hold
                self.hold = min(2 * self.hold, self.MAX_HOLD)
                STATS["pool_backoffs"] += 1
            return
        if self.slow < self.STREAK:         # a run too short for contention: a quiet machine's jitter after all
            self.pooled.extend(self.pending)
        self.pending.clear()
        self.slow = 0
        self.hold = self.HOLD
        self.pooled.append(rate)


def pacer():
    """A new ``PoolPacer`` for one compiled graph, or None unless ``JITGRAD_POOL_PACER=1``."""
    return PoolPacer() if POOL_PACER else None


__all__ = ["PoolPacer", "pacer", "POOL_PACER", "STATS"]
