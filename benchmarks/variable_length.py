"""Variable-length training (issue 30): an embedding + linear + cross-entropy + Adam step over 50 distinct sequence
lengths and 5 batch sizes, and nanoGPT's model (B9's, small: 2 blocks of width 64, block size 64) with ``T`` drawn
per batch from 8..64; each shape new once, then shapes seen before again.

Per configuration: traces, eager fallbacks, the largest loss difference from eager over the whole run, the median
and worst time of a call whose shape is new, and the median of a repeated shape's call.  Configurations: jitgrad
eager, ``jg.compile`` (default: automatic dynamic shapes, background builds; and ``background=False``),
``jg.compile(dynamic=False)`` (a trace per shape up to the recompile limit, as before), ``torch.compile`` with its
default ``dynamic`` when PyTorch is installed, JAX ``jit`` when installed (a compile per shape).

    python benchmarks/variable_length.py [--lengths 50] [--batches 5] [--workload lm|gpt|both] [--only NAME]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

V, C = 64, 32


def shapes(n_len, n_batch):
    lengths = list(range(11, 11 + n_len))
    batches = [4, 6, 8, 12, 16][:n_batch]
    rng = np.random.default_rng(0)
    order = [(b, t) for t in lengths for b in batches]
    rng.shuffle(order)
    data = [(rng.integers(0, V, s), rng.integers(0, V, s)) for s in order]
    return data


def jitgrad_step(compiled=None):
    import jitgrad as jg
    import jitgrad.nn as nn
    import jitgrad.nn.functional as F
    jg.manual_seed(0)
    emb, lin = nn.Embedding(V, C), nn.Linear(C, V)
    opt = jg.optim.Adam(list(emb.parameters()) + list(lin.parameters()), lr=1e-2)

    def step(idx, tgt):
        opt.zero_grad()
        B, T = idx.shape
        loss = F.cross_entropy(lin(emb(idx)).view(B * T, V), tgt.view(B * T))
        loss.backward()
        opt.step()
        return loss.detach()
    f = step if compiled is None else jg.compile(step, **compiled)

    def call(i, t):
        return float(f(jg.tensor(i), jg.tensor(t)))
    return call, f


GPT = dict(vocab=65, context=64, width=64, heads=4, layers=2)


def gpt_shapes(batch=8):
    """Every length of 8..block size once, in a shuffled order (nanoGPT's batches with ``T`` drawn per batch)."""
    rng = np.random.default_rng(1)
    lengths = list(range(8, GPT["context"] + 1))
    rng.shuffle(lengths)
    return [(rng.integers(0, GPT["vocab"], (batch, t)), rng.integers(0, GPT["vocab"], (batch, t))) for t in lengths]


def _gpt_model():
    import gpt_model
    return gpt_model


def gpt_step(compiled=None):
    import jitgrad as jg
    gm = _gpt_model()
    jg.manual_seed(0)
    m = gm.make_gpt(jg, GPT["vocab"], GPT["context"], GPT["width"], GPT["heads"], GPT["layers"], 0.0, False)
    step = gm.make_step(jg, m, m, gm.make_optimizer(jg, m, 1e-3))
    f = step if compiled is None else jg.compile(step, **compiled)

    def call(i, t):
        return float(f(jg.tensor(i), jg.tensor(t)))
    return call, f


def torch_gpt_step():
    import torch
    gm = _gpt_model()
    torch.manual_seed(0)
    m = gm.make_gpt(torch, GPT["vocab"], GPT["context"], GPT["width"], GPT["heads"], GPT["layers"], 0.0, False)
    step = gm.make_step(torch, torch.compile(m), m, gm.make_optimizer(torch, m, 1e-3))

    def call(i, t):
        return float(step(torch.from_numpy(i), torch.from_numpy(t)))
    return call, None


def torch_step():
    import torch
    torch.manual_seed(0)
    emb, lin = torch.nn.Embedding(V, C), torch.nn.Linear(C, V)
    opt = torch.optim.Adam(list(emb.parameters()) + list(lin.parameters()), lr=1e-2)

    @torch.compile
    def fwd_bwd(idx, tgt):
        B, T = idx.shape
        loss = torch.nn.functional.cross_entropy(lin(emb(idx)).view(B * T, V), tgt.view(B * T))
        loss.backward()
        return loss.detach()

    def call(i, t):
        opt.zero_grad()
        loss = fwd_bwd(torch.from_numpy(i), torch.from_numpy(t))
        opt.step()
        return float(loss)
    return call, None


def jax_step():
    import jax
    import jax.numpy as jnp
    import optax
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = {"emb": jax.random.normal(k1, (V, C)), "w": jax.random.normal(k2, (C, V)) / C ** 0.5,
              "b": jnp.zeros(V)}
    opt = optax.adam(1e-2)
    state = [params, opt.init(params)]

    def loss_fn(p, idx, tgt):
        logits = (p["emb"][idx] @ p["w"] + p["b"]).reshape(-1, V)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tgt.reshape(-1, 1), 1))

    @jax.jit
    def update(p, s, idx, tgt):
        loss, g = jax.value_and_grad(loss_fn)(p, idx, tgt)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    def call(i, t):
        state[0], state[1], loss = update(state[0], state[1], i, t)
        return float(loss)
    return call, None


def run(name, make, data, ref=None):
    try:
        call, f = make()
    except ImportError as e:
        print(f"{name:<36} skipped ({e})")
        return None
    new_t, new_c, losses = [], [], []
    stats = getattr(f, "stats", None)
    slow0 = 0 if stats is None else stats.get("eager_calls", 0) + stats.get("interpreted_calls", 0)
    half = len(data) // 2
    # in the first pass's second half, every 4th new shape is called again at once: the same shape and the same
    # code tier as its first call (a cost that grows with the size cannot tilt the pair)
    pairs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, (i, t) in enumerate(data):                  # every shape new
            t0, c0 = time.perf_counter(), time.process_time()
            losses.append(call(i, t))
            new_t.append(time.perf_counter() - t0)
            new_c.append(time.process_time() - c0)
            if n >= half and n % 4 == 0:
                t0 = time.perf_counter()
                losses.append(call(i, t))
                pairs.append((new_t[-1], time.perf_counter() - t0))
        # first-pass calls served eagerly or interpreted while builds ran (background builds on a cold cache)
        slow = "-" if stats is None else stats.get("eager_calls", 0) + stats.get("interpreted_calls", 0) - slow0
        if f is not None and hasattr(f, "wait"):
            f.wait()
        rep_t, rep_c = [], []
        for i, t in data[-min(60, len(data) // 2):]:      # shapes seen before (the latest: instances kept)
            t0, c0 = time.perf_counter(), time.process_time()
            call(i, t)
            rep_t.append(time.perf_counter() - t0)
            rep_c.append(time.process_time() - c0)
    traces = fb = low = inst = "-"
    if f is not None and hasattr(f, "stats"):
        traces, fb = f.stats["traces"], f.stats["eager_fallbacks"]
        low, inst = f.stats.get("shape_lowerings", 0), f.stats.get("shape_instances", 0)
    diff = "-" if ref is None else f"{max(abs(a - b) for a, b in zip(losses, ref)):.1e}"
    ratio = statistics.median(new_t[half:]) / statistics.median(rep_t)
    mixed_t = [r for _, r in pairs]
    mixed = statistics.median(n for n, _ in pairs) / statistics.median(mixed_t)
    print(f"{name:<36} {traces!s:>6} {fb!s:>9} {low!s:>5} {inst!s:>5} {slow!s:>5} {diff:>10} "
          f"{1e3 * statistics.median(new_t[half:]):>9.2f} "
          f"{1e3 * max(new_t[5:]):>9.1f} {1e3 * statistics.median(rep_t):>9.2f} {ratio:>8.2f}x "
          f"{1e3 * statistics.median(mixed_t):>9.2f} {mixed:>8.2f}x "
          f"{1e3 * statistics.median(new_c[half:]):>9.2f} {1e3 * statistics.median(rep_c):>9.2f}")
    return losses


HEADER = (f"{'configuration':<36} {'traces':>6} {'fallbacks':>9} {'lower':>5} {'inst':>5} {'slow':>5} {'vs eager':>10} "
          f"{'new ms':>9} {'new max':>9} "
          f"{'repeat ms':>9} {'new/rep':>9} {'again ms':>9} {'new/again':>9} {'new cpu':>9} {'rep cpu':>9}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, default=50)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--workload", choices=("lm", "gpt", "both"), default="both")
    ap.add_argument("--only", default=None, help="run only the configurations whose name contains this")
    args = ap.parse_args()

    def row(name, make, data, ref=None):
        return run(name, make, data, ref) if args.only is None or args.only in name else None
    if args.workload in ("lm", "both"):
        data = shapes(args.lengths, args.batches)
        print(f"{len(data)} calls, {args.lengths} lengths x {args.batches} batch sizes, V={V} C={C}; "
              f"load average {os.getloadavg()[0]:.2f}")
        print(HEADER)
        ref = row("jitgrad eager", lambda: jitgrad_step(None), data)
        row("jg.compile (default)", lambda: jitgrad_step({}), data, ref)
        row("jg.compile(background=False)", lambda: jitgrad_step({"background": False}), data, ref)
        row("jg.compile(dynamic=False)", lambda: jitgrad_step({"dynamic": False}), data, ref)
        row("torch.compile (default dynamic)", torch_step, data)
        row("jax.jit", jax_step, data)
    if args.workload in ("gpt", "both"):
        data = gpt_shapes()
        print(f"\nnanoGPT ({GPT}), batch 8, T = 8..{GPT['context']} once each ({len(data)} calls); "
              f"load average {os.getloadavg()[0]:.2f}")
        print(HEADER)
        ref = row("jitgrad eager", lambda: gpt_step(None), data)
        row("jg.compile (default)", lambda: gpt_step({}), data, ref)
        row("jg.compile(background=False)", lambda: gpt_step({"background": False}), data, ref)
        row("torch.compile(model) (default dynamic)", torch_gpt_step, data)
    print("lower / inst: programs lowered for every size / concrete builds per size (f.stats); slow: first-pass calls "
          "run eagerly or interpreted while builds ran (a cold cache; each configuration's builds warm the cache for "
          "the rows after it: --only runs one row, for a fresh process each); new ms: median wall time over the second half of the first pass (every call a new shape); new max: its "
          "worst after 5 calls; repeat: the latest shapes again (60, or half the calls); new/rep: new ms over "
          "repeat ms (issue 30's target: <= 1.2x; after f.wait(), so on a cold cache it also compares a quick build's code "
          "with the optimised build's); again: in the first pass's second half, every 4th new shape called again at "
          "once (the same shape and code as its first call), new/again: the median of those shapes' first calls over "
          "the median of their second; cpu: this process's CPU ms (all threads)")


if __name__ == "__main__":
    main()
