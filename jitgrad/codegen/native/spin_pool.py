"""jitgrad's own worker pool: workers that spin briefly between rounds, then sleep on a futex.

Numba's ``workqueue`` (the pool this one replaced) sleeps its workers on a condition variable after every round
and its caller in ``synchronize``: a wake-up each way a round.  Rounds come back to back (a step's kernels run one
after the other), so here a worker that finished its chunk watches the round counter for a while (``spin_ns``,
``pause`` between reads) before it sleeps, and so does the caller waiting for it: a round that starts within the
spin costs no system call.  Why (counted 2026-11-30, callgrind per thread, warm B9 steps at 2 threads on
``workqueue``): the instructions allowed 1.95x, and what the measured 1.43-1.51x lost (~50 us a round) was those
two wake-ups.  An eager kernel's round is followed by Python and NumPy work, not another round: ``set_linger(False)``
makes the workers of the rounds started then sleep at once, leaving the core to OpenBLAS's threads.

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

from .busy_sign import QUIET_NS, source as _sign_source

MAX_QUEUES = 256        # workers at most (the pool's size is the machine's cores less one)
MAX_TASKS = 16          # queued tasks per worker per round; more run on the calling thread at ``add_task``
# how long a thread spins before it sleeps, microseconds (JITGRAD_POOL_SPIN): of the serial stretches between two
# of B9's 106 rounds a step (counted from its launch records), 14 are over ~50 us and none over ~190 us: a 250 us
# spin lets about none pay a wake-up.  OpenBLAS's threads spin ~400 us after a call (threads.py).
SPIN_US = 250
STAT_NAMES = ("worker_sleeps", "worker_wakes", "caller_sleeps", "caller_wakes", "rounds", "busy", "spin_hits",
              "spins", "samples", "late")
CALLER_SLOT = MAX_QUEUES        # the busy sign's sampling slot of whichever thread waits in ``synchronize``
PROBE_SLOT = MAX_QUEUES + 1     # ``Pool.run_queue``'s
_FUTEX = {"x86_64": 202, "AMD64": 202, "aarch64": 98, "arm64": 98}
_PAUSE = {"x86_64": "call void @llvm.x86.sse2.pause()", "AMD64": "call void @llvm.x86.sse2.pause()",
          "aarch64": 'call void asm sideeffect "yield", ""()', "arm64": 'call void asm sideeffect "yield", ""()'}


def spin_setting() -> int:
    """The spin from ``JITGRAD_POOL_SPIN`` (microseconds; 0: sleep at once), in nanoseconds."""
    try:
        return max(0, int(float(os.environ.get("JITGRAD_POOL_SPIN", SPIN_US)) * 1000))
    except ValueError:
        return SPIN_US * 1000


def _source(machine: str) -> str:
    futex = _FUTEX[machine]
    pause = _PAUSE[machine]
    declare_pause = "declare void @llvm.x86.sse2.pause()" if "llvm.x86" in pause else ""
    nstats = len(STAT_NAMES)
    slots = MAX_QUEUES * MAX_TASKS
    return f"""
@jitgrad_pool_gen = global i32 0, align 64
@jitgrad_pool_pending = global i32 0, align 64
@jitgrad_pool_wsleep = global i32 0, align 64
@jitgrad_pool_csleep = global i32 0, align 64
@jitgrad_pool_quiet_until = global i64 0, align 64
@jitgrad_pool_linger_next = global i32 1, align 64
@jitgrad_pool_linger = global i32 1
@jitgrad_pool_nq = global i32 0, align 64
@jitgrad_pool_pivot = global i32 0
@jitgrad_pool_started = global i32 0
@jitgrad_pool_stop_flag = global i32 0
@jitgrad_pool_spin_ns = global i64 0
@jitgrad_pool_clock = global ptr null
@jitgrad_pool_stats = global [{nstats} x i64] zeroinitializer, align 64
@jitgrad_pool_counts = global [{MAX_QUEUES} x i32] zeroinitializer, align 64
@jitgrad_pool_tasks = global [{slots} x [5 x ptr]] zeroinitializer, align 64
@jitgrad_pool_tids = global [{MAX_QUEUES} x i64] zeroinitializer

declare i64 @syscall(i64, ...)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
{declare_pause}

define internal void @stat(i32 %k) {{
  %p = getelementptr [{nstats} x i64], ptr @jitgrad_pool_stats, i64 0, i32 %k
  %o = atomicrmw add ptr %p, i64 1 monotonic
  ret void
}}

define internal void @futex_wait(ptr %w, i32 %v) {{
  %v64 = zext i32 %v to i64
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr %w, i64 128, i64 %v64, ptr null)
  ret void
}}

define void @jitgrad_pool_futex_wake(ptr %w, i32 %n) {{
  %n64 = zext i32 %n to i64
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr %w, i64 129, i64 %n64)
  ret void
}}

define i64 @jitgrad_pool_now() {{
  %ts = alloca [2 x i64]
  %f = load ptr, ptr @jitgrad_pool_clock
  %r = call i32 %f(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %np = getelementptr [2 x i64], ptr %ts, i64 0, i64 1
  %n = load i64, ptr %np
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}}

; spin until *w != seen (zero false) or *w == 0 (zero true): 1 when it happened within the spin, else 0; %slot:
; the waiting thread's busy-sign slot (busy_sign.py), sampled at the spin's clock reads
define internal i1 @spin(ptr %w, i32 %seen, i1 %zero, i64 %slot) {{
entry:
  %budget = load i64, ptr @jitgrad_pool_spin_ns
  %off = icmp eq i64 %budget, 0
  br i1 %off, label %once, label %check
check:
  %t0 = call i64 @jitgrad_pool_now()
  call void @busy_check(i64 %slot, i64 %t0)
  %until = load atomic i64, ptr @jitgrad_pool_quiet_until monotonic, align 8
  %busy = icmp slt i64 %t0, %until
  br i1 %busy, label %once, label %start
once:
  %v0 = load atomic i32, ptr %w acquire, align 4
  %z0 = icmp eq i32 %v0, 0
  %n0 = icmp ne i32 %v0, %seen
  %d0 = select i1 %zero, i1 %z0, i1 %n0
  ret i1 %d0
start:
  call void @stat(i32 7)
  br label %loop
loop:
  %i = phi i64 [0, %start], [%i1, %next], [%i1, %tick]
  %v = load atomic i32, ptr %w acquire, align 4
  %z = icmp eq i32 %v, 0
  %n = icmp ne i32 %v, %seen
  %d = select i1 %zero, i1 %z, i1 %n
  br i1 %d, label %hit, label %pause
pause:
  {pause}
  %i1 = add i64 %i, 1
  %m = and i64 %i1, 31
  %c = icmp eq i64 %m, 0
  br i1 %c, label %clock, label %next
next:
  br label %loop
clock:
  %t = call i64 @jitgrad_pool_now()
  call void @busy_check(i64 %slot, i64 %t)
  %until2 = load atomic i64, ptr @jitgrad_pool_quiet_until monotonic, align 8
  %signed = icmp slt i64 %t, %until2
  %el = sub i64 %t, %t0
  %over = icmp sgt i64 %el, %budget
  %stop = or i1 %signed, %over
  br i1 %stop, label %missed, label %tick
tick:
  br label %loop
missed:
  ret i1 0
hit:
  ret i1 1
}}

define internal void @run_queue(i64 %idx) {{
entry:
  %cp = getelementptr [{MAX_QUEUES} x i32], ptr @jitgrad_pool_counts, i64 0, i64 %idx
  %n = load i32, ptr %cp
  %base = mul i64 %idx, {MAX_TASKS}
  br label %head
head:
  %t = phi i32 [0, %entry], [%t1, %body]
  %more = icmp slt i32 %t, %n
  br i1 %more, label %body, label %done
body:
  %t64 = zext i32 %t to i64
  %s = add i64 %base, %t64
  %rec = getelementptr [{slots} x [5 x ptr]], ptr @jitgrad_pool_tasks, i64 0, i64 %s
  %fn = load ptr, ptr %rec
  %p1 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 1
  %a1 = load ptr, ptr %p1
  %p2 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 2
  %a2 = load ptr, ptr %p2
  %p3 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 3
  %a3 = load ptr, ptr %p3
  %p4 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 4
  %a4 = load ptr, ptr %p4
  call void %fn(ptr %a1, ptr %a2, ptr %a3, ptr %a4)
  %t1 = add i32 %t, 1
  br label %head
done:
  store i32 0, ptr %cp
  ret void
}}

define internal ptr @worker(ptr %arg) {{
entry:
  %idx = ptrtoint ptr %arg to i64
  br label %wait
wait:
  %seen = phi i32 [0, %entry], [%seen, %slept], [%g, %finished]
  %linger = load atomic i32, ptr @jitgrad_pool_linger monotonic, align 4
  %at_once = icmp eq i32 %linger, 0
  br i1 %at_once, label %sleep, label %spin
spin:
  %ok = call i1 @spin(ptr @jitgrad_pool_gen, i32 %seen, i1 0, i64 %idx)
  br i1 %ok, label %hit, label %sleep
hit:
  call void @stat(i32 6)
  br label %work
sleep:
  %o1 = atomicrmw add ptr @jitgrad_pool_wsleep, i32 1 seq_cst
  %g0 = load atomic i32, ptr @jitgrad_pool_gen seq_cst, align 4
  %same = icmp eq i32 %g0, %seen
  br i1 %same, label %do_sleep, label %awake
do_sleep:
  call void @stat(i32 0)
  call void @futex_wait(ptr @jitgrad_pool_gen, i32 %seen)
  call void @busy_slept(i64 %idx)
  br label %awake
awake:
  %o2 = atomicrmw sub ptr @jitgrad_pool_wsleep, i32 1 seq_cst
  %g1 = load atomic i32, ptr @jitgrad_pool_gen acquire, align 4
  %moved = icmp ne i32 %g1, %seen
  br i1 %moved, label %work, label %slept
slept:
  br label %wait
work:
  %g = load atomic i32, ptr @jitgrad_pool_gen acquire, align 4
  %stop = load atomic i32, ptr @jitgrad_pool_stop_flag acquire, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %run
run:
  call void @run_queue(i64 %idx)
  %r = atomicrmw sub ptr @jitgrad_pool_pending, i32 1 seq_cst
  %last = icmp eq i32 %r, 1
  br i1 %last, label %check_caller, label %finished
check_caller:
  %cs = load atomic i32, ptr @jitgrad_pool_csleep seq_cst, align 4
  %asleep = icmp ne i32 %cs, 0
  br i1 %asleep, label %wake_caller, label %finished
wake_caller:
  call void @stat(i32 3)
  call void @jitgrad_pool_futex_wake(ptr @jitgrad_pool_pending, i32 1)
  br label %finished
finished:
  br label %wait
exit:
  ret ptr null
}}

define internal void @start_workers() {{
entry:
  store i32 0, ptr @jitgrad_pool_gen
  store i32 0, ptr @jitgrad_pool_pending
  store i32 0, ptr @jitgrad_pool_wsleep
  store i32 0, ptr @jitgrad_pool_csleep
  store i32 0, ptr @jitgrad_pool_stop_flag
  %n = load i32, ptr @jitgrad_pool_nq
  br label %head
head:
  %i = phi i32 [0, %entry], [%i1, %made]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %body, label %done
body:
  %i64 = zext i32 %i to i64
  %tp = getelementptr [{MAX_QUEUES} x i64], ptr @jitgrad_pool_tids, i64 0, i64 %i64
  %arg = inttoptr i64 %i64 to ptr
  %rc = call i32 @pthread_create(ptr %tp, ptr null, ptr @worker, ptr %arg)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %short, label %made
made:
  %i1 = add i32 %i, 1
  br label %head
short:
  store i32 %i, ptr @jitgrad_pool_nq     ; fewer workers: add_task's round robin spreads the chunks over them
  br label %done
done:
  store i32 1, ptr @jitgrad_pool_started
  ret void
}}

define void @jitgrad_pool_add_task(ptr %fn, ptr %args, ptr %dims, ptr %steps, ptr %data) {{
entry:
  %n = load i32, ptr @jitgrad_pool_nq
  %none = icmp sle i32 %n, 0
  br i1 %none, label %inline, label %queue
queue:
  %q = load i32, ptr @jitgrad_pool_pivot
  %q64 = zext i32 %q to i64
  %cp = getelementptr [{MAX_QUEUES} x i32], ptr @jitgrad_pool_counts, i64 0, i64 %q64
  %c = load i32, ptr %cp
  %full = icmp sge i32 %c, {MAX_TASKS}
  br i1 %full, label %inline, label %store
store:
  %base = mul i64 %q64, {MAX_TASKS}
  %c64 = zext i32 %c to i64
  %s = add i64 %base, %c64
  %rec = getelementptr [{slots} x [5 x ptr]], ptr @jitgrad_pool_tasks, i64 0, i64 %s
  store ptr %fn, ptr %rec
  %p1 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 1
  store ptr %args, ptr %p1
  %p2 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 2
  store ptr %dims, ptr %p2
  %p3 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 3
  store ptr %steps, ptr %p3
  %p4 = getelementptr [5 x ptr], ptr %rec, i64 0, i64 4
  store ptr %data, ptr %p4
  %c1 = add i32 %c, 1
  store i32 %c1, ptr %cp
  %q1 = add i32 %q, 1
  %wrap = icmp sge i32 %q1, %n
  %q2 = select i1 %wrap, i32 0, i32 %q1
  store i32 %q2, ptr @jitgrad_pool_pivot
  ret void
inline:
  call void %fn(ptr %args, ptr %dims, ptr %steps, ptr %data)
  ret void
}}

define void @jitgrad_pool_ready() {{
entry:
  store i32 0, ptr @jitgrad_pool_pivot
  %st = load i32, ptr @jitgrad_pool_started
  %cold = icmp eq i32 %st, 0
  br i1 %cold, label %start, label %go
start:
  call void @start_workers()
  br label %go
go:
  %n = load i32, ptr @jitgrad_pool_nq
  %none = icmp sle i32 %n, 0
  br i1 %none, label %out, label %round
round:
  store i32 %n, ptr @jitgrad_pool_pending
  %ln = load i32, ptr @jitgrad_pool_linger_next
  store atomic i32 %ln, ptr @jitgrad_pool_linger monotonic, align 4
  call void @stat(i32 4)
  %o = atomicrmw add ptr @jitgrad_pool_gen, i32 1 seq_cst
  %w = load atomic i32, ptr @jitgrad_pool_wsleep seq_cst, align 4
  %asleep = icmp sgt i32 %w, 0
  call void @late_round(i1 %asleep)
  br i1 %asleep, label %wake, label %out
wake:
  call void @stat(i32 1)
  call void @jitgrad_pool_futex_wake(ptr @jitgrad_pool_gen, i32 2147483647)
  br label %out
out:
  ret void
}}

define void @jitgrad_pool_synchronize() {{
entry:
  %ts = call i64 @jitgrad_pool_now()
  %ok = call i1 @spin(ptr @jitgrad_pool_pending, i32 0, i1 1, i64 {CALLER_SLOT})
  br i1 %ok, label %out, label %announce
announce:
  store atomic i32 1, ptr @jitgrad_pool_csleep seq_cst, align 4
  br label %head
head:
  %p = load atomic i32, ptr @jitgrad_pool_pending seq_cst, align 4
  %done = icmp eq i32 %p, 0
  br i1 %done, label %clear, label %sleep
sleep:
  call void @stat(i32 2)
  call void @futex_wait(ptr @jitgrad_pool_pending, i32 %p)
  call void @busy_slept(i64 {CALLER_SLOT})
  br label %head
clear:
  store atomic i32 0, ptr @jitgrad_pool_csleep seq_cst, align 4
  br label %out
out:
  call void @late_check(i64 %ts)
  ret void
}}

define void @jitgrad_pool_start(i32 %n) {{
  %st = load i32, ptr @jitgrad_pool_started
  %cold = icmp eq i32 %st, 0
  br i1 %cold, label %go, label %out
go:
  %m = call i32 @llvm.smin.i32(i32 %n, i32 {MAX_QUEUES})
  store i32 %m, ptr @jitgrad_pool_nq
  call void @start_workers()
  br label %out
out:
  ret void
}}
declare i32 @llvm.smin.i32(i32, i32)

; end the workers and join them (none when no round is in flight would be left waiting): 1 when stopped
define i32 @jitgrad_pool_stop() {{
entry:
  %st = load i32, ptr @jitgrad_pool_started
  %cold = icmp eq i32 %st, 0
  br i1 %cold, label %no, label %check
check:
  %p = load atomic i32, ptr @jitgrad_pool_pending seq_cst, align 4
  %busy = icmp ne i32 %p, 0
  br i1 %busy, label %no, label %go
go:
  store atomic i32 1, ptr @jitgrad_pool_stop_flag seq_cst, align 4
  %o = atomicrmw add ptr @jitgrad_pool_gen, i32 1 seq_cst
  call void @jitgrad_pool_futex_wake(ptr @jitgrad_pool_gen, i32 2147483647)
  %n = load i32, ptr @jitgrad_pool_nq
  br label %head
head:
  %i = phi i32 [0, %go], [%i1, %body]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %body, label %done
body:
  %i64 = zext i32 %i to i64
  %tp = getelementptr [{MAX_QUEUES} x i64], ptr @jitgrad_pool_tids, i64 0, i64 %i64
  %tid = load i64, ptr %tp
  %rc = call i32 @pthread_join(i64 %tid, ptr null)
  %i1 = add i32 %i, 1
  br label %head
done:
  store i32 0, ptr @jitgrad_pool_started
  store i32 0, ptr @jitgrad_pool_stop_flag
  ret i32 1
no:
  ret i32 0
}}

; in a forked child: no workers (the parent's threads are not copied); the next ready starts new ones
define void @jitgrad_pool_forget() {{
entry:
  store i32 0, ptr @jitgrad_pool_started
  store i32 0, ptr @jitgrad_pool_pivot
  call void @sign_forget()
  call void @llvm.memset.p0.i64(ptr @jitgrad_pool_counts, i8 0, i64 {4 * MAX_QUEUES}, i1 0)
  ret void
}}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
{_sign_source(machine, MAX_QUEUES + 2)}"""


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
        glob = engine.get_global_value_address
        self._spin = ctypes.c_int64.from_address(glob("jitgrad_pool_spin_ns"))
        self._nq = ctypes.c_int32.from_address(glob("jitgrad_pool_nq"))
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
    if not sys.platform.startswith("linux") or machine not in _FUTEX:
        return None
    try:
        import llvmlite.binding as ll
    except ImportError:
        return None
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    mod = ll.parse_assembly(_source(machine))
    mod.verify()
    tm = ll.Target.from_default_triple().create_target_machine(opt=2)
    engine = ll.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
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
