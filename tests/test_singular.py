"""Values, gradients and second derivatives at singular points (tests/singular_samples.py) against PyTorch.

For every sample: the value, the gradient of ``sum(out * w)`` and the Hessian-vector product (the gradient of
``sum(grad * v)``, through ``create_graph=True``) are compared with torch float64, NaN and inf positions included,
in eager mode and compiled: the whole computation, double backward included, inside one ``jg.compile``d function
(on the reference interpreter and on the Numba backend), and the forward alone compiled with the derivatives taken
outside through its compiled backward graphs.  A registry test requires every OpDef to have samples.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.ops import OPS

from singular_samples import COMPOSITE_SAMPLES, EXEMPT, OP_SAMPLES, SAMPLES, Sample

CASES = [pytest.param(name, k, id=f"{name}-{k}" + (f"-{s.label}" if s.label else ""),
                      marks=[pytest.mark.xfail(reason=s.xfail, strict=True)] if s.xfail else [])
         for name, ss in SAMPLES.items() for k, s in enumerate(ss)]


def test_every_opdef_has_singular_samples():
    """A new primitive must come with singular samples (or a reasoned exemption)."""
    missing = sorted(set(OPS) - set(OP_SAMPLES) - set(EXEMPT))
    assert not missing, f"OpDefs without singular samples in tests/singular_samples.py: {missing}"
    stale = sorted((set(OP_SAMPLES) | set(EXEMPT)) - set(OPS))
    assert not stale, f"tests/singular_samples.py names OpDefs that do not exist: {stale}"
    assert not set(OP_SAMPLES) & set(EXEMPT)
    assert not set(OP_SAMPLES) & set(COMPOSITE_SAMPLES)
    for name, reason in EXEMPT.items():
        assert len(reason) > 20, f"exemption of {name} needs a reason"


def _flat(out):
    return [o for x in out for o in _flat(x)] if isinstance(out, (tuple, list)) else [out]


def _weights(sample):
    """Fixed cotangents w (one per output, shapes known after an eager run) and directions v (one per input)."""
    rng = np.random.default_rng(7)
    with jg.no_grad():
        outs = _flat(sample.fn(jg, *[jg.tensor(x) for x in sample.inputs]))
    ws = [rng.uniform(0.5, 1.5, o.shape) if o.is_floating_point() else None for o in outs]
    vs = [rng.uniform(-1.5, 1.5, x.shape) * np.where(rng.random(x.shape) < 0.5, -1, 1) for x in sample.inputs]
    return ws, vs


def derivatives(m, sample, xs, ws, vs):
    """(outputs, gradients, Hessian-vector products) of ``sample.fn`` at ``xs``, with module ``m`` (jg or torch).

    Gradients of unused inputs are zeros (torch returns None for those)."""
    diff = [x for x in xs if x.requires_grad]
    outs = _flat(sample.fn(m, *xs))
    loss = None
    for o, w in zip(outs, ws):
        if w is not None and o.requires_grad:
            t = (o * m.tensor(w, dtype=o.dtype)).sum()
            loss = t if loss is None else loss + t

    def zeros_if_none(gs):
        return [m.zeros_like(x) if g is None else g for g, x in zip(gs, diff)]
    if loss is None:
        return outs, [m.zeros_like(x) for x in diff], [m.zeros_like(x) for x in diff]
    gs = m.autograd.grad(loss, diff, create_graph=sample.second_order, allow_unused=True)
    total = None
    if sample.second_order:
        for g, v in zip(gs, [v for v, x in zip(vs, xs) if x.requires_grad]):
            if g is not None and g.requires_grad:
                t = (g * m.tensor(v, dtype=g.dtype)).sum()
                total = t if total is None else total + t
    if total is None:
        hs = [None] * len(diff)
    else:
        hs = m.autograd.grad(total, diff, allow_unused=True)
    return outs, zeros_if_none(gs), zeros_if_none(hs)


def _inputs(m, sample):
    return [m.tensor(x, requires_grad=sample.differentiable and x.dtype.kind == "f") for x in sample.inputs]


def _np(ts):
    # force=True: torch hands back ZeroTensors for some zero gradients (abs's second order)
    return [t.detach().numpy(force=True).copy() if type(t).__module__.startswith("torch") else t.detach().numpy().copy()
            for t in ts]


def torch_results(sample, ws, vs):
    torch = pytest.importorskip("torch")
    outs, gs, hs = derivatives(torch, sample, _inputs(torch, sample), ws, vs)
    return _np(outs), _np(gs), _np(hs)


def assert_same(got, want, what):
    """torch.testing-style comparison: shape, dtype, NaN and +-inf positions exact; finite values close."""
    assert len(got) == len(want), f"{what}: {len(got)} results, torch has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what}[{k}]: shape {g.shape}, torch {w.shape}"
        if w.dtype.kind != "f":
            assert np.array_equal(g, w), f"{what}[{k}]:\n jitgrad {g}\n torch   {w}"
            continue
        assert g.dtype == w.dtype, f"{what}[{k}]: dtype {g.dtype}, torch {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-12, equal_nan=True,
                                   err_msg=f"{what}[{k}] (jitgrad vs torch)")


def check(sample, results, ws, vs):
    want = torch_results(sample, ws, vs)
    for name, got, exp in zip(("value", "gradient", "second order"), results, want):
        assert_same(got, exp, name)


@pytest.mark.parametrize("name,k", CASES)
def test_eager_matches_torch(name, k):
    sample = SAMPLES[name][k]
    ws, vs = _weights(sample)
    outs, gs, hs = derivatives(jg, sample, _inputs(jg, sample), ws, vs)
    check(sample, (_np(outs), _np(gs), _np(hs)), ws, vs)


def _compiled(sample, backend):
    ws, vs = _weights(sample)
    n_out = len(ws)

    def full(*xs):
        outs, gs, hs = derivatives(jg, sample, xs, ws, vs)
        return tuple(outs) + tuple(gs) + tuple(hs)
    F = jg.compile(full, backend=backend, background=False)
    res = F(*_inputs(jg, sample))
    n_diff = sum(x.dtype.kind == "f" and sample.differentiable for x in sample.inputs)
    res = _np(res)
    return (res[:n_out], res[n_out:n_out + n_diff], res[n_out + n_diff:]), ws, vs


def _compiled_cases():
    for name, ss in SAMPLES.items():
        for k, s in enumerate(ss):
            for backend in ("interpret", "numba"):
                reason = s.xfail or s.traced_xfail
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                if backend == "numba" and s.numba_xfail and not s.xfail:
                    # fastmath rewrites depend on the LLVM version and the vector width: not strict
                    marks = [pytest.mark.xfail(reason=s.numba_xfail, strict=False)]
                yield pytest.param(name, k, backend, id=f"{name}-{k}" + (f"-{s.label}" if s.label else "") + f"-{backend}",
                                   marks=marks)


@pytest.mark.parametrize("name,k,backend", list(_compiled_cases()))
def test_compiled_matches_torch(name, k, backend):
    sample = SAMPLES[name][k]
    results, ws, vs = _compiled(sample, backend)
    check(sample, results, ws, vs)


TRACED_CASES = [pytest.param(name, k, id=f"{name}-{k}" + (f"-{s.label}" if s.label else ""),
                             marks=[pytest.mark.xfail(reason=s.xfail or s.traced_xfail, strict=True)]
                             if s.xfail or s.traced_xfail else [])
                for name, ss in SAMPLES.items() for k, s in enumerate(ss)]


@pytest.mark.parametrize("name,k", TRACED_CASES)
def test_compiled_forward_eager_derivatives_match_torch(name, k):
    """The forward compiled alone (reference interpreter); gradient and second order taken outside, through the
    compiled function's backward and double-backward graphs (the transpose pass on the same rules)."""
    sample = SAMPLES[name][k]
    ws, vs = _weights(sample)
    F = jg.compile(lambda *xs: sample.fn(jg, *xs), backend="interpret")
    outer = Sample(lambda m, *xs: F(*xs), sample.inputs, second_order=sample.second_order,
                   differentiable=sample.differentiable)
    outs, gs, hs = derivatives(jg, outer, _inputs(jg, sample), ws, vs)
    check(sample, (_np(outs), _np(gs), _np(hs)), ws, vs)
