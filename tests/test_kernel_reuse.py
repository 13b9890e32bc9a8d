"""Kernels keyed by structure, persistent and parallel builds, the workspace, and what ``f.stats`` reports.

Work is counted (compiles, loads, allocations), never timed.
"""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import build, build_procs, cache
from jitgrad.codegen.program import cpu

from build_processes import wait_for_builders

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    return tmp_path / "cache"


def _loads(monkeypatch):
    """Count compiles (kernels by Numba, graph entries from LLVM IR) by key."""
    seen = []
    orig = build.compile_code

    def counting(key, source, kind, elsewhere=None):
        if key not in build._ADDRESSES:
            seen.append(("driver" if kind == "entry" else kind, key))
        return orig(key, source, kind, elsewhere)
    monkeypatch.setattr(build, "compile_code", counting)
    orig_entry = cpu.CompiledGraph._entry_build

    def entry_counting(self, key):      # graph entries: LLVM IR compiled without Numba
        seen.append(("driver", key))
        return orig_entry(self, key)
    monkeypatch.setattr(cpu.CompiledGraph, "_entry_build", entry_counting)
    return seen


def _cg(f):
    entries = next(iter(f._cache.values()))     # the first signature traced
    from jitgrad.jit.graph_code import compiled_graph
    e = entries[0]
    return compiled_graph(e.graph, e.gf.writes)


def test_same_loop_in_two_graphs_and_two_batch_sizes_compiles_once(fresh_cache, monkeypatch):
    seen = _loads(monkeypatch)

    def f(x, y):
        return (jg.tanh(x * 2.0 + y) * 3.0).sum(1)

    def g(x, y):        # another graph with the same loop, and a different one after it
        return (jg.tanh(x * 2.0 + y) * 3.0).sum(1).exp()
    cf = jg.compile(f, backend="numba", background=False)
    a = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(cf(jg.tensor(a), jg.tensor(b)).numpy(), np.tanh(a * 2 + b).__mul__(3).sum(1),
                               rtol=1e-5)
    first = list(seen)
    assert [n for n, _ in first].count("kernel") == 1 and [n for n, _ in first].count("driver") == 1
    # a new batch size: a new trace and graph, the same kernel and the same (size-free) driver: nothing loaded
    a2 = np.random.default_rng(2).standard_normal((32, 5)).astype(np.float32)
    np.testing.assert_allclose(cf(jg.tensor(a2), jg.tensor(b)).numpy(), (np.tanh(a2 * 2 + b) * 3).sum(1), rtol=1e-5)
    assert cf.stats["traces"] == 2 and seen == first
    # another graph: only its new loop (exp) and its entry are compiled; the shared loop is not
    cg_ = jg.compile(g, backend="numba", background=False)
    np.testing.assert_allclose(cg_(jg.tensor(a), jg.tensor(b)).numpy(), np.exp((np.tanh(a * 2 + b) * 3).sum(1)),
                               rtol=1e-5)
    new = seen[len(first):]
    assert [n for n, _ in new].count("kernel") == 1, new
    assert _cg(cg_).kernels[0].key == _cg(cf).kernels[0].key


def test_identical_loops_in_one_graph_compile_once(fresh_cache):
    params = [jg.randn(*s, requires_grad=True) for s in [(6, 4), (4,), (4, 3), (3,)]]

    @jg.compile(backend="numba", background=False)
    def step(x):
        loss = (((x @ params[0] + params[1]).relu() @ params[2] + params[3]) ** 2).mean()
        loss.backward()
        with jg.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None
        return loss.detach()
    before = [p.detach().numpy().copy() for p in params]
    step(jg.randn(5, 6))
    cg = _cg(step)
    updates = [k for k in cg.kernels if k.label.endswith("[mul,sub]")]
    # four SGD updates of tensors of rank 2 and 1: one 1-D loop (dims merged), written straight into the params
    assert len(updates) == 1, [k.label for k in cg.kernels]
    assert len(cg.program.writes) == 0 and len(cg.program.inplace_done) == 4
    assert all(not np.array_equal(b, p.detach().numpy()) for b, p in zip(before, params))


def _step_script(cache_dir):
    return textwrap.dedent(f"""
        import json, os, sys
        os.environ["JITGRAD_CACHE_DIR"] = {str(cache_dir)!r}
        import numpy as np, jitgrad as jg
        from jitgrad.codegen.native import build
        W = jg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), requires_grad=True)

        @jg.compile(backend="numba")
        def step(x):
            loss = (jg.tanh(x @ W) * 2).sum()
            loss.backward()
            with jg.no_grad():
                W.sub_(0.1 * W.grad)
                W.grad = None
            return loss.detach()
        v = float(step(jg.tensor(np.ones((2, 4), np.float32))))
        print(json.dumps({{"loss": v, "stats": step.stats, "counts": build.COUNTS}}))
        """)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_script_that_calls_once_and_exits_leaves_compiled_code(tmp_path):
    cache_dir = tmp_path / "c"
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    script = _step_script(cache_dir)
    r1 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r1.returncode == 0, r1.stderr
    one = json.loads(r1.stdout.splitlines()[-1])
    st = one["stats"]         # default: background build; the first call eager (or interpreted), not compiled
    assert st["interpreted_calls"] + st["eager_calls"] == 1 and st["compiled_calls"] == 0
    wait_for_builders(cache_dir)
    # the next run, default mode too: everything is on disk, so it loads before its first call (no interpreter)
    r2 = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr
    two = json.loads(r2.stdout.splitlines()[-1])
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-6)
    assert two["stats"]["compiled_calls"] == 1 and two["stats"]["interpreted_calls"] == 0, (one, two, r2.stderr)
    c = two["counts"]
    assert c["kernels_compiled"] == 0 and c["drivers_compiled"] == 0 and c["build_processes"] == 0, c
    assert c["kernels_loaded"] > 0 and c["drivers_loaded"] == 1, c


def test_concurrent_builders_of_one_kernel_both_succeed(fresh_cache):
    f = jg.compile(lambda x: (jg.exp(x) * 0.5 - 1).sum(), backend="numba", background=True)
    x = jg.tensor(np.linspace(0, 1, 7).astype(np.float32))
    first = float(f(x))                     # interpreter; the build is queued, not started
    cg = _cg(f)
    jobs = cg.code.pending_jobs()
    assert jobs, "nothing to build in an empty cache"
    procs = [build_procs.spawn(jobs, cg.code), build_procs.spawn(jobs, cg.code)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    from jitgrad.codegen.native import objstore
    assert all(objstore.read(key) for _, key, _ in jobs) and objstore.read(cg.code.gkey)
    assert f.wait(timeout=300)
    assert float(f(x)) == pytest.approx(first, rel=1e-6)
    assert f.stats["compiled_calls"] == 1 and f.stats["interpreted_calls"] + f.stats["eager_calls"] == 1


def test_workspace_is_reused_and_only_outputs_are_fresh(fresh_cache):
    W = jg.randn(16, 8, requires_grad=True)

    @jg.compile(backend="numba", background=False)
    def step(x):
        h = jg.tanh(x @ W) * 2 + 1
        loss = (h * h).mean()
        loss.backward()
        with jg.no_grad():
            W.sub_(0.01 * W.grad)
            W.grad = None
        return loss.detach()
    x = jg.randn(4, 16)
    step(x)
    cg = _cg(step)
    assert cg.nopython
    ws = cpu.ALLOCATIONS["workspaces"]
    for _ in range(5):
        step(x)
    assert cpu.ALLOCATIONS["workspaces"] == ws            # no new intermediate buffers on later calls
    assert len(cg.program.fresh) == 1                      # the loss: the only array handed to the user
    assert cg.program.ws_size > 0


def _py_driver_fn():
    # cat has no native lowering: the graph gets the Python driver (which must be re-entrant and thread-safe)
    return jg.compile(lambda a, b: (jg.cat([a * 2, b + 1]).tanh() * 3).sum(0), backend="numba", background=False)


def test_new_shapes_and_concurrent_calls_stay_correct(fresh_cache):
    f = _py_driver_fn()
    rng = np.random.default_rng(0)

    def ref(a, b):
        return (np.tanh(np.concatenate([a * 2, b + 1])) * 3).sum(0)
    inputs = [(rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32))
              for n in (2, 5, 2)]
    for a, b in inputs:          # new shapes: their own graphs and workspaces
        np.testing.assert_allclose(f(jg.tensor(a), jg.tensor(b)).numpy(), ref(a, b), rtol=1e-5, atol=1e-5)
    assert not _cg_any(f).nopython
    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        for _ in range(30):
            a, b = r.standard_normal((5, 3)).astype(np.float32), r.standard_normal((2, 3)).astype(np.float32)
            got = f(jg.tensor(a), jg.tensor(b)).numpy()
            if not np.allclose(got, ref(a, b), rtol=1e-5, atol=1e-5):
                errors.append((got, ref(a, b)))
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _cg_any(f):
    from jitgrad.jit.graph_code import compiled_graph
    e = next(iter(f._cache.values()))[0]
    return compiled_graph(e.graph, e.gf.writes)


def test_reentrant_call_from_a_hook_gets_its_own_workspace(fresh_cache):
    f = _py_driver_fn()
    a, b = jg.tensor(np.ones((3, 3), np.float32)), jg.tensor(np.ones((2, 3), np.float32))
    expect = f(a, b).numpy()
    cg = _cg_any(f)
    inner, entered = [], []
    orig = cg._execute

    def reenter(*args, **kw):       # while the first call runs, the same function is called again
        if not entered:
            entered.append(True)
            inner.append(f(a, b).numpy())
        return orig(*args, **kw)
    cg._execute = reenter
    try:
        out = f(a, b).numpy()
    finally:
        cg._execute = orig
    np.testing.assert_allclose(out, expect)
    np.testing.assert_allclose(inner[0], expect)


def test_stats_count_compiled_and_interpreted_calls(fresh_cache):
    f = jg.compile(lambda x: (x * 3 + 1).sum(), backend="numba", background=True)
    x = jg.ones(4)
    assert float(f(x)) == 16.0
    assert f.stats["interpreted_calls"] + f.stats["eager_calls"] == 1 and f.stats["compiled_calls"] == 0
    assert f.wait(timeout=300)
    assert float(f(x)) == 16.0
    assert f.stats["compiled_calls"] == 1
    g = jg.compile(lambda x: (x * 3 + 1).sum(), backend="numba", background=False)
    assert float(g(x)) == 16.0 and g.stats["compiled_calls"] == 1 and g.stats["interpreted_calls"] == 0


def test_non_contiguous_state_falls_back_correctly(fresh_cache):
    base = jg.zeros(4, 6)
    W = base[:, ::2]          # a strided view as state: written back through the interpreter, never lost

    @jg.compile(backend="numba", background=False)
    def upd(x):
        with jg.no_grad():
            W.add_(x)
        return W.sum()
    upd(jg.ones(4, 3))
    upd(jg.ones(4, 3))
    np.testing.assert_allclose(base.numpy()[:, ::2], 2.0)
    np.testing.assert_allclose(base.numpy()[:, 1::2], 0.0)
