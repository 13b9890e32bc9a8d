"""The one module that publishes jitgrad's surface: the ``jitgrad`` namespace's library names and ``Tensor``'s
methods, properties and operators beyond its class body, in one pass over the declarations; and the jit layer's
eager-kernel choosers into their OpDefs (``OpDef.eager_kernel``, ``jit/eager_kernels.py``).

Each public name is declared once, beside its definition, with ``@published(...)`` (``declarations.py``); importing
the declaring modules below records them, and :func:`publish` binds each declared object itself (no wrapper), so
``jg.logcumsumexp is jg.Tensor.logcumsumexp`` and ``inspect.getsourcefile(jg.Tensor.logcumsumexp)`` is the file
whose ``@published`` line declared it.  No other module sets attributes on ``Tensor`` or writes into another
module's namespace; a name declared twice, or a declaration that would replace part of ``Tensor``'s class body,
is an error here (there is no precedence to get wrong).

The eager fast path's flat entry points are made per OpDef from its table row (``runtime/flat_bind.py``) by the
modules that declare the methods calling them, so the published objects stay the declared ones.
"""
from __future__ import annotations

from .declarations import DECLARED, Declaration
from .runtime.tensor import Tensor

# the modules that declare public names (importing them records their declarations)
from .runtime import conversions, defaults, generator, storage, storage_objects  # noqa: F401
from .runtime import mutation, operators, tensor_methods, tensor_protocols  # noqa: F401
from .library import aliases, elementary, foreach, torch_surface  # noqa: F401
from .library.creation import factories, legacy_types, sampling  # noqa: F401
from .library.indexing import index_writes, masking, scatter_reduce, scatter_writes  # noqa: F401
from .library.linalg import eigen, einsum, matrix_forms, norms, products, solve  # noqa: F401
from .library.pointwise import (  # noqa: F401
    binary, composites, division, inplace, integer, pairs, predicates, rounding, special, trig)
from .library.reductions import counting, statistics  # noqa: F401
from .library.shaping import as_strided, rearranging, slicing, stacking, triangular, views  # noqa: F401
from .library.sorting import order_statistics, ordering, searching, uniques  # noqa: F401
from .library.tensor_info import printing, queries, type_info  # noqa: F401
from .cuda import seeding  # noqa: F401
from .library.torch_names import TORCH_FUNCTIONS
from .nn import functional as _nn_functional, torch_level as _torch_level  # noqa: F401
from .jit import eager_kernels, pooled_gemm  # noqa: F401
from .ir.ops import OPS

PUBLISHED: dict = {}    # ("jitgrad" | "Tensor" | "OpDef.eager_kernel", name) -> its Declaration, once published
CORE = frozenset(vars(Tensor))      # Tensor's class body: what no declaration may replace


# what a method class's body holds that is not a method of its own
_CLASS_BOOKKEEPING = frozenset({"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__",
                                "__firstlineno__", "__static_attributes__", "__annotations__"})


def _each_name(declarations):
    """The declarations, a ``"Tensor.methods"`` class expanded into one declaration per method or property (bound
    as the class holds it: the function, or the property with its setter)."""
    for d in declarations:
        if "Tensor.methods" not in d.targets:
            yield d
            continue
        for name, value in vars(d.obj).items():
            if name in _CLASS_BOOKKEEPING or (name == "__hash__" and value is None):
                continue    # (__hash__ is None in a class body that defines __eq__; Tensor's own stays)
            yield Declaration(value, name, ("Tensor",), d.module, d.line)


def publish(namespace: dict) -> None:
    """Bind every declaration: ``jitgrad`` names into ``namespace`` (the package's ``globals()``), Tensor methods
    and properties onto ``Tensor``, eager-kernel choosers into their OpDefs.  Runs once, at the end of
    ``jitgrad/__init__``."""
    missing = []
    for d in _each_name(DECLARED):
        for target in d.targets:
            if target == "jitgrad.if_torch" and d.name not in TORCH_FUNCTIONS:
                continue
            if target == "Tensor.missing":
                missing.append(d)
                continue
            where = "Tensor" if target.startswith("Tensor") else target if target.startswith("OpDef") else "jitgrad"
            key = (where, d.name)
            if key in PUBLISHED:
                raise RuntimeError(f"{where}.{d.name} is declared twice: {PUBLISHED[key]} and {d}")
            PUBLISHED[key] = d
            if where == "OpDef.eager_kernel":
                OPS[d.name].eager_kernel = d.obj
            elif where == "jitgrad":
                namespace[d.name] = d.obj
            elif d.name in CORE:
                raise RuntimeError(f"{d} would replace Tensor.{d.name} of Tensor's class body (runtime/tensor.py)")
            else:
                setattr(Tensor, d.name, property(d.obj, doc=d.obj.__doc__) if target == "Tensor.property" else d.obj)
    # after every other declaration: the names still missing on Tensor get their stand-in attribute
    for d in missing:
        for name in d.obj.names:
            if not any(name in vars(k) for k in Tensor.__mro__):
                PUBLISHED[("Tensor", name)] = d
                setattr(Tensor, name, d.obj(name))


__all__ = ["publish", "PUBLISHED", "CORE"]
