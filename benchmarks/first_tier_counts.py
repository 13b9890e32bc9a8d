"""What a background build's first tier costs to build and what its code then runs (issue 30), counted, never timed.

The workload runs as a script would on an empty cache (a background build, the optimised tier held back), with
every kernel rendering and every LLVM module of the first tier recorded, and the build thread's calls into LLVM
counted (``build_thread_llvm_calls``: each one gives the GIL up and waits to take it back from the calls running
meanwhile); once its calls run the first tier's code,
these phases are counted, each alone: ``render`` (the first tier's kernels rendered again), ``quick_llvm`` (their
LLVM builds again, each at its tier), ``quick_step`` (warm steps on the first tier's code), then, the optimised
tier let through, ``o3_step`` (the same steps on the O3 code).  Under callgrind each phase is one dump; without it,
Python calls.

    JITGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/first_tier_counts.py lm|nanogpt|b9
    JITGRAD_CACHE_DIR=$(mktemp -d) JITGRAD_BLAS_CORETYPE=keep UNDER_CALLGRIND=1 \\
        valgrind --tool=callgrind --instr-atstart=no python benchmarks/first_tier_counts.py lm   # then totals per dump

``lm``: ``variable_length.py``'s embedding + linear step (its first two shapes, then the second again);
``nanogpt``: its GPT step (the first two lengths); ``b9``: B9's step (one shape).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("JITGRAD_BUILD_FORKS", "0")
os.environ.setdefault("JITGRAD_FORKED_TIER", "0")       # (the tiers built on the build thread, where this counts them)
STEPS = 3

from render_counts import callgrind_ctl, count_phase  # noqa: E402


def workload(which):
    """(calls to run first, the warm step to count, the compiled function)."""
    import jitgrad as jg
    import variable_length as V
    if which == "lm":
        call, f = V.jitgrad_step({})
        data = V.shapes(50, 5)[:2]
    elif which == "nanogpt":
        call, f = V.gpt_step({})
        data = V.gpt_shapes()[:2]
    else:
        import gpt_model
        jg.manual_seed(0)
        model = gpt_model.make_gpt(jg, 65, 64, 128, 4, 4, dropout=0.0, sdpa=False)
        f = jg.compile(gpt_model.make_step(jg, model, model, gpt_model.make_optimizer(jg, model, lr=3e-4)))
        g = jg.Generator().manual_seed(1)
        x, y = jg.randint(0, 65, (16, 64), generator=g), jg.randint(0, 65, (16, 64), generator=g)
        return [lambda: f(x, y)], (lambda: f(x, y)), f
    first = [lambda i=i, t=t: call(i, t) for i, t in data]
    return first, (lambda: call(*data[-1])), f


def _count_llvm_calls(thread):
    """A counter ([n]) of llvmlite's calls into LLVM from the thread named ``thread``, from now on: each gives the
    GIL up and takes it back, which on the build thread means waiting for the calls that run meanwhile."""
    from llvmlite.binding import ffi
    n, call0 = [0], ffi._lib_fn_wrapper.__call__

    def call(self, *a, **k):
        if threading.current_thread().name == thread:
            n[0] += 1
        return call0(self, *a, **k)
    ffi._lib_fn_wrapper.__call__ = call
    return n


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "lm"
    from jitgrad.codegen.kernels import ir_loops, vector_loops
    from jitgrad.codegen.native import build_thread, llvm_build
    gate = threading.Event()
    build_thread.hold_optimising(gate)
    renders, modules = [], []
    render0, vrender0, quick_objects0 = ir_loops.render, vector_loops.render, llvm_build.quick_objects
    calls = _count_llvm_calls("jitgrad-compile")

    def render(*a, **k):
        renders.append((render0, a, k))
        return render0(*a, **k)

    def vrender(*a, **k):
        renders.append((vrender0, a, k))
        return vrender0(*a, **k)

    def quick_objects(jobs):
        modules.append(list(jobs))
        return quick_objects0(jobs)
    ir_loops.render, vector_loops.render, llvm_build.quick_objects = render, vrender, quick_objects
    loops0 = dict(vector_loops.STATS)
    first, step, f = workload(which)
    for c in first:
        c()
    while f.stats.get("first_compiled_call") is None:       # calls until the first tier's code serves one
        time.sleep(0.2)
        step()
    llvm_calls = calls[0]
    ir_loops.render, vector_loops.render, llvm_build.quick_objects = render0, vrender0, quick_objects0
    builds = [job for jobs in modules for job in jobs]
    built = {b[0] for b in builds}
    quick_renders = [r for r in renders if r[1][1] in built]
    tiers = {}
    for _, _, q in builds:
        tiers[str(q)] = tiers.get(str(q), 0) + 1
    out = {"workload": which, "kernels_first_tier": len(builds), "modules_first_tier": len(modules), "tiers": tiers,
           "build_thread_llvm_calls": llvm_calls,
           "first_tier_text_bytes": sum(len(t) for _, t, _ in builds),
           "first_tier_llvm_lines": sum(t.count("\n  ") for _, t, _ in builds),
           "loops": {k: vector_loops.STATS[k] - loops0[k] for k in loops0}}
    under_callgrind = os.environ.get("UNDER_CALLGRIND") == "1"

    def phase_render():
        for fn, a, k in quick_renders:
            fn(*a, **k)

    def phase_llvm():
        for jobs in modules:
            quick_objects0(jobs)
            if per_kernel:      # one dump per module's build
                ctl("-d", f"llvm_{jobs[0][2]}_{len(jobs)}_{sum(t.count(chr(10) + '  ') for _, t, _ in jobs)}")

    ctl = callgrind_ctl
    per_kernel = under_callgrind and os.environ.get("PER_KERNEL") == "1"

    def phase_steps():
        for _ in range(STEPS):
            step()

    def o3_steps():
        gate.set()
        f.wait()
        step()
        step()
        return phase_steps
    step()
    phases = (("render", phase_render), ("quick_llvm", phase_llvm), ("quick_step", phase_steps),
              ("o3_step", None))
    for name, phase in phases:
        if phase is None:
            phase = o3_steps()
        count_phase(out, name, phase, under_callgrind)
    out["steps"] = STEPS
    if os.environ.get("KERNEL_MAP"):
        from jitgrad.codegen.native import build
        from jitgrad.jit.graph_code import _COMPILED
        kmap = {}
        for cg in list(_COMPILED.values()):
            code = getattr(cg, "code", None)
            for k in getattr(code, "kernels", ()):
                key = code.kkeys[k.key]
                for tag, table in (("quick", build._QUICK), ("o3", build._ADDRESSES)):
                    if key in table:
                        kmap["0x%016x" % table[key]] = [tag, code.first_tier.get(key), k.name,
                                                        k.listing().replace("\n", " | ")[:300]]
        with open(os.environ["KERNEL_MAP"], "w") as fh:
            json.dump(kmap, fh, indent=1)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
