"""Matrix factorisations (``jitgrad.linalg``): ``cholesky``, ``qr``, ``svd`` (``eigh`` is in ``linalg.py``).

A primitive has one output, so ``qr`` and ``svd`` pack theirs into one array of rows (zero-padded to a common
width) that the public functions slice apart; slicing is differentiable, so the cotangents of the parts arrive
here as one packed cotangent.  The vjps are torch's formulas (``FunctionsManual.cpp``) written with jitgrad ops,
so they differentiate again.
"""
from __future__ import annotations

import numpy as np

from .opdef import BY_TRANSPOSE, Aval, OpDef, OpError, fmt_shape, register
from .solvers import LinAlgError, eye_like, lapack_info, mT, raise_failure, square_rule, svd_parts


# ---- cholesky: lower L with A = L L^T, reading A's lower triangle ----------------------------------------

def _chol_impl(a, check=True):
    try:
        return np.linalg.cholesky(a).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        if check:
            raise_failure("linalg.cholesky", a, "cholesky", "The factorization could not be completed because the "
                          "input is not positive-definite (the leading minor of order {} is not positive-definite).")
    ok = lapack_info(a, "cholesky") == 0
    out = np.full(a.shape, np.nan, a.dtype)
    if ok.any():
        out[ok] = np.linalg.cholesky(a[ok])
    return out


def _chol_vjp(c, g):
    # torch's cholesky_backward (Murray 2016): P = Phi(L^T gL); gA = L^{-T} P L^{-1}, symmetric
    lo = c.outputs[0]
    p = (mT(lo) @ g).tril()
    p = (p + mT(p.tril(-1))) * 0.5
    x = c.bind("solve_triangular", mT(lo), p, upper=True, unitriangular=False)        # L^{-T} P
    # X L^{-1} = (L^{-T} X^T)^T
    return (mT(c.bind("solve_triangular", mT(lo), mT(x), upper=True, unitriangular=False)),)


register(OpDef("cholesky", "linalg", square_rule("cholesky"), _chol_impl, _chol_vjp, saves_out=(0,), jvp=BY_TRANSPOSE,
               grad_name="LinalgCholeskyExBackward0", doc="The lower Cholesky factor (LAPACK potrf)."))


# ---- qr ------------------------------------------------------------------------------------------------
# packed: rows [0, qrows) hold Q (m x qcols, padded), rows [qrows, qrows + rrows) hold R; width max(qcols, n).

def qr_layout(m, n, mode):
    """(qrows, qcols, rrows, width) of the packed ``qr`` output."""
    k = min(m, n)
    qcols = m if mode == "complete" else k
    qrows = 0 if mode == "r" else m
    rrows = m if mode == "complete" else k
    return qrows, qcols, rrows, max(qcols, n)


def _qr_rule(avals, params):
    (a,) = avals
    if a.ndim < 2:
        raise OpError(f"qr: The input tensor A must have at least 2 dimensions, got shape {fmt_shape(a.shape)}")
    if not a.dtype.is_floating_point:
        raise OpError(f"qr: expected a floating point tensor as input, got {a.dtype.name}")
    m, n = a.shape[-2:]
    qrows, _, rrows, w = qr_layout(m, n, params["mode"])
    return [Aval(a.shape[:-2] + (qrows + rrows, w), a.dtype)]


def _qr_impl(a, mode):
    m, n = a.shape[-2:]
    qrows, qcols, rrows, w = qr_layout(m, n, mode)
    out = np.zeros(a.shape[:-2] + (qrows + rrows, w), a.dtype)
    if a.size == 0:
        if mode == "complete" and qrows:
            out[..., :m, :m] = np.eye(m)
        return out
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
    else:
        q, r = np.linalg.qr(a, mode=mode)
        out[..., :m, :qcols] = q
    out[..., qrows:, :n] = r
    return out


def _qr_back_tall(c, q, r, gq, gr):
    """m >= n (R square): gA = (gQ + Q copyltu(M)) R^{-T} with M = R gR^T - gQ^T Q."""
    mm = r @ mT(gr) - mT(gq) @ q
    b = gq + q @ (mm.tril() + mT(mm.tril(-1)))
    return mT(c.bind("solve_triangular", r, mT(b), upper=True, unitriangular=False))


def _qr_vjp(c, g):
    mode = c.params["mode"]
    m, n = c.shapes[0][-2:]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please "
                           "use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    qrows, qcols, rrows, _ = qr_layout(m, n, mode)
    p = c.outputs[0]
    q, r = p[..., :m, :qcols], p[..., qrows:, :n]
    gq, gr = g[..., :m, :qcols], g[..., qrows:, :n]
    if m >= n:
        return (_qr_back_tall(c, q, r, gq, gr),)
    # m < n: A = [X | Y], R = [U | V] with X = Q U square; gY = Q gV, gX from the square case with gQ + Y gV^T
    u, v, gu, gv = r[..., :m], r[..., m:], gr[..., :m], gr[..., m:]
    y = q @ v
    gx = _qr_back_tall(c, q, u, gq + y @ mT(gv), gu)
    from_y = q @ gv     # (A's batch dims: the cat below joins along the last axis)
    return (c.bind("cat", gx, from_y, axis=gx.ndim - 1),)


register(OpDef("qr", "linalg", _qr_rule, _qr_impl, _qr_vjp, saves_out=(0,), grad_name="LinalgQrBackward0", jvp=BY_TRANSPOSE,
               doc="Q and R of the QR decomposition (LAPACK geqrf/orgqr), packed by rows."))


# ---- svd ------------------------------------------------------------------------------------------------
# packed: rows [0, m) U (padded), row m the singular values (descending), rows m+1.. Vh; width max(ucols, n).

def _svd_rule(avals, params):
    (a,) = avals
    if a.ndim < 2:
        raise OpError(f"svd: The input tensor A must have at least 2 dimensions, got shape {fmt_shape(a.shape)}")
    if not a.dtype.is_floating_point:
        raise OpError(f"svd: expected a floating point tensor as input, got {a.dtype.name}")
    m, n = a.shape[-2:]
    full = params["full_matrices"]
    k = min(m, n)
    rows = m + 1 + (n if full else k)
    return [Aval(a.shape[:-2] + (rows, max(m if full else k, n, 1)), a.dtype)]     # the impl pads the same way


def _svd_impl(a, full_matrices):
    m, n = a.shape[-2:]
    k = min(m, n)
    uc, vr = (m, n) if full_matrices else (k, k)
    out = np.zeros(a.shape[:-2] + (m + 1 + vr, max(uc, n, 1)), a.dtype)
    if a.size == 0:
        out[..., :m, :uc] = np.eye(m, uc)
        out[..., m + 1:, :n] = np.eye(vr, n)
        return out
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    out[..., :m, :uc] = u
    out[..., m, :k] = s
    out[..., m + 1:, :n] = vh
    return out


def _svd_vjp(c, g):
    # torch's svd_backward, with U and Vh narrowed to k columns / rows for full_matrices (as torch does):
    # gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)] Vh + the terms outside the spans of U and V
    m, n = c.shapes[0][-2:]
    k = min(m, n)
    full = c.params["full_matrices"]
    u, s, vh = svd_parts(c.outputs[0], m, n, full)
    gu, gs, gvh = svd_parts(g, m, n, full)
    u, vh, gu, gvh = u[..., :k], vh[..., :k, :], gu[..., :k], gvh[..., :k, :]
    v, gv = mT(vh), mT(gvh)
    s2 = s * s
    gap = s2.unsqueeze(-2) - s2.unsqueeze(-1)       # E_ij = s_j^2 - s_i^2
    nonzero = gap != 0
    f = gap.where(nonzero, 1.0).reciprocal().where(nonzero, 0.0)
    uhgu = mT(u) @ gu
    vhgv = vh @ gv
    inner = ((uhgu - mT(uhgu)) * s.unsqueeze(-2) + s.unsqueeze(-1) * (vhgv - mT(vhgv))) * f
    inner = inner + gs.unsqueeze(-1) * eye_like(s, k)
    if m > n:
        gusinv = gu / s.unsqueeze(-2)
        ga = u @ inner + gusinv - u @ (mT(u) @ gusinv)
        return (ga @ vh,)
    if m < n:
        gvsinv = gv / s.unsqueeze(-2)
        ga = inner @ vh + mT(gvsinv) - (mT(gvsinv) @ v) @ vh
        return (u @ ga,)
    return (u @ inner @ vh,)


register(OpDef("svd", "linalg", _svd_rule, _svd_impl, _svd_vjp, saves_out=(0,), grad_name="LinalgSvdBackward0", jvp=BY_TRANSPOSE,
               doc="U, S, Vh of the singular value decomposition (LAPACK gesdd), packed by rows."))

__all__ = ["LinAlgError", "qr_layout"]
