"""Kernels rendered from their IR to LLVM IR (codegen/kernels/ir_loops.py) and compiled (codegen/native/llvm_build.py),
without Numba (issue 17, item 2; issue 27).

Counted and compared, never timed: the LLVM renderer's results are bit-identical to Numba's build of the same
kernel's rendered text (codegen/kernels/numba_render.py; every mathlib function it expands, over normal, huge, tiny and
special inputs) and agree with the reference interpreter (codegen/kernels/kernel_interp.py) to rounding; a cold build of
an MLP step imports no Numba at all, its loops vectorise as Numba's do, and a kernel the renderer does not lower
goes to Numba.
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
from jitgrad.codegen.native import build, cache, llvm_build, objload
from jitgrad.codegen.kernels import ir_loops, kernel_interp, kernel_ir as ki, loops
from jitgrad.codegen.kernels.math_table import MathCalls

REPO = Path(__file__).resolve().parents[1]
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_T = {"float32": ki.F32, "float64": ki.F64}


def _kernel_of(build_body, nin, in_types, out_type, parallel=False):
    """A kernel over ``nin`` inputs and one output (block: n, then addresses) whose element is
    ``build_body(b, xs)``, as ``loops.Kernel`` (its IR, rendered text and key)."""
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    ps = [b.let(f"p{j}", b.A[1 + j].ptr(t)) for j, t in enumerate(list(in_types) + [out_type])]
    with b.loop("i0", n0, parallel=parallel) as i0:
        xs = [b.let(f"x{j}", ps[j][i0]) for j in range(nin)]
        t0 = b.let("t0", ki.cast(build_body(b, xs), out_type))
        b.store(ps[nin], i0, t0)
    return loops.Kernel("kernel", b.finish(), rank=1, operands=(), classes=(), parallel=parallel)


def _kernel(fn, dtype, arity):
    """An elementwise kernel over two inputs of ``dtype`` whose element is math function ``fn`` (a math table
    row) of the first (and second)."""
    t = _T[dtype]
    return _kernel_of(lambda b, xs: getattr(MathCalls(dtype), fn)(*xs[:arity]), 2, (t, t), t)


def _llvm_address(k, tag="test-ir-loops"):
    key = cache.cache_key(k.source, extra=(tag,))
    blob = llvm_build.compile_kernel(key, ir_loops.render(k.ir, key))
    assert blob is not None
    return objload.load([blob])[key], blob


def _run_block(addr, args, out):
    o = np.full_like(out, 7)
    block = np.array([out.size] + [x.ctypes.data for x in args] + [o.ctypes.data], np.int64)
    _CALL(addr)(block.ctypes.data)
    return o


def _both(k, args, out):
    """Run kernel ``k`` rendered to LLVM IR and compiled, and its Numba text compiled by Numba, on the same
    argument block: (LLVM output, Numba output)."""
    addr, _ = _llvm_address(k)
    key = cache.cache_key(k.source, extra=("test-ir-loops",))
    numba_fn = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, k.source).kernel
    return _run_block(addr, args, out), _run_block(numba_fn.address, args, out)


def _interpreted(k, args, out):
    o = np.full_like(out, 7)
    block = np.array([out.size] + [x.ctypes.data for x in args] + [o.ctypes.data], np.int64)
    kernel_interp.run(k.ir, block)
    return o


def _inputs(dtype, n=4000, seed=0):
    rng = np.random.default_rng(seed)
    scales = rng.choice([1e-30, 1e-5, 0.1, 1.0, 10.0, 100.0, 1e4, 1e30], n)
    x = np.concatenate([rng.standard_normal(n) * scales, rng.uniform(-120, 120, n),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-310, 88.7, -87.3, 709.7]])
    return x.astype(dtype)


def _mathlib_cases():
    from jitgrad.codegen.kernels import mathlib
    cases = []
    for name in mathlib.NAMES:
        for dtype, s in (("float32", "f32"), ("float64", "f64")):
            fn = f"{name}_{s}"
            arity = mathlib.DEFS[fn].__code__.co_argcount
            cases.append((fn, _kernel(name, dtype, arity)))
    return cases


def test_expanded_mathlib_is_bit_identical_to_numba_and_agrees_with_the_interpreter():
    """Every mathlib function, expanded by its IR builder and rendered to LLVM IR, gives the bits Numba's build of
    the same definitions gives (its flags are kept: ``contract`` only), Payne-Hanek's table lookups included; the
    reference interpreter, running the same IR on NumPy scalars, agrees to rounding (it fuses no FMA)."""
    compared = []
    for fn, k in _mathlib_cases():
        assert llvm_build.translatable(cache.cache_key(k.source, extra=("test-ir-loops",)), k.source), fn
        dtype = np.float32 if fn.endswith("f32") else np.float64
        x = _inputs(dtype)
        y = np.random.default_rng(1).permutation(x)
        ir_out, nb_out = _both(k, (x, y), np.empty_like(x))
        same = (ir_out == nb_out) | (np.isnan(ir_out) & np.isnan(nb_out))
        assert same.all(), f"{fn}: {int((~same).sum())} results differ from Numba's, e.g. at {x[~same][:3]}"
        assert (np.signbit(ir_out) == np.signbit(nb_out))[~np.isnan(ir_out)].all(), f"{fn}: sign of zero differs"
        sel = np.r_[0:60, -11:0]
        xs, ys = x[sel].copy(), y[sel].copy()
        got = _interpreted(k, (xs, ys), np.empty_like(xs))
        np.testing.assert_allclose(got, ir_out[sel], rtol=2e-6 if dtype == np.float32 else 1e-13,
                                   atol=1e-37 if dtype == np.float32 else 1e-300, err_msg=fn)
        compared.append(fn)
    assert {"exp_f32", "log_f32", "tanh_f32", "sigmoid_f64", "pow_f32", "erf_f64", "max_f32", "atan2_f32",
            "atan2_f64", "nextafter_f32", "nextafter_f64", "floor_f32", "round_f64", "fmod_f32", "copysign_f64",
            "hypot_f32", "erfc_f64", "lgamma_f32", "asin_f32", "atanh_f64", "cosh_f32", "sin_f32", "cos_f64",
            "tan_f32"} <= set(compared)


def test_libm_calls_need_no_numba_runtime():
    """atan2 / nextafter compile to calls of the C library's functions (Numba calls ``atan2`` itself and
    ``nextafter`` through its helper library): the object lists them, and this process resolves them without
    initialising Numba's runtime."""
    for fn, want, arity in (("atan2_f32", ["atan2"], 2), ("nextafter_f32", ["nextafterf"], 2),
                            ("nextafter_f64", ["nextafter"], 2), ("hypot_f32", ["hypot"], 2), ("erfc_f64", ["erfc"], 1),
                            ("lgamma_f32", ["lgamma"], 1)):
        dtype = "float32" if fn.endswith("f32") else "float64"
        _, blob = _llvm_address(_kernel(fn[:-4], dtype, arity), "test-ir-libm")
        assert list(blob.needs) == want, (fn, blob.needs)
        assert objload._missing(blob.needs) == []


def test_typing_follows_numba_on_mixed_scalars():
    """NumPy promotion as Numba applies it, in the IR's types: int32 arithmetic widens to int64, float32 with
    uint8 stays float32, with an int64 becomes float64, int / int is float64, a bool in arithmetic is an int64
    (the float beside a float); casts truncate, select unifies; ``//`` and ``%`` round down and give 0 for a
    zero divisor and for the least int64 over -1.  The LLVM IR and Numba's build of the rendered text agree to
    the last place (the kernel's ``reassoc`` lets LLVM order this long chain of sums differently for the two
    equivalent inputs: Numba branches where the IR selects), the interpreter with both."""
    def body(b, xs):
        a, u = xs
        f = b.let("f", ki.cast(a, ki.F32) * np.float32(0.1))
        g = b.let("g", f + u)
        h = b.let("h", f + (a * 3) / ki.select(a != -1, a + 1, 1))
        k = b.let("k", ki.cast(a * 65536, ki.I32) >> 3)
        m = b.let("m", ki.select(u > 3, g, h) - ki.select(ki.or_(a < 0, u == 7), k, 2))
        d = b.let("d", u - 100)
        q = b.let("q", (a * 7) // d + (a * 7) % d
                  + ki.select(u == 9, ki.const(-9223372036854775807 - 1), a) // ki.select(u < 20, -1, 3))
        z = b.let("z", ((u > 3) + a) * 3 + f * (u < 100) - (u == 5) * (u == 5))
        s = b.let("s", ki.select(ki.and_(a > 0, a > 5000), 1.5, 2.5))
        return m + ki.cast(u != 0, ki.F32) - (-a) + q * 0.001 + z + s
    k = _kernel_of(body, 2, (ki.I32, ki.U8), ki.F64)
    rng = np.random.default_rng(3)
    a = rng.integers(-100000, 100000, 3000).astype(np.int32)
    u = rng.integers(0, 256, 3000).astype(np.uint8)
    u[:40] = [100, 9, 5, 7] * 10            # zero divisors, the overflowing quotient, the bool products
    ir_out, nb_out = _both(k, (a, u), np.empty(3000, np.float64))
    np.testing.assert_allclose(ir_out, nb_out, rtol=4e-16, atol=0)
    np.testing.assert_allclose(_interpreted(k, (a[:200].copy(), u[:200].copy()), np.empty(200)), ir_out[:200],
                               rtol=4e-16, atol=0)


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
    """Every kernel renders to LLVM IR (so a cold build never hands it to Numba).  Asked of the kernels' IR, not
    of build counts: another test in this process may already have built the same kernel."""
    for k in kernels:
        ir_loops.render(k.ir, "0" * 64)          # raises ir_loops.Unsupported when Numba would be needed


_COLD_MLP = r'''
import json, sys
import numpy as np
import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.native import build, llvm_build
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
                  "counts": build.COUNTS, "ir": llvm_build.STATS, "stats": {k: v for k, v in step.stats.items()
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
        ir_asm = llvm_build.assembly(k.ir)
        nb_asm = build.build_module(k).kernel._library.get_asm_str()
        assert packed(ir_asm) > 0 and packed(ir_asm) >= 0.8 * packed(nb_asm), k.label


def test_refused_kernels_go_to_numba(fresh_cache):
    """A kernel the renderer does not lower (an integer power: intmath.pow_i64 loops) is compiled by Numba from
    its rendered text; its neighbours by ir_loops; the values are eager mode's."""
    before = dict(build.COUNTS)

    @jg.compile(backend="numba", background=False)
    def f(x, i):
        return (i ** 5 * 7).sum(), (x * 2.5 + 1.25).max()      # (kernels no other test compiles)
    xv = np.linspace(-3, 3, 50, dtype=np.float32)
    iv = np.arange(-5, 6)
    s, m = f(jg.tensor(xv), jg.tensor(iv))
    assert int(s) == int((iv ** 5 * 7).sum())
    assert float(m) == pytest.approx(8.75)
    after = build.COUNTS
    compiled = after["kernels_compiled"] - before["kernels_compiled"]
    by_ir = after["kernels_ir"] - before["kernels_ir"]
    assert compiled >= 2 and 1 <= by_ir < compiled        # sin's kernel by Numba, the rest from IR


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_draws_lower_with_numbas_and_numpys_bits(dtype):
    """A Philox uniform draw (``philox_ir.py``) renders to LLVM IR: the bits of Numba's build of the same kernel
    (``philox.py``) and of NumPy's (``ir/philox.py``), over seeds, offsets and indices across all 64 bits."""
    from jitgrad.ir import philox
    i64 = ki.I64
    k = _kernel_of(lambda b, xs: MathCalls(dtype).rng_uniform(*xs), 3, (i64, i64, i64), _T[dtype])
    rng = np.random.default_rng(11)
    n = 3001
    seeds, offsets = (rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) for _ in range(2))
    index = rng.integers(0, 2**63 - 1, n, dtype=np.int64)
    seeds[:4], offsets[:4], index[:4] = [0, -1, 2**32, 5], [0, 2**32 - 1, -1, 7], [0, 1, 2**32 + 1, 2**40]
    llvm, numba = _both(k, [seeds, offsets, index], np.empty(n, dtype))
    np.testing.assert_array_equal(llvm, numba)
    want = [philox.uniform_at(seeds[j], offsets[j], index[j:j + 1], np.dtype(dtype))[0] for j in range(0, n, 7)]
    np.testing.assert_array_equal(llvm[::7], want)


def test_renderer_refuses_what_it_does_not_lower():
    t = ki.F32
    for body in (lambda b, xs: xs[0] % np.float32(3.0),                         # float modulo (Python's)
                 lambda b, xs: MathCalls("int64").pow(ki.cast(xs[0], ki.I64), 2),  # intmath.pow_i64: a loop
                 lambda b, xs: MathCalls("float32").rng_normal(1, 2, 3)):        # a normal draw (libm)
        k = _kernel_of(body, 1, (t,), t)
        with pytest.raises(ir_loops.Unsupported):
            ir_loops.render(k.ir, "0" * 64)
        assert not llvm_build.translatable("0" * 64, k.source)
    # a parallel loop must be the kernel's outer loop (tests/test_parallel_kernels.py has the rest)
    b = ki.Builder()
    with b.loop("i0", b.A[0]):
        with b.loop("j", 1, parallel=True):
            pass
    with pytest.raises(ir_loops.Unsupported, match="parallel loop"):
        ir_loops.render(b.finish(), "0" * 64)


def _unscoped(kir):
    """``kir`` with every access a plain one (no alias classes)."""
    memo = {}

    def val(x):
        got = memo.get(id(x))
        if got is None:
            got = ki.Val(x.op, [val(a) for a in x.args], x.t, None if x.op == "load" else x.attr, x.fm)
            memo[id(x)] = (x, got)
            return got
        return got[1]

    def block(stmts):
        out = []
        for s in stmts:
            if isinstance(s, ki.Assign):
                out.append(ki.Assign(s.var, val(s.value)))
            elif isinstance(s, ki.Store):
                out.append(ki.Store(val(s.ptr), val(s.idx), val(s.value)))
            elif isinstance(s, ki.For):
                f = ki.For(s.var, val(s.start), val(s.stop), s.step, s.parallel, s.reductions)
                f.body = block(s.body)
                out.append(f)
            else:
                out.append(s)
        return out
    return ki.KernelIR(block(kir.body), kir.parallel)


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


def test_alias_scoped_loop_from_ir_carries_scopes_and_needs_no_overlap_check(fresh_cache, high_thresholds):
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

    # the rendering: each operand's access tagged with its own class among 10
    raw = ir_loops.render(k.ir, "0" * 64)
    dom = "jitgrad.kernel.operands"
    tagged = _scope_names(raw, r"(?:load float, ptr|store float)")
    assert len(tagged) == 10
    assert sorted(tagged, key=str) == sorted(
        [(frozenset({f"{dom}.{c}"}), frozenset(f"{dom}.{o}" for o in range(10) if o != c)) for c in range(10)],
        key=str)

    # optimised: vectorised, no runtime overlap check, vector accesses keep their scopes, as Numba's
    m, _ = llvm_build._optimised(raw)
    opt = str(m)
    assert "vector.body" in opt and "vector.memcheck" not in opt
    ours = _scope_names(opt, r"(?:load|store) <\d+ x float>")
    assert len(ours) >= 10
    ns = {"CACHE_ENABLED": False}
    exec(compile(k.source, f"<{k.name}>", "exec"), ns)
    numbas = _scope_names(ns["kernel"]._library.get_llvm_str(), r"(?:load|store) <\d+ x float>")
    assert set(ours) == set(numbas)
    asm = llvm_build.assembly(k.ir)
    scalar = [ln for ln in asm.splitlines() if re.match(r"^\s+v(mul|add|sub|fn?madd\d+)ss\s", ln)]
    assert len(scalar) <= 20, "more scalar arithmetic than one remainder loop: a scalar fallback copy is left"

    # the same loop with plain accesses: LLVM must check for overlap at run time
    plain = ir_loops.render(_unscoped(k.ir), "1" * 64)
    assert "alias.scope" not in plain
    m2, _ = llvm_build._optimised(plain)
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
