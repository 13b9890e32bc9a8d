"""Symbolic sizes: a trace whose tensors have dims that vary between calls (a batch, a sequence length) holds
them as symbols, so one trace serves every size.

- :class:`SymInt` is a size (or an int computed from sizes: ``B * T``, ``x.size(1) // heads``): a polynomial
  over the symbols with integer coefficients (``//`` and ``%`` that do not divide exactly become atoms of their
  own), and its *hint*, the value it has in the call being traced.  Arithmetic stays symbolic.
- Python decisions on a size (``==``, ``<``, ``if T > 1``, ``bool``) are answered from the hints and recorded
  in the active :class:`ShapeEnv` as guards: the trace is valid for a call exactly when every guard holds
  again.  A comparison whose answer does not depend on the symbols (``B*T == T*B``) records nothing.
- Where Python needs a plain int (``range(T)``, a NumPy shape), ``__index__`` specialises: the size is guarded
  equal to its hint (as torch's ``guard_int``), so the trace is correct, only less general.
- :func:`concretize` replaces symbols by the values of a call in shapes and params: a symbolic graph is
  instantiated per call's sizes before the passes and codegen (which see only ints).

Imports nothing of jitgrad (it lives in ``ir/``, which the graph's avals and the ops' shape rules use).
"""
from __future__ import annotations

import operator
import threading
import traceback

from . import unbacked


class _Active(threading.local):
    def __init__(self):
        self.env = None


ACTIVE = _Active()          # the ShapeEnv of the trace running in this thread (None: guards are not recorded)

# ---- polynomials: tuples of (monomial, coefficient), monomial = sorted tuple of atom names ----------------
_ATOMS: dict = {}           # name -> (op, poly a, poly b) for the atoms ``a // b`` and ``a % b``


def _norm(d: dict) -> tuple:
    return tuple(sorted((m, c) for m, c in d.items() if c))


def _const(c) -> tuple:
    return (((), c),) if c else ()


def _add(p, q, sign=1) -> tuple:
    d = dict(p)
    for m, c in q:
        d[m] = d.get(m, 0) + sign * c
    return _norm(d)


def _mul(p, q) -> tuple:
    d = {}
    for m1, c1 in p:
        for m2, c2 in q:
            m = tuple(sorted(m1 + m2))
            d[m] = d.get(m, 0) + c1 * c2
    return _norm(d)


def _constant_of(p):
    """The int ``p`` is when it has no symbols, else None."""
    if not p:
        return 0
    if len(p) == 1 and p[0][0] == ():
        return p[0][1]
    return None


def _divide(p, q):
    """``p / q`` when ``q`` is one term ``c * m`` dividing every term of ``p`` exactly, else None."""
    if len(q) != 1:
        return None
    (mq, cq), = q
    out = {}
    for m, c in p:
        rest = list(m)
        for a in mq:
            if a not in rest:
                return None
            rest.remove(a)
        if c % cq:
            return None
        out[tuple(rest)] = c // cq
    return _norm(out)


def _atom(op, p, q) -> tuple:
    name = f"({_fmt(p)}{'//' if op == 'floordiv' else '%'}{_fmt(q)})"
    _ATOMS.setdefault(name, (op, p, q))
    return (((name,), 1),)


def evaluate(p, values: dict) -> int:
    """The int polynomial ``p`` is at ``values`` (symbol name -> int)."""
    total = 0
    for m, c in p:
        for a in m:
            v = values.get(a)
            if v is None:
                op, x, y = _ATOMS[a]
                x, y = evaluate(x, values), evaluate(y, values)
                v = x // y if op == "floordiv" else x % y
            c *= v
        total += c
    return total


def _fmt(p) -> str:
    if not p:
        return "0"
    terms = []
    for m, c in p:
        body = "*".join(m)
        if not body:
            terms.append(str(c))
        elif c == 1:
            terms.append(body)
        elif c == -1:
            terms.append("-" + body)
        else:
            terms.append(f"{c}*{body}")
    return "+".join(terms).replace("+-", "-")


_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
        ">=": operator.ge}
COMPARISONS = _CMP      # a guard's comparison by its name (``ShapeEnv.guards``: ``(p op 0) == expected``)


class ShapeEnv:
    """The symbols of one trace (name -> the value it had when traced, and where it comes from) and the guards
    the trace recorded on them: ``(polynomial, op, expected)`` meaning ``(p op 0) == expected``."""

    def __init__(self):
        self.hints: dict = {}
        self.sources: dict = {}
        self.guards: list = []
        self._seen: set = set()
        self.specialized: list = []      # (symbols' polynomial, where): sizes Python needed as plain ints

    def symbol(self, hint: int, source) -> "SymInt":
        name = f"s{len(self.hints)}"
        self.hints[name] = int(hint)
        self.sources[name] = source
        return SymInt(((((name,), 1),)), int(hint))

    def record(self, p, op, expected):
        key = (p, op)
        if key not in self._seen:
            self._seen.add(key)
            self.guards.append((p, op, expected))

    def holds(self, values: dict) -> bool:
        """Whether every guard holds at ``values`` (symbol name -> int)."""
        for p, op, expected in self.guards:
            if _CMP[op](_evaluate_any(p, values), 0) != expected:
                return False
        return True

    def failed(self, values: dict) -> str | None:
        """The first guard that fails at ``values``, written out (for the recompile message); None if all hold."""
        for p, op, expected in self.guards:
            if _CMP[op](_evaluate_any(p, values), 0) != expected:
                rel = op if expected else {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=",
                                           ">=": "<"}[op]
                text = _fexpr(p[1]) if p[:1] == ("float",) else _fmt(p)
                return f"{text} {rel} 0 (sizes {values})"
        return None


def _poly_of(x):
    if type(x) is SymInt:
        return x.poly, x.hint
    if type(x) is int or type(x) is bool:
        return _const(int(x)), int(x)
    return None, None


class SymInt:
    """An int computed from symbolic sizes (see the module docstring)."""

    __slots__ = ("poly", "hint")

    def __init__(self, poly, hint):
        self.poly = poly
        self.hint = hint

    # -- building --
    def _bin(self, other, fn, hint_fn, swap=False):
        q, h = _poly_of(other)
        if q is None:
            return NotImplemented
        a, b = (q, self.poly) if swap else (self.poly, q)
        ha, hb = (h, self.hint) if swap else (self.hint, h)
        return make(fn(a, b), hint_fn(ha, hb))

    def __add__(self, o):
        return self._bin(o, _add, operator.add)

    def __radd__(self, o):
        return self._bin(o, _add, operator.add, True)

    def __sub__(self, o):
        return self._bin(o, lambda a, b: _add(a, b, -1), operator.sub)

    def __rsub__(self, o):
        return self._bin(o, lambda a, b: _add(a, b, -1), operator.sub, True)

    def __mul__(self, o):
        if type(o) is float or type(o) is SymFloat:
            return SymFloat.of(self) * o
        return self._bin(o, _mul, operator.mul)

    def __rmul__(self, o):
        if type(o) is float:
            return o * SymFloat.of(self)
        return self._bin(o, _mul, operator.mul, True)

    def __neg__(self):
        return make(_mul(self.poly, _const(-1)), -self.hint)

    def __pos__(self):
        return self

    def _div(self, a, b, op):
        exact = _divide(a, b)
        if exact is not None:
            return exact if op == "floordiv" else ()
        cb = _constant_of(b)
        if cb is not None and cb == 1:
            return a if op == "floordiv" else ()
        return _atom(op, a, b)

    def __floordiv__(self, o):
        return self._bin(o, lambda a, b: self._div(a, b, "floordiv"), operator.floordiv)

    def __rfloordiv__(self, o):
        return self._bin(o, lambda a, b: self._div(a, b, "floordiv"), operator.floordiv, True)

    def __mod__(self, o):
        return self._bin(o, lambda a, b: self._div(a, b, "mod"), operator.mod)

    def __rmod__(self, o):
        return self._bin(o, lambda a, b: self._div(a, b, "mod"), operator.mod, True)

    def __truediv__(self, o):
        return SymFloat.of(self) / o

    def __rtruediv__(self, o):
        return o / SymFloat.of(self)

    def __pow__(self, o):
        if type(o) is int and o >= 0:
            r = 1
            for _ in range(o):
                r = r * self
            return r
        return SymFloat.of(self) ** o

    # -- decisions (guarded) --
    def _cmp(self, other, op):
        q, h = _poly_of(other)
        if q is None:
            if type(other) is float or type(other) is SymFloat:
                return _CMP[op](SymFloat.of(self), other)
            return NotImplemented
        d = _add(self.poly, q, -1)
        c = _constant_of(d)
        if c is not None:
            return _CMP[op](c, 0)
        if unbacked.poly_unbacked(d):       # a data-dependent size (ir/unbacked.py): no guard can check it
            return unbacked.decide(d, op, _ATOMS, evaluate, ACTIVE.env, f"the size decision {_fmt(d)} {op} 0")
        r = _CMP[op](self.hint - h, 0)
        env = ACTIVE.env
        if env is not None:
            env.record(d, op, r)
        return r

    def __eq__(self, o):
        return self._cmp(o, "==")

    def __ne__(self, o):
        return self._cmp(o, "!=")

    def __lt__(self, o):
        return self._cmp(o, "<")

    def __le__(self, o):
        return self._cmp(o, "<=")

    def __gt__(self, o):
        return self._cmp(o, ">")

    def __ge__(self, o):
        return self._cmp(o, ">=")

    def __bool__(self):
        return self._cmp(0, "!=")

    def __hash__(self):
        return hash(self.hint)

    def __abs__(self):
        return self if self >= 0 else -self

    def __index__(self):
        """Python needs a plain int: the value is guarded equal to the hint (the trace specialises on it)."""
        if unbacked.poly_unbacked(self.poly):
            raise unbacked.refuse(f"int({_fmt(self.poly)})", unbacked.base_names(self.poly, _ATOMS, True))
        env = ACTIVE.env
        if env is not None:
            env.record(_add(self.poly, _const(self.hint), -1), "==", True)
            if SPECIALIZE_LOG:
                env.specialized.append((_fmt(self.poly), "".join(traceback.format_stack(limit=8)[:-1])))
        return self.hint

    __int__ = __index__

    def __float__(self):
        return float(self.__index__())

    def __round__(self, n=None):
        return self.__index__()

    __trunc__ = __index__

    def __repr__(self):
        return _fmt(self.poly)

    def __format__(self, spec):
        # f-strings (error messages) show the value of the call being traced, as torch's; repr the symbols
        return format(self.hint, spec)


SPECIALIZE_LOG = False       # tests and debugging: keep where each specialisation happened (ShapeEnv.specialized)


def make(poly, hint):
    """A SymInt, or the plain int when ``poly`` has no symbols."""
    c = _constant_of(poly)
    return c if c is not None else SymInt(poly, hint)


class SymFloat:
    """A float computed from symbolic sizes (``1 / (B * T)`` for a mean): an expression and its hint.
    Arithmetic stays symbolic; decisions and ``float()`` are guarded as SymInt's are."""

    __slots__ = ("expr", "hint")

    def __init__(self, expr, hint):
        self.expr = expr        # ("int", poly) | ("const", float) | (op, a, b) with op in + - * / **
        self.hint = hint

    @staticmethod
    def of(x):
        if type(x) is SymFloat:
            return x
        if type(x) is SymInt:
            return SymFloat(("int", x.poly), float(x.hint))
        return SymFloat(("const", float(x)), float(x))

    def _bin(self, o, op, fn, swap=False):
        if type(o) not in (int, float, bool, SymInt, SymFloat):
            return NotImplemented
        a, b = (SymFloat.of(o), self) if swap else (self, SymFloat.of(o))
        return SymFloat((op, a.expr, b.expr), fn(a.hint, b.hint))

    def __add__(self, o):
        return self._bin(o, "+", operator.add)

    def __radd__(self, o):
        return self._bin(o, "+", operator.add, True)

    def __sub__(self, o):
        return self._bin(o, "-", operator.sub)

    def __rsub__(self, o):
        return self._bin(o, "-", operator.sub, True)

    def __mul__(self, o):
        return self._bin(o, "*", operator.mul)

    def __rmul__(self, o):
        return self._bin(o, "*", operator.mul, True)

    def __truediv__(self, o):
        return self._bin(o, "/", operator.truediv)

    def __rtruediv__(self, o):
        return self._bin(o, "/", operator.truediv, True)

    def __pow__(self, o):
        return self._bin(o, "**", operator.pow)

    def __rpow__(self, o):
        return self._bin(o, "**", operator.pow, True)

    def __neg__(self):
        return SymFloat(("-", ("const", 0.0), self.expr), -self.hint)

    def _decide(self, o, op):
        if type(o) not in (int, float, bool, SymInt, SymFloat):
            return NotImplemented
        d = self - o
        names = unbacked.expr_unbacked(d.expr, _ATOMS)
        if names:
            raise unbacked.refuse(f"the decision {_fexpr(d.expr)} {op} 0", names)
        r = _CMP[op](d.hint, 0)
        env = ACTIVE.env
        if env is not None:
            env.record(("float", d.expr), op, r)
        return r

    def __eq__(self, o):
        return self._decide(o, "==")

    def __ne__(self, o):
        return self._decide(o, "!=")

    def __lt__(self, o):
        return self._decide(o, "<")

    def __le__(self, o):
        return self._decide(o, "<=")

    def __gt__(self, o):
        return self._decide(o, ">")

    def __ge__(self, o):
        return self._decide(o, ">=")

    def __bool__(self):
        return self._decide(0.0, "!=")

    def __hash__(self):
        return hash(self.hint)

    def __float__(self):
        names = unbacked.expr_unbacked(self.expr, _ATOMS)
        if names:
            raise unbacked.refuse(f"float({_fexpr(self.expr)})", names)
        env = ACTIVE.env
        if env is not None:
            env.record(("float", (self - self.hint).expr), "==", True)
            if SPECIALIZE_LOG:
                env.specialized.append((repr(self), "".join(traceback.format_stack(limit=8)[:-1])))
        return self.hint

    def __repr__(self):
        return _fexpr(self.expr)


def unbacked_symbol(bound, origin: str) -> SymInt:
    """A new data-dependent size (ir/unbacked.py) of at most ``bound`` (an int or a SymInt: its hint is the
    bound's, for costs)."""
    return SymInt((((unbacked.fresh(origin),), 1),), hint_of(bound))


def _fexpr(e) -> str:
    if e[0] == "int":
        return _fmt(e[1])
    if e[0] == "const":
        return repr(e[1])
    return f"({_fexpr(e[1])}{e[0]}{_fexpr(e[2])})"


def _feval(e, values):
    k = e[0]
    if k == "int":
        return float(evaluate(e[1], values))
    if k == "const":
        return e[1]
    a, b = _feval(e[1], values), _feval(e[2], values)
    return a + b if k == "+" else a - b if k == "-" else a * b if k == "*" else a / b if k == "/" else a ** b


def _evaluate_any(p, values):
    if type(p) is tuple and p and p[0] == "float":
        return _feval(p[1], values)
    return evaluate(p, values)


def known_equal(a, b):
    """Whether sizes (or tuples of sizes) ``a`` and ``b`` are equal for every value of the symbols: True, False
    (they differ for every value: different constants, or lengths), or None when it depends on the values.  It
    records no guard: for bookkeeping that may answer "unknown" (strides eager mode would have)."""
    if type(a) is int and type(b) is int:
        return a == b
    if isinstance(a, tuple) or isinstance(b, tuple):
        if len(a) != len(b):
            return False
        r = True
        for x, y in zip(a, b):
            k = known_equal(x, y)
            if k is False:
                return False
            if k is None:
                r = None
        return r
    p, _ = _poly_of(a)
    q, _ = _poly_of(b)
    if p is None or q is None:
        return a == b
    c = _constant_of(_add(p, q, -1))
    return None if c is None else c == 0


def is_symbolic(x) -> bool:
    return type(x) is SymInt or type(x) is SymFloat


def same_shape(a, b) -> bool:
    """``a == b`` for two shapes, their ranks compared first: a tuple's ``==`` compares items before lengths, so
    ``(B, T, C) == (T, C)`` would ask ``B == T`` and guard a trace on B != T (a retrace when a batch's length
    equals its size) for a question the ranks answer."""
    return len(a) == len(b) and a == b


def size_arg(x):
    """``x`` as a size argument of generated code: a SymInt kept symbolic (a program lowered once for every
    size binds it per call: ``codegen/program/sized.py``), anything else as a plain int."""
    return x if type(x) is SymInt else int(x)


def hint_of(x):
    """The value ``x`` has in the call that was traced, recording no guard: for costs and statistics, which may
    be approximate, never for decisions the generated code relies on."""
    t = type(x)
    return x.hint if t is SymInt or t is SymFloat else x


def size_key(x):
    """A hashable key of size ``x`` by its form, not its value (a symbolic size's polynomial): the workspace
    reuses a slot for a value of the same byte size in every call, not only in the traced one."""
    return ("sym", x.poly) if type(x) is SymInt else x


def concretize(x, values: dict):
    """``x`` (a size, a shape, params: tuples, lists, dicts, slices) with every symbol replaced by its value."""
    t = type(x)
    if t is SymInt:
        return evaluate(x.poly, values)
    if t is SymFloat:
        return _feval(x.expr, values)
    if t is tuple:
        return tuple(concretize(v, values) for v in x) if any(_has(v) for v in x) else x
    if t is list:
        return [concretize(v, values) for v in x]
    if t is dict:
        return {k: concretize(v, values) for k, v in x.items()}
    if t is slice:
        return slice(concretize(x.start, values), concretize(x.stop, values), concretize(x.step, values))
    return x


def rehint(x, values: dict):
    """``x`` (as ``concretize`` takes) with every symbolic value kept symbolic but hinted at ``values``: the
    decisions a later walk makes on it (a lowering's) are answered for those sizes."""
    t = type(x)
    if t is SymInt:
        return SymInt(x.poly, evaluate(x.poly, values))
    if t is SymFloat:
        return SymFloat(x.expr, _feval(x.expr, values))
    if t is tuple:
        return tuple(rehint(v, values) for v in x) if any(_has(v) for v in x) else x
    if t is list:
        return [rehint(v, values) for v in x]
    if t is dict:
        return {k: rehint(v, values) for k, v in x.items()}
    if t is slice:
        return slice(rehint(x.start, values), rehint(x.stop, values), rehint(x.step, values))
    return x


def _has(x) -> bool:
    t = type(x)
    if t is SymInt or t is SymFloat:
        return True
    if t is tuple or t is list or isinstance(x, tuple):      # (a jitgrad.Size too)
        return any(_has(v) for v in x)
    if t is dict:
        return any(_has(v) for v in x.values())
    if t is slice:
        return _has(x.start) or _has(x.stop) or _has(x.step)
    return False


has_symbols = _has

__all__ = ["ACTIVE", "COMPARISONS", "ShapeEnv", "SymInt", "SymFloat", "concretize", "evaluate", "has_symbols",
           "hint_of",
           "is_symbolic", "known_equal", "make", "rehint", "same_shape", "size_arg", "size_key",
           "unbacked_symbol"]
