"""B7: gradcheck + gradgradcheck of ``log_softmax(tanh(x @ W1) @ W2, dim=1)``, x 8x16, W1 16x32, W2 32x4, float64.

Four tables (gradcheck / gradgradcheck, each in slow and fast mode): jitgrad eager, jitgrad on the same function
under ``@jg.compile`` (when available), and PyTorch eager (when importable), timed in one process with the shared
harness (interleaved rounds, medians).  Target (shared/BENCHMARKS.md): at most 0.5x PyTorch's time in each mode.
Prints medians and ratios; asserts nothing (a check that returns False is reported as a failed configuration).

    python benchmarks/b7_gradcheck.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as H  # noqa: E402

SHAPES = ((8, 16), (16, 32), (32, 4))
# PyTorch's B7 figures from shared/BENCHMARKS.md (another machine): (gradcheck, gradgradcheck) per mode, seconds
REFERENCE = {False: (0.808, 1.588), True: (0.014, 0.013)}


def data(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def jitgrad_factory(which, fast, compiled=False):
    import jitgrad as jg

    def make():
        x, w1, w2 = (jg.tensor(a, dtype=jg.float64, requires_grad=True) for a in data())

        def f(x, w1, w2):
            return jg.log_softmax(jg.tanh(x @ w1) @ w2, dim=1)
        fn = jg.compile(f) if compiled else f
        check = getattr(jg.autograd, which)

        def step():
            ok = check(fn, (x, w1, w2), fast_mode=fast)
            if ok is not True:
                raise AssertionError(f"jitgrad {which} returned {ok!r}")
            return ok
        return step
    return make


def torch_factory(which, fast):
    def make():
        torch = H.import_torch()
        x, w1, w2 = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in data())

        def f(x, w1, w2):
            return torch.log_softmax(torch.tanh(x @ w1) @ w2, dim=1)
        check = getattr(torch.autograd, which)

        def step():
            ok = check(f, (x, w1, w2), fast_mode=fast)
            if ok is not True:
                raise AssertionError(f"torch {which} returned {ok!r}")
            return ok
        return step
    return make


def main():
    import jitgrad as jg
    results = {}
    for fast in (False, True):
        for k, which in enumerate(("gradcheck", "gradgradcheck")):
            mode = "fast_mode" if fast else "slow mode"
            unit = "ms"
            b = H.Bench("B7", f"{which} ({mode}) of log_softmax(tanh(x@W1)@W2), x 8x16, W1 16x32, W2 32x4, f64",
                        unit=unit, baselines=("PyTorch eager",))
            runs, budget = (15, 6.0) if not fast else (300, 2.0)
            b.run("jitgrad eager", "jitgrad", jitgrad_factory(which, fast), runs, warmup=1, budget_s=budget,
                  min_runs=3)
            if hasattr(jg, "compile"):
                b.run("jitgrad @compile", "jitgrad", jitgrad_factory(which, fast, compiled=True), runs, warmup=1,
                      budget_s=budget, min_runs=3)
            if H.have("torch"):
                b.run("PyTorch eager", "peer", torch_factory(which, fast), runs, warmup=1, budget_s=budget,
                      min_runs=3)
            else:
                b.skip("PyTorch eager", "peer", "torch not installed")
            ref = REFERENCE[fast][k]
            b.ref(f"PyTorch eager {which} ({mode}): {ref * 1e3:g} ms (shared/BENCHMARKS.md)")
            b.time_all()
            ours, peer = b.row("jitgrad eager"), b.row("PyTorch eager")
            if ours is not None and ours.median is not None:
                if peer is not None and peer.median is not None:
                    r = ours.median / peer.median
                    b.target("at most 0.5x PyTorch eager measured here", r <= 0.5, f"{r:.2f}x")
                r = ours.median / ref
                b.target("at most 0.5x the BENCHMARKS.md PyTorch figure", r <= 0.5,
                         f"{ours.median * 1e3:.1f} ms vs {ref * 1e3:g} ms = {r:.2f}x")
                results[(fast, which)] = (ours.median, peer.median if peer is not None else None)
            b.finish()
    print("\nB7 summary (medians, ms; ratio = jitgrad eager / PyTorch eager measured here):")
    for fast in (False, True):
        gc, ggc = results.get((fast, "gradcheck")), results.get((fast, "gradgradcheck"))
        parts = []
        for name, res in (("gradcheck", gc), ("gradgradcheck", ggc)):
            if res is None:
                parts.append(f"{name} -")
                continue
            ours, peer = res
            parts.append(f"{name} {ours * 1e3:.1f}" + (f" vs {peer * 1e3:.1f} ({ours / peer:.2f}x)" if peer else ""))
        print(f"  {'fast_mode' if fast else 'slow mode':9s}  " + "   ".join(parts))


if __name__ == "__main__":
    main()
