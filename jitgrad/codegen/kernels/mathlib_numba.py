"""mathlib's functions compiled by Numba: the same code objects as the IR builders (``mathlib.DEFS``, from the
family modules), each run in its own module's namespace with the vocabulary (``select``, ``f32``, ``f32_as_i32``,
``fma_f32``, ``sqrt``, ``lookup``, ``c_atan2``...: ``mathlib_vocabulary.py``'s names) bound to Numba's.  Imported
by the kernels Numba compiles (``numba_render.py`` writes ``from jitgrad.codegen.kernels.mathlib_numba import
exp_f32``) and by the accuracy tests; importing it imports Numba.
"""
from __future__ import annotations

import math
import types as pytypes

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic

from . import mathlib, mathlib_vocabulary

_jit = njit(fastmath=mathlib.FASTMATH, forceinline=True, cache=True, error_model="numpy")


def _bitcast(src, dst, dst_ll):
    @intrinsic
    def cast(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], dst_ll)
        return dst(src), codegen
    return cast


def _fma(t, t_ll):
    @intrinsic
    def fma(typingctx, a, b, c):
        if not (a == b == c == t):
            return None

        def codegen(context, builder, sig, args):
            fn = builder.module.declare_intrinsic("llvm.fma", [t_ll], llir.FunctionType(t_ll, [t_ll] * 3))
            return builder.call(fn, args)
        return t(t, t, t), codegen
    return fma


f32_as_i32 = _bitcast(types.float32, types.int32, llir.IntType(32))
i32_as_f32 = _bitcast(types.int32, types.float32, llir.FloatType())
f64_as_i64 = _bitcast(types.float64, types.int64, llir.IntType(64))
i64_as_f64 = _bitcast(types.int64, types.float64, llir.DoubleType())
fma_f32 = _fma(types.float32, llir.FloatType())
fma_f64 = _fma(types.float64, llir.DoubleType())


@njit(inline="always")
def _select(c, x, y):
    return x if c else y


@njit(inline="always")
def _not(x):
    return not x


@njit(inline="always")
def _lookup(table, i):
    return table[i]


NUMBA_VOCABULARY = {
    "select": _select, "not_": _not, "lookup": _lookup,
    "f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
    "f32_as_i32": f32_as_i32, "i32_as_f32": i32_as_f32, "f64_as_i64": f64_as_i64, "i64_as_f64": i64_as_f64,
    "fma_f32": fma_f32, "fma_f64": fma_f64,
    "sqrt": math.sqrt, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "fmod": np.fmod,
    "copysign": np.copysign, "c_nextafter": np.nextafter,
    **{f"c_{n}": getattr(math, n) for n in mathlib_vocabulary.LIBM if n != "nextafter"},
}

_COMPILED: dict = {}        # name -> the njit function, every family's
_NAMESPACES = []            # per family: its module's names (constants) with Numba's vocabulary and _COMPILED
for _family in mathlib.FAMILIES:
    _ns = {**vars(_family), **NUMBA_VOCABULARY}
    for _name, _fn in _family.DEFS.items():
        _COMPILED[_name] = _jit(pytypes.FunctionType(_fn.__code__, _ns, _name, _fn.__defaults__, _fn.__closure__))
    _NAMESPACES.append(_ns)
for _ns in _NAMESPACES:     # a function calls the others by name (Numba resolves the names when it compiles)
    _ns.update(_COMPILED)
globals().update(_COMPILED)

_SUFFIX = {"float32": "f32", "float64": "f64"}
FUNCS = {(n, d): _COMPILED[f"{n}_{s}"] for n in mathlib.NAMES for d, s in _SUFFIX.items()}


def scalar_namespace(dtype_name: str) -> dict:
    """Names used in OpDef scalar bodies (``exp``, ``max``, ...) -> njit functions of that precision.  Every
    function converts its arguments to the precision first, so ``max(x, 0)`` stays float32 in a float32 loop."""
    try:
        suffix = _SUFFIX[dtype_name]
    except KeyError:
        raise KeyError(f"mathlib has float32 and float64 functions, not {dtype_name}") from None
    return {n: _COMPILED[f"{n}_{suffix}"] for n in mathlib.NAMES}


__all__ = ["FUNCS", "scalar_namespace", "f32_as_i32", "i32_as_f32", "f64_as_i64", "i64_as_f64", "fma_f32",
           "fma_f64"] + list(mathlib.DEFS)
