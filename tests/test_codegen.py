"""The Numba CPU backend: fusion plan, generated source, float32 discipline, agreement with the interpreter."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.cpu import CompiledGraph, FASTMATH
from jitgrad.ir.passes import fusion_plan

pytestmark = pytest.mark.filterwarnings("error::jitgrad.codegen.cpu.CodegenWarning")


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    # tests check compiled code, not the interpreter that runs while a background compile is under way
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def _entry(f):
    (entries,) = f._cache.values()
    return entries[0]


def _compiled(f, *args):
    from jitgrad.jit.graph_code import compiled_graph
    return compiled_graph(_entry(f).graph, _entry(f).gf.writes)


def b2(x, w, b):
    loss = (jg.tanh(x * w + b) * jg.sigmoid(x)).sum()
    gw, gb = jg.autograd.grad(loss, [w, b])
    return loss.detach(), gw, gb


def _b2_inputs(n=1000, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = jg.tensor(rng.standard_normal(n).astype(dtype))
    w = jg.tensor(rng.standard_normal(n).astype(dtype), requires_grad=True)
    b = jg.tensor(rng.standard_normal(n).astype(dtype), requires_grad=True)
    return x, w, b


def test_b2_fuses_into_one_loop_and_matches_interpreter():
    """Forward and backward in one pass: x, w, b read once, each gradient written once, tanh and sigmoid kept
    in registers (nothing else goes to memory)."""
    x, w, b = _b2_inputs()
    fn = jg.compile(b2, backend="numba")
    fi = jg.compile(b2, backend="interpret")
    got, ref = fn(x, w, b), fi(x, w, b)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-5, atol=1e-5)
    (group,) = _compiled(fn).plan.groups
    assert group.name == "fused_0[mul,add,tanh,sigmoid,mul,mul,sub,mul,mul,sum]"
    assert len(group.inputs) == 4 and len(group.outputs) == 3     # x, w, b, literal 1.0; loss, gw, gb
    assert _compiled(fn).program.ws_size == 0                     # no intermediate buffer
    src = fn.source(x, w, b)
    assert group.name in src and "test_codegen.py:" in src


def test_float32_stays_float32():
    x, w, b = _b2_inputs()
    fn = jg.compile(b2, backend="numba")
    fn(x, w, b)
    cg = _compiled(fn)
    assert cg.nopython
    assert cg.nopython and cg.run is not None   # one C entry over raw buffers: it holds no typed values at all
    # each kernel, typed on its own, keeps float32 all the way through (no float64 temporaries)
    import numba
    from jitgrad.codegen import build
    from jitgrad.codegen.abi import KERNEL_SIGNATURE
    for k in cg.kernels:
        fresh = numba.njit(build.kernel_module(k).kernel._pyfunc)
        fresh.compile(KERNEL_SIGNATURE.args)
        typemap = fresh.overloads[KERNEL_SIGNATURE.args].fndesc.typemap
        wide = {n: t for n, t in typemap.items() if "float64" in str(t)}
        assert not wide, (k.name, wide)
    # literals are typed module constants, never bare Python floats inside float32 arithmetic
    assert re.search(r"^c\d+ = np\.float32\(", cg.module_source, re.M)
    for line in cg.module_source.splitlines():
        if line.strip().startswith("t") and "float32(" in line:
            assert not re.search(r"[^\w.]\d+\.\d+", line), line


def test_fastmath_keeps_nan_and_inf():
    assert "nnan" not in FASTMATH and "ninf" not in FASTMATH

    def f(x):
        return jg.log(x) * 1.0 + jg.sqrt(x)
    fn = jg.compile(f, backend="numba")
    out = fn(jg.tensor([-1.0, 0.0, 4.0])).numpy()
    assert np.isnan(out[0]) and out[1] == -np.inf and out[2] == pytest.approx(np.log(4.0) + 2.0)


def test_mlp_step_nopython_driver_matches_eager():
    rng = np.random.default_rng(0)
    B, D, H, C = 8, 16, 32, 4
    x = jg.tensor(rng.standard_normal((B, D), dtype=np.float32))
    y = jg.tensor(rng.integers(0, C, B))

    def params():
        r = np.random.default_rng(1)
        return [jg.tensor(r.standard_normal(s).astype(np.float32) * 0.1, requires_grad=True)
                for s in [(D, H), (H,), (H, C), (C,)]]

    def make(ps):
        W1, b1, W2, b2_ = ps

        def step(x, y):
            loss = F.cross_entropy(jg.relu(x @ W1 + b1) @ W2 + b2_, y)
            loss.backward()
            with jg.no_grad():
                for p in ps:
                    p -= 0.1 * p.grad
                    p.grad = None
            return loss.detach()
        return step
    pe, pc = params(), params()
    se, sc = make(pe), jg.compile(make(pc), backend="numba")
    for _ in range(4):
        le, lc = se(x, y), sc(x, y)
        assert float(lc) == pytest.approx(float(le), rel=1e-5)
        for a, b in zip(pe, pc):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    cg = _compiled(sc)
    assert cg.nopython, cg.source       # gather/scatter kernels and BLAS: the whole call is one dispatch
    assert "def entry(" in cg.module_source and "call_gemm(" in cg.module_source
    assert sc.stats["traces"] == 1


def test_double_backward_numba_matches_interpreter():
    rng = np.random.default_rng(2)
    x = jg.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    W1 = jg.tensor(rng.standard_normal((5, 7)) * 0.3, requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((7, 1)) * 0.3, requires_grad=True)

    def gp(x, W1, W2):
        d = jg.tanh(x @ W1) @ W2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        return (loss, *jg.autograd.grad(loss, [W1, W2]))
    a = jg.compile(gp, backend="numba")(x, W1, W2)
    b = jg.compile(gp, backend="interpret")(x, W1, W2)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u.detach().numpy(), v.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_gradcheck_on_numba_backend():
    rng = np.random.default_rng(3)
    f = jg.compile(lambda x, W: jg.log_softmax(jg.tanh(x @ W), dim=1), backend="numba")
    x = jg.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    W = jg.tensor(rng.standard_normal((4, 5)), requires_grad=True)
    assert jg.autograd.gradcheck(f, (x, W))
    assert jg.autograd.gradgradcheck(f, (x, W))


@pytest.mark.parametrize("name,fn", [
    ("broadcast_bias", lambda a, b: (a + b[None, :]).relu().sum(0)),
    ("reduce_keepdim", lambda a, b: (a * a).sum(1, keepdim=True) - b[:1]),
    ("amax_amin", lambda a, b: a.amax(0) - a.amin(1).sum() + b),
    ("where_clamp", lambda a, b: jg.where(a > 0, a, b[None, :] * 2).clamp(-0.5, 0.5)),
    ("compare_cast", lambda a, b: ((a > 0).float() * 3 + b[0]).exp()),
    ("scalar_only", lambda a, b: (a.sum() * 2 + 1) / (b.sum() + 10)),
    ("index_gather", lambda a, b: a[jg.arange(3)[:, None], jg.tensor([[0, 2]])] * 2),
    ("setitem", lambda a, b: _setitem(a, b)),
])
def test_programs_agree_with_interpreter(name, fn):
    rng = np.random.default_rng(4)
    a = jg.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    b = jg.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)

    def prog(a, b):
        out = fn(a, b)
        ga, gb = jg.autograd.grad(out.sum(), [a, b], allow_unused=True, materialize_grads=True)
        return out.detach(), ga, gb
    got = jg.compile(prog, backend="numba")(a, b)
    ref = jg.compile(prog, backend="interpret")(a, b)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)


def _setitem(a, b):
    y = a * 1
    y[:, 1] = b[:3]
    return y


def jax_tree(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def test_parallel_loop_above_threshold_serial_below():
    from jitgrad.codegen import cpu
    big = _b2_inputs(n=cpu.PARALLEL_MIN)
    small = _b2_inputs(n=64)
    fb, fs = jg.compile(b2, backend="numba"), jg.compile(b2, backend="numba")
    got = fb(*big)
    fs(*small)
    # the parallel kernels' values (Numba's parfors once dropped raw-pointer stores: a prange loop wrote nothing)
    want = jg.compile(b2, backend="interpret")(*big)
    for g, w in zip(jax_tree(got), jax_tree(want)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-4, atol=2e-6)
    rows = jg.compile(lambda x: ((x * 2).sum(1), x + 1), backend="numba")(jg.ones(2048, cpu.PARALLEL_MIN // 1024))
    assert float(rows[0].min()) == float(rows[0].max()) == 2.0 * cpu.PARALLEL_MIN // 1024
    assert float(rows[1].min()) == 2.0
    assert all(k.parallel for k in _compiled(fb).kernels)
    assert not any(k.parallel for k in _compiled(fs).kernels)
    body = lambda src: "\n".join(ln for ln in src.splitlines() if not ln.startswith("from "))  # noqa: E731
    assert "prange(" in body(_compiled(fb).module_source) and "prange(" not in body(_compiled(fs).module_source)


def test_codegen_failure_falls_back_with_a_warning(monkeypatch):
    from jitgrad.codegen import cpu

    def broken(self, *a):
        raise RuntimeError("simulated Numba failure")
    monkeypatch.setattr(cpu.CompiledGraph, "_build", lambda self, bg: (
        setattr(self, "error", "simulated"), __import__("warnings").warn("simulated", cpu.CodegenWarning)))
    f = jg.compile(lambda x: (x * 3).exp(), backend="numba")
    with pytest.warns(cpu.CodegenWarning):
        out = f(jg.tensor([0.0, 1.0]))
    np.testing.assert_allclose(out.numpy(), np.exp([0.0, 3.0]), rtol=1e-6)


def test_new_process_loads_compiled_module_from_cache(tmp_path):
    code = r"""
import os, time, numpy as np, jitgrad as jg
os.environ["JITGRAD_BACKGROUND_COMPILE"] = "0"
from jitgrad.jit.graph_code import _COMPILED
f = jg.compile(lambda x: (jg.tanh(x) * 2).sum(), backend="numba")
t = time.perf_counter(); v = float(f(jg.ones(100))); dt = time.perf_counter() - t
(cg,) = _COMPILED.values()
print(v, cg.run is not None, dt)
"""
    env = dict(os.environ, JITGRAD_CACHE_DIR=str(tmp_path / "c"), JITGRAD_BACKGROUND_COMPILE="0")
    out1 = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out1.returncode == 0, out1.stderr
    files = list((tmp_path / "c").rglob("*.jgo"))
    assert files, "no object code was written to the cache"
    assert not list((tmp_path / "c").rglob("__pycache__"))
    out2 = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out2.returncode == 0, out2.stderr
    v1, ok1, _ = out1.stdout.split()
    v2, ok2, _ = out2.stdout.split()
    assert v1 == v2 and ok1 == ok2 == "True"
    assert sorted(p.name for p in (tmp_path / "c").rglob("*.py")) == sorted(
        {p.name for p in (tmp_path / "c").rglob("*.py")})     # no second entry: same key, reused


def test_background_compile_runs_interpreter_first(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "bg"))
    from jitgrad.jit.graph_code import compiled_graph
    f = jg.compile(lambda x: (x * 2 + 1).exp().sum(), backend="numba")
    x = jg.tensor(np.linspace(0, 1, 50).astype(np.float32))
    first = float(f(x))          # returns at once (interpreter) while Numba compiles elsewhere
    cg = compiled_graph(_entry(f).graph, _entry(f).gf.writes)
    assert cg.wait(timeout=300), cg.error
    assert float(f(x)) == pytest.approx(first, rel=1e-5)
