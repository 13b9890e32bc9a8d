"""B13: forward mode. ``jvp(f)`` against ``f`` alone, and Hessian-vector products forward over reverse against
reverse over reverse, on B1's MLP (784-512-512-10, relu, cross-entropy, batch 256, float32): the loss as a
function of the six parameters, tangents / directions random.

Each configuration runs in this one process; outputs are checked in the same run: the jvp against the directional
derivative ``<grad f, t>`` (reverse mode), the two HVPs against each other (and, eager, against PyTorch's when it
is installed).  Peak memory per eager call: ``tracemalloc`` (NumPy reports its buffers to it; the compiled
entry's workspace and output pool are outside it, so compiled rows show none).  Targets (issue 29): compiled ``jvp(f)`` <= 1.3x compiled ``f``; forward-over-reverse
HVP <= 0.8x the time and <= the peak memory of reverse-over-reverse.

    python benchmarks/b13_forward.py [--quick]
"""
import os
import sys
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness as H  # noqa: E402

SHAPE = (256, 784, 512, 10)


def _loss(jg, F, x, y):
    def f(W1, b1, W2, b2, W3, b3):
        h = jg.relu(x @ W1 + b1)
        h = jg.relu(h @ W2 + b2)
        return F.cross_entropy(h @ W3 + b3, y)
    return f


def _peak(fn):
    fn()
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2 ** 20


def main(quick=False):
    import jitgrad as jg
    import jitgrad.nn.functional as F
    from jitgrad import func as jf
    x, y, ws = H.mlp_data(*SHAPE)
    rng = np.random.default_rng(1)
    ts = [(rng.standard_normal(w.shape) * 0.05).astype(np.float32) for w in ws]
    xt, yt = jg.tensor(x), jg.tensor(y)
    P = tuple(jg.tensor(w) for w in ws)
    T = tuple(jg.tensor(t) for t in ts)
    f = _loss(jg, F, xt, yt)

    def jvp_f(*a):
        return jf.jvp(f, a[:6], a[6:])

    def hvp_fr(*a):
        return jf.jvp(jf.grad(f, argnums=tuple(range(6))), a[:6], a[6:])[1]

    def hvp_rr(*a):
        g = jf.grad(f, argnums=tuple(range(6)))
        return jf.grad(lambda *p: sum((gi * vi).sum() for gi, vi in zip(g(*p), a[6:])), argnums=tuple(range(6)))(
            *a[:6])

    runs = 5 if quick else 30
    rows = []
    results = {}
    for mode in ("eager", "compiled"):
        wrap = (lambda fn: fn) if mode == "eager" else (lambda fn: jg.compile(fn, backend="numba"))
        cf, cj, cfr, crr = wrap(f), wrap(jvp_f), wrap(hvp_fr), wrap(hvp_rr)
        calls = {"f": lambda: cf(*P), "jvp(f)": lambda: cj(*P, *T), "HVP fwd-over-rev": lambda: cfr(*P, *T),
                 "HVP rev-over-rev": lambda: crr(*P, *T)}
        for name, call in calls.items():
            r = call()
            results[(mode, name)] = r
            t, n = H.measure(call, runs, warmup=2, budget_s=2.0 if quick else 6.0)
            # tracemalloc sees NumPy's buffers, not the compiled entry's workspace and output pool
            rows.append((mode, name, t * 1e3, _peak(call) if mode == "eager" else float("nan"), n))
    # checks, in this run
    g = jf.grad(f, argnums=tuple(range(6)))(*P)
    want = sum(float((gi * ti).sum()) for gi, ti in zip(g, T))
    for mode in ("eager", "compiled"):
        out, tan = results[(mode, "jvp(f)")]
        assert abs(float(tan) - want) <= 1e-3 * abs(want) + 1e-6, (mode, float(tan), want)
        assert abs(float(out) - float(results[(mode, "f")])) <= 1e-5, mode
        a, b = results[(mode, "HVP fwd-over-rev")], results[(mode, "HVP rev-over-rev")]
        for ai, bi in zip(a, b):
            np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=2e-3, atol=1e-5, err_msg=mode)
    for ai, bi in zip(results[("eager", "HVP fwd-over-rev")], results[("compiled", "HVP fwd-over-rev")]):
        np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=2e-3, atol=1e-5)
    torch_note = ""
    try:
        import torch
        from torch import func as tf
        tp = tuple(torch.tensor(w) for w in ws)
        tt = tuple(torch.tensor(t) for t in ts)
        tfn = _loss(torch, torch.nn.functional, torch.tensor(x), torch.tensor(y))
        thv = tf.jvp(tf.grad(tfn, argnums=tuple(range(6))), tp, tt)[1]
        for ai, bi in zip(results[("eager", "HVP fwd-over-rev")], thv):
            np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=2e-3, atol=1e-5)
        for name, call in (("f", lambda: tfn(*tp)), ("jvp(f)", lambda: tf.jvp(tfn, tp, tt)),
                           ("HVP fwd-over-rev", lambda: tf.jvp(tf.grad(tfn, argnums=tuple(range(6))), tp, tt))):
            t, n = H.measure(call, runs, warmup=2, budget_s=2.0 if quick else 6.0)
            rows.append(("torch.func eager", name, t * 1e3, float("nan"), n))
        torch_note = "; torch.func's forward-over-reverse HVP agrees"
    except ImportError:
        torch_note = "; PyTorch not installed"
    info = H.machine_info()
    print(f"B13 forward mode, MLP {SHAPE}, float32; {info.get('cpu', '?')}, load {os.getloadavg()[0]:.2f}")
    print("outputs checked: jvp == <grad f, t>, HVP fwd-over-rev == rev-over-rev (eager and compiled)" + torch_note)
    print(f"{'mode':18} {'what':18} {'median ms':>10} {'peak MiB':>9} {'runs':>5}")
    for mode, name, ms, mb, n in rows:
        print(f"{mode:18} {name:18} {ms:10.3f} {mb:9.1f} {n:5d}")
    by = {(m, n): (ms, mb) for m, n, ms, mb, _ in rows}
    for mode in ("eager", "compiled"):
        j = by[(mode, "jvp(f)")][0] / by[(mode, "f")][0]
        h = by[(mode, "HVP fwd-over-rev")][0] / by[(mode, "HVP rev-over-rev")][0]
        hm = by[(mode, "HVP fwd-over-rev")][1] / by[(mode, "HVP rev-over-rev")][1]
        mem = f", {hm:.2f}x peak memory (target <= 1x)" if mode == "eager" else ""
        print(f"{mode}: jvp(f)/f = {j:.2f}x (target <= 1.3x compiled); HVP fwd-over-rev/rev-over-rev = {h:.2f}x "
              f"time (target <= 0.8x){mem}")


if __name__ == "__main__":
    with H.time_limit(900):
        main(quick="--quick" in sys.argv)
