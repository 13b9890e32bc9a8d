"""The math names of scalar bodies (``tanh`` -> ``tanh_f32``), expanded inline into CUDA kernel source.

The CPU loops call ``mathlib.py`` (branch-free code LLVM vectorises).  On the GPU ``math.*`` lowers to libdevice,
already the fast and accurate path, so each name becomes a typed ``math.*`` expression.  They are written into
the kernel's text rather than called as device functions because compiling a call to a Numba device function
needs a CUDA driver, and the PTX of every kernel must build on a machine without one (``f.ptx``).  The guards
give the IEEE results (log(0) = -inf, sqrt(-1) = nan, sin(inf) = nan, ...) where Python's ``math`` would raise:
on a GPU they are what libdevice returns anyway, and on Numba's CUDA simulator (kernels run as Python) they keep
NaN/inf flowing as on the device.  ``max``/``min`` propagate NaN like NumPy's ``maximum``/``minimum``.
Nothing here imports Numba.
"""
from __future__ import annotations

import re

# {0}, {1}: the arguments (names or casts of names: repeating them costs nothing); T: the result type
TEMPLATES = {
    "exp": "(T(math.exp({0})) if {0} < 700 else (T(math.inf) if {0} == {0} else T({0})))",
    "expm1": "(T(math.expm1({0})) if {0} < 700 else (T(math.inf) if {0} == {0} else T({0})))",
    "log": "(T(math.log({0})) if {0} > 0 else (T(-math.inf) if {0} == 0 else T(math.nan)))",
    "log1p": "(T(math.log1p({0})) if {0} > -1 else (T(-math.inf) if {0} == -1 else T(math.nan)))",
    "tanh": "T(math.tanh({0}))",
    "erf": "T(math.erf({0}))",
    "sin": "(T(math.sin({0})) if math.isfinite({0}) else T(math.nan))",
    "cos": "(T(math.cos({0})) if math.isfinite({0}) else T(math.nan))",
    "tan": "(T(math.tan({0})) if math.isfinite({0}) else T(math.nan))",
    "sqrt": "(T(math.sqrt({0})) if {0} >= 0 else T(math.nan))",
    "rsqrt": "(T(1) / T(math.sqrt({0})) if {0} >= 0 else T(math.nan))",
    "sigmoid": "((T(1) / (T(1) + (T(math.exp(-{0})) if {0} > -700 else T(math.inf)))) if {0} == {0} else T({0}))",
    "isfinite": "math.isfinite({0})",
    "max": "(T({0}) if ({0} > {1} or {0} != {0}) else T({1}))",
    "min": "(T({0}) if ({0} < {1} or {0} != {0}) else T({1}))",
    "sign": "(T(1) if {0} > 0 else (T(-1) if {0} < 0 else T({0})))",
    "abs": "T(abs({0}))",
    "pow": "(T(math.inf) if ({0} == 0 and {1} < 0) else (T(math.nan) if ({0} < 0 and math.isfinite({1}) and "
           "math.floor({1}) != {1}) else T({0} ** {1})))",
}
_TYPES = {"f32": "float32", "f64": "float64", "i64": "int64"}
_CALL = re.compile(r"\b([a-z0-9]+)_(f32|f64|i64)\(")


def _split_args(text: str):
    args, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur.append(ch)
    args.append("".join(cur).strip())
    return args


def expand(expr: str) -> str:
    """Replace every ``name_f32(args)`` call (as the CPU loop generator names them) by its inline expression."""
    while True:
        m = None
        for m in _CALL.finditer(expr):      # the last call: its arguments hold no further calls
            pass
        if m is None or m.group(1) not in TEMPLATES:
            if m is not None and m.group(1) not in TEMPLATES:
                raise KeyError(f"cuda codegen: no CUDA form for math function {m.group(1)!r}")
            return expr
        start = m.end()
        depth, k = 1, start
        while depth:
            depth += expr[k] == "("
            depth -= expr[k] == ")"
            k += 1
        args = _split_args(expr[start:k - 1])
        body = TEMPLATES[m.group(1)].replace("T(", _TYPES[m.group(2)] + "(")
        expr = expr[:m.start()] + "(" + body.format(*args) + ")" + expr[k:]


__all__ = ["TEMPLATES", "expand"]
