"""Bad input gives a clear error: the op's name, the shapes/dtypes involved, and the user's file:line.

Op errors (those raised while dispatching an op) must name the op, every input shape written like ``[2, 3]``
and the line of *this* file that made the call; they must not chain NumPy/Numba exceptions ("During handling
of the above exception...").  Errors raised by plain Python-level checks (requires_grad on an int tensor,
backward of a non-scalar, .numpy() on a tensor that requires grad) carry torch's message.
"""
import os
import traceback

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

THIS_FILE = os.path.basename(__file__)


def raised(fn, exc=Exception):
    with pytest.raises(exc) as info:
        fn()
    return info.value


def assert_clean(e):
    """No foreign traceback chained to the error, and no NumPy/Numba frames in the text."""
    assert e.__cause__ is None
    assert e.__context__ is None or e.__suppress_context__
    text = "".join(traceback.format_exception(type(e), e, None))
    assert "During handling of the above exception" not in text
    assert "numba" not in str(e).lower()


def assert_op_error(e, op, *parts):
    msg = str(e)
    assert op in msg, msg
    for p in parts:
        assert p in msg, f"{p!r} not in {msg!r}"
    assert THIS_FILE in msg, f"the user's file is not named: {msg!r}"
    assert_clean(e)


# ---- broadcasting ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op, fn", [
    ("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("sub", lambda a, b: a - b),
    ("div", lambda a, b: a / b), ("add", lambda a, b: jg.add(a, b)), ("mul", lambda a, b: a.mul(b)),
    ("maximum", lambda a, b: jg.maximum(a, b)), ("pow", lambda a, b: a ** b), ("lt", lambda a, b: a < b),
    ("add", lambda a, b: a.add_(b))])
def test_broadcast_mismatch(op, fn):
    e = raised(lambda: fn(jg.ones(2, 3), jg.ones(4)), RuntimeError)
    assert_op_error(e, op, "[2, 3]", "[4]", "float32")
    assert "broadcast" in str(e)
    # the frame named is the first one outside jitgrad: the lambda of this file that applied the op
    assert f"{THIS_FILE}:" in str(e) and "in <lambda>" in str(e)


def test_broadcast_mismatch_names_the_test_line():
    a, b = jg.ones(2, 3), jg.ones(4)
    with pytest.raises(RuntimeError) as info:
        a * b  # noqa: B018  <- this line
    assert "a * b" in str(info.value) and "test_broadcast_mismatch_names_the_test_line" in str(info.value)


def test_torch_raises_on_the_same_broadcast():
    if torch is None:
        pytest.skip("torch not installed")
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.ones(2, 3) + torch.ones(4)


# ---- matmul ----------------------------------------------------------------------------------------

def test_matmul_inner_dim_mismatch():
    e = raised(lambda: jg.ones(2, 3) @ jg.ones(4, 5), RuntimeError)
    assert_op_error(e, "matmul", "[2, 3]", "[4, 5]", "cannot be multiplied")
    e = raised(lambda: jg.matmul(jg.ones(2, 3), jg.ones(4)), RuntimeError)
    assert_op_error(e, "matmul", "[2, 3]", "[4]")


def test_matmul_batch_mismatch():
    e = raised(lambda: jg.ones(2, 2, 3) @ jg.ones(4, 3, 5), RuntimeError)
    assert_op_error(e, "matmul", "[2, 2, 3]", "[4, 3, 5]")


def test_matmul_dtype_mismatch():
    e = raised(lambda: jg.ones(2, 3) @ jg.ones(3, 4, dtype=jg.float64), RuntimeError)
    assert_op_error(e, "matmul", "float32", "float64", "[2, 3]", "[3, 4]")
    if torch is not None:   # torch refuses too, rather than promoting
        with pytest.raises(RuntimeError, match="same dtype"):
            torch.ones(2, 3) @ torch.ones(3, 4, dtype=torch.float64)


def test_matmul_zero_dim():
    e = raised(lambda: jg.tensor(2.0) @ jg.ones(3), RuntimeError)
    assert_op_error(e, "matmul", "1D")


# ---- shapes ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, shown", [((4,), "[4]"), ((4, -1), "[4, -1]"), ((7, 1), "[7, 1]")])
def test_reshape_wrong_size(shape, shown):
    e = raised(lambda: jg.ones(2, 3).reshape(*shape), RuntimeError)
    assert_op_error(e, "reshape", "[2, 3]", shown, "invalid for input of size 6")


def test_view_wrong_size():
    e = raised(lambda: jg.ones(2, 3).view(4), RuntimeError)
    assert_op_error(e, "reshape", "[2, 3]", "[4]")


def test_cat_mismatched_shapes():
    e = raised(lambda: jg.cat([jg.ones(2, 3), jg.ones(2, 4)]), RuntimeError)
    assert_op_error(e, "cat", "[2, 3]", "[2, 4]")
    e = raised(lambda: jg.cat([jg.ones(2, 3), jg.ones(4)]), RuntimeError)
    assert_op_error(e, "cat", "[2, 3]", "[4]")


def test_expand_and_permute():
    e = raised(lambda: jg.ones(2, 3).expand(4, 3), RuntimeError)
    assert_op_error(e, "expand", "[2, 3]", "[4, 3]")
    e = raised(lambda: jg.ones(2, 3).permute(0, 0), RuntimeError)
    assert_op_error(e, "permute", "[2, 3]")


def test_stack_mismatched_shapes():
    e = raised(lambda: jg.stack([jg.ones(2, 3), jg.ones(4)]), RuntimeError)
    assert "stack" in str(e) and "[2, 3]" in str(e) and "[4]" in str(e)


def test_dim_out_of_range_is_index_error():
    e = raised(lambda: jg.ones(2, 3).sum(5), IndexError)
    assert "Dimension out of range" in str(e) and "5" in str(e)


# ---- indexing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, shown", [(4, "index 4"), ((0, 4), "index 4"), ((0, 0, 0), "too many indices"),
                                        (-3, "index -3")])
def test_index_out_of_range(key, shown):
    e = raised(lambda: jg.ones(2, 3)[key], IndexError)
    assert_op_error(e, "getitem", "[2, 3]", shown)
    if torch is not None:
        with pytest.raises(IndexError):
            torch.ones(2, 3)[key]


def test_index_tensor_out_of_range():
    e = raised(lambda: jg.ones(2, 3)[jg.tensor([0, 4])], IndexError)
    assert_op_error(e, "getitem", "[2, 3]", "[2]", "4")


def test_setitem_out_of_range_and_bad_value_shape():
    x = jg.ones(2, 3)
    e = raised(lambda: x.__setitem__(4, 0.0), IndexError)
    assert "index_put" in str(e) and "[2, 3]" in str(e) and THIS_FILE in str(e)
    assert_clean(e)
    e = raised(lambda: x.__setitem__(slice(None), jg.ones(4)), RuntimeError)
    assert "[2, 3]" in str(e) and "[4]" in str(e) and THIS_FILE in str(e)
    assert_clean(e)
    y = jg.ones(2, 3, requires_grad=True) * 1
    e = raised(lambda: y.__setitem__(slice(None), jg.ones(4, requires_grad=True)), RuntimeError)
    assert_op_error(e, "index_put", "[2, 3]", "[4]")


# ---- dtypes ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: jg.tensor([1, 2], requires_grad=True),
                                  lambda: jg.tensor([1, 2]).requires_grad_(),
                                  lambda: jg.zeros(2, dtype=jg.int64, requires_grad=True),
                                  lambda: jg.tensor([True], requires_grad=True)])
def test_requires_grad_on_non_float(make):
    e = raised(make, RuntimeError)
    assert "only Tensors of floating point dtype can require gradients" in str(e)
    assert "int64" in str(e) or "bool" in str(e)
    if torch is not None:
        with pytest.raises(RuntimeError, match="floating point"):
            torch.tensor([1, 2], requires_grad=True)


def test_exp_of_bool_follows_torch_and_returns_float32():
    """torch does NOT raise here: exp(bool tensor) is float32 (True -> e, False -> 1).  jitgrad does the same."""
    r = jg.tensor([True, False]).exp()
    assert r.dtype is jg.float32
    np.testing.assert_allclose(r.numpy(), [np.e, 1.0], rtol=1e-7)
    if torch is not None:
        np.testing.assert_allclose(r.numpy(), torch.tensor([True, False]).exp().numpy(), rtol=1e-6)


@pytest.mark.parametrize("fn, both", [(lambda a, b, i: a - b, True), (lambda a, b, i: a - True, True),
                                      (lambda a, b, i: True - a, True), (lambda a, b, i: a - 1, False),
                                      (lambda a, b, i: i - a, False)])
def test_sub_of_bools_raises_like_torch(fn, both):
    """torch raises for any subtraction involving a bool tensor; jitgrad says the same words."""
    a, b, i = jg.tensor([True, False]), jg.tensor([False, False]), jg.tensor([1, 2])
    e = raised(lambda: fn(a, b, i), RuntimeError)
    words = "with two bool tensors is not supported" if both else "with a bool tensor is not supported"
    assert_op_error(e, "sub", "Subtraction, the `-` operator", words, "bool[2]")
    if torch is not None:
        with pytest.raises(RuntimeError, match=words):
            fn(torch.tensor([True, False]), torch.tensor([False, False]), torch.tensor([1, 2]))


def test_neg_of_bool_raises_like_torch():
    e = raised(lambda: -jg.tensor([True]), RuntimeError)
    assert_op_error(e, "neg", "Negation, the `-` operator, on a bool tensor is not supported", "bool[1]")


def test_inplace_result_type_error():
    e = raised(lambda: jg.tensor([1, 2]).add_(1.5), RuntimeError)
    assert "result type Float can't be cast to the desired output type Long" in str(e)


def test_unsupported_operand_type():
    e = raised(lambda: jg.ones(2) + "a", TypeError)
    assert_op_error(e, "add", "str")


def test_where_condition_must_be_bool():
    e = raised(lambda: jg.where(jg.ones(2), jg.ones(2), jg.zeros(2)), RuntimeError)
    assert_op_error(e, "where", "float32")


# ---- autograd misuse -------------------------------------------------------------------------------

def test_backward_of_non_scalar_without_gradient():
    y = jg.ones(2, 3, requires_grad=True) * 2
    e = raised(lambda: y.backward(), RuntimeError)
    assert "grad can be implicitly created only for scalar outputs" in str(e) and "[2, 3]" in str(e)
    y.backward(jg.ones(2, 3))    # with a gradient it works


def test_backward_with_wrong_gradient_shape():
    y = jg.ones(2, 3, requires_grad=True) * 2
    e = raised(lambda: y.backward(jg.ones(4)), RuntimeError)
    assert "Mismatch in shape" in str(e) and "[4]" in str(e) and "[2, 3]" in str(e)


def test_backward_of_tensor_without_grad():
    e = raised(lambda: jg.ones(2).sum().backward(), RuntimeError)
    assert "does not require grad and does not have a grad_fn" in str(e)


@pytest.mark.parametrize("make", [lambda: jg.ones(2, 3, requires_grad=True),
                                  lambda: jg.ones(2, 3, requires_grad=True) * 2])
def test_numpy_of_tensor_requiring_grad(make):
    t = make()
    e = raised(t.numpy, RuntimeError)
    assert str(e) == "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
    e = raised(lambda: np.asarray(t), RuntimeError)
    assert "detach()" in str(e)
    assert t.detach().numpy().shape == (2, 3)


def test_leaf_inplace_error():
    x = jg.ones(2, requires_grad=True)
    e = raised(lambda: x.mul_(2), RuntimeError)
    assert "a leaf Variable that requires grad is being used in an in-place operation" in str(e)


# ---- losses ----------------------------------------------------------------------------------------

def test_cross_entropy_bad_target():
    e = raised(lambda: F.cross_entropy(jg.ones(2, 3), jg.tensor([0, 3])), IndexError)
    assert "Target 3 is out of bounds" in str(e)
    e = raised(lambda: F.cross_entropy(jg.ones(2, 3), jg.tensor([0, 1, 2])), RuntimeError)
    assert "[2, 3]" in str(e) and "[3]" in str(e)


# ---- nothing foreign leaks -------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda: jg.ones(2, 3) + jg.ones(4), lambda: jg.ones(2, 3) @ jg.ones(4, 5), lambda: jg.ones(2, 3).reshape(4),
    lambda: jg.cat([jg.ones(2, 3), jg.ones(2, 4)]), lambda: jg.ones(2, 3)[4], lambda: jg.ones(2, 3)[jg.tensor([5])],
    lambda: jg.tensor([1, 2]) // 0, lambda: jg.tensor([1, 2]) ** -1, lambda: jg.tensor([True]) - jg.tensor([True])])
def test_no_foreign_tracebacks(fn):
    e = raised(fn)
    assert_clean(e)
    assert THIS_FILE in str(e)
    assert not str(e).startswith("operands could not be broadcast"), "a raw NumPy message leaked"
