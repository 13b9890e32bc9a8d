"""The compile path runs one way (ARCHITECTURE.md, "The compile walk"): the planning passes make a plan, codegen
lowers it through emitters registered per step kind and target, and codegen never runs a pass.  Checked by
parsing the modules (imports inside functions count), and by the emitter registry itself."""
from __future__ import annotations

from jitgrad.codegen.program import cpu
from jitgrad.codegen.gpu import cuda
from jitgrad.codegen import lowering

from test_import_layers import _edges, _modules


def _graph():
    """module -> the jitgrad modules it imports anywhere (the parser of tests/test_import_layers.py, which also
    fails on any import circle in jitgrad, the compile path's included)."""
    return _edges(_modules())


def test_codegen_never_imports_a_pass():
    g = _graph()
    bad = {m: sorted(t for t in ts if t.startswith("jitgrad.ir.passes"))
           for m, ts in g.items() if m.startswith("jitgrad.codegen")}
    assert not any(bad.values()), {m: b for m, b in bad.items() if b}


def test_plan_and_display_are_vocabulary():
    g = _graph()
    for m in ("jitgrad.ir.plan", "jitgrad.ir.display", "jitgrad.ir.listing", "jitgrad.ir.graph"):
        assert all(t.startswith("jitgrad.ir.") and not t.startswith("jitgrad.ir.passes") for t in g[m]), (m, g[m])


def test_emitters_are_registered_functions_per_target():
    assert set(cpu.STEP_MODULES) and set(cuda.STEP_MODULES)
    table = lowering.EMITTERS
    for target in ("cpu", "cuda"):
        assert "host" in table[target] and "fused" in table[target] and "view" in table[target]
        assert all(callable(fn) and set(table[target]) <= set(lowering.KINDS) for fn in table[target].values())
    assert {"gemm", "gather", "scatter", "scan", "region", "row_gather", "row_scatter", "collective"} <= set(table["cpu"])
    assert {"gemm", "gather", "scatter", "scan", "cat"} <= set(table["cuda"])


def test_a_kind_has_one_emitter_per_target():
    import pytest
    with pytest.raises(ValueError, match="already has an emitter"):
        lowering.emits("gemm", target="cpu")(lambda prog, e: False)
    with pytest.raises(ValueError, match="unknown step kind"):
        lowering.emits("no such kind", target="cpu")
