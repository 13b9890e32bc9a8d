"""jitgrad.autograd.functional: vjp, jvp, jacobian, hessian, vhp, hvp.

Values are checked against closed forms; where PyTorch is importable, the whole result (nesting, tuple vs list
vs single tensor, shapes, values, requires_grad) is compared with torch.autograd.functional on the same inputs.
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import functional as F

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")
# torch's own vectorized/forward-mode functional code scripts helpers with the deprecated torch.jit.script
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")

RNG = np.random.default_rng(1234)
X = RNG.standard_normal((2, 3))
Y = RNG.standard_normal(3)


def J(a, rg=False):
    return jg.tensor(a, dtype=jg.float64, requires_grad=rg)


def npy(t):
    return t.detach().numpy()


# ---- closed forms ------------------------------------------------------------------------------

def test_vjp_closed_form_single():
    x = J(X)
    out, g = F.vjp(lambda a: a.exp().sum(1), x, J(np.array([1.0, 2.0])))
    np.testing.assert_allclose(npy(out), np.exp(X).sum(1))
    np.testing.assert_allclose(npy(g), np.exp(X) * np.array([[1.0], [2.0]]))
    assert isinstance(out, jg.Tensor) and isinstance(g, jg.Tensor)
    assert not out.requires_grad and not g.requires_grad


def test_vjp_scalar_output_v_none_and_tuple_inputs():
    x, y = J(X), J(Y)
    out, (gx, gy) = F.vjp(lambda a, b: (a * b).sum(), (x, y))
    np.testing.assert_allclose(npy(gx), np.broadcast_to(Y, X.shape))
    np.testing.assert_allclose(npy(gy), X.sum(0))


def test_vjp_does_not_touch_inputs_or_their_grad():
    x = J(X, rg=True)
    F.vjp(lambda a: (a * a).sum(), x)
    assert x.grad is None and x.is_leaf


def test_jvp_closed_form():
    x, v = J(X), J(np.ones((2, 3)))
    out, t = F.jvp(lambda a: a.sin(), x, v)
    np.testing.assert_allclose(npy(t), np.cos(X))
    out, (t1, t2) = F.jvp(lambda a, b: (a * b, (a * b).sum()), (J(X), J(Y)), (J(np.ones((2, 3))), J(np.zeros(3))))
    np.testing.assert_allclose(npy(t1), np.broadcast_to(Y, X.shape))
    np.testing.assert_allclose(npy(t2), Y.sum() * 2)


def test_jacobian_closed_forms():
    A = RNG.standard_normal((4, 3))
    jac = F.jacobian(lambda x: J(A) @ x, J(Y))
    np.testing.assert_allclose(npy(jac), A)
    jac = F.jacobian(lambda x: x.tanh(), J(X))
    assert jac.shape == (2, 3, 2, 3)
    expect = np.zeros((2, 3, 2, 3))
    for i in range(2):
        for j in range(3):
            expect[i, j, i, j] = 1 - np.tanh(X[i, j]) ** 2
    np.testing.assert_allclose(npy(jac), expect)


def test_jacobian_nesting_and_unused_input():
    (j00, j01), (j10, j11) = F.jacobian(lambda a, b: (a.sum(), a * 0 + 1), (J(X), J(Y)))
    assert j00.shape == (2, 3) and j01.shape == (3,) and j10.shape == (2, 3, 2, 3) and j11.shape == (2, 3, 3)
    np.testing.assert_allclose(npy(j00), np.ones((2, 3)))
    assert not np.any(npy(j01)) and not np.any(npy(j11))


def test_jacobian_zero_size_output():
    jac = F.jacobian(lambda a: a[:0], J(X))
    assert jac.shape == (0, 3, 2, 3) and jac.dtype is jg.float64


def test_hessian_closed_form():
    A = RNG.standard_normal((3, 3))
    A = A + A.T
    h = F.hessian(lambda x: x @ (J(A) @ x) * 0.5, J(Y))
    np.testing.assert_allclose(npy(h), A, atol=1e-12)
    (h00, h01), (h10, h11) = F.hessian(lambda a, b: (a * a).sum() * b.sum(), (J(Y), J(Y[:2])))
    np.testing.assert_allclose(npy(h00), 2 * Y[:2].sum() * np.eye(3))
    np.testing.assert_allclose(npy(h01), np.broadcast_to(2 * Y[:, None], (3, 2)))
    np.testing.assert_allclose(npy(h10), npy(h01).T)
    assert not np.any(npy(h11))


def test_vhp_hvp_closed_form():
    A = RNG.standard_normal((3, 3))
    v = RNG.standard_normal(3)
    f = lambda x: x @ (J(A) @ x)   # noqa: E731  H = A + A^T
    out, r = F.vhp(f, J(Y), J(v))
    np.testing.assert_allclose(npy(r), v @ (A + A.T))
    np.testing.assert_allclose(npy(out), Y @ A @ Y)
    out, r = F.hvp(f, J(Y), J(v))
    np.testing.assert_allclose(npy(r), (A + A.T) @ v)


def test_create_graph_allows_higher_order():
    x = J(Y, rg=True)
    _, g = F.vjp(lambda a: (a ** 3).sum(), x, create_graph=True)
    assert g.requires_grad
    (gg,) = jg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(npy(gg), 6 * Y)
    h = F.hessian(lambda a: (a ** 3).sum(), x, create_graph=True)
    assert h.requires_grad
    (d3,) = jg.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(npy(d3), 6 * np.ones(3))
    _, hv = F.hvp(lambda a: (a ** 4).sum(), x, J(np.ones(3)), create_graph=True)
    (d,) = jg.autograd.grad(hv.sum(), x)
    np.testing.assert_allclose(npy(d), 24 * Y)


def test_gradcheck_of_functional_results():
    x = J(Y, rg=True)
    assert jg.autograd.gradcheck(lambda a: F.jacobian(lambda b: b.sin() * b.sum(), a, create_graph=True), (x,))
    assert jg.autograd.gradcheck(lambda a: F.hvp(lambda b: (b.exp() * b).sum(), a, J(np.ones(3)),
                                                 create_graph=True)[1], (x,))


# ---- argument checking and strict mode (torch's messages) ------------------------------------------

def test_v_validation_errors():
    x = J(X)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the user-provided function returns"):
        F.vjp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="The given v should contain a single Tensor"):
        F.vjp(lambda a: a * 2, x, (J(X), J(X)))
    with pytest.raises(RuntimeError, match=r"v has invalid size: should be jitgrad.Size\(\[2, 3\]\) but got"):
        F.vjp(lambda a: a * 2, x, J(Y))
    with pytest.raises(RuntimeError, match="v is a tuple of invalid length: should be 2 but got 1"):
        F.jvp(lambda a, b: a * 2, (x, J(Y)), (J(X),))
    with pytest.raises(RuntimeError, match="Entry 1 in v has invalid size"):
        F.jvp(lambda a, b: a * 2, (x, J(Y)), (J(X), J(X)))
    with pytest.raises(RuntimeError, match="The vector v can only be None if the input to the user-provided"):
        F.hvp(lambda a: a.sum(), x)
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either a Tensor or a tuple of Tensors"):
        F.jacobian(lambda a: a, [x])
    with pytest.raises(TypeError, match="outputs of the user-provided function given to vjp must be"):
        F.vjp(lambda a: 3.0, x, J(Y))
    with pytest.raises(RuntimeError, match="The function given to hessian should return a single Tensor"):
        F.hessian(lambda a: (a.sum(), a.sum()), x)
    with pytest.raises(RuntimeError, match="should contain a single element"):
        F.vhp(lambda a: a * 2, x, J(X))
    with pytest.raises(AssertionError, match="Expected strategy"):
        F.jacobian(lambda a: a, x, strategy="sideways")
    with pytest.raises(NotImplementedError, match="only implemented for `vectorize=True`"):
        F.jacobian(lambda a: a, x, strategy="forward-mode")
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        F.jacobian(lambda a: a, x, strategy="forward-mode", vectorize=True, create_graph=True)
    with pytest.raises(RuntimeError, match="`strict=True` and `vectorized=True`"):
        F.jacobian(lambda a: a * 2, x, strict=True, vectorize=True)


def test_strict_mode_errors():
    x, y = J(X), J(Y)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients"):
        F.vjp(lambda a: J(X), x, J(X), strict=True)
    with pytest.raises(RuntimeError, match="The output of the user-provided function is independent of input 1"):
        F.vjp(lambda a, b: a * 2, (x, y), J(X), strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 1"):
        F.jacobian(lambda a, b: a * 2, (x, y), strict=True)
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function with respect to input 0 is "
                                           "independent"):
        F.hessian(lambda a: a.sum() * 2, y, strict=True)
    with pytest.raises(RuntimeError, match="is independent of input 0. This is not allowed in strict mode when "
                                           "create_graph=True"):
        F.vjp(lambda a: a * 2, y, J(Y), strict=True, create_graph=True)
    # without strict the same calls give zeros
    _, (gx, gy) = F.vjp(lambda a, b: a * 2, (x, y), J(X))
    assert not np.any(npy(gy))
    assert not np.any(npy(F.hessian(lambda a: a.sum() * 2, y)))


def test_grad_mode_is_respected():
    x = J(Y, rg=True)
    with jg.no_grad():
        out, g = F.vjp(lambda a: (a * a).sum(), x)
        assert not jg.is_grad_enabled()        # functional calls restore the caller's grad mode
    np.testing.assert_allclose(npy(g), 2 * Y)
    assert not g.requires_grad and jg.is_grad_enabled()


# ---- against torch ---------------------------------------------------------------------------------

def _to_j(v):
    if isinstance(v, tuple):
        return tuple(_to_j(a) for a in v)
    return J(v)


def _to_t(v):
    if isinstance(v, tuple):
        return tuple(_to_t(a) for a in v)
    return torch.tensor(v, dtype=torch.float64)


def _same(a, b, path, check_rg=True):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, jg.Tensor), (path, type(a))
        assert a.shape == tuple(b.shape), (path, a.shape, tuple(b.shape))
        np.testing.assert_allclose(npy(a), b.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=str(path))
        if check_rg:
            assert a.requires_grad == b.requires_grad, (path, a.requires_grad, b.requires_grad)
    else:
        assert type(a) is type(b) and len(a) == len(b), (path, type(a), type(b))
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, path + (i,), check_rg)


def _f_single(lib):
    return lambda a: a.exp().sum(1)


def _f_multi(lib):
    return lambda a, b: (a * b, (a @ b).sin())


def _f_scalar(lib):
    return lambda a, b: ((a * a).sum() * b.sin()).sum()


def _f_scalar1(lib):
    return lambda a: (a ** 3).sum() + (a[0] * a[1]).sum()


CASES = [
    ("vjp", _f_single, X, dict(v=np.ones(2))),
    ("vjp", _f_single, X, dict(v=np.ones(2), create_graph=True)),
    ("vjp", _f_multi, (X, Y), dict(v=(np.ones((2, 3)), np.ones(2)))),
    ("vjp", _f_scalar, (X, Y), dict()),
    ("jvp", _f_multi, (X, Y), dict(v=(np.ones((2, 3)), RNG.standard_normal(3)))),
    ("jvp", _f_single, X, dict(v=np.ones((2, 3)), create_graph=True)),
    ("jacobian", _f_single, X, dict()),
    ("jacobian", _f_multi, (X, Y), dict()),
    ("jacobian", _f_multi, (X, Y), dict(create_graph=True)),
    ("jacobian", _f_multi, (X, Y), dict(vectorize=True)),
    ("jacobian", _f_multi, (X, Y), dict(vectorize=True, strategy="forward-mode")),
    ("jacobian", _f_single, (X,), dict()),
    ("hessian", _f_scalar, (X, Y), dict()),
    ("hessian", _f_scalar1, X, dict()),
    ("hessian", _f_scalar1, X, dict(create_graph=True)),
    ("hessian", _f_scalar, (X, Y), dict(vectorize=True, outer_jacobian_strategy="forward-mode")),
    ("vhp", _f_scalar, (X, Y), dict(v=(np.ones((2, 3)), np.ones(3)))),
    ("vhp", _f_scalar1, X, dict(v=RNG.standard_normal((2, 3)), create_graph=True)),
    ("hvp", _f_scalar, (X, Y), dict(v=(np.ones((2, 3)), np.ones(3)))),
    ("hvp", _f_scalar1, X, dict(v=RNG.standard_normal((2, 3)))),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_torch(case):
    name, fmaker, inputs, kw = CASES[case]
    kwj = {k: (_to_j(v) if k == "v" else v) for k, v in kw.items()}
    kwt = {k: (_to_t(v) if k == "v" else v) for k, v in kw.items()}
    rj = getattr(F, name)(fmaker(jg), _to_j(inputs), **kwj)
    rt = getattr(torch.autograd.functional, name)(fmaker(torch), _to_t(inputs), **kwt)
    # torch's forward-mode Hessian hands back tensors that still require grad (an artefact of its vmap'd
    # forward AD); jitgrad's are plain values
    _same(rj, rt, (name,), check_rg=kw.get("outer_jacobian_strategy") != "forward-mode")


def test_hvp_of_a_one_element_input_without_v():
    x = jg.tensor(0.5, dtype=jg.float64)
    out, h = jg.autograd.functional.hvp(lambda a: a.exp() * a, x)     # v defaults to one
    np.testing.assert_allclose(h.numpy(), np.exp(0.5) * 2.5)         # (a e^a)'' = (a + 2) e^a
    np.testing.assert_allclose(out.numpy(), 0.5 * np.exp(0.5))
