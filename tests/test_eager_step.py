"""The eager training step's backward and update paths (issue 28): the cheaper impls they take keep the general
impls' bits (counted work is in test_eager_budget.py)."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import dtypes as dt
from jitgrad.ir.ops.index import _index_put_for_signature, _index_put_impl
from jitgrad.ir.ops.opdef import Aval

_ROWS = (("tensor", 0),)


def _aval(a):
    return Aval(a.shape, dt._FROM_NP[a.dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, ishape, vshape, spec", [
    ((27, 10), (32, 3), (32, 3, 10), _ROWS),             # makemore's embedding
    ((5,), (7,), (7,), _ROWS),
    ((6, 2, 3), (40,), (40, 2, 3), _ROWS),
    ((6, 4), (), (4,), _ROWS),                           # a 0-d index
    ((6, 4), (9,), (4,), _ROWS),                         # a value broadcast over the indices
    ((6, 4), (9,), (1,), _ROWS + (("slice", None, None, None),)),
    ((6, 4), (0,), (0, 4), _ROWS),                       # no index
])
@pytest.mark.parametrize("tiled", [True, False])
def test_index_put_by_rows_keeps_the_general_impls_bits(dtype, shape, ishape, vshape, spec, tiled, monkeypatch):
    """``index_put`` accumulating along the first axis (an embedding's backward) runs ``np.add.at`` over the
    flattened array: repeated and negative indices, broadcast values and signed zeros give the general impl's
    bits and layout (element numbers from a tiled row kept per signature, or broadcast per call)."""
    from jitgrad.ir.ops import index
    if not tiled:
        monkeypatch.setattr(index, "_TILED_MAX", 0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    i = rng.integers(-shape[0], shape[0], ishape)
    v = rng.standard_normal(vshape).astype(dtype)
    v.flat[::3] = -0.0
    fast = _index_put_for_signature([_aval(x), _aval(v), _aval(i)], {"spec": spec, "accumulate": True})
    assert fast is not None and fast.__name__ == "index_put_rows"
    for xx, vv in ((x, v), (np.zeros_like(x), -np.zeros_like(v))):
        a = fast(xx, vv, i, spec=spec, accumulate=True)
        b = _index_put_impl(xx, vv, i, spec=spec, accumulate=True)
        assert a.tobytes() == b.tobytes() and a.strides == b.strides and a.dtype == b.dtype
    f_ordered = np.asfortranarray(rng.standard_normal((6, 4, 2)).astype(dtype))     # (the general impl then)
    j = rng.integers(0, 6, 5)
    w = rng.standard_normal((5, 4, 2)).astype(dtype)
    fast = _index_put_for_signature([_aval(f_ordered), _aval(w), _aval(j)], {"spec": _ROWS, "accumulate": True})
    assert fast(f_ordered, w, j, spec=_ROWS, accumulate=True).tobytes() == \
        _index_put_impl(f_ordered, w, j, spec=_ROWS, accumulate=True).tobytes()


def test_index_put_by_rows_only_where_it_applies():
    x, v, i = np.zeros((6, 4), np.float32), np.ones((3, 4), np.float32), np.array([0, 1, 1])
    avals = [_aval(x), _aval(v), _aval(i)]
    assert _index_put_for_signature(avals, {"spec": _ROWS, "accumulate": False}) is None
    assert _index_put_for_signature(avals, {"spec": (("slice", 1, None, None), ("tensor", 0)),
                                            "accumulate": True}) is None
    assert _index_put_for_signature([avals[0], avals[1], _aval(i > 0)], {"spec": _ROWS, "accumulate": True}) is None
    ints = np.zeros((6, 4), np.int64)
    assert _index_put_for_signature([_aval(ints), _aval(ints[:3]), avals[2]],
                                    {"spec": _ROWS, "accumulate": True}) is None


def test_embedding_backward_out_of_range_still_raises():
    """An index out of range raises as the general impl's does (the range check of ``oob`` ops, or NumPy's)."""
    rng = np.random.default_rng(1)
    C = jg.tensor(rng.standard_normal((27, 10), dtype=np.float32), requires_grad=True)
    idx = jg.tensor(rng.integers(0, 27, (32, 3)))
    for _ in range(3):
        C.grad = None
        (C[idx] * 2.0).sum().backward()
    want = np.zeros((27, 10), np.float32)
    np.add.at(want, idx.numpy(), np.float32(2.0))
    np.testing.assert_array_equal(C.grad.numpy(), want)
    with pytest.raises(IndexError):
        jg.nn.functional.embedding(jg.tensor(np.array([0, 27])), C).sum().backward()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [(32, 30, 200), (32, 200, 27), (200, 32, 27), (30, 32, 200), (64, 64, 64),
                                     (256, 256, 1), (1, 256, 256)])
def test_gemm_of_one_signature_is_matmul2ds_call(dtype, m, k, n):
    """A single-threaded GEMM's signature gets its call worked out once (``eager_gemm``): the same routine and
    arguments as ``blas.matmul2d``, so the same bits, for every operand layout (C- or F-ordered, neither,
    read-only)."""
    from jitgrad.ir.ops import blas, eager_gemm
    f = eager_gemm.gemm_for_signature(m, k, n, dtype)
    assert f is not None
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ro = a.copy()
    ro.flags.writeable = False
    for x in (a, np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2], ro):
        for y in (b, np.asfortranarray(b)):
            got = f(x, y)
            assert got.flags.c_contiguous and got.dtype == dtype
            assert got.tobytes() == blas.matmul2d(x, y).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matvec_products_by_gemv(dtype, monkeypatch):
    """A single-threaded product with one row or one column of output is one ?gemv call (blas_gemv.py: a GEMM packs
    the whole matrix first), for every operand layout; larger ones (threaded GEMMs) and full products keep ?gemm."""
    from jitgrad.ir.ops import blas, blas_gemv
    calls = []
    monkeypatch.setattr(blas, "matvec", lambda a, b: calls.append(a.shape + b.shape) or blas_gemv.matvec(a, b))
    rng = np.random.default_rng(1)
    t = rng.standard_normal((256, 256)).astype(dtype)
    w = rng.standard_normal((256, 1)).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for a, b in ((t, w), (t.T, w), (w.T, t), (w.T, t.T), (np.broadcast_to(w.T, (1, 256)), t),
                 (t, np.broadcast_to(w[:1], (256, 1)))):
        got = blas.matmul2d(a, b)
        assert got.shape == (a.shape[0], b.shape[1]) and got.flags.c_contiguous and got.dtype == dtype
        np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), **tol)
    assert len(calls) == 6
    blas.matmul2d(t, t)                                                     # a full product: ?gemm
    blas.matmul2d(rng.standard_normal((4096, 128)).astype(dtype), w[:128])  # 512k multiply-adds: threaded ?gemm
    assert len(calls) == 6


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [(256, 64, 256), (256, 256, 64), (64, 256, 256), (4096, 128, 1), (96, 512, 80)])
def test_threaded_gemm_of_one_signature(dtype, m, k, n):
    """A GEMM over BLAS_THREADED_MACS gets matmul2d's own path per signature (row blocks on the eager threads, or
    OpenBLAS's threads), without five frames a product: the same bits for every operand layout, at one thread and at
    the configured count."""
    from jitgrad.ir import settings
    from jitgrad.ir.ops import blas, eager_gemm
    f = eager_gemm.gemm_for_signature(m, k, n, dtype)
    assert f is not None and f.__name__ == "gemm_threaded"
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    ro = a.copy()
    ro.flags.writeable = False
    was = settings.STATE.num_threads
    try:
        for threads in (was, 1):
            settings.STATE.num_threads = threads
            for x in (a, np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2], ro):
                for y in (b, np.asfortranarray(b)):
                    got = f(x, y)
                    assert got.flags.c_contiguous and got.dtype == dtype and got.shape == (m, n)
                    assert got.tobytes() == blas.matmul2d(x, y).tobytes()
    finally:
        settings.STATE.num_threads = was


def test_gemm_of_one_signature_only_where_matmul2d_runs_one_call():
    from jitgrad.ir.ops import blas, eager_gemm
    assert eager_gemm.gemm_for_signature(8, 8, 8, np.float32) is None          # under EAGER_MIN_MACS: dot2d
    assert eager_gemm.gemm_for_signature(128, 128, 128, np.float32).__name__ == "gemm_threaded"   # over
    # BLAS_THREADED_MACS: matmul2d's threaded path without its frames (test_threaded_gemm_of_one_signature)
    assert eager_gemm.gemm_for_signature(32, 32, 64, np.int64) is None
    x = jg.tensor(np.ones((32, 30), np.float32), requires_grad=True)
    w = jg.tensor(np.ones((30, 200), np.float32), requires_grad=True)
    (x @ w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((32, 30), 200.0, np.float32))
    np.testing.assert_array_equal(w.grad.numpy(), np.full((30, 200), 32.0, np.float32))
    assert blas.BLAS_THREADED_MACS >= 32 * 30 * 200 >= blas.EAGER_MIN_MACS


@pytest.mark.parametrize("xs, shape", [((1, 200), (32, 200)), ((200,), (32, 200)), ((), (3, 4)), ((3, 1), (3, 5)),
                                       ((1, 1), (4, 1, 1))])
def test_broadcast_of_one_signature_is_bcast_impls_view(xs, shape):
    """A broadcast that repeats elements (a sum's vjp) gets its strides worked out once: the same read-only view as
    ``_bcast_impl`` (values, strides), and ``_bcast_impl`` itself for an input that is not C-ordered."""
    from jitgrad.ir.ops.shape import _bcast_for_signature, _bcast_impl
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    f = _bcast_for_signature([_aval(x)], {"shape": shape})
    assert f is not None and f.__name__ == "broadcast_view"
    a, b = f(x, shape), _bcast_impl(x, shape)
    assert a.tobytes() == b.tobytes() and a.strides == b.strides and not a.flags.writeable and not b.flags.writeable
    if len(xs) == 2 and xs[1] > 1:
        y = np.asfortranarray(np.repeat(x, 3, axis=0))[:1]       # (not C-ordered: the general impl)
        assert f(y, shape).tobytes() == _bcast_impl(y, shape).tobytes()
    assert _bcast_for_signature([_aval(np.ones((2, 3), np.float32))], {"shape": (2, 3)}) is None   # nothing repeats


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis", [((32, 27), 1), ((4, 5, 6), 0), ((7,), 0)])
def test_log_softmax_backward_into_one_buffer_keeps_its_bits(dtype, shape, axis):
    from jitgrad.ir.ops.fused import _lsm_bwd_impl
    rng = np.random.default_rng(0)
    g, out = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    want = g - np.exp(out) * np.add.reduce(g, axis=axis, keepdims=True)
    got = _lsm_bwd_impl(g, out, axis)
    assert got.tobytes() == want.tobytes() and got.dtype == want.dtype


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_cross_entropy_target_range_in_one_reduction(dtype):
    """The class-index check is one pass (a short target as a list; a long one read unsigned, where a negative one
    is huge: one reduction), the same errors;
    an ignored target outside [0, C) still passes, and the node is named once, as torch names it."""
    F = jg.nn.functional
    x = jg.tensor(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), requires_grad=True)
    loss = F.cross_entropy(x, jg.tensor(np.array([0, 1, 4, 2], dtype)))
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert F.cross_entropy(x, jg.tensor(np.array([0, -100, 4, 2], dtype))).grad_fn.name() == "NllLossBackward0"
    for bad, shown in (([0, 5, 1, 1], 5), ([0, -1, 1, 1], -1), ([0, -7, 1, 9], 9)):
        with pytest.raises(IndexError, match=f"Target {shown} is out of bounds"):
            F.cross_entropy(x, jg.tensor(np.array(bad, dtype)))
    smoothed = F.cross_entropy(x, jg.tensor(np.array([0, 1, 4, 2], dtype)), label_smoothing=0.1)
    assert smoothed.grad_fn.name() == "NllLossBackward0"
