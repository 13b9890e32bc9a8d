"""Branch-free, vectorisable scalar math for the generated loops: exp, log, log1p, expm1, tanh, sigmoid, erf,
sin, cos, tan, pow (+ sqrt, rsqrt, abs, sign, max, min, isfinite), one function per precision.

Why: llvmlite has no SVML, so a loop calling ``math.exp`` / ``math.tanh`` stays scalar.  Everything here is
straight-line float and integer arithmetic: range reduction with integer bit tricks (the ``*_as_*`` bitcast
intrinsics), polynomials evaluated with Horner, and ``a if c else b`` selects instead of branches, so LLVM's
loop vectoriser turns a loop that calls these into SIMD code.  No libm calls anywhere.

Accuracy (checked by tests/test_mathlib.py against NumPy over the whole range, specials included): float32
within 4 ulp, float64 within 1e-14 relative.  Every float32 function computes in float32 except ``pow_f32``,
which (like musl's and glibc's powf) evaluates ``exp(y*log x)`` in float64 and rounds once: ``y*log x`` needs
about 30 more bits than float32 carries.

Polynomial coefficients are minimax: computed by the linear Remez exchange algorithm in 50-digit mpmath
(weighted by the error measure named at each table: relative error of the function, or absolute error where the
result is later added to something larger), then rounded to the working precision.  The structure of each
algorithm is the classic one (Cody & Waite range reduction; fdlibm's ``log`` in ``s = f/(2+f)``; musl's
``log1p`` rounding correction; Payne & Hanek reduction for sin/cos), written here from the maths, not copied.

Compilation flags.  These functions are plain ``@njit`` functions, *not* ``inline="always"``: Numba's IR
inlining would compile their bodies with the caller's fastmath flags, and the generated loops use ``reassoc``,
which rewrites ``(p * s1) * s2`` scalings and Cody-Waite splits and breaks exactness (measured: 4.9e6 ulp in
exp).  As separate functions they keep their own flags (``contract`` only: FMA contraction is allowed, nothing
else) and LLVM's inliner still inlines them into the loop, which then vectorises.  No ``nnan``/``ninf``/``nsz``
anywhere, so NaN, inf and -0.0 are handled exactly as written.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic

from .math_table import MATH

FASTMATH = {"contract"}
_jit = njit(fastmath=FASTMATH, forceinline=True, cache=True, error_model="numpy")


# ---- bit casts -------------------------------------------------------------------------------------------
def _bitcast(src, dst, dst_ll):
    @intrinsic
    def cast(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], dst_ll)
        return dst(src), codegen
    return cast


f32_as_i32 = _bitcast(types.float32, types.int32, llir.IntType(32))
i32_as_f32 = _bitcast(types.int32, types.float32, llir.FloatType())
f64_as_i64 = _bitcast(types.float64, types.int64, llir.IntType(64))
i64_as_f64 = _bitcast(types.int64, types.float64, llir.DoubleType())


def _fma(t, t_ll):
    @intrinsic
    def fma(typingctx, a, b, c):
        if not (a == b == c == t):
            return None

        def codegen(context, builder, sig, args):
            fn = builder.module.declare_intrinsic("llvm.fma", [t_ll], llir.FunctionType(t_ll, [t_ll] * 3))
            return builder.call(fn, args)
        return t(t, t, t), codegen
    return fma


# a*b + c with one rounding (llvm.fma: one vfmadd instruction on x86-64 with FMA)
fma_f32 = _fma(types.float32, llir.FloatType())
fma_f64 = _fma(types.float64, llir.DoubleType())


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
# sin r = r + r^3 (s3 + s5 r^2 + s7 r^4 + s9 r^6), cos r = 1 - r^2/2 + r^4 (c4 + ... + c10 r^6), |r| <= pi/4
# (relative error 5.2e-12 and 1.2e-13).
_F_S3, _F_S5, _F_S7, _F_S9 = F(-0.16666667), F(0.008333329), F(-0.00019839304), F(2.7180465e-06)
_F_C4, _F_C6, _F_C8, _F_C10 = F(0.041666668), F(-0.0013888883), F(2.4799452e-05), F(-2.7205047e-07)
# erf x = x P(x^2) on |x| <= 0.92 (relative error 4.6e-10) ...
_F_A = (F(1.1283792), F(-0.37612632), F(0.112836875), F(-0.02685894), F(0.005199907), F(-0.0008130013),
        F(8.316775e-05))
# ... and erfc x = exp(-x^2) H(t), t = 1/(1 + x/2), H of degree 5 on 0.92 <= x <= 4 (absolute error of erfc
# 1.0e-10).
_F_B = (F(0.0017120629), F(0.2606605), F(0.39347643), F(-0.05872), F(0.6317423), F(-0.22910842))

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
# sin/cos on |r| <= pi/4: relative error 2.1e-21 and 8.5e-22.
_D_S = (-0.16666666666666666, 0.008333333333333323, -0.0001984126984125465, 2.7557319213985085e-06,
        -2.5052104860762986e-08, 1.6058360438927607e-10, -7.578403243032848e-13)
_D_C = (0.041666666666666664, -0.001388888888888889, 2.4801587301586597e-05, -2.7557319222839313e-07,
        2.087675625099799e-09, -1.1470527182360604e-11, 4.7494040359338726e-14)
# erf x = x P(x^2) on |x| <= 1 (relative error 7.3e-18); erfc x = exp(-x^2) H(1/(1 + x/2)) on 1 <= x <= 6,
# H of degree 12 (absolute error of erfc 5.5e-19).
_D_A = (1.1283791670955126, -0.3761263890318352, 0.11283791670944185, -0.02686617064311147,
        0.0052239776061184726, -0.0008548325929314333, 0.00012055293576893975, -1.492471230186038e-05,
        1.6447131569285e-06, -1.6206313742649875e-07, 1.3710980328610118e-08, -7.779468359622431e-10)
_D_B = (-3.1305286154601994e-06, 0.28218870497961557, 0.2808163084757654, 0.25731184174150873,
        0.11859222049547079, 0.3089957814486183, -0.6424652739825065, 1.259576049970766, -1.9954046229602478,
        1.9429445764984528, -1.1260045741769953, 0.3652417598061015, -0.051790240024050194)


# ---- 2/pi bits for Payne-Hanek reduction -----------------------------------------------------------------
def _two_over_pi_bits(k: int) -> int:
    """floor(2/pi * 2^k), exactly, with Machin's formula in integer arithmetic (no float, no mpmath)."""
    g = k + 96
    one = 1 << g

    def atan_inv(n):
        total = term = one // n
        n2, i, sign = n * n, 1, -1
        while term:
            term //= n2
            total += sign * (term // (2 * i + 1))
            sign, i = -sign, i + 1
        return total
    pi = 4 * (4 * atan_inv(5) - atan_inv(239))      # pi * 2^g, error a few units in the last place
    return (1 << (k + 1 + g)) // pi


def _pio2_table(ex_lo, ex_hi, exp_offset, nwords):
    """Row for each biased exponent ex: the 24-bit words of the window of 2/pi holding bits s+1 .. s+24n
    (bit i weighs 2^-i), s = ex - exp_offset - 2.  With x = M 2^E (M the integer significand, E = ex -
    exp_offset), the bits of 2/pi before the window contribute multiples of 4 to x*2/pi (so nothing to the
    quadrant) and M * window / 2^(24n-2) is x*2/pi mod 4."""
    k = 1300
    bits = _two_over_pi_bits(k)
    rows = []
    for ex in range(ex_lo, ex_hi + 1):
        s = ex - exp_offset - 2
        w = (bits >> (k - s - 24 * nwords)) & ((1 << (24 * nwords)) - 1)
        rows.append([(w >> (24 * (nwords - 1 - i))) & 0xFFFFFF for i in range(nwords)])
    return np.array(rows, dtype=np.int64).ravel()


_PH32_EXLO = 107                      # below 2^-20 sin x = x within float32 rounding: no reduction
_PH32 = _pio2_table(_PH32_EXLO, 254, 150, 4)
_PH64_EXLO = 993                      # below 2^-30 for float64
_PH64 = _pio2_table(_PH64_EXLO, 2046, 1075, 8)
_M24 = 0xFFFFFF
_F_PIO2_HI = F(1.5707963267948966 / 2.0 ** 58)       # pi/2 2^-58 as float-float
_F_PIO2_LO = F(1.5707963267948966 / 2.0 ** 58 - float(_F_PIO2_HI))


# ==== float32 =============================================================================================
@_jit
def _expm1_reduced_f32(r):
    p = _F_E7
    p = p * r + _F_E6
    p = p * r + _F_E5
    p = p * r + _F_E4
    p = p * r + _F_E3
    p = p * r + _F_E2
    return r + (r * r) * p


@_jit
def _exp_reduce_f32(xc):
    """xc in [-104, 89] -> (r, k) with xc = k ln2 + r, |r| <= ln2/2 (Cody-Waite, two-part ln2).  k is the
    nearest integer to xc log2(e), found by adding 1.5 * 2^23 (the sum's low mantissa bits are k): float
    arithmetic and one integer subtraction, all in 32-bit lanes (a float -> int -> float round trip costs
    three times the instructions once vectorised, and int64 intermediates half the vector width)."""
    t = xc * _F_LOG2E + _F_SHIFT
    kf = t - _F_SHIFT
    k = np.int32(f32_as_i32(t) - _I_SHIFT)
    r = xc - kf * _F_LN2_HI
    r = r - kf * _F_LN2_LO
    return r, k


@_jit
def _pow2_f32(k):
    """2^k as a float32 for k in [-126, 127].  (Numba widens int32 arithmetic to int64; each step is cast back
    so that LLVM keeps the lanes 32-bit.)"""
    return i32_as_f32(np.int32(np.int32(k + _I127) << _I23))


@_jit
def exp_f32(x):
    x = F(x)
    xc = x if x > F(-104.0) else F(-104.0)                # nan -> -104, repaired below
    xc = xc if xc < F(89.0) else F(89.0)
    r, k = _exp_reduce_f32(xc)
    p = _F1 + _expm1_reduced_f32(r)
    k1 = np.int32(k >> _I1)                               # 2^k = 2^k1 2^k2: both normal for k in [-150, 128]
    k2 = np.int32(k - k1)
    y = (p * _pow2_f32(k1)) * _pow2_f32(k2)
    return x if x != x else y


@_jit
def expm1_f32(x):
    x = F(x)
    xc = x if x > F(-18.0) else F(-18.0)                  # expm1(-18) rounds to -1
    xc = xc if xc < F(89.0) else F(89.0)
    r, k = _exp_reduce_f32(xc)
    e = _expm1_reduced_f32(r)
    # expm1 x = 2^k (e + 1) - 1 = 2 (e h + (h - 1/2)), h = 2^(k-1): h - 1/2 is exact for k >= -24, no overflow
    h = _pow2_f32(np.int32(k - _I1))
    y = _F2 * (e * h + (h - _FH))
    y = x if abs(x) < F(2.0 ** -25) else y                # tiny and +-0 exactly
    return x if x != x else y


@_jit
def tanh_f32(x):
    x = F(x)
    a = abs(x)
    a = a if a < F(10.0) else F(10.0)                     # tanh(9.1) rounds to 1
    e = expm1_f32(a + a)
    y = e / (e + _F2)                                     # = tanh a, no cancellation anywhere
    y = i32_as_f32(np.int32(f32_as_i32(y) | (f32_as_i32(x) & np.int32(-2147483648))))
    return x if x != x else y


@_jit
def sigmoid_f32(x):
    x = F(x)
    e = exp_f32(-abs(x))                                  # never overflows
    y = (_F1 if x >= _F0 else e) / (_F1 + e)
    return x if x != x else y


@_jit
def _log1p_core_f32(f, kf, c):
    """log(1+f) + k ln2 + c for f in [sqrt(1/2)-1, sqrt(2)-1] (fdlibm's formulation)."""
    s = f / (_F2 + f)
    z = s * s
    R = z * (_F_L1 + z * (_F_L2 + z * (_F_L3 + z * _F_L4)))
    hfsq = _FH * f * f
    return kf * _F_LN2_HI - ((hfsq - (s * (hfsq + R) + (kf * _F_LN2_LO + c))) - f)


@_jit
def log_f32(x):
    x = F(x)
    sub = x < F(1.1754943508222875e-38)
    xs = x * F(8388608.0) if sub else x                   # denormals: scale by 2^23 first
    # int32 lanes (cast back after each step: Numba widens int32 arithmetic); negative and NaN inputs may wrap,
    # their results are selected below
    ix = np.int32(f32_as_i32(xs) + _I_LOG_OFF)
    k = np.int32(np.int32(np.int32(ix >> _I23) - _I127) - (_I23 if sub else _I0))
    m = i32_as_f32(np.int32(np.int32(ix & _I_MANT) + _I_SQRTH))   # in [sqrt(1/2), sqrt(2))
    y = _log1p_core_f32(m - _F1, F(k), _F0)
    y = x if not (x < _FINF) else y                       # +inf, nan
    y = _FNAN if x < _F0 else y
    return -_FINF if x == _F0 else y


@_jit
def log1p_f32(x):
    x = F(x)
    u = _F1 + x
    iu = np.int32(f32_as_i32(u) + _I_LOG_OFF)
    k = np.int32(np.int32(iu >> _I23) - _I127)
    # u = 1 + x rounded; c = (1 + x) - u to first order, divided by u (musl's correction)
    c = (_F1 - (u - x)) if k >= 2 else (x - (u - _F1))
    c = c / u if k < 25 else _F0
    m = i32_as_f32(np.int32(np.int32(iu & _I_MANT) + _I_SQRTH))
    y = _log1p_core_f32(m - _F1, F(k), c)
    y = x if abs(x) < F(2.0 ** -25) else y
    y = x if not (x < _FINF) else y
    y = _FNAN if x < -_F1 else y
    return -_FINF if x == -_F1 else y


@_jit
def erf_f32(x):
    x = F(x)
    a = abs(x)
    z = a * a
    p = _F_A[6]
    for i in range(5, -1, -1):
        p = p * z + _F_A[i]
    small = a * p
    ac = a if a < F(4.0) else F(4.0)                      # erf(3.92) rounds to 1
    t = _F1 / (_F1 + _FH * ac)
    h = _F_B[5]
    for i in range(4, -1, -1):
        h = h * t + _F_B[i]
    large = _F1 - exp_f32(-(ac * ac)) * h
    y = small if a < F(0.92) else large
    y = i32_as_f32(np.int32(f32_as_i32(y) | (f32_as_i32(x) & np.int32(-2147483648))))
    return x if x != x else y


@_jit
def _rem_pio2_f32(a):
    """a = |x| finite -> (r, q): a = q pi/2 + r (mod 2 pi), |r| <= pi/4, by Payne-Hanek in int64 arithmetic:
    exact for every float32, including 3.4e38.  Below 2^-20, r = a."""
    ia = np.int64(f32_as_i32(a))
    ex = ia >> 23
    ex = ex if ex > _PH32_EXLO else _PH32_EXLO
    ex = ex if ex < 254 else 254
    row = (ex - _PH32_EXLO) * 4
    m = (ia & 0x7FFFFF) | 0x800000
    t = _PH32[row + 3] * m                                # column sums of m * window, then carries
    t = _PH32[row + 2] * m + (t >> 24)
    l1 = t & _M24
    t = _PH32[row + 1] * m + (t >> 24)
    l2 = t & _M24
    t = _PH32[row] * m + (t >> 24)
    l3 = t & _M24
    top = (l3 << 36) | (l2 << 12) | (l1 >> 12)            # x 2/pi mod 4 = top / 2^58
    top = top + (1 << 57)                                 # round to the nearest quadrant
    q = (top >> 58) & 3
    frac = (top & ((1 << 58) - 1)) - (1 << 57)
    fh = F(frac)                                          # frac = fh + fl exactly
    fl = F(frac - np.int64(fh))
    p = fh * _F_PIO2_HI                                   # r + rl = frac pi/2 2^-58 in float-float
    e = fma_f32(fh, _F_PIO2_HI, -p) + (fh * _F_PIO2_LO + fl * _F_PIO2_HI)
    r = p + e
    rl = e - (r - p)
    tiny = a < F(2.0 ** -20)
    return (a if tiny else r), (_F0 if tiny else rl), (0 if tiny else q)


@_jit
def _sincos_poly_f32(r, rl):
    """sin and cos of r + rl (rl a correction below half an ulp of r)."""
    z = r * r
    s = r + (rl + (r * z) * (_F_S3 + z * (_F_S5 + z * (_F_S7 + z * _F_S9))))
    c = (_F1 - _FH * z) + ((z * z) * (_F_C4 + z * (_F_C6 + z * (_F_C8 + z * _F_C10))) - r * rl)
    return s, c


@_jit
def sin_f32(x):
    x = F(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = c if q & 1 else s
    y = -y if q & 2 else y
    y = i32_as_f32(np.int32(f32_as_i32(y) ^ (f32_as_i32(x) & np.int32(-2147483648))))   # sin is odd
    return y if abs(x) < _FINF else x - x


@_jit
def cos_f32(x):
    x = F(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = s if q & 1 else c
    y = -y if (q + 1) & 2 else y
    return y if abs(x) < _FINF else x - x


@_jit
def tan_f32(x):
    x = F(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = -c / s if q & 1 else s / c
    y = i32_as_f32(np.int32(f32_as_i32(y) ^ (f32_as_i32(x) & np.int32(-2147483648))))
    return y if abs(x) < _FINF else x - x


# ==== float64 =============================================================================================
@_jit
def _expm1_reduced_f64(r):
    p = _D_E[10]
    for i in range(9, -1, -1):
        p = p * r + _D_E[i]
    return r + (r * r) * p


@_jit
def _exp_reduce_f64(xc):
    k = np.int64(xc * _D_LOG2E + 2048.5) - 2048
    kf = np.float64(k)
    r = xc - kf * _D_LN2_HI
    r = r - kf * _D_LN2_LO
    return r, k


@_jit
def _exp_dd_f64(hi, lo):
    """exp(hi + lo) for |lo| <= ulp(hi), hi finite; overflow -> inf, underflow -> 0 or denormal."""
    xc = hi if hi > -746.0 else -746.0
    xc = xc if xc < 710.0 else 710.0
    r, k = _exp_reduce_f64(xc)
    p = 1.0 + _expm1_reduced_f64(r + lo)
    k1 = k >> 1
    k2 = k - k1
    return (p * i64_as_f64((k1 + 1023) << 52)) * i64_as_f64((k2 + 1023) << 52)


@_jit
def exp_f64(x):
    x = np.float64(x)
    y = _exp_dd_f64(x, 0.0)
    return x if x != x else y


@_jit
def expm1_f64(x):
    x = np.float64(x)
    xc = x if x > -40.0 else -40.0
    xc = xc if xc < 710.0 else 710.0
    r, k = _exp_reduce_f64(xc)
    e = _expm1_reduced_f64(r)
    h = i64_as_f64((k - 1 + 1023) << 52)
    y = 2.0 * (e * h + (h - 0.5))
    y = x if abs(x) < 2.0 ** -54 else y
    return x if x != x else y


@_jit
def tanh_f64(x):
    x = np.float64(x)
    a = abs(x)
    a = a if a < 20.0 else 20.0                           # tanh(19.1) rounds to 1
    e = expm1_f64(a + a)
    y = e / (e + 2.0)
    y = i64_as_f64(f64_as_i64(y) | (f64_as_i64(x) & np.int64(-9223372036854775808)))
    return x if x != x else y


@_jit
def sigmoid_f64(x):
    x = np.float64(x)
    e = exp_f64(-abs(x))
    y = (1.0 if x >= 0.0 else e) / (1.0 + e)
    return x if x != x else y


@_jit
def _log1p_core_f64(f, kf, c):
    s = f / (2.0 + f)
    z = s * s
    R = _D_L[6]
    for i in range(5, -1, -1):
        R = R * z + _D_L[i]
    R = R * z
    hfsq = 0.5 * f * f
    return kf * _D_LN2_HI - ((hfsq - (s * (hfsq + R) + (kf * _D_LN2_LO + c))) - f)


_D_SQRTH = 0x3FE6A09E667F3BCD        # bits of sqrt(1/2)
_D_ONE = 0x3FF0000000000000
_D_MANT = 0x000FFFFFFFFFFFFF


@_jit
def log_f64(x):
    x = np.float64(x)
    sub = x < 2.2250738585072014e-308
    xs = x * 18014398509481984.0 if sub else x            # 2^54
    ix = f64_as_i64(xs) + (_D_ONE - _D_SQRTH)
    k = (ix >> 52) - 1023 - (54 if sub else 0)
    m = i64_as_f64((ix & _D_MANT) + _D_SQRTH)
    y = _log1p_core_f64(m - 1.0, np.float64(k), 0.0)
    y = x if not (x < np.inf) else y
    y = np.nan if x < 0.0 else y
    return -np.inf if x == 0.0 else y


@_jit
def log1p_f64(x):
    x = np.float64(x)
    u = 1.0 + x
    iu = f64_as_i64(u) + (_D_ONE - _D_SQRTH)
    k = (iu >> 52) - 1023
    c = (1.0 - (u - x)) if k >= 2 else (x - (u - 1.0))
    c = c / u if k < 54 else 0.0
    m = i64_as_f64((iu & _D_MANT) + _D_SQRTH)
    y = _log1p_core_f64(m - 1.0, np.float64(k), c)
    y = x if abs(x) < 2.0 ** -54 else y
    y = x if not (x < np.inf) else y
    y = np.nan if x < -1.0 else y
    return -np.inf if x == -1.0 else y


@_jit
def erf_f64(x):
    x = np.float64(x)
    a = abs(x)
    z = a * a
    p = _D_A[11]
    for i in range(10, -1, -1):
        p = p * z + _D_A[i]
    small = a * p
    ac = a if a < 6.0 else 6.0                            # erf(5.93) rounds to 1
    t = 1.0 / (1.0 + 0.5 * ac)
    h = _D_B[12]
    for i in range(11, -1, -1):
        h = h * t + _D_B[i]
    large = 1.0 - exp_f64(-(ac * ac)) * h
    y = small if a < 1.0 else large
    y = i64_as_f64(f64_as_i64(y) | (f64_as_i64(x) & np.int64(-9223372036854775808)))
    return x if x != x else y


@_jit
def _rem_pio2_f64(a):
    """Payne-Hanek for float64 (as _rem_pio2_f32, with the significand in three 24-bit limbs and a 192-bit
    window of 2/pi): exact for every finite double."""
    ia = f64_as_i64(a)
    ex = ia >> 52
    ex = ex if ex > _PH64_EXLO else _PH64_EXLO
    ex = ex if ex < 2046 else 2046
    b = (ex - _PH64_EXLO) * 8
    m = (ia & _D_MANT) | (1 << 52)
    m0 = m & _M24
    m1 = (m >> 24) & _M24
    m2 = m >> 48
    w0, w1, w2, w3 = _PH64[b], _PH64[b + 1], _PH64[b + 2], _PH64[b + 3]
    w4, w5, w6, w7 = _PH64[b + 4], _PH64[b + 5], _PH64[b + 6], _PH64[b + 7]
    t = w7 * m0                                           # limb 0 (lowest)
    t = w6 * m0 + w7 * m1 + (t >> 24)
    t = w5 * m0 + w6 * m1 + w7 * m2 + (t >> 24)
    t = w4 * m0 + w5 * m1 + w6 * m2 + (t >> 24)
    l3 = t & _M24
    t = w3 * m0 + w4 * m1 + w5 * m2 + (t >> 24)
    l4 = t & _M24
    t = w2 * m0 + w3 * m1 + w4 * m2 + (t >> 24)
    l5 = t & _M24
    t = w1 * m0 + w2 * m1 + w3 * m2 + (t >> 24)
    l6 = t & _M24
    t = w0 * m0 + w1 * m1 + w2 * m2 + (t >> 24)
    l7 = t & _M24
    top = (l7 << 36) | (l6 << 12) | (l5 >> 12)            # x 2/pi mod 4 = (top + low 2^-60) / 2^58
    low = ((l5 & 0xFFF) << 48) | (l4 << 24) | l3
    top = top + (1 << 57)
    q = (top >> 58) & 3
    frac = (top & ((1 << 58) - 1)) - (1 << 57)
    f = np.float64(frac) + np.float64(low) * 2.0 ** -60
    r = f * (1.5707963267948966 / 2.0 ** 58)
    tiny = a < 2.0 ** -30
    return (a if tiny else r), (0 if tiny else q)


@_jit
def _sincos_poly_f64(r):
    z = r * r
    s = _D_S[6]
    for i in range(5, -1, -1):
        s = s * z + _D_S[i]
    c = _D_C[6]
    for i in range(5, -1, -1):
        c = c * z + _D_C[i]
    return r + (r * z) * s, (1.0 - 0.5 * z) + (z * z) * c


@_jit
def sin_f64(x):
    x = np.float64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = c if q & 1 else s
    y = -y if q & 2 else y
    y = i64_as_f64(f64_as_i64(y) ^ (f64_as_i64(x) & np.int64(-9223372036854775808)))
    return y if abs(x) < np.inf else x - x


@_jit
def cos_f64(x):
    x = np.float64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = s if q & 1 else c
    y = -y if (q + 1) & 2 else y
    return y if abs(x) < np.inf else x - x


@_jit
def tan_f64(x):
    x = np.float64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = -c / s if q & 1 else s / c
    y = i64_as_f64(f64_as_i64(y) ^ (f64_as_i64(x) & np.int64(-9223372036854775808)))
    return y if abs(x) < np.inf else x - x


@_jit
def _log_dd_f64(a):
    """log a as hi + lo with about 2^-58 relative error, a > 0 finite (for pow: y*log a up to 745 must
    stay within 1e-15 absolute)."""
    sub = a < 2.2250738585072014e-308
    xs = a * 18014398509481984.0 if sub else a
    ix = f64_as_i64(xs) + (_D_ONE - _D_SQRTH)
    k = np.float64((ix >> 52) - 1023 - (54 if sub else 0))
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


@_jit
def pow_f64(x, y):
    """C99 / NumPy pow: exp(y log|x|) with log and the product in double-double, plus the sign and special
    cases (pow(x, 0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1, pow(0, y<0) = inf, negative base with
    non-integer y = nan, odd integer y keeps the sign of the base)."""
    x = np.float64(x)
    y = np.float64(y)
    a = abs(x)
    lh, ll = _log_dd_f64(a)
    lh = -np.inf if a == 0.0 else lh                     # log 0 = -inf, log inf = inf: y log|x| is +-inf
    lh = np.inf if a == np.inf else lh
    zh = y * lh
    zl = fma_f64(y, lh, -zh) + y * ll
    zl = zl if abs(zh) < 1000.0 else 0.0                 # beyond that exp over/underflows anyway
    zc = zh if zh < 1000.0 else 1000.0                    # nan (inf*0) -> 1000, fixed below
    zc = zc if zc > -1000.0 else -1000.0
    r = _exp_dd_f64(zc, zl)
    ay = abs(y)
    big = ay >= 9007199254740992.0                        # 2^53: integer and even
    yc = y if ay < 9007199254740992.0 else 0.0
    iy = np.int64(yc)
    is_int = big or np.float64(iy) == yc
    odd = (not big) and (iy & 1) == 1 and np.float64(iy) == yc
    neg = f64_as_i64(x) < 0
    r = -r if (neg and odd) else r
    r = np.nan if (x < 0.0 and x > -np.inf and not is_int and ay < np.inf) else r
    r = x + y if (x != x or y != y) else r
    r = 1.0 if (x == 1.0 or y == 0.0 or (x == -1.0 and ay == np.inf)) else r
    return r


@_jit
def pow_f32(x, y):
    """float64 inside, one rounding at the end (as musl/glibc powf): float32 y*log x would lose ~7 bits."""
    return F(pow_f64(np.float64(x), np.float64(y)))


# ==== simple ones ===========================================================================================
@_jit
def sqrt_f32(x):
    return math.sqrt(F(x))


@_jit
def sqrt_f64(x):
    return math.sqrt(np.float64(x))


@_jit
def rsqrt_f32(x):
    return _F1 / math.sqrt(F(x))


@_jit
def rsqrt_f64(x):
    return 1.0 / math.sqrt(np.float64(x))


@_jit
def abs_f32(x):
    return abs(F(x))


@_jit
def abs_f64(x):
    return abs(np.float64(x))


@_jit
def sign_f32(x):
    x = F(x)
    y = _F1 if x > _F0 else (-_F1 if x < _F0 else _F0)
    return x if x != x else y


@_jit
def sign_f64(x):
    x = np.float64(x)
    y = 1.0 if x > 0.0 else (-1.0 if x < 0.0 else 0.0)
    return x if x != x else y


@_jit
def max_f32(a, b):
    """np.maximum: NaN if either is NaN."""
    a = F(a)
    b = F(b)
    return a if (a > b or a != a) else b


@_jit
def min_f32(a, b):
    a = F(a)
    b = F(b)
    return a if (a < b or a != a) else b


@_jit
def max_f64(a, b):
    a = np.float64(a)
    b = np.float64(b)
    return a if (a > b or a != a) else b


@_jit
def min_f64(a, b):
    a = np.float64(a)
    b = np.float64(b)
    return a if (a < b or a != a) else b


@_jit
def isfinite_f32(x):
    return abs(F(x)) < _FINF


@_jit
def isfinite_f64(x):
    return abs(np.float64(x)) < np.inf


@_jit
def atan2_f32(y, x):
    """float64 inside, one rounding at the end: within an ulp of atan2f (a libm call: it does not vectorise)."""
    return F(math.atan2(np.float64(y), np.float64(x)))


@_jit
def atan2_f64(y, x):
    return math.atan2(np.float64(y), np.float64(x))


@_jit
def nextafter_f32(x, y):
    return F(np.nextafter(F(x), F(y)))


@_jit
def nextafter_f64(x, y):
    return np.nextafter(np.float64(x), np.float64(y))


# ---- rounding, hypot, fmod, copysign, erfc (LLVM intrinsics or libm; -0.0 and infinities as C) ------------
@_jit
def floor_f32(x):
    return np.floor(F(x))


@_jit
def floor_f64(x):
    return np.floor(np.float64(x))


@_jit
def ceil_f32(x):
    return np.ceil(F(x))


@_jit
def ceil_f64(x):
    return np.ceil(np.float64(x))


@_jit
def trunc_f32(x):
    return np.trunc(F(x))


@_jit
def trunc_f64(x):
    return np.trunc(np.float64(x))


@_jit
def round_f32(x):
    """Half to even (torch.round, np.rint)."""
    return np.rint(F(x))


@_jit
def round_f64(x):
    return np.rint(np.float64(x))


@_jit
def hypot_f32(x, y):
    return F(math.hypot(np.float64(x), np.float64(y)))


@_jit
def hypot_f64(x, y):
    return math.hypot(np.float64(x), np.float64(y))


@_jit
def fmod_f32(x, y):
    return np.fmod(F(x), F(y))


@_jit
def fmod_f64(x, y):
    return np.fmod(np.float64(x), np.float64(y))


@_jit
def copysign_f32(x, y):
    return np.copysign(F(x), F(y))


@_jit
def copysign_f64(x, y):
    return np.copysign(np.float64(x), np.float64(y))


@_jit
def erfc_f32(x):
    """float64 inside (libm's erfc), one rounding: erfc's tail needs the relative accuracy 1 - erf loses."""
    return F(math.erfc(np.float64(x)))


@_jit
def erfc_f64(x):
    return math.erfc(np.float64(x))


@_jit
def lgamma_f32(x):
    return F(lgamma_f64(np.float64(x)))


@_jit
def lgamma_f64(x):
    """libm's lgamma (+inf at the poles and at +-inf, as torch)."""
    x = np.float64(x)
    return np.inf if x == -np.inf else math.lgamma(x)


# ---- inverse trigonometric and hyperbolic functions (libm: nan outside the domain, inf on overflow) -----
@_jit
def asin_f32(x):
    """float64 inside (libm's asin), one rounding."""
    return F(math.asin(np.float64(x)))


@_jit
def asin_f64(x):
    return math.asin(np.float64(x))


@_jit
def acos_f32(x):
    """float64 inside (libm's acos), one rounding."""
    return F(math.acos(np.float64(x)))


@_jit
def acos_f64(x):
    return math.acos(np.float64(x))


@_jit
def atan_f32(x):
    """float64 inside (libm's atan), one rounding."""
    return F(math.atan(np.float64(x)))


@_jit
def atan_f64(x):
    return math.atan(np.float64(x))


@_jit
def sinh_f32(x):
    """float64 inside (libm's sinh), one rounding."""
    return F(math.sinh(np.float64(x)))


@_jit
def sinh_f64(x):
    return math.sinh(np.float64(x))


@_jit
def cosh_f32(x):
    """float64 inside (libm's cosh), one rounding."""
    return F(math.cosh(np.float64(x)))


@_jit
def cosh_f64(x):
    return math.cosh(np.float64(x))


@_jit
def asinh_f32(x):
    """float64 inside (libm's asinh), one rounding."""
    return F(math.asinh(np.float64(x)))


@_jit
def asinh_f64(x):
    return math.asinh(np.float64(x))


@_jit
def acosh_f32(x):
    """float64 inside (libm's acosh), one rounding."""
    return F(math.acosh(np.float64(x)))


@_jit
def acosh_f64(x):
    return math.acosh(np.float64(x))


@_jit
def atanh_f32(x):
    """float64 inside (libm's atanh), one rounding."""
    return F(math.atanh(np.float64(x)))


@_jit
def atanh_f64(x):
    return math.atanh(np.float64(x))


# the functions this module provides: the math table's rows whose CPU forms live here
_NAMES = tuple(n for n, row in MATH.items() if row.f32.startswith("mathlib."))
_SUFFIX = {"float32": "f32", "float64": "f64"}
FUNCS = {(n, d): globals()[f"{n}_{s}"] for n in _NAMES for d, s in _SUFFIX.items()}


def scalar_namespace(dtype_name: str) -> dict:
    """Names used in OpDef scalar bodies (``exp``, ``max``, ...) -> njit functions of that precision.  Every
    function converts its arguments to the precision first, so ``max(x, 0)`` stays float32 in a float32 loop."""
    try:
        suffix = _SUFFIX[dtype_name]
    except KeyError:
        raise KeyError(f"mathlib has float32 and float64 functions, not {dtype_name}") from None
    return {n: globals()[f"{n}_{suffix}"] for n in _NAMES}


__all__ = ["FUNCS", "FASTMATH", "scalar_namespace", "f32_as_i32", "i32_as_f32", "f64_as_i64", "i64_as_f64",
           "fma_f32", "fma_f64"] + [f"{n}_{s}" for n in _NAMES for s in ("f32", "f64")]
