"""Scalar helpers for generated kernels that ``mathlib`` does not cover: integer ``sign`` (codegen routes
every float helper, ``<fn>_f32`` / ``<fn>_f64``, to mathlib; see ``loops.math_import``)."""
from numba import njit


@njit(inline="always", cache=True)
def sign_i64(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)
