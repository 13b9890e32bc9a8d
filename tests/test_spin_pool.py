"""jitgrad's own worker pool (``codegen/native/spin_pool.py``): its protocol, counted, never timed.

Each check runs in a fresh process (one pool per process) under a timeout, so a lost wake-up fails as a hang.  The
clock the spinners read and the run-queue wait their busy sign samples (``busy_sign.py``) are scripted (native
functions), so whether a wait spins or sleeps is fixed by the test, not by the machine's load (but for a worker
that loses its core at the wrong moment: margins noted); the tests of the real reader say so."""
import json
import os
import subprocess
import sys

import pytest


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool needs Linux (futex)")

_PRELUDE = """
import ctypes, json, os, threading, time
from jitgrad.codegen.native import spin_pool
pool = spin_pool.build()
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
CLOCK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64))
ran = []
task = TASK(lambda a, d, s, x: ran.append((a or 0, threading.get_native_id())))
add = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 5)(pool.add_task)
ready, sync = ctypes.CFUNCTYPE(None)(pool.ready), ctypes.CFUNCTYPE(None)(pool.synchronize)
me = threading.get_native_id()

# the scripted clock: clock_gettime's signature, each read ``step`` nanoseconds after the last; native code (built
# here with llvmlite), so a spinner reads it without Python's lock: a callback would make it wait for the caller
import llvmlite.binding as ll
_engine = ll.create_mcjit_compiler(ll.parse_assembly('''
@t = global i64 0
@step = global i64 0
define i32 @clock(i32 %kind, ptr %ts) {
  %s = load atomic i64, ptr @step monotonic, align 8
  %old = atomicrmw add ptr @t, i64 %s monotonic
  %t = add i64 %old, %s
  %sec = udiv i64 %t, 1000000000
  %ns = urem i64 %t, 1000000000
  store i64 %sec, ptr %ts
  %p = getelementptr i64, ptr %ts, i64 1
  store i64 %ns, ptr %p
  ret i32 0
}
@frac = global i64 0
@per = global i64 0
define i32 @runq(i64 %slot, ptr %out) {
  %t = load atomic i64, ptr @t monotonic, align 8
  %f = load atomic i64, ptr @frac monotonic, align 8
  %m = mul i64 %t, %f
  %w = udiv i64 %m, 256
  %p = load atomic i64, ptr @per monotonic, align 8
  %none = icmp eq i64 %p, 0
  %p1 = select i1 %none, i64 1, i64 %p
  %n = udiv i64 %w, %p1
  %runs = select i1 %none, i64 0, i64 %n
  store i64 0, ptr %out
  %o1 = getelementptr i64, ptr %out, i64 1
  store i64 %w, ptr %o1
  %o2 = getelementptr i64, ptr %out, i64 2
  store i64 %runs, ptr %o2
  ret i32 0
}'''), ll.Target.from_default_triple().create_target_machine())
_engine.finalize_object()
_step = ctypes.c_int64.from_address(_engine.get_global_value_address("step"))
_t = ctypes.c_int64.from_address(_engine.get_global_value_address("t"))
pool.set_clock(_engine.get_function_address("clock"))
# the scripted run queue: a thread has waited frac/256 of the scripted clock's time, in waits of ``per`` ns
_frac = ctypes.c_int64.from_address(_engine.get_global_value_address("frac"))
_per = ctypes.c_int64.from_address(_engine.get_global_value_address("per"))
pool.set_run_queue(_engine.get_function_address("runq"))

def scripted_run_queue(frac, per_ns):
    _frac.value, _per.value = frac, per_ns

def scripted_clock(step_ns):
    _step.value = step_ns

def advance(ns):       # the clock jumps once (between rounds: no thread is spinning to see it as a gap)
    _t.value += ns

def rounds(n, per_round, pause=0.0):
    for r in range(n):
        for i in range(per_round):
            add(ctypes.cast(task, ctypes.c_void_p), 1 + i, None, None, None)
        ready()
        sync()
        time.sleep(pause)      # (a worker's spin, if it is to run out, ends before the next round)

def delta(before):
    after = pool.stats()
    return {k: after[k] - before[k] for k in after}

def sign_came_back():   # the next sign holds QUIET_NS (a taken core's: the last one lapsed just now, as long)
    from jitgrad.codegen.native.busy_sign import QUIET_NS
    glob = pool._engine.get_global_value_address
    ctypes.c_int64.from_address(glob("jitgrad_pool_quiet_hold")).value = QUIET_NS
    ctypes.c_int64.from_address(glob("jitgrad_pool_quiet_last")).value = _t.value
"""


def _run(body, timeout=120):
    env = dict(os.environ)
    env.pop("JITGRAD_POOL_SPIN", None)
    r = subprocess.run([sys.executable, "-c", _PRELUDE + body], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_rounds_run_every_task_round_robin_on_the_workers():
    """Two workers, four tasks a round: ``add_task`` deals them round robin (tasks 1 and 3 to one worker, 2 and 4 to
    the other), each round runs all of them on worker threads, never on the caller, and each queue's tasks on
    one thread; ``rounds`` counts the rounds."""
    (out,) = _run("""
assert pool.start(2) == 2
scripted_clock(0)        # a clock that never moves: no spin runs out, no wait sleeps
before = pool.stats()
rounds(10, 4)
print(json.dumps({"ran": ran, "me": me, "stats": delta(before), "workers": pool.workers()}))
""")
    assert len(out["ran"]) == 40 and out["workers"] == 2
    assert all(tid != out["me"] for _, tid in out["ran"])
    by_arg = {}
    for arg, tid in out["ran"]:
        by_arg.setdefault(arg, set()).add(tid)
    assert by_arg[1] == by_arg[3] and by_arg[2] == by_arg[4] and by_arg[1] != by_arg[2], by_arg
    assert out["stats"]["rounds"] == 10


def test_waits_spin_while_the_spin_lasts_and_sleep_after_it():
    """The clock scripted: while it stands still every wait ends in its spin (no futex call on either side: the
    first round found the worker spinning already); a clock that passes the spin between two reads (but under
    the gap of a descheduled thread) makes the waits sleep; ``spin`` 0
    sleeps at once (no wait spins).  A sleep is counted when a thread calls ``FUTEX_WAIT``, which returns at
    once when the round moved meanwhile: sleeps and wake calls need not pair up."""
    outs = _run("""
scripted_clock(0)
pool.set_spin_ns(10**9)
pool.start(1)
before = pool.stats(); rounds(20, 1); print(json.dumps(delta(before)))
scripted_clock(25_000)          # (the clock is shared: another spinner's reads add steps between two)
pool._late.value = 0            # (a moving clock makes waits of reads: the late-round sign has its own test)
pool.set_spin_ns(12_500)
rounds(1, 1)
before = pool.stats(); rounds(5, 1, 0.005); print(json.dumps(delta(before)))
pool.set_spin_ns(0)
rounds(1, 1)
before = pool.stats(); rounds(20, 1, 0.005); print(json.dumps(delta(before)))
""")
    spun, slept, off = outs
    assert spun["spin_hits"] == 20 and spun["worker_sleeps"] == spun["worker_wakes"] == 0, spun
    assert spun["caller_sleeps"] == 0 and spun["busy"] == 0, spun
    # (5 ms between rounds; a worker that loses its core longer than that finds the next round already there)
    # both sides spun every round (5 rounds: 10 waits outlast their spin, under ``MISS_LIMIT``)
    assert slept["spins"] >= 10 and slept["worker_sleeps"] >= 3, slept
    assert off["spins"] == 0 and off["worker_sleeps"] >= 10, off
    for s in (slept, off):      # (a lost wake-up hangs the test instead: its timeout fails it)
        assert s["worker_wakes"] > 0 and s["busy"] == 0, s


def test_a_thread_crowded_off_its_core_makes_the_waits_of_the_next_quiet_period_sleep_at_once():
    """A pool thread that waited in the run queue a quarter of a sample window or more, in waits of a taken core's
    slices (scripted: half the time, 2 ms a wait), raises the busy sign (``busy``): every wait for the next
    ``QUIET_NS`` does not spin, however long the spin is and however many rounds run (the clock stands still: 40
    rounds); once the clock has passed it, and the run queue is quiet, waits spin again."""
    outs = _run("""
from jitgrad.codegen.native import busy_sign
pool.set_spin_ns(10**12)
scripted_clock(0)
pool.start(1)
rounds(1, 1)
before = pool.stats()
sign_came_back()            # (a first sign holds an eighth of it: the scripted clock's reads could pass that)
scripted_run_queue(128, 2_000_000)
scripted_clock(busy_sign.SAMPLE_NS // 4)    # a sample is due every few clock reads of a spin
rounds(4, 1, 0.002); print(json.dumps(delta(before)))
scripted_clock(0)
before = pool.stats(); rounds(40, 1); print(json.dumps(delta(before)))
scripted_run_queue(0, 0)
advance(busy_sign.QUIET_NS)
rounds(1, 1)
before = pool.stats(); rounds(10, 1); print(json.dumps(delta(before)))
""")
    busy, quiet, again = outs
    assert busy["busy"] >= 1 and busy["samples"] >= 2, busy
    assert quiet["spins"] == 0 and quiet["busy"] == 0 and quiet["rounds"] == 40, quiet
    assert again["spin_hits"] == 10 and again["worker_sleeps"] == 0 and again["busy"] == 0, again


def test_long_serial_stretches_and_wake_ups_never_raise_the_busy_sign():
    """Spins that keep outlasting their budget (the step's serial stretches: every wait of 40 rounds on both
    sides, the scripted clock passing the spin at its first read) raise no busy sign, and the next waits spin
    again; nor do wake-ups (a quarter of the time waiting, but 10 us a wait: a sleeping pool's), nor a small share
    of long waits (an eighth), nor slow wake-ups (a quarter in waits of 0.5 ms, as an idle vCPU of this virtual
    machine wakes: every window here holds a futex sleep, whose wake-up waits whatever the load, so it is not
    judged).  The samples were taken (``samples``): the sign was asked, and said no."""
    outs = _run("""
slow = TASK(lambda a, d, s, x: time.sleep(0.001))   # the caller's wait outlasts its spin too
def slow_rounds(n):
    for _ in range(n):
        add(ctypes.cast(slow, ctypes.c_void_p), None, None, None, None)
        ready()
        sync()
        time.sleep(0.002)
scripted_clock(500_000)
pool.set_spin_ns(250_000)
pool._late.value = 0            # (the other sign: a worker's task here is the round, the caller runs none)
pool.start(1)
for frac, per in ((0, 0), (64, 10_000), (32, 2_000_000), (64, 500_000)):
    scripted_run_queue(frac, per)
    before = pool.stats(); slow_rounds(40); print(json.dumps(delta(before)))
scripted_clock(0)
rounds(1, 1)                    # (wakes the worker that slept after the last slow round: it spins from now on)
before = pool.stats(); rounds(10, 1); print(json.dumps(delta(before)))
""")
    *stretches, after = outs
    for d in stretches:
        # (a worker that loses its core for 2 ms finds the next round there without spinning: a margin of 8)
        assert d["busy"] == 0 and d["spins"] >= 72 and d["spin_hits"] <= 8 and d["samples"] >= 4, d
    assert after["busy"] == 0 and after["spin_hits"] == 10 and after["worker_sleeps"] == 0, after


def test_the_run_queue_reader_reads_the_calling_threads_schedstat():
    """The native reader (``Pool.run_queue``: the busy sign's, for the calling thread) parses the thread's own
    ``/proc/thread-self/schedstat``: each of its three counts lies between Python's reads of that file before
    and after it; another thread reads its own."""
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no per-thread schedstat")
    (out,) = _run("""
def py():
    with open("/proc/thread-self/schedstat") as f:
        return [int(v) for v in f.read().split()]
pool.set_run_queue(None)
ok = []
for _ in range(20):
    a = py(); n = pool.run_queue(); b = py()
    ok.append(n is not None and all(x <= y <= z for x, y, z in zip(a, n, b)))
    x = 0
    for i in range(20000):
        x += i
other = {}
def there():
    a = py(); other["n"] = pool.run_queue(); b = py()
    other["ok"] = all(x <= y <= z for x, y, z in zip(a, other["n"], b))
t = threading.Thread(target=there); t.start(); t.join()
print(json.dumps({"ok": ok, "other": other["ok"], "moved": pool.run_queue()[0] > other["n"][0]}))
""")
    assert all(out["ok"]) and out["other"] and out["moved"], out


def test_a_core_shared_with_a_spinning_process_raises_the_busy_sign():
    """The real sign (the threads' own schedstat, the real clock): the calling thread pinned to one core with a
    process that spins there, waiting in ``synchronize`` (spinning) for a worker's 2 ms tasks, waits about half
    the time in the run queue: the sign stands within 0.4 s."""
    if len(os.sched_getaffinity(0)) < 2 or not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("needs two cores and per-thread schedstat")
    (out,) = _run("""
import subprocess, sys
pool.set_run_queue(None)
pool.set_clock(ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value)
pool._late.value = 0            # (this sign alone: a 2 ms task the caller runs none of is a late round too)
core = sorted(os.sched_getaffinity(0))[-1]
hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
try:
    os.sched_setaffinity(hog.pid, {core})
    os.sched_setaffinity(0, {core})
    pool.set_spin_ns(10**9)
    pool.start(1)
    slow = TASK(lambda a, d, s, x: time.sleep(0.002))
    before = pool.stats()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.4 and pool.stats()["busy"] == before["busy"]:
        add(ctypes.cast(slow, ctypes.c_void_p), None, None, None, None)
        ready()
        sync()
finally:
    hog.kill(); hog.wait()
print(json.dumps(delta(before)))
""")
    assert out["busy"] >= 1 and out["samples"] >= 2, out


def test_rounds_started_without_linger_leave_their_workers_asleep_at_once():
    """``set_linger(False)`` (an eager kernel's launch): the workers of the rounds started then sleep as soon as
    their chunk is done, however long the spin (the clock stands still: a lingering worker would spin through every
    gap between rounds); the caller still spins for its workers; rounds started after ``set_linger(True)`` are
    followed by the spin again."""
    outs = _run("""
scripted_clock(0)
pool.set_spin_ns(10**12)
pool.start(1)
rounds(1, 1)
before = pool.stats(); rounds(10, 1, 0.002); print(json.dumps(delta(before)))
print(json.dumps({"was": pool.set_linger(False)}))
before = pool.stats(); rounds(10, 1, 0.002); print(json.dumps(delta(before)))
pool.set_linger(True)
rounds(1, 1)
before = pool.stats(); rounds(10, 1, 0.002); print(json.dumps(delta(before)))
""")
    lingered, was, asleep, again = outs
    assert was == {"was": True}
    assert lingered["spin_hits"] == 10 and lingered["worker_sleeps"] == 0, lingered
    # (the first round of the ten found the worker still spinning after the lingering round before it; a worker
    # that lost its core for the 2 ms between two rounds finds the next one there without sleeping)
    assert asleep["worker_sleeps"] >= 8 and asleep["spin_hits"] <= 2, asleep
    assert asleep["spins"] == 10 and asleep["worker_wakes"] >= 9, asleep      # the caller's spins only
    assert again["spin_hits"] == 10 and again["worker_sleeps"] == 0, again


def test_stop_joins_the_workers_and_a_later_round_starts_them_again():
    """``stop`` (also registered at exit) ends and joins every worker: the process's threads go back to what
    they were; the next round starts the workers again and runs its tasks; the process exits at once with its
    workers spinning."""
    (out,) = _run("""
pool.set_spin_ns(10**12)
scripted_clock(0)
base = len(os.listdir("/proc/self/task"))
pool.start(2)
started = len(os.listdir("/proc/self/task")) - base
rounds(3, 2)
stopped = pool.stop()
after_stop = len(os.listdir("/proc/self/task")) - base
rounds(1, 2)
print(json.dumps({"started": started, "stopped": stopped, "after_stop": after_stop, "workers": pool.workers(),
                  "ran": len(ran), "again": len(os.listdir("/proc/self/task")) - base}))
""")
    assert out == {"started": 2, "stopped": True, "after_stop": 0, "workers": 2, "ran": 8, "again": 2}, out


def test_a_forked_child_starts_workers_of_its_own():
    """A pool that exists before a fork: the child has none of its threads, so its first round starts new
    workers (threads of the child) and runs the tasks on them; the parent's pool keeps working."""
    (out,) = _run("""
pool.start(1)
scripted_clock(0)
pool.set_spin_ns(10**12)
rounds(2, 1)
parent_worker = ran[-1][1]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    rounds(2, 1)
    tids = {t for _, t in ran[2:]}
    ok = len(ran) == 4 and threading.get_native_id() not in tids and parent_worker not in tids
    os.write(w, b"1" if ok else b"0")
    os._exit(0)
_, status = os.waitpid(pid, 0)
child = os.read(r, 1).decode()
rounds(1, 1)
print(json.dumps({"status": status, "child": child, "parent_ran": len(ran), "same": ran[-1][1] == parent_worker}))
""")
    assert out == {"status": 0, "child": "1", "parent_ran": 3, "same": True}, out


def test_a_step_on_the_pool_gives_the_bits_of_the_old_pool():
    """The same compiled call on ``spin_pool`` and on Numba's ``workqueue`` (``JITGRAD_POOL``) at two threads:
    the same chunks, so the same bits; both pooled every round."""
    code = """
import json, numpy as np, jitgrad as jg
from jitgrad.codegen.native import workpool
workpool.set_min_work(0, 0)
f = jg.compile(lambda a, b: ((a * 2.0).tanh() * b).sum(), backend="numba", background=False, parallel=True)
x = jg.tensor(np.linspace(-1, 1, 1 << 16)); y = jg.tensor(np.linspace(2, -1, 1 << 16))
float(f(x, y)); r0 = workpool.rounds()
v = [float(f(x, y)).hex() for _ in range(3)]
print(json.dumps({"v": v, "rounds": workpool.rounds() - r0, "spin": workpool.spinning() is not None}))
"""
    outs = {}
    for pool in ("spin", "workqueue"):
        env = dict(os.environ, JITGRAD_POOL=pool, NUMBA_NUM_THREADS="2", JITGRAD_BACKGROUND_COMPILE="0")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs[pool] = json.loads(r.stdout.strip().splitlines()[-1])
    assert outs["spin"]["spin"] and not outs["workqueue"]["spin"]
    assert outs["spin"]["v"] == outs["workqueue"]["v"] and len(set(outs["spin"]["v"])) == 1
    assert outs["spin"]["rounds"] == outs["workqueue"]["rounds"] == 3


def test_launches_stay_on_the_calling_thread_while_the_spinners_see_a_core_taken():
    """The busy rule (``workpool.BUSY_HOLD``): once a pool thread's sample saw it crowded off its core (another
    process took it: scripted, half the time waiting in 2 ms waits), a compiled step's gated launches run their
    chunks on the calling thread (no round: ``busy_held`` counts them, one clock read each) until ``QUIET_NS``
    after the sign, then take the pool again; the bits are the pooled ones.  The clock, the pool's and the
    kernels' (``workpool.CLOCK_ADDRESS``), is scripted: the first call whose spin samples the crowding flips it
    (or the spinning worker samples it first, before any call), the calls after it never wake the worker."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    os.environ["JITGRAD_POOL_BUSY_HOLD"] = "1"      # (the test session turns it off: conftest.py)
    os.environ["NUMBA_NUM_THREADS"] = "2"
    try:
        (out,) = _run("""
from jitgrad.codegen.native import workpool
workpool.CLOCK_ADDRESS = _engine.get_function_address("clock")
import numpy as np, jitgrad as jg
workpool.set_min_work(0, 0)
f = jg.compile(lambda a: (a * 2.0).tanh() * a, backend="numba", background=False)     # (gated: decides per call)
x = jg.tensor(np.linspace(-1, 1, 1 << 16))
scripted_clock(0)
pool.set_spin_ns(10**12)
want = f(x).numpy().tobytes()
def count(n, pause=0.0):
    r0, h0 = workpool.rounds(), workpool.busy_held()
    same = True
    for _ in range(n):
        same = same and f(x).numpy().tobytes() == want
        time.sleep(pause)
    return {"rounds": workpool.rounds() - r0, "held": workpool.busy_held() - h0, "same": same}
quiet = count(5)
before = pool.stats()
from jitgrad.codegen.native import busy_sign
sign_came_back()
scripted_run_queue(128, 2_000_000)
scripted_clock(busy_sign.SAMPLE_NS // 4)    # a sample due every few clock reads of a spin, each one crowded
sign = count(3, 0.002)
scripted_clock(0)
held = count(10)
scripted_run_queue(0, 0)
advance(busy_sign.QUIET_NS)
again = count(5)
print(json.dumps({"quiet": quiet, "sign": sign, "busy": delta(before)["busy"], "held": held, "again": again,
                  "threads": workpool.threads()}))
""")
    finally:
        os.environ["JITGRAD_POOL_BUSY_HOLD"] = "0"
        os.environ.pop("NUMBA_NUM_THREADS", None)
    assert out["threads"] == 2
    assert out["quiet"] == {"rounds": 5, "held": 0, "same": True}, out
    # the worker, spinning, may see the gap before the first call (all 3 held) or in that call's round (1 pooled)
    assert out["busy"] >= 1 and out["sign"]["rounds"] <= 1 and out["sign"]["rounds"] + out["sign"]["held"] == 3, out
    assert out["held"] == {"rounds": 0, "held": 10, "same": True}, out
    assert out["again"] == {"rounds": 5, "held": 0, "same": True}, out


def test_a_fresh_process_finds_its_worker_spinning_from_its_first_steps():
    """A fresh process's first 40 calls of a small compiled step (two pooled launches a call, one round each), with
    a serial stretch after each call that outlasts the spin (the scripted clock jumps 1 ms while the worker spins:
    its spin runs out and it sleeps), on a quiet run queue (scripted, as the clock: on the real clock this loaded
    machine's preemptions, not the protocol, would decide which spins run out): no busy sign, so each call's first
    round wakes the worker (``worker_wakes``) and its second finds it spinning (``spin_hits``).  The old sign
    (spins that ran out) counted the stretches' misses against the hits."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    os.environ["NUMBA_NUM_THREADS"] = "2"
    os.environ["JITGRAD_JOIN_ROUNDS"] = "0"
    try:
        (out,) = _run("""
scripted_clock(0)
scripted_run_queue(0, 0)
from jitgrad.codegen.native import workpool
import numpy as np, jitgrad as jg
workpool.set_min_work(0, 0)
def step(a):
    y = (a * 2.0).tanh()
    return (y * y.sum()).exp()
f = jg.compile(step, backend="numba", background=False)
x = jg.tensor(np.linspace(-1, 1, 1 << 14, dtype=np.float32))
f(x)                    # (the first call also places the workers: a round of its own)
before, r0 = pool.stats(), workpool.rounds()
for _ in range(40):
    f(x)
    advance(1_000_000)
    time.sleep(0.002)
print(json.dumps({**delta(before), "launched": workpool.rounds() - r0}))
""")
    finally:
        os.environ.pop("NUMBA_NUM_THREADS", None)
        os.environ.pop("JITGRAD_JOIN_ROUNDS", None)
    assert out["launched"] == 80 and out["rounds"] == 80, out
    assert out["busy"] == 0 and out["samples"] >= 4, out
    # (a worker descheduled between a round's end and its spin's first clock read misses the jump: it spins on)
    assert out["worker_wakes"] <= 40 and out["spin_hits"] >= 40, out


# a round whose worker's task takes ``late_ns`` of the scripted clock after the caller's own chunk took ``own_ns``
_LATE_ROUNDS = """
from jitgrad.codegen.native import busy_sign as bs
import threading
late, chunk_done = [], threading.Event()
def slow(a, d, s, x):
    # the worker's time passes once the caller is waiting: on the one scripted clock, time it spent while the
    # caller's chunk ran would count as the caller's (a woken worker under load took the GIL in between)
    chunk_done.wait()
    time.sleep(0.005)
    advance(late[0])
late_task = TASK(slow)
def round_(own_ns, late_ns):
    late[:] = [late_ns]
    chunk_done.clear()
    add(ctypes.cast(late_task, ctypes.c_void_p), None, None, None, None)
    ready()
    advance(own_ns)         # the caller's chunk 0
    chunk_done.set()
    sync()
pool.set_spin_ns(10**12)
scripted_clock(0)           # the clock moves only where advance() moves it
pool.start(1)
rounds(1, 1)
ms = 1_000_000
"""


def test_a_round_whose_worker_finishes_late_raises_the_busy_sign():
    """``synchronize``'s wait against the caller's own chunk (scripted clock: the caller's chunk and the worker's
    task each move it): a worker done about when the caller (or up to ``LATE_SHARE`` x later, plus ``LATE_NS``)
    raises nothing; one a scheduler slice late raises the sign (``late``, ``busy``: the next waits sleep at once);
    after a wake-up of a sleeping worker ``WAKE_NS`` more is excused; ``JITGRAD_POOL_LATE=0`` (``_late``) judges
    nothing."""
    outs = _run(_LATE_ROUNDS + """
out = {}
for name, own, wait in (("even", ms, ms), ("triangle", ms, 3 * ms + bs.LATE_NS - 1000), ("slice", 100_000, 4 * ms)):
    before = pool.stats(); round_(own, wait); out[name] = delta(before)
    advance(bs.QUIET_NS)    # (a raised sign lapses)
pool.set_spin_ns(0)         # workers sleep after each round: the next one wakes them
rounds(1, 1)
before = pool.stats(); round_(100_000, bs.LATE_NS + bs.WAKE_NS // 2); out["woken"] = delta(before)
before = pool.stats(); round_(100_000, bs.LATE_NS + 2 * bs.WAKE_NS); out["woken, a slice"] = delta(before)
advance(bs.QUIET_NS)
pool.set_spin_ns(10**12)
rounds(1, 1)
pool._late.value = 0
before = pool.stats(); round_(100_000, 8 * ms); out["off"] = delta(before)
print(json.dumps(out))
""")
    (out,) = outs
    for name in ("even", "triangle", "woken", "off"):
        assert out[name]["late"] == 0 and out[name]["busy"] == 0, (name, out[name])
    for name in ("slice", "woken, a slice"):
        assert out[name]["late"] == 1 and out[name]["busy"] == 1, (name, out[name])
    assert out["woken"]["worker_wakes"] == 1, out["woken"]


def test_a_set_up_task_on_each_worker_raises_no_sign():
    """``workpool.run_on_each`` (the workers' set-up: the caller runs no chunk, its wait is the tasks') leaves the
    busy sign as it was, however long the tasks take."""
    (out,) = _run("""
from jitgrad.codegen.native import workpool
from jitgrad.codegen.native.threads import LAUNCH_LOCK
pool.set_clock(ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value)     # the real clock
workpool.launch()
p = workpool.spinning()
quiet = ctypes.c_int64.from_address(p.quiet_until)
before, q0 = p.stats(), quiet.value
with LAUNCH_LOCK:
    workpool.run_on_each(lambda i: time.sleep(0.02))
print(json.dumps({"q": quiet.value == q0, "late": p.stats()["late"] - before["late"], "q0": q0}))
""")
    assert out["q"], out


def test_a_sign_that_comes_back_holds_twice_as_long_and_a_lone_one_an_eighth():
    """The sign's hold (``busy_sign.raise_sign``; late rounds raise it, scripted clock): ``QUIET_MIN_NS`` for a sign
    after a quiet stretch; each sign raised less than ``REPEAT`` holds after the last one lapsed holds twice the
    last, up to ``QUIET_NS`` (a taken core's: it raises the sign again at each lapse); a sign raised while one
    stands keeps its hold; after ``REPEAT`` holds of quiet the next holds ``QUIET_MIN_NS`` again."""
    (out,) = _run(_LATE_ROUNDS + """
hold = ctypes.c_int64.from_address(pool._engine.get_global_value_address("jitgrad_pool_quiet_hold"))
until = ctypes.c_int64.from_address(pool.quiet_until)
seen = []
def late_round(name):
    before = pool.stats()
    round_(100_000, 8 * ms)
    seen.append((name, hold.value, until.value - _t.value, delta(before)["late"]))
late_round("first")
advance(hold.value)                 # lapsed just now
late_round("again")
late_round("standing")
advance(hold.value + 1000)
late_round("third")
for _ in range(3):
    advance(hold.value)
    late_round("capped")
advance((bs.REPEAT + 1) * hold.value)
late_round("after quiet")
print(json.dumps({"seen": seen, "min": bs.QUIET_MIN_NS, "max": bs.QUIET_NS}))
""")
    lo, hi = out["min"], out["max"]
    seen = {}
    for name, hold, left, late in out["seen"]:
        assert late == 1 and left == hold, (name, hold, left, late)     # every round late; the sign holds its hold
        seen.setdefault(name, []).append(hold)
    assert seen["first"] == [lo] and seen["again"] == [2 * lo] and seen["standing"] == [2 * lo], seen
    # the standing sign's lapse is measured from its extended end: the third sign doubles again
    assert seen["third"] == [4 * lo] and seen["capped"] == [8 * lo, hi, hi] and 8 * lo == hi, seen
    assert seen["after quiet"] == [lo], seen
