"""B9: one training step of a small GPT (decoder-only transformer), written in plain torch idioms.

The same file runs on PyTorch and on jitgrad (`--lib jitgrad` maps the `torch` names to jitgrad, nothing else),
eagerly or compiled, and prints the median step time and the loss after the timed steps.

    python b9_gpt.py --lib torch   --mode eager            # PyTorch eager
    python b9_gpt.py --lib torch   --mode compile-step     # torch.compile on the whole step
    python b9_gpt.py --lib jitgrad --mode eager
    python b9_gpt.py --lib jitgrad --mode compile-step     # @jg.compile on forward+backward+clip+AdamW
    python b9_gpt.py --lib jitgrad --mode compile-model    # model = jg.compile(model), as nanoGPT's train.py does
    add --sdpa to use F.scaled_dot_product_attention instead of the explicit masked softmax

    python benchmarks/b9_gpt.py --table                      # every row above, each in a fresh process

The table runs PyTorch eager, torch.compile (whole step), jitgrad eager, jitgrad compiled (whole step, and
model = jg.compile(model)), with and without SDPA, each in a fresh process with one BLAS/compute thread
(OPENBLAS_NUM_THREADS=1, NUMBA_NUM_THREADS=1, torch.set_num_threads(1)), and prints the median step, the first
call, the loss after the timed steps and the process's peak RSS.  jitgrad's compiled rows build synchronously
(JITGRAD_BACKGROUND_COMPILE=0), so the first call includes the whole build and the median times compiled code.

Shape (default): vocab 65, context 64, 4 layers, 4 heads, width 128, batch 16, float32, dropout 0, AdamW with
weight decay on matrices only, gradient clipping at 1.0, tied input/output embeddings.  The model, optimiser and
step are gpt_model.py's (nanoGPT's idioms), the ones tests/test_gpt_training.py trains against PyTorch.
"""
import argparse, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default="torch", choices=["torch", "jitgrad"])
ap.add_argument("--mode", default="eager", choices=["eager", "compile-step", "compile-model"])
ap.add_argument("--sdpa", action="store_true")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads for the torch run (0: leave)")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--width", type=int, default=128)
ap.add_argument("--context", type=int, default=64)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--json", action="store_true", help="print the result as one JSON line too (for --table)")
ap.add_argument("--table", action="store_true", help="run every configuration in a fresh process")
args = ap.parse_args()

if args.table:
    import json, os, subprocess
    rows = [("torch", "eager", False), ("torch", "eager", True), ("torch", "compile-step", False),
            ("jitgrad", "eager", False), ("jitgrad", "eager", True), ("jitgrad", "compile-step", False),
            ("jitgrad", "compile-step", True), ("jitgrad", "compile-model", False)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BACKGROUND_COMPILE="0")
    results = {}
    for lib, mode, sdpa in rows:
        cmd = [sys.executable, __file__, "--lib", lib, "--mode", mode, "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--threads", "1", "--json"] + (["--sdpa"] if sdpa else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((x for x in r.stdout.splitlines() if x.startswith("{")), None)
        if r.returncode or line is None:
            print(f"{lib} {mode}{' sdpa' if sdpa else ''}: failed\n{r.stderr[-2000:]}")
            continue
        results[(lib, mode, sdpa)] = res = json.loads(line)
        base = results.get(("torch", "eager", False))
        ratio = f"{res['median_ms'] / base['median_ms']:.2f}x torch eager" if base else ""
        print(f"{lib:8s} {mode + (' sdpa' if sdpa else ''):18s} median {res['median_ms']:8.2f} ms  first "
              f"{res['first_s']:6.2f} s  loss {res['loss']:.4f}  peak RSS {res['peak_rss_mib']:7.1f} MiB  {ratio}",
              flush=True)
    sys.exit(0)

import gpt_model    # the model, optimiser and step (the ones tests/test_gpt_training.py trains)

if args.lib == "jitgrad":
    gpt_model.jitgrad_as_torch()
import torch

if args.lib == "torch" and args.threads:
    torch.set_num_threads(args.threads)

VOCAB, T, L, H, C, B = 65, args.context, args.layers, 4, args.width, args.batch

torch.manual_seed(0)
model = gpt_model.make_gpt(torch, VOCAB, T, C, H, L, dropout=0.0, sdpa=args.sdpa)
opt = gpt_model.make_optimizer(torch, model, lr=3e-4)
fwd = torch.compile(model) if args.mode == "compile-model" else model
step = gpt_model.make_step(torch, fwd, model, opt)
if args.mode == "compile-step":
    step = torch.compile(step)

g = torch.Generator().manual_seed(1)
batches = [(torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g))
           for _ in range(8)]
t0 = time.perf_counter()
loss = step(*batches[0])
first = time.perf_counter() - t0
for i in range(args.warmup):
    step(*batches[i % 8])
times = []
for i in range(args.steps):
    t = time.perf_counter()
    loss = step(*batches[i % 8])
    times.append(time.perf_counter() - t)
times.sort()
print(f"B9 {args.lib} {args.mode}{' sdpa' if args.sdpa else ''}: median {times[len(times) // 2] * 1e3:.2f} ms/step, "
      f"first call {first:.2f} s, loss {float(loss):.4f}")
if args.json:
    import json, resource
    print(json.dumps({"median_ms": times[len(times) // 2] * 1e3, "first_s": first, "loss": float(loss),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
