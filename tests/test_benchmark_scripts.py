"""Static checks of the benchmark scripts' child-process code (too slow to run in the suite)."""
import builtins
import os
import symtable
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _undefined_globals(source):
    """Global names the code reads that it neither binds nor imports and that are not builtins."""
    top = symtable.symtable(source, "<child>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    missing = set()

    def walk(t):
        for s in t.get_symbols():
            if (s.is_referenced() and (t is top or s.is_global()) and s.get_name() not in bound
                    and not hasattr(builtins, s.get_name())):
                missing.add(s.get_name())
        for c in t.get_children():
            walk(c)
    walk(top)
    return missing


def test_b2_breakdown_child_names_are_defined():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import b2_breakdown
    finally:
        sys.path.pop(0)
    assert _undefined_globals(b2_breakdown._CHILD) == set()
