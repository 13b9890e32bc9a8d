"""``jitgrad.linalg``: torch.linalg's functions, batched over leading dims, float32/float64, differentiable.

Factorisations (``cholesky``, ``qr``, ``svd``, ``eigh``), inverses and solvers (``inv``, ``solve``,
``solve_triangular``, ``pinv``, ``lstsq``) and determinants (``det``, ``slogdet``) are primitives: LAPACK through
NumPy/SciPy, with vjps written in jitgrad ops (gradients of any order), run as host steps between the kernels of
a compiled function.  Norms, ``cond``, ``matrix_rank``, ``matrix_power``, ``matrix_exp``, ``multi_dot`` and the
rest are compositions of them.

>>> import jitgrad as jg
>>> A = jg.tensor([[2., 1.], [1., 3.]])
>>> jg.linalg.det(A)
tensor(5.)
"""
from .ir.ops.solvers import LinAlgError
from .library.linalg.solve import (
    det, slogdet, inv, inv_ex, solve, solve_ex, solve_triangular, pinv, matrix_power, cholesky, cholesky_ex, qr, svd,
    svdvals, eigh, eigvalsh, lstsq)
from .library.linalg.norms import (
    vector_norm, matrix_norm, norm, cond, matrix_rank, multi_dot, cross, diagonal, vecdot, matrix_exp)

LinAlgError.__module__ = "jitgrad.linalg"

__all__ = ["LinAlgError", "det", "slogdet", "inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "pinv",
           "matrix_power", "cholesky", "cholesky_ex", "qr", "svd", "svdvals", "eigh", "eigvalsh", "lstsq",
           "vector_norm", "matrix_norm", "norm", "cond", "matrix_rank", "multi_dot", "cross", "diagonal", "vecdot",
           "matrix_exp"]
