"""One exp for erf and its derivative (codegen/kernels/erf_exp.py, mathlib's ``erf_exp_*``).

A fused backward through erf (exact GELU's) computes ``erf(u)`` and erf's vjp ``exp(-u^2) 2/sqrt(pi)``; erf's tail
computes the same exp inside.  The kernel's ``erf(u)`` becomes ``erf_exp(u, e)``, ``e`` the kernel's exp: one exp
an element instead of two, and the same bits.
"""
import numpy as np
import pytest
import scipy.special as sp
from numba import njit

import jitgrad as jg
from jitgrad.codegen.kernels import erf_exp, kernel_interp, kernel_ir as ki, loops, mathlib_numba as M
from jitgrad.codegen.kernels.math_table import MathCalls

_LOOP_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}     # what the generated loops use


def _both(dtype):
    """(erf x, erf_exp(x, exp(-(x*x)))) over an array, as a generated loop computes them."""
    s = "f32" if dtype == np.float32 else "f64"
    erf, erfe, exp = M.FUNCS[("erf", np.dtype(dtype).name)], getattr(M, f"erf_exp_{s}"), getattr(M, f"exp_{s}")

    @njit(fastmath=_LOOP_FASTMATH, error_model="numpy")
    def run(x, a, b):
        for i in range(x.shape[0]):
            a[i] = erf(x[i])
            b[i] = erfe(x[i], exp(-(x[i] * x[i])))

    def apply(x):
        a, b = np.empty_like(x), np.empty_like(x)
        run(x, a, b)
        return a, b
    return apply


def _inputs(dtype, lo, hi):
    """Every float32 in [lo, hi] (float64: 2^22 points), both signs, a sample of every bit pattern, specials."""
    rng = np.random.default_rng(5)
    if dtype == np.float32:
        b = np.arange(np.float32(lo).view(np.uint32), np.float32(hi).view(np.uint32) + 1, dtype=np.uint32)
        x = b.view(np.float32)
        pattern = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        x = np.linspace(lo, hi, 1 << 22)
        pattern = rng.integers(0, 2 ** 63, 1 << 20, dtype=np.int64).view(np.float64)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, 6.0, 9.3, 10.2, 26.5, 27.3, 1e-40, 1e30], dtype)
    return np.concatenate([x, -x, pattern, -pattern, special]).astype(dtype)


@pytest.mark.parametrize("dtype, lo, hi, bound", [(np.float32, 0.5, 14.0, 4.0), (np.float64, 0.0, 30.0, 1e-14)])
def test_erf_given_its_exp_is_erf_bit_for_bit(dtype, lo, hi, bound):
    """Every input: ``erf_exp(x, exp(-x^2))`` has erf's bits (below the clamp the exp is erf's own, beyond it both
    are +-1; float32: every value of erf's exp branch and far past the clamp, where exp(-x^2) turns subnormal and
    then 0), and so erf's accuracy against SciPy's (float32 within 4 ulp, float64 within 1e-14 relative)."""
    x = _inputs(dtype, lo, hi)
    with np.errstate(all="ignore"):
        a, b = _both(dtype)(x)
    assert np.array_equal(a.view(np.uint32 if dtype == np.float32 else np.uint64),
                          b.view(np.uint32 if dtype == np.float32 else np.uint64)) or \
        np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))
    exact = sp.erf(x.astype(np.float64))
    ok = np.isfinite(x)
    if dtype == np.float32:
        err = np.abs(b[ok].astype(np.float64) - exact[ok]) / np.spacing(np.abs(exact[ok]).astype(np.float32))
    else:
        err = np.abs(b[ok] - exact[ok]) / np.maximum(np.abs(exact[ok]), np.finfo(np.float64).tiny)
    assert err.max() <= bound, (x[ok][err.argmax()], err.max())
    assert np.isnan(b[np.isnan(x)]).all() and (b[x == np.inf] == 1).all() and (b[x == -np.inf] == -1).all()


def _step(dtype):
    rng = np.random.default_rng(8)
    w = jg.tensor(rng.standard_normal((128, 512)).astype(dtype) * 0.3, requires_grad=True)
    b = jg.tensor(rng.standard_normal(512).astype(dtype), requires_grad=True)
    w2 = jg.tensor(rng.standard_normal((512, 16)).astype(dtype) * 0.1, requires_grad=True)

    def step(x):
        loss = (jg.nn.functional.gelu(x @ w + b) @ w2).square().sum()
        return jg.autograd.grad(loss, [w, b, w2])
    return step


def _backward_listing(f, x):
    from jitgrad.jit.graph_code import compiled_graph
    f(x)
    (entries,) = f._cache.values()
    kernels = compiled_graph(entries[0].graph, entries[0].gf.writes).kernels
    (k,) = [k for k in kernels if "erf" in k.listing() and "exp_" in k.listing()]
    return k.listing()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_backward_kernel_computes_one_exp_and_the_same_bits(dtype, monkeypatch):
    """B9's MLP backward (exact GELU) in one fused kernel: one exp call an element, erf given it, and gradients with
    the bits of the kernel that calls erf and exp apart (the rewrite turned off); compiled == eager to rounding."""
    s = "f32" if dtype == "float32" else "f64"
    # 1024 x 512 hidden values (the backward recomputes erf rather than load it from the forward); |h| / sqrt 2 past
    # 0.92 and past erf's clamp (4 or 6) on some elements: both of erf's branches and the tail
    x = jg.tensor(np.random.default_rng(3).standard_normal((1024, 128)).astype(dtype))
    f = jg.compile(_step(dtype))
    text = _backward_listing(f, x)
    assert text.count(f"exp_{s}(") == 2 and text.count(f"erf_exp_{s}(") == 1 and f"erf_{s}(" not in text, text
    got = [g.numpy() for g in f(x)]
    monkeypatch.setattr(erf_exp, "share_exp", lambda kir: 0)
    apart = jg.compile(_step(dtype))
    text = _backward_listing(apart, x)
    assert f"erf_{s}(" in text and "erf_exp" not in text, text
    for a, b in zip(got, apart(x)):
        np.testing.assert_array_equal(a, b.numpy())
    tol = 2e-4 if dtype == "float32" else 1e-10
    for a, b in zip(got, _step(dtype)(x)):
        np.testing.assert_allclose(a, b.numpy(), rtol=tol, atol=tol)


def _kernel(body):
    """A float32 loop over ``p0 -> p1`` whose body ``body(b, x)`` builds (returns the value stored)."""
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    p0, p1 = (b.let(f"p{j}", b.A[1 + j].ptr(ki.F32)) for j in range(2))
    with b.loop("i0", n0) as i0:
        x = b.let("x0", p0[i0])
        b.store(p1, i0, body(b, x, p1, i0))
    return b.finish()


def _run(kir, x):
    out = np.zeros_like(x)
    kernel_interp.run(kir, np.array([x.size, x.ctypes.data, out.ctypes.data], np.int64))
    return out


def test_the_rewrite_moves_the_exp_before_erf_and_keeps_the_values():
    m = MathCalls("float32")

    def body(b, x, out, i):
        t = b.let("t0", m.erf(x))
        sq = b.let("t1", x * x)
        e = b.let("t2", m.exp(-sq))
        return t * e

    kir = _kernel(body)
    x = np.linspace(-6, 6, 101, dtype=np.float32)
    want = _run(kir, x)
    assert erf_exp.share_exp(kir) == 1
    names = [s.var.name for s in kir.body[-1].body if isinstance(s, ki.Assign)]
    assert names == ["x0", "t1", "t2", "t0"], names
    assert ki.expr_text(kir.body[-1].body[3].value) == "erf_exp_f32(x0, t2)"
    np.testing.assert_array_equal(_run(kir, x), want)
    k = loops.Kernel("kernel", _kernel(body), rank=1, operands=(), classes=(), parallel=False)
    assert "erf_exp_f32(x0, t2)" in k.listing()          # every CPU kernel takes the rewrite


def test_the_rewrite_leaves_what_it_cannot_prove():
    m = MathCalls("float32")

    def reads_memory(b, x, out, i):       # u is a load (a store between might change it)
        v = out[i]
        t = b.let("t0", m.erf(v))
        return t * b.let("t2", m.exp(-(v * v)))

    def other_argument(b, x, out, i):     # exp(-(x*x)) beside erf(2x): not erf's exp
        t = b.let("t0", m.erf(x + x))
        return t * b.let("t2", m.exp(-(x * x)))

    def reassigned(b, x, out, i):         # u assigned twice: the exp's u is another value
        u = b.var("u", ki.F32)
        b.set(u, x)
        t = b.let("t0", m.erf(ki.read(u)))
        b.set(u, x + 1)
        return t * b.let("t2", m.exp(-(ki.read(u) * ki.read(u))))

    for body in (reads_memory, other_argument, reassigned):
        kir = _kernel(body)
        assert erf_exp.share_exp(kir) == 0, body.__name__
