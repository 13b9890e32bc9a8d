"""Import structure: no circles among jitgrad's modules (imports inside functions count), and the layers import
one way (ARCHITECTURE.md, "Layers").  Parses the source; imports nothing."""
import ast
import os
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jitgrad")

# Circles other work is removing, each named by its modules (without "jitgrad."); a circle passes while it lies
# inside one of these.  Empty it entry by entry; nothing of the engine (runtime/) or the library may be here.
ALLOWED_CIRCLES: list = []     # none: a circle anywhere in jitgrad fails (kept as the place to name one, with a reason)


def _modules():
    mods = {}
    for d, _, fs in os.walk(ROOT):
        for f in fs:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                rel = os.path.relpath(p, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                mods[rel[:-9] if rel.endswith(".__init__") else rel] = p
    return mods


def _edges(mods):
    """module -> the jitgrad modules it imports anywhere in its source (a package import is its __init__)."""
    g = defaultdict(set)
    for m, p in mods.items():
        is_pkg = p.endswith("__init__.py")
        for node in ast.walk(ast.parse(open(p, encoding="utf-8").read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    tgt = ".".join(base + ([node.module] if node.module else []))
                else:
                    tgt = node.module or ""
                targets = [tgt + "." + a.name if tgt + "." + a.name in mods else tgt for a in node.names]
            for t in targets:
                while t and t not in mods:      # `import jitgrad.nn.functional`: the module itself
                    t = t.rpartition(".")[0]
                if t and t != m and t.startswith("jitgrad"):
                    g[m].add(t)
    return g


def _circles(g, nodes):
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def _short(names):
    return {n[len("jitgrad."):] if n.startswith("jitgrad.") else n for n in names}


def test_no_import_circles():
    mods = _modules()
    bad = []
    for comp in _circles(_edges(mods), mods):
        names = _short(comp)
        if not any(names <= allowed for allowed in ALLOWED_CIRCLES):
            bad.append(sorted(names))
    assert not bad, "import circles (imports inside functions count):\n" + "\n".join(", ".join(c) for c in bad)


def test_the_engine_and_the_library_are_on_no_allowed_circle():
    for allowed in ALLOWED_CIRCLES:
        assert not any(n.startswith(("library", "runtime")) for n in allowed), allowed


ALLOWED_UPWARD: set = set()      # none


def test_layers_import_one_way():
    """The engine imports no layer above it; ``ir`` imports nothing else of jitgrad; the declarations record only."""
    mods = _modules()
    g = _edges(mods)
    above_engine = ("jitgrad.library", "jitgrad.autograd", "jitgrad.nn", "jitgrad.optim", "jitgrad.jit",
                    "jitgrad.codegen", "jitgrad.publisher", "jitgrad.func", "jitgrad.utils", "jitgrad.amp",
                    "jitgrad.cuda", "jitgrad.distributions", "jitgrad.distributed")
    wrong = []
    for m, targets in g.items():
        for t in targets:
            if m.startswith("jitgrad.runtime") and (t.startswith(above_engine) or t == "jitgrad"):
                wrong.append(f"{m} -> {t}")
            if m.startswith("jitgrad.library") and t.startswith(above_engine) and not t.startswith("jitgrad.library"):
                wrong.append(f"{m} -> {t}")
            if m.startswith("jitgrad.ir") and not t.startswith("jitgrad.ir"):
                wrong.append(f"{m} -> {t}")
            if m == "jitgrad.declarations":
                wrong.append(f"{m} -> {t}")
    wrong = sorted(set(wrong) - ALLOWED_UPWARD)
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_checker_sees_a_circle():
    """The circle finder is not vacuous: two modules importing each other form a circle."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}, ["a", "b", "c"]) == [{"a", "b"}]
