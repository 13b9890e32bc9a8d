"""What a cold background build does before its first compiled call (issue 30: on an empty cache the time from a
compiled function's first call to its first compiled call), counted, never timed.

The build thread shares the GIL with the calls that run eagerly meanwhile: each of its calls into LLVM gives the GIL
up and waits to take it back, and its Python (rendering the kernels) gets the GIL in turns.  So what is counted is
the build's own work: the LLVM modules of the first tier (``llvm_build.quick_objects``: one per pipeline), the LLVM
IR they hold, and llvmlite's calls on the build thread up to the switch (the warm-up included:
``build_policy._warm_up``).  The LM step of ``benchmarks/variable_length.py`` at its first three shapes
(``JITGRAD_BUILD_AFTER_CALL=2``: the third call waits for the lowering's first tier).

Figures (2026-12-01, AVX-512 host; ``benchmarks/first_tier_counts.py lm`` counts the same): LLVM modules 24 -> 2,
its IR 8,649 -> 6,136 instructions (a parallel kernel's first tier runs its chunks on the calling thread: no pool
launch code), llvmlite calls on the build thread 2,742 -> ~320 (a module a pipeline, a kernel's external symbols
read from its text, each symbol looked up once a process); under callgrind the first tier's LLVM 1,123M -> 538M
instructions (the level-1 module without loop strength reduction too).
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import json, sys, threading
    import numpy as np
    import jitgrad as jg
    from llvmlite.binding import ffi
    from jitgrad.codegen.native import build_thread, llvm_build
    sys.path.insert(0, sys.argv[1])
    from test_symbolic_shapes import _lm_step
    build_thread.hold_optimising(threading.Event())        # (the optimised tier is not counted)
    calls, call0 = [0], ffi._lib_fn_wrapper.__call__

    def call(self, *a, **k):
        if threading.current_thread().name == "jitgrad-compile":
            calls[0] += 1
        return call0(self, *a, **k)
    ffi._lib_fn_wrapper.__call__ = call
    modules, quick_objects = [], llvm_build.quick_objects

    def counted(jobs):
        modules.append([(t.count("\\n  "), str(q)) for _, t, q in jobs])
        return quick_objects(jobs)
    llvm_build.quick_objects = counted
    f = jg.compile(_lm_step(64, 32))
    rng = np.random.default_rng(0)
    for b, t in ((8, 11), (4, 17), (6, 23)):
        f(jg.tensor(rng.integers(0, 64, (b, t))), jg.tensor(rng.integers(0, 64, (b, t))))
    print(json.dumps({"calls": calls[0], "modules": modules, "first": f.stats["first_compiled_call"],
                      "quick": f.stats["kernels_quick"]}))
""")


def test_the_lm_steps_first_tier_is_two_modules_of_bounded_size_and_few_calls_into_llvm(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND")}
    # (built on the build thread, where the script counts its modules: not by a forked child, ``FORKED_TIER``)
    env.update(PYTHONPATH=str(REPO), JITGRAD_CACHE_DIR=str(tmp_path / "cache"), JITGRAD_BUILD_AFTER_CALL="2",
               JITGRAD_FORKED_TIER="0")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO / "tests")], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["first"] == 3, out
    kernels = [k for m in out["modules"] for k in m]
    assert len(kernels) == out["quick"] >= 20, out
    # one module per pipeline: the "minor" kernels' (code generator level 0) and the rest's (level 1)
    assert len(out["modules"]) == 2 and {q for m in out["modules"] for _, q in m[:1]} == {"minor", "True"}, out
    for m in out["modules"]:
        assert len({q == "minor" for _, q in m}) == 1, out
    assert sum(n for n, _ in kernels) <= 7000, out       # 8,649 with the pool's launch code in its parallel kernels
    assert out["calls"] <= 600, out                       # 2,742 with a module a kernel


def test_the_first_tiers_module_computes_each_kernels_own_builds_bits_and_leaves_llvms_options_as_they_were():
    """A first-tier module (``llvm_build.quick_objects``: kernels linked into one module, emitted without loop strength
    reduction) against each kernel built alone at the same tier (with it): the same bits at every length, and an
    optimised build after it emits the same object code as before it (the option is put back)."""
    import ctypes
    import numpy as np
    from jitgrad.codegen.kernels import ir_loops, vector_loops
    from jitgrad.codegen.native import llvm_build, objload
    from test_vector_loops import _dot, _inputs
    bits = llvm_build.vector_bits()
    kernels = {(dtype, form): _dot(dtype, form) for dtype in ("float32", "float64") for form in ("direct", "negated")}
    keys = {k: f"{n + 10:x}" * 64 for n, k in enumerate(kernels)}       # (symbols: their first 24 digits)
    o3 = llvm_build.object_code(keys["float32", "direct"], ir_loops.render(kernels["float32", "direct"],
                                                                          keys["float32", "direct"])).data
    jobs = [(keys[k], vector_loops.render(kir, keys[k], bits), True) for k, kir in kernels.items()]
    together = dict(zip(kernels, objload.load_module(*llvm_build.quick_objects(jobs))))
    alone = {k: objload.load([llvm_build.object_code(key, text, quick=True)])[key]
             for k, (key, text, _) in zip(kernels, jobs)}
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    for (dtype, form), address in together.items():
        x, y = _inputs(dtype, 300, 1), _inputs(dtype, 300, 2)
        for n in (0, 1, 15, 16, 17, 33, 255, 300):
            got = []
            for a in (address, alone[dtype, form]):
                r = np.zeros(1, dtype)
                call(a)(np.array([n, x.ctypes.data, y.ctypes.data, r.ctypes.data], np.int64).ctypes.data)
                got.append(r.tobytes())
            assert got[0] == got[1], (dtype, form, n)
    assert llvm_build.object_code(keys["float32", "direct"], ir_loops.render(
        kernels["float32", "direct"], keys["float32", "direct"])).data == o3
