"""mathlib's functions computed by the C library: atan2, nextafter, hypot, erfc, lgamma and the inverse
trigonometric and hyperbolic functions (asin, acos, atan, sinh, cosh, asinh, acosh, atanh), float32 and float64.
A libm call does not vectorise; the float32 forms (but nextafter's) call the float64 function and round once.
Domain and range as C's: NaN outside the domain, inf on overflow.
"""
from __future__ import annotations

import numpy as np

from .mathlib_vocabulary import (recorder, select, f32, f64, c_atan2, c_nextafter, c_hypot, c_erfc, c_lgamma, c_asin,
                                 c_acos, c_atan, c_sinh, c_cosh, c_asinh, c_acosh, c_atanh)

DEFS: dict = {}         # name -> function, every function below (mathlib merges the families')
_def = recorder(DEFS)


@_def
def atan2_f32(y, x):
    """float64 inside, one rounding at the end: within an ulp of atan2f (a libm call: it does not vectorise)."""
    return f32(c_atan2(f64(y), f64(x)))


@_def
def atan2_f64(y, x):
    return c_atan2(f64(y), f64(x))


@_def
def nextafter_f32(x, y):
    return f32(c_nextafter(f32(x), f32(y)))


@_def
def nextafter_f64(x, y):
    return c_nextafter(f64(x), f64(y))


@_def
def hypot_f32(x, y):
    return f32(c_hypot(f64(x), f64(y)))


@_def
def hypot_f64(x, y):
    return c_hypot(f64(x), f64(y))


@_def
def erfc_f32(x):
    """float64 inside (libm's erfc), one rounding: erfc's tail needs the relative accuracy 1 - erf loses."""
    return f32(c_erfc(f64(x)))


@_def
def erfc_f64(x):
    return c_erfc(f64(x))


@_def
def lgamma_f32(x):
    return f32(lgamma_f64(f64(x)))


@_def
def lgamma_f64(x):
    """libm's lgamma (+inf at the poles and at +-inf, as torch)."""
    x = f64(x)
    return select(x == -np.inf, np.inf, c_lgamma(x))


@_def
def asin_f32(x):
    """float64 inside (libm's asin), one rounding."""
    return f32(c_asin(f64(x)))


@_def
def asin_f64(x):
    return c_asin(f64(x))


@_def
def acos_f32(x):
    """float64 inside (libm's acos), one rounding."""
    return f32(c_acos(f64(x)))


@_def
def acos_f64(x):
    return c_acos(f64(x))


@_def
def atan_f32(x):
    """float64 inside (libm's atan), one rounding."""
    return f32(c_atan(f64(x)))


@_def
def atan_f64(x):
    return c_atan(f64(x))


@_def
def sinh_f32(x):
    """float64 inside (libm's sinh), one rounding."""
    return f32(c_sinh(f64(x)))


@_def
def sinh_f64(x):
    return c_sinh(f64(x))


@_def
def cosh_f32(x):
    """float64 inside (libm's cosh), one rounding."""
    return f32(c_cosh(f64(x)))


@_def
def cosh_f64(x):
    return c_cosh(f64(x))


@_def
def asinh_f32(x):
    """float64 inside (libm's asinh), one rounding."""
    return f32(c_asinh(f64(x)))


@_def
def asinh_f64(x):
    return c_asinh(f64(x))


@_def
def acosh_f32(x):
    """float64 inside (libm's acosh), one rounding."""
    return f32(c_acosh(f64(x)))


@_def
def acosh_f64(x):
    return c_acosh(f64(x))


@_def
def atanh_f32(x):
    """float64 inside (libm's atanh), one rounding."""
    return f32(c_atanh(f64(x)))


@_def
def atanh_f64(x):
    return c_atanh(f64(x))
