"""The worker pool's C interface as LLVM declarations, for the code that launches on it: parallel kernels
(``ir_loops.py``) and a graph's entry (``codegen/program/entry.py``, a batch of small products).

``native/workpool.py`` registers the symbols with llvmlite before code that needs them is linked: three functions
(``add_task``, ``ready``, ``synchronize``) and ``int64`` globals: the threads a pooled launch runs on, whether the
calling thread is one of them (``caller``: it runs chunk 0, ``round_``), the threshold a gated launch compares its
work with (``min_work``, ``grain``: read at every call, so a new value needs no rebuild), the counts of pool rounds
and of those the caller ran a chunk of, and what the pool's pacer asks of a gated launch (``pace``: time it, or
keep it on the calling thread; ``launch``).  Written as text (``llvm_text.py``): values are their names, every
global an ``i64``.  Nothing here imports Numba or llvmlite.
"""
from __future__ import annotations

from ..native import workpool
from ..native.workpool import CLOCK_ID, JOIN_MAX, PACE_HELD, PACE_OFF, PACE_TIMED, RANGE_SLOTS
from .llvm_text import DOUBLE, I1, I32, I64, PTR, VOID, Builder, const


def declare(module) -> tuple:
    """``(add_task, ready, synchronize)`` declared in ``module`` (once)."""
    return (module.declare("jitgrad_wq_add_task", VOID, [PTR] * 5), module.declare("jitgrad_wq_ready", VOID, []),
            module.declare("jitgrad_wq_synchronize", VOID, []))


def pool_global(module, name):
    """The pool's ``int64`` global ``jitgrad_wq_<name>`` (threads, min_work, grain, rounds), declared once."""
    return module.external("jitgrad_wq_" + name, I64)


def _read(b, module, name):
    return b.load(I64, pool_global(module, name))


def reaches_min_work(b, module, work):
    """The ``i1`` test ``work >= min_work`` (``work``: a double)."""
    return b.fcmp("oge", DOUBLE, work, b.cast("sitofp", I64, _read(b, module, "min_work"), DOUBLE))


def takes_pool(b, module, elements, per_element: float):
    """The ``i1`` test of ``workpool.takes``: ``elements`` (an int64 value) reach the pool's grain and, each
    costing ``per_element``, its minimum work."""
    work = work_of(b, elements, per_element)
    grain = _read(b, module, "grain")
    return b.op("and", I1, b.icmp("sge", I64, elements, grain), reaches_min_work(b, module, work))


def count_round(b, module):
    """Add one to the pool's round count (before ``ready``: one launch at a time, so no atomics)."""
    _add(b, module, "rounds", "1")


def queued(b, module, t):
    """The ``i1`` that chunk ``t`` (an int64 value) of a pooled launch goes to a worker's queue (``add_task``):
    every chunk but chunk 0 when the calling thread runs that one (``workpool.caller``)."""
    return b.icmp("sge", I64, t, _read(b, module, "caller"))


def round_(b, module, run_first):
    """Emit one pooled round, once the workers' chunks are queued (``queued``): count it, wake the workers
    (``ready``), run chunk 0 on the calling thread when it is the caller's (``run_first()`` emits that call; its
    chunk is the one it would be on a worker, so the round's bits do not depend on who ran it), then wait for
    the workers (``synchronize``)."""
    _, ready, sync = declare(module)
    count_round(b, module)
    b.call(VOID, ready, [])
    with b.if_then(b.icmp("ne", I64, _read(b, module, "caller"), "0")):
        _add(b, module, "caller_rounds", "1")
        run_first()
    b.call(VOID, sync, [])


def _join_array(module, name, n):
    return module.external("jitgrad_wq_" + name, f"[{n} x i64]")


def flush(b, module):
    """Emit ``flush()``: run the round launches queued into by joining (``join_chunks``), if any: count it, wake
    the workers, run the caller's chunks in the order they were queued, wait.  A load and a test when none is
    pending.  Each module gets the function once (internal)."""
    name = "jitgrad_wq_flush_pending"
    ref = f'@"{name}"'
    if name not in module.symbols:
        _, ready, sync = declare(module)
        f = module.function(name, [], linkage="internal", attrs="nounwind noinline")
        fb = Builder(f, f.block("entry"))
        with fb.if_then(fb.icmp("ne", I64, _read(fb, module, "queued"), "0")):
            fb.store(I64, "0", pool_global(module, "queued"))
            count_round(fb, module)
            _add(fb, module, "caller_rounds", "1")
            fb.call(VOID, ready, [])
            mine = _join_array(module, "mine", 3 * JOIN_MAX)
            n = _read(fb, module, "nmine")
            slot = fb.alloca(I64)
            fb.store(I64, "0", slot)
            head, body, done = f.block("head"), f.block("body"), f.block("done")
            fb.branch(head)
            fb.position_at_end(head)
            j = fb.load(I64, slot)
            fb.cbranch(fb.icmp("slt", I64, j, n), body, done)
            fb.position_at_end(body)
            at = fb.op("mul", I64, j, "3")
            fn, args, data = (fb.cast("inttoptr", I64, fb.load(I64, fb.gep(I64, mine, fb.op("add", I64, at, str(k)))),
                                      PTR) for k in range(3))
            fb.call(VOID, fn, [f"ptr {args}", "ptr null", "ptr null", f"ptr {data}"])
            fb.store(I64, fb.op("add", I64, j, "1"), slot)
            fb.branch(head)
            fb.position_at_end(done)
            fb.store(I64, "0", pool_global(module, "nmine"))
            fb.call(VOID, sync, [])
            fb.store(I64, "0", pool_global(module, "nranges"))
        fb.ret_void()
    b.call(VOID, ref, [])


def joining(b, module, pooled, pace=None):
    """The ``i1`` that a launch that takes the pool (``pooled``) queues its chunks into the pending round instead
    of running a round of its own: the entry asks it to (``jitgrad_wq_join``: its step shares a round with the
    step before, ``round_groups.py``), and the pool's pacer is not timing launches (``pace``, a gated one's)."""
    j = b.op("and", I1, pooled, b.icmp("ne", I64, _read(b, module, "join"), "0"))
    if pace is not None:
        j = b.op("and", I1, j, b.icmp("eq", I64, pace, str(PACE_OFF)))
    return j


def join_chunk(b, module, chunk, t, words, data):
    """Queue chunk ``t`` (an int64 value) of a joining launch (``chunk``: its chunk function, ``words``: its task
    record, ``[start, stop]`` and at most one more int64 value; ``data``: its argument block): the record goes to
    the pool's own slots (the launch's records die with its frame), chunk 0 to the caller's list when the calling
    thread runs one (``workpool.caller``), the others to the workers' queues (``add_task``, round robin from the
    round's first queue: chunk t of every joined launch lands on the same worker)."""
    ranges = _join_array(module, "ranges", RANGE_SLOTS)
    r = _read(b, module, "nranges")
    b.store(I64, b.op("add", I64, r, str(len(words))), pool_global(module, "nranges"))
    rec = b.gep(I64, ranges, r)
    for k, w in enumerate(words):
        b.store(I64, w, b.gep(I64, rec, str(k)))
    with b.if_else(queued(b, module, t)) as (then, other):
        with then:
            b.call(VOID, declare(module)[0], [f"ptr {chunk}", f"ptr {rec}", "ptr null", "ptr null", f"ptr {data}"])
            _add(b, module, "queued", "1")
        with other:
            mine = _join_array(module, "mine", 3 * JOIN_MAX)
            n = _read(b, module, "nmine")
            b.store(I64, b.op("add", I64, n, "1"), pool_global(module, "nmine"))
            at = b.op("mul", I64, n, "3")
            for k, v in enumerate((b.cast("ptrtoint", PTR, chunk, I64), b.cast("ptrtoint", PTR, rec, I64),
                                   b.cast("ptrtoint", PTR, data, I64))):
                b.store(I64, v, b.gep(I64, mine, b.op("add", I64, at, str(k))))


def count_join(b, module):
    """Count a launch that queues its chunks into a round already pending (``workpool.joined``: the pooled
    launches of a step are its rounds plus these)."""
    with b.if_then(b.icmp("ne", I64, _read(b, module, "queued"), "0")):
        _add(b, module, "joined", "1")


def _clock_ns(b, module, ts):
    """Nanoseconds of the pool's clock (``workpool.CLOCK_ID`` through libc's ``clock_gettime``), an ``i64``;
    ``ts``: a ``[2 x i64]`` slot for the ``timespec``."""
    fn = module.declare("jitgrad_wq_clock", I32, [I32, PTR])
    first = b.gep2("[2 x i64]", ts, "0", "0", I32)
    b.call(I32, fn, [f"i32 {CLOCK_ID}", f"ptr {first}"])
    sec = b.load(I64, b.gep2("[2 x i64]", ts, "0", "0", I32))
    nsec = b.load(I64, b.gep2("[2 x i64]", ts, "0", "1", I32))
    return b.op("add", I64, b.op("mul", I64, sec, "1000000000"), nsec)


def _add(b, module, name, value):
    g = pool_global(module, name)
    b.store(I64, b.op("add", I64, b.load(I64, g), value), g)


def paced(b, module, takes):
    """``(pooled, pace)`` of a gated launch: ``pooled``, the ``i1`` that it wakes the workers (``takes``, its
    threshold test, holds, the pool's pacer is not holding launches off the pool, and, under the busy rule
    (``workpool.BUSY_HOLD``), the pool's threads have not seen another process take a core lately: ``busy``);
    ``pace``, the pacer's state as read for this launch (``workpool.pace``), for ``launch``.  Without the busy
    rule no test is emitted at all: the setting is part of every kernel's and entry's key (``build.py``)."""
    pace = _read(b, module, "pace")
    free = b.op("and", I1, takes, b.icmp("ne", I64, pace, str(PACE_HELD)))
    if not workpool.BUSY_HOLD:
        return free, pace
    held = b.call(I1, _busy_fn(module), [f"i1 {free}"])
    return b.op("and", I1, free, b.op("xor", I1, held, "true")), pace


def _busy_fn(module):
    """``i1 busy(i1 takes)``, once per module: whether a launch that would take the pool (``takes``) stays on the
    calling thread because a pool thread saw another process take a core (``busy_sign.py``: crowded off its core)
    within the sign's hold (``busy_sign.raise_sign``): its end is the global
    ``busy_until`` (the pool's own, ``workpool.launch``; 0: no such sign).  Reads the clock only while that is
    set; clears it (compare-and-swap: a spinner may set a new one meanwhile) once passed.  Counts the launches it
    holds (``workpool.busy_held``)."""
    name = "jitgrad_wq_busy_hold"
    ref = f'@"{name}"'
    if name not in module.symbols:
        f = module.function(name, [I1], ret=I1, linkage="internal", attrs="nounwind noinline")
        fb = Builder(f, f.block("entry"))
        ts = fb.alloca("[2 x i64]")
        check, clock, past, yes, no = (f.block(x) for x in ("check", "clock", "past", "yes", "no"))
        fb.cbranch(f.args[0], check, no)
        fb.position_at_end(check)
        g = pool_global(module, "busy_until")
        until = fb._def(f"load atomic i64, ptr {g} monotonic, align 8")
        fb.cbranch(fb.icmp("eq", I64, until, "0"), no, clock)
        fb.position_at_end(clock)
        fb.cbranch(fb.icmp("slt", I64, _clock_ns(fb, module, ts), until), yes, past)
        fb.position_at_end(past)
        fb._def(f"cmpxchg ptr {g}, i64 {until}, i64 0 monotonic monotonic")
        fb.branch(no)
        fb.position_at_end(yes)
        _add(fb, module, "busy_held", "1")
        fb.ret(I1, "true")
        fb.position_at_end(no)
        fb.ret(I1, "false")
    return ref


def launch(b, module, pooled, takes, pace, work, on_pool, on_caller, alloca=None):
    """Emit a launch: ``on_pool()`` (wakes the workers) when ``pooled``, else ``on_caller()`` (the same chunks on
    the calling thread, so the choice changes no bit).  A gated one (``pooled, pace = paced(b, module, takes)``;
    ``work``, a double) reads the pacer's clock (``workpool.py``'s docstring): at ``PACE_TIMED`` the pooled
    branch adds its nanoseconds and ``work`` to ``pool_ns``/``pool_work``; at ``PACE_HELD`` a launch that reached
    the threshold runs on the calling thread and adds them to ``serial_ns``/``serial_work``.  ``pace`` None: an
    ungated launch, never timed.  ``alloca``: a builder for the clock's slots (default ``b``: a launch is not
    inside a loop)."""
    if pace is None:
        with b.if_else(pooled) as (then, other):
            with then:
                on_pool()
            with other:
                on_caller()
        return
    a = alloca if alloca is not None else b
    ts, t0 = a.alloca("[2 x i64]"), a.alloca(I64)

    def timed(on, body, ns, wk):
        with b.if_then(on):
            b.store(I64, _clock_ns(b, module, ts), t0)
        body()
        with b.if_then(on):
            _add(b, module, ns, b.op("sub", I64, _clock_ns(b, module, ts), b.load(I64, t0)))
            _add(b, module, wk, b.cast("fptosi", DOUBLE, work, I64))
    with b.if_else(pooled) as (then, other):
        with then:
            timed(b.icmp("eq", I64, pace, str(PACE_TIMED)), on_pool, "pool_ns", "pool_work")
        with other:
            timed(b.op("and", I1, takes, b.icmp("eq", I64, pace, str(PACE_HELD))), on_caller,
                  "serial_ns", "serial_work")


def work_of(b, elements, per_element: float):
    """A loop's work, a double: ``elements`` (an int64 value) x ``per_element``."""
    return b.op("fmul", DOUBLE, b.cast("sitofp", I64, elements, DOUBLE), const(DOUBLE, per_element))


__all__ = ["declare", "pool_global", "reaches_min_work", "takes_pool", "count_round", "queued", "round_", "paced",
           "launch", "work_of", "flush", "joining", "join_chunk", "count_join"]
