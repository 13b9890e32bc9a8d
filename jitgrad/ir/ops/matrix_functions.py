"""Matrix functions (``jitgrad.linalg``): ``matrix_exp``.

``matrix_exp`` is a primitive, not a composition, because scaling and squaring picks its number of squarings from
the matrix's norm: a traced composition would have to fix it before the values exist (a fixed count is wrong for
large norms, or slow for all).  Its impl is SciPy's ``expm`` (Pade 13 with scaling and squaring, as torch's);
inside a compiled function it runs as a host step.  Its vjp is the Frechet derivative read off the exponential of a
block-triangular matrix (torch's ``differential_analytic_matrix_function``):

    exp([[A^H, G], [0, A^H]]) = [[exp(A^H), L(A^H, G)], [0, exp(A^H)]],   gA = L(A^H, G)

so it binds ``matrix_exp`` again and differentiates to any order.
"""
from __future__ import annotations

import numpy as np

from .opdef import BY_TRANSPOSE, OpDef, register
from .solvers import mT, square_rule


def _expm_impl(a):
    if a.size == 0:
        return a.copy()
    from scipy.linalg import expm       # imported on first use: keeps `import jitgrad` fast
    return np.asarray(expm(a), dtype=a.dtype)


def _expm_vjp(c, g):
    at = mT(c.inputs[0])
    n = c.shapes[0][-1]
    top = c.bind("cat", at, g, axis=at.ndim - 1)
    bottom = c.bind("cat", at.new_zeros(at.shape), at, axis=at.ndim - 1)
    e = c.bind("matrix_exp", c.bind("cat", top, bottom, axis=at.ndim - 2))
    return (e[..., :n, n:],)


register(OpDef("matrix_exp", "linalg", square_rule("linalg.matrix_exp"), _expm_impl, _expm_vjp, saves_in=(0,), jvp=BY_TRANSPOSE,
               grad_name="LinalgMatrixExpBackward0",
               doc="The matrix exponential of square matrices (SciPy's expm: Pade 13, scaling and squaring)."))
