"""libm-backed scalar math for generated kernels: the fallback for anything ``mathlib`` lacks.

These call Numba's libm bindings, which are accurate but block loop vectorisation (no SVML in llvmlite);
``mathlib`` provides the vectorisable versions.  Names follow ``<fn>_<f32|f64>``; the float32 versions
return float32.  Domain edges follow NumPy (log(0) = -inf, log(-1) = nan, sqrt(-1) = nan), not Python's
exceptions.
"""
import math

import numpy as np
from numba import njit


@njit(inline="always", cache=True)
def exp_f32(x):
    return np.float32(math.exp(x)) if x < 709.0 else np.float32(np.inf)


@njit(inline="always", cache=True)
def log_f32(x):
    return np.float32(math.log(x)) if x > 0 else (np.float32(-np.inf) if x == 0 else np.float32(np.nan))


@njit(inline="always", cache=True)
def log1p_f32(x):
    return np.float32(math.log1p(x)) if x > -1 else (np.float32(-np.inf) if x == -1 else np.float32(np.nan))


@njit(inline="always", cache=True)
def expm1_f32(x):
    return np.float32(math.expm1(x)) if x < 709.0 else np.float32(np.inf)


@njit(inline="always", cache=True)
def tanh_f32(x):
    return np.float32(math.tanh(x))


@njit(inline="always", cache=True)
def sigmoid_f32(x):
    return np.float32(1.0) / (np.float32(1.0) + exp_f32(-x))


@njit(inline="always", cache=True)
def erf_f32(x):
    return np.float32(math.erf(x))


@njit(inline="always", cache=True)
def sin_f32(x):
    return np.float32(math.sin(x)) if math.isfinite(x) else np.float32(np.nan)


@njit(inline="always", cache=True)
def cos_f32(x):
    return np.float32(math.cos(x)) if math.isfinite(x) else np.float32(np.nan)


@njit(inline="always", cache=True)
def tan_f32(x):
    return np.float32(math.tan(x)) if math.isfinite(x) else np.float32(np.nan)


@njit(inline="always", cache=True)
def pow_f32(x, y):
    return np.float32(np.power(np.float32(x), np.float32(y)))


@njit(inline="always", cache=True)
def sqrt_f32(x):
    return np.float32(math.sqrt(x)) if x >= 0 else np.float32(np.nan)


@njit(inline="always", cache=True)
def isfinite_f32(x):
    return math.isfinite(x)

@njit(inline="always", cache=True)
def exp_f64(x):
    return np.float64(math.exp(x)) if x < 709.0 else np.float64(np.inf)


@njit(inline="always", cache=True)
def log_f64(x):
    return np.float64(math.log(x)) if x > 0 else (np.float64(-np.inf) if x == 0 else np.float64(np.nan))


@njit(inline="always", cache=True)
def log1p_f64(x):
    return np.float64(math.log1p(x)) if x > -1 else (np.float64(-np.inf) if x == -1 else np.float64(np.nan))


@njit(inline="always", cache=True)
def expm1_f64(x):
    return np.float64(math.expm1(x)) if x < 709.0 else np.float64(np.inf)


@njit(inline="always", cache=True)
def tanh_f64(x):
    return np.float64(math.tanh(x))


@njit(inline="always", cache=True)
def sigmoid_f64(x):
    return np.float64(1.0) / (np.float64(1.0) + exp_f64(-x))


@njit(inline="always", cache=True)
def erf_f64(x):
    return np.float64(math.erf(x))


@njit(inline="always", cache=True)
def sin_f64(x):
    return np.float64(math.sin(x)) if math.isfinite(x) else np.float64(np.nan)


@njit(inline="always", cache=True)
def cos_f64(x):
    return np.float64(math.cos(x)) if math.isfinite(x) else np.float64(np.nan)


@njit(inline="always", cache=True)
def tan_f64(x):
    return np.float64(math.tan(x)) if math.isfinite(x) else np.float64(np.nan)


@njit(inline="always", cache=True)
def pow_f64(x, y):
    return np.float64(np.power(np.float64(x), np.float64(y)))


@njit(inline="always", cache=True)
def sqrt_f64(x):
    return np.float64(math.sqrt(x)) if x >= 0 else np.float64(np.nan)


@njit(inline="always", cache=True)
def isfinite_f64(x):
    return math.isfinite(x)


@njit(inline="always", cache=True)
def max_f32(a, b):
    """np.maximum: NaN propagates from either side."""
    a = np.float32(a)
    b = np.float32(b)
    return a if (a > b or a != a) else b


@njit(inline="always", cache=True)
def min_f32(a, b):
    a = np.float32(a)
    b = np.float32(b)
    return a if (a < b or a != a) else b


@njit(inline="always", cache=True)
def sign_f32(x):
    return np.float32(1.0) if x > 0 else (np.float32(-1.0) if x < 0 else x * np.float32(0.0))


@njit(inline="always", cache=True)
def max_f64(a, b):
    """np.maximum: NaN propagates from either side."""
    a = np.float64(a)
    b = np.float64(b)
    return a if (a > b or a != a) else b


@njit(inline="always", cache=True)
def min_f64(a, b):
    a = np.float64(a)
    b = np.float64(b)
    return a if (a < b or a != a) else b


@njit(inline="always", cache=True)
def sign_f64(x):
    return np.float64(1.0) if x > 0 else (np.float64(-1.0) if x < 0 else x * np.float64(0.0))


@njit(inline="always", cache=True)
def sign_i64(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)
