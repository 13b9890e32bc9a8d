"""Guards on the Python values a traced function reads, as torch.compile's guards.

A trace bakes every Python value it reads into the graph: ``x * scale`` with ``scale = 2.0`` in a closure becomes
``mul %x 2.0``.  So a compiled entry is valid only while those values are unchanged.  :func:`collect` finds them
before the trace runs, by walking what the function's code can name: its closure cells, the globals its code
names, the attributes (of objects and of user modules) whose names its code uses, nested functions and the
methods of the objects it reaches (``self.scale`` read in a Module's ``forward``), and the submodules of
``nn.Module`` objects.  Each found value becomes a :class:`ValueGuard` (container, name, value): scalars (bool,
int, float, str, None, tuples and named tuples of those) by value, functions and objects by identity.

Which objects' attributes are guarded: any object of a user type (a class, a dataclass, one with ``__slots__``),
``types.SimpleNamespace`` and ``argparse.Namespace``, ``nn.Module`` trees, reached from the function's closure,
its globals or its non-tensor arguments (``step(x, cfg)``: the arguments' attributes as the closure's).  Not
guarded: objects of other library types (NumPy's, the standard library's, jitgrad's own except Modules; their
state is not what a step reads), and what lies past 4 levels of attributes or 512 guards.

A float that keeps changing (a learning rate in a closure, a float argument) is not retraced at every call: its
source is marked dynamic and the next trace reads it as a 0-dim float64 graph input (torch's automatic dynamic
scalars).  ``DynamicValue`` swaps a symbolic tensor into its container for the trace and reads the value at
each call.
"""
from __future__ import annotations

import argparse
import dis
import functools
import os
import sys
import types

import numpy as np

from ..ir.own_code import own_file

_MISSING = object()
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MAX_DEPTH = 4
_MAX_GUARDS = 512          # a bound on the walk, so a huge object graph cannot make every call slow
# objects of these packages' types are not walked (their state is not what a trace reads), except jitgrad's
# nn.Modules (attributes such as Dropout.p and BatchNorm.momentum are read by forward)
_LIB_ROOTS = frozenset(sys.stdlib_module_names) | {"numpy", "numba", "scipy", "torch", "jax", "llvmlite",
                                                    "pytest", "_pytest", "hypothesis", "IPython", "ipykernel",
                                                    "jitgrad"}
# library types that are plain records of user values: their attributes are walked as a user object's
_RECORD_TYPES = (types.SimpleNamespace, argparse.Namespace)
_SKIP_METHODS = {"__init__", "__repr__", "extra_repr", "__setstate__", "__getstate__", "state_dict",
                 "load_state_dict", "__str__"}


def _read(src, name):
    """``src[name]`` of a dict, or a closure cell's contents (name None); ``_MISSING`` when gone."""
    if name is None:
        try:
            return src.cell_contents
        except ValueError:
            return _MISSING
    return src.get(name, _MISSING)


class _Slots:
    """The ``__slots__`` attributes of an object as a container (``get`` / item assignment), for the guards."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, name, default=None):
        return getattr(self.obj, name, default)

    def __setitem__(self, name, value):
        setattr(self.obj, name, value)


def _slot_names(tp) -> list:
    out = []
    for klass in tp.__mro__:
        s = vars(klass).get("__slots__", ())
        out.extend([s] if type(s) is str else s)
    return [n for n in out if n not in ("__dict__", "__weakref__")]


class ValueGuard:
    """``container[name]`` (a dict) or ``cell.cell_contents`` (name None) must still equal ``value`` (scalars)
    or be ``value`` (objects, ``ident``).  ``label`` says where the value lives, for the recompile message."""

    __slots__ = ("src", "name", "value", "ident", "label")

    def __init__(self, src, name, value, ident, label):
        self.src, self.name, self.value, self.ident, self.label = src, name, value, ident, label

    def read(self):
        return _read(self.src, self.name)

    def holds(self) -> bool:
        return same_value(self.read(), self.value, self.ident)

    def describe(self) -> str:
        now = self.read()
        if self.ident == ARRAY:
            return f"{self.label} (a NumPy array, a constant of the graph) changed"
        if self.ident:
            return f"{self.label} now names another object"
        return f"{self.label} changed from {self.value!r} to {'(deleted)' if now is _MISSING else repr(now)}"

    def source(self):
        """The value's identity as a place: dynamic-scalar decisions are made per place."""
        return (id(self.src), self.name)


def same_value(now, value, ident) -> bool:
    """``ident``: False compares scalars by value, True objects by identity, ``ARRAY`` NumPy arrays by contents."""
    if now is value and ident != ARRAY:
        return True
    if type(now) is not type(value):
        return False
    if ident == ARRAY:
        return now.shape == value.shape and now.dtype == value.dtype \
            and bool(np.array_equal(now, value, equal_nan=value.dtype.kind in "fc"))
    if ident:
        return False
    if now == value:
        return True
    return isinstance(value, (float, np.floating)) and now != now and value != value     # NaN stays NaN


ARRAY = 2       # ValueGuard.ident for a NumPy array compared by contents (a trace bakes it in as a constant)
_MAX_ARRAY = 4096   # larger arrays are guarded by identity only (comparing them at every call costs a pass)


class DynamicValue:
    """A float read from a container that is a graph input instead of a constant."""

    __slots__ = ("src", "name", "label")

    def __init__(self, src, name, label):
        self.src, self.name, self.label = src, name, label

    def read(self):
        return _read(self.src, self.name)

    def put(self, value):
        if self.name is None:
            self.src.cell_contents = value
        else:
            self.src[self.name] = value


def _is_library_file(path: str) -> bool:
    return not path or path.startswith("<frozen") or "site-packages" in path or "dist-packages" in path \
        or own_file(path) or path.startswith(os.path.dirname(os.__file__))


def _is_user_function(f) -> bool:
    code = getattr(f, "__code__", None)
    return code is not None and not _is_library_file(code.co_filename)


def _is_library_type(tp) -> bool:
    mod = getattr(tp, "__module__", "") or ""
    root = mod.split(".")[0]
    return root in _LIB_ROOTS or root == "builtins"


_CODE_NAMES: dict = {}
_TYPE_NAMES: dict = {}


def code_names(code) -> frozenset:
    """The global and attribute names a code object (and the functions defined inside it) uses, and its string
    constants (``cfg["lr"]``, ``getattr(self, "scale")``)."""
    r = _CODE_NAMES.get(code)
    if r is None:
        names = set(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                names |= code_names(c)
            elif type(c) is str and len(c) <= 64:
                names.add(c)
        r = _CODE_NAMES[code] = frozenset(names)
    return r


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})
_CODE_GLOBALS: dict = {}


def global_names(code) -> frozenset:
    """The names a code object (and the functions defined inside it) reads as globals: only these are looked up
    in its globals (``opt.step()`` names the attribute ``step``, not a loop variable ``step`` of the script)."""
    r = _CODE_GLOBALS.get(code)
    if r is None:
        names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS}
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                names |= global_names(c)
        r = _CODE_GLOBALS[code] = frozenset(names)
    return r


def _method(tp, name):
    """The plain function behind ``tp.name`` (a method, static or class method, property getter), or None."""
    for klass in tp.__mro__:
        if name in vars(klass):
            v = vars(klass)[name]
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                v = v.fget
            return v if isinstance(v, types.FunctionType) else None
    return None


def _reachable(tp, names) -> tuple:
    """-> (names, user functions) of the methods of ``tp`` that code using ``names`` can run: the methods it
    names, the ones those name, and so on; for a callable object (an nn.Module) also ``__call__``/``forward``.
    Only these methods' attribute reads are guarded, so state a method the step never runs reads (a counter a
    ``log()`` method prints) does not retrace."""
    key = (tp, names)
    r = _TYPE_NAMES.get(key)
    if r is None:
        out = set(names)
        todo = sorted(names) + ["__call__", "forward"]      # (sorted: names are a set of str, in hash order)
        done, funcs = set(), []
        while todo:
            n = todo.pop()
            if n in done or n in _SKIP_METHODS:
                continue
            done.add(n)
            f = _method(tp, n)
            if f is None:
                continue
            if _is_user_function(f):
                funcs.append(f)
            new = code_names(f.__code__) - out
            out |= new
            todo.extend(sorted(new))
        r = _TYPE_NAMES[key] = (frozenset(out), tuple(funcs))
        if len(_TYPE_NAMES) > 4096:
            _TYPE_NAMES.clear()
    return r


class _Collector:
    def __init__(self, dynamic_sources, tensor_type):
        self.guards: list[ValueGuard] = []
        self.dynamic: list[DynamicValue] = []
        self.dynamic_sources = dynamic_sources
        self.tensor_type = tensor_type
        self.seen = set()          # ids of functions and objects already walked
        self.placed = set()        # (id(container), name) already guarded

    def add(self, src, name, value, ident, label):
        key = (id(src), name)
        if key in self.placed or len(self.guards) >= _MAX_GUARDS:
            return
        self.placed.add(key)
        if type(value) is float and key in self.dynamic_sources:
            self.dynamic.append(DynamicValue(src, name, label))
            return
        self.guards.append(ValueGuard(src, name, value, ident, label))

    def function(self, f, depth, label):
        if id(f) in self.seen or depth > _MAX_DEPTH:
            return
        self.seen.add(id(f))
        code = f.__code__
        names = code_names(code)
        for var, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            self.slot(cell, None, v, f"closure variable '{var}' of {label}", names, depth)
        g = f.__globals__
        for n in sorted(global_names(code)):     # a defined order: guards, dynamic inputs
            if n in g:
                self.slot(g, n, g[n], f"global '{n}'", names, depth)

    def slot(self, src, name, v, label, names, depth):
        """A value found in ``src[name]``: guard it, and walk into what it can name."""
        tp = type(v)
        if tp in _SCALARS or isinstance(v, np.generic):
            self.add(src, name, v, False, label)
        elif tp is np.ndarray:
            # used in an op, an array becomes a constant of the graph: an in-place change must retrace
            if v.size <= _MAX_ARRAY:
                self.add(src, name, v.copy(), ARRAY, label)
            else:
                self.add(src, name, v, True, label)
        elif isinstance(v, tuple) and (tp is tuple or hasattr(v, "_fields")) and len(v) <= 16 \
                and all(type(x) in _SCALARS for x in v):
            self.add(src, name, v, False, label)        # (a named tuple compares by its values too)
        elif isinstance(v, self.tensor_type):
            return          # captured tensors are guarded by identity and signature (compile.py)
        elif isinstance(v, types.FunctionType):
            if _is_user_function(v):
                self.add(src, name, v, True, label)
                self.function(v, depth + 1, f"{v.__qualname__}")
        elif isinstance(v, types.MethodType):
            if _is_user_function(v.__func__) or not _is_library_type(type(v.__self__)):
                self.add(src, name, v, True, label)
                self.function(v.__func__, depth + 1, v.__func__.__qualname__)
                # the attributes the method reads: it is run under another name (``m = obj.method; m(x)``)
                self.obj(v.__self__, depth + 1, label.rsplit(".", 1)[0] if "." in label else label,
                         names | {v.__func__.__name__})
        elif isinstance(v, types.ModuleType):
            path = getattr(v, "__file__", None) or ""
            if v.__name__.split(".")[0] in _LIB_ROOTS or (path and _is_library_file(path)):
                return
            if id(v) in self.seen or depth > _MAX_DEPTH:
                return
            self.seen.add(id(v))
            d = vars(v)
            for n in sorted(names):
                if n in d:
                    self.slot(d, n, d[n], f"{label}.{n}", names, depth + 1)
        elif tp is dict:
            # only the keys the code spells out (``cfg["lr"]``): another entry changing (a step counter the
            # training loop keeps in the same dict) must not retrace
            if id(v) in self.seen:
                return
            self.seen.add(id(v))
            for k in sorted(names):
                if k in v:
                    self.slot(v, k, v[k], f"{label}[{k!r}]", names, depth + 1)
        elif isinstance(v, type):
            return
        elif isinstance(v, functools.partial):
            # its bound arguments cannot change without a new partial: identity, and what its function reads
            self.add(src, name, v, True, label)
            if isinstance(v.func, types.FunctionType) and _is_user_function(v.func):
                self.function(v.func, depth + 1, v.func.__qualname__)
        elif isinstance(getattr(v, "__wrapped__", None), types.FunctionType) and not isinstance(v, types.ModuleType):
            # another compiled function (or a wrapper object): called inside this trace, it traces through, so
            # what it reads is this graph's too
            self.add(src, name, v, True, label)
            self.function(v.__wrapped__, depth + 1, v.__wrapped__.__qualname__)
        elif hasattr(v, "_guard_trace"):
            return          # an optimiser: it guards its own hyperparameters (optim/optimizer.py)
        elif hasattr(v, "__dict__") and (not _is_library_type(tp) or hasattr(v, "_modules")
                                         or isinstance(v, _RECORD_TYPES)):
            self.add(src, name, v, True, label)
            self.obj(v, depth + 1, label, names)
        elif not _is_library_type(tp) and _slot_names(tp):
            self.add(src, name, v, True, label)
            self.obj(v, depth + 1, label, names)

    def obj(self, o, depth, label, names):
        if id(o) in self.seen or depth > _MAX_DEPTH:
            return
        self.seen.add(id(o))
        tnames, funcs = _reachable(type(o), names)
        slots = _slot_names(type(o))
        if slots:                   # attributes in __slots__
            held = _Slots(o)
            for n in slots:
                if n in tnames and hasattr(o, n):
                    self.slot(held, n, getattr(o, n), f"{label}.{n}", tnames, depth)
        try:
            d = vars(o)
        except TypeError:       # no __dict__ (only slots), or one that is not a dict
            d = None
        if type(d) is not dict:
            for f in funcs:
                self.function(f, depth + 1, f.__qualname__)
            return
        for n in sorted(tnames):
            if n in d and not n.startswith("__"):
                self.slot(d, n, d[n], f"{label}.{n}", tnames, depth)
        for f in funcs:          # a user class's methods: the globals and closures they read
            self.function(f, depth + 1, f.__qualname__)
        mods = d.get("_modules")
        if type(mods) is dict:        # an nn.Module's children: what forward may reach without naming them
            for n, m in mods.items():
                if m is not None:      # a module tree is walked whole (``seen`` and _MAX_GUARDS bound it)
                    self.slot(mods, n, m, f"{label}.{n}", tnames, depth - 1)


def _objects_in(tree, tensor_type, out):
    """The non-scalar, non-tensor values in a call's arguments (nested tuples, lists and dicts walked)."""
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        for x in tree:
            _objects_in(x, tensor_type, out)
    elif type(tree) is dict:
        for x in tree.values():
            _objects_in(x, tensor_type, out)
    elif type(tree) not in _SCALARS and not isinstance(tree, tensor_type):
        out.append(tree)
    return out


def collect(fn, tensor_type, dynamic_sources=frozenset(), args=None):
    """-> (guards, dynamic values) for the Python values ``fn`` can read (see the module docstring); ``args``:
    the call's ``(args, kwargs)``, whose non-tensor objects' attributes are guarded as the closure's are."""
    c = _Collector(dynamic_sources, tensor_type)
    statics = _objects_in(args, tensor_type, []) if args is not None else ()
    if statics:
        names = code_names(getattr(getattr(fn, "__func__", fn), "__code__", None) or _NO_CODE)
        held = {}       # the arguments themselves, by identity (an entry keyed by an argument's id holds it)
        for k, v in enumerate(statics):
            held[k] = v
            c.slot(held, k, v, f"argument object {k}", names, 0)
    f = fn
    if isinstance(f, types.MethodType):
        c.obj(f.__self__, 1, "self", code_names(f.__func__.__code__))
        f = f.__func__
    elif not isinstance(f, types.FunctionType) and hasattr(f, "__dict__") and hasattr(type(f), "__call__"):
        c.obj(f, 1, "self", frozenset())      # a callable object (an nn.Module compiled directly)
        return c.guards, c.dynamic
    if isinstance(f, types.FunctionType):
        c.function(f, 0, getattr(f, "__qualname__", "function"))
    return c.guards, c.dynamic


_NO_CODE = (lambda: None).__code__

__all__ = ["ValueGuard", "DynamicValue", "collect", "same_value"]
