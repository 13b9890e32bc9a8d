"""How many threads a process runs (``ir/settings.default_threads``, ``set_num_threads``): counted in fresh
processes, never timed.  A user's count holds at run time (a graph compiled for the pool keeps off it at
``set_num_threads(1)``), ``OMP_NUM_THREADS`` sets the default as it does torch's, and the processes of one job on a
machine (``mpiexec -n``, ``torchrun``) share its cores instead of each taking all of them."""
import json
import os
import subprocess
import sys

import pytest

from jitgrad.ir import settings

_COUNTS = """
import json, os, numpy as np, jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir.ops import blas
f = jg.compile(lambda a: (a * 2.0).tanh().sum(), backend="numba", background=False)
x = jg.tensor(np.linspace(-1, 1, 1 << 20).astype(np.float32))
f(x)
r0 = workpool.rounds()
f(x)
print(json.dumps({"threads": jg.get_num_threads(), "pool": workpool.threads(), "blas": blas.all_threads(),
                  "rounds": workpool.rounds() - r0, "workers": workpool.queues()}))
"""
_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
         "JITGRAD_POOL", "JITGRAD_PRIVATE_POOL") + settings.LOCAL_PROCESS_COUNTS


def _counts(**env):
    e = {k: v for k, v in os.environ.items() if k not in _VARS}
    e.update(JITGRAD_BACKGROUND_COMPILE="0", **env)
    r = subprocess.run([sys.executable, "-c", _COUNTS], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _cores():
    return len(os.sched_getaffinity(0))


def _unbound():
    return _cores() == os.cpu_count()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux's affinity mask")
def test_omp_num_threads_sets_the_default_count_as_for_torch():
    """``OMP_NUM_THREADS`` (what torchrun and batch schedulers set per process): the intra-op count, the pool's
    size and OpenBLAS's count; at 1 a parallel-capable loop starts no worker and no round.  At most the cores;
    ``NUMBA_NUM_THREADS`` (jitgrad's own knob) wins."""
    one = _counts(OMP_NUM_THREADS="1")
    assert one == {"threads": 1, "pool": 1, "blas": 1, "rounds": 0, "workers": 0}, one      # no worker started
    assert _counts(OMP_NUM_THREADS="4096")["threads"] == _cores()
    assert _counts(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="2")["threads"] == 2
    assert _counts(OMP_NUM_THREADS="not a count")["threads"] == settings.core_share()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux's affinity mask")
@pytest.mark.parametrize("launcher", settings.LOCAL_PROCESS_COUNTS)
def test_the_processes_of_one_job_share_the_cores(launcher):
    """Two processes of one job on this machine (the launcher's variable says so; ``mpiexec -n 2`` sets MPICH's)
    each take half the cores, pool and OpenBLAS alike: not every core each, which on a 2-core machine is four
    threads, each pool spinning for a core the other process holds.  A process its launcher bound to cores of its
    own keeps them; OpenBLAS's own variable still sets its count."""
    half = _counts(**{launcher: "2"})
    want = max(1, _cores() // 2) if _unbound() else _cores()
    assert half["threads"] == half["pool"] == half["blas"] == want, half
    if want == 1:
        assert half["rounds"] == half["workers"] == 0, half
    assert _counts(**{launcher: "2", "OPENBLAS_NUM_THREADS": "2"})["blas"] == 2
    assert _counts(**{launcher: "1"})["threads"] == _cores()


def test_mpiexec_ranks_share_the_cores():
    """The real launcher: ``mpiexec -n 2`` (MPICH's, beside this Python), no thread variable set."""
    pytest.importorskip("mpi4py")
    from jitgrad.distributed.run import find_mpiexec
    try:
        mpiexec = find_mpiexec()
    except SystemExit:
        pytest.skip("no mpiexec")
    e = {k: v for k, v in os.environ.items() if k not in _VARS}
    # (one write per rank: the pieces of two ranks' prints interleaved, "nn 1" then " 1")
    probe = "import os, jitgrad as jg; os.write(1, f'n {jg.get_num_threads()}\\n'.encode())"
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", probe], env=e, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = sorted(int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("n "))
    want = max(1, _cores() // 2) if _unbound() else _cores()
    assert got == [want, want], r.stdout


_LATER_ONE = """
import json, numpy as np, jitgrad as jg
from jitgrad.codegen.native import workpool
rng = np.random.default_rng(0)
x = jg.tensor(rng.standard_normal((2048, 256)).astype(np.float32))
w = jg.tensor(rng.standard_normal((256, 256)).astype(np.float32) / 16)
# a GEMM big enough to split between the workers, a loop and a row reduction over 2^19 elements: all gated launches
f = jg.compile(lambda x, w: ((x @ w).tanh() * 2.0 + x).softmax(-1).sum(0), backend="numba", background=False)
out = {}
for threads in (2, 1, 2):
    jg.set_num_threads(threads)
    f(x, w)
    pool = workpool.spinning()
    r0, s0 = workpool.rounds(), pool.stats()
    got = [f(x, w).numpy().tobytes().hex() for _ in range(3)]
    s1 = pool.stats()
    out.setdefault(str(threads), []).append({
        "rounds": workpool.rounds() - r0, "worker_wakes": s1["worker_wakes"] - s0["worker_wakes"],
        "spins": s1["spins"] - s0["spins"], "bits": sorted(set(got)),
        "parallel": sum(bool(l.parallel) for l in f.launches(x, w))})
print(json.dumps(out))
"""


def test_set_num_threads_1_keeps_a_graph_built_for_the_pool_off_it():
    """Counted: a graph compiled at two threads, then ``set_num_threads(1)`` (torch's intra-op count, which a user
    lowers to share the cores with other processes): its next calls start no pool round and wake no worker (the
    workers spin for nothing either), and its launch records say so; the results keep their bits (the chunks the
    pool would have run, on the calling thread).  Back at two threads the same launches take the pool again."""
    env = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS="2")
    env.pop("JITGRAD_POOL", None)
    env.pop("JITGRAD_PRIVATE_POOL", None)
    r = subprocess.run([sys.executable, "-c", _LATER_ONE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    (one,), (two, again) = out["1"], out["2"]
    assert two["rounds"] >= 3 and two["parallel"] >= 2, two     # the GEMM's blocks and the rows pooled (one round)
    assert one["rounds"] == one["worker_wakes"] == one["spins"] == one["parallel"] == 0, one
    assert again["rounds"] == two["rounds"] and again["parallel"] == two["parallel"], again
    assert len(two["bits"]) == 1 and one["bits"] == two["bits"] == again["bits"]




_FEWER = """
import json, os, threading, numpy as np, jitgrad as jg
from jitgrad.codegen.native import workpool
main = threading.get_native_id()


def on_cpu():       # each other thread's time on a core so far (ns): a parked worker's never moves
    return {t: int(open(f"/proc/self/task/{t}/schedstat").read().split()[0]) for t in os.listdir("/proc/self/task")
            if int(t) != main}


workpool.set_min_work(0, 0)         # every call of the loop a pool round
x = jg.tensor(np.linspace(-1, 1, 1 << 18).astype(np.float32))
f = jg.compile(lambda a: ((a * 2.0).tanh() * a).exp(), backend="numba", background=False)
f(x)
out = []
for n in (3, 2, 3):
    jg.set_num_threads(n)
    for _ in range(3):
        f(x)        # (a worker parks at the first round after the count fell)
    pool = workpool.spinning()
    s0, c0, r0 = pool.stats(), on_cpu(), workpool.rounds()
    bits = sorted({f(x).numpy().tobytes().hex() for _ in range(20)})
    s1, c1 = pool.stats(), on_cpu()
    out.append({"n": n, "rounds": workpool.rounds() - r0, "ran": sum(c1[t] > c0.get(t, c1[t]) for t in c1),
                "parks": s1["parks"] - s0["parks"], "active": pool.active(), "workers": pool.workers(),
                "bits": bits, "threads": max(la.threads for la in f.launches(x))})
print(json.dumps(out))
"""


def test_set_num_threads_below_the_pool_parks_the_workers_it_leaves_out():
    """Counted: a pool of three threads (two workers and the caller), then ``set_num_threads(2)``: one worker
    takes part in the rounds and the other sleeps through them (its time on a core does not move, it parked
    once), every chunk still runs (the calling thread takes the parked worker's share), the launch records say
    two threads, and the bits are the same; back at three both workers take part again."""
    e = dict(os.environ, JITGRAD_BACKGROUND_COMPILE="0", NUMBA_NUM_THREADS="3", JITGRAD_POOL_BUSY_HOLD="0")
    for k in ("JITGRAD_POOL", "JITGRAD_PRIVATE_POOL"):
        e.pop(k, None)
    r = subprocess.run([sys.executable, "-c", _FEWER], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    three, two, again = json.loads(r.stdout.strip().splitlines()[-1])
    assert three["workers"] == 2 and three["active"] == 2 and three["rounds"] == 20 and three["ran"] == 2, three
    assert three["threads"] == 3
    assert two["active"] == 1 and two["rounds"] == 20 and two["ran"] == 1 and two["parks"] == 0, two
    assert two["threads"] == 2
    assert again["active"] == 2 and again["rounds"] == 20 and again["ran"] == 2 and again["threads"] == 3, again
    assert len(three["bits"]) == 1 and three["bits"] == two["bits"] == again["bits"]
