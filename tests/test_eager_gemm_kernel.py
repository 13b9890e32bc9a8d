"""Eager matmul on the compiled path's small-product kernel (``jit/eager_gemm_kernel.py``): values, bits across
row blocks and threads, the layouts it hands back to OpenBLAS, and the calls a B3 step makes."""
import sys

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.ir import settings
from jitgrad.ir.ops import OPS
from jitgrad.jit import eager_gemm_kernel as egk, eager_kernels as ek
from jitgrad.runtime import dispatch

pytestmark = pytest.mark.skipif(not (egk.ENABLED and ek.ENABLED), reason="eager kernels turned off")


@pytest.fixture
def linked():
    """The kernel linked in this process (built or loaded now if no earlier call asked for it)."""
    assert egk.link(), egk.LINK.error
    yield


def _run(x, y):
    """``x @ y`` eagerly (arrays as tensors; a transposed array as a tensor's ``.T``, its layout kept), and how
    many calls took the kernel and OpenBLAS."""
    x, y = (a if not isinstance(a, np.ndarray) else jg.tensor(a.T).T
            if a.flags.f_contiguous and not a.flags.c_contiguous else jg.tensor(a) for a in (x, y))
    before = dict(egk.COUNTS)
    r = (x @ y).numpy()
    return r, egk.COUNTS["kernel_calls"] - before["kernel_calls"], egk.COUNTS["blas_calls"] - before["blas_calls"]


def test_its_limits_are_the_kernels():
    from jitgrad.codegen.kernels import small_gemm
    assert (egk.KERNEL_MAX_MACS, egk.PACK_MAX) == (small_gemm.MAX_MACS, small_gemm.PACK_MAX)
    assert OPS["matmul"].eager_kernel is egk.matmul_eager_kernel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 64, 256), (256, 256, 64), (64, 256, 256), (33, 40, 50), (300, 129, 70)])
def test_values_as_numpy_for_every_layout(linked, dtype, shape):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for tx in (False, True):
        for ty in (False, True):
            x = rng.standard_normal((k, m) if tx else (m, k)).astype(dtype)
            y = rng.standard_normal((n, k) if ty else (k, n)).astype(dtype)
            x, y = (x.T if tx else x), (y.T if ty else y)
            r, kernel, blas_calls = _run(x, y)
            assert x.flags.c_contiguous != tx and y.flags.c_contiguous != ty
            assert (kernel, blas_calls) == (1, 0)
            assert r.dtype == dtype and r.shape == (m, n) and r.flags.c_contiguous
            np.testing.assert_allclose(r, x.astype(np.float64) @ y.astype(np.float64), rtol=tol,
                                       atol=tol * np.sqrt(k))


def test_bits_do_not_depend_on_blocks_threads_or_copies(linked, monkeypatch):
    """Every element is one sum over k in order: a product cut into row blocks (over the kernel's limit), run on
    two threads, or its transposed operand copied C-ordered, gives the bits of the kernel's own call on the
    rows it is given."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 300)).astype(np.float32)
    y = rng.standard_normal((300, 200)).astype(np.float32)
    whole, kernel, _ = _run(x, y)           # 15.4M multiply-adds: seven blocks under small_gemm.MAX_MACS
    assert kernel == 1
    for r0, r1 in ((0, 6), (6, 100), (100, 256)):       # blocks of other heights
        part, kernel, _ = _run(x[r0:r1].copy(), y)
        assert kernel == (1 if (r1 - r0) * 300 * 200 >= egk.MIN_MACS else 0)
        if kernel:
            assert part.tobytes() == whole[r0:r1].tobytes()
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    two, kernel, _ = _run(x, y)
    assert kernel == 1 and two.tobytes() == whole.tobytes()
    yt = np.ascontiguousarray(y.T).T        # F-ordered, over PACK_MAX: copied
    copies = egk.COUNTS["copied_operands"]
    r, kernel, _ = _run(x, yt)
    assert kernel == 1 and egk.COUNTS["copied_operands"] == copies + 1 and r.tobytes() == whole.tobytes()


def test_layouts_it_does_not_serve_run_openblas(linked):
    rng = np.random.default_rng(5)
    x = jg.tensor(rng.standard_normal((128, 256)).astype(np.float32))[:, ::2]     # neither C- nor F-ordered
    y = rng.standard_normal((128, 96)).astype(np.float32)
    r, kernel, blas_calls = _run(x, jg.tensor(y))
    assert (kernel, blas_calls) == (0, 1)
    np.testing.assert_allclose(r, x.numpy() @ y, rtol=2e-5, atol=1e-4)
    # outside the range, or a vector's product: not this kernel's signature at all
    for a, b in (((8, 8), (8, 8)), ((1, 256), (256, 256)), ((256, 256), (256, 1)), ((1024, 512), (512, 1024))):
        r, kernel, blas_calls = _run(np.ones(a, np.float32), np.ones(b, np.float32))
        assert (kernel, blas_calls) == (0, 0) and np.all(r == a[1])


def test_openblas_until_linked_then_the_kernel(monkeypatch):
    """Before the kernel is linked calls run the fallback (OpenBLAS); ``SYNC`` links at the first call."""
    link = egk._Link()
    monkeypatch.setattr(egk, "LINK", link)
    monkeypatch.setattr(ek, "SYNC", False)
    monkeypatch.setattr(ek, "REQUEST_AFTER_S", 1e9)     # never asked for: stays on OpenBLAS
    dispatch._RULES.clear()
    x = np.random.default_rng(6).standard_normal((64, 64)).astype(np.float32)
    r, kernel, blas_calls = _run(x, x)
    assert (kernel, blas_calls, link.state) == (0, 1, "new")
    monkeypatch.setattr(ek, "SYNC", True)
    r2, kernel, blas_calls = _run(x, x)
    assert (kernel, blas_calls, link.state) == (1, 0, "ready"), link.error
    np.testing.assert_allclose(r, r2, rtol=1e-5, atol=1e-5)
    dispatch._RULES.clear()


def test_off_switch(monkeypatch):
    monkeypatch.setattr(egk, "ENABLED", False)
    dispatch._RULES.clear()
    x = np.ones((64, 64), np.float32)
    assert _run(x, x)[1:] == (0, 0)
    dispatch._RULES.clear()


def test_gradcheck_through_the_kernel(linked):
    rng = np.random.default_rng(7)
    x = jg.tensor(rng.standard_normal((32, 33)), requires_grad=True)
    w = jg.tensor(rng.standard_normal((33, 32)), requires_grad=True)
    before = egk.COUNTS["kernel_calls"]
    assert jg.autograd.gradcheck(lambda a, b: a @ b, (x, w))
    assert egk.COUNTS["kernel_calls"] > before


def test_b3_step_runs_its_five_products_on_the_kernel(linked, monkeypatch):
    """B3 at its size (B=256, D=64, H=256), one thread: its five 256 x 64 x 256-class products each one kernel
    call (two blocks of rows), none through OpenBLAS's ``?gemm``; the three matrix-vector products keep ``?gemv``."""
    from test_double_backward_counts import _b3
    monkeypatch.setattr(settings.STATE, "num_threads", 1)
    step, _ = _b3(B=256, D=64, Hd=256)
    for _ in range(3):
        step()
    names = []

    def prof(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)
    before = dict(egk.COUNTS)
    sys.setprofile(prof)
    try:
        step()
    finally:
        sys.setprofile(None)
    assert egk.COUNTS["kernel_calls"] - before["kernel_calls"] == 5
    assert egk.COUNTS["blas_calls"] == before["blas_calls"]
    assert egk.COUNTS["copied_operands"] - before["copied_operands"] == 1     # gh @ W1.T
    assert names.count("gemm_small_kernel") == 5
    assert names.count("_gemm_rows") == 0 and names.count("gemm_one_thread") == 0
