"""Singular samples: the points where autograd systems disagree, for every primitive (an OpInfo-like table).

``SAMPLES`` maps a name to a list of ``Sample``: a program ``fn(m, *xs)`` written against the public API shared
by jitgrad and torch (``m`` is the module: ``jg`` or ``torch``; tensor methods are the same in both) and its
float64 inputs.  Keys of ``OP_SAMPLES`` are OpDef names (``jitgrad.ir.ops.OPS``); ``COMPOSITE_SAMPLES`` covers
public functions written as compositions of primitives (var, std, logsumexp, norm with p != 2...), whose
derivatives at singular points come from the composition, not from one rule.

Inputs are chosen at zeros, ties (max/min/abs/relu/clamp), the bounds of a domain (log at 0, sqrt at 0, pow with a
0 base or exponent), infinities, saturated values (tanh/sigmoid of large arguments), constant rows
(var/std/softmax/norm), empty and size-1 dims.  Each op has few samples, each packing many singular points into
one tensor (rows of a matrix for reductions), so a compiled check builds few graphs.

``EXEMPT`` names the OpDefs with no singular-point behaviour of their own to check, and why;
``tests/test_singular.py`` fails when an OpDef is in neither table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

inf, nan = math.inf, math.nan

# the generated kernels' fastmath flags (codegen/kernels/loops.py FASTMATH: reassoc, arcp, nsz, afn, contract) let LLVM
# rewrite t + (-t) to 0 and (a / b) / b to a * (1 / b) * (1 / b): the reference interpreter keeps torch's inf - inf =
# nan and its overflow points, the Numba backend does not
_BESSEL_TRACED = ("compiled code differentiates bessel_i's decomposition (ir/ops/trig_bessel.py), not torch's "
                  "formula: {what}")
_FASTMATH = ("Numba backend only: the kernels' fastmath flags (reassoc, arcp) let LLVM fold {what}; the reference "
             "interpreter matches torch")


@dataclass
class Sample:
    """``fn(m, *xs)`` on ``inputs`` (NumPy arrays: float inputs are differentiated, integer/bool ones are not).

    ``second_order``: compare Hessian-vector products too (off for ops whose result is not differentiable).
    ``differentiable``: False: no input requires grad (values only).
    ``xfail``: a reason, for a case jitgrad does not match torch yet (reported, never silently passed).
    ``numba_xfail``: a reason, for a case only the Numba backend gets wrong.
    ``traced_xfail``: a reason, for a case only compiled functions (both backends) get wrong.
    """
    fn: Callable
    inputs: list
    label: str = ""
    second_order: bool = True
    differentiable: bool = True
    xfail: str | None = None
    numba_xfail: str | None = None
    traced_xfail: str | None = None
    extra: dict = field(default_factory=dict)


def a(*vals):
    return np.array(vals, dtype=np.float64)


def rows(*rs):
    return np.array(rs, dtype=np.float64)


# every unary elementwise op sees the same general points, plus its own domain bounds
_GENERAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, inf, -inf, 1e-300, -1e-300, 1e300]


def _unary(method, *special):
    pts = _GENERAL + [p for p in special if p not in _GENERAL]
    return [Sample(lambda m, x: getattr(x, method)(), [np.array(pts, dtype=np.float64)], method)]


# a 2-D pair grid for binary ops: every left point against every right point
def _grid(left, right):
    x, y = np.meshgrid(np.array(left, np.float64), np.array(right, np.float64), indexing="ij")
    return [x.reshape(-1), y.reshape(-1)]


_BIN = [0.0, -0.0, 1.0, -2.0, 0.5, inf, -inf, 1e-200, 1e200]
_IGAMMA_A, _IGAMMA_X = _grid([0.5, 1.0, 2.5, 30.0], [0.0, 1e-300, 0.5, 1.0, 2.5, 30.0, 200.0, inf])

def _vjp_with_graph(f):
    """``fn(m, x, g)``: the vjp of ``f`` at ``x`` along ``g``, taken with ``create_graph`` (so the samples check the
    vjp's own first and second derivatives).  Nothing requires grad while the test probes output shapes (under
    no_grad): then ``x * g``, the same shape."""
    def fn(m, x, g):
        if not x.requires_grad:
            return x * g
        return m.autograd.grad(f(x), x, g, create_graph=True)[0]
    return fn


OP_SAMPLES: dict[str, list[Sample]] = {
    # ---- unary elementwise -------------------------------------------------------------------------
    "neg": _unary("neg"),
    "copy": [Sample(lambda m, x: x.clone(), [a(0.0, -0.0, inf, -inf, 1.0)])],
    "exp": _unary("exp", 709.0, 710.0, -745.0, -750.0),
    "log": _unary("log"),
    "log1p": _unary("log1p", -1.0, -1.0 + 1e-16, -1e-300),
    "expm1": _unary("expm1", 709.0, 710.0, -40.0),
    "sqrt": _unary("sqrt"),
    "rsqrt": _unary("rsqrt"),
    "sin": _unary("sin", math.pi),
    "cos": _unary("cos", math.pi / 2),
    "tan": _unary("tan", math.pi / 2),
    "tanh": _unary("tanh", 20.0, -20.0, 400.0, -400.0),
    "sigmoid": _unary("sigmoid", 40.0, -40.0, 800.0, -800.0),
    "relu": _unary("relu") + [Sample(lambda m, x, y: x.relu() * y, [a(nan, 0.0, -1.0, 1.0), a(1.0, inf, inf, inf)],
                                     "nan input, inf cotangent")],
    "abs": _unary("abs") + [Sample(lambda m, x: x.abs(), [a(nan)], "nan",
                                   xfail="torch's sign(nan) is 0 (its kernel computes (0 < x) - (x < 0)), so abs's "
                                         "gradient at nan is 0; jitgrad's sign is NumPy's (nan), gradient nan")],
    "sign": _unary("sign") + [Sample(lambda m, x, y: x.sign() * y, [a(0.0, 1.0, -1.0, 2.0), a(inf, inf, nan, 1.0)],
                                     "inf cotangent")],
    "reciprocal": _unary("reciprocal"),
    "erf": _unary("erf", 6.0, -6.0, 30.0, -30.0),
    "isfinite": [Sample(lambda m, x: m.isfinite(x), [a(0.0, inf, -inf, nan, 1.0)], second_order=False)],
    "logical_not": [Sample(lambda m, x: m.logical_not(x), [a(0.0, -0.0, inf, nan, 1.0)], second_order=False)],
    "cast": [Sample(lambda m, x: x.to(m.float32).to(m.float64) * x, [a(0.0, -0.0, 1e300, -1e300, 1e-300, inf, 1.0)])],
    # ---- binary elementwise ------------------------------------------------------------------------
    "add": [Sample(lambda m, x, y: x + y, _grid(_BIN, _BIN))],
    "sub": [Sample(lambda m, x, y: x - y, _grid(_BIN, _BIN))],
    "mul": [Sample(lambda m, x, y: x * y, _grid(_BIN, _BIN))],
    "div": [Sample(lambda m, x, y: x / y, _grid(_BIN, _BIN),
                   numba_xfail=_FASTMATH.format(what="-g * ((x / y) / y) into -g * x * (1 / y) ** 2, so the second "
                                                     "order at y = 1e-200 overflows to inf where torch gets inf * 0 = nan")),
            Sample(lambda m, x: 1.0 / x, [a(0.0, -0.0, inf, -inf, 1e-200, 2.0)], "scalar / x")],
    "pow": [Sample(lambda m, x, y: x ** y, _grid([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, inf, -inf],
                                                  [0.0, -0.0, 1.0, 2.0, 3.0, 0.5, 1.5, -1.0, -2.0, -0.5, inf, -inf])),
            Sample(lambda m, x: x ** 2.0, [a(0.0, -0.0, 1.0, -3.0, inf, -inf)], "x ** 2"),
            Sample(lambda m, x: x ** 0.5, [a(0.0, 1.0, -3.0, inf)], "x ** 0.5"),
            Sample(lambda m, x: x ** -0.5, [a(0.0, 1.0, -3.0, inf)], "x ** -0.5"),
            *[Sample((lambda e: lambda m, x: x ** e)(e), [a(-0.0)], f"x ** {e} at -0.0",
                     xfail="torch computes a tensor to the power of the number 0.5 / -0.5 as sqrt / rsqrt, which keep "
                           "the sign of -0.0 (sqrt(-0.) = -0., rsqrt(-0.) = -inf); jitgrad's pow is C99 pow "
                           "(pow(-0., 0.5) = +0., pow(-0., -0.5) = +inf), so the value or gradient at -0.0 has the "
                           "other sign of inf") for e in (0.5, -0.5)],
            Sample(lambda m, x: x ** 0.0, [a(0.0, -0.0, 1.0, -3.0, inf)], "x ** 0"),
            Sample(lambda m, x: x ** -1.0, [a(0.0, -0.0, 1.0, -3.0, inf)], "x ** -1"),
            Sample(lambda m, x: 2.0 ** x, [a(0.0, -0.0, 1.0, -3.0, inf, -inf, 1100.0)], "2 ** x"),
            Sample(lambda m, x: 0.0 ** x, [a(0.0, -0.0, 1.0, -3.0, 0.5, inf)], "0 ** x")],
    "maximum": [Sample(lambda m, x, y: m.maximum(x, y), _grid([0.0, -0.0, 1.0, inf, -inf, nan], [0.0, -0.0, 1.0, inf, -inf, nan]))],
    "minimum": [Sample(lambda m, x, y: m.minimum(x, y), _grid([0.0, -0.0, 1.0, inf, -inf, nan], [0.0, -0.0, 1.0, inf, -inf, nan]))],
    "mod": [Sample(lambda m, x, y: m.remainder(x, y), _grid([0.0, 1.0, -1.0, 3.5, -3.5], [0.0, 1.0, -1.0, 2.0, -2.0]))],
    "floordiv": [Sample(lambda m, x, y: m.floor_divide(x, y), _grid([0.0, 1.0, -1.0, 3.5, inf], [0.0, 1.0, -2.0, inf]),
                        "values only: torch raises 'derivative for aten::floor_divide is not implemented' in backward",
                        differentiable=False)],
    "where": [Sample(lambda m, c, x, y: m.where(c, x, y),
                     [np.array([True, False, True, False, True]), a(0.0, inf, nan, 1.0, -inf), a(inf, 0.0, 1.0, nan, 2.0)])],
    "clamp": [Sample(lambda m, x: x.clamp(0.0, 1.0), [a(-1.0, 0.0, -0.0, 0.5, 1.0, 2.0, inf, -inf)], "clamp(0, 1)"),
              Sample(lambda m, x: x.clamp(min=0.0), [a(-1.0, 0.0, -0.0, 0.5, inf, -inf)], "clamp(min=0)"),
              Sample(lambda m, x: x.clamp(max=0.0), [a(-1.0, 0.0, -0.0, 0.5, inf, -inf)], "clamp(max=0)"),
              Sample(lambda m, x: x.clamp(1.0, 0.0), [a(-1.0, 0.0, 0.5, 1.0, 2.0)], "clamp(min > max)")],
    **{name: [Sample((lambda op: lambda m, x, y: getattr(m, op)(x, y))(name),
                     _grid([0.0, -0.0, inf, -inf, nan], [0.0, -0.0, inf, -inf, nan]), second_order=False)]
       for name in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or")},
    # ---- reductions ---------------------------------------------------------------------------------
    "sum": [Sample(lambda m, x: x.sum(1), [rows([0.0, 0.0, 0.0], [inf, -inf, 1.0], [inf, 1.0, 2.0], [1.0, 2.0, 3.0])]),
            Sample(lambda m, x: x.sum(1), [np.zeros((3, 0))], "empty dim"),
            Sample(lambda m, x: x.sum(), [np.zeros((0,))], "empty")],
    "amax": [Sample(lambda m, x: x.amax(1), [rows([1.0, 1.0, 0.0], [2.0, 2.0, 2.0], [inf, inf, 1.0], [-inf, -inf, -inf],
                                                  [0.0, -0.0, -1.0], [3.0, 1.0, 2.0])]),
             Sample(lambda m, x: x.amax(), [rows([1.0, 3.0], [3.0, 3.0])], "all"),
             Sample(lambda m, x: x.amax(1), [rows([5.0], [-inf])], "size-1 dim")],
    "amin": [Sample(lambda m, x: x.amin(1), [rows([1.0, 1.0, 2.0], [2.0, 2.0, 2.0], [-inf, -inf, 1.0], [inf, inf, inf],
                                                  [0.0, -0.0, 1.0], [3.0, 1.0, 2.0])]),
             Sample(lambda m, x: x.amin(), [rows([1.0, 0.0], [0.0, 3.0])], "all")],
    "prod": [Sample(lambda m, x: x.prod(1), [rows([2.0, 3.0, 4.0], [0.0, 3.0, 4.0], [2.0, 0.0, 4.0], [2.0, 3.0, 0.0],
                                                  [0.0, 0.0, 4.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])],
                    "zeros in rows"),
             Sample(lambda m, x: x.prod(1), [rows([2.0, 3.0, 4.0], [-1.0, 0.5, 4.0], [1.0, 1.0, 1.0])], "no zeros"),
             Sample(lambda m, x: x.prod(1), [rows([2.0, inf, 4.0], [-1.0, 0.5, 4.0], [inf, inf, 1.0])], "inf, no zeros"),
             Sample(lambda m, x: x.prod(1), [rows([2.0, inf, 4.0], [0.0, 0.5, 4.0])], "inf beside a zero row",
                    xfail="second order only: torch differentiates its cumprod-based formula (cumprod_backward's "
                          "O(n^2) loop) and gets inf/nan where jitgrad's product-of-others gets nan/finite at the "
                          "inf element; values and gradients match"),
             Sample(lambda m, x: x.prod(), [a(2.0, 0.0, 3.0, 5.0)], "all, one zero"),
             Sample(lambda m, x: x.prod(), [a(2.0, 0.0, 3.0, 0.0)], "all, two zeros"),
             Sample(lambda m, x: x.prod(), [a(2.0, -3.0, 0.5)], "all, no zero"),
             Sample(lambda m, x: x.prod(1), [rows([0.0], [inf], [2.0])], "size-1 dim"),
             Sample(lambda m, x: x.prod(1), [np.zeros((2, 0))], "empty dim"),
             Sample(lambda m, x: x.prod(0), [np.array(0.0)], "0-d")],
    "normp": [Sample(lambda m, x: x.norm(p=3, dim=1), [rows([0.0, 0.0], [-0.0, 2.0], [3.0, -4.0])], "p=3, zero rows")],
    "norm2": [Sample(lambda m, x: x.norm(dim=1), [rows([0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [inf, 1.0, 0.0], [1e-200, 0.0, 0.0],
                                                       [1e200, 1e200, 0.0], [-0.0, 0.0, -0.0])]),
              Sample(lambda m, x: x.norm(), [a(0.0, 0.0)], "all, zero vector"),
              Sample(lambda m, x: x.norm(dim=1), [np.zeros((2, 0))], "empty dim")],
    "argmax": [Sample(lambda m, x: x.argmax(1), [rows([1.0, 1.0, 0.0], [-inf, -inf, -inf], [0.0, inf, inf], [-0.0, 0.0, -1.0])],
                      second_order=False)],
    "argmin": [Sample(lambda m, x: x.argmin(1), [rows([1.0, 1.0, 2.0], [inf, inf, inf], [0.0, -inf, -inf], [0.0, -0.0, 1.0])],
                      second_order=False)],
    # ---- shape, index, linalg ---------------------------------------------------------------------
    "reshape": [Sample(lambda m, x: x.reshape(3, 0), [np.zeros((0, 3))], "empty"),
                Sample(lambda m, x: x.reshape(2, 1) * x.reshape(1, 2), [a(inf, 0.0)], "inf * 0")],
    "permute": [Sample(lambda m, x: x.permute(1, 0, 2), [np.zeros((2, 0, 1))], "empty"),
                Sample(lambda m, x: x.permute(1, 0) * x, [rows([inf, 0.0], [0.0, 1.0])], "inf * 0")],
    "broadcast_to": [Sample(lambda m, x: x.expand(3, 2) * x, [rows([inf, 0.0])], "inf * 0"),
                     Sample(lambda m, x: x.expand(0, 2), [rows([1.0, 2.0])], "to empty")],
    "cat": [Sample(lambda m, x, y: m.cat([x, y], 1) * m.cat([y, x], 1), [np.zeros((2, 0)), rows([inf, 0.0], [1.0, -0.0])])],
    "getitem": [Sample(lambda m, x: x[m.tensor([0, 0, 2])] * x[m.tensor([2, 2, 0])], [a(inf, 1.0, 0.0)], "repeated index"),
                Sample(lambda m, x: x[:, 0:0], [rows([1.0, 2.0])], "empty slice"),
                Sample(lambda m, x: x[1] * x, [rows([0.0, inf], [inf, 0.0])], "int index")],
    "index_put": [Sample(lambda m, x, v: _setitem(x, (slice(0, 2),), v) * x, [a(inf, 0.0, 2.0), a(0.0, inf)], "slice <- v"),
                  Sample(lambda m, x, v: _setitem(x, (m.tensor([0, 2]),), v) * v.sum(), [a(inf, 0.0, 2.0), a(0.0, inf)],
                         "index <- v")],
    "matmul": [Sample(lambda m, x, y: x @ y, [rows([inf, 0.0], [1.0, 2.0]), rows([0.0, 1.0], [inf, 0.0])], "inf * 0"),
               Sample(lambda m, x, y: x @ y, [np.zeros((2, 0)), np.zeros((0, 3))], "empty inner dim"),
               Sample(lambda m, x, y: x @ y, [a(0.0, inf), a(inf, 0.0)], "1-D dot")],
    "flip": [Sample(lambda m, x: x.flip(1) * x, [rows([inf, 0.0, 1.0], [nan, -0.0, inf])], "inf * 0"),
             Sample(lambda m, x: x.flip(0, 1), [np.zeros((0, 2))], "empty"),
             Sample(lambda m, x: x.flip(0) * x, [rows([inf, 0.0])], "size-1 dim")],
    # ---- scans ----------------------------------------------------------------------------------------
    "cumsum": [Sample(lambda m, x: x.cumsum(1), [rows([inf, -inf, 1.0], [0.0, -0.0, 0.0], [1e308, 1e308, -inf],
                                                      [nan, 1.0, 2.0])]),
               Sample(lambda m, x: x.cumsum(1), [np.zeros((2, 0))], "empty dim"),
               Sample(lambda m, x: x.cumsum(0), [rows([inf, 2.0])], "size-1 dim"),
               Sample(lambda m, x: x.cumsum(0), [np.array(inf)], "0-d")],
    "cumprod": [Sample(lambda m, x: x.cumprod(1), [rows([2.0, 3.0, 4.0, 5.0], [2.0, 0.0, 3.0, 4.0], [0.0, 2.0, 3.0, 4.0],
                                                        [2.0, 3.0, 4.0, 0.0], [2.0, 0.0, 0.0, 3.0], [0.0, 3.0, 0.0, 4.0],
                                                        [0.0, 0.0, 0.0, 0.0], [-1.0, 0.5, -0.0, 2.0])], "zeros in rows"),
                Sample(lambda m, x: x.cumprod(1), [rows([2.0, 0.0, 3.0, 4.0], [0.0, 2.0, 0.0, 4.0], [2.0, 0.0, 0.0, 0.0])],
                       "zeros, first order only (torch's O(n) masked formula, not its create_graph one)",
                       second_order=False),
                Sample(lambda m, x: x.cumprod(1), [rows([2.0, 3.0, 0.5], [-1.0, 0.5, 4.0])], "no zeros"),
                Sample(lambda m, x: x.cumprod(1), [rows([2.0, inf, 4.0], [inf, 0.5, -inf])], "inf, no zeros"),
                Sample(lambda m, x: x.cumprod(1), [rows([2.0, 0.0, inf], [inf, 0.0, 3.0], [0.0, inf, 2.0])], "inf and a zero",
                       xfail="gradient only, at an inf in a row holding a zero: torch's create_graph formula "
                             "(cumprod_backward's O(n^2) sums of products of the others) gets g_0 at [inf, 0, 3]'s inf and "
                             "0 after the zero of [2, 0, inf] and [0, inf, 2]; jitgrad's division-based formula gets "
                             "inf / inf = nan there (values and the other gradient entries match)"),
                Sample(lambda m, x: x.cumprod(1), [rows([0.0], [inf], [2.0])], "size-1 dim"),
                Sample(lambda m, x: x.cumprod(1), [np.zeros((2, 0))], "empty dim"),
                Sample(lambda m, x: x.cumprod(0), [np.array(0.0)], "0-d")],
    # ---- sorting and counting (no gradient of their own: sort's values are a gather) ------------------------
    "argsort": [Sample(lambda m, x: (x.argsort(dim=1, stable=True), x.argsort(dim=1, descending=True, stable=True),
                                     x.sort(dim=1, descending=True, stable=True)[0], x.argsort(dim=0, stable=True)),
                       [rows([1.0, nan, inf, 0.0, -0.0, nan, inf, -inf, 1.0, -inf],
                             [0.0, -0.0, 0.0, -0.0, 2.0, 2.0, 2.0, nan, -inf, inf],
                             [inf, nan, -inf, 1.0, 1.0, 1.0, 1.0, 0.0, nan, inf])], "ties, nan, inf, -0.0",
                       second_order=False),
                Sample(lambda m, x: (x.argsort(dim=1, stable=True), x.sort(dim=1, stable=True)[0]), [np.zeros((2, 0))],
                       "empty dim", second_order=False),
                Sample(lambda m, x: (x.argsort(dim=1, descending=True, stable=True), x.sort(dim=1)[0]), [rows([nan], [inf])],
                       "size-1 dim", second_order=False)],
    "histc": [Sample(lambda m, x: m.histc(x, bins=10, min=0, max=1),
                     [np.concatenate([np.linspace(0.0, 1.0, 11), a(0.3, 0.6, 0.7, 1.0 / 3, 2.0 / 3, -0.0, -1e-300,
                                                                   1.0 + 1e-16, nan, inf, -inf, 1.5)])],
                     "bin edges, nan, inf, outside", differentiable=False),
              Sample(lambda m, x: m.histc(x, bins=3), [a(0.1, 0.2, 0.3, 0.7, 0.5, -0.0)], "the data's range",
                     differentiable=False),
              Sample(lambda m, x: m.histc(x, bins=4), [a(2.0, 2.0)], "constant data (range widened by 1)",
                     differentiable=False),
              Sample(lambda m, x: m.histc(x, bins=3), [np.zeros(0)], "empty", differentiable=False)],
    "searchsorted": [Sample(lambda m, s, x: (m.searchsorted(s, x), m.searchsorted(s, x, right=True)),
                            [a(-inf, -1.0, 0.0, 0.0, 2.0, inf, nan), a(0.0, -0.0, -inf, inf, nan, 2.0, -5.0)],
                            "ties, -0.0, inf, nan", differentiable=False),
                     Sample(lambda m, s, x: m.searchsorted(s, x), [rows([0.0, 1.0], [nan, nan]), rows([1.0], [nan])],
                            "batched rows", differentiable=False)],
    "isin": [Sample(lambda m, x, t: (m.isin(x, t), m.isin(x, t, invert=True)),
                    [a(0.0, -0.0, nan, inf, -inf, 1.0), a(0.0, nan, inf)], "-0.0 == 0.0, nan is never in",
                    differentiable=False)],
    "nextafter": [Sample(lambda m, x, y: m.nextafter(x, y), _grid([0.0, -0.0, 1.0, inf, -inf, nan, 5e-324],
                                                                   [0.0, -0.0, 1.0, inf, nan]),
                         "values only: torch's backward raises 'the derivative for nextafter is not implemented'",
                         differentiable=False)],
    "igamma": [Sample(lambda m, a, x: (m.igamma(a, x), m.igammac(a, x)),
                      _grid([0.0, -0.0, 0.5, 1.0, 30.0, 1e-300, inf, -1.0, nan],
                            [0.0, 0.5, 1.0, 29.0, 1e-300, inf, -1.0, nan]),
                      "values at the domain's edges (a or x zero, infinite, negative, nan)", differentiable=False),
               # torch has no derivative in a: x alone is differentiated, a is a constant (one function per sample:
               # summed, the two second orders' opposite infinities at x = 1e-300 would make torch's nan)
               *[Sample(lambda m, x, f=f: getattr(m, f)(m.tensor(_IGAMMA_A), x), [_IGAMMA_X],
                        f"{f}: derivative in x (x = 0 and x = inf included)")
                 for f in ("igamma", "igammac")]],
    "atan2": [Sample(lambda m, x, y: m.atan2(x, y), _grid([0.0, -0.0, 1.0, -1.0, 1e-170, inf, -inf, nan],
                                                           [0.0, -0.0, 1.0, -1.0, 1e-170, inf, -inf, nan]))],
    # ---- ir/ops/pointwise_math.py and ir/ops/special.py ------------------------------------------------------
    "floor": _unary("floor", 2.5, -0.5, 1e16 + 1.5),
    "ceil": _unary("ceil", 2.5, -0.5),
    "trunc": _unary("trunc", 2.5, -0.5),
    "round": _unary("round", 2.5, -0.5, 1.5, 0.49999999999999994),
    "hypot": [Sample(lambda m, x, y: m.hypot(x, y), _grid([0.0, -0.0, 1.0, -2.0, inf, -inf, nan, 1e-200, 1e200],
                                                           [0.0, -0.0, 3.0, inf, nan, 1e-200]),
                     numba_xfail=_FASTMATH.format(what="the second order's products of 1e200-sized terms in another "
                                                       "order (0.16 relative at x = 1e200, y = 1e-200)"))],
    "fmod": [Sample(lambda m, x, y: m.fmod(x, y), _grid([0.0, -0.0, 5.5, -5.5, inf, nan, 1e-300],
                                                         [0.0, 2.0, -2.0, inf, nan]))],
    "copysign": [Sample(lambda m, x, y: m.copysign(x, y), _grid([0.0, -0.0, 1.5, -2.0, inf, -inf, nan],
                                                                 [0.0, -0.0, 1.0, -1.0, inf, -inf]))],
    "erfc": _unary("erfc", 30.0, -30.0, 5.0),
    "xlogy": [Sample(lambda m, x, y: m.xlogy(x, y), _grid([0.0, -0.0, 1.0, -2.0, inf, nan, 1e-300],
                                                           [0.0, -0.0, 1.0, -1.0, 2.0, inf, nan, 1e-300]),
                     numba_xfail=_FASTMATH.format(what="the second order of g * x / y (d/dy) at y = 0 to inf, "
                                                       "where torch's is nan")),
              Sample(lambda m, x, y: m.special.xlog1py(x, y), _grid([0.0, -0.0, 1.0, -2.0, inf, nan],
                                                                     [-1.0, -2.0, 0.0, 1.0, inf, nan, -1e-300]),
                     "xlog1py", numba_xfail=_FASTMATH.format(what="the second order of g * x / (y + 1) (d/dy) at "
                                                                   "x = inf, y = -1 to inf, where torch's is nan"))],
    "lgamma": [Sample(lambda m, x: x.lgamma(), [a(0.0, -0.0, 1.0, 0.5, -2.5, inf, -inf, 1e-300, -1e-300, 1e300, 2.0,
                                                 -1.5, 1e-200, nan)]),
               Sample(lambda m, x: x.lgamma(), [a(-1.0, -2.0)], "the negative poles", second_order=False)],
    "polygamma": [Sample(lambda m, x: x.digamma(), [a(0.0, 1.0, -0.5, 2.5, 1e-200, 30.0, 1e10, -2.5, nan)],
                         "digamma (n = 0)"),
                  # second order off: torch's polygamma(2, inf) is Cephes' nan, compiled code's decomposition gives 0
                  Sample(lambda m, x: x.digamma(), [a(inf, -inf, -0.0)], "digamma at +-inf, -0.0",
                         second_order=False),
                  # torch's trigamma at a pole is pi^2 / sin(pi x)^2 of a rounded pi x (4.8e32 at -1): values only
                  Sample(lambda m, x: x.digamma(), [a(-1.0, -2.0)], "digamma at the poles", differentiable=False),
                  Sample(lambda m, x: m.polygamma(2, x), [a(1.0, 0.5, 2.5, 1e-3, 30.0, 1e10, nan)],
                         "n = 2, off the poles"),
                  Sample(lambda m, x: m.polygamma(2, x), [a(inf, -inf, 0.0)], "n = 2 at +-inf (torch: nan) and 0",
                         differentiable=False)],
    "erfinv": [Sample(lambda m, x: x.erfinv(), [a(0.0, -0.0, 0.5, -0.5, 0.999, -0.9999999, 1e-300, nan)]),
               Sample(lambda m, x: x.erfinv(), [a(1.0, -1.0, 1.5, -2.0)], "+-1 and beyond",
                      traced_xfail="compiled code differentiates the decomposition (ir/ops/special.py), whose branch "
                                   "at +-1 is masked: gradient 0 where torch's is inf")],
    # ---- ir/ops/trig_bessel.py: domain edges, infinities, nan, -0.0 --------------------------------------------
    "asin": [Sample(lambda m, x: x.asin(), [a(0.0, -0.0, 0.5, -0.999, 1e-300, nan)]),
             Sample(lambda m, x: m.asin(x), [a(1.0, -1.0, 1.5, -2.0, inf, -inf)], "+-1 and beyond")],
    "acos": [Sample(lambda m, x: x.acos(), [a(0.0, -0.0, 0.5, -0.999, 1e-300, nan)]),
             Sample(lambda m, x: m.acos(x), [a(1.0, -1.0, 1.5, -2.0, inf, -inf)], "+-1 and beyond")],
    "atan": [Sample(lambda m, x: x.atan(), [a(0.0, -0.0, 1.0, -3.0, 1e-300, 1e300, inf, -inf, nan)])],
    # 709: the largest finite range (at 710 torch's vectorised AVX2 sinh/cosh overflow to inf, its scalar path not)
    "sinh": [Sample(lambda m, x: x.sinh(), [a(0.0, -0.0, 1.0, -3.0, 1e-300, 709.0, -800.0, inf, -inf, nan)])],
    "cosh": [Sample(lambda m, x: x.cosh(), [a(0.0, -0.0, 1.0, -3.0, 1e-300, 709.0, -800.0, inf, -inf, nan)])],
    "asinh": [Sample(lambda m, x: x.asinh(), [a(0.0, -0.0, 1.0, -3.0, 1e-300, 1e300, inf, -inf, nan)])],
    "acosh": [Sample(lambda m, x: x.acosh(), [a(1.5, 3.0, 1e300, inf, nan)]),
              Sample(lambda m, x: m.acosh(x), [a(1.0, 0.5, 0.0, -0.0, -1.0, -inf)], "1 and below")],
    "atanh": [Sample(lambda m, x: x.atanh(), [a(0.0, -0.0, 0.5, -0.999, 1e-300, nan)]),
              Sample(lambda m, x: m.atanh(x), [a(1.0, -1.0, 1.5, -2.0, inf, -inf)], "+-1 and beyond")],
    "bessel_i": [Sample(lambda m, x: m.i0(x), [a(0.0, -0.0, 1.0, -3.0, 8.0, -9.0, 1e-300, 700.0)], "i0"),
                 Sample(lambda m, x: m.special.i0e(x), [a(1.0, -3.0, 8.0, -9.0, 1e-300, 1e300)], "i0e"),
                 Sample(lambda m, x: m.special.i1(x), [a(0.0, -0.0, 1.0, -3.0, 8.0, -9.0, 1e-300, 700.0)], "i1"),
                 Sample(lambda m, x: m.special.i1e(x), [a(0.0, -0.0, 1.0, -3.0, 8.0, -9.0, 1e300)], "i1e"),
                 # torch's gradients at nan come from its where(|x| > eps, ..., 0.5): not a point to agree on
                 Sample(lambda m, x: m.i0(x) + m.special.i0e(x) + m.special.i1(x) + m.special.i1e(x), [a(nan)],
                        "nan", differentiable=False),
                 Sample(lambda m, x: m.special.i0e(x), [a(0.0, -0.0)], "i0e at 0",
                        traced_xfail=_BESSEL_TRACED.format(what="the second derivative at 0: torch's d/dx of "
                                                                "i1e(x) - sgn(x) i0e(x) is 0.5, the composition's "
                                                                "sign(0) * F'(0) gives 0")),
                 Sample(lambda m, x: m.special.i1e(x), [a(1e-300, -1e-17)], "i1e within eps of 0",
                        traced_xfail=_BESSEL_TRACED.format(what="the second derivative within eps of 0: torch's "
                                                                "constant 0.5 branch gives 0, the composition "
                                                                "the true -sign(x) / 2")),
                 Sample(lambda m, x: m.i0(x) + m.special.i1(x), [a(inf, -inf, 720.0)], "i0, i1 at +-inf",
                        differentiable=False),
                 Sample(lambda m, x: m.special.i0e(x) + m.special.i1e(x), [a(inf, -inf)], "i0e, i1e at +-inf",
                        differentiable=False)],
    # ---- fused eager primitives (ir/ops/fused.py): eager binds them, traced code the compositions -------
    "softmax": [Sample(lambda m, x: x.softmax(1), [rows([1.0, 1.0, 1.0], [0.0, -inf, 1.0], [-inf, -inf, -inf], [800.0, 0.0, -800.0],
                                                        [inf, 0.0, 1.0], [inf, inf, 1.0], [-inf, 1.0, 2.0], [nan, 1.0, 2.0])]),
                Sample(lambda m, x: x.softmax(1), [rows([inf], [-inf], [2.0])], "size-1 dim"),
                Sample(lambda m, x: x.softmax(1), [np.zeros((0, 3))], "empty batch")],
    "log_softmax": [Sample(lambda m, x: x.log_softmax(1), [rows([1.0, 1.0, 1.0], [0.0, -inf, 1.0], [-inf, -inf, -inf],
                                                                [800.0, 0.0, -800.0], [inf, 0.0, 1.0], [inf, inf, 1.0],
                                                                [-inf, 1.0, 2.0], [nan, 1.0, 2.0])]),
                    Sample(lambda m, x: x.log_softmax(1), [rows([inf], [-inf], [2.0])], "size-1 dim"),
                    Sample(lambda m, x: x.log_softmax(1), [np.zeros((0, 3))], "empty batch")],
    "softmax_backward": [Sample(_vjp_with_graph(lambda x: x.softmax(1)),
                                [rows([1.0, 1.0, 1.0], [0.0, -inf, 1.0], [800.0, 0.0, -800.0], [-inf, 1.0, 2.0],
                                      [inf, 0.0, 1.0], [0.0, 1.0, 2.0]),
                                 rows([inf, 0.0, 1.0], [1.0, inf, 2.0], [0.0, 0.0, 0.0], [2.0, -1.0, 0.5],
                                      [1.0, 1.0, 1.0], [inf, -inf, 1.0])], "softmax's vjp at (x, g)")],
    "log_softmax_backward": [Sample(_vjp_with_graph(lambda x: x.log_softmax(1)),
                                    [rows([1.0, 1.0, 1.0], [0.0, -inf, 1.0], [800.0, 0.0, -800.0], [-inf, 1.0, 2.0],
                                          [inf, 0.0, 1.0], [0.0, 1.0, 2.0]),
                                     rows([inf, 0.0, 1.0], [1.0, inf, 2.0], [0.0, 0.0, 0.0], [2.0, -1.0, 0.5],
                                          [1.0, 1.0, 1.0], [inf, -inf, 1.0])], "log_softmax's vjp at (x, g)")],
    "tanh_backward": [Sample(_vjp_with_graph(lambda x: x.tanh()),
                             [a(0.0, -0.0, 20.0, -20.0, 400.0, inf, -inf, 1.0, 0.5, 1e-300),
                              a(inf, 1.0, inf, 1.0, 0.0, 2.0, -inf, -inf, 0.0, inf)], "tanh's vjp at (x, g)")],
    # relu's vjp: zeros of either sign, a nan input (passes g), infinite and nan cotangents (0 where x <= 0)
    "threshold_backward": [Sample(_vjp_with_graph(lambda x: x.relu()),
                                  [a(0.0, -0.0, -1.0, 2.0, nan, inf, -inf, 1e-300, -1e-300),
                                   a(inf, nan, inf, nan, 1.0, 2.0, 3.0, -inf, nan)], "relu's vjp at (x, g)")],
    # nn.functional.threshold: at the threshold itself (replaced, gradient 0), a nan (passes, with its gradient)
    "threshold": [Sample(lambda m, x: m.nn.functional.threshold(x, 0.5, -2.0),
                         [a(0.5, 0.5000001, -0.0, nan, inf, -inf, 1e-300, 2.0)], "threshold at 0.5, value -2")],
    "nll_loss": [Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([0, 1, 2, -100])),
                        [rows([-inf, 0.0, 1.0], [inf, nan, 2.0], [0.0, -0.0, -inf], [-inf, nan, 0.0])],
                        "inf/nan log-probabilities, an ignored row"),
                 Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([1, 0, 2]), reduction="none"),
                        [rows([-inf, 0.0, 1.0], [inf, nan, 2.0], [0.0, -0.0, -inf])], "reduction none"),
                 Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([1, 0, 2]), ignore_index=0, reduction="sum"),
                        [rows([-inf, 0.0, 1.0], [inf, nan, 2.0], [0.0, -0.0, -inf])], "ignore_index=0, sum"),
                 Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([-100, -100])), [rows([-inf, 0.0], [1.0, nan])],
                        "all ignored (mean: 0 / 0 = nan)"),
                 Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([0, 0])), [rows([-inf], [2.0])], "one class"),
                 Sample(lambda m, x: m.nn.functional.nll_loss(x, m.tensor([], dtype=m.int64)), [np.zeros((0, 3))],
                        "empty batch (mean: nan)")],
}


def _setitem(x, key, v):
    y = x.clone()
    y[key] = v
    return y


def _sdpa(m, q, k, v, mask):
    return m.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


OP_SAMPLES["gelu"] = [Sample(lambda m, x: m.nn.functional.gelu(x), [a(0.0, -0.0, 40.0, -40.0, inf, -inf)]),
                      Sample(lambda m, x: m.nn.functional.gelu(x, approximate="tanh"), [a(0.0, -0.0, 40.0, -40.0, 1e100)],
                             "tanh")]
def _gelu_vjp(m, x, g):
    return m.autograd.grad(m.nn.functional.gelu(x), x, g, create_graph=True)[0] if x.requires_grad else x * g


OP_SAMPLES["gelu_backward"] = [
    Sample(_gelu_vjp, [a(0.0, -0.0, 20.0, -20.0, 400.0, inf, -inf, 1.0, 0.5, 1e-300),
                       a(3.0, 1.0, -2.0, 1.0, 0.0, 2.0, 0.5, -1.0, 0.0, 4.0)], "exact GELU's vjp at (x, g)"),
    Sample(_gelu_vjp, [a(0.0, -0.0, 20.0, -20.0, 400.0, inf, -inf, 1.0, 0.5, 1e-300),
                       a(inf, 1.0, inf, 1.0, 0.0, 2.0, -inf, -inf, 0.0, inf)], "infinite g",
           traced_xfail="a trace differentiates gelu's decomposition (0.5 x (1 + erf(x / sqrt 2))) with the transpose "
                        "pass, so at x = 0 an infinite g meets 0.5 x = 0 (nan) where torch's fused gelu_backward "
                        "gives g / 2; eager mode binds gelu_backward and matches"),
]
OP_SAMPLES["layer_norm"] = [
    Sample(lambda m, x: m.nn.functional.layer_norm(x, (3,)),
           [rows([2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [-0.0, 0.0, -0.0])],
           "constant rows (variance 0: the eps alone)"),
    Sample(lambda m, x: m.nn.functional.layer_norm(x, (3,)), [rows([inf, 1.0, 1.0], [nan, 0.0, 1.0])], "inf and nan"),
    Sample(lambda m, x: m.nn.functional.layer_norm(x, (2, 2), eps=0.0), [np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 5.0], [5.0, 6.0]]])],
           "two normalised dims, eps 0"),
]
def _layer_norm_vjp(m, x, g):
    """layer_norm's vjp at ``x`` along ``g`` over the last dim, with ``create_graph`` (as ``_vjp_with_graph``)."""
    if not x.requires_grad:
        return x * g
    return m.autograd.grad(m.nn.functional.layer_norm(x, (3,)), x, g, create_graph=True)[0]


OP_SAMPLES["layer_norm_backward"] = [
    Sample(_layer_norm_vjp, [rows([2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [inf, 1.0, 1.0], [nan, 0.0, 1.0]),
                             rows([1.0, -1.0, 0.5], [inf, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, -1.0, 0.5], [1.0, 1.0, 1.0])],
           "layer_norm's vjp at (x, g): constant rows, infinite g, inf and nan", second_order=False),
    Sample(_layer_norm_vjp, [rows([1.0, 2.0, 3.0], [0.3, -1.0, 2.0]), rows([0.0, 0.0, 0.0], [1.0, 0.5, -2.0])],
           "third order of layer_norm",
           xfail="torch's Hessian-vector product of its layer_norm double backward in x is not the derivative: it "
                 "does not sum to 0 along a row (layer_norm is shift-invariant), and central differences of torch's "
                 "own second order agree with jitgrad's to 1e-8 (tests/test_layer_norm_backward.py gradgradchecks "
                 "layer_norm_backward)"),
]
OP_SAMPLES["sdpa"] = [
    Sample(lambda m, q, k, v: _sdpa(m, q, k, v, m.tensor([[True, False, True], [False, False, False], [True, True, True]])),
           [rows([800.0, 0.0], [0.0, 0.0], [1.0, 1.0]), rows([1.0, 0.0], [1.0, 0.0], [0.0, 1.0]),
            rows([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])],
           "a fully masked row (weights 0, as torch's _safe_softmax), a saturated row, tied scores"),
    Sample(lambda m, q, k, v, mask: _sdpa(m, q, k, v, mask),
           [rows([0.0, 0.0], [2.0, -1.0]), rows([0.0, 0.0], [0.0, 0.0], [1.0, 1.0]), rows([1.0, -1.0], [0.0, 2.0], [3.0, 0.0]),
            rows([0.0, -inf, 0.0], [-1e300, 0.0, -inf])],
           "additive float mask with -inf and -1e300 entries, zero queries and keys"),
    Sample(lambda m, q, k, v: m.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
           [rows([1.0, 0.0], [0.0, 0.0]), rows([1.0, 0.0], [1.0, 0.0], [0.0, 1.0]), rows([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])],
           "is_causal with L < S"),
]


def _sdpa_tiled(m, q, k, v, **kw):
    """scaled_dot_product_attention with jitgrad's key-tiled primitives forced (2 x 2 blocks: several per row)."""
    if m.__name__ != "jitgrad":
        return m.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
    from jitgrad.nn.attention import attention_tiling
    with attention_tiling(0, 2, 2):
        return m.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


# sdpa_tiled's vjp binds sdpa_tiled_backward; the second order runs sdpa_tiled_backward's own vjp
OP_SAMPLES["sdpa_tiled"] = [
    Sample(lambda m, q, k, v: _sdpa_tiled(m, q, k, v, attn_mask=m.tensor([[True, False, True], [False, False, False],
                                                                          [True, True, True]])),
           [rows([800.0, 0.0], [0.0, 0.0], [1.0, 1.0]), rows([1.0, 0.0], [1.0, 0.0], [0.0, 1.0]),
            rows([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])],
           "a fully masked row, a saturated row (the running max grows across key blocks), tied scores"),
    Sample(lambda m, q, k, v, mask: _sdpa_tiled(m, q, k, v, attn_mask=mask),
           [rows([0.0, 0.0], [2.0, -1.0]), rows([0.0, 0.0], [0.0, 0.0], [1.0, 1.0]), rows([1.0, -1.0], [0.0, 2.0], [3.0, 0.0]),
            rows([-inf, -inf, 0.0], [-1e300, 0.0, -inf])],
           "additive float mask: a first key block wholly -inf, -1e300 entries; the mask's own gradient"),
]
OP_SAMPLES["sdpa_tiled_backward"] = [
    Sample(lambda m, q, k, v: _sdpa_tiled(m, q, k, v, is_causal=True),
           [rows([1.0, 0.0], [0.0, 0.0], [-30.0, 2.0]), rows([1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 2.0]),
            rows([1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0])],
           "is_causal with L < S (a block crossing the diagonal, one above it skipped)"),
]


# convolutions (ir/ops/conv.py): conv's vjp binds conv_transpose and conv_weight, whose vjps bind the other two
def _conv_in():
    x = np.arange(18.0).reshape(1, 2, 3, 3) - 8.0
    x[0, 0, 1, 1], x[0, 1, 0, 2], x[0, 1, 2, 0] = inf, nan, -0.0
    return x


OP_SAMPLES["conv"] = [
    Sample(lambda m, x, w: m.nn.functional.conv2d(x, w, padding=1), [_conv_in(), np.array(
        [[[[0.0, 1.0], [-1.0, 0.5]], [[0.0, 0.0], [0.0, 0.0]]]])],
        "inf and nan inputs (inf * 0 = nan through the zero kernel entries and the zero padding)"),
    Sample(lambda m, x, w: m.nn.functional.conv2d(x, w, groups=2), [np.zeros((0, 2, 3, 3)), np.ones((2, 1, 2, 2))],
           "empty batch"),
]
OP_SAMPLES["conv_transpose"] = [
    Sample(lambda m, x, w: m.nn.functional.conv_transpose2d(x, w, stride=2, output_padding=1),
           [np.array([[[[1.0, -inf], [0.0, 2.0]]]]), np.array([[[[0.0, 1.0], [2.0, 3.0]]]])],
           "stride 2 (output positions no input reaches), -inf times a zero weight"),
]
OP_SAMPLES["conv_weight"] = [
    Sample(lambda m, x, w: m.nn.functional.conv1d(x, w, padding="same", dilation=2, groups=2),
           [np.array([[[1.0, 0.0, -0.0, 3.0], [inf, 1.0, 2.0, 1e300]]]), np.array([[[1.0, -1.0]], [[0.0, 2.0]]])],
           "'same' with an even dilated kernel (asymmetric zero padding), inf and 1e300 inputs"),
]


# max pooling gathers the values at these indices (ir/ops/pooling.py): ties go to the first maximum, NaNs to the
# last NaN, a window of -inf to its first position inside the input (never the -inf padding)
OP_SAMPLES["max_pool_indices"] = [
    Sample(lambda m, x: m.nn.functional.max_pool2d(x, 2, stride=1, padding=1),
           [np.array([[[[1.0, 1.0, 0.0], [1.0, 1.0, -inf], [-inf, -inf, -inf]]]])],
           "ties inside and across overlapping windows, -inf windows next to the padding"),
    Sample(lambda m, x: m.nn.functional.max_pool2d(x, (2, 3), ceil_mode=True),
           [np.array([[[[nan, 1.0, nan, 2.0], [0.0, inf, 3.0, -0.0], [5.0, 5.0, 5.0, 5.0]]]])],
           "NaNs (the last one wins), inf, ceil_mode's partial windows"),
]


# diagonal is a primitive (a view) (ir/ops/diagonal.py)
OP_SAMPLES["diagonal"] = [
    Sample(lambda m, x: m.diagonal(x, 1) * x.diagonal(-1, 1, 0), [rows([inf, nan, 0.0], [0.0, -0.0, inf], [nan, 1.0, 2.0])]),
    Sample(lambda m, x: x.diagonal(0, -1, 0).sum(-1) * 2.0 + m.diagonal(x, 5).sum(), [np.arange(12.0).reshape(2, 3, 2)],
           "3-d, negative dims, empty diagonal")]


# public functions that are compositions of primitives
COMPOSITE_SAMPLES: dict[str, list[Sample]] = {
    "mean": [Sample(lambda m, x: x.mean(1), [rows([inf, -inf], [inf, 1.0], [0.0, 0.0])]),
             Sample(lambda m, x: x.mean(1), [np.zeros((2, 0))], "empty dim")],
    "var": [Sample(lambda m, x: x.var(1), [rows([2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [-0.0, 0.0, -0.0])],
                   "constant rows"),
            Sample(lambda m, x: x.var(1), [rows([inf, 1.0, 1.0], [1.0, 2.0, 3.0])], "a row holding inf",
                   xfail="torch's closed-form var_backward 2 / (n - c) * grad * (x - mean) gives [nan, -inf, -inf]; "
                         "jitgrad's var is a composition whose mean path adds sum(x - mean) = nan to every element"),
            Sample(lambda m, x: x.var(1), [rows([2.0], [0.0])], "size-1 dim (n - 1 = 0)",
                   numba_xfail=_FASTMATH.format(what="the backward's t + (-t) (t = inf * 0 paths of sum and mean) to 0, "
                                                     "where torch's gradient is nan")),
            Sample(lambda m, x: x.var(1, unbiased=False), [rows([2.0], [0.0])], "size-1 dim, biased"),
            Sample(lambda m, x: x.var(1), [np.zeros((2, 0))], "empty dim")],
    "std": [Sample(lambda m, x: x.std(1), [rows([2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [-0.0, 0.0, -0.0])],
                   "constant rows"),
            Sample(lambda m, x: x.std(1), [rows([inf, 1.0, 1.0], [1.0, 2.0, 3.0])], "a row holding inf"),
            Sample(lambda m, x: x.std(), [a(5.0, 5.0)], "all, constant"),
            Sample(lambda m, x: x.std(1), [rows([2.0], [0.0])], "size-1 dim (n - 1 = 0)",
                   numba_xfail=_FASTMATH.format(what="the backward's t + (-t) (t = inf * 0 paths of sum and mean) to 0, "
                                                     "where torch's gradient is nan")),
            Sample(lambda m, x: x.std(1, unbiased=False), [rows([2.0], [0.0])], "size-1 dim, biased")],
    "norm": [Sample(lambda m, x: x.norm(p=1, dim=1), [rows([0.0, 0.0], [-0.0, 2.0], [inf, 1.0])], "p=1"),
             Sample(lambda m, x: x.norm(p=3, dim=1), [rows([0.0, 0.0], [-0.0, 2.0], [3.0, -4.0])], "p=3"),
             Sample(lambda m, x: x.norm(p=1.5, dim=1), [rows([0.0, 0.0], [-0.0, 2.0], [3.0, -4.0])], "p=1.5"),
             Sample(lambda m, x: x.norm(p=0.5, dim=1), [rows([0.0, 0.0], [-0.0, 2.0], [3.0, -4.0])], "p=0.5"),
             Sample(lambda m, x: x.norm(p=3, dim=1), [rows([inf, 0.0], [1e-200, 0.0], [1e200, 1.0])], "p=3, inf/tiny/huge"),
             Sample(lambda m, x: x.norm(p=-1.5), [a(0.0, 2.0, -1.0)], "p=-1.5"),
             Sample(lambda m, x: x.norm(p=inf, dim=1), [rows([0.0, 0.0], [-2.0, 2.0], [3.0, -4.0])], "p=inf"),
             Sample(lambda m, x: x.norm(p=-inf, dim=1), [rows([0.0, 0.0], [-2.0, 2.0], [3.0, -4.0])], "p=-inf")],
    "logsumexp": [Sample(lambda m, x: x.logsumexp(1), [rows([1.0, 1.0, 1.0], [0.0, -inf, 1.0], [-inf, -inf, -inf],
                                                            [800.0, 0.0, -800.0], [inf, 0.0, 1.0], [inf, inf, 1.0],
                                                            [-inf, 1.0, 2.0])])],
    "logsumexp (size-1 and empty dims)": [Sample(lambda m, x: x.logsumexp(1), [rows([inf], [-inf], [2.0])], "size-1 dim"),
                                          Sample(lambda m, x: x.logsumexp(1), [np.zeros((2, 0))], "empty dim")],
    "max(dim)": [Sample(lambda m, x: x.max(1)[0], [rows([1.0, 1.0, 0.0], [inf, inf, 1.0], [0.0, -0.0, -1.0])])],
    "min(dim)": [Sample(lambda m, x: x.min(1)[0], [rows([1.0, 1.0, 2.0], [-inf, -inf, 1.0], [0.0, -0.0, 1.0])])],
    "max()": [Sample(lambda m, x: x.max(), [rows([1.0, 3.0], [3.0, 3.0])]),
              Sample(lambda m, x: x.max(), [rows([1.0, nan], [nan, 3.0])], "nan"),
              Sample(lambda m, x: x.max() * m.tensor(inf), [rows([1.0, 3.0], [3.0, -inf])], "inf cotangent")],
    "min()": [Sample(lambda m, x: x.min(), [rows([1.0, -3.0], [-3.0, 3.0])]),
              Sample(lambda m, x: x.min(), [rows([1.0, nan], [nan, 3.0])], "nan")],
    "amax/amin (nan)": [Sample(lambda m, x: x.amax(1) + x.amin(), [rows([1.0, nan], [2.0, 3.0])])],
    "max(dim) (nan)": [Sample(lambda m, x: x.max(1)[0] + x.min(1)[0], [rows([1.0, nan, nan], [nan, 3.0, 4.0], [1.0, 2.0, 2.0])])],
    "norm(p=inf) (nan)": [Sample(lambda m, x: x.norm(p=inf, dim=1), [rows([1.0, nan], [2.0, -3.0])],
                                 xfail="torch's sign(nan) is 0, so the gradient at the nan element is 0; jitgrad's sign "
                                       "is NumPy's (nan)")],
    "clamp(tensor bounds)": [Sample(lambda m, x, lo, hi: m.clamp(x, lo, hi),
                                    [a(0.0, 1.0, 0.5, 2.0, -1.0, 1.0), a(0.0, 0.0, 0.0, 1.0, 1.0, 1.0),
                                     a(1.0, 1.0, 1.0, 0.0, 1.0, 1.0)]),
                             Sample(lambda m, x, lo: m.clamp(x, min=lo), [a(0.0, 1.0, -1.0, nan), a(0.0, 0.0, 0.0, 0.0)], "min only"),
                             Sample(lambda m, x, hi: m.clamp(x, max=hi), [a(0.0, 1.0, -1.0, inf), a(0.0, 0.0, 0.0, inf)], "max only")],
    "l1_loss": [Sample(lambda m, x, y: m.nn.functional.l1_loss(x, y), [a(0.0, 1.0, -1.0, 2.0), a(0.0, 1.0, 1.0, inf)])],
    "mse_loss": [Sample(lambda m, x, y: m.nn.functional.mse_loss(x, y), [a(0.0, 1.0, inf), a(0.0, 1.0, 1.0)])],
    "cross_entropy": [Sample(lambda m, x: m.nn.functional.cross_entropy(x, m.tensor([0, 1, 2])),
                             [rows([0.0, -inf, 1.0], [1.0, 1.0, 1.0], [800.0, 0.0, -800.0])]),
                      Sample(lambda m, x: m.nn.functional.cross_entropy(x, m.tensor([0, -100, 2])),
                             [rows([-inf, 0.0, 1.0], [-inf, 1.0, 2.0], [1.0, 1.0, 1.0])], "an ignored row with a -inf logit"),
                      Sample(lambda m, x: m.nn.functional.cross_entropy(x, m.tensor([-100, -100])),
                             [rows([-inf, 0.0, 1.0], [1.0, 1.0, 1.0])], "all ignored (nan)")],
    "square": [Sample(lambda m, x: m.square(x), [a(0.0, -0.0, inf, -inf, 1e200)])],
    "tril/triu": [Sample(lambda m, x: m.tril(x) * 2.0 + x.triu(1), [rows([inf, nan, -inf], [0.0, -0.0, inf], [nan, 1.0, 2.0])],
                         "inf and nan on and off the triangle (kept or zeroed, never multiplied)"),
                  Sample(lambda m, x: m.tril(x, -1) + m.triu(x, 3), [rows([1.0, 2.0], [3.0, inf])], "diagonals off the matrix")],
    "log2": [Sample(lambda m, x: m.log2(x), [a(0.0, -0.0, inf, -1.0, 1.0)])],
}


def _scatter(m, x, s, idx, reduce, include_self=True):
    return x.scatter_reduce(0, m.tensor(idx), s, reduce, include_self=include_self)


OP_SAMPLES["scatter_reduce"] = [
    Sample(lambda m, x, s: _scatter(m, x, s, [1, 1, 0, 2], "amax") * x, [a(1.0, 2.0, 3.0), a(2.0, 2.0, 5.0, 3.0)],
           "ties between self and src and among src (the gradient shared evenly)"),
    Sample(lambda m, x, s: _scatter(m, x, s, [0, 0], "amin", False) + _scatter(m, x, s, [0, 0], "amax", False),
           [a(3.0, 5.0), a(3.0, 1.0)], "include_self=False with the excluded self tied with the result (torch's "
                                       "share counts it)"),
    Sample(lambda m, x, s: _scatter(m, x, s, [0, 0, 1, 2], "prod") * s.sum(), [a(0.0, 2.0, 3.0), a(0.0, 1.5, 2.0, 0.0)],
           "zeros in self and src (one src zero per target: torch's double backward allows it)"),
    Sample(lambda m, x, s: _scatter(m, x, s, [1, 0, 0], "amax") + _scatter(m, x, s, [1, 0, 1], "amin", False),
           [a(inf, 1.0), a(nan, 2.0, -inf)], "nan and inf (nan wins)"),
    Sample(lambda m, x, s: _scatter(m, x, s, [0, 1], "prod"), [a(inf, 2.0), a(0.0, 3.0)], "inf * 0"),
]
COMPOSITE_SAMPLES["scatter_reduce mean/sum"] = [
    Sample(lambda m, x, s: _scatter(m, x, s, [0, 0, 2], "mean", False) + _scatter(m, x, s, [2, 2, 2], "sum", False),
           [a(inf, -inf, nan), a(1.0, 0.0, 2.0)], "excluded inf / nan targets leave no nan behind"),
]

# jitgrad.linalg (ir/ops/solvers.py, factorizations.py): det's derivative is the cofactor matrix, finite at singular
# matrices (torch switches to an SVD formula there; jitgrad uses it everywhere)
OP_SAMPLES["det"] = [
    Sample(lambda m, x: m.linalg.det(x), [rows([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0])], "rank 2 of 3"),
    Sample(lambda m, x: m.linalg.det(x), [rows([1.0, 2.0], [2.0, 4.0])], "rank 1 of 2"),
    Sample(lambda m, x: m.linalg.det(x), [np.zeros((2, 0, 0))], "empty matrices (det 1)"),
]
OP_SAMPLES["pinv"] = [
    Sample(lambda m, x: m.linalg.pinv(x), [rows([1.0, 2.0], [2.0, 4.0], [0.5, 1.0])], "rank-deficient"),
]
OP_SAMPLES["matrix_exp"] = [
    Sample(lambda m, x: m.linalg.matrix_exp(x), [np.stack([np.zeros((2, 2)), rows([0.0, 1.0], [0.0, 0.0]),
                                                           rows([1.0, 1.0], [1.0, 1.0]), rows([0.0, -30.0], [30.0, 0.0])])],
           "zero, nilpotent, singular and a rotation of large norm"),
]
OP_SAMPLES["linalg_info"] = [
    Sample(lambda m, x: (m.linalg.inv_ex(x).info, m.linalg.cholesky_ex(x).info),
           [np.stack([np.eye(3), rows([1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]), -np.eye(3)])],
           "singular and not positive-definite matrices in a batch", differentiable=False),
]
_LINALG_RAISES = ("a singular (cholesky: not positive-definite) input raises torch's LinAlgError, there is no value "
                  "to compare; tests/test_linalg.py checks the errors and the *_ex forms' info")
EXEMPT_LINALG = {
    "inv": _LINALG_RAISES, "solve": _LINALG_RAISES, "cholesky": _LINALG_RAISES,
    "slogdet": "at a singular matrix logabsdet is -inf and its derivative A^-T does not exist: torch returns its LU's "
               "inf/garbage, jitgrad NaN; nonsingular inputs are compared in tests/test_linalg.py",
    "solve_triangular": "a zero on the diagonal is the only singular point: torch's substitution gives inf/nan in an "
                        "order LAPACK decides, jitgrad NaN for that matrix",
    "svd": "its singular points are repeated singular values (no singular-vector derivative: torch's is inf/nan) "
           "and zero ones, where s is |.|-like and its derivative follows whichever null vector LAPACK picks (NumPy's "
           "gesdd and torch's differ); tests/test_linalg.py compares full-rank, distinct spectra",
    "qr": "its singular points are rank-deficient inputs, where R^-1 in the derivative does not exist (torch's is "
          "inf/nan too); tests/test_linalg.py compares values and derivatives on full-rank inputs",
}

SAMPLES = {**OP_SAMPLES, **COMPOSITE_SAMPLES}

_RANDOM = ("a random draw, not differentiable (torch gives draws no gradient either), with no input at which it is "
           "singular: its values come from jitgrad's Philox stream, not torch's generator, so there is nothing to compare "
           "with torch float64; tests/test_random.py checks its ranges, distributions and errors")

# OpDefs with no samples of their own, and why
EXEMPT = {
    **{name: _RANDOM for name in ("rand_uniform", "rand_normal", "multinomial", "randperm")},
    "delayed_error": "an identity whose gradient raises (scatter_reduce's prod refuses double backward where two "
                     "src zeros meet, as torch); tests/test_scatter_reduce.py checks that refusal against torch's",
    "eigh": "its singular points are repeated eigenvalues, where no eigenvector derivative exists (torch's is inf/nan "
            "too, from the same 1 / (L_j - L_i)); tests/test_lobpcg.py compares values and derivatives with "
            "torch.linalg.eigh on well-separated spectra",
    **EXEMPT_LINALG,
    **{name: "an integer op (no gradient, no floating-point special values); tests/test_pointwise_integer.py "
             "compares it with torch, including negative operands, zero and out-of-range shifts"
       for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
                    "bitwise_right_shift", "gcd", "lcm")},
    "nonzero_bounded": "an integer op of a traced mask (the coordinates of its nonzeros, padded to a bound): no "
                       "gradient and no floating-point special values; tests/test_data_dependent_sizes.py compares "
                       "it with eager nonzero over random masks, all-false and all-true included",
    "nll_grad_weights": "an internal primitive: nll_loss's gradient weights, a function of the integer targets alone "
                        "(no gradient, no floating-point input to be singular at); checked through the nll_loss samples "
                        "and tests/test_eager_vjps.py",
    "prod_others": "an internal primitive: the vjp of prod (its first and second derivatives are prod's second and "
                   "third), checked through the prod samples",
    **{name: "a collective moves values between processes and computes nothing at a point (SUM/AVG are linear); "
             "tests/test_distributed.py checks it against NumPy on two ranks"
       for name in ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_reduce_start", "all_reduce_wait")},
}
