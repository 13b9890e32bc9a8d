"""``jitgrad.linalg``'s errors against torch's (exception type and message): non-square and low-rank inputs, integer
dtypes, bad arguments, and ``LinAlgError`` for singular matrices (inv, solve) and matrices that are not
positive-definite (cholesky), batched (torch names the batch element); the ``*_ex`` forms' info codes."""
import math

import numpy as np
import pytest

import jitgrad as jg

torch = pytest.importorskip("torch")

SQ = np.array([[1.0, 2.0], [3.0, 4.0]])
SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])
BATCH_SINGULAR = np.stack([np.eye(2), SINGULAR])
NOT_PD = np.stack([np.eye(3), np.diag([1.0, -1.0, 1.0])])
RECT = np.ones((2, 3))
VEC = np.ones(3)
INT = np.ones((3, 3), np.int64)

# (label, fn(m, x), input)
ERRORS = [
    ("inv nonsquare", lambda m, x: m.linalg.inv(x), RECT),
    ("inv 1-D", lambda m, x: m.linalg.inv(x), VEC),
    ("inv int", lambda m, x: m.linalg.inv(x), INT),
    ("inv singular", lambda m, x: m.linalg.inv(x), SINGULAR),
    ("inv batch singular", lambda m, x: m.linalg.inv(x), BATCH_SINGULAR),
    ("inverse singular", lambda m, x: m.inverse(x), SINGULAR),
    ("inv_ex check_errors", lambda m, x: m.linalg.inv_ex(x, check_errors=True), BATCH_SINGULAR),
    ("matrix_power -1 singular", lambda m, x: m.linalg.matrix_power(x, -1), BATCH_SINGULAR),
    ("matrix_power nonsquare", lambda m, x: m.linalg.matrix_power(x, 2), RECT),
    ("matrix_power float n", lambda m, x: m.linalg.matrix_power(x, 1.5), SQ),
    ("det nonsquare", lambda m, x: m.linalg.det(x), RECT),
    ("det int", lambda m, x: m.linalg.det(x), INT),
    ("det 1-D", lambda m, x: m.linalg.det(x), VEC),
    ("slogdet nonsquare", lambda m, x: m.linalg.slogdet(x), RECT),
    ("logdet int", lambda m, x: m.logdet(x), INT),
    ("solve singular", lambda m, x: m.linalg.solve(x, m.ones(2, 1, dtype=x.dtype)), SINGULAR),
    ("solve batch singular", lambda m, x: m.linalg.solve(x, m.ones(2, 1, dtype=x.dtype)), BATCH_SINGULAR),
    ("solve dtypes", lambda m, x: m.linalg.solve(x.float(), x), SQ),
    ("solve nonsquare", lambda m, x: m.linalg.solve(x, x), RECT),
    ("solve shapes", lambda m, x: m.linalg.solve(x, m.ones(3, 1, dtype=x.dtype)), SQ),
    ("solve right vector", lambda m, x: m.linalg.solve(x, m.ones(2, dtype=x.dtype), left=False), SQ),
    ("solve_ex check_errors", lambda m, x: m.linalg.solve_ex(x, x, check_errors=True), SINGULAR),
    ("solve_triangular 1-D B", lambda m, x: m.linalg.solve_triangular(x, m.ones(2, dtype=x.dtype), upper=True), SQ),
    ("solve_triangular nonsquare", lambda m, x: m.linalg.solve_triangular(x, x, upper=True), RECT),
    ("solve_triangular int", lambda m, x: m.linalg.solve_triangular(x, x, upper=True), INT),
    ("cholesky not pd", lambda m, x: m.linalg.cholesky(x), SINGULAR * -1),
    ("cholesky batch not pd", lambda m, x: m.linalg.cholesky(x), NOT_PD),
    ("cholesky upper not pd", lambda m, x: m.linalg.cholesky(x, upper=True), NOT_PD),
    ("cholesky_ex check_errors", lambda m, x: m.linalg.cholesky_ex(x, check_errors=True), NOT_PD),
    ("cholesky nonsquare", lambda m, x: m.linalg.cholesky(x), RECT),
    ("cholesky int", lambda m, x: m.linalg.cholesky(x), INT),
    ("qr int", lambda m, x: m.linalg.qr(x), INT),
    ("qr mode", lambda m, x: m.linalg.qr(x, mode="full"), SQ),
    ("svd 1-D", lambda m, x: m.linalg.svd(x), VEC),
    ("svd int", lambda m, x: m.linalg.svd(x), INT),
    ("svdvals int", lambda m, x: m.linalg.svdvals(x), INT),
    ("eigh nonsquare", lambda m, x: m.linalg.eigh(x), RECT),
    ("eigh int", lambda m, x: m.linalg.eigh(x), INT),
    ("eigh UPLO", lambda m, x: m.linalg.eigh(x, UPLO="X"), SQ),
    ("pinv int", lambda m, x: m.linalg.pinv(x), INT),
    ("lstsq driver", lambda m, x: m.linalg.lstsq(x, x, driver="gelsx"), SQ),
    ("lstsq int", lambda m, x: m.linalg.lstsq(x, x), INT),
    ("lstsq rows", lambda m, x: m.linalg.lstsq(x, m.ones(3, 1, dtype=x.dtype)), SQ),
    ("matrix_norm ord", lambda m, x: m.linalg.matrix_norm(x, 3), SQ),
    ("matrix_norm int", lambda m, x: m.linalg.matrix_norm(x), INT),
    ("norm ord 3-D", lambda m, x: m.linalg.norm(x.reshape(1, 1, 4), 2), SQ),
    ("vector_norm fro", lambda m, x: m.linalg.vector_norm(x, "fro"), SQ),
    ("vector_norm int", lambda m, x: m.linalg.vector_norm(x), INT),
    ("cond p=1 nonsquare", lambda m, x: m.linalg.cond(x, 1), RECT),
    ("matrix_rank int", lambda m, x: m.linalg.matrix_rank(x), INT),
    ("multi_dot one", lambda m, x: m.linalg.multi_dot([x]), SQ),
    ("multi_dot shapes", lambda m, x: m.linalg.multi_dot([x, x]), RECT),
    ("multi_dot 3-D", lambda m, x: m.linalg.multi_dot([x, x[None]]), SQ),
    ("multi_dot middle 1-D", lambda m, x: m.linalg.multi_dot([x, x[0], x]), SQ),
    ("cross length", lambda m, x: m.linalg.cross(x, x), SQ),
    ("matrix_exp nonsquare", lambda m, x: m.linalg.matrix_exp(x), RECT),
]


def _raised(m, fn, x):
    with pytest.raises(Exception) as info:
        fn(m, m.tensor(x))
    return info.value


@pytest.mark.parametrize("label,fn,x", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_torch(label, fn, x):
    want = _raised(torch, fn, x)
    got = _raised(jg, fn, x)
    assert str(got) == str(want)
    if isinstance(want, torch.linalg.LinAlgError):
        assert isinstance(got, jg.linalg.LinAlgError) and isinstance(got, RuntimeError)
    else:
        assert type(got).__name__ == type(want).__name__ or isinstance(got, type(want))


def test_linalg_error_is_a_runtime_error_in_the_namespace():
    assert issubclass(jg.linalg.LinAlgError, RuntimeError)
    assert jg.linalg.LinAlgError.__module__ == "jitgrad.linalg"


def test_singular_errors_in_compiled_code():
    f = jg.compile(lambda a: jg.linalg.inv(a) * 2.0, backend="interpret")
    with pytest.raises(jg.linalg.LinAlgError, match=r"\(Batch element 1\): The diagonal element 2 is zero"):
        f(jg.tensor(BATCH_SINGULAR))


def test_ex_forms_report_info_as_torch():
    for fn in (lambda m, x: m.linalg.inv_ex(x).info, lambda m, x: m.linalg.cholesky_ex(x).info,
               lambda m, x: m.linalg.solve_ex(x, m.ones(x.shape[:-1] + (1,), dtype=x.dtype)).info):
        for x in (BATCH_SINGULAR, NOT_PD, np.eye(3), SINGULAR):
            got, want = fn(jg, jg.tensor(x)), fn(torch, torch.tensor(x))
            assert got.dtype == jg.int32 and got.tolist() == want.tolist()
    r = jg.linalg.inv_ex(jg.tensor(BATCH_SINGULAR))
    assert np.isnan(r.inverse.numpy()[1]).all() and np.allclose(r.inverse.numpy()[0], np.eye(2))


def test_qr_mode_r_and_complete_tall_are_not_differentiable():
    for mode, text in (("r", "mode='r'"), ("complete", "mode='complete' and nrows > ncols")):
        for m in (jg, torch):
            a = m.tensor(np.ones((3, 2)) + np.eye(3, 2), requires_grad=True)
            with pytest.raises(RuntimeError, match=text):
                m.linalg.qr(a, mode=mode)[1].sum().backward()


def test_vector_norm_orders_match_torch():
    x = np.array([[0.0, -1.5, 2.0], [3.0, 0.0, -0.5]])
    for ord in (0, 1, 2, 0.5, -1, 3, math.inf, -math.inf):
        got = jg.linalg.vector_norm(jg.tensor(x), ord, dim=-1)
        want = torch.linalg.vector_norm(torch.tensor(x), ord, dim=-1)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_out_and_unknown_keywords():
    a = np.eye(3) * 2.0
    for m in (jg, torch):
        out = m.empty(3, 3, dtype=m.float64)
        assert m.linalg.inv(m.tensor(a), out=out) is out
        np.testing.assert_allclose(out.numpy(), np.eye(3) / 2)
    with pytest.raises(jg.UnsupportedError, match="argument 'foo' of linalg.det"):
        jg.linalg.det(jg.tensor(a), foo=1)
