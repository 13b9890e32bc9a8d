"""The GEMM floor of one B9 step on this machine: every matrix product B9's training step does (forward and
backward, default shape), timed alone through the BLAS jitgrad calls (SciPy's OpenBLAS ``sgemm``) and through
torch's ``mm`` (if installed), one thread each, outputs checked against a float64 product.

No implementation that does B9's float32 products with these libraries can take less than this floor per step,
so it says whether B9's targets (compiled <= 0.5x PyTorch eager) are reachable here at all:

    OPENBLAS_NUM_THREADS=1 python benchmarks/gemm_ceiling.py [--torch-eager-ms 85.7]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import harness  # noqa: E402

V, T, L, H, C, B = 65, 64, 4, 4, 128, 16
N, D = B * T, C // H


def linear(m, k, n, count):
    """y = x W^T (m x k @ k x n) and its backward: dX = dY W (m x n @ n x k), dW = dY^T X (n x m @ m x k)."""
    return [((m, k, n), count), ((m, n, k), count), ((n, m, k), count)]


SHAPES = (linear(N, C, 3 * C, L) + linear(N, C, C, L) + linear(N, C, 4 * C, L) + linear(N, 4 * C, C, L)
          + linear(N, C, V, 1)
          # attention, batched over (batch, head): S = Q K^T (T x D @ D x T), Y = P V (T x T @ T x D), and the
          # two products of each one's backward (the same sizes, transposed)
          + [((T, D, T), 3 * L), ((T, T, D), 3 * L)])
BATCHED = {(T, D, T): B * H, (T, T, D): B * H}      # products of these sizes are batches of B*H


def best(fn, repeat):
    return min(harness.call_times(fn, repeat))


def products(rng):
    """``((m, k, n), count, batch, a, b, call)`` for each of B9's products: random operands and the call the floor
    times (``matmul2d``, or ``np.matmul`` over a batch of ``batch``)."""
    from jitgrad.ir.ops.blas import matmul2d
    out = []
    for (m, k, n), count in SHAPES:
        nb = BATCHED.get((m, k, n), 0)
        a = rng.standard_normal(((nb,) if nb else ()) + (m, k)).astype(np.float32)
        b = rng.standard_normal(((nb,) if nb else ()) + (k, n)).astype(np.float32)
        out.append(((m, k, n), count, nb, a, b, (lambda a=a, b=b: np.matmul(a, b)) if nb else
                    (lambda a=a, b=b: matmul2d(a, b))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-eager-ms", type=float, default=None, help="B9 PyTorch eager median, for the ratio")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    total = {"openblas": 0.0, "torch": 0.0}
    macs = 0
    print(f"{'m x k @ k x n':>20s} {'per step':>8s} {'openblas us':>12s} {'GMAC/s':>7s} {'torch us':>9s} {'GMAC/s':>7s}")
    for (m, k, n), count, nb, a, b, ours in products(rng):     # (a batch: NumPy's loop over one BLAS)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert np.abs(ours() - ref).max() <= 1e-4 * np.abs(ref).max() * k ** 0.5, "sgemm result wrong"
        t_ob = best(ours, args.repeat)
        total["openblas"] += t_ob * count
        work = m * k * n * max(nb, 1)
        label = f"{nb}x " if nb else ""
        row = f"{label + f'{m}x{k} @ {k}x{n}':>20s} {count:8d} {t_ob * 1e6:12.1f} {work / t_ob / 1e9:7.1f}"
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            theirs = (lambda: torch.bmm(ta, tb)) if nb else (lambda: torch.mm(ta, tb))
            assert np.abs(theirs().numpy() - ref).max() <= 1e-4 * np.abs(ref).max() * k ** 0.5
            t_t = best(theirs, args.repeat)
            total["torch"] += t_t * count
            row += f" {t_t * 1e6:9.1f} {work / t_t / 1e9:7.1f}"
        print(row)
        macs += work * count
    print(f"B9 step: {macs / 1e9:.2f} G multiply-adds")
    print(f"GEMM floor per step: OpenBLAS {total['openblas'] * 1e3:.1f} ms"
          + (f", torch.mm {total['torch'] * 1e3:.1f} ms" if torch is not None else ""))
    if args.torch_eager_ms:
        floor = total["openblas"] * 1e3
        print(f"0.5x PyTorch eager ({args.torch_eager_ms:.1f} ms) = {args.torch_eager_ms / 2:.1f} ms; the OpenBLAS "
              f"floor alone is {floor / args.torch_eager_ms:.2f}x PyTorch eager")


if __name__ == "__main__":
    main()
