"""torch's ``_foreach_*`` functions: one op applied to every tensor of a list (``torch._foreach_exp(xs)``,
``torch._foreach_add_(xs, 1)``), as optimisers and PyTorch's own tests call them.

torch fuses each into one multi-tensor kernel; here each is a loop over the list calling the per-tensor op, so
values, autograd (each result has its own node) and tracing are exactly those of the per-tensor ops.  The in-place
forms (``_foreach_add_``) write through ``_apply_inplace``: the same version bumps, leaf and view checks as
``add_``.  Arguments follow torch's overloads: a Python number, a list of numbers, a list of tensors, or one tensor
(``add``/``sub`` also take ``alpha=``), with torch's errors for lists of different lengths.
"""
from __future__ import annotations

from ..declarations import published
from . import elementary as F
from ..runtime.tensor import Tensor

# per-tensor unary ops that torch has as _foreach_<name> (each calls the Tensor method of that name)
UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
         "sinh", "sqrt", "tan", "tanh", "trunc"]
# binary ops: name -> the per-tensor function (input, other) -> result
BINARY = {"add": lambda x, o: x + o, "sub": lambda x, o: x - o, "mul": lambda x, o: x * o,
          "div": lambda x, o: x / o, "pow": lambda x, o: x ** o, "maximum": lambda x, o: F.maximum(x, o),
          "minimum": lambda x, o: F.minimum(x, o), "clamp_min": lambda x, o: x.clamp_min(o),
          "clamp_max": lambda x, o: x.clamp_max(o)}
_ALPHA = frozenset({"add", "sub"})      # ops with an ``alpha=`` scaling the other operand
_TENSOR_OTHER = frozenset({"add", "sub", "mul", "div", "pow"})     # ops that take one tensor for the whole list


def _check_list(name, tensors):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"_foreach_{name}(): argument 'self' must be tuple of Tensors, not {type(tensors).__name__}")
    if not tensors:
        raise RuntimeError("Tensor list must have at least one tensor.")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"_foreach_{name}(): argument 'self' must be tuple of Tensors, but found element of type "
                            f"{type(t).__name__}")
    return list(tensors)


def _check_same_length(tensors, others, what):
    if len(others) != len(tensors):
        if what == "scalar":
            raise RuntimeError("Tensor list must have same number of elements as scalar list.")
        raise RuntimeError(f"Tensor lists must have the same number of tensors, got {len(tensors)} and {len(others)}")


def _others(name, tensors, other):
    """One operand per tensor: a list (numbers or tensors), one tensor, or one number."""
    if isinstance(other, (list, tuple)):
        what = "tensor" if other and isinstance(other[0], Tensor) else "scalar"
        _check_same_length(tensors, other, what)
        return list(other)
    if isinstance(other, Tensor) and name not in _TENSOR_OTHER:
        raise TypeError(f"_foreach_{name}(): a single tensor operand is not one of torch's overloads; pass a number "
                        "or a list")
    return [other] * len(tensors)


def _scaled(o, alpha):
    return o if alpha == 1 else o * alpha


def _unary(name):
    def f(self):
        return [getattr(t, name)() for t in _check_list(name, self)]

    def f_(self):
        for t in _check_list(name + "_", self):
            t._apply_inplace(lambda s: getattr(s, name)())
    f.__name__, f_.__name__ = f"_foreach_{name}", f"_foreach_{name}_"
    f.__doc__ = f"``[x.{name}() for x in self]`` (torch._foreach_{name})."
    f_.__doc__ = f"In place: each ``x.{name}_()`` (torch._foreach_{name}_); returns None, as torch."
    return f, f_


def _binary(name, op):
    def f(self, other, **kw):
        alpha = _alpha(name, kw)
        ts = _check_list(name, self)
        return [op(t, _scaled(o, alpha)) for t, o in zip(ts, _others(name, ts, other))]

    def f_(self, other, **kw):
        alpha = _alpha(name, kw)
        ts = _check_list(name + "_", self)
        for t, o in zip(ts, _others(name, ts, other)):
            if isinstance(o, Tensor):
                t._apply_inplace(lambda s, ot: op(s, _scaled(ot, alpha)), o)
            else:
                t._apply_inplace(lambda s, on=o: op(s, _scaled(on, alpha)))
    f.__name__, f_.__name__ = f"_foreach_{name}", f"_foreach_{name}_"
    f.__doc__ = f"``{name}`` of each tensor with its operand (a number, a list, or one tensor; torch._foreach_{name})."
    f_.__doc__ = f"In place: each tensor becomes its ``{name}`` with its operand (torch._foreach_{name}_)."
    return f, f_


def _alpha(name, kw):
    alpha = kw.pop("alpha", 1)
    if kw:
        raise TypeError(f"_foreach_{name}() got an unexpected keyword argument '{next(iter(kw))}'")
    if alpha != 1 and name not in _ALPHA:
        raise TypeError(f"_foreach_{name}() got an unexpected keyword argument 'alpha'")
    return alpha


def _pointwise(name, op):
    """addcmul / addcdiv: ``self + value * op(t1, t2)`` per tensor, ``value`` a number or a list of numbers."""
    def f(self, tensor1, tensor2, value=1):
        ts = _check_list(name, self)
        _check_same_length(ts, tensor1, "tensor")
        _check_same_length(ts, tensor2, "tensor")
        return [t + v * op(a, b) for t, a, b, v in zip(ts, tensor1, tensor2, _others(name, ts, value))]

    def f_(self, tensor1, tensor2, value=1):
        ts = _check_list(name + "_", self)
        _check_same_length(ts, tensor1, "tensor")
        _check_same_length(ts, tensor2, "tensor")
        for t, a, b, v in zip(ts, tensor1, tensor2, _others(name, ts, value)):
            t._apply_inplace(lambda s, x, y, vv=v: s + vv * op(x, y), a, b)
    f.__name__, f_.__name__ = f"_foreach_{name}", f"_foreach_{name}_"
    f.__doc__ = f"``x + value * {name[3:]}(t1, t2)`` per tensor (torch._foreach_{name})."
    f_.__doc__ = f"In place form of ``_foreach_{name}``."
    return f, f_


@published("jitgrad")
def _foreach_lerp(self, tensors1, weight):
    """``x + weight * (end - x)`` per tensor; ``weight`` a number, a list, or a list of tensors."""
    ts = _check_list("lerp", self)
    _check_same_length(ts, tensors1, "tensor")
    return [t + w * (e - t) for t, e, w in zip(ts, tensors1, _others("lerp", ts, weight))]


@published("jitgrad")
def _foreach_lerp_(self, tensors1, weight):
    """In place form of ``_foreach_lerp``."""
    ts = _check_list("lerp_", self)
    _check_same_length(ts, tensors1, "tensor")
    for t, e, w in zip(ts, tensors1, _others("lerp", ts, weight)):
        if isinstance(w, Tensor):
            t._apply_inplace(lambda s, x, ww: s + ww * (x - s), e, w)
        else:
            t._apply_inplace(lambda s, x, ww=w: s + ww * (x - s), e)


@published("jitgrad")
def _foreach_norm(self, ord=2, dtype=None):
    """The ``ord``-norm of each tensor (torch._foreach_norm)."""
    return [t.norm(ord) if dtype is None else t.to(dtype).norm(ord) for t in _check_list("norm", self)]


@published("jitgrad")
def _foreach_max(self):
    """The largest element of each tensor (torch._foreach_max)."""
    return [t.max() for t in _check_list("max", self)]


@published("jitgrad")
def _foreach_clone(self):
    """A clone of each tensor."""
    return [t.clone() for t in _check_list("clone", self)]


@published("jitgrad")
def _foreach_zero_(self):
    """Fill each tensor with zeros, in place."""
    for t in _check_list("zero_", self):
        t.zero_()


@published("jitgrad")
def _foreach_copy_(self, src, non_blocking=False):
    """Copy each tensor of ``src`` into the matching tensor of ``self``, in place."""
    ts = _check_list("copy_", self)
    _check_same_length(ts, src, "tensor")
    for t, s in zip(ts, src):
        t.copy_(s)


# the generated _foreach_<op> / _foreach_<op>_ pairs (the hand-written ones above are declared at their defs)
for _n in UNARY:
    for _f in _unary(_n):
        published("jitgrad")(_f)
for _n, _op in BINARY.items():
    for _f in _binary(_n, _op):
        published("jitgrad")(_f)
for _n, _op in (("addcmul", lambda a, b: a * b), ("addcdiv", lambda a, b: a / b)):
    for _f in _pointwise(_n, _op):
        published("jitgrad")(_f)


__all__ = ["UNARY", "BINARY"]
