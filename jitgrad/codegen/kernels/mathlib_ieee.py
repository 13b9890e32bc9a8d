"""mathlib's functions that are one or two IEEE-754 operations each, exactly as C and NumPy compute them, with no
approximation: sqrt, rsqrt (1/sqrt), abs, sign, max and min (NaN if either is NaN, as ``np.maximum``), isfinite, the
roundings (floor, ceil, trunc, round half to even), fmod, copysign; float32 and float64.  Each is a select or an LLVM
intrinsic, so a loop calling them vectorises.
"""
from __future__ import annotations

import numpy as np

from .mathlib_vocabulary import recorder, select, f32, f64, sqrt, floor, ceil, trunc, rint, copysign, fmod

DEFS: dict = {}         # name -> function, every function below (mathlib merges the families')
_def = recorder(DEFS)

F = np.float32
_F0, _F1 = F(0.0), F(1.0)
_FINF = F(np.inf)


@_def
def sqrt_f32(x):
    return sqrt(f32(x))


@_def
def sqrt_f64(x):
    return sqrt(f64(x))


@_def
def rsqrt_f32(x):
    return _F1 / sqrt(f32(x))


@_def
def rsqrt_f64(x):
    return 1.0 / sqrt(f64(x))


@_def
def abs_f32(x):
    return abs(f32(x))


@_def
def abs_f64(x):
    return abs(f64(x))


@_def
def sign_f32(x):
    x = f32(x)
    y = select(x > _F0, _F1, select(x < _F0, -_F1, _F0))
    return select(x != x, x, y)


@_def
def sign_f64(x):
    x = f64(x)
    y = select(x > 0.0, 1.0, select(x < 0.0, -1.0, 0.0))
    return select(x != x, x, y)


@_def
def max_f32(a, b):
    """np.maximum: NaN if either is NaN."""
    a = f32(a)
    b = f32(b)
    return select((a > b) | (a != a), a, b)


@_def
def min_f32(a, b):
    a = f32(a)
    b = f32(b)
    return select((a < b) | (a != a), a, b)


@_def
def max_f64(a, b):
    a = f64(a)
    b = f64(b)
    return select((a > b) | (a != a), a, b)


@_def
def min_f64(a, b):
    a = f64(a)
    b = f64(b)
    return select((a < b) | (a != a), a, b)


@_def
def isfinite_f32(x):
    return abs(f32(x)) < _FINF


@_def
def isfinite_f64(x):
    return abs(f64(x)) < np.inf


@_def
def floor_f32(x):
    return floor(f32(x))


@_def
def floor_f64(x):
    return floor(f64(x))


@_def
def ceil_f32(x):
    return ceil(f32(x))


@_def
def ceil_f64(x):
    return ceil(f64(x))


@_def
def trunc_f32(x):
    return trunc(f32(x))


@_def
def trunc_f64(x):
    return trunc(f64(x))


@_def
def round_f32(x):
    """Half to even (torch.round, np.rint)."""
    return rint(f32(x))


@_def
def round_f64(x):
    return rint(f64(x))


@_def
def fmod_f32(x, y):
    return fmod(f32(x), f32(y))


@_def
def fmod_f64(x, y):
    return fmod(f64(x), f64(y))


@_def
def copysign_f32(x, y):
    return copysign(f32(x), f32(y))


@_def
def copysign_f64(x, y):
    return copysign(f64(x), f64(y))
