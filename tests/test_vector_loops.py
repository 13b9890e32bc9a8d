"""The first tier's vector loops (codegen/kernels/vector_loops.py, vector_plan.py; issue 30): innermost contiguous
loops written as vector blocks by jitgrad's own renderer, so the quick LLVM passes give vector code.

Counted and compared, never timed: the vector text compiled at the first tier's level computes the bits of the
scalar text (every dtype, every math function, every remainder length 0..width+1, exact reductions in lanes, stores
over loads at every distance, sums that take a product the loop does not vary), and those of O3 where O3 sums
nothing; float sums run in lanes (``vector_plan.LANE_SUMS``: the scalar sums' values to rounding, as O3's), or with
``JITGRAD_QUICK_LANE_SUMS=0`` in the scalar loop's order, to its bits; which loops were rendered vector; loops that
are not contiguous stay scalar; a compiled program's first-tier calls give the bits of its O3 calls where nothing
sums.
"""
import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jitgrad.codegen.kernels import ir_loops, kernel_ir as ki, vector_loops, vector_plan
from jitgrad.codegen.kernels.math_table import MathCalls
from jitgrad.codegen.native import llvm_build, objload, workpool
from jitgrad.ir import settings

REPO = Path(__file__).resolve().parents[1]
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_BUILT = [0]
# the first tier's levels: vector text at the host's width and at AVX2's (what an AVX2-only CPU gets), the scalar
# text (``JITGRAD_QUICK_VECTOR_BITS=0``: the reference), and O3
TEXTS = {"scalar": (0, True), "vector": (None, True), "vector256": (256, True), "o3": (0, False)}


def _address(kir, bits, quick):
    _BUILT[0] += 1
    key = f"{_BUILT[0]:064x}"
    text = ir_loops.render(kir, key) if bits == 0 else vector_loops.render(kir, key, bits or llvm_build.vector_bits())
    return objload.load([llvm_build.object_code(key, text, quick=quick)])[key]


def _builds(kir):
    return {name: _address(kir, bits, quick) for name, (bits, quick) in TEXTS.items()}


def _elementwise(fn, dtype, out_dtype=None, nin=2, sums=False):
    """A kernel over ``n`` elements: ``out[i] = fn(m, x0[i], x1[i])`` (and ``acc += out[i]``, stored at the end)."""
    t, to = ki.OF_DTYPE[dtype], ki.OF_DTYPE[out_dtype or dtype]
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    ps = [b.let(f"p{j}", b.A[1 + j].ptr(ki.U8 if t == ki.BOOL else t)) for j in range(nin)]
    po, pr = (b.let(name, b.A[1 + nin + j].ptr(ki.U8 if to == ki.BOOL else to)) for j, name in enumerate(("po", "pr")))
    acc = b.let("acc", ki.cast(ki.const(0), to if to != ki.BOOL else ki.I64))
    with b.loop("i0", n0) as i0:
        xs = [b.let(f"x{j}", ki.cast(ps[j][i0], t)) for j in range(nin)]
        r = b.let("r", ki.cast(fn(MathCalls(dtype if dtype.startswith("float") else "float64"), *xs), to))
        b.store(po, i0, r)
        if sums:
            b.set(acc.attr, acc + r)
    b.store(pr, 0, acc)
    return b.finish()


def _inputs(dtype, n, seed):
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        x = (rng.standard_normal(n) * rng.choice([0.01, 1.0, 30.0], n)).astype(dtype)
        x[:9] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 88.5, -700.0]
        return x
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(np.uint8)
    lo, hi = (0, 256) if dtype == "uint8" else (-1000, 1000)
    return rng.integers(lo, hi, n).astype(dtype)


def _run(addr, ins, n, odt, extra=3):
    out = np.full(n + extra, 7, odt)        # (the elements past n stay 7: nothing is written beyond the loop)
    red = np.zeros(1, np.float64 if odt.kind == "f" else np.int64).astype(odt)
    block = np.array([n] + [x.ctypes.data for x in ins] + [out.ctypes.data, red.ctypes.data], np.int64)
    _CALL(addr)(block.ctypes.data)
    if odt.kind == "f":         # NaNs' signs and payloads are not the code's to keep (LLVM commutes fadd's operands)
        out[np.isnan(out)], red[np.isnan(red)] = np.nan, np.nan
    return out.tobytes() + red.tobytes()


def _lengths():
    w = vector_loops_width()
    return list(range(0, w + 2)) + [2 * w - 1, 2 * w, 2 * w + 1, 1000]


def vector_loops_width():
    return min(16, llvm_build.vector_bits() // 32)


def _compare(kir, ins, odt, o3_equal=True, close=False):
    """Every build's outputs equal the scalar text's, bit for bit (``close``: the last element, a sum, to rounding)."""
    addrs = _builds(kir)
    for n in _lengths():
        got = {name: _run(a, ins, n, np.dtype(odt)) for name, a in addrs.items()}
        for name in ("vector", "vector256") + (("o3",) if o3_equal else ()):
            if not close:
                assert got[name] == got["scalar"], (name, n)
                continue
            size = np.dtype(odt).itemsize
            assert got[name][:-size] == got["scalar"][:-size], (name, n)
            a, c = (np.frombuffer(got[k][-size:], odt)[0] for k in (name, "scalar"))
            assert np.isclose(a, c, rtol=1e-5 if size == 4 else 1e-12, atol=0, equal_nan=True), (name, n, a, c)


@pytest.fixture
def serial_sums(monkeypatch):
    """The first tier's float sums in the scalar loop's order (``JITGRAD_QUICK_LANE_SUMS=0``)."""
    monkeypatch.setattr(vector_plan, "LANE_SUMS", False)


FLOAT_FNS = ["exp", "log", "tanh", "erf", "sin", "cos", "sigmoid", "sqrt", "expm1", "log1p", "atan", "lgamma",
             "floor", "abs"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", FLOAT_FNS)
def test_every_math_function_computes_the_scalar_loops_bits_at_every_remainder(dtype, fn):
    kir = _elementwise(lambda m, x, y: getattr(m, fn)(x) * y + x, dtype)
    _compare(kir, [_inputs(dtype, 1100, 1), _inputs(dtype, 1100, 2)], dtype)


BINARY = {"div": lambda m, x, y: x / y, "pow": lambda m, x, y: m.pow(x, y), "atan2": lambda m, x, y: m.atan2(x, y),
          "where": lambda m, x, y: ki.select(x > y, x, y * 2), "minmax": lambda m, x, y: m.max(x, m.min(y, x)), "fmod": lambda m, x, y: m.fmod(x, y),
          "hypot": lambda m, x, y: m.hypot(x, y), "copysign": lambda m, x, y: m.copysign(x, y) + m.round(y)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", sorted(BINARY))
def test_binary_float_bodies_and_their_sums(dtype, fn, monkeypatch):
    ins = [_inputs(dtype, 1100, 3), _inputs(dtype, 1100, 4)]
    _compare(_elementwise(BINARY[fn], dtype), ins, dtype)
    # a sum of them: in lanes by default, as O3 adds (its value to rounding, the elementwise outputs to the bit)
    before = vector_loops.STATS["sums_in_lanes"]
    _compare(_elementwise(BINARY[fn], dtype, sums=True), ins, dtype, close=True)
    assert vector_loops.STATS["sums_in_lanes"] == before + 2     # (the host's width and AVX2's)
    # ... or in the scalar loop's order, to its bits (O3 adds in lanes: other bits)
    monkeypatch.setattr(vector_plan, "LANE_SUMS", False)
    _compare(_elementwise(BINARY[fn], dtype, sums=True), ins, dtype, o3_equal=False)
    assert vector_loops.STATS["sums_in_lanes"] == before + 2


INT_FNS = {"arith": lambda m, x, y: x * 3 - y + (x & y) ^ (y >> 2), "floordiv": lambda m, x, y: x // (y | 1),
           "mod": lambda m, x, y: x % (y | 1), "abs": lambda m, x, y: abs(x) + ki.select(x < y, x, y),
           "float": lambda m, x, y: ki.cast(ki.cast(x, ki.F64) * 0.5, ki.I64) + ki.cast(x < y, ki.I64)}


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("fn", sorted(INT_FNS))
def test_integer_bodies_and_their_sums(dtype, fn):
    ins = [_inputs(dtype, 1100, 5), _inputs(dtype, 1100, 6)]
    if dtype == "uint8" and fn in ("arith", "abs"):
        pytest.skip("unsigned bytes widen to int64 in these bodies: covered by the int64 case")
    _compare(_elementwise(INT_FNS[fn], dtype, "int64"), ins, "int64")
    # integer sums are exact: in lanes, the same bits as O3's
    _compare(_elementwise(INT_FNS[fn], dtype, "int64", sums=True), ins, "int64")


def test_bool_bodies_and_counts():
    ins = [_inputs("bool", 1100, 7), _inputs("bool", 1100, 8)]
    logic = lambda m, x, y: ki.or_(ki.and_(x, ki.not_(y)), ki.select(x, y, x) != y)   # noqa: E731
    _compare(_elementwise(logic, "bool", "bool"), ins, "uint8")
    _compare(_elementwise(lambda m, x, y: ki.cast(ki.and_(x, y), ki.I64), "bool", "int64", sums=True), ins, "int64")


def _ordered_max(kind):
    """A float32 max (``kind``: max or min) over ordered integer keys with a NaN count, as ``ordered_keys.py``."""
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    p0 = b.let("p0", b.A[1].ptr(ki.F32))
    po, pr = b.let("po", b.A[2].ptr(ki.I32)), b.let("pr", b.A[3].ptr(ki.I32))
    hacc, nans = b.let("hacc", ki.const(np.int32(-7))), b.let("nans", ki.const(np.int32(0)))
    with b.loop("i0", n0) as i0:
        rv = b.let("rv", p0[i0])
        kb = b.let("kb", ki.bitcast(rv, ki.I32))
        kb = b.let("kb", ki.cast(ki.cast(kb, ki.I64) ^ ((ki.cast(kb, ki.I64) >> 31) & 2147483647), ki.I32))
        wide, acc = ki.cast(kb, ki.I64), ki.cast(hacc, ki.I64)
        b.set(hacc.attr, ki.select(wide > acc, kb, hacc) if kind == "max" else ki.select(acc <= wide, hacc, kb))
        b.set(nans.attr, ki.cast(ki.cast(nans, ki.I64) | ki.select(rv == rv, 0, 1), ki.I32))
    b.store(po, 0, hacc)
    b.store(pr, 0, nans)
    return b.finish()


@pytest.mark.parametrize("kind", ["max", "min"])
def test_exact_reductions_run_in_lanes_and_give_the_scalar_bits(kind):
    kir = _ordered_max(kind)
    text = vector_loops.render(kir, "0" * 64, 512)
    assert f"llvm.vector.reduce.s{kind}" in text and "llvm.vector.reduce.or" in text      # in lanes, not serial
    x = _inputs("float32", 1100, 9)
    x[700], x[701] = -0.0, np.float32(3e38)
    addrs = _builds(kir)
    for n in _lengths():
        got = {name: _run(a, [x], n, np.dtype(np.int32), extra=0) for name, a in addrs.items()}
        assert len(set(got.values())) == 1, (n, got)


def _in_place(offset, tagged):
    """``p[i + offset] = f(p[i], q[i])`` over one buffer ``p`` (alias classes given or not): a store over a load of
    the same buffer at ``offset`` elements."""
    b = ki.Builder()
    n0, p, q, off = b.let("n0", b.A[0]), b.let("p", b.A[1].ptr(ki.F32)), b.let("q", b.A[2].ptr(ki.F32)), b.A[3]
    tag = (lambda c: (c, 2)) if tagged else (lambda c: None)
    with b.loop("i0", n0) as i0:
        x = b.let("x0", ki.load(p, i0, tag(0)))
        y = b.let("x1", ki.load(q, i0, tag(1)))
        b.store(p, i0 + off, x * np.float32(0.5) + y, tag(0))
    return b.finish()


@pytest.mark.parametrize("offset", [0, 1, 2, -1, -3, 7, 8, 15, 16, 17, -16, -17, 300])
def test_a_store_over_a_load_of_the_same_buffer_keeps_the_scalar_order_at_every_distance(offset):
    kir = _in_place(offset, tagged=False)
    before = dict(vector_loops.STATS)
    addrs = _builds(kir)
    assert vector_loops.STATS["loops_vector"] > before["loops_vector"]      # vector, behind its check
    base = _inputs("float32", 1800, 10)
    q = _inputs("float32", 1800, 11)
    for n in _lengths():
        got = {}
        for name, a in addrs.items():
            p = base.copy()
            start = 350     # (room for negative offsets)
            block = np.array([n, p[start:].ctypes.data, q.ctypes.data, offset], np.int64)
            _CALL(a)(block.ctypes.data)
            got[name] = p.tobytes()
        assert got["vector"] == got["scalar"] and got["vector256"] == got["scalar"], (offset, n)


def _strided(store_strided):
    b = ki.Builder()
    n0, s = b.let("n0", b.A[0]), b.let("s", b.A[1])
    p0, p1 = b.let("p0", b.A[2].ptr(ki.F64)), b.let("p1", b.A[3].ptr(ki.F64))
    with b.loop("i0", n0) as i0:
        x = b.let("x0", p0[i0 * s if not store_strided else i0])
        b.store(p1, i0 * s if store_strided else i0, MathCalls("float64").exp(x))
    return b.finish()


@pytest.mark.parametrize("store_strided", [False, True])
def test_loops_that_are_not_contiguous_stay_scalar(store_strided):
    kir = _strided(store_strided)
    before = dict(vector_loops.STATS)
    text = vector_loops.render(kir, "0" * 64, 512)
    assert vector_loops.STATS["loops_scalar"] == before["loops_scalar"] + 1
    assert vector_loops.STATS["loops_vector"] == before["loops_vector"]
    assert " x double>" not in text
    assert text.split("\n", 1)[1] == ir_loops.render(kir, "0" * 64).split("\n", 1)[1]     # the scalar text itself


def test_which_loops_of_a_row_kernel_are_vector():
    """A softmax row kernel's shape: a max pass (exact, in lanes), an exp-and-sum pass (the sum lane by lane) and a
    scaling pass, all vector; an index-checked gather loop stays scalar."""
    b = ki.Builder()
    n0, n1 = b.let("n0", b.A[0]), b.let("n1", b.A[1])
    p0, p1, pi = b.let("p0", b.A[2].ptr(ki.F32)), b.let("p1", b.A[3].ptr(ki.F32)), b.let("pi", b.A[4].ptr(ki.I64))
    m = MathCalls("float32")
    with b.loop("i0", n0) as i0:
        row = b.let("row", i0 * n1)
        mx = b.let("mx", ki.const(np.int64(-(1 << 40))))
        with b.loop("i1", n1) as i1:
            k = b.let("k", ki.cast(ki.bitcast(p0[row + i1], ki.I32), ki.I64))
            b.set(mx.attr, ki.select(k > mx, k, mx))
        s = b.let("s", ki.const(np.float32(0)))
        with b.loop("i2", n1) as i2:
            e = b.let("e", m.exp(p0[row + i2] - ki.cast(ki.bitcast(ki.cast(mx, ki.I32), ki.F32), ki.F32)))
            b.store(p1, row + i2, e)
            b.set(s.attr, s + e)
        with b.loop("i3", n1) as i3:
            b.store(p1, row + i3, p1[row + i3] / s)
        with b.loop("i4", n1) as i4:
            j = b.let("j", pi[i4])
            with b.if_(j < n1):
                b.store(p1, row + i4, p0[j])
    before = dict(vector_loops.STATS)
    vector_loops.render(b.finish(), "0" * 64, 512)
    assert vector_loops.STATS["loops_vector"] - before["loops_vector"] == 3
    assert vector_loops.STATS["loops_scalar"] - before["loops_scalar"] == 2     # the gather loop, the row loop


def test_without_vector_bits_the_first_tier_renders_the_scalar_text():
    kir = _elementwise(lambda m, x, y: x + y, "float32")
    assert vector_loops.render(kir, "0" * 64, 0) == ir_loops.render(kir, "0" * 64)


# a program of every dtype, a sum and a row softmax: its first tier's calls, then its O3 calls, and the loops its
# first tier rendered vector
PROGRAM = textwrap.dedent("""
    import json, threading
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build_thread
    from jitgrad.codegen.kernels import vector_loops
    gate = threading.Event()
    build_thread.hold_optimising(gate)

    def step(a, b, i, j, m):
        g = jg.nn.functional.gelu(a * 1.5 - b)
        return (g, jg.tanh(b.double()) * 2 + a.double(), i * 3 - j // 7 + (i % 5), (i > j) & ~m,
                jg.softmax(a.reshape(-1, 4), dim=1), (a * b).sum())
    f = jg.compile(step, backend="numba", dynamic=True)    # (one graph: held optimised builds hold the thread)
    rng = np.random.default_rng(0)
    calls = []
    for n in (20, 17, 2, 33):      # (n = 1 would specialise: another graph)
        args = (jg.tensor(rng.standard_normal(n * 4, dtype=np.float32)), jg.tensor(rng.standard_normal(n * 4,
                dtype=np.float32)), jg.tensor(rng.integers(-99, 99, n * 4)), jg.tensor(rng.integers(-99, 99, n * 4)),
                jg.tensor(rng.integers(0, 2, n * 4).astype(bool)))
        f(*args)
        calls.append(args)
    from jitgrad.codegen.native import workpool
    r0 = workpool.rounds() + workpool.joined()
    quick = [[r.numpy().tobytes().hex() for r in f(*args)] for args in calls]
    loops, kernels_quick = dict(vector_loops.STATS), f.stats["kernels_quick"]
    r1 = workpool.rounds() + workpool.joined()
    gate.set()
    f.wait()
    r2 = workpool.rounds() + workpool.joined()
    o3 = [[r.numpy().tobytes().hex() for r in f(*args)] for args in calls]
    print(json.dumps({"loops": loops, "kernels_quick": kernels_quick, "quick": quick, "o3": o3,
                      "optimising": f.stats["graphs_optimising"], "pooled": [r1 - r0, workpool.rounds() +
                                                                           workpool.joined() - r2]}))
""")


def _program(tmp_path, **env_extra):
    tmp_path.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND")}
    env.update(JITGRAD_CACHE_DIR=str(tmp_path / "cache"), JITGRAD_BUILD_AFTER_CALL="1", PYTHONPATH=str(REPO),
               JITGRAD_QUICK_MINOR_SHARE="0", **env_extra)   # (level 0's code generator contracts no FMAs)
    # the loops rendered are counted in this process: its tiers built here, not by forked children
    env.setdefault("JITGRAD_FORKED_TIER", "0")
    r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=600,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _close(a_hex, c_hex, dtype):
    a, c = (np.frombuffer(bytes.fromhex(h), dtype) for h in (a_hex, c_hex))
    return a.shape == c.shape and np.allclose(a, c, rtol=1e-5, atol=1e-6)


def test_a_programs_first_tier_computes_the_scalar_tiers_bits_and_o3s_where_nothing_sums(tmp_path):
    # the first tier's sums in the scalar order (``JITGRAD_QUICK_LANE_SUMS=0``), and in lanes (the default)
    serial = _program(tmp_path / "serial", JITGRAD_QUICK_LANE_SUMS="0")
    vec = _program(tmp_path / "vector")
    # the scalar first tier, every kernel through the quick passes (``JITGRAD_QUICK_VECTOR_SHARE``: none through LLVM's
    # loop vectoriser, whose sums run in lanes)
    scalar = _program(tmp_path / "scalar", JITGRAD_QUICK_VECTOR_BITS="0", JITGRAD_QUICK_VECTOR_SHARE="2")
    assert serial["kernels_quick"] >= 3 and serial["loops"]["loops_vector"] >= 3, serial
    assert serial["loops"]["sums_in_lanes"] == 0 and vec["loops"]["sums_in_lanes"] >= 2, vec   # the sum, softmax's
    assert scalar["loops"]["loops_vector"] == 0, scalar
    assert serial["optimising"] == vec["optimising"] == 0, vec
    assert serial["quick"] == scalar["quick"]       # every output of every call, sums and softmax rows included
    for quick, lanes, o3 in zip(serial["quick"], vec["quick"], vec["o3"]):
        assert quick[:4] == lanes[:4] == o3[:4]     # the elementwise outputs (O3 sums in lanes: other bits)
        assert all(_close(a, c, np.float32) for a, c in zip(lanes[4:], quick[4:]))     # the sums', to rounding
        assert all(_close(a, c, np.float32) for a, c in zip(lanes[4:], o3[4:]))


def test_the_first_tier_never_takes_the_pool_and_computes_the_pooled_launchs_bits(tmp_path):
    # two workers and thresholds every loop reaches: the scalar first tier (the optimised build's text through the
    # quick passes) runs its parallel kernels on the pool; the vector first tier runs the same chunks on the calling
    # thread (a sum: one chunk per worker, in order), with the same bits; its optimised build takes the pool
    if settings.default_threads() < 2 or not workpool.available():
        pytest.skip("needs two cores and the worker pool")
    pool = dict(NUMBA_NUM_THREADS="2", JITGRAD_PARALLEL_WORK="1", JITGRAD_PARALLEL_GRAIN="2", JITGRAD_POOL_PACER="0")
    # (its sums in the scalar order: in lanes, a chunk's sum has the bits of its lanes, not the scalar chunk's)
    vec = _program(tmp_path / "vector", JITGRAD_QUICK_LANE_SUMS="0", **pool)
    scalar = _program(tmp_path / "scalar", JITGRAD_QUICK_VECTOR_BITS="0", JITGRAD_QUICK_VECTOR_SHARE="2", **pool)
    assert vec["pooled"][0] == 0 and vec["pooled"][1] > 0, vec["pooled"]
    assert scalar["pooled"][0] > 0, scalar["pooled"]
    assert vec["quick"] == scalar["quick"]


def _dot(dtype, form):
    """``acc += x * y`` (``form``: the product straight in the sum, through temporaries, or negated), as the sum
    kernels are: the scalar code fuses the product into the sum (an FMA), and so does each lane."""
    t = ki.OF_DTYPE[dtype]
    b = ki.Builder()
    n0, p0, p1, pr = b.let("n0", b.A[0]), b.let("p0", b.A[1].ptr(t)), b.let("p1", b.A[2].ptr(t)), b.A[3].ptr(t)
    acc = b.let("acc", ki.cast(ki.const(0), t))
    with b.loop("i0", n0) as i0:
        x, y = b.let("x0", p0[i0]), b.let("x1", p1[i0])
        if form == "direct":
            b.set(acc.attr, acc + x * y)
        elif form == "temporaries":
            t0 = b.let("t0", x * y)
            b.set(acc.attr, acc + b.let("rv", t0))
        else:
            b.set(acc.attr, acc + b.let("rv", -(x * y)))
    b.store(pr, 0, acc)
    return b.finish()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", ["direct", "temporaries", "negated"])
def test_a_sum_of_products_fuses_per_lane_as_the_scalar_loop_does(dtype, form, serial_sums):
    kir = _dot(dtype, form)
    x, y = _inputs(dtype, 1100, 12), _inputs(dtype, 1100, 13)
    addrs = _builds(kir)
    for n in _lengths():
        got = {}
        for name, a in addrs.items():
            r = np.zeros(1, dtype)
            _CALL(a)(np.array([n, x.ctypes.data, y.ctypes.data, r.ctypes.data], np.int64).ctypes.data)
            r[np.isnan(r)] = np.nan
            got[name] = r.tobytes()
        assert got["vector"] == got["scalar"] and got["vector256"] == got["scalar"], (form, n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_sums_run_in_lanes_to_the_scalar_sums_value(dtype):
    """A float sum in lanes (the default): an accumulator a lane, reassociated at the end as O3's vectorised sums
    are; its value the scalar loop's to rounding at every remainder, an empty sum +0.0."""
    kir = _dot(dtype, "direct")
    rng = np.random.default_rng(15)
    x, y = (rng.standard_normal(1100).astype(dtype) for _ in range(2))
    before = vector_loops.STATS["sums_in_lanes"]
    addrs = _builds(kir)
    assert vector_loops.STATS["sums_in_lanes"] == before + 2
    rtol = 1e-5 if dtype == "float32" else 1e-12
    for n in _lengths():
        got = {}
        for name, a in addrs.items():
            r = np.full(1, 7, dtype)
            _CALL(a)(np.array([n, x.ctypes.data, y.ctypes.data, r.ctypes.data], np.int64).ctypes.data)
            got[name] = r[0]
        exact = float(np.dot(x[:n].astype(np.float64), y[:n].astype(np.float64)))
        for name in ("vector", "vector256", "o3"):
            assert np.isclose(got[name], got["scalar"], rtol=rtol, atol=rtol), (name, n)
            assert np.isclose(got[name], exact, rtol=rtol, atol=rtol * 10), (name, n)
        if n == 0:
            assert all(np.signbit(v) == np.signbit(0.0) and v == 0 for v in got.values()), got


def _uniform_terms(dtype, form):
    """``out[i] = x[i] OP u1*u2`` with ``u1``, ``u2`` read before the loop (``form`` says how the product enters the
    sum), and ``acc`` summing ``u1*u2`` (``sum``) or ``u1`` (``sum_uniform``), stored at ``out[n]``."""
    t = ki.OF_DTYPE[dtype]
    b = ki.Builder()
    n0, p0, pu, po = (b.let(name, b.A[j] if j == 0 else b.A[j].ptr(t)) for j, name in enumerate(("n0", "p0", "pu",
                                                                                                  "po")))
    u1, u2 = b.let("u1", pu[0]), b.let("u2", pu[1])
    acc = b.let("acc", ki.cast(ki.const(0), t))
    with b.loop("i0", n0) as i0:
        x = b.let("x0", p0[i0])
        r = {"add": lambda: x + u1 * u2, "sub": lambda: x - u1 * u2, "product_first": lambda: u1 * u2 - x,
             "negated": lambda: x + -(u1 * u2), "temporary": lambda: x + b.let("t0", u1 * u2),
             "two_products": lambda: x * u1 + u1 * u2}.get(form, lambda: x)()
        if form.startswith("sum"):
            b.set(acc.attr, acc + (u1 * u2 if form == "sum" else u1))
        b.store(po, i0, b.let("r", r))
    b.store(po, n0, acc)
    return b.finish()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", ["add", "sub", "product_first", "negated", "temporary", "two_products", "sum",
                                  "sum_uniform"])
def test_a_product_the_loop_does_not_vary_fuses_alike_in_every_tier(dtype, form, serial_sums):
    """A sum that varies with the loop takes a product that does not (``x[i] + u1*u2``) without an FMA in every
    tier (codegen/kernels/contraction.py): the scalar loop fused the two, O3 (which computes the product before the
    loop) and the vector blocks (which broadcast it) did not, so an element's bits depended on the tier, and on the
    first tier's part that ran it (a vector block, the remainder, or the scalar loop when the overlap check fails).
    A lane-serial sum of a uniform term, too, adds in the scalar loop's order (each lane's sum apart)."""
    kir = _uniform_terms(dtype, form)
    addrs = _builds(kir)
    rng = np.random.default_rng(14)
    x = (rng.standard_normal(1100) * 3).astype(dtype)
    u = (rng.standard_normal(2) * 3).astype(dtype)
    for n in _lengths():
        got = {}
        for name, a in addrs.items():
            out = np.zeros(n + 1, dtype)
            _CALL(a)(np.array([n, x.ctypes.data, u.ctypes.data, out.ctypes.data], np.int64).ctypes.data)
            got[name] = out.tobytes() if not form.startswith("sum") else (out.tobytes(), out[:n].tobytes())
        for name in ("vector", "vector256"):
            assert got[name] == got["scalar"], (name, n)
        if form.startswith("sum"):      # (O3 sums in lanes: the elementwise part only)
            assert got["o3"][1] == got["scalar"][1], n
        else:
            assert got["o3"] == got["scalar"], n
