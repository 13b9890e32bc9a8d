"""Helpers for running the same program eagerly and under ``@jg.compile`` and requiring agreement.

``mode`` (a fixture in conftest.py) is "eager" or "compiled"; ``maybe_compile(fn, mode)`` returns ``fn`` itself or
``jg.compile(fn)``.  ``evaluate(fn, arrays, mode)`` runs a program the four ways that matter and returns plain
NumPy results:

* ``values``: the outputs, called twice (the second compiled call replays the cached graph);
* ``grads``: ``.backward()`` *inside* the (maybe compiled) function, read from the inputs' ``.grad``;
* ``outer``: ``autograd.grad`` of the (maybe compiled) function's outputs, ``create_graph=True``;
* ``hvp``: the outer gradient differentiated again (a Hessian-vector product, second order);
* ``inner_hvp``: ``autograd.grad(..., create_graph=True)`` *inside* the function (gradient-penalty style),
  differentiated outside.

``fd_grads`` / ``fd_hvp`` are central differences of the eager program (float64), the independent oracle.
"""
from __future__ import annotations

import numpy as np

import jitgrad as jg
from jitgrad import autograd


def maybe_compile(fn, mode, **kwargs):
    """``fn`` in eager mode, ``jg.compile(fn, **kwargs)`` in compiled mode."""
    if mode == "eager":
        return fn
    if mode == "compiled":
        return jg.compile(fn, **{"backend": "interpret", **kwargs})
    if mode == "numba":
        return jg.compile(fn, **{"backend": "numba", **kwargs})
    raise ValueError(f"unknown mode {mode!r}")


def flat(out):
    """A program's outputs (a tensor, or nested tuples/lists of tensors) as a flat list."""
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(flat(o))
        return res
    return [out]


def _np(t):
    return None if t is None else t.detach().cpu().numpy().copy()


def _is_float(t) -> bool:
    return t.dtype in (jg.float32, jg.float64)


def weights_for(outs, seed=1):
    """Fixed random weights for each float output: loss = sum_k (out_k * w_k).sum() (non-trivial cotangents)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, o.shape) if _is_float(o) else None for o in outs]


def loss_of(outs, ws):
    total = None
    for o, w in zip(outs, ws):
        if w is None:
            continue
        term = (o * jg.tensor(w, dtype=o.dtype, device=o.device)).sum()
        total = term if total is None else total + term
    return total


def directions(arrays, seed=2):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.shape) for a in arrays]


def evaluate(fn, arrays, mode, ws=None, second_order=True, device=None):
    """Run ``fn`` on float64 ``arrays`` in ``mode``; returns a dict of NumPy results (see the module doc).
    ``device``: where the argument tensors live ("cuda" runs the program on the CUDA target)."""
    res = {}
    F = maybe_compile(fn, mode)
    xs = [jg.tensor(a, device=device) for a in arrays]
    outs = flat(F(*xs))
    again = flat(F(*xs))
    if mode != "eager":         # traced once, replayed once: nothing made it one-shot or broke its guards
        assert (F.stats["traces"], F.stats["hits"]) == (1, 1), F.stats
    res["values"] = [_np(o) for o in outs]
    res["values_again"] = [_np(o) for o in again]
    if ws is None:
        ws = weights_for(outs)
    res["ws"] = ws
    if all(w is None for w in ws):
        return res
    vs = directions(arrays)

    # backward() inside the function; grads land on the arguments
    def step(*xs):
        loss = loss_of(flat(fn(*xs)), ws)
        loss.backward()
        return loss.detach()
    S = maybe_compile(step, mode)
    grads = None
    for _ in range(2):          # trace + replay
        xs = [jg.tensor(a, requires_grad=True, device=device) for a in arrays]
        S(*xs)
        grads = [_np(x.grad) if x.grad is not None else np.zeros_like(a) for x, a in zip(xs, arrays)]
    if mode != "eager":
        assert (S.stats["traces"], S.stats["hits"]) == (1, 1), S.stats
    res["grads"] = grads

    # outer autograd.grad of the function's outputs, then second order
    xs = [jg.tensor(a, requires_grad=True, device=device) for a in arrays]
    outs = flat(F(*xs))
    loss = loss_of(outs, ws)
    g1 = autograd.grad(loss, xs, create_graph=second_order, allow_unused=True)
    res["outer"] = [np.zeros_like(a) if g is None else _np(g) for g, a in zip(g1, arrays)]
    if not second_order:
        return res
    res["hvp"] = _hvp(g1, xs, vs, arrays)

    # create_graph=True inside the function (gradient penalty), differentiated outside
    def inner(*xs):
        loss = loss_of(flat(fn(*xs)), ws)
        gs = autograd.grad(loss, xs, create_graph=True, allow_unused=True)
        total = None
        for g, v in zip(gs, vs):
            if g is None or not g.requires_grad:
                continue
            term = (g * jg.tensor(v, device=g.device)).sum()
            total = term if total is None else total + term
        return total
    I = maybe_compile(inner, mode)
    xs = [jg.tensor(a, requires_grad=True, device=device) for a in arrays]
    s = I(*xs)
    if s is None or not s.requires_grad:
        res["inner_hvp"] = [np.zeros_like(a) for a in arrays]
    else:
        h = autograd.grad(s, xs, allow_unused=True)
        res["inner_hvp"] = [np.zeros_like(a) if g is None else _np(g) for g, a in zip(h, arrays)]
    return res


def _hvp(g1, xs, vs, arrays):
    total = None
    for g, v in zip(g1, vs):
        if g is None or not g.requires_grad:
            continue
        term = (g * jg.tensor(v, dtype=g.dtype, device=g.device)).sum()
        total = term if total is None else total + term
    if total is None:
        return [np.zeros_like(a) for a in arrays]
    h = autograd.grad(total, xs, allow_unused=True)
    return [np.zeros_like(a) if g is None else _np(g) for g, a in zip(h, arrays)]


def eager_loss(fn, arrays, ws) -> float:
    with jg.no_grad():
        outs = flat(fn(*[jg.tensor(a) for a in arrays]))
        return float(loss_of(outs, ws).item())


def eager_grads(fn, arrays, ws):
    xs = [jg.tensor(a, requires_grad=True) for a in arrays]
    g = autograd.grad(loss_of(flat(fn(*xs)), ws), xs, allow_unused=True)
    return [np.zeros_like(a) if t is None else _np(t) for t, a in zip(g, arrays)]


def fd_grads(fn, arrays, ws, eps=1e-6):
    """Central differences of the eager loss with respect to every element of every input."""
    out = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[i][j] += eps
            lo[i][j] -= eps
            g[j] = (eager_loss(fn, hi, ws) - eager_loss(fn, lo, ws)) / (2 * eps)
        out.append(g)
    return out


def fd_hvp(fn, arrays, ws, eps=1e-5):
    """(grad(x + eps v) - grad(x - eps v)) / 2 eps: the Hessian-vector product by differences of eager grads."""
    vs = directions(arrays)
    hi = eager_grads(fn, [a + eps * v for a, v in zip(arrays, vs)], ws)
    lo = eager_grads(fn, [a - eps * v for a, v in zip(arrays, vs)], ws)
    return [(h - l) / (2 * eps) for h, l in zip(hi, lo)]


def assert_close_lists(got, want, rtol, atol, what):
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None or g is None:
            assert g is None and w is None, f"{what}[{k}]: one is None"
            continue
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}[{k}]: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{k}]: dtype {g.dtype}, expected {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}[{k}]")


def assert_agree(got: dict, want: dict, rtol=1e-9, atol=1e-11):
    """Compiled results == eager results (all keys both have)."""
    for key in ("values", "values_again", "grads", "outer", "hvp", "inner_hvp"):
        if key in want or key in got:
            assert key in got and key in want, f"{key}: present in only one mode"
            assert_close_lists(got[key], want[key], rtol, atol, key)
