"""Inverses, solvers and determinants (``jitgrad.linalg``): ``inv``, ``solve``, ``solve_triangular``, ``det``,
``slogdet``, ``pinv``, and ``linalg_info`` (the LAPACK info code behind ``inv_ex`` / ``cholesky_ex``).

Each impl is LAPACK through NumPy/SciPy, batched over leading dims, float32 kept float32; each vjp is torch's
formula written with jitgrad ops, so the rules are differentiable again (second order).  A singular (or, for
Cholesky, not positive-definite) input raises ``LinAlgError`` with torch's message text, naming the batch element
as torch does; the ``check=False`` forms return NaN there instead (the ``*_ex`` functions report the info code).
"""
from __future__ import annotations

import numpy as np

from .opdef import BY_TRANSPOSE, Aval, OpDef, OpError, broadcast_shapes, fmt_shape, register


class LinAlgError(RuntimeError):
    """``torch.linalg.LinAlgError``: a linear-algebra routine failed on its input (a singular matrix in ``inv`` or
    ``solve``, a matrix that is not positive-definite in ``cholesky``).  A RuntimeError, as torch's."""


# ---- shared helpers --------------------------------------------------------------------------------------

def square_rule(name):
    def rule(avals, params):
        (a,) = avals
        if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            raise OpError(f"{name}: A must be batches of square matrices, but got shape {fmt_shape(a.shape)}")
        if not a.dtype.is_floating_point:
            raise OpError(f"{name}: expected a floating point tensor as input, got {a.dtype.name}")
        return [Aval(a.shape, a.dtype)]
    return rule


def mT(t):
    return t.mT


def eye_like(t, n):
    """The n x n identity as a constant of ``t``'s dtype and device."""
    return t._same_device(t.new_tensor(np.eye(n)))


def _getrf_info(m):
    from scipy.linalg import lapack
    (getrf,) = lapack.get_lapack_funcs(("getrf",), (m,))
    return getrf(m)[2]


def _potrf_info(m):
    from scipy.linalg import lapack
    (potrf,) = lapack.get_lapack_funcs(("potrf",), (m,))
    return potrf(m, lower=True, clean=False)[1]


def lapack_info(a, kind):
    """The info code of each matrix of ``a`` (int32, batch shape): getrf's (``kind="lu"``; k > 0: U[k-1, k-1]
    is zero) or potrf's (``"cholesky"``; k > 0: the leading minor of order k is not positive-definite)."""
    fn = _getrf_info if kind == "lu" else _potrf_info
    out = np.zeros(a.shape[:-2], np.int32)
    if a.shape[-1] == 0:
        return out
    for idx in np.ndindex(*a.shape[:-2]):
        out[idx] = max(int(fn(np.asarray(a[idx], np.float64))), 0)
    return out


def raise_failure(name, a, kind, text):
    """Raise torch's LinAlgError for the first failing matrix of ``a`` (``text`` formats the info code)."""
    info = lapack_info(a, kind).reshape(-1)
    bad = int(np.flatnonzero(info)[0]) if info.any() else 0
    where = f"(Batch element {bad}): " if a.ndim > 2 else ""
    raise LinAlgError(f"{name}: {where}{text.format(int(info[bad]) if info.size else 0)}")


_INV_TEXT = ("The diagonal element {} is zero, the inversion could not be completed because the input matrix is "
             "singular.")


def _nan_failed(a, out, kind):
    """``out`` with NaN in the matrices of ``a`` whose factorisation failed (the unchecked ``*_ex`` forms)."""
    bad = lapack_info(a, kind) != 0
    out = np.array(out, copy=True)
    out[bad] = np.nan
    return out


# ---- inv ----------------------------------------------------------------------------------------------------

def _inv_impl(a, check=True):
    try:
        return np.linalg.inv(a).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        if check:
            raise_failure("linalg.inv", a, "lu", _INV_TEXT)
    ok = lapack_info(a, "lu") == 0
    out = np.full(a.shape, np.nan, a.dtype)
    if ok.any():
        out[ok] = np.linalg.inv(a[ok])
    return out


def _inv_vjp(c, g):
    # torch: gA = -A^{-T} g A^{-T}
    xt = mT(c.outputs[0])
    return (-(xt @ g @ xt),)


def _inv_jvp(c, t):
    # d(A^-1) = -A^-1 dA A^-1
    x = c.outputs[0]
    return (-(x @ t @ x),)


register(OpDef("inv", "linalg", square_rule("inv"), _inv_impl, _inv_vjp, saves_out=(0,), jvp=_inv_jvp,
               grad_name="LinalgInvExBackward0", doc="The inverse of square matrices (LAPACK getrf/getri)."))


# ---- solve: A X = B with B a batch of matrices (vectors are unsqueezed by the caller) ------------------------

def _solve_rule(avals, params):
    a, b = avals
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"solve: A must be batches of square matrices, but got shape {fmt_shape(a.shape)}")
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise OpError(f"solve: incompatible shapes of A and B for the equation AX = B ({fmt_shape(a.shape)} and "
                      f"{fmt_shape(b.shape)})")
    if a.dtype is not b.dtype or not a.dtype.is_floating_point:
        raise OpError(f"solve: expected A and B of one floating point dtype, got {a.dtype.name} and {b.dtype.name}")
    batch = broadcast_shapes("solve", [a.shape[:-2], b.shape[:-2]])
    return [Aval(batch + b.shape[-2:], a.dtype)]


def _broadcast_pair(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])


def _solve_impl(a, b, check=True):
    a, b = _broadcast_pair(a, b)
    try:
        return np.linalg.solve(a, b).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        if check:
            raise_failure("torch.linalg.solve", a, "lu", "The solver failed because the input matrix is singular.")
    ok = lapack_info(a, "lu") == 0
    out = np.full(b.shape, np.nan, a.dtype)
    if ok.any():
        out[ok] = np.linalg.solve(a[ok], b[ok])
    return out


def _solve_vjp(c, g):
    # torch: gB = A^{-T} g, gA = -gB X^T
    a, x = c.inputs[0], c.outputs[0]
    sa, sb = c.shapes
    gb = c.bind("solve", mT(a), g, check=c.params.get("check", True))
    ga = -(gb @ mT(x)) if c.needs_grad[0] else None
    return (None if ga is None else ga.sum_to_size(sa),
            gb.sum_to_size(sb) if c.needs_grad[1] else None)


def _solve_jvp(c, ta, tb):
    # A X = B:  A dX = dB - dA X
    a, x = c.inputs[0], c.outputs[0]
    rhs = tb
    if ta is not None:
        rhs = -(ta @ x) if rhs is None else rhs - ta @ x
    return (c.bind("solve", a, rhs, check=c.params.get("check", True)),)


register(OpDef("solve", "linalg", _solve_rule, _solve_impl, _solve_vjp, saves_in=(0,), saves_out=(0,), jvp=_solve_jvp,
               grad_name="LinalgSolveExBackward0", doc="X with A X = B (LAPACK gesv), batches broadcast."))


# ---- solve_triangular: A X = B with A triangular (the right-hand form is transposed by the caller) -----------

def _tri_rule(avals, params):
    a, b = avals
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"solve_triangular: A must be batches of square matrices, but got shape {fmt_shape(a.shape)}")
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise OpError(f"solve_triangular: incompatible shapes of A and B for the equation AX = B "
                      f"({fmt_shape(a.shape)} and {fmt_shape(b.shape)})")
    if a.dtype is not b.dtype or not a.dtype.is_floating_point:
        raise OpError(f"solve_triangular: expected A and B of one floating point dtype, got {a.dtype.name} and "
                      f"{b.dtype.name}")
    batch = broadcast_shapes("solve_triangular", [a.shape[:-2], b.shape[:-2]])
    return [Aval(batch + b.shape[-2:], a.dtype)]


def _tri_impl(a, b, upper, unitriangular=False):
    from scipy.linalg import solve_triangular
    a, b = _broadcast_pair(a, b)
    out = np.empty(b.shape, a.dtype)
    if out.size == 0:
        return out
    for idx in np.ndindex(*a.shape[:-2]):
        try:
            out[idx] = solve_triangular(a[idx], b[idx], lower=not upper, unit_diagonal=unitriangular,
                                        check_finite=False)
        except np.linalg.LinAlgError:       # a zero on the diagonal: torch's trtrs gives inf/nan, no error
            out[idx] = np.nan
    return out


def _tri_vjp(c, g):
    # torch: gB = A^{-T} g (the other triangle), gA = -(gB X^T) restricted to A's triangle (strict if unit)
    a, x = c.inputs[0], c.outputs[0]
    sa, sb = c.shapes
    up, unit = c.params["upper"], c.params.get("unitriangular", False)
    gb = c.bind("solve_triangular", mT(a), g, upper=not up, unitriangular=unit)
    ga = None
    if c.needs_grad[0]:
        ga = -(gb @ mT(x))
        ga = (ga.triu(1 if unit else 0) if up else ga.tril(-1 if unit else 0)).sum_to_size(sa)
    return ga, gb.sum_to_size(sb) if c.needs_grad[1] else None


register(OpDef("solve_triangular", "linalg", _tri_rule, _tri_impl, _tri_vjp, saves_in=(0,), saves_out=(0,),
               grad_name="LinalgSolveTriangularBackward0", jvp=BY_TRANSPOSE,
               doc="X with A X = B for triangular A (LAPACK trtrs), reading one triangle of A."))


# ---- det and slogdet -------------------------------------------------------------------------------------

def _det_rule(avals, params):
    (a,) = square_rule("det")(avals, params)
    return [Aval(a.shape[:-2], a.dtype)]


def _det_impl(a):
    return np.asarray(np.linalg.det(a), a.dtype)


def _det_vjp(c, g):
    # gA = g * cofactor(A), the cofactor from the SVD A = U diag(s) Vh: det(U) det(Vh) U diag(prod_{j != i} s_j) Vh,
    # defined at singular A too (where det(A) A^{-T} is not), as torch's SVD branch for singular inputs
    a = c.inputs[0]
    n = c.shapes[0][-1]
    if n == 0:
        return (a * 0.0,)
    u, s, vh = svd_parts(c.bind("svd", a, full_matrices=False), n, n, False)
    sign = c.bind("slogdet", u.detach())[..., 0] * c.bind("slogdet", vh.detach())[..., 0]
    off = eye_like(a, n) == 0
    others = s.unsqueeze(-2).expand(s.shape[:-1] + (n, n)).where(off, 1.0).prod(-1)
    return (((u * others.unsqueeze(-2)) @ vh) * (g * sign).unsqueeze(-1).unsqueeze(-1),)


register(OpDef("det", "linalg", _det_rule, _det_impl, _det_vjp, saves_in=(0,), grad_name="LinalgDetBackward0", jvp=BY_TRANSPOSE,
               doc="The determinant of square matrices (LAPACK getrf)."))


def _slogdet_rule(avals, params):
    (a,) = square_rule("slogdet")(avals, params)
    return [Aval(a.shape[:-2] + (2,), a.dtype)]


def _slogdet_impl(a):
    sign, logabs = np.linalg.slogdet(a)
    return np.stack([sign, logabs], axis=-1).astype(a.dtype, copy=False)


def _slogdet_vjp(c, g):
    # (sign, logabsdet) packed on the last axis; only logabsdet has a derivative: g * A^{-T}
    a = c.inputs[0]
    return (mT(c.bind("inv", a, check=False)) * g[..., 1].unsqueeze(-1).unsqueeze(-1),)


register(OpDef("slogdet", "linalg", _slogdet_rule, _slogdet_impl, _slogdet_vjp, saves_in=(0,),
               grad_name="LinalgSlogdetBackward0", jvp=BY_TRANSPOSE,
               doc="sign and log|det| of square matrices, packed on a last axis of 2."))


# ---- pinv ------------------------------------------------------------------------------------------------

def _pinv_rule(avals, params):
    (a,) = avals
    if a.ndim < 2 or not a.dtype.is_floating_point:
        raise OpError(f"pinv: expected a floating point tensor with 2 or more dimensions, got "
                      f"{a.dtype.name}{fmt_shape(a.shape)}")
    return [Aval(a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype)]


def _pinv_impl(a, rtol, atol, hermitian=False):
    m, n = a.shape[-2:]
    if a.size == 0:
        return np.zeros(a.shape[:-2] + (n, m), a.dtype)
    if hermitian:
        w, v = np.linalg.eigh(a)
        s, smax = np.abs(w), np.abs(w).max(-1, keepdims=True)
    else:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        smax = s[..., :1]
    thr = np.maximum(atol, rtol * smax)
    keep = s > thr
    inv = np.where(keep, 1.0 / np.where(keep, s if not hermitian else w, 1.0), 0.0)
    if hermitian:
        return ((v * inv[..., None, :]) @ np.swapaxes(v, -1, -2)).astype(a.dtype, copy=False)
    return ((np.swapaxes(vh, -1, -2) * inv[..., None, :]) @ np.swapaxes(u, -1, -2)).astype(a.dtype, copy=False)


def _pinv_vjp(c, g):
    # torch's pinv_backward (Golub & Pereyra, constant rank):
    # gA = -P^T g P^T + (I - A P) g^T P P^T + P^T P g^T (I - P A)
    a, p = c.inputs[0], c.outputs[0]
    pt, gt = mT(p), mT(g)
    m, n = c.shapes[0][-2:]
    t1 = -(pt @ g @ pt)
    t2 = (eye_like(a, m) - a @ p) @ (gt @ (p @ pt))
    t3 = (pt @ p) @ (gt @ (eye_like(a, n) - p @ a))
    return (t1 + t2 + t3,)


register(OpDef("pinv", "linalg", _pinv_rule, _pinv_impl, _pinv_vjp, saves_in=(0,), saves_out=(0,),
               grad_name="LinalgPinvBackward0", jvp=BY_TRANSPOSE,
               doc="The Moore-Penrose pseudo-inverse (SVD, or eigh with hermitian=True); singular values at or "
                   "below max(atol, rtol * largest) count as zero."))


# ---- linalg_info: getrf's / potrf's info code per matrix (not differentiable) -----------------------------

def _info_rule(avals, params):
    (a,) = square_rule("linalg_info")(avals, params)
    from .. import dtypes as dt
    return [Aval(a.shape[:-2], dt.int32)]


register(OpDef("linalg_info", "linalg", _info_rule, lambda a, kind: lapack_info(a, kind), None,
               doc="LAPACK's info code of each matrix: getrf's (kind='lu') or potrf's (kind='cholesky')."))


def svd_parts(packed, m, n, full_matrices):
    """(U, S, Vh) sliced out of the packed ``svd`` output (``factorizations.py``)."""
    k = min(m, n)
    uc = m if full_matrices else k
    vr = n if full_matrices else k
    return packed[..., :m, :uc], packed[..., m, :k], packed[..., m + 1:m + 1 + vr, :n]
