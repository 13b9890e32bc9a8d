"""B11: one training step of a small machine-learned force field (second-order autodiff in training).

The workload (force_field.py): 8 configurations of 32 atoms, radial Gaussian features over all ordered pairs with
a cosine cutoff, a per-atom MLP 16-64-64-1 (tanh), E the sum of atom energies, forces F = -dE/dx kept
differentiable (``create_graph=True``), loss on E and F, backward to the MLP, Adam.  float32 for the timings.

Every configuration runs in its own fresh process (one thread everywhere, empty compiler caches, so the first
call is a cold build; the timed steps pinned to one core), and prints one JSON line: the median of 30 steps after
5, the first call, the loss before and after one step, peak RSS, and the losses of 4 steps of a fresh float64 copy
of the same step.  The table checks every configuration's float64 losses against the first row's (PyTorch eager
when installed) to 1e-8 relative, the float32 ones to 1e-4.

    python benchmarks/b11_forces.py                 # every configuration, the table
    python benchmarks/b11_forces.py --only jitgrad  # the configurations whose name contains "jitgrad"
    python benchmarks/b11_forces.py --json          # also one JSON line with every row's result
    python benchmarks/b11_forces.py --child jitgrad:compiled     # one configuration, in this process

Configurations: PyTorch eager; torch.compile on the whole step and on the model only (they raise on the double
backward: their error is the row); torch.func (forces by ``grad`` of the energy) eager and under torch.compile;
JAX jit (when installed); jitgrad eager, ``@jg.compile`` on the whole step (forward, forces, loss, backward,
Adam), and ``jg.compile(model)`` inside the eager step.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import ONE_THREAD_ENV  # noqa: E402  (imports no NumPy)

for _name, _value in ONE_THREAD_ENV.items():      # before NumPy, torch or JAX start their thread pools
    os.environ.setdefault(_name, _value)

import force_field as W  # noqa: E402
import harness as H  # noqa: E402

# (row name, child key, row kind, module it needs)
CONFIGS = [
    ("PyTorch eager", "torch:eager", "peer", "torch"),
    ("torch.compile, whole step", "torch:compiled", "peer", "torch"),
    ("torch.compile, model only", "torch:model", "peer", "torch"),
    ("torch.func eager", "torch-func:eager", "peer", "torch"),
    ("torch.func + torch.compile", "torch-func:compiled", "peer", "torch"),
    ("JAX jit", "jax:compiled", "peer", "jax"),
    ("jitgrad eager", "jitgrad:eager", "jitgrad", "jitgrad"),
    ("jitgrad compiled (whole step)", "jitgrad:compiled", "jitgrad", "jitgrad"),
    ("jitgrad compile(model), eager step", "jitgrad:model", "jitgrad", "jitgrad"),
]


def main():
    H.workload_main(
        __doc__, __file__, "B11",
        "force-field training step (forces by create_graph, Adam): 8 x 32 atoms, MLP 16-64-64-1",
        CONFIGS, W, ["jitgrad compiled (whole step)"],
        "issue 29 (2026-11-29, another run): PyTorch eager 2.63 ms, torch.func + torch.compile 0.88 ms "
        "(first call 15.3 s), JAX jit 0.94 ms, jitgrad eager 4.99 ms, compiled 2.50 ms")


if __name__ == "__main__":
    main()
