"""B11's compiled step (the force field's training step: pair loops, small GEMMs, Adam) at two threads (issue 32),
counted by its launch records and the pool's rounds, never timed.

The pool's thresholds are process settings measured per machine kind (``benchmarks/parallel_threshold.py``);
these tests set them low (``JITGRAD_PARALLEL_WORK``, ``JITGRAD_PARALLEL_GRAIN``) so B11's loops, a few thousand
to 127,000 elements each, reach them, and check what the step then runs where and that its results do not depend
on the thread count beyond the reassociation of sums.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jitgrad.codegen.native import workpool
from jitgrad.codegen.program import layout
from jitgrad.codegen.kernels.loops import PARALLEL_MIN
from jitgrad.ir import settings

REPO = Path(__file__).resolve().parents[1]
WORK, GRAIN = 1 << 17, 1 << 11      # low enough for B11's pair loops, high enough to leave its tiny loops serial

_CHILD = r'''
import hashlib, importlib.util, json, sys
import numpy as np
import jitgrad as jg
from jitgrad.codegen.native import workpool
spec = importlib.util.spec_from_file_location("force_field", sys.argv[1])
W = importlib.util.module_from_spec(spec); spec.loader.exec_module(W)
call, fn, args, model = W.torch_style(jg, "compiled",
                                      compile_=lambda f: jg.compile(f, backend="numba", background=False))
losses = [float(call()) for _ in range(3)]
r0, j0 = workpool.rounds(), workpool.joined()
losses.append(float(call()))
rounds, joined = workpool.rounds() - r0, workpool.joined() - j0
# a threshold between the first pair loop's work and the next two's: the first of a shared round runs on the
# calling thread, the second starts the round, the third joins it
mid = workpool.set_min_work(1 << 20)
r0, j0 = workpool.rounds(), workpool.joined()
losses.append(float(call()))
mid_rounds, mid_joined = workpool.rounds() - r0, workpool.joined() - j0
mid_records = [bool(l.joined) for l in fn.launches(*args)]
workpool.set_min_work(*mid)
params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
from jitgrad.jit.graph_code import compiled_graph
e = fn._entry_for(args, {})
at_two = compiled_graph(e.graph, e.gf.writes, e.gf.parallel, e.gf.disk_cache, e.gf.background).launches(workers=2)
print(json.dumps({"at_two": [bool(l.parallel) for l in at_two], "losses": [x.hex() for x in losses], "params": params.astype(np.float64).tolist(),
                  "hash": hashlib.sha1(params.tobytes()).hexdigest(), "rounds": rounds, "joined": joined,
                  "mid": [mid_rounds, mid_joined, mid_records],
                  "min_work": workpool.min_work(), "grain": workpool.grain(),
                  "launches": [[l.kind, l.label, bool(l.parallel), l.work, l.elements, bool(l.gated), bool(l.joined)]
                               for l in fn.launches(*args)]}))
'''


def _b11_child(tmp_path, threads, **extra):
    env = {**os.environ, **extra, "PYTHONPATH": str(REPO), "JITGRAD_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1", "JITGRAD_BLAS_PACER": "0",
           "JITGRAD_POOL_PACER": "0", "JITGRAD_BACKGROUND_COMPILE": "0",
           "JITGRAD_PARALLEL_WORK": str(WORK), "JITGRAD_PARALLEL_GRAIN": str(GRAIN)}
    r = subprocess.run([sys.executable, "-c", _CHILD, str(REPO / "benchmarks" / "force_field.py")],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_b11_step_runs_its_pair_loops_on_the_pool_with_the_same_results_at_one_and_two_threads(tmp_path):
    """At 2 workers, with thresholds B11's loops reach (set through the environment): its pair loops (the gathers
    of atom pairs, the Gaussian features and their backward, by rows or fused), the MLP's elementwise loops
    run on the pool, each waking it once a step (the rounds equal the parallel launches), and every
    loop left serial is under a threshold; the pooled loops hold most of the step's work.  At 1 worker nothing
    wakes a pool.  The bits: the same run to run at 2 workers; 1 and 2 workers agree to rounding (a chunked sum
    reassociates)."""
    if settings.default_threads() < 2 or not workpool.available():
        pytest.skip("needs two cores and the worker pool")
    a, b, one = _b11_child(tmp_path, 2), _b11_child(tmp_path, 2), _b11_child(tmp_path, 1)
    assert a["min_work"] == WORK and a["grain"] == GRAIN        # JITGRAD_PARALLEL_WORK / _GRAIN read
    par = [la for la in a["launches"] if la[2]]
    loops = [la for la in a["launches"] if la[0] in ("fused", "rows", "batch")]
    # each pooled launch wakes a round of its own or joins the one the launch before it started (round_groups)
    assert a["rounds"] + a["joined"] == len(par) >= 12 and one["rounds"] == one["joined"] == 0
    assert a["joined"] == sum(la[6] for la in a["launches"])
    assert not any(la[2] for la in one["launches"])
    labels = [la[1] for la in par]
    assert sum("getitem,getitem" in x for x in labels) == 2         # the pair gathers, forward and backward
    assert any("exp" in x and "sum" in x for x in labels)           # the Gaussian features summed over j
    assert any(la[0] == "rows" for la in par)                        # their backward by rows
    assert sum("tanh" in x for x in labels) >= 2                     # the hidden layers' bias + tanh
    # Adam's batch of the weights (5,120 elements) is one unit of batch_loops.plan_pieces (4,096 elements at
    # least): it reaches the thresholds but never splits, and its record says so (a round per parallel record)
    adam = max((la for la in a["launches"] if la[0] == "batch" and "sqrt" in la[1]), key=lambda la: la[3])
    assert adam[3] >= WORK and not adam[2]
    for kind, label, p, work, elements, gated, _ in loops:
        if not p and kind != "batch":
            assert work < WORK or elements < GRAIN, label
    pooled = sum(la[3] for la in par)
    assert pooled >= 0.6 * sum(la[3] for la in a["launches"])
    # the forces' scatter into (molecule, atom, 3) splits by molecules: each molecule's atoms are added into by
    # its own pairs only (``loop_steps.scatters_own_rows``), in the serial order (before: serial, the largest
    # serial loop, 7.9% of the step's instructions)
    assert any("index_put" in la[1] and la[2] for la in a["launches"])
    # the last layer (64 -> 1) and its gradients, products with one result column or row, are loops
    # (``ir/passes/unit_products.py``; before: five small-kernel GEMMs on the calling thread, 1.6% of the step's
    # instructions): every GEMM left is a pooled batch of blocks
    assert all(la[0] == "bgemm" and la[2] for la in a["launches"] if la[0] in ("gemm", "bgemm"))
    # the records a one-thread process gives for two threads (``launches(workers=2)``) are the two-thread run's
    assert one["at_two"] == [la[2] for la in a["launches"]] == a["at_two"]
    assert a["losses"] == b["losses"] and a["hash"] == b["hash"]
    np.testing.assert_allclose([float.fromhex(x) for x in one["losses"]],
                               [float.fromhex(x) for x in a["losses"]], rtol=1e-5)
    np.testing.assert_allclose(one["params"], a["params"], rtol=1e-4, atol=1e-6)


def test_the_element_cost_floor_is_a_cost_not_the_threshold():
    """A measured threshold moves which loops take the pool, never what a loop costs: ``layout.MIN_ELEMENT_COST``
    is a float32 read and written (8 bytes), whatever ``workpool.PARALLEL_WORK`` is; at the default thresholds,
    compiled and eager, every loop of ``loops.PARALLEL_MIN`` elements reaches it."""
    assert layout.MIN_ELEMENT_COST == 8.0
    assert PARALLEL_MIN * layout.MIN_ELEMENT_COST >= max(workpool.PARALLEL_WORK, workpool.EAGER_PARALLEL_WORK)


def _threshold_script():
    spec = importlib.util.spec_from_file_location("parallel_threshold", REPO / "benchmarks" / "parallel_threshold.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parallel_threshold_proposes_the_pair_that_pools_the_most_gaining_kernels():
    """``parallel_threshold.propose``: rows ``(work, elements, serial, pooled)``; every kernel the proposed
    thresholds put on the pool gains at least the asked share, and among such pairs the one that pools the most."""
    propose = _threshold_script().propose
    rows = [(2 ** 18, 2 ** 14, 1.0, 1.2),      # loses: must stay under the thresholds
            (2 ** 18, 2 ** 11, 1.0, 0.7),      # few elements, much work each: gains (B11's pair gathers)
            (2 ** 20, 2 ** 15, 1.0, 0.6),
            (2 ** 22, 2 ** 17, 1.0, 0.55)]
    p, g = propose(rows, 0.1)
    on = [r for r in rows if r[0] >= 2 ** p and r[1] >= 2 ** g]
    assert all(1 - q / s >= 0.1 for _, _, s, q in on)
    assert len(on) == 2 and (p, g) == (20, 15)         # (2^18 would pool the loser: no grain separates them)
    assert propose([(2 ** 16, 2 ** 12, 1.0, 2.0)], 0.1) == (29, 16)     # nothing gains: nothing pooled


@pytest.fixture
def low_thresholds():
    prev = workpool.set_min_work(WORK, GRAIN)
    yield
    workpool.set_min_work(*prev)


def test_mid_size_products_split_into_blocks_of_a_fixed_height(low_thresholds):
    """B11's products, too small for a cut with one call's bits, reach a lowered threshold: over OpenBLAS's
    threading threshold they run as blocks of 32 rows on the pool (one single-threaded BLAS call each), under it as
    a batch of the same blocks through jitgrad's small kernel; the blocks' height is the product's (never the
    workers'), and the results agree with eager mode.  At a threshold over their work (the eager kernels' default)
    each stays one call."""
    import jitgrad as jg
    from jitgrad.ir.ops import blas
    rng = np.random.default_rng(3)
    cases = [((8, 32, 16), (16, 64), "blocks of rows, small kernel")]
    if blas.small_path_macs():      # (OpenBLAS's small-matrix path: no exact cut of 256 x 64 x 64 exists)
        cases += [((256, 64), (64, 64), "BLAS, rows on the pool"), ((64, 256), (256, 64), "BLAS, rows on the pool")]
    for sa, sb, label in cases:
        a = jg.tensor(rng.standard_normal(sa).astype(np.float32))
        w = jg.tensor(rng.standard_normal(sb).astype(np.float32))
        f = jg.compile(lambda a, w: a @ w, backend="numba")
        out = f(a, w).numpy()
        (l,) = [x for x in f.launches(a, w) if x.kind in ("gemm", "bgemm")]
        assert l.kind == "bgemm" and label in l.label and l.gated, l
        assert l.parallel == (settings.default_threads() > 1 and workpool.available())
        np.testing.assert_allclose(out, (a @ w).numpy(), rtol=1e-5, atol=1e-5)
        workpool.set_min_work(workpool.EAGER_PARALLEL_WORK, workpool.EAGER_PARALLEL_GRAIN)
        g = jg.compile(lambda a, w: a @ w + 0.0, backend="numba")      # (another graph: laid out afresh)
        assert [x.kind for x in g.launches(a, w) if x.kind in ("gemm", "bgemm")] == ["gemm"]
        workpool.set_min_work(WORK, GRAIN)


def test_b11_steps_share_pool_rounds_with_the_bits_of_separate_rounds(tmp_path):
    """B11's pooled steps split the molecule axis into the same rows (8 molecules, 992 pairs, 256 atoms, the MLP's
    256 rows in 8 blocks of 32: a chunk of 2 threads is half of each), so each run of them between serial steps
    shares one pool round: the pair loops of a pass (gather, cutoff, Gaussian features) with the MLP's products
    (blocks of rows) and their bias + tanh loops after them, and so on: 23 of the step's 31 pooled launches wake
    no round, 8 rounds a step (``round_groups.py``).  A sum over the rows (fixed chunks, ``loops.chunked_rows``)
    joins the round before it as its last launch and runs it before adding its partial rows: the force pass's
    bias-gradient sum closes its round.  A threshold (2^20) that leaves some of them on the calling thread: those
    run the pending round first, the launches after them start a new one.  The bits are those of separate rounds
    (``JITGRAD_JOIN_ROUNDS=0``), at both thresholds, and of one thread."""
    if settings.default_threads() < 2 or not workpool.available():
        pytest.skip("needs two cores and the worker pool")
    a = _b11_child(tmp_path, 2)
    off = _b11_child(tmp_path, 2, JITGRAD_JOIN_ROUNDS="0")
    joined = [la for la in a["launches"] if la[6]]
    assert a["joined"] == len(joined) == 23 and a["rounds"] == 8
    assert off["rounds"] == 31 and off["joined"] == 0 and not any(la[6] for la in off["launches"])
    names = [la[1].split("[")[0] for la in joined]
    assert {"fused_2", "fused_3", "fused_12", "fused_13", "fused_21", "fused_22"} <= set(names)    # the pair loops
    closing = [la for la in joined if la[1].startswith("fused_25[sum]")]
    assert len(closing) == 1 and closing[0][2]      # a sum over rows, pooled, the last launch of its round
    assert sum(la[0] == "bgemm" for la in joined) == 9          # products' blocks of rows in the rounds before them
    mid_rounds, mid_joined, mid_records = a["mid"]
    assert mid_joined == sum(mid_records) == 3 and mid_rounds == 7
    assert off["mid"] == [10, 0, [False] * len(mid_records)]
    assert a["losses"] == off["losses"] and a["hash"] == off["hash"]
    one = _b11_child(tmp_path, 1)
    assert one["losses"] == a["losses"] and one["hash"] == a["hash"]
