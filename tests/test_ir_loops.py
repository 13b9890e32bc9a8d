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
from jitgrad.codegen import build, cache, ir_loops, loops, objload

REPO = Path(__file__).resolve().parents[1]
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_BODY = '''def kernel(A):
    n0 = A[0]
    p0 = ptr_{s}(A[1])
    p1 = ptr_{s}(A[2])
    p2 = ptr_{s}(A[3])
    for i0 in range(n0):
        x0 = p0[i0]
        x1 = p1[i0]
        t0 = {dtype}({call})
        store(p2, i0, t0)'''


def _kernel_text(body, *, uses=(), consts=None, parallel=False):
    """A kernel's module text as the generators write it (``loops.Kernel``: imports, constants, decorator) around
    ``body`` (its ``def kernel(A):``)."""
    return loops.Kernel("kernel", body, rank=1, operands=(), classes=(), parallel=parallel, uses=uses,
                        consts=consts).source


def _kernel(fn, s, dtype, call):
    """An elementwise kernel over two inputs of ``dtype`` whose element is ``call`` (which may use mathlib's
    ``fn``)."""
    return _kernel_text(_BODY.format(s=s, dtype=dtype, call=call), uses=[("mathlib", fn)])


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
            src = _kernel(fn=fn, s=s, dtype=dtype, call=f"{fn}(x0)" if arity == 1 else f"{fn}(x0, x1)")
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
    assert {"exp_f32", "log_f32", "tanh_f32", "sigmoid_f64", "pow_f32", "erf_f64", "max_f32", "atan2_f32",
            "atan2_f64", "nextafter_f32", "nextafter_f64", "floor_f32", "round_f64", "fmod_f32", "copysign_f64",
            "hypot_f32", "erfc_f64", "lgamma_f32", "asin_f32", "atanh_f64", "cosh_f32"} <= set(compared)
    assert set(refused) <= {f"{n}_{s}" for n in ("sin", "cos", "tan") for s in ("f32", "f64")}


def test_libm_calls_need_no_numba_runtime():
    """atan2 / nextafter compile to calls of the C library's functions (Numba calls ``atan2`` itself and
    ``nextafter`` through its helper library): the object lists them, and this process resolves them without
    initialising Numba's runtime."""
    for fn, want, arity in (("atan2_f32", ["atan2"], 2), ("nextafter_f32", ["nextafterf"], 2),
                            ("nextafter_f64", ["nextafter"], 2), ("hypot_f32", ["hypot"], 2), ("erfc_f64", ["erfc"], 1),
                            ("lgamma_f32", ["lgamma"], 1)):
        s, dtype = fn[-3:], "float32" if fn.endswith("f32") else "float64"
        src = _kernel(fn=fn, s=s, dtype=dtype, call=f"{fn}(x0, x1)" if arity == 2 else f"{fn}(x0)")
        blob = ir_loops.compile_kernel(cache.cache_key(src, extra=("test-ir-libm",)), src)
        assert blob is not None and list(blob.needs) == want, (fn, blob and blob.needs)
        assert objload._missing(blob.needs) == []


def test_typing_follows_numba_on_mixed_scalars():
    """NumPy promotion as Numba applies it: int32 arithmetic widens to int64, float32 with uint8 stays float32,
    with an int64 becomes float64, int / int is float64, a bool in arithmetic is an int64 (the float beside a
    float); casts truncate, select unifies; ``//`` and ``%`` round down and give 0 for a zero divisor and for
    the least int64 over -1; ``and`` with a load evaluates it only when needed."""
    src = _kernel_text('''def kernel(A):
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
        d = u - 100
        q = (a * 7) // d + (a * 7) % d + ((-9223372036854775807 - 1) if u == 9 else a) // (-1 if u < 20 else 3)
        z = ((u > 3) + a) * 3 + f * (u < 100) - (u == 5) * (u == 5)
        s = 1.5 if (a > 0 and p0[i0] > 5000) else 2.5
        store(p2, i0, m + float32(u != 0) - (-a) + q * 0.001 + z + s)''', consts={"c0": "np.float32(0.1)"})
    rng = np.random.default_rng(3)
    a = rng.integers(-100000, 100000, 3000).astype(np.int32)
    u = rng.integers(0, 256, 3000).astype(np.uint8)
    u[:40] = [100, 9, 5, 7] * 10            # zero divisors, the overflowing quotient, the bool products
    ir_out, nb_out = _both(src, (a, u), np.empty(3000, np.float64))
    np.testing.assert_array_equal(ir_out, nb_out)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _graph_kernels(f, args):
    """The kernels of ``f``'s compiled graph for ``args`` (whatever built them: this test, an earlier test in this
    process, or the disk cache)."""
    from jitgrad.jit.graph_code import compiled_graph
    e = f._entry_for(tuple(args), {})
    return compiled_graph(e.graph, e.gf.writes).kernels


def _assert_all_translate(kernels):
    """Every kernel translates to LLVM IR (so a cold build never hands it to Numba).  Asked of the kernels' text,
    not of build counts: another test in this process may already have built the same kernel."""
    for k in kernels:
        ir_loops.translate(k.source, "0" * 64)          # raises ir_loops.Unsupported when Numba would be needed


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
    from jitgrad.jit.graph_code import compiled_graph
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
        src = _kernel(fn="exp_f32", s="f32", dtype="float32", call="x0").replace(
            "        t0 = float32(x0)\n        store(p2, i0, t0)", body)
        with pytest.raises(ir_loops.Unsupported):
            ir_loops.translate(src, "0" * 64)
    # a parallel kernel needs its prange loop at the top of the kernel (tests/test_parallel_kernels.py has the rest)
    par = _kernel(fn="exp_f32", s="f32", dtype="float32", call="x0").replace("parallel=False", "parallel=True")
    with pytest.raises(ir_loops.Unsupported, match="prange placement"):
        ir_loops.translate(par, "0" * 64)
    with pytest.raises(ir_loops.Unsupported, match="prange placement"):
        ir_loops.translate(par.replace("    for i0 in range(n0):", "    for i0 in range(n0):\n     for j in prange(1):"),
                           "0" * 64)


def _five_by_five(a, b, c, d, e):
    return a * b + c, b * c - d, c * d + e, d * e * a, (a + e) * 0.5


def _metadata(ir_text):
    """``!N`` -> its operands (metadata references and strings) in LLVM IR text."""
    import re
    out = {}
    for m in re.finditer(r"^(![0-9]+) = (?:distinct )?!\{(.*)\}\s*$", ir_text, re.M):
        out[m.group(1)] = [x.strip() for x in m.group(2).split(",")]
    return out


def _scope_names(ir_text, pattern):
    """Per access matching ``pattern`` (a load or store): (its alias.scope names, its noalias names)."""
    import re
    md = _metadata(ir_text)

    def names(ref):
        return frozenset(md[s][0].strip('!"') for s in md[ref])
    return [(names(m.group(1)), names(m.group(2)))
            for m in re.finditer(pattern + r".*!alias.scope (![0-9]+), !noalias (![0-9]+)", ir_text)]


def test_alias_scoped_loop_from_ir_carries_scopes_and_needs_no_overlap_check(fresh_cache):
    """A fused loop with 5 inputs and 5 outputs in 10 alias classes (alias_scopes.py), built by ir_loops: every
    access carries Numba's scoped-noalias metadata for its class (scope: its class; noalias: the 9 others), the
    vector loop has no runtime overlap check (no ``vector.memcheck``) and no scalar fallback copy, and the vector
    accesses carry the same scopes as Numba's build of the same text.  The same loop with plain accesses does get
    the check (so the assertion can fail)."""
    import re
    rng = np.random.default_rng(0)
    args = [jg.tensor(rng.standard_normal(4096, dtype=np.float32)) for _ in range(5)]
    f = jg.compile(_five_by_five, backend="numba", background=False)
    out = f(*args)
    for o, w in zip(out, _five_by_five(*[a.numpy() for a in args])):
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-6, atol=1e-6)
    (k,) = _graph_kernels(f, args)
    _assert_all_translate([k])
    assert k.alias == list(range(10)), k.alias

    # the translation: each operand's access tagged with its own class among 10
    raw = ir_loops.translate(k.source, "0" * 64)
    dom = "jitgrad.kernel.operands"
    tagged = _scope_names(raw, r"(?:load float, float\*|store float)")
    assert len(tagged) == 10
    assert sorted(tagged, key=str) == sorted(
        [(frozenset({f"{dom}.{c}"}), frozenset(f"{dom}.{o}" for o in range(10) if o != c)) for c in range(10)],
        key=str)

    # optimised: vectorised, no runtime overlap check, vector accesses keep their scopes, as Numba's
    m, _ = ir_loops._optimised(raw)
    opt = str(m)
    assert "vector.body" in opt and "vector.memcheck" not in opt
    ours = _scope_names(opt, r"(?:load|store) <\d+ x float>")
    assert len(ours) >= 10
    ns = {"CACHE_ENABLED": False}
    exec(compile(k.source, f"<{k.name}>", "exec"), ns)
    numbas = _scope_names(ns["kernel"]._library.get_llvm_str(), r"(?:load|store) <\d+ x float>")
    assert set(ours) == set(numbas)
    asm = ir_loops.assembly(k.source)
    scalar = [ln for ln in asm.splitlines() if re.match(r"^\s+v(mul|add|sub|fn?madd\d+)ss\s", ln)]
    assert len(scalar) <= 20, "more scalar arithmetic than one remainder loop: a scalar fallback copy is left"

    # the same loop with plain accesses: LLVM must check for overlap at run time
    plain = re.sub(r"load\((p\d+), ([^,]+), \d+, \d+\)", r"\1[\2]", k.source)
    plain = re.sub(r"store_to\((p\d+), ([^,]+), (.+), \d+, \d+\)$", r"store(\1, \2, \3)", plain, flags=re.M)
    assert "load(" not in plain and "store_to(" not in plain
    m2, _ = ir_loops._optimised(ir_loops.translate(plain, "1" * 64))
    assert "vector.memcheck" in str(m2)


@pytest.mark.parametrize("dtype,reduce,include_self", [("float32", "amax", False), ("float64", "prod", True),
                                                       ("bool", "amin", False)])
def test_scatter_reduce_kernels_from_ir(fresh_cache, dtype, reduce, include_self):
    """scatter_reduce's loops (loops.gen_scatter: the identity pass, NaN-propagating max/min, products, bools)
    are built by ir_loops, with eager mode's values to the bit."""
    rng = np.random.default_rng(4)
    xa, sa = rng.integers(-3, 4, (4, 3)), rng.integers(-3, 4, (6, 3))
    xa, sa = (xa > 0, sa > 0) if dtype == "bool" else (xa.astype(dtype), sa.astype(dtype))
    if dtype.startswith("float"):
        xa[0, 0], sa[1, 1] = np.nan, np.nan
    i = jg.tensor(rng.integers(0, 4, (6, 3)))
    f = jg.compile(lambda x, s, i: x.scatter_reduce(0, i, s, reduce, include_self=include_self), backend="numba",
                   background=False)
    args = (jg.tensor(xa), jg.tensor(sa), i)
    got = f(*args).numpy()
    kernels = _graph_kernels(f, args)
    assert kernels
    _assert_all_translate(kernels)
    want = jg.tensor(xa).scatter_reduce(0, i, jg.tensor(sa), reduce, include_self=include_self).numpy()
    np.testing.assert_array_equal(got, want)


def test_row_gather_and_scatter_with_continue_from_ir(fresh_cache):
    """An embedding's row kernels (region_steps: a bounds-checked row loop that reports a bad index and
    ``continue``s) are built by ir_loops; the rows and their gradient are NumPy's, and a bad index still raises."""
    rng = np.random.default_rng(0)
    w = jg.tensor(rng.standard_normal((50, 8)).astype(np.float32), requires_grad=True)
    idx = rng.integers(0, 50, (6, 5))

    @jg.compile(backend="numba", background=False)
    def f(i):
        e = w[i]
        (g,) = jg.autograd.grad((jg.tanh(e) * 2).sum(), [w])
        return g, e.detach()
    it = jg.tensor(idx)
    g, e = f(it)
    kernels = _graph_kernels(f, (it,))
    assert sum("continue" in k.source for k in kernels) >= 2           # the gather and its scatter
    _assert_all_translate(kernels)
    wn = w.detach().numpy()
    np.testing.assert_array_equal(e.numpy(), wn[idx])
    want = np.zeros_like(wn)
    np.add.at(want, idx, 2 * (1 - np.tanh(wn[idx]) ** 2))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexError, match="index 60 is out of bounds for dimension 0 with size 50"):
        f(jg.tensor(np.full((6, 5), 60)))
