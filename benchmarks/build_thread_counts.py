"""What the build thread does while a variable-length run's calls go on (issue 30), counted, never timed: per job
it runs (a warm-up, a graph's first build, an optimised tier, eager mode's kernels), the Python calls it made
(``sys.setprofile`` on that thread only) and its calls into LLVM (llvmlite's, each of which gives the GIL up and
takes it back from the calls running meanwhile), and from which call to which it ran; then how each first-pass
call was served (eager, interpreted, quick code, optimised code) per half.  The tiers built by forked children
(``graph_build.FORKED_TIER``) cost the build thread only their linking.

    JITGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/build_thread_counts.py lm|gpt

``lm``: ``variable_length.py``'s embedding + linear step over its 250 shapes; ``gpt``: its nanoGPT step over 57
lengths.  Which call a job starts and ends at depends on the machine's load; its counts do not.
"""
from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "lm"
    import variable_length as V
    from llvmlite.binding import ffi
    from jitgrad.codegen.native import build_thread
    now, jobs, count = [0], [], {"py": 0, "llvm": 0}

    def prof(frame, event, arg):
        if event == "call":
            count["py"] += 1
    call0 = ffi._lib_fn_wrapper.__call__

    def llvm_call(self, *a, **k):
        if threading.current_thread().name == "jitgrad-compile":
            count["llvm"] += 1
        return call0(self, *a, **k)
    ffi._lib_fn_wrapper.__call__ = llvm_call
    worker0 = build_thread._worker

    def worker(q):
        sys.setprofile(prof)
        get0, done0 = q.get, q.task_done

        def get():
            item = get0()
            job = item[2]
            what = type(job).__name__
            if what == "CompiledGraph":
                what = f"{'optimised tier' if job.optimising else 'first build'} ({len(job.kernels)} kernels)"
            elif what == "_Call":
                what = "warm-up"
            jobs.append({"job": what, "from_call": now[0], "start": dict(count)})
            return item

        def done():
            j = jobs[-1]
            j["to_call"] = now[0]
            j.update({k: count[k] - j["start"][k] for k in count})
            del j["start"]
            done0()
        q.get, q.task_done = get, done
        return worker0(q)
    build_thread._worker = worker
    data = V.shapes(50, 5) if which == "lm" else V.gpt_shapes()
    call, f = V.jitgrad_step({}) if which == "lm" else V.gpt_step({})
    paths = []
    warnings.simplefilter("ignore")
    for n, (i, t) in enumerate(data):
        now[0] = n + 1
        before = dict(f.stats)
        call(i, t)
        st = f.stats
        if st["eager_calls"] > before["eager_calls"]:
            paths.append("eager")
        elif st.get("interpreted_calls", 0) > before.get("interpreted_calls", 0):
            paths.append("interpreted")
        else:
            paths.append("quick" if st.get("graphs_optimising", 0) else "optimised")
    now[0] = "wait"
    f.wait()
    build_thread.wait_background()
    half = len(data) // 2
    print(f"{which}: {len(data)} calls; first half {dict(Counter(paths[:half]))}, second half "
          f"{dict(Counter(paths[half:]))}; builds dropped {f.stats.get('builds_dropped', 0)}")
    for j in jobs:
        print(f"  {j['job']:<32} calls {j['from_call']!s:>4} -> {j.get('to_call', '?')!s:<5} "
              f"Python calls {j.get('py', '?')!s:>7}  LLVM calls {j.get('llvm', '?')!s:>5}")


if __name__ == "__main__":
    main()
