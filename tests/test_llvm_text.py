"""The LLVM assembly text emitter (codegen/kernels/llvm_text.py) and what it writes for kernels and entries.

Counted, never timed.  The text parses and verifies in LLVM; a kernel's functions keep their signatures (the kernel
``void(ptr)``, a parallel kernel's chunk ``internal void(ptr, ptr, ptr, ptr)``); accesses carry their alias scopes,
innermost loops their loop IDs, arithmetic its fast-math flags; constants are exact; and rendering costs a few
Python calls per LLVM instruction (llvmlite's IR objects cost ~40).  The kernels' values are checked against
Numba's and the interpreter's in test_ir_loops.py, test_mathlib.py and the compiled == eager tests.
"""
import re
import struct
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.kernels import ir_loops, kernel_ir as ki, llvm_text as T, vector_loops
from jitgrad.codegen.native import llvm_build
from jitgrad.codegen.kernels.math_table import MathCalls
from jitgrad.codegen.program import entry

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_ir_loops import _kernel_of  # noqa: E402


def _graph(f, args):
    """``f``'s compiled graph for ``args``, built with ``f``'s own options (parallel, ...)."""
    from jitgrad.jit.graph_code import compiled_graph
    e = f._entry_for(tuple(args), {})
    gf = e.gf
    return compiled_graph(e.graph, gf.writes, gf.parallel, gf.disk_cache, gf.background)


def _verified(text):
    """``text`` parsed and verified by LLVM (the module)."""
    import llvmlite.binding as ll
    m = ll.parse_assembly(text)
    m.verify()
    return m


def test_constants_are_exact():
    """A float constant is its double's bits, a ``float``'s rounded to single precision first (LLVM refuses a
    ``float`` constant it cannot hold exactly); ``i1`` is true/false; integers are decimal."""
    bits = struct.unpack("<Q", struct.pack("<d", float(np.float32(0.1))))[0]
    assert T.const(T.FLOAT, 0.1) == "0x%016x" % bits
    assert T.const(T.DOUBLE, 0.1) == "0x3fb999999999999a"
    assert T.const(T.DOUBLE, -0.0) == "0x8000000000000000" and T.const(T.DOUBLE, 0.0) == "0x0000000000000000"
    assert T.const(T.I1, 1) == "true" and T.const(T.I1, 0) == "false" and T.const(T.I1, -1) == "true"
    assert T.const(T.I64, -(1 << 63)) == str(-(1 << 63))
    m = T.Module("consts")
    fn = m.function("f", [T.PTR])
    b = T.Builder(fn, fn.block("entry"))
    for ty, v in ((T.FLOAT, 0.1), (T.FLOAT, float("inf")), (T.FLOAT, float("nan")), (T.DOUBLE, 1e300),
                  (T.DOUBLE, -0.0), (T.FLOAT, 3.4028234663852886e38)):
        b.store(ty, T.const(ty, v), b.gep(ty, fn.args[0], "0"))
    b.ret_void()
    _verified(m.text())


def test_module_shapes_as_llvmlites_builder_did():
    """Blocks in the order they were made, ``if_then``/``if_else`` named and branched as llvmlite's builder did
    (so the code LLVM lays out is the same); metadata nodes deduplicated, a distinct one naming itself; values
    numbered by one counter per function however many builders write it."""
    m = T.Module("shapes")
    fn = m.function("f", [T.I64, T.PTR])
    entry_b, body = fn.block("entry"), fn.block("body")
    allocas, b = T.Builder(fn, entry_b), T.Builder(fn, body)
    slot = allocas.alloca(T.I64, name="x")
    b.store(T.I64, fn.args[0], slot)
    with b.if_then(b.icmp("sgt", T.I64, fn.args[0], "0")):
        b.store(T.I64, "1", slot)
    with b.if_else(b.icmp("eq", T.I64, b.load(T.I64, slot), "1")) as (then, other):
        with then:
            b.call(T.VOID, m.declare("g", T.VOID, [T.I64]), [f"i64 {b.load(T.I64, m.external('n', T.I64))}"])
        with other:
            pass
    b.ret_void()
    allocas.branch(body)
    assert [blk.label for blk in fn.blocks] == ["entry", "body", "body.if", "body.endif", "body.endif.if",
                                                 "body.endif.else", "body.endif.endif"]
    assert all(blk.terminated for blk in fn.blocks)
    names = re.findall(r"^  (%\S+) =", fn.text(), re.M)
    assert len(names) == len(set(names)) == 5
    scope = m.metadata('!"s"')
    assert m.metadata('!"s"') == scope and m.metadata('!"t"') != scope
    loop = m.metadata("!SELF, " + scope, distinct=True)
    assert f"{loop} = distinct !{{{loop}, {scope}}}" in m.text()
    _verified(m.text())


def _sum_kernels():
    """Parallel kernels with a sum reduction (a chunk function, partial sums combined in order): on the pool always,
    and gated per call (the pool's pacer timing it)."""
    x = jg.tensor(np.arange(1 << 20, dtype=np.float32))      # (enough work for a gated loop to be pooled)
    out = []
    for parallel in (True, None):
        f = jg.compile(lambda x: (x * x).sum(), backend="numba", background=False, parallel=parallel)
        f(x)
        out += _graph(f, (x,)).kernels
    return out


def _corpus():
    """Kernels over the renderer's op families: math expansions (f32, f64), libm calls, integer floor division,
    casts and compares, five alias classes, a parallel kernel with a reduction."""
    out = []
    for dtype, t in (("float32", ki.F32), ("float64", ki.F64)):
        for fn in ("tanh", "exp", "log1p", "erf", "atan2"):
            arity = 2 if fn == "atan2" else 1
            out.append(_kernel_of(lambda b, xs, fn=fn, a=arity: getattr(MathCalls(dtype), fn)(*xs[:a]), 2,
                                  (t, t), t).ir)
    out.append(_kernel_of(lambda b, xs: ki.select(xs[0] > 0, xs[0] // xs[1], xs[0] % xs[1]), 2,
                          (ki.I64, ki.I64), ki.I64, parallel=True).ir)
    out.append(_kernel_of(lambda b, xs: ki.cast(ki.cast(xs[0], ki.BOOL), ki.F32) + ki.cast(xs[1], ki.F32), 2,
                          (ki.F64, ki.I32), ki.F32).ir)
    out += [k.ir for k in _sum_kernels()]
    rng = np.random.default_rng(0)
    args = [jg.tensor(rng.standard_normal(4096).astype(np.float32)) for _ in range(3)]
    f = jg.compile(lambda a, b, c: (a * b + c, b - c * a), backend="numba", background=False)
    f(*args)
    out += [k.ir for k in _graph(f, args).kernels]
    return out


@pytest.fixture(scope="module")
def corpus():
    return _corpus()


def test_kernels_render_to_text_llvm_verifies(corpus):
    """Each kernel's text parses and verifies; the kernel is ``void(ptr)``, a parallel one's chunk
    ``internal void(ptr x 4)`` called through the pool; every aliased access carries both scope kinds, each back
    edge of an innermost loop a distinct loop ID with its interleave count; float arithmetic its fast-math flags (the
    kernel's or mathlib's set); a gated parallel kernel times its launch on the pool's clock."""
    kinds = set()
    for n, kir in enumerate(corpus):
        key = f"{n:064x}"
        text = ir_loops.render(kir, key)
        assert text.startswith(ir_loops.HEADER + key + "\n")
        m = _verified(text)
        sym = ir_loops.symbol(key)
        assert re.search(rf'^define void @"{sym}"\(ptr %\S+\) nounwind$', text, re.M)
        fns = {f.name for f in m.functions if not f.is_declaration}
        if "jitgrad_wq_clock" in text:
            kinds.add("paced")
        if kir.parallel:
            assert re.search(rf'^define internal void @"{sym}_chunk"\((ptr %\S+, ){{3}}ptr %\S+\) nounwind$', text, re.M)
            # (and the pool's helpers: the round pending from launches before, the busy rule's test)
            assert fns - {"jitgrad_wq_flush_pending", "jitgrad_wq_busy_hold"} == {sym, sym + "_chunk"}
            assert "jitgrad_wq_flush_pending" in fns and "@\"jitgrad_wq_add_task\"" in text
        else:
            assert fns == {sym}
        for line in text.splitlines():
            if "!alias.scope" in line or "!noalias" in line:
                assert re.search(r", !alias.scope !\d+, !noalias !\d+$", line), line
                kinds.add("alias")
            if "!llvm.loop" in line:
                assert line.lstrip().startswith("br label"), line
                ref = line.rsplit(" ", 1)[1]
                node = re.search(rf"^{ref} = distinct !{{{ref}, (!\d+)}}$", text, re.M)
                assert node, ref
                assert re.search(rf'^{node.group(1)} = !{{!"llvm.loop.interleave.count", i32 \d+}}$', text, re.M)
                kinds.add("loop")
            flags = re.match(r"\s+%\S+ = f(?:add|sub|mul|div) ((?:[a-z]+ )*)(?:float|double) ", line)
            if flags and flags.group(1):        # (the pool's work estimate is plain double arithmetic)
                assert flags.group(1) in ("afn arcp contract nsz reassoc ", "contract "), line
                kinds.add("fastmath")
    assert kinds == {"alias", "loop", "fastmath", "paced"}


def test_the_busy_rule_is_rendered_only_where_it_is_on(corpus, monkeypatch):
    """A gated launch tests the busy rule (a call of ``jitgrad_wq_busy_hold``) only where ``workpool.BUSY_HOLD``
    is on when the kernel is rendered; the setting is part of the kernels' and entries' keys."""
    from jitgrad.codegen.native import build, workpool
    gated = [kir for kir in corpus if kir.parallel and "jitgrad_wq_clock" in ir_loops.render(kir, "0" * 64)]
    assert gated
    texts, extras = {}, {}
    for on in (False, True):
        monkeypatch.setattr(workpool, "BUSY_HOLD", on)
        texts[on] = [ir_loops.render(kir, f"{n:064x}") for n, kir in enumerate(gated)]
        extras[on] = (build.kernel_extra(), build.entry_extra())
        for text in texts[on]:
            _verified(text)
    assert not any("jitgrad_wq_busy_hold" in t for t in texts[False])
    assert all("@\"jitgrad_wq_busy_hold\"(i1" in t for t in texts[True])
    assert extras[False][0] != extras[True][0] and extras[False][1] != extras[True][1]


def _python_calls(fn):
    n = [0]

    def prof(frame, event, arg):
        if event == "call":
            n[0] += 1
    sys.setprofile(prof)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return n[0], out


def test_rendering_costs_a_few_python_calls_per_instruction(corpus):
    """Rendering writes each instruction's line at once: counted over the corpus, Python calls per LLVM
    instruction stay under 16 (~10 here, kernel IR expansion included; llvmlite's IR objects took ~40)."""
    for kir in corpus:
        ir_loops.render(kir, "0" * 64)          # (first use: imports and mathlib's tables)
    calls, texts = _python_calls(lambda: [ir_loops.render(kir, "0" * 64) for kir in corpus])
    instructions = sum(len(re.findall(r"^  \S", t, re.M)) for t in texts)
    assert instructions > 1000
    assert calls < 16 * instructions, (calls, instructions)


def test_an_entry_with_a_pooled_batch_of_products_verifies():
    """The entry of a graph with a batched product split over the pool (its chunk function, the pool's launch,
    the pacer's clock) parses and verifies; the entry is ``void(i64, i64)`` and runs (compiled == eager)."""
    rng = np.random.default_rng(0)
    q, k = (jg.tensor(rng.standard_normal((3, 5, 16, 8)).astype(np.float32)) for _ in range(2))
    f = jg.compile(lambda q, k: (q @ k.transpose(-2, -1)).tanh(), backend="numba", background=False, parallel=True)
    np.testing.assert_allclose(f(q, k).numpy(), np.tanh(q.numpy() @ k.numpy().swapaxes(-1, -2)), rtol=1e-5,
                               atol=1e-6)
    g = _graph(f, (q, k))
    assert [st.parallel for st in g.program.steps if st.kind == "bgemm"] == [True]
    text = entry.entry_ir(g.program, 2, len(g.checks), "jitgrad_entry_test")
    _verified(text)
    assert re.search(r'^define void @"jitgrad_entry_test"\(i64 %\S+, i64 %\S+\) nounwind$', text, re.M)
    assert re.search(r'^define internal void @"jitgrad_entry_test_gemm_chunk"\((ptr %\S+, ){3}ptr %\S+\) nounwind$',
                     text, re.M)
    assert 'call void @"jitgrad_wq_add_task"(ptr @"jitgrad_entry_test_gemm_chunk"' in text


@pytest.mark.parametrize("interleave", [1, 4])
def test_interleave_setting_names_its_loop_ids(monkeypatch, interleave, corpus):
    """``JITGRAD_INTERLEAVE`` 1 writes no loop IDs; 4 tags the innermost loop's back edge with count 4."""
    monkeypatch.setattr(ir_loops, "INTERLEAVE", interleave)
    text = ir_loops.render(corpus[0], "0" * 64)
    _verified(text)
    assert ("!llvm.loop" in text) == (interleave > 1)
    if interleave > 1:
        assert '!"llvm.loop.interleave.count", i32 4' in text


def test_the_first_tiers_vector_build_vectorises_what_the_quick_build_leaves_scalar(monkeypatch):
    """``llvm_build.CODEGEN_LEVEL``'s tiers on an exp loop.  With the first tier's scalar text
    (``JITGRAD_QUICK_VECTOR_BITS=0``): the quick build (and a minor kernel's) stays scalar, the "vector" build runs the
    loop vectoriser with the loop not interleaved (one vector step a trip, not ``ir_loops.INTERLEAVE``), the O3 build
    interleaves it.  With vector text (``vector_loops.py``, the default), the quick passes alone give vector code, and
    the "vector" tier is the quick build.  All are the same kernel's code."""
    kir = _kernel_of(lambda b, xs: MathCalls("float32").exp(xs[0]), 1, (ki.F32,), ki.F32).ir
    text = ir_loops.render(kir, "2" * 64)
    assert f'"llvm.loop.interleave.count", i32 {ir_loops.INTERLEAVE}' in text

    def vector_ops(quick, text=text):
        m, tm = llvm_build._optimised(text, quick)
        assert tm.target_data is not None and m.get_function(ir_loops.symbol("2" * 64))
        return [len(re.findall(r"fmul[^\n=]*<(\d+) x float>", str(m))), str(m)]
    monkeypatch.setattr(llvm_build, "VECTOR_BITS", 0)
    (quick, _), (minor, _) = vector_ops(True), vector_ops("minor")
    (vector, vtext), (o3, _) = vector_ops("vector"), vector_ops(False)
    assert quick == minor == 0 and vector > 0 and o3 >= 2 * vector, (quick, minor, vector, o3)      # (O3: 60, 24)
    assert "vector.body" in vtext
    assert [llvm_build.CODEGEN_LEVEL[t] for t in (True, "minor", "vector", False)] == [1, 0, 1, 3]
    monkeypatch.setattr(llvm_build, "VECTOR_BITS", 512)
    vtext = vector_loops.render(kir, "2" * 64, 512)
    (quick, qtext), (vector, _) = vector_ops(True, vtext), vector_ops("vector", vtext)
    assert quick == vector > 0 and "vector.body" not in qtext, (quick, vector)
