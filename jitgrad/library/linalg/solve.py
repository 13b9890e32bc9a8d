"""``torch.linalg``'s factorisations, inverses and solvers, and the torch-level names for them (``torch.det``,
``torch.inverse``, ``torch.svd``, ``Tensor.cholesky``...).

Each is a primitive of ``ir/ops/solvers.py`` / ``ir/ops/factorizations.py`` (LAPACK through NumPy/SciPy, a vjp
written with jitgrad ops, so gradients of any order; inside ``@jg.compile`` a host step between kernels) or a
composition of them.  The argument checks come first, with torch's messages; a singular matrix in ``inv`` /
``solve`` or a matrix that is not positive-definite in ``cholesky`` raises ``jitgrad.linalg.LinAlgError``.
QR, SVD and eigenvectors are defined up to signs: jitgrad returns LAPACK's, as torch does on the CPU.
"""
from __future__ import annotations

import collections
import functools
import inspect

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ...ir.ops.factorizations import qr_layout
from ...ir.ops.solvers import LinAlgError, svd_parts
from ...runtime.dispatch import bind
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _result(name, fields, doc):
    cls = collections.namedtuple(name, fields)
    cls.__doc__ = doc
    return cls


slogdet_result = _result("linalg_slogdet", ["sign", "logabsdet"], "``(sign, logabsdet)`` of ``slogdet``.")
inv_ex_result = _result("linalg_inv_ex", ["inverse", "info"], "``(inverse, info)`` of ``inv_ex``.")
solve_ex_result = _result("linalg_solve_ex", ["result", "info"], "``(result, info)`` of ``solve_ex``.")
cholesky_ex_result = _result("linalg_cholesky_ex", ["L", "info"], "``(L, info)`` of ``cholesky_ex``.")
qr_result = _result("linalg_qr", ["Q", "R"], "``(Q, R)`` of ``linalg.qr``.")
svd_result = _result("linalg_svd", ["U", "S", "Vh"], "``(U, S, Vh)`` of ``linalg.svd``.")
eigh_result = _result("linalg_eigh", ["eigenvalues", "eigenvectors"], "``(eigenvalues, eigenvectors)``.")
lstsq_result = _result("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"],
                       "``(solution, residuals, rank, singular_values)`` of ``lstsq``.")
torch_slogdet_result = _result("slogdet", ["sign", "logabsdet"], "``(sign, logabsdet)`` of ``torch.slogdet``.")
torch_qr_result = _result("qr", ["Q", "R"], "``(Q, R)`` of ``torch.qr``.")
torch_svd_result = _result("svd", ["U", "S", "V"], "``(U, S, V)`` of ``torch.svd`` (V, not Vh).")


# ---- argument checks (torch's messages) -----------------------------------------------------------------

def _tensor(name, A, arg="A"):
    if not isinstance(A, Tensor):
        raise TypeError(f"{name}(): argument '{arg}' (position 1) must be Tensor, not {type(A).__name__}")


def _matrix(name, A, arg="A"):
    _tensor(name, A, arg)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")


def _floating(name, A):
    if not A.is_floating_point():
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got "
                           f"{dt.torch_scalar_name(A.dtype)}")


def _square(name, A, floating=True):
    _matrix(name, A)
    if floating:
        _floating(name, A)
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")


def _renamed(name, ex_name, fn, *args, **kw):
    """``fn(*args)``, its LinAlgError naming ``ex_name`` (the ``*_ex`` function the user called), as torch's."""
    try:
        return fn(*args, **kw)
    except LinAlgError as e:
        raise LinAlgError(str(e).replace(f"{name}:", f"{ex_name}:", 1)) from None


def _eps(A):
    return float(np.finfo(A.dtype.np).eps)


# ---- determinants and inverses -------------------------------------------------------------------------

def det(A, **torch_kw):
    """The determinant of square matrices ``A`` (batched).  Its derivative is the cofactor matrix, defined at
    singular ``A`` too (torch.linalg.det)."""
    _square("linalg.det", A)
    return bind(O["det"], A)


def slogdet(A, **torch_kw):
    """``(sign, logabsdet)``: the sign of det(A) and log|det(A)| (torch.linalg.slogdet); ``sign`` is not
    differentiable."""
    _square("linalg.slogdet", A)
    p = bind(O["slogdet"], A)
    return slogdet_result(p[..., 0].detach(), p[..., 1])


def logdet(input, **torch_kw):
    """log det(input): NaN where the determinant is negative, -inf where it is 0 (torch.logdet)."""
    _square("logdet", input)
    p = bind(O["slogdet"], input)
    sign = p[..., 0].detach()
    return p[..., 1].where(sign >= 0, float("nan"))


def inv(A, **torch_kw):
    """The inverse of square matrices ``A`` (torch.linalg.inv); LinAlgError for a singular one."""
    _square("linalg.inv", A)
    return bind(O["inv"], A, check=True)


def inv_ex(A, *, check_errors=False, **torch_kw):
    """``(inverse, info)``: ``info`` (int32) is LAPACK's getrf code, 0 for an invertible matrix; the inverse of a
    singular matrix is NaN unless ``check_errors`` (then LinAlgError)."""
    _square("linalg.inv", A)
    inverse = _renamed("linalg.inv", "linalg.inv_ex", bind, O["inv"], A, check=bool(check_errors))
    return inv_ex_result(inverse, bind(O["linalg_info"], A.detach(), kind="lu"))


def _solve_args(name, A, B, left):
    _matrix(name, A)
    _tensor(name, B, "B")
    _floating(name, A)
    if A.dtype is not B.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found A of type "
                           f"{dt.torch_scalar_name(A.dtype)} and B of type {dt.torch_scalar_name(B.dtype)} instead")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    Bm = B.unsqueeze(-1) if vector else B
    n = A.shape[-1]
    k = Bm.shape[-2] if left else Bm.shape[-1]
    if k != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and "
                           f"{Bm.shape[-2]}x{Bm.shape[-1]})")
    if vector and not left:
        raise RuntimeError(f"{name}: Vector broadcasting of the left hand side is not supported for left=False. "
                           "In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    return Bm, vector


def _solve(A, B, left, check):
    Bm, vector = _solve_args("linalg.solve", A, B, left)
    if left:
        X = bind(O["solve"], A, Bm, check=check)
    else:
        X = bind(O["solve"], A.mT, Bm.mT, check=check).mT
    return X.squeeze(-1) if vector else X


def solve(A, B, *, left=True, **torch_kw):
    """X with ``A X = B`` (``X A = B`` with ``left=False``), batches broadcast; ``B`` a vector when it has one dim
    less than ``A`` (torch.linalg.solve).  LinAlgError for a singular ``A``."""
    return _solve(A, B, left, True)


def solve_ex(A, B, *, left=True, check_errors=False, **torch_kw):
    """``(result, info)`` of ``solve``: NaN where ``A`` is singular unless ``check_errors``."""
    X = _renamed("torch.linalg.solve", "torch.linalg.solve_ex", _solve, A, B, left, bool(check_errors))
    return solve_ex_result(X, bind(O["linalg_info"], A.detach(), kind="lu"))


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, **torch_kw):
    """X with ``A X = B`` (``X A = B`` with ``left=False``) for triangular ``A``: only its upper (``upper=True``)
    or lower triangle is read, and its diagonal taken as ones with ``unitriangular`` (torch.linalg.solve_triangular).
    """
    name = "linalg.solve_triangular"
    _matrix(name, A)
    _matrix(name, B, "B")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")
    if not A.is_floating_point():
        raise NotImplementedError(f"\"triangular_solve_cpu\" not implemented for '{dt.torch_scalar_name(A.dtype)}'")
    if A.dtype is not B.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found A of type "
                           f"{dt.torch_scalar_name(A.dtype)} and B of type {dt.torch_scalar_name(B.dtype)} instead")
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation {'AX = B' if left else 'XA = B'}"
                           f" ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    if left:
        return bind(O["solve_triangular"], A, B, upper=bool(upper), unitriangular=bool(unitriangular))
    return bind(O["solve_triangular"], A.mT, B.mT, upper=not upper, unitriangular=bool(unitriangular)).mT


def pinv(A, *, atol=None, rtol=None, hermitian=False, **torch_kw):
    """The Moore-Penrose pseudo-inverse (torch.linalg.pinv): singular values (eigenvalue magnitudes with
    ``hermitian=True``) at or below ``max(atol, rtol * largest)`` count as zero; ``rtol`` defaults to
    ``eps * max(m, n)``, or to 0 when only a positive ``atol`` is given."""
    _tensor("linalg.pinv", A)
    if A.ndim < 2 or not A.is_floating_point():
        raise RuntimeError(f"linalg.pinv({dt.torch_scalar_name(A.dtype)}{{{list(A.shape)}}}): expected a tensor with "
                           "2 or more dimensions of float, double, cfloat or cdouble types")
    atol, rtol = _tolerances(A, atol, rtol)
    return bind(O["pinv"], A, rtol=rtol, atol=atol, hermitian=bool(hermitian))


def _tolerances(A, atol, rtol):
    atol = None if atol is None else float(atol)
    rtol = None if rtol is None else float(rtol)
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else _eps(A) * max(A.shape[-2], A.shape[-1])
    return atol or 0.0, rtol


def matrix_power(A, n, **torch_kw):
    """``A`` to the integer power ``n`` by repeated squaring; ``n < 0`` inverts first, ``n == 0`` gives the
    identity (torch.linalg.matrix_power)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}")
    _square("linalg.matrix_power", A, floating=False)
    n = int(n)
    if n == 0:
        eye = A._same_device(Tensor._make(np.eye(A.shape[-1], dtype=A.dtype.np)))
        return eye.expand(A.shape) * 1 if A.ndim > 2 else eye.clone()
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


# ---- factorisations --------------------------------------------------------------------------------------

def cholesky(A, *, upper=False, **torch_kw):
    """The Cholesky factor of symmetric positive-definite ``A``: lower ``L`` with ``A = L L^T``, or upper ``U``
    with ``A = U^T U`` (reading that triangle) with ``upper=True`` (torch.linalg.cholesky)."""
    _square("linalg.cholesky", A)
    if upper:
        return bind(O["cholesky"], A.mT, check=True).mT
    return bind(O["cholesky"], A, check=True)


def cholesky_ex(A, *, upper=False, check_errors=False, **torch_kw):
    """``(L, info)``: ``info`` (int32) is the order of the first leading minor that is not positive-definite
    (0: none); ``L`` is NaN there unless ``check_errors``."""
    _square("linalg.cholesky", A)
    src = A.mT if upper else A
    L = _renamed("linalg.cholesky", "linalg.cholesky_ex", bind, O["cholesky"], src, check=bool(check_errors))
    return cholesky_ex_result(L.mT if upper else L, bind(O["linalg_info"], src.detach(), kind="cholesky"))


def qr(A, mode="reduced", **torch_kw):
    """``(Q, R)`` with ``A = Q R``, Q with orthonormal columns and R upper triangular (torch.linalg.qr).
    ``mode``: ``"reduced"`` (k = min(m, n) columns of Q), ``"complete"`` (Q square), ``"r"`` (R only; Q empty,
    and not differentiable)."""
    _matrix("linalg.qr", A)
    _floating("linalg.qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           "or 'complete'")
    m, n = A.shape[-2:]
    qrows, qcols, _, _ = qr_layout(m, n, mode)
    p = bind(O["qr"], A, mode=mode)
    Q = p[..., :m, :qcols] if mode != "r" else A._same_device(Tensor._make(np.zeros((0,), A.dtype.np)))
    return qr_result(Q, p[..., qrows:, :n])


def svd(A, full_matrices=True, *, driver=None, **torch_kw):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, S descending (torch.linalg.svd).  The derivative through U and Vh
    is defined for distinct singular values, and (as torch) sees only the first min(m, n) singular vectors."""
    _matrix("linalg.svd", A)
    _floating("linalg.svd", A)
    m, n = A.shape[-2:]
    return svd_result(*svd_parts(bind(O["svd"], A, full_matrices=bool(full_matrices)), m, n, bool(full_matrices)))


def svdvals(A, *, driver=None, **torch_kw):
    """The singular values of ``A``, descending (torch.linalg.svdvals)."""
    _matrix("linalg.svd", A)
    _floating("linalg.svd", A)
    m, n = A.shape[-2:]
    return svd_parts(bind(O["svd"], A, full_matrices=False), m, n, False)[1]


def _eigh(A, UPLO):
    _square("linalg.eigh", A, floating=False)
    if not A.is_floating_point():
        raise NotImplementedError(f"\"linalg_eigh_cpu\" not implemented for '{dt.torch_scalar_name(A.dtype)}'")
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    p = bind(O["eigh"], A, uplo=UPLO)
    return p[..., 0, :], p[..., 1:, :]


def eigh(A, UPLO="L", **torch_kw):
    """``(eigenvalues, eigenvectors)`` of symmetric ``A`` (reading its lower triangle, or the upper with
    ``UPLO="U"``): eigenvalues ascending, eigenvectors as columns (torch.linalg.eigh)."""
    return eigh_result(*_eigh(A, UPLO))


def eigvalsh(A, UPLO="L", **torch_kw):
    """The eigenvalues of symmetric ``A``, ascending (torch.linalg.eigvalsh)."""
    return _eigh(A, UPLO)[0]


def lstsq(A, B, rcond=None, *, driver=None, **torch_kw):
    """The least-squares solution of ``A X = B`` (torch.linalg.lstsq): ``solution`` from the pseudo-inverse (so its
    derivative is torch's); ``residuals`` (squared, per column of B) for an overdetermined full-rank system and a
    driver other than gelsy; ``rank`` (not for gels); ``singular_values`` (gelsd and gelss)."""
    _tensor("linalg.lstsq", A)
    _tensor("linalg.lstsq", B, "B")
    if driver is not None and driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    if not A.is_floating_point() or not B.is_floating_point():
        raise RuntimeError("This function doesn't handle types other than float and double")
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if not (A.ndim >= B.ndim and A.ndim - B.ndim <= 1):
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    driver = driver or "gelsy"
    vector = B.ndim == A.ndim - 1
    Bm = B.unsqueeze(-1) if vector else B
    if Bm.shape[-2] != A.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size({-1 if vector else -2})")
    m, n = A.shape[-2:]
    rtol = _eps(A) * max(m, n) if rcond is None or rcond < 0 else float(rcond)
    X = bind(O["pinv"], A, rtol=rtol, atol=0.0, hermitian=False) @ Bm
    empty = A._same_device(Tensor._make(np.zeros((0,), A.dtype.np)))
    s = svdvals(A.detach()) if driver != "gels" else None
    rank = empty.long() if s is None else (s > s[..., :1] * rtol).long().sum(-1)
    residuals = empty
    if driver != "gelsy" and m > n and (s is None or bool((rank == n).all())):
        residuals = ((A @ X - Bm) ** 2).sum(-2)
        residuals = residuals.squeeze(-1) if vector else residuals
    sv = s if driver in ("gelsd", "gelss") else empty
    return lstsq_result(X.squeeze(-1) if vector else X, residuals, rank, sv)


def cholesky_solve(B, L, upper=False, **torch_kw):
    """X with ``A X = B`` where ``A = L L^T`` (``U^T U`` with ``upper=True``) from its Cholesky factor
    (torch.cholesky_solve)."""
    _matrix("cholesky_solve", B, "B")
    _matrix("cholesky_solve", L, "L")
    if upper:
        Y = solve_triangular(L.mT, B, upper=False)
        return solve_triangular(L, Y, upper=True)
    Y = solve_triangular(L, B, upper=False)
    return solve_triangular(L.mT, Y, upper=True)


def cholesky_inverse(L, upper=False, **torch_kw):
    """The inverse of ``A = L L^T`` (``U^T U`` with ``upper=True``) from its Cholesky factor
    (torch.cholesky_inverse)."""
    _square("cholesky_inverse", L)
    eye = L._same_device(Tensor._make(np.eye(L.shape[-1], dtype=L.dtype.np)))
    return cholesky_solve(eye.expand(L.shape), L, upper)


# ---- torch-level names (torch.det, torch.svd, Tensor.inverse ...) -----------------------------------------

def inverse(input, **torch_kw):
    """``torch.inverse``: ``linalg.inv``."""
    return inv(input)


def pinverse(input, rcond=1e-15, **torch_kw):
    """``torch.pinverse``: ``linalg.pinv`` with ``rtol=rcond``."""
    return pinv(input, rtol=rcond)


def torch_slogdet(input, **torch_kw):
    """``torch.slogdet``: ``(sign, logabsdet)``."""
    return torch_slogdet_result(*slogdet(input))


def torch_cholesky(input, upper=False, **torch_kw):
    """``torch.cholesky`` (deprecated in torch for ``linalg.cholesky``)."""
    return cholesky(input, upper=upper)


def torch_qr(input, some=True, **torch_kw):
    """``torch.qr``: ``(Q, R)``, reduced with ``some=True``, complete otherwise."""
    return torch_qr_result(*qr(input, "reduced" if some else "complete"))


def torch_svd(input, some=True, compute_uv=True, **torch_kw):
    """``torch.svd``: ``(U, S, V)`` with ``A = U diag(S) V^T`` (V, not Vh), reduced with ``some=True``; without
    ``compute_uv``, U and V are zero matrices (m x m, n x n) and only S is differentiable."""
    if not compute_uv:
        m, n = input.shape[-2:]
        S = svdvals(input)
        z = lambda k: input._same_device(Tensor._make(np.zeros(input.shape[:-2] + (k, k), input.dtype.np)))  # noqa
        return torch_svd_result(z(m), S, z(n))
    U, S, Vh = svd(input, full_matrices=not some)
    return torch_svd_result(U, S, Vh.mT)


def with_torch_kw(fn, name):
    """``fn`` taking torch's extra keywords (``out=``; "not supported yet" for the others; torch_kwargs.py)."""
    known = set(inspect.signature(fn).parameters) - {"torch_kw"}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in known}
        if not extra:
            return fn(*args, **kwargs)
        return torch_kwargs(fn, name, args, kwargs, extra)
    return call


def _publish(names, module_globals, prefix):
    for n in names:
        module_globals[n] = with_torch_kw(module_globals[n], prefix + n)


_publish(["det", "slogdet", "inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "pinv", "matrix_power", "cholesky",
          "cholesky_ex", "qr", "svd", "svdvals", "eigh", "eigvalsh", "lstsq"], globals(), "linalg.")
_publish(["logdet", "cholesky_solve", "cholesky_inverse", "inverse", "pinverse"], globals(), "")
for _n, _t in (("torch_slogdet", "slogdet"), ("torch_cholesky", "cholesky"), ("torch_qr", "qr"), ("torch_svd", "svd")):
    globals()[_n] = with_torch_kw(globals()[_n], _t)

# torch.<name> and Tensor.<name> for the functions above (their torch-keyword forms): torch.det, Tensor.det, ...
for _f, _name in ((det, "det"), (logdet, "logdet"), (torch_slogdet, "slogdet"), (inverse, "inverse"),
                  (pinverse, "pinverse"), (torch_cholesky, "cholesky"), (cholesky_solve, "cholesky_solve"),
                  (cholesky_inverse, "cholesky_inverse"), (torch_qr, "qr"), (torch_svd, "svd"),
                  (matrix_power, "matrix_power")):
    published("jitgrad", "Tensor", name=_name)(_f)


__all__ = ["LinAlgError", "det", "slogdet", "logdet", "inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "pinv",
           "matrix_power", "cholesky", "cholesky_ex", "qr", "svd", "svdvals", "eigh", "eigvalsh", "lstsq",
           "cholesky_solve", "cholesky_inverse"]
