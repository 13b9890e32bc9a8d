"""What a cold build's first tier costs, by phase (issues 28, 30): rendering the kernels' LLVM IR, the quick tier's
LLVM, rendering the entry, the entry's LLVM.  Counted, never timed: Python calls (``sys.setprofile``) and, under
callgrind, instructions (one dump per phase).

The workload is built once on an empty cache (synchronously, no forked compilers) while the kernels' IR and the
entries it renders are recorded; then each phase runs again on what was recorded, counted alone.

    JITGRAD_CACHE_DIR=$(mktemp -d) python benchmarks/render_counts.py nanogpt|lm|b9
    JITGRAD_CACHE_DIR=$(mktemp -d) JITGRAD_BLAS_CORETYPE=keep UNDER_CALLGRIND=1 \\
        valgrind --tool=callgrind --instr-atstart=no python benchmarks/render_counts.py nanogpt   # then: totals per dump

``nanogpt``: ``variable_length.py``'s GPT step at its first two lengths (the second builds the symbolic lowering);
``lm``: its embedding + linear step at two shapes; ``b9``: B9's step (``gpt_model.compiled_b9``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("JITGRAD_BUILD_FORKS", "0")       # every kernel and entry rendered in this process


def callgrind_ctl(*a):
    """``callgrind_control`` on this process (``-z`` zero, ``-i on|off`` collect, ``-d NAME`` dump)."""
    subprocess.run(["callgrind_control", *a, str(os.getpid())], check=True, capture_output=True)


def count_phase(out, name, phase, under_callgrind):
    """Run ``phase()`` once, counted: under callgrind its instructions alone, dumped as ``name``; otherwise its
    Python calls, into ``out[name + "_python_calls"]``."""
    if under_callgrind:
        callgrind_ctl("-z")
        callgrind_ctl("-i", "on")
        phase()
        callgrind_ctl("-i", "off")
        callgrind_ctl("-d", name)
        return
    calls = [0]

    def prof(frame, event, arg):
        if event == "call":
            calls[0] += 1
    sys.setprofile(prof)
    phase()
    sys.setprofile(None)
    out[name + "_python_calls"] = calls[0]


class Recorder:
    """Records the arguments of every kernel and entry rendering while a build runs (wraps the two functions for
    the build's duration, then puts them back)."""

    def __init__(self):
        from jitgrad.codegen.kernels import ir_loops
        from jitgrad.codegen.program import entry
        self.modules = (ir_loops, entry)
        self.render, self.entry_ir = ir_loops.render, entry.entry_ir
        self.kernels, self.entries = [], []

    def __enter__(self):
        ir_loops, entry = self.modules

        def render(kir, key):
            self.kernels.append((kir, key))
            return self.render(kir, key)

        def entry_ir(*args):
            self.entries.append(args)
            return self.entry_ir(*args)
        ir_loops.render, entry.entry_ir = render, entry_ir
        return self

    def __exit__(self, *exc):
        ir_loops, entry = self.modules
        ir_loops.render, entry.entry_ir = self.render, self.entry_ir


def build(which):
    import jitgrad as jg
    import variable_length as V
    if which == "nanogpt":
        call, _ = V.gpt_step(dict(background=False))
        for i, t in V.gpt_shapes()[:2]:
            call(i, t)
    elif which == "lm":
        call, _ = V.jitgrad_step(dict(background=False))
        for i, t in V.shapes(50, 5)[:2]:
            call(i, t)
    else:
        import gpt_model
        gpt_model.compiled_b9(jg)


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "nanogpt"
    with Recorder() as rec:
        build(which)
    from jitgrad.codegen.native import cache, llvm_build, objload
    ll = objload._ll()
    under_callgrind = os.environ.get("UNDER_CALLGRIND") == "1"
    texts, etexts = [], []

    def render():
        texts[:] = [(key, rec.render(kir, key)) for kir, key in rec.kernels]

    def quick_llvm():
        for key, text in texts:
            llvm_build.object_code(key, text, quick=True)

    def entry_render():
        etexts[:] = [rec.entry_ir(*args) for args in rec.entries]

    def entry_llvm():       # as entry.compile_entry
        _, cpu, features = cache._cpu()
        for text in etexts:
            m = ll.parse_assembly(text)
            m.triple = ll.get_process_triple()
            m.verify()
            ll.Target.from_triple(m.triple).create_target_machine(
                cpu=cpu, features=features, opt=0, codemodel="jitdefault").emit_object(m)
    render()
    entry_render()          # (once first: imports and first-use tables out of the counts)
    out = {"kernels": len(rec.kernels), "entries": len(rec.entries),
           "llvm_instructions": sum(t.count("\n  ") for _, t in texts),
           "kernel_text_bytes": sum(len(t) for _, t in texts), "entry_text_bytes": sum(len(t) for t in etexts)}
    for name, phase in (("render", render), ("quick_llvm", quick_llvm), ("entry_render", entry_render),
                        ("entry_llvm", entry_llvm)):
        count_phase(out, name, phase, under_callgrind)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
