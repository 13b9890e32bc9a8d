"""torch functions PyTorch's own autograd tests use and jitgrad lacked (issue 20, missing API): ``atan2`` /
``arctan2`` and ``nextafter`` (elementwise primitives), ``trace``, ``searchsorted`` / ``bucketize`` / ``isin``
(lookups with integer or bool results).

Values against torch (and NumPy), gradcheck/gradgradcheck in float64 for the differentiable ones, eager against
``jg.compile`` on the reference interpreter and on Numba, and torch's errors for bad input.  Singular points
(atan2 at the origin, NaN in searchsorted, ...) are in tests/singular_samples.py.
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def t64(a, rg=False):
    return jg.tensor(np.asarray(a, np.float64), requires_grad=rg)


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def compiled_both(fn, *args):
    """``fn(*args)`` eagerly, and compiled on the interpreter and on Numba; every result as NumPy."""
    outs = [fn(*args)] + [jg.compile(fn, backend=b)(*args) for b in ("interpret", "numba")]
    return [[o.detach().numpy() for o in (r if isinstance(r, tuple) else (r,))] for r in outs]


# ---- atan2 / nextafter ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atan2_values_match_torch_with_broadcasting(dtype):
    y, x = rnd(3, 4, seed=1).astype(dtype), rnd(4, seed=2).astype(dtype)
    x[0] = 0.0
    got = jg.atan2(jg.tensor(y), jg.tensor(x))
    ref = torch.atan2(torch.tensor(y), torch.tensor(x)).numpy()
    assert got.dtype is (jg.float32 if dtype == np.float32 else jg.float64)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6 if dtype == np.float32 else 1e-15)
    assert np.array_equal(jg.arctan2(jg.tensor(y), jg.tensor(x)).numpy(), got.numpy())
    assert np.array_equal(jg.tensor(y).atan2(jg.tensor(x)).numpy(), got.numpy())
    # integer inputs compute in float32, as torch
    assert jg.atan2(jg.tensor([1, 2]), jg.tensor([3, 4])).dtype is jg.float32


def test_atan2_gradient_is_zero_at_origin_and_matches_torch_elsewhere():
    x, y = t64([0.0, 2.0, -1.0], True), t64([0.0, 3.0, 0.5], True)
    jg.atan2(x, y).sum().backward()
    tx = torch.tensor([0.0, 2.0, -1.0], dtype=torch.float64, requires_grad=True)
    ty = torch.tensor([0.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
    torch.atan2(tx, ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-15)
    assert x.grad.numpy()[0] == 0.0 and y.grad.numpy()[0] == 0.0
    assert jg.atan2(x, y).grad_fn.name() == "Atan2Backward0"


def test_atan2_gradcheck_and_gradgradcheck():
    a, b = t64(rnd(2, 3, seed=3), True), t64(rnd(3, seed=4) + 2.0, True)
    assert gradcheck(jg.atan2, (a, b))
    assert gradgradcheck(jg.atan2, (a, b))


def test_atan2_compiled_matches_eager_values_and_gradients():
    y, x = t64(rnd(2, 3, seed=5)), t64(rnd(2, 3, seed=6))

    def step(y, x):
        y = y.detach().requires_grad_()
        x = x.detach().requires_grad_()
        out = (jg.atan2(y, x) * 1.5).sum()
        gy, gx = jg.autograd.grad(out, (y, x))
        return out, gy, gx
    eager, interp, numba = compiled_both(step, y, x)
    for a, b, c in zip(eager, interp, numba):
        np.testing.assert_allclose(b, a, rtol=1e-13)
        np.testing.assert_allclose(c, a, rtol=1e-13)


def test_atan2_in_place_and_refusals():
    y = t64([1.0, -1.0])
    y.atan2_(t64([1.0, 1.0]))
    np.testing.assert_allclose(y.numpy(), [np.pi / 4, -np.pi / 4])
    assert y._version == 1
    with pytest.raises(TypeError, match=r"atan2\(\): argument 'other' \(position 2\) must be Tensor, not float"):
        jg.atan2(t64([1.0]), 2.0)
    with pytest.raises(RuntimeError, match=r"atan2.*\[2\].*\[3\]"):
        jg.atan2(t64([1.0, 2.0]), t64([1.0, 2.0, 3.0]))


def test_nextafter_values_and_no_derivative():
    a = rnd(5, seed=7)
    b = np.array([np.inf, -np.inf, 0.0, a[3], np.nan])
    got = jg.nextafter(t64(a), t64(b)).numpy()
    ref = torch.nextafter(torch.tensor(a), torch.tensor(b)).numpy()
    assert np.array_equal(got, ref, equal_nan=True)
    f32 = jg.nextafter(jg.tensor([1.0]), jg.tensor([2.0]))
    assert f32.dtype is jg.float32 and f32.item() == float(np.nextafter(np.float32(1), np.float32(2)))
    x = jg.rand(2, requires_grad=True)
    y = jg.nextafter(x, x).sum()
    assert y.requires_grad             # as torch: a node whose backward refuses
    with pytest.raises(NotImplementedError, match="the derivative for 'nextafter' is not implemented"):
        y.backward()
    with pytest.raises(RuntimeError, match="nextafter.*int64"):
        jg.nextafter(jg.tensor([1, 2]), jg.tensor([1, 2]))


def test_nextafter_compiled_matches_eager():
    a, b = t64(rnd(3, seed=8)), t64([np.inf, -np.inf, 0.0])
    eager, interp, numba = compiled_both(lambda a, b: jg.nextafter(a * 1.0, b), a, b)
    assert np.array_equal(interp[0], eager[0]) and np.array_equal(numba[0], eager[0])


# ---- trace ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 2), (2, 5), (3, 3), (1, 4), (0, 3)])
def test_trace_value_and_gradient_on_nonsquare_matrices(shape):
    a = rnd(*shape, seed=9)
    x = t64(a, True)
    t = jg.trace(x)
    assert t.grad_fn.name() == "TraceBackward0"
    t.backward()
    tx = torch.tensor(a, requires_grad=True)
    torch.trace(tx).backward()
    np.testing.assert_allclose(t.item(), torch.trace(torch.tensor(a)).item(), rtol=1e-15)
    assert np.array_equal(x.grad.numpy(), tx.grad.numpy())
    if min(shape):
        assert gradcheck(jg.trace, (t64(a, True),)) and gradgradcheck(lambda m: jg.trace(m * m), (t64(a, True),))


def test_trace_dtypes_method_errors_and_compiled():
    assert jg.trace(jg.ones(2, 3, dtype=jg.int32)).dtype is jg.int64        # as torch
    assert jg.trace(jg.tensor([[True, False], [False, True]])).item() == 2
    assert jg.ones(3, 3).trace().item() == 3.0
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 3"):
        jg.trace(jg.ones(2, 3, 4))
    x = t64(rnd(3, 4, seed=10))
    eager, interp, numba = compiled_both(lambda m: jg.trace(m * 2.0), x)
    np.testing.assert_allclose(interp[0], eager[0])
    np.testing.assert_allclose(numba[0], eager[0])


# ---- searchsorted / bucketize / isin -----------------------------------------------------------------------

def test_searchsorted_matches_torch_1d_and_batched():
    rng = np.random.default_rng(11)
    seq = np.sort(rng.integers(0, 6, 10)).astype(np.float64)
    vals = rng.integers(-1, 8, (3, 4)).astype(np.float64)
    for right in (False, True):
        got = jg.searchsorted(t64(seq), t64(vals), right=right)
        ref = torch.searchsorted(torch.tensor(seq), torch.tensor(vals), right=right)
        assert got.dtype is jg.int64 and np.array_equal(got.numpy(), ref.numpy())
        side = "right" if right else "left"
        assert np.array_equal(jg.searchsorted(t64(seq), t64(vals), side=side).numpy(), ref.numpy())
    bseq = np.sort(rng.standard_normal((2, 3, 5)), -1)
    bvals = rng.standard_normal((2, 3, 4))
    got = jg.searchsorted(t64(bseq), t64(bvals), out_int32=True)
    assert got.dtype is jg.int32
    assert np.array_equal(got.numpy(), torch.searchsorted(torch.tensor(bseq), torch.tensor(bvals)).numpy())
    # a Python number value gives a 0-d result
    s = jg.searchsorted(t64(seq), 2.5)
    assert s.shape == () and s.item() == torch.searchsorted(torch.tensor(seq), 2.5).item()


def test_searchsorted_sorter_and_errors():
    seq = np.array([3.0, 1.0, 2.0])
    sorter = jg.tensor([1, 2, 0])
    got = jg.searchsorted(t64(seq), t64([2.0, 0.0, 5.0]), sorter=sorter)
    ref = torch.searchsorted(torch.tensor(seq), torch.tensor([2.0, 0.0, 5.0]), sorter=torch.tensor([1, 2, 0]))
    assert np.array_equal(got.numpy(), ref.numpy())
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites"):
        jg.searchsorted(t64(seq), t64([1.0]), right=True, side="left")
    with pytest.raises(RuntimeError, match="side can only be 'left' or 'right'"):
        jg.searchsorted(t64(seq), t64([1.0]), side="middle")
    with pytest.raises(RuntimeError, match=r"first N-1 dimensions.*\[2, 3\].*\[3, 1\]"):
        jg.searchsorted(t64(np.zeros((2, 3))), t64(np.zeros((3, 1))))
    with pytest.raises(RuntimeError, match="positive dimension"):
        jg.searchsorted(t64(1.0), t64([1.0]))


def test_lookups_never_require_grad_and_compile():
    inp = jg.rand(4, requires_grad=True)
    val = jg.rand((), requires_grad=True)
    for out in (jg.searchsorted(inp, val), jg.bucketize(inp, jg.linspace(0, 1, 5, requires_grad=True)),
                jg.isin(inp, val)):
        assert not out.requires_grad and out.grad_fn is None
    seq, v = t64(np.linspace(-1, 1, 7)), t64(rnd(2, 3, seed=12))
    eager, interp, numba = compiled_both(lambda s, x: (jg.searchsorted(s, x * 1.0), jg.isin(x, s)), seq, v)
    for r in (interp, numba):
        assert all(np.array_equal(a, b) for a, b in zip(r, eager))


def test_bucketize_matches_torch():
    bounds = np.array([0.0, 0.5, 0.5, 1.0])
    vals = np.array([[-1.0, 0.0, 0.5], [0.7, 1.0, 2.0]])
    for right in (False, True):
        got = jg.bucketize(t64(vals), t64(bounds), right=right)
        ref = torch.bucketize(torch.tensor(vals), torch.tensor(bounds), right=right)
        assert np.array_equal(got.numpy(), ref.numpy())
    with pytest.raises(RuntimeError, match="boundaries tensor must be 1 dimension"):
        jg.bucketize(t64(vals), t64(np.zeros((2, 2))))


def test_isin_matches_torch():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    for invert in (False, True):
        got = jg.isin(t64(x), jg.tensor([2, 3]), invert=invert)
        ref = torch.isin(torch.tensor(x), torch.tensor([2, 3]), invert=invert)
        assert got.dtype is jg.bool and np.array_equal(got.numpy(), ref.numpy())
    assert np.array_equal(jg.isin(t64(x), 2).numpy(), torch.isin(torch.tensor(x), 2).numpy())
    assert jg.isin(3, jg.tensor([1, 3])).item() is True
    with pytest.raises(TypeError, match="at least one of 'elements' and 'test_elements' must be a Tensor"):
        jg.isin(1, 2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nextafter_cuda_form_is_numpys_nextafter(dtype):
    """The math table's CUDA form of nextafter (arithmetic: libdevice's needs a declaration) evaluated as Python
    over the format's special values, against NumPy (the simulator runs kernels as Python the same way)."""
    import math
    import warnings
    from jitgrad.codegen import kernel_ir as ki
    from jitgrad.codegen.math_table import MathCalls
    from jitgrad.codegen.numba_render import Exprs
    npt = getattr(np, dtype)
    a, b = (ki.read(ki.Var(n, ki.OF_DTYPE[dtype])) for n in "ab")
    f = eval("lambda a, b: " + Exprs("cuda")(MathCalls(dtype).nextafter(a, b)),       # noqa: S307
             {"math": math, "float32": np.float32, "float64": np.float64})
    fi = np.finfo(npt)
    pts = [0.0, -0.0, 1.0, -1.0, 2.0, -0.75, 0.1, 3.7, 123456.789, float(fi.tiny), -float(fi.tiny),
           float(fi.smallest_subnormal), -float(fi.smallest_subnormal), float(fi.max), -float(fi.max),
           math.inf, -math.inf, math.nan]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in pts:
            for y in pts:
                got, want = npt(f(npt(x), npt(y))), np.nextafter(npt(x), npt(y))
                assert (got == want and np.signbit(got) == np.signbit(want)) or (np.isnan(got) and np.isnan(want)), \
                    (x, y, got, want)
