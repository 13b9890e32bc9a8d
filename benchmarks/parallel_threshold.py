"""When a kernel should run on the worker pool: serial vs parallel (forced) vs the default choice for mid-size
elementwise kernels (``codegen/layout.py``: PARALLEL_GRAIN, PARALLEL_WORK), one fresh process, min and median of
300 calls, values checked against eager.

    JITGRAD_BACKGROUND_COMPILE=0 python benchmarks/parallel_threshold.py
"""
import time, numpy as np, jitgrad as jg
from jitgrad.jit.graph_code import compiled_graph
def chain(a):
    return jg.tanh(a) * jg.sigmoid(a) * 2.0
def plain(a):
    return a + 1.0
for name, fn in (("tanh*sigmoid*2", chain), ("a+1", plain)):
    for n in (1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 19):
        x = jg.tensor(np.random.rand(n).astype(np.float32))
        row = {}
        for par in (False, True, None):
            f = jg.compile(fn, parallel=par)
            ref = f(x).numpy()
            assert np.allclose(ref, fn(x).numpy(), rtol=1e-5, atol=1e-6)
            ts = []
            for _ in range(300):
                s = time.perf_counter(); f(x); ts.append(time.perf_counter() - s)
            ks = compiled_graph(f._entry_for((x,), {}).graph, ()).kernels
            row[par] = (round(min(ts) * 1e6, 1), round(float(np.median(ts)) * 1e6, 1), [k.parallel for k in ks])
        print(f"{name:16s} n={n:7d} serial {row[False][:2]} parallel {row[True][:2]} default {row[None][2]} {row[None][:2]} us",
              flush=True)
