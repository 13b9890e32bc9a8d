"""Integer helpers for generated kernels (the ``i64`` column of ``math_table.MATH``): exact ``pow`` with int64
wrap-around, ``sign``, ``isfinite``.  Float helpers are mathlib's (``mathlib.py``)."""
from numba import njit
from numpy import int64


@njit(inline="always", cache=True)
def sign_i64(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)


@njit(inline="always", cache=True)
def isfinite_i64(x):
    return True


@njit(cache=True)
def pow_i64(x, y):
    """x ** y for integers as torch computes it: exact, wrapping like int64 multiplication (3 ** 41 wraps), and
    for a negative exponent 1 ** y = 1, (-1) ** y = +-1 and 0 otherwise (integer truncation of 1 / x ** |y|)."""
    b = int64(x)
    e = int64(y)
    if e < 0:
        if b == 1:
            return int64(1)
        if b == -1:
            return int64(1) if e % 2 == 0 else int64(-1)
        return int64(0)
    r = int64(1)
    while e > 0:
        if e & 1:
            r = r * b
        b = b * b
        e = e >> 1
    return r


@njit(cache=True)
def fmod_i64(x, y):
    """C's integer remainder (the sign of x); 0 for a zero divisor (the step raises ZeroDivisionError after the
    loop, as torch does)."""
    a = int64(x)
    b = int64(y)
    if b == 0:
        return int64(0)
    r = abs(a) % abs(b)
    return r if a >= 0 else -r

