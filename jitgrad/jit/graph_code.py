"""A graph's compiled code, per target: the compile path below a trace, and what a call of that code returns.

The path runs one way: the planning passes make the graph's fusion plan (``ir.passes.fusion_plan``: fuse, then
row-wise chains on the CPU), and the target's code generator lowers that plan (``codegen/cpu.CompiledGraph``,
``codegen/cuda.CudaGraph``), which never runs a pass itself.  The code is kept on the graph (``graph.compiled``),
so it and its workspace live as long as the compiled function that holds the graph.
"""
from __future__ import annotations

import contextlib
import weakref

from ..ir.graph import Graph
from ..ir.passes import fusion_plan
from ..runtime import profiler_state
_PROF = profiler_state.STATE
_COMPILED = weakref.WeakValueDictionary()   # (id(graph), ...) -> CompiledGraph: for introspection and tests


def compiled_graph(graph: Graph, writes=(), parallel=None, disk_cache=True, background=None):
    """The CompiledGraph (CPU) of ``graph``, built once and kept on the graph."""
    key = (writes, parallel, disk_cache)
    per_graph = graph.compiled
    cg = per_graph.get(key)
    if cg is None:
        from ..codegen.program.cpu import CompiledGraph
        prof = _PROF.active
        phase = (lambda name: prof.range(name, None, "compile")) if prof is not None else None
        with (phase("compile/codegen") if phase else contextlib.nullcontext()):
            plan = fusion_plan(graph)
            cg = per_graph[key] = CompiledGraph(plan, writes, parallel=parallel, phase=phase, disk_cache=disk_cache,
                                                background=background)
        _COMPILED[(id(graph),) + key] = cg
    return cg


def sized_graph(graph: Graph, env, writes=(), parallel=None, disk_cache=True, background=None):
    """The CompiledGraph of ``graph``, whose shapes hold symbolic sizes, laid out once for every size: the planning
    passes and the layout run with ``env`` (an ``ir.symbolic.ShapeEnv``) active, so every decision they make on
    a size is one of its guards; the code build runs without it.  Not kept on the graph: its program must be
    bound per call's sizes (``codegen/program/sized.py``), never run as it is."""
    from ..codegen.program.cpu import CompiledGraph, lay_out
    from ..ir import symbolic
    prev = symbolic.ACTIVE.env
    symbolic.ACTIVE.env = env
    try:
        # gathers stay steps of their own here: whether one may join a loop would be a decision on sizes
        plan = fusion_plan(graph, indexed=False)
        checks = {e: i for i, e in enumerate(e for e in graph.eqns if e.check is not None
                                                and e.outs[0].aval.dtype.is_floating_point)}
        program = lay_out(plan, tuple(writes), parallel, checks)
    finally:
        symbolic.ACTIVE.env = prev
    cg = CompiledGraph(plan, writes, parallel=parallel, disk_cache=disk_cache, background=background,
                       program=program)
    cg.label = "lowering"       # (the build thread's job log: ``build_thread.log_jobs``)
    return cg


def cuda_graph(graph: Graph, writes=(), config=None):
    """The CudaGraph of ``graph`` (built once, kept on the graph); its plan has no row-wise kernels and no loads or
    stores by an index inside loops (the CUDA target has no emitter for them)."""
    key = ("cuda", tuple(writes), None if config is None else tuple(sorted(config.items())))
    cg = graph.compiled.get(key)
    if cg is None:
        from ..codegen.gpu.cuda import CudaGraph
        prof = _PROF.active
        with (prof.range("compile/codegen", None, "compile") if prof is not None else contextlib.nullcontext()):
            cg = CudaGraph(fusion_plan(graph, rowwise=False, indexed=False, batched=False), writes, config)
        graph.compiled[key] = cg
    return cg


def nonfinite_error(e, kind) -> RuntimeError:
    """The eager anomaly-mode error for an eqn whose anomaly check failed inside compiled code."""
    from ..runtime.anomaly import AnomalyError, nonfinite_message
    c = e.check
    aval = e.outs[0].aval
    return AnomalyError(nonfinite_message(c.name, c.index, kind, aval.shape, aval.dtype.name, c.loc, c.stack,
                                          backward=c.backward, op=e.op.name, compiled=True))


def compiled_result(cg, res, stats):
    """A compiled call's outputs (CPU or CUDA graph ``cg``): counted in ``stats``, and with anomaly checks, the
    trailing ``[first failing check, is_nan]`` turned into the eager error."""
    if stats is not None:
        n = stats["compiled_calls"] = stats.get("compiled_calls", 0) + 1
        stats["last_path"] = "compiled"
        if n == 1:                  # the switch to compiled code (jit/build_policy.py)
            stats["first_compiled_call"] = stats.get("calls")
    if cg.checks:
        err = res[-1]
        if err[0] < len(cg.checks):
            raise nonfinite_error(cg.checks[err[0]], "nan" if err[1] else "inf")
        return res[:-1]
    return res


__all__ = ["compiled_graph", "sized_graph", "cuda_graph", "compiled_result", "nonfinite_error"]
