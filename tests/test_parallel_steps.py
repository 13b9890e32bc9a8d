"""Every core at work (issue 32), counted and compared, never timed.

- A compiled call lists what it launches (``f.launches``: label, kind, parallel, threads, work); a B9 GPT step's
  attention products run as batches split between the pool's workers, each product on one thread, and its
  row-wise kernels (softmax, LayerNorm) and big elementwise loops on the pool (``workpool.min_work()``).
- One level of parallelism, no oversubscription: no step runs more threads than the process has cores, and a batch
  split between the workers holds only products OpenBLAS runs on the calling thread.
- The same results at 1 and 2 threads: a parallel batch of products and row kernels are bit-identical to their
  serial forms; a fixed thread count gives bit-identical training runs; 1 and 2 threads agree to rounding.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir.ops.blas import BLAS_THREADED_MACS
from jitgrad.codegen.native import workpool
from jitgrad.codegen.program import layout
from jitgrad.ir import settings

REPO = Path(__file__).resolve().parents[1]
from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests


def _attention(q, k, v):
    return jg.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1) @ v


def test_a_parallel_batch_of_products_equals_the_serial_one():
    """(batch, head) products split between the workers: bit-identical to the serial batch (each product is the
    same BLAS call), equal to eager mode, and listed as one parallel launch per batched product."""
    rng = np.random.default_rng(0)
    q, k, v = (jg.tensor(rng.standard_normal((3, 5, 16, 8)).astype(np.float32)) for _ in range(3))
    par = jg.compile(_attention, backend="numba", parallel=True)
    ser = jg.compile(_attention, backend="numba", parallel=False)
    out_p, out_s = par(q, k, v).numpy(), ser(q, k, v).numpy()
    np.testing.assert_array_equal(out_p, out_s)
    np.testing.assert_allclose(out_p, _attention(q, k, v).numpy(), rtol=1e-5, atol=1e-6)
    lp, ls = par.launches(q, k, v), ser.launches(q, k, v)
    assert [x.parallel for x in lp if x.kind == "bgemm"] == [True, True]
    assert [x.parallel for x in ls if x.kind == "bgemm"] == [False, False]
    assert "call_gemm_batched_on_pool" in par.source(q, k, v)


def test_big_products_keep_blas_threads_and_a_serial_batch():
    """One level only: a batch whose products are big enough for OpenBLAS to split stays a serial loop."""
    n = 80      # 80^3 multiply-adds > OpenBLAS's threading threshold
    assert n ** 3 > BLAS_THREADED_MACS
    a = jg.tensor(np.ones((4, n, n), np.float32))
    f = jg.compile(lambda a: a @ a, backend="numba", parallel=True)
    f(a)
    assert [x.parallel for x in f.launches(a) if x.kind == "bgemm"] == [False]


@pytest.mark.parametrize("rows, cols", [(20, 256), (333, 96), (1000, 96)])      # fewer rows than chunks too
def test_column_sums_split_into_fixed_chunks_of_rows(rows, cols):
    """A bias gradient (a sum over the rows) and LayerNorm's weight and bias gradients (column sums of a row
    kernel) run on the pool: every chunk of rows sums into a partial row of its own, the partials are added in
    chunk order, so the result is the same at every thread count, and it agrees with eager mode; the
    elementwise outputs are bit-identical to the serial kernel's."""
    rng = np.random.default_rng(rows)
    x = jg.tensor(rng.standard_normal((rows, cols)).astype(np.float32), requires_grad=True)
    w = jg.tensor(rng.standard_normal(cols).astype(np.float32), requires_grad=True)

    def f(x, w):
        y = jg.nn.functional.layer_norm(x, (cols,), w, None)
        (y * y).sum().backward()
        return y, x.grad, w.grad

    def bias_grad(x):
        h = jg.tanh(x) * 2.0
        return h, h.sum(0)
    for fn, args, kind in ((f, (x, w), "rows"), (bias_grad, (x.detach(),), "fused")):
        outs = {}
        for par in (False, True):
            x.grad = w.grad = None
            g = jg.compile(fn, backend="numba", parallel=par)
            outs[par] = [o.detach().numpy().copy() for o in g(*args)]
            kinds = {(l_.kind, l_.parallel) for l_ in g.launches(*args) if l_.kind in ("rows", "fused")}
            assert (kind, par) in kinds and (par or not any(p_ for _, p_ in kinds))
        x.grad = w.grad = None
        eager = [o.detach().numpy() for o in fn(*args)]
        np.testing.assert_array_equal(outs[True][0], outs[False][0])
        for got, ser, ref in zip(outs[True], outs[False], eager):
            np.testing.assert_allclose(got, ser, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _b9_step(torch_like=jg, layers=4):
    jg.manual_seed(0)
    model = gpt_model.make_gpt(torch_like, 65, 64, 128, 4, layers, dropout=0.0, sdpa=False)
    opt = gpt_model.make_optimizer(torch_like, model, lr=3e-4)
    step = jg.compile(gpt_model.make_step(torch_like, model, model, opt), backend="numba")
    g = jg.Generator().manual_seed(1)
    x, y = jg.randint(0, 65, (16, 64), generator=g), jg.randint(0, 65, (16, 64), generator=g)
    return step, x, y


def test_which_kernels_of_a_b9_step_run_on_the_pool():
    """B9's default shape (batch 16, context 64, width 128, 4 heads, 4 layers), by its launch records."""
    step, x, y = _b9_step()
    step(x, y)
    launches = step.launches(x, y)
    par = [x_ for x_ in launches if x_.parallel]
    bgemm = [x_ for x_ in launches if x_.kind == "bgemm" and "batched" in x_.label]
    assert len(bgemm) == 24 and all(x_.parallel for x_ in bgemm)        # 4 layers x (2 forward + 4 backward)
    # attention's per-head products, on the small-product kernel: its triangular variants where the causal mask
    # leaves half a product unread (ir/passes/causal.py)
    assert all(x_.routine.startswith("small_sgemm") for x_ in bgemm)
    # every other product is big: its rows (or columns) split between the pool's workers, one BLAS call on one
    # thread each, the rows left after the last whole block of OpenBLAS's unit in the last, lower block: no GEMM
    # call of its own
    split = [x_ for x_ in launches if x_.kind in ("gemm", "bgemm") and x_ not in bgemm]
    assert len(split) == 51 and not any("last" in x_.label for x_ in launches)
    if layout.POOL_GEMMS and settings.default_threads() > 1:
        # on the pool in the calls where the whole product's work reaches its threshold, as any gated launch: at
        # the default threshold, every one of them (the logits' products, whose rows left the blocks' work just
        # under it while they ran as a call of their own, included)
        assert all(x_.kind == "bgemm" and x_.parallel == (x_.work >= workpool.min_work())
                   and x_.label.removesuffix(" + bias") in ("matmul (BLAS, rows on the pool)",
                                                           "matmul (BLAS, columns on the pool)")
                   for x_ in split), split
        assert sum(x_.label.endswith(" + bias") for x_ in split) == 4      # qkv's bias (gemm_steps.fold_bias)
        if workpool.min_work() == workpool.PARALLEL_WORK:
            assert all(x_.parallel for x_ in split), [x_ for x_ in split if not x_.parallel]
        assert max(x_.threads for x_ in launches) <= workpool.threads()        # no oversubscription
    rows = [x_ for x_ in launches if x_.kind == "rows"]
    softmax = [x_ for x_ in rows if "amax" in x_.label and "exp" in x_.label and "log" not in x_.label]
    assert len(softmax) == 4 and all(x_.parallel for x_ in softmax)
    # softmax's backward over the attention's rows (its own rule, y (g - sum(g y)): OpDef.trace_vjp): its row sums
    # and their use one row kernel (the mask's logical_not, planned between them, runs before it:
    # row_chains._hoisted), on the pool where its work reaches the threshold (7.2 of its 8 units since it reads
    # the output only); serial as two loops
    soft_back = [x_ for x_ in rows if "mul,sum,sub,mul,where" in x_.label]
    assert len(soft_back) == 4 and all(x_.parallel == (x_.work >= workpool.min_work()) for x_ in soft_back)
    assert not any(x_.kind == "fused" and "mul,sum,sub" in x_.label for x_ in launches)
    gelu = [x_ for x_ in launches if x_.kind == "fused" and "erf" in x_.label and "exp" not in x_.label]
    assert len(gelu) == 4 and all(x_.parallel for x_ in gelu)
    # LayerNorm's backward (column sums of its weight and bias) and GELU's (the bias gradient): fixed chunks
    ln_back = [x_ for x_ in rows if "pow" in x_.label and "rsqrt" not in x_.label]
    assert len(ln_back) == 9 and all(x_.parallel for x_ in ln_back)
    gelu_back = [x_ for x_ in launches if x_.kind == "fused" and "exp" in x_.label and x_.label.count("sum")]
    assert len(gelu_back) == 4 and all(x_.parallel for x_ in gelu_back)
    # (the backward recomputes 1 + erf from the input it reads anyway: the forward stores no 2 MiB array for it)
    assert all("erf" in x_.label for x_ in gelu_back)
    # whatever runs serial is below the work threshold, but a loop with no axis to split (not gated at all): the
    # position embedding's gradient, a sum over the batch (its outer axis) of two broadcast gradients, 2.7M units
    heavy = [x_ for x_ in launches if x_.kind in ("fused", "rows", "copy") and not x_.parallel
             and x_.work >= workpool.min_work()]
    assert len(heavy) <= 1 and all(not x_.gated and x_.label.startswith("fused")
                                   and "broadcast_to,add,sum" in x_.label for x_ in heavy), heavy
    assert sum(x_.kind in ("fused", "rows") for x_ in par) >= 30
    # no oversubscription: no step runs more threads than this process has cores, and a parallel batch's
    # products are below OpenBLAS's threading threshold (each runs on its worker's thread); the split GEMMs'
    # calls run with OpenBLAS on one thread (the call guard sets it: tests/test_threads.py)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert max(x_.threads for x_ in launches) <= max(cores, settings.default_threads())
    assert all(x_.work / (16 * 4) <= BLAS_THREADED_MACS for x_ in bgemm)


_CHILD = r'''
import importlib.util, json, sys
import numpy as np
import jitgrad as jg
spec = importlib.util.spec_from_file_location("gpt_model", sys.argv[1])
gpt_model = importlib.util.module_from_spec(spec); spec.loader.exec_module(gpt_model)
jg.manual_seed(0)
model = gpt_model.make_gpt(jg, 65, 32, 64, 4, 1, dropout=0.0, sdpa=False)
opt = gpt_model.make_optimizer(jg, model, lr=3e-3)
step = jg.compile(gpt_model.make_step(jg, model, model, opt), backend="numba", parallel=True)
g = jg.Generator().manual_seed(1)
x, y = jg.randint(0, 65, (8, 32), generator=g), jg.randint(0, 65, (8, 32), generator=g)
losses = [float(step(x, y)) for _ in range(4)]
par = sum(l.parallel for l in step.launches(x, y) if l.kind not in ("gemm", "bgemm"))
params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
print(json.dumps({"losses": losses, "params": params.astype(np.float64).tolist(), "parallel": par}))
'''


def _run_child(tmp_path, threads):
    env = {**os.environ, "PYTHONPATH": str(REPO), "JITGRAD_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads), "JITGRAD_BLAS_PACER": "0",
           "JITGRAD_BACKGROUND_COMPILE": "0"}
    r = subprocess.run([sys.executable, "-c", _CHILD, str(REPO / "benchmarks" / "gpt_model.py")],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return np.array(out["losses"]), np.array(out["params"]), out["parallel"]


def test_training_steps_agree_at_one_and_two_threads(tmp_path):
    """Four compiled steps of a small GPT with every splittable kernel on the pool (parallel=True): two runs at
    2 threads are bit-identical (fixed chunks, partial sums added in chunk order), and 1 thread agrees to
    rounding (only full sums reassociate).  The loop kernels run on the pool at 2 threads; a pool of one worker runs
    their chunks on the calling thread (its launch records say so: none parallel)."""
    l2, p2, n2 = _run_child(tmp_path, 2)
    l2b, p2b, _ = _run_child(tmp_path, 2)
    l1, p1, n1 = _run_child(tmp_path, 1)
    assert n1 == 0 and n2 >= 10
    np.testing.assert_array_equal(l2, l2b)
    np.testing.assert_array_equal(p2, p2b)
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    # AdamW divides by sqrt(v): a gradient element near zero turns rounding into a visible share of one update
    # (lr 3e-3); 5e-5 is under 2% of one step's size
    np.testing.assert_allclose(p1, p2, rtol=1e-4, atol=5e-5)


_B9_CHILD = r'''
import hashlib, importlib.util, json, sys
import numpy as np
import jitgrad as jg
from jitgrad.codegen.native import workpool
from jitgrad.ir.ops import blas_library
spec = importlib.util.spec_from_file_location("gpt_model", sys.argv[1])
gpt_model = importlib.util.module_from_spec(spec); spec.loader.exec_module(gpt_model)
layers = int(sys.argv[2])
jg.manual_seed(0)
model = gpt_model.make_gpt(jg, 65, 64, 128, 4, layers, dropout=0.0, sdpa=False)
opt = gpt_model.make_optimizer(jg, model, lr=3e-4)
step = jg.compile(gpt_model.make_step(jg, model, model, opt), backend="numba")
g = jg.Generator().manual_seed(1)
x, y = jg.randint(0, 65, (16, 64), generator=g), jg.randint(0, 65, (16, 64), generator=g)
losses = [float(step(x, y)) for _ in range(2)]
r0, c0, j0 = workpool.rounds(), workpool.caller_rounds(), workpool.joined()
losses.append(float(step(x, y)))
rounds, caller, joined = workpool.rounds() - r0, workpool.caller_rounds() - c0, workpool.joined() - j0
ctl = blas_library.thread_control()
launches = step.launches(x, y)
params = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
print(json.dumps({"losses": losses, "params": hashlib.sha1(params.tobytes()).hexdigest(),
                  "params_sum": float(params.astype(np.float64).sum()), "rounds": rounds, "joined": joined,
                  "caller_rounds": caller, "queues": workpool.queues(), "workers": workpool.threads(),
                  "blas_threads": int(ctl[0]()) if ctl else None,
                  "launches": [[l.kind, l.label, bool(l.parallel), int(l.threads), bool(l.joined)]
                               for l in launches]}))
'''


def _b9_child(tmp_path, threads, layers=2):
    env = {**os.environ, "PYTHONPATH": str(REPO), "JITGRAD_CACHE_DIR": str(tmp_path / "cache"),
           "NUMBA_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads), "JITGRAD_BLAS_PACER": "0",
           "JITGRAD_POOL_PACER": "0", "JITGRAD_BACKGROUND_COMPILE": "0"}
    env.pop("JITGRAD_PARALLEL_WORK", None)
    r = subprocess.run([sys.executable, "-c", _B9_CHILD, str(REPO / "benchmarks" / "gpt_model.py"), str(layers)],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_b9_default_step_uses_both_workers_once_per_parallel_launch_with_one_threads_bits(tmp_path):
    """B9's step as users run it (default threshold, no ``parallel=`` override; two of its blocks), in fresh
    processes at 2 workers (twice) and at 1.  At 2 workers: every product runs on the pool (big GEMMs in blocks of
    OpenBLAS's unit, attention's batches one product per worker), each parallel launch wakes the workers exactly
    once, or joins the round of the steps before it (the pool rounds of a step and the launches that joined one
    equal its parallel launches: nothing else launches on them) and the calling
    thread runs one chunk of each itself (so a round wakes one worker), OpenBLAS is left
    on one thread (its own threads never run beside the pool's), and no launch runs more threads than the pool
    has.  At 1 worker nothing wakes a pool.  The bits: the same run to run, and the same at 1 and 2 workers (the
    GEMM blocks start on OpenBLAS's unit, row kernels and column sums run fixed chunks summed in chunk order,
    whoever runs them)."""
    if settings.default_threads() < 2 or not workpool.available():
        pytest.skip("needs two cores and the worker pool")
    a, b, one = _b9_child(tmp_path, 2), _b9_child(tmp_path, 2), _b9_child(tmp_path, 1)
    par = [la for la in a["launches"] if la[2]]
    gemms = [la for la in a["launches"] if la[0] in ("gemm", "bgemm")]
    assert a["workers"] == 2 and one["workers"] in (0, 1)
    # a launch that shares the round of the steps before it (round_groups.py; its record says so) wakes none
    assert a["rounds"] + a["joined"] == len(par) and one["rounds"] == 0
    assert a["joined"] == sum(la[4] for la in par) > 0
    # the calling thread runs a chunk of every round: each wakes the pool's one worker, not two
    assert a["caller_rounds"] == a["rounds"] and a["queues"] == 1
    assert not any(la[2] for la in one["launches"])
    if layout.POOL_GEMMS and any(la[1].endswith("on the pool)") for la in gemms):
        assert all(la[2] for la in gemms), [la for la in gemms if not la[2]]
        assert a["blas_threads"] in (None, 1)       # the split GEMMs' calls: OpenBLAS on the calling thread only
    assert max(la[3] for la in a["launches"]) <= a["workers"]
    assert len(par) >= len(gemms) + 8 * 2      # and each block's LayerNorm, softmax and GELU kernels, both ways
    assert a["losses"] == b["losses"] and a["params"] == b["params"]
    if layout.POOL_GEMMS and all(la[1] != "matmul (BLAS)" for la in gemms):
        assert one["losses"] == a["losses"] and one["params"] == a["params"]
    else:       # (a BLAS without a unit: OpenBLAS threads the big GEMMs itself, and its sums follow its threads)
        np.testing.assert_allclose(one["losses"], a["losses"], rtol=1e-5)
