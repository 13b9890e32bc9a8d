"""B1 and B3 eager, each library in a process of its own (what a script gets: no peer imported beside it, no
peer's threads still spinning from its last op), default thread counts, alternating jitgrad and PyTorch.

    python benchmarks/eager_solo.py [--pairs 2] [b1 b3]
    python benchmarks/eager_solo.py --child b3 jitgrad      # one process (internal)

B1: MLP 784-512-512-10, batch 256, relu, cross-entropy, SGD (200 timed steps); B3: the gradient penalty of
``b3_double_backward.py`` (``grad(create_graph=True)`` then a second ``grad``; 1,000 timed steps).  Each child
checks its last loss against the other library's within 1e-4 (printed beside the time).
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


def _b1(lib, F):
    import numpy as np
    rng = np.random.default_rng(0)
    X = lib.tensor(rng.standard_normal((256, 784), dtype=np.float32))
    Y = lib.tensor(rng.integers(0, 10, 256))
    ws = [rng.standard_normal((784, 512), dtype=np.float32) * 0.05, np.zeros(512, np.float32),
          rng.standard_normal((512, 512), dtype=np.float32) * 0.05, np.zeros(512, np.float32),
          rng.standard_normal((512, 10), dtype=np.float32) * 0.05, np.zeros(10, np.float32)]
    P = [lib.tensor(w, requires_grad=True) for w in ws]

    def step():
        W1, b1, W2, b2, W3, b3 = P
        h = lib.relu(lib.relu(X @ W1 + b1) @ W2 + b2)
        loss = F.cross_entropy(h @ W3 + b3, Y)
        loss.backward()
        with lib.no_grad():
            for p in P:
                p -= 0.01 * p.grad
                p.grad = None
        return float(loss)
    return step, 30, 200


def _b3(lib, F):
    import b3_double_backward as B
    x0, W10, b10, W20 = B.data(*B.SHAPE)
    x = lib.tensor(x0, requires_grad=True)
    W1, b1, W2 = (lib.tensor(a.copy(), requires_grad=True) for a in (W10, b10, W20))

    def step():
        d = lib.tanh(x @ W1 + b1) @ W2
        gx, = lib.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        lib.autograd.grad(loss, [W1, b1, W2])
        return float(loss)
    return step, 300, 1000


def child(workload, name):
    if name == "jitgrad":
        import jitgrad as lib
        import jitgrad.nn.functional as F
    else:
        import torch as lib
        import torch.nn.functional as F
    step, warm, steps = {"b1": _b1, "b3": _b3}[workload](lib, F)
    for _ in range(warm):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": statistics.median(times) * 1e3, "loss": loss}))


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
