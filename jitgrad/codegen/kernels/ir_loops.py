"""Kernels to LLVM IR, without Numba: the CPU renderer of the kernel IR (``kernel_ir.py``), the cold build's path.

A kernel's IR (built by ``loops.py``, ``rowwise_loops.py``, ``scan_loops.py``) is written as LLVM assembly text
(``llvm_text.py``: a line per instruction, no IR objects; llvmlite's IR builder cost ~40 Python calls per
instruction, this ~10, mathlib's expansions included): kernel variables in allocas, ``For`` as counted loops (the innermost ones tagged for interleaving:
``INTERLEAVE``), ``If``/``Continue`` as branches, loads and stores tagged with their alias scopes (the same
scoped-noalias metadata as ``alias_scopes.py``'s Numba intrinsics, so the vectoriser needs no runtime overlap
checks), each arithmetic instruction with the fast-math flags its value was built under (never nnan/ninf), and
math calls expanded by ``mathlib``'s IR builders (straight-line, so loops calling them vectorise).  LLVM then
optimises it as Numba would (O3, loop vectorisation, the host CPU's features: ``native/llvm_build.py`` compiles the
text).  Numba spends ~30 ms per kernel typing and lowering the same loop, plus ~0.7 s once per process to import
itself; this takes a few milliseconds.  One method per op family (``_EMIT``) lowers a value.
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

from . import chunk_checks, contraction, ir_claims, kernel_ir as ki, llvm_text as T, pool_abi


class Unsupported(Exception):
    """The kernel uses something this renderer does not lower: Numba compiles its rendered text."""


_TYPES = {ki.F32: T.FLOAT, ki.F64: T.DOUBLE, ki.I64: T.I64, ki.I32: T.I32, ki.U8: T.I8, ki.U64: T.I64,
          ki.BOOL: T.I1}
_TYPE = _TYPES.get


def lltype(t) -> str:
    """The LLVM type (text) of kernel IR type ``t`` (pointers are opaque: ``ptr``)."""
    got = _TYPE(t)
    if got is None:
        if not ki.is_ptr(t):
            raise TypeError(f"no LLVM type for {t!r}")
        return T.PTR
    return got


def _elem(t) -> str:
    """The LLVM type of what a pointer of kernel IR type ``t`` points at."""
    return lltype(t.elem if isinstance(t, ki.Ptr) else t[1])


_FLAGS = {}     # fast-math flags (a tuple) -> their text


def _flags(fm) -> str:
    got = _FLAGS.get(fm)
    if got is None:
        got = _FLAGS[fm] = "".join(f + " " for f in fm or ())
    return got


# ---------------------------------------------------------------------------------------------------- alias scopes
ALIAS_DOMAIN = "jitgrad.kernel.operands"


def alias_md(module, cls: int, n: int) -> str:
    """The scoped-noalias metadata (text to append to a load or store) of an access of alias class ``cls`` among
    ``n`` (``alias_scopes.py`` says why): ``!alias.scope`` its class, ``!noalias`` every other; the module's nodes
    made once per (n, class).  Fewer than two classes: nothing to say, no metadata.  Numba's intrinsics attach the
    same nodes (``alias_scopes.tag_alias_class``: ``ALIAS_DOMAIN``'s names), so both paths give LLVM the same facts."""
    if n < 2:
        return ""
    made = module.cache.setdefault("alias", {})
    md = made.get((n, cls))
    if md is None:
        scopes = made.get(n)
        if scopes is None:
            domain = module.metadata(f'!"{ALIAS_DOMAIN}"')
            scopes = made[n] = [module.metadata(f'!"{ALIAS_DOMAIN}.{k}", {domain}') for k in range(n)]
        scope = module.metadata(scopes[cls])
        others = module.metadata(", ".join(scopes[k] for k in range(n) if k != cls))
        md = made[(n, cls)] = f", !alias.scope {scope}, !noalias {others}"
    return md


# C library functions, as Numba lowers them: the symbol per float type (hypot, erfc, lgamma and the inverse
# trigonometric and hyperbolic functions are called on float64 only)
LIBM = {"atan2": {ki.F32: "atan2f", ki.F64: "atan2"}, "nextafter": {ki.F32: "nextafterf", ki.F64: "nextafter"},
        **{f: {ki.F64: f} for f in ("hypot", "erfc", "lgamma", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                    "acosh", "atanh")}}
# the kernel IR's comparisons as LLVM's predicates: floats ordered (``!=`` unordered, as Python's), integers signed
# or unsigned by type
_FCMP = {"==": "oeq", "!=": "une", "<": "olt", "<=": "ole", ">": "ogt", ">=": "oge"}
_ICMP_S = {"==": "eq", "!=": "ne", "<": "slt", "<=": "sle", ">": "sgt", ">=": "sge"}
_ICMP_U = {"==": "eq", "!=": "ne", "<": "ult", "<=": "ule", ">": "ugt", ">=": "uge"}
_FLOAT_BIN = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}
_INT_BIN = {"+": "add", "-": "sub", "*": "mul", "&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "ashr"}
_INTRINSIC_SUFFIX = {T.FLOAT: "f32", T.DOUBLE: "f64", T.I64: "i64", T.I32: "i32", T.I8: "i8", T.I1: "i1"}


# ---------------------------------------------------------------------------------------------------- renderer
class _Renderer:
    def __init__(self, name):
        self.name_ = name
        self.module = T.Module(name)
        self._tables = {}
        self._loop_md = {}
        self._fences = {}       # id(sum) -> operands fenced from contraction in the loop being rendered (contraction.py)
        self._fences_of = {}    # id(loop) -> its fences (the first tier renders a loop twice: vector, then scalar)
        self._start_function(name, [T.PTR])

    def _start_function(self, name, arg_types, linkage=""):
        """Begin emitting function ``name`` (void, ``arg_types``): the builder state below is per function."""
        self.fn = self.module.function(name, arg_types, linkage=linkage)
        self.entry = self.fn.block("entry")
        self.body0 = self.fn.block("body")
        self.b = T.Builder(self.fn, self.body0)
        self.alloca_b = T.Builder(self.fn, self.entry)
        self.slots = {}         # Var -> alloca
        self.arg_block = self.fn.args[-1]
        self._loops = []        # per enclosing loop: [head, innermost so far, its back edges (lines, index)]
        return self.fn

    def _finish_function(self):
        if not self.b.block.terminated:
            self.b.ret_void()
        self.alloca_b.branch(self.body0)

    _STATE = ("fn", "entry", "b", "alloca_b", "body0", "slots", "arg_block", "_loops")
    POOL = True     # whether a parallel kernel may take the worker pool (the first tier's never does: vector_loops)

    def kernel(self, k: ki.KernelIR) -> str:
        if k.parallel:
            if not PARALLEL:
                raise Unsupported("parallel kernel (JITGRAD_IR_PARALLEL=0)")
            self.parallel_kernel(k.body)
        else:
            self.block(k.body)
        self._finish_function()
        return self.module.text()

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
        problem = chunk_checks.reduction_problem(loop, body[n + 1:])
        if problem is not None:
            raise Unsupported(problem)
        self.block(body[:n])
        chunk = self._chunk_function(body[:n], loop)
        stop = self.value(loop.stop, {})
        gate = None if loop.gate is None else (self.value(loop.gate[0], {}), float(loop.gate[1]))
        share = chunk_checks.round_share(body, n)
        self._dispatch(chunk, stop, loop.reductions, 2 + len(loop.reductions), gate, share is not None,
                       share == "closes")
        self.block(body[n + 1:])

    def _chunk_function(self, prologue, loop):
        saved = {a: getattr(self, a) for a in self._STATE}
        fn = self._start_function(self.name_ + "_chunk", [T.PTR] * 4, linkage="internal")
        task = fn.args[0]
        read = chunk_checks.vars_read(loop.body)
        for s in prologue:              # what the loop may read (pointers, sizes, strides), not the stores
            if chunk_checks.stores(s):
                if chunk_checks.assigned(s) & read:
                    raise Unsupported("a parallel loop reads a value set beside a store before it")
            else:
                self.stmt(s)
        for r in loop.reductions:
            t = lltype(r.t)
            self.b.store(t, T.const(t, 0), self.slot(r))
        b = self.b
        start = b.load(T.I64, b.gep(T.I64, task, "0"))
        stop = b.load(T.I64, b.gep(T.I64, task, "1"))
        self.loop(loop, start, stop)
        for j, r in enumerate(loop.reductions):
            slot = self.b.gep(T.I64, task, str(2 + j))
            t = lltype(r.t)
            self.b.store(t, self.b.load(t, self.slot(r)), slot)
        self._finish_function()
        for attr, v in saved.items():
            setattr(self, attr, v)
        return fn.ref

    def _dispatch(self, chunk, n, reductions, width, gate=None, joinable=False, closes=False):
        b, I64 = self.b, T.I64
        m = self.module
        add = pool_abi.declare(m)[0] if self.POOL else None
        nw = b.load(I64, pool_abi.pool_global(m, "threads"))
        split = b.op("and", T.I1, b.icmp("sgt", I64, nw, "1"), b.icmp("sgt", I64, n, "1"))
        # (not POOL: the launch's test and the pool's code left out, a launch that does not take it)
        takes, pooled, pace, work = split, split if self.POOL else T.FALSE, None, None
        joinable = joinable and self.POOL
        if gate is not None and self.POOL:      # the threshold per call, and the pool's pacer (pool_abi.launch)
            takes = b.op("and", T.I1, split, pool_abi.takes_pool(b, m, *gate))
            pooled, pace = pool_abi.paced(b, m, takes)
            work = pool_abi.work_of(b, *gate)
        # a launch that does not join the pending round (if any) runs it first: its chunks may read what those wrote
        joining = pool_abi.joining(b, m, pooled, pace) if joinable else T.FALSE
        if joinable:
            with b.if_then(b.op("xor", T.I1, joining, T.TRUE)):
                pool_abi.flush(b, m)
        else:
            pool_abi.flush(b, m)
        # not pooled: a loop that sums runs the pooled launch's chunks here, in order (the same partial sums)
        ntasks = b.select(split if reductions else pooled, I64, nw, "1") if reductions or self.POOL else "1"
        tasks = b.alloca(I64, b.op("mul", I64, ntasks, str(width)))
        a = self.fn.args[0]

        def each_task(emit):
            t_slot = self.alloca_b.alloca(I64)
            b.store(I64, "0", t_slot)
            head, body, done = (self.fn.block(x) for x in ("task.head", "task.body", "task.done"))
            b.branch(head)
            b.position_at_end(head)
            t = b.load(I64, t_slot)
            b.cbranch(b.icmp("slt", I64, t, ntasks), body, done)
            b.position_at_end(body)
            emit(t, b.gep(I64, tasks, b.op("mul", I64, t, str(width))))
            b.store(I64, b.op("add", I64, t, "1"), t_slot)
            b.branch(head)
            b.position_at_end(done)

        def fill(t, rec):       # chunk t of ntasks: [n * t / ntasks, n * (t + 1) / ntasks)
            b.store(I64, b.op("sdiv", I64, b.op("mul", I64, n, t), ntasks), rec)
            b.store(I64, b.op("sdiv", I64, b.op("mul", I64, n, b.op("add", I64, t, "1")), ntasks),
                    b.gep(I64, rec, "1"))
            if not self.POOL:
                return
            queue = b.op("and", T.I1, pooled, pool_abi.queued(b, m, t))
            if joinable:
                queue = b.op("and", T.I1, queue, b.op("xor", T.I1, joining, T.TRUE))
            with b.if_then(queue):
                b.call(T.VOID, add, [f"ptr {chunk}", f"ptr {rec}", "ptr null", "ptr null", f"ptr {a}"])
        each_task(fill)

        def own_round():    # chunk 0 on the calling thread when it is the caller's (pool_abi.round_)
            pool_abi.round_(b, m, lambda: b.call(T.VOID, chunk, [f"ptr {tasks}", "ptr null", "ptr null", f"ptr {a}"]))

        def on_pool():
            if not joinable:
                own_round()
                return
            with b.if_else(joining) as (then, other):
                with then:
                    pool_abi.count_join(b, m)
                    each_task(lambda t, rec: pool_abi.join_chunk(
                        b, m, chunk, t, [b.load(I64, rec), b.load(I64, b.gep(I64, rec, "1"))], a))
                    if closes:      # the statements after the chunks read what they wrote: the round runs now
                        pool_abi.flush(b, m)
                with other:
                    own_round()

        def on_caller():
            each_task(lambda t, rec: b.call(T.VOID, chunk, [f"ptr {rec}", "ptr null", "ptr null", f"ptr {a}"]))
        pool_abi.launch(b, m, pooled, takes, pace, work, on_pool, on_caller, self.alloca_b) if self.POOL else on_caller()
        if reductions:
            def combine(t, rec):
                for j, r in enumerate(reductions):
                    lt = lltype(r.t)
                    slot = b.gep(T.I64, rec, str(2 + j))
                    cur, part = b.load(lt, self.slot(r)), b.load(lt, slot)
                    total = b.op("fadd", lt, cur, part, _flags(ki.KERNEL_FASTMATH)) if r.t in ki.FLOATS else \
                        b.op("add", lt, cur, part)
                    b.store(lt, total, self.slot(r))
            each_task(combine)

    # ---- statements ---------------------------------------------------------------------------------------
    def slot(self, v: ki.Var):
        s = self.slots.get(v)
        if s is None:
            s = self.slots[v] = self.alloca_b.alloca(lltype(v.t), name=v.name)
        return s

    def block(self, stmts):
        for s in stmts:
            if self.b.block.terminated:
                raise Unsupported("code after a continue")
            self.stmt(s)

    def stmt(self, s):
        b = self.b
        if isinstance(s, ki.Assign):
            b.store(lltype(s.var.t), self.value(s.value, {}), self.slot(s.var))
        elif isinstance(s, ki.Store):
            memo = {}
            ptr, idx = self.value(s.ptr, memo), self.value(s.idx, memo)
            v = self.value(s.value, memo)
            elem = _elem(s.ptr.t)
            b.store(elem, v, b.gep(elem, ptr, idx, lltype(s.idx.t)),
                    alias_md(self.module, *s.alias) if s.alias is not None else "")
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
        elif isinstance(s, ki.Claim):
            ir_claims.lower(self, s)
        elif isinstance(s, ki.Continue):
            if not self._loops:
                raise Unsupported("continue outside a loop")
            b.branch(self._loops[-1][0])   # the counter is already stepped: the head tests the next index
            self._loops[-1][2].append((b.lines, len(b.lines) - 1))
        elif isinstance(s, ki.Comment):
            return
        else:
            raise Unsupported(f"statement {type(s).__name__}")

    def loop(self, s: ki.For, start, stop):
        b, I64 = self.b, T.I64
        var = self.slot(s.var)
        counter = self.alloca_b.alloca(I64, name=f"{s.var.name}.next")
        b.store(I64, start, counter)
        name = s.var.name
        head, body, done = self.fn.block(f"{name}.head"), self.fn.block(f"{name}.body"), self.fn.block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.load(I64, counter)
        b.cbranch(b.icmp("slt" if s.step > 0 else "sgt", I64, i, stop), body, done)
        b.position_at_end(body)
        b.store(I64, i, var)
        b.store(I64, b.op("add", I64, i, str(s.step)), counter)
        for outer in self._loops:
            outer[1] = False                # it contains this loop: not innermost
        self._loops.append([head, True, []])
        outer_fences = self.enter_fences(s)
        self.block(s.body)
        self._fences = outer_fences
        if not b.block.terminated:
            b.branch(head)
            self._loops[-1][2].append((b.lines, len(b.lines) - 1))
        _, innermost, back_edges = self._loops.pop()
        if innermost and INTERLEAVE > 1:    # see INTERLEAVE and SHORT_TRIP
            md = self._loop_id(1 if s.short else INTERLEAVE)
            for lines, k in back_edges:
                lines[k] += md
        b.position_at_end(done)

    def enter_fences(self, s: ki.For) -> dict:
        """Make loop ``s``'s fences (``contraction.fences``) the active ones; returns those they replace."""
        if id(s) not in self._fences_of:        # (s kept with them: its id stays its own)
            self._fences_of[id(s)] = (s, contraction.fences(s))
        outer, self._fences = self._fences, self._fences_of[id(s)][1]
        return outer

    def _loop_id(self, count: int) -> str:
        """``, !llvm.loop !N``: a distinct loop ID asking LLVM to interleave ``count`` times (one per module)."""
        md = self._loop_md.get(count)
        if md is None:
            m = self.module
            md = self._loop_md[count] = ", !llvm.loop " + m.metadata(
                "!SELF, " + m.metadata(f'!"llvm.loop.interleave.count", i32 {count}'), distinct=True)
        return md

    # ---- values -------------------------------------------------------------------------------------------
    def value(self, x: ki.Val, memo):
        """``x`` as an LLVM value (its name or a constant's text) in the current block; ``memo``: values already
        emitted for this statement (a DAG's shared parts are emitted once)."""
        got = memo.get(id(x))
        if got is not None:
            return got[1]
        op = x.op
        if op == "const":
            v = T.const(_TYPE(x.t) or lltype(x.t), x.attr)
        elif op == "var":
            v = self.arg_block if x.attr.name == "A" else self.b.load(_TYPE(x.t) or T.PTR, self.slot(x.attr))
        elif op == "math":
            v = self.value(self._expand(x), memo)
        else:
            emit = _EMIT.get(op)
            if emit is None:
                raise Unsupported(f"value {op}")
            args = []
            for a in x.args:
                got = memo.get(id(a))
                args.append(got[1] if got is not None else self.value(a, memo))
            v = emit(self, x, args)
        memo[id(x)] = (x, v)        # (x kept alive: its id stays its own)
        return v

    # one method per op family: (self, x, args) -> its value
    def _ptr(self, x, args):
        return self.b.cast("inttoptr", lltype(x.args[0].t), args[0], T.PTR)

    def _load(self, x, args):
        b, t = self.b, _TYPE(x.t) or lltype(x.t)
        return b.load(t, b.gep(t, args[0], args[1], lltype(x.args[1].t)),
                      alias_md(self.module, *x.attr) if x.attr is not None else "")

    def _cmp(self, x, args):
        t = x.args[0].t
        if t in ki.FLOATS:
            return self.b.fcmp(_FCMP[x.attr], lltype(t), *args)
        return self.b.icmp((_ICMP_U if t in (ki.U64, ki.BOOL) else _ICMP_S)[x.attr], lltype(t), *args)

    def _neg(self, x, args):
        t = lltype(x.t)
        if x.t in ki.FLOATS:
            return self.b.fneg(t, args[0], _flags(x.fm))
        return self.b.op("sub", t, "0", args[0])

    def _not(self, x, args):
        t = lltype(x.t)
        return self.b.op("xor", t, args[0], T.const(t, -1))

    def _select(self, x, args):
        return self.b.select(args[0], lltype(x.t), args[1], args[2])

    def _cast_op(self, x, args):
        return self._cast(args[0], x.args[0].t, x.t)

    def _bitcast(self, x, args):
        return self.b.cast("bitcast", lltype(x.args[0].t), args[0], lltype(x.t))

    def _intr(self, x, args):
        lt = lltype(x.t)
        if x.attr == "frem":
            return self.b.op("frem", lt, *args, _flags(x.fm))
        name = f"llvm.{x.attr}.{_INTRINSIC_SUFFIX[lt]}"
        fn = self.module.declare(name, lt, [lt] * len(args))
        return self.b.call(lt, fn, [f"{lt} {a}" for a in args])

    def _libm(self, x, args):
        name = LIBM.get(x.attr, {}).get(x.t)
        if name is None:
            raise Unsupported(f"libm {x.attr} of {x.t}")
        lt = lltype(x.t)
        fn = self.module.declare(name, lt, [lt] * len(args), "readonly nounwind")
        return self.b.call(lt, fn, [f"{lt} {a}" for a in args], _flags(x.fm))

    def _table_load(self, x, args):
        g, ty, lt = self._table(x.attr)
        return self.b.load(lt, self.b.gep2(ty, g, "0", args[0], lltype(x.args[0].t)))

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
        got = self._tables.get(id(table))
        if got is None:
            lt = lltype(ki.lookup(table, 0).t)
            ty = f"[{len(table)} x {lt}]"
            init = "[" + ", ".join(f"{lt} {T.const(lt, v)}" for v in table.tolist()) + "]"
            g = self.module.constant(f"jitgrad.table{len(self._tables)}", ty, init)
            got = self._tables[id(table)] = (g, ty, lt)
        return got

    def _binop(self, x, args):
        t, op = x.t, x.attr
        lt = _TYPES[t]
        if t in ki.FLOATS:
            f = _FLOAT_BIN.get(op)
            if f is None:
                raise Unsupported(f"float {op}")
            fenced = self._fences.get(id(x))
            if fenced:          # an operand the loop does not vary: never fused into this sum (contraction.py)
                args = [contraction.fence(self.module, self.b, lt, a) if j in fenced else a for j, a in enumerate(args)]
            return self.b.op(f, lt, args[0], args[1], _flags(x.fm))
        if op in ("//", "%"):
            if t != ki.I64:
                raise Unsupported(f"{t} {op}")
            return self.floor_divmod(*args)[op == "%"]
        f = "lshr" if op == ">>" and t == ki.U64 else _INT_BIN.get(op)
        if f is None:
            raise Unsupported(f"integer {op}")
        return self.b.op(f, lt, args[0], args[1])

    def floor_divmod(self, x, y):
        """Python's ``x // y`` and ``x % y`` on int64 as Numba computes them under ``error_model='numpy'``:
        the quotient rounded down, the remainder taking the divisor's sign; both 0 when ``y`` is 0 and when
        ``x`` is the least int64 and ``y`` is -1 (Numba's branches; here the divisor is made 1 in those cases, so
        no instruction ever divides by zero or overflows, and the results are chosen by selects)."""
        b, I64, I1 = self.b, T.I64, T.I1
        bad = b.op("or", I1, b.icmp("eq", I64, y, "0"),
                   b.op("and", I1, b.icmp("eq", I64, x, str(-(1 << 63))), b.icmp("eq", I64, y, "-1")))
        d = b.select(bad, I64, "1", y)
        q, r = b.op("sdiv", I64, x, d), b.op("srem", I64, x, d)
        fix = b.op("and", I1, b.icmp("ne", I64, r, "0"), b.icmp("slt", I64, b.op("xor", I64, d, r), "0"))
        q = b.select(fix, I64, b.op("sub", I64, q, "1"), q)
        r = b.select(fix, I64, b.op("add", I64, r, d), r)
        return b.select(bad, I64, "0", q), b.select(bad, I64, "0", r)

    def _cast(self, v, src, t):
        """Numba's ``context.cast`` for the scalar types the kernels use."""
        b = self.b
        lt, ls = lltype(t), lltype(src)
        if t == ki.BOOL:
            if src in ki.FLOATS:
                return b.fcmp("une", ls, v, T.const(ls, 0.0))
            return b.icmp("ne", ls, v, "0" if src != ki.BOOL else "false")
        if src == ki.BOOL:
            return b.cast("uitofp" if t in ki.FLOATS else "zext", ls, v, lt)
        if src in ki.FLOATS and t in ki.FLOATS:
            if src == t:
                return v
            return b.cast("fpext" if t == ki.F64 else "fptrunc", ls, v, lt)
        if src in ki.INTS and t in ki.FLOATS:
            return b.cast("uitofp" if src in ki.UNSIGNED else "sitofp", ls, v, lt)
        if src in ki.FLOATS and t in ki.INTS:
            return b.cast("fptoui" if t in ki.UNSIGNED else "fptosi", ls, v, lt)
        if src in ki.INTS and t in ki.INTS:
            if ki.BITS[t] < ki.BITS[src]:
                return b.cast("trunc", ls, v, lt)
            if ki.BITS[t] == ki.BITS[src]:
                return v
            return b.cast("zext" if src in ki.UNSIGNED else "sext", ls, v, lt)
        raise Unsupported(f"cast {src} -> {t}")


_EMIT = {"ptr": _Renderer._ptr, "load": _Renderer._load, "bin": _Renderer._binop, "cmp": _Renderer._cmp,
         "neg": _Renderer._neg, "invert": _Renderer._not, "not": _Renderer._not, "select": _Renderer._select,
         "cast": _Renderer._cast_op, "bitcast": _Renderer._bitcast, "intr": _Renderer._intr,
         "libm": _Renderer._libm, "table": _Renderer._table_load}


def round_share(kir: ki.KernelIR):
    """How a parallel kernel's launch may share a pool round pending from launches before it
    (``chunk_checks.round_share``): "joins", "closes" or None."""
    at = [n for n, s in enumerate(kir.body) if isinstance(s, ki.For) and s.parallel]
    return chunk_checks.round_share(kir.body, at[0]) if kir.parallel and PARALLEL and len(at) == 1 else None


# ---------------------------------------------------------------------------------------------------- the text
def symbol(key: str) -> str:
    return f"jitgrad_kernel_{key[:24]}"


# Innermost loops are interleaved INTERLEAVE times (LLVM's llvm.loop.interleave.count): a fused loop of many
# transcendentals is latency-bound (its body is longer than the core's out-of-order window, so one vector
# iteration's dependent chain is not overlapped with the next), and LLVM's cost model picks no interleaving for
# long bodies.  Measured 2026-11-24 (1M float32, one thread, quiet): a 16-op tanh/sigmoid/mul chain 9.35 ->
# 3.25 ms, 2 ops (B2's kind) 0.80 -> 0.49 ms, 1 op unchanged (memory-bound).  An innermost loop's back edges carry a
# distinct, self-referencing loop ID (``_Renderer._loop_id``).
INTERLEAVE = int(os.environ.get("JITGRAD_INTERLEAVE", "4"))
# An innermost loop the layout knows runs fewer than SHORT_TRIP times (``kernel_ir.For.short``: B11's loops over
# its 16 Gaussians) is not interleaved: interleaved, LLVM's vector body takes 8 float32 lanes x INTERLEAVE = 32
# elements a step, so a 16-element loop ran in its 4-lane remainder loop (B11's three pair loops: 4 lanes where
# the host has 8); not interleaved, it runs two full 8-lane steps.
SHORT_TRIP = 8 * INTERLEAVE
# Parallel kernels are rendered too, their chunks run on ``workpool``'s workers; 0: Numba builds them
PARALLEL = os.environ.get("JITGRAD_IR_PARALLEL", "1") != "0"
HEADER = "; jitgrad kernel "         # the first line of a kernel's LLVM IR text: then its key


def render(kir: ki.KernelIR, key: str) -> str:
    """The kernel's LLVM IR (text, its first line ``HEADER + key``), or ``Unsupported``."""
    try:
        text = _Renderer(symbol(key)).kernel(kir)
    except TypeError as e:          # a type mix the IR builders let through
        raise Unsupported(f"{type(e).__name__}: {e}") from None
    return f"{HEADER}{key}\n{text}"


__all__ = ["render", "Unsupported", "alias_md", "ALIAS_DOMAIN", "symbol", "HEADER", "INTERLEAVE", "lltype", "round_share"]
