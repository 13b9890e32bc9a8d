"""The compile path runs one way (ARCHITECTURE.md, "The compile walk"): the planning passes make a plan, codegen
lowers it through emitters registered per step kind and target, and codegen never runs a pass.  Checked by
parsing the modules (imports inside functions count), and by the emitter registry itself."""
from __future__ import annotations

import ast
import pathlib

from jitgrad.codegen import cpu, cuda, lowering

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jitgrad"
# the packages whose circles this path's work removed; runtime/ and nn/ are measured elsewhere
ACYCLIC = ("ir", "codegen", "jit", "func", "cuda", "optim", "amp")


def _modules():
    mods = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(name, path, mods):
    """The jitgrad modules ``name`` imports, at module level or inside functions."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in mods:
                    out.add(sub)
                elif target in mods:
                    out.add(target)
    out.discard(name)
    return out


def _graph():
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_codegen_never_imports_a_pass():
    g = _graph()
    bad = {m: sorted(t for t in ts if t.startswith("jitgrad.ir.passes"))
           for m, ts in g.items() if m.startswith("jitgrad.codegen")}
    assert not any(bad.values()), {m: b for m, b in bad.items() if b}


def test_plan_and_display_are_vocabulary():
    g = _graph()
    for m in ("jitgrad.ir.plan", "jitgrad.ir.display", "jitgrad.ir.listing", "jitgrad.ir.graph"):
        assert all(t.startswith("jitgrad.ir.") and not t.startswith("jitgrad.ir.passes") for t in g[m]), (m, g[m])


def test_no_import_circle_on_the_compile_path():
    g = _graph()
    keep = {m for m in g if m.split(".")[1:2] and m.split(".")[1] in ACYCLIC}
    index, low, stack, on, circles, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v] & keep:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))
    for v in sorted(keep):
        if v not in index:
            visit(v)
    # a package's __init__ that re-exports its children forms a trivial loop with them: not a circle
    circles = [c for c in circles if not (len(c) == 2 and c[1].startswith(c[0] + "."))]
    assert not circles, circles


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
