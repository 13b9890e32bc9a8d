"""The machine code of fused kernels, and the memory traffic of a compiled step: proved by inspection and
counts, never by the clock.

- B2's one kernel (forward and backward in one pass) carries packed SIMD arithmetic inside its loop
  (AVX-512 ``zmm`` on CPUs that have it, AVX2 ``ymm`` otherwise): the math bodies inlined and vectorised.
- A steady-state call takes no page faults for its fresh outputs (``codegen/program/output_pool.py``), and never hands
  out a buffer the user still holds.
"""
import re
import resource

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.program import output_pool


@pytest.fixture(autouse=True)
def _sync_compile(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


def b2(x, w, b):
    loss = (jg.tanh(x * w + b) * jg.sigmoid(x)).sum()
    gw, gb = jg.autograd.grad(loss, [w, b])
    return loss.detach(), gw, gb


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return (jg.tensor(rng.standard_normal(n, dtype=np.float32)),
            jg.tensor(rng.standard_normal(n, dtype=np.float32), requires_grad=True),
            jg.tensor(rng.standard_normal(n, dtype=np.float32), requires_grad=True))


def _kernels(f, *args):
    from jitgrad.jit.graph_code import compiled_graph
    f(*args)
    (entries,) = f._cache.values()
    return compiled_graph(entries[0].graph, entries[0].gf.writes).kernels


def _asm(kernel) -> str:
    """The kernel's x86 assembly as its optimised build compiles it (its IR's LLVM text, the host's target
    machine), compiled here: the cache keeps no assembly."""
    from jitgrad.codegen.native import llvm_build
    assert kernel.ir is not None, "the kernel has no IR: it would build with Numba"
    return llvm_build.assembly(kernel.ir)


def _loops(asm: str):
    """Bodies of the loops in ``asm``: the lines from a label to a later conditional jump back to it."""
    lines = asm.splitlines()
    where = {}
    for n, ln in enumerate(lines):
        m = re.match(r"^(\.L\w+):", ln)
        if m:
            where[m.group(1)] = n
    for n, ln in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.L\w+)\s*$", ln)
        if m and m.group(1) in where and where[m.group(1)] < n:
            yield lines[where[m.group(1)]:n + 1]


_PACKED = re.compile(r"^\s+v(?:fn?m(?:add|sub)\d+|mul|add|sub|div|max|min)ps\s.*%(?:ymm|zmm)")


def test_b2_kernel_loop_has_packed_vector_arithmetic():
    import llvmlite.binding as ll
    features = ll.get_host_cpu_features()
    if not (features.get("avx2") or features.get("avx512f")):
        pytest.skip("the CPU has neither AVX2 nor AVX-512")
    f = jg.compile(b2, backend="numba")
    (k,) = _kernels(f, *_inputs(4096))              # one kernel: forward and backward in one pass
    asm = _asm(k)
    assert not re.search(r"call\w*\s+.*(tanh|exp|sigmoid)", asm), "math calls left in the kernel"
    packed = [ln for body in _loops(asm) for ln in body if _PACKED.match(ln)]
    assert len(packed) >= 10, "no packed float32 arithmetic inside the kernel's loops"
    reg = "zmm" if features.get("avx512f") else "ymm"
    assert any(reg in ln for ln in packed), f"the loop does not use {reg} registers"


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_steady_state_call_takes_no_page_faults_for_outputs():
    n = 1 << 18                                      # 1 MiB per gradient: 256 pages each when fresh
    x, w, b = _inputs(n)
    f = jg.compile(b2, backend="numba")
    for _ in range(3):
        f(x, w, b)
    faults = []
    for _ in range(5):
        m0 = _minor_faults()
        f(x, w, b)
        faults.append(_minor_faults() - m0)
    assert min(faults) <= 16, faults                 # fresh 1 MiB outputs would cost >= 512


def test_pool_never_hands_out_a_buffer_still_in_use():
    n = 1 << 15
    x, w, b = _inputs(n)
    f = jg.compile(b2, backend="numba")
    kept = [f(x, w, b) for _ in range(3)]            # all three results held: three distinct buffers each
    addrs = {r[1].numpy().ctypes.data for r in kept}
    assert len(addrs) == 3
    want = [r[1].numpy().copy() for r in kept]
    view = kept[0][2].numpy()[10:20]                 # a view keeps its base in use
    view_base = kept[0][2].numpy().ctypes.data
    del kept[0]
    before = output_pool.STATS["reused"]
    later = [f(x, w, b) for _ in range(2)]
    assert output_pool.STATS["reused"] > before      # kept[0]'s gradient of w was freed: it comes back
    assert view_base not in {r[2].numpy().ctypes.data for r in later}
    for r, wv in zip(kept, want[1:]):                # results still held are never overwritten
        np.testing.assert_array_equal(r[1].numpy(), wv)
    assert view.size == 10


def _five_by_five(a, b, c, d, e):
    return a * b + c, b * c - d, c * d + e, d * e * a, (a + e) * 0.5


def test_operands_known_not_to_alias_need_no_runtime_overlap_checks(high_thresholds):
    """A fused loop reads and writes its operands through accesses tagged with scoped-noalias metadata (one
    scope per buffer, codegen/kernels/alias_scopes.py): LLVM then vectorises with no runtime overlap checks and keeps
    no scalar fallback copy of the loop (before: 35 pointer-difference compares for 5 inputs and 5 outputs,
    and a second, scalar loop for when they overlap).  A serial loop (``high_thresholds``): at the compiled pool
    thresholds 4096 elements take the pool, and the Numba source's ``prange`` outlines the body (its own copies)."""
    rng = np.random.default_rng(0)
    args = [jg.tensor(rng.standard_normal(4096, dtype=np.float32)) for _ in range(5)]
    f = jg.compile(_five_by_five, backend="numba")
    (k,) = _kernels(f, *args)
    assert k.alias == list(range(10)), k.alias          # ten buffers, ten classes
    asm = _asm(k)
    scalar_loops = [b for b in _loops(asm) if sum(bool(re.match(r"^\s+v(mul|add|sub|fn?madd\d+)ss\s", ln))
                                                   for ln in b) >= 5]
    assert len(scalar_loops) <= 1, f"{len(scalar_loops)} scalar copies of the loop: a runtime alias check is left"
    ns = {"CACHE_ENABLED": False}
    exec(compile(k.source, f"<{k.name}>", "exec"), ns)
    ir = ns["kernel"]._library.get_llvm_str()
    assert re.search(r"load <\d+ x float>.*!alias.scope", ir), "vector loads carry no alias scope"
    assert re.search(r"store <\d+ x float>.*!noalias", ir), "vector stores carry no noalias list"
    out = f(*args)
    want = _five_by_five(*[a.numpy() for a in args])
    for o, w in zip(out, want):
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-6, atol=1e-6)


def test_state_updated_in_place_shares_a_class_with_its_old_value():
    """An update computed straight into the state's buffer reads and writes one buffer: those two operands are
    one alias class (no noalias between them), and the values are eager mode's, call after call."""
    from jitgrad.codegen.program.layout import Place, Root, alias_classes
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(5000).astype(np.float32)
    w = jg.tensor(w0.copy())
    x = jg.tensor(rng.standard_normal(5000, dtype=np.float32))

    def step(x):
        y = (w * x).tanh()
        with jg.no_grad():
            w.sub_(0.1 * y * w)
        return y.sum()
    f = jg.compile(step, backend="numba")
    ref = w0.astype(np.float64)
    for _ in range(3):
        s = float(f(x))
        y = np.tanh(ref * x.numpy())
        ref = ref - 0.1 * y * ref
        assert abs(s - y.sum()) <= 1e-3 * max(1.0, abs(y.sum()))
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5, atol=1e-6)
    ks = _kernels(f, x)
    inplace = [k for k in ks if k.alias is not None and len(set(k.alias)) < len(k.alias)]
    assert inplace, [k.alias for k in ks]                # w read and written in one loop: one class for both
    # the classes themselves: one root, overlapping workspace bytes, disjoint workspace bytes, distinct roots
    inp, ws1, ws2, ws3 = Root("input", index=0), Root("ws", nbytes=64), Root("ws", nbytes=64), Root("ws", nbytes=64)
    ws1.offset, ws2.offset, ws3.offset = 0, 32, 96
    pl = [Place(r, 0, (4,), (1,), None) for r in (inp, ws1, inp, ws2, ws3, Root("fresh", index=0))]
    assert alias_classes(pl) == [0, 1, 0, 1, 2, 3]
