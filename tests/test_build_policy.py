"""While a build runs, and what ``f.stats`` says about it (issue 17, items 3 and 4).  Counted, never timed."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.jit import build_policy
from jitgrad.jit.trace_entries import _Entry


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _graph_count(f):
    from jitgrad.jit.graph_code import _COMPILED
    fwd = next(iter(f._cache.values()))[0]
    cgs = [cg for cg in _COMPILED.values() if cg.graph is fwd.graph or cg.graph.eqns is fwd.graph.eqns]
    return cgs


def _paths_add_up(stats):
    return stats["compiled_calls"] + stats["interpreted_calls"] + stats["eager_calls"] == stats["calls"]


def test_stats_of_a_synchronous_build_add_up(fresh_cache):
    W = jg.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2), requires_grad=True)

    @jg.compile(backend="numba", background=False)
    def step(x):
        loss = (jg.tanh(x @ W * 1.375) ** 2).mean()       # (constants no other test uses: its own kernels)
        loss.backward()
        with jg.no_grad():
            W.sub_(0.4375 * W.grad)
            W.grad = None
        return loss.detach()
    from jitgrad.codegen.native import build
    from_disk = build.COUNTS["kernels_loaded"] + build.COUNTS["drivers_loaded"]
    x = jg.ones(4, 3)
    for _ in range(3):
        step(x)
    s = step.stats
    (cg,) = _graph_count(step)
    n = len({k.key for k in cg.kernels}) + 1       # its kernels and its entry
    assert s["kernels_compiled"] + s["kernels_loaded"] == n and s["graphs_built"] + s["graphs_loaded"] == 1
    # an empty cache: nothing came from disk; what this process had not compiled for earlier graphs is compiled
    assert build.COUNTS["kernels_loaded"] + build.COUNTS["drivers_loaded"] == from_disk
    assert s["kernels_compiled"] >= 2 and s["graphs_built"] == 1
    assert s["build_seconds"] > 0 and s["compile_seconds"] >= s["build_seconds"]
    assert s["compiled_calls"] == 3 and _paths_add_up(s) and s["last_path"] == "compiled"
    # the same step decorated again: its graph's code is in this process; nothing is built or loaded again
    again = jg.compile(step.fn, backend="numba", background=False)
    again(x)
    assert again.stats["kernels_compiled"] == 0 and again.stats["compiled_calls"] == 1


def test_calls_run_eagerly_while_the_background_build_runs(fresh_cache):
    w = jg.tensor([1.0, -2.0, 3.0], requires_grad=True)

    @jg.compile(backend="numba", background=True)
    def step(x):
        loss = (jg.exp(x * w) * 0.5).sum()
        loss.backward()
        with jg.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None
        return loss.detach()
    x = jg.tensor([0.1, 0.2, 0.3])
    ref_w = np.array([1.0, -2.0, 3.0], np.float32)
    losses = []
    losses.append(float(step(x)))           # the first call: eager (no code yet), then the build starts
    assert step.stats["eager_calls"] == 1 and step.stats["last_path"] == "eager"
    assert step.wait(timeout=300)
    losses.append(float(step(x)))
    assert step.stats["last_path"] == "compiled"
    s = step.stats
    assert _paths_add_up(s) and s["build_seconds"] > 0
    assert s["kernels_compiled"] >= 2 and s["graphs_built"] == 1     # compiled by its build processes
    # the eager call and the compiled one did the same updates as plain NumPy
    xv = np.array([0.1, 0.2, 0.3], np.float32)
    for got in losses:
        want = float((np.exp(xv * ref_w) * 0.5).sum())
        assert got == pytest.approx(want, rel=1e-5)
        ref_w = ref_w - 0.1 * (np.exp(xv * ref_w) * 0.5 * xv)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-5)


def test_while_building_the_faster_of_eager_and_interpreter_is_chosen():
    e = _Entry()
    assert build_policy.choose(e) == "eager"            # first: measure eager
    build_policy.record(e, "eager", 0.010)
    assert build_policy.choose(e) == "interpret"        # then the interpreter
    build_policy.record(e, "interpret", 0.004)
    assert build_policy.choose(e) == "eager"            # eager again: its first call paid one-time costs
    build_policy.record(e, "eager", 0.006)
    assert build_policy.choose(e) == "interpret"        # then the faster of the two
    paths = []
    for _ in range(2 * build_policy.RESAMPLE):          # (each path's fastest call counts)
        paths.append(build_policy.choose(e))
        build_policy.record(e, paths[-1], 0.007)
    # every RESAMPLE-th call the slower path again (a call measured while the build held the GIL may mislead)
    assert paths.count("eager") == 2 and paths.count("interpret") == 2 * build_policy.RESAMPLE - 2, paths
    build_policy.record(e, "eager", 0.002)
    assert build_policy.choose(e) == "eager"


def test_a_graph_that_communicates_is_interpreted_while_building():
    """Issue 31: eager mode issues other collectives than the interpreter and the compiled driver, and builds end
    at different calls on different ranks, so a step with collectives never takes the eager path while building
    (the two-rank run is in test_distributed.py)."""
    from jitgrad.ir.ops import OPS
    from jitgrad.runtime.dispatch import bind
    plain = jg.compile(lambda x: x * 2, backend="interpret")
    talks = jg.compile(lambda x: bind(OPS["all_reduce"], x, group=0, reduce_op="sum") * 2, backend="interpret")
    x = jg.ones(3)
    for f in (plain, talks):
        f(x)
    (e_plain,), = plain._cache.values()
    (e_talks,), = talks._cache.values()
    assert build_policy.choose(e_plain) == "eager" and e_plain.talks is None
    assert e_talks.talks == (0, "compiled step '<lambda>' (all_reduce x1)", 1)
    for t in (0.001, 0.0001):
        assert build_policy.choose(e_talks) == "interpret"
        build_policy.record(e_talks, "eager", t)      # even when eager measured faster


@pytest.mark.parametrize("background", [True, False])
def test_tensors_made_inside_are_constants_through_the_build(background):
    """``x + jg.ones(2)``: the tensor made during the trace is a constant of the graph, so the calls served
    while building (eagerly, on the interpreter) and with the built code all work after the trace's tensor died
    (the CUDA analogue is in test_cuda.py)."""
    f = jg.compile(lambda x: x + jg.ones(2) * 1.8125, background=background)
    x = jg.tensor([1.0, 2.0])
    for _ in range(4):
        np.testing.assert_allclose(f(x).numpy(), [2.8125, 3.8125])
    assert _paths_add_up(f.stats)
    (fwd, *_), = f._cache.values()
    assert len(fwd.graph.inputs) == 1          # the argument only: nothing made inside became an input


def test_a_call_while_building_looks_its_plan_up_once(monkeypatch, fresh_cache):
    """A call served while the code builds finds which graph it runs (``grad_plan``) once: the build's graph and
    the interpreted call's come from the same lookup."""
    from jitgrad.jit.graph_function import GraphFunction
    w = jg.tensor([1.5, -0.5], requires_grad=True)
    f = jg.compile(lambda x: (x * w * 1.4375).sum(), backend="numba", background=True)   # (its own kernels)

    class NotStarted:       # the build never starts: every call takes the eager or the interpreted path
        def start(self):
            pass
    pending = build_policy.pending_build
    monkeypatch.setattr(build_policy, "pending_build", lambda *a: pending(*a) and NotStarted())
    x = jg.tensor([2.0, 3.0])
    assert float(f(x)) == 1.5 * 1.4375              # traced; the first call runs eagerly
    lookups = []
    real = GraphFunction.grad_plan
    monkeypatch.setattr(GraphFunction, "grad_plan", lambda self, inputs: lookups.append(1) or real(self, inputs))
    y = f(x)                                        # the interpreter
    assert f.stats["last_path"] == "interpreted" and f.stats["interpreted_calls"] == 1
    assert len(lookups) == 1
    y.backward()                                    # the plan it used is the one with the residuals for w
    np.testing.assert_allclose(w.grad.numpy(), [2.0 * 1.4375, 3.0 * 1.4375])
