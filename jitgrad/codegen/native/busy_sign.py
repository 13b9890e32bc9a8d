"""The spin pool's busy sign: another process took a pool thread's core, read from the thread's run-queue wait.

A spinning pool (``spin_pool.py``) must stop spinning when a core is taken: a spinner then takes half a core from
the thread it waits for.  What says so is the time a pool thread was *runnable but not running*: Linux counts it
per thread (``/proc/thread-self/schedstat``: time on a core, time waiting in the run queue, times run).  Sharing a
core with a process that spins, a thread waits about half the time, in slices of milliseconds (read on this
2-core host, a thread spinning 1 s: pinned with a spinning process, 55% of the wall time waiting, 4.4 ms a wait;
beside other users' short tasks, 3% and 0.2 ms; the number of involuntary switches, ~150, was the same in both,
so it is no sign); on a quiet machine it waits only for a wake-up (microseconds), whatever the step does.

What this sign replaces did not tell them apart: a spin that outlasted its budget ("spins run out") counted as a
busy core whether the wait was long because a core was taken or because the step had a long serial stretch (a
fresh process's first steps: tracing, the first tier's slower code, Python between calls), and a gap between two
clock reads of a spin is one descheduling, not a share.  Either sent the workers to a quarter of a second of
sleeps on a quiet machine, a futex wake-up every round (B11 at 2 threads: 0.44-0.53 ms a step against 0.20).

**The rule.**  Each pool thread samples itself (its own run-queue counters: only the thread itself, or a read of
another thread's file, sees them) when it waits for the pool (``spin_pool``'s ``spin``: at its start and at its
clock reads), at most once per ``SAMPLE_NS``: a load and a compare otherwise.  A sample costs a ``pread`` of the
thread's own ``schedstat`` file (opened once per thread, found again by its thread id: a thread that changed, a
worker started again or a forked child's, reopens it) and a ``gettid``.  Over the window since its last sample a
thread is *crowded* when it waited at least 1/``SHARE`` of the window (``SHARE`` 4: a quarter; one spinning
process on its core makes it about a half) and its waits averaged at least ``MIN_WAIT_NS`` (a slice, not a
wake-up: a pool that sleeps at every wait makes its threads wait for every wake-up, tens of microseconds here,
which is a quiet machine's).  A crowded sample sets ``quiet_until`` a hold later (``stats()['busy']`` counts it):
waits sleep at once until then, and the busy rule (``workpool.BUSY_HOLD``) keeps gated launches on the calling
thread.  The hold is ``QUIET_MIN_NS`` after a quiet stretch and doubles, up to ``QUIET_NS``, each time the sign comes
back within ``REPEAT`` holds of lapsing (``raise_sign``): a taken core soon holds it a quarter of a second, a quiet
host's lone blip an eighth of that.  Samples taken while the sign stands only move the window: a sleeping pool's
wake-ups (on a virtual machine whose idle cores wake slowly, maybe a slice's length) must not hold the sign up, so
it lapses and the next windows, spinning again, judge afresh.  A window in which the thread slept (a futex wait:
``busy_slept``) only moves the window too: its wake-up waited in the run queue whatever the load (on this virtual
machine an idle vCPU's wake-up waited 0.2-0.5 ms, measured in B1's quiet runs: a sign that then stood for all 300
steps, 4.9 of ~5 launches a step held), so only windows a thread spent runnable, spinning or working, are judged.
So a long serial stretch alone, however many spins it makes run out, never raises it; a thread whose core is shared
does, within one or two windows.

**A late round.**  A worker whose core another process took also overruns its spin and sleeps at every
descheduling, so its own windows are mostly not judged (they held a sleep).  The caller sees it another way: it
runs chunk 0 of each round between ``ready`` and ``synchronize``, and a worker on a free core finishes its chunk
about when the caller does.  So ``synchronize`` compares its wait with the caller's own chunk: a wait over
``LATE_SHARE`` times the own chunk (chunks of a triangle differ up to 3x) plus ``LATE_NS`` (more than this VM's
wake-up of a sleeping worker, 0.2-0.5 ms, and a quiet machine's blips; ``WAKE_NS`` more when ``ready`` had to wake
one) is a slice lost to another process, and raises the sign as a crowded sample does (``stats()['late']`` counts it).
``JITGRAD_POOL_LATE=0`` turns the rule off.

Where the file is missing or unreadable (no ``/proc``, a kernel without ``CONFIG_SCHED_INFO``) samples read
nothing and the sign never stands: the pool spins as on a quiet machine.  The reader is a function pointer
(``jitgrad_pool_run_queue``), so tests script what a thread waited (``Pool.set_run_queue``).
"""
from __future__ import annotations

import os

# a thread samples its run-queue wait at most once per SAMPLE_NS: a window long enough to hold a few of a shared
# core's slices (1.5-4 ms here), so one short preemption on a quiet machine is a small share of it
SAMPLE_NS = 8_000_000
SHARE = 4               # crowded: waited at least 1/SHARE of a window ...
MIN_WAIT_NS = 100_000   # ... in waits of this much on average (a taken core's slices, not wake-ups of microseconds)
# how long waits sleep at once after a crowded sample: a time, not a count of rounds (64 rounds were 0.6 of
# B9's steps but 13 of B1's); one core taken, counted: B1 busy/quiet 1.4-1.5x at 0.5 s, 1.7-2.0x at 0.1 s.
# A sign after a quiet stretch holds QUIET_MIN_NS; one raised again less than REPEAT holds after the last lapsed
# holds twice as long, up to QUIET_NS: a taken core raises it again within a round or a sample of each lapse, so
# it soon holds QUIET_NS, while a quiet host's lone blip (B9 at 2 threads, 300 quiet steps: 6 signs, 4 of them
# late rounds) holds an eighth of that, not a quarter of a second of steps on one thread
QUIET_NS = 250_000_000
QUIET_MIN_NS = QUIET_NS // 8
REPEAT = 4
LONG_AGO = -(1 << 62)   # the last sign's end before any sign: every clock (a scripted one at 0 too) is long after it
# a late round (above): the caller waited more than LATE_SHARE x its own chunk + LATE_NS (+ WAKE_NS after a wake-up);
# LATE_NS under the slice a spinning process leaves a thread that shares its core (4.4 ms measured here, above),
# over the blips of a quiet machine's own short tasks (0.2 ms waits)
LATE_SHARE = 3
LATE_NS = 2_000_000
LATE_ON = 0 if os.environ.get("JITGRAD_POOL_LATE", "1") == "0" else 1
WAKE_NS = 750_000
_GETTID = {"x86_64": 186, "AMD64": 186, "aarch64": 178, "arm64": 178}
_PATH = b"/proc/thread-self/schedstat\x00"
O_RDONLY_CLOEXEC = 0x80000      # O_RDONLY | O_CLOEXEC (the same on x86-64 and AArch64)


def source(machine: str, slots: int) -> str:
    """LLVM IR text: the readers' state for ``slots`` threads, the default reader and ``@busy_check(i64 slot,
    i64 now)``, which a waiting thread calls with its slot and the clock; it needs the pool's globals
    ``@jitgrad_pool_quiet_until`` and ``@stat`` (``spin_pool_ir.source``)."""
    path = "".join(f"\\{c:02X}" for c in _PATH)
    return f"""
@jitgrad_pool_rq_files = global [{slots} x [2 x i64]] zeroinitializer, align 64    ; per slot: fd + 1, thread id
@jitgrad_pool_rq_last = global [{slots} x [4 x i64]] zeroinitializer, align 64     ; clock, waited, runs, slept
@jitgrad_pool_run_queue = global ptr @read_run_queue
@jitgrad_pool_quiet_hold = global i64 {QUIET_MIN_NS}    ; the last sign's hold (``raise_sign``)
@jitgrad_pool_quiet_last = global i64 {LONG_AGO}     ; and its end (``quiet_until``, which the kernels clear)
@jitgrad_pool_late_on = global i32 {LATE_ON}
@jitgrad_pool_late_t0 = global i64 0        ; when the round in flight started (``ready``)
@jitgrad_pool_late_woke = global i32 0      ; whether its ``ready`` woke a sleeping worker
@rq_path = private constant [{len(_PATH)} x i8] c"{path}"

declare i32 @open(ptr, i32, ...)
declare i64 @pread(i32, ptr, i64, i64)
declare i32 @close(i32)

; the calling thread's schedstat, parsed into out[0..2] (time on a core, time waiting, times run): 0; the same
; from a file opened just now (a new thread in this slot: a baseline, no window): 1; nothing readable: -1
define i32 @read_run_queue(i64 %slot, ptr %out) {{
entry:
  %buf = alloca [96 x i8]
  %rec = getelementptr [{slots} x [2 x i64]], ptr @jitgrad_pool_rq_files, i64 0, i64 %slot
  %tidp = getelementptr [2 x i64], ptr %rec, i64 0, i64 1
  %tid = call i64 (i64, ...) @syscall(i64 {_GETTID[machine]})
  %had = load i64, ptr %tidp
  %same = icmp eq i64 %had, %tid
  br i1 %same, label %read, label %reopen
reopen:
  %old = load i64, ptr %rec
  %open = icmp sgt i64 %old, 0
  br i1 %open, label %shut, label %fresh
shut:
  %oldfd = sub i64 %old, 1
  %ofd32 = trunc i64 %oldfd to i32
  %c = call i32 @close(i32 %ofd32)
  br label %fresh
fresh:
  %nfd = call i32 (ptr, i32, ...) @open(ptr @rq_path, i32 {O_RDONLY_CLOEXEC})
  %nfd64 = sext i32 %nfd to i64
  %stored = add i64 %nfd64, 1
  store i64 %stored, ptr %rec
  store i64 %tid, ptr %tidp
  br label %read
read:
  %kind = phi i32 [0, %entry], [1, %fresh]
  %f1 = load i64, ptr %rec
  %none = icmp sle i64 %f1, 0
  br i1 %none, label %fail, label %pread
pread:
  %fd = sub i64 %f1, 1
  %fd32 = trunc i64 %fd to i32
  %n = call i64 @pread(i32 %fd32, ptr %buf, i64 95, i64 0)
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %lost, label %parse
lost:                                   ; the thread this file was opened for is gone: reopen next time
  store i64 0, ptr %tidp
  br label %fail
parse:
  %ok = call i1 @parse3(ptr %buf, i64 %n, ptr %out)
  %r = select i1 %ok, i32 %kind, i32 -1
  ret i32 %r
fail:
  ret i32 -1
}}

; three decimal numbers separated by single non-digits: 1 when all three were read
define internal i1 @parse3(ptr %buf, i64 %n, ptr %out) {{
entry:
  br label %head
head:
  %i = phi i64 [0, %entry], [%i1, %digit], [%i1, %sep]
  %k = phi i64 [0, %entry], [%k, %digit], [%k1, %sep]
  %acc = phi i64 [0, %entry], [%acc1, %digit], [0, %sep]
  %full = icmp sge i64 %k, 3
  br i1 %full, label %yes, label %more
more:
  %left = icmp slt i64 %i, %n
  br i1 %left, label %char, label %end
char:
  %cp = getelementptr i8, ptr %buf, i64 %i
  %ch = load i8, ptr %cp
  %d8 = sub i8 %ch, 48
  %isd = icmp ult i8 %d8, 10
  %i1 = add i64 %i, 1
  br i1 %isd, label %digit, label %sep
digit:
  %d = zext i8 %d8 to i64
  %a10 = mul i64 %acc, 10
  %acc1 = add i64 %a10, %d
  br label %head
sep:
  %slotp = getelementptr i64, ptr %out, i64 %k
  store i64 %acc, ptr %slotp
  %k1 = add i64 %k, 1
  br label %head
end:
  %last = icmp eq i64 %k, 2
  br i1 %last, label %tail, label %no
tail:
  %tp = getelementptr i64, ptr %out, i64 2
  store i64 %acc, ptr %tp
  br label %yes
yes:
  ret i1 1
no:
  ret i1 0
}}

; a waiting thread (its slot) at clock %now: sample its run-queue wait when SAMPLE_NS passed since its last sample
define internal void @busy_check(i64 %slot, i64 %now) alwaysinline {{
entry:
  %last = getelementptr [{slots} x [4 x i64]], ptr @jitgrad_pool_rq_last, i64 0, i64 %slot
  %t = load i64, ptr %last
  %el = sub i64 %now, %t
  %due = icmp sge i64 %el, {SAMPLE_NS}
  br i1 %due, label %sample, label %out
sample:
  call void @busy_sample(ptr %last, i64 %slot, i64 %now)
  br label %out
out:
  ret void
}}

; a thread of this slot slept (a futex wait): its next sample only moves the window (see the module docstring)
define internal void @busy_slept(i64 %slot) alwaysinline {{
entry:
  %last = getelementptr [{slots} x [4 x i64]], ptr @jitgrad_pool_rq_last, i64 0, i64 %slot
  %fp = getelementptr [4 x i64], ptr %last, i64 0, i64 3
  store i64 1, ptr %fp
  ret void
}}

define internal void @busy_sample(ptr %last, i64 %slot, i64 %now) noinline {{
entry:
  %v = alloca [3 x i64]
  %fn = load ptr, ptr @jitgrad_pool_run_queue
  %r = call i32 %fn(i64 %slot, ptr %v)
  call void @stat(i32 8)
  %t0 = load i64, ptr %last
  store i64 %now, ptr %last
  %bad = icmp slt i32 %r, 0
  br i1 %bad, label %out, label %got
got:
  %wp = getelementptr [3 x i64], ptr %v, i64 0, i64 1
  %w = load i64, ptr %wp
  %np = getelementptr [3 x i64], ptr %v, i64 0, i64 2
  %runs = load i64, ptr %np
  %lw = getelementptr [4 x i64], ptr %last, i64 0, i64 1
  %w0 = load i64, ptr %lw
  %ln = getelementptr [4 x i64], ptr %last, i64 0, i64 2
  %n0 = load i64, ptr %ln
  store i64 %w, ptr %lw
  store i64 %runs, ptr %ln
  %fresh = icmp ne i32 %r, 0
  %first = icmp eq i64 %t0, 0
  %until0 = load atomic i64, ptr @jitgrad_pool_quiet_until monotonic, align 8
  %standing = icmp slt i64 %now, %until0
  %sp = getelementptr [4 x i64], ptr %last, i64 0, i64 3
  %sf = load i64, ptr %sp
  store i64 0, ptr %sp
  %slept = icmp ne i64 %sf, 0
  %b1 = or i1 %fresh, %first
  %b2 = or i1 %b1, %slept
  %base = or i1 %b2, %standing
  br i1 %base, label %out, label %judge
judge:
  %window = sub i64 %now, %t0
  %waited = sub i64 %w, %w0
  %waits = sub i64 %runs, %n0
  %share = mul i64 %waited, {SHARE}
  %much = icmp sge i64 %share, %window
  %slices = mul i64 %waits, {MIN_WAIT_NS}
  %long = icmp sge i64 %waited, %slices
  %pos = icmp sgt i64 %waited, 0
  %c1 = and i1 %much, %long
  %crowded = and i1 %c1, %pos
  br i1 %crowded, label %busy, label %out
busy:
  call void @raise_sign(i64 %now)
  br label %out
out:
  ret void
}}

; raise the sign at %now (counted: ``busy``) for a hold: QUIET_MIN_NS after a quiet stretch, twice the last hold
; (at most QUIET_NS) when the last sign lapsed less than REPEAT holds ago, the last hold while one still stands
define internal void @raise_sign(i64 %now) noinline {{
entry:
  %until0 = load atomic i64, ptr @jitgrad_pool_quiet_last monotonic, align 8     ; (any pool thread may raise it)
  %hold0 = load atomic i64, ptr @jitgrad_pool_quiet_hold monotonic, align 8
  %gap = sub i64 %now, %until0
  %standing = icmp slt i64 %gap, 0
  %near = mul i64 %hold0, {REPEAT}
  %recent = icmp slt i64 %gap, %near
  %twice = shl i64 %hold0, 1
  %big = icmp sgt i64 %twice, {QUIET_NS}
  %grown = select i1 %big, i64 {QUIET_NS}, i64 %twice
  %next = select i1 %recent, i64 %grown, i64 {QUIET_MIN_NS}
  %hold = select i1 %standing, i64 %hold0, i64 %next
  store atomic i64 %hold, ptr @jitgrad_pool_quiet_hold monotonic, align 8
  %until = add i64 %now, %hold
  store atomic i64 %until, ptr @jitgrad_pool_quiet_last monotonic, align 8
  store atomic i64 %until, ptr @jitgrad_pool_quiet_until monotonic, align 8
  call void @stat(i32 5)
  ret void
}}

; a forked child: no sign, no hold
define internal void @sign_forget() {{
entry:
  store i64 0, ptr @jitgrad_pool_quiet_until
  store i64 {LONG_AGO}, ptr @jitgrad_pool_quiet_last
  store i64 {QUIET_MIN_NS}, ptr @jitgrad_pool_quiet_hold
  ret void
}}

; ``ready`` starts a round (%woke: it woke a sleeping worker)
define internal void @late_round(i1 %woke) alwaysinline {{
entry:
  %t = call i64 @jitgrad_pool_now()
  store i64 %t, ptr @jitgrad_pool_late_t0
  %w = zext i1 %woke to i32
  store i32 %w, ptr @jitgrad_pool_late_woke
  ret void
}}

; ``synchronize`` entered at %ts waited until now for the round ``late_round`` started
define internal void @late_check(i64 %ts) noinline {{
entry:
  %on = load i32, ptr @jitgrad_pool_late_on
  %off = icmp eq i32 %on, 0
  br i1 %off, label %out, label %judge
judge:
  %now = call i64 @jitgrad_pool_now()
  %t0 = load i64, ptr @jitgrad_pool_late_t0
  %own = sub i64 %ts, %t0
  %wait = sub i64 %now, %ts
  %w = load i32, ptr @jitgrad_pool_late_woke
  %woke = icmp ne i32 %w, 0
  %excuse = select i1 %woke, i64 {LATE_NS + WAKE_NS}, i64 {LATE_NS}
  %share = mul i64 %own, {LATE_SHARE}
  %limit = add i64 %share, %excuse
  %late = icmp sgt i64 %wait, %limit
  br i1 %late, label %busy, label %out
busy:
  call void @raise_sign(i64 %now)
  call void @stat(i32 9)
  br label %out
out:
  ret void
}}
"""


__all__ = ["source", "SAMPLE_NS", "SHARE", "MIN_WAIT_NS", "QUIET_NS", "QUIET_MIN_NS", "REPEAT", "LATE_SHARE", "LATE_NS",
           "WAKE_NS"]
