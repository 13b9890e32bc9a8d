"""A script's first run on an empty cache (issue 28, item 2): kernels that translate to LLVM IR build in the
calling process on the build thread, the step switches to them as soon as they are ready, and only what is slow
(Numba's kernels) goes to build processes.  Counted, never timed: ``JITGRAD_BUILD_AFTER_CALL=k`` holds the build
until call k, so calls 1..k run eagerly or interpreted and the rest compiled, however loaded the machine is.
Each script runs in a fresh process on fresh cache directories (``JITGRAD_CACHE_DIR``, ``NUMBA_CACHE_DIR``).
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_processes import wait_for_builders

REPO = Path(__file__).resolve().parents[1]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND", "JITGRAD_BUILD_AFTER_CALL")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["JITGRAD_CACHE_DIR"] = str(tmp_path / "cache")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(code, env, timeout=300):
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# B5's step (MLP 16-32-4, batch 8, SGD), once compiled and once eager, on the same data, N calls each
MLP_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad.codegen.native import build
    N = 250
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((8, 16), dtype=np.float32))
    y = jg.tensor(rng.integers(0, 4, 8))
    ws = [rng.standard_normal((16, 32), dtype=np.float32) * 0.3, np.zeros(32, np.float32),
          rng.standard_normal((32, 32), dtype=np.float32) * 0.3, np.zeros(32, np.float32),
          rng.standard_normal((32, 4), dtype=np.float32) * 0.3, np.zeros(4, np.float32)]

    def make():
        params = [jg.tensor(w.copy(), requires_grad=True) for w in ws]
        W1, b1, W2, b2, W3, b3 = params

        def step(x, y):
            h = jg.relu(x @ W1 + b1)
            h = jg.relu(h @ W2 + b2)
            loss = F.cross_entropy(h @ W3 + b3, y)
            loss.backward()
            with jg.no_grad():
                for p in params:
                    p -= 0.05 * p.grad
                    p.grad = None
            return loss.detach()
        return step, params
    step, params = make()
    f = jg.compile(step, backend="numba")
    got = [float(f(x, y)) for _ in range(N)]
    eager, eparams = make()
    want = [float(eager(x, y)) for _ in range(N)]
    stats = {k: v for k, v in f.stats.items() if isinstance(v, (int, float, str, type(None)))}
    f.wait()                        # (a quick build's optimised tier too)
    waited = {k: v for k, v in f.stats.items() if isinstance(v, (int, float, str, type(None)))}
    print(json.dumps({"got": got, "want": want, "stats": stats, "waited": waited, "counts": build.COUNTS,
                      "params": [float(abs(p.detach().numpy() - q.detach().numpy()).max())
                                 for p, q in zip(params, eparams)],
                      "numba": "numba" in sys.modules}))
""")


@pytest.mark.parametrize("k", [1, 40])
def test_a_250_call_script_switches_to_compiled_code_once_its_build_is_ready(tmp_path, k):
    out = _run(MLP_SCRIPT, _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=k), timeout=600)
    s, c = out["stats"], out["counts"]
    # calls 1..k ran before the build (eagerly or interpreted), every later call on its code
    assert s["calls"] == 250 and s["compiled_calls"] == 250 - k, s
    assert s["eager_calls"] + s["interpreted_calls"] == k and s["eager_calls"] >= 1, s
    assert s["first_compiled_call"] == k + 1 and s["last_path"] == "compiled", s
    # built in this process, on the build thread: every kernel through LLVM IR, no build process, no Numba; first
    # quickly (the calls from k + 1 ran that code), then optimised (f.wait() waits for it)
    w = out["waited"]
    assert s["graphs_built"] == 1 and s["kernels_quick"] >= 5, s
    assert w["kernels_compiled"] >= w["kernels_quick"] == s["kernels_quick"] and w["graphs_optimising"] == 0, w
    assert c["kernels_compiled"] == c["kernels_ir"] >= 5 and c["build_processes"] == 0, c
    assert c["kernels_quick"] == s["kernels_quick"], c
    assert not out["numba"]
    # nothing stale or wrong after the switch: every loss and the final parameters are eager mode's
    assert len(out["got"]) == 250
    for i, (a, b) in enumerate(zip(out["got"], out["want"])):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), (i, a, b)
    assert max(out["params"]) < 1e-4, out["params"]


def test_without_the_hook_the_switch_is_reported_and_calls_add_up(tmp_path):
    out = _run(MLP_SCRIPT, _env(tmp_path), timeout=600)
    s = out["stats"]
    assert s["compiled_calls"] + s["interpreted_calls"] + s["eager_calls"] == s["calls"] == 250, s
    assert s["eager_calls"] >= 1                 # the first call never waits for a build
    if s["compiled_calls"]:
        assert s["first_compiled_call"] == 250 - s["compiled_calls"] + 1, s      # one switch, never back
    else:
        assert s["first_compiled_call"] is None
    for a, b in zip(out["got"], out["want"]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)


NUMBA_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build
    # an integer power (intmath.pow_i64: a kernel Numba compiles) beside kernels that translate to LLVM IR
    W = jg.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))
    f = jg.compile(lambda x, i, y: ((y * 0.75).exp() @ W).sum() + (x ** i).sum().float(), backend="numba")
    x = jg.tensor(np.arange(6, dtype=np.int64))
    i = jg.tensor(np.full(6, 3, np.int64))
    y = jg.tensor(np.linspace(0, 1, 12, dtype=np.float32).reshape(2, 6))
    first = float(f(x, i, y))
    second = float(f(x, i, y))      # (the hook's call: it waits for the build)
    f.wait()                        # (its optimised tier too)
    print(json.dumps({"values": [first, second], "stats": {k: v for k, v in f.stats.items()
                      if isinstance(v, (int, float, str, type(None)))}, "counts": build.COUNTS,
                      "numba": "numba" in sys.modules}))
""")


def test_kernels_numba_must_build_go_to_build_processes(tmp_path):
    out = _run(NUMBA_SCRIPT, _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=1))
    c, s = out["counts"], out["stats"]
    assert out["values"][0] == pytest.approx(out["values"][1], rel=1e-5)
    assert s["compiled_calls"] == 1 and s["first_compiled_call"] == 2, s
    # the Numba kernel in a build process (this process compiles nothing with Numba; it links the object, which
    # needs Numba's runtime), the rest here through LLVM IR
    assert c["build_processes"] >= 1 and c["kernels_ir"] >= 1 and c["kernels_compiled"] == c["kernels_ir"], c
    assert c["kernels_loaded"] >= 1 and c["kernels_quick"] == c["kernels_ir"], c


# run twice: PHASE=exit exits in the middle of the background build, PHASE=warm builds before its first call (the
# step's lines are the same in both runs: the entry's listing names them, and its key covers the listing)
# a one-layer SGD step (the scripts below share it)
STEP = """
    W = jg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), requires_grad=True)

    def step(x):
        loss = (jg.tanh(x @ W) * 2 + jg.exp(-x @ W) * 0.25).sum()
        loss.backward()
        with jg.no_grad():
            W.sub_(0.1 * W.grad)
            W.grad = None
        return loss.detach()
"""
EXIT_SCRIPT = textwrap.dedent("""
    import json, os, sys, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build, graph_build
""" + STEP + """
    x = jg.tensor(np.ones((2, 4), np.float32))
    if os.environ["PHASE"] == "warm":
        f = jg.compile(step, backend="numba", background=False)
        f(x)
        print(json.dumps({"counts": build.COUNTS, "stats": {k: v for k, v in f.stats.items()
                          if isinstance(v, (int, float, str, type(None)))}}))
        sys.exit(0)
    from jitgrad.codegen.program import cpu
    one_done = threading.Event()
    swap = cpu.CompiledGraph._swap

    def watched(self, key, address):    # the build thread: tell the script when a kernel's optimised code is in
        swap(self, key, address)        # (after the quick build's switch; built here or by a forked child)
        one_done.set()
    cpu.CompiledGraph._swap = watched
    f = jg.compile(step, backend="numba")
    f(x)                            # eager; the build starts on the build thread
    assert one_done.wait(300)
    print(json.dumps({"counts": build.COUNTS}))
    # exits now, in the middle of the build: the build thread stops after its kernel, build processes the rest
""")


def test_a_script_that_exits_mid_build_leaves_the_next_run_warm(tmp_path):
    env = _env(tmp_path)
    first = _run(EXIT_SCRIPT, dict(env, PHASE="exit"))
    assert first["counts"]["kernels_ir"] >= 1 and first["counts"]["build_processes"] == 0, first
    # the next run waits for the build processes the first one left (one builder per key), then links their
    # objects: it compiles nothing
    second = _run(EXIT_SCRIPT, dict(env, PHASE="warm"))
    c = second["counts"]
    assert c["kernels_compiled"] == 0 and c["drivers_compiled"] == 0 and c["kernels_loaded"] >= 2, c
    assert second["stats"]["compiled_calls"] == 1 and second["stats"]["first_compiled_call"] == 1


# two tiers: calls 1..3 eager (the hook), 4..8 on the quick build (its optimised tier held by a gate), then the
# optimised build swapped in; a pure step (fixed weights), so every compiled call gives the same loss
TIERS_SCRIPT = textwrap.dedent("""
    import json, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build, build_thread, objstore
    from jitgrad.jit.graph_code import _COMPILED
    from jitgrad.codegen.program.cpu import blas_address
    rng = np.random.default_rng(1)
    W1 = jg.tensor(rng.standard_normal((16, 32), dtype=np.float32))
    W2 = jg.tensor(rng.standard_normal((32, 4), dtype=np.float32))
    x = jg.tensor(rng.standard_normal((64, 16), dtype=np.float32))

    def step(x):
        h = jg.tanh(x @ W1) * jg.sigmoid(x @ W1)
        return (jg.exp(h @ W2 * 0.1).sum(dim=1).log()).mean()
    gate = threading.Event()
    if PHASE == "cold":
        build_thread.hold_optimising(gate)
    f = jg.compile(step, backend="numba")
    out, seen = [], {}
    for n in range(12):
        if n == 8:
            (cg,) = [c for c in _COMPILED.values() if c.run is not None]
            small = [n for n, st in enumerate(cg.program.steps) if st.kind == "gemm" and st.gemm.startswith("small_")]
            blas_small = [int(cg.F[n]) == blas_address(cg.program.steps[n].gemm[6:]) for n in small]
            seen["quick"] = {"on_disk": sum(objstore.exists(k) for k in cg.code.kkeys.values()),
                             "small_gemms": len(small), "on_blas": all(blas_small),
                             "kernels": len(set(cg.code.kkeys.values())), "counts": dict(build.COUNTS),
                             "stats": {k: f.stats[k] for k in ("kernels_quick", "graphs_optimising",
                                                               "first_optimised_call", "compiled_calls")}}
            gate.set()
            assert f.wait()
            seen["optimised"] = {"on_disk": sum(objstore.exists(k) for k in cg.code.kkeys.values()),
                                 "graph_file": objstore.exists(cg.code.gkey),
                                 "swapped": all(cg._addrs[k] == build._ADDRESSES[cg.code.kkeys[k]]
                                                for k in cg._addrs),
                                 "small_gemms": all(int(cg.F[n]) == blas_address(cg.program.steps[n].gemm)
                                                    for n in small)}
        out.append(float(f(x).numpy()))
    s = {k: v for k, v in f.stats.items() if isinstance(v, (int, float, str, type(None)))}
    print(json.dumps({"out": out, "seen": seen, "stats": s, "counts": build.COUNTS}))
""")


def test_a_quick_build_serves_calls_until_its_optimised_build_is_swapped_in(tmp_path):
    """An empty cache: the build thread first builds the step's kernels quickly (few LLVM passes, kept in memory
    only) and the calls switch to them; the optimised builds follow, are written to disk and replace the quick
    code in the calls' address table.  The cache never holds quick code: the next run loads the optimised code."""
    env = _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=3)
    cold = _run(TIERS_SCRIPT.replace("PHASE", repr("cold")), env)
    s, q, o = cold["stats"], cold["seen"]["quick"], cold["seen"]["optimised"]
    assert s["eager_calls"] + s["interpreted_calls"] == 3 and s["compiled_calls"] == 9, s
    assert s["first_compiled_call"] == 4 and s["first_optimised_call"] == 9, s
    # calls 4..8: every kernel quick, none optimised nor on disk
    assert q["stats"] == {"kernels_quick": q["kernels"], "graphs_optimising": 1, "first_optimised_call": None,
                          "compiled_calls": 5}, q
    assert q["kernels"] >= 3 and q["counts"]["kernels_quick"] == q["kernels"] and q["counts"]["kernels_ir"] == 0, q
    assert q["on_disk"] == 0, q
    # its small products on BLAS's routine meanwhile (the small GEMMs' module is built with the optimised tier)
    assert q["small_gemms"] >= 1 and q["on_blas"], q
    # then each optimised, on disk, in the table
    assert o == {"on_disk": q["kernels"], "graph_file": True, "swapped": True, "small_gemms": True}, o
    assert s["graphs_optimising"] == 0 and s["kernels_compiled"] >= q["kernels"], s
    c = cold["counts"]
    assert c["kernels_ir"] == c["kernels_compiled"] == c["kernels_quick"] == q["kernels"], c
    # the same function: the quick build's losses are the optimised build's to rounding
    out = cold["out"]
    assert out[3:8] == pytest.approx([out[8]] * 5, rel=1e-5) and len(set(out[8:])) == 1
    warm = _run(TIERS_SCRIPT.replace("PHASE", repr("warm")), env)
    w = warm["counts"]
    assert w["kernels_compiled"] == w["kernels_quick"] == 0 and w["graph_files_loaded"] == 1, w
    assert warm["stats"]["first_compiled_call"] == 1 and warm["out"][0] == out[8]      # the bits of the optimised code


# PHASE=exit: the build thread is stuck in a kernel's compile, holding the kernel's build lock, when the script
# exits, and stopping it times out; PHASE=warm: the next run, default settings
STUCK_SCRIPT = textwrap.dedent("""
    import json, os, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build, build_thread
""" + STEP + """
    x = jg.tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
    if os.environ["PHASE"] == "exit":
        stuck, never, held = threading.Event(), threading.Event(), []
        compile_code = build.compile_code

        def stalled(key, source, kind, elsewhere=None):
            if kind == "kernel" and threading.current_thread().name == "jitgrad-compile":
                held.append(key)
                stuck.set()
                never.wait()        # (holding the kernel's build lock: build.obtain took it)
            return compile_code(key, source, kind, elsewhere)
        build.compile_code = stalled
        build_thread.stop.__defaults__ = (0.2,)     # at exit, wait 0.2 s for the kernel, not 10 s
    f = jg.compile(step, backend="numba")
    v = float(f(x))
    if os.environ["PHASE"] == "exit":
        assert stuck.wait(300)
    print(json.dumps({"loss": v, "counts": build.COUNTS, "held": held if os.environ["PHASE"] == "exit" else None,
                      "stats": {k: v for k, v in f.stats.items() if isinstance(v, (int, float, str, type(None)))}}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock")
def test_a_kernel_the_build_thread_still_holds_at_exit_is_built_for_the_next_run(tmp_path):
    env = _env(tmp_path, JITGRAD_QUICK_BUILD=0)     # (no quick tier: the thread compiles at O3, under the lock)
    first = _run(STUCK_SCRIPT, dict(env, PHASE="exit"))
    assert first["counts"]["kernels_compiled"] == 0 and len(first["held"]) == 1, first
    # the build process the exit started (after the print) shares the lock the dying thread held: the key is never
    # free while its kernel is missing (a run starting now waits for that build, it starts no second one)
    from jitgrad.codegen.native import objstore
    key, root = first["held"][0], tmp_path / "cache"
    assert objstore.BuildLock(key, root).held_elsewhere() or objstore.exists(key, root)
    wait_for_builders(root)
    assert objstore.exists(key, root)
    second = _run(STUCK_SCRIPT, dict(env, PHASE="warm"))
    assert second["loss"] == pytest.approx(first["loss"], rel=1e-6)
    c = second["counts"]
    assert second["stats"]["compiled_calls"] == 1 and second["stats"]["first_compiled_call"] == 1, second
    assert c["kernels_compiled"] == 0 and c["drivers_compiled"] == 0 and c["kernels_loaded"] >= 1, c


def _flock_free(path) -> bool:
    import fcntl
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def test_a_build_lock_another_thread_holds_is_not_held_elsewhere(tmp_path):
    """A probe from one thread while another thread of this process holds (or probes) a key's lock: "here", not
    "another process" (at exit that answer dropped the key from the build processes' jobs); a lock another
    process holds is "elsewhere"."""
    import threading
    from jitgrad.codegen.native import objstore
    key = "ab" + "0" * 62
    held = objstore.BuildLock(key, tmp_path)
    assert held.acquire() and held.held_here()
    seen = []
    t = threading.Thread(target=lambda: seen.append((objstore.BuildLock(key, tmp_path).held_elsewhere(),
                                                     objstore.BuildLock(key, tmp_path).acquire(block=False))))
    t.start()
    t.join()
    assert seen == [(False, False)]        # here; and still exclusive between threads
    shared = objstore.BuildLock(key, tmp_path)
    assert shared.share()                   # (at exit: handed to a build process)
    held.release()
    assert shared.held_here() and not _flock_free(held.path)     # the shared descriptor keeps the flock
    shared.release()
    assert not objstore.BuildLock(key, tmp_path).held_here() and _flock_free(held.path)
    assert not objstore.BuildLock(key, tmp_path).share()
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys
        fd = os.open({str(held.path)!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        probe = objstore.BuildLock(key, tmp_path)
        assert probe.held_elsewhere() and not probe.acquire(block=False)
    finally:
        other.communicate("")
    assert not objstore.BuildLock(key, tmp_path).held_elsewhere()


# the optimised tier builds the heaviest kernels first: a step with loops over 2**16, 2**10 and 16 elements
ORDER_SCRIPT = textwrap.dedent("""
    import json, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build_thread
    from jitgrad.codegen.program import cpu
    from jitgrad.jit.graph_code import _COMPILED
    swapped = []
    swap = cpu.CompiledGraph._swap

    def recording(self, key, address):
        swapped.append(key)
        return swap(self, key, address)
    cpu.CompiledGraph._swap = recording
    gate = threading.Event()
    build_thread.hold_optimising(gate)

    def step(a, b, c):
        return (jg.exp(c) * 3).sum() + (jg.tanh(a) * 2 - a).sum() + jg.sigmoid(b * 0.5).sum()
    rng = np.random.default_rng(0)
    args = [jg.tensor(rng.standard_normal(n, dtype=np.float32)) for n in (1 << 16, 1 << 10, 16)]
    f = jg.compile(step, backend="numba")
    f(*args)
    f(*args)                        # (JITGRAD_BUILD_AFTER_CALL=1: this call waits for the quick build's switch)
    (cg,) = [c for c in _COMPILED.values() if c.run is not None]
    quick = sorted(cg.code.quick_keys)
    work, tiers = cg.kernel_work(), dict(cg.code.first_tier)
    gate.set()
    f.wait()
    print(json.dumps({"swapped": swapped, "quick": quick, "work": {k: work.get(k, 0.0) for k in swapped},
                      "tiers": tiers}))
""")


def test_the_optimised_tier_builds_the_heaviest_kernels_first(tmp_path):
    out = _run(ORDER_SCRIPT, _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=1))
    swapped, work, tiers = out["swapped"], out["work"], out["tiers"]
    assert sorted(swapped) == out["quick"] and len(swapped) >= 3, out
    # the heaviest first, but the first tier's vectorised kernels (the 2**16 loop's) last: near O3's code already
    vector = [k for k in swapped if tiers[k] == "vector"]
    assert len(vector) == 1 and swapped[-1] == vector[0] and work[vector[0]] == max(work.values()), out
    weights = [work[k] for k in swapped[:-1]]
    assert weights == sorted(weights, reverse=True) and weights[0] > weights[-1], out


def test_first_tiers_by_each_kernels_share_of_the_work():
    from jitgrad.codegen.native import graph_build
    lo, hi, unit = graph_build.MINOR_SHARE, graph_build.VECTOR_SHARE, graph_build.VECTOR_WORK
    work = {"tiny": 100 * lo / 2, "some": 100 * lo * 2, "unknown": 0.0}
    work["big"] = 100.0 - sum(work.values())        # (shares of a total of 100 ...)
    assert work["big"] >= 100 * hi
    work = {k: w * unit for k, w in work.items()}   # (... units of VECTOR_WORK)
    tiers = graph_build.first_tiers(list(work) + ["unlisted"], work)
    assert tiers == {"big": "vector", "tiny": "minor", "some": "quick", "unknown": "quick", "unlisted": "quick"}
    assert graph_build.first_tiers(["a"], {}) == {"a": "quick"}
    # two kernels of equal work, each half of it: both at the vector tier's share or above, unless their work is
    # under VECTOR_WORK
    halves = graph_build.first_tiers(["a", "b"], {"a": unit, "b": unit})
    assert set(halves.values()) == {"vector" if hi <= 0.5 else "quick"}
    assert set(graph_build.first_tiers(["a", "b"], {"a": unit / 2, "b": unit / 2}).values()) == {"quick"}


# the first tier by kernel: a step with loops over 2**16, 2**10 and 16 elements; its quick calls, then its O3 calls,
# against eager mode's values
MINOR_SCRIPT = textwrap.dedent("""
    import json, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build_thread, graph_build, llvm_build
    from jitgrad.jit.graph_code import _COMPILED
    gate = threading.Event()
    build_thread.hold_optimising(gate)

    def step(a, b, c):
        return (jg.exp(c) * 3).sum() + (jg.tanh(a) * 2 - a).sum() + jg.sigmoid(b * 0.5).sum()
    rng = np.random.default_rng(0)
    args = [jg.tensor(rng.standard_normal(n, dtype=np.float32)) for n in (1 << 16, 1 << 10, 16)]
    f = jg.compile(step, backend="numba")
    eager = float(step(*args))
    f(*args)
    quick = float(f(*args))         # (JITGRAD_BUILD_AFTER_CALL=1: this call waits for the quick build's switch)
    (cg,) = [c for c in _COMPILED.values() if c.run is not None]
    record, work = dict(cg.code.first_tier), cg.kernel_work()
    rule = graph_build.first_tiers(list(record), work)
    minor, vector = llvm_build.STATS["kernels_quick_minor"], llvm_build.STATS["kernels_quick_vector"]
    gate.set()
    f.wait()
    print(json.dumps({"record": record, "rule": rule, "work": {k: work.get(k, 0.0) for k in record}, "minor": minor,
                      "vector": vector,
                      "eager": eager, "quick": quick, "optimised": float(f(*args)),
                      "stats": {k: f.stats[k] for k in ("kernels_quick", "graphs_optimising")}}))
""")


def test_the_first_tier_builds_each_kernel_by_its_share_and_every_tier_computes_the_same(tmp_path):
    out = _run(MINOR_SCRIPT, _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=1))
    record, work = out["record"], out["work"]
    # every kernel of the first tier recorded, as the rule says: the heaviest (the 2**16 loop) vectorised, the
    # lightest with work minor, the 2**10 loop's kernel quick
    assert record == out["rule"] and len(record) == out["stats"]["kernels_quick"] >= 3, out
    by_work = sorted((w, k) for k, w in work.items() if w > 0)
    assert record[by_work[-1][1]] == "vector" and record[by_work[0][1]] == "minor", out
    assert "quick" in record.values(), out
    for tier in ("minor", "vector"):
        assert out[tier] == sum(t == tier for t in record.values()) >= 1, out
    assert out["stats"]["graphs_optimising"] == 0, out
    # the first tier's code (minor, quick and vector kernels) and O3 code: eager's value to float32 rounding of a
    # 2**16-element sum
    assert out["quick"] == pytest.approx(out["eager"], rel=1e-5) and out["optimised"] == pytest.approx(
        out["eager"], rel=1e-5), out


# a background build dropped (``CompiledGraph.drop``: a retrace made its sizes symbolic) as it starts, PHASE=start
# (after its cache lookup), or after its first kernel's rendering, PHASE=render
DROP_SCRIPT = textwrap.dedent("""
    import json, os, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build, build_thread, graph_build, llvm_build
""" + STEP + """
    renders, try_load, source = [], graph_build.GraphCode.try_load, graph_build.GraphCode._source

    def looked_up(self):
        found = try_load(self)
        if os.environ["PHASE"] == "start" and threading.current_thread().name == "jitgrad-compile":
            self.dropped = True
        return found

    def rendered(self, key, quick=False):
        renders.append(key)
        if os.environ["PHASE"] == "render":
            self.dropped = True
        return source(self, key, quick)
    graph_build.GraphCode.try_load, graph_build.GraphCode._source = looked_up, rendered
    f = jg.compile(step, backend="numba")
    f(jg.tensor(np.ones((2, 4), np.float32)))       # eager; the build starts on the build thread
    f.wait()                                         # (until it stops: dropped)
    build_thread.wait_background()
    print(json.dumps({"renders": len(renders), "counts": build.COUNTS, "llvm": llvm_build.STATS}))
""")


@pytest.mark.parametrize("phase", ["start", "render"])
def test_a_dropped_build_stops_before_its_next_kernel(tmp_path, phase):
    """A build no call will run stops at its next kernel: dropped as it starts, it compiles no entry and renders
    nothing; dropped after its first kernel's rendering, it renders no other and builds no LLVM module (before,
    it compiled its entry and rendered every kernel: the LM step's static trace, 42k Python calls on the build
    thread while the call that dropped it retraced)."""
    out = _run(DROP_SCRIPT, _env(tmp_path, PHASE=phase, JITGRAD_FORKED_TIER=0))     # (renders on the build thread)
    c, ll = out["counts"], out["llvm"]
    assert out["renders"] == (0 if phase == "start" else 1), out
    assert c["kernels_quick"] == c["kernels_compiled"] == 0 and ll["modules_first_tier"] == 0, out
    if phase == "start":
        assert c["drivers_compiled"] == 0, out


# the optimised tier, held until the first tier serves calls, then let through: what the build thread did for it
FORKED_SCRIPT = textwrap.dedent("""
    import json, threading
    import numpy as np, jitgrad as jg
    from llvmlite.binding import ffi
    from jitgrad.codegen.native import build, build_thread, graph_build
    rng = np.random.default_rng(3)
    W1 = jg.tensor(rng.standard_normal((16, 32), dtype=np.float32))
    W2 = jg.tensor(rng.standard_normal((32, 4), dtype=np.float32))
    x = jg.tensor(rng.standard_normal((64, 16), dtype=np.float32))

    def step(x):
        h = jg.tanh(x @ W1) * jg.sigmoid(x @ W1)
        return (jg.exp(h @ W2 * 0.1).sum(dim=1).log()).mean()
    seen, on = {"llvm": 0, "renders": 0, "first_renders": 0}, [False]
    call0, source = ffi._lib_fn_wrapper.__call__, graph_build.GraphCode._source

    def counted(self, *a, **k):
        if on[0] and threading.current_thread().name == "jitgrad-compile":
            seen["llvm"] += 1
        return call0(self, *a, **k)

    def rendered(self, key, quick=False):
        if threading.current_thread().name == "jitgrad-compile":
            seen["renders" if on[0] else "first_renders"] += 1
        return source(self, key, quick)
    optimise = graph_build.GraphCode.optimise

    def optimising(self, *a, **k):  # (the kernels' tier; the small products' module is the process's own)
        on[0] = True
        try:
            return optimise(self, *a, **k)
        finally:
            on[0] = False
    ffi._lib_fn_wrapper.__call__, graph_build.GraphCode._source = counted, rendered
    graph_build.GraphCode.optimise = optimising
    gate = threading.Event()
    build_thread.hold_optimising(gate)
    f = jg.compile(step, backend="numba")
    f(x)
    quick = float(f(x).numpy())     # (JITGRAD_BUILD_AFTER_CALL=1: waits for the first tier's switch; quick code)
    gate.set()
    f.wait()                        # (a call, or this wait, forks the optimised tier's child)
    build_thread.wait_background()
    out = float(f(x).numpy())
    print(json.dumps({"seen": seen, "quick": quick, "out": out, "counts": build.COUNTS,
                      "stats": {k: f.stats[k] for k in ("kernels_quick", "graphs_optimising")}}))
""")


def test_both_tiers_are_built_by_forked_children(tmp_path):
    """A background build's two tiers (on Linux): each rendered and compiled by a child forked at a call's start
    (``forked_llvm.ForkedTier``); the build thread renders none of the kernels and, for the optimised tier, makes
    a few LLVM calls a kernel (linking) instead of tens (here 5 against 34; the LM step of ``variable_length.py``:
    768 -> 132 LLVM calls, 47.9k -> 1.9k Python calls).  The same object code: the same bits as the tiers built
    on the build thread."""
    if not sys.platform.startswith("linux"):
        pytest.skip("forks on Linux only")
    forked = _run(FORKED_SCRIPT, _env(tmp_path / "a", JITGRAD_BUILD_AFTER_CALL=1, JITGRAD_FORKED_TIER=1))
    here = _run(FORKED_SCRIPT, _env(tmp_path / "b", JITGRAD_BUILD_AFTER_CALL=1, JITGRAD_FORKED_TIER=0))
    n = forked["stats"]["kernels_quick"]
    assert n >= 3 and forked["stats"]["graphs_optimising"] == 0 == here["stats"]["graphs_optimising"], forked
    assert forked["counts"]["forked_tiers"] == 1 and here["counts"]["forked_tiers"] == 0, forked
    # (the first tier too: its kernels rendered and built in a child forked at call 2's wait)
    assert forked["counts"]["forked_first_tiers"] == 1 and here["counts"]["forked_first_tiers"] == 0, forked
    assert forked["seen"]["first_renders"] == 0 and here["seen"]["first_renders"] >= n, (forked, here)
    assert forked["counts"]["kernels_quick"] == here["counts"]["kernels_quick"] == n, (forked, here)
    assert forked["quick"] == here["quick"]
    assert forked["counts"]["kernels_ir"] == here["counts"]["kernels_ir"] == n, (forked, here)
    assert forked["seen"]["renders"] == 0 and here["seen"]["renders"] == n, (forked, here)
    assert forked["seen"]["llvm"] <= 6 * n and here["seen"]["llvm"] >= 20 * n, (forked, here)      # (linking only)
    assert forked["out"] == here["out"]
