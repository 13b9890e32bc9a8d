"""as_strided / as_strided_ (library/shaping/as_strided.py): values, storage sharing and gradients against torch, including
overlapping strides, inputs that are themselves views (transposed, expanded, offset), positions outside the
input, the in-place form, and PyTorch's own as_strided gradcheck / gradgradcheck cases."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def _run(lib, make):
    """make(lib, x) -> (output, tensor to differentiate against); returns (output, its gradient) as NumPy."""
    x = lib.tensor(np.arange(1.0, 9.0), dtype=lib.float64, requires_grad=True)
    r, wrt = make(lib, x)
    w = lib.tensor(np.arange(1.0, r.numel() + 1).reshape(tuple(r.shape)), dtype=lib.float64)
    (g,) = lib.autograd.grad(r, wrt, w)
    return r.detach().numpy(), g.numpy()


CASES = {
    "overlapping": lambda m, x: (x.as_strided((3, 3), (1, 1)), x),
    "overlapping with offset": lambda m, x: (x.as_strided((3, 3), (2, 1), 1), x),
    "stride 0": lambda m, x: (x.as_strided((4, 2), (0, 3)), x),
    "of a view, to the base": lambda m, x: (x[2:].as_strided((2, 2), (1, 1)), x),
    "to the view itself": lambda m, x: (lambda v: (v.as_strided((2, 2), (1, 1)), v))(x[2:]),
    "to the view, absolute offset": lambda m, x: (lambda v: (v.as_strided((2, 2), (1, 1), 3), v))(x[2:]),
    "of a non-view": lambda m, x: (lambda h: (h.as_strided((2, 3), (1, 2)), h))(x * 2),
    "transposed input": lambda m, x: (x.reshape(2, 4).t().as_strided((2, 2), (4, 1)), x),
    "to the transposed input": lambda m, x: (lambda v: (v.as_strided((2, 2), (4, 1)), v))(x.reshape(2, 4).t()),
    "expanded input": lambda m, x: (x[:2].expand(3, 2).as_strided((2, 2), (0, 1)), x),
    "to the expanded input": lambda m, x: (lambda v: (v.as_strided((3, 2), (0, 1)), v))(x[:2].expand(3, 2)),
    "outside the input": lambda m, x: (lambda v: (v.as_strided((3, 2), (2, 1), 0), v))(x[4:]),
    "outside the input, to the base": lambda m, x: (x[4:].as_strided((3, 2), (2, 1), 1), x),
    "as_strided of as_strided": lambda m, x: (x.as_strided((4, 2), (1, 1)).as_strided((3,), (2,)), x),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_equal_torch(name):
    (tv, tg), (jv, jgr) = _run(torch, CASES[name]), _run(jg, CASES[name])
    np.testing.assert_array_equal(jv, tv)
    np.testing.assert_array_equal(jgr, tg)


def test_the_result_is_a_view_of_the_storage():
    x = jg.arange(6.0)
    y = x.as_strided((2, 2), (1, 2), 1)
    assert y._base is x and y.storage_offset() == 1 and y.stride() == (1, 2)
    x[1] = 10.0                     # a write to the storage shows through the view
    assert y.tolist() == [[10.0, 3.0], [2.0, 4.0]]
    z = x.as_strided((2, 2), (1, 1))    # overlapping: read-only, as torch refuses writes to it
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        z.add_(1.0)


@pytest.mark.parametrize("shape,make,size,stride,offset", [
    # PyTorch's test_autograd.test_as_strided cases
    ((25,), lambda x: x.view(5, 5), [3, 3], [6, 2], 2),
    ((12,), None, [1, 2, 1, 5], [0, 5, 100, 1], 2),        # a large stride on a size-1 dim
    ((5,), None, [3, 3, 3], [0, 1, 0], 2),                 # expand-like
    ((5,), lambda x: x.expand(5, 5), [5, 5], [0, 1], 0),
    ((5,), lambda x: x.expand(3, 5), [5, 5], [0, 1], 0),
    ((35,), None, [6, 6], [5, 1], 2),                      # overlapping
    ((15,), None, [3, 2], [3, 6], 2),
    ((3, 4), None, [4, 3], [1, 4], None),                  # a transpose
    ((2, 3), lambda x: x.expand(10, 2, 3), [2, 3], [3, 1], 0),
])
def test_gradcheck_and_gradgradcheck(shape, make, size, stride, offset):
    x = jg.tensor(np.random.default_rng(0).standard_normal(shape), requires_grad=True)

    def f(x):
        return (make(x) if make is not None else x).as_strided(size, stride, offset)
    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))


def test_as_strided_in_place():
    for lib in (torch, jg):
        z = lib.arange(6.0)
        v0 = z._version
        assert z.as_strided_((2, 2), (1, 2), 1) is z
        assert z.tolist() == [[1.0, 3.0], [2.0, 4.0]] and z.stride() == (1, 2) and z._version == v0 + 1
        z.as_strided_((3,), (1,), 2)            # the storage is still the whole buffer
        assert z.tolist() == [2.0, 3.0, 4.0]
        w = lib.arange(6.0)
        v = w[2:]
        v.as_strided_((2,), (2,), 1)            # a view keeps its base's storage: offsets are absolute
        assert v.tolist() == [1.0, 3.0] and v.storage_offset() == 1
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            lib.ones(2, requires_grad=True).as_strided_((1,), (1,))
    grads = []
    for lib in (torch, jg):
        x = lib.tensor(np.arange(1.0, 7.0), requires_grad=True)
        y = x * 1
        y.as_strided_((3, 3), (1, 1))
        assert (type(y.grad_fn).__name__ if lib is torch else y.grad_fn.name()) == "AsStridedBackward1"
        (y * lib.tensor(np.arange(9.0).reshape(3, 3))).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_storage_offset_after_as_strided_in_place_is_torchs():
    """A root restrided in place keeps its buffer as its storage: its own offset, its views' and its as_strided
    results' are counted from that buffer's start, as torch's."""
    def offsets(lib):
        r = []
        x = lib.arange(10.0)
        x.as_strided_((2,), (1,), 3)
        r += [x.storage_offset(), x[1:].storage_offset()]
        z = lib.arange(10.0)
        z.as_strided_((4,), (1,), 2)
        r.append(z.as_strided((2,), (1,), 6).storage_offset())
        u = lib.arange(10.0)
        u.as_strided_((2,), (1,), 3)
        u.as_strided_((2,), (1,), 1)
        r.append(u.storage_offset())
        y = lib.arange(10.0)
        v = y[2:]
        v.as_strided_((3,), (2,), 5)
        r += [v.storage_offset(), y.storage_offset()]
        return r
    assert offsets(jg) == offsets(torch) == [3, 4, 6, 1, 5, 0]


def test_errors_like_torch():
    for lib in (torch, jg):
        with pytest.raises(RuntimeError, match="mismatch in length of strides and shape"):
            lib.ones(2).as_strided((3,), (1, 1))
        with pytest.raises(RuntimeError, match=r"setStorage: sizes \[3\], strides \[1\], storage offset 0, and "
                                               r"itemsize 4 requiring a storage size of 12 are out of bounds"):
            lib.ones(2).as_strided((3,), (1,))


def test_a_geometry_without_elements_fits_any_storage_offset():
    """A result with no elements reads no memory: any non-negative offset is in bounds (pytorch#80507), while a
    negative one is refused, and one element past the end still is."""
    for lib in (torch, jg):
        for offset in (1, 2, 7):
            r = lib.tensor([1.0]).as_strided((0,), (1,), offset)
            assert tuple(r.shape) == (0,)
        assert tuple(lib.ones(3).as_strided((2, 0), (5, 1), 9).shape) == (2, 0)
        with pytest.raises(RuntimeError, match="invalid storage offset -1"):
            lib.tensor([1.0]).as_strided((0,), (1,), -1)
        with pytest.raises(RuntimeError, match="out of bounds for storage"):
            lib.tensor([1.0]).as_strided((1,), (1,), 1)


def test_traced_as_strided_is_refused_clearly():
    step = jg.compile(lambda x: x.as_strided((2, 2), (1, 1)).sum(), backend="interpret")
    with pytest.raises(jg.UnsupportedError, match=r"as_strided\(\) on traced"):
        step(jg.arange(4.0))


def test_as_strided_of_a_root_with_a_non_contiguous_payload_is_refused_clearly():
    from jitgrad.runtime.tensor import Tensor
    t = Tensor._make(np.asfortranarray(np.arange(6.0).reshape(2, 3)))     # a payload in column-major order
    with pytest.raises(jg.UnsupportedError, match=r"as_strided\(\) on traced, device or non-contiguous"):
        t.as_strided((2,), (1,))


def test_an_empty_view_is_a_view():
    """An empty slice shares no memory, yet it is a view as in torch: an in-place write into it with its base a
    leaf that requires grad is refused, and ``as_strided`` of it reads its base's storage (it read an empty one)."""
    for M in (jg, torch):
        x = M.ones(4, 1, 3, dtype=M.float64, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
            x[:, 0:-1].add_(1.0)
    got = jg.arange(5.0).narrow(0, 0, 0).as_strided((2, 2), (2, 1), 1)
    np.testing.assert_array_equal(got.numpy(), torch.arange(5.0).narrow(0, 0, 0).as_strided((2, 2), (2, 1), 1))


def test_an_as_strided_view_follows_its_base_written_in_place():
    """``v = y.as_strided(...)`` then ``y.mul_(c)``: later uses of ``v`` differentiate through the write (torch
    regenerates the view's node); jitgrad kept its old node, a silently wrong gradient."""
    grads = []
    for M in (jg, torch):
        s = M.tensor(np.arange(5.0), dtype=M.float64, requires_grad=True)
        y = s * 1.0
        v = y.as_strided((2, 2), (2, 1), 1)
        y.mul_(-1.5)
        (v * M.tensor(np.arange(1.0, 5.0).reshape(2, 2))).sum().backward()
        grads.append(s.grad.numpy())
    np.testing.assert_allclose(*grads)


@pytest.mark.parametrize("write", [False, True])
def test_as_strided_of_a_view_beyond_its_elements_reads_the_base(write):
    """``y[0].as_strided((1, 2), (2, 1))`` shows ``y[0]`` and ``y[1]``: a write into it keeps ``y[1]``'s gradient
    (read without history, the CopySlices sent it nowhere: a silently wrong gradient; torch regenerates the view
    from the base first), while the forward gradient stays torch's (nothing for ``y[1]``)."""
    grads = []
    for M in (jg, torch):
        s = M.tensor(np.arange(5.0), dtype=M.float64, requires_grad=True)
        y = s * 1.0
        v = y[0].as_strided((1, 2), (2, 1))
        if write:
            v.add_(-1.5)
        ((y if write else v) * M.tensor(np.arange(1.0, 6.0)[:5 if write else 2])).sum().backward()
        grads.append(s.grad.numpy())
    np.testing.assert_allclose(*grads)
