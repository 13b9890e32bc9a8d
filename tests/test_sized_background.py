"""New tuples of sizes under the default configuration (background builds) against ``background=False``, counted and
never timed (issue 30: nanoGPT's new / repeated call was 1.37x by default against 1.21x with ``background=False``).

Once the builds are done, a new size's call does the same work in both: the same Python calls, one binding, no
concrete build, no lowering, no eager run.  Before that, on an empty cache, the default configuration serves calls
eagerly while its builds run on the build thread: the symbolic trace's lowering, with no concrete instance's build
queued (``symbolic_entries._may_lower``), and the first (static) trace's dropped once no call can reach it.
"""
import gc
import textwrap
from pathlib import Path

import numpy as np

import jitgrad as jg
from jitgrad.jit import build_policy
from test_background_build import _env, _run
from test_eager_overhead import _count
from test_symbolic_shapes import _lm_step

REPO = Path(__file__).resolve().parents[1]
_KEYS = ("shape_instances", "shape_lowerings", "shape_bindings", "eager_calls", "interpreted_calls", "traces")


def _data(seed, n):
    rng = np.random.default_rng(seed)
    shapes = [(b, t) for t in range(5, 30) for b in (2, 3)]
    rng.shuffle(shapes)
    return [(rng.integers(0, 40, s), rng.integers(0, 40, s)) for s in shapes[:n]]


def _new_size_work(background):
    """Per new-size call after ``f.wait()``: (Python calls, C calls); and what the stats counted over them."""
    data = _data(12, 14)     # 6 calls, f.wait(), two new sizes, then 7 new sizes counted
    # (sizes of its own and no disk cache: the background configuration's builds run in the background, as on an
    # empty cache, unless an earlier test of this process built the same code)
    comp = jg.compile(_lm_step(V=43, C=12), backend="numba", background=background, cache=False)
    for i, t in data[:6]:
        comp(jg.tensor(i), jg.tensor(t))
    assert comp.wait(), comp.stats          # (every build it started: the lowering's too)
    # the first compiled call of the process's worker pool, the first of a lowering's chunks of bindings: once
    i, t = data[6]
    comp(jg.tensor(i), jg.tensor(t))
    # the workspace grown past every size counted: where it grows depends on which earlier sizes were bound, and
    # in the background configuration those that ran eagerly while the builds ran were not (how many depends on
    # the machine, or on an earlier test of this process having built the same code)
    big = np.random.default_rng(0).integers(0, 40, (3, 30))
    comp(jg.tensor(big), jg.tensor(big))
    before = {k: comp.stats[k] for k in _KEYS}
    per_call = []
    # no garbage collection inside a counted call: one that frees what earlier tests left (a compiled graph's entry
    # in a weak dictionary) runs its callbacks there, Python and C calls of no configuration's own
    gc.collect()
    gc.disable()
    try:
        for i, t in data[7:]:
            args = (jg.tensor(i), jg.tensor(t))
            per_call.append(_count(lambda: comp(*args)))
            assert comp.stats["last_path"] == "compiled", comp.stats
    finally:
        gc.enable()
    return per_call, {k: comp.stats[k] - before[k] for k in _KEYS}


def test_a_new_size_costs_the_same_work_with_and_without_background_builds(monkeypatch):
    # a launch moves the pool's worker off the caller's core when Linux ran the caller there (threads.keep_apart:
    # a comprehension and a system call more in that call), which a loaded machine does now and then
    from jitgrad.codegen.native import threads
    monkeypatch.setattr(threads, "keep_apart", lambda: None)
    default, deltas = _new_size_work(True)      # (the tests run with JITGRAD_BACKGROUND_COMPILE=0)
    foreground, deltas_fg = _new_size_work(False)
    assert deltas == deltas_fg, (deltas, deltas_fg)
    assert deltas == {"shape_instances": 0, "shape_lowerings": 0, "shape_bindings": 7, "eager_calls": 0,
                      "interpreted_calls": 0, "traces": 0}, deltas
    # the same work, call by call
    assert default == foreground, (default, foreground)


def test_while_the_first_trace_builds_the_symbolic_trace_is_lowered_without_a_concrete_instance(monkeypatch):
    """An empty cache, background builds: the first trace's code is still building when a second size comes.  The
    symbolic trace is lowered at that call (its build queued behind the first trace's), so no concrete instance
    is made (its passes and layout) nor queued between the two builds, and every later size binds."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")      # (the lowering's build: synchronous, counted)

    class Building:         # the first trace's background build, never done in this test
        run = error = None
        dropped = False

        def start(self):
            pass

        def drop(self):
            self.dropped = True
    real, asked, first = build_policy.pending_build, [], Building()

    def pending_build(gf, inputs, plan, call=None):
        asked.append(call)
        return first if len(asked) == 1 else real(gf, inputs, plan, call)
    monkeypatch.setattr(build_policy, "pending_build", pending_build)
    data = _data(13, 9)
    eager, comp = _lm_step(), jg.compile(_lm_step(), backend="numba")
    le = [float(eager(jg.tensor(i), jg.tensor(t))) for i, t in data]
    lc = [float(comp(jg.tensor(i), jg.tensor(t))) for i, t in data]
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    s = comp.stats
    assert s["traces"] == 2 and s["eager_fallbacks"] == 0, s["trace_reasons"]
    assert s["shape_instances"] == 0 and s["shape_lowerings"] == 1, s        # lowered at the second size
    assert s["eager_calls"] == 1 and s["shape_bindings"] == len(data) - 1, s   # only the first trace's call
    # no call reaches the first trace once its dims are symbolic: its build was dropped (the lowering's goes first)
    assert first.dropped and s["builds_dropped"] == 1, s


LM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, jitgrad as jg
    sys.path.insert(0, TESTS)
    from test_symbolic_shapes import _lm_step
    rng = np.random.default_rng(14)
    shapes = [(2, 5), (3, 7), (2, 9), (4, 6), (3, 11), (2, 12), (4, 8), (3, 13)]
    comp = jg.compile(_lm_step(), backend="numba")
    for s in shapes:
        comp(jg.tensor(rng.integers(0, 40, s)), jg.tensor(rng.integers(0, 40, s)))
    keys = ("shape_instances", "shape_lowerings", "shape_bindings", "eager_calls", "compiled_calls",
            "first_compiled_call", "builds_dropped", "graphs_built")
    print(json.dumps({k: comp.stats[k] for k in keys}))
""")


def test_an_empty_cache_builds_the_lowering_only(tmp_path):
    """A fresh process on an empty cache with background builds, the builds held until call 2
    (``JITGRAD_BUILD_AFTER_CALL=1``): call 1 runs eagerly, call 2 (a new size) drops the first trace's build (no
    call reaches it once the dims are symbolic), lowers the template and waits for that one build, and every later
    size binds: no concrete instance, one eager call, one graph built.  (Before, call 2 made and built a concrete
    instance, and call 3 lowered and ran eagerly meanwhile; then the lowering's build waited for the first
    trace's.)"""
    code = LM_SCRIPT.replace("TESTS", repr(str(REPO / "tests")))
    s = _run(code, _env(tmp_path, JITGRAD_BUILD_AFTER_CALL=1), timeout=600)
    assert s == {"shape_instances": 0, "shape_lowerings": 1, "shape_bindings": 7, "eager_calls": 1,
                 "compiled_calls": 7, "first_compiled_call": 2, "builds_dropped": 1, "graphs_built": 1}, s
