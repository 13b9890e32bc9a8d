"""What the build thread does while a variable-length run's calls go on (issue 30), counted, never timed: per job
(a warm-up, a graph's first build, an optimised tier, eager mode's kernels) the call of the step at which it was
queued, started and finished (``build_thread.log_jobs``), the Python calls it made (a profile function on that
thread only) and its calls into LLVM (llvmlite's, each of which gives the GIL up and takes it back from the calls
running meanwhile); then how each first-pass call was served (eager, interpreted, quick code, optimised code) per
half, and which jobs ran before the switch to compiled code.

    JITGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/build_thread_counts.py lm|gpt
    python benchmarks/build_thread_counts.py lm|gpt --runs 12     # 12 fresh processes, each on an empty cache

``lm``: ``variable_length.py``'s embedding + linear step over its 250 shapes; ``gpt``: its nanoGPT step over 57
lengths.  Which call a job starts and ends at depends on the machine's load; its counts do not.  ``--runs``
prints the distribution of the calls served before the switch ("slow") over the processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _counters():
    """``{"py": n, "llvm": n}``: the build thread's Python calls and calls into LLVM from now on."""
    from llvmlite.binding import ffi
    count = {"py": 0, "llvm": 0}

    def prof(frame, event, arg):
        if threading.current_thread().name != "jitgrad-compile":
            sys.setprofile(None)        # (another thread: not counted)
        elif event == "call":
            count["py"] += 1
    threading.setprofile(prof)
    call0 = ffi._lib_fn_wrapper.__call__

    def llvm_call(self, *a, **k):
        if threading.current_thread().name == "jitgrad-compile":
            count["llvm"] += 1
        return call0(self, *a, **k)
    ffi._lib_fn_wrapper.__call__ = llvm_call
    return count


def one(which):
    """One process: the jobs and the calls' paths (a dict)."""
    import variable_length as V
    from jitgrad.codegen.native import build_thread
    count = _counters()
    now = [0]
    events = build_thread.log_jobs(lambda: (now[0], count["py"], count["llvm"]))
    data = V.shapes(50, 5) if which == "lm" else V.gpt_shapes()
    call, f = V.jitgrad_step({}) if which == "lm" else V.gpt_step({})
    paths = []
    warnings.simplefilter("ignore")
    for n, (i, t) in enumerate(data):
        now[0] = n + 1
        e0, i0 = f.stats.get("eager_calls", 0), f.stats.get("interpreted_calls", 0)
        call(i, t)
        st = f.stats
        if st["eager_calls"] > e0:
            paths.append("eager")
        elif st.get("interpreted_calls", 0) > i0:
            paths.append("interpreted")
        else:
            paths.append("quick" if st.get("graphs_optimising", 0) else "optimised")
    now[0] = "wait"
    f.wait()
    build_thread.wait_background()
    build_thread.log_jobs(None)
    jobs = {}
    for ev in events:
        j = jobs.setdefault(ev["seq"], {"job": ev["job"]})
        j[ev["event"]] = ev["at"][0]
        j[ev["event"] + "_counts"] = ev["at"][1:]
    for j in jobs.values():
        if "finished_counts" in j:
            j["py"], j["llvm"] = (b - a for a, b in zip(j.pop("started_counts"), j.pop("finished_counts")))
        j.pop("queued_counts", None)
    # the jobs the build thread started before the build that made the step switch finished (the lowering's first
    # build; a static step's first build)
    last = max((n for n, ev in enumerate(events) if ev["event"] == "finished" and ev["job"].startswith("first build")
                and (ev["job"] == "first build (lowering)" or not any(e["job"] == "first build (lowering)"
                                                                       for e in events))), default=len(events))
    ahead = list(dict.fromkeys(ev["job"] for ev in events[:last] if ev["event"] == "started"))
    half = len(data) // 2
    switch = f.stats["first_compiled_call"]
    return {"workload": which, "calls": len(data), "slow": sum(p in ("eager", "interpreted") for p in paths),
            "switch": switch, "optimised_from": f.stats.get("first_optimised_call"),
            "first_half": dict(Counter(paths[:half])), "second_half": dict(Counter(paths[half:])),
            "traces": f.stats["traces"], "dropped": f.stats.get("builds_dropped", 0),
            "before_switch": ahead,
            "jobs": list(jobs.values())}


def _print(r):
    print(f"{r['workload']}: {r['calls']} calls; slow {r['slow']}, switch at call {r['switch']}, optimised from "
          f"{r['optimised_from']}; first half {r['first_half']}, second half {r['second_half']}; traces "
          f"{r['traces']}, builds dropped {r['dropped']}")
    for j in r["jobs"]:
        print(f"  {j['job']:<34} queued {j.get('queued')!s:>4} ran {j.get('started')!s:>4} -> "
              f"{j.get('finished', '?')!s:<5} Python calls {j.get('py', '?')!s:>7}  LLVM calls {j.get('llvm', '?')!s:>5}")


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "lm"
    if "--one" in sys.argv:
        print("RESULT " + json.dumps(one(which)))
        return
    if "--runs" not in sys.argv:
        _print(one(which))
        return
    runs = int(sys.argv[sys.argv.index("--runs") + 1])
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="jitgrad-vl-") as d:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), which, "--one"], capture_output=True,
                                 text=True, env={**os.environ, "JITGRAD_CACHE_DIR": d}, timeout=900)
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            print(out.stderr[-2000:])
            continue
        r = json.loads(line[0][7:])
        results.append(r)
        _print(r)
    slow = sorted(r["slow"] for r in results)
    print(f"\n{which}, {len(results)} processes on empty caches: slow calls {slow} (median "
          f"{slow[len(slow) // 2] if slow else '-'}); optimised before the last call in "
          f"{sum(r['optimised_from'] is not None and r['optimised_from'] <= r['calls'] for r in results)}; "
          f"jobs run before the switch: {dict(Counter(j for r in results for j in r['before_switch']))}")


if __name__ == "__main__":
    main()
