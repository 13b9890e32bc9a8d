"""Issue 16's codegen figures, each configuration in its own fresh process, outputs checked in the same run.

    python benchmarks/codegen_fresh.py [b2] [chain] [compile]

- ``b2``: N = 4,000,000 float32, ``sum(tanh(x*w+b)*sigmoid(x))`` and the grads of w and b: jitgrad compiled
  (fresh outputs, as a user gets them), the preallocated-output floor (a parallel Numba loop reading x, w, b and
  writing two preallocated arrays: the memory traffic, no arithmetic to speak of) and JAX jit.  Targets:
  jitgrad <= 1.5x the floor, >= 2x faster than JAX.
- ``chain``: a 1M-element float32 chain of 16 tanh/sigmoid/mul ops, compiled vs eager, timed from the first
  compiled call (kernels already in the cache: that is what a user's second run sees).  Target: >= 3x.
- ``compile``: cold compile (empty kernel cache) of a 1,000-op and a 10,000-op elementwise chain with its
  backward: seconds to the first result and peak RSS.  Targets: <= 10 s; <= 100 s and < 2 GB.

Medians of repeated calls after warm-up; the machine load (1-minute load average) is printed with each figure:
on a shared machine the figures are noisy, and the ratios measured side by side are what to compare.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_COMMON = r'''
import json, os, resource, sys, time
import numpy as np
def med(fn, n):
    fn(); fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1e3)
def report(**kw):
    kw["load"] = os.getloadavg()[0]
    kw["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(kw))
'''

_B2 = _COMMON + r'''
from b2_workload import floor_kernel, inputs, matches, reference, step
x0, w0, b0 = inputs()
ref = reference(x0, w0, b0)
mode = sys.argv[1]
if mode == "jitgrad":
    import jitgrad as jg
    x = jg.tensor(x0); w = jg.tensor(w0, requires_grad=True); b = jg.tensor(b0, requires_grad=True)
    f = jg.compile(step(jg), backend="numba")
    r = f(x, w, b)
    ok = matches((float(r[0]), r[1].numpy(), r[2].numpy()), ref)
    del r
    report(mode=mode, ms=med(lambda: f(x, w, b), 40), ok=ok)
elif mode == "floor":
    k = floor_kernel()
    o1, o2 = np.empty_like(x0), np.empty_like(x0)
    k(x0, w0, b0, o1, o2)
    ok = bool(np.array_equal(o1, x0 + w0))
    report(mode=mode, ms=med(lambda: k(x0, w0, b0, o1, o2), 100), ok=ok)
elif mode == "jax":
    import jax, jax.numpy as jnp
    x, w, b = jnp.asarray(x0), jnp.asarray(w0), jnp.asarray(b0)
    g = jax.jit(jax.value_and_grad(lambda w, b, x: jnp.sum(jnp.tanh(x * w + b) * jax.nn.sigmoid(x)), argnums=(0, 1)))
    loss, (gw, gb) = g(w, b, x)
    ok = matches((float(loss), np.asarray(gw), np.asarray(gb)), ref)
    report(mode=mode, ms=med(lambda: jax.block_until_ready(g(w, b, x)), 40), ok=ok)
'''

_CHAIN = _COMMON + r'''
import jitgrad as jg
from elementwise_chains import mixed_chain as chain
x = jg.tensor(np.linspace(-2, 2, 1 << 20, dtype=np.float32))
f = jg.compile(chain, backend="numba")
t0 = time.perf_counter(); r = f(x); first = (time.perf_counter() - t0) * 1e3
ok = bool(np.allclose(r.numpy(), chain(x).numpy(), rtol=1e-5, atol=1e-6))
report(mode="chain", compiled_ms=med(lambda: f(x), 30), eager_ms=med(lambda: chain(x), 10), first_ms=first, ok=ok)
'''

_COMPILE = _COMMON + r'''
import jitgrad as jg
from jitgrad.codegen.native import build
from elementwise_chains import tanh_scale_reference, tanh_scale_step
n = int(sys.argv[1])
x = jg.tensor(np.linspace(-1, 1, 1000, dtype=np.float32), requires_grad=True)
t0 = time.perf_counter()
f = jg.compile(tanh_scale_step(n), backend="numba")
r = f(x)
secs = time.perf_counter() - t0
want = tanh_scale_reference(x.detach().numpy(), n)
ok = bool(np.allclose(r.numpy(), want, rtol=1e-3, atol=1e-4)) and f.stats["compiled_calls"] == 1
report(mode=f"compile {n}", seconds=secs, ok=ok, kernels_compiled=build.COUNTS["kernels_compiled"])
'''


def _run(code, *args, env=None):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(code)
    # the repository (jitgrad) and this folder (the shared workloads: b2_workload.py, elementwise_chains.py)
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]),
             JITGRAD_BACKGROUND_COMPILE="0", **(env or {}))
    r = subprocess.run([sys.executable, fh.name, *args], env=e, capture_output=True, text=True, timeout=1800)
    os.unlink(fh.name)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-600:]}


def main(what):
    if "b2" in what:
        rows = {m: _run(_B2, m) for m in ("jitgrad", "floor", "jax")}
        for m, r in rows.items():
            print(f"B2 {m:8s} {r}")
        j, fl, jx = rows["jitgrad"].get("ms"), rows["floor"].get("ms"), rows["jax"].get("ms")
        if j and fl:
            print(f"B2 jitgrad / floor = {j / fl:.2f}x (target <= 1.5x)")
        if j and jx:
            print(f"B2 JAX / jitgrad = {jx / j:.2f}x (target >= 2x)")
    if "chain" in what:
        r = _run(_CHAIN)
        print(f"chain {r}")
        if "compiled_ms" in r:
            print(f"chain eager / compiled = {r['eager_ms'] / r['compiled_ms']:.2f}x (target >= 3x)")
    if "compile" in what:
        for n in (1000, 10000):
            with tempfile.TemporaryDirectory() as cache:
                r = _run(_COMPILE, str(n), env={"JITGRAD_CACHE_DIR": cache})
            print(f"cold compile of a {n}-op chain: {r}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["b2", "chain", "compile"])
