"""Graph passes, each ``Graph -> Graph``, run in a named pipeline.  ``JITGRAD_DUMP=<pass>|all`` prints the graph
after that pass (``after_dce`` or ``dce`` both work)."""
from __future__ import annotations

import os
import sys

from ..graph import Graph, format_graph, verify
from .cse import cse
from .dce import dce
from .simplify import simplify
from .transpose import transpose, active_vars, Transposed  # noqa: F401

PIPELINE = (("simplify", simplify), ("cse", cse), ("dce", dce))


def _dump_wanted(name: str) -> bool:
    want = os.environ.get("JITGRAD_DUMP", "")
    if not want:
        return False
    items = {w.strip().removeprefix("after_") for w in want.split(",")}
    return "all" in items or name in items


def dump(g: Graph, stage: str, title: str = ""):
    if _dump_wanted(stage):
        print(f"# after {stage}{' ' + title if title else ''}\n{format_graph(g)}", file=sys.stderr)


def run_pipeline(g: Graph, title: str = "", check: bool = False) -> Graph:
    dump(g, "trace", title)
    for name, p in PIPELINE:
        g = p(g)
        if check:
            verify(g)
        dump(g, name, title)
    return g


__all__ = ["cse", "dce", "simplify", "transpose", "run_pipeline", "PIPELINE", "dump", "active_vars"]
