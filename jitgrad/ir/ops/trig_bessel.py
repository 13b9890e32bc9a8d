"""Inverse trigonometric and hyperbolic primitives (asin, acos, atan, sinh, cosh, asinh, acosh, atanh) and the
modified Bessel functions of the first kind of orders 0 and 1, plain and exponentially scaled (``bessel_i``:
torch.i0, torch.special.i0e / i1 / i1e).

The trigonometric ops have a NumPy impl, torch's vjp (written with jitgrad ops, so any order) and a scalar body
(``codegen/kernels/math_table.py`` rows of the same names: libm on the CPU, guarded ``math`` calls on CUDA).
``bessel_i`` is Cephes' Chebyshev expansion exactly as torch computes it (ATen's ``calc_i0`` etc.): NumPy in eager
mode, and in traces and on devices its ``decompose``, the same Clenshaw recurrence as elementwise primitives that
fuse into one loop (no device function is needed).  Its gradients are torch's:
``i0' = i1``, ``i0e' = i1e - sgn(x) i0e``, ``i1' = i0 - i1 / x``, ``i1e' = i0e - i1e (sgn(x) + 1 / x)``, the
last two 0.5 where ``|x| <= eps``.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .elementwise import _ew_vjp, _in, _out, _rule, ew
from .opdef import OpDef, OpError, register


def _np(fn):
    def impl(x):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return fn(x)
    impl.__name__ = fn.__name__
    return impl


# ---- inverse trigonometric and hyperbolic functions: torch's derivatives (tools/autograd/derivatives.yaml) ----
ew("asin", _np(np.arcsin), lambda c, g: (g * (-(_in(c) * _in(c)) + 1.0).rsqrt(),), lambda m, x: m.asin(x),
   "float", saves_in=(0,), doc="elementwise arcsine")
ew("acos", _np(np.arccos), lambda c, g: (g * -((-(_in(c) * _in(c)) + 1.0).rsqrt()),), lambda m, x: m.acos(x),
   "float", saves_in=(0,), doc="elementwise arccosine")
ew("atan", _np(np.arctan), lambda c, g: (g / (_in(c) * _in(c) + 1.0),), lambda m, x: m.atan(x),
   "float", saves_in=(0,), doc="elementwise arctangent")
ew("sinh", _np(np.sinh), lambda c, g: (g * _in(c).cosh(),), lambda m, x: m.sinh(x), "float", saves_in=(0,),
   doc="elementwise hyperbolic sine")
ew("cosh", _np(np.cosh), lambda c, g: (g * _in(c).sinh(),), lambda m, x: m.cosh(x), "float", saves_in=(0,),
   doc="elementwise hyperbolic cosine")
ew("asinh", _np(np.arcsinh), lambda c, g: (g * (_in(c) * _in(c) + 1.0).rsqrt(),), lambda m, x: m.asinh(x),
   "float", saves_in=(0,), doc="elementwise inverse hyperbolic sine")
ew("acosh", _np(np.arccosh), lambda c, g: (g * (_in(c) * _in(c) - 1.0).rsqrt(),), lambda m, x: m.acosh(x),
   "float", saves_in=(0,), doc="elementwise inverse hyperbolic cosine")
ew("atanh", _np(np.arctanh), lambda c, g: (g * (1.0 / (1.0 - _in(c) * _in(c))),), lambda m, x: m.atanh(x),
   "float", saves_in=(0,), doc="elementwise inverse hyperbolic tangent")


# ---- bessel_i: I0, I1 and their exponentially scaled forms (Cephes' coefficients, as ATen's Math.h) ----------
_I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)
_I1_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
         -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
         3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
         -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
         9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
         -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
         -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
         4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
         -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
         3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
         -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
         -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
         7.78576235018280120474E-1)


def _coeffs(n, float32):
    """torch's tables; its float32 I1 tables are the float64 ones' last 17 and 7 terms."""
    if n == 0:
        return _I0_A, _I0_B
    return (_I1_A[-17:], _I1_B[-7:]) if float32 else (_I1_A, _I1_B)


def _chbevl(y, cs):
    """Clenshaw's recurrence for sum c_i T_i(y) (Cephes' chbevl); works on arrays and on Tensors alike."""
    b0, b1, b2 = cs[0], 0.0, 0.0
    for c in cs[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return (b0 - b2) * 0.5


def _bessel_np(x, n, scaled):
    ft = x.dtype.type if x.dtype.kind == "f" else np.float32
    x = x.astype(ft, copy=False)
    A, B = _coeffs(n, ft == np.float32)
    ax = np.abs(x)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        lo = _chbevl(ax / ft(2) - ft(2), [ft(c) for c in A])
        hi = _chbevl(ft(32) / ax - ft(2), [ft(c) for c in B]) / np.sqrt(ax)
        if n == 1:
            lo = lo * ax
        r = np.where(ax <= 8, lo, hi)
        if not scaled:
            r = np.exp(ax) * r
        if n == 1:
            r = np.where(x < 0, -r, r)
    return np.asarray(r, dtype=ft)


def _bessel_decompose(b, x, n, scaled):
    # |x| with the derivative 1 at 0 for i0 (i0''(0) = 0.5; abs's would be sign(0) = 0); abs's for the others,
    # whose torch derivatives at 0 use sgn(0) = 0 (i0e) or are constants there (i1, i1e)
    ax = b("where", x < 0, -x, x) if n == 0 and not scaled else x.abs()
    A, B = _coeffs(n, x.dtype == dt.float32)
    small = ax <= 8.0
    xs = b("where", small, ax, 8.0)          # each branch sees only its own range: no 32 / 0, no inf * 0 in
    xl = b("where", small, 8.0, ax)          # the other's gradient
    lo = _chbevl(xs * 0.5 - 2.0, A)
    hi = _chbevl(32.0 / xl - 2.0, B) / xl.sqrt()
    if n == 1:      # x itself (not |x| and a sign flip): i1'(0) = i1e'(0) = 0.5 as torch, not sign(0) = 0
        lo = lo * b("where", small, x, 0.0)
        hi = b("where", x < 0, -hi, hi)
    r = b("where", small, lo, hi)
    if n == 1:      # +0.0 at -0.0, as torch, keeping the gradient there (compiled code folds a literal + 0.0)
        zero = x == 0
        r = b("where", zero, 0.0, r) + b("where", zero, r, -0.0)
    return r if scaled else r * ax.exp()


def _bessel_rule(avals, params):
    if params["n"] not in (0, 1):
        raise OpError("bessel_i: order n must be 0 or 1")
    return _rule("bessel_i", "float")(avals, params)


def _bessel_vjp(c, g):
    x, y = _in(c), _out(c)
    n, scaled = c.params["n"], c.params["scaled"]
    if n == 0:
        d = c.bind("bessel_i", x, n=1, scaled=scaled)
        return (g * (d - x.sgn() * y if scaled else d),)
    eps = float(np.finfo(x.dtype.np).eps)
    big = x.abs() > eps
    safe = c.bind("where", big, x, eps)
    gx = c.bind("bessel_i", safe, n=0, scaled=scaled) - (y * (safe.sgn() + safe.reciprocal()) if scaled
                                                            else y * safe.reciprocal())
    return (g * c.bind("where", big, gx, 0.5),)


register(OpDef("bessel_i", "elementwise", _bessel_rule, _bessel_np, _ew_vjp(_bessel_vjp), saves_in=(0,),
               saves_out=(0,), decompose=_bessel_decompose,
               doc="modified Bessel function of the first kind of order n (0 or 1); scaled: times exp(-|x|)"))
