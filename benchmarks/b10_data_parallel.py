"""B10: data-parallel training on MPI, 1 and 2 processes, one thread each.

Steps (compiled with Numba, DistributedDataParallel, per-process batch fixed: weak scaling):
- B1: MLP 784-512-512-10, batch 256 per process, float32, relu, cross-entropy, SGD (B1's model, in nn modules);
- B9-like: a GPT-shaped residual MLP stack (width 128, 4 blocks of LayerNorm -> Linear 128x512 -> GELU ->
  Linear 512x128, a 65-way head), 16 x 64 tokens per process, AdamW (B9's width, depth, batch and optimiser
  without attention: ~0.56 M parameters against B9's ~0.8 M).

Figures: time per step; throughput (samples/s over all processes) and its ratio 2 procs / 1 proc; the share of
the step spent in communication (1 - the step under ``no_sync()``, which skips the all-reduces, / the full step);
all-reduce bandwidth for 1-64 MB float32 through ``jitgrad.distributed.all_reduce`` and through mpi4py's
``Allreduce`` on the same buffer (the MPI library's own figure, osu_allreduce-style), as algorithm bandwidth
(bytes / time) and bus bandwidth (2(p-1)/p bytes / time, what a ring moves per link).

    python benchmarks/b10_data_parallel.py            # runs mpiexec -n 1 and -n 2 of itself, prints the tables

(``python -m jitgrad bench`` runs it too; without mpi4py it says so and skips.  ``B10_STEPS`` sets the timed
steps, 30 by default, scaled by ``JITGRAD_BENCH_SCALE``.)
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = int(os.environ.get("B10_STEPS", max(5, int(30 * float(os.environ.get("JITGRAD_BENCH_SCALE", "1"))))))


def _median_time(fn, n):
    """The median wall time of n calls of fn."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _median_step(step, n):
    import jitgrad.distributed as dist
    for _ in range(3):
        step()
    dist.barrier()
    t = _median_time(step, n)
    dist.barrier()
    return t


def _compiled_step(model, opt):
    """The benchmarks' training step (zero_grad, cross-entropy, backward, step), compiled synchronously."""
    import jitgrad as jg
    import jitgrad.nn.functional as F

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return jg.compile(step, backend="numba", background=False)


def _b1(ddp_cls):
    import jitgrad as jg
    from jitgrad import nn
    jg.manual_seed(0)
    model = ddp_cls(nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))
    opt = jg.optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(int(os.environ.get("RANK", "0")))
    x = jg.tensor(rng.standard_normal((256, 784), dtype=np.float32))
    y = jg.tensor(rng.integers(0, 10, 256))
    return model, _compiled_step(model, opt), (x, y), 256


def _b9_like(ddp_cls):
    import jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad import nn

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, h):
            return h + self.down(F.gelu(self.up(self.ln(h))))

    class Net(nn.Module):
        def __init__(self, d=128, layers=4, vocab=65):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, h):
            return self.head(self.ln(self.blocks(h)))

    jg.manual_seed(0)
    model = ddp_cls(Net())
    opt = jg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(int(os.environ.get("RANK", "0")))
    x = jg.tensor(rng.standard_normal((16 * 64, 128), dtype=np.float32))
    y = jg.tensor(rng.integers(0, 65, 16 * 64))
    return model, _compiled_step(model, opt), (x, y), 16


def child():
    import jitgrad as jg
    import jitgrad.distributed as dist
    from jitgrad.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("mpi")
    p, r = dist.get_world_size(), dist.get_rank()
    out = {"procs": p, "steps": {}, "allreduce": []}
    for name, make in (("B1", _b1), ("B9-like", _b9_like)):
        model, step, args, samples = make(DDP)
        t_full = _median_step(lambda: step(*args), STEPS)

        def local():
            with model.no_sync():
                step(*args)
        t_local = _median_step(local, STEPS)
        nparams = sum(q.numel() for q in model.parameters())
        out["steps"][name] = {"step_s": t_full, "no_sync_s": t_local, "samples": samples * p,
                              "throughput": samples * p / t_full, "params": nparams,
                              "buckets": len(model._buckets), "comm_share": max(0.0, 1 - t_local / t_full)}
    from mpi4py import MPI
    comm = dist.process_group._S.world.comm
    for mb in (1, 4, 16, 64):
        n = mb * 1024 * 1024 // 4
        t = jg.zeros(n)
        a = np.zeros(n, np.float32)
        reps = max(3, min(50, 256 // mb))
        res = {}
        for label, fn in (("jitgrad", lambda: dist.all_reduce(t)), ("mpi4py", lambda: comm.Allreduce(MPI.IN_PLACE, a))):
            fn()
            comm.Barrier()
            res[label] = _median_time(fn, reps)
        out["allreduce"].append({"MB": mb, **res})
    if r == 0:
        print("B10JSON " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def main():
    import importlib.util
    from jitgrad.distributed.run import find_mpiexec
    if importlib.util.find_spec("mpi4py") is None:
        print("B10 skipped: mpi4py is not installed (pip install -e '.[distributed]')")
        return 0
    try:
        mpiexec = find_mpiexec()
    except SystemExit as e:
        print(f"B10 skipped: {e}")
        return 0
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = {}
    for p in (1, 2):
        r = subprocess.run([mpiexec, "-n", str(p), sys.executable, os.path.abspath(__file__), "--child"],
                           env=env, capture_output=True, text=True, timeout=1800)
        line = [x for x in r.stdout.splitlines() if x.startswith("B10JSON ")]
        if r.returncode != 0 or not line:
            print(f"{p} processes failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            return 1
        runs[p] = json.loads(line[0][8:])
    print(f"B10: data-parallel on MPI, one thread per process ({os.cpu_count()} CPUs visible; load average "
          f"{os.getloadavg()[0]:.1f})\n")
    print(f"{'step':10} {'params':>8} {'procs':>5} {'step ms':>8} {'no_sync ms':>10} {'comm share':>10} "
          f"{'samples/s':>10} {'ratio':>6}")
    for name in runs[1]["steps"]:
        for p in (1, 2):
            s = runs[p]["steps"][name]
            ratio = s["throughput"] / runs[1]["steps"][name]["throughput"]
            print(f"{name:10} {s['params']:>8} {p:>5} {s['step_s'] * 1e3:>8.2f} {s['no_sync_s'] * 1e3:>10.2f} "
                  f"{s['comm_share'] * 100:>9.1f}% {s['throughput']:>10.0f} {ratio:>5.2f}x")
    print(f"\nall-reduce, 2 processes, float32 (GB/s: algorithm bandwidth bytes/t; bus bandwidth 2(p-1)/p bytes/t)")
    print(f"{'MB':>4} {'jitgrad ms':>10} {'mpi4py ms':>10} {'jitgrad algbw':>13} {'busbw':>6} {'mpi4py algbw':>12} "
          f"{'jitgrad/mpi':>11}")
    for a in runs[2]["allreduce"]:
        b = a["MB"] * 2 ** 20
        print(f"{a['MB']:>4} {a['jitgrad'] * 1e3:>10.3f} {a['mpi4py'] * 1e3:>10.3f} {b / a['jitgrad'] / 1e9:>13.2f} "
              f"{b / a['jitgrad'] / 1e9:>6.2f} {b / a['mpi4py'] / 1e9:>12.2f} {a['mpi4py'] / a['jitgrad']:>10.2f}x")
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        sys.exit(main())
