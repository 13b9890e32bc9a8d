"""Bit-identical results at a fixed thread count (issue 32, deliverable 4), counted and compared, never timed.

A configuration (the pool's workers, OpenBLAS's threads) gives the same bits call after call and run after run,
whatever the machine's load: neither pacer may change what is computed.  Each child process below fixes a
configuration, drives both pacers through scripted clocks so that they see contention and quiet in turns (the
BLAS pacer's ``time.perf_counter``, the pool's kernel clock ``workpool.CLOCK_ADDRESS``, the eager split's clock),
and hashes every output of many calls: compiled GEMMs that OpenBLAS threads itself (one pool worker, OpenBLAS on
two threads: the case where the bits used to move, with OpenBLAS's thread count switched by the BLAS pacer), split
GEMMs, a full sum (the pool's partial sums), an optimiser update as multi-tensor batches, and in eager mode the
GEMMs (SciPy's OpenBLAS, and NumPy's for small and batched products), the sum, SGD's multi-tensor update split
between threads and AdamW's native pass in pieces on the pool.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitgrad.ir import settings

REPO = Path(__file__).resolve().parents[1]

_CHILD = r'''
import ctypes, hashlib, json, os, sys
import numpy as np
from jitgrad.codegen.native import workpool, pool_pacer
from jitgrad.ir import eager_threads
from jitgrad.ir.ops import blas, blas_library

# the pool's kernel clock, scripted: each read advances it by TICK ns (a pooled launch reads it twice)
NOW, TICK = [0], [1000]


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64))
def clock(cid, ts):
    NOW[0] += TICK[0]
    ts[0], ts[1] = divmod(NOW[0], 10 ** 9)
    return 0


workpool.CLOCK_ADDRESS = ctypes.cast(clock, ctypes.c_void_p).value
pool_pacer.POOL_PACER = True
pool_pacer.PoolPacer.HOLD = 2
for name, value in (("STREAK", 1), ("WARMUP", 1)):     # judge from the first calls on (the scripted trace is short)
    setattr(pool_pacer.PoolPacer, name, value)
blas.BlasPacer.HOLD = 2


class FakeTime:                 # the BLAS pacers' clock: each read advances it by SECONDS
    now, seconds = 0.0, 1.0

    @classmethod
    def perf_counter(cls):
        cls.now += cls.seconds
        return cls.now


class EagerClock:               # the eager split's clock: its third read of a call (the last worker done) late
    now, reads, late = 0.0, 0, 0.0

    @classmethod
    def perf_counter(cls):
        cls.reads += 1
        cls.now += 1e-3 + (cls.late if cls.reads % 3 == 0 else 0.0)
        return cls.now


blas.time = FakeTime
eager_threads.time = EagerClock
import jitgrad as jg
workpool.set_min_work(1 << 12, 1 << 8)      # small arrays take the pool (every gated launch reaches the threshold)
get_threads = blas_library.thread_control()[0] if blas_library.thread_control() else (lambda: 1)

rng = np.random.default_rng(0)
x = jg.tensor(rng.standard_normal((256, 784)).astype(np.float32))
w = jg.tensor(rng.standard_normal((784, 512)).astype(np.float32) * 0.05)
z = jg.tensor(rng.standard_normal((512, 512)).astype(np.float32))
params = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s).astype(np.float32))) for s in
          [(64, 32), (32,), (48, 16), (128,), (90, 40), (200,)] * 3]
opt = jg.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
# an eager multi-tensor update split between threads by parameter (SGD's NumPy rule: eager_threads.py), and AdamW's
# native pass in pieces on the pool (optim/adam_native.py)
eager_params = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s).astype(np.float32))) for s in [(256, 256)] * 4]
eager_opt = jg.optim.SGD(eager_params, lr=1e-2, momentum=0.9, weight_decay=0.1)
adam_params = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s).astype(np.float32))) for s in [(300, 200)] * 3]
adam_opt = jg.optim.AdamW(adam_params, lr=1e-2, weight_decay=0.1)


def step(x, w, z):
    loss = sum(((p * 0.7).sin() * p).sum() for p in params)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return jg.tanh(x @ w), (z * z + 1.0).sum(), loss.detach()


f = jg.compile(step, backend="numba", background=False)


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


# contended and quiet in turns, for both pacers: (pool tick ns, BLAS seconds per clock read)
script = [(1000, 1.0), (1000, 1.0), (5000, 5.0), (2000, 2.0), (2000, 2.0), (5000, 5.0)] + [(2000, 2.0)] * 4 + \
         [(1000, 1.0)] * 3 + [(5000, 5.0), (2000, 2.0), (2000, 2.0), (1000, 1.0), (1000, 1.0)]
if sys.argv[1] == "steady":     # nothing contended: the pacers never move
    script = [(1000, 1.0)] * len(script)
    # (the pool's eager GEMM blocks read a native clock, not these: their notes to the pacer are dropped here)
    eager_threads.note_split = lambda own, whole, allowed=None: None
compiled, eager, blas_threads, rounds, losses, eager_updates = [], [], [], [], [], []
for pool_tick, blas_seconds in script * 2:
    TICK[0], FakeTime.seconds = pool_tick, blas_seconds
    EagerClock.late = 1.0 if pool_tick > 1000 else 0.0
    r0 = workpool.rounds()
    out = f(x, w, z)
    rounds.append(workpool.rounds() - r0)
    blas_threads.append(get_threads())
    compiled.append([digest(o.numpy()) for o in out[:2]])
    losses.append(digest(out[2].numpy()))
    sum(((p * 0.7).sin() * p).sum() for p in eager_params + adam_params).backward()
    eager_opt.step()
    eager_opt.zero_grad(set_to_none=True)
    adam_opt.step()
    adam_opt.zero_grad(set_to_none=True)
    eager_updates.append(digest(np.concatenate([p.detach().numpy().ravel() for p in eager_params + adam_params])))
    # eager: the GEMM on SciPy's OpenBLAS, a small one and a batched one on NumPy's, the sum on the pool
    eager.append([digest((x @ w).numpy()), digest((x[:20, :30] @ w[:30, :10]).numpy()),
                  digest((z.reshape(8, 64, 512) @ z.reshape(8, 512, 64)).numpy()),
                  digest((z * z + 1.0).sum().numpy()),
                  # attention's stack of small products: split over its leading axis (stacked_gemm.matmul)
                  digest((z.reshape(16, 4, 64, 64) @ (z * 0.5).reshape(16, 4, 64, 64).transpose(-2, -1)).numpy())])
# the parameters after every update: the run's end state (compared between runs by the parent)
final = digest(np.concatenate([p.detach().numpy().ravel() for p in params]))
print("RESULT " + json.dumps({"compiled": compiled, "eager": eager, "blas_threads": blas_threads, "rounds": rounds,
                              "final": final, "workers": workpool.threads(), "losses": losses,
                              "eager_updates": eager_updates, "eager_contended": eager_threads.STATS["contended"],
                              "pooled_kinds": sorted({la.kind for la in f.launches(x, w, z) if la.parallel}),
                              "blas_backoffs": blas.STATS["blas_backoffs"],
                              "pool_held": pool_pacer.STATS["held_calls"]}))
'''


_RUNS: dict = {}


def _child(workers: int, blas_threads: int, run: int = 0, script: str = "switch", **env_) -> dict:
    """The child's hashes and counts for one configuration (``run``: a second process of the same one;
    ``script``: ``switch``, the clocks show contention and quiet in turns, or ``steady``, never contended)."""
    key = (workers, blas_threads, run, script, tuple(sorted(env_.items())))
    if key in _RUNS:
        return _RUNS[key]
    env = dict(os.environ, PYTHONPATH=str(REPO), NUMBA_NUM_THREADS=str(workers),
               OPENBLAS_NUM_THREADS=str(blas_threads), JITGRAD_BACKGROUND_COMPILE="0")
    env.pop("JITGRAD_BLAS_PACER", None)
    env.update(env_)
    r = subprocess.run([sys.executable, "-c", _CHILD, script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    out = _RUNS[key] = json.loads(line[7:])
    return out


def _needs(*counts):
    if max(counts) > max(1, settings.default_threads()):
        pytest.skip("needs two cores")


@pytest.mark.parametrize("workers, blas_threads", [(1, 1), (1, 2), (2, 2)])
def test_a_fixed_configuration_gives_the_same_bits_every_call_whatever_the_pacers_see(workers, blas_threads):
    """Every call's outputs hash the same, compiled and eager, while the scripted clocks show contention and
    quiet in turns: OpenBLAS runs every call on the configuration's count (one for a graph whose big GEMMs are
    split on the pool, else every thread), and the pool's pacer, which does move (held calls launch nothing on the
    pool), runs the chunks the pool would."""
    _needs(workers, blas_threads)
    out = _child(workers, blas_threads)
    assert len({tuple(c) for c in out["compiled"]}) == 1, out["compiled"]
    assert len({tuple(e) for e in out["eager"]}) == 1, out["eager"]
    assert out["workers"] == workers and out["blas_backoffs"] == 0
    assert set(out["blas_threads"]) == {1 if workers > 1 else blas_threads}
    if workers > 1:                 # the pool's pacer held calls off the pool, and let others on it
        assert out["pool_held"] > 0 and 0 in out["rounds"] and max(out["rounds"]) > 0
    else:
        assert out["pool_held"] == 0 and set(out["rounds"]) == {0}


@pytest.mark.parametrize("workers, blas_threads", [(1, 2), (2, 2)])
def test_a_fixed_configuration_gives_the_same_bits_run_to_run(workers, blas_threads):
    """Two processes whose pacers switch, and one whose clocks never show contention: the same bits, for fixed
    inputs and for state updated every call (the compiled step's losses, parameters updated by multi-tensor
    batches on the pool or held on the calling thread, and an eager update split between threads or not)."""
    _needs(workers, blas_threads)
    a, b = _child(workers, blas_threads), _child(workers, blas_threads, run=1)
    # (with one worker nothing the default policy runs moves with the clocks: a steady run would be the same run)
    steady = _child(workers, blas_threads, script="steady") if workers > 1 else b
    for other in (b, steady):
        assert a["compiled"][0] == other["compiled"][0] and a["eager"][0] == other["eager"][0]
        assert a["losses"] == other["losses"] and a["eager_updates"] == other["eager_updates"]
        assert a["final"] == other["final"]
    if workers > 1:         # what moved: held calls, the eager split gone serial; what ran on the pool
        assert steady["pool_held"] == 0 and steady["eager_contended"] == 0
        assert a["pool_held"] > 0 and a["eager_contended"] > 0
        assert {"batch", "bgemm", "fused"} <= set(a["pooled_kinds"]), a["pooled_kinds"]


def test_the_optimiser_update_has_the_same_bits_at_one_and_two_workers():
    """The multi-tensor update (loop batches, each element computed by the same instructions in whichever chunk
    it lands) and its gradients: nothing summed in chunks, so the parameters after every update agree bit for
    bit between configurations."""
    _needs(2)
    assert len({_child(w, t)["final"] for w, t in [(1, 1), (1, 2), (2, 2)]}) == 1


def test_the_blas_pacer_makes_bits_follow_openblas_thread_count():
    """``JITGRAD_BLAS_PACER=1``, the busy-machine trade: the same scripted clock moves OpenBLAS between one and two
    threads, and then the bits may follow the count, but only the count (one hash per count)."""
    _needs(2)
    out = _child(1, 2, JITGRAD_BLAS_PACER="1")
    assert out["blas_backoffs"] > 0 and set(out["blas_threads"]) == {1, 2}
    per_count = {(n, tuple(c)) for n, c in zip(out["blas_threads"], out["compiled"])}
    assert sorted(n for n, _ in per_count) == [1, 2]     # (the two hashes differ on this VM's Haswell kernels)


def test_eager_big_gemm_bits_do_not_depend_on_the_thread_count():
    """An eager GEMM big enough to split (``x @ w``, 256 rows) runs as blocks of rows on single-threaded OpenBLAS,
    or as one single-threaded call while held or at one thread: one hash at one and two threads, whatever
    OpenBLAS's own count (``ir/ops/blas.row_blocks``)."""
    _needs(2)
    from jitgrad.ir.ops import blas
    import numpy as np
    if blas.row_blocks(256, np.float32, 1) is None:
        pytest.skip("this BLAS has no row unit for float32: its big GEMMs are not split")
    assert len({_child(w, t)["eager"][0][0] for w, t in [(1, 1), (1, 2), (2, 2)]}) == 1


def test_eager_stack_of_small_products_bits_do_not_depend_on_the_thread_count():
    """Attention's (batch, head) products in eager mode, runs of their matrices on the pool (or all of them on the
    calling thread: at one thread, while held, or with no pool at all; the same calls): one hash at one and two
    threads."""
    _needs(2)
    assert len({_child(w, t)["eager"][0][4] for w, t in [(1, 1), (1, 2), (2, 2)]}) == 1


def test_compiled_split_gemm_bits_do_not_depend_on_the_worker_count():
    """The compiled ``x @ w`` (256 rows): split on the pool at two workers (blocks aligned to OpenBLAS's row
    unit), one single-threaded call at one worker and one OpenBLAS thread: one hash."""
    _needs(2)
    from jitgrad.ir.ops import blas
    import numpy as np
    if blas.row_blocks(256, np.float32, 1) is None:
        pytest.skip("this BLAS has no row unit for float32: its big GEMMs are not split")
    one, two = _child(1, 1), _child(2, 2)
    assert one["compiled"][0][0] == two["compiled"][0][0]
