"""B9's compiled step against its GEMM floor in one process, in alternating rounds: each round times some warm
steps (their median) and then the floor's products (``gemm_ceiling.py``'s, each the best of a few hot calls), and
prints their ratio.  The two scripts run one after the other can disagree by a third: on this host the floor alone
measured 18.5 and 25.6 ms a few minutes apart (a busy SMT sibling halves a core's FMA rate), so a ratio of separate
runs says more about the host's moment than about the step; alternating rounds see the same moments.

    OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/b9_floor_ratio.py [--rounds 8]
"""
import argparse
import os
import sys

for _k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_k, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=8)
ap.add_argument("--steps", type=int, default=10, help="B9 steps a round (their median)")
ap.add_argument("--repeat", type=int, default=5, help="hot calls of each floor product a round (their best)")
args = ap.parse_args()

import numpy as np  # noqa: E402
import jitgrad  # noqa: E402
import gemm_ceiling  # noqa: E402
import gpt_model  # noqa: E402
import harness  # noqa: E402

jitgrad.set_num_threads(1)
step, x, y = gpt_model.compiled_b9(jitgrad)
for _ in range(3):
    step(x, y)
products = gemm_ceiling.products(np.random.default_rng(0))
steps_ms, best_ms, floor_ms = [], [], []
for r in range(args.rounds):
    ts = harness.call_times(lambda: step(x, y), args.steps)
    s = float(np.median(ts)) * 1e3
    best_ms.append(min(ts) * 1e3)
    f = sum(min(harness.call_times(call, args.repeat)) * count for _, count, _, _, _, call in products) * 1e3
    steps_ms.append(s)
    floor_ms.append(f)
    print(f"round {r}: B9 step {s:6.2f} ms (best {best_ms[-1]:6.2f}), floor {f:6.2f} ms, ratio {s / f:.3f} (best "
          f"{best_ms[-1] / f:.3f})  (load {os.getloadavg()[0]:.2f})", flush=True)
ratios = sorted(s / f for s, f in zip(steps_ms, floor_ms))
print(f"B9 compiled at one thread / GEMM floor: median {ratios[len(ratios) // 2]:.3f} (rounds {ratios[0]:.3f}-"
      f"{ratios[-1]:.3f}); step median {np.median(steps_ms):.2f} ms, floor median {np.median(floor_ms):.2f} ms; best "
      f"step / floor of its round: median {np.median([b / f for b, f in zip(best_ms, floor_ms)]):.3f}")
