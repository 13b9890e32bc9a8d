"""The worker pool's C interface as LLVM declarations, for the code that launches on it: parallel kernels
(``ir_loops.py``) and a graph's entry (``codegen/program/entry.py``, a batch of small products).

``native/workpool.py`` registers the symbols with llvmlite before code that needs them is linked: three functions
(``add_task``, ``ready``, ``synchronize``) and ``int64`` globals: the threads a pooled launch runs on, whether the
calling thread is one of them (``caller``: it runs chunk 0, ``round_``), the threshold a gated launch compares its
work with (``min_work``, ``grain``: read at every call, so a new value needs no rebuild), the counts of pool rounds
and of those the caller ran a chunk of, and what the pool's pacer asks of a gated launch (``pace``: time it, or
keep it on the calling thread; ``launch``).  Nothing here imports Numba; llvmlite is imported when a declaration
is made.
"""
from __future__ import annotations

from ..native.workpool import CLOCK_ID, PACE_HELD, PACE_TIMED


def _ir():
    from llvmlite import ir
    return ir


def declare(module) -> tuple:
    """``(add_task, ready, synchronize)`` declared in ``module`` (once)."""
    ir = _ir()
    i8p = ir.IntType(8).as_pointer()
    out = []
    for name, ty in (("jitgrad_wq_add_task", ir.FunctionType(ir.VoidType(), [i8p] * 5)),
                     ("jitgrad_wq_ready", ir.FunctionType(ir.VoidType(), [])),
                     ("jitgrad_wq_synchronize", ir.FunctionType(ir.VoidType(), []))):
        out.append(module.globals.get(name) or ir.Function(module, ty, name=name))
    return tuple(out)


def pool_global(module, name):
    """The pool's ``int64`` global ``jitgrad_wq_<name>`` (threads, min_work, grain, rounds), declared once."""
    ir = _ir()
    name = "jitgrad_wq_" + name
    return module.globals.get(name) or ir.GlobalVariable(module, ir.IntType(64), name)


def reaches_min_work(b, module, work):
    """The ``i1`` test ``work >= min_work`` (``work``: a double)."""
    ir = _ir()
    return b.fcmp_ordered(">=", work, b.sitofp(b.load(pool_global(module, "min_work")), ir.DoubleType()))


def takes_pool(b, module, elements, per_element: float):
    """The ``i1`` test of ``workpool.takes``: ``elements`` (an int64 value) reach the pool's grain and, each
    costing ``per_element``, its minimum work."""
    work = work_of(b, elements, per_element)
    grain = b.load(pool_global(module, "grain"))
    return b.and_(b.icmp_signed(">=", elements, grain), reaches_min_work(b, module, work))


def count_round(b, module):
    """Add one to the pool's round count (before ``ready``: one launch at a time, so no atomics)."""
    rounds = pool_global(module, "rounds")
    b.store(b.add(b.load(rounds), rounds.type.pointee(1)), rounds)


def queued(b, module, t):
    """The ``i1`` that chunk ``t`` (an int64 value) of a pooled launch goes to a worker's queue (``add_task``):
    every chunk but chunk 0 when the calling thread runs that one (``workpool.caller``)."""
    return b.icmp_signed(">=", t, b.load(pool_global(module, "caller")))


def round_(b, module, run_first):
    """Emit one pooled round, once the workers' chunks are queued (``queued``): count it, wake the workers
    (``ready``), run chunk 0 on the calling thread when it is the caller's (``run_first()`` emits that call; its
    chunk is the one it would be on a worker, so the round's bits do not depend on who ran it), then wait for
    the workers (``synchronize``)."""
    ir = _ir()
    _, ready, sync = declare(module)
    count_round(b, module)
    b.call(ready, [])
    with b.if_then(b.icmp_signed("!=", b.load(pool_global(module, "caller")), ir.Constant(ir.IntType(64), 0))):
        _add(b, module, "caller_rounds", ir.Constant(ir.IntType(64), 1))
        run_first()
    b.call(sync, [])


def _clock_ns(b, module, ts):
    """Nanoseconds of the pool's clock (``workpool.CLOCK_ID`` through libc's ``clock_gettime``), an ``i64``;
    ``ts``: a ``[2 x i64]`` slot for the ``timespec``."""
    ir = _ir()
    i64, i32 = ir.IntType(64), ir.IntType(32)
    fn = module.globals.get("jitgrad_wq_clock") or ir.Function(
        module, ir.FunctionType(i32, [i32, i64.as_pointer()]), "jitgrad_wq_clock")
    zero = ir.Constant(i32, 0)
    b.call(fn, [ir.Constant(i32, CLOCK_ID), b.gep(ts, [zero, zero])])
    sec = b.load(b.gep(ts, [zero, zero]))
    nsec = b.load(b.gep(ts, [zero, ir.Constant(i32, 1)]))
    return b.add(b.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)


def _add(b, module, name, value):
    g = pool_global(module, name)
    b.store(b.add(b.load(g), value), g)


def paced(b, module, takes):
    """``(pooled, pace)`` of a gated launch: ``pooled``, the ``i1`` that it wakes the workers (``takes``, its
    threshold test, holds and the pool's pacer is not holding launches off the pool); ``pace``, the pacer's state
    as read for this launch (``workpool.pace``), for ``launch``."""
    ir = _ir()
    pace = b.load(pool_global(module, "pace"))
    return b.and_(takes, b.icmp_signed("!=", pace, ir.Constant(ir.IntType(64), PACE_HELD))), pace


def launch(b, module, pooled, takes, pace, work, on_pool, on_caller, alloca=None):
    """Emit a launch: ``on_pool()`` (wakes the workers) when ``pooled``, else ``on_caller()`` (the same chunks on
    the calling thread, so the choice changes no bit).  A gated one (``pooled, pace = paced(b, module, takes)``;
    ``work``, a double) reads the pacer's clock (``workpool.py``'s docstring): at ``PACE_TIMED`` the pooled
    branch adds its nanoseconds and ``work`` to ``pool_ns``/``pool_work``; at ``PACE_HELD`` a launch that reached
    the threshold runs on the calling thread and adds them to ``serial_ns``/``serial_work``.  ``pace`` None: an
    ungated launch, never timed.  ``alloca``: a builder for the clock's slots (default ``b``: a launch is not
    inside a loop)."""
    ir = _ir()
    i64 = ir.IntType(64)
    if pace is None:
        with b.if_else(pooled) as (then, other):
            with then:
                on_pool()
            with other:
                on_caller()
        return
    a = alloca if alloca is not None else b
    ts, t0 = a.alloca(ir.ArrayType(i64, 2), name="pace_ts"), a.alloca(i64, name="pace_t0")

    def timed(on, body, ns, wk):
        with b.if_then(on):
            b.store(_clock_ns(b, module, ts), t0)
        body()
        with b.if_then(on):
            _add(b, module, ns, b.sub(_clock_ns(b, module, ts), b.load(t0)))
            _add(b, module, wk, b.fptosi(work, i64))
    with b.if_else(pooled) as (then, other):
        with then:
            timed(b.icmp_signed("==", pace, ir.Constant(i64, PACE_TIMED)), on_pool, "pool_ns", "pool_work")
        with other:
            timed(b.and_(takes, b.icmp_signed("==", pace, ir.Constant(i64, PACE_HELD))), on_caller,
                  "serial_ns", "serial_work")


def work_of(b, elements, per_element: float):
    """A loop's work, a double: ``elements`` (an int64 value) x ``per_element``."""
    ir = _ir()
    f64 = ir.DoubleType()
    return b.fmul(b.sitofp(elements, f64), ir.Constant(f64, per_element))


__all__ = ["declare", "pool_global", "reaches_min_work", "takes_pool", "count_round", "queued", "round_", "paced",
           "launch", "work_of"]
