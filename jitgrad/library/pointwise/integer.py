"""torch's integer pointwise ops: ``bitwise_and/or/xor/not``, ``bitwise_left_shift``/``bitwise_right_shift``,
``gcd`` and ``lcm`` (functions, Tensor methods and in-place ``_`` variants), and the operators ``&``, ``|``,
``^``, ``~``, ``<<``, ``>>`` on integer tensors (on two bool operands ``&``/``|``/``~`` stay the logical
primitives).  Each is a primitive without gradient (``ir/ops/pointwise_math.py``); floating-point operands are
refused with torch's NotImplementedError.

>>> import jitgrad as jg
>>> jg.tensor([12, 10]) & 6, jg.gcd(jg.tensor([12, 10]), jg.tensor([8, 4]))
(tensor([4, 2]), tensor([4, 2]))
"""
from __future__ import annotations

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from .inplace import inplace_form

_KERNEL = {"bitwise_and": "bitwise_and_cpu", "bitwise_or": "bitwise_or_cpu", "bitwise_xor": "bitwise_xor_cpu",
           "bitwise_not": "bitwise_not_cpu", "bitwise_left_shift": "lshift_cpu",
           "bitwise_right_shift": "rshift_cpu", "gcd": "gcd_cpu", "lcm": "lcm_cpu"}
_NO_BOOL = ("bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm")


def _check(name, *xs):
    """torch's error for a floating result type (or a bool one where torch has no bool kernel): the operands'
    promoted dtype decides, as torch's dispatch (a bool tensor shifted by a Python int computes in int64)."""
    from ...ir.ops.opdef import result_dtype
    from ...runtime.dispatch import _avals
    d = result_dtype(_avals(OPS["add"], xs))
    if d.is_floating_point or (d is dt.bool_ and name in _NO_BOOL):
        raise NotImplementedError(f"\"{_KERNEL[name]}\" not implemented for '{dt.torch_scalar_name(d)}'")


def _binary(name, tensor_other):
    op = OPS[name]

    def f(input, other, **torch_kw):
        if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
            return torch_kwargs(f, name, (input, other), {}, torch_kw)
        for arg, what, pos in ((input, "input", 1), (other, "other", 2)):
            if not isinstance(arg, Tensor) and (pos == 1 or tensor_other):
                raise TypeError(f"{name}(): argument '{what}' (position {pos}) must be Tensor, not "
                                f"{type(arg).__name__}")
        _check(name, input, other)
        return bind(op, input, other)
    f.__name__ = name
    f.__doc__ = (f"Elementwise ``{name}`` of integer (or bool) tensors (torch.{name}); no gradient; floating-point "
                 "tensors raise NotImplementedError as in torch.")
    return f


bitwise_and = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("bitwise_and", False))
bitwise_or = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("bitwise_or", False))
bitwise_xor = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("bitwise_xor", False))
bitwise_left_shift = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("bitwise_left_shift", False))
bitwise_right_shift = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("bitwise_right_shift", False))
gcd = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("gcd", True))
lcm = published("jitgrad", "Tensor", inplace=inplace_form)(_binary("lcm", True))


@published("jitgrad", "Tensor", inplace=inplace_form)
def bitwise_not(input, **torch_kw):
    """Elementwise ``~input``: bitwise complement of integers, logical not of bools (torch.bitwise_not)."""
    if torch_kw:
        return torch_kwargs(bitwise_not, "bitwise_not", (input,), {}, torch_kw)
    if not isinstance(input, Tensor):
        raise TypeError(f"bitwise_not(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    _check("bitwise_not", input)
    return bind(OPS["bitwise_not"], input)


def _both_bool(a, b):
    return all((x.dtype is dt.bool_) if isinstance(x, Tensor) else isinstance(x, bool) for x in (a, b))


def _operator(fn, logical=None, reflected=False):
    def op(self, other):
        if not isinstance(other, (Tensor, bool, int, float)):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        if logical is not None and _both_bool(a, b):
            return bind(OPS[logical], a, b)     # bool & bool: the logical primitive, as before
        if not isinstance(a, Tensor):       # a Python number on the left: torch's reflected op
            _check(fn.__name__, a, b)
            return bind(OPS[fn.__name__], a, b)
        return fn(a, b)
    return op


@published("Tensor", name="__invert__")
def _invert(self):
    if self.dtype is dt.bool_:
        return bind(OPS["logical_not"], self)
    if self.is_floating_point():
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(self)


def _inplace_op(fn, logical=None):
    forward = _operator(fn, logical)

    def f(self, other):
        return self._apply_inplace(lambda x, o: forward(x, o), other)
    return f


# the operators ``&``, ``|``, ``^``, ``<<``, ``>>`` (and reflected, in-place forms) on integer and bool tensors
published("Tensor", name="__and__")(_operator(bitwise_and, "logical_and"))
published("Tensor", name="__rand__")(_operator(bitwise_and, "logical_and", True))
published("Tensor", name="__or__")(_operator(bitwise_or, "logical_or"))
published("Tensor", name="__ror__")(_operator(bitwise_or, "logical_or", True))
published("Tensor", name="__xor__")(_operator(bitwise_xor))
published("Tensor", name="__rxor__")(_operator(bitwise_xor, None, True))
published("Tensor", name="__lshift__")(_operator(bitwise_left_shift))
published("Tensor", name="__rlshift__")(_operator(bitwise_left_shift, None, True))
published("Tensor", name="__rshift__")(_operator(bitwise_right_shift))
published("Tensor", name="__rrshift__")(_operator(bitwise_right_shift, None, True))
published("Tensor", name="__iand__")(_inplace_op(bitwise_and, "logical_and"))
published("Tensor", name="__ior__")(_inplace_op(bitwise_or, "logical_or"))
published("Tensor", name="__ixor__")(_inplace_op(bitwise_xor))
published("Tensor", name="__ilshift__")(_inplace_op(bitwise_left_shift))
published("Tensor", name="__irshift__")(_inplace_op(bitwise_right_shift))


__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
           "gcd", "lcm"]
