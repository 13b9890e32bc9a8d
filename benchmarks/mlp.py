"""The MLP SGD step of B1/B4/B5/B6 (3 layers, relu, cross-entropy, lr 0.01) in every implementation.

Each ``make_*`` takes the anchors' data ``(x, y, ws)`` (see ``harness.mlp_data``) and returns ``(step, probe)``:
``step()`` runs one forward+backward+update on the implementation's own copy of the parameters and returns the
loss; ``probe(first_result)`` returns ``{"loss": ..., "grad W3": ...}`` for the *first* step (the W3 gradient is
recovered from the update: ``(W3_before - W3_after) / lr``), to be checked against :func:`reference`.

jitgrad compiled steps return ``loss.detach()`` (no graph needed by the caller; PyTorch's step returns the
loss with its freed graph: equivalent cost).
"""
from __future__ import annotations

import numpy as np

LR = 0.01


def reference(x, y, ws):
    """float64 NumPy forward+backward of the first step: {"loss", "grad W3"}."""
    W1, b1, W2, b2, W3, b3 = (w.astype(np.float64) for w in ws)
    x = x.astype(np.float64)
    B = x.shape[0]
    a1 = x @ W1 + b1
    h1 = np.maximum(a1, 0)
    a2 = h1 @ W2 + b2
    h2 = np.maximum(a2, 0)
    z = h2 @ W3 + b3
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(1, keepdims=True)
    loss = -np.log(p[np.arange(B), y]).mean()
    g = p.copy()
    g[np.arange(B), y] -= 1
    g /= B
    return {"loss": loss, "grad W3": h2.T @ g}


def _grad_from_update(before, after):
    return (np.asarray(before, np.float64) - np.asarray(after, np.float64)) / LR


# ------------------------------------------------------------------------------------------------ jitgrad

def make_jitgrad(x, y, ws, backend=None):
    """``backend=None``: eager; ``"interpret"`` / ``"numba"``: ``jg.compile(step, backend=...)``."""
    import jitgrad as jg
    import jitgrad.nn.functional as F
    xt, yt = jg.tensor(x), jg.tensor(y)
    params = [jg.tensor(w.copy(), requires_grad=True) for w in ws]
    W1, b1, W2, b2, W3, b3 = params
    W3_0 = ws[4].copy()

    def step(x, y):
        h = jg.relu(x @ W1 + b1)
        h = jg.relu(h @ W2 + b2)
        loss = F.cross_entropy(h @ W3 + b3, y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss.detach() if backend is not None else loss

    f = jg.compile(step, backend=backend) if backend is not None else step

    def probe(loss):
        return {"loss": float(loss.item()), "grad W3": _grad_from_update(W3_0, W3.detach().numpy())}
    return (lambda: f(xt, yt)), probe


# ------------------------------------------------------------------------------------------------ PyTorch

def make_torch(x, y, ws, compiled=False):
    import torch
    xt, yt = torch.tensor(x), torch.tensor(y)
    params = [torch.tensor(w.copy(), requires_grad=True) for w in ws]
    W1, b1, W2, b2, W3, b3 = params
    W3_0 = ws[4].copy()

    def step(x, y):
        h = torch.relu(x @ W1 + b1)
        h = torch.relu(h @ W2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ W3 + b3, y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss

    f = torch.compile(step) if compiled else step

    def probe(loss):
        return {"loss": float(loss.detach()), "grad W3": _grad_from_update(W3_0, W3.detach().numpy())}
    return (lambda: f(xt, yt)), probe


# ------------------------------------------------------------------------------------------------ JAX

def make_jax(x, y, ws):
    import jax
    import jax.numpy as jnp
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    state = [[jnp.asarray(w) for w in ws]]
    W3_0 = ws[4].copy()

    def loss_fn(p, x, y):
        W1, b1, W2, b2, W3, b3 = p
        h = jax.nn.relu(x @ W1 + b1)
        h = jax.nn.relu(h @ W2 + b2)
        logits = h @ W3 + b3
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])

    @jax.jit
    def jstep(p, x, y):
        l, g = jax.value_and_grad(loss_fn)(p, x, y)
        return [pi - LR * gi for pi, gi in zip(p, g)], l

    def step():
        state[0], l = jstep(state[0], xj, yj)
        return l

    def probe(loss):
        return {"loss": float(loss), "grad W3": _grad_from_update(W3_0, np.asarray(state[0][4]))}
    return step, probe


# ------------------------------------------------------------------------------------------------ NumPy floor

def make_numpy(x, y, ws):
    """The anchor's hand-written NumPy forward+backward (b1_mlp_numpy.py): the BLAS floor."""
    W1, b1, W2, b2, W3, b3 = (w.copy() for w in ws)
    B = x.shape[0]
    W3_0 = ws[4].copy()
    ar = np.arange(B)

    def step():
        nonlocal W1, b1, W2, b2, W3, b3
        a1 = x @ W1 + b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ W2 + b2
        h2 = np.maximum(a2, 0)
        z = h2 @ W3 + b3
        z = z - z.max(1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(1, keepdims=True)
        loss = -np.log(p[ar, y]).mean()
        g = p
        g[ar, y] -= 1
        g /= B
        gW3 = h2.T @ g
        gb3 = g.sum(0)
        gh2 = g @ W3.T
        gh2 *= (a2 > 0)
        gW2 = h1.T @ gh2
        gb2 = gh2.sum(0)
        gh1 = gh2 @ W2.T
        gh1 *= (a1 > 0)
        gW1 = x.T @ gh1
        gb1 = gh1.sum(0)
        W1 -= LR * gW1
        b1 -= LR * gb1
        W2 -= LR * gW2
        b2 -= LR * gb2
        W3 -= LR * gW3
        b3 -= LR * gb3
        return loss

    def probe(loss):
        return {"loss": float(loss), "grad W3": _grad_from_update(W3_0, W3)}
    return step, probe


# ------------------------------------------------------------------------------------------------ all of them

def add_all(bench, x, y, ws, runs, jit_runs=None, budget_s=3.0, torch_compile_limit_s=300, numpy_floor=True):
    """Register every MLP configuration (jitgrad eager/interpret/numba, installed peers, the NumPy floor)."""
    from harness import have, import_torch
    jit_runs = jit_runs or runs
    bench.run("jitgrad eager", "jitgrad", lambda: make_jitgrad(x, y, ws, None), jit_runs, budget_s=budget_s)
    bench.run("jitgrad compile(interpret)", "jitgrad", lambda: make_jitgrad(x, y, ws, "interpret"), jit_runs,
              budget_s=budget_s)
    bench.run("jitgrad compile(numba)", "jitgrad", lambda: make_jitgrad(x, y, ws, "numba"), jit_runs,
              budget_s=budget_s)
    if import_torch() is not None:
        bench.run("PyTorch eager", "peer", lambda: make_torch(x, y, ws, False), runs, budget_s=budget_s)
        bench.run("torch.compile", "peer", lambda: make_torch(x, y, ws, True), runs, warmup=5, budget_s=budget_s,
                  first_limit_s=torch_compile_limit_s)
    else:
        bench.skip("PyTorch eager", "peer", "torch not installed")
        bench.skip("torch.compile", "peer", "torch not installed")
    if have("jax"):
        bench.run("JAX jit", "peer", lambda: make_jax(x, y, ws), runs, budget_s=budget_s)
    else:
        bench.skip("JAX jit", "peer", "jax not installed")
    if numpy_floor:
        bench.run("NumPy hand-written (floor)", "floor", lambda: make_numpy(x, y, ws), runs, budget_s=budget_s)
