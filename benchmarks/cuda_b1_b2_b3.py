"""B1, B2, B3 on the CUDA target (``python -m jitgrad bench --device cuda``), beside PyTorch CUDA where installed.

- B1: a training step of an MLP 784-512-10 (cross-entropy, SGD) on a batch of 256, compiled, on the device;
- B2: N float32, ``loss = sum(tanh(x*w + b) * sigmoid(x))``, grads w.r.t. w and b; reported with the achieved
  bandwidth (5 N 4 bytes moved at the floor: read x, w, b; write gw, gb) against the device's peak;
- B3: a Hessian-vector product (double backward) of a 2-layer tanh MLP loss, compiled.

Targets when measured on a GPU: B2 >= 80% of peak memory bandwidth; B1/B3 no slower than PyTorch CUDA eager.
``--smoke`` runs tiny sizes (it works on Numba's simulator, ``NUMBA_ENABLE_CUDASIM=1``, where times mean nothing).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _timeit(fn, sync, reps):
    fn()
    sync()      # warm: compiled and cached
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def peak_bandwidth():
    """Bytes/s from the device's memory clock and bus width (None on the simulator)."""
    from numba import cuda
    try:
        dev = cuda.get_current_device()
        return 2.0 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8
    except Exception:  # noqa: BLE001 - the simulator has no such attributes
        return None


def b1(jg, sizes, reps):
    batch, d_in, hid, out = sizes
    rng = np.random.default_rng(0)
    W1 = jg.tensor(rng.standard_normal((d_in, hid), dtype=np.float32) * 0.05, device="cuda", requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((hid, out), dtype=np.float32) * 0.05, device="cuda", requires_grad=True)
    x = jg.tensor(rng.standard_normal((batch, d_in), dtype=np.float32), device="cuda")
    y = jg.tensor(rng.integers(0, out, batch), device="cuda")

    @jg.compile
    def step(x, y):
        loss = jg.nn.functional.cross_entropy((x @ W1).tanh() @ W2, y)
        loss.backward()
        with jg.no_grad():
            for p in (W1, W2):
                p -= 0.01 * p.grad
                p.grad = None
        return loss.detach()
    return _timeit(lambda: step(x, y), jg.cuda.synchronize, reps)


def b2(jg, n, reps):
    rng = np.random.default_rng(0)
    x, w, b = (jg.tensor(rng.standard_normal(n, dtype=np.float32), device="cuda") for _ in range(3))
    w.requires_grad_()
    b.requires_grad_()

    @jg.compile
    def step(x, w, b):
        loss = (jg.tanh(x * w + b) * jg.sigmoid(x)).sum()
        return jg.autograd.grad(loss, [w, b])
    return _timeit(lambda: step(x, w, b), jg.cuda.synchronize, reps)


def b3(jg, sizes, reps):
    d, hid = sizes
    rng = np.random.default_rng(0)
    W1 = jg.tensor(rng.standard_normal((d, hid)) * 0.3, device="cuda", requires_grad=True)
    W2 = jg.tensor(rng.standard_normal((hid, 1)) * 0.3, device="cuda", requires_grad=True)
    x = jg.tensor(rng.standard_normal((32, d)), device="cuda")
    v = jg.tensor(rng.standard_normal((d, hid)), device="cuda")

    @jg.compile
    def hvp(x, v):
        loss = ((x @ W1).tanh() @ W2).pow(2).mean()
        g, = jg.autograd.grad(loss, [W1], create_graph=True)
        h, = jg.autograd.grad((g * v).sum(), [W1])
        return h
    return _timeit(lambda: hvp(x, v), jg.cuda.synchronize, reps)


def torch_rows(sizes1, n2, sizes3, reps):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = "cuda"
    sync = torch.cuda.synchronize
    batch, d_in, hid, out = sizes1
    W1 = (torch.randn(d_in, hid, device=dev) * 0.05).requires_grad_()
    W2 = (torch.randn(hid, out, device=dev) * 0.05).requires_grad_()
    x = torch.randn(batch, d_in, device=dev)
    y = torch.randint(0, out, (batch,), device=dev)

    def s1():
        loss = torch.nn.functional.cross_entropy((x @ W1).tanh() @ W2, y)
        loss.backward()
        with torch.no_grad():
            for p in (W1, W2):
                p -= 0.01 * p.grad
                p.grad = None
    xs, w, b = (torch.randn(n2, device=dev) for _ in range(3))
    w.requires_grad_()
    b.requires_grad_()

    def s2():
        return torch.autograd.grad((torch.tanh(xs * w + b) * torch.sigmoid(xs)).sum(), [w, b])
    d, h = sizes3
    V1 = (torch.randn(d, h, device=dev, dtype=torch.float64) * 0.3).requires_grad_()
    V2 = (torch.randn(h, 1, device=dev, dtype=torch.float64) * 0.3).requires_grad_()
    x3 = torch.randn(32, d, device=dev, dtype=torch.float64)
    v3 = torch.randn(d, h, device=dev, dtype=torch.float64)

    def s3():
        loss = ((x3 @ V1).tanh() @ V2).pow(2).mean()
        g, = torch.autograd.grad(loss, [V1], create_graph=True)
        return torch.autograd.grad((g * v3).sum(), [V1])
    return [_timeit(f, sync, reps) for f in (s1, s2, s3)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes (runs on the simulator)")
    args = p.parse_args(argv)
    import jitgrad as jg
    if not jg.cuda.is_available():
        print("cuda bench: no CUDA device (install the cuda extra and run on a GPU, or NUMBA_ENABLE_CUDASIM=1 "
              "with --smoke)", file=sys.stderr)
        return 2
    if args.smoke:
        s1, n2, s3, reps = (8, 6, 5, 3), 300, (4, 3), 2
    else:
        s1, n2, s3, reps = (256, 784, 512, 10), 4_000_000, (64, 128), 20
    t1, t2, t3 = b1(jg, s1, reps), b2(jg, n2, reps), b3(jg, s3, reps)
    peak = peak_bandwidth()
    bw = 5 * n2 * 4 / t2
    peer = torch_rows(s1, n2, s3, reps)
    print(f"{'workload':40s} {'jitgrad CUDA':>14s} {'torch CUDA eager':>18s}")
    names = ["B1 MLP step " + "x".join(map(str, s1)), f"B2 elementwise + grads N={n2}", "B3 hvp (double backward)"]
    for k, (name, t) in enumerate(zip(names, (t1, t2, t3))):
        other = f"{peer[k] * 1e3:15.3f} ms" if peer else f"{'(not installed)':>18s}"
        print(f"{name:40s} {t * 1e3:11.3f} ms {other}")
    frac = f" = {100 * bw / peak:.1f}% of peak {peak / 1e9:.0f} GB/s" if peak else " (peak unknown: simulator)"
    print(f"B2 achieved bandwidth: {bw / 1e9:.2f} GB/s{frac}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
