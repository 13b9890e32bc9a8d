"""Special-function primitives: ``lgamma``, ``polygamma`` (``n = 0`` is digamma) and ``erfinv``.

Eager mode runs SciPy's implementations (``impl``).  ``polygamma`` and ``erfinv`` have no scalar body: a trace and
a device bind their ``decompose`` instead, straight-line compositions of elementwise primitives (a fixed number
of recurrence steps and an asymptotic series; an initial approximation and Newton steps) that fuse into one loop
on every backend, so neither Numba nor CUDA needs a special-function library (SciPy's cannot be called from Numba).
``lgamma`` is libm's (``math.lgamma``, a math-table row).  Gradients are torch's: ``lgamma' = digamma``,
``polygamma(n)' = polygamma(n + 1)``, ``erfinv' = sqrt(pi) / 2 * exp(erfinv(x) ** 2)``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import dtypes as dt
from .elementwise import _ew_vjp, _in, _out, _rule, ew
from .opdef import Aval, OpDef, OpError, register


def _as_float(impl):
    """SciPy computes float32 in float32 only for some functions: the result takes the input's float dtype."""
    def f(x, **params):
        ft = x.dtype if x.dtype.kind == "f" else np.float32
        return np.asarray(impl(x.astype(ft, copy=False), **params)).astype(ft, copy=False)
    f.__name__ = impl.__name__
    return f


# ---- lgamma ------------------------------------------------------------------------------------------------
def _lgamma(x):
    from scipy.special import gammaln
    return np.where(x == -np.inf, np.inf, gammaln(x))       # SciPy: -inf there; torch and libm: +inf


ew("lgamma", _as_float(_lgamma), lambda c, g: (g * c.bind("polygamma", _in(c), n=0),), lambda m, x: m.lgamma(x),
   "float", saves_in=(0,))


# ---- polygamma / digamma -----------------------------------------------------------------------------------
def _bernoulli(k):
    """B_0 .. B_k as Fractions (Akiyama-Tanigawa)."""
    a, out = [], []
    for m in range(k + 1):
        a.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        out.append(a[0])
    return out


_B = _bernoulli(40)


def _plan(n):
    """(N, coefficients) for polygamma(n): shift x by N, then the asymptotic series at w = x + N,
    sum_j c_j / w^(n + 2j) (j >= 1) after the leading terms, truncated where its terms drop below 1e-18 of the
    leading one at w = N (x >= 0)."""
    N = 10 + 2 * n
    lead = math.factorial(max(n - 1, 0)) / N ** n if n else math.log(N)
    cs = []
    for j in range(1, 20):
        # d^n/dw^n of -B_2j / (2j w^2j) (digamma's series) = (-1)^(n+1) B_2j (2j+n-1)! / ((2j)! w^(2j+n))
        c = float(_B[2 * j]) * math.factorial(2 * j + n - 1) / math.factorial(2 * j)
        cs.append(c)
        if abs(c) / N ** (2 * j + n) < 1e-18 * abs(lead):
            break
    return N, cs


def _poly_pos(x, n):
    """polygamma(n, x) for x > -N + 10 as a composition (Tensor methods only): the recurrence
    psi^(n)(x) = psi^(n)(x + N) + (-1)^(n+1) n! sum_k (x + k)^-(n+1), then the asymptotic series at x + N."""
    N, cs = _plan(n)
    s = None
    for k in range(N):
        r = (x + float(k)).reciprocal() if k else x.reciprocal()
        t = r if n == 0 else r ** (n + 1)
        s = t if s is None else s + t
    w = x + float(N)
    iw = w.reciprocal()
    iw2 = iw * iw
    series = None
    for c in reversed(cs):
        series = c if series is None else series * iw2 + c
    if n == 0:      # log w - 1/(2w) - sum_j B_2j / (2j w^2j), minus the recurrence's sum
        return w.log() - iw * 0.5 - iw2 * series - s
    sign = 1.0 if n % 2 else -1.0
    lead = iw ** n * float(math.factorial(n - 1)) + iw ** (n + 1) * (0.5 * math.factorial(n))
    tail = lead + iw ** (n + 2) * series
    return (tail + s * float(math.factorial(n))) * sign


def _polygamma_decompose(b, x, n):
    if n > 0:
        # torch at the infinities: trigamma gives nan at -inf; Cephes' zeta (n >= 2) nan at +inf and
        # (-1)^(n+1) inf at -inf
        if n == 1:
            return b("where", x == -math.inf, math.nan, _poly_pos(x, n))
        r = b("where", x == math.inf, math.nan, _poly_pos(x, n))
        return b("where", x == -math.inf, math.inf if n % 2 else -math.inf, r)
    # digamma: the reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0, with tan's argument reduced to
    # [-1/2, 1/2] (its period; exact, also for tiny x) and kept away from tan's poles where that branch is not
    # taken (no 0 * inf in the gradient); nan at the poles x = -1, -2, ...
    neg = x < 0
    z = b("where", neg, 1.0 - x, x)
    near = b("round", x)
    fr = b("where", neg, x - near, 0.25)
    p = _poly_pos(z, 0)
    u = fr * math.pi
    refl = p - u.cos() * math.pi / u.sin()        # cos/sin, not 1/tan: tan's derivatives cancel badly near +-pi/2
    return b("where", neg & (x == near), math.nan, b("where", neg, refl, p))


def _polygamma_impl(x, n):
    from scipy import special
    if n == 0:
        r = special.psi(x)
        # torch: psi(-0.0) = +inf, psi(+0.0) = -inf
        return np.where(x == 0, np.copysign(np.inf, -np.copysign(1.0, x)), r)
    r = special.polygamma(n, x)
    if n == 1:
        return np.where(x == -np.inf, np.nan, r)       # torch's trigamma
    # torch's Cephes zeta: nan at +inf, (-1)^(n+1) inf at -inf
    return np.where(x == np.inf, np.nan, np.where(x == -np.inf, np.inf if n % 2 else -np.inf, r))


def _polygamma_rule(avals, params):
    n = params["n"]
    if not isinstance(n, int) or n < 0:
        raise OpError("polygamma: polygamma(n, x) does not support negative n.")
    return _rule("polygamma", "float")(avals, params)


register(OpDef("polygamma", "elementwise", _polygamma_rule, _as_float(_polygamma_impl),
               _ew_vjp(lambda c, g: (g * c.bind("polygamma", _in(c), n=c.params["n"] + 1),)),
               saves_in=(0,), decompose=_polygamma_decompose,
               doc="the n-th derivative of digamma (n = 0: digamma itself)"))


# ---- erfinv --------------------------------------------------------------------------------------------------
# Giles' single-precision erfinv (2010): p(w) * x with w = -log((1 - x)(1 + x)), two branches; then Newton steps
# on erf(y) = x refine it to the dtype's accuracy
_GILES_LO = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
             -0.00417768164, 0.246640727, 1.50140941)
_GILES_HI = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
             0.00943887047, 1.00167406, 2.83297682)


def _horner(cs, w):
    p = None
    for c in cs:
        p = c if p is None else p * w + c
    return p


def _erfinv_decompose(b, x):
    edge = x.abs() >= 1.0
    xs = b("where", edge, 0.0, x)        # the finite branch never sees +-1 or beyond (no inf * 0 in gradients)
    w = -((1.0 - xs) * (1.0 + xs)).log()
    lo = _horner(_GILES_LO, w - 2.5)
    hi = _horner(_GILES_HI, b("where", w < 5.0, 5.0, w).sqrt() - 3.0)
    y = b("where", w < 5.0, lo, hi) * xs
    # Newton on erf(y) = x; near +-1 the residual goes through erfc (erf(y) - x cancels there; 1 -+ x is exact)
    up, down = xs >= 0.5, xs <= -0.5
    for _ in range(2 if x.dtype == dt.float32 else 3):
        res = b("where", up, (1.0 - xs) - b("erfc", y), b("where", down, b("erfc", -y) - (1.0 + xs), y.erf() - xs))
        y = y - res / ((-(y * y)).exp() * (2.0 / math.sqrt(math.pi)))
    # +-1 -> +-inf, beyond -> nan
    ends = b("where", x == 1.0, math.inf, b("where", x == -1.0, -math.inf, math.nan))    # constants: no x * inf
    return b("where", edge, ends, y)


def _erfinv(x):
    from scipy.special import erfinv
    return erfinv(x)


register(OpDef("erfinv", "elementwise", _rule("erfinv", "float"), _as_float(_erfinv),
               _ew_vjp(lambda c, g: (g * (_out(c) * _out(c)).exp() * (math.sqrt(math.pi) / 2.0),)),
               saves_out=(0,), decompose=_erfinv_decompose, doc="inverse of erf on (-1, 1)"))


# ---- igamma / igammac ----------------------------------------------------------------------------------------
# The regularized incomplete gamma functions P(a, x) (igamma, torch.special.gammainc) and Q(a, x) = 1 - P
# (``upper=True``: igammac, gammaincc).  No scalar body (no math-table row): compiled code runs SciPy's as a host
# step.  Derivatives are torch's: with respect to x, +-x^(a-1) e^(-x) / Gamma(a); with respect to a none (torch's
# "not implemented" error at backward), and no forward-mode rule at all (torch's NotImplementedError as soon as a
# tangent reaches it).
def _igamma_impl(a, x, upper=False):
    from scipy.special import gammainc, gammaincc
    ft = np.result_type(a, x)
    r = (gammaincc if upper else gammainc)(a, x)
    # torch's edge cases, in its order of precedence (the last applied wins): a NaN argument is not always NaN
    at0, at_inf = (1.0, 0.0) if upper else (0.0, 1.0)      # the value at x = 0 and at x = inf
    r = np.where(np.isinf(x), at_inf, r)
    r = np.where(np.isinf(a), np.where(np.isinf(x), np.nan, at0), r)
    r = np.where(x == 0, at0, r)
    r = np.where(a == 0, np.where(x > 0, at_inf, np.nan), r)
    r = np.where((x < 0) | (a < 0), np.nan, r)
    return np.asarray(r).astype(ft, copy=False)


def _igamma_name(c):
    return "igammac" if c.params.get("upper") else "igamma"


def _igamma_vjp(c, g):
    if c.needs_grad[0]:
        raise NotImplementedError(f"the derivative for '{_igamma_name(c)}: input' is not implemented.")
    a, x = _in(c, 0), _in(c, 1)
    d = g * ((a - 1.0) * x.log() - x - c.bind("lgamma", a)).exp()
    return (None, -d if c.params.get("upper") else d)


def _igamma_jvp(c, *tangents):
    raise NotImplementedError(f"Trying to use forward AD with {_igamma_name(c)} that does not support it because it "
                              "has not been implemented yet (as in torch, whose derivative with respect to the first "
                              "argument is not implemented either).")


def _igamma_rule(avals, params):
    name = "igammac" if params.get("upper") else "igamma"
    promoted = _rule(name, "same")(avals, params)
    if not promoted[0].dtype.is_floating_point:
        raise OpError(f"{name}: \"{name}_cpu\" not implemented for '{dt.torch_scalar_name(promoted[0].dtype)}'")
    return promoted


register(OpDef("igamma", "elementwise", _igamma_rule, _igamma_impl, _ew_vjp(_igamma_vjp), jvp=_igamma_jvp,
               saves_in=(0, 1), grad_name="IgammaBackward0",
               doc="the regularized lower (upper=True: upper) incomplete gamma function P(a, x) (Q(a, x))"))
