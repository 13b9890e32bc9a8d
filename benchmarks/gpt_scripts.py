"""The public GPT scripts' training iterations, eager, beside PyTorch eager (issue 28: <= 1.5x per iteration; the
makemore notebooks <= 1.3x).

The scripts themselves are not in this repository, so each model here is written the way its script writes it,
against a torch-like module ``lib`` (``jitgrad`` or ``torch``):

* ``nanogpt``: nanoGPT's model.py (its own LayerNorm over ``F.layer_norm`` with an optional bias, a registered
  ``tril`` bias buffer and ``masked_fill``, ``F.softmax``, dropout, ``nn.GELU``, tied embeddings, ``_init_weights``
  with the scaled ``c_proj`` init, ``configure_optimizers``' decay groups by ``dim() >= 2``) and train.py's
  iteration (``clip_grad_norm_`` at 1.0, AdamW betas 0.9/0.99 as in shakespeare_char, ``zero_grad(set_to_none=True)``);
* ``mingpt``: minGPT's model.py (``NewGELU``, ``mlpf`` lambda, decay groups chosen by module type and parameter name)
  and its Trainer's iteration, in the ``gpt-micro`` size;
* ``gpt.py``: the video lecture's gpt.py (one ``Head`` module per head, ``torch.cat`` of heads, ``C**-0.5``,
  ``nn.Sequential`` feed-forward with ReLU, plain ``AdamW(model.parameters())``) in its CPU-sized configuration;
* ``makemore``: the makemore notebooks' steps: the bigram network (one-hot, ``exp``, normalised counts, regularised
  negative log-likelihood, ``W.data += -lr * W.grad``), the MLP (embedding by indexing, ``tanh``,
  ``F.cross_entropy``) and the MLP with hand-written batch norm (``mean``/``std`` over the batch, running statistics
  updated under ``no_grad``).

Both libraries get the same initial weights (torch's, copied into jitgrad) and the same batches (NumPy); the first
steps are run with dropout off and their losses compared before anything is timed.  Timing follows
``eager_ops.py``: one thread each (``OPENBLAS_NUM_THREADS=1``, ``set_num_threads(1)`` in both), jitgrad and torch
interleaved round by round, each round the best of a few repeats of ``n`` iterations, the median over rounds, the
calling thread's CPU time by default.  Run in a fresh process::

    python benchmarks/gpt_scripts.py [--rounds N] [--only nanogpt,makemore-mlp] [--scale 0.2] [--check-only]

Eager kernels (``jit/eager_kernels.py``) are built in the background at first use; the losses checked before
timing run every kernel's first call, and the timing waits for their builds (``eager_kernels.wait``), so no round
times NumPy stand-ins for a kernel still building.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness as H  # noqa: E402

TARGETS = {"nanogpt": 1.5, "mingpt": 1.5, "gpt.py": 1.5,
           "makemore-bigram": 1.3, "makemore-mlp": 1.3, "makemore-mlp-bn": 1.3}


# ---------------------------------------------------------------- nanoGPT (model.py, train.py)

def nanogpt(lib, cfg):
    """nanoGPT's GPT and its training iteration; returns (model, step(x, y) -> loss)."""
    nn, F = lib.nn, lib.nn.functional

    class LayerNorm(nn.Module):
        """LayerNorm but with an optional bias (nanoGPT's own)."""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(ndim))
            self.bias = nn.Parameter(lib.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config["n_embd"] % config["n_head"] == 0
            self.c_attn = nn.Linear(config["n_embd"], 3 * config["n_embd"], bias=config["bias"])
            self.c_proj = nn.Linear(config["n_embd"], config["n_embd"], bias=config["bias"])
            self.attn_dropout = nn.Dropout(config["dropout"])
            self.resid_dropout = nn.Dropout(config["dropout"])
            self.n_head = config["n_head"]
            self.n_embd = config["n_embd"]
            self.dropout = config["dropout"]
            bs = config["block_size"]
            self.register_buffer("bias", lib.tril(lib.ones(bs, bs)).view(1, 1, bs, bs))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config["n_embd"], 4 * config["n_embd"], bias=config["bias"])
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config["n_embd"], config["n_embd"], bias=config["bias"])
            self.dropout = nn.Dropout(config["dropout"])

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config["n_embd"], bias=config["bias"])
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config["n_embd"], bias=config["bias"])
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config["vocab_size"], config["n_embd"]),
                wpe=nn.Embedding(config["block_size"], config["n_embd"]),
                drop=nn.Dropout(config["dropout"]),
                h=nn.ModuleList([Block(config) for _ in range(config["n_layer"])]),
                ln_f=LayerNorm(config["n_embd"], bias=config["bias"]),
            ))
            self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"], bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config["n_layer"]))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = lib.arange(0, t, dtype=lib.long)
            tok_emb = self.transformer.wte(idx)
            pos_emb = self.transformer.wpe(pos)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                            {"params": nodecay_params, "weight_decay": 0.0}]
            return lib.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)

    model = GPT(cfg)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    it = [0]

    def get_lr(i, warmup_iters=10, lr_decay_iters=5000, learning_rate=1e-3, min_lr=1e-4):
        if i < warmup_iters:
            return learning_rate * (i + 1) / (warmup_iters + 1)
        ratio = min(1.0, (i - warmup_iters) / (lr_decay_iters - warmup_iters))
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

    def step(X, Y):
        lr = get_lr(it[0])
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        logits, loss = model(X, Y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        it[0] += 1
        return loss.item()
    return model, step


# ---------------------------------------------------------------- minGPT (model.py, trainer.py)

def mingpt(lib, cfg):
    """minGPT's GPT and its Trainer's iteration; returns (model, step(x, y) -> loss)."""
    nn, F = lib.nn, lib.nn.functional

    class NewGELU(nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + lib.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * lib.pow(x, 3.0))))

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_attn = nn.Linear(config["n_embd"], 3 * config["n_embd"])
            self.c_proj = nn.Linear(config["n_embd"], config["n_embd"])
            self.attn_dropout = nn.Dropout(config["attn_pdrop"])
            self.resid_dropout = nn.Dropout(config["resid_pdrop"])
            bs = config["block_size"]
            self.register_buffer("bias", lib.tril(lib.ones(bs, bs)).view(1, 1, bs, bs))
            self.n_head = config["n_head"]
            self.n_embd = config["n_embd"]

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            y = self.resid_dropout(self.c_proj(y))
            return y

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config["n_embd"])
            self.attn = CausalSelfAttention(config)
            self.ln_2 = nn.LayerNorm(config["n_embd"])
            self.mlp = nn.ModuleDict(dict(
                c_fc=nn.Linear(config["n_embd"], 4 * config["n_embd"]),
                c_proj=nn.Linear(4 * config["n_embd"], config["n_embd"]),
                act=NewGELU(),
                dropout=nn.Dropout(config["resid_pdrop"]),
            ))
            m = self.mlp
            self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlpf(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.block_size = config["block_size"]
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config["vocab_size"], config["n_embd"]),
                wpe=nn.Embedding(config["block_size"], config["n_embd"]),
                drop=nn.Dropout(config["embd_pdrop"]),
                h=nn.ModuleList([Block(config) for _ in range(config["n_layer"])]),
                ln_f=nn.LayerNorm(config["n_embd"]),
            ))
            self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"], bias=False)
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config["n_layer"]))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                lib.nn.init.zeros_(module.bias)
                lib.nn.init.ones_(module.weight)

        def configure_optimizers(self, train_config):
            decay, no_decay = set(), set()
            whitelist_weight_modules = (nn.Linear,)
            blacklist_weight_modules = (nn.LayerNorm, nn.Embedding)
            for mn, m in self.named_modules():
                for pn, p in m.named_parameters():
                    fpn = "%s.%s" % (mn, pn) if mn else pn
                    if pn.endswith("bias"):
                        no_decay.add(fpn)
                    elif pn.endswith("weight") and isinstance(m, whitelist_weight_modules):
                        decay.add(fpn)
                    elif pn.endswith("weight") and isinstance(m, blacklist_weight_modules):
                        no_decay.add(fpn)
            param_dict = {pn: p for pn, p in self.named_parameters()}
            assert len(decay & no_decay) == 0 and len(param_dict.keys() - (decay | no_decay)) == 0
            optim_groups = [
                {"params": [param_dict[pn] for pn in sorted(list(decay))],
                 "weight_decay": train_config["weight_decay"]},
                {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
            ]
            return lib.optim.AdamW(optim_groups, lr=train_config["learning_rate"], betas=train_config["betas"])

        def forward(self, idx, targets=None):
            b, t = idx.size()
            assert t <= self.block_size
            pos = lib.arange(0, t, dtype=lib.long).unsqueeze(0)
            tok_emb = self.transformer.wte(idx)
            pos_emb = self.transformer.wpe(pos)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

    model = GPT(cfg)
    train_config = {"learning_rate": 5e-4, "betas": (0.9, 0.95), "weight_decay": 0.1, "grad_norm_clip": 1.0}
    optimizer = model.configure_optimizers(train_config)
    model.train()

    def step(x, y):
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), train_config["grad_norm_clip"])
        optimizer.step()
        return loss.item()
    return model, step


# ---------------------------------------------------------------- the lecture's gpt.py

def lecture_gpt(lib, cfg):
    """The video lecture's GPTLanguageModel and its training loop body; returns (model, step(x, y) -> loss)."""
    nn, F = lib.nn, lib.nn.functional
    n_embd, n_head, n_layer = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    block_size, dropout, vocab_size = cfg["block_size"], cfg["dropout"], cfg["vocab_size"]

    class Head(nn.Module):
        """one head of self-attention"""

        def __init__(self, head_size):
            super().__init__()
            self.key = nn.Linear(n_embd, head_size, bias=False)
            self.query = nn.Linear(n_embd, head_size, bias=False)
            self.value = nn.Linear(n_embd, head_size, bias=False)
            self.register_buffer("tril", lib.tril(lib.ones(block_size, block_size)))
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            k = self.key(x)
            q = self.query(x)
            wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
            wei = F.softmax(wei, dim=-1)
            wei = self.dropout(wei)
            v = self.value(x)
            out = wei @ v
            return out

    class MultiHeadAttention(nn.Module):
        def __init__(self, num_heads, head_size):
            super().__init__()
            self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
            self.proj = nn.Linear(head_size * num_heads, n_embd)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            out = lib.cat([h(x) for h in self.heads], dim=-1)
            out = self.dropout(self.proj(out))
            return out

    class FeedFoward(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd),
                                     nn.Dropout(dropout))

        def forward(self, x):
            return self.net(x)

    class Block(nn.Module):
        def __init__(self, n_embd, n_head):
            super().__init__()
            head_size = n_embd // n_head
            self.sa = MultiHeadAttention(n_head, head_size)
            self.ffwd = FeedFoward(n_embd)
            self.ln1 = nn.LayerNorm(n_embd)
            self.ln2 = nn.LayerNorm(n_embd)

        def forward(self, x):
            x = x + self.sa(self.ln1(x))
            x = x + self.ffwd(self.ln2(x))
            return x

    class GPTLanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
            self.position_embedding_table = nn.Embedding(block_size, n_embd)
            self.blocks = nn.Sequential(*[Block(n_embd, n_head=n_head) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            tok_emb = self.token_embedding_table(idx)
            pos_emb = self.position_embedding_table(lib.arange(T))
            x = tok_emb + pos_emb
            x = self.blocks(x)
            x = self.ln_f(x)
            logits = self.lm_head(x)
            B, T, C = logits.shape
            logits = logits.view(B * T, C)
            targets = targets.view(B * T)
            loss = F.cross_entropy(logits, targets)
            return logits, loss

    model = GPTLanguageModel()
    optimizer = lib.optim.AdamW(model.parameters(), lr=cfg["learning_rate"])

    def step(xb, yb):
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()
    return model, step


# ---------------------------------------------------------------- makemore (parts 1-3)

class _Params:
    """The notebooks keep their parameters as plain tensors in a list; the state_dict copy goes through this."""

    def __init__(self, lib, named):
        self.lib, self.named = lib, named

    def state_dict(self):
        return dict(self.named)

    def load_state_dict(self, state):
        with self.lib.no_grad():
            for k, t in self.named.items():
                t.copy_(state[k])


def makemore_bigram(lib, cfg):
    """makemore part 1's neural bigram: one-hot inputs, one weight matrix, counts by exp, regularised NLL."""
    F = lib.nn.functional
    g = lib.Generator().manual_seed(2147483647)
    W = lib.randn((27, 27), generator=g, requires_grad=True)

    def step(xs, ys):
        num = xs.nelement()
        xenc = F.one_hot(xs, num_classes=27).float()
        logits = xenc @ W
        counts = logits.exp()
        probs = counts / counts.sum(1, keepdims=True)
        loss = -probs[lib.arange(num), ys].log().mean() + 0.01 * (W ** 2).mean()
        W.grad = None
        loss.backward()
        W.data += -50 * W.grad
        return loss.item()
    return _Params(lib, {"W": W}), step


def makemore_mlp(lib, cfg):
    """makemore part 2's MLP (Bengio et al.): embedding by indexing, a tanh layer, ``F.cross_entropy``, SGD on
    ``p.data``."""
    F = lib.nn.functional
    g = lib.Generator().manual_seed(2147483647)
    C = lib.randn((27, 10), generator=g)
    W1 = lib.randn((30, 200), generator=g)
    b1 = lib.randn(200, generator=g)
    W2 = lib.randn((200, 27), generator=g)
    b2 = lib.randn(27, generator=g)
    parameters = [C, W1, b1, W2, b2]
    for p in parameters:
        p.requires_grad = True

    def step(Xb, Yb):
        emb = C[Xb]
        h = lib.tanh(emb.view(-1, 30) @ W1 + b1)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
        for p in parameters:
            p.grad = None
        loss.backward()
        lr = 0.1
        for p in parameters:
            p.data += -lr * p.grad
        return loss.item()
    return _Params(lib, dict(zip("C W1 b1 W2 b2".split(), parameters))), step


def makemore_mlp_bn(lib, cfg):
    """makemore part 3's MLP with batch norm written by hand (running statistics under ``no_grad``)."""
    F = lib.nn.functional
    n_embd, n_hidden, vocab_size, block = 10, 200, 27, 3
    g = lib.Generator().manual_seed(2147483647)
    C = lib.randn((vocab_size, n_embd), generator=g)
    W1 = lib.randn((n_embd * block, n_hidden), generator=g) * (5 / 3) / ((n_embd * block) ** 0.5)
    W2 = lib.randn((n_hidden, vocab_size), generator=g) * 0.01
    b2 = lib.randn(vocab_size, generator=g) * 0
    bngain = lib.ones((1, n_hidden))
    bnbias = lib.zeros((1, n_hidden))
    bnmean_running = lib.zeros((1, n_hidden))
    bnstd_running = lib.ones((1, n_hidden))
    parameters = [C, W1, W2, b2, bngain, bnbias]
    for p in parameters:
        p.requires_grad = True

    def step(Xb, Yb):
        emb = C[Xb]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1
        bnmeani = hpreact.mean(0, keepdim=True)
        bnstdi = hpreact.std(0, keepdim=True)
        hpreact = bngain * (hpreact - bnmeani) / bnstdi + bnbias
        with lib.no_grad():
            bnmean_running.mul_(0.999).add_(0.001 * bnmeani)
            bnstd_running.mul_(0.999).add_(0.001 * bnstdi)
        h = lib.tanh(hpreact)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
        for p in parameters:
            p.grad = None
        loss.backward()
        for p in parameters:
            p.data += -0.1 * p.grad
        return loss.item()
    named = dict(zip("C W1 W2 b2 bngain bnbias".split(), parameters))
    named.update(bnmean_running=bnmean_running, bnstd_running=bnstd_running)
    return _Params(lib, named), step


# ---------------------------------------------------------------- workloads

def _char_batches(rng, vocab, batch, block, count):
    """nanoGPT's get_batch over a random character stream: ``count`` (x, y) pairs of (batch, block) int64."""
    data = rng.integers(0, vocab, 20000).astype(np.int64)
    out = []
    for _ in range(count):
        ix = rng.integers(0, len(data) - block, batch)
        out.append((np.stack([data[i:i + block] for i in ix]), np.stack([data[i + 1:i + 1 + block] for i in ix])))
    return out


def _name_batches(rng, batch, count, bigram=False):
    """makemore's batches over random 'names': (batch, 3) contexts and next characters (or bigram pairs)."""
    out = []
    for _ in range(count):
        if bigram:
            out.append((rng.integers(0, 27, batch).astype(np.int64), rng.integers(0, 27, batch).astype(np.int64)))
        else:
            out.append((rng.integers(0, 27, (batch, 3)).astype(np.int64), rng.integers(0, 27, batch).astype(np.int64)))
    return out


# name -> (builder, configuration, batches(rng), iterations per timing).  nanoGPT: its README's CPU run of
# shakespeare_char (batch 12, block 64, 4 layers, 4 heads, 128 wide, dropout 0); minGPT: 'gpt-micro' with its
# default dropouts; gpt.py: the lecture's CPU-sized settings; makemore: the notebooks' sizes (the bigram network
# trains on all 228146 bigrams at once, the MLPs on minibatches of 32).
WORKLOADS = {
    "nanogpt": (nanogpt, dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, dropout=0.0,
                              bias=False),
                lambda rng: _char_batches(rng, 65, 12, 64, 8), 10),
    "mingpt": (mingpt, dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, embd_pdrop=0.1,
                            resid_pdrop=0.1, attn_pdrop=0.1),
               lambda rng: _char_batches(rng, 65, 8, 64, 8), 10),
    "gpt.py": (lecture_gpt, dict(n_layer=4, n_head=4, n_embd=64, block_size=32, vocab_size=65, dropout=0.0,
                                 learning_rate=1e-3),
               lambda rng: _char_batches(rng, 65, 16, 32, 8), 10),
    "makemore-bigram": (makemore_bigram, {}, lambda rng: _name_batches(rng, 228146, 3, bigram=True), 5),
    "makemore-mlp": (makemore_mlp, {}, lambda rng: _name_batches(rng, 32, 8), 200),
    "makemore-mlp-bn": (makemore_mlp_bn, {}, lambda rng: _name_batches(rng, 32, 8), 100),
}
DROPOUT_KEYS = ("dropout", "embd_pdrop", "resid_pdrop", "attn_pdrop")
# the same models and ops at a fraction of the sizes (tests count the work of a step, they do not time it)
SMALL = {"nanogpt": (dict(n_layer=2, n_embd=32, block_size=16), lambda rng: _char_batches(rng, 65, 3, 16, 3)),
         "mingpt": (dict(n_layer=2, n_embd=32, block_size=16), lambda rng: _char_batches(rng, 65, 3, 16, 3)),
         "gpt.py": (dict(n_layer=2, n_embd=32, block_size=16), lambda rng: _char_batches(rng, 65, 3, 16, 3)),
         "makemore-bigram": ({}, lambda rng: _name_batches(rng, 500, 3, bigram=True))}


def _pair(name, jg, torch, dropout, small=False):
    """(jitgrad's step, torch's step, jitgrad batches, torch batches): the same weights (torch's, copied) and data;
    ``small``: the sizes of ``SMALL``."""
    build, cfg, batches, _ = WORKLOADS[name]
    cfg = dict(cfg)
    if small and name in SMALL:
        cfg.update(SMALL[name][0])
        batches = SMALL[name][1]
    if not dropout:
        cfg.update({k: 0.0 for k in DROPOUT_KEYS if k in cfg})
    torch.manual_seed(1337)
    tmodel, tstep = build(torch, cfg)
    jmodel, jstep = build(jg, cfg)
    jmodel.load_state_dict({k: jg.tensor(v.detach().numpy().copy()) for k, v in tmodel.state_dict().items()})
    data = batches(np.random.default_rng(0))
    tdata = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
    jdata = [(jg.from_numpy(x), jg.from_numpy(y)) for x, y in data]
    return jstep, tstep, jdata, tdata


def check(name, jg, torch, steps=3, rtol=2e-4, small=False):
    """Run ``steps`` iterations of both with dropout off; return the (jitgrad, torch) losses, raising if they part."""
    jstep, tstep, jdata, tdata = _pair(name, jg, torch, dropout=False, small=small)
    losses = [(jstep(*jdata[i]), tstep(*tdata[i])) for i in range(steps)]
    for j, t in losses:
        if not abs(j - t) <= rtol * max(1.0, abs(t)):
            raise AssertionError(f"{name}: losses part: jitgrad {j!r}, torch {t!r} ({losses})")
    return losses


def _cycle(step, data):
    i = [0]

    def one():
        step(*data[i[0] % len(data)])
        i[0] += 1
    return one


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every iteration count (0.1 for a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated workloads (default: all): " + ", ".join(WORKLOADS))
    ap.add_argument("--check-only", action="store_true", help="compare the first losses, time nothing")
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread",
                    help="thread: the calling thread's CPU time (default); wall: perf_counter")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads for both libraries (default 1: with more, the thread clock misses the "
                         "workers' time; use --clock wall)")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    import torch

    import jitgrad as jg
    torch.set_num_threads(args.threads)
    jg.set_num_threads(args.threads)
    for name in names:
        losses = check(name, jg, torch)
        print(f"{name:16s} first losses agree: " + ", ".join(f"{j:.5f}/{t:.5f}" for j, t in losses))
    if args.check_only:
        return
    from jitgrad.jit import eager_kernels
    runs = {}
    for name in names:
        jstep, tstep, jdata, tdata = _pair(name, jg, torch, dropout=True)
        runs[name] = {"jitgrad": _cycle(jstep, jdata), "torch": _cycle(tstep, tdata)}
    for name in names:                  # one step each with dropout on (its ops' kernels too), then the builds
        for lib in ("jitgrad", "torch"):
            runs[name][lib]()
    eager_kernels.wait(120)
    times = {name: {"jitgrad": [], "torch": []} for name in names}
    for _ in range(args.rounds):
        for name in names:
            n = max(1, int(WORKLOADS[name][3] * args.scale))
            for lib in ("jitgrad", "torch"):
                fn = runs[name][lib]
                fn()
                times[name][lib].append(H.best_per_call(fn, n, args.repeats, clock))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"\nGPT scripts, eager per iteration, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{load}, {args.rounds} rounds x best of {args.repeats}, medians, {args.clock} clock")
    print(f"{'workload':18s} {'jitgrad':>10s} {'torch':>10s} {'ratio':>7s} {'target':>7s}")
    for name in names:
        j, t = statistics.median(times[name]["jitgrad"]), statistics.median(times[name]["torch"])
        target = TARGETS[name]
        print(f"{name:18s} {j * 1e3:8.3f}ms {t * 1e3:8.3f}ms {j / t:6.2f}x {target:6.1f}x"
              + ("" if j / t <= target else "  MISSED"))


if __name__ == "__main__":
    main()
