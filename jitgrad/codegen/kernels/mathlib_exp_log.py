"""mathlib's exponential and logarithm family: exp, expm1, tanh, sigmoid, log, log1p, erf and pow, float32 and
float64, with their minimax coefficients.  exp and expm1 reduce by Cody & Waite (two-part ln2, integer bit tricks for
2^k); log and log1p use fdlibm's ``s = f/(2+f)`` form (log1p with musl's rounding correction); tanh and sigmoid are
built on expm1 and exp, erf on a polynomial below ~1 and ``exp(-x^2)`` times a polynomial above; ``pow_f64``
evaluates ``exp(y log|x|)`` with the log and the product in double-double (``_log_dd_f64``, ``_exp_dd_f64``), and
``pow_f32`` calls it (one rounding at the end).
"""
from __future__ import annotations

import numpy as np

from .mathlib_vocabulary import (recorder, select, not_, f32, f64, i32, i64, f32_as_i32, i32_as_f32, f64_as_i64,
                                 i64_as_f64, fma_f64)

DEFS: dict = {}         # name -> function, every function below (mathlib merges the families')
_def = recorder(DEFS)

# ---- float32 constants -----------------------------------------------------------------------------------
F = np.float32
_F0, _FH, _F1, _F2 = F(0.0), F(0.5), F(1.0), F(2.0)
_FINF, _FNAN = F(np.inf), F(np.nan)
_F_LOG2E = F(1.4426950408889634)
_F_SHIFT = F(12582912.0)                # 1.5 * 2^23: x + it, for |x| < 2^22, rounds x to an integer (ties even)
_I_SHIFT = np.int32(0x4B400000)         # ... whose bits are these plus that integer
_I0, _I1, _I23, _I127 = np.int32(0), np.int32(1), np.int32(23), np.int32(127)
_I_SQRTH = np.int32(0x3F3504F3)         # bits of sqrt(1/2) as a float32
_I_LOG_OFF = np.int32(0x3F800000 - 0x3F3504F3)
_I_MANT = np.int32(0x7FFFFF)
_F_LN2_HI, _F_LN2_LO = F(0.693359375), F(-2.12194440e-4)    # hi has 9 bits: k*hi is exact for |k| < 2^15
# expm1(r) = r + r^2 (c2 + c3 r + ... + c7 r^5), |r| <= ln2/2; relative error 2.7e-10.
_F_E2, _F_E3, _F_E4 = F(0.5), F(0.16666667), F(0.041666325)
_F_E5, _F_E6, _F_E7 = F(0.008333219), F(0.001394342), F(0.00019962642)
# log(1+f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f/(2+f); R(z) = z (l1 + l2 z + l3 z^2 + l4 z^3) on
# z <= ((sqrt2-1)/(sqrt2+1))^2; absolute error of R 9.7e-12.
_F_L1, _F_L2, _F_L3, _F_L4 = F(0.6666666), F(0.40000337), F(0.2853717), F(0.23584987)
# erf x = x P(x^2) on |x| <= 0.92 (relative error 4.6e-10) ...
_F_A = (F(1.1283792), F(-0.37612632), F(0.112836875), F(-0.02685894), F(0.005199907), F(-0.0008130013),
        F(8.316775e-05))
# ... and erfc x = exp(-x^2) Q(x - 2.46), Q a polynomial of degree 8 on 0.92 <= x <= 4 (absolute error of erfc
# 5.2e-9, float32 coefficients), in its even and odd halves (two chains of 4 FMAs, not one of 8).  It replaced
# H(1/(1 + x/2)), whose full-precision divide a lane the vector loop paid for: no divide now, 57 instructions a
# 16-lane step against 53 with it, and at most 1.19 ulp on that branch (the divide form: 1.44).  On the AMD host of
# 2026-11-30 (zmm divide ~5 cycles) the divide was under a tenth of a compiled erf loop's time, of which this form
# saves about half (user CPU time, alternating processes); one chain of 8 FMAs saved no more.
_F_Q_AT = F(2.46)
_F_Q = (F(0.21382241), F(-0.07637304), F(0.025896894), F(-0.008575123), F(0.0023950848), F(-0.0007223439),
        F(0.00061696157), F(0.00027127744), F(0.00012369809))

# ---- float64 constants -----------------------------------------------------------------------------------
_D_LOG2E = 1.4426950408889634
_D_LN2_HI, _D_LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10   # hi: 32 bits
# expm1(r) = r + r^2 (c2 + ... + c12 r^10), |r| <= ln2/2: relative error 2.8e-18.
_D_E = (0.5000000000000001, 0.1666666666666667, 0.04166666666665207, 0.008333333333326044,
        0.0013888888895673983, 0.0001984126987514876, 2.480157444077949e-05, 2.755725497575257e-06,
        2.7567967505590743e-07, 2.5105396244054113e-08, 1.768781635763465e-09)
# R(z) as for float32, degree 7: absolute error 2.5e-18.
_D_L = (0.6666666666666735, 0.3999999999940748, 0.28571428744142613, 0.2222219837835684, 0.1818357517158952,
        0.15313755605674426, 0.14799067636734012)
# erf x = x P(x^2) on |x| <= 1 (relative error 7.3e-18); erfc x = exp(-x^2) H(1/(1 + x/2)) on 1 <= x <= 6,
# H of degree 12 (absolute error of erfc 5.5e-19).
_D_A = (1.1283791670955126, -0.3761263890318352, 0.11283791670944185, -0.02686617064311147,
        0.0052239776061184726, -0.0008548325929314333, 0.00012055293576893975, -1.492471230186038e-05,
        1.6447131569285e-06, -1.6206313742649875e-07, 1.3710980328610118e-08, -7.779468359622431e-10)
_D_B = (-3.1305286154601994e-06, 0.28218870497961557, 0.2808163084757654, 0.25731184174150873,
        0.11859222049547079, 0.3089957814486183, -0.6424652739825065, 1.259576049970766, -1.9954046229602478,
        1.9429445764984528, -1.1260045741769953, 0.3652417598061015, -0.051790240024050194)
_D_SQRTH = 0x3FE6A09E667F3BCD        # bits of sqrt(1/2)
_D_ONE = 0x3FF0000000000000
_D_MANT = 0x000FFFFFFFFFFFFF


# ==== float32 =============================================================================================
@_def
def _expm1_reduced_f32(r):
    p = _F_E7
    p = p * r + _F_E6
    p = p * r + _F_E5
    p = p * r + _F_E4
    p = p * r + _F_E3
    p = p * r + _F_E2
    return r + (r * r) * p


@_def
def _exp_reduce_f32(xc):
    """xc in [-104, 89] -> (r, k) with xc = k ln2 + r, |r| <= ln2/2 (Cody-Waite, two-part ln2).  k is the
    nearest integer to xc log2(e), found by adding 1.5 * 2^23 (the sum's low mantissa bits are k): float
    arithmetic and one integer subtraction, all in 32-bit lanes (a float -> int -> float round trip costs
    three times the instructions once vectorised, and int64 intermediates half the vector width)."""
    t = xc * _F_LOG2E + _F_SHIFT
    kf = t - _F_SHIFT
    k = i32(f32_as_i32(t) - _I_SHIFT)
    r = xc - kf * _F_LN2_HI
    r = r - kf * _F_LN2_LO
    return r, k


@_def
def _pow2_f32(k):
    """2^k as a float32 for k in [-126, 127].  (Numba widens int32 arithmetic to int64; each step is cast back
    so that LLVM keeps the lanes 32-bit.)"""
    return i32_as_f32(i32(i32(k + _I127) << _I23))


# exp(x) rounds to +0 for x <= -104 (exp(-104) < 2^-150).  Those lanes compute exp(0) and select 0: computed at
# -104, the scaling's product underflows, and a subnormal or underflowing product takes a microcode assist on x86
# (~100 cycles a lane).  A causal softmax's masked half (-inf) went through it: B9's masked softmax forward, [16, 4,
# 64, 64] with half of each row -inf, took 230 us against 130 us for the same rows unmasked, one thread.
@_def
def exp_f32(x):
    x = f32(x)
    live = x > f32(-104.0)                           # false for nan: repaired below
    xc = select(live, x, _F0)
    xc = select(xc < f32(89.0), xc, f32(89.0))
    r, k = _exp_reduce_f32(xc)
    p = _F1 + _expm1_reduced_f32(r)
    k1 = i32(k >> _I1)                               # 2^k = 2^k1 2^k2: both normal for k in [-150, 128]
    k2 = i32(k - k1)
    y = select(live, (p * _pow2_f32(k1)) * _pow2_f32(k2), _F0)
    return select(x != x, x, y)


@_def
def _exp_normal_f32(x):
    """exp(x) for x in [-16, 0] (erf's exp(-x^2)): exp_f32 without its clamps, its NaN repair and its split
    scaling, none of which acts there, so the same bits (p 2^k1 2^k2 = p 2^k exactly while the results are
    normal), ~9 vector instructions fewer."""
    r, k = _exp_reduce_f32(x)
    return (_F1 + _expm1_reduced_f32(r)) * _pow2_f32(k)


@_def
def expm1_f32(x):
    x = f32(x)
    xc = select(x > f32(-18.0), x, f32(-18.0))                  # expm1(-18) rounds to -1
    xc = select(xc < f32(89.0), xc, f32(89.0))
    r, k = _exp_reduce_f32(xc)
    e = _expm1_reduced_f32(r)
    # expm1 x = 2^k (e + 1) - 1 = 2 (e h + (h - 1/2)), h = 2^(k-1): h - 1/2 is exact for k >= -24, no overflow
    h = _pow2_f32(i32(k - _I1))
    y = _F2 * (e * h + (h - _FH))
    y = select(abs(x) < f32(2.0 ** -25), x, y)                # tiny and +-0 exactly
    return select(x != x, x, y)


@_def
def tanh_f32(x):
    x = f32(x)
    a = abs(x)
    a = select(a < f32(10.0), a, f32(10.0))                     # tanh(9.1) rounds to 1
    e = expm1_f32(a + a)
    y = e / (e + _F2)                                     # = tanh a, no cancellation anywhere
    y = i32_as_f32(i32(f32_as_i32(y) | (f32_as_i32(x) & i32(-2147483648))))
    return select(x != x, x, y)


@_def
def sigmoid_f32(x):
    x = f32(x)
    e = exp_f32(-abs(x))                                  # never overflows
    y = (select(x >= _F0, _F1, e)) / (_F1 + e)
    return select(x != x, x, y)


@_def
def _log1p_core_f32(f, kf, c):
    """log(1+f) + k ln2 + c for f in [sqrt(1/2)-1, sqrt(2)-1] (fdlibm's formulation)."""
    s = f / (_F2 + f)
    z = s * s
    R = z * (_F_L1 + z * (_F_L2 + z * (_F_L3 + z * _F_L4)))
    hfsq = _FH * f * f
    return kf * _F_LN2_HI - ((hfsq - (s * (hfsq + R) + (kf * _F_LN2_LO + c))) - f)


@_def
def log_f32(x):
    x = f32(x)
    sub = x < f32(1.1754943508222875e-38)
    xs = select(sub, x * f32(8388608.0), x)                   # denormals: scale by 2^23 first
    # int32 lanes (cast back after each step: Numba widens int32 arithmetic); negative and NaN inputs may wrap,
    # their results are selected below
    ix = i32(f32_as_i32(xs) + _I_LOG_OFF)
    k = i32(i32(i32(ix >> _I23) - _I127) - (select(sub, _I23, _I0)))
    m = i32_as_f32(i32(i32(ix & _I_MANT) + _I_SQRTH))   # in [sqrt(1/2), sqrt(2))
    y = _log1p_core_f32(m - _F1, f32(k), _F0)
    y = select(not_(x < _FINF), x, y)                       # +inf, nan
    y = select(x < _F0, _FNAN, y)
    return select(x == _F0, -_FINF, y)


@_def
def log1p_f32(x):
    x = f32(x)
    u = _F1 + x
    iu = i32(f32_as_i32(u) + _I_LOG_OFF)
    k = i32(i32(iu >> _I23) - _I127)
    # u = 1 + x rounded; c = (1 + x) - u to first order, divided by u (musl's correction)
    c = select(k >= 2, _F1 - (u - x), x - (u - _F1))
    c = select(k < 25, c / u, _F0)
    m = i32_as_f32(i32(i32(iu & _I_MANT) + _I_SQRTH))
    y = _log1p_core_f32(m - _F1, f32(k), c)
    y = select(abs(x) < f32(2.0 ** -25), x, y)
    y = select(not_(x < _FINF), x, y)
    y = select(x < -_F1, _FNAN, y)
    return select(x == -_F1, -_FINF, y)


@_def
def erf_f32(x):
    x = f32(x)
    ac = select(abs(x) < f32(4.0), abs(x), f32(4.0))             # erf(3.92) rounds to 1
    return _erf_f32(x, ac, _exp_normal_f32(-(ac * ac)))          # ac is never NaN: -16 <= -ac^2 <= 0


# A kernel that needs both erf x and exp(-x^2) (GELU's backward: erf's vjp is exp(-x^2) 2/sqrt(pi)) passes its exp
# to erf (``erf_exp.py`` rewrites ``erf(x)`` beside ``exp(-(x*x))``), and computes one exp an element instead of
# two.  Same bits as erf_f32: below the clamp e is the exp erf_f32 computes (exp_f32 and _exp_normal_f32 agree
# there), beyond it both give 1.  Beyond the clamp e is not used (0 selected): exp(-x^2) turns subnormal there,
# and a subnormal product takes a microcode assist a lane on x86.
@_def
def erf_exp_f32(x, e):
    """erf x given e = exp_f32(-(x*x)), computed by the caller."""
    x = f32(x)
    live = abs(x) < f32(4.0)
    return _erf_f32(x, select(live, abs(x), f32(4.0)), select(live, f32(e), _F0))


@_def
def _erf_f32(x, ac, e):
    """erf x from ac = min(|x|, 4) and e = exp(-ac^2) (or anything whose product with Q(ac) rounds 1 - it to 1
    where |x| >= 4)."""
    a = abs(x)
    z = a * a
    p = _F_A[6]
    for i in range(5, -1, -1):
        p = p * z + _F_A[i]
    small = a * p
    u = ac - _F_Q_AT
    v = u * u
    qe = _F_Q[8]
    for i in (6, 4, 2, 0):
        qe = qe * v + _F_Q[i]
    qo = _F_Q[7]
    for i in (5, 3, 1):
        qo = qo * v + _F_Q[i]
    q = qo * u + qe
    large = _F1 - e * q
    y = select(a < f32(0.92), small, large)
    y = i32_as_f32(i32(f32_as_i32(y) | (f32_as_i32(x) & i32(-2147483648))))
    return select(x != x, x, y)


# ==== float64 =============================================================================================
@_def
def _expm1_reduced_f64(r):
    p = _D_E[10]
    for i in range(9, -1, -1):
        p = p * r + _D_E[i]
    return r + (r * r) * p


@_def
def _exp_reduce_f64(xc):
    k = i64(xc * _D_LOG2E + 2048.5) - 2048
    kf = f64(k)
    r = xc - kf * _D_LN2_HI
    r = r - kf * _D_LN2_LO
    return r, k


@_def
def _exp_dd_f64(hi, lo):
    """exp(hi + lo) for |lo| <= ulp(hi), hi finite; overflow -> inf, underflow -> 0 or denormal (hi <= -746:
    +0 without the underflowing product, as exp_f32 below -104)."""
    live = hi > -746.0
    xc = select(live, hi, 0.0)
    xc = select(xc < 710.0, xc, 710.0)
    r, k = _exp_reduce_f64(xc)
    p = 1.0 + _expm1_reduced_f64(r + lo)
    k1 = k >> 1
    k2 = k - k1
    return select(live, (p * i64_as_f64((k1 + 1023) << 52)) * i64_as_f64((k2 + 1023) << 52), 0.0)


@_def
def exp_f64(x):
    x = f64(x)
    y = _exp_dd_f64(x, 0.0)
    return select(x != x, x, y)


@_def
def expm1_f64(x):
    x = f64(x)
    xc = select(x > -40.0, x, -40.0)
    xc = select(xc < 710.0, xc, 710.0)
    r, k = _exp_reduce_f64(xc)
    e = _expm1_reduced_f64(r)
    h = i64_as_f64((k - 1 + 1023) << 52)
    y = 2.0 * (e * h + (h - 0.5))
    y = select(abs(x) < 2.0 ** -54, x, y)
    return select(x != x, x, y)


@_def
def tanh_f64(x):
    x = f64(x)
    a = abs(x)
    a = select(a < 20.0, a, 20.0)                           # tanh(19.1) rounds to 1
    e = expm1_f64(a + a)
    y = e / (e + 2.0)
    y = i64_as_f64(f64_as_i64(y) | (f64_as_i64(x) & i64(-9223372036854775808)))
    return select(x != x, x, y)


@_def
def sigmoid_f64(x):
    x = f64(x)
    e = exp_f64(-abs(x))
    y = (select(x >= 0.0, 1.0, e)) / (1.0 + e)
    return select(x != x, x, y)


@_def
def _log1p_core_f64(f, kf, c):
    s = f / (2.0 + f)
    z = s * s
    R = _D_L[6]
    for i in range(5, -1, -1):
        R = R * z + _D_L[i]
    R = R * z
    hfsq = 0.5 * f * f
    return kf * _D_LN2_HI - ((hfsq - (s * (hfsq + R) + (kf * _D_LN2_LO + c))) - f)


@_def
def log_f64(x):
    x = f64(x)
    sub = x < 2.2250738585072014e-308
    xs = select(sub, x * 18014398509481984.0, x)            # 2^54
    ix = f64_as_i64(xs) + (_D_ONE - _D_SQRTH)
    k = (ix >> 52) - 1023 - (select(sub, 54, 0))
    m = i64_as_f64((ix & _D_MANT) + _D_SQRTH)
    y = _log1p_core_f64(m - 1.0, f64(k), 0.0)
    y = select(not_(x < np.inf), x, y)
    y = select(x < 0.0, np.nan, y)
    return select(x == 0.0, -np.inf, y)


@_def
def log1p_f64(x):
    x = f64(x)
    u = 1.0 + x
    iu = f64_as_i64(u) + (_D_ONE - _D_SQRTH)
    k = (iu >> 52) - 1023
    c = select(k >= 2, 1.0 - (u - x), x - (u - 1.0))
    c = select(k < 54, c / u, 0.0)
    m = i64_as_f64((iu & _D_MANT) + _D_SQRTH)
    y = _log1p_core_f64(m - 1.0, f64(k), c)
    y = select(abs(x) < 2.0 ** -54, x, y)
    y = select(not_(x < np.inf), x, y)
    y = select(x < -1.0, np.nan, y)
    return select(x == -1.0, -np.inf, y)


@_def
def erf_f64(x):
    x = f64(x)
    ac = select(abs(x) < 6.0, abs(x), 6.0)                  # erf(5.93) rounds to 1
    return _erf_f64(x, ac, exp_f64(-(ac * ac)))


@_def
def erf_exp_f64(x, e):
    """erf x given e = exp_f64(-(x*x)), computed by the caller (see erf_exp_f32)."""
    x = f64(x)
    live = abs(x) < 6.0
    return _erf_f64(x, select(live, abs(x), 6.0), select(live, f64(e), 0.0))


@_def
def _erf_f64(x, ac, e):
    """erf x from ac = min(|x|, 6) and e = exp(-ac^2) (as _erf_f32)."""
    a = abs(x)
    z = a * a
    p = _D_A[11]
    for i in range(10, -1, -1):
        p = p * z + _D_A[i]
    small = a * p
    t = 1.0 / (1.0 + 0.5 * ac)
    h = _D_B[12]
    for i in range(11, -1, -1):
        h = h * t + _D_B[i]
    large = 1.0 - e * h
    y = select(a < 1.0, small, large)
    y = i64_as_f64(f64_as_i64(y) | (f64_as_i64(x) & i64(-9223372036854775808)))
    return select(x != x, x, y)


@_def
def _log_dd_f64(a):
    """log a as hi + lo with about 2^-58 relative error, a > 0 finite (for pow: y*log a up to 745 must
    stay within 1e-15 absolute)."""
    sub = a < 2.2250738585072014e-308
    xs = select(sub, a * 18014398509481984.0, a)
    ix = f64_as_i64(xs) + (_D_ONE - _D_SQRTH)
    k = f64((ix >> 52) - 1023 - (select(sub, 54, 0)))
    f = i64_as_f64((ix & _D_MANT) + _D_SQRTH) - 1.0       # exact
    d = 2.0 + f                                           # s = f/(2+f) to ~2^-100: s + sl
    dl = (2.0 - d) + f
    s = f / d
    sl = (fma_f64(-s, d, f) - s * dl) / d
    z = s * s
    R = _D_L[6]
    for i in range(5, -1, -1):
        R = R * z + _D_L[i]
    R = R * z
    hf = 0.5 * f
    hh = hf * f                                           # f^2/2 = hh + hl exactly
    hl = fma_f64(hf, f, -hh)
    # log(1+f) = f - f^2/2 + s f^2/2 + s R: the first three exactly (error-free transforms), s R rounded
    a1 = f - hh
    e1 = (f - a1) - hh                                    # Fast2Sum: |hh| <= |f|/2
    p1 = s * hh
    e3 = fma_f64(s, hh, -p1)
    a2 = a1 + p1                                          # Fast2Sum: |p1| <= |a1|/10
    e4 = p1 - (a2 - a1)
    b1 = k * _D_LN2_HI                                    # exact
    hi = b1 + a2
    bb = hi - b1
    e2 = (b1 - (hi - bb)) + (a2 - bb)                     # 2Sum
    lo = (e1 + e2 + e4 + e3) + ((s * R + (s * hl - hl)) + (sl * (hh + R) + k * _D_LN2_LO))
    h2 = hi + lo
    return h2, lo - (h2 - hi)


@_def
def pow_f64(x, y):
    """C99 / NumPy pow: exp(y log|x|) with log and the product in double-double, plus the sign and special
    cases (pow(x, 0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1, pow(0, y<0) = inf, negative base with
    non-integer y = nan, odd integer y keeps the sign of the base)."""
    x = f64(x)
    y = f64(y)
    a = abs(x)
    lh, ll = _log_dd_f64(a)
    lh = select(a == 0.0, -np.inf, lh)                     # log 0 = -inf, log inf = inf: y log|x| is +-inf
    lh = select(a == np.inf, np.inf, lh)
    zh = y * lh
    zl = fma_f64(y, lh, -zh) + y * ll
    zl = select(abs(zh) < 1000.0, zl, 0.0)                 # beyond that exp over/underflows anyway
    zc = select(zh < 1000.0, zh, 1000.0)                    # nan (inf*0) -> 1000, fixed below
    zc = select(zc > -1000.0, zc, -1000.0)
    r = _exp_dd_f64(zc, zl)
    ay = abs(y)
    big = ay >= 9007199254740992.0                        # 2^53: integer and even
    yc = select(ay < 9007199254740992.0, y, 0.0)
    iy = i64(yc)
    is_int = big | (f64(iy) == yc)
    odd = (not_(big)) & ((iy & 1) == 1) & (f64(iy) == yc)
    neg = f64_as_i64(x) < 0
    r = select(neg & odd, -r, r)
    r = select((x < 0.0) & (x > -np.inf) & (not_(is_int)) & (ay < np.inf), np.nan, r)
    r = select((x != x) | (y != y), x + y, r)
    r = select((x == 1.0) | (y == 0.0) | ((x == -1.0) & (ay == np.inf)), 1.0, r)
    return r


@_def
def pow_f32(x, y):
    """float64 inside, one rounding at the end (as musl/glibc powf): float32 y*log x would lose ~7 bits."""
    return f32(pow_f64(f64(x), f64(y)))
