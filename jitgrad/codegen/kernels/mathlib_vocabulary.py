"""The vocabulary mathlib's functions are written in, bound to kernel IR: ``select``, ``not_``, ``lookup``, the
casts (``f32``, ``i32``...), the bitcasts (``f32_as_i32``...), ``fma_f32``/``fma_f64``, LLVM intrinsics (``sqrt``,
``floor``, ``rint``, ``fmod``...) and the C library's functions (``c_atan2``... ``LIBM``).  Called on kernel IR values
(``kernel_ir.Val``), each builds its operation in the IR.  ``mathlib_numba.NUMBA_VOCABULARY`` binds the same names
to Numba's, so the same function code compiles either way (``mathlib.py`` says how).

Also ``recorder``: how a family module (``mathlib_exp_log``, ``mathlib_trig``, ``mathlib_ieee``, ``mathlib_libm``)
lists its functions.
"""
from __future__ import annotations

from . import kernel_ir as ki

select = ki.select
not_ = ki.not_
lookup = ki.lookup


def _caster(t):
    return lambda x: ki.cast(x, t)


f32, f64, i32, i64 = _caster(ki.F32), _caster(ki.F64), _caster(ki.I32), _caster(ki.I64)


def _bitcaster(src, dst):
    def cast(x):
        x = ki.val(x)
        if x.t != src:
            raise TypeError(f"mathlib: bitcast of a {x.t}, expected {src}")
        return ki.bitcast(x, dst)
    return cast


f32_as_i32, i32_as_f32 = _bitcaster(ki.F32, ki.I32), _bitcaster(ki.I32, ki.F32)
f64_as_i64, i64_as_f64 = _bitcaster(ki.F64, ki.I64), _bitcaster(ki.I64, ki.F64)


def _intr(name):
    return lambda *args: ki.intrinsic(name, *args)


# a*b + c with one rounding (llvm.fma: one vfmadd instruction on x86-64 with FMA)
fma_f32 = fma_f64 = _intr("fma")
sqrt, floor, ceil, trunc, rint, copysign = (_intr(n) for n in ("sqrt", "floor", "ceil", "trunc", "rint", "copysign"))
fmod = _intr("frem")        # IEEE fmod is exact: LLVM's frem gives libm's bits


def _libm(name):
    def call(*args):
        args = [ki.val(a) for a in args]
        t = args[0].t if args[0].t in ki.FLOATS else ki.F64
        return ki.libm(name, *[ki.cast(a, t) for a in args])
    return call


LIBM = ("atan2", "nextafter", "hypot", "erfc", "lgamma", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
        "atanh")
(c_atan2, c_nextafter, c_hypot, c_erfc, c_lgamma, c_asin, c_acos, c_atan, c_sinh, c_cosh, c_asinh, c_acosh,
 c_atanh) = (_libm(n) for n in LIBM)


def recorder(defs: dict):
    """The decorator a family module marks each of its functions with (helpers included): it records the function
    in ``defs`` by name, the family's ``DEFS`` (``mathlib.DEFS`` merges them; ``mathlib_numba`` compiles each)."""
    def record(fn):
        defs[fn.__name__] = fn
        return fn
    return record
