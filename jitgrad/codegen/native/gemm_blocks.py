"""One GEMM's blocks of rows, or a stack's small products in runs of matrices, on the worker pool, for eager
products (``jit/pooled_gemm.py``).

Eager code used to split a big GEMM between Python threads (``ir/eager_threads.py``): each block woke a sleeping
thread, and on a VM an idle vCPU takes 0.2-0.5 ms to wake, more than a B3 product's whole block (~25 us of its
~45 us on one core).  The pool's workers (``spin_pool.py``) spin ~250 us after a round before they sleep, and an
eager step's GEMMs come closer than that (B3: 3-135 us apart, counted 2026-12-01), so a block handed to them
starts at once.  Here one native call does the whole hand-off without the GIL: it queues blocks 1.. on the
workers (``add_task``), starts the round (``ready``), runs block 0 on the calling thread and waits for the round
(``synchronize``).  Each call is one single-threaded ``?gemm`` whose thirteen Fortran arguments (pointers) sit in a
row of an ``int64`` array, so whoever runs it, the call is the one ``blas._gemm_rows`` makes; a block is one row (a
GEMM's rows) or a run of consecutive rows (a stack's matrices, each row offsetting A, B and C on its own).

Written in LLVM IR (compiled once per process by llvmlite's MCJIT, ~1 ms), like the pool itself: no C compiler.
Only on jitgrad's own pool with the calling thread one of its threads (``workpool.caller()``): ``workqueue``'s
workers would take every block and the caller would only wait.
"""
from __future__ import annotations

import ctypes
import threading
import time

from . import ir_engine, workpool

ARGS = 13           # a ?gemm call's arguments, each a pointer (Fortran)
ROW = ARGS + 3      # a call's row: its arguments, then A's, B's and C's byte offsets for the call
# A task runs a block: ``%count`` (a count passed in the pool's pointer-sized slot, >= 1) consecutive rows' calls.
# A GEMM's row blocks are one call each; a stack of small products (attention's (batch, head) products) gives
# each thread a run of its matrices.  The rows are only read: each call's B, A and C (arguments 6, 8, 11) are the
# addresses in ``%ctx`` plus the row's offsets, so one plan's rows serve concurrent calls.
_SOURCE = """
; %ctx: the routine, then A's, B's and C's addresses (the operands' and the result's)
define void @jitgrad_gemm_block(ptr %row, ptr %count, ptr %ctx, ptr %unused) {{
entry:
  %cnt = ptrtoint ptr %count to i64
  %gemm = load ptr, ptr %ctx
  %ap = getelementptr i64, ptr %ctx, i64 1
  %a = load i64, ptr %ap
  %bp = getelementptr i64, ptr %ctx, i64 2
  %b = load i64, ptr %bp
  %cp = getelementptr i64, ptr %ctx, i64 3
  %c = load i64, ptr %cp
  br label %call
call:
  %j = phi i64 [0, %entry], [%jn, %call]
  %jat = mul i64 %j, {row_bytes}
  %r = getelementptr i8, ptr %row, i64 %jat
{loads}
  call void %gemm({params})
  %jn = add i64 %j, 1
  %jmore = icmp slt i64 %jn, %cnt
  br i1 %jmore, label %call, label %done
done:
  ret void
}}

define internal ptr @context(ptr %ctx, ptr %gemm, i64 %a, i64 %b, i64 %c) alwaysinline {{
entry:
  store ptr %gemm, ptr %ctx
  %ap = getelementptr i64, ptr %ctx, i64 1
  store i64 %a, ptr %ap
  %bp = getelementptr i64, ptr %ctx, i64 2
  store i64 %b, ptr %bp
  %cp = getelementptr i64, ptr %ctx, i64 3
  store i64 %c, ptr %cp
  ret ptr %ctx
}}

; the rows' calls on the calling thread alone: no round, no lock
define void @jitgrad_gemm_rows(ptr %rows, i64 %n, ptr %gemm, i64 %a, i64 %b, i64 %c) {{
entry:
  %mem = alloca [4 x i64]
  %ctx = call ptr @context(ptr %mem, ptr %gemm, i64 %a, i64 %b, i64 %c)
  %np = inttoptr i64 %n to ptr
  call void @jitgrad_gemm_block(ptr %rows, ptr %np, ptr %ctx, ptr null)
  ret void
}}

; the rows' calls in blocks of %per rows (the last one shorter), block 0 on the calling thread; times[0]:
; nanoseconds until the caller's own block was done, times[1]: until every block was (%now: the pool's clock,
; ``spin_pool.Pool.now``); the context lives on this frame until the round is over
define void @jitgrad_gemm_blocks(ptr %rows, i64 %n, ptr %gemm, ptr %add, ptr %ready, ptr %sync, i64 %a, i64 %b,
                                 i64 %c, ptr %times, ptr %now, i64 %per) {{
entry:
  %t0 = call i64 %now()
  %mem = alloca [4 x i64]
  %ctx = call ptr @context(ptr %mem, ptr %gemm, i64 %a, i64 %b, i64 %c)
  br label %head
head:
  %i = phi i64 [%per, %entry], [%next, %queue]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %queue, label %run
queue:
  %at = mul i64 %i, {row_bytes}
  %row = getelementptr i8, ptr %rows, i64 %at
  %left = sub i64 %n, %i
  %short = icmp slt i64 %left, %per
  %cnt = select i1 %short, i64 %left, i64 %per
  %cntp = inttoptr i64 %cnt to ptr
  call void %add(ptr @jitgrad_gemm_block, ptr %row, ptr %cntp, ptr %ctx, ptr null)
  %next = add i64 %i, %per
  br label %head
run:
  call void %ready()
  %mine = icmp slt i64 %n, %per
  %own = select i1 %mine, i64 %n, i64 %per
  %ownp = inttoptr i64 %own to ptr
  call void @jitgrad_gemm_block(ptr %rows, ptr %ownp, ptr %ctx, ptr null)
  %t1 = call i64 %now()
  call void %sync()
  %t2 = call i64 %now()
  %ownt = sub i64 %t1, %t0
  %whole = sub i64 %t2, %t0
  store i64 %ownt, ptr %times
  %wp = getelementptr i64, ptr %times, i64 1
  store i64 %whole, ptr %wp
  ret void
}}
"""
# rounds run, their blocks, nudges of sleeping workers, and calls run alone (counted, for tests)
STATS = {"rounds": 0, "blocks": 0, "nudges": 0, "alone": 0}


def _source() -> str:
    # each call's arguments from its row, B's, A's and C's (arguments 6, 8, 11) the context's plus the row's offsets
    added = {6: ("b", ARGS + 1), 8: ("a", ARGS), 11: ("c", ARGS + 2)}
    loads = []
    for i in range(ARGS):
        loads.append(f"  %g{i} = getelementptr i64, ptr %r, i64 {added[i][1] if i in added else i}")
        if i in added:
            loads += [f"  %o{i} = load i64, ptr %g{i}", f"  %v{i} = add i64 %{added[i][0]}, %o{i}",
                      f"  %p{i} = inttoptr i64 %v{i} to ptr"]
        else:
            loads.append(f"  %p{i} = load ptr, ptr %g{i}")
    return _SOURCE.format(loads="\n".join(loads), params=", ".join(f"ptr %p{i}" for i in range(ARGS)),
                          row_bytes=8 * ROW)


class _Runner:
    """The compiled hand-off, bound to the running pool's three functions."""

    def __init__(self, engine, pool):
        self._engine = engine       # keeps the code mapped
        fn = engine.get_function_address("jitgrad_gemm_blocks")
        i64 = ctypes.c_int64
        self._run = ctypes.CFUNCTYPE(None, *([i64] * 12))(fn)
        self.funcs = (pool.add_task, pool.ready, pool.synchronize)
        self.times = (ctypes.c_int64 * 2)()     # the last call's (own block, whole) nanoseconds
        self._wakes = pool.counter("worker_wakes")      # the pool's count of wake calls for sleeping workers
        self._pool, self._times = pool, ctypes.addressof(self.times)

    def asleep(self) -> bool:
        """Whether a worker of the pool sleeps now (a round would wait for its wake-up: 0.2-0.5 ms on this VM); a
        pool with no workers yet (a forked child's) is not asleep: its first round starts them."""
        return self._pool.wsleep.value > 0 and self._pool.workers() != 0

    def nudge(self) -> None:
        """Wake the sleeping workers without a round (``spin_pool.Pool.nudge``): they spin for the pool's spin
        again, so a product that follows within it finds them awake (no lock needed: no round starts)."""
        self._pool.nudge()
        STATS["nudges"] += 1

    def run(self, rows_address: int, n: int, gemm: int, a: int, b: int, c: int, per: int = 1):
        """Run the ``n`` (>= 2) ``?gemm`` calls of the rows at ``rows_address`` (``n`` x ``ROW`` int64: each the
        call's arguments, then A's, B's and C's byte offsets) through routine ``gemm``, with ``a``, ``b`` and ``c``
        the operands' and result's addresses (each call's argument 8 is ``a`` + A's offset, 6 ``b`` + B's, 11
        ``c`` + C's; the rows are only read), in blocks of ``per`` rows: block 0 on this thread, the others on the
        pool's workers (``per`` < ``n``); returns when all are done.  The caller holds ``threads.LAUNCH_LOCK``
        (one round at a time).  Returns the seconds until the caller's own block was done and until
        every block was (a pacer's reading: equal blocks finish together on free cores), and whether the round
        woke a sleeping worker (its wake-up is in the wait)."""
        add, ready, sync = self.funcs
        w0 = self._wakes.value
        self._run(rows_address, n, gemm, add, ready, sync, a, b, c, self._times, self._pool.now, per)
        STATS["rounds"] += 1
        STATS["blocks"] += -(-n // per)
        t = self.times
        return t[0] * 1e-9, t[1] * 1e-9, self._wakes.value != w0



class _Alone:
    """The rows' calls on the calling thread alone (``jitgrad_gemm_rows``): no pool needed."""

    def __init__(self, engine):
        self._engine = engine
        fn = engine.get_function_address("jitgrad_gemm_rows")
        self._call = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 6))(fn)

    def __call__(self, rows_address: int, n: int, gemm: int, a: int, b: int, c: int) -> None:
        """Run the ``n`` calls :meth:`_Runner.run` would run, on the calling thread, with no round and no lock (the
        rows are only read): the same calls, so the same bits, where the pool is not to be used or not there."""
        self._call(rows_address, n, gemm, a, b, c)
        STATS["alone"] += 1


_lock = threading.Lock()
_RUNNER: list = []
_ENGINE: list = []
_ENGINE_LOCK = threading.Lock()     # (apart from ``_lock``: ``runner``'s build compiles under that one)


def _once(cell: list, lock, make):
    """``make()``, called once per process (``cell`` keeps it)."""
    if not cell:
        with lock:
            if not cell:
                cell.append(make())
    return cell[0]


def runner():
    """The hand-off (built once per process), or None where blocks cannot go to the pool: not jitgrad's own pool,
    no calling-thread chunk (one thread), no llvmlite."""
    return _once(_RUNNER, _lock, _build)


def alone():
    """The calling thread's runner of a stack's rows (:class:`_Alone`), or None without llvmlite: whatever the
    pool, so a stack's calls are the same at any thread count."""
    built = _engine()
    return None if built is None else built[1]


def _engine():
    """``(engine, _Alone)``, compiled once per process, or None without llvmlite."""
    return _once(_ENGINE, _ENGINE_LOCK, _compile)


def _compile():
    try:
        engine = ir_engine.compile_module(_source())
    except ImportError:     # pragma: no cover - llvmlite is a dependency
        return None
    return engine, _Alone(engine)


def _build():
    if workpool.spinning() is None and workpool.POOL == "spin" and workpool.available():
        workpool.launch()       # (starts jitgrad's pool: ``spinning`` answers for a launched one)
    if workpool.spinning() is None or not workpool.caller() or workpool.queues() < 1:
        return None
    built = _engine()
    return None if built is None else _Runner(built[0], workpool.spinning())


def busy() -> bool:
    """Whether the pool's busy sign stands now (``busy_sign.py``: a pool thread saw another process take its
    core lately): then a GEMM's blocks run on the calling thread, as gated launches do (``workpool``'s busy
    rule)."""
    if not _QUIET:
        pool = workpool.spinning()
        if pool is None or not workpool.BUSY_HOLD:
            return False
        _QUIET.append(ctypes.c_int64.from_address(pool.quiet_until))
    until = _QUIET[0].value
    return until > 0 and _clock(_CLOCK) < until


_QUIET: list = []       # the pool's quiet_until, as an int64 (once a pool runs)
_clock = time.clock_gettime_ns
_CLOCK = workpool.CLOCK_ID


def threads() -> int:
    """The threads a pooled GEMM's blocks run on (the calling thread and the pool's workers)."""
    return workpool.threads()


__all__ = ["runner", "alone", "threads", "busy", "ARGS", "ROW", "STATS"]
