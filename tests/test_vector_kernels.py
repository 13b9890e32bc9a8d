"""The machine code of fused kernels, and the memory traffic of a compiled step: proved by inspection and
counts, never by the clock.

- B2's one kernel (forward and backward in one pass) carries packed SIMD arithmetic inside its loop
  (AVX-512 ``zmm`` on CPUs that have it, AVX2 ``ymm`` otherwise): the math bodies inlined and vectorised.
- A steady-state call takes no page faults for its fresh outputs (``codegen/output_pool.py``), and never hands
  out a buffer the user still holds.
"""
import re
import resource

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen import output_pool


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
    from jitgrad.jit.graph_function import compiled_graph
    f(*args)
    (entries,) = f._cache.values()
    return compiled_graph(entries[0].graph, entries[0].gf.writes).kernels


def _asm(kernel) -> str:
    """The kernel's x86 assembly, compiled here (not loaded from the cache, which keeps no assembly)."""
    ns = {"CACHE_ENABLED": False}
    exec(compile(kernel.source, f"<{kernel.name}>", "exec"), ns)
    return ns["kernel"]._library.get_asm_str()


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
