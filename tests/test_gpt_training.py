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

import numpy as np
import pytest

import jitgrad as jg

VOCAB, T, C, H, L, B = 11, 8, 16, 2, 2, 4
STEPS = 20


# the model, the optimiser and the step are B9's: one definition, in benchmarks/gpt_model.py (loaded by path:
# putting benchmarks/ on sys.path would shadow test modules with its harness.py, report.py...)
from benchmark_model import gpt_model  # noqa: E402 - B9's model, shared by the tests
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


def make_nanogpt(lib, n_layer=2, n_head=2, n_embd=8, block_size=6, vocab=7, bias=False):
    """nanoGPT's model.py as it is written (bias=False: its own LayerNorm over F.layer_norm with bias None, and
    nn.LayerNorm(bias=False) at the end; the flash branch; a tanh GELU; _init_weights via apply; the scaled
    c_proj init; configure_optimizers' groups, fused= by inspect)."""
    import inspect
    import math
    nn, F = lib.nn, lib.nn.functional

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(ndim))
            self.bias = nn.Parameter(lib.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
            self.flash = hasattr(lib.nn.functional, "scaled_dot_product_attention")

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(n_embd, bias), CausalSelfAttention(), \
                LayerNorm(n_embd, bias), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block() for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd, bias=bias)))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    lib.nn.init.zeros_(module.bias)

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            optim_groups = [{"params": [p for p in param_dict.values() if p.dim() >= 2], "weight_decay": weight_decay},
                            {"params": [p for p in param_dict.values() if p.dim() < 2], "weight_decay": 0.0}]
            fused_available = "fused" in inspect.signature(lib.optim.AdamW).parameters
            extra_args = dict(fused=fused_available and device_type == "cuda")
            return lib.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

    return GPT()


def _nanogpt_run(lib, mode, init):
    """5 steps of nanoGPT's train.py loop (clip at 1.0, its returned norm kept) from the weights in ``init``."""
    model = make_nanogpt(lib).double()
    init.seek(0)
    model.load_state_dict(lib.load(init, weights_only=True))
    opt = model.configure_optimizers(0.1, 3e-2, (0.9, 0.95), "cpu")

    def step(x, y):
        loss = model(x, y)
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), norm
    if mode != "eager":
        step = jg.compile(step, backend=mode, background=False)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(5):
        x, y = rng.integers(0, 7, (3, 6)), rng.integers(0, 7, (3, 6))
        y[:, :2] = -1           # nanoGPT's ignore_index: positions without a target
        loss, norm = step(lib.tensor(x), lib.tensor(y))
        out.append([loss.item(), norm.item()])
    return np.array(out), {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_nanogpt_model_py_trains_as_torch():
    """nanoGPT's model.py (make_nanogpt) for 5 steps, float64: jitgrad eager, compiled on the interpreter and on
    Numba, and torch (the same initial weights, jg.save -> torch's file format) agree on losses, clip norms and
    every parameter; the tied embedding stays one tensor."""
    torch = pytest.importorskip("torch")
    jg.manual_seed(0)
    model = make_nanogpt(jg).double()
    assert model.transformer.wte.weight is model.lm_head.weight and model.transformer.ln_f.bias is None
    init = io.BytesIO()
    jg.save(model.state_dict(), init)
    want = _nanogpt_run(torch, "eager", init)
    for mode in ("eager", "interpret", "numba"):
        _same(_nanogpt_run(jg, mode, init), want, 1e-10)
