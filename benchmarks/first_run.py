"""A script's first run (issue 28, item 2): a training step called 250 times with ``@jg.compile`` on empty caches,
beside the same script in plain eager mode, and a warm run (the caches the cold one filled).

    python benchmarks/first_run.py [b5] [b1] [gpt] [--steps 250] [--pairs 2]

Each run is a fresh process; the cold runs get new empty ``JITGRAD_CACHE_DIR`` and ``NUMBA_CACHE_DIR``.  Runs
are paired (eager, cold, eager, cold ...) so a machine whose load changes treats both alike; the warm run reuses
the last cold run's caches after the build processes it left have finished.  "total" is the child's wall time as
the parent sees it (interpreter start, imports, data, every call); "calls" the loop alone.  The compiled rows also
give how many calls ran compiled and which call was the first, how many kernels the first (quick) build made and
from which call every kernel ran its optimised build (None: not within the run).  Target: cold total <= eager
total, >= 80% of the calls compiled; warm as before.

    python benchmarks/first_run.py --child b5 compiled 250     # one child: prints RESULT {json}
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = {"b5": "MLP 16-32-4, batch 8 (B5)", "b1": "MLP 784-512-512-10, batch 256 (B1)",
             "gpt": "GPT 2 layers, width 64, 4 heads, context 32, batch 8, AdamW (B9's model, small)"}


def _step(which, compiled):
    import numpy as np
    import jitgrad as jg
    if which in ("b5", "b1"):
        sys.path.insert(0, HERE)
        import harness as H
        import mlp
        os.environ.pop("JITGRAD_BACKGROUND_COMPILE", None)     # (harness defaults it to 0 for its own tables)
        x, y, ws = H.mlp_data(*((8, 16, 32, 4) if which == "b5" else (256, 784, 512, 10)))
        step, _ = mlp.make_jitgrad(x, y, ws, backend="numba" if compiled else None)
        return step, None
    sys.path.insert(0, HERE)
    import gpt_model as G
    jg.manual_seed(0)
    model = G.make_gpt(jg, 65, 32, 64, 4, 2, 0.0, False)
    opt = G.make_optimizer(jg, model, 1e-3)
    fn = G.make_step(jg, model, model, opt)
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.integers(0, 65, (8, 32)))
    y = jg.tensor(rng.integers(0, 65, (8, 32)))
    f = jg.compile(fn) if compiled else fn
    return (lambda: f(x, y)), f


def child(which, mode, steps):
    t0 = time.perf_counter()
    step, f = _step(which, mode == "compiled")
    t1 = time.perf_counter()
    for _ in range(steps):
        step()
    t2 = time.perf_counter()
    info = {"setup_s": t1 - t0, "calls_s": t2 - t1}
    if mode == "compiled":
        import gc
        fs = [f] if f is not None else [o for o in gc.get_objects() if type(o).__name__ == "CompiledFunction"]
        s = fs[0].stats
        info.update(compiled=s["compiled_calls"], first=s.get("first_compiled_call"), eager=s["eager_calls"],
                    interpreted=s["interpreted_calls"], calls=s["calls"], build_s=s.get("build_seconds"),
                    quick=s.get("kernels_quick"), optimised=s.get("first_optimised_call"))
        from jitgrad.codegen.native import build
        info["build_processes"] = build.COUNTS["build_processes"]
    print("RESULT " + json.dumps(info), flush=True)


def _run(which, mode, steps, dirs=None):
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BUILD_AFTER_CALL")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if dirs is not None:
        env["JITGRAD_CACHE_DIR"], env["NUMBA_CACHE_DIR"] = dirs
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", which, mode, str(steps)], env=env,
                       capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    info = json.loads(r.stdout.split("RESULT ", 1)[1].splitlines()[0])
    info["total_s"] = wall
    return info


def _settle(root, timeout=300):
    """Wait until no build lock under ``root`` is held (the build processes a cold run left have finished)."""
    import fcntl
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for dirpath, _, files in os.walk(root):
            for name in files:
                if name.endswith(".lock"):
                    with open(os.path.join(dirpath, name), "a") as fh:
                        try:
                            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            fcntl.flock(fh, fcntl.LOCK_UN)
                        except OSError:
                            busy = True
        if not busy:
            return
        time.sleep(0.5)


def _row(name, info, steps):
    extra = ""
    if "compiled" in info:
        extra = (f"  compiled {info['compiled']}/{steps} ({100 * info['compiled'] / steps:.0f}%), first at call "
                 f"{info['first']}, build {info['build_s']:.2f} s, {info['build_processes']} build processes, "
                 f"{info['quick']} kernels quick, optimised from call {info['optimised']}")
    print(f"  {name:<14} total {info['total_s']:6.2f} s   calls {info['calls_s']:6.2f} s{extra}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=["b5", "b1", "gpt"])
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()}, {os.cpu_count()} CPUs")
    for which in a.workloads:
        print(f"{which}: {WORKLOADS[which]}, {a.steps} calls")
        last = None
        for _ in range(a.pairs):
            _row("eager", _run(which, "eager", a.steps), a.steps)
            tmp = tempfile.mkdtemp(prefix="jg-first-run-")
            dirs = (os.path.join(tmp, "jitgrad"), os.path.join(tmp, "numba"))
            _row("compiled cold", _run(which, "compiled", a.steps, dirs), a.steps)
            if last is not None:
                shutil.rmtree(last[0], ignore_errors=True)
            last = (tmp, dirs)
        _settle(last[1][0])
        _row("compiled warm", _run(which, "compiled", a.steps, last[1]), a.steps)
        shutil.rmtree(last[0], ignore_errors=True)
        print(f"  load average {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
