"""Eager ops over large arrays: the NumPy impls against the native kernels (jit/eager_kernels.py), in one process,
outputs checked; and what a kernel's first call costs, cold (empty cache) and warm (a second process).

    python benchmarks/eager_kernels.py                  # B9's GELU (16*64, 512) and softmax (16, 4, 64, 64), float32
    python benchmarks/eager_kernels.py --repeat 50 --builds

Rows: NumPy (the OpDef's impl, what eager ran before), native serial (set_num_threads(1)), native on the pool
(default threads); each the median of --repeat calls of forward + vjp through the public API, kernels linked
first.  --builds: a fresh process with an empty cache dir times its first call (the kernel built synchronously,
JITGRAD_EAGER_KERNELS=sync, imports included), then a second process with the same dir (loaded from disk).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=30)
ap.add_argument("--builds", action="store_true", help="also time cold and warm first calls in fresh processes")
args = ap.parse_args()

os.environ.setdefault("JITGRAD_EAGER_KERNELS", "sync")
import harness  # noqa: E402
import jitgrad as jg  # noqa: E402
import jitgrad.nn.functional as F  # noqa: E402
from scipy.special import erf  # noqa: E402
from jitgrad.ir import settings  # noqa: E402
from jitgrad.jit import eager_kernels as ek  # noqa: E402
from jitgrad.runtime import dispatch  # noqa: E402


def load():
    return open("/proc/loadavg").read().split()[:3]


def median_ms(fn, repeat):
    return 1e3 * float(np.median(harness.call_times(fn, repeat)))


def gelu_step(x0, g0):
    x = jg.tensor(x0, requires_grad=True)
    y = F.gelu(x)
    y.backward(jg.tensor(g0))
    return y.detach().numpy(), x.grad.numpy()


def softmax_step(a0, g0):
    a = jg.tensor(a0, requires_grad=True)
    y = F.softmax(a, -1)
    y.backward(jg.tensor(g0))
    return y.detach().numpy(), a.grad.numpy()


def run(mode, fn, *arrays):
    dispatch._RULES.clear()
    ek.ENABLED = mode != "numpy"
    prev = settings.STATE.num_threads
    if mode == "serial":
        settings.STATE.num_threads = 1
    try:
        out = fn(*arrays)
        fn(*arrays)        # (the parallel kernel is chosen once the serial one told the loop's cost)
        before = dict(ek.COUNTS)
        ms = median_ms(lambda: fn(*arrays), args.repeat)
        native = ek.COUNTS["native_calls"] - before["native_calls"]
    finally:
        settings.STATE.num_threads = prev
    return ms, out, native


rng = np.random.default_rng(0)
x0 = rng.standard_normal((16 * 64, 512)).astype(np.float32) * 2
gx = rng.standard_normal(x0.shape).astype(np.float32)
a0 = rng.standard_normal((16, 4, 64, 64)).astype(np.float32) * 2
ga = rng.standard_normal(a0.shape).astype(np.float32)
x64 = x0.astype(np.float64)
gelu_ref = 0.5 * x64 * (1 + erf(x64 / np.sqrt(2)))
dgelu_ref = gx * (0.5 * (1 + erf(x64 / np.sqrt(2))) + x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi))
e = np.exp(a0.astype(np.float64) - a0.max(-1, keepdims=True))
sm_ref = e / e.sum(-1, keepdims=True)

print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {' '.join(load())} (before), "
      f"{len(os.sched_getaffinity(0))} cores, pool threads {settings.default_threads()}")
for name, fn, arrays, refs in (("GELU fwd+bwd (1024, 512) f32", gelu_step, (x0, gx), (gelu_ref, dgelu_ref)),
                               ("softmax fwd+bwd (16, 4, 64, 64) f32", softmax_step, (a0, ga), (sm_ref, None))):
    rows = {}
    for mode in ("numpy", "serial", "pool"):
        ms, out, native = run(mode, fn, *arrays)
        err = [float(np.abs(o - r).max()) for o, r in zip(out, refs) if r is not None]
        rows[mode] = ms
        print(f"{name:38s} {mode:7s} {ms:8.2f} ms  native calls/step {native / (args.repeat + 1):.0f}  "
              f"max |err| vs float64 {', '.join(f'{v:.2e}' for v in err)}")
    print(f"{'':38s} speedup serial {rows['numpy'] / rows['serial']:.2f}x, pool {rows['numpy'] / rows['pool']:.2f}x")
print(f"# load average {' '.join(load())} (after)")

if args.builds:
    code = r"""
import json, time, sys
import numpy as np
t0 = time.perf_counter()
import jitgrad as jg, jitgrad.nn.functional as F
from jitgrad.jit import eager_kernels as ek
from jitgrad.runtime import dispatch
from jitgrad.ir.ops import OPS
x = jg.tensor(np.ones((1024, 512), np.float32))
t1 = time.perf_counter()
F.gelu(x)
t2 = time.perf_counter()
dispatch.bind(OPS["gelu_backward"], x, x)
t3 = time.perf_counter()
F.softmax(jg.tensor(np.ones((16, 4, 64, 64), np.float32)), -1)
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "gelu_first_s": t2 - t1, "gelu_backward_first_s": t3 - t2,
                  "softmax_first_s": t4 - t3, "counts": ek.COUNTS, "numba": "numba" in sys.modules}))
"""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, JITGRAD_CACHE_DIR=d, JITGRAD_EAGER_KERNELS="sync")
        for label in ("cold (empty cache)", "warm (second process)"):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{label:24s} first calls: gelu {1e3 * res['gelu_first_s']:.0f} ms (llvmlite's import included), "
                  f"gelu_backward {1e3 * res['gelu_backward_first_s']:.0f} ms, softmax "
                  f"{1e3 * res['softmax_first_s']:.0f} ms; compiled {res['counts']['kernels_compiled']}, loaded "
                  f"{res['counts']['kernels_loaded']}, Numba imported: {res['numba']}; load {' '.join(load())}")
