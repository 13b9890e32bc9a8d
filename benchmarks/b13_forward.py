"""B13: forward mode. ``jvp(f)`` against ``f`` alone, and Hessian-vector products forward over reverse against
reverse over reverse, on B1's MLP (784-512-512-10, relu, cross-entropy, batch 256, float32) and on B9's GPT
(vocab 65, context 64, 4 layers of 4 heads, width 128, batch 16, dropout 0): the loss as a function of all the
parameters, tangents / directions random.  On the MLP also ``jvp(f)`` with the tangent on the input batch only,
the parameters closed over (``torch.func.jvp(f, (x,), (v,))``, JAX's ``jax.jvp`` as usually written).

Each configuration runs in this one process; outputs are checked in the same run: the jvp against the directional
derivative ``<grad f, t>`` (reverse mode), the two HVPs against each other (and, eager, against PyTorch's when it
is installed).  Peak memory per eager call: ``tracemalloc`` (NumPy reports its buffers to it; the compiled
entry's workspace and output pool are outside it, so compiled rows show none).  Targets (issue 29): compiled
``jvp(f)`` <= 1.3x compiled ``f``; forward-over-reverse HVP <= 0.8x the time and <= the peak memory of
reverse-over-reverse.  The multiply-adds set a floor under the first: every product ``A B`` whose operands both
carry a tangent needs two more (``A_t B + A B_t``), one whose single operand does needs one, so a jvp with
tangents on all parameters does 2.40x f's multiply-adds on the MLP and 3x on the GPT, and 2x with the tangent on
the input only; forward over reverse and reverse over reverse run the same GEMMs (``tests/test_forward_mode.py``
counts them).  The script prints each ratio beside its floor.

    python benchmarks/b13_forward.py [--quick] [--no-gpt]
"""
import os
import sys
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness as H  # noqa: E402

SHAPE = (256, 784, 512, 10)
GPT = dict(vocab=65, context=64, width=128, heads=4, layers=4, batch=16)


def _loss(jg, F, x, y):
    def f(W1, b1, W2, b2, W3, b3):
        h = jg.relu(x @ W1 + b1)
        h = jg.relu(h @ W2 + b2)
        return F.cross_entropy(h @ W3 + b3, y)
    return f


def _input_loss(jg, F, y, ws):
    """The MLP's loss as a function of its input batch, the parameters closed over."""
    W1, b1, W2, b2, W3, b3 = ws

    def f(x):
        h = jg.relu(x @ W1 + b1)
        h = jg.relu(h @ W2 + b2)
        return F.cross_entropy(h @ W3 + b3, y)
    return f


def _gpt_loss(jg):
    """B9's GPT (gpt_model.py) as a loss of its parameters; the parameters and random directions."""
    import gpt_model
    jg.manual_seed(0)
    model = gpt_model.make_gpt(jg, GPT["vocab"], GPT["context"], GPT["width"], GPT["heads"], GPT["layers"],
                               dropout=0.0, sdpa=False)
    names = [n for n, _ in model.named_parameters()]
    ps = tuple(p.detach() for _, p in model.named_parameters())
    rng = np.random.default_rng(2)
    ts = tuple(jg.tensor((rng.standard_normal(p.shape) * 0.02).astype(np.float32)) for p in ps)
    x, y = (jg.tensor(rng.integers(0, GPT["vocab"], (GPT["batch"], GPT["context"]))) for _ in range(2))
    return (lambda *p: jg.func.functional_call(model, dict(zip(names, p)), (x, y))), ps, ts


def _peak(fn):
    fn()
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2 ** 20


def _calls(jf, f, k):
    """f, jvp(f), and the two HVPs, each a function of (parameters..., directions...)."""
    argnums = tuple(range(k))

    def jvp_f(*a):
        return jf.jvp(f, a[:k], a[k:])

    def hvp_fr(*a):
        return jf.jvp(jf.grad(f, argnums=argnums), a[:k], a[k:])[1]

    def hvp_rr(*a):
        g = jf.grad(f, argnums=argnums)
        return jf.grad(lambda *p: sum((gi * vi).sum() for gi, vi in zip(g(*p), a[k:])), argnums=argnums)(*a[:k])
    return {"f": f, "jvp(f)": jvp_f, "HVP fwd-over-rev": hvp_fr, "HVP rev-over-rev": hvp_rr}


def _run(jg, workload, fns, P, T, extra, runs, quick, rows, results):
    """Time each of ``fns`` (and ``extra``: name -> (fn, args)) eager and compiled; rows and results appended."""
    for mode in ("eager", "compiled"):
        wrap = (lambda fn: fn) if mode == "eager" else (lambda fn: jg.compile(fn, backend="numba"))
        calls = {name: (wrap(fn), P if name == "f" else P + T) for name, fn in fns.items()}
        calls.update({name: (wrap(fn), args) for name, (fn, args) in extra.items()})
        for name, (fn, args) in calls.items():
            call = (lambda fn=fn, args=args: fn(*args))
            results[(workload, mode, name)] = call()
            t, n = H.measure(call, runs, warmup=2, budget_s=2.0 if quick else 6.0)
            # tracemalloc sees NumPy's buffers, not the compiled entry's workspace and output pool
            rows.append((workload, mode, name, t * 1e3, _peak(call) if mode == "eager" else float("nan"), n))


def _check(jf, workload, f, P, T, results, rtol=2e-3):
    g = jf.grad(f, argnums=tuple(range(len(P))))(*P)
    want = sum(float((gi * ti).sum()) for gi, ti in zip(g, T))
    for mode in ("eager", "compiled"):
        out, tan = results[(workload, mode, "jvp(f)")]
        assert abs(float(tan) - want) <= 1e-3 * abs(want) + 1e-6, (workload, mode, float(tan), want)
        assert abs(float(out) - float(results[(workload, mode, "f")])) <= 1e-5, (workload, mode)
        a, b = results[(workload, mode, "HVP fwd-over-rev")], results[(workload, mode, "HVP rev-over-rev")]
        for ai, bi in zip(a, b):
            np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=rtol, atol=1e-5, err_msg=f"{workload} {mode}")
    for ai, bi in zip(results[(workload, "eager", "HVP fwd-over-rev")],
                      results[(workload, "compiled", "HVP fwd-over-rev")]):
        np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=rtol, atol=1e-5)


def main(quick=False, gpt=True):
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
    v = jg.tensor((rng.standard_normal(x.shape) * 0.05).astype(np.float32))
    fx = _input_loss(jg, F, yt, P)

    runs = 5 if quick else 30
    rows = []
    results = {}
    # the input-tangent jvp and its f: functions of (x, v) and (x,)
    extra = {"f of x": (fx, (xt,)), "jvp(f) on x": ((lambda a, t: jf.jvp(fx, (a,), (t,))), (xt, v))}
    _run(jg, "MLP", _calls(jf, f, 6), P, T, extra, runs, quick, rows, results)
    _check(jf, "MLP", f, P, T, results)
    gx = jf.grad(fx)(xt)
    want_x = float((gx * v).sum())
    for mode in ("eager", "compiled"):
        tan = float(results[("MLP", mode, "jvp(f) on x")][1])
        assert abs(tan - want_x) <= 1e-3 * abs(want_x) + 1e-6, (mode, tan, want_x)
    if gpt:
        fg, Pg, Tg = _gpt_loss(jg)
        _run(jg, "GPT", _calls(jf, fg, len(Pg)), Pg, Tg, {}, runs, quick, rows, results)
        _check(jf, "GPT", fg, Pg, Tg, results)
    torch_note = ""
    try:
        import torch
        from torch import func as tf
        tp = tuple(torch.tensor(w) for w in ws)
        tt = tuple(torch.tensor(t) for t in ts)
        tfn = _loss(torch, torch.nn.functional, torch.tensor(x), torch.tensor(y))
        thv = tf.jvp(tf.grad(tfn, argnums=tuple(range(6))), tp, tt)[1]
        for ai, bi in zip(results[("MLP", "eager", "HVP fwd-over-rev")], thv):
            np.testing.assert_allclose(ai.numpy(), bi.numpy(), rtol=2e-3, atol=1e-5)
        tfx = _input_loss(torch, torch.nn.functional, torch.tensor(y), tp)
        tx, tv = torch.tensor(x), torch.tensor(v.numpy())
        for name, call in (("f", lambda: tfn(*tp)), ("jvp(f)", lambda: tf.jvp(tfn, tp, tt)),
                           ("HVP fwd-over-rev", lambda: tf.jvp(tf.grad(tfn, argnums=tuple(range(6))), tp, tt)),
                           ("f of x", lambda: tfx(tx)), ("jvp(f) on x", lambda: tf.jvp(tfx, (tx,), (tv,)))):
            t, n = H.measure(call, runs, warmup=2, budget_s=2.0 if quick else 6.0)
            rows.append(("MLP", "torch.func eager", name, t * 1e3, float("nan"), n))
        torch_note = "; torch.func's forward-over-reverse HVP agrees"
    except ImportError:
        torch_note = "; PyTorch not installed"
    info = H.machine_info()
    print(f"B13 forward mode, MLP {SHAPE}" + (f", GPT {GPT}" if gpt else "") +
          f", float32; {info.get('cpu', '?')}, load {os.getloadavg()[0]:.2f}")
    print("outputs checked: jvp == <grad f, t>, HVP fwd-over-rev == rev-over-rev (eager and compiled)" + torch_note)
    print(f"{'workload':8} {'mode':18} {'what':18} {'median ms':>10} {'peak MiB':>9} {'runs':>5}")
    for w, mode, name, ms, mb, n in rows:
        print(f"{w:8} {mode:18} {name:18} {ms:10.3f} {mb:9.1f} {n:5d}")
    by = {(w, m, n): (ms, mb) for w, m, n, ms, mb, _ in rows}
    # the multiply-add floors of jvp(f)/f (see the docstring)
    _, D, Hd, C = SHAPE
    prim = D * Hd + Hd * Hd + Hd * C
    floors = {"MLP": (prim + D * Hd + 2 * (Hd * Hd + Hd * C)) / prim, "GPT": 3.0}
    for w in ("MLP", "GPT") if gpt else ("MLP",):
        for mode in ("eager", "compiled"):
            j = by[(w, mode, "jvp(f)")][0] / by[(w, mode, "f")][0]
            h = by[(w, mode, "HVP fwd-over-rev")][0] / by[(w, mode, "HVP rev-over-rev")][0]
            hm = by[(w, mode, "HVP fwd-over-rev")][1] / by[(w, mode, "HVP rev-over-rev")][1]
            mem = f", {hm:.2f}x peak memory (target <= 1x)" if mode == "eager" else ""
            xs = ""
            if w == "MLP":
                jx = by[(w, mode, "jvp(f) on x")][0] / by[(w, mode, "f of x")][0]
                xs = f"; jvp(f) on x / f = {jx:.2f}x (multiply-adds 2.00x)"
            print(f"{w} {mode}: jvp(f)/f = {j:.2f}x (target <= 1.3x compiled; multiply-adds {floors[w]:.2f}x){xs}; "
                  f"HVP fwd-over-rev/rev-over-rev = {h:.2f}x time (target <= 0.8x; multiply-adds 1.00x){mem}")


if __name__ == "__main__":
    with H.time_limit(1800):
        main(quick="--quick" in sys.argv, gpt="--no-gpt" not in sys.argv)
