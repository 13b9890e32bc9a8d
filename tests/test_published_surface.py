"""The declared surface: every public name is declared once (``@published`` beside its definition), the publisher
binds exactly the declarations, and nothing else sets attributes on ``Tensor``."""
import ast
import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import Tensor
from jitgrad.declarations import DECLARED
from jitgrad.ir.ops import OPS
from jitgrad.library.torch_names import TORCH_FUNCTIONS
from jitgrad.publisher import CORE, PUBLISHED, _each_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _explicit_init_names():
    """The names ``jitgrad/__init__.py`` binds itself (imports, assignments, functions): the engine, subpackages,
    dtypes and constants, which are not declarations."""
    tree = ast.parse(open(os.path.join(ROOT, "jitgrad", "__init__.py"), encoding="utf-8").read())
    names = set()
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in st.names}
        elif isinstance(st, ast.Assign):
            names |= {t.id for t in st.targets if isinstance(t, ast.Name)}
        elif isinstance(st, (ast.FunctionDef, ast.ClassDef)):
            names.add(st.name)
    return names


def _unwrap(v):
    return v.fget if isinstance(v, property) else v


def test_every_tensor_attribute_is_core_or_one_declaration():
    for name, value in vars(Tensor).items():
        if name in CORE:
            continue
        d = PUBLISHED.get(("Tensor", name))
        assert d is not None, f"Tensor.{name} is set outside the class body and declared nowhere"
        if "Tensor.missing" in d.targets:       # a torch name jitgrad lacks: its stand-in, made for this name
            assert type(value) is d.obj and value.name == name, f"Tensor.{name} is not {d}'s stand-in"
            continue
        assert value is d.obj or _unwrap(value) is d.obj, f"Tensor.{name} is not its declared object {d}"
        if not isinstance(d.obj, property):     # (a method class's property is bound as the class holds it)
            assert isinstance(value, property) == ("Tensor.property" in d.targets), name


def test_tensor_has_no_getattr_hook():
    # CPython specialises no attribute read of a class with __getattr__ (or its own __getattribute__): eager
    # dispatch reads a dozen Tensor attributes per op.  torch's names jitgrad lacks are class attributes instead.
    assert "__getattr__" not in dir(Tensor)
    assert Tensor.__getattribute__ is object.__getattribute__
    x = jg.ones(2)
    with pytest.raises(jg.UnsupportedError, match="torch.Tensor.stft"):
        x.stft
    assert not hasattr(x, "stft") and not hasattr(Tensor, "stft")
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'sfft'"):
        x.sfft


def test_every_jitgrad_name_is_explicit_or_one_declaration():
    explicit = _explicit_init_names()
    for name, value in vars(jg).items():
        if name.startswith("__") or inspect.ismodule(value):
            continue
        d = PUBLISHED.get(("jitgrad", name))
        if name in explicit:
            assert d is None, f"jitgrad.{name} is both imported by __init__ and declared ({d})"
        else:
            assert d is not None, f"jitgrad.{name} comes from neither __init__ nor a declaration"
            assert value is d.obj, f"jitgrad.{name} is not its declared object {d}"


def test_in_place_forms_are_torch_level_names_where_torch_has_them():
    x = jg.tensor([0.25, 0.5])
    assert jg.exp_(x) is x and jg.arcsin_ is not None and vars(jg)["exp_"] is Tensor.exp_
    assert np.allclose(x.numpy(), np.exp([0.25, 0.5]))
    assert "sign_" not in vars(jg) and "sign_" in vars(Tensor)      # torch.sign_ does not exist; x.sign_ does


def test_every_declaration_is_published_as_declared():
    seen = set()
    for d in _each_name(DECLARED):      # a "Tensor.methods" class: one declaration per method
        for target in d.targets:
            if target == "jitgrad.if_torch" and d.name not in TORCH_FUNCTIONS:
                assert d.name not in vars(jg), d     # an in-place form torch's namespace lacks stays a method
                continue
            if target == "Tensor.missing":      # stand-ins for torch's names jitgrad lacks, under those names
                stand_ins = [n for n in d.obj.names if PUBLISHED.get(("Tensor", n)) is d]
                assert stand_ins and all(type(vars(Tensor)[n]) is d.obj for n in stand_ins), d
                continue
            key = ("Tensor" if target.startswith("Tensor") else target if target.startswith("OpDef") else "jitgrad",
                   d.name)
            assert key not in seen, f"{key} declared twice"
            seen.add(key)
            assert PUBLISHED[key].obj is d.obj and PUBLISHED[key].name == d.name
            if key[0] == "OpDef.eager_kernel":      # an op's eager-kernel chooser, bound into its OpDef
                assert OPS[d.name].eager_kernel is d.obj, d
                continue
            bound = vars(jg)[d.name] if key[0] == "jitgrad" else vars(Tensor)[d.name]
            assert bound is d.obj or _unwrap(bound) is d.obj, d


def test_a_declaration_is_one_jump_from_the_name():
    """``x.logcumsumexp``'s declaration names the file and line of its ``@published``, next to its definition."""
    d = PUBLISHED[("Tensor", "logcumsumexp")]
    src = inspect.getsourcefile(importlib.import_module(d.module)).replace(os.sep, "/")
    assert src.endswith("jitgrad/library/pointwise/special.py")
    assert inspect.getsourcefile(Tensor.logcumsumexp) == inspect.getsourcefile(importlib.import_module(d.module))
    for d in DECLARED:
        lines = inspect.getsource(importlib.import_module(d.module)).splitlines()
        # the line recorded is the @published line (or the statement that calls published(...) in a loop)
        window = "\n".join(lines[max(d.line - 3, 0):d.line + 1])
        assert "published(" in window, d


def test_publishing_binds_the_functions_themselves():
    """No wrapper between a name and its function: the method is the function (the eager fast path relies on
    it)."""
    assert Tensor.logcumsumexp is jg.logcumsumexp
    assert Tensor.tanh is jg.tanh
    assert Tensor.T.fget.__name__ == "_T"
    assert Tensor.__add__.__qualname__ == "TensorOperators.__add__"      # the operator's own function


def test_no_module_but_the_publisher_sets_tensor_attributes():
    """Importing every jitgrad module after ``import jitgrad`` leaves ``Tensor.__dict__`` exactly as the publisher
    made it (in a fresh process: a module imported late would show its patches)."""
    code = r"""
import importlib, json, pkgutil, sys
import jitgrad
from jitgrad import Tensor
before = {k: id(v) for k, v in vars(Tensor).items()}
skipped = []
for mi in pkgutil.walk_packages(jitgrad.__path__, "jitgrad."):
    if mi.name in ("jitgrad.__main__",):
        continue
    try:
        importlib.import_module(mi.name)
    except Exception as e:          # optional dependencies (a GPU, torch): their modules cannot patch either
        skipped.append(f"{mi.name}: {type(e).__name__}")
after = {k: id(v) for k, v in vars(Tensor).items()}
print(json.dumps({"changed": sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)),
                  "skipped": skipped}))
"""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["changed"] == [], res


def test_declaring_modules_are_imported_by_the_publisher():
    """Every module with a ``@published`` declaration is one the publisher imports (else its names would be
    missing from the surface)."""
    import jitgrad.publisher as publisher
    declaring = set()
    for mi in pkgutil.walk_packages(jg.__path__, "jitgrad."):
        spec = importlib.util.find_spec(mi.name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        text = open(spec.origin, encoding="utf-8").read()
        if "published(" in text and mi.name not in ("jitgrad.declarations", "jitgrad.publisher"):
            declaring.add(mi.name)
    imported = {d.module for d in DECLARED}
    assert declaring <= imported, declaring - imported
    assert publisher.__name__ == "jitgrad.publisher"
