"""The small-GEMM kernel (codegen/kernels/small_gemm.py): BLAS's ``?gemm`` contract, for every transpose, leading
dimension, alpha and beta, against NumPy in float64; what it hands to BLAS; and compiled products that use it."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jitgrad as jg
from jitgrad.codegen.kernels import small_gemm
from jitgrad.ir.ops import blas_library

_CALL = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))


def _gemm(routine, dt, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
    """Call ``routine`` (an address with BLAS's Fortran signature) on flat column-major buffers."""
    sc = np.dtype(dt).type
    chars = [ctypes.c_char(ta.encode()), ctypes.c_char(tb.encode())]
    ints = {name: ctypes.c_int32(v) for name, v in dict(m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc).items()}
    scal = {"alpha": np.array([alpha], sc), "beta": np.array([beta], sc)}
    addr = ctypes.addressof
    _CALL(routine)(addr(chars[0]), addr(chars[1]), addr(ints["m"]), addr(ints["n"]), addr(ints["k"]),
                   scal["alpha"].ctypes.data, A.ctypes.data, addr(ints["lda"]), B.ctypes.data, addr(ints["ldb"]),
                   scal["beta"].ctypes.data, C.ctypes.data, addr(ints["ldc"]))


def _view(X, rows, cols, ld):
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` that flat ``X`` holds."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), X.dtype)
    return np.lib.stride_tricks.as_strided(X, (rows, cols), (X.itemsize, ld * X.itemsize))


def _case(dt, ta, tb, m, n, k, pad, seed):
    rng = np.random.default_rng(seed)
    lda = (m if ta == "N" else k) + pad
    ldb = (k if tb == "N" else n) + pad
    ldc = m + pad
    lda, ldb, ldc = max(lda, 1), max(ldb, 1), max(ldc, 1)
    A = rng.standard_normal((k if ta == "N" else m) * lda + 3).astype(dt)
    B = rng.standard_normal((n if tb == "N" else k) * ldb + 3).astype(dt)
    C = rng.standard_normal(n * ldc + 3).astype(dt)
    return A, lda, B, ldb, C, ldc


def _reference(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, ldc):
    opA = _view(A, m, k, lda) if ta == "N" else _view(A, k, m, lda).T
    opB = _view(B, k, n, ldb) if tb == "N" else _view(B, n, k, ldb).T
    out = alpha * (opA.astype(np.float64) @ opB.astype(np.float64))
    if beta != 0.0:
        out = out + beta * _view(C0, m, n, ldc).astype(np.float64)
    return out


@settings(max_examples=150, deadline=None)
@given(dt=st.sampled_from([np.float32, np.float64]), ta=st.sampled_from("NTnt"), tb=st.sampled_from("NTnt"),
       m=st.integers(0, 70), n=st.integers(0, 13), k=st.integers(0, 40), pad=st.integers(0, 3),
       alpha=st.sampled_from([1.0, -0.5, 2.0]), beta=st.sampled_from([0.0, 1.0, 0.25]), seed=st.integers(0, 99))
def test_small_gemm_is_blas_gemm(dt, ta, tb, m, n, k, pad, alpha, beta, seed):
    """C = alpha op(A) op(B) + beta C, column-major, for every tile size's remainder (rows in vectors of 8 or 4,
    columns in threes); with beta == 0, C is not read (NaN there stays out); nothing outside C's m x n window
    is written."""
    name = "sgemm" if dt == np.float32 else "dgemm"
    routine = small_gemm.address(name, blas_library.gemm_address)
    A, lda, B, ldb, C, ldc = _case(dt, ta.upper(), tb.upper(), m, n, k, pad, seed)
    if beta == 0.0:
        C[:] = np.nan
    C0 = C.copy()
    _gemm(routine, dt, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    ref = _reference(ta.upper(), tb.upper(), m, n, k, alpha, A, lda, B, ldb, beta, C0, ldc)
    tol = 2e-5 if dt == np.float32 else 1e-13
    np.testing.assert_allclose(_view(C, m, n, ldc), ref, rtol=tol, atol=tol * max(k, 1))
    outside = np.ones(C.shape, bool)
    for j in range(n):
        outside[j * ldc:j * ldc + m] = False
    np.testing.assert_array_equal(C[outside], C0[outside])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("why", ["big", "packed A too big", "alpha zero"])
def test_what_the_kernel_does_not_take_goes_to_blas(dt, why):
    """Products over MAX_MACS, a transposed A over PACK_MAX elements and alpha == 0 are BLAS's own calls: the
    same bits as calling BLAS directly (the kernel's own sums would round otherwise)."""
    name = "sgemm" if dt == np.float32 else "dgemm"
    ta, alpha = "N", 1.0
    if why == "big":
        m, n, k = 200, 128, 100
        assert m * n * k > small_gemm.MAX_MACS
    elif why == "packed A too big":
        ta, m, n, k = "T", 128, 2, 80
        assert m * k > small_gemm.PACK_MAX and m * n * k <= small_gemm.MAX_MACS
    else:
        m, n, k, alpha = 16, 8, 8, 0.0
    A, lda, B, ldb, C, ldc = _case(dt, ta, "N", m, n, k, 1, 0)
    ours, theirs = C.copy(), C.copy()
    _gemm(small_gemm.address(name, blas_library.gemm_address), dt, ta, "N", m, n, k, alpha, A, lda, B, ldb, 0.5, ours, ldc)
    _gemm(blas_library.gemm_address(name), dt, ta, "N", m, n, k, alpha, A, lda, B, ldb, 0.5, theirs, ldc)
    np.testing.assert_array_equal(ours, theirs)


def test_the_kernel_is_taken_by_small_products_only():
    assert small_gemm.routine("sgemm", small_gemm.SMALL_MACS) == "small_sgemm"
    assert small_gemm.routine("dgemm", 64 * 64 * 32) == "small_dgemm"
    assert small_gemm.routine("sgemm", small_gemm.SMALL_MACS + 1) == "sgemm"


def _attention_products(q, k, v):
    return (q @ k.transpose(-2, -1)) @ v


@pytest.mark.parametrize("parallel", [False, True])
def test_compiled_attention_products_run_the_kernel_and_match_numpy(parallel):
    """Attention's batched products (strided heads of one projection, a transposed key) are ``bgemm`` steps
    calling the kernel; serial and pool-split batches give the same bits; values match NumPy."""
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((2, 3, 24, 3 * 16)).astype(np.float32)
    qkv_t = jg.tensor(qkv)
    f = jg.compile(lambda x: _attention_products(*x.split(16, dim=-1)), backend="numba", parallel=parallel)
    out = f(qkv_t).numpy()
    q, k, v = (qkv[..., i * 16:(i + 1) * 16].astype(np.float64) for i in range(3))
    np.testing.assert_allclose(out, (q @ np.swapaxes(k, -1, -2)) @ v, rtol=2e-5, atol=2e-5)
    prods = [x for x in f.launches(qkv_t) if x.kind in ("gemm", "bgemm")]
    assert prods and all(x.routine == "small_sgemm" for x in prods), prods
    assert all(x.label.startswith("matmul (batched, small kernel)") for x in prods if x.kind == "bgemm")
    other = jg.compile(lambda x: _attention_products(*x.split(16, dim=-1)), backend="numba",
                       parallel=not parallel)
    np.testing.assert_array_equal(other(qkv_t).numpy(), out)


def test_off_switch_sends_every_product_to_blas(monkeypatch):
    monkeypatch.setattr(small_gemm, "ENABLED", False)
    a = jg.tensor(np.ones((4, 8, 8), np.float32))
    f = jg.compile(lambda a: a @ a + 1.0, backend="numba")
    np.testing.assert_array_equal(f(a).numpy(), np.full((4, 8, 8), 9.0, np.float32))
    assert [x.routine for x in f.launches(a) if x.kind == "bgemm"] == ["sgemm"]


def test_gradcheck_through_compiled_small_products():
    """float64 products (``small_dgemm``) forward and in both gradients, against finite differences."""
    rng = np.random.default_rng(2)
    a = jg.tensor(rng.standard_normal((2, 5, 7)), requires_grad=True)
    b = jg.tensor(rng.standard_normal((2, 7, 3)), requires_grad=True)
    f = jg.compile(lambda a, b: (a @ b).tanh(), backend="numba")
    assert [x.routine for x in f.launches(a, b) if x.kind == "bgemm"] == ["small_dgemm"]
    assert jg.autograd.gradcheck(f, (a, b))
    assert jg.autograd.gradgradcheck(f, (a, b))


_LOAD = """
import numpy as np, jitgrad as jg
from jitgrad.codegen.kernels import small_gemm
a = jg.tensor(np.ones((3, 4, 4), np.float32))
f = jg.compile(lambda a: a @ a, backend="numba", background=False)
assert (f(a).numpy() == 4.0).all()
print("stats", small_gemm.STATS["modules_built"], small_gemm.STATS["modules_loaded"])
"""


def test_the_module_is_built_once_per_machine(tmp_path):
    """The first process builds the module and stores it in the cache of compiled code; the next loads it."""
    env = dict(os.environ, JITGRAD_CACHE_DIR=str(tmp_path / "cache"), NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    got = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        got.append(r.stdout.split("stats")[1].split())
    assert got == [["1", "1"], ["0", "1"]]


_ENGINES = []       # the test modules' engines, kept alive with their code


def _module_routine(wide: bool, dt) -> int:
    """The address of this module's ``?gemm`` built at one vector width (``wide``: 512-bit), under a name of its
    own, so both widths live in one process whatever this CPU's own build is."""
    from jitgrad.codegen.native import objload
    small_gemm.address("sgemm", blas_library.gemm_address)     # (links the module: its BLAS fallbacks' symbols)
    ll = objload._ll()
    prefix = f"test_w{int(wide)}_"
    m = ll.parse_assembly(small_gemm.small_gemm_ir(fma=True, wide=wide).replace('"jitgrad_small_', '"' + prefix))
    tm = ll.Target.from_default_triple().create_target_machine(
        cpu=ll.get_host_cpu_name(), features=ll.get_host_cpu_features().flatten(), opt=2, codemodel="jitdefault")
    ee = ll.create_mcjit_compiler(m, tm)
    ee.finalize_object()
    _ENGINES.append(ee)
    address = ee.get_function_address(prefix + ("sgemm" if dt == np.float32 else "dgemm"))
    assert address
    return address


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_512_bit_tiles_give_the_256_bit_bits(dt):
    """The module built for AVX-512 (``TILE_ROWS_WIDE``) and the 256-bit one compute every element of C as the
    same ordered sum: the same bits, for attention's 64- and 32-row products and every remainder of rows
    (2, 1 vectors, scalars) and columns (6, 3, 1)."""
    wide, narrow = _module_routine(True, dt), _module_routine(False, dt)
    rng = np.random.default_rng(7)
    shapes = [(64, 64, 32), (32, 64, 64), (64, 32, 64)] + [tuple(int(v) for v in rng.integers(1, 80, 3))
                                                          for _ in range(40)]
    for i, (m, n, k) in enumerate(shapes):
        ta, tb = "NT"[i % 2], "NT"[(i // 2) % 2]
        alpha, beta = (1.0, 0.0) if i % 3 else (0.5, 0.25)
        A, lda, B, ldb, C, ldc = _case(dt, ta, tb, m, n, k, i % 3, i)
        got = [C.copy(), C.copy()]
        for routine, out in zip((wide, narrow), got):
            _gemm(routine, dt, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, out, ldc)
        np.testing.assert_array_equal(got[0], got[1], err_msg=f"{ta}{tb} {m}x{n}x{k}")


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_transposed_gives_the_bits_of_a_copied_first(dt):
    """A transposed A is packed (blocks transposed in registers, the edges one element at a time) before the same
    tiles run: every element of C has the bits of the product with op(A) copied out beforehand (``N``), for
    attention's shapes and every remainder of the blocks' rows and columns."""
    routine = small_gemm.address("sgemm" if dt == np.float32 else "dgemm", blas_library.gemm_address)
    rng = np.random.default_rng(3)
    shapes = [(64, 64, 32), (64, 32, 64)] + [tuple(int(v) for v in rng.integers(1, 70, 3)) for _ in range(30)]
    for i, (m, n, k) in enumerate(shapes):
        A, lda, B, ldb, C, ldc = _case(dt, "T", "N", m, n, k, i % 3, i)
        copied = np.ascontiguousarray(_view(A, k, m, lda).T).ravel(order="F")      # op(A), column-major, ld m
        got = [C.copy(), C.copy()]
        _gemm(routine, dt, "T", "N", m, n, k, 1.0, A, lda, B, ldb, 0.0, got[0], ldc)
        _gemm(routine, dt, "N", "N", m, n, k, 1.0, copied, m, B, ldb, 0.0, got[1], ldc)
        np.testing.assert_array_equal(got[0], got[1], err_msg=f"{m}x{n}x{k}")
