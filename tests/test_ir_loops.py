"""Kernels compiled straight from their text to LLVM IR (codegen/ir_loops.py), without Numba (issue 17, item 2).

Counted and compared, never timed: the IR path's results are bit-identical to Numba's for the same kernel text
(every mathlib function it inlines, over normal, huge, tiny and special inputs), a cold build of an MLP step
imports no Numba at all, its loops vectorise as Numba's do, and a kernel the translator does not know goes to
Numba.
"""
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen import build, cache, ir_loops, objload

REPO = Path(__file__).resolve().parents[1]
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_KERNEL = '''import numpy as np
from numba import cfunc, prange
from numpy import float32, float64, int32, int64, uint8
from jitgrad.codegen.abi import KERNEL_SIGNATURE, ptr_f32, ptr_f64, ptr_i64, ptr_i32, ptr_b1, ptr_u8, store
from jitgrad.codegen.mathlib import {fn}


@cfunc(KERNEL_SIGNATURE, cache=CACHE_ENABLED, fastmath={{'afn', 'arcp', 'contract', 'nsz', 'reassoc'}}, parallel=False, error_model='numpy')
def kernel(A):
    n0 = A[0]
    p0 = ptr_{s}(A[1])
    p1 = ptr_{s}(A[2])
    p2 = ptr_{s}(A[3])
    for i0 in range(n0):
        x0 = p0[i0]
        x1 = p1[i0]
        t0 = {dtype}({call})
        store(p2, i0, t0)
'''


def _both(src, args, out):
    """Run ``src`` compiled by ir_loops and by Numba on the same argument block: (IR output, Numba output)."""
    key = cache.cache_key(src, extra=("test-ir-loops",))
    blob = ir_loops.compile_kernel(key, src)
    assert blob is not None
    addr = objload.load([blob])[key]
    numba_fn = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, src).kernel
    res = []
    for a in (addr, numba_fn.address):
        o = np.full_like(out, 7)
        block = np.array([out.size] + [x.ctypes.data for x in args] + [o.ctypes.data], np.int64)
        _CALL(a)(block.ctypes.data)
        res.append(o)
    return res


def _inputs(dtype, n=4000, seed=0):
    rng = np.random.default_rng(seed)
    scales = rng.choice([1e-30, 1e-5, 0.1, 1.0, 10.0, 100.0, 1e4, 1e30], n)
    x = np.concatenate([rng.standard_normal(n) * scales, rng.uniform(-120, 120, n),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-310, 88.7, -87.3, 709.7]])
    return x.astype(dtype)


def _mathlib_cases():
    from jitgrad.codegen import mathlib
    cases = []
    for name in mathlib._NAMES:
        for dtype, s in (("float32", "f32"), ("float64", "f64")):
            fn = f"{name}_{s}"
            arity = getattr(mathlib, fn).py_func.__code__.co_argcount
            src = _KERNEL.format(fn=fn, s=s, dtype=dtype, call=f"{fn}(x0)" if arity == 1 else f"{fn}(x0, x1)")
            cases.append((fn, src))
    return cases


def test_inlined_mathlib_is_bit_identical_to_numba():
    """Every mathlib function the translator inlines gives Numba's bits (its flags are kept: ``contract`` only),
    and the ones it refuses (sin/cos/tan: Payne-Hanek tables built by helpers) go to Numba."""
    refused, compared = [], []
    for fn, src in _mathlib_cases():
        if not ir_loops.translatable(cache.cache_key(src, extra=("test-ir-loops",)), src):
            refused.append(fn)
            continue
        dtype = np.float32 if fn.endswith("f32") else np.float64
        x = _inputs(dtype)
        y = np.random.default_rng(1).permutation(x)
        ir_out, nb_out = _both(src, (x, y), np.empty_like(x))
        same = (ir_out == nb_out) | (np.isnan(ir_out) & np.isnan(nb_out))
        assert same.all(), f"{fn}: {int((~same).sum())} results differ from Numba's, e.g. at {x[~same][:3]}"
        assert (np.signbit(ir_out) == np.signbit(nb_out))[~np.isnan(ir_out)].all(), f"{fn}: sign of zero differs"
        compared.append(fn)
    assert {"exp_f32", "log_f32", "tanh_f32", "sigmoid_f64", "pow_f32", "erf_f64", "max_f32"} <= set(compared)
    assert set(refused) <= {f"{n}_{s}" for n in ("sin", "cos", "tan") for s in ("f32", "f64")}


def test_typing_follows_numba_on_mixed_scalars():
    """NumPy promotion as Numba applies it: int32 arithmetic widens to int64, float32 with uint8 stays float32,
    with an int64 becomes float64, int / int is float64; casts truncate, select unifies."""
    src = '''import numpy as np
from numba import cfunc, prange
from numpy import float32, float64, int32, int64, uint8
from jitgrad.codegen.abi import KERNEL_SIGNATURE, ptr_f32, ptr_f64, ptr_i64, ptr_i32, ptr_b1, ptr_u8, store
c0 = np.float32(0.1)


@cfunc(KERNEL_SIGNATURE, cache=CACHE_ENABLED, fastmath={'afn', 'arcp', 'contract', 'nsz', 'reassoc'}, parallel=False, error_model='numpy')
def kernel(A):
    n0 = A[0]
    p0 = ptr_i32(A[1])
    p1 = ptr_u8(A[2])
    p2 = ptr_f64(A[3])
    for i0 in range(n0):
        a = p0[i0]
        u = p1[i0]
        f = float32(a) * c0
        g = f + u
        h = f + (a * 3) / (a + 1 if a != -1 else 1)
        k = int32(a * 65536) >> 3
        m = (g if u > 3 else h) - (k if (a < 0 or u == 7) else 2)
        store(p2, i0, m + float32(u != 0) - (-a))
'''
    rng = np.random.default_rng(3)
    a = rng.integers(-100000, 100000, 3000).astype(np.int32)
    u = rng.integers(0, 256, 3000).astype(np.uint8)
    ir_out, nb_out = _both(src, (a, u), np.empty(3000, np.float64))
    np.testing.assert_array_equal(ir_out, nb_out)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


_COLD_MLP = r'''
import json, sys
import numpy as np
import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen import build, ir_loops
rng = np.random.default_rng(0)
ws = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in [(12, 16), (16,), (16, 5), (5,)]]
W1, b1, W2, b2 = params = [jg.tensor(w, requires_grad=True) for w in ws]

@jg.compile(backend="numba", background=False)
def step(x, y):
    loss = F.cross_entropy(jg.relu(x @ W1 + b1) @ W2 + b2, y)
    loss.backward()
    with jg.no_grad():
        for p in params:
            p -= 0.1 * p.grad
            p.grad = None
    return loss.detach()
x = jg.tensor(rng.standard_normal((8, 12)).astype(np.float32))
y = jg.tensor(rng.integers(0, 5, 8))
losses = [float(step(x, y)) for _ in range(3)]
print(json.dumps({"losses": losses, "numba": sorted(m for m in sys.modules if m == "numba" or m.startswith("numba.")),
                  "counts": build.COUNTS, "ir": ir_loops.STATS, "stats": {k: v for k, v in step.stats.items()
                  if isinstance(v, int)}}))
'''


def _run(code, env):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(REPO),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cold_build_of_an_mlp_step_imports_no_numba(fresh_cache):
    """An empty cache, a synchronous build: every kernel of the step (matmul epilogues, cross-entropy's
    reductions with exp and log, the target gather and its scatter, SGD) is compiled from LLVM IR; Numba is not
    imported; the losses are eager mode's; the next process loads the graph's one file."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "JITGRAD_CACHE_DIR": str(fresh_cache)}
    env.pop("JITGRAD_IR_LOOPS", None)
    cold = _run(_COLD_MLP, env)
    assert cold["numba"] == []
    c = cold["counts"]
    assert c["kernels_compiled"] == c["kernels_ir"] >= 10 and c["build_processes"] == 0
    assert cold["ir"]["kernels_refused"] == 0 and c["graph_files_assembled"] == 1
    assert cold["stats"]["kernels_compiled"] == c["kernels_ir"] + 1        # and the entry
    warm = _run(_COLD_MLP, env)
    assert warm["numba"] == [] and warm["counts"]["kernels_compiled"] == 0
    assert warm["counts"]["graph_files_loaded"] == 1
    assert warm["losses"] == cold["losses"]
    # eager mode's losses (the same updates, op by op)
    eager = _run(_COLD_MLP.replace('backend="numba", background=False', 'backend="interpret"'), env)
    np.testing.assert_allclose(cold["losses"], eager["losses"], rtol=1e-5)


def test_ir_kernels_vectorise_like_numbas():
    """The same packed AVX/AVX-512 arithmetic as Numba's build of the same text (a bias + relu loop, a row sum with
    exp): the translation leaves LLVM's vectoriser the same loop."""
    import re
    x = jg.tensor(np.ones((64, 32), np.float32))
    b = jg.tensor(np.ones(32, np.float32))

    @jg.compile(backend="numba", background=True)
    def f(x, b):
        h = jg.relu(x + b)
        return jg.exp(h - 1.0).sum(1)
    from jitgrad.jit.graph_function import compiled_graph
    e = f._entry_for((x, b), {})
    ks = compiled_graph(e.graph, e.gf.writes).kernels
    assert ks

    def packed(asm):
        return sum(bool(re.search(r"\tv\w+p[sd]\s", ln)) for ln in asm.splitlines())
    for k in ks:
        ir_asm = ir_loops.assembly(k.source)
        nb_asm = build.build_module(k).kernel._library.get_asm_str()
        assert packed(ir_asm) > 0 and packed(ir_asm) >= 0.8 * packed(nb_asm), k.label


def test_refused_kernels_go_to_numba(fresh_cache):
    """A kernel the translator does not know (sin: Payne-Hanek tables) is compiled by Numba; its neighbours by
    ir_loops; the values are eager mode's."""
    before = dict(build.COUNTS)

    @jg.compile(backend="numba", background=False)
    def f(x):
        return (jg.sin(x) * 1.75).sum(), (x * 2.5 + 1.25).max()      # (kernels no other test compiles)
    xv = np.linspace(-3, 3, 50, dtype=np.float32)
    s, m = f(jg.tensor(xv))
    assert float(s) == pytest.approx(float((np.sin(xv) * 1.75).sum()), rel=1e-5, abs=1e-5)
    assert float(m) == pytest.approx(8.75)
    after = build.COUNTS
    compiled = after["kernels_compiled"] - before["kernels_compiled"]
    by_ir = after["kernels_ir"] - before["kernels_ir"]
    assert compiled >= 2 and 1 <= by_ir < compiled        # sin's kernel by Numba, the rest from IR


def test_translator_refuses_what_it_does_not_know():
    for body in ("        store(p1, i0, x0 % 3.0)", "        store(p1, i0, x0 ** 2)",
                 "        store(p1, i0, float32(1) if 0 < x0 < 1 else float32(2))",      # a chained comparison
                 "        while x0 > 0:\n            x0 = x0 - 1"):
        src = _KERNEL.format(fn="exp_f32", s="f32", dtype="float32", call="x0").replace(
            "        t0 = float32(x0)\n        store(p2, i0, t0)", body)
        with pytest.raises(ir_loops.Unsupported):
            ir_loops.translate(src, "0" * 64)
    par = _KERNEL.format(fn="exp_f32", s="f32", dtype="float32", call="x0").replace("parallel=False", "parallel=True")
    with pytest.raises(ir_loops.Unsupported):
        ir_loops.translate(par, "0" * 64)
