"""More elementwise primitives: the rounding family (floor, ceil, trunc, round), hypot, fmod, copysign, erfc.

Each has its NumPy impl, vjp and scalar body (``codegen/math_table.py`` rows of the same names), as in
``elementwise.py``.  The rounding ops have torch's zero gradient; on integer tensors they are the identity (torch
returns a copy of an integer tensor).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .elementwise import _ew_vjp, _float_inputs, _in, _out, _remainder, ew
from .opdef import Aval, OpDef, OpError, broadcast_shapes, register, result_dtype

_FLOAT = ("float32", "float64")


def _rounding(name, np_fn):
    def impl(x):
        return np_fn(x) if x.dtype.kind == "f" else x.copy()

    def scalar(m, x):
        return getattr(m, name)(x) if m.dtype in _FLOAT else x

    def rule(avals, params):
        (a,) = avals
        if a.dtype is dt.bool_:
            raise OpError(f"{name}: not implemented for 'Bool'")
        return [Aval(a.shape, a.dtype)]

    # torch: zeros_like(grad) (no NaN from an infinite incoming gradient)
    register(OpDef(name, "elementwise", rule, impl, _ew_vjp(lambda c, g: (g.new_zeros(g.shape),)), scalar=scalar,
                   doc=f"elementwise {name}; zero gradient"))


_rounding("floor", np.floor)
_rounding("ceil", np.ceil)
_rounding("trunc", np.trunc)
_rounding("round", np.rint)      # half to even, as torch.round


def _hypot_vjp(c, g):
    # torch: grad * self / result, grad * other / result (0 / 0 = nan at the origin)
    x, y, r = _in(c, 0), _in(c, 1), _out(c)
    return (g * x / r if c.needs_grad[0] else None, g * y / r if c.needs_grad[1] else None)


ew("hypot", np.hypot, _hypot_vjp, lambda m, x, y: m.hypot(x, y), saves_in=(0, 1), saves_out=(0,))


def _fmod(x, y):
    if x.dtype.kind in "iub" if type(x) is np.ndarray else type(x) in (int, bool):
        _remainder(x, y)        # the integer-division-by-zero check
    return np.fmod(x, y)


def _fmod_vjp(c, g):
    # torch: self: grad; other: -grad * self.div(other, rounding_mode="trunc")
    x, y = _in(c, 0), _in(c, 1)
    gy = None
    if c.needs_grad[1]:
        gy = -(g * c.bind("trunc", x.detach() / y.detach()))     # torch's div(rounding_mode="trunc"): no graph
    return (g, gy)


def _fmod_scalar(m, x, y):
    if m.dtype in _FLOAT:
        return m.fmod(x, y)
    return m.fmod(x, m.nonzero(y))


ew("fmod", _fmod, _fmod_vjp, _fmod_scalar, saves_in=(0, 1), kind="nobool", saved_for={0: (1,), 1: (1,)})


def _copysign_vjp(c, g):
    # torch's copysign_tensor_self_backward: grad * (result / self), 0 where self == 0; other: zeros
    x, r = _in(c, 0), _out(c)
    ratio = c.bind("where", x == 0, 0.0, r / x)
    return (g * ratio, g.new_zeros(g.shape) if c.needs_grad[1] else None)


ew("copysign", np.copysign, _copysign_vjp, lambda m, x, y: m.copysign(x, y), "float", saves_in=(0,),
   saves_out=(0,))


def _erfc(x):
    from scipy.special import erfc
    return erfc(x)


ew("erfc", _erfc, lambda c, g: (-(g * (-(_in(c) * _in(c))).exp() * (2.0 / math.sqrt(math.pi))),),
   lambda m, x: m.erfc(x), "float", saves_in=(0,))


# ---- integer ops: bitwise and, or, xor, not, shifts; gcd, lcm (no gradient; floats refused) ---------------
_TORCH_NAME = {"bool": "Bool", "float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int",
               "uint8": "Byte", "int16": "Short", "int8": "Char", "float16": "Half"}
_BITS = {"int64": 64, "int32": 32, "int16": 16, "int8": 8, "uint8": 8}


def _int_rule(name, kernel, allow_bool=True):
    def rule(avals, params):
        shape = broadcast_shapes(name, [a.shape for a in avals]) if len(avals) > 1 else avals[0].shape
        d = result_dtype(avals)
        if d.is_floating_point or (d is dt.bool_ and not allow_bool):
            raise OpError(f"{name}: \"{kernel}\" not implemented for '{_TORCH_NAME.get(d.name, d.name)}'")
        return [Aval(shape, d)]
    return rule


def _int_op(name, impl, scalar, kernel, allow_bool=True, nargs=2):
    register(OpDef(name, "elementwise", _int_rule(name, kernel, allow_bool), impl, None, scalar=scalar,
                   doc=f"elementwise {name} of integer (or bool) tensors"))


_int_op("bitwise_and", np.bitwise_and, lambda m, x, y: x & y, "bitwise_and_cpu")
_int_op("bitwise_or", np.bitwise_or, lambda m, x, y: x | y, "bitwise_or_cpu")
_int_op("bitwise_xor", np.bitwise_xor, lambda m, x, y: x ^ y, "bitwise_xor_cpu")
_int_op("bitwise_not", np.invert, lambda m, x: m.not_(x) if m.dtype == "bool" else ~x, "bitwise_not_cpu")


def _width(x):
    return np.asarray(x).dtype.itemsize * 8


def _lshift(x, y):
    # torch: a shift by a negative count or by the width or more gives 0
    w = _width(x)
    y = np.asarray(y)
    ok = (y >= 0) & (y < w)
    return np.where(ok, np.left_shift(x, np.where(ok, y, 0).astype(y.dtype)), 0).astype(np.result_type(x, y))


def _rshift(x, y):
    # torch: an arithmetic shift by at most width - 1 (the sign fills the word)
    w = _width(x)
    y = np.asarray(y)
    return np.right_shift(x, np.where((y >= 0) & (y < w), y, w - 1).astype(y.dtype)).astype(np.result_type(x, y))


def _shift_scalar(left):
    def s(m, x, y):
        w = _BITS.get(m.dtype, 64)
        if left:
            return m.select(m.and_(y >= 0, y < w), x << y, m.lit(0))
        return x >> m.select(m.and_(y >= 0, y < w), y, w - 1)
    return s


_int_op("bitwise_left_shift", _lshift, _shift_scalar(True), "lshift_cpu", allow_bool=False)
_int_op("bitwise_right_shift", _rshift, _shift_scalar(False), "rshift_cpu", allow_bool=False)


# gcd and lcm: Euclid's loop has no inline CUDA form (CUDA kernels cannot call a device function, and
# numba-cuda has no math.gcd), so traces and devices bind a decomposition: Euclid unrolled to the longest run
# the dtype allows (consecutive Fibonacci numbers: 92 steps for int64), every step a few integer ops that fuse
# into one loop.  Eager mode runs np.gcd / np.lcm.
_EUCLID_STEPS = {"int64": 92, "int32": 46, "int16": 23, "int8": 12, "uint8": 13}


def _gcd_decompose(b, x, y):
    x, y = x.abs(), y.abs()
    dtype = (x + y).dtype
    for _ in range(_EUCLID_STEPS.get(dtype.name, 92)):
        zero = y == 0
        r = b("mod", x, b("where", zero, 1, y))
        x, y = b("where", zero, x, y), b("where", zero, 0, r)
    return x


def _lcm_decompose(b, x, y):
    g = _gcd_decompose(b, x, y)
    zero = g == 0
    return b("where", zero, 0, (b("floordiv", x, b("where", zero, 1, g)) * y).abs())


def _lcm(x, y):
    # torch: |x / gcd * y| in the integer type (wrapping, then abs), 0 where gcd is 0
    g = np.gcd(x, y)
    zero = g == 0
    return np.where(zero, 0, np.abs(x // np.where(zero, 1, g) * y)).astype(np.result_type(x, y))


for _name, _impl, _dec in (("gcd", np.gcd, _gcd_decompose), ("lcm", _lcm, _lcm_decompose)):
    register(OpDef(_name, "elementwise", _int_rule(_name, f"{_name}_cpu", False), _impl, None, decompose=_dec,
                   doc=f"elementwise {_name} of integer tensors (torch.{_name})"))


# ---- xlogy / xlog1py -----------------------------------------------------------------------------------------
def _xlogy(x, y, plus1=False):
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.log1p(y) if plus1 else np.log(y)
        return np.where((x == 0) & ~np.isnan(y), 0, x * ly).astype(np.result_type(x, y), copy=False)


def _xlogy_vjp(c, g):
    # torch: self: xlogy(grad, other) masked to 0 where self == 0 and other <= 0 (<= -1 for xlog1py);
    # other: grad * self / other (/ (other + 1))
    x, y = _in(c, 0), _in(c, 1)
    plus1 = c.params["plus1"]
    gx = gy = None
    if c.needs_grad[0]:
        gx = c.bind("where", (x == 0) & (y <= (-1.0 if plus1 else 0.0)), 0.0, c.bind("xlogy", g, y, plus1=plus1))
    if c.needs_grad[1]:
        gy = g * x / (y + 1.0 if plus1 else y)
    return gx, gy


def _xlogy_scalar(m, x, y, plus1=False):
    log = m.log1p(y) if plus1 else m.log(y)
    return m.select(m.and_(x == 0, y == y), m.lit(0.0), x * log)


ew("xlogy", _xlogy, _xlogy_vjp, _xlogy_scalar, "float", saves_in=(0, 1),
   doc="x * log(y) (log1p(y) with plus1), 0 where x == 0 and y is not NaN (torch.xlogy, torch.special.xlog1py)")
