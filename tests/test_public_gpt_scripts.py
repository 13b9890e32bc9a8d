"""Public GPT training scripts run unmodified with ``torch`` mapped to jitgrad (issue 18).

nanoGPT (train.py, sample.py, bench.py), minGPT (its Trainer, projects/adder and chargpt) and the video
lecture's gpt.py / bigram.py were run that way, with ``sys.modules["torch" + name] = jitgrad + name`` for the
submodules they import, and their losses matched torch's to the printed digits given the same initial weights and
batches.  Their sources are not part of this repository, so this file runs a script of its own written in their
style, through the same mapping, in a fresh interpreter, once on jitgrad (eager, and with ``torch.compile(model)``)
and once on torch, and compares what it prints.  What the script touches is what those scripts rely on:

* imports: ``torch.nn.functional as F``, ``torch.utils.data.dataloader.DataLoader``, ``torch.nn.parallel``'s
  DistributedDataParallel and ``torch.distributed``'s process-group functions (imported, unused on one process),
  ``torch.backends.cuda.matmul.allow_tf32 = True``, ``torch.cuda.is_available()``, ``torch.cuda.amp.GradScaler``
  (enabled for float16 with no CUDA: a warning, then a no-op), ``inspect.signature(torch.optim.AdamW)``'s
  ``fused``;
* the model: ``nn.ModuleDict`` / ``ModuleList``, tied embeddings, ``F.scaled_dot_product_attention(...,
  is_causal=True)`` in one block and the masked_fill path over a ``tril`` buffer in the other, ``module.apply(init)`` with ``nn.init``,
  ``F.cross_entropy(..., ignore_index=-1)``;
* the loop: batches cut from an ``np.memmap`` with ``torch.from_numpy(...astype(np.int64))`` and ``torch.stack``,
  AdamW with two parameter groups whose ``lr`` is set each step, gradient accumulation, ``clip_grad_norm_``,
  ``zero_grad(set_to_none=True)``, ``@torch.no_grad()`` evaluation in ``eval()`` mode;
* ``torch.compile(model)``: state_dict keys under ``_orig_mod.``, stripped when the checkpoint is loaded;
* ``torch.save`` of model, optimiser and config, ``torch.load(..., map_location=...)``, resumed training;
  sampling with ``topk``, ``softmax`` and ``multinomial`` (top_k=1: the draw is determined);
* minGPT's Trainer feeding: a map-style ``Dataset`` through ``DataLoader(sampler=RandomSampler(replacement=True,
  num_samples=int(1e10)), pin_memory=True, num_workers=2)``;
* nanoGPT's bench.py profiling: ``torch.profiler.profile(schedule=..., on_trace_ready=tensorboard_trace_handler(
  dir))`` with ``prof.step()`` per iteration.

Weights come from a NumPy generator (the libraries' generators differ), so the losses agree within float32 noise.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the mapping a user writes to run a torch script on jitgrad
RUNNER = textwrap.dedent("""
    import importlib, runpy, sys
    if sys.argv[1] == "jitgrad":
        sys.path.insert(0, {root!r})
        for name in ("", ".nn", ".nn.functional", ".nn.init", ".nn.utils", ".nn.parallel", ".optim", ".autograd",
                     ".utils", ".utils.data", ".utils.data.dataloader", ".cuda", ".cuda.amp", ".amp", ".backends",
                     ".backends.cuda", ".backends.cudnn", ".distributed", ".profiler"):
            sys.modules["torch" + name] = importlib.import_module("jitgrad" + name)
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""").format(root=ROOT)

SCRIPT = r'''
import inspect, math, os, pickle, sys
from contextlib import nullcontext
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import Dataset
from torch.utils.data.dataloader import DataLoader
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group

out_dir, compile_model = sys.argv[1], sys.argv[2] == "1"
V, T, C, H, L = 13, 8, 16, 2, 2
batch_size, grad_accum, max_iters, eval_iters = 4, 2, 4, 2
device = "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=torch.float16)
rng = np.random.default_rng(0)

# a token file read through a memmap, as prepare.py writes it
path = os.path.join(out_dir, "train.bin")
((np.arange(2000) * 7 + rng.integers(0, 3, 2000)) % V).astype(np.uint16).tofile(path)
picks = rng.integers(0, 2000 - T - 1, (64, batch_size))
draws = iter(picks)

def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = next(draws)
    x = torch.stack([torch.from_numpy((data[i:i + T]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + T]).astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)

class Attention(nn.Module):
    def __init__(self, flash):
        super().__init__()
        self.flash = flash
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        if not flash:      # nanoGPT's path for a torch without scaled_dot_product_attention
            self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, t, _ = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, t, C))

class Block(nn.Module):
    def __init__(self, flash):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), Attention(flash), nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                                              h=nn.ModuleList([Block(i % 2 == 0) for i in range(L)]), ln_f=nn.LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        with torch.no_grad():      # the same weights in every library
            for n, p in self.named_parameters():
                p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.1))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **(dict(fused=True) if fused else {}))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, top_k):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -T:])
            logits = logits[:, -1, :]
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx

def get_lr(it, warmup=2, lr=1e-2, min_lr=1e-3):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * (it - warmup) / (max_iters - warmup))) * (lr - min_lr)

model = GPT().to(device)
optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95))
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
if compile_model:
    model = torch.compile(model)

@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        X, Y = get_batch()
        with ctx:
            _, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()

def train(iters):
    for it in iters:
        for param_group in optimizer.param_groups:
            param_group["lr"] = get_lr(it)
        for micro_step in range(grad_accum):
            X, Y = get_batch()
            with ctx:
                _, loss = model(X, Y)
                loss = loss / grad_accum
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"iter {it}: loss {loss.item() * grad_accum:.6f} norm {norm.item():.6f}")

print(f"eval {estimate_loss().item():.6f}")
train(range(max_iters))
print(f"eval {estimate_loss().item():.6f}")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": max_iters,
            "model_args": dict(n_layer=L, n_head=H, n_embd=C, block_size=T, vocab_size=V),
            "config": {"batch_size": batch_size, "dtype": dtype}}, os.path.join(out_dir, "ckpt.pt"))

# resume (train.py's init_from='resume') and sample (sample.py) from the checkpoint
checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
state_dict = checkpoint["model"]
for k in list(state_dict):
    if k.startswith("_orig_mod."):
        state_dict[k[len("_orig_mod."):]] = state_dict.pop(k)
model = GPT()
model.load_state_dict(state_dict)
optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95))
optimizer.load_state_dict(checkpoint["optimizer"])
train(range(checkpoint["iter_num"], checkpoint["iter_num"] + 2))
model.eval()
with torch.no_grad():
    with ctx:
        out = model.generate(torch.zeros((1, 1), dtype=torch.long, device=device), 10, top_k=1)
print("sample", out[0].tolist())

# minGPT's Trainer feeding: an endless random sampler over a map-style dataset, worker processes
class Chunks(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, idx):
        x = torch.tensor([(idx + j) % V for j in range(T)], dtype=torch.long)
        return x, x.clone()

loader = DataLoader(Chunks(), sampler=torch.utils.data.RandomSampler(Chunks(), replacement=True,
                    num_samples=int(1e10)), shuffle=False, pin_memory=True, batch_size=4, num_workers=2)
it = iter(loader)
for _ in range(3):
    x, y = next(it)
    assert tuple(x.shape) == (4, T) and x.dtype == torch.long and bool((x == y).all())
    assert bool(((x[:, 1:] - x[:, :-1]) % V == 1).all())
print("loader ok")

# bench.py's profiling loop
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            schedule=torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=1),
                            on_trace_ready=torch.profiler.tensorboard_trace_handler(os.path.join(out_dir, "log")),
                            record_shapes=False, profile_memory=False, with_stack=False, with_flops=True,
                            with_modules=False) as prof:
    for k in range(4):
        _, loss = model(*get_batch())
        prof.step()
print("traces", len(os.listdir(os.path.join(out_dir, "log"))))
'''


def run(tmp_path, lib, compile_model):
    out = tmp_path / f"{lib}-{compile_model}"
    out.mkdir()
    (tmp_path / "runner.py").write_text(RUNNER)
    (tmp_path / "train_gpt.py").write_text(SCRIPT)
    env = dict(os.environ)
    env.setdefault("JITGRAD_BACKEND", "interpret")     # the compiled run's graphs on the reference interpreter
    r = subprocess.run([sys.executable, str(tmp_path / "runner.py"), lib,
                        str(tmp_path / "train_gpt.py"), str(out), str(int(compile_model))],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines(), out


def numbers(lines):
    vals = []
    for line in lines:
        vals += [float(w) for w in line.replace(",", " ").split() if w.replace(".", "").replace("-", "").isdigit()
                 and "." in w]
    return np.array(vals)


def test_gpt_script_runs_on_jitgrad_as_on_torch(tmp_path):
    ref, ref_dir = run(tmp_path, "torch", False)
    eager, eager_dir = run(tmp_path, "jitgrad", False)
    compiled, _ = run(tmp_path, "jitgrad", True)
    runs = [eager, compiled]
    # the same lines (iterations, sample, loader, one trace), the same numbers within float32 noise
    for lines in runs:
        assert [line.split()[0] for line in lines] == [line.split()[0] for line in ref]
        assert [line for line in lines if not line.startswith(("iter", "eval"))] == \
               [line for line in ref if not line.startswith(("iter", "eval"))]
        np.testing.assert_allclose(numbers(lines), numbers(ref), rtol=1e-4, atol=1e-5)
    assert "traces 1" in ref and "loader ok" in ref
    # jitgrad's checkpoint is torch's file: torch reads it with weights_only=True, with the keys torch wrote
    mine = torch.load(eager_dir / "ckpt.pt", weights_only=True)
    theirs = torch.load(ref_dir / "ckpt.pt", weights_only=True)
    assert list(mine["model"]) == list(theirs["model"])
    assert mine["config"] == theirs["config"] and mine["model_args"] == theirs["model_args"]
    for k, v in theirs["model"].items():
        np.testing.assert_allclose(mine["model"][k].numpy(), v.numpy(), rtol=1e-4, atol=1e-5)
