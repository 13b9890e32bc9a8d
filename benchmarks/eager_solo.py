"""B1 and B3 eager, each library in a process of its own (what a script gets: no peer imported beside it, no
peer's threads still spinning from its last op), default thread counts, alternating jitgrad and PyTorch.

    python benchmarks/eager_solo.py [--pairs 2] [b1 b3]
    python benchmarks/eager_solo.py --child b3 jitgrad      # one process (internal)

B1: ``mlp.py``'s step (MLP 784-512-512-10, batch 256, SGD; 200 timed steps); B3: ``b3_double_backward.py``'s
(``grad(create_graph=True)`` then a second ``grad``; 1,000 timed steps).  The time is the step as a user calls it
(the loss stays a tensor); the last losses of the two libraries are compared within 1e-4 (printed beside it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _steps(workload, name):
    """``(step, warm-up steps, timed steps)``: the benchmarks' own eager steps (``mlp.py``'s B1,
    ``b3_double_backward.py``'s B3), each returning something whose first element (or itself) is the loss."""
    if workload == "b1":
        import harness
        import mlp
        step, _ = getattr(mlp, f"make_{name}")(*harness.mlp_data(256, 784, 512, 10))
        return step, 30, 200
    import b3_double_backward as B
    step, _ = getattr(B, f"make_{name}")(*B.data(*B.SHAPE))
    return step, 300, 1000


def _loss(r) -> float:
    return float((r[0] if isinstance(r, tuple) else r).item())


def child(workload, name):
    step, warm, steps = _steps(workload, name)
    for _ in range(warm):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        r = step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": statistics.median(times) * 1e3, "loss": _loss(r)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=["b1", "b3"])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; a fresh process per library and pair")
    for w in a.workloads:
        for k in range(a.pairs):
            got = {}
            for name in ("jitgrad", "torch"):
                r = subprocess.run([sys.executable, __file__, "--child", w, name], capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{w} {name}: failed\n{r.stderr[-2000:]}")
                    break
                got[name] = json.loads(r.stdout.strip().splitlines()[-1])
            if len(got) == 2:
                j, t = got["jitgrad"], got["torch"]
                agree = abs(j["loss"] - t["loss"]) <= 1e-4 * max(1.0, abs(t["loss"]))
                print(f"{w} pair {k + 1}: jitgrad {j['ms']:.3f} ms, torch {t['ms']:.3f} ms, "
                      f"ratio {j['ms'] / t['ms']:.2f}x (losses {'agree' if agree else 'DIFFER'})")


if __name__ == "__main__":
    main()
