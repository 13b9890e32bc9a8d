"""B1: MLP 784-512-512-10, batch 256, float32, relu, cross-entropy, SGD step (forward+backward+update).

Target: jitgrad compiled at most 1.0x the fastest peer.  Also measures B1's peak RSS (VmHWM) for jitgrad (each
backend) and PyTorch eager, each in its own fresh process (target: jitgrad at most PyTorch eager's).

    python benchmarks/b1_mlp.py                 # the table and the memory table
    python benchmarks/b1_mlp.py --rss-child numba   # one memory child (eager|interpret|numba|torch)
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as H  # noqa: E402
import mlp  # noqa: E402

SHAPE = (256, 784, 512, 10)
RSS_STEPS = 20
# (name, child argument, cold jitgrad/Numba caches?)
RSS_CONFIGS = [("jitgrad eager", "eager", False), ("jitgrad compile(interpret)", "interpret", False),
               ("jitgrad compile(numba), cold cache", "numba", True),
               ("jitgrad compile(numba), warm cache", "numba", False), ("PyTorch eager", "torch", False)]


def rss_child(which):
    """Fresh process: set up B1, record RSS, run 1 + RSS_STEPS steps, print peak RSS as JSON."""
    x, y, ws = H.mlp_data(*SHAPE)
    if which == "torch":
        H.import_torch()
        step, _ = mlp.make_torch(x, y, ws)
    else:
        import jitgrad  # noqa: F401
        step, _ = mlp.make_jitgrad(x, y, ws, None if which == "eager" else which)
    base = H.rss_kb()
    for _ in range(1 + RSS_STEPS):
        step()
    print(json.dumps({"base_kb": base, "peak_kb": H.peak_rss_kb(), "end_kb": H.rss_kb()}))


def memory_table():
    rows, res = [], {}
    warm_dir = tempfile.mkdtemp(prefix="jitgrad-b1-rss-")
    for name, which, cold in RSS_CONFIGS:
        if which == "torch" and not H.have("torch"):
            rows.append([name, "-", "-", "-", "-", "skipped: torch not installed"])
            continue
        # the cold child compiles in-process into an empty cache; the warm one loads what the cold one wrote
        env = {"JITGRAD_CACHE_DIR": os.path.join(warm_dir, "jitgrad"), "NUMBA_CACHE_DIR": os.path.join(warm_dir, "numba"),
               "JITGRAD_BACKGROUND_COMPILE": "0"}
        wall, r, tail = H.run_child([os.path.abspath(__file__), "--rss-child", which], env=env)
        if r is None or "error" in r:
            err = (r or {}).get("error", tail.strip().splitlines()[-1] if tail.strip() else "?")
            rows.append([name, "-", "-", "-", "-", "FAILED: " + err])
            print(f"  .. rss {name}: FAILED {err}", flush=True)
            continue
        res[name] = r
        print(f"  .. rss {name}: peak {r['peak_kb'] / 1024:.0f} MiB", flush=True)
    shutil.rmtree(warm_dir, ignore_errors=True)
    torch_peak = res.get("PyTorch eager", {}).get("peak_kb")
    for name, which, cold in RSS_CONFIGS:
        r = res.get(name)
        if r is None:
            continue
        ratio = H.fmt_ratio(r["peak_kb"] / torch_peak) if torch_peak else "-"
        rows.append([name, f"{r['peak_kb'] / 1024:.0f} MiB", f"{r['base_kb'] / 1024:.0f} MiB",
                     f"{(r['peak_kb'] - r['base_kb']) / 1024:.0f} MiB", ratio, ""])
    headers = ["configuration", "peak RSS (VmHWM)", "RSS after set-up", "peak - set-up", "vs PyTorch eager", "notes"]
    return headers, rows, res, torch_peak


def main():
    x, y, ws = H.mlp_data(*SHAPE)
    ref = mlp.reference(x, y, ws)
    b = H.Bench("B1", "MLP 784-512-512-10, batch 256, float32, SGD step", unit="ms", reference=ref,
                tol={"loss": 1e-4, "grad W3": 2e-3}, baselines=("fastest peer", "NumPy hand-written (floor)"))
    mlp.add_all(b, x, y, ws, runs=40, budget_s=2.5)
    b.ref("hand NumPy 15.3 ms, PyTorch eager 13.8 ms, torch.compile 13.8 ms, JAX jit 13.0 ms, HIPS autograd 29.9 ms")
    b.note("jitgrad compiled steps return loss.detach(); PyTorch's returns the loss (graph already freed by "
           "backward); JAX returns (params, loss).")
    b.time_all()
    fp = b.fastest_peer()
    for name in ("jitgrad compile(interpret)", "jitgrad compile(numba)"):
        r = b.row(name)
        if r.median is None or fp is None:
            b.target(f"{name} <= 1.0x fastest peer", None, r.error or "no peer measured")
        else:
            ratio = r.median / fp.median
            b.target(f"{name} <= 1.0x fastest peer", ratio <= 1.0, f"{ratio:.2f}x {fp.name}")

    print("\n  B1 peak RSS: fresh process per configuration, set-up + 1 + %d steps" % RSS_STEPS, flush=True)
    mh, mrows, res, torch_peak = memory_table()
    for name in ("jitgrad compile(interpret)", "jitgrad compile(numba), cold cache",
                 "jitgrad compile(numba), warm cache", "jitgrad eager"):
        r = res.get(name)
        if r is None or not torch_peak:
            b.target(f"memory: {name} peak RSS <= PyTorch eager's", None, "not measured")
        else:
            b.target(f"memory: {name} peak RSS <= PyTorch eager's", r["peak_kb"] <= torch_peak,
                     f"{r['peak_kb'] / 1024:.0f} MiB vs {torch_peak / 1024:.0f} MiB")
    b.note("peak RSS: each configuration in a fresh process (no torch import in the jitgrad ones), VmHWM after set-up "
           "+ 1 + %d steps; Numba builds synchronously; 'cold cache' compiles in-process into empty jitgrad/Numba "
           "cache directories, 'warm cache' loads what the cold child wrote." % RSS_STEPS)
    b.finish(extra_tables=[(mh, mrows, "B1 peak RSS (fresh process each; set-up + 1 + %d steps)" % RSS_STEPS)])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--rss-child":
        rss_child(sys.argv[2])
    else:
        main()
