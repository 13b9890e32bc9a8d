"""The force-field training step of B11, one home for the benchmark that times it (``b11_forces.py``) and the tests
that check it (``tests/test_second_order_steps.py``: losses against PyTorch's, the compiled graphs' sizes; loaded
there by path).

B configurations of A atoms, positions x (B, A, 3) uniform in a BOX^3 box.  For every ordered pair i != j of a
configuration: the distance r_ij, a cosine cutoff fc(r) = (cos(pi r / RC) + 1) / 2 for r < RC (0 beyond) and K
Gaussians exp(-(r - mu_k)^2 / WIDTH), mu_k evenly spaced on [0, RC], times fc; summed over j they are the atom's
features (B, A, K).  A per-atom MLP K -> HIDDEN -> HIDDEN -> 1 (tanh) gives atom energies, E (B,) their sum.
Forces F = -dE/dx stay differentiable (``create_graph=True``); loss = mean((E - E_ref)^2) + FORCE_WEIGHT *
mean((F - F_ref)^2) against fixed random targets; its gradient to the MLP (a double backward through the forces)
and one Adam step.  Data and initial parameters are drawn with NumPy (seed 0) and loaded into every library, so
the losses agree across libraries step by step.

Written against a torch-like module ``lib`` (``jitgrad`` or ``torch``), plus ``torch.func`` and JAX versions.
"""
from __future__ import annotations

import functools
import math

import numpy as np

B, A, K = 8, 32, 16             # configurations, atoms per configuration, Gaussians
BOX = 6.0
RC = 5.0                        # cutoff radius
WIDTH = 0.5
HIDDEN = 64
FORCE_WEIGHT = 10.0
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
SEED = 0


def make_data(dtype=np.float32):
    """Positions, targets, Gaussian centres, the pair list (every ordered pair i != j, i-major, so that a
    (B, A*(A-1), K) array reshaped to (B, A, A-1, K) sums over j on its third axis) and the MLP's initial
    parameters (torch.nn.Linear's draw, uniform in +-1/sqrt(fan_in), its (out, in) layout), all from SEED."""
    rng = np.random.default_rng(SEED)
    x = rng.uniform(0.0, BOX, (B, A, 3))
    e_ref = rng.standard_normal(B)
    f_ref = rng.standard_normal((B, A, 3))
    params = []
    for fan_in, fan_out in [(K, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 1)]:
        bound = 1.0 / math.sqrt(fan_in)
        w = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32).astype(dtype)
        b = rng.uniform(-bound, bound, fan_out).astype(np.float32).astype(dtype)
        params.append((w, b))
    i, j = np.nonzero(~np.eye(A, dtype=bool))
    as_dtype = lambda a: a.astype(np.float32).astype(dtype)     # float64 runs start from the same float32 values
    return dict(x=as_dtype(x), e_ref=as_dtype(e_ref), f_ref=as_dtype(f_ref), params=params, pairs=(i, j),
                mu=np.linspace(0.0, RC, K).astype(np.float32).astype(dtype))


def energy(lib, mlp, x, pairs, mu):
    """Energies (B,) of positions x (B, A, 3)."""
    i, j = pairs
    d = x[:, i] - x[:, j]                                               # (B, P, 3), P = A (A - 1)
    r = lib.sqrt((d * d).sum(-1))
    fc = lib.where(r < RC, 0.5 * (lib.cos(math.pi / RC * r) + 1.0), 0.0)
    g = lib.exp(-(r[..., None] - mu) ** 2 / WIDTH) * fc[..., None]     # (B, P, K)
    features = g.reshape(B, A, A - 1, K).sum(2)                         # (B, A, K)
    return mlp(features).reshape(B, A).sum(1)                          # per-atom energies summed


def make_model(lib, params, dtype):
    """The MLP, as torch.nn.Sequential, loaded with ``params`` in ``dtype`` (``lib``'s dtype object)."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(K, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                          nn.Linear(HIDDEN, 1)).to(dtype)
    with lib.no_grad():
        for layer, (w, b) in zip([m for m in model if isinstance(m, nn.Linear)], params):
            layer.weight.copy_(lib.tensor(w))
            layer.bias.copy_(lib.tensor(b))
    return model


def _lib_dtype(lib, dtype):
    return getattr(lib, np.dtype(dtype).name)


def torch_style(lib, mode="eager", dtype=np.float32, compile_=None):
    """The step in plain torch idioms on ``lib``: ``autograd.grad(E.sum(), x, create_graph=True)`` for the forces,
    ``loss.backward(inputs=params)``, ``torch.optim.Adam``.  ``mode``: "eager", "compiled" (``compile_`` on the
    whole step) or "model" (``compile_`` on the MLP only).  Returns ``(call, fn, args, model)``: ``call()`` runs
    one step and returns the loss at the parameters it started from; ``fn(*args)`` is the same call (``fn`` the
    compiled step in "compiled" mode)."""
    compile_ = compile_ or lib.compile
    data = make_data(dtype)
    model = make_model(lib, data["params"], _lib_dtype(lib, dtype))
    params = list(model.parameters())
    opt = lib.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS)
    mlp = compile_(model) if mode == "model" else model
    pairs = tuple(lib.tensor(p) for p in data["pairs"])
    mu = lib.tensor(data["mu"])

    def train_step(x, e_ref, f_ref):
        E = energy(lib, mlp, x, pairs, mu)
        F = -lib.autograd.grad(E.sum(), x, create_graph=True)[0]
        loss = lib.mean((E - e_ref) ** 2) + FORCE_WEIGHT * lib.mean((F - f_ref) ** 2)
        loss.backward(inputs=params)     # x requires grad too; d loss / dx is not wanted
        opt.step()
        opt.zero_grad()
        return loss.detach()

    fn = compile_(train_step) if mode == "compiled" else train_step
    args = (lib.tensor(data["x"], requires_grad=True), lib.tensor(data["e_ref"]), lib.tensor(data["f_ref"]))
    return (lambda: fn(*args)), fn, args, model


def torch_func(torch, mode="eager", dtype=np.float32):
    """Forces by ``torch.func.grad`` of the total energy (``has_aux`` returns E), the parameter gradient by
    ``.backward()``; "compiled": ``torch.compile`` on that step.  Returns ``call``."""
    from torch.func import grad
    data = make_data(dtype)
    model = make_model(torch, data["params"], _lib_dtype(torch, dtype))
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    pairs = tuple(torch.tensor(p) for p in data["pairs"])
    mu = torch.tensor(data["mu"])

    def total_energy(x):
        E = energy(torch, model, x, pairs, mu)
        return E.sum(), E

    def train_step(x, e_ref, f_ref):
        dE_dx, E = grad(total_energy, has_aux=True)(x)
        loss = torch.mean((E - e_ref) ** 2) + FORCE_WEIGHT * torch.mean((-dE_dx - f_ref) ** 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    fn = torch.compile(train_step) if mode == "compiled" else train_step
    args = tuple(torch.tensor(data[k]) for k in ("x", "e_ref", "f_ref"))
    return lambda: fn(*args)


def adam_jax(jax, state, g, lr=LR, betas=BETAS, eps=EPS):
    """One Adam step on a pytree of parameters: ``state = (params, m, v, t)``."""
    params, m, v, t = state
    t = t + 1
    tm = jax.tree_util.tree_map
    m = tm(lambda m, g: betas[0] * m + (1 - betas[0]) * g, m, g)
    v = tm(lambda v, g: betas[1] * v + (1 - betas[1]) * g * g, v, g)
    params = tm(lambda p, m, v: p - lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)) ** 0.5 + eps),
                params, m, v)
    return params, m, v, t


def jax_step(mode="compiled", dtype=np.float32):
    """``jax.grad`` of the total energy for the forces, ``jax.value_and_grad`` of the loss for the parameters,
    Adam written out; "compiled": ``jax.jit`` of the step.  Returns ``(call, sync)``."""
    import jax
    if np.dtype(dtype) == np.float64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    data = make_data(dtype)
    pairs = data["pairs"]
    mu = jnp.asarray(data["mu"])

    def mlp(layers, h):
        for w, b in layers[:-1]:
            h = jnp.tanh(h @ w.T + b)
        w, b = layers[-1]
        return h @ w.T + b

    def total_energy(layers, x):
        E = energy(jnp, functools.partial(mlp, layers), x, pairs, mu)
        return E.sum(), E

    def loss_fn(layers, x, e_ref, f_ref):
        dE_dx, E = jax.grad(total_energy, argnums=1, has_aux=True)(layers, x)
        return jnp.mean((E - e_ref) ** 2) + FORCE_WEIGHT * jnp.mean((-dE_dx - f_ref) ** 2)

    def train_step(state, x, e_ref, f_ref):
        loss, g = jax.value_and_grad(loss_fn)(state[0], x, e_ref, f_ref)
        return adam_jax(jax, state, g), loss

    if mode == "compiled":
        train_step = jax.jit(train_step)
    layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in data["params"]]
    zeros = jax.tree_util.tree_map(jnp.zeros_like, layers)
    state = (layers, zeros, zeros, jnp.asarray(0.0, dtype))
    batch = tuple(jnp.asarray(data[k]) for k in ("x", "e_ref", "f_ref"))

    def call():
        nonlocal state
        state, loss = train_step(state, *batch)
        return loss
    return call, (lambda: jax.block_until_ready(state))
