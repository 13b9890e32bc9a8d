"""The worker pool's pacer: launches stay on the calling thread while pooled ones show another process took a core.

The pool's workers are pinned one per core and take equal static chunks (``workpool.py``), so when another
process takes a core, the worker there shares it and every pooled launch waits for that worker's chunk: measured
(2 cores, one spinning hog, ``benchmarks/busy_machine.py``), B1's compiled step took 1.86x its quiet time with
its GEMMs on the pool, against 1.39x when OpenBLAS dropped to one thread under its own pacer
(``ir/ops/blas.BlasPacer``).  The pool's pacer does for the pool what that one does for OpenBLAS.

**Signal: each pooled launch's wall time per unit of its work.**  A gated launch that wakes the workers reads the
clock before ``ready`` and after ``synchronize`` and adds the nanoseconds and its work (the plan's cost units, a
GEMM's multiply-adds) to the pool's counters (``workpool.launch_times``; ``pool_abi.launch``): two clock
reads per pooled launch, none per chunk and none for a launch that stays on the calling thread.  Work-normalised,
so a program bound to ever new sizes (variable lengths) is judged by one rate.  A compiled graph's call guard
(``threads.CallGuard``) reads the counters before and after each call: the call's pooled rate.  No clock call in
Python, and a graph without a parallel-capable step has no pacer at all (B5's 16 us steps read nothing).

**Policy** (per compiled graph, like ``BlasPacer``): a call whose pooled rate is ``SLOW`` x the best pooled rate
seen, and slower than running the same launches on the calling thread (the best rate of held calls, or until one
was seen, ``EFFICIENCY`` x the workers x the best pooled rate), means contention: the next ``HOLD`` calls run
their gated launches on the calling thread (``workpool.PACE_HELD``: the threshold is out of reach, split GEMMs
included), then one call tries the pool again; the hold doubles while retries stay contended (at most
``MAX_HOLD``) and starts again from ``HOLD`` after a quiet call.  Comparing with the calling thread's own rate
keeps a many-core machine on the pool when one core of sixteen is taken (a 2x slower launch still beats one
thread).  Held calls time what they kept off the pool (``serial_ns``/``serial_work``): that is the calling
thread's rate.  The pacer sets the pool's pace at each call's start and restores it at its end, holding
``threads.LAUNCH_LOCK`` (the guard takes it first), so eager kernels between calls never see a hold and no launch
reads a half-set state.  Results never depend on it: a held launch runs the chunks the pool would (a loop that
sums adds the same partial sums in the same order; products and blocks are independent calls).

**Off by default** (``JITGRAD_POOL_PACER=1`` turns it on): measured on a quiet machine (2 cores, 2026-11-29,
``benchmarks/busy_machine.py b1``), it held B1's launches off the pool for 261 of 400 calls (6 backoffs) and took the
quiet step from 9.3 to 15.2 ms: a pooled call's rate varies by more than ``SLOW`` on a quiet VM, so the signal needs a
steadier reference (a median of recent calls, not the best) before it can be on. Without it B1 and B2 stay within the
2x busy/quiet target (1.83x, 1.41x in the same run). Off: no pacer, no clock read. ``read``, the counters a pacer
reads, can be given (tests drive a pacer through it deterministically, without timing anything).
"""
from __future__ import annotations

import os

from . import workpool

POOL_PACER = os.environ.get("JITGRAD_POOL_PACER", "0") == "1"
STATS = {"pool_backoffs": 0, "held_calls": 0}      # counted, for tests


class PoolPacer:
    """``with pacer:`` around each call of one compiled graph that has gated pool launches (see the module
    docstring).  Not re-entrant; callers hold ``threads.LAUNCH_LOCK``."""
    SLOW = 1.5              # a pooled rate this much over the best: another process took a core
    EFFICIENCY = 0.75       # the pool's speedup per worker assumed until a held call measured the calling thread
    HOLD = 32
    MAX_HOLD = 1024

    def __init__(self, read=workpool.launch_times, workers=None):
        self.read = read            # held -> cumulative (nanoseconds, work) of timed launches
        self.workers = workers      # the pool's size (None: workpool.threads() at the first judgement)
        self.best_pool = None       # nanoseconds per unit of work: the fastest pooled call seen
        self.best_caller = None     # the same on the calling thread (held calls)
        self.left = 0               # calls still to hold off the pool
        self.hold = self.HOLD
        self.held = False
        self.start = (0, 0)

    def __enter__(self):
        if self.left > 0:
            self.left -= 1
            self.held = True
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

    def judge(self, rate: float, held: bool) -> None:
        """Take one call's rate (nanoseconds per unit of work of its timed launches; ``held``: run on the calling
        thread) into the policy."""
        if held:
            if self.best_caller is None or rate < self.best_caller:
                self.best_caller = rate
            return
        best = self.best_pool
        if best is None or rate < best:
            self.best_pool = rate
            if best is None:
                return
        caller = self.best_caller
        if caller is None:
            n = self.workers if self.workers is not None else workpool.threads()
            caller = self.best_pool * max(1.0, self.EFFICIENCY * n)
        if rate > self.SLOW * self.best_pool and rate > caller:
            self.left = self.hold
            self.hold = min(2 * self.hold, self.MAX_HOLD)
            STATS["pool_backoffs"] += 1
        else:
            self.hold = self.HOLD


def pacer():
    """A new ``PoolPacer`` for one compiled graph, or None unless ``JITGRAD_POOL_PACER=1``."""
    return PoolPacer() if POOL_PACER else None


__all__ = ["PoolPacer", "pacer", "POOL_PACER", "STATS"]
