"""``python -m jitgrad bench``: run the scripts in the repository's ``benchmarks/`` folder."""
from __future__ import annotations

import os
import runpy
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIR = os.path.join(_ROOT, "benchmarks")


def run_suite(only=None) -> int:
    if not os.path.isdir(_DIR):
        print(f"jitgrad bench: no benchmarks/ folder next to the package ({_DIR}); run from a source checkout "
              f"installed with `pip install -e .`", file=sys.stderr)
        return 2
    scripts = sorted(f for f in os.listdir(_DIR) if f.startswith("b") and f.endswith(".py"))
    wanted = {w.lower() for w in only} if only else None
    for f in scripts:
        wid = f.split("_")[0]
        if wanted is not None and wid not in wanted:
            continue
        print(f"== {f}")
        runpy.run_path(os.path.join(_DIR, f), run_name="__main__")
    return 0
