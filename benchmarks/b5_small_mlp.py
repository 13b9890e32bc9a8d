"""B5: MLP 16-32-4, batch 8: B1's step (forward + backward + SGD update) at a size where per-call overhead
is everything.

Target: jitgrad compiled at most 15 us per step (4x faster than JAX jit).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as H  # noqa: E402
import mlp  # noqa: E402

SHAPE = (8, 16, 32, 4)
TARGET_S = 15e-6


def main():
    x, y, ws = H.mlp_data(*SHAPE)
    b = H.Bench("B5", "MLP 16-32-4, batch 8, SGD step (per-call overhead)", unit="us",
                reference=mlp.reference(x, y, ws), tol={"loss": 1e-4, "grad W3": 2e-3},
                baselines=("fastest peer", "NumPy hand-written (floor)"))
    mlp.add_all(b, x, y, ws, runs=4000, budget_s=1.5)
    b.ref("hand NumPy 129 us (one Numba call about 3 us); PyTorch eager 543 us; torch.compile 731 us; JAX jit 65 us; "
          "HIPS autograd 1469 us")
    b.note("jitgrad compiled steps return loss.detach(); PyTorch's returns the loss (graph already freed).")
    b.time_all()
    jr = b.row("JAX jit")
    for name in ("jitgrad compile(interpret)", "jitgrad compile(numba)"):
        r = b.row(name)
        if r.median is None:
            b.target(f"{name} <= 15 us per step", None, r.error or "not measured")
            continue
        detail = f"{r.median * 1e6:.1f} us"
        if jr is not None and jr.median is not None:
            detail += f"; JAX jit / jitgrad = {jr.median / r.median:.2f}"
        b.target(f"{name} <= 15 us per step", r.median <= TARGET_S, detail)
    b.finish()


if __name__ == "__main__":
    main()
