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


def test_b9_floor_scripts_names_are_defined():
    for name in ("b9_launch_times.py", "b9_floor_ratio.py", "gemm_ceiling.py"):
        with open(os.path.join(ROOT, "benchmarks", name)) as f:
            assert _undefined_globals(f.read()) - {"__file__"} == set(), name


def test_gemm_ceiling_products_importable():
    """b9_floor_ratio.py times gemm_ceiling's products between B9's steps: importing the module runs nothing, and
    its products are B9's (every shape, with its count per step and its batch)."""
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import gemm_ceiling
    finally:
        sys.path.pop(0)
    products = gemm_ceiling.products(np.random.default_rng(0))
    assert [(mkn, count) for mkn, count, *_ in products] == gemm_ceiling.SHAPES
    macs = sum(m * k * n * max(nb, 1) * count for (m, k, n), count, nb, *_ in products)
    assert macs == 2_642_804_736        # "B9 step: 2.64 G multiply-adds"
    for (m, k, n), _, nb, a, b, call in products[:2] + products[-1:]:
        assert call().shape == ((nb,) if nb else ()) + (m, n)
