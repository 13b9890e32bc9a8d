"""layer_norm's vjp as a primitive, ``layer_norm_backward`` (``ir/ops/normalization.py``): gradients of every order,
eager == compiled == the reference interpreter, the NumPy impl's bits (the rule's ops one by one), and its eager
row kernel (``jit/eager_kernels.py``): the compiled kernel's bits, close to the impl (its sums reassociate), on the
pool at two threads with the bits of one.  Counted, never timed."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck
from jitgrad.codegen.native import workpool
from jitgrad.ir import settings
from jitgrad.ir.ops import OPS, Aval
from jitgrad.ir.ops.normalization import _ln_bwd_decompose
from jitgrad.jit import eager_kernels as ek
from jitgrad.runtime import dispatch


def _arr(shape, seed, dtype=np.float64, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _t(a, grad=True):
    return jg.tensor(a, requires_grad=grad)


def _lnb(g, x, y, naxes, eps=1e-5):
    return dispatch.bind(OPS["layer_norm_backward"], g, x, y, naxes=naxes, eps=eps)


# ---- derivatives, float64 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, normalized, eps", [((3, 5), (5,), 1e-5), ((2, 3, 4), (3, 4), 1e-5),
                                                    ((2, 3, 4), (4,), 0.25), ((4,), (4,), 1e-3)])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_gradcheck_and_gradgradcheck(shape, normalized, eps, affine):
    x = _t(_arr(shape, 0))
    if affine:
        w, b = _t(_arr(normalized, 1) + 1.0), _t(_arr(normalized, 2))
        assert gradcheck(lambda x, w, b: F.layer_norm(x, normalized, w, b, eps), (x, w, b))
        assert gradgradcheck(lambda x, w, b: F.layer_norm(x, normalized, w, b, eps), (x, w, b))
    else:
        assert gradcheck(lambda x: F.layer_norm(x, normalized, eps=eps), (x,))
        assert gradgradcheck(lambda x: F.layer_norm(x, normalized, eps=eps), (x,))


def test_nn_layer_norm_gradgradcheck_through_its_parameters():
    m = nn.LayerNorm((3, 4), eps=1e-4, dtype=jg.float64)
    with jg.no_grad():
        m.weight.copy_(jg.tensor(_arr((3, 4), 3) + 1.0))
        m.bias.copy_(jg.tensor(_arr((3, 4), 4)))
    x = _t(_arr((2, 3, 4), 5))
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (3, 4), w, b, m.eps), (x, m.weight, m.bias))
    assert gradgradcheck(lambda x: m(x), (x,))
    assert gradgradcheck(lambda x, w, b: F.layer_norm(x, (3, 4), w, b, m.eps), (x, m.weight, m.bias))


@pytest.mark.parametrize("shape, naxes, eps", [((3, 5), 1, 1e-5), ((2, 3, 4), 2, 0.5), ((2, 6), 1, 0.0)])
def test_layer_norm_backward_gradcheck_and_gradgradcheck(shape, naxes, eps):
    """Bound directly, its output y an input of its own (any values): every input's first and second derivatives,
    so layer_norm's third order is its vjp's second."""
    g, x, y = (_t(_arr(shape, s)) for s in (6, 7, 8))
    assert gradcheck(lambda g, x, y: _lnb(g, x, y, naxes, eps), (g, x, y))
    assert gradgradcheck(lambda g, x, y: _lnb(g, x, y, naxes, eps), (g, x, y))


def test_eager_binds_one_node_and_its_double_backward_its_own():
    x = _t(_arr((3, 5), 9))
    y = F.layer_norm(x, (5,))
    assert y.grad_fn.name() == "NativeLayerNormBackward0"
    dx, = jg.autograd.grad(y, x, _t(_arr((3, 5), 10)), create_graph=True)
    assert dx.grad_fn.name() == "NativeLayerNormBackwardBackward0"


# ---- eager == compiled == interpreter ---------------------------------------------------------------------

def _step(x, w, b, v):
    """A loss through an affine layer_norm; its first-order gradients and a second-order term."""
    y = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    loss = (y * v).sum()
    gx, gw = jg.autograd.grad(loss, (x, w), create_graph=True)
    return loss + (gx * gx).sum() + (gw * v[0]).sum()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eager_equals_compiled_and_the_interpreter(dtype):
    arrays = (_arr((6, 8), 11, dtype), _arr((8,), 12, dtype) + 1, _arr((8,), 13, dtype), _arr((6, 8), 14, dtype))

    def run(f):
        ts = [_t(a, i < 3) for i, a in enumerate(arrays)]
        out = f(*ts)
        grads = jg.autograd.grad(out, ts[:3])
        return [out.detach().numpy()] + [g.numpy() for g in grads]
    eager = run(_step)
    interp = run(jg.compile(_step, backend="interpret"))
    comp = run(jg.compile(_step, backend="numba", background=False))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for e, i, c in zip(eager, interp, comp):
        np.testing.assert_allclose(i, e, rtol=tol, atol=tol)
        np.testing.assert_allclose(c, e, rtol=tol * 10, atol=tol * 10)


# ---- bits -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, naxes", [((5, 7), 1), ((2, 3, 4), 2), ((4,), 1)])
def test_impl_has_the_bits_of_the_rules_ops_one_by_one(shape, naxes, monkeypatch):
    """The NumPy impl runs the decomposition's ops in its order (layer_norm's eager pullback ran them one by one
    before the primitive, so eager results keep their bits)."""
    monkeypatch.setattr(ek, "ENABLED", False)
    dispatch._RULES.clear()
    g, x, y = (_arr(shape, s, np.float32, 3.0) for s in (15, 16, 17))
    with jg.no_grad():
        want = _ln_bwd_decompose(None, jg.tensor(g), jg.tensor(x), jg.tensor(y), naxes, 1e-5).numpy()
    got = OPS["layer_norm_backward"].impl(g, x, y, naxes=naxes, eps=1e-5)
    dispatch._RULES.clear()
    np.testing.assert_array_equal(got, want)
    # the eager impl of the signature (its constants 0-d arrays made once) has them too
    fast = OPS["layer_norm_backward"].eager_impl((Aval(shape, jg.float32),) * 3, {"naxes": naxes, "eps": 1e-5})
    assert fast(g, x, y, naxes=naxes, eps=1e-5).tobytes() == got.tobytes()
    x.flat[0], g.flat[-1] = np.inf, np.nan
    with np.errstate(all="ignore"):
        want = OPS["layer_norm_backward"].impl(g, x, y, naxes=naxes, eps=1e-5)
        assert fast(g, x, y, naxes=naxes, eps=1e-5).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape, naxes", [((5, 7), 1), ((2, 3, 4), 2), ((4,), 1), ((3, 300), 1), ((2, 3), 2)])
def test_eager_forward_has_the_bits_of_ndarray_mean(dtype, shape, naxes):
    """layer_norm's eager impl for float32 and float64 spells each ``ndarray.mean`` as the ufunc calls under it
    (a sum, then a division by the count): the bits of the impl written with ``x.mean``, rows holding inf, nan or
    one value included, and of eager ``F.layer_norm``; float16 (a mean accumulated in float32) keeps that impl."""
    x = _arr(shape, 19, dtype, 4.0)
    x.flat[0] = np.inf
    x.flat[-1] = np.nan
    if len(shape) > 1:
        x[(1,) * (len(shape) - naxes)] = 1.5
    want = OPS["layer_norm"].impl(x, naxes=naxes, eps=1e-5)
    fast = OPS["layer_norm"].eager_impl((Aval(shape, jg.tensor(x).dtype),), {"naxes": naxes, "eps": 1e-5})
    assert (fast is None) == (dtype == np.float16)
    if fast is not None:
        assert fast(x, naxes=naxes, eps=1e-5).tobytes() == want.tobytes()
    got = F.layer_norm(jg.tensor(x), shape[len(shape) - naxes:]).numpy()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def _rows_ln(rows, cols, dtype, seed):
    x = _arr((rows, cols), seed, dtype, 4.0)
    x[0, :3] = [np.inf, 1.0, 2.0]           # rows holding inf or nan: nan throughout
    x[1, 5] = np.nan
    x[2, :] = 1.5                           # a constant row: the eps alone
    y = OPS["layer_norm"].impl(x, naxes=1, eps=1e-5)
    return _arr((rows, cols), seed + 1, dtype), x, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_is_close_to_the_impl_and_runs_on_the_pool_with_the_bits_of_one_thread(sync, monkeypatch, dtype):
    """The row kernel (fast-math sums: reassociated, as torch's kernels are) against the NumPy impl: NaN positions
    exact, finite values within 1e-5 (float32) or 1e-13 (float64) of the largest.  Over rows the compiled path
    puts on the pool, two threads take it (pool rounds counted) and one does not; the bits are the same."""
    g, x, y = _rows_ln(4096, 128, dtype, 18)
    ref = OPS["layer_norm_backward"].impl(g, x, y, naxes=1, eps=1e-5)

    def native(threads):
        monkeypatch.setattr(settings.STATE, "num_threads", threads)
        before, rounds = dict(ek.COUNTS), workpool.rounds()
        with np.errstate(all="ignore"):
            out = _lnb(jg.tensor(g), jg.tensor(x), jg.tensor(y), 1).numpy()
        assert ek.COUNTS["native_calls"] == before["native_calls"] + 1
        assert ek.COUNTS["numpy_calls"] == before["numpy_calls"]
        return out, workpool.rounds() - rounds
    with np.errstate(all="ignore"):
        _lnb(jg.tensor(g), jg.tensor(x), jg.tensor(y), 1)      # the serial kernel tells the loop's cost
    two, rounds2 = native(2)
    one, rounds1 = native(1)
    np.testing.assert_array_equal(one, two)
    assert rounds1 == 0
    if settings.default_threads() >= 2:
        assert rounds2 >= 1
    np.testing.assert_array_equal(np.isnan(two), np.isnan(ref))
    ok = np.isfinite(ref)
    scale = np.abs(ref[ok]).max()
    tol = (1e-5 if dtype == np.float32 else 1e-13) * scale
    np.testing.assert_allclose(two[ok], ref[ok], rtol=tol, atol=tol)


def test_eager_pullback_runs_the_kernel_over_large_rows(sync):
    """F.layer_norm's eager backward: one native call (the kernel), no NumPy op of the rule."""
    x = _t(_arr((64, 128), 19, np.float32))
    y = F.layer_norm(x, (128,))
    g = jg.tensor(_arr((64, 128), 20, np.float32))
    y.backward(g)
    before = dict(ek.COUNTS)
    x.grad = None
    y = F.layer_norm(x, (128,))
    y.backward(g)
    assert ek.COUNTS["native_calls"] == before["native_calls"] + 2      # forward and backward
    assert ek.COUNTS["numpy_calls"] == before["numpy_calls"]
    np.testing.assert_allclose(x.grad.numpy(), OPS["layer_norm_backward"].impl(
        g.numpy(), x.detach().numpy(), y.detach().numpy(), naxes=1, eps=1e-5), rtol=1e-5, atol=1e-5)
