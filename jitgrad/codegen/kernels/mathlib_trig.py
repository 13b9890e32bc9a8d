"""mathlib's trigonometric family: sin, cos and tan, float32 and float64.  The argument is reduced to
``|r| <= pi/4`` and a quadrant by Payne & Hanek's method (the bits of 2/pi, computed here exactly in integer
arithmetic, multiplied by the significand in 24-bit limbs), exact for every finite input; sin and cos of ``r`` are
minimax polynomials, tan their quotient.
"""
from __future__ import annotations

import numpy as np

from .mathlib_vocabulary import (recorder, select, f32, f64, i32, i64, f32_as_i32, i32_as_f32, f64_as_i64, i64_as_f64,
                                 fma_f32, lookup)

DEFS: dict = {}         # name -> function, every function below (mathlib merges the families')
_def = recorder(DEFS)

# ---- constants ---------------------------------------------------------------------------------------------
F = np.float32
_F0, _FH, _F1 = F(0.0), F(0.5), F(1.0)
_FINF = F(np.inf)
_D_MANT = 0x000FFFFFFFFFFFFF
# sin r = r + r^3 (s3 + s5 r^2 + s7 r^4 + s9 r^6), cos r = 1 - r^2/2 + r^4 (c4 + ... + c10 r^6), |r| <= pi/4
# (relative error 5.2e-12 and 1.2e-13).
_F_S3, _F_S5, _F_S7, _F_S9 = F(-0.16666667), F(0.008333329), F(-0.00019839304), F(2.7180465e-06)
_F_C4, _F_C6, _F_C8, _F_C10 = F(0.041666668), F(-0.0013888883), F(2.4799452e-05), F(-2.7205047e-07)
# sin/cos on |r| <= pi/4: relative error 2.1e-21 and 8.5e-22.
_D_S = (-0.16666666666666666, 0.008333333333333323, -0.0001984126984125465, 2.7557319213985085e-06,
        -2.5052104860762986e-08, 1.6058360438927607e-10, -7.578403243032848e-13)
_D_C = (0.041666666666666664, -0.001388888888888889, 2.4801587301586597e-05, -2.7557319222839313e-07,
        2.087675625099799e-09, -1.1470527182360604e-11, 4.7494040359338726e-14)


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
# float32's window words (``_pio2_table(_PH32_EXLO, 254, 150, 4)``'s) are computed, not loaded (``_ph32_word``):
# from 2/pi's bits 1..224 in 32-bit chunks, D1 the most significant
_PH32_D1, _PH32_D2, _PH32_D3, _PH32_D4, _PH32_D5, _PH32_D6, _PH32_D7 = (
    (_two_over_pi_bits(224) >> (224 - 32 * k)) & 0xFFFFFFFF for k in range(1, 8))
_PH64_EXLO = 993                      # below 2^-30 for float64
_PH64 = _pio2_table(_PH64_EXLO, 2046, 1075, 8)
_M24 = 0xFFFFFF
_F_PIO2_HI = F(1.5707963267948966 / 2.0 ** 58)       # pi/2 2^-58 as float-float
_F_PIO2_LO = F(1.5707963267948966 / 2.0 ** 58 - float(_F_PIO2_HI))


# ==== float32 =============================================================================================
@_def
def _ph32_word(e):
    """floor(2/pi 2^e) mod 2^24 for e in [-21, 198]: word i of the window for exponent ex (e = ex - 128 + 24 i),
    from the chunks of 2/pi's bits by selects and shifts.  A table loaded at a computed index is a gather, which
    LLVM's cost model does not vectorise on this CPU: with one, loops computing sin or cos ran scalar (B11's
    cutoff, ~120 instructions an element)."""
    m = (e + 31) >> 5                                   # the chunk holding bit e; the bits end r places into it
    r = 32 * m - e
    hi = select(m == 1, _PH32_D1, select(m == 2, _PH32_D2, select(m == 3, _PH32_D3, select(
        m == 4, _PH32_D4, select(m == 5, _PH32_D5, select(m == 6, _PH32_D6, select(m == 7, _PH32_D7, 0)))))))
    lo = select(m == 2, _PH32_D1, select(m == 3, _PH32_D2, select(m == 4, _PH32_D3, select(
        m == 5, _PH32_D4, select(m == 6, _PH32_D5, select(m == 7, _PH32_D6, 0))))))
    return ((lo << (32 - r)) | (hi >> r)) & _M24


@_def
def _rem_pio2_f32(a):
    """a = |x| finite -> (r, q): a = q pi/2 + r (mod 2 pi), |r| <= pi/4, by Payne-Hanek in int64 arithmetic:
    exact for every float32, including 3.4e38.  Below 2^-20, r = a."""
    ia = i64(f32_as_i32(a))
    ex = ia >> 23
    ex = select(ex > _PH32_EXLO, ex, _PH32_EXLO)
    ex = select(ex < 254, ex, 254)
    e = ex - 128                                          # the window's words for ex: _ph32_word(e + 24 i)
    m = (ia & 0x7FFFFF) | 0x800000
    t = _ph32_word(e + 72) * m                            # column sums of m * window, then carries
    t = _ph32_word(e + 48) * m + (t >> 24)
    l1 = t & _M24
    t = _ph32_word(e + 24) * m + (t >> 24)
    l2 = t & _M24
    t = _ph32_word(e) * m + (t >> 24)
    l3 = t & _M24
    top = (l3 << 36) | (l2 << 12) | (l1 >> 12)            # x 2/pi mod 4 = top / 2^58
    top = top + (1 << 57)                                 # round to the nearest quadrant
    q = (top >> 58) & 3
    frac = (top & ((1 << 58) - 1)) - (1 << 57)
    fh = f32(frac)                                          # frac = fh + fl exactly
    fl = f32(frac - i64(fh))
    p = fh * _F_PIO2_HI                                   # r + rl = frac pi/2 2^-58 in float-float
    e = fma_f32(fh, _F_PIO2_HI, -p) + (fh * _F_PIO2_LO + fl * _F_PIO2_HI)
    r = p + e
    rl = e - (r - p)
    tiny = a < f32(2.0 ** -20)
    return (select(tiny, a, r)), (select(tiny, _F0, rl)), (select(tiny, 0, q))


@_def
def _sincos_poly_f32(r, rl):
    """sin and cos of r + rl (rl a correction below half an ulp of r)."""
    z = r * r
    s = r + (rl + (r * z) * (_F_S3 + z * (_F_S5 + z * (_F_S7 + z * _F_S9))))
    c = (_F1 - _FH * z) + ((z * z) * (_F_C4 + z * (_F_C6 + z * (_F_C8 + z * _F_C10))) - r * rl)
    return s, c


@_def
def sin_f32(x):
    x = f32(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = select(q & 1, c, s)
    y = select(q & 2, -y, y)
    y = i32_as_f32(i32(f32_as_i32(y) ^ (f32_as_i32(x) & i32(-2147483648))))   # sin is odd
    return select(abs(x) < _FINF, y, x - x)


@_def
def cos_f32(x):
    x = f32(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = select(q & 1, s, c)
    y = select((q + 1) & 2, -y, y)
    return select(abs(x) < _FINF, y, x - x)


@_def
def tan_f32(x):
    x = f32(x)
    r, rl, q = _rem_pio2_f32(abs(x))
    s, c = _sincos_poly_f32(r, rl)
    y = select(q & 1, -c / s, s / c)
    y = i32_as_f32(i32(f32_as_i32(y) ^ (f32_as_i32(x) & i32(-2147483648))))
    return select(abs(x) < _FINF, y, x - x)


# ==== float64 =============================================================================================
@_def
def _rem_pio2_f64(a):
    """Payne-Hanek for float64 (as _rem_pio2_f32, with the significand in three 24-bit limbs and a 192-bit
    window of 2/pi): exact for every finite double."""
    ia = f64_as_i64(a)
    ex = ia >> 52
    ex = select(ex > _PH64_EXLO, ex, _PH64_EXLO)
    ex = select(ex < 2046, ex, 2046)
    b = (ex - _PH64_EXLO) * 8
    m = (ia & _D_MANT) | (1 << 52)
    m0 = m & _M24
    m1 = (m >> 24) & _M24
    m2 = m >> 48
    w0, w1, w2, w3 = lookup(_PH64, b), lookup(_PH64, b + 1), lookup(_PH64, b + 2), lookup(_PH64, b + 3)
    w4, w5, w6, w7 = lookup(_PH64, b + 4), lookup(_PH64, b + 5), lookup(_PH64, b + 6), lookup(_PH64, b + 7)
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
    f = f64(frac) + f64(low) * 2.0 ** -60
    r = f * (1.5707963267948966 / 2.0 ** 58)
    tiny = a < 2.0 ** -30
    return (select(tiny, a, r)), (select(tiny, 0, q))


@_def
def _sincos_poly_f64(r):
    z = r * r
    s = _D_S[6]
    for i in range(5, -1, -1):
        s = s * z + _D_S[i]
    c = _D_C[6]
    for i in range(5, -1, -1):
        c = c * z + _D_C[i]
    return r + (r * z) * s, (1.0 - 0.5 * z) + (z * z) * c


@_def
def sin_f64(x):
    x = f64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = select(q & 1, c, s)
    y = select(q & 2, -y, y)
    y = i64_as_f64(f64_as_i64(y) ^ (f64_as_i64(x) & i64(-9223372036854775808)))
    return select(abs(x) < np.inf, y, x - x)


@_def
def cos_f64(x):
    x = f64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = select(q & 1, s, c)
    y = select((q + 1) & 2, -y, y)
    return select(abs(x) < np.inf, y, x - x)


@_def
def tan_f64(x):
    x = f64(x)
    r, q = _rem_pio2_f64(abs(x))
    s, c = _sincos_poly_f64(r)
    y = select(q & 1, -c / s, s / c)
    y = i64_as_f64(f64_as_i64(y) ^ (f64_as_i64(x) & i64(-9223372036854775808)))
    return select(abs(x) < np.inf, y, x - x)
