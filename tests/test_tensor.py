"""The tensor surface: factories, dtypes, metadata, conversion, repr, promotion, operators, in-place ops,
indexing (get and set, with gradients), views, DLPack and the Python protocols.

Every test has a NumPy or literal expectation; where PyTorch is importable it is an extra oracle.
"""
import math

import numpy as np
import pytest

import jitgrad as jg

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")

ALL_DTYPES = [jg.float32, jg.float64, jg.int64, jg.int32, jg.bool]
NP_OF = {jg.float32: np.float32, jg.float64: np.float64, jg.int64: np.int64, jg.int32: np.int32, jg.bool: np.bool_}


def tdt(d):
    """The torch dtype with the same name as jitgrad dtype d."""
    return getattr(torch, d.name)


def sample(d, shape=(3,)):
    """Small nonzero values of dtype d (safe divisors)."""
    n = int(np.prod(shape))
    if d is jg.bool:
        a = np.arange(n) % 2 == 0
    elif d.is_floating_point:
        a = (np.arange(n) % 5 + 1) * 0.75
    else:
        a = np.arange(n) % 5 + 1
    return a.astype(NP_OF[d]).reshape(shape)


# ================================================================================================
# factories
# ================================================================================================

class TestFactories:
    @pytest.mark.parametrize("data, dtype", [
        ([1.0, 2.0], jg.float32), ([1, 2], jg.int64), ([True, False], jg.bool), ([1, 2.5], jg.float32),
        ([True, 2], jg.int64), ([[1, 2], [3, 4]], jg.int64), (3.0, jg.float32), (3, jg.int64), (True, jg.bool),
        ([], jg.float32), ([[1.0], [2.0]], jg.float32)])
    def test_tensor_infers_dtype(self, data, dtype):
        t = jg.tensor(data)
        assert t.dtype is dtype
        np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=NP_OF[dtype]))
        if torch is not None:
            assert torch.tensor(data).dtype == tdt(dtype)

    @pytest.mark.parametrize("npdt, dtype", [(np.float32, jg.float32), (np.float64, jg.float64),
                                             (np.int32, jg.int32), (np.int64, jg.int64), (np.bool_, jg.bool)])
    def test_tensor_from_numpy_keeps_dtype_and_copies(self, npdt, dtype):
        a = np.array([1, 0, 1], dtype=npdt)
        t = jg.tensor(a)
        assert t.dtype is dtype
        a[0] = 0
        assert t.tolist()[0] == 1, "jg.tensor must copy its input"

    def test_tensor_numpy_scalar_keeps_dtype(self):
        assert jg.tensor(np.float64(1.5)).dtype is jg.float64
        assert jg.tensor(np.int32(3)).dtype is jg.int32

    def test_tensor_from_list_of_tensors(self):
        assert jg.tensor([jg.tensor(1.0), jg.tensor(2.0)]).tolist() == [1.0, 2.0]
        assert jg.tensor([jg.tensor(1.0, dtype=jg.float64), jg.tensor(2.0)]).dtype is jg.float64
        assert jg.tensor([jg.tensor(1, dtype=jg.int32)]).dtype is jg.int32
        t = jg.tensor([jg.tensor(1), 2.5])
        assert t.dtype is jg.float32 and t.tolist() == [1.0, 2.5]
        if torch is not None:
            assert torch.tensor([torch.tensor(1), 2.5]).dtype == torch.float32

    def test_tensor_from_tensor_copies(self):
        a = jg.tensor([1.0, 2.0])
        b = jg.tensor(a)
        b += 1
        assert a.tolist() == [1.0, 2.0]

    @pytest.mark.parametrize("dtype", ALL_DTYPES)
    def test_tensor_explicit_dtype(self, dtype):
        t = jg.tensor([0, 1, 2], dtype=dtype)
        assert t.dtype is dtype
        np.testing.assert_array_equal(t.numpy(), np.array([0, 1, 2]).astype(NP_OF[dtype]))

    def test_tensor_dtype_aliases(self):
        assert jg.float is jg.float32 and jg.double is jg.float64 and jg.long is jg.int64 and jg.int is jg.int32
        assert jg.tensor([1], dtype=float).dtype is jg.float32
        assert jg.tensor([1.5], dtype=int).dtype is jg.int64
        assert jg.tensor([1], dtype="float64").dtype is jg.float64
        assert jg.tensor([1], dtype=np.int32).dtype is jg.int32

    def test_tensor_requires_grad(self):
        t = jg.tensor([1.0, 2.0], requires_grad=True)
        assert t.requires_grad and t.is_leaf and t.grad is None and t.grad_fn is None
        assert not jg.tensor([1.0]).requires_grad

    def test_ragged_input_is_a_clear_error(self):
        with pytest.raises((ValueError, TypeError)):
            jg.tensor([[1, 2], [3]])

    @pytest.mark.parametrize("fn, np_fn", [(jg.zeros, np.zeros), (jg.ones, np.ones)])
    def test_zeros_ones(self, fn, np_fn):
        for args in [(2, 3), ((2, 3),), ([2, 3],), (0,), ()]:
            t = fn(*args)
            shape = args[0] if args and isinstance(args[0], (tuple, list)) else args
            assert t.shape == tuple(shape) and t.dtype is jg.float32
            np.testing.assert_array_equal(t.numpy(), np_fn(shape, np.float32))
        assert fn(2, dtype=jg.int64).dtype is jg.int64
        assert fn(2, dtype=jg.bool).tolist() == np_fn(2, bool).tolist()
        t = fn(2, requires_grad=True)
        assert t.requires_grad and t.is_leaf

    def test_empty(self):
        t = jg.empty(2, 3)
        assert t.shape == (2, 3) and t.dtype is jg.float32
        assert jg.empty((4,), dtype=jg.int32).dtype is jg.int32

    @pytest.mark.parametrize("value, dtype", [(1.5, jg.float32), (2, jg.int64), (True, jg.bool)])
    def test_full_infers_dtype_from_value(self, value, dtype):
        t = jg.full((2, 2), value)
        assert t.dtype is dtype and t.tolist() == [[value, value], [value, value]]
        if torch is not None:
            assert torch.full((2, 2), value).dtype == tdt(dtype)
        assert jg.full((3,), 7, dtype=jg.float64).dtype is jg.float64
        assert jg.full([2], 1.0, requires_grad=True).requires_grad

    def test_arange(self):
        t = jg.arange(5)
        assert t.dtype is jg.int64 and t.tolist() == [0, 1, 2, 3, 4]
        t = jg.arange(1, 7, 2)
        assert t.dtype is jg.int64 and t.tolist() == [1, 3, 5]
        t = jg.arange(0, 1, 0.25)
        assert t.dtype is jg.float32 and t.tolist() == [0.0, 0.25, 0.5, 0.75]
        t = jg.arange(3.0)
        assert t.dtype is jg.float32 and t.tolist() == [0.0, 1.0, 2.0]
        assert jg.arange(3, dtype=jg.float64).dtype is jg.float64
        assert jg.arange(5, 0, -2).tolist() == [5, 3, 1]
        if torch is not None:
            assert torch.arange(0, 1, 0.25).dtype == torch.float32 and torch.arange(5).dtype == torch.int64

    def test_linspace(self):
        t = jg.linspace(0, 1, 5)
        assert t.dtype is jg.float32 and t.shape == (5,)
        np.testing.assert_allclose(t.numpy(), [0, 0.25, 0.5, 0.75, 1.0])
        assert jg.linspace(-1, 1, 3, dtype=jg.float64).tolist() == [-1.0, 0.0, 1.0]
        assert jg.linspace(0, 1, 1).tolist() == [0.0]

    def test_eye(self):
        np.testing.assert_array_equal(jg.eye(3).numpy(), np.eye(3, dtype=np.float32))
        np.testing.assert_array_equal(jg.eye(2, 3).numpy(), np.eye(2, 3))
        assert jg.eye(2).dtype is jg.float32 and jg.eye(2, dtype=jg.int64).dtype is jg.int64

    def test_rand_randn(self):
        a = jg.rand(200, 5)
        assert a.shape == (200, 5) and a.dtype is jg.float32
        assert 0.0 <= a.numpy().min() and a.numpy().max() < 1.0
        b = jg.randn(4000)
        assert b.dtype is jg.float32 and abs(float(b.numpy().mean())) < 0.1 and abs(float(b.numpy().std()) - 1) < 0.1
        assert jg.randn(3, dtype=jg.float64).dtype is jg.float64
        assert jg.rand((2, 3)).shape == (2, 3)
        assert jg.randn(2, requires_grad=True).requires_grad

    def test_randint(self):
        t = jg.randint(3, 7, (1000,))
        assert t.dtype is jg.int64 and t.shape == (1000,)
        assert t.numpy().min() >= 3 and t.numpy().max() <= 6
        assert set(t.tolist()) == {3, 4, 5, 6}
        u = jg.randint(5, (2, 3))
        assert u.shape == (2, 3) and 0 <= u.numpy().min() and u.numpy().max() < 5
        assert jg.randint(0, 2, (3,), dtype=jg.int32).dtype is jg.int32

    def test_manual_seed_reproducible(self):
        jg.manual_seed(123)
        a = (jg.rand(5), jg.randn(5), jg.randint(0, 100, (5,)))
        jg.manual_seed(123)
        b = (jg.rand(5), jg.randn(5), jg.randint(0, 100, (5,)))
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
        jg.manual_seed(124)
        assert not np.array_equal(jg.rand(5).numpy(), a[0].numpy())

    def test_like_factories(self):
        x = jg.tensor([[1, 2, 3]], dtype=jg.int32)
        for fn, val in [(jg.zeros_like, 0), (jg.ones_like, 1)]:
            t = fn(x)
            assert t.shape == (1, 3) and t.dtype is jg.int32 and t.tolist() == [[val] * 3]
        f = jg.zeros(2, 2, dtype=jg.float64)
        r = jg.randn_like(f)
        assert r.shape == (2, 2) and r.dtype is jg.float64
        assert jg.rand_like(f).dtype is jg.float64
        assert jg.full_like(x, 7).tolist() == [[7, 7, 7]]
        assert jg.empty_like(f).shape == (2, 2)
        assert jg.ones_like(x, dtype=jg.float32).dtype is jg.float32
        assert jg.zeros_like(f, requires_grad=True).requires_grad
        # a *_like result never shares memory with its model
        z = jg.zeros_like(f)
        z += 1
        assert f.tolist() == [[0.0, 0.0], [0.0, 0.0]]

    def test_factories_reject_cuda(self):
        with pytest.raises(RuntimeError, match="CUDA"):
            jg.zeros(2, device="cuda")
        with pytest.raises(RuntimeError, match="CUDA"):
            jg.tensor([1.0], device="cuda")
        assert jg.zeros(2, device="cpu").device == "cpu"

    def test_from_numpy_shares_memory(self):
        a = np.arange(6, dtype=np.float64).reshape(2, 3)
        t = jg.from_numpy(a)
        assert t.dtype is jg.float64 and t.shape == (2, 3)
        a[0, 0] = 100.0
        assert t[0, 0].item() == 100.0
        t[1, 2] = -1.0
        assert a[1, 2] == -1.0
        t.add_(1)
        assert a[0, 0] == 101.0
        assert np.shares_memory(t.numpy(), a)

    def test_from_numpy_rejects_unsupported(self):
        assert jg.from_numpy(np.zeros(2, np.float16)).dtype is jg.half     # as torch (issue 20)
        with pytest.raises(TypeError, match="complex64"):
            jg.from_numpy(np.zeros(2, np.complex64))
        with pytest.raises(TypeError):
            jg.from_numpy([1.0, 2.0])


# ================================================================================================
# metadata and conversion
# ================================================================================================

class TestMetadata:
    def test_dtypes(self):
        assert [d.name for d in ALL_DTYPES] == ["float32", "float64", "int64", "int32", "bool"]
        assert isinstance(jg.float32, jg.dtype)
        assert jg.float32.is_floating_point and jg.float64.is_floating_point
        assert not jg.int64.is_floating_point and not jg.bool.is_floating_point
        assert repr(jg.float64) == "jitgrad.float64"
        assert jg.float32.itemsize == 4 and jg.float64.itemsize == 8

    def test_shape_size_numel_dim(self):
        t = jg.zeros(2, 3, 4)
        assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
        assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
        assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24
        s = jg.tensor(1.0)
        assert s.shape == () and s.ndim == 0 and s.numel() == 1
        e = jg.zeros(0, 3)
        assert e.numel() == 0 and e.shape == (0, 3)

    def test_device(self):
        t = jg.zeros(2)
        assert t.device == "cpu" and t.device.type == "cpu" and str(t.device) == "cpu"
        assert t.device == jg.device("cpu")
        assert not t.is_cuda

    @pytest.mark.parametrize("data, expected, typ", [([2.5], 2.5, float), ([[3]], 3, int), (True, True, bool),
                                                     (1.25, 1.25, float)])
    def test_item(self, data, expected, typ):
        v = jg.tensor(data).item()
        assert v == expected and type(v) is typ

    def test_item_requires_one_element(self):
        with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
            jg.tensor([1.0, 2.0]).item()

    def test_item_works_on_tensors_that_require_grad(self):
        assert jg.tensor(2.0, requires_grad=True).item() == 2.0

    def test_tolist(self):
        assert jg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
        assert jg.tensor(2.5).tolist() == 2.5
        assert jg.tensor([True, False]).tolist() == [True, False]
        assert type(jg.tensor([1.0]).tolist()[0]) is float

    def test_numpy_shares_memory(self):
        t = jg.tensor([1.0, 2.0])
        a = t.numpy()
        assert a.dtype == np.float32
        a[0] = 5.0
        assert t.tolist() == [5.0, 2.0]

    def test_numpy_on_requires_grad_raises(self):
        t = jg.tensor([1.0], requires_grad=True)
        with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
            t.numpy()
        np.testing.assert_array_equal(t.detach().numpy(), [1.0])

    def test_array_protocol(self):
        t = jg.tensor([[1, 2], [3, 4]], dtype=jg.int32)
        a = np.asarray(t)
        assert a.dtype == np.int32 and a.tolist() == [[1, 2], [3, 4]]
        assert np.asarray(t, dtype=np.float64).dtype == np.float64
        assert np.array(t).tolist() == [[1, 2], [3, 4]]
        assert np.add(t, 1).tolist() == [[2, 3], [4, 5]]

    @pytest.mark.parametrize("src", ALL_DTYPES)
    @pytest.mark.parametrize("dst", ALL_DTYPES)
    def test_to_dtype(self, src, dst):
        x = jg.tensor(sample(src))
        y = x.to(dst)
        assert y.dtype is dst
        np.testing.assert_array_equal(y.numpy(), sample(src).astype(NP_OF[dst]))
        if src is dst:
            assert y is x

    def test_to_variants(self):
        x = jg.tensor([1.5, -2.5])
        assert x.to("cpu") is x and x.to(jg.device("cpu")) is x and x.cpu() is x
        assert x.to(jg.zeros(1, dtype=jg.float64)).dtype is jg.float64
        assert x.to(dtype=jg.int32).tolist() == [1, -2]
        assert x.to("cpu", jg.float64).dtype is jg.float64
        assert x.float() is x
        assert x.double().dtype is jg.float64
        assert x.long().dtype is jg.int64 and x.long().tolist() == [1, -2]
        assert x.int().dtype is jg.int32
        assert x.bool().tolist() == [True, True]
        y = x.to(jg.float32, copy=True)
        assert y is not x and y.tolist() == x.tolist()

    def test_to_is_differentiable(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        y = x.double()
        assert y.grad_fn is not None and y.grad_fn.name() == "ToCopyBackward0"
        (y * y).sum().backward()
        assert x.grad.dtype is jg.float32 and x.grad.tolist() == [2.0, 4.0]

    def test_cuda_raises_clear_error(self):
        with pytest.raises(RuntimeError, match="CUDA"):
            jg.zeros(2).cuda()
        with pytest.raises(RuntimeError, match="CUDA"):
            jg.zeros(2).to("cuda")
        with pytest.raises(RuntimeError, match="cpu, cuda"):
            jg.zeros(2).to(jg.device("tpu"))


# ================================================================================================
# repr
# ================================================================================================

REPR_CASES = [
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True), "tensor([1., 2.], requires_grad=True)"),
    (lambda: jg.tensor([0.1, 1.2]), "tensor([0.1000, 1.2000])"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True) * 2, "tensor([2., 4.], grad_fn=<MulBackward0>)"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True) + 1, "tensor([2., 3.], grad_fn=<AddBackward0>)"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True).sum(), "tensor(3., grad_fn=<SumBackward0>)"),
    (lambda: jg.tensor([1.0, 2.0], dtype=jg.float64), "tensor([1., 2.], dtype=jitgrad.float64)"),
    (lambda: jg.tensor([1, 2], dtype=jg.int32), "tensor([1, 2], dtype=jitgrad.int32)"),
    (lambda: jg.tensor([1, 2]), "tensor([1, 2])"),
    (lambda: jg.tensor(3.5), "tensor(3.5000)"),
    (lambda: jg.tensor(3), "tensor(3)"),
    (lambda: jg.tensor(2.0, dtype=jg.float64, requires_grad=True),
     "tensor(2., dtype=jitgrad.float64, requires_grad=True)"),
    (lambda: jg.tensor([[1.0, 2.0], [3.0, 4.0]]), "tensor([[1., 2.],\n        [3., 4.]])"),
    (lambda: jg.tensor([[0.1, 1.2], [2.2, 3.1]]), "tensor([[0.1000, 1.2000],\n        [2.2000, 3.1000]])"),
    (lambda: jg.tensor([[1, -200], [3, 4]]), "tensor([[   1, -200],\n        [   3,    4]])"),
    (lambda: jg.tensor([]), "tensor([])"),
    (lambda: jg.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda: jg.zeros(0, dtype=jg.int64), "tensor([], dtype=jitgrad.int64)"),
    (lambda: jg.tensor([True, False]), "tensor([ True, False])"),
    (lambda: jg.tensor([-1.0, 2.0]), "tensor([-1.,  2.])"),
    (lambda: jg.tensor([-1.5, 2.25]), "tensor([-1.5000,  2.2500])"),
    (lambda: jg.tensor([100.0, 2.0]), "tensor([100.,   2.])"),
    (lambda: jg.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
    (lambda: jg.tensor([1e10, 1.0]), "tensor([1.0000e+10, 1.0000e+00])"),
    (lambda: jg.tensor([0.001, 2.0]), "tensor([1.0000e-03, 2.0000e+00])"),
    (lambda: jg.tensor([float("nan"), 1.5, float("inf")]), "tensor([   nan, 1.5000,    inf])"),
    (lambda: jg.tensor([[[1.0, 2.0]], [[3.0, 4.0]]]), "tensor([[[1., 2.]],\n\n        [[3., 4.]]])"),
]


@pytest.mark.parametrize("make, expected", REPR_CASES)
def test_repr(make, expected):
    assert repr(make()) == expected


@needs_torch
@pytest.mark.parametrize("make, expected", REPR_CASES)
def test_repr_matches_torch(make, expected):
    t = make()
    ref = torch.from_numpy(t.detach().numpy().copy())
    if t.grad_fn is not None:
        ref = ref.requires_grad_(True) * 1          # some grad_fn; the name is checked by test_repr
        expected_torch = repr(ref).replace("MulBackward0", t.grad_fn.name())
    else:
        ref.requires_grad_(t.requires_grad)
        expected_torch = repr(ref)
    assert repr(t).replace("jitgrad.", "torch.") == expected_torch


def test_repr_long_tensors_are_summarized_like_torch():
    x = jg.arange(2000.0).reshape(40, 50)
    s = repr(x)
    assert "..." in s and s.startswith("tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.7000e+01, 4.8000e+01,")
    if torch is not None:
        assert s == repr(torch.arange(2000.0).reshape(40, 50))
        v = np.linspace(-3, 3, 30)
        assert repr(jg.tensor(v, dtype=jg.float32)) == repr(torch.tensor(v, dtype=torch.float32))
        w = jg.zeros(3, 200, requires_grad=True)
        assert repr(w) == repr(torch.zeros(3, 200, requires_grad=True))


def test_str_is_repr():
    t = jg.tensor([1.0])
    assert str(t) == repr(t)


# ================================================================================================
# type promotion
# ================================================================================================

def _expected_promotion(a, b):
    """torch's rule for two dimensioned tensors: the higher category wins; inside a category the wider type."""
    cat = {jg.bool: 0, jg.int32: 1, jg.int64: 1, jg.float32: 2, jg.float64: 2}
    if cat[a] != cat[b]:
        return a if cat[a] > cat[b] else b
    return a if a.itemsize >= b.itemsize else b


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # x / 0 and 0 / 0 on purpose
@pytest.mark.parametrize("a", ALL_DTYPES)
@pytest.mark.parametrize("b", ALL_DTYPES)
def test_promotion_tensor_tensor(a, b):
    x, y = jg.tensor(sample(a)), jg.tensor(sample(b))
    want = _expected_promotion(a, b)
    assert (x * y).dtype is want
    assert (x + y).dtype is want
    assert (x / y).dtype is (want if want.is_floating_point else jg.float32)
    assert (x < y).dtype is jg.bool
    if torch is not None:
        assert torch.result_type(torch.tensor(sample(a)), torch.tensor(sample(b))) == tdt(want)


@pytest.mark.parametrize("a", ALL_DTYPES)
@pytest.mark.parametrize("b", ALL_DTYPES)
def test_promotion_dim_tensor_vs_zero_dim_tensor(a, b):
    x, z = jg.tensor(sample(a)), jg.tensor(sample(b, ()))
    cat = {jg.bool: 0, jg.int32: 1, jg.int64: 1, jg.float32: 2, jg.float64: 2}
    want = b if cat[b] > cat[a] else a     # a 0-dim tensor only counts when its category is higher
    assert (x * z).dtype is want and (z * x).dtype is want
    # two 0-dim tensors promote normally
    assert (jg.tensor(sample(a, ())) * z).dtype is _expected_promotion(a, b)
    if torch is not None:
        assert torch.result_type(torch.tensor(sample(a)), torch.tensor(sample(b, ()))) == tdt(want)


@pytest.mark.parametrize("a", ALL_DTYPES)
@pytest.mark.parametrize("scalar", [True, 2, 2.5])
def test_promotion_tensor_python_scalar(a, scalar):
    scat = 0 if isinstance(scalar, bool) else 1 if isinstance(scalar, int) else 2
    acat = {jg.bool: 0, jg.int32: 1, jg.int64: 1, jg.float32: 2, jg.float64: 2}[a]
    want = a if acat >= scat else {1: jg.int64, 2: jg.float32}[scat]
    for shape in [(3,), ()]:
        x = jg.tensor(sample(a, shape))
        assert (x * scalar).dtype is want
        assert (scalar * x).dtype is want
        if torch is not None:
            assert torch.result_type(torch.tensor(sample(a, shape)), scalar) == tdt(want)


@pytest.mark.parametrize("scalar, want", [(np.float64(2.0), jg.float32), (np.float32(2.0), jg.float32),
                                          (np.int64(2), jg.int32), (np.bool_(True), jg.int32)])
def test_numpy_scalars_act_as_python_scalars(scalar, want):
    x = jg.tensor([1, 2], dtype=jg.int32) if want is jg.int32 else jg.tensor([1.0, 2.0])
    for r in (x * scalar, scalar * x, x + scalar, scalar + x):
        assert isinstance(r, jg.Tensor) and r.dtype is want


def test_numpy_arrays_act_as_tensors():
    x = jg.tensor([1.0, 2.0])
    for r in (x + np.array([1.0, 2.0]), np.array([1.0, 2.0]) + x):
        assert isinstance(r, jg.Tensor) and r.dtype is jg.float64 and r.tolist() == [2.0, 4.0]
    r = np.array([3.0, 4.0]) * x
    assert isinstance(r, jg.Tensor) and r.tolist() == [3.0, 8.0]


def test_float_ops_on_int_and_bool_compute_in_float32():
    assert jg.tensor([True]).exp().dtype is jg.float32
    np.testing.assert_allclose(jg.tensor([True, False]).exp().numpy(), np.exp(np.float32([1, 0])), rtol=1e-7)
    np.testing.assert_allclose(jg.tensor([1, 2]).exp().numpy(), np.exp(np.float32([1, 2])), rtol=1e-7)
    assert (jg.tensor([1, 2]) / jg.tensor([3, 3])).dtype is jg.float32
    assert (jg.tensor([1, 2], dtype=jg.int32) / jg.tensor(3.0, dtype=jg.float64)).dtype is jg.float64
    assert jg.tensor([4]).sqrt().tolist() == [2.0]


# ================================================================================================
# operators
# ================================================================================================

def _np_floordiv(a, b):
    return np.floor_divide(a, b)


BINARY = [
    ("+", lambda a, b: a + b, np.add),
    ("-", lambda a, b: a - b, np.subtract),
    ("*", lambda a, b: a * b, np.multiply),
    ("/", lambda a, b: a / b, np.true_divide),
    ("//", lambda a, b: a // b, _np_floordiv),
    ("%", lambda a, b: a % b, np.remainder),
    ("**", lambda a, b: a ** b, np.power),
]


@pytest.mark.parametrize("name, op, npop", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("dtype", [jg.float32, jg.float64, jg.int64, jg.int32])
def test_binary_operators_broadcast_like_numpy(name, op, npop, dtype):
    a = np.array([[5, -7, 3], [2, 9, -4]]).astype(NP_OF[dtype])
    b = np.array([2, 3, -5]).astype(NP_OF[dtype])
    if name == "**":
        a, b = np.abs(a) % 4, np.abs(b) % 3   # no negative integer powers, no overflow
        b = b.astype(NP_OF[dtype])
    r = op(jg.tensor(a), jg.tensor(b))
    want = npop(a, b)
    if name == "/" and not dtype.is_floating_point:
        want = want.astype(np.float32)
    assert r.shape == want.shape
    assert r.numpy().dtype == want.dtype
    np.testing.assert_allclose(r.numpy(), want, rtol=1e-6)
    if torch is not None:
        tr = op(torch.tensor(a), torch.tensor(b))
        np.testing.assert_allclose(r.numpy(), tr.numpy(), rtol=1e-6)
        assert str(tr.dtype) == "torch." + r.dtype.name


@pytest.mark.parametrize("name, op, npop", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("scalar", [3, 2.5, np.float64(2.5), np.int64(3)])
def test_reflected_operators_with_scalars(name, op, npop, scalar):
    a = np.array([1.5, 2.0, 4.0], np.float32)
    x = jg.tensor(a)
    left = op(scalar, x)
    right = op(x, scalar)
    assert isinstance(left, jg.Tensor) and isinstance(right, jg.Tensor)
    assert left.dtype is jg.float32 and right.dtype is jg.float32
    np.testing.assert_allclose(left.numpy(), npop(np.float32(scalar), a), rtol=1e-6)
    np.testing.assert_allclose(right.numpy(), npop(a, np.float32(scalar)), rtol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # x / 0 and 0 / 0 on purpose
def test_int_operator_semantics_match_torch():
    x = jg.tensor([5, -5])
    assert (x // 2).tolist() == [2, -3]               # floor, like Python and torch
    assert (x % 3).tolist() == [2, 1]                 # sign of the divisor
    assert (jg.tensor([5.0, -5.0]) % -3).tolist() == [-1.0, -2.0]
    assert (x ** 2).tolist() == [25, 25] and (x ** 2).dtype is jg.int64
    assert (2 ** jg.tensor([1, 2])).tolist() == [2, 4]
    assert (2.5 ** jg.tensor([1, 2])).tolist() == [2.5, 6.25]
    assert (jg.tensor([1, 4]) ** 0.5).tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        jg.tensor([1, 2]) ** -1
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jg.tensor([1, 2]) // 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jg.tensor([1, 2]) % jg.tensor([1, 0])
    assert (jg.tensor([1.0, -1.0]) // 0).tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                    ((5, 2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (4, 3, 2))])
def test_matmul(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    r = jg.tensor(a) @ jg.tensor(b)
    np.testing.assert_allclose(r.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    assert r.dtype is jg.float32
    np.testing.assert_allclose((a @ jg.tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)   # __rmatmul__
    assert (jg.tensor([1, 2], dtype=jg.int32) @ jg.tensor([1, 2], dtype=jg.int32)).tolist() == 5


def test_matmul_gradient():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    x, y = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
    (x @ y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 4)) @ b.T)
    np.testing.assert_allclose(y.grad.numpy(), a.T @ np.ones((2, 4)))


def test_unary_operators():
    a = np.array([-1.5, 0.0, 2.0], np.float32)
    x = jg.tensor(a)
    np.testing.assert_array_equal((-x).numpy(), -a)
    np.testing.assert_array_equal(abs(x).numpy(), np.abs(a))
    np.testing.assert_array_equal(jg.abs(x).numpy(), np.abs(a))
    np.testing.assert_array_equal(x.abs().numpy(), np.abs(a))
    assert (+x) is x
    assert (-jg.tensor([1, -2])).tolist() == [-1, 2]
    assert (~jg.tensor([True, False])).tolist() == [False, True]


def test_operator_gradients_closed_form():
    a = np.array([0.5, 1.5, -2.0])
    b = np.array([2.0, -1.0, 3.0])
    x, y = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
    cases = [
        (lambda: x + y, np.ones(3), np.ones(3)),
        (lambda: x - y, np.ones(3), -np.ones(3)),
        (lambda: x * y, b, a),
        (lambda: x / y, 1 / b, -a / b ** 2),
        (lambda: x ** 2 + 0 * y, 2 * a, np.zeros(3)),
        (lambda: abs(x) + 0 * y, np.sign(a), np.zeros(3)),
        (lambda: -x * y, -b, -a),
        (lambda: 3.0 / x + y, -3.0 / a ** 2, np.ones(3)),
        (lambda: 2.0 - x + 0 * y, -np.ones(3), np.zeros(3)),
    ]
    for f, gx, gy in cases:
        x.grad = y.grad = None
        f().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-12)
        np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-12)


def test_pow_gradient_wrt_exponent():
    a, b = np.array([0.5, 1.5, 2.0]), np.array([2.0, -1.0, 0.5])
    x, y = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
    (x ** y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), b * a ** (b - 1))
    np.testing.assert_allclose(y.grad.numpy(), a ** b * np.log(a))


def test_broadcast_gradient_sums_to_input_shape():
    x = jg.tensor(np.ones((2, 3)), requires_grad=True)
    y = jg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    s = jg.tensor(2.0, dtype=jg.float64, requires_grad=True)
    (x * y * s).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), np.tile([2.0, 4.0, 6.0], (2, 1)))
    assert s.grad.shape == () and s.grad.item() == 12.0


@pytest.mark.parametrize("op, npop", [(lambda a, b: a < b, np.less), (lambda a, b: a <= b, np.less_equal),
                                      (lambda a, b: a > b, np.greater), (lambda a, b: a >= b, np.greater_equal),
                                      (lambda a, b: a == b, np.equal), (lambda a, b: a != b, np.not_equal)])
def test_comparisons(op, npop):
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([2.0, 2.0, 2.0], np.float32)
    x = jg.tensor(a, requires_grad=True)
    r = op(x, jg.tensor(b))
    assert r.dtype is jg.bool and not r.requires_grad and r.grad_fn is None
    np.testing.assert_array_equal(r.numpy(), npop(a, b))
    np.testing.assert_array_equal(op(x, 2).numpy(), npop(a, 2))          # scalar on the right
    np.testing.assert_array_equal(op(2.0, x).numpy(), npop(2.0, a))      # reflected
    np.testing.assert_array_equal(op(jg.tensor([1, 2, 3]), 2.5).numpy(), npop(np.array([1, 2, 3]), 2.5))


def test_comparison_result_used_in_arithmetic_is_not_differentiable():
    x = jg.tensor([1.0, -1.0, 2.0], requires_grad=True)
    (x * (x > 0)).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 1.0]


# ================================================================================================
# in-place
# ================================================================================================

class TestInplace:
    @pytest.mark.parametrize("name, fn, npfn", [
        ("+=", lambda t, o: t.__iadd__(o), np.add), ("-=", lambda t, o: t.__isub__(o), np.subtract),
        ("*=", lambda t, o: t.__imul__(o), np.multiply), ("/=", lambda t, o: t.__itruediv__(o), np.true_divide),
        ("add_", lambda t, o: t.add_(o), np.add), ("sub_", lambda t, o: t.sub_(o), np.subtract),
        ("mul_", lambda t, o: t.mul_(o), np.multiply), ("div_", lambda t, o: t.div_(o), np.true_divide)])
    @pytest.mark.parametrize("other", [2.0, "tensor", "row"])
    def test_values_identity_version(self, name, fn, npfn, other):
        a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
        o = {"tensor": np.full((2, 3), 4.0, np.float32), "row": np.array([1.0, 2.0, 4.0], np.float32)}.get(other, other)
        t = jg.tensor(a)
        buf = t.numpy()
        v0 = t._version
        r = fn(t, jg.tensor(o) if isinstance(o, np.ndarray) else o)
        assert r is t and t.numpy() is buf, "in-place ops write into the same buffer and return self"
        assert t._version == v0 + 1
        np.testing.assert_allclose(t.numpy(), npfn(a, o).astype(np.float32))

    def test_augmented_assignment_keeps_identity(self):
        t = jg.tensor([1.0, 2.0])
        ident = id(t)
        t += 1
        t -= 0.5
        t *= 2
        t /= 3
        assert id(t) == ident and t._version == 4
        np.testing.assert_allclose(t.numpy(), ((np.array([1.0, 2.0]) + 1 - 0.5) * 2 / 3).astype(np.float32))

    def test_alpha(self):
        t = jg.tensor([1.0, 2.0])
        t.add_(jg.tensor([1.0, 1.0]), alpha=3)
        assert t.tolist() == [4.0, 5.0]
        t.sub_(jg.tensor([1.0, 2.0]), alpha=2)
        assert t.tolist() == [2.0, 1.0]

    def test_zero_fill_copy_clamp(self):
        t = jg.tensor([[1.0, -2.0], [3.0, 4.0]])
        v = t._version
        assert t.zero_() is t and t.tolist() == [[0.0, 0.0], [0.0, 0.0]] and t._version == v + 1
        assert t.fill_(2.5) is t and t.tolist() == [[2.5, 2.5], [2.5, 2.5]]
        t.fill_(jg.tensor(7.0))
        assert t.tolist() == [[7.0, 7.0], [7.0, 7.0]]
        assert t.copy_(jg.tensor([1.0, 2.0])) is t and t.tolist() == [[1.0, 2.0], [1.0, 2.0]]   # broadcasts
        t.copy_(jg.tensor([[5.0, -6.0], [7.0, 8.0]], dtype=jg.float64))
        assert t.dtype is jg.float32 and t.tolist() == [[5.0, -6.0], [7.0, 8.0]]
        assert t.clamp_(-1.0, 6.0) is t and t.tolist() == [[5.0, -1.0], [6.0, 6.0]]
        t.clamp_(min=5.5)
        assert t.tolist() == [[5.5, 5.5], [6.0, 6.0]]
        assert t._version == v + 7

    def test_fill_rejects_non_scalar_tensor(self):
        with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
            jg.zeros(2).fill_(jg.tensor([1.0, 2.0]))

    def test_copy_casts_and_checks_shape(self):
        t = jg.tensor([1, 2])
        t.copy_(jg.tensor([1.7, -2.2]))
        assert t.tolist() == [1, -2] and t.dtype is jg.int64       # copy_ casts, like torch
        with pytest.raises(RuntimeError):
            jg.zeros(2).copy_(jg.zeros(2, 2))
        u = jg.zeros(3)
        u.copy_(np.array([1.0, 2.0, 3.0]))
        assert u.tolist() == [1.0, 2.0, 3.0]

    @pytest.mark.parametrize("make, op, msg", [
        (lambda: jg.tensor([1, 2]), lambda t, m: t.__iadd__(1.5), "result type Float can't be cast to the desired output type Long"),
        (lambda: jg.tensor([1, 2]), lambda t, m: t.__itruediv__(2), "result type Float can't be cast to the desired output type Long"),
        (lambda: jg.tensor([1, 2]), lambda t, m: t.mul_(m([0.5, 0.5])), "result type Float can't be cast to the desired output type Long"),
        (lambda: jg.tensor([1, 2], dtype=jg.int32), lambda t, m: t.add_(1.0), "result type Float can't be cast to the desired output type Int"),
        (lambda: jg.tensor([True]), lambda t, m: t.add_(1), "result type Long can't be cast to the desired output type Bool"),
        (lambda: jg.tensor([1, 2]), lambda t, m: t.clamp_(0.5), "result type Float can't be cast to the desired output type Long"),
    ])
    def test_dtype_rules(self, make, op, msg):
        t = make()
        before = t.tolist()
        with pytest.raises(RuntimeError, match=msg):
            op(t, jg.tensor)
        assert t.tolist() == before and t._version == 0, "a rejected in-place op must not write"
        if torch is not None:
            tt = torch.tensor(before, dtype=tdt(t.dtype))
            with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
                op(tt, torch.tensor)

    def test_allowed_downcasts(self):
        t = jg.tensor([1.0, 2.0])
        t += jg.tensor([1.0, 1.0], dtype=jg.float64)       # float64 result written into float32
        assert t.dtype is jg.float32 and t.tolist() == [2.0, 3.0]
        u = jg.tensor([1, 2], dtype=jg.int32)
        u += jg.tensor([1, 2])
        assert u.dtype is jg.int32 and u.tolist() == [2, 4]
        f = jg.tensor([1.0, 2.0])
        f += jg.tensor([1, 1])
        assert f.tolist() == [2.0, 3.0]

    def test_broadcast_shape_mismatch(self):
        t = jg.zeros(3)
        with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
            t += jg.zeros(2, 3)

    def test_leaf_requiring_grad_rejects_inplace(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        for f in (lambda: x.add_(1), lambda: x.__imul__(2), lambda: x.zero_(), lambda: x.fill_(1.0),
                  lambda: x.clamp_(0.0, 1.0), lambda: x.__setitem__(0, 5.0)):
            with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
                f()
        assert x.tolist() == [1.0, 2.0]
        with jg.no_grad():
            x.add_(1)
            x[0] = 10.0
        assert x.tolist() == [10.0, 3.0] and x._version == 2 and x.requires_grad and x.is_leaf

    def test_inplace_on_non_leaf_gradient(self):
        a = np.array([1.0, 2.0, -3.0])
        x = jg.tensor(a, requires_grad=True)
        y = x * 2
        y += 1
        y *= x            # y = (2x + 1) x
        y -= x
        y /= 2            # y = ((2x+1)x - x) / 2 = x^2
        assert y.grad_fn is not None and not y.is_leaf
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * a)

    def test_inplace_with_other_requiring_grad(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        t = jg.zeros(2, dtype=jg.float64)
        t += x * 3           # t had no history: it gains one
        assert t.requires_grad and t.dtype is jg.float64
        (t * t).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * 3 * np.array([3.0, 6.0]))

    def test_clamp_inplace_gradient(self):
        x = jg.tensor([-2.0, 0.5, 3.0], requires_grad=True)
        y = x * 1
        y.clamp_(-1.0, 1.0)
        y.sum().backward()
        assert x.grad.tolist() == [0.0, 1.0, 0.0]

    def test_copy_and_fill_gradients(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        s = jg.tensor(3.0, requires_grad=True)
        y = jg.zeros(2, 2)
        y.copy_(x)                 # broadcast: x is used twice
        (y * jg.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        assert x.grad.tolist() == [4.0, 6.0]
        z = x * 1
        z.fill_(s)
        (z * jg.tensor([2.0, 5.0])).sum().backward()
        assert s.grad.item() == 7.0 and x.grad.tolist() == [4.0, 6.0]   # fill_ cuts x's gradient

    def test_modifying_saved_tensor_makes_backward_raise(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        a = x * 1
        b = a * a           # saves a
        a += 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            b.sum().backward()

    def test_no_grad_inplace_does_not_record(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        with jg.no_grad():
            y.mul_(10)
        assert y.tolist() == [20.0, 40.0]
        y.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0]


# ================================================================================================
# __getitem__
# ================================================================================================

A = np.arange(4 * 5 * 6, dtype=np.float64).reshape(4, 5, 6)
MASK_0 = np.array([True, False, True, True])
MASK_FULL = (A % 7) < 3


def _keys():
    """(id, key for jitgrad, key for numpy)"""
    ks = [
        ("int", 2, 2), ("neg_int", -1, -1), ("int_int", (1, -2), (1, -2)), ("int3", (3, 4, 5), (3, 4, 5)),
        ("slice", slice(1, 3), slice(1, 3)), ("slice_step", slice(None, None, 2), slice(None, None, 2)),
        ("slice_neg_bounds", (slice(-3, -1), slice(None, -2, 3)), (slice(-3, -1), slice(None, -2, 3))),
        ("slice_out_of_range", slice(2, 100), slice(2, 100)), ("empty_slice", slice(3, 1), slice(3, 1)),
        ("none", None, None), ("none_mid", (0, None, slice(1, 3)), (0, None, slice(1, 3))),
        ("ellipsis", (Ellipsis, 1), (Ellipsis, 1)), ("ellipsis_mid", (1, Ellipsis, slice(0, 2)), (1, Ellipsis, slice(0, 2))),
        ("ellipsis_none", (Ellipsis, None), (Ellipsis, None)),
        ("list", [0, 2, 2], [0, 2, 2]), ("list_neg", [-1, 0], [-1, 0]),
        ("tensor_idx", jg.tensor([3, 0, 3]), np.array([3, 0, 3])),
        ("tensor_idx_2d", jg.tensor([[0, 1], [2, 3]]), np.array([[0, 1], [2, 3]])),
        ("tensor_idx_int32", jg.tensor([1, 1], dtype=jg.int32), np.array([1, 1])),
        ("zero_dim_tensor", jg.tensor(2), np.array(2)),
        ("mask_dim0", jg.tensor(MASK_0), MASK_0), ("mask_list", [True, False, True, False], np.array([True, False, True, False])),
        ("mask_full", jg.tensor(MASK_FULL), MASK_FULL),
        ("mask_then_slice", (jg.tensor(MASK_0), slice(1, 4)), (MASK_0, slice(1, 4))),
        ("slice_then_mask", (slice(None), jg.tensor([True, False, True, False, True])),
         (slice(None), np.array([True, False, True, False, True]))),
        ("two_tensor_idx", (jg.tensor([0, 1, 3]), jg.tensor([4, 4, 0])), (np.array([0, 1, 3]), np.array([4, 4, 0]))),
        ("tensor_broadcast", (jg.tensor([[0], [1]]), slice(None), jg.tensor([1, 2, 5])),
         (np.array([[0], [1]]), slice(None), np.array([1, 2, 5]))),
        ("int_and_tensor", (1, jg.tensor([0, 4])), (1, np.array([0, 4]))),
        ("slice_tensor_slice", (slice(1, 3), [0, 2], slice(None, None, 2)), (slice(1, 3), [0, 2], slice(None, None, 2))),
        ("separated_tensors", ([0, 1], slice(None), [2, 3]), ([0, 1], slice(None), [2, 3])),
        ("ellipsis_tensor", (Ellipsis, jg.tensor([5, 0])), (Ellipsis, np.array([5, 0]))),
        ("none_tensor", (None, jg.tensor([1, 2]), 0), (None, np.array([1, 2]), 0)),
        ("bool_scalar", True, True),
    ]
    return ks


KEYS = _keys()


@pytest.mark.parametrize("key, npkey", [(k[1], k[2]) for k in KEYS], ids=[k[0] for k in KEYS])
def test_getitem_matches_numpy(key, npkey):
    x = jg.tensor(A)
    r = x[key]
    want = A[npkey]
    assert isinstance(r, jg.Tensor)
    assert r.shape == want.shape and r.dtype is jg.float64
    np.testing.assert_array_equal(r.numpy(), want)
    if torch is not None:
        tkey = tuple(torch.from_numpy(np.asarray(k._data)) if isinstance(k, jg.Tensor) else k
                     for k in (key if isinstance(key, tuple) else (key,)))
        np.testing.assert_array_equal(torch.from_numpy(A)[tkey].numpy(), want)


@pytest.mark.parametrize("key, npkey", [(k[1], k[2]) for k in KEYS], ids=[k[0] for k in KEYS])
def test_getitem_gradient(key, npkey):
    rng = np.random.default_rng(0)
    x = jg.tensor(A, requires_grad=True)
    y = x[key]
    w = rng.standard_normal(y.shape)
    (y * jg.tensor(w)).sum().backward()
    expected = np.zeros_like(A)
    np.add.at(expected, npkey, w)          # repeated indices accumulate
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_getitem_negative_step_is_rejected_like_torch():
    with pytest.raises(ValueError, match="step must be greater than zero"):
        jg.zeros(3)[::-1]


@pytest.mark.parametrize("key", [5, (0, 7), -6, (0, 0, 0, 0), jg.tensor([0, 9]), [4]])
def test_getitem_out_of_range_is_index_error(key):
    with pytest.raises(IndexError):
        jg.zeros(4, 5, 6)[key]


def test_getitem_float_index_tensor_rejected():
    with pytest.raises(IndexError, match="tensors used as indices must be long, int"):
        jg.zeros(3)[jg.tensor([0.0, 1.0])]


def test_tensor_as_python_index():
    i = jg.tensor(1)
    assert [10, 20, 30][i] == 20
    assert jg.tensor([1.0, 2.0, 3.0])[i].item() == 2.0


# ================================================================================================
# __setitem__
# ================================================================================================

SET_KEYS = [
    ("int", 1, 1), ("neg_int", -1, -1), ("int_int", (2, 3), (2, 3)), ("slice", slice(1, 3), slice(1, 3)),
    ("slice_step", (slice(None), slice(None, None, 2)), (slice(None), slice(None, None, 2))),
    ("none", (None, 0), (None, 0)), ("ellipsis", (Ellipsis, 0), (Ellipsis, 0)),
    ("list", [0, 3], [0, 3]), ("tensor_idx", jg.tensor([2, 0]), np.array([2, 0])),
    ("mask_dim0", jg.tensor(MASK_0), MASK_0), ("mask_full", jg.tensor(MASK_FULL), MASK_FULL),
    ("two_tensor_idx", (jg.tensor([0, 1, 3]), jg.tensor([4, 2, 0])), (np.array([0, 1, 3]), np.array([4, 2, 0]))),
    ("int_and_tensor", (1, jg.tensor([0, 4])), (1, np.array([0, 4]))),
    ("slice_tensor", (slice(1, 3), [0, 2]), (slice(1, 3), [0, 2])),
]


@pytest.mark.parametrize("key, npkey", [(k[1], k[2]) for k in SET_KEYS], ids=[k[0] for k in SET_KEYS])
@pytest.mark.parametrize("value_kind", ["scalar", "full", "broadcast"])
def test_setitem_matches_numpy(key, npkey, value_kind):
    ref = A.copy()
    target_shape = ref[npkey].shape
    if value_kind == "scalar":
        v, npv = -1.5, -1.5
    elif value_kind == "full":
        npv = -np.arange(int(np.prod(target_shape)), dtype=np.float64).reshape(target_shape) - 1
        v = jg.tensor(npv)
    else:
        npv = -np.arange(target_shape[-1] if target_shape else 1, dtype=np.float64) - 1
        if not target_shape:
            npv = npv.reshape(())
        v = jg.tensor(npv)
    x = jg.tensor(A)
    v0 = x._version
    x[key] = v
    ref[npkey] = npv
    np.testing.assert_array_equal(x.numpy(), ref)
    assert x._version == v0 + 1


def test_setitem_casts_value_and_accepts_numpy():
    x = jg.zeros(2, 3, dtype=jg.int64)
    x[0] = 2.7
    assert x.tolist() == [[2, 2, 2], [0, 0, 0]]
    y = jg.zeros(2, 3)
    y[1] = np.array([1.0, 2.0, 3.0])
    y[0, :2] = jg.tensor([5, 6])
    assert y.tolist() == [[5.0, 6.0, 0.0], [1.0, 2.0, 3.0]]


def test_setitem_shape_mismatch_and_out_of_range():
    x = jg.zeros(3)
    with pytest.raises((RuntimeError, ValueError)):
        x[:] = jg.ones(2)
    with pytest.raises(IndexError):
        x[5] = 1.0
    y = jg.zeros(3, requires_grad=True) * 1
    with pytest.raises(IndexError):
        y[5] = 1.0
    with pytest.raises(RuntimeError, match="shape mismatch"):
        y[:] = jg.ones(2, requires_grad=True)


@pytest.mark.parametrize("key, npkey", [(k[1], k[2]) for k in SET_KEYS], ids=[k[0] for k in SET_KEYS])
def test_setitem_gradient_on_non_leaf(key, npkey):
    """y = x * 1; y[key] = v; L = sum(y * w).  dL/dx = w outside the written region, 0 inside;
    dL/dv = w over the region (summed over broadcast dims of v)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal(A.shape)
    region_shape = A[npkey].shape
    vshape = region_shape[-1:] if region_shape else ()
    x = jg.tensor(A, requires_grad=True)
    v = jg.tensor(rng.standard_normal(vshape), requires_grad=True)
    y = x * 1
    y[key] = v
    assert y.grad_fn is not None
    (y * jg.tensor(w)).sum().backward()
    mask = np.ones_like(A)
    mask[npkey] = 0.0
    np.testing.assert_allclose(x.grad.numpy(), w * mask)
    gv = np.broadcast_to(w[npkey], region_shape)
    gv = gv.reshape((-1,) + vshape).sum(0) if region_shape else gv
    np.testing.assert_allclose(v.grad.numpy(), gv)
    # the forward values too
    ref = A.copy()
    ref[npkey] = v.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), ref)


def test_setitem_value_requires_grad_on_plain_tensor():
    v = jg.tensor([2.0, 3.0], requires_grad=True)
    buf = jg.zeros(4)
    buf[1:3] = v
    assert buf.requires_grad and not buf.is_leaf
    (buf * jg.tensor([1.0, 10.0, 100.0, 1000.0])).sum().backward()
    assert v.grad.tolist() == [10.0, 100.0]


def test_setitem_then_reuse_closed_form():
    # y = x^2 with y[0] replaced by 3*x[1]: dL/dx = [0, 2*x1 + 3, 2*x2]
    x = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y[0] = x[1] * 3
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 2 * 2.0 + 3, 6.0]


# ================================================================================================
# views share storage and version counters
# ================================================================================================

class TestViews:
    def test_view_shares_storage_and_version(self):
        x = jg.arange(6.0)
        v = x.view(2, 3)
        v[0, 1] = 100.0
        assert x[1].item() == 100.0
        assert x._version == v._version == 1
        x.add_(1)
        assert v[0, 1].item() == 101.0 and v._version == 2
        assert np.shares_memory(x.numpy(), v.numpy())

    def test_basic_index_is_view(self):
        x = jg.zeros(3, 4)
        r = x[1]
        r += 5
        assert x.tolist()[1] == [5.0] * 4 and x._version == r._version == 1
        s = x[:, ::2]
        s.fill_(-1.0)
        assert x.numpy()[:, ::2].tolist() == [[-1.0, -1.0]] * 3

    def test_advanced_index_is_a_copy(self):
        x = jg.zeros(3)
        c = x[[0, 1]]
        c += 1
        assert x.tolist() == [0.0, 0.0, 0.0] and x._version == 0

    def test_transpose_view(self):
        x = jg.tensor([[1.0, 2.0], [3.0, 4.0]])
        t = x.T
        assert t.tolist() == [[1.0, 3.0], [2.0, 4.0]]
        t[0, 1] = 30.0
        assert x[1, 0].item() == 30.0 and x._version == 1
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            t.view(4)
        assert t.reshape(4).tolist() == [1.0, 30.0, 2.0, 4.0]

    def test_detach_shares_storage_and_version(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        d = x.detach()
        assert not d.requires_grad and d.is_leaf
        d[0] = 5.0
        assert x.tolist() == [5.0, 2.0] and x._version == d._version == 1

    @needs_torch
    def test_detach_of_a_view_shares_the_whole_storage_as_torch(self):
        """``x[4:].detach()`` is a root (no ``_base``) over x's storage: writes reach x, the version counter is
        shared, and ``storage_offset`` / ``as_strided`` see the whole storage; ``.data`` likewise (own counter);
        ``set_`` gives it new memory, offsets from there."""
        def probe(lib):
            x = lib.arange(8.0)
            d = x[4:].detach()
            d.add_(1)
            r = [x.tolist(), d._base is None, d._version, x._version, d.storage_offset(),
                 d.as_strided((2,), (1,), 1).tolist(), d[1:].storage_offset()]
            e = x[::2].detach().detach()
            r += [e.storage_offset(), e.as_strided((3,), (1,), 1).tolist()]
            z = lib.arange(8.0)
            z.as_strided_((3,), (1,), 2)
            r += [z.detach().storage_offset(), z.detach().as_strided((2,), (1,), 0).tolist()]
            m = x[5:].data
            m.mul_(10)
            r += [x.tolist(), m.storage_offset(), m._version, m.as_strided((1,), (1,), 0).tolist()]
            d.set_(lib.arange(3.0))
            r += [d.storage_offset(), d.as_strided((2,), (1,), 1).tolist()]
            return r
        assert probe(jg) == probe(torch)

    def test_detach_version_is_checked_by_backward(self):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        y = x * x          # saves x
        x.detach().mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()

    def test_view_gradient(self):
        x = jg.tensor(np.arange(6.0), requires_grad=True)
        y = x.view(2, 3).T
        (y * jg.tensor(np.arange(6.0).reshape(3, 2))).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.arange(6.0).reshape(3, 2).T.reshape(-1))


# ================================================================================================
# DLPack / NumPy interop
# ================================================================================================

class TestDLPack:
    def test_numpy_from_dlpack_is_zero_copy(self):
        t = jg.tensor([1.0, 2.0, 3.0])
        a = np.from_dlpack(t)
        assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0, 3.0]
        t.add_(1)
        assert a.tolist() == [2.0, 3.0, 4.0]
        assert np.shares_memory(a, t.numpy())

    def test_jg_from_dlpack_numpy_is_zero_copy(self):
        a = np.arange(6, dtype=np.int32).reshape(2, 3)
        t = jg.from_dlpack(a)
        assert t.dtype is jg.int32 and t.shape == (2, 3)
        a[1, 1] = 99
        assert t[1, 1].item() == 99
        t[0, 0] = -7
        assert a[0, 0] == -7

    def test_round_trip(self):
        t = jg.tensor([[1.0, 2.0]], dtype=jg.float64)
        u = jg.from_dlpack(np.from_dlpack(t))
        u.mul_(3)
        assert t.tolist() == [[3.0, 6.0]]
        w = jg.from_dlpack(t)
        assert np.shares_memory(w.numpy(), t.numpy())

    def test_dlpack_device(self):
        assert jg.zeros(1).__dlpack_device__()[0] == 1   # kDLCPU

    def test_dlpack_of_tensor_requiring_grad_raises(self):
        with pytest.raises(BufferError, match="require gradient"):
            np.from_dlpack(jg.zeros(2, requires_grad=True))
        assert np.from_dlpack(jg.zeros(2, requires_grad=True).detach()).shape == (2,)

    @needs_torch
    def test_torch_round_trip(self):
        t = jg.tensor([1.0, 2.0])
        p = torch.from_dlpack(t)
        assert p.dtype == torch.float32
        p.add_(10)
        assert t.tolist() == [11.0, 12.0]
        q = torch.tensor([[1, 2], [3, 4]], dtype=torch.int64)
        u = jg.from_dlpack(q)
        assert u.dtype is jg.int64 and u.tolist() == [[1, 2], [3, 4]]
        q[0, 0] = 42
        assert u[0, 0].item() == 42


# ================================================================================================
# Python protocols
# ================================================================================================

class TestProtocols:
    def test_bool(self):
        assert bool(jg.tensor([1.0])) and not bool(jg.tensor(0))
        assert bool(jg.tensor([[True]]))
        with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
            bool(jg.tensor([1.0, 2.0]))
        with pytest.raises(RuntimeError, match="ambiguous"):
            if jg.tensor([1, 2]) > 0:
                pass

    def test_len(self):
        assert len(jg.zeros(3, 2)) == 3 and len(jg.zeros(0)) == 0
        with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
            len(jg.tensor(1.0))

    def test_iter(self):
        rows = list(jg.tensor([[1, 2], [3, 4]]))
        assert len(rows) == 2 and all(isinstance(r, jg.Tensor) for r in rows)
        assert [r.tolist() for r in rows] == [[1, 2], [3, 4]]
        assert [v.item() for v in jg.tensor([5.0, 6.0])] == [5.0, 6.0]
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            iter(jg.tensor(1.0))
        a, b = jg.tensor([1, 2])
        assert (a.item(), b.item()) == (1, 2)

    def test_iter_gradient(self):
        x = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        s = 0
        for i, v in enumerate(x):
            s = s + v * (i + 1)
        s.backward()
        assert x.grad.tolist() == [1.0, 2.0, 3.0]

    def test_float_int(self):
        assert float(jg.tensor([2.5])) == 2.5 and type(float(jg.tensor(2))) is float
        assert int(jg.tensor([[7.9]])) == 7 and type(int(jg.tensor(3.0))) is int
        assert float(jg.tensor(1.5, requires_grad=True)) == 1.5
        with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
            float(jg.tensor([1.0, 2.0]))
        with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
            int(jg.tensor([1, 2]))
        assert math.isclose(math.sqrt(jg.tensor(4.0)), 2.0)

    def test_hash_is_identity(self):
        a, b = jg.tensor([1.0]), jg.tensor([1.0])
        assert len({a, b}) == 2 and a in {a}


def test_legacy_tensor_constructor_uses_the_default_float_dtype():
    t = jg.Tensor([1, 2])                      # torch.Tensor([1, 2]) is float32 too
    assert t.dtype is jg.float32 and t.tolist() == [1.0, 2.0]
    r = jg.Tensor([1.0, 2.0], requires_grad=True) * 2
    r.sum().backward()
    assert r.grad_fn.name() == "MulBackward0"


_MIXED_KEYS = [(1, slice(None), [2, 0]), (slice(None), [2, 0], None, 1), (1, Ellipsis, [2, 0]),
               ([1, 0], slice(None), 1), (1, [2, 0]), (0, slice(None), [2, 0], 3), ([1, 0], 1, slice(1, 3), [2, 0]),
               (1, slice(None), [[2, 0], [1, 1]]),
               # a bool mask of two dims stands for two of x's dims: the integer selects along the third
               ([[True, False, True], [False, True, True]], 1), ([[True, False, True], [False, True, True]], 1, 3),
               ([[True, False, True], [False, True, True]], slice(None), 2)]


@pytest.mark.parametrize("key", _MIXED_KEYS, ids=str)
def test_index_mixing_ints_and_index_tensors_follows_torch(key):
    """torch selects the integers first, then indexes with the tensors: ``x[1, :, idx]`` of a (2, 3, 4, 5) tensor
    is (3, 2, 5) (NumPy's rule gives (2, 3, 5)).  Values, writes, gradients and compiled code, against torch."""
    torch = pytest.importorskip("torch")
    a = np.arange(120, dtype=np.float64).reshape(2, 3, 4, 5)

    def conv(lib):
        return tuple(lib.tensor(x) if isinstance(x, list) else x for x in key)
    want = torch.tensor(a)[conv(torch)].numpy()
    got = jg.tensor(a)[conv(jg)]
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    v = np.random.default_rng(0).random(want.shape)
    tw, jw = torch.tensor(a), jg.tensor(a.copy())
    tw[conv(torch)] = torch.tensor(v)
    jw[conv(jg)] = jg.tensor(v)
    np.testing.assert_array_equal(jw.numpy(), tw.numpy())
    xt, x = torch.tensor(a, requires_grad=True), jg.tensor(a, requires_grad=True)
    (xt[conv(torch)] * torch.tensor(v)).sum().backward()
    (x[conv(jg)] * jg.tensor(v)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())

    def step(x, v):
        y = x.clone()
        y[conv(jg)] = v
        return x[conv(jg)] * 2, y
    c, y = jg.compile(step, backend="numba")(jg.tensor(a), jg.tensor(v))
    np.testing.assert_array_equal(c.numpy(), want * 2)
    np.testing.assert_array_equal(y.numpy(), tw.detach().numpy())
