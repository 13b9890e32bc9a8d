"""``jitgrad.lobpcg`` (issue 20, missing API) and the ``eigh`` primitive under it: eigenpairs, first and second
derivatives against torch.linalg.eigh (exact, where torch's LOBPCG iterates to a tolerance), gradcheck and
gradgradcheck in float64 as PyTorch's test_lobpcg runs them, eager against compiled, and the errors."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def spd(*shape, seed=0):
    a = np.random.default_rng(seed).random(shape)
    return a @ np.swapaxes(a, -1, -2) / 10


def signed(m, k, A, largest=True, X=None):
    """PyTorch's test helper: each eigenvector's largest entry made positive."""
    D, U = m.lobpcg(A=A, k=k, X=X, largest=largest)
    _, idx = U.abs().max(-2, keepdim=True)
    return D, U * U.gather(-2, idx).sign()


def torch_reference(A, k, largest):
    """The same selection from torch.linalg.eigh (of the symmetric part, as lobpcg's derivative sees A)."""
    L, U = torch.linalg.eigh((A + A.mT) / 2)
    n = A.shape[-1]
    idx = torch.arange(n - 1, n - 1 - k, -1) if largest else torch.arange(k)
    D, U = L[..., idx], U[..., idx]
    _, i = U.abs().max(-2, keepdim=True)
    return D, U * U.gather(-2, i).sign()


@pytest.mark.parametrize("k,shape", [(1, (6, 6)), (2, (2, 6, 6)), (3, (9, 9))])
@pytest.mark.parametrize("largest", [True, False])
def test_lobpcg_values_gradients_and_hessian_products_match_torch(k, shape, largest):
    a = spd(*shape, seed=k)
    w = np.random.default_rng(5).random(shape[:-1] + (k,))
    results = []
    for m, ref in ((jg, False), (torch, True)):
        A = m.tensor(a, requires_grad=True)
        D, U = torch_reference(A, k, largest) if ref else signed(m, k, A, largest)
        loss = (D * D).sum() + (U * m.tensor(w)).sum()
        (g,) = m.autograd.grad(loss, A, create_graph=True)
        (h,) = m.autograd.grad((g * m.tensor(a)).sum(), A)
        results.append([t.detach().numpy() for t in (D, U, g, h)])
    for got, want, tol in zip(results[0], results[1], (1e-12, 1e-10, 1e-9, 1e-7)):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    g = results[0][2]
    np.testing.assert_allclose(g, np.swapaxes(g, -1, -2), atol=1e-14)      # A.grad is symmetric


def test_lobpcg_gradcheck_and_gradgradcheck_as_pytorch_runs_them():
    A = jg.tensor(spd(2, 6, 6, seed=3), requires_grad=True)
    X = jg.eye(6, 2, dtype=jg.float64).expand(2, 6, 2)
    assert gradcheck(lambda A: signed(jg, 2, A, True, X), (A,))
    assert gradgradcheck(lambda A: signed(jg, 2, A, True, X), (A,),
                         [jg.rand(2, 2, dtype=jg.float64) / 100, jg.rand(2, 6, 2, dtype=jg.float64) / 100], atol=1e-4)


def test_lobpcg_order_and_compiled():
    a = spd(9, 9, seed=4)
    full = np.linalg.eigvalsh(a)
    D, _ = jg.lobpcg(jg.tensor(a), k=3)
    np.testing.assert_allclose(D.numpy(), full[::-1][:3], rtol=1e-12)
    D, _ = jg.lobpcg(jg.tensor(a), k=3, largest=False)
    np.testing.assert_allclose(D.numpy(), full[:3], rtol=1e-12)
    f = jg.compile(lambda A: signed(jg, 2, A)[0] * 2.0, backend="interpret")
    np.testing.assert_allclose(f(jg.tensor(a)).numpy(), 2 * full[::-1][:2], rtol=1e-12)


def test_lobpcg_errors():
    with pytest.raises(ValueError, match=r"number of A rows \(=6\) is smaller than 3 x the number of requested "
                                         r"eigenpairs \(=3\)"):
        jg.lobpcg(jg.tensor(spd(6, 6)), k=3)
    with pytest.raises(NotImplementedError, match="generalized problem"):
        jg.lobpcg(jg.tensor(spd(6, 6)), k=1, B=jg.eye(6, dtype=jg.float64))
    with pytest.raises(ValueError, match="square matrix"):
        jg.lobpcg(jg.rand(3, 4))
    with pytest.raises(RuntimeError, match="lobpcg: expected a floating point tensor"):
        jg.lobpcg(jg.ones(6, 6, dtype=jg.int64))
