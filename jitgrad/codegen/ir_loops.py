"""Kernels straight to LLVM IR, without Numba: the cold build's fast path.

A kernel's text (``loops.py``) is a small, regular subset of Python: a ``kernel(A)`` function reading an int64
argument block, typed pointers (``ptr_f32(A[k])``), ``for i in range(n)`` nests, ``if`` blocks, ``continue``,
scalar arithmetic, casts, selects (``a if c else b``), ``store(p, i, v)``, the alias-scoped accesses
``load(p, i, c, n)`` / ``store_to(p, i, v, c, n)`` (tagged with the same scoped-noalias metadata as
``alias_scopes.py``'s Numba intrinsics, so the vectoriser needs no runtime overlap checks here either), and calls
of ``mathlib``'s straight-line functions (and of libm's ``atan2``/``nextafter``, as Numba calls them).  Numba
spends ~30 ms per kernel typing and lowering that, plus ~0.7 s once per process to import and initialise itself;
this module translates the same text to LLVM IR in a few milliseconds (statements and loops here, expressions in
``ir_scalars.py``) and lets LLVM optimise it as Numba does (O3, loop vectorisation, the host CPU's features, the
same fast-math flags per instruction), so a cold build of a typical step needs no Numba.
The results are bit-identical to Numba's build of the same text (``tests/test_ir_loops.py``).

A parallel kernel (``parallel=True``: its outer loop is a ``prange``) becomes a chunk function and a kernel that
runs the chunks on the worker pool (``workpool.py``; ``_Translator.parallel_kernel``).

Anything the translator does not know (a construct, a type mix, a mathlib function with branches or tables built
by helpers, ``intmath``/``philox`` calls, a ``prange`` loop it cannot split) raises ``Unsupported`` and the kernel
is compiled by Numba as before (``build.compile_code``).  Nothing in ``loops.py`` routes kernels: the text decides.
"""
from __future__ import annotations

import ast
import os
import re
import threading

import numpy as np

from .ir_scalars import (I64, KERNEL_FASTMATH, ScalarEmitter, Unsupported, Value, _Scope, _ir, _lltype, _literal,
                         alias_literals, tag_alias_class)

STATS = {"kernels_ir": 0, "kernels_refused": 0}     # counted, so tests can check which path built what
_lock = threading.Lock()


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()        # a build thread of the parent may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Translator(ScalarEmitter):
    def __init__(self, name):
        ir = _ir()
        self.ir = ir
        self.name_ = name
        self.module = ir.Module(name=name)
        self.i64 = ir.IntType(64)
        self._latch_md = self.module.add_metadata([])
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
        self.depth = 0
        self.heads = []         # the enclosing loops' head blocks, innermost last (``continue`` jumps there)
        self._loops = []        # per enclosing loop: [head, innermost so far, its back-edge branches]
        return self.fn

    def _finish_function(self):
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.alloca_b.branch(self.body0)

    _STATE = ("fn", "entry", "b", "alloca_b", "body0", "depth", "heads", "_loops")

    # ---- module level -------------------------------------------------------------------------------------
    def module_text(self, source: str) -> str:
        tree = ast.parse(source)
        consts, kernel, imported = {}, None, set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                continue
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if node.module in ("jitgrad.codegen.mathlib", "numpy", "numba", "jitgrad.codegen.abi") or (
                            node.module == "jitgrad.codegen.alias_scopes" and a.name in ("load", "store_to")):
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
        self.kernel_arg = kernel.args.args[0].arg
        scope = _Scope({kernel.args.args[0].arg: Value(self.fn.args[0], ("ptr", I64))}, consts, KERNEL_FASTMATH,
                       ssa=False)
        if self.parallel:
            self.parallel_kernel(kernel, scope)
        else:
            self.block(kernel.body, scope)
        self._finish_function()
        return _with_loop_ids(str(self.module))

    def _check_decorator(self, fn):
        if len(fn.decorator_list) != 1:
            raise Unsupported("decorator")
        d = fn.decorator_list[0]
        if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "cfunc"):
            raise Unsupported("decorator")
        kw = {k.arg: k.value for k in d.keywords}
        par = kw.get("parallel")
        if not (isinstance(par, ast.Constant) and isinstance(par.value, bool)):
            raise Unsupported("parallel flag")
        self.parallel = par.value
        if self.parallel and not PARALLEL:
            raise Unsupported("parallel kernel (JITGRAD_IR_PARALLEL=0)")
        em = kw.get("error_model")
        if not (isinstance(em, ast.Constant) and em.value == "numpy"):
            raise Unsupported("error model")
        fm = kw.get("fastmath")
        if not isinstance(fm, ast.Set) or sorted(e.value for e in fm.elts) != sorted(KERNEL_FASTMATH):
            raise Unsupported("fastmath flags")

    # ---- parallel kernels -----------------------------------------------------------------------------------
    def parallel_kernel(self, kernel, scope):
        """A kernel whose outer loop is ``for i in prange(n)`` (a top-level statement): the loop becomes a chunk
        function ``<name>_chunk(task, dims, steps, A)`` running ``task = [start, stop, partials...]`` of it, and
        the kernel runs the statements before the loop, hands one chunk to each worker of the pool
        (``workpool.py``: ``add_task`` per queue, ``ready``, ``synchronize``; one chunk on the calling thread when
        the pool has one worker or the loop one iteration), adds the chunks' partial sums to the reduction
        variables in chunk order, then runs the statements after the loop.

        Reductions are Numba's ``prange`` reductions as the generators write them: a variable assigned before
        the loop and updated (and read) in it only as ``r = r + e`` or ``r += e`` (a full sum, the anomaly and
        guard counters).  Each chunk starts it at zero; anything else assigned before and in the loop is refused."""
        body = kernel.body
        at = [k for k, s in enumerate(body) if isinstance(s, ast.For) and _is_prange(s.iter)]
        if len(at) != 1 or any(_is_prange(n) for s in body[at[0] + 1:] for n in ast.walk(s)):
            raise Unsupported("prange placement")
        k = at[0]
        loop = body[k]
        if len(loop.iter.args) != 1 or loop.orelse or not isinstance(loop.target, ast.Name):
            raise Unsupported("prange form")
        self.block(body[:k], scope)
        reductions = _reductions(loop, scope, body[k + 1:])
        types = [scope.names[r][2] for r in reductions]
        width = 2 + len(reductions)
        chunk = self._chunk_function(body[:k], loop, reductions, types, width)
        self._dispatch(chunk, self.cast(self.expr(loop.iter.args[0], scope), I64).v, scope, reductions, width)
        self.block(body[k + 1:], scope)

    def _chunk_function(self, prologue, loop, reductions, types, width):
        saved = {a: getattr(self, a) for a in self._STATE}
        ir, i64p = self.ir, self.i64.as_pointer()
        fn = self._start_function(self.name_ + "_chunk", [i64p, i64p, i64p, i64p])
        fn.linkage = "internal"
        task, a = fn.args[0], fn.args[3]
        scope = _Scope({self.kernel_arg: Value(a, ("ptr", I64))}, self.kernel_consts, KERNEL_FASTMATH, ssa=False)
        for s in prologue:              # what the loop may read (pointers, sizes, strides, counters' starts), not
            if _writes_memory(s):       # the stores: a value they compute and the loop reads is refused
                if any(_reads(n, name) for name in _assigned([s]) for n in loop.body):
                    raise Unsupported("a prange loop reads a value set beside a store before it")
            else:
                self.stmt(s, scope)
        for r, t in zip(reductions, types):
            self.assign(r, Value(ir.Constant(_lltype(t), 0), t), scope)
        b = self.b
        scope.names["__chunk_start"] = Value(b.load(b.gep(task, [ir.Constant(self.i64, 0)])), I64)
        scope.names["__chunk_stop"] = Value(b.load(b.gep(task, [ir.Constant(self.i64, 1)])), I64)
        rng = ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=[ast.Name(id="__chunk_start", ctx=ast.Load()),
                       ast.Name(id="__chunk_stop", ctx=ast.Load())], keywords=[])
        self.loop(ast.For(target=loop.target, iter=rng, body=loop.body, orelse=[]), scope)
        for j, (r, t) in enumerate(zip(reductions, types)):
            slot = self.b.bitcast(self.b.gep(task, [ir.Constant(self.i64, 2 + j)]), _lltype(t).as_pointer())
            self.b.store(self.name(r, scope).v, slot)
        self._finish_function()
        for attr, v in saved.items():
            setattr(self, attr, v)
        return fn

    def _dispatch(self, chunk, n, scope, reductions, width):
        ir, b, i64 = self.ir, self.b, self.i64
        i8p = ir.IntType(8).as_pointer()
        m = self.module
        add = _declare(m, "jitgrad_wq_add_task", ir.FunctionType(ir.VoidType(), [i8p] * 5))
        ready = _declare(m, "jitgrad_wq_ready", ir.FunctionType(ir.VoidType(), []))
        sync = _declare(m, "jitgrad_wq_synchronize", ir.FunctionType(ir.VoidType(), []))
        workers = m.globals.get("jitgrad_wq_threads") or ir.GlobalVariable(m, i64, "jitgrad_wq_threads")
        one = ir.Constant(i64, 1)
        nw = b.load(workers)
        pooled = b.and_(b.icmp_signed(">", nw, one), b.icmp_signed(">", n, one))
        ntasks = b.select(pooled, nw, one)
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
            with b.if_then(pooled):
                b.call(add, [b.bitcast(chunk, i8p), b.bitcast(rec, i8p), null, null, a])
        each_task(fill)
        with b.if_else(pooled) as (then, other):
            with then:
                b.call(ready, [])
                b.call(sync, [])
            with other:
                b.call(chunk, [tasks, ir.Constant(i64.as_pointer(), None), ir.Constant(i64.as_pointer(), None),
                               self.fn.args[0]])
        if reductions:
            def combine(t, rec):
                for j, r in enumerate(reductions):
                    cur = self.name(r, scope)
                    slot = b.bitcast(b.gep(rec, [ir.Constant(i64, 2 + j)]), _lltype(cur.t).as_pointer())
                    self.assign(r, self.binop(ast.Add(), cur, Value(b.load(slot), cur.t), scope), scope)
            each_task(combine)

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
            if isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name) \
                    and s.value.func.id in ("store", "store_to"):
                self.store(s.value, scope, scoped=s.value.func.id == "store_to")
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
        elif isinstance(s, ast.Continue):
            if not self.heads:
                raise Unsupported("continue outside a loop")
            br = b.branch(self.heads[-1])   # the counter is already stepped: the head tests the next index
            self._loops[-1][2].append(br)
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
        for outer in self._loops:
            outer[1] = False                # it contains this loop: not innermost
        self._loops.append([head, True, []])
        self.heads.append(head)
        self.block(s.body, scope)
        self.heads.pop()
        if not b.block.is_terminated:
            self._loops[-1][2].append(b.branch(head))
        _, innermost, back_edges = self._loops.pop()
        if innermost:                       # see INTERLEAVE
            for br in back_edges:
                br.set_metadata(_LATCH_TAG, self._latch_md)
        b.position_at_end(done)

    def store(self, call, scope, scoped=False):
        """``store(p, i, v)``: ``p[i] = v``; with ``scoped``, ``store_to(p, i, v, c, n)``
        (``alias_scopes.store_to``): the same, tagged as an access of alias class ``c`` among ``n``, as the
        Numba intrinsic emits it."""
        if len(call.args) != (5 if scoped else 3) or call.keywords:
            raise Unsupported("store_to form" if scoped else "store form")
        ptr = self.expr(call.args[0], scope)
        if not isinstance(ptr.t, tuple):
            raise Unsupported("store to a non-pointer")
        idx = self.index(call.args[1], scope)
        val = self.cast(self.expr(call.args[2], scope), ptr.t[1])
        lit = alias_literals(call.args[3], call.args[4]) if scoped else None
        instr = self.b.store(val.v, self.b.gep(ptr.v, [idx]))
        if scoped:
            tag_alias_class(self.module, instr, *lit)


def _is_prange(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "prange"


def _assigned(stmts) -> dict:
    """name -> the assignment nodes of it in ``stmts`` (nested blocks included)."""
    out = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Name):
                            out.setdefault(x.id, []).append(n)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.setdefault(n.target.id, []).append(n)
            elif isinstance(n, ast.For) and isinstance(n.target, ast.Name):
                out.setdefault(n.target.id, []).append(n)
    return out


def _writes_memory(stmt) -> bool:
    """Whether ``stmt`` stores to memory (``store``/``store_to`` or an item assignment), anywhere inside it."""
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("store", "store_to"):
            return True
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) for t in n.targets):
            return True
    return False


def _reads(node, name) -> bool:
    return any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(node))


def _reductions(loop, scope, after) -> list:
    """The ``prange`` loop's reduction variables (see ``_Translator.parallel_kernel``), in first-seen order;
    ``Unsupported`` for a variable assigned before and in the loop in another form, or one made in the loop and
    read after it (its value would be a chunk's)."""
    red = []
    for name, nodes in _assigned(loop.body).items():
        if name not in scope.names:
            if any(_reads(s, name) for s in after):
                raise Unsupported(f"{name} made in a prange loop and read after it")
            continue
        for n in nodes:
            ok = (isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and not _reads(n.value, name)) or (
                isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add)
                and isinstance(n.value.left, ast.Name) and n.value.left.id == name
                and not _reads(n.value.right, name))
            if not ok:
                raise Unsupported(f"{name}: not a sum reduction of a prange loop")
        loads = sum(isinstance(x, ast.Name) and x.id == name and isinstance(x.ctx, ast.Load)
                    for s in loop.body for x in ast.walk(s))
        if loads != sum(isinstance(n, ast.Assign) for n in nodes):     # read only by its own updates
            raise Unsupported(f"{name}: a prange loop reads its partial sum")
        t = scope.names[name]
        if not (isinstance(t, tuple) and t[0] == "slot" and not isinstance(t[2], tuple)):
            raise Unsupported(f"{name}: reduction of a non-scalar")
        red.append(name)
    return red


def _declare(module, name, fnty):
    fn = module.globals.get(name)
    if fn is None:
        fn = _ir().Function(module, fnty, name=name)
    return fn


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


# ---------------------------------------------------------------------------------------------------- compiling
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
# Parallel (``prange``) kernels are translated too, their chunks run on ``workpool``'s workers; 0: Numba builds them
PARALLEL = os.environ.get("JITGRAD_IR_PARALLEL", "1") != "0"
_LATCH_TAG = "jitgrad.latch"


def _with_loop_ids(text: str) -> str:
    if INTERLEAVE <= 1 or f"!{_LATCH_TAG}" not in text:
        return text
    text = re.sub(rf"!{re.escape(_LATCH_TAG)} !\d+", "!llvm.loop !90000", text)
    return text + (f'\n!90000 = distinct !{{!90000, !90001}}\n'
                   f'!90001 = !{{!"llvm.loop.interleave.count", i32 {INTERLEAVE}}}\n')


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
    from . import objload, objstore
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
    # the C library's functions it calls (atan2, nextafter; LLVM may add memset) and, for a parallel kernel, the
    # pool's (``workpool.SYMBOLS``): resolved from the process when the object is linked (``objload.load``)
    needs = objload.external_symbols(m)
    with _lock:
        STATS["kernels_ir"] += 1
    return objstore.Blob(key, symbol(key), obj, needs)


def assembly(source: str, key: str = "0" * 64) -> str:
    """The kernel's machine code as assembly text (for tests and ``source()``-style introspection)."""
    m, tm = _optimised(translate(source, key))
    return tm.emit_assembly(m)


__all__ = ["translate", "translatable", "compile_kernel", "assembly", "Unsupported", "STATS"]
