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

import io
import math

import numpy as np
import pytest

import jitgrad as jg

VOCAB, T, C, H, L, B = 11, 8, 16, 2, 2, 4
STEPS = 20


def make_gpt(lib, dropout, sdpa):
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.attn_dropout = nn.Dropout(dropout)
            self.resid_dropout = nn.Dropout(dropout)
            self.register_buffer("bias", lib.tril(lib.ones(T, T)).view(1, 1, T, T))

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            k = k.view(b, t, H, c // H).transpose(1, 2)     # a view of a split slice: torch's stride rule
            q = q.view(b, t, H, c // H).transpose(1, 2)
            v = v.view(b, t, H, c // H).transpose(1, 2)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                                   dropout_p=dropout if self.training else 0, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
                att = self.attn_dropout(F.softmax(att, dim=-1))
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(b, t, c)
            return self.resid_dropout(self.c_proj(y))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C), nn.Dropout(dropout))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(VOCAB, C), wpe=nn.Embedding(T, C), drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block() for _ in range(L)]), ln_f=nn.LayerNorm(C)))
            self.lm_head = nn.Linear(C, VOCAB, bias=False)
            self.transformer.wte.weight = self.lm_head.weight      # tied
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            t = idx.size(1)
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    return GPT()


def make_optimizer(lib, model):
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    return lib.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                           lr=1e-2, betas=(0.9, 0.95))


def make_step(lib, fwd, model, opt):
    """B9's training step: ``fwd(x, y)``'s loss, backward, clip at 1.0, the optimiser's step, zero_grad."""
    def step(x, y):
        loss = fwd(x, y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


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
