"""Tensor memory methods PyTorch's autograd tests use (issue 20, missing API): ``set_``, ``resize_`` /
``resize_as_``, memory formats (``contiguous_format``, ``channels_last``, ...), ``Tensor.type`` / ``type_as``, and
the ``unsafe_split`` family.  Values, strides, version counters and gradients against torch; torch's errors.
"""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- set_ -------------------------------------------------------------------------------------------------

def test_set_shares_the_source_memory_and_bumps_the_version():
    x, src = jg.zeros(2), jg.tensor([1.0, 2.0, 3.0])
    assert x.set_(src) is x
    assert x.shape == (3,) and x._version == 1 and x.data_ptr() == src.data_ptr()
    src.add_(1.0)
    assert x.tolist() == [2.0, 3.0, 4.0]
    assert x.set_().shape == (0,) and x._version == 2


def test_set_refusals_match_torch():
    with pytest.raises(RuntimeError, match="Could not set tensor of type double to a tensor of type float"):
        jg.zeros(2).set_(jg.zeros(2, dtype=jg.float64))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        jg.zeros(2, requires_grad=True).set_(jg.zeros(2))
    with pytest.raises(NotImplementedError, match="no storage objects"):
        jg.zeros(2).set_(jg.zeros(4), 0, (2,), (1,))


def test_set_gives_a_leaf_a_fresh_accumulator_as_torch():
    x = jg.rand(2, requires_grad=True)
    edge = jg.autograd.graph.get_gradient_edge(x)
    out = x.clone()
    with jg.no_grad():
        x.set_(jg.rand(2))
    with pytest.raises(RuntimeError, match="to not have been used in the graph"):
        jg.autograd.grad(out.sum(), x)
    (g,) = jg.autograd.grad(out.sum(), edge, retain_graph=True)
    assert g.tolist() == [1.0, 1.0]
    out.sum().backward()                    # the old graph still accumulates into x.grad (torch too)
    assert x.grad.tolist() == [1.0, 1.0]


def test_parameter_set_to_its_own_slice_then_backward():
    p = jg.nn.Parameter(jg.ones(16, dtype=jg.float64))
    for n in (15, 14):
        with jg.no_grad():
            p.set_(p[1:])
            p.grad = None
        jg.cat((p, p)).sum().backward()
        assert p.shape == (n,) and p.grad.tolist() == [2.0] * n


# ---- resize_ ----------------------------------------------------------------------------------------------

def test_resize_version_bumps_only_when_the_shape_changes():
    x, y = jg.rand(1), jg.randn(3)
    x.resize_((1, 2))
    assert x._version == 1 and x.shape == (1, 2)
    x.resize_as_(y)
    assert x._version == 2 and x.shape == (3,)
    x.resize_((3,))
    x.resize_as_(y)
    assert x._version == 2


def test_resize_keeps_the_leading_elements_as_torch():
    a = np.arange(6.0)
    x, t = jg.tensor(a), torch.tensor(a)
    x.resize_(2, 2)
    t.resize_(2, 2)
    assert np.array_equal(x.numpy(), t.numpy())
    x.resize_(2, 3)
    assert x.numpy().reshape(-1)[:4].tolist() == [0.0, 1.0, 2.0, 3.0]      # the rest is uninitialised in torch
    s = jg.tensor(np.arange(4.0))
    v = s.resize_(3)            # shrinking reuses the memory
    v.add_(10.0)
    assert v.tolist() == [10.0, 11.0, 12.0]


def test_resize_refusals_and_inference_mode():
    r = jg.rand(2, requires_grad=True)
    for ctx in (jg.enable_grad, jg.no_grad):
        with ctx(), pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            r.resize_(3)
    with pytest.raises(RuntimeError, match="negative dimension"):
        jg.rand(2).resize_(-1)
    with jg.inference_mode():
        c = jg.ones(1, 2, 3, requires_grad=True)
        c.resize_(1, 2)
        c.resize_as_(jg.ones(1, 2))
        assert jg.is_inference(c) and c.requires_grad and c.shape == (1, 2)


# ---- memory formats ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,shape", [("channels_last", (2, 3, 4, 5)), ("channels_last_3d", (2, 3, 2, 4, 5)),
                                        ("contiguous_format", (2, 3, 4))])
def test_memory_format_strides_match_torch(name, shape):
    a = rnd(*shape)
    fmt, tfmt = getattr(jg, name), getattr(torch, name)
    assert repr(fmt) == repr(tfmt) and isinstance(fmt, jg.memory_format)
    x, t = jg.tensor(a).contiguous(memory_format=fmt), torch.tensor(a).contiguous(memory_format=tfmt)
    assert x.stride() == t.stride() and np.array_equal(x.numpy(), a)
    assert x.is_contiguous() == t.is_contiguous()
    assert x.is_contiguous(memory_format=fmt) and x.contiguous(memory_format=fmt) is x
    assert x.clone().stride() == t.clone().stride()                              # preserve_format
    assert x.clone(memory_format=jg.contiguous_format).stride() == t.contiguous().stride()
    assert x.contiguous().stride() == t.contiguous().stride()
    assert jg.tensor(a).to(memory_format=fmt).stride() == torch.tensor(a).to(memory_format=tfmt).stride()


def test_memory_format_rank_errors_and_values_and_gradients_unchanged():
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        jg.rand(2, 3).contiguous(memory_format=jg.channels_last)
    with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d format"):
        jg.rand(2, 3, 4, 5).clone(memory_format=jg.channels_last_3d)
    with pytest.raises(TypeError, match="memory_format"):
        jg.rand(2).contiguous(memory_format="channels_last")
    x = jg.tensor(rnd(1, 2, 2, 3), requires_grad=True)

    def f(x):
        return (x.contiguous(memory_format=jg.channels_last) * x).sum((2, 3))
    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))
    y = x.clone(memory_format=jg.channels_last)
    assert y.grad_fn.name() == "CloneBackward0"
    i = jg.randint(1, (2, 8, 1, 2)).contiguous(memory_format=jg.channels_last)
    z = jg.randn(2, 8, 1, 2, requires_grad=True)
    z[i].sum().backward()
    assert z.grad.shape == (2, 8, 1, 2)


def test_memory_format_inside_compile_keeps_values():
    a = jg.tensor(rnd(2, 3, 2, 2))
    f = jg.compile(lambda t: (t * 2.0).contiguous(memory_format=jg.channels_last) + 1.0, backend="interpret")
    assert np.allclose(f(a).numpy(), a.numpy() * 2 + 1)


# ---- type / type_as ---------------------------------------------------------------------------------------

def test_type_names_legacy_types_and_type_as():
    x = jg.randn(2, 2)
    assert x.type() == "torch.FloatTensor" and jg.tensor([1]).type() == "torch.LongTensor"
    for T, dtype in ((jg.DoubleTensor, jg.float64), (jg.IntTensor, jg.int32), (jg.ByteTensor, jg.uint8)):
        y = x.type(T)
        assert isinstance(y, T) and y.dtype is dtype
        assert x.type(dtype).dtype is dtype and x.type(y.type()).dtype is dtype
        assert x.type_as(y).dtype is dtype
        assert y.type(T).data_ptr() == y.data_ptr()         # already that type: the tensor itself
    assert x.type_as(x) is x
    with pytest.raises(TypeError, match=r"type_as\(\): argument 'other' \(position 1\) must be Tensor, not int"):
        x.type_as(3)
    with pytest.raises(ValueError, match="invalid type: 'torch.NoSuchTensor'"):
        x.type("torch.NoSuchTensor")
    g = jg.tensor([1.0, 2.0], requires_grad=True)
    g.type_as(jg.zeros(1, dtype=jg.float64)).sum().backward()
    assert g.grad.dtype is jg.float32 and g.grad.tolist() == [1.0, 1.0]


# ---- unsafe_split / unsafe_split_with_sizes / unsafe_chunk ----------------------------------------------------

SPLITS = [("unsafe_split", (1,), "UnsafeSplitBackward0"),
          ("unsafe_split_with_sizes", ((1, 1, 1),), "UnsafeSplitWithSizesBackward0"),
          ("unsafe_chunk", (3,), "UnsafeSplitBackward0")]


@pytest.mark.parametrize("name,args,node", SPLITS)
def test_unsafe_splits_allow_in_place_and_match_torch_gradients(name, args, node):
    a0 = np.arange(9.0).reshape(3, 3) / 7 + 0.1
    results = []
    for m in (jg, torch):
        a = m.tensor(a0, requires_grad=True)
        b = a * a
        s1, s2, s3 = getattr(b, name)(*args)
        assert s1.grad_fn.name() == node
        s1.mul_(s2)         # refused on split's views; allowed here, and written through to b's memory
        (s1.sum() + b.sum() * 2).backward()
        results.append((a.grad.detach().numpy(), b.detach().numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-14)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-14)


def test_split_still_refuses_in_place_on_its_views():
    b = jg.randn(3, 3, requires_grad=True) * 2
    s1, s2, s3 = b.split(1)
    with pytest.raises(RuntimeError, match="output of a function that returns multiple views"):
        s1.mul_(s2)
    with pytest.raises(TypeError, match="split_size"):
        jg.unsafe_split(b, (1, 2))
    assert [t.shape for t in jg.unsafe_split(b, 2)] == [(2, 3), (1, 3)]


# ---- a leaf's .grad takes the leaf's layout (torch's AccumulateGrad contract); empty_strided ------------------

@pytest.mark.parametrize("fmt_a", ["contiguous_format", "channels_last"])
@pytest.mark.parametrize("fmt_b", ["contiguous_format", "channels_last"])
def test_grad_strides_follow_a_dense_leaf(fmt_a, fmt_b):
    a = jg.rand(2, 3, 4, 5).to(memory_format=getattr(jg, fmt_a)).requires_grad_()
    b = jg.rand(2, 3, 4, 5).to(memory_format=getattr(jg, fmt_b)).requires_grad_()
    a.sum().backward()                  # a broadcast gradient
    b.sum().backward()
    assert a.grad.stride() == a.stride() and b.grad.stride() == b.stride()
    a.grad = b.grad = None
    (a * b).sum().backward()            # gradients with the other operand's layout
    assert a.grad.stride() == a.stride() and b.grad.stride() == b.stride()
    np.testing.assert_allclose(a.grad.numpy(), b.detach().numpy())


def test_grad_of_a_leaf_with_gaps_is_row_major_and_empty_strided_matches_torch():
    c = jg.empty_strided((2, 2), (4, 2)).copy_(jg.rand(2, 2))
    assert c.stride() == torch.empty_strided((2, 2), (4, 2)).stride() == (4, 2)
    c.requires_grad_()
    c.sum().backward()
    assert c.grad.stride() == (2, 1)
    c.grad = None
    (c * jg.rand(2, 2)).sum().backward()
    assert c.grad.stride() == (2, 1)
    assert jg.empty_strided((3,), (0,))._data.flags.writeable is False      # overlapping: read-only here
    assert jg.empty_strided((2, 3), (1, 2), dtype=jg.float64).dtype is jg.float64
    with pytest.raises(RuntimeError, match="mismatch in length of strides and shape"):
        jg.empty_strided((2, 2), (1,))



@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"])
def test_like_factories_take_memory_format_as_torch(name):
    a = rnd(2, 3, 4, 5)
    x = jg.tensor(a).contiguous(memory_format=jg.channels_last)
    t = torch.tensor(a).contiguous(memory_format=torch.channels_last)
    for fmt in ("contiguous_format", "channels_last", "preserve_format"):
        got = getattr(jg, name)(x, memory_format=getattr(jg, fmt))
        want = getattr(torch, name)(t, memory_format=getattr(torch, fmt))
        assert got.stride() == want.stride() and got.shape == x.shape, fmt
    gaps = jg.rand(4, 6)[:, ::2]            # not dense: preserve_format gives row-major, as torch
    assert getattr(jg, name)(gaps, memory_format=jg.preserve_format).stride() == (3, 1)


def test_full_like_and_empty_take_memory_format():
    x = jg.rand(2, 3, 4, 5)
    y = jg.full_like(x, 2.0, memory_format=jg.channels_last)
    assert y.stride() == (60, 1, 15, 3) and y.sum().item() == 240.0
    assert jg.empty(2, 3, 4, 5, memory_format=jg.channels_last).stride() == (60, 1, 15, 3)
    with pytest.raises(RuntimeError, match="unsupported memory format Preserve"):
        jg.empty(2, 3, memory_format=jg.preserve_format)
    with pytest.raises(NotImplementedError, match="memory_format"):
        jg.zeros(2, 3, memory_format=jg.channels_last)      # torch.zeros has no memory_format either
