"""Eager uniform draws (``rand``, dropout's masks) on their native kernel (jit/eager_kernels.py, the Philox rounds
as kernel IR in codegen/kernels/philox_ir.py): the NumPy Philox's bits (ir/philox.py) for every seed, offset,
shape and dtype, the generator advanced alike, and the same numbers as compiled code.  Counted, never timed."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.kernels import ir_loops, kernel_ir as ki, philox_ir
from jitgrad.ir import philox
from jitgrad.ir.ops import OPS
from jitgrad.jit import eager_kernels as ek
from jitgrad.runtime import dispatch

SEEDS = [0, 1, 3, 42, 2**31 - 1, 2**32, 2**32 + 5, 2**63 - 1, 2**64 - 1, -1, -(2**63), 67280421310721,
         0x9E3779B97F4A7C15]
OFFSETS = [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 3, 2**63 - 1]
SHAPES = [(0,), (3, 0), (1,), (7,), (255,), (256,), (257,), (1000, 7), (3, 5, 17), (4099,), (2, 1, 33, 65)]
DTYPES = [jg.float32, jg.float64]


def _draw(seed, offset, shape, dtype):
    """One eager ``rand`` from a generator at (``seed``, ``offset``): (numbers, the generator's offset after,
    whether the native kernel ran)."""
    g = jg.Generator().manual_seed(seed)
    g._offset.fill_(offset)
    before = dict(ek.COUNTS)
    out = jg.rand(*shape, dtype=dtype, generator=g).numpy()
    native = ek.COUNTS["native_calls"] - before["native_calls"]
    assert native + ek.COUNTS["numpy_calls"] - before["numpy_calls"] <= 1
    return out, int(g._offset.item()), native == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_draws_are_numpys_bits(sync, dtype):
    ran = 0
    for k, seed in enumerate(SEEDS):
        for shape in SHAPES:
            offset = OFFSETS[(k + len(shape)) % len(OFFSETS)]
            got, after, native = _draw(seed, offset, shape, dtype)
            want = philox.uniform(np.int64(np.uint64(seed % 2**64).astype(np.int64)), offset, shape, dtype.np)
            assert got.dtype == want.dtype and got.shape == tuple(shape)
            np.testing.assert_array_equal(got, want, err_msg=f"seed {seed} offset {offset} shape {shape}")
            # one draw, one step of the (int64) counter, whichever path ran
            assert after == (offset + 1 + 2**63) % 2**64 - 2**63
            size = int(np.prod(shape))
            assert native == (size >= ek.DRAW_MIN), (shape, native)
            ran += native
    assert ran > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_or_numpy_the_same_stream(sync, monkeypatch, dtype):
    """A run of draws gives one stream whether or not the kernel serves them (it may be linked at any call)."""
    def stream(enabled):
        monkeypatch.setattr(ek, "ENABLED", enabled)
        dispatch._RULES.clear()
        jg.manual_seed(1234)
        out = [jg.rand(n, dtype=dtype).numpy() for n in (5, 300, 4096, 0, 1023)]
        out.append(F.dropout(jg.ones(64, 33, dtype=dtype), 0.3).numpy())
        out.append(jg.bernoulli(jg.full((40, 40), 0.3, dtype=dtype)).numpy())
        out.append(jg.randint(0, 10, (500,)).numpy())       # (float64 uniforms, scaled)
        return out, int(jg.default_generator._offset.item())
    before = ek.COUNTS["native_calls"]
    on = stream(True)
    assert ek.COUNTS["native_calls"] - before == 6      # the three large draws, dropout's, bernoulli's, randint's
    off = stream(False)
    assert on[1] == off[1] == 8
    for a, b in zip(on[0], off[0]):
        np.testing.assert_array_equal(a, b)


def test_dropout_numpy_calls_per_draw(sync):
    """Dropout's mask draw: one native call, no NumPy Philox rounds (counted with NumPy's ufuncs patched out of
    ``ir/philox.py``: the kernel path never calls its rounds)."""
    x = jg.ones(128, 257)
    F.dropout(x, 0.1)           # the kernel linked
    calls = []
    real = philox._rounds

    def counting(*a):
        calls.append(1)
        return real(*a)
    philox._rounds = counting
    try:
        before = ek.COUNTS["native_calls"]
        F.dropout(x, 0.1)
        assert ek.COUNTS["native_calls"] == before + 1
        assert calls == []
    finally:
        philox._rounds = real


def test_compiled_draws_are_eagers(sync):
    """Compiled code draws the same numbers as eager from the same state (its loop now renders the rounds to
    LLVM IR, as eager's kernel does)."""
    def f(x):
        return F.dropout(x, 0.25) + jg.rand(x.shape, dtype=x.dtype)
    for dtype in DTYPES:
        x = jg.ones(40, 30, dtype=dtype)
        cf = jg.compile(f, background=False)
        jg.manual_seed(77)
        eager = [f(x).numpy() for _ in range(2)]
        jg.manual_seed(77)
        comp = [cf(x).numpy() for _ in range(2)]
        for a, b in zip(eager, comp):
            np.testing.assert_array_equal(a, b)


def test_the_llvm_rounds_render_and_normal_draws_do_not():
    """``rng_uniform`` expands to integer IR (no Numba needed); ``rng_normal`` stays Numba's (libm's log/cos)."""
    s, o, i = (ki.param(ki.I64, k) for k in range(3))
    for prec, t in (("f32", ki.F32), ("f64", ki.F64)):
        assert philox_ir.expand("rng_uniform", prec, (s, o, i)).t == t
        assert philox_ir.expand("rng_normal", prec, (s, o, i)) is None
    assert issubclass(ir_loops.Unsupported, Exception)


def test_small_and_odd_draws_keep_numpy(sync):
    """Below ``DRAW_MIN`` elements a draw keeps NumPy's Philox; from it, the kernel."""
    choose = OPS["rand_uniform"].eager_kernel
    st = dispatch._avals(OPS["rand_uniform"], (jg.tensor(0), jg.tensor(0)))
    assert choose(st, {"shape": (ek.DRAW_MIN - 1,), "dtype": jg.float32}, None) is None
    assert choose(st, {"shape": (ek.DRAW_MIN,), "dtype": jg.float32}, None) is not None


_COLD_DROPOUT = r'''
import json, sys
import numpy as np
import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.native import build
from jitgrad.jit import eager_kernels as ek
w = jg.tensor(np.linspace(-1, 1, 96 * 40, dtype=np.float32).reshape(96, 40), requires_grad=True)

def step(x):
    y = F.dropout(x @ w, 0.2)
    (y ** 2).mean().backward()
    g = w.grad.detach().clone()
    w.grad = None
    return y.detach(), g
cstep = jg.compile(step, backend="numba", background=False)
x = jg.tensor(np.ones((8, 96), np.float32))
jg.manual_seed(5)
comp = [[t.numpy() for t in cstep(x)] for _ in range(2)]
jg.manual_seed(5)
eager = [[t.numpy() for t in step(x)] for _ in range(2)]
masks = [[(c[0] == 0).tolist(), (c[1] == 0).tolist()] for c in comp] + [[(e[0] == 0).tolist(), (e[1] == 0).tolist()] for e in eager]
close = all(np.allclose(c, e, rtol=1e-4, atol=1e-5) for cs, es in zip(comp, eager) for c, e in zip(cs, es))
print(json.dumps({"masks": masks, "close": close, "dropped": int((comp[0][0] == 0).sum()),
                  "numba": sorted(m for m in sys.modules if m in ("numba", "numba.core")),
                  "ir": build.COUNTS["kernels_ir"], "native": ek.COUNTS["native_calls"],
                  "numpy": ek.COUNTS["numpy_calls"]}))
'''


def test_a_cold_dropout_step_imports_no_numba(tmp_path):
    """An empty cache: a compiled step with dropout builds every kernel from LLVM IR (its Philox loop included),
    never imports Numba's compiler (the worker pool's library is loaded alone), and drops what eager mode drops
    (whose mask draws ran their native kernel), its values eager's to rounding."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root, "JITGRAD_CACHE_DIR": str(tmp_path / "cache"),
           "JITGRAD_EAGER_KERNELS": "sync"}
    r = subprocess.run([sys.executable, "-c", _COLD_DROPOUT], capture_output=True, text=True, env=env, cwd=root,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    masks = got["masks"]
    assert masks[0] == masks[2] and masks[1] == masks[3] and masks[0] != masks[1]   # each call's own mask, alike
    assert got["close"] and 0 < got["dropped"] < 8 * 40
    assert got["numba"] == [] and got["ir"] >= 1        # Numba's compiler never imported
    assert got["native"] >= 2 and got["numpy"] == 0       # both eager masks (8 x 40 elements) drawn natively


def test_background_build_switches_a_stream_without_a_seam(monkeypatch):
    """With the kernel built on the build thread, the first draws run NumPy and later ones the kernel: one
    stream, the numbers of a NumPy-only run."""
    monkeypatch.setattr(ek, "SYNC", False)
    monkeypatch.setattr(ek, "ENABLED", True)
    monkeypatch.setattr(ek, "REQUEST_AFTER_S", 0.0)     # asked for at the first call
    monkeypatch.setattr(ek, "_STRUCTURES", {})       # nothing linked yet in this process
    dispatch._RULES.clear()
    try:
        jg.manual_seed(99)
        before = dict(ek.COUNTS)
        first = jg.rand(3, 333, dtype=jg.float64).numpy()
        assert ek.COUNTS["numpy_calls"] == before["numpy_calls"] + 1
        assert ek.wait(120)
        later = jg.rand(3, 333, dtype=jg.float64).numpy()
        assert ek.COUNTS["native_calls"] == before["native_calls"] + 1
    finally:
        dispatch._RULES.clear()
    for k, got in enumerate((first, later)):
        np.testing.assert_array_equal(got, philox.uniform(jg.default_generator._seed._data, k, (3, 333), np.float64))


def test_a_build_is_asked_for_only_once_numpy_time_shows_the_work_recurs(monkeypatch):
    """Outside ``SYNC``, a structure's build is queued once its calls have spent ``REQUEST_AFTER_S`` in NumPy: a
    one-off draw (a parameter's init) never takes the build thread from a compiled function's first build."""
    monkeypatch.setattr(ek, "SYNC", False)
    monkeypatch.setattr(ek, "ENABLED", True)
    monkeypatch.setattr(ek, "_STRUCTURES", {})
    dispatch._RULES.clear()
    try:
        monkeypatch.setattr(ek, "REQUEST_AFTER_S", 3600.0)
        for _ in range(3):
            jg.rand(3, 333, dtype=jg.float64)
        st = ek._STRUCTURES[next(iter(ek._STRUCTURES))]
        assert st.state == "new" and 0.0 < st.spent < 3600.0     # three NumPy draws, their time counted
        monkeypatch.setattr(ek, "REQUEST_AFTER_S", st.spent)     # the time spent reaches it: the next call asks
        jg.rand(3, 333, dtype=jg.float64)
        assert st.state in ("queued", "ready")
        assert ek.wait(120)
    finally:
        dispatch._RULES.clear()
