"""The small GPT (decoder-only transformer) of B9, one home for the benchmark that times it (``b9_gpt.py``) and the
tests that train it (``tests/test_gpt_training.py``: eager == compiled, == PyTorch; loaded there by path).

Written once against a torch-like module ``lib`` (``jitgrad``, or ``torch`` itself) in nanoGPT's idioms: tied
input/output embeddings, dropout, a causal-mask buffer and ``masked_fill`` (or ``F.scaled_dot_product_attention``),
LayerNorm and a GELU MLP per block; AdamW with weight decay on matrices only; a step of forward, backward,
``clip_grad_norm_`` at 1.0, the optimiser's step and ``zero_grad``.
"""
from __future__ import annotations

import math


def make_gpt(lib, vocab, context, width, heads, layers, dropout, sdpa):
    """A GPT with ``layers`` blocks of ``heads`` heads over ``width`` features; ``model(idx, targets)`` is the
    cross-entropy loss of the next-token logits (``idx`` and ``targets``: ``(batch, t)`` with ``t <= context``)."""
    nn, F = lib.nn, lib.nn.functional
    C, T, H = width, context, heads

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
                wte=nn.Embedding(vocab, C), wpe=nn.Embedding(T, C), drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block() for _ in range(layers)]), ln_f=nn.LayerNorm(C)))
            self.lm_head = nn.Linear(C, vocab, bias=False)
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


def make_optimizer(lib, model, lr):
    """AdamW (betas 0.9, 0.95) with weight decay 0.1 on the matrices and none on the vectors."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    return lib.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                           lr=lr, betas=(0.9, 0.95))


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


def jitgrad_as_torch():
    """``import torch`` gives jitgrad from now on (its modules under torch's names): B9's scripts run on it."""
    import importlib
    import sys
    for name in ("", ".nn", ".nn.functional", ".optim", ".autograd", ".utils", ".utils.data"):
        sys.modules["torch" + name] = importlib.import_module("jitgrad" + name)


def compiled_b9(lib):
    """B9's model, AdamW and whole step compiled by jitgrad ``lib`` (numba, built before the first call), called
    once on B9's batch: ``(step, x, y)``, for scripts that count what the step's program does."""
    lib.manual_seed(0)
    model = make_gpt(lib, 65, 64, 128, 4, 4, dropout=0.0, sdpa=False)
    opt = make_optimizer(lib, model, lr=3e-4)
    step = lib.compile(make_step(lib, model, model, opt), backend="numba", background=False)
    g = lib.Generator().manual_seed(1)
    x, y = lib.randint(0, 65, (16, 64), generator=g), lib.randint(0, 65, (16, 64), generator=g)
    step(x, y)
    return step, x, y


def warm_b9(lib, threads: int = 1, warm: int = 3):
    """``compiled_b9`` at ``threads`` threads, called ``warm`` more times, and its compiled graph (the program's
    launches, the kernels' addresses): ``(step, x, y, graph)``, for scripts that count a warm step's work."""
    from jitgrad.jit.graph_code import compiled_graph
    lib.set_num_threads(threads)
    step, x, y = compiled_b9(lib)
    for _ in range(warm):
        step(x, y)
    e = [e for es in step._cache.values() for e in es][0]
    return step, x, y, compiled_graph(e.graph, e.gf.writes, e.gf.parallel)
