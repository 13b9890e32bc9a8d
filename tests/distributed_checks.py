"""Checks run on every rank of ``mpiexec -n 2 python tests/distributed_checks.py [backend]``
(tests/test_distributed.py launches it once and reads the report).

Each check prints ``rank R CHECK name ok`` or ``rank R CHECK name FAIL: reason``.  The data of every rank is
made from its rank, so each rank can compute the whole job's NumPy reference on its own.  Backend
(``interpret`` or ``numba``) selects what ``@jg.compile`` runs.
"""
import os
import sys
import traceback

import numpy as np

import jitgrad as jg
import jitgrad.distributed as dist
import jitgrad.nn.functional as F
from jitgrad import nn
from jitgrad.ir.ops import OPS
from jitgrad.nn.parallel import DistributedDataParallel as DDP
from jitgrad.runtime.dispatch import bind

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "interpret"
dist.init_process_group("mpi", init_method="env://")
R, W = dist.get_rank(), dist.get_world_size()
assert W == 2, "run with mpiexec -n 2"
FAILED = []


def check(fn):
    try:
        fn()
        print(f"rank {R} CHECK {fn.__name__} ok", flush=True)
    except Exception as e:      # noqa: BLE001  (report and go on: the other checks still run)
        FAILED.append(fn.__name__)
        msg = "".join(traceback.format_exception_only(type(e), e)).strip().replace("\n", " | ")
        print(f"rank {R} CHECK {fn.__name__} FAIL: {msg}", flush=True)
        traceback.print_exc()
    dist.barrier()
    return fn


def data(r, shape, dtype=np.float64, lo=-2.0, hi=2.0):
    rng = np.random.default_rng(100 + r)
    a = rng.uniform(lo, hi, shape)
    return a.astype(dtype) if np.dtype(dtype).kind == "f" else np.round(a * 3).astype(dtype)


def close(a, b, tol=1e-12, what=""):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol):
        diff = np.max(np.abs(a - b)) if a.shape == b.shape else "shapes differ"
        raise AssertionError(f"{what}: {a} != {b} (max diff {diff})")


# ---- collectives against NumPy -----------------------------------------------------------------------------

@check
def all_reduce_ops():
    for dtype in (np.float64, np.float32, np.int64):
        for op, ref in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.AVG, np.mean), (dist.ReduceOp.MAX, np.max),
                        (dist.ReduceOp.MIN, np.min), (dist.ReduceOp.PRODUCT, np.prod)):
            if op == dist.ReduceOp.AVG and dtype is np.int64:
                continue
            t = jg.tensor(data(R, (3, 4), dtype))
            v0 = t._version
            dist.all_reduce(t, op=op)
            want = ref(np.stack([data(r, (3, 4), dtype) for r in range(W)]), axis=0).astype(dtype)
            close(t.numpy(), want, 1e-6 if dtype is np.float32 else 1e-12, f"all_reduce {op} {np.dtype(dtype)}")
            assert t.dtype.np == np.dtype(dtype) and t._version > v0


@check
def all_reduce_non_contiguous_and_async():
    base = jg.tensor(data(R, (4, 6)))
    t = base[:, ::2]
    work = dist.all_reduce(t, async_op=True)
    assert work.wait() and work.is_completed()
    want = sum(data(r, (4, 6)) for r in range(W))
    close(base.numpy()[:, ::2], want[:, ::2], what="async strided all_reduce")
    close(base.numpy()[:, 1::2], data(R, (4, 6))[:, 1::2], what="untouched columns")


@check
def broadcast_all_gather_reduce_scatter():
    t = jg.tensor(data(R, (5,)))
    dist.broadcast(t, src=1)
    close(t.numpy(), data(1, (5,)), what="broadcast")
    w = dist.broadcast(jg.tensor(data(R, (2,))), src=0, async_op=True)
    w.wait()
    outs = [jg.zeros(2, 3, dtype=jg.float64) for _ in range(W)]
    dist.all_gather(outs, jg.tensor(data(R, (2, 3))))
    for r in range(W):
        close(outs[r].numpy(), data(r, (2, 3)), what=f"all_gather[{r}]")
    outs = [jg.zeros(3, dtype=jg.int64) for _ in range(W)]
    dist.all_gather(outs, jg.tensor(data(R, (3,), np.int64)), async_op=True).wait()
    close(np.stack([o.numpy() for o in outs]), np.stack([data(r, (3,), np.int64) for r in range(W)]), what="async")
    big = jg.zeros(2 * W, 3, dtype=jg.float64)
    dist.all_gather_into_tensor(big, jg.tensor(data(R, (2, 3))))
    close(big.numpy(), np.concatenate([data(r, (2, 3)) for r in range(W)]), what="all_gather_into_tensor")
    for op, ref in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.AVG, np.mean), (dist.ReduceOp.MAX, np.max)):
        ins = [jg.tensor(data(R, (W, 4))[k]) for k in range(W)]
        out = jg.zeros(4, dtype=jg.float64)
        dist.reduce_scatter(out, ins, op=op)
        close(out.numpy(), ref(np.stack([data(r, (W, 4))[R] for r in range(W)]), axis=0), what=f"reduce_scatter {op}")
    out = jg.zeros(4, dtype=jg.float64)
    dist.reduce_scatter(out, [jg.tensor(data(R, (W, 4))[k]) for k in range(W)], async_op=True).wait()
    close(out.numpy(), sum(data(r, (W, 4))[R] for r in range(W)), what="async reduce_scatter")
    dist.barrier()
    dist.barrier(async_op=True).wait()


@check
def groups_and_env():
    assert dist.is_initialized() and dist.get_backend() == "mpi"
    assert os.environ["RANK"] == str(R) and os.environ["WORLD_SIZE"] == str(W)
    solo = dist.new_group([1])
    both = dist.new_group([0, 1])
    if R == 1:
        assert dist.get_rank(solo) == 0 and dist.get_world_size(solo) == 1
        t = jg.tensor([3.0])
        dist.all_reduce(t, group=solo)
        close(t.numpy(), [3.0], what="group of one")
    else:
        assert dist.get_rank(solo) == -1
        try:
            dist.all_reduce(jg.tensor([1.0]), group=solo)
            raise AssertionError("a non-member's collective should raise")
        except RuntimeError as e:
            assert "not a member" in str(e), e
    t = jg.tensor([float(R + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT, group=both)
    close(t.numpy(), [2.0], what="new_group([0, 1])")
    dist.destroy_process_group(solo)
    dist.destroy_process_group(both)


@check
def mismatched_shapes_are_an_error():
    t = jg.zeros(3 + R, dtype=jg.float64)
    try:
        dist.all_reduce(t)
        raise AssertionError("no error for shapes [3] and [4]")
    except RuntimeError as e:
        s = str(e)
        assert "all_reduce" in s and "rank 0: float64[3]" in s and "rank 1: float64[4]" in s, s
    t = jg.zeros(3, dtype=jg.float64 if R == 0 else jg.float32)
    try:
        dist.broadcast(t, 0)
        raise AssertionError("no error for dtypes float64 and float32")
    except RuntimeError as e:
        assert "rank 1: float32[3]" in str(e), e


@check
def collective_primitives_and_their_gradients():
    # the OpDefs bound directly, eagerly, with autograd: gradients are collectives too
    x = jg.tensor(data(R, (3,)), requires_grad=True)
    wr = [data(10 + r, (3,)) for r in range(W)]
    key = dist.process_group._S.world.key
    y = bind(OPS["all_reduce"], x, group=key, reduce_op="sum")
    close(y.detach().numpy(), sum(data(r, (3,)) for r in range(W)), what="all_reduce op")
    (y * jg.tensor(wr[R])).sum().backward()
    close(x.grad.numpy(), sum(wr), what="all_reduce vjp")
    x = jg.tensor(data(R, (3,)), requires_grad=True)
    y = bind(OPS["broadcast"], x, group=key, src=1)
    close(y.detach().numpy(), data(1, (3,)), what="broadcast op")
    (y * jg.tensor(wr[R])).sum().backward()
    close(x.grad.numpy(), sum(wr) if R == 1 else np.zeros(3), what="broadcast vjp")
    x = jg.tensor(data(R, (3,)), requires_grad=True)
    y = bind(OPS["all_gather"], x, group=key, size=W)
    close(y.detach().numpy(), np.stack([data(r, (3,)) for r in range(W)]), what="all_gather op")
    wg = [data(20 + r, (W, 3)) for r in range(W)]
    (y * jg.tensor(wg[R])).sum().backward()
    close(x.grad.numpy(), sum(wg[s][R] for s in range(W)), what="all_gather vjp")
    x = jg.tensor(data(R, (W, 3)), requires_grad=True)
    y = bind(OPS["reduce_scatter"], x, group=key, reduce_op="sum", size=W)
    close(y.detach().numpy(), sum(data(r, (W, 3))[R] for r in range(W)), what="reduce_scatter op")
    (y * jg.tensor(wr[R])).sum().backward()
    close(x.grad.numpy(), np.stack(wr), what="reduce_scatter vjp")


@check
def all_reduce_inside_compile():
    w = jg.tensor(data(R, (4,)), requires_grad=True)

    @jg.compile(backend=BACKEND)
    def step(x):
        w.grad = None
        loss = (w * x).tanh().sum()
        loss.backward()
        dist.all_reduce(w.grad, op=dist.ReduceOp.AVG)
        with jg.no_grad():
            w.sub_(0.1 * w.grad)
        return loss

    ref = np.stack([data(r, (4,)) for r in range(W)])      # every rank's w
    for k in range(3):
        xs = [data(50 + 10 * k + r, (4,)) for r in range(W)]
        step(jg.tensor(xs[R]))
        g = np.mean([(1 - np.tanh(ref[r] * xs[r]) ** 2) * xs[r] for r in range(W)], axis=0)
        ref = ref - 0.1 * g
        close(w.detach().numpy(), ref[R], 1e-12, f"compiled all_reduce step {k}")
    text = str(step.ir(jg.tensor(xs[R])))
    assert text.count("all_reduce") == 1, text

    # async_op=True inside the step: a start op at the call, a wait op at work.wait()
    v = jg.tensor(data(R, (3,)))

    @jg.compile(backend=BACKEND)
    def two(x):
        work = dist.all_reduce(v, async_op=True)
        y = (x * 2.0).exp()                 # traced between the start and the wait
        work.wait()
        return y + v
    x = jg.tensor(data(60 + R, (3,)))
    out = two(x)
    total = sum(data(r, (3,)) for r in range(W))
    close(v.numpy(), total, 1e-12, "compiled async all_reduce (in place)")
    close(out.numpy(), np.exp(2 * data(60 + R, (3,))) + total, 1e-12, "compiled async all_reduce")
    lines = str(two.ir(x)).splitlines()
    order = [k for k, ln in enumerate(lines) if "all_reduce_start" in ln or " exp " in ln or "all_reduce_wait" in ln]
    assert ["all_reduce_start" in lines[order[0]], " exp " in lines[order[1]],
            "all_reduce_wait" in lines[order[2]]] == [True, True, True], lines


# ---- DistributedDataParallel against one process on the concatenated batch ---------------------------------

def mlp(seed, bn=False):
    jg.manual_seed(seed)
    layers = [nn.Linear(5, 8)] + ([nn.BatchNorm1d(8)] if bn else []) + [nn.Tanh(), nn.Linear(8, 3)]
    return nn.Sequential(*layers).double()


def batches(steps, n=4):
    out = []
    for k in range(steps):
        x = [data(200 + 7 * k + r, (n, 5)) for r in range(W)]
        y = [data(300 + 7 * k + r, (n, 3)) for r in range(W)]
        out.append((x, y))
    return out


def make_opt(kind, params):
    return jg.optim.SGD(params, lr=0.1, momentum=0.9) if kind == "sgd" else jg.optim.Adam(params, lr=0.01)


def params_of(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


def train_ddp(kind, compiled, bn=False, steps=5, bucket_cap_mb=0.0002):
    model = mlp(seed=1 + R, bn=bn)          # different init per rank: DDP must broadcast rank 0's
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
    assert len(ddp._buckets) > 1, "the test wants several buckets"
    opt = make_opt(kind, ddp.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        step = jg.compile(step, backend=BACKEND)
    for x, y in batches(steps):
        step(jg.tensor(x[R]), jg.tensor(y[R]))
    return ddp, step


def train_reference(kind, steps=5):
    model = mlp(seed=1)
    opt = make_opt(kind, model.parameters())
    for x, y in batches(steps):
        opt.zero_grad()
        F.mse_loss(model(jg.tensor(np.concatenate(x))), jg.tensor(np.concatenate(y))).backward()
        opt.step()
    return model


def train_reference_bn(kind, steps=5):
    """BatchNorm under DDP normalises each rank's batch by its own statistics and takes rank 0's running
    statistics at each forward: two replicas in one process, gradients averaged by hand, rank 0's buffers copied."""
    reps = [mlp(seed=1, bn=True) for _ in range(W)]
    opts = [make_opt(kind, m.parameters()) for m in reps]
    for x, y in batches(steps):
        for m in reps[1:]:
            for b, b0 in zip(m.buffers(), reps[0].buffers()):
                b._data[...] = b0._data
        for r, (m, o) in enumerate(zip(reps, opts)):
            o.zero_grad()
            F.mse_loss(m(jg.tensor(x[r])), jg.tensor(y[r])).backward()
        for ps in zip(*[m.parameters() for m in reps]):
            g = sum(p.grad.numpy() for p in ps) / W
            for p in ps:
                p.grad = jg.tensor(g.copy())
        for o in opts:
            o.step()
    return reps


def compare_ddp(kind, compiled):
    ddp, step = train_ddp(kind, compiled)
    ref = train_reference(kind)
    for k, (a, b) in enumerate(zip(params_of(ddp.module), params_of(ref))):
        close(a, b, 1e-6, f"{kind} compiled={compiled} param {k}")
    return ddp, step


@check
def ddp_eager_sgd():
    compare_ddp("sgd", False)


@check
def ddp_eager_buckets_start_during_backward():
    model = mlp(seed=1)
    first_weight = model[0].weight          # the last gradient backward produces
    seen = []
    # registered before DDP's own hook, so it runs just before the last bucket is complete
    first_weight.register_post_accumulate_grad_hook(
        lambda p: seen.append([b.request is not None for b in ddp._buckets]))
    ddp = DDP(model, bucket_cap_mb=0.0002)
    x, y = batches(1)[0]
    F.mse_loss(ddp(jg.tensor(x[R])), jg.tensor(y[R])).backward()
    # when the first layer's weight gradient arrived, the buckets of the later layers were already in flight
    assert len(ddp._buckets) > 1 and seen and seen[0][0] and not all(seen[0]), seen
    assert all(b.request is None for b in ddp._buckets)     # all waited for by the end of backward


@check
def ddp_eager_adam():
    compare_ddp("adam", False)


@check
def ddp_compiled_sgd():
    ddp, step = compare_ddp("sgd", True)
    x, y = batches(1)[0]
    text = str(step.ir(jg.tensor(x[R]), jg.tensor(y[R])))
    # one all-reduce per bucket in the graph (not one per parameter), each started where its bucket's gradients
    # are ready (before the rest of backward's matmuls) and waited for at the end of backward
    lines = text.split("step_backward(")[0].splitlines()
    starts = [k for k, ln in enumerate(lines) if "= all_reduce_start" in ln]
    waits = [k for k, ln in enumerate(lines) if "= all_reduce_wait" in ln]
    matmuls = [k for k, ln in enumerate(lines) if "= matmul" in ln]
    assert len(starts) == len(waits) == len(ddp._buckets) < len(list(ddp.parameters())), text
    assert starts[0] < matmuls[-1] < waits[0], text
    assert step.stats["traces"] <= 2 and step.stats["hits"] >= 3, step.stats     # .grad None, then set
    if BACKEND == "numba":
        assert step.stats["compiled_calls"] >= 3, step.stats
        # the C entry calls MPI itself (no Python driver), bucket 0's start before backward's last matmul
        src = str(step.source(jg.tensor(x[R]), jg.tensor(y[R])))
        assert "Python driver" not in src, src[-3000:]
        calls = [ln for ln in src.splitlines() if ln.strip().startswith(("call_kernel(F", "call_gemm(F"))]
        first_start = next(k for k, ln in enumerate(calls) if "all_reduce_start (MPI)" in ln)
        last_gemm = max(k for k, ln in enumerate(calls) if "matmul" in ln)
        assert first_start < last_gemm, "\n".join(calls)
        assert sum("all_reduce_start (MPI)" in ln for ln in calls) == len(ddp._buckets)


@check
def ddp_interpreter_on_one_rank_native_driver_on_the_other():
    # a rank whose first call runs on the interpreter (a background build) meets a rank already running the native
    # driver: their collectives must match (one communicator for both paths)
    global BACKEND
    saved, BACKEND = BACKEND, ("interpret" if R == 0 else "numba")
    try:
        compare_ddp("sgd", True)
    finally:
        BACKEND = saved


@check
def ddp_compiled_adam():
    compare_ddp("adam", True)


@check
def ddp_batchnorm_eager_and_compiled():
    for compiled in (False, True):
        for kind in ("sgd", "adam"):
            ddp, _ = train_ddp(kind, compiled, bn=True)
            reps = train_reference_bn(kind)
            for k, (a, b) in enumerate(zip(params_of(ddp.module), params_of(reps[0]))):
                close(a, b, 1e-6, f"bn {kind} compiled={compiled} param {k}")
            # this rank's buffers: rank 0's statistics at the last forward, updated with this rank's batch
            for k, (a, b) in enumerate(zip(ddp.module.buffers(), reps[R].buffers())):
                close(a.numpy(), b.numpy(), 1e-6, f"bn {kind} compiled={compiled} buffer {k}")


@check
def ddp_wrap_broadcasts_rank0_state():
    m = mlp(seed=40 + R, bn=True)
    m[1].running_mean._data[...] = R + 1.0
    DDP(m)
    ref = mlp(seed=40, bn=True)
    for a, b in zip(params_of(m), params_of(ref)):
        close(a, b, 0, "wrapped parameters")
    close(m[1].running_mean.numpy(), np.ones(8), 0, "wrapped buffer")


@check
def ddp_no_sync_accumulates():
    for compiled in (False, True):
        model = mlp(seed=1)
        ddp = DDP(model, bucket_cap_mb=0.0002)
        micro = batches(3)

        def fwd_bwd(x, y):
            F.mse_loss(ddp(x), y).backward()
        run = jg.compile(fwd_bwd, backend=BACKEND) if compiled else fwd_bwd
        for k, (x, y) in enumerate(micro[:2]):
            with ddp.no_sync():
                run(jg.tensor(x[R]), jg.tensor(y[R]))
            # no communication yet: this rank's gradient is its own batches' only
            local = mlp(seed=1)
            for xx, yy in micro[:k + 1]:
                F.mse_loss(local(jg.tensor(xx[R])), jg.tensor(yy[R])).backward()
            for p, q in zip(model.parameters(), local.parameters()):
                close(p.grad.numpy(), q.grad.numpy(), 1e-10, f"no_sync local grad (compiled={compiled})")
        x, y = micro[2]
        run(jg.tensor(x[R]), jg.tensor(y[R]))
        ref = mlp(seed=1)
        for xx, yy in micro:
            F.mse_loss(ref(jg.tensor(np.concatenate(xx))), jg.tensor(np.concatenate(yy))).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            close(p.grad.numpy(), q.grad.numpy(), 1e-10, f"no_sync then sync (compiled={compiled})")


@check
def distributed_sampler_uses_the_group():
    s = dist.DistributedSampler(list(range(11)), shuffle=False)
    assert (s.num_replicas, s.rank, len(s)) == (W, R, 6)
    assert list(s) == list(range(R, 12, W))[:6] if R == 0 else [1, 3, 5, 7, 9, 0]
    s = dist.DistributedSampler(list(range(11)), shuffle=True, seed=3)
    mine = list(s)
    every = dist.process_group._S.world.comm.allgather(mine)
    assert len(every[0]) == len(every[1]) == 6 and set(every[0] + every[1]) == set(range(11)), every  # one padded
    s.set_epoch(1)
    assert list(s) != mine


print(f"rank {R} DONE failed={len(FAILED)}", flush=True)
dist.destroy_process_group()
