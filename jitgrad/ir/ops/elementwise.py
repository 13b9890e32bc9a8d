"""Elementwise primitives: NumPy impl, vjp and scalar body side by side.

The scalar body ``(m, *arg_exprs, **params) -> str`` is the expression the loop generators inline; math goes
through ``m`` (``m.tanh(x)``), which writes the call for the target and precision from the one math table,
``codegen/kernels/math_table.py``.  Elementwise vjps return cotangents of the *broadcast* shape; `_ew_vjp` sums them back to each
input's shape and dtype, so the rules below stay pure calculus.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import dtypes as dt
from ..symbolic import same_shape
from .opdef import Aval, OpDef, OpError, broadcast_shapes, register, result_dtype

_SQRT_2_OVER_PI = 2.0 / math.sqrt(math.pi)


_SUB_BOOL = {  # torch's words; keyed by "both operands are bool"
    True: "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
          "operator instead.",
    False: "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, "
           "use the `~` or `logical_not()` operator instead."}


def _rule(name: str, kind: str):
    """kind: 'same' (promoted dtype), 'float' (ints become float32), 'bool' (comparisons/logic)."""
    def shape_dtype(avals, params):
        shape = broadcast_shapes(name, [a.shape for a in avals]) if len(avals) > 1 else avals[0].shape
        d = result_dtype(avals)
        if kind == "float" and not d.is_floating_point:
            d = dt.DEFAULT_FLOAT
        elif kind == "bool":
            d = dt.bool_
        elif kind == "cast":
            d = params["dtype"]
        elif name == "sub" and any(a.dtype is dt.bool_ for a in avals):
            raise OpError("sub: " + _SUB_BOOL[all(a.dtype is dt.bool_ for a in avals)])
        elif kind == "nobool" and d is dt.bool_:
            if name == "neg":
                raise OpError("neg: Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                              "to invert a mask, use the `~` or `logical_not()` operator instead.")
            raise OpError(f"{name}: not supported for bool tensors (got {', '.join(a.dtype.name for a in avals)}); "
                          f"use logical ops or convert with .int()/.float() first")
        return [Aval(shape, d)]
    return shape_dtype


def _ew_vjp(rule):
    def vjp(ctx, g):
        cts = rule(ctx, g)
        needs, shapes, dtypes = ctx.needs_grad, ctx.shapes, ctx.dtypes
        out = []
        for i, c in enumerate(cts):
            if c is None or not needs[i]:
                out.append(None)
                continue
            d = c._data         # an ndarray, or a Var while tracing: both have shape and a NumPy dtype
            # (a traced shape's ranks first: sizes of different dims must not be compared, symbolic.same_shape)
            if d.shape != shapes[i] if type(d) is np.ndarray else not same_shape(d.shape, shapes[i]):
                c = c.sum_to_size(shapes[i])
            if c._data.dtype != dtypes[i].np:
                c = c.to(dtypes[i])
            out.append(c)
        return tuple(out)
    vjp.rule = rule
    return vjp


def _float_inputs(impl):
    """A float-valued op computes integer and bool inputs in float32 (float64 beside a float64 input), as torch
    does: left to itself NumPy picks float16 for bool (exp(True) = 2.719) and float64 for integers."""
    def f(*xs, **params):
        for x in xs:
            if type(x) is np.ndarray and x.dtype.kind in "biu":
                break
        else:
            return impl(*xs, **params)      # the common case: float inputs
        floats = {x.dtype for x in xs if type(x) is np.ndarray and x.dtype.kind == "f"}
        # a float64 input wins, then a float32 one; integers alone compute in the default dtype (set_default_dtype)
        ft = np.float64 if np.float64 in floats else np.float32 if np.float32 in floats else dt.DEFAULT_FLOAT.np
        xs = tuple(x.astype(ft) if type(x) is np.ndarray and x.dtype.kind in "biu" else x for x in xs)
        return impl(*xs, **params)
    f.__name__ = getattr(impl, "__name__", "impl")
    return f


def _float_signature(impl):
    """``eager_impl`` of a float-valued op: ``impl`` itself when every array input is floating (no cast to make)."""
    def for_signature(avals, params):
        return impl if all(a.weak or a.dtype.is_floating_point for a in avals) else None
    for_signature.by_form = True        # (dtypes alone: the same for every shape of a form, runtime/rule_entries.py)
    return for_signature


def ew(name, impl, vjp=None, scalar=None, kind="same", saves_in=(), saves_out=(), grad_name=None,
       nondiff_inputs=(), saved_for=None, doc="", out_as_mask=False, jvp=None, eager_impl=None):
    if kind == "float":
        eager_impl = eager_impl or _float_signature(impl)
        impl = _float_inputs(impl)
    return register(OpDef(name, "elementwise", _rule(name, kind), impl, _ew_vjp(vjp) if vjp else None,
                          scalar=scalar, grad_name=grad_name, saves_in=saves_in, saves_out=saves_out,
                          nondiff_inputs=nondiff_inputs, saved_for=saved_for, doc=doc, eager_impl=eager_impl,
                          out_as_mask=out_as_mask, jvp=jvp))


def _in(ctx, i=0):
    return ctx.inputs[i]


def _out(ctx):
    return ctx.outputs[0]


# ---- unary ----------------------------------------------------------------------------------------
ew("neg", np.negative, lambda c, g: (-g,), lambda m, x: -x, kind="nobool")
ew("copy", np.copy, lambda c, g: (g,), lambda m, x: x, grad_name="CloneBackward0")
ew("exp", np.exp, lambda c, g: (g * _out(c),), lambda m, x: m.exp(x), "float", saves_out=(0,))
ew("log", np.log, lambda c, g: (g / _in(c),), lambda m, x: m.log(x), "float", saves_in=(0,))
ew("log1p", np.log1p, lambda c, g: (g / (_in(c) + 1.0),), lambda m, x: m.log1p(x), "float", saves_in=(0,))
ew("expm1", np.expm1, lambda c, g: (g * (_out(c) + 1.0),), lambda m, x: m.expm1(x), "float", saves_out=(0,))
ew("sqrt", np.sqrt, lambda c, g: (g / (_out(c) * 2.0),), lambda m, x: m.sqrt(x), "float", saves_out=(0,))
ew("rsqrt", lambda x: 1.0 / np.sqrt(x), lambda c, g: (g * (_out(c) ** 3) * -0.5,),
   lambda m, x: m.rsqrt(x), "float", saves_out=(0,))
ew("sin", np.sin, lambda c, g: (g * _in(c).cos(),), lambda m, x: m.sin(x), "float", saves_in=(0,))
ew("cos", np.cos, lambda c, g: (-(g * _in(c).sin()),), lambda m, x: m.cos(x), "float", saves_in=(0,))
ew("tan", np.tan, lambda c, g: (g * (_out(c) * _out(c) + 1.0),), lambda m, x: m.tan(x), "float", saves_out=(0,))
def _tanh_vjp(c, g):
    # one fused op in eager mode; traced or on a device its decomposition g * (1 - y^2) (ir/ops/fused.py)
    return (c.bind("tanh_backward", g, _out(c)),)


ew("tanh", np.tanh, _tanh_vjp, lambda m, x: m.tanh(x), "float", saves_out=(0,))


def _sigmoid(x):
    # stable on both tails, float32 stays float32 (scipy.special.expit would cost 150 ms of import time)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.result_type(x, np.float32), copy=False)


ew("sigmoid", _sigmoid, lambda c, g: (g * _out(c) * (1.0 - _out(c)),), lambda m, x: m.sigmoid(x), "float",
   saves_out=(0,))


_maximum = np.maximum   # (bound once: NumPy's module __getattr__ leaves ``np.X`` reads unspecialised)


def _relu_jvp(c, t):
    # the output enters detached: where the tangent records a node (forward over reverse), that node must not save
    # the dual output itself, whose tangent is the node's own result (through the level's tangent table the output
    # would then outlive its last use)
    return (c.bind("threshold_backward", t, _out(c).detach(), 0),)


def _relu_signature(avals, params):
    """``eager_impl``: relu against a 0-d zero of x's dtype, made once per signature (the same bits as the Python
    0, which a ufunc converts on every call at the cost of a small array's whole maximum)."""
    (x,) = avals
    if x.dtype is dt.bool_:
        return None
    zero = np.zeros((), x.dtype.np)
    return lambda x: _maximum(x, zero)


_relu_signature.by_form = True          # (its dtype alone)


ew("relu", lambda x: _maximum(x, 0),     # (a Python 0 keeps x's dtype: NumPy's weak scalars, or its value)
   lambda c, g: (c.bind("threshold_backward", g, _out(c), 0),),     # torch's pullback, one kernel
   lambda m, x: m.max(x, m.lit(0)), saves_out=(0,), kind="nobool", out_as_mask=True, jvp=_relu_jvp,
   eager_impl=_relu_signature)


def _threshold_backward_rule(avals, params):
    g, x, t = avals
    if not t.weak:
        raise OpError(f"threshold_backward: the threshold must be a number, got a tensor of shape "
                      f"{list(t.shape)}")
    if g.dtype is dt.bool_ or x.dtype is dt.bool_:
        raise OpError("threshold_backward: not supported for bool tensors")
    return [Aval(broadcast_shapes("threshold_backward", [g.shape, x.shape]), result_dtype([g, x]))]


_less_equal = np.less_equal
# the C functions under NumPy's __array_function__ layer (whose dispatcher is a Python frame per call)
_putmask = getattr(np.putmask, "_implementation", np.putmask)


def _threshold_backward(g, x, threshold):
    """torch's threshold_backward: 0 where ``x <= threshold``, else ``g`` (a NaN ``x`` passes ``g``; an infinite or
    NaN ``g`` where ``x <= threshold`` gives 0, which ``g * mask`` would not)."""
    return np.where(_less_equal(x, threshold), 0, g)


def _threshold_backward_signature(avals, params):
    """``eager_impl``: relu's signature (g laid out as x, one float dtype) as g's copy with zeros put where the mask
    says, half of np.where's cost on a small array; the zero a 0-d array of the dtype (a ufunc converts a Python 0
    per call, as dear as the comparison of a small array itself)."""
    g, x, _ = avals
    if g.shape != x.shape or g.dtype is not x.dtype or not g.dtype.is_floating_point or not g.shape:
        return None
    zero = np.zeros((), g.dtype.np)

    def same_layout(g, x, threshold):
        out = g.copy()
        _putmask(out, _less_equal(x, zero if threshold == 0 else threshold), zero)
        return out
    return same_layout


_threshold_backward_signature.by_form = True    # (dtypes, ranks and whether two shapes are equal: a form's)


def _threshold_backward_vjp(c, h):
    # linear in g: its own pullback.  x only selects (torch's gradient for it is zeros): it is not differentiable
    # here, so no zeros flow back through a double backward
    return (c.bind("threshold_backward", h, _in(c, 1), _in(c, 2)), None, None)


register(OpDef("threshold_backward", "elementwise", _threshold_backward_rule, _threshold_backward,
               _ew_vjp(_threshold_backward_vjp), scalar=lambda m, g, x, t: m.select(x <= t, m.lit(0), g),
               saves_in=(1, 2), nondiff_inputs=(1, 2), grad_name="ThresholdBackwardBackward0",
               eager_impl=_threshold_backward_signature,
               doc="threshold_backward(g, x, threshold): 0 where x <= threshold, else g (relu's pullback, as torch "
                   "computes it)"))
def _threshold_rule(avals, params):
    x, t, v = avals
    if not (t.weak and v.weak):
        raise OpError("threshold: the threshold and the value must be numbers")
    if x.dtype is dt.bool_:
        raise OpError("threshold: \"threshold_cpu\" not implemented for 'Bool'")
    return [Aval(x.shape, x.dtype)]


def _threshold(x, threshold, value):
    """torch's threshold: ``value`` where ``x <= threshold``, else ``x`` (a NaN passes); both numbers are first
    converted to x's dtype, as torch's kernel converts them (an integer x meets ``int(threshold)``)."""
    d = x.dtype.type
    return np.where(_less_equal(x, d(threshold)), d(value), x)


def _threshold_vjp(c, g):
    # torch's pullback: threshold_backward, whose node is ThresholdBackwardBackward0 (its double backward)
    return (c.bind("threshold_backward", g, _in(c), _in(c, 1)), None, None)


register(OpDef("threshold", "elementwise", _threshold_rule, _threshold, _ew_vjp(_threshold_vjp),
               scalar=lambda m, x, t, v: m.select(x <= t, v, x), saves_in=(0, 1), nondiff_inputs=(1, 2),
               grad_name="ThresholdBackward0",
               doc="threshold(x, threshold, value): value where x <= threshold, else x (nn.functional.threshold)"))
ew("abs", np.abs, lambda c, g: (g * _in(c).sign(),), lambda m, x: m.abs(x), saves_in=(0,), kind="nobool")


def _sign(x):
    """sign; a bool tensor is its own sign, as in torch (NumPy has no bool loop)."""
    return x.copy() if x.dtype == np.bool_ else np.sign(x)


# torch: zeros_like(grad), not grad * 0 (nan where the incoming gradient is inf)
ew("sign", _sign, lambda c, g: (g.new_zeros(g.shape),), lambda m, x: m.sign(x), grad_name="SignBackward0")
ew("reciprocal", lambda x: np.reciprocal(x.astype(np.result_type(x.dtype, np.float32), copy=False)),
   lambda c, g: (-g * (_out(c) * _out(c)),), lambda m, x: m.lit(1.0) / x, "float", saves_out=(0,))  # torch's order
def _erf(x):
    if type(x) is np.ndarray and x.dtype == np.float32:
        from .numpy_erf import erf_float32      # SciPy's float32 erf is scalar code: 12 ns an element
        return erf_float32(x)
    from scipy.special import erf   # imported on first use: keeps `import jitgrad` fast
    return erf(x)


ew("erf", _erf, lambda c, g: (g * (-(_in(c) * _in(c))).exp() * _SQRT_2_OVER_PI,), lambda m, x: m.erf(x),
   "float", saves_in=(0,))
ew("isfinite", np.isfinite, None, lambda m, x: m.isfinite(x), "bool")
ew("logical_not", np.logical_not, None, lambda m, x: m.not_(x), "bool")
register(OpDef("cast", "elementwise", _rule("cast", "cast"),
               lambda x, dtype: np.asarray(x).astype(dtype.np),
               _ew_vjp(lambda c, g: (g,)), scalar=lambda m, x, dtype: m.cast(x, dtype),
               grad_name="ToCopyBackward0"))

# ---- binary ---------------------------------------------------------------------------------------
ew("add", np.add, lambda c, g: (g, g), lambda m, x, y: x + y)
ew("sub", np.subtract, lambda c, g: (g, -g), lambda m, x, y: x - y, kind="nobool")
ew("mul", np.multiply, lambda c, g: (g * _in(c, 1) if c.needs_grad[0] else None,
                                     g * _in(c, 0) if c.needs_grad[1] else None),
   lambda m, x, y: x * y, saves_in=(0, 1), saved_for={0: (1,), 1: (0,)})
def _div_vjp(c, g):
    # torch's formulas, term for term, so that infinities, zeros and the second order agree:
    # d/dy = -g * ((x / y) / y).  A Python-number numerator is torch's ``s / t = t.reciprocal() * s``, whose
    # gradient is reciprocal's: -(g * s) * (r * r)
    x, y = _in(c, 0), _in(c, 1)
    gy = None
    if c.needs_grad[1]:
        if isinstance(x, (int, float)):
            r = y.reciprocal()
            gy = -(g * x) * (r * r)
        else:
            gy = -g * ((x / y) / y)
    return (g / y if c.needs_grad[0] else None, gy)


ew("div", np.true_divide, _div_vjp, lambda m, x, y: x / y, "float", saves_in=(0, 1), saved_for={0: (1,)})


def _int_zero_check(y):
    """torch raises on integer division by zero where NumPy returns 0 with a warning."""
    if type(y) is np.ndarray:
        if y.dtype.kind in "iub" and not y.all():
            raise ValueError("ZeroDivisionError: integer division or modulo by zero")
    elif type(y) in (int, bool) and not y:
        raise ValueError("ZeroDivisionError: integer division or modulo by zero")


def _floordiv(x, y):
    if x.dtype.kind in "iub" if type(x) is np.ndarray else type(x) in (int, bool):
        _int_zero_check(y)
    return np.floor_divide(x, y)


def _remainder(x, y):
    if x.dtype.kind in "iub" if type(x) is np.ndarray else type(x) in (int, bool):
        _int_zero_check(y)
    return np.remainder(x, y)


ew("floordiv", _floordiv, None, lambda m, x, y: x // m.nonzero(y), kind="nobool")
ew("mod", _remainder, lambda c, g: (g, -(g * (_in(c, 0) // _in(c, 1))) if c.needs_grad[1] else None),
   lambda m, x, y: x % m.nonzero(y), saves_in=(0, 1), grad_name="RemainderBackward0", kind="nobool",
   saved_for={0: (1,), 1: (1,)})


def _pow_vjp(c, g):
    # torch's pow_backward_self / pow_backward_exponent, term for term (their where()s decide the NaNs of
    # the second order): d/dx = where(y == 0, 0, g * (y * x ** (y - 1))), and a Python-number exponent 0 gives
    # zeros with no graph; d/dy = g * where((x == 0) & (y >= 0), 0, out * log(x))
    x, y = _in(c, 0), _in(c, 1)
    gx = gy = None
    if c.needs_grad[0]:
        if not isinstance(y, (int, float)):
            gx = (g * (y * x ** (y - 1.0))).where(y != 0, 0.0)
        elif y == 0:
            gx = g.new_zeros(g.shape)
        else:
            gx = g * (y * x ** (y - 1.0))
    if c.needs_grad[1]:
        # torch reads the saved result here; it is recomputed instead, so that pow saves only what torch saves
        # when the exponent needs no gradient (its input: allow_mutation_on_saved_tensors counts saved tensors)
        out = x ** y
        if isinstance(x, (int, float)):     # a Python-number base (2.0 ** t): log(x) is a constant
            log_x = math.log(x) if x > 0 else -math.inf if x == 0 else math.nan
            gy = g * (out * log_x if x != 0 else (out * log_x).where(y < 0, 0.0))
        else:
            gy = g * (out * x.log()).where(~((x == 0) & (y >= 0)), 0.0)
    return gx, gy


def _pow_impl(x, y):
    if (type(y) is float or type(y) is int) and y == 3 and type(x) is np.ndarray:
        # torch's pow(x, 3) is base * base * base (its scalar-exponent fast path), and so is the scalar body below:
        # two products instead of C pow per element (minGPT's NewGELU cubes every activation)
        return np.multiply(np.multiply(x, x), x)
    return np.power(x, y)


def _pow_scalar(m, x, y):
    # a Python-number exponent 0.5 is sqrt, as NumPy's and torch's fast paths compute it: (-inf) ** 0.5 is nan
    # there, and +inf for a tensor exponent (C pow)
    if isinstance(getattr(y, "value", None), float) and y.value == 0.5:
        return m.sqrt(x)
    # a literal exponent 2 is a product, as NumPy's fast path computes it (the correctly rounded square either
    # way): no exp(2 log x) in float64 per element (B11's Gaussians, every squared error)
    if type(getattr(y, "value", None)) in (int, float) and y.value == 2:
        return x * x
    # exponent 3: (x * x) * x, as the eager impl and torch's fast path compute it
    if type(getattr(y, "value", None)) in (int, float) and y.value == 3:
        return x * x * x
    return m.pow(x, y)


ew("pow", _pow_impl, _pow_vjp, _pow_scalar, saves_in=(0, 1), kind="nobool")


def _max_vjp(c, g):
    # torch: where(x == y, g / 2, g).masked_fill_(x < y, 0) (and x > y for y): a tie splits the gradient, a NaN
    # (no order either way) passes it whole to both inputs
    x, y = _in(c, 0), _in(c, 1)
    h = (g / 2).where(x == y, g)
    return (c.bind("where", x < y, 0.0, h) if c.needs_grad[0] else None,
            c.bind("where", x > y, 0.0, h) if c.needs_grad[1] else None)


def _min_vjp(c, g):
    x, y = _in(c, 0), _in(c, 1)
    h = (g / 2).where(x == y, g)
    return (c.bind("where", x > y, 0.0, h) if c.needs_grad[0] else None,
            c.bind("where", x < y, 0.0, h) if c.needs_grad[1] else None)


def _atan2_vjp(c, g):
    # torch's atan2_backward: g * y / (x^2 + y^2) and -g * x / (x^2 + y^2), with the reciprocal masked to 0 where
    # x^2 + y^2 is 0 (the origin, or underflow), so the gradient at the origin is 0 and its second order NaN
    x, y = _in(c, 0), _in(c, 1)
    d = x * x + y * y
    r = d.reciprocal().where(d != 0, 0.0)
    return (g * y * r if c.needs_grad[0] else None, g * -x * r if c.needs_grad[1] else None)


ew("atan2", np.arctan2, _atan2_vjp, lambda m, x, y: m.atan2(x, y), "float", saves_in=(0, 1))


def _nextafter_vjp(c, g):
    # torch has no derivative for nextafter: the node exists (requires_grad propagates) and backward refuses
    raise NotImplementedError("the derivative for 'nextafter' is not implemented.")


def _nextafter_rule(avals, params):
    if any(not a.dtype.is_floating_point for a in avals):
        raise OpError(f"nextafter: \"nextafter_cpu\" not implemented for "
                      f"'{next(a.dtype.name for a in avals if not a.dtype.is_floating_point)}' "
                      f"(got {', '.join(a.dtype.name for a in avals)})")
    return _rule("nextafter", "same")(avals, params)


register(OpDef("nextafter", "elementwise", _nextafter_rule, np.nextafter, _nextafter_vjp,
               jvp=lambda c, *ts: _nextafter_vjp(c, None),
               scalar=lambda m, x, y: m.nextafter(x, y)))


ew("maximum", np.maximum, _max_vjp, lambda m, x, y: m.max(x, y), saves_in=(0, 1))
ew("minimum", np.minimum, _min_vjp, lambda m, x, y: m.min(x, y), saves_in=(0, 1))

for _n, _f, _s in (("lt", np.less, operator.lt), ("le", np.less_equal, operator.le),
                   ("gt", np.greater, operator.gt), ("ge", np.greater_equal, operator.ge),
                   ("eq", np.equal, operator.eq), ("ne", np.not_equal, operator.ne)):
    ew(_n, _f, None, (lambda s: lambda m, x, y: s(x, y))(_s), "bool")
ew("logical_and", np.logical_and, None, lambda m, x, y: m.and_(x, y), "bool")
ew("logical_or", np.logical_or, None, lambda m, x, y: m.or_(x, y), "bool")


# ---- ternary --------------------------------------------------------------------------------------
def _where_rule(avals, params):
    c, x, y = avals
    if c.dtype is not dt.bool_ and not c.weak:
        raise OpError(f"where: expected condition to be a boolean tensor, but got a tensor with dtype {c.dtype.name}")
    shape = broadcast_shapes("where", [a.shape for a in avals])
    return [Aval(shape, result_dtype([x, y]))]


# eager dispatch passes arrays and Python numbers only: the C function under np.where's __array_function__ layer
_WHERE_C = getattr(np.where, "_implementation", None)

def _where_vjp(c, g):
    cond = _in(c, 0)
    needs = c.needs_grad
    gx = g.where(cond, 0.0) if needs[1] else None
    gy = g.where(~cond, 0.0) if needs[2] else None
    return None, gx, gy


def _copy_writing(arr, value, where):
    """A copy of ``arr`` with ``value`` written where ``where`` holds (broadcast): ``np.where``'s values."""
    out = arr.copy()
    np.copyto(out, value, where=where)
    return out


def _where_row_mask(c, x, y):
    """``np.where(c, x, y)`` for a condition smaller than ``x`` (broadcast, a mask per row: norm's backward)
    and ``y`` a number: where every condition holds, a copy of ``x``; else a copy of ``x`` with ``y`` written where
    the condition fails.  NumPy's where walks a broadcast condition element by element (~10 instructions an
    element, 5-10x a copy); a copy and a masked ``copyto`` select the same values (B9's causal mask backward,
    (16, 4, 64, 64) under a (64, 64) mask: 207 -> 121 us)."""
    if not x.flags.c_contiguous:
        return _WHERE(c, x, y)      # (NumPy's where keeps an F-ordered x's order)
    return x.copy() if _ALL(c, None) else _copy_writing(x, y, ~c)


def _where_fill(c, x, y):
    """``np.where(c, x, y)`` for a condition smaller than ``y`` and ``x`` a number (``masked_fill``: B9's causal
    mask, 223 -> 132 us): a copy of ``y`` with ``x`` written where the condition holds; the same values."""
    return _copy_writing(y, x, c) if y.flags.c_contiguous else _WHERE(c, x, y)


def _where_signature(avals, params):
    """``eager_impl``: ``_where_row_mask`` / ``_where_fill`` where the condition broadcasts (at most a quarter of
    the result's elements), one of ``x`` and ``y`` is the result's shape and dtype and the other a number; else
    NumPy's C where."""
    c, x, y = avals
    if c.dtype is not dt.bool_ or c.weak or c.ndim > max(x.ndim, y.ndim) or 4 * c.size > max(x.size, y.size):
        return _WHERE
    try:
        shape, dtype = broadcast_shapes("where", [a.shape for a in avals]), result_dtype([x, y])
    except (OpError, TypeError):
        return _WHERE
    for arr, num, impl in ((x, y, _where_row_mask), (y, x, _where_fill)):
        if not arr.weak and (num.weak or num.shape == ()) and shape == arr.shape and dtype is arr.dtype:
            return impl
    return _WHERE


_WHERE = _WHERE_C if _WHERE_C is not None else np.where
_ALL = np.logical_and.reduce    # (ndarray.all is a Python function around it)

register(OpDef("where", "elementwise", _where_rule, np.where, _ew_vjp(_where_vjp),
               scalar=lambda m, c, x, y: m.select(c, x, y), saves_in=(0,), nondiff_inputs=(0,),
               eager_impl=_where_signature))


def _clamp_rule(avals, params):
    (x,) = avals
    d = x.dtype
    for v in (params.get("min"), params.get("max")):
        if v is not None and isinstance(v, float) and not d.is_floating_point:
            d = dt.DEFAULT_FLOAT
    if d is dt.bool_:
        raise OpError("clamp: not implemented for 'bool' tensors")
    return [Aval(x.shape, d)]


def _clamp_impl(x, min=None, max=None):
    return np.clip(x, min, max)


def _clamp_vjp(c, g):
    x, lo, hi = _in(c), c.params.get("min"), c.params.get("max")
    mask = None
    if lo is not None:
        mask = x >= lo
    if hi is not None:
        mask = (x <= hi) if mask is None else (mask & (x <= hi))
    return (g if mask is None else g * mask,)


def _clamp_scalar(m, x, min=None, max=None):
    e = x
    if min is not None:
        e = m.max(e, min)
    if max is not None:
        e = m.min(e, max)
    return e


register(OpDef("clamp", "elementwise", _clamp_rule, _clamp_impl, _ew_vjp(_clamp_vjp), scalar=_clamp_scalar,
               saves_in=(0,), grad_name="ClampBackward1"))
