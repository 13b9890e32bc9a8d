"""The one math table: every function a scalar body may call, with its form on each target.

``MATH[name]`` is a ``MathFn`` with
- ``f32`` / ``f64``: the CPU helper (``"mathlib.exp_f32"``: module and function) for that precision;
- ``i64``: the CPU form for integer operands (a helper, or a Python builtin such as ``max``); when absent, an
  integer operand computes in float64 (``f64``);
- ``cuda``: the CUDA form, an inline expression over ``{0}, {1}, ...`` (the arguments) and ``{T}`` (the result
  type).  CUDA kernels inline it rather than calling a device function because compiling a call to a Numba
  device function needs a CUDA driver, and every kernel's PTX must build without one (``f.ptx``).  The guards
  give the IEEE results (log(0) = -inf, sqrt(-1) = nan, sin(inf) = nan, ...) where Python's ``math`` would
  raise: libdevice returns them anyway on a GPU, and on Numba's CUDA simulator (kernels run as Python) they
  keep NaN/inf flowing as on the device.  ``None`` when the CUDA generator writes the op itself (Philox draws).

Scalar bodies (``OpDef.scalar``) receive a ``MathCalls`` as their first argument and write ``m.tanh(x)``: a
math call of this table's row, in the kernel IR (``kernel_ir.py``), at the precision the loop computes in; each
renderer expands it for its target.  Adding a math function is one row here plus its CPU helpers
(a ``mathlib_*.py`` family module for floats, ``intmath.py`` for integers); ``tests/test_mathlib.py`` checks that
every row's helpers exist with the row's arity.

Nothing here imports Numba: building kernels must not wait for it.
"""
from __future__ import annotations

from . import kernel_ir as ki


class MathFn:
    """One row of the table (see the module docstring)."""
    __slots__ = ("name", "arity", "f32", "f64", "i64", "cuda")

    def __init__(self, name, arity, cuda, *, f32=None, f64=None, i64=None, module="mathlib"):
        self.name, self.arity, self.cuda, self.i64 = name, arity, cuda, i64
        self.f32 = f32 or f"{module}.{name}_f32"
        self.f64 = f64 or f"{module}.{name}_f64"

    def cpu(self, precision: str):
        """``(module or None, function)`` for ``precision`` in f32 | f64 | i64 (a builtin has no module)."""
        ref = getattr(self, precision) if precision != "i64" else (self.i64 or self.f64)
        mod, _, fn = ref.rpartition(".")
        return (mod or None), fn


class _PerPrecision:
    """A CUDA form that differs by precision (constants of the float format): ``format`` picks the one for ``T``."""

    def __init__(self, **forms):
        self.forms = forms

    def format(self, *args, T):
        return self.forms[T].format(*args, T=T)


def _nextafter_cuda(p: int, emin: int, fmax: str) -> str:
    """nextafter(x, y) in arithmetic (libdevice's needs a declaration, and the simulator has none): x stepped by
    one ulp, ldexp(1, exponent - p), half that when stepping towards zero from a power of two, at least the
    smallest subnormal 2**emin, keeping x's sign (-2**emin towards 0 is -0.0); NaN in, NaN out; x == y gives y;
    from 0 the smallest subnormal with y's sign; from an infinity the largest finite value."""
    toward_zero = "(({1} > {0}) != ({0} > 0))"
    half = f"(1 if (abs(math.frexp({{0}})[0]) == 0.5 and {toward_zero}) else 0)"
    step = f"math.ldexp({{T}}(1), max(math.frexp({{0}})[1] - {p} - {half}, {emin}))"
    return ("({T}(math.nan) if ({0} != {0} or {1} != {1}) else ({T}({1}) if {0} == {1} else "
            f"({{T}}(math.copysign({{T}}(2.0 ** {emin}), {{1}})) if {{0}} == 0 else "
            f"({{T}}(math.copysign({{T}}({fmax}), {{0}})) if abs({{0}}) == math.inf else "
            f"{{T}}(math.copysign({{0}} + ({{T}}(1) if {{1}} > {{0}} else {{T}}(-1)) * {step}, {{0}}))))))")


def _rows(*fns):
    return {f.name: f for f in fns}


MATH = _rows(
    MathFn("exp", 1, "({T}(math.exp({0})) if {0} < 700 else ({T}(math.inf) if {0} == {0} else {T}({0})))"),
    MathFn("expm1", 1, "({T}(math.expm1({0})) if {0} < 700 else ({T}(math.inf) if {0} == {0} else {T}({0})))"),
    MathFn("log", 1, "({T}(math.log({0})) if {0} > 0 else ({T}(-math.inf) if {0} == 0 else {T}(math.nan)))"),
    MathFn("log1p", 1, "({T}(math.log1p({0})) if {0} > -1 else ({T}(-math.inf) if {0} == -1 else {T}(math.nan)))"),
    MathFn("tanh", 1, "{T}(math.tanh({0}))"),
    MathFn("erf", 1, "{T}(math.erf({0}))"),
    # erf x given e = exp(-x^2), which the kernel computes anyway (``erf_exp.py``, CPU kernels only); CUDA's erf
    # needs no e (e is NaN only where x is)
    MathFn("erf_exp", 2, "({T}(math.erf({0})) if {1} == {1} else {T}({1}))"),
    MathFn("sin", 1, "({T}(math.sin({0})) if math.isfinite({0}) else {T}(math.nan))"),
    MathFn("cos", 1, "({T}(math.cos({0})) if math.isfinite({0}) else {T}(math.nan))"),
    MathFn("tan", 1, "({T}(math.tan({0})) if math.isfinite({0}) else {T}(math.nan))"),
    MathFn("sqrt", 1, "({T}(math.sqrt({0})) if {0} >= 0 else {T}(math.nan))"),
    # 1/sqrt with the IEEE signs: rsqrt(+0) = inf, rsqrt(-0) = -inf, rsqrt(inf) = 0, as torch
    MathFn("rsqrt", 1, "({T}(1) / {T}(math.sqrt({0})) if {0} >= 0 else {T}(math.nan))"),
    MathFn("sigmoid", 1, "(({T}(1) / ({T}(1) + ({T}(math.exp(-{0})) if {0} > -700 else {T}(math.inf)))) "
                         "if {0} == {0} else {T}({0}))"),
    MathFn("isfinite", 1, "math.isfinite({0})", i64="intmath.isfinite_i64"),
    MathFn("max", 2, "({T}({0}) if ({0} > {1} or {0} != {0}) else {T}({1}))", i64="max"),
    MathFn("min", 2, "({T}({0}) if ({0} < {1} or {0} != {0}) else {T}({1}))", i64="min"),
    MathFn("sign", 1, "({T}(1) if {0} > 0 else ({T}(-1) if {0} < 0 else {T}({0})))", i64="intmath.sign_i64"),
    MathFn("abs", 1, "{T}(abs({0}))", i64="abs"),
    # integer powers wrap like int64 multiplication (torch); a negative exponent of an integer raises there
    MathFn("pow", 2, "({T}(math.inf) if ({0} == 0 and {1} < 0) else ({T}(math.nan) if ({0} < 0 and "
                     "math.isfinite({1}) and math.floor({1}) != {1}) else {T}({0} ** {1})))",
           i64="intmath.pow_i64"),
    # rounding: exact below 2^52 (larger floats are integers already); the sign of a zero result is x's, as C's
    MathFn("floor", 1, "({T}(math.copysign(math.floor({0}), {0})) if abs({0}) < 4503599627370496.0 else {T}({0}))"),
    MathFn("ceil", 1, "({T}(math.copysign(math.ceil({0}), {0})) if abs({0}) < 4503599627370496.0 else {T}({0}))"),
    MathFn("trunc", 1, "({T}(math.copysign(math.trunc({0}), {0})) if abs({0}) < 4503599627370496.0 else {T}({0}))"),
    # half to even: floor, then up when the rest is above a half, or a half and the floor odd
    MathFn("round", 1, "({T}(math.copysign(math.floor({0}) + (1 if ({0} - math.floor({0}) > 0.5 or ({0} - "
                       "math.floor({0}) == 0.5 and math.floor({0}) % 2 == 1)) else 0), {0})) "
                       "if abs({0}) < 4503599627370496.0 else {T}({0}))"),
    MathFn("hypot", 2, "{T}(math.hypot({0}, {1}))"),
    # C fmod: x for an infinite y, nan for an infinite x or a zero y (Python's math.fmod raises there)
    MathFn("fmod", 2, "({T}(math.fmod({0}, {1})) if (math.isfinite({0}) and {1} != 0 and math.isfinite({1})) else "
                      "({T}({0}) if (math.isfinite({0}) and abs({1}) == math.inf) else {T}(math.nan)))",
           i64="intmath.fmod_i64"),
    MathFn("copysign", 2, "{T}(math.copysign({0}, {1}))"),
    MathFn("erfc", 1, "{T}(math.erfc({0}))"),
    # libm's lgamma is +inf at the poles (0, -1, -2, ...) and at +-inf; Python's math.lgamma raises at the poles
    MathFn("lgamma", 1, "({T}(math.lgamma({0})) if (math.isfinite({0}) and not ({0} <= 0 and math.floor({0}) == {0})) "
                        "else ({T}(math.inf) if {0} == {0} else {T}({0})))"),
    # inverse trigonometric and hyperbolic functions; Python's math raises outside the domain and on overflow
    MathFn("asin", 1, "({T}(math.asin({0})) if abs({0}) <= 1 else {T}(math.nan))"),
    MathFn("acos", 1, "({T}(math.acos({0})) if abs({0}) <= 1 else {T}(math.nan))"),
    MathFn("atan", 1, "{T}(math.atan({0}))"),
    MathFn("sinh", 1, "({T}(math.copysign(math.inf, {0})) if abs({0}) >= 710 else {T}(math.sinh({0})))"),
    MathFn("cosh", 1, "({T}(math.inf) if abs({0}) >= 710 else {T}(math.cosh({0})))"),
    MathFn("asinh", 1, "{T}(math.asinh({0}))"),
    MathFn("acosh", 1, "({T}(math.acosh({0})) if {0} >= 1 else {T}(math.nan))"),
    MathFn("atanh", 1, "({T}(math.atanh({0})) if abs({0}) < 1 else ({T}(math.copysign(math.inf, {0})) "
                       "if abs({0}) == 1 else {T}(math.nan)))"),
    MathFn("atan2", 2, "{T}(math.atan2({0}, {1}))"),
    MathFn("nextafter", 2, _PerPrecision(float32=_nextafter_cuda(24, -149, "3.4028234663852886e38"),
                                         float64=_nextafter_cuda(53, -1074, "1.7976931348623157e308"))),
    # Philox draws: (seed, offset, element index); CUDA writes their rounds into the kernel (cuda_philox.py)
    MathFn("rng_uniform", 3, None, f32="philox.rnguniform_f32", f64="philox.rnguniform_f64"),
    MathFn("rng_normal", 3, None, f32="philox.rngnormal_f32", f64="philox.rngnormal_f64"),
)

_PRECISION = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i64", "uint8": "i64", "bool": "i64"}
_FLOAT_T = {"f32": ki.F32, "f64": ki.F64}


class MathCalls:
    """What a scalar body's ``m`` is: a builder of kernel IR values (``kernel_ir.Val``) at precision ``dtype`` (a
    jitgrad DType name), whatever the target: ``m.tanh(x)`` is a math call of the table's row at that precision
    (each renderer expands it: mathlib's IR builders for the CPU, the row's inline form for CUDA), ``m.lit(1.0)``
    a constant of the precision, ``m.select(c, x, y)``, ``m.cast(x, dtype)``, ``m.not_``, ``m.and_``, ``m.or_``.
    The operands a body receives are values too, so ``x + y`` and ``x < y`` build IR.  ``guards``: conditions
    (values) under which an integer divisor is zero (``nonzero``)."""

    def __init__(self, dtype: str = "float64", guards: list | None = None):
        self.dtype = dtype
        self.guards = [] if guards is None else guards

    def nonzero(self, y):
        """``y`` as a divisor: for integer operands the loop counts zeros (``guards``) and the step raises
        ZeroDivisionError after it, as torch does (the kernel itself computes NumPy's 0 and carries on)."""
        if self.dtype not in ("float32", "float64"):
            self.guards.append(ki.val(y) == 0)
        return y

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            fn = MATH[name]
        except KeyError:
            raise AttributeError(f"codegen: a scalar body calls {name!r}, which is not in the math table "
                                 f"(jitgrad/codegen/kernels/math_table.py)") from None
        return lambda *args: self.call(fn, args)

    def call(self, fn: MathFn, args):
        if len(args) != fn.arity:
            raise TypeError(f"codegen: math function {fn.name} takes {fn.arity} arguments, got {len(args)}")
        prec = _PRECISION.get(self.dtype)
        if prec is None:
            raise TypeError(f"codegen: no {fn.name} for dtype {self.dtype}")
        args = [ki.val(a) for a in args]
        if prec == "i64" and fn.i64 in ("max", "min", "abs"):       # Python's builtins on integers
            if fn.i64 == "abs":
                return abs(args[0])
            x, y = args
            return ki.select(y > x, y, x) if fn.i64 == "max" else ki.select(y < x, y, x)
        if fn.name == "isfinite":
            t = ki.BOOL
        elif prec == "i64":
            t = ki.I64 if fn.i64 else ki.F64
            if not fn.i64:
                prec = "f64"
        else:
            t = _FLOAT_T[prec]
        return ki.math_call(fn.name, prec, args, t, self.dtype)

    def lit(self, value):
        """A literal in the compute precision (a float32 constant in a float32 loop: a float64 one would
        promote the arithmetic around it to float64)."""
        floating = self.dtype in ("float32", "float64")
        d = self.dtype if floating else ("float64" if isinstance(value, float) else "int64")
        return ki.const(value, ki.OF_DTYPE[d])

    select = staticmethod(ki.select)
    not_ = staticmethod(ki.not_)
    and_ = staticmethod(ki.and_)
    or_ = staticmethod(ki.or_)

    @staticmethod
    def cast(x, dtype):
        """``x`` converted to jitgrad dtype ``dtype``."""
        return ki.cast(x, ki.OF_DTYPE[dtype.name])


__all__ = ["MATH", "MathFn", "MathCalls"]
