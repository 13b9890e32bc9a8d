"""jitgrad's worker pool as LLVM IR text (``spin_pool.py`` compiles it and holds the Python side; its docstring
gives the protocol): the globals, the workers' loop, ``add_task``, ``ready``, ``synchronize``, start, stop and
forget.  Kept apart from ``spin_pool.py`` because this is the pool's code and that its handle on one process's
instance."""
from __future__ import annotations

from .busy_sign import source as sign_source

MAX_QUEUES = 256        # workers at most (the pool's size is the machine's cores less one)
MAX_TASKS = 16          # queued tasks per worker per round; more run on the calling thread at ``add_task``
STAT_NAMES = ("worker_sleeps", "worker_wakes", "caller_sleeps", "caller_wakes", "rounds", "busy", "spin_hits",
              "spins", "samples", "late", "parks")
CALLER_SLOT = MAX_QUEUES        # the busy sign's sampling slot of whichever thread waits in ``synchronize``
PROBE_SLOT = MAX_QUEUES + 1     # ``Pool.run_queue``'s
FUTEX = {"x86_64": 202, "AMD64": 202, "aarch64": 98, "arm64": 98}
PAUSE = {"x86_64": "call void @llvm.x86.sse2.pause()", "AMD64": "call void @llvm.x86.sse2.pause()",
         "aarch64": 'call void asm sideeffect "yield", ""()', "arm64": 'call void asm sideeffect "yield", ""()'}


def source(machine: str) -> str:
    """The pool's LLVM IR for ``machine`` (a key of ``FUTEX``): its globals, the workers' loop, ``add_task``,
    ``ready``, ``synchronize``, start, stop and forget, and the busy sign's functions (``busy_sign.source``)."""
    futex = FUTEX[machine]
    pause = PAUSE[machine]
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
@jitgrad_pool_active = global i32 {MAX_QUEUES}, align 64
@jitgrad_pool_active_gen = global i32 0
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

; a worker that takes no part while ``active`` (``jitgrad_pool_set_active``) is at most its index sleeps here, on
; ``active`` itself, until it rises past it or the pool stops; it never spins for rounds that are not its own
define internal void @park(i64 %idx) {{
entry:
  br label %head
head:
  %a = load atomic i32, ptr @jitgrad_pool_active seq_cst, align 4
  %a64 = sext i32 %a to i64
  %in = icmp slt i64 %idx, %a64
  %stop = load atomic i32, ptr @jitgrad_pool_stop_flag seq_cst, align 4
  %stopping = icmp ne i32 %stop, 0
  %leave = or i1 %in, %stopping
  br i1 %leave, label %out, label %sleep
sleep:
  call void @futex_wait(ptr @jitgrad_pool_active, i32 %a)
  br label %head
out:
  ret void
}}

; how many workers take part in the rounds from now on (workers 0 .. a-1; the calling thread takes the share of the
; others): between rounds only.  A worker leaving its park resumes from the round count at this call, so it takes
; part in the next round even when that starts before it wakes
define void @jitgrad_pool_set_active(i32 %a) {{
  %g = load atomic i32, ptr @jitgrad_pool_gen seq_cst, align 4
  store atomic i32 %g, ptr @jitgrad_pool_active_gen seq_cst, align 4
  store atomic i32 %a, ptr @jitgrad_pool_active seq_cst, align 4
  call void @jitgrad_pool_futex_wake(ptr @jitgrad_pool_active, i32 2147483647)
  ret void
}}

define internal ptr @worker(ptr %arg) {{
entry:
  %idx = ptrtoint ptr %arg to i64
  br label %wait
wait:
  %seen = phi i32 [0, %entry], [%seen, %slept], [%g, %finished], [%resume, %parked]
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
  br i1 %stopping, label %exit, label %part
part:
  %a = load atomic i32, ptr @jitgrad_pool_active seq_cst, align 4
  %a64 = sext i32 %a to i64
  %out = icmp sge i64 %idx, %a64
  br i1 %out, label %park, label %run
park:
  call void @stat(i32 10)
  call void @park(i64 %idx)
  br label %parked
parked:
  %resume = load atomic i32, ptr @jitgrad_pool_active_gen seq_cst, align 4
  br label %wait
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
  %k = load i32, ptr @jitgrad_pool_pivot
  %act = load i32, ptr @jitgrad_pool_active
  %a = call i32 @llvm.smin.i32(i32 %act, i32 %n)
  %slot = urem i32 %k, %n
  %a1 = add i32 %a, 1
  %q = urem i32 %slot, %a1
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
  %k1 = add i32 %k, 1
  store i32 %k1, ptr @jitgrad_pool_pivot
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
  %act = load i32, ptr @jitgrad_pool_active
  %a = call i32 @llvm.smin.i32(i32 %act, i32 %n)
  store i32 %a, ptr @jitgrad_pool_pending
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
  %act = load i32, ptr @jitgrad_pool_active
  %n = load i32, ptr @jitgrad_pool_nq
  %share = icmp slt i32 %act, %n
  br i1 %share, label %mine, label %timed
mine:                   ; the calling thread's share of the tasks while workers are parked (add_task)
  %a64 = sext i32 %act to i64
  call void @run_queue(i64 %a64)
  br label %timed
timed:
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
  call void @jitgrad_pool_futex_wake(ptr @jitgrad_pool_active, i32 2147483647)
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
{sign_source(machine, MAX_QUEUES + 2)}"""


__all__ = ["source", "FUTEX", "PAUSE", "MAX_QUEUES", "MAX_TASKS", "STAT_NAMES", "CALLER_SLOT", "PROBE_SLOT"]
