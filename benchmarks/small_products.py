"""Attention's small batched products, compiled: jitgrad's own small-GEMM kernel against SciPy's OpenBLAS.

B9's attention makes six kinds of batched product per layer ([B, H, T, D] = [16, 4, 64, 32]: 64 products of
64 x 64 x 32 each): ``q @ k.mT`` and ``att @ v`` forward, and their four gradients.  Each kind is compiled alone
(``jg.compile``), called on the same inputs, and timed; outputs are checked against NumPy in float64 in the same
run.  Each configuration runs in a fresh process, ``JITGRAD_SMALL_GEMM=1`` (the kernel, ``codegen/kernels/
small_gemm.py``) and ``=0`` (OpenBLAS for every product) alternating, at 1 and 2 threads.

    python benchmarks/small_products.py [--rounds 3] [--calls 200]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

B, H, T, D = 16, 4, 64, 32
KINDS = {                       # name: (left shape, right shape, transpose the right operand's last two dims)
    "q @ k.mT": ((B, H, T, D), (B, H, T, D), True),
    "att @ v": ((B, H, T, T), (B, H, T, D), False),
    "d_att = g @ v.mT": ((B, H, T, D), (B, H, T, D), True),
    "d_v = att.mT @ g": ((B, H, T, T), (B, H, T, D), "left"),
    "d_q = d_s @ k": ((B, H, T, T), (B, H, T, D), False),
    "d_k = d_s.mT @ q": ((B, H, T, T), (B, H, T, D), "left"),
}


def child(kind, calls):
    import numpy as np
    import jitgrad as jg
    ls, rs, tr = KINDS[kind]
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(ls).astype(np.float32)
    b_np = rng.standard_normal(rs).astype(np.float32)
    if tr is True:
        f = jg.compile(lambda a, b: a @ b.transpose(-2, -1))
        ref = a_np.astype(np.float64) @ np.swapaxes(b_np, -1, -2).astype(np.float64)
    elif tr == "left":
        f = jg.compile(lambda a, b: a.transpose(-2, -1) @ b)
        ref = np.swapaxes(a_np, -1, -2).astype(np.float64) @ b_np.astype(np.float64)
    else:
        f = jg.compile(lambda a, b: a @ b)
        ref = a_np.astype(np.float64) @ b_np.astype(np.float64)
    a, b = jg.tensor(a_np), jg.tensor(b_np)
    out = f(a, b)
    f.wait() if hasattr(f, "wait") else None
    for _ in range(5):
        out = f(a, b)
    err = float(np.max(np.abs(out.numpy() - ref)) / np.max(np.abs(ref)))
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        f(a, b)
        ts.append(time.perf_counter() - t)
    return {"min_us": min(ts) * 1e6, "median_us": statistics.median(ts) * 1e6, "rel_err": err,
            "launches": [(l.kind, l.parallel) for l in f.launches(a, b)]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; [B, H, T, D] = {[B, H, T, D]}, float32; min / median "
          f"per call over {args.calls} calls, best of {args.rounds} fresh processes")
    print("| product | threads | OpenBLAS | small-GEMM kernel | speedup | max rel. error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in KINDS:
        for threads in (1, 2):
            got = {"0": [], "1": []}
            err = 0.0
            for _ in range(args.rounds):
                for small in ("1", "0"):
                    env = dict(os.environ, JITGRAD_SMALL_GEMM=small, OPENBLAS_NUM_THREADS=str(threads),
                               NUMBA_NUM_THREADS=str(threads), JITGRAD_BACKGROUND_COMPILE="0")
                    r = subprocess.run([sys.executable, __file__, "--child", kind, "--calls", str(args.calls)],
                                       env=env, capture_output=True, text=True, timeout=600)
                    line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
                    if r.returncode or line is None:
                        raise RuntimeError(f"{kind}: failed\n{r.stderr[-2000:]}")
                    res = json.loads(line)
                    if res["rel_err"] > 1e-5:
                        raise AssertionError(f"{kind} (JITGRAD_SMALL_GEMM={small}): relative error {res['rel_err']}")
                    err = max(err, res["rel_err"])
                    got[small].append((res["min_us"], res["median_us"]))
            blas = min(got["0"])
            ours = min(got["1"])
            print(f"| `{kind}` | {threads} | {blas[0]:.0f} / {blas[1]:.0f} us | {ours[0]:.0f} / {ours[1]:.0f} us | "
                  f"{blas[0] / ours[0]:.2f}x | {err:.1e} |")


if __name__ == "__main__":
    main()
