"""The thread policy (codegen/native/threads.py): a fork-safe threading layer, so a process that ran a parallel kernel
can fork and the child can run it again; parallel launches from several Python threads are serialised."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import settings
from jitgrad.ir.ops import blas, blas_library
from thread_calls import call_from_threads

_CHILD = """
import os, numpy as np, jitgrad as jg
from jitgrad.codegen.native import threads
f = jg.compile(lambda a: (a * 2.0).tanh().sum(), backend="numba", parallel=True)
x = jg.tensor(np.linspace(-1, 1, 1 << 14))
want = float(f(x))
print("layer", threads.layer())
pid = os.fork()
if pid == 0:
    ok = abs(float(f(x)) - want) < 1e-9
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child status", status)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_after_a_parallel_kernel_keeps_the_child_alive():
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS="2")
    env.pop("NUMBA_THREADING_LAYER", None)
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "child status 0" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "layer omp" not in r.stdout          # never GNU OpenMP (it kills forked children)


def test_parallel_calls_from_threads_agree(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    f = jg.compile(lambda a: (a * 2.0).tanh() * 0.5, backend="numba", parallel=True)
    x = jg.tensor(np.linspace(-1, 1, 1 << 13))
    want = f(x).numpy().copy()
    results = call_from_threads(lambda: np.array_equal(f(x).numpy(), want), 4, 20)
    assert len(results) == 80 and all(results)


_IDLE = """
import resource, time
import numpy as np
import jitgrad as jg
a = jg.ones(384, 384)
for _ in range(3):
    (a @ a).sum()
r0 = resource.getrusage(resource.RUSAGE_SELF)
time.sleep(0.3)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print("idle cpu", r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
"""


def test_blas_workers_do_not_spin_after_a_matmul():
    """CPU time a process burns while it sleeps after a GEMM (work counted, not a clock): OpenBLAS's workers spin
    ~0.1 s each by default; with jitgrad's setting they sleep after ~0.4 ms."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["OPENBLAS_NUM_THREADS"] = "2"
    r = subprocess.run([sys.executable, "-c", _IDLE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    idle = float(r.stdout.split("idle cpu")[1])
    assert idle < 0.01, idle


_PLACED = """
import os, numpy as np, jitgrad as jg
from jitgrad.codegen.native import threads
def pinned():
    # the threads of this process that may run on one core only, and that core
    out = []
    for t in os.listdir("/proc/self/task"):
        cores = os.sched_getaffinity(int(t))
        if len(cores) == 1:
            out.append(min(cores))
    # (the second core at placement; the first after a launch from the second moved it: ``keep_apart``)
    return len(out) == 1 and out[0] in os.sched_getaffinity(0) and "one" or sorted(out)
f = jg.compile(lambda a: (a * 2.0).tanh().sum(), backend="numba", parallel=True)
x = jg.tensor(np.linspace(-1, 1, 1 << 14))
want = float(f(x))
print("layer", threads.layer(), "parent", pinned(), threads.STATS["placements"])
pid = os.fork()
if pid == 0:
    ok = abs(float(f(x)) - want) < 1e-9
    print("child", pinned(), threads.STATS["placements"], ok, flush=True)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child status", status)
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
def test_workqueue_workers_each_run_on_their_own_core():
    """Placement counted, not timed: with the ``workqueue`` layer, each worker thread may run on one core, a
    different one each (unpinned, Linux woke both on one core in about half the processes), in the process
    and again in a forked child (whose workers are new threads).  At two threads the pool has one worker (the
    calling thread runs a chunk of each launch itself): it runs on the second core, the first is left to the
    caller, which is never pinned (the worker moves off the caller's core if Linux puts the caller there)."""
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS="2", NUMBA_THREADING_LAYER="workqueue")
    env.pop("JITGRAD_PIN_THREADS", None)
    r = subprocess.run([sys.executable, "-c", _PLACED], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "layer spin parent one 1" in r.stdout, r.stdout     # the worker on a core of its own (jitgrad's pool)
    assert "child one 2 True" in r.stdout, r.stdout
    assert "child status 0" in r.stdout, r.stdout
    env["JITGRAD_PIN_THREADS"] = "0"
    r = subprocess.run([sys.executable, "-c", _PLACED], env=env, capture_output=True, text=True, timeout=300)
    assert "layer spin parent [] 0" in r.stdout, r.stdout + r.stderr[-2000:]


_APART = """
import os, numpy as np, jitgrad as jg
from jitgrad.codegen.native import threads, workpool
workpool.set_min_work(0, 0)
f = jg.compile(lambda a: (a * 2.0).tanh().sum(), backend="numba", background=False, parallel=True)
x = jg.tensor(np.linspace(-1, 1, 1 << 14))
want = float(f(x))
cores = sorted(os.sched_getaffinity(0))

def workers():
    # the threads of this process pinned to one core: {tid: core}
    out = {}
    for t in os.listdir("/proc/self/task"):
        c = os.sched_getaffinity(int(t))
        if len(c) == 1:
            out[int(t)] = min(c)
    return out
before, moves = workers(), threads.STATS["moves"]
(core,) = before.values()
os.sched_setaffinity(0, {core})             # the caller onto the worker's core, as Linux may put it
got = float(f(x))
after = workers()
after.pop(__import__("threading").get_native_id(), None)
print("moved", sorted(after.values()) == [c for c in cores[:2] if c != core], threads.STATS["moves"] - moves,
      "same", got == want)
got = float(f(x))                           # the caller stays there: nothing more to move
print("again", threads.STATS["moves"] - moves, got == want)
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
def test_a_worker_on_the_callers_core_moves_off_it():
    """Counted, not timed: the caller is never pinned, and Linux left it on the worker's core in 2 processes of 5
    (every call then time-sliced with the worker).  A launch from there moves the worker to the core no worker
    has, once; the results do not change."""
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS="2")
    env.pop("JITGRAD_PIN_THREADS", None)
    r = subprocess.run([sys.executable, "-c", _APART], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "moved True 1 same True" in r.stdout, r.stdout
    assert "again 1 True" in r.stdout, r.stdout


_CALLER_CHUNK = """
import json, os, numpy as np, jitgrad as jg
from jitgrad.codegen.native import workpool
before = set(os.listdir("/proc/self/task"))
workpool.launch()
started = len(set(os.listdir("/proc/self/task")) - before)
workpool.set_min_work(0, 0)
f = jg.compile(lambda a: (a * 2.0).tanh().sum(), backend="numba", background=False, parallel=True)
x = jg.tensor(np.linspace(-1, 1, 1 << 16))
sums = [float(f(x))]
r0, c0 = workpool.rounds(), workpool.caller_rounds()
sums += [float(f(x)) for _ in range(5)]
print(json.dumps({"threads": workpool.threads(), "queues": workpool.queues(), "started": started, "sums": sums,
                  "rounds": workpool.rounds() - r0, "caller": workpool.caller_rounds() - c0}))
"""


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_calling_thread_runs_a_chunk_of_every_pooled_launch(threads):
    """Counted, not timed: at ``threads`` threads the pool starts ``threads - 1`` workers (the calling thread is
    the other one), so each pooled launch wakes ``threads - 1`` of them (``ready`` wakes every queue), and the
    calling thread runs a chunk of every round (``caller_rounds``); the same sum every call.  At one thread
    nothing launches on the pool (jitgrad's own pool starts no worker; its copy of ``workqueue``, one).  With
    Numba's own instance of the library shared (``JITGRAD_PRIVATE_POOL=0``),
    one worker per thread and the caller waits (Numba's kernels assume that many workers)."""
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS=str(threads))
    env.pop("JITGRAD_PRIVATE_POOL", None)
    env.pop("JITGRAD_POOL", None)
    r = subprocess.run([sys.executable, "-c", _CALLER_CHUNK], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # jitgrad's own pool (spin_pool, the default): no worker at all at one thread
    assert out["threads"] == threads and out["queues"] == out["started"] == threads - 1, out
    assert out["rounds"] == out["caller"] == (5 if threads > 1 else 0), out
    assert len(set(out["sums"])) == 1
    env["JITGRAD_POOL"] = "workqueue"       # jitgrad's copy of Numba's library: one queue at least
    r = subprocess.run([sys.executable, "-c", _CALLER_CHUNK], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    copy = json.loads(r.stdout.strip().splitlines()[-1])
    assert copy["threads"] == threads and copy["queues"] == copy["started"] == max(1, threads - 1), copy
    assert copy["rounds"] == copy["caller"] == (5 if threads > 1 else 0), copy
    assert copy["sums"] == out["sums"]
    env["JITGRAD_PRIVATE_POOL"] = "0"
    r = subprocess.run([sys.executable, "-c", _CALLER_CHUNK], env=env, capture_output=True, text=True, timeout=300)
    shared = json.loads(r.stdout.strip().splitlines()[-1])
    assert shared["threads"] == shared["queues"] == shared["started"] == threads, shared
    assert shared["rounds"] == (5 if threads > 1 else 0) and shared["caller"] == 0, shared
    assert shared["sums"] == out["sums"]            # the same chunks, whoever runs them


def test_blas_pacer_drops_to_one_thread_while_calls_show_contention(monkeypatch):
    """The policy, driven by a fake clock and a fake OpenBLAS (counted, not timed): calls at their usual speed
    keep every BLAS thread; one call 3x slower than the best puts BLAS on one thread for HOLD calls; a slow retry
    doubles the hold, a fast one keeps all threads again."""
    from jitgrad.ir.ops import blas
    state = {"n": 2}
    monkeypatch.setattr(blas.BlasPacer, "_control", (lambda: state["n"], lambda n: state.update(n=n)))
    monkeypatch.setattr(blas.BlasPacer, "_max", 2)
    monkeypatch.setattr(blas.BlasPacer, "_current", 2)
    clock = {"t": 0.0}

    class FakeTime:
        @staticmethod
        def perf_counter():
            return clock["t"]
    monkeypatch.setattr(blas, "time", FakeTime)
    p = blas.BlasPacer()
    p.HOLD, p.MAX_HOLD = 4, 16
    p.hold = p.HOLD
    used = []

    def call(seconds):
        with p:
            used.append(state["n"])
            clock["t"] += seconds
    for _ in range(5):
        call(1.0)                       # a quiet machine: all threads
    call(1.5)                           # noise below SLOW x best: nothing changes
    assert used == [2] * 6
    call(5.0)                           # contention
    for _ in range(4):
        call(2.0)                       # HOLD calls on one thread
    assert used[6:] == [2, 1, 1, 1, 1]
    call(9.0)                           # the retry on two threads is slow again: hold 8
    for _ in range(8):
        call(2.0)
    assert used[11:] == [2] + [1] * 8
    call(1.0)                           # the retry is fast: all threads from now on, hold back to 4
    call(1.0)
    assert used[20:] == [2, 2] and p.hold == 4


def test_blas_pacer_wraps_graphs_that_call_blas_only(monkeypatch):
    from jitgrad.codegen.native import threads
    from jitgrad.ir.ops import blas
    monkeypatch.setattr(blas, "BLAS_PACER", True)
    assert threads.call_guard(False, False) is None
    g = threads.call_guard(False, True)
    assert g.pacer is not None and g.lock is None
    g = threads.call_guard(True, False)
    assert g.pacer is None and g.lock is threads.LAUNCH_LOCK


def test_graphs_that_thread_blas_run_it_on_a_fixed_count_whatever_count_was_left(monkeypatch):
    """The default (no BLAS pacer: its switches would move the bits): a graph whose GEMM OpenBLAS threads sets
    OpenBLAS to every thread at each call, after a small GEMM or a split graph left it on one; a graph whose big
    GEMMs are split sets one; ``set_num_threads`` wins."""
    from jitgrad.codegen.native import threads
    from jitgrad.ir.ops import blas
    state = {"n": 4}
    monkeypatch.setattr(blas, "BLAS_PACER", False)
    monkeypatch.setattr(blas.BlasPacer, "_control", (lambda: state["n"], lambda n: state.update(n=n)))
    monkeypatch.setattr(blas.BlasPacer, "_max", 4)
    monkeypatch.setattr(blas.BlasPacer, "_current", 4)
    monkeypatch.setattr(settings.STATE, "num_threads", None)
    g, single = threads.call_guard(False, True), threads.call_guard(False, False, single_blas=True)
    assert g.pacer is None and g.threaded and single.pacer is None and not single.threaded
    seen = []
    for guard in (g, single, g, g):
        with guard:
            seen.append(state["n"])
        with blas.eager_threads(8, 8, 8):           # a small eager GEMM: one thread, left behind
            pass
    assert seen == [4, 1, 4, 4]
    with blas.eager_threads(256, 512, 784):         # a large eager GEMM: every thread, after the small one
        assert state["n"] == 4
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    with g:
        assert state["n"] == 2


def _gemm_program(n, k, m):
    a = jg.tensor(np.ones((n, k), np.float32))
    b = jg.tensor(np.ones((k, m), np.float32))
    f = jg.compile(lambda a, b: (a @ b).sum(), backend="numba")
    assert float(f(a, b)) == n * k * m
    (entries,) = f._cache.values()
    from jitgrad.jit.graph_code import compiled_graph
    return compiled_graph(entries[0].graph, entries[0].gf.writes)


def test_graphs_with_small_gemms_only_get_no_pacer(monkeypatch):
    """OpenBLAS runs GEMMs below 2^18 multiply-adds on one thread: those graphs need no pacer (it costs ~1 us a
    call); B1's 256x784x512 GEMMs get one when OpenBLAS threads them itself."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    from jitgrad.codegen.native import threads
    from jitgrad.codegen.program import layout
    monkeypatch.setattr(layout, "POOL_GEMMS", False)
    assert not threads.blas_threaded(_gemm_program(8, 8, 8).program.steps)
    assert threads.blas_threaded(_gemm_program(256, 784, 64).program.steps)


def test_a_gemm_of_symbolic_size_sets_openblas_count_at_every_call(monkeypatch):
    """A program laid out once for every size (``codegen/program/sized.py``) may run its GEMM at sizes OpenBLAS
    threads: its call guard sets OpenBLAS's count at every call (a count another call left would otherwise decide
    its bits); ``launches`` counts its threads at each call's sizes."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    from jitgrad.codegen.program import layout
    from jitgrad.ir.symbolic import is_symbolic
    monkeypatch.setattr(layout, "POOL_GEMMS", False)
    f = jg.compile(lambda a, b: (a @ b).sum(), backend="numba")
    b = jg.tensor(np.ones((64, 48), np.float32))
    for m in (8, 9, 10):
        f(jg.tensor(np.ones((m, 64), np.float32)), b)
    lowered = [lo for entries in f._cache.values() for e in entries if isinstance(e.lowered, list)
               for lo in e.lowered]
    cgs = [lo.cg for lo in lowered if any(is_symbolic(d) for d in lo.graph.inputs[0].aval.shape)]
    assert cgs and all(cg.call_lock is not None and cg.call_lock.threaded for cg in cgs)
    big = jg.tensor(np.ones((400, 64), np.float32))
    assert float(f(big, b)) == 400 * 64 * 48
    blas_n = max(1, blas_library.thread_control()[0]()) if blas_library.thread_control() else 1
    (gemm,) = [la for la in f.launches(big, b) if la.kind in ("gemm", "bgemm")]
    (small,) = [la for la in f.launches(jg.tensor(np.ones((11, 64), np.float32)), b) if la.kind in ("gemm", "bgemm")]
    assert small.threads == 1 and gemm.threads == blas.all_threads() or blas_n == 1


@pytest.mark.skipif(settings.default_threads() < 2, reason="needs a pool of two workers")
def test_big_gemms_split_rows_between_the_pools_workers(monkeypatch):
    """One set of threads: a big GEMM's rows in one block per worker (a parallel batch of single-threaded BLAS
    calls, each starting at a multiple of OpenBLAS's row unit, the last one as high as the rows left: one step, one
    launch), its call guard sets OpenBLAS to one thread and needs no pacer; the result is exact here."""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    from jitgrad.codegen.native import threads
    from jitgrad.codegen.program import layout
    from jitgrad.ir.ops import blas
    monkeypatch.setattr(layout, "POOL_GEMMS", True)
    unit = blas.block_unit(np.float32)
    if unit is None:
        pytest.skip("this BLAS has no row unit for float32: no split")
    cg = _gemm_program(256, 784, 64)
    (st,) = [s for s in cg.program.steps if s.kind in ("gemm", "bgemm")]
    assert st.split and st.parallel and st.kind == "bgemm" and st.label == "matmul (BLAS, rows on the pool)"
    nb, h = cg.program.split_rows(256, 256 * 784 * 64, np.float32)
    assert h % unit == 0 and h >= blas.MIN_BLOCK_ROWS and nb >= 2 and 0 < 256 - (nb - 1) * h <= h
    assert st.gate == (256 * 784 * 64, nb)      # the pool's threshold sees the whole product
    assert not threads.blas_threaded(cg.program.steps)
    guard = cg.call_lock
    assert guard.single and guard.pacer is None and guard.lock is threads.LAUNCH_LOCK
    blas.BlasPacer.use(2)
    with guard:
        assert blas.BlasPacer._current == 1
    # rows and columns not divisible into blocks of POOL_GEMM_MIN_ROWS: one BLAS call
    (st,) = [s for s in _gemm_program(33, 784, 33).program.steps if s.kind in ("gemm", "bgemm")]
    assert not st.split and st.kind == "gemm"


@pytest.mark.skipif(settings.default_threads() < 2, reason="needs a pool of two workers")
@pytest.mark.parametrize("m, n, dtype", [(256, 64, np.float32), (96, 256, np.float32), (250, 64, np.float64),
                                         (64, 250, np.float64)])
@pytest.mark.parametrize("layout_a, layout_b", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
def test_split_gemms_match_numpy_for_every_operand_layout(monkeypatch, request, m, n, dtype, layout_a, layout_b):
    """Blocks of rows (n <= m: the shared right operand is the smaller) or of columns (n > m, where OpenBLAS has a
    column unit for the dtype: float32 has none here, so rows), with either operand a transposed view: every
    block's offsets right, against NumPy in float64, and the bits of one single-threaded call.  (These products are below
    the pool's threshold, which split GEMMs test per call: it is lowered here so their blocks run on the pool.)"""
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")
    from jitgrad.codegen.native import workpool
    from jitgrad.codegen.program import layout
    monkeypatch.setattr(layout, "POOL_GEMMS", True)
    prev = workpool.set_min_work(1 << 16)
    request.addfinalizer(lambda: workpool.set_min_work(*prev))
    k = 160
    rng = np.random.default_rng(m + 2 * n)
    a = rng.standard_normal((m, k) if layout_a == "N" else (k, m)).astype(dtype)
    b = rng.standard_normal((k, n) if layout_b == "N" else (n, k)).astype(dtype)
    op_a = (lambda t: t) if layout_a == "N" else (lambda t: t.T)
    op_b = (lambda t: t) if layout_b == "N" else (lambda t: t.T)
    f = jg.compile(lambda x, y: op_a(x) @ op_b(y), backend="numba")
    got = f(jg.tensor(a), jg.tensor(b)).numpy()
    np.testing.assert_allclose(got, op_a(a).astype(np.float64) @ op_b(b).astype(np.float64), rtol=2e-5, atol=2e-4)
    by_cols = n > m and blas.block_unit(dtype, False) is not None
    side, per = (n, m * k) if by_cols else (m, n * k)
    unit = blas.block_unit(dtype, not by_cols)
    if unit is None or side < 2 * blas.least_height(unit, per):
        pytest.skip("this BLAS has no unit to split these blocks by (or no two blocks over its small-matrix path)")
    launch, *rest = [x for x in f.launches(jg.tensor(a), jg.tensor(b)) if x.kind in ("gemm", "bgemm")]
    if launch.label == "matmul (BLAS)":
        # (a cut whose bits this BLAS does not keep is not made: SkylakeX's kernels, ``blas.blocks_exact``)
        h = max(blas.least_height(unit, per), -(-side // (2 * unit)) * unit)
        assert not blas.blocks_exact(dtype, not by_cols, m, k, n, blas.cut(side, h, per))
        pytest.skip("this BLAS does not keep one call's bits in these blocks")
    assert launch.parallel and launch.label == ("matmul (BLAS, columns on the pool)" if by_cols else
                                                "matmul (BLAS, rows on the pool)")
    assert rest == []                   # (the rows or columns left: the last block of the one launch)
    blas.BlasPacer.use(1)
    ref = np.empty((m, n), dtype)         # one single-threaded call (packing makes the operands' layout moot)
    aa, ta, lda = blas._raw_operand(np.ascontiguousarray(op_a(a)))
    bb, tb, ldb = blas._raw_operand(np.ascontiguousarray(op_b(b)))
    blas._gemm_rows(aa, ta, lda, bb, tb, ldb, ref, 0, m)
    assert got.tobytes() == ref.tobytes()


_FORK_IN_LAUNCH = """
import os, threading, time
from jitgrad.codegen.native import workpool
workpool.launch()
held, done = threading.Event(), threading.Event()
def launching():                # a thread of the parent inside launch() (holding the pool's lock) at the fork
    with workpool._lock:
        held.set()
        done.wait()
t = threading.Thread(target=launching)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    os._exit(0 if workpool.launch() >= 1 else 3)
done.set()
t.join()
for _ in range(300):
    got, status = os.waitpid(pid, os.WNOHANG)
    if got:
        print("child status", status)
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child hung")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_while_another_thread_launches_the_pool():
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", _FORK_IN_LAUNCH], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "child status 0" in r.stdout, r.stdout + r.stderr[-2000:]


_EAGER_GEMM_THREADS = """
import json
import numpy as np
import jitgrad as jg
from jitgrad.ir.ops import blas, blas_library
a = jg.tensor(np.ones((64, 64), np.float32))
b = jg.tensor(np.ones((64, 48), np.float32))
A = jg.tensor(np.ones((256, 784), np.float32))
B = jg.tensor(np.ones((784, 512), np.float32))
C = jg.tensor(np.ones((40, 784), np.float32))   # too few rows for two blocks: OpenBLAS threads it itself
assert blas.raw_gemm_ready()                    # loads the library
get = blas_library.thread_control()[0]
fn, one, zero = blas._raw_gemm(np.dtype(np.float32))
seen = []

def counted(*args):                             # the threads OpenBLAS may use for this very call
    seen.append(get())
    return fn(*args)
# (before the first product: a small product's signature function takes the routine when it is made, eager_gemm.py)
blas._GEMM[("raw", np.dtype(np.float32))] = (counted, one, zero)
blas.block_unit(np.float32)                     # (derived once per process, from probe products of its own)
calls = []
for x, y in ((a, b), (A, B), (a, b), (C, B), (A, B)):
    del seen[:]
    (x @ y).sum()
    calls.append(list(seen))
jg.set_num_threads(1)
for x, y in ((C, B), (A, B)):
    del seen[:]
    (x @ y).sum()
    calls.append(list(seen))
print(json.dumps({"calls": calls, "library": get(), "blocks": blas.STATS["gemm_blocks"],
                  "whole": blas.STATS["gemm_whole_one_thread"]}))
"""


def test_small_eager_gemms_run_on_one_blas_thread():
    """Threads counted, not timed: a small eager GEMM (below OpenBLAS's own threading threshold) runs with the
    library on one thread even after a large one ran on two; a large one split into blocks of rows runs them
    with OpenBLAS on one thread (its threads: the blocks'), one too thin to split on every OpenBLAS thread;
    ``set_num_threads(1)`` wins."""
    # (the blocks on the eager threads, whose calls the spy sees: ``test_pooled_gemm.py`` counts the pool's)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", NUMBA_NUM_THREADS="2", JITGRAD_POOLED_GEMM="0")
    env.pop("JITGRAD_BLAS_PACER", None)
    r = subprocess.run([sys.executable, "-c", _EAGER_GEMM_THREADS], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    calls = got["calls"]
    assert calls[0] == [1] and calls[2] == [1], got                 # small: one thread
    if blas.row_blocks(256, np.float32, 1) is not None:             # large: blocks (or one call while held), one
        # (the shape's first product also tries its cut once: ``blas.blocks_exact``, single-threaded calls too)
        assert set(calls[1]) == {1} and calls[4] in ([1, 1], [1]), got     # OpenBLAS thread each
        assert got["blocks"] + got["whole"] >= 2, got
    assert calls[3] == [2], got                                     # too thin to split: both (no pacer)
    assert calls[5] == [1] and calls[6] == [1] and got["library"] == 1, got     # torch.set_num_threads(1)


def test_eager_gemms_are_paced_per_size_class(monkeypatch):
    from jitgrad.ir.ops import blas
    monkeypatch.setattr(blas, "BLAS_PACER", True)
    small = blas.eager_threads(64, 48, 64)
    assert small is blas.eager_threads(8, 8, 8) and not isinstance(small, blas.BlasPacer)
    big = blas.eager_threads(256, 512, 784)
    assert isinstance(big, blas.BlasPacer) and big is blas.eager_threads(256, 512, 784)
    assert blas.eager_threads(128, 512, 784) is not big                 # half the work: another class
    assert blas.eager_threads(300, 500, 784) is big and big.work == 300 * 500 * 784    # a new shape, same class
    monkeypatch.setattr(blas, "BLAS_PACER", False)
    assert not isinstance(blas.eager_threads(256, 512, 784), blas.BlasPacer)


def test_a_contended_gemm_makes_new_shapes_of_its_class_single_threaded(monkeypatch):
    """Variable lengths: each call a new shape.  Contention seen on one shape holds the next shapes of its size
    class on one thread (timed per multiply-add, so a larger shape of the class is not taken for contention)."""
    from jitgrad.ir.ops import blas
    monkeypatch.setattr(blas, "BLAS_PACER", True)
    monkeypatch.setattr(blas, "_EAGER_PACERS", {})
    clock = [0.0]
    monkeypatch.setattr(blas.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(blas.BlasPacer, "use", classmethod(lambda cls, n: None))

    def call(m, seconds):
        p = blas.eager_threads(m, 512, 512)
        with p:
            clock[0] += seconds
        return p.n
    assert call(600, 1.0) > 1 or blas.BlasPacer._max == 1
    if blas.BlasPacer._max == 1:
        pytest.skip("OpenBLAS runs one thread here")
    assert call(700, 700 / 600 * 1.1) > 1          # a bigger shape, the same rate: no contention
    assert call(650, 10.0) > 1                     # contended (many times slower per multiply-add)
    assert call(610, 1.0) == 1                     # a new shape of the class: one thread
