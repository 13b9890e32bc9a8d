"""Map ``torch`` (and every ``torch.*`` module) to jitgrad for running PyTorch's own test files.

- ``torch.X.Y`` is ``jitgrad.X.Y`` when jitgrad has that module (the same module object: identity and
  isinstance checks hold);
- ``torch.testing`` and ``torch.testing._internal.*`` are the harness's test-infrastructure shims (pt_shim/);
- any other ``torch.*`` module is a *missing-module stub*: importing it succeeds, and every attribute read from
  it is a ``Missing`` placeholder that raises AttributeError when the test uses it.  So a missing module or
  name fails only the tests that touch it, never the whole file.
- ``lazy_from_import`` is what the test files' module-level ``from torch.x import a, b`` statements are
  rewritten to (rewrite_source): a name jitgrad lacks becomes a ``Missing`` placeholder instead of an
  ImportError.

Nothing here adds behaviour to jitgrad except PLUMBING: private switches PyTorch's test scaffolding calls
around every test (tearDown), given as no-ops and listed in RULE.md section C.
"""
from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))


class MissingAttributeError(AttributeError):
    """A name the test uses that jitgrad does not have (raised when the placeholder is used)."""


def _missing_base(path):
    class MissingBase:
        def __init__(self, *a, **k):
            raise MissingAttributeError(f"jitgrad has no {path} (base class of a test class)")

        def __init_subclass__(cls, **kw):
            pass
    MissingBase.__qualname__ = MissingBase.__name__ = "Missing_" + path.replace(".", "_")
    return MissingBase


class Missing:
    """Placeholder for ``path`` (e.g. "torch.autograd.graph.GradientEdge"); any use raises AttributeError."""

    __slots__ = ("_path",)

    def __init__(self, path):
        object.__setattr__(self, "_path", path)

    def _fail(self, *a, **k):
        raise MissingAttributeError(f"jitgrad has no {object.__getattribute__(self, '_path')}")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Missing(f"{object.__getattribute__(self, '_path')}.{name}")

    def __call__(self, *a, **k):
        self._fail()

    def __mro_entries__(self, bases):
        return (_missing_base(object.__getattribute__(self, "_path")),)

    __iter__ = __enter__ = __exit__ = __bool__ = __len__ = __getitem__ = __eq__ = __hash__ = _fail
    __lt__ = __gt__ = __le__ = __ge__ = __add__ = __mul__ = __contains__ = _fail

    def __repr__(self):
        return f"<Missing {object.__getattribute__(self, '_path')}>"


class MissingModule(types.ModuleType):
    """A torch module jitgrad has no counterpart for: importable, every attribute a Missing placeholder."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []          # a package, so ``torch.x.y`` below it is importable too

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Missing(f"{self.__name__}.{name}")


SHIMS = {
    "torch.testing": "pt_shim.testing",
    "torch.testing._internal": "pt_shim",
    "torch.testing._internal.common_utils": "pt_shim.common_utils",
    "torch.testing._internal.common_device_type": "pt_shim.common_device_type",
    "torch.testing._internal.common_cuda": "pt_shim.common_cuda",
    "torch.testing._internal.common_dtype": "pt_shim.common_dtype",
    "torch.testing._internal.common_methods_invocations": "pt_shim.common_methods_invocations",
}


class _ExistingModuleLoader(importlib.abc.Loader):
    """Hands the import system an already-loaded module; restores its own __spec__ afterwards."""

    def __init__(self, module):
        self.module = module
        self.spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        if self.spec is not None:
            module.__spec__ = self.spec     # module_from_spec overwrote it with the torch-named spec


def alias_loaded_modules():
    """``torch.X`` in sys.modules for every loaded ``jitgrad.X``: importing it then never reaches the finder,
    so the import system does not re-set ``torch.X``'s parent attribute to the module (which would replace e.g.
    the function ``torch.autograd.gradcheck`` with its module, as real torch never does)."""
    for k, m in list(sys.modules.items()):
        if k.startswith("jitgrad.") and m is not None:
            sys.modules.setdefault("torch" + k[len("jitgrad"):], m)


class TorchFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        if fullname in SHIMS:
            mod = importlib.import_module(SHIMS[fullname])
        else:
            jname = "jitgrad" + fullname[len("torch"):]
            try:
                mod = importlib.import_module(jname)
            except ModuleNotFoundError as e:
                if e.name is not None and not jname.startswith(e.name) and e.name != jname:
                    raise       # jitgrad's module exists but itself failed to import something
                mod = MissingModule(fullname)
            alias_loaded_modules()
        return importlib.util.spec_from_loader(fullname, _ExistingModuleLoader(mod))


def _noop_force_original_view_tracking(mode):
    """Plumbing (RULE.md C): torch's tearDown resets view replay; jitgrad has no view replay to reset."""
    return None


PLUMBING = {("autograd", "_force_original_view_tracking"): _noop_force_original_view_tracking}


def install():
    """Make ``import torch`` give jitgrad.  Call before the test module is imported."""
    for k in [k for k in sys.modules if k == "torch" or k.startswith("torch.")]:
        del sys.modules[k]
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import jitgrad
    sys.modules["torch"] = jitgrad
    import jitgrad.autograd
    alias_loaded_modules()
    sys.meta_path.insert(0, TorchFinder())
    for (modname, attr), fn in PLUMBING.items():
        mod = importlib.import_module("jitgrad." + modname)
        if not hasattr(mod, attr):
            setattr(mod, attr, fn)
    # torch.testing is an attribute of torch once imported
    import torch.testing  # noqa: F401


def lazy_from_import(module, names):
    """``from module import names`` where a name jitgrad lacks becomes a Missing placeholder."""
    mod = importlib.import_module(module)     # never fails for torch.*: unknown modules are MissingModules
    out = []
    for n in names:
        try:
            out.append(getattr(mod, n))
        except AttributeError:
            try:
                sub = importlib.import_module(f"{module}.{n}")
            except ModuleNotFoundError:     # the module is not a package: a plain missing name
                sub = None
            out.append(sub if isinstance(sub, types.ModuleType) and not isinstance(sub, MissingModule)
                       else Missing(f"{module}.{n}"))
    return out


def rewrite_source(src: str) -> str:
    """Rewrite the module-level ``from torch... import ...`` statements to lazy_from_import, keeping line
    numbers (each statement becomes one line followed by blank lines)."""
    tree = ast.parse(src)
    lines = src.split("\n")
    edits = []
    for node in tree.body:
        nodes = [node]
        if isinstance(node, ast.If):    # ``if TYPE_CHECKING:`` blocks are never run; leave them
            continue
        for n in nodes:
            if isinstance(n, ast.ImportFrom) and n.module and (n.module == "torch" or n.module.startswith("torch.")) \
                    and n.level == 0:
                targets = [a.asname or a.name for a in n.names]
                names = [a.name for a in n.names]
                stmt = (f"({', '.join(targets)},) = __import__('torchmap').lazy_from_import("
                        f"{n.module!r}, {names!r})")
                edits.append((n.lineno, n.end_lineno, stmt))
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("autograd."):
                # test_autograd.py re-exports the classes of test/autograd/*.py; the harness runs
                # test_functional.py as its own file, and test_complex / test_logging are out of scope
                edits.append((n.lineno, n.end_lineno, "pass  # harness: sibling test file not re-exported"))
    for lo, hi, stmt in reversed(edits):
        lines[lo - 1:hi] = [stmt] + [""] * (hi - lo)
    src = "\n".join(lines)
    # decorators of the methods of module-level classes are evaluated at import: make each one lazy
    tree = ast.parse(src)
    lines = src.split("\n")
    inserts = []        # (line, col, text)
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for fn in node.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for d in fn.decorator_list:
                inserts.append((d.lineno, d.col_offset, "__import__('torchmap').lazy_decorator(lambda: ("))
                inserts.append((d.end_lineno, d.end_col_offset, "))"))
    for ln, col, text in sorted(inserts, reverse=True):
        row = lines[ln - 1]
        b = row.encode("utf-8")
        lines[ln - 1] = (b[:col] + text.encode() + b[col:]).decode("utf-8")
    return "\n".join(lines)


def lazy_decorator(make):
    """``@expr`` on a test method, evaluated here: when ``expr`` names something jitgrad lacks, the test it
    decorates fails with that AttributeError when run (instead of the whole class failing to build)."""
    try:
        return make()
    except AttributeError as e:
        err = e

        def deco(fn):
            import functools

            @functools.wraps(fn)
            def failing(self, *a, **k):
                raise MissingAttributeError(f"decorator of {fn.__name__}: {err}") from err
            failing.__dict__.pop("parametrize_fn", None)
            failing.__wrapped__ = fn
            return failing
        return deco
