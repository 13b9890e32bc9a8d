"""Eager float32 erf (ir/ops/numpy_erf.py): the compiled kernels' algorithm in NumPy blocks."""
import numpy as np
import pytest
from scipy.special import erf as scipy_erf

import jitgrad as jg
from jitgrad.ir.ops import numpy_erf


def _ulps(got, exact):
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def test_values_against_float64_erf():
    x = np.linspace(-6, 6, 200_001, dtype=np.float32)     # several blocks, both branches, the clamp at 4
    got = numpy_erf.erf_float32(x)
    assert got.dtype == np.float32
    assert _ulps(got, scipy_erf(x.astype(np.float64))).max() <= 3.0
    tiny = np.array([1e-30, -1e-30, 1e-40, 1e-45, 0.91999996, 0.92, 3.9999998, 4.0, 1e30], np.float32)
    assert _ulps(numpy_erf.erf_float32(tiny), scipy_erf(tiny.astype(np.float64))).max() <= 3.0


def test_special_values_and_shapes():
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    got = numpy_erf.erf_float32(special)
    np.testing.assert_array_equal(got[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(got[1]) and np.isnan(got[4])
    assert numpy_erf.erf_float32(np.float32(0.5).reshape(())).shape == ()
    assert numpy_erf.erf_float32(np.zeros((0, 3), np.float32)).shape == (0, 3)
    x = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32)
    np.testing.assert_array_equal(numpy_erf.erf_float32(x.T), numpy_erf.erf_float32(x).T)   # strided input


def test_matches_compiled_kernels_erf():
    # the same algorithm as mathlib.erf_f32, so eager and compiled float32 erf (and gelu) agree to rounding
    from jitgrad.codegen import mathlib_numba as mathlib
    x = np.random.default_rng(1).uniform(-5, 5, 3000).astype(np.float32)
    compiled = np.array([mathlib.erf_f32(v) for v in x], np.float32)
    assert np.abs(numpy_erf.erf_float32(x) - compiled).max() <= 2 * np.spacing(np.float32(1.0))


@pytest.mark.parametrize("approximate", ["none"])
def test_eager_erf_and_gelu_use_it(approximate):
    x = jg.tensor(np.linspace(-4, 4, 1001, dtype=np.float32), requires_grad=True)
    np.testing.assert_array_equal(x.erf().detach().numpy(), numpy_erf.erf_float32(x.detach().numpy()))
    y = jg.nn.functional.gelu(x, approximate=approximate)
    x64 = np.linspace(-4, 4, 1001)
    ref = 0.5 * x64 * (1 + scipy_erf(x64 / np.sqrt(2)))
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-6, atol=1e-7)
    y.sum().backward()
    dref = 0.5 * (1 + scipy_erf(x64 / np.sqrt(2))) + x64 * np.exp(-x64 * x64 / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(x.grad.numpy(), dref, rtol=1e-6, atol=1e-6)


def _decomposed_gelu_and_vjp(x, g):
    """GELU and its vjp as the decompositions bind them, one NumPy op per primitive (float32 throughout)."""
    from jitgrad.ir.ops.normalization import _INV_SQRT_2PI, _SQRT_HALF
    e = numpy_erf.erf_float32(x * _SQRT_HALF)
    y = 0.5 * x * (1.0 + e)
    cdf = 0.5 * (1.0 + e)
    pdf = np.exp(x * x * -0.5) * _INV_SQRT_2PI
    return y, g * (cdf + x * pdf)


def test_fused_gelu_and_vjp_give_the_decompositions_bits():
    rng = np.random.default_rng(3)
    for x in (rng.standard_normal(100_003).astype(np.float32) * 3,            # several blocks and a partial one
              np.array([0.0, -0.0, 0.5, -0.5, 7.0, -7.0, 40.0, -40.0, np.inf, -np.inf, np.nan, 1e-30], np.float32)):
        g = rng.standard_normal(x.shape).astype(np.float32)
        with np.errstate(all="ignore"):
            y, dx = _decomposed_gelu_and_vjp(x, g)
            np.testing.assert_array_equal(numpy_erf.gelu_float32(x), y)
            np.testing.assert_array_equal(numpy_erf.gelu_backward_float32(g, x), dx)
    x = rng.standard_normal((30, 40)).astype(np.float32)
    g = rng.standard_normal((40, 30)).astype(np.float32)
    np.testing.assert_array_equal(numpy_erf.gelu_backward_float32(g.T, x), _decomposed_gelu_and_vjp(x, g.T)[1])


def test_eager_gelu_vjp_is_one_node_and_agrees_with_the_compiled_graph():
    x0 = np.random.default_rng(4).standard_normal((64, 33)).astype(np.float32)
    w0 = np.random.default_rng(5).standard_normal((64, 33)).astype(np.float32)

    def step(x, w):
        y = jg.nn.functional.gelu(x)
        (g,) = jg.autograd.grad((y * w).sum(), x, create_graph=True)
        (gg,) = jg.autograd.grad((g * g).sum(), x)
        return y, g, gg

    x = jg.tensor(x0, requires_grad=True)
    y, g, gg = step(x, jg.tensor(w0))
    assert g.grad_fn.name() == "GeluBackwardBackward0"        # torch's name for the vjp's own node
    # a trace differentiates gelu's decomposition (the transpose pass), so only the forward is the same bits
    traced = jg.compile(step, backend="interpret")(jg.tensor(x0, requires_grad=True), jg.tensor(w0))
    np.testing.assert_array_equal(y.detach().numpy(), traced[0].detach().numpy())
    np.testing.assert_allclose(g.detach().numpy(), traced[1].detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gg.numpy(), traced[2].numpy(), rtol=1e-5, atol=1e-5)
