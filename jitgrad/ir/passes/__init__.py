"""Graph passes, each ``Graph -> Graph``, run in a named pipeline (``run_pipeline``); then the planning passes,
``Graph -> Plan -> Plan`` (``fusion_plan``: fuse, then row_chains), whose result the code generators consume.
``JITGRAD_DUMP=<pass>|all`` prints the graph after that pass (``after_dce`` or ``dce`` both work)."""
from __future__ import annotations

import os
import sys

from ..graph import Graph, format_graph, verify
from ..plan import Plan
from .causal import triangular_products
from .cse import cse
from .dce import dce
from .fuse import plan as _fuse
from . import loop_batches
from .row_chains import merge_row_chains
from .simplify import simplify
from .split_axes import lift_split_reshapes
from .unit_products import unit_products
from .transpose import transpose, active_vars, Transposed  # noqa: F401
from .jvp import jvp, split_linear, Linear  # noqa: F401

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


def run_pipeline(g: Graph, title: str = "", check: bool = False, transposable: bool = True) -> Graph:
    """``g`` through PIPELINE.  ``transposable=False``: ``g`` will never be transposed (no output needs grad), so
    CSE may merge eqns that differ only in their grad flags."""
    dump(g, "trace", title)
    for name, p in PIPELINE:
        g = p(g) if p is not cse else cse(g, transposable)
        if check:
            verify(g)
        dump(g, name, title)
    return g


def fusion_plan(g: Graph, rowwise: bool | None = None, indexed: bool = True, batched: bool | None = None) -> Plan:
    """The plan a code generator lowers: ``g``'s eqns fused into loop groups (``fuse.py``), then runs of groups that
    form row-wise chains merged into one kernel each (``row_chains.py``), then independent groups of one body
    gathered into batches (``loop_batches.py``: one launch each; ``batched``: whether to, None: unless
    ``JITGRAD_GROUP_LOOPS=0``; a target that cannot emit batches, CUDA, plans without).  ``rowwise``: whether to merge (a target
    that cannot emit row kernels, CUDA, plans without); None: yes, unless ``JITGRAD_ROWWISE=0`` (to compare the
    plain loops).  ``indexed``: gathers and scatter-adds by an index join the loops around them (CUDA plans
    without).  Matrix products with a unit dimension become multiplies and sums first (``unit_products.py``),
    unless ``JITGRAD_UNIT_PRODUCTS=0``.  The plan carries which products a causal mask halves (``causal.py``:
    ``Plan.triangles``)."""
    if os.environ.get("JITGRAD_UNIT_PRODUCTS", "1") != "0":
        g = unit_products(g)
    p = _fuse(lift_split_reshapes(g), indexed)
    if rowwise is None:
        rowwise = os.environ.get("JITGRAD_ROWWISE", "1") != "0"
    p = merge_row_chains(p) if rowwise else p
    if batched is None:
        batched = loop_batches.batching()
    p = loop_batches.batch_loops(p) if batched else p
    p.triangles = triangular_products(p.graph)
    return p


__all__ = ["cse", "dce", "simplify", "transpose", "jvp", "split_linear", "run_pipeline", "PIPELINE", "dump", "active_vars", "fusion_plan"]
