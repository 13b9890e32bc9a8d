"""B2 (mathlib): one fused loop computing loss = sum(tanh(x*w + b) * sigmoid(x)) and its gradients w.r.t. the
scalars w and b, over N = 4,000,000 float32, with jitgrad's vectorisable mathlib vs Numba's libm calls
(math.tanh / math.exp), serial and with prange.  Prints medians and ratios; no asserts.

    python benchmarks/b2_mathlib.py [N]
"""
import math
import sys
import time

import numpy as np
from numba import njit, prange

from jitgrad.codegen.mathlib_numba import sigmoid_f32, tanh_f32

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}      # the generated loops' flags
F1 = np.float32(1.0)


@njit(inline="always", fastmath=FASTMATH)
def _tanh_libm(v):
    return math.tanh(v)


@njit(inline="always", fastmath=FASTMATH)
def _sigmoid_libm(v):
    return F1 / (F1 + math.exp(-v))


def make(tanh, sigmoid, parallel):
    loop = prange if parallel else range

    @njit(fastmath=FASTMATH, parallel=parallel, error_model="numpy")
    def step(x, w, b):
        loss = np.float32(0.0)
        gw = np.float32(0.0)
        gb = np.float32(0.0)
        for i in loop(x.shape[0]):
            xi = x[i]
            t = tanh(xi * w + b)
            s = sigmoid(xi)
            loss += t * s
            d = (F1 - t * t) * s              # d loss / d (x*w + b)
            gw += d * xi
            gb += d
        return loss, gw, gb
    return step


def median_time(f, args, runs):
    f(*args)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000_000
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(3.0)
    w, b = np.float32(0.7), np.float32(-0.2)
    # float64 reference for the values
    x64 = x.astype(np.float64)
    t64 = np.tanh(x64 * float(w) + float(b))
    s64 = 1.0 / (1.0 + np.exp(-x64))
    d64 = (1.0 - t64 * t64) * s64
    ref = ((t64 * s64).sum(), (d64 * x64).sum(), d64.sum())
    print(f"B2 mathlib: N={n:,} float32, loss and d/dw, d/db in one fused loop")
    print(f"{'variant':28s} {'median ms':>10s}   loss / grad_w / grad_b (float64 reference "
          f"{ref[0]:.6g} / {ref[1]:.6g} / {ref[2]:.6g})")
    results = {}
    for parallel in (False, True):
        for label, tanh, sigmoid in (("libm (math.tanh/exp)", _tanh_libm, _sigmoid_libm),
                                     ("mathlib", tanh_f32, sigmoid_f32)):
            f = make(tanh, sigmoid, parallel)
            t = median_time(f, (x, w, b), runs=15 if parallel else 9)
            vals = f(x, w, b)
            name = f"{label} {'prange' if parallel else 'serial'}"
            results[(label, parallel)] = t
            print(f"{name:28s} {t * 1e3:10.2f}   {vals[0]:.6g} / {vals[1]:.6g} / {vals[2]:.6g}")
    for parallel in (False, True):
        lib, mat = results[("libm (math.tanh/exp)", parallel)], results[("mathlib", parallel)]
        print(f"speed-up mathlib vs libm, {'prange' if parallel else 'serial'}: {lib / mat:.1f}x")


if __name__ == "__main__":
    main()
