"""A loop's output written over an input the loop is the last to read (codegen/input_reuse.py): the output's
lines are then in cache when it writes them, not read from memory first.  Counted in the program's places, not
timed; compiled == eager on every program here."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.jit.graph_code import compiled_graph


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _program(f):
    (entries,) = f._cache.values()
    e = entries[0]
    return compiled_graph(e.graph, e.gf.writes, e.gf.parallel).program


def _t(shape, seed, scale=1.0):
    return jg.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * scale)


def _shared(prog, a, b) -> bool:
    pa, pb = prog.places[a], prog.places[b]
    return pa.root is pb.root


def _check(f, fn, *args):
    got, want = f(*args), fn(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def _loop_of(prog, name):
    return next(s for s in prog.plan_steps if hasattr(s, "outputs") and name in [e.op.name for e in s.all_eqns])


def test_a_gemm_result_read_last_by_a_loop_holds_the_loop_output():
    w, w2 = _t((64, 96), 1, 0.1), _t((96, 8), 2, 0.1)

    def fn(x):
        return ((x @ w) * 2.0).exp() @ w2

    x = _t((128, 64), 3)
    f = jg.compile(fn, backend="numba")
    _check(f, fn, x)
    prog = _program(f)
    g = _loop_of(prog, "exp")
    (h,) = [v for v in g.inputs if hasattr(v, "aval") and v.aval.shape == (128, 96)]
    assert _shared(prog, g.outputs[0], h)            # exp(2h) written over h
    _check(f, fn, _t((128, 64), 4))


def test_an_input_read_later_or_returned_keeps_its_buffer():
    w, w2 = _t((64, 96), 1, 0.1), _t((96, 8), 2, 0.1)

    def read_later(x):
        h = x @ w
        return (h * 2.0).exp() @ w2 + h @ w2         # h is read by a GEMM after the loop

    def returned(x):
        h = x @ w
        return (h * 2.0).exp() @ w2, h               # h is the caller's

    x = _t((128, 64), 3)
    for fn in (read_later, returned):
        f = jg.compile(fn, backend="numba")
        _check(f, fn, x)
        prog = _program(f)
        g = _loop_of(prog, "exp")
        (h,) = [v for v in g.inputs if hasattr(v, "aval") and v.aval.shape == (128, 96)]
        assert not _shared(prog, g.outputs[0], h), fn.__name__


def test_a_row_kernel_writes_over_an_input_no_later_pass_reads():
    """Softmax's row kernel reads the scores in every pass, the last one too (it recomputes the exponentials
    there): its result goes over them.  A value a row kernel stores in its first pass while a later pass still
    reads the input (x * 3, stored before x - mean is known) keeps a buffer of its own."""
    w, w2 = _t((64, 96), 1, 0.1), _t((96, 8), 2, 0.1)

    def soft(x):
        return (x @ w).softmax(-1) @ w2

    def two(x):
        h = x @ w
        y = h - h.mean(-1, keepdim=True)
        return (h * 3.0) @ w2, y @ w2

    x = _t((128, 64), 3)
    f = jg.compile(soft, backend="numba")
    _check(f, soft, x)
    prog = _program(f)
    g = _loop_of(prog, "exp")
    (h,) = [v for v in g.inputs if hasattr(v, "aval") and v.aval.shape == (128, 96)]
    (p,) = [o for o in g.outputs if o.aval.shape == (128, 96) and not any(o in ps.loads for ps in g.passes)]
    assert _shared(prog, p, h)          # (the exponentials, read back by the last pass, are a row's stash)
    f = jg.compile(two, backend="numba")
    _check(f, two, x)
    prog = _program(f)
    g = _loop_of(prog, "mean") if any(hasattr(s, "outputs") and "mean" in [e.op.name for e in s.all_eqns]
                                       for s in prog.plan_steps) else _loop_of(prog, "sum")
    (h,) = [v for v in g.inputs if hasattr(v, "aval") and v.aval.shape == (128, 96)]
    full = [o for o in g.outputs if o.aval.shape == (128, 96)]
    first = [o for o in full if any(o in ps.stores for ps in g.passes[:1])]
    assert first and all(not _shared(prog, o, h) for o in first), g.name
    assert sum(_shared(prog, o, h) for o in full) <= 1


def test_small_mlp_step_writes_over_dying_inputs_and_matches_eager():
    """A GELU MLP block with LayerNorm and a residual, forward and backward: the backward's loops (GELU's among
    them) write over the upstream gradients they read last, and the values match eager mode."""
    jg.manual_seed(0)
    ln = jg.nn.LayerNorm(64)
    fc, proj = jg.nn.Linear(64, 256), jg.nn.Linear(256, 64)
    params = list(ln.parameters()) + list(fc.parameters()) + list(proj.parameters())

    def step(x):
        y = x + proj(jg.nn.functional.gelu(fc(ln(x))))
        loss = (y * y).mean()
        return jg.autograd.grad(loss, params)

    x = _t((512, 64), 5)
    f = jg.compile(step, backend="numba")
    got, want = f(x), step(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-4, atol=2e-6)
    prog = _program(f)
    over = [(g.name, o) for g in prog.plan_steps if hasattr(g, "outputs") for o in g.outputs
            if any(v is not o and hasattr(v, "aval") and v in prog.places and o in prog.places
                   and _shared(prog, o, v) for v in g.inputs)]
    names = " ".join(n for n, _ in over)
    assert "exp" in names, names        # GELU's backward (its pdf's exp) writes over its upstream gradient
    assert len(over) >= 2, names


def test_b9_layer_step_program():
    """B9's shapes at one layer (batch 16, context 64, width 128), the whole step compiled: GELU's backward
    recomputes ``1 + erf`` (its forward stores one 1024 x 512 array, not two), the key's gradient reaches qkv's
    without a region copy, and the softmax, GELU-backward and LayerNorm-backward loops write over the inputs they
    read last; the loss is eager's."""
    from benchmark_model import gpt_model as gm

    def build():
        jg.manual_seed(0)
        m = gm.make_gpt(jg, 65, 64, 128, 4, 1, 0.0, False)
        return gm.make_step(jg, m, m, gm.make_optimizer(jg, m, 3e-4))
    g = jg.Generator().manual_seed(1)
    data = [(jg.randint(0, 65, (16, 64), generator=g), jg.randint(0, 65, (16, 64), generator=g)) for _ in range(2)]
    eager, comp = build(), jg.compile(build(), backend="numba")
    le = [float(eager(x, y)) for x, y in data]
    lc = [float(comp(x, y)) for x, y in data]
    np.testing.assert_allclose(lc, le, rtol=2e-5, atol=1e-5)
    prog = _program(comp)
    labels = [s.label for s in prog.steps]
    assert not any(lb.startswith("index_put (region)") for lb in labels), labels
    groups = [s for s in prog.plan_steps if hasattr(s, "outputs")]
    gelu = next(s for s in groups if "erf" in [e.op.name for e in s.all_eqns] and s.reduce is None)
    assert sum(o.aval.shape == (16, 64, 512) for o in gelu.outputs) == 1, gelu.name
    back = next(s for s in groups if "erf" in [e.op.name for e in s.all_eqns] and s.reduce is not None)
    over = {s.name for s in groups for o in s.outputs if o in prog.places
            and any(v is not o and hasattr(v, "aval") and v in prog.places and _shared(prog, o, v) for v in s.inputs)}
    assert back.name in over, over
    assert any("exp" in n and "by rows" in n for n in over), over          # the softmax (forward or backward)
    assert sum("rsqrt" in n or "pow" in n for n in over) >= 2, over       # LayerNorm's forward and backward rows
