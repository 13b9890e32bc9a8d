"""Kernels straight to LLVM IR, without Numba: the cold build's fast path.

A kernel's text (``loops.py``) is a small, regular subset of Python: a ``kernel(A)`` function reading an int64
argument block, typed pointers (``ptr_f32(A[k])``), ``for i in range(n)`` nests, scalar arithmetic, casts,
selects (``a if c else b``), ``store(p, i, v)``, and calls of ``mathlib``'s straight-line functions.  Numba spends
~70 ms per kernel typing and lowering that (plus ~0.7 s once per process to import and initialise itself); this
module translates the same text to LLVM IR in about a millisecond and lets LLVM optimise it as Numba would (O3,
loop vectorisation, the host CPU's features, the same fast-math flags per instruction), so a cold build of a
typical step needs no Numba at all.

It follows Numba's typing where the kernels rely on it (NumPy scalar promotion: float32 op float32 stays float32,
integers widen to int64, int / int is float64; casts as Numba's ``context.cast``) and refuses everything else:
``translate`` raises ``Unsupported`` for any construct, type mix or mathlib function it does not know, and the
kernel is compiled by Numba as before (``build.compile_numba``).  Parallel (``prange``) kernels always go to Numba.

mathlib's functions are read from ``mathlib.py``'s source (parsed, not imported: importing it imports Numba) and
inlined with their own fast-math flags (``contract`` only), as Numba compiles them.
"""
from __future__ import annotations

import ast
import os
import threading

import numpy as np

STATS = {"kernels_ir": 0, "kernels_refused": 0}     # counted, so tests can check which path built what
_lock = threading.Lock()


class Unsupported(Exception):
    """The kernel's text uses something this translator does not handle: Numba compiles it."""


# ---------------------------------------------------------------------------------------------------- types
# a type is one of these names; pointers are ("ptr", elem)
F32, F64, I64, I32, U8, BOOL = "f32", "f64", "i64", "i32", "u8", "bool"
_FLOATS = (F32, F64)
_INTS = (I64, I32, U8)
_BITS = {I64: 64, I32: 32, U8: 8}
_CASTS = {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "uint8": U8, "bool": BOOL, "bool_": BOOL}
_PTRS = {"ptr_f32": F32, "ptr_f64": F64, "ptr_i64": I64, "ptr_i32": I32, "ptr_b1": U8, "ptr_u8": U8}
_NP_SCALAR = {np.float32: F32, np.float64: F64, np.int64: I64, np.int32: I32, np.uint8: U8, np.bool_: BOOL}
KERNEL_FASTMATH = ("afn", "arcp", "contract", "nsz", "reassoc")
MATHLIB_FASTMATH = ("contract",)


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


class _Translator:
    def __init__(self, name):
        ir = _ir()
        self.ir = ir
        self.module = ir.Module(name=name)
        self.i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [self.i64.as_pointer()])
        self.fn = ir.Function(self.module, fnty, name=name)
        self.fn.attributes.add("nounwind")
        self.entry = self.fn.append_basic_block("entry")
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.alloca_b = ir.IRBuilder(self.entry)
        self.body0 = body
        self.depth = 0

    # ---- module level -------------------------------------------------------------------------------------
    def module_text(self, source: str) -> str:
        tree = ast.parse(source)
        consts, kernel, imported = {}, None, set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                continue
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if node.module == "jitgrad.codegen.mathlib" or node.module in ("numpy", "numba",
                                                                                    "jitgrad.codegen.abi"):
                        imported.add(a.asname or a.name)
                    else:
                        raise Unsupported(f"import from {node.module}")
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                consts[node.targets[0].id] = _const_value(node.value)
                continue
            if isinstance(node, ast.FunctionDef) and node.name == "kernel":
                kernel = node
                continue
            raise Unsupported(f"module statement {type(node).__name__}")
        if kernel is None or len(kernel.args.args) != 1:
            raise Unsupported("no kernel(A)")
        self._check_decorator(kernel)
        self.kernel_consts = consts
        scope = _Scope({kernel.args.args[0].arg: Value(self.fn.args[0], ("ptr", I64))}, consts, KERNEL_FASTMATH,
                       ssa=False)
        self.block(kernel.body, scope)
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.alloca_b.branch(self.body0)
        return str(self.module)

    def _check_decorator(self, fn):
        if len(fn.decorator_list) != 1:
            raise Unsupported("decorator")
        d = fn.decorator_list[0]
        if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "cfunc"):
            raise Unsupported("decorator")
        kw = {k.arg: k.value for k in d.keywords}
        par = kw.get("parallel")
        if not (isinstance(par, ast.Constant) and par.value is False):
            raise Unsupported("parallel kernel")
        em = kw.get("error_model")
        if not (isinstance(em, ast.Constant) and em.value == "numpy"):
            raise Unsupported("error model")
        fm = kw.get("fastmath")
        if not isinstance(fm, ast.Set) or sorted(e.value for e in fm.elts) != sorted(KERNEL_FASTMATH):
            raise Unsupported("fastmath flags")

    # ---- statements ---------------------------------------------------------------------------------------
    def block(self, stmts, scope):
        for s in stmts:
            if self.b.block.is_terminated:
                raise Unsupported("code after a return")
            self.stmt(s, scope)

    def stmt(self, s, scope):
        b = self.b
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise Unsupported("chained assignment")
            tgt = s.targets[0]
            if isinstance(tgt, ast.Name):
                self.assign(tgt.id, self.expr(s.value, scope), scope)
            elif isinstance(tgt, ast.Tuple) and all(isinstance(n, ast.Name) for n in tgt.elts):
                if isinstance(s.value, ast.Tuple):
                    got = tuple(self.expr(x, scope) for x in s.value.elts)
                elif isinstance(s.value, ast.Call):
                    got = self.call(s.value, scope)         # a mathlib function returning a tuple
                else:
                    raise Unsupported("tuple assignment")
                if not isinstance(got, tuple) or len(got) != len(tgt.elts):
                    raise Unsupported("tuple unpacking")
                for n, v in zip(tgt.elts, got):
                    self.assign(n.id, v, scope)
            elif isinstance(tgt, ast.Subscript):
                ptr = self.expr(tgt.value, scope)
                if not isinstance(ptr.t, tuple):
                    raise Unsupported("setitem on a non-pointer")
                idx = self.index(tgt.slice, scope)
                val = self.cast(self.expr(s.value, scope), ptr.t[1])
                b.store(val.v, b.gep(ptr.v, [idx]))
            else:
                raise Unsupported("assignment target")
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.target, ast.Name):
                raise Unsupported("augmented assignment target")
            cur = self.name(s.target.id, scope)
            self.assign(s.target.id, self.binop(s.op, cur, self.expr(s.value, scope), scope), scope)
        elif isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return      # a docstring
            if isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name) and s.value.func.id == "store":
                self.store(s.value, scope)
                return
            raise Unsupported("expression statement")
        elif isinstance(s, ast.For):
            self.loop(s, scope)
        elif isinstance(s, ast.If):
            cond = self.truth(self.expr(s.test, scope))
            if s.orelse:
                with b.if_else(cond) as (then, other):
                    with then:
                        self.block(s.body, scope)
                    with other:
                        self.block(s.orelse, scope)
            else:
                with b.if_then(cond):
                    self.block(s.body, scope)
        elif isinstance(s, ast.Pass):
            return
        else:
            raise Unsupported(f"statement {type(s).__name__}")

    def assign(self, name, val, scope):
        if scope.ssa:
            scope.names[name] = val
            return
        cur = scope.names.get(name)
        if cur is None:
            slot = self.alloca_b.alloca(_lltype(val.t), name=name)
            scope.names[name] = cur = ("slot", slot, val.t)
        if not isinstance(cur, tuple) or cur[0] != "slot":
            raise Unsupported(f"assignment to {name}")
        if cur[2] != val.t:
            raise Unsupported(f"{name} changes type ({cur[2]} -> {val.t})")
        self.b.store(val.v, cur[1])

    def loop(self, s, scope):
        b, ir = self.b, self.ir
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 2 and not it.keywords and isinstance(s.target, ast.Name) and not s.orelse):
            raise Unsupported("loop form")
        if scope.ssa:
            raise Unsupported("loop in an inlined function")
        args = [self.cast(self.expr(a, scope), I64) for a in it.args]
        start, stop = (args[0], args[1]) if len(args) == 2 else (Value(ir.Constant(self.i64, 0), I64), args[0])
        name = s.target.id
        cur = scope.names.get(name)
        if cur is None:
            scope.names[name] = cur = ("slot", self.alloca_b.alloca(self.i64, name=name), I64)
        if cur[2] != I64:
            raise Unsupported("loop variable type")
        counter = self.alloca_b.alloca(self.i64, name=f"{name}.next")
        b.store(start.v, counter)
        head = self.fn.append_basic_block(f"{name}.head")
        body = self.fn.append_basic_block(f"{name}.body")
        done = self.fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<", i, stop.v), body, done)
        b.position_at_end(body)
        b.store(i, cur[1])
        b.store(b.add(i, ir.Constant(self.i64, 1)), counter)
        self.block(s.body, scope)
        if not b.block.is_terminated:
            b.branch(head)
        b.position_at_end(done)

    def store(self, call, scope):
        if len(call.args) != 3 or call.keywords:
            raise Unsupported("store form")
        ptr = self.expr(call.args[0], scope)
        if not isinstance(ptr.t, tuple):
            raise Unsupported("store to a non-pointer")
        idx = self.index(call.args[1], scope)
        val = self.cast(self.expr(call.args[2], scope), ptr.t[1])
        self.b.store(val.v, self.b.gep(ptr.v, [idx]))

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
            vals = [self.expr(v, scope) for v in e.values]
            if any(v.t != BOOL for v in vals) or any(_loads(v) for v in e.values[1:]):
                raise Unsupported("and/or of non-bool or loading operands")
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
        funcs, consts = _mathlib()
        fn = funcs.get(fname)
        if fn is None:
            raise Unsupported(f"call of {fname}")
        return self.inline(fn, vals, consts)

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


_BITCASTS = {"f32_as_i32": (F32, I32), "i32_as_f32": (I32, F32), "f64_as_i64": (F64, I64),
             "i64_as_f64": (I64, F64)}


def _callee(f):
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "math"):
        return f"{f.value.id}.{f.attr}"
    return None


def _loads(node) -> bool:
    """Whether evaluating ``node`` reads memory (then it is never speculated)."""
    return any(isinstance(n, ast.Subscript) for n in ast.walk(node))


def _const_value(node):
    """A module-level constant of a kernel: ``np.float32(0.5)``, ``np.int64(-3)``, ``np.float32(float('inf'))``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
            and node.func.value.id == "np" and len(node.args) == 1 and not node.keywords:
        ctor = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
                "uint8": np.uint8, "bool_": np.bool_}.get(node.func.attr)
        if ctor is None:
            raise Unsupported(f"constant np.{node.func.attr}")
        return ctor(_literal(node.args[0]))
    raise Unsupported("module-level value")


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


# ---------------------------------------------------------------------------------------------------- compiling
def symbol(key: str) -> str:
    return f"jitgrad_kernel_{key[:24]}"


def translate(source: str, key: str) -> str:
    """The kernel's LLVM IR (text), or ``Unsupported``."""
    try:
        return _Translator(symbol(key)).module_text(source)
    except Unsupported:
        raise
    except (SyntaxError, KeyError, TypeError, ValueError, AttributeError) as e:   # a form we did not foresee
        raise Unsupported(f"{type(e).__name__}: {e}") from None


_TLS = threading.local()
_TEXTS: dict = {}       # key -> IR text translated by ``translatable`` (compiled next, then dropped)


def _tools():
    """This thread's LLVM context and target machine: threads compile kernels at once, and neither is safe to
    share while it works (LLVM itself runs without the GIL: llvmlite's calls release it)."""
    t = getattr(_TLS, "tools", None)
    if t is None:
        from . import objload
        ll = objload._ll()
        target = ll.Target.from_triple(ll.get_process_triple())
        # the host's target machine as Numba configures its JIT: O3, host CPU and features, static relocations
        tm = target.create_target_machine(cpu=ll.get_host_cpu_name(), features=ll.get_host_cpu_features().flatten(),
                                          opt=3, reloc="static", codemodel="jitdefault")
        t = _TLS.tools = (ll, ll.create_context(), tm)
    return t


def translatable(key: str, source: str) -> bool:
    """Whether the kernel compiles without Numba (its IR is kept for ``compile_kernel``)."""
    if key in _TEXTS:
        return True
    try:
        text = translate(source, key)
    except Unsupported:
        return False
    with _lock:
        _TEXTS[key] = text
    return True


def _optimised(text):
    ll, ctx, tm = _tools()
    m = ll.parse_assembly(text, context=ctx)
    m.triple = ll.get_process_triple()
    m.data_layout = str(tm.target_data)
    m.verify()
    pto = ll.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True       # Numba's defaults (NUMBA_LOOP_VECTORIZE=1, NUMBA_SLP_VECTORIZE=0)
    pto.slp_vectorization = False
    pb = ll.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(m, pb)
    return m, tm


def compile_kernel(key: str, source: str):
    """The kernel's object code (``objstore.Blob``), or None when Numba must compile it (``Unsupported``)."""
    from . import objstore
    with _lock:
        text = _TEXTS.pop(key, None)
    if text is None:
        try:
            text = translate(source, key)
        except Unsupported:
            STATS["kernels_refused"] += 1
            return None
    m, tm = _optimised(text)
    obj = tm.emit_object(m)
    with _lock:
        STATS["kernels_ir"] += 1
    return objstore.Blob(key, symbol(key), obj, [])


def assembly(source: str, key: str = "0" * 64) -> str:
    """The kernel's machine code as assembly text (for tests and ``source()``-style introspection)."""
    m, tm = _optimised(translate(source, key))
    return tm.emit_assembly(m)


__all__ = ["translate", "translatable", "compile_kernel", "assembly", "Unsupported", "STATS"]
