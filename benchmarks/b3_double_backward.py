"""B3: gradient penalty (compiled double backward).

``D(x) = tanh(x@W1 + b1) @ W2`` (B x 1), B=256, D=64, H=256;
``loss = mean(D(x)) + 10 * mean((||dD/dx||_2 - 1)^2)``; grads w.r.t. W1, b1, W2.
Target: jitgrad compiled at most 0.8x JAX jit.  Checked against a hand-derived float64 NumPy reference.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness as H  # noqa: E402

SHAPE = (256, 64, 256)


def data(B, D, Hd):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((B, D), dtype=np.float32)
    W10 = rng.standard_normal((D, Hd), dtype=np.float32) * 0.1
    b10 = np.zeros(Hd, np.float32)
    W20 = rng.standard_normal((Hd, 1), dtype=np.float32) * 0.1
    return x0, W10, b10, W20


def reference(x0, W10, b10, W20):
    """Hand-derived forward and backward of the gradient-penalty loss in float64."""
    x, W1, b1, W2 = (a.astype(np.float64) for a in (x0, W10, b10, W20))
    B = x.shape[0]
    w2 = W2[:, 0]
    t = np.tanh(x @ W1 + b1)              # (B, H)
    s = 1 - t * t
    u = s * w2                            # dD/da
    gx = u @ W1.T                         # dD/dx (B, D)
    n = np.linalg.norm(gx, axis=1)
    loss = (t @ W2).mean() + 10 * ((n - 1) ** 2).mean()
    G = (20 / B) * ((n - 1) / n)[:, None] * gx    # dL/dgx
    dW1 = G.T @ u                         # through gx = u @ W1.T
    du = G @ W1
    ds = du * w2
    dW2 = (du * s).sum(0)
    dt = -2 * t * ds + w2 / B             # through s = 1 - t^2, and mean(D)
    dW2 = dW2 + t.sum(0) / B
    da = dt * s
    dW1 = dW1 + x.T @ da
    db1 = da.sum(0)
    return {"loss": loss, "grad W1": dW1, "grad b1": db1, "grad W2": dW2[:, None]}


def make_jitgrad(x0, W10, b10, W20, backend=None):
    import jitgrad as jg
    x = jg.tensor(x0, requires_grad=True)
    W1, b1, W2 = (jg.tensor(a.copy(), requires_grad=True) for a in (W10, b10, W20))

    def step(x, W1, b1, W2):
        d = jg.tanh(x @ W1 + b1) @ W2
        gx, = jg.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        gW1, gb1, gW2 = jg.autograd.grad(loss, [W1, b1, W2])
        return (loss.detach() if backend is not None else loss), gW1, gb1, gW2

    f = jg.compile(step, backend=backend) if backend is not None else step
    return (lambda: f(x, W1, b1, W2)), (lambda r: {"loss": float(r[0].item()), "grad W1": r[1].numpy(),
                                                   "grad b1": r[2].numpy(), "grad W2": r[3].numpy()})


def make_torch(x0, W10, b10, W20, compiled=False):
    import torch
    x = torch.tensor(x0, requires_grad=True)
    W1, b1, W2 = (torch.tensor(a.copy(), requires_grad=True) for a in (W10, b10, W20))

    def step(x, W1, b1, W2):
        d = torch.tanh(x @ W1 + b1) @ W2
        gx, = torch.autograd.grad(d.sum(), x, create_graph=True)
        loss = d.mean() + 10 * ((gx.norm(dim=1) - 1) ** 2).mean()
        return (loss, *torch.autograd.grad(loss, [W1, b1, W2]))

    f = torch.compile(step) if compiled else step
    return (lambda: f(x, W1, b1, W2)), (lambda r: {"loss": float(r[0].detach()), "grad W1": r[1].numpy(),
                                                   "grad b1": r[2].numpy(), "grad W2": r[3].numpy()})


def make_jax(x0, W10, b10, W20):
    import jax
    import jax.numpy as jnp

    def D_(p, x):
        W1, b1, W2 = p
        return jnp.tanh(x @ W1 + b1) @ W2

    def loss(p, x):
        gx = jax.grad(lambda x: D_(p, x).sum())(x)
        return D_(p, x).mean() + 10 * ((jnp.linalg.norm(gx, axis=1) - 1) ** 2).mean()

    g = jax.jit(jax.value_and_grad(loss))
    p = [jnp.asarray(a) for a in (W10, b10, W20)]
    x = jnp.asarray(x0)
    return (lambda: g(p, x)), (lambda r: {"loss": float(r[0]), "grad W1": np.asarray(r[1][0]),
                                          "grad b1": np.asarray(r[1][1]), "grad W2": np.asarray(r[1][2])})


def main():
    args = data(*SHAPE)
    B, D, Hd = SHAPE
    b = H.Bench("B3", f"gradient penalty (double backward), B={B} D={D} H={Hd}", unit="ms",
                reference=reference(*args),
                tol={"loss": 1e-4, "grad W1": 1e-3, "grad b1": 1e-3, "grad W2": 1e-3},
                baselines=("fastest peer", "JAX jit"))
    runs, budget = 300, 2.0
    b.run("jitgrad eager", "jitgrad", lambda: make_jitgrad(*args), runs, budget_s=budget)
    b.run("jitgrad compile(interpret)", "jitgrad", lambda: make_jitgrad(*args, backend="interpret"), runs,
          budget_s=budget)
    b.run("jitgrad compile(numba)", "jitgrad", lambda: make_jitgrad(*args, backend="numba"), runs, budget_s=budget)
    if H.import_torch() is not None:
        b.run("PyTorch eager", "peer", lambda: make_torch(*args), runs, budget_s=budget)
        b.run("torch.compile", "peer", lambda: make_torch(*args, compiled=True), runs, warmup=5, budget_s=budget,
              first_limit_s=300)
    else:
        b.skip("PyTorch eager", "peer", "torch not installed")
        b.skip("torch.compile", "peer", "torch not installed")
    if H.have("jax"):
        b.run("JAX jit", "peer", lambda: make_jax(*args), runs, budget_s=budget)
    else:
        b.skip("JAX jit", "peer", "jax not installed")
    b.ref("PyTorch eager 1.96 ms, torch.compile 2.89 ms, JAX jit 1.58 ms")
    b.note("jitgrad compiled steps return (loss.detach(), gW1, gb1, gW2); the peers return the loss with grad.")
    b.time_all()
    jr = b.row("JAX jit")
    for name in ("jitgrad compile(interpret)", "jitgrad compile(numba)"):
        r = b.row(name)
        if r.median is None or jr is None or jr.median is None:
            b.target(f"{name} <= 0.8x JAX jit", None, r.error or "JAX not measured")
        else:
            b.target(f"{name} <= 0.8x JAX jit", r.median <= 0.8 * jr.median, f"{r.median / jr.median:.2f}x")
    b.finish()


if __name__ == "__main__":
    main()
