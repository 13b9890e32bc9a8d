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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import ONE_THREAD_ENV  # noqa: E402  (imports no NumPy)

for _name, _value in ONE_THREAD_ENV.items():      # before NumPy, torch or JAX start their thread pools
    os.environ.setdefault(_name, _value)

import pinn as W  # noqa: E402
import harness as H  # noqa: E402

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


def main():
    H.workload_main(
        __doc__, __file__, "B12",
        "PINN step, viscous Burgers (u_x, u_t, u_xx per point, Adam): MLP 2-64-64-64-1, "
        "2,048 + 256 points",
        CONFIGS, W, ["jitgrad compiled (whole step)", "jitgrad compiled, fwd-over-rev"],
        "issue 29 (2026-11-29, another run): PyTorch eager 12.14 ms, torch.compile and torch.func + "
        "torch.compile raise, JAX jit 9.36 ms, jitgrad eager 9.28 ms, compiled 3.30 ms")


if __name__ == "__main__":
    main()
