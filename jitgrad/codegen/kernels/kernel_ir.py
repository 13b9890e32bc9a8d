"""The typed kernel IR: what every CPU loop generator builds, and what the renderers and the interpreter read.

A kernel is a ``KernelIR``: a body of statements over one implicit argument, ``A``, the int64 argument block
of ``abi.py`` (sizes, then per operand its address and element strides).  Its pieces:

- **values** (``Val``): typed scalar expressions, built as objects (never as text).  Types are the scalar types
  Numba gives the same arithmetic (``F32``, ``F64``, ``I64``, ``I32``, ``U8``, ``U64``, ``BOOL``) and pointers
  (``Ptr(elem)``).  Operators are overloaded (``x + y``, ``x < y``, ``-x``, ``abs(x)``, ``p[i]``) and typed as
  Numba types them (``promote``): float32 op float32 stays float32, integer arithmetic widens to int64,
  int / int is float64, and so on, so a kernel computes the same bits whichever renderer compiles it.
  ``select``, ``cast``, ``bitcast``, ``intrinsic`` (llvm.fabs, llvm.fma, ...), ``libm`` calls, table lookups
  and ``math`` calls (a row of ``math_table.MATH`` at a precision, expanded by each renderer: mathlib's IR
  builders on the CPU, the table's inline CUDA form on the GPU) complete the set.  Each arithmetic value carries
  the fast-math flags it was built under (``fastmath``): the kernel's, or mathlib's ``contract`` only.
- **statements**: ``Assign`` (a kernel variable, ``Var``: loops and branches assign them), ``Store`` (with the
  operand's alias class: ``alias_scopes.py``), ``For`` (serial, or the parallel outer loop with its sum
  reductions named), ``If``, ``Continue`` and ``Claim`` (an atomic claim of a slot by the least key: a parallel
  loop's first error record).

``Builder`` builds a kernel statement by statement (``with b.loop(...)``, ``with b.if_(...)``);
``kernel_listing.format_kernel`` prints one readably.  ``kernel_interp.py`` runs one (the reference), ``ir_loops.py``
renders one to LLVM IR and ``numba_render.py`` to Numba-compilable text.  Nothing here imports Numba or
llvmlite.
"""
from __future__ import annotations

import contextlib

import numpy as np

# ---------------------------------------------------------------------------------------------------- types
F32, F64, I64, I32, U8, U64, BOOL = "f32", "f64", "i64", "i32", "u8", "u64", "bool"
FLOATS = (F32, F64)
INTS = (I64, I32, U8, U64)
UNSIGNED = (U8, U64)
BITS = {I64: 64, I32: 32, U8: 8, U64: 64, BOOL: 1, F32: 32, F64: 64}
NP = {F32: np.float32, F64: np.float64, I64: np.int64, I32: np.int32, U8: np.uint8, U64: np.uint64,
      BOOL: np.bool_}
OF_DTYPE = {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "uint8": U8, "bool": BOOL}
_OF_NP = {np.float32: F32, np.float64: F64, np.int64: I64, np.int32: I32, np.uint8: U8, np.uint64: U64,
          np.bool_: BOOL}
# the flags a kernel's own arithmetic carries (never nnan/ninf: NaN checks must survive), and mathlib's
KERNEL_FASTMATH = ("afn", "arcp", "contract", "nsz", "reassoc")
MATHLIB_FASTMATH = ("contract",)


class Ptr(tuple):
    """A pointer type: ``Ptr(F32)``."""

    def __new__(cls, elem):
        return super().__new__(cls, ("ptr", elem))

    @property
    def elem(self):
        return self[1]

    def __str__(self):
        return f"{self[1]}*"


def is_ptr(t) -> bool:
    return isinstance(t, tuple)


def promote(a, b):
    """The result type of a binary operation on ``a`` and ``b`` as Numba types it: floats take the wider float;
    integer arithmetic is int64 (two unsigned: uint64); float32 with uint8 stays float32, with a wider integer it
    is float64; uint64 with a signed integer is float64."""
    if a == b and a in FLOATS:
        return a
    if a in FLOATS and b in FLOATS:
        return F64
    if a in INTS and b in INTS:
        if a in UNSIGNED and b in UNSIGNED:
            return U64
        if U64 in (a, b):
            return F64
        return I64
    fl, it = (a, b) if a in FLOATS else (b, a)
    if fl in FLOATS and it in INTS:
        return F32 if fl == F32 and it == U8 else F64
    raise TypeError(f"kernel IR: no arithmetic on {a} and {b}")


# ---------------------------------------------------------------------------------------------------- values
_FM = [KERNEL_FASTMATH]     # the flags values are built under (``fastmath``)


@contextlib.contextmanager
def fastmath(flags):
    """Values built inside carry ``flags`` (mathlib's functions are built under ``MATHLIB_FASTMATH``)."""
    _FM.append(tuple(flags))
    try:
        yield
    finally:
        _FM.pop()


class Val:
    """A typed scalar expression.  ``op`` names the operation, ``args`` its operands (Vals), ``t`` its type,
    ``attr`` what else it needs (a constant's value, a variable, an operator, a callee), ``fm`` its fast-math
    flags.  ``value``: for a literal operand of a scalar body, the Python value (an OpDef may specialise on it,
    as NumPy and torch do: ``x ** 0.5`` is ``sqrt``)."""
    __slots__ = ("op", "args", "t", "attr", "fm", "value", "__weakref__")

    def __init__(self, op, args, t, attr=None, fm=None):
        self.op, self.args, self.t, self.attr = op, tuple(args), t, attr
        self.fm = _FM[-1] if fm is None else fm
        self.value = None

    __hash__ = object.__hash__
    __array_ufunc__ = None      # NumPy scalars defer to our operators (np.float32(1) * v builds IR)

    def __repr__(self):
        return f"Val({expr_text(self)}: {self.t})"

    def __bool__(self):
        raise TypeError("kernel IR: a value has no truth at build time (use select / If)")

    # arithmetic (typed as Numba: ``binop``)
    def __add__(self, o): return binop("+", self, o)
    def __radd__(self, o): return binop("+", o, self)
    def __sub__(self, o): return binop("-", self, o)
    def __rsub__(self, o): return binop("-", o, self)
    def __mul__(self, o): return binop("*", self, o)
    def __rmul__(self, o): return binop("*", o, self)
    def __truediv__(self, o): return binop("/", self, o)
    def __rtruediv__(self, o): return binop("/", o, self)
    def __floordiv__(self, o): return binop("//", self, o)
    def __rfloordiv__(self, o): return binop("//", o, self)
    def __mod__(self, o): return binop("%", self, o)
    def __rmod__(self, o): return binop("%", o, self)
    def __and__(self, o): return binop("&", self, o)
    def __rand__(self, o): return binop("&", o, self)
    def __or__(self, o): return binop("|", self, o)
    def __ror__(self, o): return binop("|", o, self)
    def __xor__(self, o): return binop("^", self, o)
    def __rxor__(self, o): return binop("^", o, self)
    def __lshift__(self, o): return binop("<<", self, o)
    def __rlshift__(self, o): return binop("<<", o, self)
    def __rshift__(self, o): return binop(">>", self, o)
    def __rrshift__(self, o): return binop(">>", o, self)
    def __pow__(self, o): return binop("**", self, o)
    def __lt__(self, o): return compare("<", self, o)
    def __le__(self, o): return compare("<=", self, o)
    def __gt__(self, o): return compare(">", self, o)
    def __ge__(self, o): return compare(">=", self, o)
    def __eq__(self, o): return compare("==", self, o)
    def __ne__(self, o): return compare("!=", self, o)

    def __neg__(self):
        if self.t in FLOATS:
            return Val("neg", (self,), self.t)
        if self.t in INTS or self.t == BOOL:
            return Val("neg", (cast(self, I64),), I64)
        raise TypeError(f"kernel IR: -{self.t}")

    def __invert__(self):
        if self.t in (I64, I32):
            return Val("invert", (cast(self, I64),), I64)
        raise TypeError(f"kernel IR: ~{self.t} (use not_ for bools)")

    def __abs__(self):
        if self.t in FLOATS:
            return intrinsic("fabs", self)
        if self.t in INTS:
            x = cast(self, I64)
            return select(x < 0, -x, x)
        raise TypeError(f"kernel IR: abs of {self.t}")

    def __getitem__(self, idx):
        """``p[i]``: a plain load of pointer ``p``'s element ``i``."""
        return load(self, idx)

    def ptr(self, elem):
        """This int64 (an address) as a pointer to ``elem``s."""
        return Val("ptr", (cast(self, I64),), Ptr(elem))


def const(value, t=None) -> Val:
    """A constant: typed as Numba types the literal (Python int -> int64, float -> float64, bool -> bool,
    NumPy scalars as themselves), or as ``t``."""
    if t is None:
        if isinstance(value, (bool, np.bool_)):
            t = BOOL
        else:
            t = _OF_NP.get(type(value))
            if t is None:
                if isinstance(value, float):
                    t = F64
                elif isinstance(value, int):
                    t = I64
                else:
                    raise TypeError(f"kernel IR: a constant of type {type(value).__name__}")
    if t == BOOL:
        v = bool(value)
    elif t in FLOATS:
        v = float(NP[t](value))
    else:
        v = int(value)
    c = Val("const", (), t, v)
    c.value = value
    return c


def val(x) -> Val:
    return x if isinstance(x, Val) else const(x)


def truth(x) -> Val:
    """``x`` as a bool (Python's truth: nonzero)."""
    x = val(x)
    return x if x.t == BOOL else cast(x, BOOL)


def binop(op, x, y) -> Val:
    x, y = val(x), val(y)
    if op == "**":
        raise TypeError("kernel IR: ** (use a math call)")
    if is_ptr(x.t) or is_ptr(y.t):
        raise TypeError("kernel IR: arithmetic on a pointer")
    if BOOL in (x.t, y.t):
        if op in ("&", "|", "^") and x.t == y.t == BOOL:
            return Val("bin", (x, y), BOOL, op)
        # Numba: a bool in arithmetic is an integer (int64) beside an integer or a bool, the float beside a float
        other = y.t if x.t == BOOL else x.t
        t = other if other in FLOATS else I64
        x, y = cast(x, t), cast(y, t)
    if op == "/":
        t = promote(x.t, y.t)
        if t in INTS:
            t = F64
        return Val("bin", (cast(x, t), cast(y, t)), t, op)
    t = promote(x.t, y.t)
    if t in FLOATS and op not in ("+", "-", "*", "//", "%"):
        raise TypeError(f"kernel IR: float {op}")
    return Val("bin", (cast(x, t), cast(y, t)), t, op)


def compare(op, x, y) -> Val:
    x, y = val(x), val(y)
    if x.t == BOOL and y.t == BOOL:
        return Val("cmp", (x, y), BOOL, op)
    if BOOL in (x.t, y.t):
        x, y = cast(x, I64), cast(y, I64)
    t = promote(x.t, y.t)
    return Val("cmp", (cast(x, t), cast(y, t)), BOOL, op)


def not_(x) -> Val:
    return Val("not", (truth(x),), BOOL)


def and_(x, y) -> Val:
    return Val("bin", (truth(x), truth(y)), BOOL, "&")


def or_(x, y) -> Val:
    return Val("bin", (truth(x), truth(y)), BOOL, "|")


def select(c, x, y) -> Val:
    """``x if c else y`` (both sides computed: they are pure)."""
    c, x, y = truth(c), val(x), val(y)
    t = x.t if x.t == y.t else promote(x.t, y.t)
    return Val("select", (c, cast(x, t), cast(y, t)), t)


def cast(x, t) -> Val:
    """``x`` converted to ``t`` as Numba's ``context.cast`` converts (a bool is its truth)."""
    x = val(x)
    if x.t == t:
        return x
    if is_ptr(x.t) or is_ptr(t):
        raise TypeError("kernel IR: pointer cast")
    if x.op == "const":
        v = x.attr
        if t == BOOL:
            return const(bool(v), BOOL)
        if t in FLOATS and x.t not in FLOATS or (t in FLOATS and x.t in FLOATS):
            return const(NP[t](v), t)
    return Val("cast", (x,), t)


def bitcast(x, t) -> Val:
    x = val(x)
    if BITS[x.t] != BITS[t]:
        raise TypeError(f"kernel IR: bitcast {x.t} -> {t}")
    return Val("bitcast", (x,), t)


def intrinsic(name, *args) -> Val:
    """An LLVM intrinsic of one float type (``fabs``, ``sqrt``, ``floor``, ``ceil``, ``trunc``, ``rint``,
    ``copysign``, ``fma``) or ``frem`` (IEEE fmod, exact)."""
    args = [val(a) for a in args]
    t = args[0].t
    if t not in FLOATS or any(a.t != t for a in args):
        raise TypeError(f"kernel IR: {name} of {[a.t for a in args]}")
    return Val("intr", args, t, name)


def libm(name, *args) -> Val:
    """A call of the C library's ``name`` (atan2, nextafter, hypot, erfc, lgamma, asin, ...) on floats of one
    type (the symbol per type: ``ir_loops.LIBM``)."""
    args = [val(a) for a in args]
    t = args[0].t
    if t not in FLOATS or any(a.t != t for a in args):
        raise TypeError(f"kernel IR: {name} of {[a.t for a in args]}")
    return Val("libm", args, t, name)


def lookup(table, idx) -> Val:
    """``table[idx]`` of a constant NumPy table (a mathlib coefficient array)."""
    idx = cast(val(idx), I64)
    return Val("table", (idx,), _OF_NP[table.dtype.type], table)


def math_call(name, precision, args, t, dtype=None) -> Val:
    """A row of the math table (``math_table.MATH[name]``) at ``precision`` (f32 | f64 | i64), of type ``t``,
    asked by a loop computing in jitgrad dtype ``dtype`` (the CUDA forms' ``{T}``): kept as one call in the IR
    (so a kernel prints as ``tanh_f32(x)``); each renderer expands it."""
    return Val("math", [val(a) for a in args], t, (name, precision, dtype))


def param(t, k) -> Val:
    """A placeholder of type ``t``: argument ``k`` of a function built once and evaluated with values bound
    (the interpreter's expansions of math calls), or a value nobody evaluates (probing a scalar body)."""
    return Val("param", (), t, k)


def load(ptr, idx, alias=None) -> Val:
    """``ptr[idx]``; ``alias``: ``(class, classes)`` of a scoped access (``alias_scopes.py``), or None."""
    ptr = val(ptr)
    if not is_ptr(ptr.t):
        raise TypeError("kernel IR: load from a non-pointer")
    return Val("load", (ptr, cast(val(idx), I64)), ptr.t.elem, alias)


# ---------------------------------------------------------------------------------------------------- statements
class Var:
    """A kernel variable (assigned by loops and branches): ``name`` and type."""
    __slots__ = ("name", "t")

    def __init__(self, name, t):
        self.name, self.t = name, t

    def __repr__(self):
        return self.name


class Assign:
    __slots__ = ("var", "value")

    def __init__(self, var, value):
        self.var, self.value = var, value


class Store:
    __slots__ = ("ptr", "idx", "value", "alias")

    def __init__(self, ptr, idx, value, alias=None):
        self.ptr, self.idx, self.value, self.alias = ptr, idx, value, alias


class For:
    """``for var in range(start, stop, step)`` (step 1 or -1); ``parallel``: the kernel's parallel outer loop, whose
    ``reductions`` (Vars assigned before it, updated in it only as ``r = r + e``) sum across chunks; ``gate``: None
    (it always takes the pool) or ``(elements, per_element)`` (an int64 value, a float): it takes the pool when the
    work reaches ``workpool.takes``'s minimum; ``short``: under ``ir_loops.SHORT_TRIP`` trips, not interleaved."""
    __slots__ = ("var", "start", "stop", "step", "body", "parallel", "reductions", "gate", "short")

    def __init__(self, var, start, stop, step=1, parallel=False, reductions=(), gate=None, short=False):
        self.var, self.start, self.stop, self.step = var, start, stop, step
        self.body, self.parallel, self.reductions = [], parallel, list(reductions)
        self.gate, self.short = (gate if parallel else None), short


class If:
    __slots__ = ("cond", "then", "orelse")

    def __init__(self, cond):
        self.cond, self.then, self.orelse = cond, [], []


class Continue:
    __slots__ = ()


class Claim:
    """``ptr[at] = min(ptr[at], key)`` atomically (signed int64 slots); when that lowered it, ``body`` runs holding the
    spin lock ``ptr[at + 1]`` (0: free) if ``ptr[at]`` still is ``key``.  Of claims racing on one slot, the least
    key's body runs last and alone, so what it stores is whole and the same at every thread count: a parallel loop's
    first index error (``index_checks.record_index_error``).  A claim never lowers a slot to its own key twice."""
    __slots__ = ("ptr", "at", "key", "body")

    def __init__(self, ptr, at, key, body):
        self.ptr, self.at, self.key, self.body = ptr, cast(val(at), I64), cast(val(key), I64), list(body)


class Comment:
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


class KernelIR:
    """One kernel: its statements, whether its outer loop is parallel, and ``A`` (the argument block)."""

    def __init__(self, body, parallel=False):
        self.body, self.parallel = body, parallel


A_PTR = Ptr(I64)


class Builder:
    """Builds a ``KernelIR`` statement by statement.  ``A`` is the argument block (an int64 pointer)."""

    def __init__(self):
        self.body = []
        self._blocks = [self.body]
        self.A = Val("var", (), A_PTR, Var("A", A_PTR))
        self._vars = {"A": self.A.attr}
        self.parallel = False

    def var(self, name, t) -> Var:
        v = self._vars.get(name)
        if v is None:
            v = self._vars[name] = Var(name, t)
        elif v.t != t:
            raise TypeError(f"kernel IR: {name} changes type ({v.t} -> {t})")
        return v

    def let(self, name, value) -> Val:
        """``name = value``; returns a read of ``name``."""
        value = val(value)
        v = self.var(name, value.t)
        self._blocks[-1].append(Assign(v, value))
        return read(v)

    def set(self, v: Var, value):
        self._blocks[-1].append(Assign(v, cast(val(value), v.t)))

    def store(self, ptr, idx, value, alias=None):
        ptr = val(ptr)
        self._blocks[-1].append(Store(ptr, cast(val(idx), I64), cast(val(value), ptr.t.elem), alias))

    def comment(self, text):
        self._blocks[-1].append(Comment(text))

    def continue_(self):
        self._blocks[-1].append(Continue())

    @contextlib.contextmanager
    def loop(self, name, stop, start=0, step=1, parallel=False, reductions=(), gate=None):
        """``for name in range(start, stop, step)``: yields the loop variable's value (``gate``: see ``For``)."""
        v = self.var(name, I64)
        f = For(v, cast(val(start), I64), cast(val(stop), I64), step, parallel, reductions, gate)
        if parallel:
            self.parallel = True
        self._blocks[-1].append(f)
        self._blocks.append(f.body)
        try:
            yield read(v)
        finally:
            self._blocks.pop()

    @contextlib.contextmanager
    def if_(self, cond):
        s = If(truth(cond))
        self._blocks[-1].append(s)
        self._blocks.append(s.then)
        try:
            yield s
        finally:
            self._blocks.pop()

    @contextlib.contextmanager
    def else_(self, s: If):
        self._blocks.append(s.orelse)
        try:
            yield
        finally:
            self._blocks.pop()

    @contextlib.contextmanager
    def capture(self):
        """Statements built inside go to the yielded list, not the kernel (placed later with ``emit``)."""
        out = []
        self._blocks.append(out)
        try:
            yield out
        finally:
            self._blocks.pop()

    def emit(self, stmts):
        self._blocks[-1].extend(stmts)

    def finish(self) -> KernelIR:
        return KernelIR(self.body, self.parallel)


def read(v: Var) -> Val:
    return Val("var", (), v.t, v)


# ---------------------------------------------------------------------------------------------------- printing
_INFIX = {"+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>"}


def expr_text(x: Val) -> str:
    """A value as one readable line (for listings and errors; nothing reads it back)."""
    op = x.op
    if op == "const":
        return str(x.attr) if x.t in (I64, BOOL) else f"{x.attr!r}:{x.t}"
    if op == "var":
        return x.attr.name
    a = [expr_text(y) for y in x.args]
    if op in ("bin", "cmp"):
        return f"({a[0]} {x.attr} {a[1]})"
    if op == "neg":
        return f"-{a[0]}"
    if op == "invert":
        return f"~{a[0]}"
    if op == "not":
        return f"not {a[0]}"
    if op == "select":
        return f"({a[1]} if {a[0]} else {a[2]})"
    if op == "cast":
        return f"{x.t}({a[0]})"
    if op == "bitcast":
        return f"bitcast<{x.t}>({a[0]})"
    if op == "ptr":
        return f"ptr<{x.t.elem}>({a[0]})"
    if op == "load":
        tag = f" !{x.attr[0]}/{x.attr[1]}" if x.attr else ""
        return f"{a[0]}[{a[1]}{tag}]"
    if op == "table":
        return f"table{x.attr.shape}[{a[0]}]"
    if op == "math":
        return f"{x.attr[0]}_{x.attr[1]}({', '.join(a)})"
    return f"{x.attr}({', '.join(a)})"


def walk_values(x: Val, seen=None):
    """Every value ``x`` is built from (``x`` included), each once."""
    seen = set() if seen is None else seen
    stack = [x]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        stack.extend(v.args)


def statement_values(stmts):
    """The top-level values of ``stmts`` and their nested blocks."""
    for s in stmts:
        if isinstance(s, Assign):
            yield s.value
        elif isinstance(s, Store):
            yield from (s.ptr, s.idx, s.value)
        elif isinstance(s, For):
            yield from (s.start, s.stop)
            if s.gate is not None:
                yield s.gate[0]
            yield from statement_values(s.body)
        elif isinstance(s, If):
            yield s.cond
            yield from statement_values(s.then)
            yield from statement_values(s.orelse)
        elif isinstance(s, Claim):
            yield from (s.ptr, s.at, s.key)
            yield from statement_values(s.body)


__all__ = ["KernelIR", "Builder", "Val", "Var", "Ptr", "const", "cast", "bitcast", "select", "not_", "and_", "or_",
           "truth", "intrinsic", "libm", "lookup", "math_call", "param", "load", "read", "fastmath", "Claim",
           "promote", "F32", "F64", "I64", "I32", "U8", "U64", "BOOL", "KERNEL_FASTMATH", "MATHLIB_FASTMATH"]
