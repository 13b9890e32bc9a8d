"""B5 (eager): MLP 16-32-4 (B1's 3-layer step at batch 8), forward + backward + SGD, per-step median.

jitgrad eager vs PyTorch eager (when importable), measured in one process; prints medians and the ratio.
"""
import sys
import time

import numpy as np

import jitgrad as jg
import jitgrad.nn.functional as F


def shapes():
    if len(sys.argv) > 1 and "," in sys.argv[-1]:
        return [int(v) for v in sys.argv[-1].split(",")]
    return 8, 16, 32, 4


def data(B, D, H, C):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, D), dtype=np.float32)
    y = rng.integers(0, C, B)
    ws = [rng.standard_normal((D, H), dtype=np.float32) * 0.05, np.zeros(H, np.float32),
          rng.standard_normal((H, H), dtype=np.float32) * 0.05, np.zeros(H, np.float32),
          rng.standard_normal((H, C), dtype=np.float32) * 0.05, np.zeros(C, np.float32)]
    return x, y, ws


def median_step(step, runs):
    for _ in range(20):
        step()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def jitgrad_step(x, y, ws):
    x, y = jg.tensor(x), jg.tensor(y)
    params = [jg.tensor(w, requires_grad=True) for w in ws]
    W1, b1, W2, b2, W3, b3 = params

    def step():
        h = jg.relu(x @ W1 + b1)
        h = jg.relu(h @ W2 + b2)
        loss = F.cross_entropy(h @ W3 + b3, y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                p -= 0.01 * p.grad
                p.grad = None
        return loss
    return step


def torch_step(x, y, ws):
    import torch
    torch.set_num_threads(2)
    x, y = torch.tensor(x), torch.tensor(y)
    params = [torch.tensor(w, requires_grad=True) for w in ws]
    W1, b1, W2, b2, W3, b3 = params

    def step():
        h = torch.relu(x @ W1 + b1)
        h = torch.relu(h @ W2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ W3 + b3, y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 0.01 * p.grad
                p.grad = None
        return loss
    return step


def main(runs=2000):
    B, D, H, C = shapes()
    args = data(B, D, H, C)
    rows = [("jitgrad eager", median_step(jitgrad_step(*args), runs))]
    try:
        rows.append(("torch eager", median_step(torch_step(*args), runs)))
    except ImportError:
        pass
    base = rows[0][1]
    print(f"B5 eager B={B} D={D} H={H} C={C} ({runs} steps, medians)")
    for name, t in rows:
        print(f"  {name:16s} {t * 1e6:9.1f} us/step   jitgrad/this = {base / t:5.2f}")


if __name__ == "__main__":
    main()
