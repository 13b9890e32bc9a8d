"""What a compiled function does while its code is being built, and what ``f.stats`` says about builds.

While a graph's code builds (the default background build), a call is served either by running the user's
function eagerly (the same semantics by construction: the trace recorded exactly what eager mode does) or by the
reference interpreter over the traced graph.  Which one is faster depends on the graph: eager mode pays a
dispatch per op, the interpreter a NumPy call per eqn plus its bookkeeping, and eager backward walks autograd
nodes.  So the first slow call runs eagerly, the next one on the interpreter, the third eagerly again (the first
eager call pays one-time costs: dispatch caches filled per signature, eager kernels asked for; B5's step measured
~3x its later calls, so the interpreter, ~3x slower than eager there, served every call after it), and later calls
take whichever measured faster, every ``RESAMPLE``-th the other (``choose``); both are recorded in ``f.stats`` (``eager_calls``,
``interpreted_calls``).

A graph that communicates (it holds collective ops: DistributedDataParallel's bucket all-reduces, a user's
``dist.all_reduce``) never runs eagerly while it builds: it runs on the interpreter.  Builds finish at different
calls on different ranks (an empty cache, a busy machine), and the ranks must issue the same collectives in the
same order at every call.  The interpreter and the compiled driver do (the same primitives, on the transport's one
communicator), while eager mode issues others (DDP's eager bucket hooks and shape checks, on the group's own
communicator), so an eager call on one rank against an interpreted or compiled call on another would hang.

Stats (``attach``): a compiled graph reports to the ``stats`` dicts of the functions that use it once
its code is ready, from whichever thread built it: ``build_seconds`` (wall time from the start of the build, or
of the load, to code ready; ``compile_seconds`` includes it), ``kernels_loaded`` / ``kernels_compiled`` (this
graph's kernels and entry: linked from object code vs compiled in this process or a build process),
and ``graphs_loaded`` / ``graphs_built``; each call's path is counted (``compiled_calls``, ``interpreted_calls``,
``eager_calls``), and ``first_compiled_call`` says which call first ran compiled code: the switch from the eager
or interpreted calls to the build thread's code (``codegen/native/build_thread.py``) happens at the first call after
the code is ready.  A background build on an empty cache first builds its kernels quickly (two tiers:
``codegen/native/graph_build.py``): ``kernels_quick`` counts those, ``graphs_optimising`` the graphs still running quick code,
and once none is, ``first_optimised_call`` says from which call every kernel ran its optimised build (the
optimised builds count in ``kernels_compiled`` as they land).

Test hook: ``JITGRAD_BUILD_AFTER_CALL=k`` holds every background build until a compiled function's call k+1,
which waits for its build (up to the switch: a quick build's optimised tier may land later, ``f.wait()`` waits for
it): calls 1..k run eagerly or interpreted and the later ones compiled, whatever the machine's speed, so a test
counts the switch without timing it (``f.wait()`` before that call would wait for the gate too).
"""
from __future__ import annotations

import os
import threading

from ..ir.ops import collective


_lock = threading.Lock()
RESAMPLE = 32           # while building, every RESAMPLE-th call takes the path that measured slower (``choose``)
STAT_KEYS = ("build_seconds", "kernels_loaded", "kernels_compiled", "kernels_quick", "graphs_loaded", "graphs_built",
             "graphs_optimising", "eager_calls")
# test hook: background builds start only once a compiled function is past this call, and that call waits for its
# build, so calls 1..k run eagerly or interpreted and the rest compiled, however fast the machine is
_env_after = os.environ.get("JITGRAD_BUILD_AFTER_CALL", "").strip()
BUILD_AFTER_CALL = int(_env_after) if _env_after else None
_gate = None


def init_stats(stats: dict) -> dict:
    """``stats`` with the build keys (see the module docstring); ``first_compiled_call``: the call of the function
    (counted from 1) that first ran compiled code, None before; ``last_path``: the last call's path."""
    for k in STAT_KEYS:
        stats.setdefault(k, 0.0 if k.endswith("seconds") else 0)
    stats.setdefault("last_path", None)
    stats.setdefault("first_compiled_call", None)
    stats.setdefault("first_optimised_call", None)
    return stats


def graph_for(gf, plan):
    """The graph ``gf(inputs)`` runs, ``plan`` being ``gf.grad_plan(inputs)``: the forward with residuals when
    inputs require grad."""
    return gf.graph if plan is None else plan.fwd


def pending_build(gf, inputs, plan, call=None):
    """The CompiledGraph ``gf(inputs, plan)`` would run if its code is not ready yet (else None); ``plan`` is
    ``gf.grad_plan(inputs)``, which the caller passes on to that call too (one lookup per call); ``call``: which
    call of the compiled function this is (for the ``JITGRAD_BUILD_AFTER_CALL`` test hook)."""
    if gf.backend != "numba":
        return None
    from .device_exec import on_device
    if on_device([t._data for t in inputs]):
        return None
    from .graph_code import compiled_graph
    if BUILD_AFTER_CALL is not None:
        _hold_builds()
    if gf.background and not _warm[0]:
        _warm_up()
    cg = compiled_graph(graph_for(gf, plan), gf.writes, gf.parallel, gf.disk_cache, gf.background)
    attach(cg, gf.stats)
    if BUILD_AFTER_CALL is not None and call is not None and call > BUILD_AFTER_CALL and cg.run is None:
        _gate.set()                 # the test hook's call: now the build runs, and this call waits for it
        cg.wait(optimised=False)
    if cg.run is not None or cg.error is not None:
        return None
    return cg


_warm = [False]


def _warm_up():
    """Once a process, at its first call that may build in the background: the build thread starts the worker
    pool (its code compiled, its threads started: the first tier's kernels need its symbols linked) and links the
    size fill (a symbolic lowering's first compiled call needs it), ~50 ms of LLVM and thread starts together,
    while this thread lays the graph out and serves the call, instead of on the way to the first compiled call.
    (The pool starts anyway with the first code that needs it; on a warm cache the size fill may go unused.)"""
    from ..codegen.native import build_thread, workpool
    from ..codegen.program.size_fill import size_fill
    _warm[0] = True

    def warm():
        if workpool.available():
            workpool.launch()
        size_fill()
    build_thread.queue_call(warm, label="warm-up")


def release_held(call) -> bool:
    """The ``JITGRAD_BUILD_AFTER_CALL`` hook for a call that would run eagerly while a build its sizes need is
    pending (a symbolic trace's lowering): True when ``call`` (counted from 1) is past the held calls, the gate
    then open (the caller waits for that build, as ``pending_build``'s caller does)."""
    if BUILD_AFTER_CALL is None or call is None or call <= BUILD_AFTER_CALL:
        return False
    _hold_builds()
    _gate.set()
    return True


def _hold_builds():
    """The ``JITGRAD_BUILD_AFTER_CALL`` hook: background builds wait for a gate this module opens."""
    global _gate
    if _gate is None:
        from ..codegen.native import build_thread
        _gate = threading.Event()
        build_thread.hold_builds(_gate)


def collectives(graph, name: str):
    """``(group, label, count)`` if ``graph`` holds collective ops (see the module docstring), else None: the
    first group they use, the label a timeout names the compiled step by (``distributed/watchdog.py``) and how
    many collectives it issues."""
    ops = [e for e in graph.eqns if e.op.family == "collective"]
    if not ops:
        return None
    counts = {}
    for e in ops:
        counts[e.op.name] = counts.get(e.op.name, 0) + 1
    what = ", ".join(f"{k} x{n}" for k, n in counts.items())
    return ops[0].params["group"], f"compiled step {name!r} ({what})", len(ops)


def run_watched(talks, call, inputs):
    """``call(inputs)``, a compiled call of a graph that communicates (``talks``: ``collectives()``'s answer),
    inside its process group's watchdog section: ``timeout=`` covers the native MPI steps of the one C call."""
    with collective.watched(*talks):
        return call(inputs)


def choose(entry) -> str:
    """"eager" or "interpret" for the next call while building (see the module docstring)."""
    if entry.talks is not None:
        return "interpret"
    t = entry.slow_times
    if "eager" not in t:
        return "eager"
    if "interpret" not in t:
        return "interpret"
    if t[("calls", "eager")] < 2:
        return "eager"
    faster, slower = ("eager", "interpret") if t["eager"] <= t["interpret"] else ("interpret", "eager")
    # every RESAMPLE-th call the other path again: a call measured while the build thread held the GIL or a core
    # (its start: imports, rendering) can make the faster path look slower, and each path keeps its fastest call
    return slower if (t[("calls", "eager")] + t[("calls", "interpret")]) % RESAMPLE == 0 else faster


def record(entry, path: str, seconds: float) -> None:
    """A call served on ``path`` took ``seconds``: the fastest call per path, and how many."""
    t = entry.slow_times
    t[path] = seconds if path not in t else min(t[path], seconds)
    t[("calls", path)] = t.get(("calls", path), 0) + 1


def attach(cg, stats) -> None:
    """Let ``cg`` report its build to ``stats`` (once per dict; at once if it is ready)."""
    if stats is None:
        return
    init_stats(stats)
    with _lock:
        seen = cg.__dict__.setdefault("_stat_dicts", [])
        if any(s is stats for s in seen):
            return
        seen.append(stats)
        if cg.run is None:          # counted when its code is ready (cpu.CompiledGraph calls on_ready)
            cg.on_ready.append(lambda cg, stats=stats: _add(cg, stats))
            return
    _add(cg, stats)


def _add(cg, stats):
    code = cg.code
    with _lock:
        init_stats(stats)
        stats["build_seconds"] += cg.seconds
        stats["compile_seconds"] = stats.get("compile_seconds", 0.0) + cg.seconds
        stats["kernels_loaded"] += code.loaded
        stats["kernels_compiled"] += code.compiled
        quick = len(code.quick_keys) if cg.optimising else 0
        stats["kernels_quick"] += quick
        stats["graphs_loaded" if code.compiled == 0 and not quick else "graphs_built"] += 1
        if quick:
            stats["graphs_optimising"] += 1
            cg.on_optimised.append(lambda cg, stats=stats, before=code.compiled: _add_optimised(cg, stats, before))


def _add_optimised(cg, stats, before):
    """``cg``'s optimised tier landed (see the module docstring): its kernels compiled since the switch count."""
    with _lock:
        stats["kernels_compiled"] += cg.code.compiled - before
        stats["graphs_optimising"] -= 1
        if not stats["graphs_optimising"]:
            stats["first_optimised_call"] = stats.get("calls", 0) + 1


__all__ = ["choose", "collectives", "run_watched", "record", "pending_build", "release_held", "attach", "init_stats",
           "graph_for"]
