"""The worker pool's C interface as LLVM declarations, for the code that launches on it: parallel kernels
(``ir_loops.py``) and a graph's entry (``codegen/program/entry.py``, a batch of small products).

``native/workpool.py`` registers the symbols with llvmlite before code that needs them is linked: three functions
(``add_task``, ``ready``, ``synchronize``) and ``int64`` globals: the worker count, the threshold a gated launch
compares its work with (``min_work``, ``grain``: read at every call, so a new value needs no rebuild) and the count
of pool rounds.  Nothing here imports Numba; llvmlite is imported when a declaration is made.
"""
from __future__ import annotations


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
    ir = _ir()
    f64 = ir.DoubleType()
    work = b.fmul(b.sitofp(elements, f64), ir.Constant(f64, per_element))
    grain = b.load(pool_global(module, "grain"))
    return b.and_(b.icmp_signed(">=", elements, grain), reaches_min_work(b, module, work))


def count_round(b, module):
    """Add one to the pool's round count (before ``ready``: one launch at a time, so no atomics)."""
    rounds = pool_global(module, "rounds")
    b.store(b.add(b.load(rounds), rounds.type.pointee(1)), rounds)


__all__ = ["declare", "pool_global", "reaches_min_work", "takes_pool", "count_round"]
