"""B12: one PINN training step for viscous Burgers (input Hessians in training, forward over reverse).

The workload (pinn.py): u(x, t) an MLP 2-64-64-64-1 (tanh), 2,048 collocation and 256 boundary/initial points,
residual u_t + u u_x - (0.01/pi) u_xx from per-point input derivatives, loss = mean(r^2) + mean((u_b - g_b)^2),
backward to the parameters, Adam.  u_xx by reverse over reverse (``autograd.grad`` of ``u_x.sum()``,
create_graph=True) or forward over reverse (``func.jvp`` of ``func.grad(sum u)`` along x).  float32 for the timings.

Every configuration runs in its own fresh process (one thread everywhere, empty compiler caches, so the first
call is a cold build; the timed steps pinned to one core), and prints one JSON line: the median of 30 steps after
5, the first call, the loss before and after one step, peak RSS, and the losses of 4 steps of a fresh float64 copy
of the same step.  The table checks every configuration's float64 losses against the first row's (PyTorch eager
when installed) to 1e-8 relative, the float32 ones to 1e-4.

    python benchmarks/b12_pinn.py                 # every configuration, the table
    python benchmarks/b12_pinn.py --only jitgrad  # the configurations whose name contains "jitgrad"
    python benchmarks/b12_pinn.py --json          # also one JSON line with every row's result
    python benchmarks/b12_pinn.py --child jitgrad:compiled:forward   # one configuration, in this process

Configurations: PyTorch eager (reverse over reverse, and forward over reverse by ``torch.func.jvp`` of
``torch.func.grad``); torch.compile on the whole step and on the model only (they raise on the double backward:
their error is the row); torch.func (``vmap(jacrev)``, ``vmap(hessian)`` per point) eager and under torch.compile;
JAX jit (when installed); jitgrad eager and ``@jg.compile`` on the whole step (input derivatives, loss, backward,
Adam), each with u_xx reverse over reverse and forward over reverse, and ``jg.compile(model)`` inside the eager step.
"""
import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import ONE_THREAD_ENV  # noqa: E402  (imports no NumPy)

for _name, _value in ONE_THREAD_ENV.items():      # before NumPy, torch or JAX start their thread pools
    os.environ.setdefault(_name, _value)

import numpy as np  # noqa: E402

import pinn as W  # noqa: E402
import harness as H  # noqa: E402

CHECK_STEPS = 4
# (row name, child key, row kind, module it needs)
CONFIGS = [
    ("PyTorch eager", "torch:eager", "peer", "torch"),
    ("PyTorch eager, fwd-over-rev", "torch:eager:forward", "peer", "torch"),
    ("torch.compile, whole step", "torch:compiled", "peer", "torch"),
    ("torch.compile, model only", "torch:model", "peer", "torch"),
    ("torch.func eager", "torch-func:eager", "peer", "torch"),
    ("torch.func + torch.compile", "torch-func:compiled", "peer", "torch"),
    ("JAX jit", "jax:compiled", "peer", "jax"),
    ("jitgrad eager", "jitgrad:eager", "jitgrad", "jitgrad"),
    ("jitgrad eager, fwd-over-rev", "jitgrad:eager:forward", "jitgrad", "jitgrad"),
    ("jitgrad compiled (whole step)", "jitgrad:compiled", "jitgrad", "jitgrad"),
    ("jitgrad compiled, fwd-over-rev", "jitgrad:compiled:forward", "jitgrad", "jitgrad"),
    ("jitgrad compile(model), eager step", "jitgrad:model", "jitgrad", "jitgrad"),
]


def build(key, dtype):
    """The configuration ``key`` ("lib:mode[:forward]") as ``call`` or ``(call, sync)``."""
    lib, mode, *how = key.split(":")
    laplacian = how[0] if how else "reverse"
    if lib == "jax":
        return W.jax_step(mode, dtype)
    if lib == "torch-func":
        import torch
        torch.set_num_threads(1)
        return W.torch_func(torch, mode, dtype)
    if lib == "torch":
        import torch
        torch.set_num_threads(1)
        return W.torch_style(torch, mode, dtype, laplacian=laplacian)[0]
    import jitgrad
    # build before the first call returns, so the first call includes the build
    return W.torch_style(jitgrad, mode, dtype, compile_=functools.partial(jitgrad.compile, background=False),
                         laplacian=laplacian)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help="run one configuration (lib:mode[:forward]) in this process; prints one JSON line")
    ap.add_argument("--only", help="run only the configurations whose name or key contains this")
    ap.add_argument("--unpinned", action="store_true", help="leave the timed steps free to run on every core")
    ap.add_argument("--json", action="store_true", help="also print every row's result as one JSON line")
    a = ap.parse_args()
    if a.child:
        return H.child_step_main(build, a.child, a.unpinned, CHECK_STEPS)
    bench = H.Bench("B12", "PINN step, viscous Burgers (u_x, u_t, u_xx per point, Adam): MLP 2-64-64-64-1, 2,048 + 256 points",
                    unit="ms", tol={"loss float64": 1e-8, "loss float32": 1e-4},
                    baselines=("PyTorch eager", "fastest peer"))
    results = H.fresh_process_table(bench, __file__, CONFIGS, a.only, a.unpinned)
    H.ratio_targets(bench, ["jitgrad compiled (whole step)", "jitgrad compiled, fwd-over-rev"], {"PyTorch eager": 0.5, "JAX jit": 0.8}, first_s=2.0)
    bench.ref("issue 29 (2026-11-29, another run): PyTorch eager 12.14 ms, torch.compile and torch.func + "
              "torch.compile raise, JAX jit 9.36 ms, jitgrad eager 9.28 ms, compiled 3.30 ms")
    bench.finish()
    if a.json:
        print(json.dumps({"id": "B12", "machine": H.machine_info(), "load_avg": os.getloadavg(), "rows": results}))


if __name__ == "__main__":
    main()
