"""The PINN training step of B12 (viscous Burgers), one home for the benchmark that times it (``b12_pinn.py``) and the
tests that check it (``tests/test_second_order_steps.py``: losses against PyTorch's, the compiled graphs' sizes;
loaded there by path).

u(x, t) is an MLP 2 -> 64 -> 64 -> 64 -> 1 (tanh).  At N_INTERIOR collocation points the residual
r = u_t + u u_x - NU u_xx comes from per-point input derivatives; loss = mean(r^2) + mean((u_b - g_b)^2) over
N_BOUNDARY boundary/initial points (u(x, 0) = -sin(pi x), u(-1, t) = u(1, t) = 0); its gradient to the parameters
and one Adam step.  u_x, u_t are the gradient of sum(u) with respect to the points (each u depends on its own
point only); u_xx either by reverse over reverse (the gradient of sum(u_x)) or forward over reverse (the jvp of
that gradient along the x direction: its first column is u_xx).  Data and initial parameters are drawn with
NumPy (seed 0) and loaded into every library, so the losses agree across libraries step by step.

Written against a torch-like module ``lib`` (``jitgrad`` or ``torch``), plus ``torch.func`` and JAX versions.
"""
from __future__ import annotations

import math

import numpy as np

N_INTERIOR, N_BOUNDARY = 2048, 256
HIDDEN, DEPTH = 64, 3
NU = 0.01 / math.pi
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
SEED = 0


def make_data(dtype=np.float32):
    """Collocation points (N, 2) as (x, t) columns, boundary/initial points (NB, 2) with their values, and the MLP's
    initial parameters (torch.nn.Linear's draw in its (out, in) layout), all from SEED; float64 runs start from
    the same float32 values."""
    rng = np.random.default_rng(SEED)
    xt = np.stack([rng.uniform(-1, 1, N_INTERIOR), rng.uniform(0, 1, N_INTERIOR)], 1)
    n0, n1 = N_BOUNDARY // 2, N_BOUNDARY // 4
    x0 = rng.uniform(-1, 1, n0)
    t1 = rng.uniform(0, 1, 2 * n1)
    xt_b = np.concatenate([np.stack([x0, np.zeros(n0)], 1), np.stack([np.repeat([-1.0, 1.0], n1), t1], 1)])
    g_b = np.concatenate([-np.sin(np.pi * x0), np.zeros(2 * n1)])
    as_dtype = lambda a: a.astype(np.float32).astype(dtype)
    params = []
    sizes = [2] + [HIDDEN] * DEPTH + [1]
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        params.append((as_dtype(rng.uniform(-bound, bound, (fan_out, fan_in))),
                       as_dtype(rng.uniform(-bound, bound, fan_out))))
    return dict(xt=as_dtype(xt), xt_b=as_dtype(xt_b), g_b=as_dtype(g_b), params=params)


def make_model(lib, params, dtype):
    """The MLP, as torch.nn.Sequential, loaded with ``params`` in ``dtype`` (``lib``'s dtype object)."""
    layers = []
    for w, b in params:
        layers += [lib.nn.Linear(w.shape[1], w.shape[0]), lib.nn.Tanh()]
    model = lib.nn.Sequential(*layers[:-1]).to(dtype)
    with lib.no_grad():
        for layer, (w, b) in zip(model[::2], params):
            layer.weight.copy_(lib.tensor(w))
            layer.bias.copy_(lib.tensor(b))
    return model


def torch_style(lib, mode="eager", dtype=np.float32, compile_=None, laplacian="reverse"):
    """The step in plain torch idioms on ``lib``: input derivatives by ``autograd.grad(create_graph=True)``
    (``laplacian="reverse"``: u_xx as the gradient of sum(u_x)), or ``laplacian="forward"``: u_x, u_t and u_xx from
    ``lib.func.jvp(lib.func.grad(sum u, has_aux=True), xt, e_x)`` (forward over reverse, u as the aux output);
    ``loss.backward(inputs=params)``, ``torch.optim.Adam``.  ``mode``: "eager", "compiled" (``compile_`` on the
    whole step) or "model" (``compile_`` on the MLP only).  Returns ``(call, fn, args, model)`` as
    force_field.torch_style does."""
    compile_ = compile_ or lib.compile
    data = make_data(dtype)
    model = make_model(lib, data["params"], getattr(lib, np.dtype(dtype).name))
    params = list(model.parameters())
    opt = lib.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS)
    net = compile_(model) if mode == "model" else model
    e_x = lib.tensor(np.stack([np.ones(N_INTERIOR), np.zeros(N_INTERIOR)], 1).astype(dtype))

    def sum_u(xt):
        u = net(xt)[:, 0]
        return u.sum(), u

    def derivatives_reverse(xt):
        u = net(xt)[:, 0]
        du = lib.autograd.grad(u.sum(), xt, create_graph=True)[0]              # (N, 2): u_x, u_t
        u_xx = lib.autograd.grad(du[:, 0].sum(), xt, create_graph=True)[0][:, 0]
        return u, du[:, 0], du[:, 1], u_xx

    def derivatives_forward(xt):
        (du, u), (ddu, _) = lib.func.jvp(lib.func.grad(sum_u, has_aux=True), (xt,), (e_x,))
        return u, du[:, 0], du[:, 1], ddu[:, 0]

    derivatives = derivatives_forward if laplacian == "forward" else derivatives_reverse

    def train_step(xt, xt_b, g_b):
        u, u_x, u_t, u_xx = derivatives(xt)
        r = u_t + u * u_x - NU * u_xx
        loss = lib.mean(r ** 2) + lib.mean((net(xt_b)[:, 0] - g_b) ** 2)
        loss.backward(inputs=params)
        opt.step()
        opt.zero_grad()
        return loss.detach()

    fn = compile_(train_step) if mode == "compiled" else train_step
    args = (lib.tensor(data["xt"], requires_grad=laplacian == "reverse"), lib.tensor(data["xt_b"]),
            lib.tensor(data["g_b"]))
    return (lambda: fn(*args)), fn, args, model


def torch_func(torch, mode="eager", dtype=np.float32):
    """Per-point input derivatives by ``torch.func`` (``vmap(jacrev)`` for u_x, u_t; ``vmap(hessian)`` for u_xx),
    the parameter gradient by ``.backward()``; "compiled": ``torch.compile`` on that step.  Returns ``call``."""
    from torch.func import hessian, jacrev, vmap
    data = make_data(dtype)
    model = make_model(torch, data["params"], getattr(torch, np.dtype(dtype).name))
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)

    def u_point(p):
        return model(p)[0]

    def train_step(xt, xt_b, g_b):
        u = model(xt)[:, 0]
        du = vmap(jacrev(u_point))(xt)
        u_xx = vmap(hessian(u_point))(xt)[:, 0, 0]
        r = du[:, 1] + u * du[:, 0] - NU * u_xx
        loss = torch.mean(r ** 2) + torch.mean((model(xt_b)[:, 0] - g_b) ** 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    fn = torch.compile(train_step) if mode == "compiled" else train_step
    args = tuple(torch.tensor(data[k]) for k in ("xt", "xt_b", "g_b"))
    return lambda: fn(*args)


def jax_step(mode="compiled", dtype=np.float32):
    """u(params, x, t) for one point; u_x, u_t by ``jax.grad``, u_xx by ``jax.jvp`` of ``jax.grad`` (forward over
    reverse); ``vmap`` over the points; Adam written out (force_field.adam_jax); "compiled": ``jax.jit``.
    Returns ``(call, sync)``."""
    import jax
    if np.dtype(dtype) == np.float64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from force_field import adam_jax
    data = make_data(dtype)

    def u(layers, x, t):
        h = jnp.stack([x, t])
        for w, b in layers[:-1]:
            h = jnp.tanh(w @ h + b)
        w, b = layers[-1]
        return (w @ h + b)[0]

    def residual(layers, x, t):
        u_x = lambda x_: jax.grad(u, argnums=1)(layers, x_, t)
        ux, uxx = jax.jvp(u_x, (x,), (jnp.ones_like(x),))
        return jax.grad(u, argnums=2)(layers, x, t) + u(layers, x, t) * ux - NU * uxx

    def loss_fn(layers, xt, xt_b, g_b):
        r = jax.vmap(residual, (None, 0, 0))(layers, xt[:, 0], xt[:, 1])
        u_b = jax.vmap(u, (None, 0, 0))(layers, xt_b[:, 0], xt_b[:, 1])
        return jnp.mean(r ** 2) + jnp.mean((u_b - g_b) ** 2)

    def train_step(state, xt, xt_b, g_b):
        loss, g = jax.value_and_grad(loss_fn)(state[0], xt, xt_b, g_b)
        return adam_jax(jax, state, g), loss

    if mode == "compiled":
        train_step = jax.jit(train_step)
    layers = [(jnp.asarray(w), jnp.asarray(b)) for w, b in data["params"]]
    zeros = jax.tree_util.tree_map(jnp.zeros_like, layers)
    state = (layers, zeros, zeros, jnp.asarray(0.0, dtype))
    batch = tuple(jnp.asarray(data[k]) for k in ("xt", "xt_b", "g_b"))

    def call():
        nonlocal state
        state, loss = train_step(state, *batch)
        return loss
    return call, (lambda: jax.block_until_ready(state))
