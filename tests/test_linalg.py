"""``jitgrad.linalg`` and the torch-level names for it (torch.det, torch.svd, Tensor.inverse ...): values, shapes and
dtypes against torch (float32 and float64, batched), gradients and Hessian-vector products against torch, gradcheck
and gradgradcheck in float64, eager against compiled (interpreter and Numba).  QR, SVD and eigenvectors are defined
up to signs, so those cases compare sign-invariant quantities (products, squares, reconstructions).
Errors and the ``*_ex`` / ``lstsq`` result fields are in tests/test_linalg_errors.py."""
import math

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def gen(*shape):
    """Well conditioned: square matrices get 3 I added."""
    a = RNG.standard_normal(shape)
    return a + 3 * np.eye(shape[-1]) if len(shape) >= 2 and shape[-1] == shape[-2] else a


def spd(*shape):
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def sym(x):
    return (x + x.mT) / 2


def _qr_inv(m, a, mode="reduced"):
    q, r = m.linalg.qr(a, mode=mode)
    return q * q, r * r, q @ r


def _svd_inv(m, a, full=False):
    u, s, vh = m.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    return u[..., :k] * u[..., :k], s, vh[..., :k, :] * vh[..., :k, :], (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :]


def _cond(m, a, p):
    """torch 2.13's linalg.cond for p not in (None, 2, -2) fails in backward (it inverts in place a value its
    graph saved): its definition, written out, is the reference."""
    if m is jg:
        return m.linalg.cond(a, p)
    return m.linalg.matrix_norm(a, p) * m.linalg.matrix_norm(m.linalg.inv(a), p)


INF = math.inf
# name: (fn(m, *tensors), inputs); every entry is differentiable and well conditioned
CASES = {
    "det": (lambda m, a: m.linalg.det(a), [gen(2, 3, 3)]),
    "slogdet": (lambda m, a: m.linalg.slogdet(a), [gen(2, 3, 3)]),
    "logdet": (lambda m, a: m.logdet(a @ a.mT), [gen(3, 3)]),
    "inv": (lambda m, a: m.linalg.inv(a), [gen(2, 3, 3)]),
    "solve": (lambda m, a, b: m.linalg.solve(a, b), [gen(2, 3, 3), gen(3, 2)]),
    "solve_vector": (lambda m, a, b: m.linalg.solve(a, b), [gen(2, 3, 3), gen(2, 3)]),
    "solve_right": (lambda m, a, b: m.linalg.solve(a, b, left=False), [gen(3, 3), gen(2, 2, 3)]),
    "solve_triangular": (lambda m, a, b: m.linalg.solve_triangular(a, b, upper=True), [gen(2, 3, 3), gen(3, 2)]),
    "solve_triangular_right_unit": (
        lambda m, a, b: m.linalg.solve_triangular(a, b, upper=False, left=False, unitriangular=True),
        [gen(3, 3), gen(2, 3)]),
    "cholesky": (lambda m, a: m.linalg.cholesky(sym(a)), [spd(2, 3, 3)]),
    "cholesky_upper": (lambda m, a: m.linalg.cholesky(sym(a), upper=True), [spd(3, 3)]),
    "qr_tall": (lambda m, a: _qr_inv(m, a), [gen(2, 4, 3)]),
    "qr_wide": (lambda m, a: _qr_inv(m, a), [gen(3, 5)]),
    "qr_complete_wide": (lambda m, a: _qr_inv(m, a, "complete"), [gen(2, 4)]),
    "svd_tall": (lambda m, a: _svd_inv(m, a), [gen(2, 4, 3)]),
    "svd_wide": (lambda m, a: _svd_inv(m, a), [gen(3, 5)]),
    "svd_full": (lambda m, a: _svd_inv(m, a, True), [gen(4, 3)]),
    "svdvals": (lambda m, a: m.linalg.svdvals(a), [gen(2, 3, 4)]),
    "eigh": (lambda m, a: (lambda w, v: (w, v * v))(*m.linalg.eigh(sym(a))), [spd(2, 3, 3)]),
    "eigh_upper": (lambda m, a: (lambda w, v: (w, v * v))(*m.linalg.eigh(a.triu() + a.triu(1).mT, UPLO="U")),
                   [spd(3, 3)]),
    "eigvalsh": (lambda m, a: m.linalg.eigvalsh(sym(a), UPLO="U"), [spd(3, 3)]),
    "pinv": (lambda m, a: m.linalg.pinv(a), [gen(2, 4, 3)]),
    "pinv_wide_rtol": (lambda m, a: m.linalg.pinv(a, rtol=1e-3), [gen(3, 5)]),
    "pinv_hermitian": (lambda m, a: m.linalg.pinv(sym(a), hermitian=True), [gen(3, 3)]),
    "lstsq": (lambda m, a, b: m.linalg.lstsq(a, b).solution, [gen(2, 5, 3), gen(2, 5, 2)]),
    "lstsq_vector": (lambda m, a, b: m.linalg.lstsq(a, b).solution, [gen(5, 3), gen(5)]),
    "matrix_power": (lambda m, a: (m.linalg.matrix_power(a, 3), m.linalg.matrix_power(a, -2),
                                   m.linalg.matrix_power(a, 0) * a), [gen(2, 3, 3)]),
    "matrix_norm": (lambda m, a: tuple(m.linalg.matrix_norm(a, o) for o in ("fro", "nuc", 1, -1, 2, -2, INF, -INF)),
                    [gen(2, 3, 4)]),
    "matrix_norm_dim_keepdim": (lambda m, a: tuple(m.linalg.matrix_norm(a, o, dim=(2, 0), keepdim=True)
                                                   for o in ("fro", "nuc", 1, -INF)), [gen(3, 2, 4)]),
    "norm": (lambda m, a: (m.linalg.norm(a), m.linalg.norm(a, dim=1), m.linalg.norm(a, 3, dim=(0, 2)[:1]),
                           m.linalg.norm(a[0], 2), m.linalg.norm(a[0, 0], -INF), m.linalg.norm(a, "nuc", (1, 2))),
             [gen(2, 3, 4)]),
    "vector_norm": (lambda m, a: tuple(m.linalg.vector_norm(a, o, dim=(0, 2), keepdim=k)
                                       for o, k in ((2, False), (1, True), (3.5, False), (INF, True), (-INF, False))),
                    [gen(2, 3, 4)]),
    "cond": (lambda m, a: (m.linalg.cond(a), m.linalg.cond(a, -2), _cond(m, a, 1), _cond(m, a, "nuc")),
             [gen(2, 3, 3)]),
    "matrix_exp": (lambda m, a: (m.linalg.matrix_exp(a * 0.3), m.linalg.matrix_exp(a * 1.5)), [gen(2, 3, 3)]),
    "multi_dot": (lambda m, a, b, c: (m.linalg.multi_dot([a[0], b, c]), m.linalg.multi_dot([a, b, c[:, 0]])),
                  [gen(2, 3), gen(3, 4), gen(4, 2)]),
    "cross_vecdot_diagonal": (lambda m, a, b: (m.linalg.cross(a, b), m.linalg.vecdot(a, b),
                                               m.linalg.diagonal(a.reshape(2, 3, 1) * b.reshape(2, 1, 3), offset=1)),
                              [gen(2, 3), gen(2, 3)]),
    "cholesky_solve_inverse": (lambda m, a, b: (lambda L: (m.cholesky_solve(b, L), m.cholesky_inverse(L),
                                                           m.cholesky_solve(b, L.mT, upper=True)))(
        m.linalg.cholesky(sym(a))), [spd(3, 3), gen(3, 2)]),
    "torch_level": (lambda m, a: (m.det(a), m.inverse(a), m.pinverse(a), m.matrix_power(a, 2), m.slogdet(a)[1],
                                  m.cholesky(a @ a.mT), m.cholesky(a @ a.mT, upper=True)), [gen(2, 3, 3)]),
    "tensor_methods": (lambda m, a: (a.det(), a.logdet() * 0 + a.slogdet()[1], a.inverse(), a.pinverse(),
                                     a.matrix_power(-1), (a @ a.mT).cholesky(), a.matrix_exp() * 0.1), [gen(3, 3)]),
    "torch_svd_qr": (lambda m, a: (lambda usv, qr: (usv[0] * usv[0], usv[1], usv[2] * usv[2],
                                                    (usv[0] * usv[1].unsqueeze(-2)) @ usv[2].mT, qr[0] @ qr[1],
                                                    qr[1] * qr[1]))(m.svd(a), m.qr(a)), [gen(2, 4, 3)]),
    "torch_svd_not_some": (lambda m, a: (lambda u, s, v: (u[..., :3] * u[..., :3], s, v * v))(*a.svd(some=False)),
                           [gen(4, 3)]),
}


def _flat(out):
    return [o for x in out for o in _flat(x)] if isinstance(out, (tuple, list)) else [out]


def _run(m, fn, arrays, w, v):
    """Outputs, gradient of sum(out * w), and Hessian-vector product along v, with module m."""
    xs = [m.tensor(a, requires_grad=True) for a in arrays]
    outs = _flat(fn(m, *xs))
    loss = sum((o * m.tensor(wi)).sum() for o, wi in zip(outs, w) if o.requires_grad)
    gs = m.autograd.grad(loss, xs, create_graph=True)
    hv = sum((g * m.tensor(vi)).sum() for g, vi in zip(gs, v) if g.requires_grad)
    hs = m.autograd.grad(hv, xs, allow_unused=True) if isinstance(hv, (jg.Tensor, torch.Tensor)) else [None] * len(xs)
    return outs, gs, [m.zeros_like(x) if h is None else h for h, x in zip(hs, xs)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_hessian_products_match_torch(name):
    fn, arrays = CASES[name]
    with torch.no_grad():
        touts = _flat(fn(torch, *[torch.tensor(a) for a in arrays]))
    rng = np.random.default_rng(1)
    w = [rng.standard_normal(tuple(o.shape)) for o in touts]
    v = [rng.standard_normal(a.shape) for a in arrays]
    jo, jgr, jh = _run(jg, fn, arrays, w, v)
    to, tgr, th = _run(torch, fn, arrays, w, v)
    assert len(jo) == len(to)
    for a, b in zip(jo, to):
        assert tuple(a.shape) == tuple(b.shape) and a.dtype.name == str(b.dtype).split(".")[1]
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-10)
    for a, b in zip(list(jgr) + list(jh), list(tgr) + list(th)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_stays_float32(name):
    fn, arrays = CASES[name]
    jo = _flat(fn(jg, *[jg.tensor(a, dtype=jg.float32) for a in arrays]))
    to = _flat(fn(torch, *[torch.tensor(a, dtype=torch.float32) for a in arrays]))
    for a, b in zip(jo, to):
        assert a.dtype == jg.float32 and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-3, atol=2e-3)


GRADCHECK = ["det", "slogdet", "inv", "solve", "solve_right", "solve_triangular", "solve_triangular_right_unit",
             "cholesky", "cholesky_upper", "qr_tall", "qr_wide", "svd_tall", "svd_wide", "svd_full", "eigh",
             "pinv", "pinv_hermitian", "lstsq", "matrix_power", "matrix_norm", "cond", "matrix_exp",
             "cholesky_solve_inverse", "torch_svd_qr"]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_and_gradgradcheck(name):
    fn, arrays = CASES[name]
    xs = tuple(jg.tensor(a, requires_grad=True) for a in arrays)
    f = (lambda *x: fn(jg, *x))
    assert gradcheck(f, xs)
    assert gradgradcheck(f, xs)


def _program(a, b, s):
    """Many linalg functions in one step function (forward and backward)."""
    L = jg.linalg.cholesky(s)
    q, r = jg.linalg.qr(a)
    u, sv, vh = jg.linalg.svd(a, full_matrices=False)
    w, vecs = jg.linalg.eigh(s)
    out = (jg.linalg.det(a).sum() + jg.linalg.slogdet(a).logabsdet.sum() + jg.linalg.inv(a).sum()
           + jg.linalg.solve(a, b).sum() + jg.linalg.solve_triangular(L, b, upper=False).sum()
           + (q @ r * r).sum() + sv.sum() + (((u * sv.unsqueeze(-2)) @ vh) ** 2).sum() + w.sum() + (vecs ** 4).sum()
           + jg.linalg.pinv(a).sum() + jg.linalg.matrix_norm(a, "nuc").sum() + jg.linalg.matrix_power(a, -2).sum()
           + jg.linalg.lstsq(a, b.expand(2, 3, 2)).solution.sum() + jg.linalg.matrix_exp(a * 0.1).sum() + jg.cholesky_inverse(L).sum())
    out.backward()
    return out, a.grad, b.grad, s.grad


@pytest.mark.parametrize("backend", ["interpret", None])
def test_compiled_matches_eager(backend):
    arrays = [gen(2, 3, 3), gen(3, 2), spd(2, 3, 3)]

    def run(fn):
        xs = [jg.tensor(x, requires_grad=True) for x in arrays]
        return [t.detach().numpy() for t in fn(*xs)]
    want = run(_program)
    f = jg.compile(_program, backend=backend) if backend else jg.compile(_program)
    for _ in range(2):      # the second call reuses the compiled function
        for got, exp in zip(run(f), want):
            np.testing.assert_allclose(got, exp, rtol=1e-10, atol=1e-12)


def test_compiled_graph_has_the_primitives():
    f = jg.compile(lambda a: jg.linalg.inv(a) + jg.linalg.cholesky(a @ a.mT), backend="interpret")
    a = jg.tensor(gen(3, 3))
    np.testing.assert_allclose(f(a).numpy(), (jg.linalg.inv(a) + jg.linalg.cholesky(a @ a.mT)).numpy())


def test_matrix_rank_and_cond_values():
    a = np.stack([gen(4, 3), np.outer(gen(4), gen(3))])
    for kw in ({}, {"atol": 0.5}, {"rtol": 0.3}, {"atol": 0.1, "rtol": 0.01}):
        got = jg.linalg.matrix_rank(jg.tensor(a), **kw)
        want = torch.linalg.matrix_rank(torch.tensor(a), **kw)
        assert got.dtype == jg.int64 and got.tolist() == want.tolist()
    s = spd(3, 3)
    assert jg.linalg.matrix_rank(jg.tensor(s), hermitian=True).item() == 3


def test_lstsq_fields_match_torch_for_each_driver():
    a, b = gen(2, 5, 3), gen(2, 5, 2)
    for driver in (None, "gels", "gelsy", "gelsd", "gelss"):
        got = jg.linalg.lstsq(jg.tensor(a), jg.tensor(b), driver=driver)
        want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
        assert got._fields == ("solution", "residuals", "rank", "singular_values")
        for x, y in zip(got, [getattr(want, f) for f in got._fields]):
            assert tuple(x.shape) == tuple(y.shape) and x.dtype.name == str(y.dtype).split(".")[1], (driver, x, y)
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-9, atol=1e-10)


def test_result_types_and_empty_q_of_mode_r():
    a = jg.tensor(gen(4, 3))
    assert jg.linalg.qr(a)._fields == ("Q", "R") and jg.linalg.svd(a)._fields == ("U", "S", "Vh")
    assert jg.svd(a)._fields == ("U", "S", "V") and jg.linalg.eigh(a[:3])._fields == ("eigenvalues", "eigenvectors")
    assert jg.linalg.slogdet(a[:3])._fields == ("sign", "logabsdet")
    q, r = jg.linalg.qr(a, mode="r")
    tq, tr = torch.linalg.qr(torch.tensor(a.numpy()), mode="r")
    assert tuple(q.shape) == tuple(tq.shape) == (0,)
    np.testing.assert_allclose(np.abs(r.numpy()), np.abs(tr.numpy()), atol=1e-12)
    u, s, v = jg.svd(a, compute_uv=False)
    tu, ts, tv = torch.svd(torch.tensor(a.numpy()), compute_uv=False)
    assert u.shape == tu.shape and v.shape == tv.shape and not u.numpy().any()
    np.testing.assert_allclose(s.numpy(), ts.numpy())
    sign, _ = jg.linalg.slogdet(jg.tensor(gen(3, 3), requires_grad=True))
    assert not sign.requires_grad


def test_empty_matrices():
    for m in (jg, torch):
        e = m.zeros(2, 0, 0, dtype=m.float64)
        assert m.linalg.det(e).tolist() == [1.0, 1.0]
        assert tuple(m.linalg.inv(e).shape) == (2, 0, 0)
        assert tuple(m.linalg.svdvals(m.zeros(0, 3, dtype=m.float64)).shape) == (0,)


def test_matrix_exp_of_a_large_norm_inside_compile_matches_torch():
    # the number of squarings depends on the values: a primitive (a host step when compiled), not a traced
    # composition with a count fixed before the values exist (which lost accuracy past 1-norms of ~1400)
    a = np.random.default_rng(7).standard_normal((2, 4, 4))
    a = a - a.transpose(0, 2, 1)            # skew-symmetric: exp is a rotation, finite for any norm
    a *= 2000.0
    want = torch.linalg.matrix_exp(torch.tensor(a)).numpy()
    got = jg.compile(lambda x: jg.linalg.matrix_exp(x))(jg.tensor(a)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-8)
    np.testing.assert_allclose(got @ got.transpose(0, 2, 1), np.broadcast_to(np.eye(4), (2, 4, 4)), atol=1e-8)
