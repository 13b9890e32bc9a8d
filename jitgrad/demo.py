"""The demo behind ``python -m jitgrad demo``: eager training of a small MLP on a toy problem, then an
anomaly-mode catch that names the user's line."""
from __future__ import annotations

import time
import warnings

import numpy as np

import jitgrad as jg
import jitgrad.nn.functional as F


def make_data(n=512, seed=0):
    """Two interleaved spirals: a small problem an MLP learns in a few hundred steps."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.5, 2 * np.pi, n)
    label = rng.integers(0, 2, n)
    r = t / (2 * np.pi)
    angle = t + np.pi * label
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(0, 0.02, (n, 2))
    return jg.tensor(x.astype(np.float32)), jg.tensor(label.astype(np.int64))


def init_params(seed=0, hidden=32):
    rng = np.random.default_rng(seed)

    def p(*shape, scale):
        return jg.tensor((rng.standard_normal(shape) * scale).astype(np.float32), requires_grad=True)
    return [p(2, hidden, scale=1.0), jg.zeros(hidden, requires_grad=True),
            p(hidden, hidden, scale=hidden ** -0.5), jg.zeros(hidden, requires_grad=True),
            p(hidden, 2, scale=hidden ** -0.5), jg.zeros(2, requires_grad=True)]


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = jg.tanh(x @ w1 + b1)
    h = jg.relu(h @ w2 + b2)
    return h @ w3 + b3


def train_step(params, x, y, lr=0.5):
    loss = F.cross_entropy(forward(params, x), y)
    loss.backward()
    with jg.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss


def run_compiled(steps: int) -> None:
    """The same step under @jg.compile: forward, backward and update traced into one graph, fused and compiled
    by Numba in the background while the first calls run on the reference interpreter."""
    x, y = make_data()
    params = init_params()
    step = jg.compile(lambda x, y: train_step(params, x, y).detach())
    print(f"\n@jg.compile (backend={step.backend}): the same training step as one traced graph")
    t0 = time.perf_counter()
    loss = step(x, y)
    print(f"  first call (trace + passes, interpreter while Numba compiles): {(time.perf_counter() - t0) * 1e3:.0f} ms,"
          f" loss {float(loss):.4f}")
    t0 = time.perf_counter()
    ready = step.wait(timeout=120)
    print(f"  compiled kernels {'ready' if ready else 'NOT ready'} after {time.perf_counter() - t0:.1f} s more "
          "(build processes compile them in parallel; the disk cache keeps them for the next run)")
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    dt = time.perf_counter() - t0
    with jg.no_grad():
        acc = float((forward(params, x).argmax(1) == y).float().mean())
    print(f"  {steps} compiled steps in {dt:.2f} s ({dt / steps * 1e6:.0f} us/step), loss {float(loss):.4f}, "
          f"accuracy {acc:.3f}; stats {step.stats['traces']} trace(s), {step.stats['hits']} cache hits, "
          f"{step.stats['compiled_calls']} calls on compiled code, {step.stats['interpreted_calls']} interpreted")
    ir = step.ir(x, y).splitlines()
    print(f"  the traced graph ({len(ir)} lines; first lines):")
    for ln in ir[:6]:
        print("   ", ln[:110])


def run(steps: int = 200) -> int:
    x, y = make_data()
    params = init_params()
    print(f"jitgrad {jg.__version__}: eager training of a 2-32-32-2 MLP on two spirals ({x.shape[0]} points)")
    t0 = time.perf_counter()
    for i in range(steps):
        loss = train_step(params, x, y)
        if i % max(1, steps // 5) == 0 or i == steps - 1:
            with jg.no_grad():
                acc = float((forward(params, x).argmax(1) == y).float().mean())
            print(f"  step {i:4d}  loss {float(loss):.4f}  accuracy {acc:.3f}")
    dt = time.perf_counter() - t0
    print(f"  {steps} eager steps in {dt:.2f} s ({dt / steps * 1e6:.0f} us/step)")

    run_compiled(steps)

    print("\nanomaly mode: a NaN born in backward is reported at the line that made it")
    z = jg.tensor([0.0, 1.0, 4.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with jg.autograd.detect_anomaly():
                r = jg.sqrt(z)          # d sqrt/dz at 0 is inf; times 0 below gives NaN
                (r * 0.0).sum().backward()
        except RuntimeError as e:
            lines = str(e).splitlines()
            print("  RuntimeError:", lines[0])
            for ln in lines[1:]:
                if "demo.py" in ln or "op:" in ln:
                    print("   ", ln.strip())
    return 0
