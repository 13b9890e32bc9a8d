"""``python -m jitgrad bench [--only B2 B5]``: run the workload scripts in the repository's ``benchmarks/`` folder.

Each script (``benchmarks/b<N>_*.py``) runs in its own fresh process and measures jitgrad (eager, compiled
with the ``interpret`` and ``numba`` backends) and every installed peer (PyTorch eager, ``torch.compile``, JAX
``jit``) side by side, printing a table of medians and ratios, output checks and target verdicts.  Peers are
an optional extra (``pip install -e '.[bench]'``); missing ones are skipped with a note.

Set ``JITGRAD_BENCH_JSON=results.jsonl`` to also collect every table as JSON lines (``python
benchmarks/report.py results.jsonl`` renders them as the Markdown of ``BENCHMARKS.md``), and
``JITGRAD_BENCH_SCALE=0.2`` for a quick smoke run with fewer timed calls.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIR = os.path.join(_ROOT, "benchmarks")
_SCRIPT = re.compile(r"^(b\d+)_\w+\.py$")


def scripts(only=None):
    """(workload id, path) of the scripts to run, in workload order; ``only``: ids like "B2" or "b2"."""
    wanted = {w.lower() for w in only} if only else None
    out = []
    for f in os.listdir(_DIR):
        m = _SCRIPT.match(f)
        if m and (wanted is None or m.group(1) in wanted):
            out.append((int(m.group(1)[1:]), f, m.group(1).upper(), os.path.join(_DIR, f)))
    return [(wid, path) for _, _, wid, path in sorted(out)]


def run_suite(only=None) -> int:
    if not os.path.isdir(_DIR):
        print(f"jitgrad bench: no benchmarks/ folder next to the package ({_DIR}); run from a source checkout "
              f"installed with `pip install -e .`", file=sys.stderr)
        return 2
    todo = scripts(only)
    if not todo:
        print(f"jitgrad bench: no workload scripts match {only!r} in {_DIR}", file=sys.stderr)
        return 2
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_jitgrad_bench_harness", os.path.join(_DIR, "harness.py"))
        harness = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(harness)
        info = harness.machine_info()
        print("jitgrad bench: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        load0 = harness.cpu_ticks()
    except Exception:  # noqa: BLE001 - the header is informative only
        harness, load0 = None, None
    t0 = time.perf_counter()
    failed = []
    for wid, path in todo:
        print(f"\n##### {wid}: {os.path.relpath(path, _ROOT)}", flush=True)
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, path], cwd=_ROOT)
        print(f"##### {wid} done in {time.perf_counter() - t:.1f} s (exit {rc})", flush=True)
        if rc != 0:
            failed.append(f"{os.path.basename(path)} (exit {rc})")
    wall = time.perf_counter() - t0
    load = ""
    if harness is not None and load0 is not None:
        other = harness.foreign_load(load0, harness.cpu_ticks(), wall)
        if other is not None:
            load = f"; other processes kept {other:.2f} CPUs busy on average"
    print(f"\njitgrad bench: {len(todo)} scripts in {wall:.1f} s{load}", flush=True)
    if failed:
        print("jitgrad bench: scripts that exited with an error: " + ", ".join(failed), flush=True)
        return 1
    return 0


def run_cuda(smoke=False) -> int:
    """``python -m jitgrad bench --device cuda``: B1, B2, B3 on the GPU in a fresh process."""
    path = os.path.join(_DIR, "cuda_b1_b2_b3.py")
    if not os.path.exists(path):
        print(f"jitgrad bench: {path} not found; run from a source checkout", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, path] + (["--smoke"] if smoke else []), cwd=_ROOT)
