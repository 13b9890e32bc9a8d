"""Branch-free, vectorisable scalar math for the generated loops: exp, log, log1p, expm1, tanh, sigmoid, erf,
sin, cos, tan, pow (+ sqrt, rsqrt, abs, sign, max, min, isfinite, rounding, libm's inverse trigonometric and
hyperbolic functions), one function per precision, written once and used two ways.  This module is their one
entry (``DEFS``, ``NAMES``, ``expand``); the functions live by family: ``mathlib_exp_log.py`` (exp, expm1, tanh,
sigmoid, log, log1p, erf, pow), ``mathlib_trig.py`` (sin, cos, tan), ``mathlib_ieee.py`` (sqrt, abs, sign, max,
min, isfinite, the roundings, fmod, copysign) and ``mathlib_libm.py`` (the C library's: atan2, hypot, erfc, lgamma,
the inverse trigonometric and hyperbolic functions...), each written in ``mathlib_vocabulary.py``'s names.

**As IR builders** (no Numba): called on kernel IR values (``kernel_ir.Val``), a function builds
its computation in the IR (``expand``: how the LLVM renderer, ``ir_loops.py``, and the reference interpreter,
``kernel_interp.py``, turn a math call into arithmetic).  Their vocabulary (``select``, ``f32``, ``i32``,
``f32_as_i32``, ``fma_f32``, ``sqrt``, ``lookup``, ``c_atan2``, ...) is kernel IR there (``mathlib_vocabulary.py``).
**As Numba functions** (``mathlib_numba.py``): the same code objects, compiled by Numba with that vocabulary
bound to Numba's (``np.float32``, the bitcast intrinsics, ``math.atan2``...), for the kernels Numba still
compiles (``numba_render.py``) and for the accuracy tests.  Nothing reads their source.

Why: llvmlite has no SVML, so a loop calling ``math.exp`` / ``math.tanh`` stays scalar.  Everything here is
straight-line float and integer arithmetic: range reduction with integer bit tricks (the ``*_as_*`` bitcasts),
polynomials evaluated with Horner (the loops over coefficient tables run while building, unrolled), and
``select`` instead of branches, so LLVM's loop vectoriser turns a loop that calls these into SIMD code.

Accuracy (checked by tests/test_mathlib.py against NumPy over the whole range, specials included): float32
within 4 ulp, float64 within 1e-14 relative.  Every float32 function computes in float32 except ``pow_f32``,
which (like musl's and glibc's powf) evaluates ``exp(y*log x)`` in float64 and rounds once: ``y*log x`` needs
about 30 more bits than float32 carries.

Polynomial coefficients are minimax: computed by the linear Remez exchange algorithm in 50-digit mpmath
(weighted by the error measure named at each table: relative error of the function, or absolute error where the
result is later added to something larger), then rounded to the working precision.  The structure of each
algorithm is the classic one (Cody & Waite range reduction; fdlibm's ``log`` in ``s = f/(2+f)``; musl's
``log1p`` rounding correction; Payne & Hanek reduction for sin/cos), written here from the maths, not copied.

Compilation flags.  Their arithmetic carries ``contract`` only (FMA contraction is allowed, nothing else), never
the kernels' ``reassoc``, which rewrites ``(p * s1) * s2`` scalings and Cody-Waite splits and breaks exactness
(measured: 4.9e6 ulp in exp): built under ``kernel_ir.fastmath(MATHLIB_FASTMATH)`` here, compiled as separate
``fastmath={"contract"}`` functions (which LLVM's inliner inlines) by Numba.  No ``nnan``/``ninf``/``nsz``
anywhere, so NaN, inf and -0.0 are handled exactly as written.
"""
from __future__ import annotations

from . import kernel_ir as ki, mathlib_exp_log, mathlib_ieee, mathlib_libm, mathlib_trig
from .math_table import MATH

FASTMATH = set(ki.MATHLIB_FASTMATH)
FAMILIES = (mathlib_exp_log, mathlib_trig, mathlib_ieee, mathlib_libm)   # the modules holding the functions
DEFS: dict = {name: fn for family in FAMILIES for name, fn in family.DEFS.items()}   # name -> function, helpers too

# the functions mathlib provides: the math table's rows whose CPU forms are mathlib's
NAMES = tuple(n for n, row in MATH.items() if row.f32.startswith("mathlib."))


def expand(name: str, precision: str, args):
    """Math call ``name`` at ``precision`` (f32 | f64) on IR values ``args``: its computation as kernel IR, built
    with mathlib's fast-math flags."""
    fn = DEFS.get(f"{name}_{precision}")
    if fn is None:
        raise KeyError(f"mathlib has no {name}_{precision}")
    with ki.fastmath(ki.MATHLIB_FASTMATH):
        return fn(*args)


__all__ = ["DEFS", "NAMES", "FASTMATH", "FAMILIES", "expand"]
