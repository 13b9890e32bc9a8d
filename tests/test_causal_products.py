"""Attention's causal half (ir/passes/causal.py, jit/constant_masks.py, the small kernel's triangular variants in
codegen/kernels/small_gemm.py): which products a causal mask halves, the multiply-adds they skip, the same bits as
the whole products, and the full products wherever the mask is not provably causal."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.kernels import small_gemm
from jitgrad.ir.ops import blas_library
from jitgrad.ir.passes import causal

from test_small_gemm import _gemm

T, D = 16, 8


def _attention(mask):
    """nanoGPT's attention with a mask buffer, forward and backward in one compiled step."""
    def f(q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(mask[:, :, :t, :t] == 0, float("-inf"))
        y = jg.nn.functional.softmax(att, dim=-1) @ v
        (y * y).sum().backward()
        return y.detach(), q.grad, k.grad, v.grad
    return f


def _qkv(dt=np.float32, seed=0, t=T):
    rng = np.random.default_rng(seed)
    return [jg.tensor(rng.standard_normal((2, 3, t, D)).astype(dt), requires_grad=True) for _ in range(3)]


def _run(f, qkv, on=True, monkeypatch=None):
    monkeypatch.setattr(causal, "ENABLED", on)
    cf = jg.compile(f, backend="numba", background=False)
    for t in qkv:
        t.grad = None
    out = [x.numpy().copy() for x in cf(*qkv)]
    launches = [x for x in cf.launches(*qkv) if x.kind in ("gemm", "bgemm")]
    for t in qkv:
        t.grad = None
    return out, launches, cf


def _causal_buffer(t=T):
    return jg.tril(jg.ones(t, t)).view(1, 1, t, t)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("tri", small_gemm.TRIANGLES)
def test_triangular_kernels_give_the_whole_kernels_bits(dt, tri):
    """Each variant on operands zero on the side it skips: every element it computes has the whole kernel's
    bits; a ``rows_*`` variant stores 0 (``beta C`` where ``beta != 0``) in the rows it does not compute."""
    rng = np.random.default_rng(3)
    name = "sgemm" if dt == np.float32 else "dgemm"
    full = small_gemm.address(name, blas_library.gemm_address)
    ours = small_gemm.address(f"{name}_{tri}", blas_library.gemm_address)
    for m, n, k in ((64, 64, 32), (37, 37, 37), (32, 64, 64), (64, 32, 64), (9, 9, 5), (5, 9, 9)):
        if tri.startswith("p_") and (k != (n if tri.endswith("col") else m)) or tri.startswith("rows") and m != n:
            continue
        for ta in "NT":
            for beta in (0.0, 0.5):
                opA, opB = rng.standard_normal((m, k)), rng.standard_normal((k, n))
                p, c, r = np.arange(k)[:, None], np.arange(n)[None, :], np.arange(m)[:, None]
                if tri == "p_le_col":
                    opB[p > c] = 0
                elif tri == "p_ge_col":
                    opB[p < c] = 0
                elif tri == "p_le_row":
                    opA[np.arange(k)[None, :] > r] = 0
                elif tri == "p_ge_row":
                    opA[np.arange(k)[None, :] < r] = 0
                A = np.asfortranarray(opA if ta == "N" else opA.T).astype(dt).ravel(order="F")
                B = np.asfortranarray(opB).astype(dt).ravel(order="F")
                C0 = rng.standard_normal(m * n).astype(dt)
                got, want = C0.copy(), C0.copy()
                lda = m if ta == "N" else k
                _gemm(ours, dt, ta, "N", m, n, k, 1.0, A, lda, B, k, beta, got, m)
                _gemm(full, dt, ta, "N", m, n, k, 1.0, A, lda, B, k, beta, want, m)
                got, want, C0m = (x.reshape((m, n), order="F") for x in (got, want, C0))
                if tri.startswith("rows"):
                    cc = np.arange(n)[None, :]
                    keep = r <= cc if tri == "rows_le_col" else r >= cc
                    np.testing.assert_array_equal(got[keep], want[keep])
                    other = (beta * C0m).astype(dt) if beta else np.zeros_like(C0m)
                    assert ((got == want) | (got == other)).all()
                else:
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wide", [False, True])
def test_multiply_adds_of_the_variants(wide):
    """The kernel's multiply-adds per variant (its tiles walked): little more than half the whole product's at
    B9's sizes (a tile's whole p range runs), never below the triangle's own count."""
    t, d = 64, 32
    full = t * t * d
    for tri, (m, n, k) in (("rows_le_col", (t, t, d)), ("rows_ge_col", (t, t, d)), ("p_le_col", (d, t, t)),
                           ("p_ge_col", (d, t, t)), ("p_le_row", (t, d, t)), ("p_ge_row", (t, d, t))):
        got = small_gemm.macs(tri, m, n, k, wide=wide)
        exact = d * t * (t + 1) // 2            # the lower triangle with its diagonal
        assert exact <= got < 0.65 * full, (tri, got, exact, full)
    assert small_gemm.macs(None, 7, 5, 3) == 105
    # one tile column at a time: p_le_col sums p < j + 1 exactly
    assert small_gemm.macs("p_le_col", 1, 1, 1, wide=wide) == 1


def test_compiled_attention_skips_the_masked_half_with_the_same_bits(monkeypatch):
    """All six products of attention's forward and backward run a triangular variant (their launch records
    say which, and their multiply-adds), with the bits of the whole products; == the interpreter and eager."""
    f = _attention(_causal_buffer(2 * T))
    qkv = _qkv(t=2 * T)
    got, launches, _ = _run(f, qkv, True, monkeypatch)
    want, whole, _ = _run(f, qkv, False, monkeypatch)
    tris = sorted(x.routine[len("small_sgemm_"):] for x in launches)
    assert len(tris) == 6 and all(x.routine.startswith("small_sgemm_") for x in launches), tris
    assert tris.count("rows_le_col") == 2, tris     # the scores and their gradient dO v^T
    assert [x.routine for x in whole] == ["small_sgemm"] * 6
    skipped = sum(w.work - x.work for w, x in zip(whole, launches))
    assert 0.2 * sum(w.work for w in whole) < skipped < 0.5 * sum(w.work for w in whole), skipped
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    interp = jg.compile(f, backend="interpret")
    for a, b in zip(got, interp(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
    for t in qkv:
        t.grad = None
    for a, b in zip(got, f(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_mask_built_inside_the_step_halves_the_products_too(monkeypatch):
    def f(q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)).masked_fill(jg.tril(jg.ones(t, t)) == 0, float("-inf"))
        return jg.nn.functional.softmax(att, dim=-1) @ v
    qkv = _qkv()
    monkeypatch.setattr(causal, "ENABLED", True)
    cf = jg.compile(f, backend="numba", background=False)
    routines = sorted(x.routine for x in cf.launches(*qkv) if x.kind == "bgemm")
    assert routines == ["small_sgemm_p_le_col", "small_sgemm_rows_le_col"], routines
    monkeypatch.setattr(causal, "ENABLED", False)
    np.testing.assert_array_equal(cf(*qkv).detach().numpy(),
                                  jg.compile(f, backend="numba", background=False)(*qkv).detach().numpy())


@pytest.mark.parametrize("make", [
    lambda: jg.tril(jg.ones(T, T), diagonal=1).view(1, 1, T, T),        # one diagonal more: not causal
    lambda: jg.tril(jg.ones(T, T), diagonal=-1).view(1, 1, T, T) + jg.eye(T).view(1, 1, T, T) * 0.0,
    lambda: jg.tensor((np.random.default_rng(5).random((1, 1, T, T)) < 0.7) | np.eye(T, dtype=bool)).float(),
    lambda: jg.triu(jg.ones(T, T)).view(1, 1, T, T),                  # anti-causal
])
def test_masks_not_causal_run_the_whole_products(make, monkeypatch):
    """A mask that is not exactly ``tril(ones)`` (an offset diagonal, a random mask, the upper triangle): every
    product whole, results as with the analysis off."""
    mask = make()
    f = _attention(mask)
    qkv = _qkv()
    got, launches, _ = _run(f, qkv, True, monkeypatch)
    assert [x.routine for x in launches] == ["small_sgemm"] * 6, [x.routine for x in launches]
    want, _, _ = _run(f, qkv, False, monkeypatch)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_mask_written_in_place_retraces(monkeypatch):
    """The causal buffer is folded into the graph while it is the same array at the same version: an in-place
    write (here: a mask that is no longer causal) retraces, and the whole products run."""
    monkeypatch.setattr(causal, "ENABLED", True)
    mask = _causal_buffer()
    f = _attention(mask)
    qkv = _qkv()
    cf = jg.compile(f, backend="numba", background=False)
    cf(*qkv)
    assert all("_" in x.routine[6:] for x in cf.launches(*qkv) if x.kind == "bgemm")
    with jg.no_grad():
        mask.copy_(jg.ones(1, 1, T, T))         # no mask at all now
    for t in qkv:
        t.grad = None
    got = [x.numpy().copy() for x in cf(*qkv)]
    assert [x.routine for x in cf.launches(*qkv) if x.kind == "bgemm"] == ["small_sgemm"] * 6
    for t in qkv:
        t.grad = None
    for a, b in zip(got, f(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_non_finite_values_in_the_skipped_half_are_not_read(monkeypatch):
    """The choice where values are not finite: as torch's ``scaled_dot_product_attention(is_causal=True)``, the
    masked half is skipped, not multiplied by zero, so a NaN in ``v``'s last row reaches the last rows of ``P @ v``
    only (the whole product spreads ``0 * NaN`` to every row)."""
    t = 32
    mask = _causal_buffer(t)

    def f(q, k, v):
        att = (q @ k.transpose(-2, -1)).masked_fill(mask == 0, float("-inf"))
        return jg.nn.functional.softmax(att, dim=-1) @ v
    q, k, v = (x.detach() for x in _qkv(t=t))
    v.numpy()[..., t - 1, :] = np.nan
    monkeypatch.setattr(causal, "ENABLED", True)
    y = jg.compile(f, backend="numba", background=False)(q, k, v).numpy()
    assert np.isfinite(y[..., : t - 8, :]).all() and np.isnan(y[..., t - 1, :]).all()
    monkeypatch.setattr(causal, "ENABLED", False)
    assert np.isnan(jg.compile(f, backend="numba", background=False)(q, k, v).numpy()).all()


def test_gradcheck_through_causal_products_float64(monkeypatch):
    """float64 (``small_dgemm``'s variants): the compiled causal attention against finite differences, to second
    order."""
    monkeypatch.setattr(causal, "ENABLED", True)
    mask = _causal_buffer(6)

    def f(q, k, v):
        att = (q @ k.transpose(-2, -1)).masked_fill(mask == 0, float("-inf"))
        return jg.nn.functional.softmax(att, dim=-1) @ v
    rng = np.random.default_rng(7)
    q, k, v = (jg.tensor(rng.standard_normal((1, 2, 6, 3)), requires_grad=True) for _ in range(3))
    cf = jg.compile(f, backend="numba", background=False)
    routines = sorted(x.routine for x in cf.launches(q, k, v) if x.kind == "bgemm")
    assert routines == ["small_dgemm_p_le_col", "small_dgemm_rows_le_col"], routines
    assert jg.autograd.gradcheck(cf, (q, k, v))
    assert jg.autograd.gradgradcheck(cf, (q, k, v))


def test_sizes_that_vary_keep_the_mask_guard(monkeypatch):
    """A symbolic trace's instances (one per length) fold the buffer too; its guard is the template's, checked at
    every call, so an in-place write to the mask still retraces."""
    monkeypatch.setattr(causal, "ENABLED", True)
    mask = _causal_buffer()
    f = _attention(mask)
    cf = jg.compile(f, backend="numba", background=False, dynamic=True)
    for t in (T, T - 4, T - 2):
        qkv = _qkv(t=t)
        got = [x.numpy().copy() for x in cf(*qkv)]
        for x in qkv:
            x.grad = None
        for a, b in zip(got, f(*qkv)):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
    with jg.no_grad():
        mask.fill_(1.0)
    qkv = _qkv(t=T - 4)
    got = [x.numpy().copy() for x in cf(*qkv)]
    for x in qkv:
        x.grad = None
    for a, b in zip(got, f(*qkv)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_one_head_without_batch_dims(monkeypatch):
    """2-D products (one head, no batch): the plain ``gemm`` step takes the variants too, with the same bits."""
    mask = jg.tril(jg.ones(T, T))

    def f(q, k, v):
        att = (q @ k.T).masked_fill(mask == 0, float("-inf"))
        return jg.nn.functional.softmax(att, dim=-1) @ v
    rng = np.random.default_rng(4)
    q, k, v = (jg.tensor(rng.standard_normal((T, D)).astype(np.float32)) for _ in range(3))
    out = {}
    for on in (True, False):
        monkeypatch.setattr(causal, "ENABLED", on)
        cf = jg.compile(f, backend="numba", background=False)
        out[on] = (cf(q, k, v).numpy(), sorted(x.routine for x in cf.launches(q, k, v) if x.kind == "gemm"))
    assert out[True][1] == ["small_sgemm_p_le_col", "small_sgemm_rows_le_col"], out[True][1]
    assert out[False][1] == ["small_sgemm", "small_sgemm"]
    np.testing.assert_array_equal(out[True][0], out[False][0])
