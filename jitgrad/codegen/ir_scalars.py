"""Scalar expressions of generated kernels as LLVM IR, typed as Numba types them (``ir_loops.py``'s half that
knows Python's scalar semantics).

Types are NumPy's scalar types as Numba sees them: float32 op float32 stays float32, integer arithmetic widens to
int64 (Numba's machine integer), float32 with uint8 stays float32 and with a wider integer becomes float64, int /
int is float64 (checked against Numba 0.68 in ``tests/test_ir_loops.py``); casts follow Numba's ``context.cast``.
Anything else raises ``Unsupported`` and the kernel goes to Numba.

``mathlib``'s straight-line functions are read from ``mathlib.py``'s source (parsed, not imported: importing it
imports Numba) and inlined with their own fast-math flags (``contract`` only), as Numba compiles them; loops
over literal ranges in them (Horner steps over a coefficient table) are unrolled.
"""
from __future__ import annotations

import ast
import os

import numpy as np

from .loops import FASTMATH


class Unsupported(Exception):
    """The kernel's text uses something the translator does not handle: Numba compiles it."""


# ---------------------------------------------------------------------------------------------------- types
# a type is one of these names; pointers are ("ptr", elem)
F32, F64, I64, I32, U8, BOOL = "f32", "f64", "i64", "i32", "u8", "bool"
_FLOATS = (F32, F64)
_INTS = (I64, I32, U8)
_BITS = {I64: 64, I32: 32, U8: 8}
_CASTS = {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "uint8": U8, "bool": BOOL, "bool_": BOOL}
_PTRS = {"ptr_f32": F32, "ptr_f64": F64, "ptr_i64": I64, "ptr_i32": I32, "ptr_b1": U8, "ptr_u8": U8}
_NP_SCALAR = {np.float32: F32, np.float64: F64, np.int64: I64, np.int32: I32, np.uint8: U8, np.bool_: BOOL}
KERNEL_FASTMATH = tuple(sorted(FASTMATH))      # the flags the generators write on a kernel (loops.FASTMATH)
MATHLIB_FASTMATH = ("contract",)               # mathlib.FASTMATH (that module imports Numba: not imported here)


def _ir():
    from llvmlite import ir
    return ir


def _lltype(t):
    ir = _ir()
    if isinstance(t, tuple):
        return _lltype(t[1]).as_pointer()
    return {F32: ir.FloatType(), F64: ir.DoubleType(), I64: ir.IntType(64), I32: ir.IntType(32),
            U8: ir.IntType(8), BOOL: ir.IntType(1)}[t]


def _promote(a, b):
    """The result type of a binary operation as Numba types it (checked against Numba 0.68): floats take the wider
    float; integer arithmetic is int64 (Numba widens to the machine integer); float32 with uint8 stays float32,
    with a wider integer it is float64.  Mixes with bools, pointers or two unsigned operands are refused."""
    if a == b and a in _FLOATS:
        return a
    if a in _FLOATS and b in _FLOATS:
        return F64
    if a in _INTS and b in _INTS:
        if a == U8 and b == U8:
            raise Unsupported("unsigned arithmetic (uint64 in Numba)")
        return I64
    fl, it = (a, b) if a in _FLOATS else (b, a)
    if fl in _FLOATS and it in _INTS:
        return F32 if fl == F32 and it == U8 else F64
    raise Unsupported(f"binary operation on {a} and {b}")


class Value:
    __slots__ = ("v", "t")

    def __init__(self, v, t):
        self.v = v
        self.t = t


# ---------------------------------------------------------------------------------------------------- alias scopes
ALIAS_DOMAIN = "jitgrad.kernel.operands"


def tag_alias_class(module, instr, cls: int, n: int) -> None:
    """Scoped-noalias metadata on ``instr``, an access of alias class ``cls`` among ``n`` (``alias_scopes.py``
    says why): ``!alias.scope`` its class, ``!noalias`` every other.  The one builder of this metadata, shared by
    Numba's intrinsics (``alias_scopes.load``/``store_to``) and this translator, so both paths give LLVM the same
    facts.  Fewer than two classes: nothing to say, no metadata."""
    if n < 2:
        return
    ir = _ir()
    domain = module.add_metadata([ir.MetaDataString(module, ALIAS_DOMAIN)])
    scopes = [module.add_metadata([ir.MetaDataString(module, f"{ALIAS_DOMAIN}.{k}"), domain]) for k in range(n)]
    instr.set_metadata("alias.scope", module.add_metadata([scopes[cls]]))
    instr.set_metadata("noalias", module.add_metadata([scopes[k] for k in range(n) if k != cls]))


# ---------------------------------------------------------------------------------------------------- mathlib
_MATHLIB = None


def _mathlib():
    """mathlib's straight-line functions (name -> ast.FunctionDef) and constants, from its source."""
    global _MATHLIB
    if _MATHLIB is not None:
        return _MATHLIB
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mathlib.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    import math
    env = {"np": np, "math": math}
    consts, funcs = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if any(isinstance(d, ast.Name) and d.id == "_jit" for d in node.decorator_list):
                funcs[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets):
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if names - set(env) - {"F", "float", "int", "range", "tuple"}:
                continue       # built from Numba objects or helpers: not a plain constant
            try:
                exec(compile(ast.Module([node], []), path, "exec"), env)     # mathlib's own constant tables
            except Exception:   # noqa: BLE001 - not a constant after all: its users are refused
                continue
    for k, v in env.items():
        if k not in ("np", "math", "__builtins__"):
            consts[k] = v
    _MATHLIB = (funcs, consts)
    return _MATHLIB


# ---------------------------------------------------------------------------------------------------- translator
class _Scope:
    """Names of one function being emitted: kernel variables live in allocas (loops and branches assign them);
    an inlined mathlib function's are SSA values (its body is straight-line)."""

    def __init__(self, names, consts, flags, ssa):
        self.names = names          # name -> Value (SSA) or ("slot", alloca, type)
        self.consts = consts        # module-level constants: name -> Python/NumPy value
        self.flags = flags
        self.ssa = ssa


class ScalarEmitter:
    """Expressions, casts and mathlib calls; ``ir_loops._Translator`` adds statements and loops.  Needs
    ``self.b`` (the IR builder), ``self.ir``, ``self.module`` and ``self.stmt``."""

    def index(self, node, scope):
        i = self.expr(node, scope)
        if i.t not in _INTS:
            raise Unsupported("non-integer index")
        return self.cast(i, I64).v

    # ---- expressions --------------------------------------------------------------------------------------
    def name(self, n, scope):
        v = scope.names.get(n)
        if v is not None:
            if isinstance(v, Value):
                return v
            return Value(self.b.load(v[1]), v[2])
        if n in scope.consts:
            return self.constant(scope.consts[n])
        raise Unsupported(f"name {n}")

    def constant(self, c):
        ir = self.ir
        if isinstance(c, (bool, np.bool_)):
            return Value(ir.Constant(ir.IntType(1), int(bool(c))), BOOL)
        t = _NP_SCALAR.get(type(c))
        if t is None:
            if isinstance(c, float):
                t = F64
            elif isinstance(c, int):
                t = I64
            else:
                raise Unsupported(f"constant of type {type(c).__name__}")
        if t in _FLOATS:
            return Value(ir.Constant(_lltype(t), float(c)), t)
        return Value(ir.Constant(_lltype(t), int(c)), t)

    def expr(self, e, scope):
        b, ir = self.b, self.ir
        if isinstance(e, ast.Name):
            return self.name(e.id, scope)
        if isinstance(e, ast.Constant):
            if isinstance(e.value, (bool, int, float)):
                return self.constant(e.value)
            raise Unsupported("constant")
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "np" and e.attr in ("inf", "nan", "pi", "e"):
                return self.constant(float(getattr(np, e.attr)))
            raise Unsupported("attribute")
        if isinstance(e, ast.BinOp):
            if isinstance(e.op, ast.Pow):       # ``2.0 ** -54``: literals only, a float base (IEEE double as Numba)
                base, ex = _literal(e.left), _literal(e.right)
                if type(base) is not float or type(ex) is not int:
                    raise Unsupported("power")
                return self.constant(base ** ex)
            return self.binop(e.op, self.expr(e.left, scope), self.expr(e.right, scope), scope)
        if isinstance(e, ast.UnaryOp):
            v = self.expr(e.operand, scope)
            if isinstance(e.op, ast.USub):
                if v.t in _FLOATS:
                    return Value(b.fneg(v.v, flags=scope.flags), v.t)
                if v.t in (I64, I32):
                    return Value(b.neg(self.cast(v, I64).v), I64)
                raise Unsupported(f"-{v.t}")
            if isinstance(e.op, ast.Not):
                return Value(b.not_(self.truth(v)), BOOL)
            if isinstance(e.op, ast.Invert) and v.t in (I64, I32):
                return Value(b.not_(self.cast(v, I64).v), I64)
            raise Unsupported("unary operator")
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1:
                raise Unsupported("chained comparison")
            return self.compare(e.ops[0], self.expr(e.left, scope), self.expr(e.comparators[0], scope), scope)
        if isinstance(e, ast.BoolOp):
            if any(_loads(v) for v in e.values[1:]):
                return self.short_circuit(e, scope)
            vals = [self.expr(v, scope) for v in e.values]
            if any(v.t != BOOL for v in vals):
                raise Unsupported("and/or of non-bool operands")
            out = vals[0].v
            for v in vals[1:]:
                out = b.and_(out, v.v) if isinstance(e.op, ast.And) else b.or_(out, v.v)
            return Value(out, BOOL)
        if isinstance(e, ast.IfExp):
            return self.select(e, scope)
        if isinstance(e, ast.Subscript):
            if isinstance(e.value, ast.Name) and isinstance(scope.consts.get(e.value.id), tuple) \
                    and e.value.id not in scope.names:      # a coefficient of a mathlib table
                i = self.expr(e.slice, scope)
                if not isinstance(i.v, self.ir.Constant) or i.t != I64:
                    raise Unsupported("table index not a constant")
                return self.constant(scope.consts[e.value.id][i.v.constant])
            base = self.expr(e.value, scope)
            if isinstance(base.t, tuple):
                return Value(b.load(b.gep(base.v, [self.index(e.slice, scope)])), base.t[1])
            raise Unsupported("subscript of a non-pointer")
        if isinstance(e, ast.Call):
            return self.call(e, scope)
        raise Unsupported(f"expression {type(e).__name__}")

    def select(self, e, scope):
        b = self.b
        cond = self.truth(self.expr(e.test, scope))
        if not (_loads(e.body) or _loads(e.orelse)):
            x, y = self.expr(e.body, scope), self.expr(e.orelse, scope)
            t = x.t if x.t == y.t else _promote(x.t, y.t)
            return Value(b.select(cond, self.cast(x, t).v, self.cast(y, t).v), t)
        if scope.ssa:
            raise Unsupported("a loading select in an inlined function")
        # a load on one side only happens when chosen (an index checked on the other side): branches
        with b.if_else(cond) as (then, other):
            with then:
                x = self.expr(e.body, scope)
                bx = b.block
            with other:
                y = self.expr(e.orelse, scope)
                by = b.block
        if x.t != y.t:
            raise Unsupported("select of two types with loads")
        phi = b.phi(_lltype(x.t))
        phi.add_incoming(x.v, bx)
        phi.add_incoming(y.v, by)
        return Value(phi, x.t)

    def short_circuit(self, e, scope):
        """``a and b`` / ``a or b`` whose later operands read memory: evaluated only when Python would (a
        branch and a phi, as Numba lowers it), so a load guarded by an earlier operand is never speculated."""
        b = self.b
        if scope.ssa:
            raise Unsupported("a loading and/or in an inlined function")
        acc = self.expr(e.values[0], scope)
        if acc.t != BOOL:
            raise Unsupported("and/or of non-bool operands")
        for node in e.values[1:]:
            pred = b.block
            rhs, join = b.append_basic_block("bool.rhs"), b.append_basic_block("bool.join")
            if isinstance(e.op, ast.And):
                b.cbranch(acc.v, rhs, join)
            else:
                b.cbranch(acc.v, join, rhs)
            b.position_at_end(rhs)
            v = self.expr(node, scope)
            if v.t != BOOL:
                raise Unsupported("and/or of non-bool operands")
            rhs_end = b.block
            b.branch(join)
            b.position_at_end(join)
            phi = b.phi(_lltype(BOOL))
            phi.add_incoming(acc.v, pred)
            phi.add_incoming(v.v, rhs_end)
            acc = Value(phi, BOOL)
        return acc

    def truth(self, v):
        b, ir = self.b, self.ir
        if v.t == BOOL:
            return v.v
        if v.t in _INTS:
            return b.icmp_signed("!=", v.v, ir.Constant(v.v.type, 0))
        if v.t in _FLOATS:
            return b.fcmp_unordered("!=", v.v, ir.Constant(v.v.type, 0.0))
        raise Unsupported("truth of a pointer")

    def binop(self, op, x, y, scope):
        b, ir = self.b, self.ir
        if BOOL in (x.t, y.t) and isinstance(op, (ast.Add, ast.Sub, ast.Mult)) \
                and not (isinstance(x.t, tuple) or isinstance(y.t, tuple)):
            # Numba: a bool in +, -, * is an integer (int64) beside an integer or a bool, the float beside a float
            other = y.t if x.t == BOOL else x.t
            t = other if other in _FLOATS else I64
            x, y = self.cast(x, t), self.cast(y, t)
        if isinstance(x.t, tuple) or isinstance(y.t, tuple) or BOOL in (x.t, y.t):
            raise Unsupported("arithmetic on pointers or bools")
        if isinstance(op, ast.Div):
            t = _promote(x.t, y.t)
            if t in _INTS:
                t = F64
            x, y = self.cast(x, t), self.cast(y, t)
            return Value(b.fdiv(x.v, y.v, flags=scope.flags), t)
        t = _promote(x.t, y.t)
        x, y = self.cast(x, t), self.cast(y, t)
        if isinstance(op, (ast.FloorDiv, ast.Mod)) and t == I64:
            return Value(self.floor_divmod(x.v, y.v)[isinstance(op, ast.Mod)], t)
        if t in _FLOATS:
            f = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul}.get(type(op))
            if f is None:
                raise Unsupported(f"float {type(op).__name__}")
            return Value(f(x.v, y.v, flags=scope.flags), t)
        f = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul, ast.BitAnd: b.and_, ast.BitOr: b.or_,
             ast.BitXor: b.xor, ast.LShift: b.shl, ast.RShift: b.ashr}.get(type(op))
        if f is None:
            raise Unsupported(f"integer {type(op).__name__}")
        return Value(f(x.v, y.v), t)

    def floor_divmod(self, x, y):
        """Python's ``x // y`` and ``x % y`` on int64 as Numba computes them under ``error_model='numpy'``:
        the quotient rounded down, the remainder taking the divisor's sign; both 0 when ``y`` is 0 and when
        ``x`` is the least int64 and ``y`` is -1 (Numba's branches; here the divisor is made 1 in those cases, so
        no instruction ever divides by zero or overflows, and the results are chosen by selects)."""
        b, ir = self.b, self.ir
        i64 = ir.IntType(64)
        zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
        bad = b.or_(b.icmp_signed("==", y, zero),
                    b.and_(b.icmp_signed("==", x, ir.Constant(i64, -(1 << 63))),
                           b.icmp_signed("==", y, ir.Constant(i64, -1))))
        d = b.select(bad, one, y)
        q, r = b.sdiv(x, d), b.srem(x, d)
        fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(d, r), zero))
        q = b.select(fix, b.sub(q, one), q)
        r = b.select(fix, b.add(r, d), r)
        return b.select(bad, zero, q), b.select(bad, zero, r)

    def compare(self, op, x, y, scope):
        b = self.b
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}.get(type(op))
        if sym is None or isinstance(x.t, tuple) or isinstance(y.t, tuple):
            raise Unsupported("comparison")
        if x.t == BOOL and y.t == BOOL and sym in ("==", "!="):
            return Value(b.icmp_unsigned(sym, x.v, y.v), BOOL)
        t = _promote(x.t, y.t) if BOOL not in (x.t, y.t) else None
        if t is None:
            raise Unsupported("comparison with a bool")
        x, y = self.cast(x, t), self.cast(y, t)
        if t in _FLOATS:
            if sym == "!=":
                return Value(b.fcmp_unordered("!=", x.v, y.v), BOOL)
            return Value(b.fcmp_ordered(sym, x.v, y.v), BOOL)
        return Value(b.icmp_signed(sym, x.v, y.v), BOOL)

    def cast(self, v, t):
        """Numba's ``context.cast`` for the scalar types the kernels use."""
        b, ir = self.b, self.ir
        if v.t == t:
            return v
        if isinstance(v.t, tuple) or isinstance(t, tuple):
            raise Unsupported("pointer cast")
        lt = _lltype(t)
        if t == BOOL:
            return Value(self.truth(v), BOOL)
        if v.t == BOOL:
            if t in _FLOATS:
                return Value(b.uitofp(v.v, lt), t)
            return Value(b.zext(v.v, lt), t)
        if v.t in _FLOATS and t in _FLOATS:
            return Value(b.fpext(v.v, lt) if t == F64 else b.fptrunc(v.v, lt), t)
        if v.t in _INTS and t in _FLOATS:
            return Value(b.uitofp(v.v, lt) if v.t == U8 else b.sitofp(v.v, lt), t)
        if v.t in _FLOATS and t in _INTS:
            if t == U8:
                raise Unsupported("float to uint8")
            return Value(b.fptosi(v.v, lt), t)
        if v.t in _INTS and t in _INTS:
            if _BITS[t] < _BITS[v.t]:
                return Value(b.trunc(v.v, lt), t)
            return Value(b.zext(v.v, lt) if v.t == U8 else b.sext(v.v, lt), t)
        raise Unsupported(f"cast {v.t} -> {t}")

    def call(self, e, scope):
        b, ir = self.b, self.ir
        if e.keywords:
            raise Unsupported("keyword arguments")
        fname = _callee(e.func)
        if fname is None:
            raise Unsupported("call of an expression")
        args = e.args
        target = _CASTS.get(fname) or _CASTS.get(fname.replace("np.", "", 1))
        if fname == "F" and scope.ssa:
            target = F32
        if target is not None:
            if len(args) != 1:
                raise Unsupported("cast arity")
            if fname in ("float", "int"):
                raise Unsupported("Python float()/int()")
            return self.cast(self.expr(args[0], scope), target)
        if fname in _PTRS:
            if len(args) != 1:
                raise Unsupported("pointer arity")
            addr = self.cast(self.expr(args[0], scope), I64)
            elem = _PTRS[fname]
            return Value(b.inttoptr(addr.v, _lltype(elem).as_pointer()), ("ptr", elem))
        if fname == "load":
            return self.scoped_load(args, scope)
        vals = [self.expr(a, scope) for a in args]
        if fname == "abs" and len(vals) == 1:
            v = vals[0]
            if v.t in _FLOATS:
                return Value(self._intrinsic("llvm.fabs", v.t, [v.v]), v.t)
            raise Unsupported("abs of a non-float")
        if fname == "math.sqrt" and len(vals) == 1:
            v = self.cast(vals[0], F64) if vals[0].t not in _FLOATS else vals[0]
            return Value(self._intrinsic("llvm.sqrt", v.t, [v.v]), v.t)
        if fname in _BITCASTS and len(vals) == 1:
            src, dst = _BITCASTS[fname]
            if vals[0].t != src:
                raise Unsupported("bitcast type")
            return Value(b.bitcast(vals[0].v, _lltype(dst)), dst)
        if fname in ("fma_f32", "fma_f64") and len(vals) == 3:
            t = F32 if fname == "fma_f32" else F64
            if any(v.t != t for v in vals):
                raise Unsupported("fma types")
            return Value(self._intrinsic("llvm.fma", t, [v.v for v in vals]), t)
        if fname in _ROUNDING and len(vals) == 1 and vals[0].t in _FLOATS:
            return Value(self._intrinsic(_ROUNDING[fname], vals[0].t, [vals[0].v]), vals[0].t)
        if fname == "np.copysign" and len(vals) == 2 and vals[0].t in _FLOATS and vals[1].t == vals[0].t:
            return Value(self._intrinsic("llvm.copysign", vals[0].t, [v.v for v in vals]), vals[0].t)
        if fname == "np.fmod" and len(vals) == 2 and vals[0].t in _FLOATS and vals[1].t == vals[0].t:
            # IEEE fmod is exact: LLVM's frem gives libm's bits (Numba's np.fmod)
            return Value(self.b.frem(vals[0].v, vals[1].v, flags=scope.flags), vals[0].t)
        if fname in _LIBM and len(vals) == _LIBM_ARITY[fname]:
            return self.libm_call(fname, vals, scope)
        funcs, consts = _mathlib()
        fn = funcs.get(fname)
        if fn is None:
            raise Unsupported(f"call of {fname}")
        return self.inline(fn, vals, consts)

    def scoped_load(self, args, scope):
        """``load(p, i, c, n)`` (``alias_scopes.load``): ``p[i]`` tagged as an access of alias class ``c``
        among ``n``, both literals, exactly as the Numba intrinsic emits it."""
        if len(args) != 4:
            raise Unsupported("load form")
        ptr = self.expr(args[0], scope)
        if not isinstance(ptr.t, tuple):
            raise Unsupported("load from a non-pointer")
        idx = self.index(args[1], scope)
        cls, n = alias_literals(args[2], args[3])
        instr = self.b.load(self.b.gep(ptr.v, [idx]))
        tag_alias_class(self.module, instr, cls, n)
        return Value(instr, ptr.t[1])

    def libm_call(self, fname, vals, scope):
        """``math.atan2`` / ``np.nextafter`` / ``math.hypot`` and the one-argument libm functions in ``_LIBM`` of
        floats of one type: a call of the C library's function, as Numba lowers them (its ``numba_nextafter[f]`` helpers only call libm's ``nextafter[f]``; calling libm
        directly keeps Numba's helper library, and so Numba's runtime, out of the loaded kernel).  A declared
        pure function, the call carrying the caller's fast-math flags (Numba's ``FastFloatCallVisitor``)."""
        t = vals[0].t
        if t not in _FLOATS or any(v.t != t for v in vals) or t not in _LIBM[fname]:
            raise Unsupported(f"{fname} of {', '.join(str(v.t) for v in vals)}")
        name = _LIBM[fname][t]
        lt = _lltype(t)
        fn = self.module.globals.get(name)
        if fn is None:
            fn = self.ir.Function(self.module, self.ir.FunctionType(lt, [lt] * len(vals)), name=name)
            fn.attributes.add("readonly")
            fn.attributes.add("nounwind")
        return Value(self.b.call(fn, [v.v for v in vals], fastmath=scope.flags), t)

    def unrolled(self, s, scope):
        """``for i in range(a, b, c)`` over literals in a mathlib function (a polynomial's Horner steps over a
        coefficient tuple): unrolled, ``i`` a constant in each copy, as LLVM unrolls Numba's loop."""
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 3 and isinstance(s.target, ast.Name) and not s.orelse):
            raise Unsupported("loop form in an inlined function")
        bounds = [_literal(a) for a in it.args]
        if not all(type(x) is int for x in bounds) or len(range(*bounds)) > 64:
            raise Unsupported("loop bounds in an inlined function")
        for i in range(*bounds):
            scope.names[s.target.id] = self.constant(i)
            for st in s.body:
                if not isinstance(st, (ast.Assign, ast.AugAssign)):
                    raise Unsupported("loop body in an inlined function")
                self.stmt(st, scope)

    def _intrinsic(self, name, t, args):
        ir = self.ir
        lt = _lltype(t)
        fn = self.module.declare_intrinsic(name, [lt], ir.FunctionType(lt, [lt] * len(args)))
        return self.b.call(fn, args)

    def inline(self, fn, vals, consts):
        """A mathlib function's body, emitted in place with its own fast-math flags."""
        self.depth += 1
        if self.depth > 8:
            raise Unsupported("inlining depth")
        params = [a.arg for a in fn.args.args]
        if len(params) != len(vals) or fn.args.vararg or fn.args.kwonlyargs or fn.args.defaults:
            raise Unsupported(f"{fn.name}'s arguments")
        scope = _Scope(dict(zip(params, vals)), consts, MATHLIB_FASTMATH, ssa=True)
        result = None
        body = fn.body
        for k, s in enumerate(body):
            if isinstance(s, ast.Return):
                if k != len(body) - 1 or s.value is None:
                    raise Unsupported(f"{fn.name}: return before the end")
                if isinstance(s.value, ast.Tuple):
                    result = tuple(self.expr(x, scope) for x in s.value.elts)
                else:
                    result = self.expr(s.value, scope)
            elif isinstance(s, ast.For):
                self.unrolled(s, scope)
            elif isinstance(s, (ast.Assign, ast.AugAssign)) or (isinstance(s, ast.Expr) and isinstance(
                    s.value, ast.Constant)):
                self.stmt(s, scope)
            else:
                raise Unsupported(f"{fn.name}: {type(s).__name__}")
        self.depth -= 1
        if result is None:
            raise Unsupported(f"{fn.name} returns nothing")
        return result


# C library functions mathlib calls, as Numba lowers them: Python's spelling -> the symbol per float type (mathlib
# calls hypot, erfc and lgamma on float64 only)
_LIBM = {"math.atan2": {F32: "atan2f", F64: "atan2"}, "np.nextafter": {F32: "nextafterf", F64: "nextafter"},
         "math.hypot": {F64: "hypot"},
         **{f"math.{f}": {F64: f} for f in ("erfc", "lgamma", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                            "acosh", "atanh")}}
_LIBM_ARITY = {name: 2 if name in ("math.atan2", "np.nextafter", "math.hypot") else 1 for name in _LIBM}

# rounding to an integral value: exact operations, so LLVM's intrinsics give Numba's (libm's) bits
_ROUNDING = {"np.floor": "llvm.floor", "np.ceil": "llvm.ceil", "np.trunc": "llvm.trunc", "np.rint": "llvm.rint"}

_BITCASTS = {"f32_as_i32": (F32, I32), "i32_as_f32": (I32, F32), "f64_as_i64": (F64, I64),
             "i64_as_f64": (I64, F64)}


def _callee(f):
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "math"):
        return f"{f.value.id}.{f.attr}"
    return None


def _loads(node) -> bool:
    """Whether evaluating ``node`` reads memory (then it is never speculated): a subscript or a scoped
    ``load(...)``."""
    return any(isinstance(n, ast.Subscript) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                                                and n.func.id == "load") for n in ast.walk(node))


def alias_literals(cls_node, n_node):
    """The alias class and class count of a scoped access: integer literals (Numba's intrinsics type them as
    literals; anything else does not compile there either), the class in range."""
    cls, n = _literal(cls_node), _literal(n_node)
    if type(cls) is not int or type(n) is not int:
        raise Unsupported("alias class not an integer literal")
    if not 0 <= cls < max(n, 1):
        raise Unsupported(f"alias class {cls} out of range for {n} classes")
    return cls, n


def _literal(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and \
            node.args[0].value in ("inf", "-inf", "nan"):
        return float(node.args[0].value)
    raise Unsupported("literal")
