"""The build thread's job order for a variable-length step on an empty cache (issue 30), counted with its job log
(``build_thread.log_jobs``, stamped with the step's call counter) and never timed.

A step whose second call brings new sizes switches to compiled code when its symbolic trace's lowering is built.
The first (static) trace's build, queued after call 1, is dropped at call 2 (no call reaches it); when it had
started already, it used to build its entry (LLVM) before the drop was seen, ahead of the lowering's build.  A
background build now makes its entry last, so a dropped build stops between two renderings with no LLVM work.
"""
import threading

import numpy as np

import jitgrad as jg
from jitgrad.codegen.native import build, build_thread, graph_build
from test_symbolic_shapes import _lm_step


def test_the_job_log_stamps_jobs_with_the_callers_clock_and_runs_them_by_priority():
    gate, ran, now = threading.Event(), [], [7]
    events = build_thread.log_jobs(lambda: now[0])
    build_thread.hold_builds(gate)
    try:
        build_thread.queue_call(lambda: ran.append("eager"), build_thread.EAGER, label="late")
        build_thread.queue_call(lambda: ran.append("first"), build_thread.FIRST, label="early")
        now[0] = 8
        gate.set()
        assert build_thread.wait_background(60)
    finally:
        build_thread.hold_builds(None)
        build_thread.log_jobs(None)
    assert ran == ["first", "eager"]
    mine = [(e["event"], e["job"], e["at"]) for e in events if e["job"] in ("late", "early")]
    assert mine[:2] == [("queued", "late", 7), ("queued", "early", 7)], mine
    assert [m for m in mine[2:]] == [("started", "early", 8), ("finished", "early", 8), ("started", "late", 8),
                                     ("finished", "late", 8)], mine
    assert build_thread.job_label(object(), build_thread.OPTIMISE) == "optimised tier"


def test_a_static_build_dropped_while_it_renders_builds_no_entry(monkeypatch):
    """Call 1's static trace starts building; call 2 (new sizes) drops it while it renders its first kernel.  The
    dropped build compiles no entry and no module: the one entry compiled is the lowering's, the build that makes
    the step switch."""
    rendering, go_on, seen = threading.Event(), threading.Event(), []
    source = graph_build.GraphCode._source

    def held_source(self, key, quick=False):
        if threading.current_thread().name == "jitgrad-compile" and not seen:
            seen.append(key)            # the first rendering on the build thread: the static trace's build
            rendering.set()
            assert go_on.wait(120)
        return source(self, key, quick)
    monkeypatch.setattr(graph_build.GraphCode, "_source", held_source)
    rng = np.random.default_rng(30)
    shapes = [(3, 17), (5, 19), (3, 23), (5, 29)]
    data = [(jg.tensor(rng.integers(0, 47, s)), jg.tensor(rng.integers(0, 47, s))) for s in shapes]
    comp = jg.compile(_lm_step(V=47, C=13), backend="numba", background=True, cache=False)
    events = build_thread.log_jobs(lambda: comp.stats["calls"])
    drivers = build.COUNTS["drivers_compiled"]
    try:
        comp(*data[0])                  # eagerly; the static trace's build queued behind the warm-up
        assert rendering.wait(120)      # it renders its first kernel
        comp(*data[1])                  # new sizes: the static build dropped, the lowering's queued
        go_on.set()
        assert comp.wait(300)
        assert build_thread.wait_background(300)
    finally:
        go_on.set()
        build_thread.log_jobs(None)
    for i, t in data[2:]:
        comp(i, t)
    s = comp.stats
    assert s["builds_dropped"] == 1 and s["shape_lowerings"] == 1 and s["traces"] == 2, s
    assert s["last_path"] == "compiled", s
    jobs = [(e["event"], e["job"]) for e in events if e["job"].startswith("first build")]
    assert jobs == [("queued", "first build (graph)"), ("started", "first build (graph)"),
                    ("queued", "first build (lowering)"), ("finished", "first build (graph)"),
                    ("started", "first build (lowering)"), ("finished", "first build (lowering)")], jobs
    # one entry compiled: the lowering's (the dropped build used to compile its own first)
    assert build.COUNTS["drivers_compiled"] - drivers == 1, build.COUNTS


def test_a_kernels_llvm_build_asks_llvm_for_the_host_and_its_pass_builder_once(monkeypatch):
    """Each call into LLVM is a GIL hand-off of the build thread's against the calls running meanwhile: the process's
    triple, the host's CPU, the target data layout and a pipeline's pass builder are made once a process (a thread),
    not per module (the LM step's optimised tier: 756 -> 466 calls into LLVM; its first tier 249 -> 213).  The
    object code is the same, whichever kernel the pass builder ran on before."""
    from collections import Counter
    from llvmlite.binding import ffi
    from jitgrad.codegen.kernels import ir_loops, vector_loops
    from jitgrad.codegen.native import llvm_build
    from test_vector_loops import _dot
    keys = {form: f"{n + 5:x}e" * 64 for n, form in enumerate(("direct", "negated"))}
    texts = {form: ir_loops.render(_dot("float32", form), key) for form, key in keys.items()}
    bits = llvm_build.vector_bits()
    vector = {form: vector_loops.render(_dot("float32", form), key, bits) for form, key in keys.items()}
    first = llvm_build.object_code(keys["direct"], texts["direct"]).data
    quick = llvm_build.object_code(keys["direct"], vector["direct"], quick="vector").data
    llvm_build.object_code(keys["negated"], texts["negated"])          # (the pass builders run on another kernel)
    llvm_build.object_code(keys["negated"], vector["negated"], quick="vector")
    names, call0 = Counter(), ffi._lib_fn_wrapper.__call__

    def counted(self, *a, **k):
        names[self._cfn.__name__] += 1
        return call0(self, *a, **k)
    monkeypatch.setattr(ffi._lib_fn_wrapper, "__call__", counted)
    assert llvm_build.object_code(keys["direct"], texts["direct"]).data == first
    assert llvm_build.object_code(keys["direct"], vector["direct"], quick="vector").data == quick
    asked = {n: names[n] for n in ("LLVMPY_GetProcessTriple", "LLVMPY_GetHostCPUName", "LLVMPY_GetHostCPUFeatures",
                                   "LLVMPY_CreateTargetMachineData", "LLVMPY_CopyStringRepOfTargetData",
                                   "LLVMPY_CreatePassBuilder", "LLVMPY_CreatePipelineTuningOptions")}
    assert not any(asked.values()), asked
    assert names["LLVMPY_ParseAssembly"] == 2 and sum(names.values()) <= 2 * 20, names
