"""A small GPT trained the way public training scripts train it (issue 18): the model code is written once against
a ``torch``-like module (jitgrad or torch), with tied input/output embeddings, dropout, a causal mask buffer and
``masked_fill`` (or ``F.scaled_dot_product_attention``), AdamW with two parameter groups, ``clip_grad_norm_``,
batches from a ``DataLoader``, and a checkpoint saved and restored half-way.  20 steps in float64:

* jitgrad eager == jitgrad compiled (the whole step under ``jg.compile``, and ``model = jg.compile(model)``, on
  the reference interpreter; the whole step on the Numba backend too), with dropout on: the same Philox masks in
  both modes;
* jitgrad == torch without dropout (the libraries' generators differ), starting from the same weights, carried
  over with ``torch.save`` / ``torch.load`` in torch's file format.

Small sizes (width 16, 2 layers, context 8) keep it to seconds.
"""
from __future__ import annotations

import importlib.util
import io
import os

import numpy as np
import pytest

import jitgrad as jg

VOCAB, T, C, H, L, B = 11, 8, 16, 2, 2, 4
STEPS = 20


# the model, the optimiser and the step are B9's: one definition, in benchmarks/gpt_model.py (loaded by path:
# putting benchmarks/ on sys.path would shadow test modules with its harness.py, report.py...)
_spec = importlib.util.spec_from_file_location("gpt_model", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "gpt_model.py"))
gpt_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt_model)
make_step = gpt_model.make_step


def make_gpt(lib, dropout, sdpa):
    return gpt_model.make_gpt(lib, VOCAB, T, C, H, L, dropout, sdpa)


def make_optimizer(lib, model):
    return gpt_model.make_optimizer(lib, model, lr=1e-2)


def data():
    rng = np.random.default_rng(0)     # progressions mod VOCAB: learnable from the previous two tokens
    seqs = (rng.integers(0, VOCAB, (24, 1)) + rng.integers(1, 4, (24, 1)) * np.arange(T + 1)) % VOCAB
    return seqs[:, :-1].copy(), seqs[:, 1:].copy()


def loader():
    from jitgrad.utils.data import DataLoader, TensorDataset
    x, y = data()
    return DataLoader(TensorDataset(jg.tensor(x), jg.tensor(y)), batch_size=B, shuffle=True, drop_last=True,
                      generator=jg.Generator().manual_seed(3))


def batches():
    """STEPS batches from the DataLoader (epochs repeat; the generator reshuffles each epoch)."""
    out = []
    dl = loader()
    while len(out) < STEPS:
        for x, y in dl:
            out.append((x.numpy(), y.numpy()))
            if len(out) == STEPS:
                break
    return out


def train_jitgrad(dropout, sdpa, mode, checkpoint_at=None, backend="interpret"):
    jg.manual_seed(0)
    model = make_gpt(jg, dropout, sdpa).double()
    init = io.BytesIO()
    jg.save(model.state_dict(), init)
    opt = make_optimizer(jg, model)
    fwd = jg.compile(model, backend=backend, background=False) if mode == "compile-model" else model

    step = make_step(jg, fwd, model, opt)
    run = jg.compile(step, backend=backend, background=False) if mode == "compile-step" else step
    losses = []
    for i, (x, y) in enumerate(batches()):
        if i == checkpoint_at:
            # save, rebuild everything from the checkpoint, continue: the run must not notice
            buf = io.BytesIO()
            jg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": i,
                     "rng": jg.get_rng_state()}, buf)
            buf.seek(0)
            ck = jg.load(buf)
            model = make_gpt(jg, dropout, sdpa).double()
            model.load_state_dict(ck["model"])
            opt = make_optimizer(jg, model)
            opt.load_state_dict(ck["optimizer"])
            jg.set_rng_state(ck["rng"])
            run = make_step(jg, model, model, opt)     # eager, on the rebuilt model and optimiser
        losses.append(float(run(jg.tensor(x), jg.tensor(y))))
    return np.array(losses), {k: v.numpy().copy() for k, v in model.state_dict().items()}, init


def train_torch(sdpa, init):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = make_gpt(torch, 0.0, sdpa).double()
    init.seek(0)
    model.load_state_dict(torch.load(init, weights_only=True))
    opt = make_optimizer(torch, model)
    losses = []
    for x, y in batches():
        loss = model(torch.tensor(x), torch.tensor(y))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return np.array(losses), {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _same(a, b, tol):
    la, sa = a[:2]
    lb, sb = b[:2]
    np.testing.assert_allclose(la, lb, rtol=tol, atol=tol)
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_allclose(sa[k], sb[k], rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("sdpa", [False, True])
def test_gpt_eager_equals_compiled_with_dropout(sdpa):
    eager = train_jitgrad(0.1, sdpa, "eager")
    assert eager[0][-1] < eager[0][0] - 0.3           # it learns
    _same(eager, train_jitgrad(0.1, sdpa, "compile-step"), 1e-10)
    _same(eager, train_jitgrad(0.1, sdpa, "compile-model"), 1e-10)


def test_gpt_checkpoint_round_trip_mid_training():
    _same(train_jitgrad(0.1, False, "eager"), train_jitgrad(0.1, False, "eager", checkpoint_at=10), 0)


@pytest.mark.parametrize("sdpa", [False, True])
def test_gpt_matches_torch_float64(sdpa):
    losses, state, init = train_jitgrad(0.0, sdpa, "compile-step")
    tl, ts = train_torch(sdpa, init)
    _same((losses, state), (tl, ts), 1e-9)


def test_gpt_eager_equals_numba_compiled():
    """The same 20 steps through the generated kernels (Numba backend, SDPA's decomposition fused and compiled)."""
    _same(train_jitgrad(0.1, True, "eager"), train_jitgrad(0.1, True, "compile-step", backend="numba"), 1e-9)
