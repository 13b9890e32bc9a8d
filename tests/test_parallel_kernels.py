"""Parallel (``prange``) kernels built without Numba (codegen/kernels/ir_loops.py, codegen/native/llvm_build.py) and run
on the worker pool (codegen/native/workpool.py, issue 16).

Counted and compared, never timed: a parallel kernel's elementwise results are bit-identical to Numba's build of
the same text (chunks change nothing element by element), its sums agree to rounding and its counters exactly;
loops of 0, 1 and fewer iterations than workers run; a compiled graph with parallel kernels agrees with eager mode
(rows not divisible by the workers, full and row sums, an anomaly in the last chunk, an integer division by zero);
errors in the calling thread's chunk and in a worker's are reported alike; one worker runs chunks on the calling
thread; and Numba-built parallel kernels run beside the pool (on Numba's instance of the library).
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
from jitgrad.codegen.native import cache, llvm_build, objload, workpool
from jitgrad.codegen.kernels import ir_loops, kernel_ir as ki, loops
from jitgrad.codegen.kernels.math_table import MathCalls

REPO = Path(__file__).resolve().parents[1]
_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

def _par_kernel(update=None, after=None, prologue=None, stored=None):
    """An elementwise loop with a full sum and a counter (the forms the generators build: loops.gen_group), its
    outer loop parallel; ``update(b, acc, t0)`` / ``after(b, p2)`` replace the sum's update / its store after the
    loop; ``prologue(b)`` runs before the loop and gives a scale for each element; ``stored(b, acc, t0)`` is what
    each element stores."""
    b = ki.Builder()
    A = b.A
    n0 = b.let("n0", A[0])
    p0, p1 = b.let("p0", A[1].ptr(ki.F32)), b.let("p1", A[2].ptr(ki.F32))
    p2, p3 = b.let("p2", A[3].ptr(ki.F64)), b.let("p3", A[4].ptr(ki.I64))
    acc, k0 = b.var("acc", ki.F64), b.var("k0", ki.I64)
    b.set(acc, 0.0)
    b.set(k0, 0)
    scale = prologue(b) if prologue is not None else None
    with b.loop("i0", n0, parallel=True, reductions=[acc, k0]) as i0:
        x0 = b.let("x0", p0[i0])
        y = MathCalls("float32").tanh(x0) * np.float32(0.5)
        t0 = b.let("t0", ki.cast(y if scale is None else y * scale, ki.F32))
        b.store(p1, i0, t0 if stored is None else stored(b, acc, t0))
        if update is None:
            b.set(acc, ki.read(acc) + ki.cast(t0, ki.F64))
        else:
            update(b, acc, t0)
        b.set(k0, ki.read(k0) + ki.select(x0 > 0, 1, 0))
    if after is None:
        b.store(p2, 0, ki.read(acc))
    else:
        after(b, p2)
    b.store(p3, 0, ki.read(k0))
    return loops.Kernel("kernel", b.finish(), rank=1, operands=(), classes=(), parallel=True)


_PARK = _par_kernel()
_PAR = _PARK.source


def _run_block(addr, x):
    y = np.full_like(x, 7)
    s = np.zeros(1, np.float64)
    k = np.zeros(1, np.int64)
    block = np.array([x.size, x.ctypes.data, y.ctypes.data, s.ctypes.data, k.ctypes.data], np.int64)
    _CALL(addr)(block.ctypes.data)
    return y, float(s[0]), int(k[0])


@pytest.mark.parametrize("n", [0, 1, 3, 4097, 100003])
def test_parallel_kernel_from_ir_matches_numbas_build(n):
    key = cache.cache_key(_PAR, extra=("test-parallel-kernels",))
    blob = llvm_build.compile_kernel(key, ir_loops.render(_PARK.ir, key))
    assert blob is not None, "the renderer refused a parallel kernel"
    # it calls the pool, not Numba's threading layer (an ungated loop reads no threshold)
    pool_calls = {"jitgrad_wq_add_task", "jitgrad_wq_ready", "jitgrad_wq_synchronize", "jitgrad_wq_threads",
                  "jitgrad_wq_rounds"}
    assert pool_calls <= set(blob.needs) and pool_calls <= set(workpool.SYMBOLS)
    assert not {"jitgrad_wq_min_work", "jitgrad_wq_grain"} & set(blob.needs)
    from jitgrad.codegen.native import threads
    with threads.LAUNCH_LOCK:
        addr = objload.load([blob])[key]
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        y, s, k = _run_block(addr, x)
        ref = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, _PAR).kernel
        y_nb, s_nb, k_nb = _run_block(ref.address, x)
    np.testing.assert_array_equal(y, y_nb)
    assert k == k_nb == int((x > 0).sum())
    assert s == pytest.approx(s_nb, rel=1e-12, abs=1e-9)
    assert s == pytest.approx(float(y.astype(np.float64).sum()), rel=1e-12, abs=1e-9)


def test_renderer_refuses_parallel_kernels_it_cannot_split():
    # a value made in the loop and read after it (its value would be some chunk's), and a product "reduction"
    def last(b, acc, t0):
        b.let("last", ki.cast(t0, ki.F64))
        b.set(acc, ki.read(acc) + 1.0)

    def store_last(b, p2):
        b.store(p2, 0, ki.read(b.var("last", ki.F64)))

    def product(b, acc, t0):
        b.set(acc, ki.read(acc) * ki.cast(t0, ki.F64))
    for k in (_par_kernel(last, store_last), _par_kernel(product)):
        with pytest.raises(ir_loops.Unsupported):
            ir_loops.render(k.ir, "0" * 64)


def _eager_and_compiled(fn, *args):
    compiled = jg.compile(fn, backend="numba", background=False, parallel=True)
    return fn(*args), compiled(*args), compiled


@pytest.mark.parametrize("shape", [(3, 5003), (1, 9000), (9001,), (5, 2, 1000)])
def test_compiled_parallel_graph_agrees_with_eager(shape):
    rng = np.random.default_rng(len(shape))
    x = jg.tensor(rng.standard_normal(shape).astype(np.float32))

    def f(x):
        y = jg.tanh(x) * jg.sigmoid(x) + 0.25
        return y, y.sum(), (y * y).sum(-1)
    before = dict(llvm_build.STATS)
    eager, comp, _ = _eager_and_compiled(f, x)
    serial = jg.compile(f, backend="numba", background=False, parallel=False)(x)
    np.testing.assert_array_equal(comp[0].numpy(), serial[0].numpy())      # chunks change no element
    np.testing.assert_allclose(comp[2].numpy(), serial[2].numpy(), rtol=1e-6)
    np.testing.assert_allclose(comp[0].numpy(), eager[0].numpy(), rtol=1e-5, atol=1e-7)  # mathlib's tanh vs NumPy's
    np.testing.assert_allclose(float(comp[1]), float(eager[1]), rtol=1e-5)
    np.testing.assert_allclose(comp[2].numpy(), eager[2].numpy(), rtol=1e-5)
    assert llvm_build.STATS["kernels_refused"] == before["kernels_refused"]


def test_anomaly_in_the_last_chunk_of_a_parallel_kernel_is_reported():
    x = np.linspace(-1, 1, 1 << 14).astype(np.float32)
    x[-1] = -2.0                                           # log of a negative: NaN in the last chunk only

    @jg.compile(backend="numba", background=False, parallel=True)
    def f(x):
        return (jg.log(x + 1.5) * 2.0).sum()
    assert np.isfinite(float(f(jg.tensor(x[:-1].copy()))))
    with jg.autograd.detect_anomaly(check_forward=True):
        g = jg.compile(lambda x: (jg.log(x + 1.5) * 2.0).sum(), backend="numba", background=False, parallel=True)
        with pytest.raises(RuntimeError, match="Function 'log' \\(forward\\) returned nan values"):
            g(jg.tensor(x))
        assert np.isfinite(float(g(jg.tensor(x[:-1].copy()))))


def test_integer_division_by_zero_in_a_parallel_kernel_raises():
    a = np.arange(1, 1 + (1 << 14), dtype=np.int64)
    d = np.ones_like(a)
    d[-3] = 0

    @jg.compile(backend="numba", background=False, parallel=True)
    def f(a, d):
        return a // d
    np.testing.assert_array_equal(f(jg.tensor(a), jg.tensor(np.ones_like(a))).numpy(), a)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(jg.tensor(a), jg.tensor(d))


two_threads = pytest.mark.skipif(workpool.default_threads() < 2 or not workpool.available(),
                                 reason="needs two threads and the worker pool")


def _pooled_rounds(call):
    """Run ``call()`` with every parallel loop on the pool (threshold 0); return (its result or the exception it
    raised, the pool rounds it launched, those of them the calling thread ran a chunk of)."""
    prev = workpool.set_min_work(0, 0)
    r0, c0 = workpool.rounds(), workpool.caller_rounds()
    try:
        out = call()
    except Exception as e:          # noqa: BLE001 - compared below
        out = e
    finally:
        workpool.set_min_work(*prev)
    return out, workpool.rounds() - r0, workpool.caller_rounds() - c0


@two_threads
@pytest.mark.parametrize("at", [0, -1], ids=["callers_chunk", "workers_chunk"])
def test_errors_in_the_callers_chunk_and_a_workers_are_reported_alike(at):
    """On the pool (two threads: chunk 0 on the calling thread, chunk 1 on the worker), a division by zero and
    an anomaly (log of a negative) in either chunk raise the same error as on one thread, and the launch ran one
    round whose chunk 0 the caller ran (counted)."""
    a = np.arange(1, 1 + (1 << 14), dtype=np.int64)
    d = np.ones_like(a)
    d[at] = 0
    f = jg.compile(lambda a, d: a // d, backend="numba", background=False, parallel=True)
    ok, rounds, caller = _pooled_rounds(lambda: f(jg.tensor(a), jg.tensor(np.ones_like(a))).numpy())
    np.testing.assert_array_equal(ok, a)
    assert (rounds, caller) == (1, 1) and workpool.caller()
    err, rounds, caller = _pooled_rounds(lambda: f(jg.tensor(a), jg.tensor(d)))
    assert isinstance(err, RuntimeError) and "ZeroDivisionError" in str(err) and (rounds, caller) == (1, 1)
    x = np.linspace(-1, 1, 1 << 14).astype(np.float32)
    x[at] = -2.0
    with jg.autograd.detect_anomaly(check_forward=True):
        g = jg.compile(lambda x: (jg.log(x + 1.5) * 2.0).sum(), backend="numba", background=False, parallel=True)
        err, rounds, caller = _pooled_rounds(lambda: g(jg.tensor(x)))
    assert isinstance(err, RuntimeError) and "Function 'log' (forward) returned nan values" in str(err), err
    assert rounds >= 1 and caller == rounds


_CHILD = r'''
import json, sys
import numpy as np
import jitgrad as jg
from jitgrad.codegen.native import llvm_build, threads, workpool
x = jg.tensor(np.linspace(-2, 2, 1 << 14, dtype=np.float32))
f = jg.compile(lambda x: (jg.tanh(x) * 3.0).sum(), backend="numba", background=False, parallel=True)
out = {"tanh": float(f(x)), "workers": workpool.threads(), "numba": "numba" in sys.modules}
if MIXED:    # float floor division is not lowered by ir_loops: Numba builds that parallel kernel, on its own pool
    g = jg.compile(lambda x: (jg.tanh(x) * 3.0 + x // 0.75).sum(), backend="numba", background=False, parallel=True)
    out["sin"] = float(g(x))
    out["tanh2"] = float(f(x))
    out["layer"] = threads.layer()
    out["refused"] = llvm_build.STATS["kernels_refused"]
print(json.dumps(out))
'''


def _child(tmp_path, mixed, threads_):
    env = {**os.environ, "PYTHONPATH": str(REPO), "JITGRAD_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_NUM_THREADS": str(threads_)}
    env.pop("NUMBA_THREADING_LAYER", None)
    r = subprocess.run([sys.executable, "-c", _CHILD.replace("MIXED", str(mixed))], capture_output=True, text=True,
                       env=env, cwd=str(REPO), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_one_worker_runs_the_chunks_on_the_calling_thread(tmp_path):
    xs = np.linspace(-2, 2, 1 << 14, dtype=np.float32)
    out = _child(tmp_path, False, 1)
    assert out["workers"] == 1 and not out["numba"]
    assert out["tanh"] == pytest.approx(float((np.tanh(xs.astype(np.float64)) * 3).sum()), abs=1e-2)


def test_numba_built_parallel_kernels_run_beside_the_pool(tmp_path):
    xs = np.linspace(-2, 2, 1 << 14, dtype=np.float32).astype(np.float64)
    out = _child(tmp_path, True, 2)
    assert out["workers"] == 2 and out["layer"] == "workqueue" and out["refused"] >= 1
    assert out["tanh"] == out["tanh2"] == pytest.approx(float((np.tanh(xs) * 3).sum()), abs=1e-2)
    assert out["sin"] == pytest.approx(float((np.tanh(xs) * 3 + xs.astype(np.float32) // 0.75).sum()), abs=1e-2)


def test_parallel_by_work_not_only_by_size(high_thresholds):
    """The thread choice by work (counted, at a threshold between the two loops' work: the eager kernels' 2^23):
    a long transcendental chain over 2^17 elements is worth waking the workers, a plain add over the same
    elements is not, and neither is anything below the grain size."""
    from jitgrad.jit.graph_code import compiled_graph

    def chain(a):
        for _ in range(8):
            a = jg.tanh(a) * jg.sigmoid(a)
        return a

    def kernels(fn, n):
        x = jg.tensor(np.linspace(-1, 1, n, dtype=np.float32))
        f = jg.compile(fn, backend="numba", background=True)
        e = f._entry_for((x,), {})
        return compiled_graph(e.graph, e.gf.writes).kernels
    n = 1 << 17
    assert n * 24 * 8 >= workpool.min_work() > n * 9
    assert [k.parallel for k in kernels(chain, n)] == [True]
    assert [k.parallel for k in kernels(lambda a: a + 1.0, n)] == [False]
    assert [k.parallel for k in kernels(chain, workpool.grain() // 2)] == [False]


def test_chunks_see_values_the_statements_before_the_loop_compute():
    """A value set before the parallel loop by a branch or a loop (not a plain assignment) reaches every chunk
    as the serial kernel sees it."""
    def prologue(b):
        sc = b.var("sc", ki.F32)
        b.set(sc, np.float32(1))
        with b.if_(b.A[0] > 2):
            b.set(sc, np.float32(2))
        with b.loop("j", 3):
            b.set(sc, ki.read(sc) + np.float32(1))
        return ki.read(sc)
    k = _par_kernel(prologue=prologue)
    src = k.source
    key = cache.cache_key(src, extra=("test-parallel-kernels-prologue",))
    blob = llvm_build.compile_kernel(key, ir_loops.render(k.ir, key))
    assert blob is not None
    from jitgrad.codegen.native import threads
    x = np.random.default_rng(5).standard_normal(4097).astype(np.float32)
    with threads.LAUNCH_LOCK:
        y, s, k = _run_block(objload.load([blob])[key], x)
        ref = cache._in_memory(cache._module_name("kernel", key) + "_ref", key, src).kernel
        y_nb, s_nb, k_nb = _run_block(ref.address, x)
    np.testing.assert_array_equal(y, y_nb)
    assert s == pytest.approx(s_nb, rel=1e-12, abs=1e-9) and k == k_nb


def test_renderer_refuses_a_sum_read_inside_its_parallel_loop():
    # a running sum stored per element: each chunk would store its own partial, not the serial prefix
    k = _par_kernel(stored=lambda b, acc, t0: ki.cast(ki.read(acc), ki.F32))
    with pytest.raises(ir_loops.Unsupported):
        ir_loops.render(k.ir, "0" * 64)
