"""Kernels to LLVM IR, without Numba: the CPU renderer of the kernel IR (``kernel_ir.py``), the cold build's path.

A kernel's IR (built by ``loops.py``, ``rowwise_loops.py``, ``scan_loops.py``) is rendered through llvmlite's IR
builder: kernel variables in allocas, ``For`` as counted loops (the innermost ones tagged for interleaving:
``INTERLEAVE``), ``If``/``Continue`` as branches, loads and stores tagged with their alias scopes (the same
scoped-noalias metadata as ``alias_scopes.py``'s Numba intrinsics, so the vectoriser needs no runtime overlap
checks), each arithmetic instruction with the fast-math flags its value was built under (never nnan/ninf), and
math calls expanded by ``mathlib``'s IR builders (straight-line, so loops calling them vectorise).  LLVM then
optimises it as Numba would (O3, loop vectorisation, the host CPU's features: ``native/llvm_build.py`` compiles the
text).  Numba spends ~30 ms per kernel typing and lowering the same loop, plus ~0.7 s once per process to import
itself; this takes a few milliseconds.
The results are bit-identical to Numba's build of the kernel's rendered text (``numba_render.py``;
``tests/test_ir_loops.py``).

A parallel kernel (its outer ``For`` is ``parallel``) becomes a chunk function and a kernel that runs the chunks
on the worker pool (``workpool.py``; ``_Renderer.parallel_kernel``).

What this renderer does not lower raises ``Unsupported`` and the kernel is compiled by Numba from its rendered
text (``build.compile_code``): ``intmath``'s ``pow_i64``/``fmod_i64`` (loops and branches), ``philox``'s normal
draws (uniform ones are built by ``philox_ir.py``), float ``//`` and ``%``, unsigned 64-bit division.
"""
from __future__ import annotations

import os
import re

from . import kernel_ir as ki, pool_abi


class Unsupported(Exception):
    """The kernel uses something this renderer does not lower: Numba compiles its rendered text."""


def _ir():
    from llvmlite import ir
    return ir


def lltype(t):
    ir = _ir()
    if ki.is_ptr(t):
        return lltype(t.elem if isinstance(t, ki.Ptr) else t[1]).as_pointer()
    return {ki.F32: ir.FloatType(), ki.F64: ir.DoubleType(), ki.I64: ir.IntType(64), ki.I32: ir.IntType(32),
            ki.U8: ir.IntType(8), ki.U64: ir.IntType(64), ki.BOOL: ir.IntType(1)}[t]


# ---------------------------------------------------------------------------------------------------- alias scopes
ALIAS_DOMAIN = "jitgrad.kernel.operands"


def tag_alias_class(module, instr, cls: int, n: int) -> None:
    """Scoped-noalias metadata on ``instr``, an access of alias class ``cls`` among ``n`` (``alias_scopes.py``
    says why): ``!alias.scope`` its class, ``!noalias`` every other.  The one builder of this metadata, shared by
    Numba's intrinsics (``alias_scopes.load``/``store_to``) and this renderer, so both paths give LLVM the same
    facts.  Fewer than two classes: nothing to say, no metadata."""
    if n < 2:
        return
    # the module's nodes made once per (n, class): ``add_metadata`` would return the same nodes (it deduplicates),
    # after building and hashing every scope again for each access (a 30-operand kernel: ~2,000 calls)
    made = module.__dict__.setdefault("_jitgrad_alias_md", {})
    md = made.get((n, cls))
    if md is None:
        scopes = made.get(n)
        if scopes is None:
            ir = _ir()
            domain = module.add_metadata([ir.MetaDataString(module, ALIAS_DOMAIN)])
            scopes = made[n] = [module.add_metadata([ir.MetaDataString(module, f"{ALIAS_DOMAIN}.{k}"), domain])
                                for k in range(n)]
        md = made[(n, cls)] = (module.add_metadata([scopes[cls]]),
                               module.add_metadata([scopes[k] for k in range(n) if k != cls]))
    instr.set_metadata("alias.scope", md[0])
    instr.set_metadata("noalias", md[1])


# C library functions, as Numba lowers them: the symbol per float type (hypot, erfc, lgamma and the inverse
# trigonometric and hyperbolic functions are called on float64 only)
LIBM = {"atan2": {ki.F32: "atan2f", ki.F64: "atan2"}, "nextafter": {ki.F32: "nextafterf", ki.F64: "nextafter"},
        **{f: {ki.F64: f} for f in ("hypot", "erfc", "lgamma", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                    "acosh", "atanh")}}


# ---------------------------------------------------------------------------------------------------- renderer
class _Renderer:
    def __init__(self, name):
        ir = _ir()
        self.ir = ir
        self.name_ = name
        self.module = ir.Module(name=name)
        self.i64 = ir.IntType(64)
        self._latch_md = self.module.add_metadata([])
        self._tables = {}
        self._start_function(name, [self.i64.as_pointer()])

    def _start_function(self, name, arg_types):
        """Begin emitting function ``name`` (void, ``arg_types``): the builder state below is per function."""
        ir = self.ir
        self.fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arg_types), name=name)
        self.fn.attributes.add("nounwind")
        self.entry = self.fn.append_basic_block("entry")
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.alloca_b = ir.IRBuilder(self.entry)
        self.body0 = body
        self.slots = {}         # Var -> alloca
        self.arg_block = self.fn.args[-1]
        self._loops = []        # per enclosing loop: [head, innermost so far, its back-edge branches]
        return self.fn

    def _finish_function(self):
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.alloca_b.branch(self.body0)

    _STATE = ("fn", "entry", "b", "alloca_b", "body0", "slots", "arg_block", "_loops")

    def kernel(self, k: ki.KernelIR) -> str:
        if k.parallel:
            if not PARALLEL:
                raise Unsupported("parallel kernel (JITGRAD_IR_PARALLEL=0)")
            self.parallel_kernel(k.body)
        else:
            self.block(k.body)
        self._finish_function()
        return _with_loop_ids(str(self.module))

    # ---- parallel kernels -----------------------------------------------------------------------------------
    def parallel_kernel(self, body):
        """A kernel whose outer loop is a parallel ``For`` (a top-level statement): the loop becomes a chunk function
        ``<name>_chunk(task, dims, steps, A)`` running ``task = [start, stop, partials...]`` of it, and the kernel runs
        the statements before the loop, splits it into one chunk per thread of a launch (``workpool.threads``) and hands
        them to the pool (``workpool.py``: ``add_task`` per queue, ``ready``, chunk 0 on the calling thread itself when
        it is one of them, ``synchronize``: ``pool_abi.round_``; one chunk on the calling thread when the pool has one
        thread or the loop one iteration), adds the chunks' partial sums to the loop's ``reductions`` in chunk order
        (each chunk starts them at zero), then runs the statements after it.  A gated loop (``For.gate``) takes the pool
        only when this call's work reaches the pool's minimum; else it runs the same chunks (one, when it sums nothing)
        one after another on the calling thread, so its results are those of the pooled launch."""
        at = [n for n, s in enumerate(body) if isinstance(s, ki.For) and s.parallel]
        if len(at) != 1:
            raise Unsupported("parallel loop placement")
        n = at[0]
        loop = body[n]
        if loop.step != 1 or not (loop.start.op == "const" and loop.start.attr == 0):
            raise Unsupported("parallel loop form")
        _check_reductions(loop, body[n + 1:])
        self.block(body[:n])
        chunk = self._chunk_function(body[:n], loop)
        stop = self.value(loop.stop, {})
        gate = None if loop.gate is None else (self.value(loop.gate[0], {}), float(loop.gate[1]))
        self._dispatch(chunk, stop, loop.reductions, 2 + len(loop.reductions), gate)
        self.block(body[n + 1:])

    def _chunk_function(self, prologue, loop):
        saved = {a: getattr(self, a) for a in self._STATE}
        ir, i64p = self.ir, self.i64.as_pointer()
        fn = self._start_function(self.name_ + "_chunk", [i64p, i64p, i64p, i64p])
        fn.linkage = "internal"
        task = fn.args[0]
        read = _vars_read(loop.body)
        for s in prologue:              # what the loop may read (pointers, sizes, strides), not the stores
            if _stores(s):
                if _assigned(s) & read:
                    raise Unsupported("a parallel loop reads a value set beside a store before it")
            else:
                self.stmt(s)
        for r in loop.reductions:
            self.b.store(ir.Constant(lltype(r.t), 0), self.slot(r))
        b = self.b
        start = b.load(b.gep(task, [ir.Constant(self.i64, 0)]))
        stop = b.load(b.gep(task, [ir.Constant(self.i64, 1)]))
        self.loop(loop, start, stop)
        for j, r in enumerate(loop.reductions):
            slot = self.b.bitcast(self.b.gep(task, [ir.Constant(self.i64, 2 + j)]), lltype(r.t).as_pointer())
            self.b.store(self.b.load(self.slot(r)), slot)
        self._finish_function()
        for attr, v in saved.items():
            setattr(self, attr, v)
        return fn

    def _dispatch(self, chunk, n, reductions, width, gate=None):
        ir, b, i64 = self.ir, self.b, self.i64
        i8p = ir.IntType(8).as_pointer()
        m = self.module
        add = pool_abi.declare(m)[0]
        one = ir.Constant(i64, 1)
        nw = b.load(pool_abi.pool_global(m, "threads"))
        split = b.and_(b.icmp_signed(">", nw, one), b.icmp_signed(">", n, one))
        takes, pooled, pace, work = split, split, None, None
        if gate is not None:        # the threshold per call, and the pool's pacer (pool_abi.launch)
            takes = b.and_(split, pool_abi.takes_pool(b, m, *gate))
            pooled, pace = pool_abi.paced(b, m, takes)
            work = pool_abi.work_of(b, *gate)
        # not pooled: a loop that sums runs the pooled launch's chunks here, in order (the same partial sums)
        ntasks = b.select(split if reductions else pooled, nw, one)
        tasks = b.alloca(i64, size=b.mul(ntasks, ir.Constant(i64, width)), name="tasks")
        a = b.bitcast(self.fn.args[0], i8p)
        null = ir.Constant(i8p, None)

        def each_task(emit):
            t_slot = self.alloca_b.alloca(i64)
            b.store(ir.Constant(i64, 0), t_slot)
            head, body, done = (self.fn.append_basic_block(x) for x in ("task.head", "task.body", "task.done"))
            b.branch(head)
            b.position_at_end(head)
            t = b.load(t_slot)
            b.cbranch(b.icmp_signed("<", t, ntasks), body, done)
            b.position_at_end(body)
            emit(t, b.gep(tasks, [b.mul(t, ir.Constant(i64, width))]))
            b.store(b.add(t, one), t_slot)
            b.branch(head)
            b.position_at_end(done)

        def fill(t, rec):       # chunk t of ntasks: [n * t / ntasks, n * (t + 1) / ntasks)
            b.store(b.sdiv(b.mul(n, t), ntasks), rec)
            b.store(b.sdiv(b.mul(n, b.add(t, one)), ntasks), b.gep(rec, [one]))
            with b.if_then(b.and_(pooled, pool_abi.queued(b, m, t))):
                b.call(add, [b.bitcast(chunk, i8p), b.bitcast(rec, i8p), null, null, a])
        each_task(fill)
        nil = ir.Constant(i64.as_pointer(), None)

        def on_pool():      # chunk 0 on the calling thread when it is the caller's (pool_abi.round_)
            pool_abi.round_(b, m, lambda: b.call(chunk, [tasks, nil, nil, self.fn.args[0]]))

        def on_caller():
            each_task(lambda t, rec: b.call(chunk, [rec, nil, nil, self.fn.args[0]]))
        pool_abi.launch(b, m, pooled, takes, pace, work, on_pool, on_caller, self.alloca_b)
        if reductions:
            def combine(t, rec):
                for j, r in enumerate(reductions):
                    slot = b.bitcast(b.gep(rec, [ir.Constant(i64, 2 + j)]), lltype(r.t).as_pointer())
                    cur, part = b.load(self.slot(r)), b.load(slot)
                    total = b.fadd(cur, part, flags=ki.KERNEL_FASTMATH) if r.t in ki.FLOATS else b.add(cur, part)
                    b.store(total, self.slot(r))
            each_task(combine)

    # ---- statements ---------------------------------------------------------------------------------------
    def slot(self, v: ki.Var):
        s = self.slots.get(v)
        if s is None:
            s = self.slots[v] = self.alloca_b.alloca(lltype(v.t), name=v.name)
        return s

    def block(self, stmts):
        for s in stmts:
            if self.b.block.is_terminated:
                raise Unsupported("code after a continue")
            self.stmt(s)

    def stmt(self, s):
        b = self.b
        if isinstance(s, ki.Assign):
            b.store(self.value(s.value, {}), self.slot(s.var))
        elif isinstance(s, ki.Store):
            memo = {}
            ptr, idx = self.value(s.ptr, memo), self.value(s.idx, memo)
            v = self.value(s.value, memo)
            instr = b.store(v, b.gep(ptr, [idx]))
            if s.alias is not None:
                tag_alias_class(self.module, instr, *s.alias)
        elif isinstance(s, ki.For):
            if s.parallel:
                raise Unsupported("a parallel loop inside a loop")
            self.loop(s, self.value(s.start, {}), self.value(s.stop, {}))
        elif isinstance(s, ki.If):
            cond = self.value(s.cond, {})
            if s.orelse:
                with b.if_else(cond) as (then, other):
                    with then:
                        self.block(s.then)
                    with other:
                        self.block(s.orelse)
            else:
                with b.if_then(cond):
                    self.block(s.then)
        elif isinstance(s, ki.Continue):
            if not self._loops:
                raise Unsupported("continue outside a loop")
            br = b.branch(self._loops[-1][0])   # the counter is already stepped: the head tests the next index
            self._loops[-1][2].append(br)
        elif isinstance(s, ki.Comment):
            return
        else:
            raise Unsupported(f"statement {type(s).__name__}")

    def loop(self, s: ki.For, start, stop):
        b, ir = self.b, self.ir
        var = self.slot(s.var)
        counter = self.alloca_b.alloca(self.i64, name=f"{s.var.name}.next")
        b.store(start, counter)
        head = self.fn.append_basic_block(f"{s.var.name}.head")
        body = self.fn.append_basic_block(f"{s.var.name}.body")
        done = self.fn.append_basic_block(f"{s.var.name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<" if s.step > 0 else ">", i, stop), body, done)
        b.position_at_end(body)
        b.store(i, var)
        b.store(b.add(i, ir.Constant(self.i64, s.step)), counter)
        for outer in self._loops:
            outer[1] = False                # it contains this loop: not innermost
        self._loops.append([head, True, []])
        self.block(s.body)
        if not b.block.is_terminated:
            self._loops[-1][2].append(b.branch(head))
        _, innermost, back_edges = self._loops.pop()
        if innermost:                       # see INTERLEAVE and SHORT_TRIP
            for br in back_edges:
                br.set_metadata(_SHORT_TAG if s.short else _LATCH_TAG, self._latch_md)
        b.position_at_end(done)

    # ---- values -------------------------------------------------------------------------------------------
    def value(self, x: ki.Val, memo):
        """``x`` as an LLVM value in the current block; ``memo``: values already emitted for this statement
        (a DAG's shared parts are emitted once)."""
        got = memo.get(id(x))
        if got is not None:
            return got[1]
        v = self._emit(x, memo)
        memo[id(x)] = (x, v)        # (x kept alive: its id stays its own)
        return v

    def _emit(self, x, memo):
        b, ir, op = self.b, self.ir, x.op
        if op == "const":
            return ir.Constant(lltype(x.t), int(x.attr) if x.t not in ki.FLOATS else x.attr)
        if op == "var":
            if x.attr.name == "A":
                return self.arg_block
            return b.load(self.slot(x.attr))
        if op == "math":
            return self.value(self._expand(x), memo)
        args = [self.value(a, memo) for a in x.args]
        fm = x.fm
        if op == "ptr":
            return b.inttoptr(args[0], lltype(x.t))
        if op == "load":
            instr = b.load(b.gep(args[0], [args[1]]))
            if x.attr is not None:
                tag_alias_class(self.module, instr, *x.attr)
            return instr
        if op == "bin":
            return self._binop(x, args, fm)
        if op == "cmp":
            t = x.args[0].t
            if t in ki.FLOATS:
                if x.attr == "!=":
                    return b.fcmp_unordered("!=", *args)
                return b.fcmp_ordered(x.attr, *args)
            if t in (ki.U64, ki.BOOL):
                return b.icmp_unsigned(x.attr, *args)
            return b.icmp_signed(x.attr, *args)
        if op == "neg":
            return b.fneg(args[0], flags=fm) if x.t in ki.FLOATS else b.neg(args[0])
        if op in ("invert", "not"):
            return b.not_(args[0])
        if op == "select":
            return b.select(*args)
        if op == "cast":
            return self._cast(args[0], x.args[0].t, x.t)
        if op == "bitcast":
            return b.bitcast(args[0], lltype(x.t))
        if op == "intr":
            if x.attr == "frem":
                return b.frem(*args, flags=fm)
            lt = lltype(x.t)
            fn = self.module.declare_intrinsic(f"llvm.{x.attr}", [lt], ir.FunctionType(lt, [lt] * len(args)))
            return b.call(fn, args)
        if op == "libm":
            name = LIBM.get(x.attr, {}).get(x.t)
            if name is None:
                raise Unsupported(f"libm {x.attr} of {x.t}")
            lt = lltype(x.t)
            fn = self.module.globals.get(name)
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(lt, [lt] * len(args)), name=name)
                fn.attributes.add("readonly")
                fn.attributes.add("nounwind")
            return b.call(fn, args, fastmath=fm)
        if op == "table":
            return b.load(b.gep(self._table(x.attr), [ir.Constant(self.i64, 0), args[0]]))
        raise Unsupported(f"value {op}")

    def _expand(self, x):
        """A math call as the IR it computes (mathlib's builders; the integer forms here)."""
        name, prec = x.attr[0], x.attr[1]
        if prec in ("f32", "f64"):
            if name.startswith("rng_"):
                from . import philox_ir
                drawn = philox_ir.expand(name, prec, x.args)
                if drawn is None:
                    raise Unsupported(f"{name} (philox)")
                return ki.cast(drawn, x.t)
            from . import mathlib
            return ki.cast(mathlib.expand(name, prec, x.args), x.t)
        (a, *_) = x.args
        if name == "sign":
            a = ki.cast(a, ki.I64)
            return ki.select(a > 0, 1, ki.select(a < 0, -1, 0))
        if name == "isfinite":
            return ki.const(True)
        raise Unsupported(f"intmath {name}")

    def _table(self, table):
        g = self._tables.get(id(table))
        if g is None:
            ir = self.ir
            lt = lltype(ki.lookup(table, 0).t)
            ty = ir.ArrayType(lt, len(table))
            g = ir.GlobalVariable(self.module, ty, f"jitgrad.table{len(self._tables)}")
            g.global_constant = True
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, [int(v) for v in table.tolist()])
            self._tables[id(table)] = g
        return g

    def _binop(self, x, args, fm):
        b = self.b
        t, op = x.t, x.attr
        if t in ki.FLOATS:
            f = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}.get(op)
            if f is None:
                raise Unsupported(f"float {op}")
            return f(*args, flags=fm)
        if op in ("//", "%"):
            if t != ki.I64:
                raise Unsupported(f"{t} {op}")
            return self.floor_divmod(*args)[op == "%"]
        f = {"+": b.add, "-": b.sub, "*": b.mul, "&": b.and_, "|": b.or_, "^": b.xor, "<<": b.shl,
             ">>": b.lshr if t == ki.U64 else b.ashr}.get(op)
        if f is None:
            raise Unsupported(f"integer {op}")
        return f(*args)

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

    def _cast(self, v, src, t):
        """Numba's ``context.cast`` for the scalar types the kernels use."""
        b, ir = self.b, self.ir
        lt = lltype(t)
        if t == ki.BOOL:
            if src in ki.FLOATS:
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return b.icmp_signed("!=", v, ir.Constant(v.type, 0))
        if src == ki.BOOL:
            return b.uitofp(v, lt) if t in ki.FLOATS else b.zext(v, lt)
        if src in ki.FLOATS and t in ki.FLOATS:
            return b.fpext(v, lt) if t == ki.F64 else b.fptrunc(v, lt)
        if src in ki.INTS and t in ki.FLOATS:
            return b.uitofp(v, lt) if src in ki.UNSIGNED else b.sitofp(v, lt)
        if src in ki.FLOATS and t in ki.INTS:
            return b.fptoui(v, lt) if t in ki.UNSIGNED else b.fptosi(v, lt)
        if src in ki.INTS and t in ki.INTS:
            if ki.BITS[t] < ki.BITS[src]:
                return b.trunc(v, lt)
            if ki.BITS[t] == ki.BITS[src]:
                return v
            return b.zext(v, lt) if src in ki.UNSIGNED else b.sext(v, lt)
        raise Unsupported(f"cast {src} -> {t}")


def _walk_stmts(stmts):
    for s in stmts:
        yield s
        if isinstance(s, ki.For):
            yield from _walk_stmts(s.body)
        elif isinstance(s, ki.If):
            yield from _walk_stmts(s.then)
            yield from _walk_stmts(s.orelse)


def _stores(s) -> bool:
    return any(isinstance(x, ki.Store) for x in _walk_stmts([s]))


def _assigned(s) -> set:
    out = set()
    for x in _walk_stmts([s]):
        if isinstance(x, ki.Assign):
            out.add(x.var)
        elif isinstance(x, ki.For):
            out.add(x.var)
    return out


def _vars_read(stmts) -> set:
    seen, out = set(), set()
    for top in ki.statement_values(stmts):
        for v in ki.walk_values(top, seen):
            if v.op == "var":
                out.add(v.attr)
    return out


def _check_reductions(loop, after) -> None:
    """``Unsupported`` unless the parallel ``loop``'s reductions are sums (each update ``r = r + e``, ``e`` not
    reading ``r``, and ``r`` read nowhere else in the loop) and no other variable it assigns is read after it
    (its value would be some chunk's)."""
    red = set(loop.reductions)
    read_after = _vars_read(after)
    for s in _walk_stmts(loop.body):
        if isinstance(s, ki.Assign) and s.var in red:
            v = s.value
            ok = v.op == "bin" and v.attr == "+" and v.args[0].op == "var" and v.args[0].attr is s.var \
                and s.var not in _vars_read_value(v.args[1])
            if not ok:
                raise Unsupported(f"{s.var.name}: not a sum reduction of a parallel loop")
        elif isinstance(s, (ki.Assign, ki.For)) and s.var in read_after:
            raise Unsupported(f"{s.var.name} made in a parallel loop and read after it")
    updates = sum(isinstance(s, ki.Assign) and s.var in red for s in _walk_stmts(loop.body))
    reads = 0
    for top in ki.statement_values(loop.body):
        reads += sum(v.op == "var" and v.attr in red for v in _all_values(top))
    if reads != updates:
        raise Unsupported("a parallel loop reads its partial sum")


def _all_values(x):
    """Every value in ``x``'s tree, a shared one as often as it is used."""
    stack = [x]
    while stack:
        v = stack.pop()
        yield v
        stack.extend(v.args)


def _vars_read_value(x) -> set:
    return {v.attr for v in ki.walk_values(x) if v.op == "var"}


# ---------------------------------------------------------------------------------------------------- the text
def symbol(key: str) -> str:
    return f"jitgrad_kernel_{key[:24]}"


# Innermost loops are interleaved INTERLEAVE times (LLVM's llvm.loop.interleave.count): a fused loop of many
# transcendentals is latency-bound (its body is longer than the core's out-of-order window, so one vector
# iteration's dependent chain is not overlapped with the next), and LLVM's cost model picks no interleaving for
# long bodies.  Measured 2026-11-24 (1M float32, one thread, quiet): a 16-op tanh/sigmoid/mul chain 9.35 ->
# 3.25 ms, 2 ops (B2's kind) 0.80 -> 0.49 ms, 1 op unchanged (memory-bound).  The back edges are tagged while
# the IR is built and the tag becomes a distinct, self-referencing loop ID in the text (llvmlite's builder
# makes no distinct nodes).
INTERLEAVE = int(os.environ.get("JITGRAD_INTERLEAVE", "4"))
# An innermost loop the layout knows runs fewer than SHORT_TRIP times (``kernel_ir.For.short``: B11's loops over
# its 16 Gaussians) is not interleaved: interleaved, LLVM's vector body takes 8 float32 lanes x INTERLEAVE = 32
# elements a step, so a 16-element loop ran in its 4-lane remainder loop (B11's three pair loops: 4 lanes where
# the host has 8); not interleaved, it runs two full 8-lane steps.
SHORT_TRIP = 8 * INTERLEAVE
# Parallel kernels are rendered too, their chunks run on ``workpool``'s workers; 0: Numba builds them
PARALLEL = os.environ.get("JITGRAD_IR_PARALLEL", "1") != "0"
_LATCH_TAG = "jitgrad.latch"
_SHORT_TAG = "jitgrad.short"
HEADER = "; jitgrad kernel "         # the first line of a kernel's LLVM IR text: then its key


def _with_loop_ids(text: str) -> str:
    if INTERLEAVE <= 1 or (f"!{_LATCH_TAG}" not in text and f"!{_SHORT_TAG}" not in text):
        return text
    text = re.sub(rf"!{re.escape(_LATCH_TAG)} !\d+", "!llvm.loop !90000", text)
    text = re.sub(rf"!{re.escape(_SHORT_TAG)} !\d+", "!llvm.loop !90002", text)
    return text + (f'\n!90000 = distinct !{{!90000, !90001}}\n'
                   f'!90001 = !{{!"llvm.loop.interleave.count", i32 {INTERLEAVE}}}\n'
                   f'!90002 = distinct !{{!90002, !90003}}\n'
                   f'!90003 = !{{!"llvm.loop.interleave.count", i32 1}}\n')


def render(kir: ki.KernelIR, key: str) -> str:
    """The kernel's LLVM IR (text, its first line ``HEADER + key``), or ``Unsupported``."""
    try:
        text = _Renderer(symbol(key)).kernel(kir)
    except TypeError as e:          # a type mix the IR builders let through
        raise Unsupported(f"{type(e).__name__}: {e}") from None
    return f"{HEADER}{key}\n{text}"


__all__ = ["render", "Unsupported", "tag_alias_class", "symbol", "HEADER", "INTERLEAVE"]
