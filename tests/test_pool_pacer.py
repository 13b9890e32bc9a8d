"""The worker pool's pacer (``codegen/native/pool_pacer.py``): counted, never timed.

The pacer is driven through what it reads: a scripted ``read`` (its policy alone), or, in a fresh process, a
scripted clock the kernels call in place of ``clock_gettime`` (``workpool.CLOCK_ADDRESS``), so contention is a
number the test chooses.  What moves is counted: pool rounds, clock reads, held calls.  The test suite runs with
the pacer off (``conftest.py``: its real clock would move the rounds other tests count on a busy machine).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jitgrad.codegen.native import pool_pacer, threads, workpool
from jitgrad.ir import settings
from thread_calls import call_from_threads

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def pace():
    """The pool's pace restored after a test that moves it."""
    prev = workpool.pace()
    yield
    workpool.set_pace(prev)


@pytest.fixture
def eager_judge(monkeypatch):
    """A pacer that judges from its first pooled call on and holds at the first slow one (the policy's steps one
    at a time; the warm-up and the streak have tests of their own)."""
    monkeypatch.setattr(pool_pacer.PoolPacer, "WARMUP", 1)
    monkeypatch.setattr(pool_pacer.PoolPacer, "STREAK", 1)


class Script:
    """A pacer's ``read``: each call of the pacer adds ``work`` units at ``rate`` ns each, to the pool's counters
    or (held) to the calling thread's."""

    def __init__(self):
        self.totals = {False: [0, 0], True: [0, 0]}
        self.rate, self.work = 1.0, 1000
        self.caller = None              # the held calls' rate, when not ``rate``
        self.reads = 0

    def __call__(self, held):
        self.reads += 1
        t = self.totals[held]
        if self.reads % 2 == 0:         # the second read of a call: the call ran its launches
            rate = self.caller if held and self.caller is not None else self.rate
            t[0] += int(rate * self.work)
            t[1] += self.work
        return tuple(t)


def _call(p, script, rate):
    script.rate = rate
    with p:
        held = workpool.pace() == workpool.PACE_HELD
    assert workpool.pace() == workpool.PACE_TIMED       # restored at the call's end: eager kernels see no hold
    return held


def test_contention_holds_the_pool_for_a_number_of_calls_that_doubles_then_quiet_restores(pace, eager_judge,
                                                                                            monkeypatch):
    monkeypatch.setattr(pool_pacer.PoolPacer, "HOLD", 3)
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=2)
    before = dict(pool_pacer.STATS)
    assert not _call(p, script, 1.0)                    # the first pooled call: the reference
    assert not _call(p, script, 1.4)                    # within SLOW of the reference: quiet
    assert not _call(p, script, 3.0)                    # contended: the next HOLD calls stay off the pool
    assert [_call(p, script, 2.0) for _ in range(3)] == [True] * 3
    assert p.caller() == 2.0                            # the calling thread's rate, measured by the held calls
    assert not _call(p, script, 3.0)                    # the retry: still contended, the hold doubles
    assert [_call(p, script, 2.0) for _ in range(6)] == [True] * 6
    assert not _call(p, script, 3.0)
    assert [_call(p, script, 2.0) for _ in range(12)] == [True] * 12
    assert not _call(p, script, 1.1)                    # the retry is quiet: the pool stays, the hold starts over
    assert not _call(p, script, 1.1) and p.hold == 3
    assert not _call(p, script, 3.0)
    assert [_call(p, script, 2.0) for _ in range(3)] == [True] * 3 and not _call(p, script, 1.0)
    assert pool_pacer.STATS["pool_backoffs"] - before["pool_backoffs"] == 4
    assert pool_pacer.STATS["held_calls"] - before["held_calls"] == 24


def test_the_hold_stops_doubling_at_its_most(pace, eager_judge, monkeypatch):
    monkeypatch.setattr(pool_pacer.PoolPacer, "HOLD", 2)
    monkeypatch.setattr(pool_pacer.PoolPacer, "MAX_HOLD", 4)
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=2)
    _call(p, script, 1.0)
    holds = []
    for _ in range(4):
        assert not _call(p, script, 5.0)        # the first contended call, then each retry: contended again
        n = 0
        while p.left > 0:
            assert _call(p, script, 2.0)
            n += 1
        holds.append(n)
    assert holds == [2, 4, 4, 4]


def _trace(p, script, pooled, caller=None):
    """Run one call per rate of ``pooled`` (``caller``: the rates the held calls run at); which were held."""
    script.caller = caller
    return [_call(p, script, r) for r in pooled]


def _quiet_rates(rng, n, spikes=0.0):
    """A quiet VM's pooled rates: each call 1-2x the fastest (log-uniform, so neighbours differ by up to 2x), and
    with probability ``spikes`` a call that lost a scheduler slice (3-6x)."""
    r = np.exp(rng.uniform(0.0, np.log(2.0), n))
    hit = rng.random(n) < spikes
    r[hit] = rng.uniform(3.0, 6.0, int(hit.sum()))
    return r.tolist()


def test_a_quiet_machines_jitter_holds_nothing(pace):
    """400 calls of a quiet VM (B1's count): rates 1-2x from call to call and one call in twenty a scheduler
    slice late hold (almost) nothing: the reference is the recent median, and a slow call alone, or a few, is no
    contention.  (Against the single best call, as the pacer first judged, half of these calls were 1.5x it.)
    Even a noisier VM (rates 1-2.5x) holds off the pool at most now and then."""
    for workers in (2, 16):
        for seed in range(10):
            script = Script()
            p = pool_pacer.PoolPacer(read=script, workers=workers)
            rates = _quiet_rates(np.random.default_rng(seed), 400, spikes=0.05)
            held = _trace(p, script, rates)
            assert sum(held) <= 3 and p.held_calls == sum(held)
            assert sum(r > 1.5 * min(rates) for r in rates) > 150      # the old reference's misfires
    held = 0
    for seed in range(10):
        script = Script()
        p = pool_pacer.PoolPacer(read=script, workers=2)
        held += sum(_trace(p, script, np.exp(np.random.default_rng(seed).uniform(0, np.log(2.5), 400)).tolist()))
    assert held <= 2 * p.HOLD


def test_a_sustained_busy_core_holds_until_it_is_quiet_again(pace):
    """Two workers; after a quiet start one core is taken for 300 calls: pooled calls run 3-5x (every one waits
    for the worker that shares its core), the calling thread 1.8-2.4x.  The pacer holds almost all of them (a
    retry now and then, each slow, so holds double), and a quiet call after the hogs leave brings the pool back."""
    rng = np.random.default_rng(3)
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=2)
    assert not any(_trace(p, script, _quiet_rates(rng, 40)))
    script.caller = None
    busy = rng.uniform(3.0, 5.0, 300).tolist()
    held = []
    for r in busy:
        script.caller = float(rng.uniform(1.8, 2.4))
        held.append(_call(p, script, r))
    assert held[:p.STREAK] == [False] * p.STREAK       # it takes a run of slow calls to hold
    assert sum(held) >= 280 and p.caller() == pytest.approx(2.1, abs=0.3)
    # quiet again: the hold in force runs out, the retry is quiet and the pool stays
    quiet = _quiet_rates(rng, 1100)
    held = _trace(p, script, quiet)
    back = held.index(False)
    assert not any(held[back:]) and p.hold == p.HOLD


def test_a_slow_call_alone_or_a_short_run_of_them_holds_nothing(pace):
    """Hysteresis: ``STREAK`` slow calls in a row start a hold, fewer do not; a quiet call in between starts the
    count again; and nothing is judged before ``WARMUP`` pooled calls gave a reference."""
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=2)
    assert not any(_trace(p, script, [9.0] + [1.0] * (p.WARMUP - 1)))    # warm-up: a slow first call included
    slow = [4.0] * (p.STREAK - 1)
    assert not any(_trace(p, script, (slow + [1.0] * 6) * 3)) and p.left == 0
    assert not any(_trace(p, script, [4.0] * p.STREAK)) and p.left == p.HOLD
    # the short runs were jitter: in the reference; the run that held was not
    assert list(p.pooled).count(4.0) == 3 * (p.STREAK - 1) and p.reference() == 1.0


def test_a_pool_slower_than_its_reference_but_faster_than_one_thread_is_kept(pace, eager_judge):
    """Sixteen workers, one core taken: a pooled launch 2x its reference still beats the calling thread alone
    (its rate assumed EFFICIENCY x the workers x the reference until measured), so the pool stays; with two
    workers the same slowdown is past what one thread would take."""
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=16)
    _call(p, script, 1.0)
    assert not any(_call(p, script, 2.0) for _ in range(10)) and p.left == 0
    script = Script()
    q = pool_pacer.PoolPacer(read=script, workers=2)
    _call(q, script, 1.0)
    _call(q, script, 2.0)
    assert q.left == q.HOLD and _call(q, script, 2.0)
    # once held calls measured the calling thread, it is what a pool slower than its reference
    # is compared with: one faster than the calling thread stays, one slower than both is held off again
    q.left, q.hold = 0, q.HOLD
    _trace(q, script, [1.0] * 5)                       # a reference of quiet calls
    q.serial.clear()
    q.serial.append(2.5)
    assert not _call(q, script, 2.0) and q.left == 0
    q.serial.clear()
    q.serial.append(1.8)
    assert not _call(q, script, 2.0) and q.left == q.HOLD


def test_calls_without_pooled_work_and_failed_calls_judge_nothing(pace, eager_judge):
    script = Script()
    p = pool_pacer.PoolPacer(read=script, workers=2)
    _call(p, script, 1.0)
    script.work = 0                 # a call whose gated launches all stayed below the threshold
    assert not _call(p, script, 50.0) and p.left == 0
    script.work = 1000
    script.rate = 50.0
    with pytest.raises(ValueError):
        with p:
            raise ValueError("a step failed")
    assert p.left == 0 and p.reference() == 1.0 and workpool.pace() == workpool.PACE_TIMED


def test_the_knob_turns_the_pacer_off(monkeypatch):
    monkeypatch.setattr(pool_pacer, "POOL_PACER", False)
    assert pool_pacer.pacer() is None
    assert threads.call_guard(True, False, paced=True).pool_pacer is None
    monkeypatch.setattr(pool_pacer, "POOL_PACER", True)
    assert isinstance(threads.call_guard(True, False, paced=True).pool_pacer, pool_pacer.PoolPacer)
    # no gated launch, no pacer: nothing to hold off the pool
    assert threads.call_guard(True, False, paced=False).pool_pacer is None
    assert threads.call_guard(False, True) is None or threads.call_guard(False, True).pool_pacer is None


@pytest.mark.skipif(settings.default_threads() < 2, reason="the pool needs two workers")
def test_calls_from_two_threads_share_one_pacer_under_the_launch_lock(pace, eager_judge, monkeypatch):
    """Two Python threads calling one paced graph: the pacer's reads, judgements and the pool's pace all happen
    inside the launch lock, so the counts are those of one thread making every call, and every result has the
    same bits."""
    import jitgrad as jg
    from jitgrad.jit.graph_code import compiled_graph
    monkeypatch.setattr(pool_pacer.PoolPacer, "HOLD", 3)
    z = jg.tensor(np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32))
    f = jg.compile(lambda z: (z * z + 1.0).sum(), backend="numba")       # one gated launch over 2^20 elements
    want = f(z).numpy().tobytes()
    (entries,) = f._cache.values()
    guard = compiled_graph(entries[0].graph, entries[0].gf.writes).call_lock
    script = Script()
    script.rate, script.caller = 3.0, 2.0
    script.totals[False] = [1000, 1000]     # as if one quiet pooled call had been seen: the reference is 1.0
    p = pool_pacer.PoolPacer(read=script, workers=2)
    p.pooled.append(1.0)
    monkeypatch.setattr(guard, "pool_pacer", p)
    rounds = workpool.rounds()
    got = call_from_threads(lambda: f(z).numpy().tobytes(), 2, 20)
    assert len(got) == 40 and set(got) == {want}
    # every pooled call is contended (3x): pooled 1, held 3, pooled 1, held 6, pooled 1, held 12, pooled 1, held 15
    assert workpool.rounds() - rounds == 4
    assert p.left == 24 - 15 and p.hold == 48


# ---- in a fresh process: the kernels' own clock, scripted --------------------------------------------------------
_CHILD = r'''
import ctypes, hashlib, json, sys
import numpy as np
from jitgrad.codegen.native import workpool, pool_pacer
READS, NOW, TICK, HELD_TICK = [0], [0], [1000], [None]


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64))
def clock(cid, ts):             # the kernels' clock: each read advances it by TICK ns (HELD_TICK in a held call)
    READS[0] += 1
    held = HELD_TICK[0] is not None and workpool.pace() == workpool.PACE_HELD
    NOW[0] += HELD_TICK[0] if held else TICK[0]
    ts[0], ts[1] = divmod(NOW[0], 10 ** 9)
    return 0


workpool.CLOCK_ADDRESS = ctypes.cast(clock, ctypes.c_void_p).value
pool_pacer.POOL_PACER = True
DEFAULTS = {k: getattr(pool_pacer.PoolPacer, k) for k in ("HOLD", "WARMUP", "STREAK")}
pool_pacer.PoolPacer.HOLD = 2
pool_pacer.PoolPacer.WARMUP = pool_pacer.PoolPacer.STREAK = 1     # judge from the first calls, hold at the first slow
import jitgrad as jg
from jitgrad.jit.graph_code import compiled_graph

rng = np.random.default_rng(0)
x = jg.tensor(rng.standard_normal((256, 512)).astype(np.float32))
w = jg.tensor(rng.standard_normal((512, 512)).astype(np.float32) * 0.05)
z = jg.tensor(rng.standard_normal((1024, 1024)).astype(np.float32))
# a split GEMM (67M multiply-adds) with an elementwise epilogue, and a full sum over 2^20 elements (its partial
# sums per chunk): every gated kind of launch but a batch of small products
f = jg.compile(lambda x, w, z: (jg.tanh(x @ w), (z * z + 1.0).sum()), backend="numba")


def call(tick):
    TICK[0] = tick
    r0, c0 = workpool.rounds(), READS[0]
    out = f(x, w, z)
    digests = [hashlib.sha256(np.ascontiguousarray(o.numpy()).tobytes()).hexdigest()[:16] for o in out]
    return [workpool.rounds() - r0, READS[0] - c0] + digests


first = call(1000)
(entries,) = f._cache.values()
cg = compiled_graph(entries[0].graph, entries[0].gf.writes)
p = cg.call_lock.pool_pacer if cg.call_lock is not None else None
script = [1000, 1000, 4000, 2000, 2000, 4000, 2000, 2000, 2000, 2000, 1000, 1000]
paced = [call(t) for t in script]
held = pool_pacer.STATS["held_calls"]
# the default policy through the kernels' clock: 100 quiet calls whose rate varies 1-2x, then 60 calls with a core
# taken (pooled launches 5x, the calling thread 2x)
for k, v in DEFAULTS.items():
    setattr(pool_pacer.PoolPacer, k, v)
p2 = pool_pacer.PoolPacer()
cg.call_lock.pool_pacer = p2
jitter = np.exp(np.random.default_rng(0).uniform(0.0, np.log(2.0), 100))
policy = [call(int(1000 * j))[2:] for j in jitter]
quiet_held = p2.held_calls
HELD_TICK[0] = 2000
policy += [call(5000)[2:] for _ in range(60)]
HELD_TICK[0] = None
policy_held = [quiet_held, p2.held_calls - quiet_held]
# the knob's state: no pacer, nothing timed
if cg.call_lock is not None:
    cg.call_lock.pool_pacer = None
workpool.set_pace(workpool.PACE_OFF)
off = call(4000)
# B5's size of step: no gated launch, so no pacer and no clock read
sys.path.insert(0, sys.argv[1])
import harness as H, mlp
xs, ys, ws = H.mlp_data(8, 16, 32, 4)
workpool.set_pace(workpool.PACE_TIMED)
step, probe = mlp.make_jitgrad(xs, ys, ws, "numba")
step()
c0 = READS[0]
for _ in range(5):
    step()
b5_reads = READS[0] - c0
# B1's step (the scripted clock is steady: nothing contended): its reads and its pool rounds
TICK[0] = 1000
xs, ys, ws = H.mlp_data(256, 784, 512, 10)
step, probe = mlp.make_jitgrad(xs, ys, ws, "numba")
step()
c0, r0 = READS[0], workpool.rounds()
for _ in range(3):
    step()
b1 = [(READS[0] - c0) / 3, (workpool.rounds() - r0) / 3]
print("RESULT " + json.dumps({"first": first, "paced": paced, "off": off, "held": held, "b1": b1,
                              "policy_held": policy_held, "policy_bits": len({tuple(d) for d in policy}),
                              "workers": workpool.threads(), "b5_reads": b5_reads,
                              "gemm": [s.label for s in cg.program.steps if s.kind == "bgemm"],
                              "best": [p.reference(), p.caller()] if p else None}))
'''


_RESULTS: dict = {}


def _child(threads_: int) -> dict:
    """The child's counts at ``threads_`` workers (run once per test session)."""
    if threads_ not in _RESULTS:
        # (OpenBLAS at the same count: a GEMM the pool does not split is left to OpenBLAS, whose last bits
        # depend on its thread count, and whose own pacer would move that count by the real clock)
        # (the counts below are the launches that reach 2^23 / 2^15, the eager kernels' thresholds: the split GEMM
        # and the sum, B1's five GEMMs; the compiled default would pool the smaller loops too)
        env = dict(os.environ, PYTHONPATH=str(REPO), NUMBA_NUM_THREADS=str(threads_),
                   OPENBLAS_NUM_THREADS=str(threads_), JITGRAD_POOL_PACER="1",
                   JITGRAD_PARALLEL_WORK=str(1 << 23), JITGRAD_PARALLEL_GRAIN=str(1 << 15))
        r = subprocess.run([sys.executable, "-c", _CHILD, str(REPO / "benchmarks")], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        (line,) = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        _RESULTS[threads_] = json.loads(line[7:])
    return _RESULTS[threads_]


two_workers = pytest.mark.skipif(settings.default_threads() < 2, reason="the pool needs two workers")


@two_workers
def test_the_kernels_clock_drives_the_pacer_and_changes_no_bit():
    out = _child(2)
    assert out["workers"] == 2 and out["gemm"] and "on the pool" in out["gemm"][0]
    rounds, reads = [r[0] for r in out["paced"]], [r[1] for r in out["paced"]]
    # two gated launches a call (the split GEMM, the sum), two clock reads each, pooled or held
    assert out["first"][:2] == [2, 4]
    assert reads == [4] * len(reads)
    # 1000, 1000: pooled (quiet); 4000: 4x the reference, past one thread's assumed 1.5x: held for 2 calls (at 2000 ns:
    # the calling thread's rate, 2x the reference); 4000 again on the retry: past both, held for 4 calls; 1000: quiet
    assert rounds == [2, 2, 2, 0, 0, 2, 0, 0, 0, 0, 2, 2]
    assert out["held"] == 6
    # the default policy: the quiet calls' jitter holds nothing, the busy core holds all but a run of 4 and a retry
    assert out["policy_held"][0] == 0 and out["policy_held"][1] >= 50 and out["policy_bits"] == 1
    assert out["best"][1] == pytest.approx(2 * out["best"][0])
    # the knob's state: the same launches on the pool, no clock read
    assert out["off"][:2] == [2, 0]
    # the bits: pooled, held and unpaced calls alike
    assert len({tuple(r[2:]) for r in out["paced"] + [out["first"], out["off"]]}) == 1
    # a step of B5's size has no gated launch: the pacer reads no clock in it; B1's reads two per pooled launch
    # (its five big GEMMs' blocks; its loops stay below the threshold)
    assert out["b5_reads"] == 0
    assert out["b1"] == [10, 5]


def test_one_worker_never_wakes_the_pool_nor_reads_the_clock():
    out = _child(1)
    assert out["workers"] == 1 and out["held"] == 0 and out["b5_reads"] == 0 and out["b1"] == [0, 0]
    assert all(r[:2] == [0, 0] for r in out["paced"])
    assert len({tuple(r[2:]) for r in out["paced"] + [out["first"], out["off"]]}) == 1


@two_workers
def test_one_and_two_workers_give_the_same_bits_where_nothing_is_summed_in_chunks():
    """The GEMM (two blocks on the pool, or one call) and its epilogue: the same bits at one and two workers; the
    full sum adds one partial sum per worker, so its last bits may depend on the worker count (issue 32: beyond
    float reassociation in reductions), never on the pacer."""
    one, two = _child(1), _child(2)
    assert one["first"][2] == two["first"][2]
