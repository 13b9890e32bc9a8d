"""The profiler sees inside compiled calls: one event per fused kernel / BLAS call, compile phases, nesting."""
import json

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.jit.graph_code import _COMPILED


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _make(backend):
    W = jg.randn(16, 8, requires_grad=True)

    @jg.compile(backend=backend)
    def step(x):
        loss = (jg.tanh(x @ W) * 2).sum()
        loss.backward()
        with jg.no_grad():
            W.sub_(0.1 * W.grad)
            W.grad = None
        return loss.detach()
    return step


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_kernels_and_compile_phases_are_events(backend, tmp_path):
    step = _make(backend)
    x = jg.randn(4, 16)
    with jg.autograd.profiler.profile(record_shapes=True) as prof:
        for _ in range(3):
            step(x)
    names = [e.key for e in prof.key_averages()]
    assert "compiled:step" in names
    assert {"compile/trace", "compile/passes"} <= set(names)
    if backend == "numba":
        assert "compile/codegen" in names and ({"compile/numba", "compile/cache_hit"} & set(names))
        fused = [n for n in names if n.startswith("fused_")]
        # tanh's backward joins the loss's loop (one pass: issue 16)
        assert any(n.startswith("fused_0[tanh,mul,mul,sub,mul,sum] test_compiled_profiler.py:") for n in fused), fused
        gemms = {"matmul (BLAS)", "matmul (small kernel)"}      # (kernels/small_gemm.py takes small products)
        assert gemms & set(names)
        counts = {e.key: e.count for e in prof.key_averages()}
        assert counts["compiled:step"] == 3
        # W's update rides its GEMM
        assert sum(counts.get(g, 0) + counts.get(g + " + update", 0) for g in gemms) == 6
    else:
        assert any(n.startswith("tanh test_compiled_profiler.py:") for n in names), names
    # grouped by input shape, the kernels carry their input shapes
    shaped = prof.key_averages(group_by_input_shape=True)
    assert any(e.key.startswith(("fused_", "matmul")) and e.input_shapes for e in shaped)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    calls = [e for e in events if e["name"] == "compiled:step"]
    kernels = [e for e in events if e["name"].startswith(("fused_", "matmul (", "tanh "))]
    assert kernels
    for k in kernels:          # every kernel lies inside one compiled call
        assert any(c["ts"] <= k["ts"] and k["ts"] + k["dur"] <= c["ts"] + c["dur"] + 1e-3 for c in calls), k


def test_no_profiler_no_instrumented_variant():
    step = _make("numba")
    step(jg.randn(4, 16))
    assert all(getattr(cg, "_profiled", None) is None for cg in _COMPILED.values() if cg.graph is
               list(step._cache.values())[0][0].graph)


@pytest.mark.parametrize("backend", ["numba", "interpret"])
def test_record_function_inside_compiled_function_is_a_range(backend):
    W = jg.randn(8, 4)

    @jg.compile(backend=backend)
    def f(x):
        h = jg.tanh(x @ W)
        with jg.autograd.profiler.record_function("label-inner"):
            y = (h * h).sum()
        return y + 1.0
    x = jg.randn(3, 8)
    f(x)                           # traced (and compiled) before profiling
    with jg.autograd.profiler.profile() as prof:
        f(x)
        f(x)
    counts = {e.key: e.count for e in prof.key_averages()}
    assert counts.get("label-inner") == 2, counts
    events = prof.function_events
    inner = [e for e in events if e.name == "label-inner"]
    kids = [c.name for e in inner for c in e.cpu_children]
    assert kids and all(not k.startswith("matmul") for k in kids), kids    # only the labelled block's work
