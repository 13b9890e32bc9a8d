"""Row-wise chains (ir/passes/row_chains.py): softmax, log_softmax and LayerNorm forward+backward, compiled, with
the row kernels and with the plain loops (JITGRAD_ROWWISE=0), each in a fresh process on one thread.

    python benchmarks/row_chains.py                 # the table
    python benchmarks/row_chains.py --repeat 50

Two ways to run each op: ``one graph`` (the forward and ``.backward()`` inside one compiled step, so the whole
chain is one graph) and ``apart`` (the compiled forward used eagerly, its backward graph compiled on its own, as
in training, where matmuls sit between them).  Prints the minimum over ``--repeat`` calls and the plan's loop
count and full-size sweeps (values read or written by loops, in units of the input's size).
"""
import argparse
import json
import os
import subprocess
import sys
import time

CASES = {"softmax": (4096, 1024), "log_softmax": (4096, 1024), "layer_norm": (4096, 768)}


def _child(name, shape, repeat):
    import numpy as np
    import jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad.ir.graph import Var
    from jitgrad.ir.passes import fusion_plan
    fn = {"softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
          "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],))}[name]
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    g = jg.tensor(rng.standard_normal(shape).astype(np.float32))

    def step(x, g):
        y = fn(x)
        (y * g).sum().backward()
        return y.detach(), x.grad

    one = jg.compile(step, backend="numba", background=False)
    fwd = jg.compile(fn, backend="numba", background=False)

    def best(call):
        call()
        call()
        t = 1e9
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            t = min(t, time.perf_counter() - t0)
        return t * 1e3

    def run_one():
        x.grad = None
        one(x, g)

    def run_apart():
        x.grad = None
        fwd(x).backward(g)
    t_one, t_apart = best(run_one), best(run_apart)
    (entries,) = one._cache.values()
    p = fusion_plan(entries[0].graph)
    size = x.numel()
    sweeps = sum(sum(1 for v in list(s.inputs) + list(s.outputs) if isinstance(v, Var) and v.aval.size == size)
                 for s in p.groups)
    print(json.dumps({"one": t_one, "apart": t_apart, "loops": len(p.groups), "sweeps": sweeps}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        name, r, c = args.child
        _child(name, (int(r), int(c)), args.repeat)
        return
    print(f"load {os.getloadavg()[0]:.2f}; min of {args.repeat} calls, one thread")
    for name, shape in CASES.items():
        for rowwise in ("0", "1"):
            env = dict(os.environ, JITGRAD_ROWWISE=rowwise, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                       JITGRAD_BACKGROUND_COMPILE="0")
            r = subprocess.run([sys.executable, __file__, "--repeat", str(args.repeat), "--child", name,
                                str(shape[0]), str(shape[1])], env=env, capture_output=True, text=True)
            line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
            if r.returncode or line is None:
                print(f"{name}: failed\n{r.stderr[-2000:]}")
                continue
            res = json.loads(line)
            kind = "row kernels" if rowwise == "1" else "plain loops"
            print(f"{name:12s} {str(shape):12s} {kind:12s} one graph {res['one']:6.2f} ms, apart {res['apart']:6.2f} ms;"
                  f" {res['loops']} loops, {res['sweeps']} sweeps")


if __name__ == "__main__":
    main()
