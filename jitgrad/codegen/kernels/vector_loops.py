"""Innermost loops rendered as vector IR (``<16 x float>`` ...) for the first build tier (issue 30).

The first tier (``native/llvm_build.py``'s quick passes) runs no loop vectoriser: its loops were scalar, and a cold
script's calls ran them until the O3 build landed.  Here jitgrad writes a kernel's innermost contiguous loops in
vector form itself, so cheap LLVM passes give vector code.  ``VectorRenderer`` is ``ir_loops``' renderer with one
change: a loop ``vector_plan.plan_loop`` accepts becomes a loop over blocks of ``width`` elements, then the scalar
loop for the rest (the remainder; all of it when a check of the plan fails before the loop).

In a block, uniform values are the scalar code's, contiguous loads and stores are vector ones, every other
operation is the scalar one applied per lane (same instruction, same fast-math flags: the scalar loop's bits), and
what has no vector form (the C library's functions, table loads, integer ``//`` and ``%``) runs per lane.
Lane-serial statements (what a carried variable feeds, other than a sum) run after the block's vector statements,
lane by lane in order, as scalar code on the lanes' values, each lane's result fenced from the next
(``contraction.fence``); exact reductions and float sums keep an accumulator per lane, combined after the loop (a
float sum's lanes with a reassociating ``llvm.vector.reduce.fadd``, as O3's vectorised sums: ``vector_plan.
LANE_SUMS``).  A uniform value a varying sum takes is fenced from it in every tier
(``contraction.py``): the scalar loop fused it where the blocks could not.
"""
from __future__ import annotations

from . import contraction, ir_loops, kernel_ir as ki, llvm_text as T
from .vector_plan import C, IDENTITY, L, U, V, Classes, Refuse, assigned_once, plan_loop, read_counts

_BYTES = {ki.F32: 4, ki.F64: 8, ki.I64: 8, ki.I32: 4, ki.U8: 1, ki.U64: 8, ki.BOOL: 1}
STATS = {"loops_vector": 0, "loops_scalar": 0, "sums_in_lanes": 0}   # loops rendered each way, float sums in lanes


class VectorRenderer(ir_loops._Renderer):
    """``ir_loops``' renderer whose innermost contiguous loops run ``bits``-wide vector blocks first."""

    # A parallel kernel's first tier never takes the worker pool: it runs the chunks a launch that does not take
    # it runs (a loop that sums: one per thread of the pool, in order), so its values are the pooled launch's.
    # The launch's test, pacer, joins and rounds were most of a small parallel kernel's text, and LLVM's work on
    # them most of its first build (the LM step of ``variable_length.py``: 14 of its 24 kernels).  Its optimised
    # build, which follows, takes the pool.
    POOL = False

    def __init__(self, name, bits: int):
        super().__init__(name)
        self.bits = bits
        self._kernel_body = ()
        self._once = None

    def kernel(self, k: ki.KernelIR) -> str:
        self._kernel_body, self._read_memo = k.body, {}
        return super().kernel(k)

    # ---- emission -----------------------------------------------------------------------------------------
    def loop(self, s: ki.For, start, stop):
        plan = None
        if self.bits:
            if self._once is None:
                self._once = assigned_once(self._kernel_body)
            try:
                plan = plan_loop(s, self._kernel_body, self.bits, self._once, self._read_memo)
            except Refuse:
                plan = None
        if plan is None:
            STATS["loops_scalar"] += 1
            return super().loop(s, start, stop)
        STATS["loops_vector"] += 1
        outer_fences = self.enter_fences(s)     # (a lane-serial sum's lanes fence as the scalar loop does)
        rest = self._vector_loop(s, plan, start, stop)
        self._fences = outer_fences
        return super().loop(s, rest, stop)

    def _vector_loop(self, s, plan, start, stop):
        b, I64, W = self.b, T.I64, plan.width
        self.W = W
        n = b.op("sub", I64, stop, start)
        n = b.select(b.icmp("sgt", I64, n, "0"), I64, n, "0")
        nv = b.op("and", I64, n, str(-W))
        vend = b.op("add", I64, start, nv)
        if plan.checks:
            vend = b.select(self._checked(s, plan, start, nv), I64, vend, start)
        self._ibase, self._ivar, self._cls = None, s.var, Classes(s.var, plan.carried, plan.lanes)
        acc = {}
        for var, op in plan.lanes.items():      # a lane-parallel accumulator per exact reduction, at its identity
            acc[var] = self.alloca_b.alloca(self._vt(var.t), name=f"{var.name}.lanes")
            b.store(self._vt(var.t), self._splat(var.t, IDENTITY[op](var.t)), acc[var])
        counter = self.alloca_b.alloca(I64, name=f"{s.var.name}.vnext")
        b.store(I64, start, counter)
        name = s.var.name
        head, body, done = (self.fn.block(f"{name}.{w}") for w in ("vhead", "vbody", "vdone"))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(I64, counter)
        b.cbranch(b.icmp("slt", I64, i, vend), body, done)
        b.position_at_end(body)
        b.store(I64, b.op("add", I64, i, str(W)), counter)
        self._ibase = i
        self._texts = {var: b.load(self._vt(var.t), slot) for var, slot in acc.items()}
        deferred = []
        self._reads = read_counts(s.body)
        for st in s.body:
            if isinstance(st, ki.Comment):
                continue
            memo, kmemo = {}, {}
            if isinstance(st, ki.Store):
                self._store(st, memo, kmemo)
                continue
            var = st.var
            k = L if var in plan.carried else self._cls.of(st.value, kmemo)
            self._cls.state[var] = (k, st.value)
            if k == L:
                deferred.append((st, self._seeds(st.value, memo, kmemo)))
            elif k == U:
                b.store(ir_loops.lltype(var.t), self.value(st.value, {}), self.slot(var))
            else:
                self._texts[var] = self._vec(st.value, memo, kmemo) if var in acc else \
                    self._val(st.value, memo, kmemo)[1]
                if var in acc:
                    b.store(self._vt(var.t), self._texts[var], acc[var])
        for lane in range(W):
            for st, (seeds, per_lane) in deferred:
                memo = {}
                for key, (node, k, text) in seeds.items():
                    memo[key] = (node, self._lane(node.t, k, text, lane))
                for node, expr in per_lane:
                    memo[id(node)] = (node, self.value(expr, memo))
                lt, v = ir_loops.lltype(st.var.t), self.value(st.value, memo)
                # each lane's float sum apart from the next's: the code generator reassociates a chain of sums
                # (``acc + u`` over the lanes of one uniform ``u``), which the scalar loop, one sum an iteration, never is
                b.store(lt, contraction.fence(self.module, b, lt, v) if st.var.t in ki.FLOATS else v, self.slot(st.var))
        order = [s.var] + [st.var for st in s.body if isinstance(st, ki.Assign)]     # (the text's order fixed)
        for var in dict.fromkeys(v for v in order if v in plan.live_out and v not in plan.lanes):
            k = C if var is s.var else self._cls.state[var][0]
            if k in (C, V):
                text = i if var is s.var else self._texts[var]
                b.store(ir_loops.lltype(var.t), self._lane(var.t, k, text, W - 1), self.slot(var))
        b.branch(head)
        b.position_at_end(done)
        for var, op in plan.lanes.items():      # the lanes' results, then the value from before the loop
            vt, lt = self._vt(var.t), ir_loops.lltype(var.t)
            if op == "fadd":
                STATS["sums_in_lanes"] += 1
                red = self.module.declare(f"llvm.vector.reduce.fadd.v{W}{ir_loops._INTRINSIC_SUFFIX[lt]}", lt,
                                          [lt, vt])
                flags = ir_loops._flags(ki.KERNEL_FASTMATH)
                part = b.call(lt, red, [f"{lt} 0.0", f"{vt} {b.load(vt, acc[var])}"], flags)
                b.store(lt, b.op("fadd", lt, b.load(lt, self.slot(var)), part, flags), self.slot(var))
                continue
            red = self.module.declare(f"llvm.vector.reduce.{op}.v{W}{ir_loops._INTRINSIC_SUFFIX[lt]}", lt, [vt])
            part = b.call(lt, red, [f"{vt} {b.load(vt, acc[var])}"])
            b.store(lt, self._combine(op, lt, b.load(lt, self.slot(var)), part), self.slot(var))
        return vend

    def _combine(self, op, lt, a, c):
        if op in ("add", "or", "and", "xor"):
            return self.b.op(op, lt, a, c)
        fn = self.module.declare(f"llvm.{op}.{ir_loops._INTRINSIC_SUFFIX[lt]}", lt, [lt, lt])
        return self.b.call(lt, fn, [f"{lt} {a}", f"{lt} {c}"])

    def _checked(self, s, plan, start, nv):
        """The checks' verdict before the loop (an i1): every pair of ``plan.checks`` safe for vector blocks."""
        b, I64 = self.b, T.I64
        ok = None
        for st, x in plan.checks:
            (aS, eS), (aX, eX) = self._address(st, s, start), self._address(x, s, start)
            if st[2] == C and x[2] == C and eS == eX:     # the same element, or a block or more apart
                d = b.op("sub", I64, aS, aX)
                far = b.icmp("uge", I64, b.op("add", I64, d, str(self.W * eS - 1)), str(2 * self.W * eS - 1))
                good = b.op("or", T.I1, b.icmp("eq", I64, d, "0"), far)
            else:                                          # apart over the whole vector part
                endS = b.op("add", I64, aS, b.op("mul", I64, nv, str(eS)))
                endX = b.op("add", I64, aX, b.op("mul", I64, nv, str(eX)) if x[2] == C else str(eX))
                good = b.op("or", T.I1, b.icmp("ule", I64, endS, aX), b.icmp("ule", I64, endX, aS))
            ok = good if ok is None else b.op("and", T.I1, ok, good)
        return ok

    def _address(self, access, s, start):
        """An access's address at the loop's first iteration (an i64) and its element's bytes."""
        t, (ptr, idx) = access[3], access[5]
        memo = {}
        for node in ki.walk_values(idx):
            if node.op == "var" and node.attr is s.var:
                memo[id(node)] = (node, start)
        p, j = self.value(ptr, {}), self.value(idx, memo)
        lt = ir_loops.lltype(t)
        return self.b.cast("ptrtoint", T.PTR, self.b.gep(lt, p, j), T.I64), _BYTES[t]

    def _seeds(self, x, memo, kmemo):
        """A lane-serial value's inputs that are not lane-serial, emitted now (id -> (node, class, text)), and the
        products it adds (``_contracted``), computed per lane from their own inputs: (node, its product)."""
        seeds, per_lane, stack, seen = {}, [], [x], set()
        parents = _parent_counts(x)
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            k = self._cls.of(n, kmemo)
            if k == L:
                if n.op != "var":
                    stack.extend(n.args)
                    if n.op == "bin" and n.attr in "+-" and n.t in ki.FLOATS:
                        for a in n.args:
                            chain = self._contracted(a, parents)
                            if chain is not None and id(a) not in seen:
                                seen.add(id(a))
                                per_lane.extend(reversed(chain))        # (innermost first)
                                stack.extend(chain[-1][1].args)
                continue
            seeds[id(n)] = (n,) + self._val(n, memo, kmemo)
        return seeds, per_lane

    def _contracted(self, a, parents):
        """When operand ``a`` of a lane-serial float sum is a product used nowhere else (through the loop's
        temporaries; or its negation), the scalar code's instruction selection fuses the two into one FMA: then
        ``a`` is computed per lane too, so the lane's sum fuses alike.  The chain (node, what computes it) from
        ``a`` down to the product, outermost first; None otherwise."""
        if self._cls.of(a, {}) == L or parents.get(id(a), 0) != 1:
            return None
        chain, n = [], a
        while n.op == "var":
            v = n.attr
            got = self._cls.state.get(v)
            if got is None or got[1] is None or self._reads.get(v, 0) != 1:
                return None
            chain.append((n, got[1]))
            n = got[1]
        if n.op == "neg" and n.t in ki.FLOATS:
            inner = self._contracted(n.args[0], _parent_counts(n))
            if inner is None:
                return None
            return chain + [(n, n)] + inner if chain else [(a, n)] + inner
        if not (n.op == "bin" and n.attr == "*" and n.t in ki.FLOATS):
            return None
        return chain if chain else [(a, n)]

    def _lane(self, t, k, text, lane):
        """Lane ``lane`` of a value of class ``k`` (its text: a scalar, a first lane, a vector) as a scalar."""
        if k == U:
            return text
        if k == C:
            return self.b.op("add", T.I64, text, str(lane)) if lane else text
        return self.b.vector_extract(self._vt(t), text, lane)

    def _vt(self, t) -> str:
        return f"<{self.W} x {ir_loops.lltype(t)}>"

    def _store(self, st, memo, kmemo):
        b = self.b
        p = self.value(st.ptr, {})
        base = self._val(st.idx, memo, kmemo)[1]
        v = self._vec(st.value, memo, kmemo)
        lt = ir_loops.lltype(st.ptr.t.elem)
        md = f", align {_BYTES[st.ptr.t.elem]}"
        if st.alias is not None:
            md += ir_loops.alias_md(self.module, *st.alias)
        b.store(self._vt(st.ptr.t.elem), v, b.gep(lt, p, base), md)

    def _val(self, x, memo, kmemo):
        """(class, text) of ``x``: a scalar (U), the first lane (C) or a vector (V)."""
        got = memo.get(id(x))
        if got is not None:
            return got[1], got[2]
        k = self._cls.of(x, kmemo)
        if k == U:
            text = self.value(x, {})
        elif k == C:
            text = self._first_lane(x, memo, kmemo)
        else:
            text = self._vop(x, memo, kmemo)
        memo[id(x)] = (x, k, text)
        return k, text

    def _first_lane(self, x, memo, kmemo):
        if x.op == "var":
            return self._ibase if x.attr is self._ivar else self._texts[x.attr]
        (ka, a), (kb, c) = (self._val(y, memo, kmemo) for y in x.args)
        if ka == C:
            return self.b.op("add" if x.attr == "+" else "sub", T.I64, a, c)
        return self.b.op("add", T.I64, a, c)

    def _vec(self, x, memo, kmemo):
        """``x`` as a vector (a uniform broadcast, a contiguous index's lanes)."""
        k, text = self._val(x, memo, kmemo)
        if k == V:
            return text
        key = ("vec", id(x))
        got = memo.get(key)
        if got is not None:
            return got[1]
        vt = self._vt(x.t)
        if k == U:
            v = self._splat(x.t, text)
        else:
            iota = "<" + ", ".join(f"i64 {j}" for j in range(self.W)) + ">"
            v = self.b.op("add", vt, self._splat(x.t, text), iota)
        memo[key] = (x, v)
        return v

    def _splat(self, t, text):
        lt = ir_loops.lltype(t)
        if not text.startswith("%"):
            return f"splat ({lt} {text})"
        vt = self._vt(t)
        one = self.b.vector_insert(vt, "poison", lt, text, "0")
        return self.b.vector_shuffle(vt, one, "poison", "zeroinitializer", self.W)

    def _vop(self, x, memo, kmemo):
        op = x.op
        if op == "var":
            return self._texts[x.attr]
        if op == "load":
            b, t = self.b, x.t
            p = self.value(x.args[0], {})
            base = self._val(x.args[1], memo, kmemo)[1]
            md = f", align {_BYTES[t]}"
            if x.attr is not None:
                md += ir_loops.alias_md(self.module, *x.attr)
            return b.load(self._vt(t), b.gep(ir_loops.lltype(t), p, base), md)
        if op == "math":
            return self._vec(self._expand(x), memo, kmemo)
        emit = _VEMIT.get(op)
        if emit is None or (op == "bin" and x.attr in ("//", "%")):
            return self._per_lane(x, memo, kmemo)
        return emit(self, x, [self._vec(a, memo, kmemo) for a in x.args])

    def _per_lane(self, x, memo, kmemo):
        """``x`` computed lane by lane with the scalar code (what has no vector form)."""
        emit = ir_loops._EMIT.get(x.op)
        if emit is None:
            raise ir_loops.Unsupported(f"value {x.op}")
        args = [self._val(a, memo, kmemo) for a in x.args]
        vt, lt = self._vt(x.t), ir_loops.lltype(x.t)
        out = "poison"
        for lane in range(self.W):
            r = emit(self, x, [self._lane(a.t, k, text, lane) for a, (k, text) in zip(x.args, args)])
            out = self.b.vector_insert(vt, out, lt, r, str(lane))
        return out

    # vector forms, one per op family: (self, x, args as vectors) -> the vector
    def _v_bin(self, x, args):
        t, op = x.t, x.attr
        vt = self._vt(t)
        if t in ki.FLOATS:
            return self.b.op(ir_loops._FLOAT_BIN[op], vt, args[0], args[1], ir_loops._flags(x.fm))
        f = "lshr" if op == ">>" and t == ki.U64 else ir_loops._INT_BIN.get(op)
        if f is None:
            raise ir_loops.Unsupported(f"integer {op}")
        return self.b.op(f, vt, args[0], args[1])

    def _v_cmp(self, x, args):
        t = x.args[0].t
        if t in ki.FLOATS:
            return self.b.fcmp(ir_loops._FCMP[x.attr], self._vt(t), *args)
        preds = ir_loops._ICMP_U if t in (ki.U64, ki.BOOL) else ir_loops._ICMP_S
        return self.b.icmp(preds[x.attr], self._vt(t), *args)

    def _v_neg(self, x, args):
        if x.t in ki.FLOATS:
            return self.b.fneg(self._vt(x.t), args[0], ir_loops._flags(x.fm))
        return self.b.op("sub", self._vt(x.t), "zeroinitializer", args[0])

    def _v_not(self, x, args):
        lt = ir_loops.lltype(x.t)
        return self.b.op("xor", self._vt(x.t), args[0], f"splat ({lt} {T.const(lt, -1)})")

    def _v_select(self, x, args):
        return self.b.select(args[0], self._vt(x.t), args[1], args[2], cond_ty=self._vt(ki.BOOL))

    def _v_cast(self, x, args):
        b, src, t, v = self.b, x.args[0].t, x.t, args[0]
        vs, vt = self._vt(src), self._vt(t)
        if t == ki.BOOL:
            if src in ki.FLOATS:
                return b.fcmp("une", vs, v, "zeroinitializer")
            return b.icmp("ne", vs, v, "zeroinitializer")
        if src == ki.BOOL:
            return b.cast("uitofp" if t in ki.FLOATS else "zext", vs, v, vt)
        if src in ki.FLOATS and t in ki.FLOATS:
            return v if src == t else b.cast("fpext" if t == ki.F64 else "fptrunc", vs, v, vt)
        if src in ki.INTS and t in ki.FLOATS:
            return b.cast("uitofp" if src in ki.UNSIGNED else "sitofp", vs, v, vt)
        if src in ki.FLOATS and t in ki.INTS:
            return b.cast("fptoui" if t in ki.UNSIGNED else "fptosi", vs, v, vt)
        if src in ki.INTS and t in ki.INTS:
            if ki.BITS[t] == ki.BITS[src]:
                return v
            op = "trunc" if ki.BITS[t] < ki.BITS[src] else "zext" if src in ki.UNSIGNED else "sext"
            return b.cast(op, vs, v, vt)
        raise ir_loops.Unsupported(f"cast {src} -> {t}")

    def _v_bitcast(self, x, args):
        return self.b.cast("bitcast", self._vt(x.args[0].t), args[0], self._vt(x.t))

    def _v_intr(self, x, args):
        vt = self._vt(x.t)
        if x.attr == "frem":
            return self.b.op("frem", vt, *args, ir_loops._flags(x.fm))
        lt = ir_loops.lltype(x.t)
        name = f"llvm.{x.attr}.v{self.W}{ir_loops._INTRINSIC_SUFFIX[lt]}"
        fn = self.module.declare(name, vt, [vt] * len(args))
        return self.b.call(vt, fn, [f"{vt} {a}" for a in args])


def _parent_counts(x) -> dict:
    """How many operands of ``x``'s values (each once) are each value (by id): its uses in one statement."""
    counts, seen, stack = {}, set(), [x]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for a in n.args:
            counts[id(a)] = counts.get(id(a), 0) + 1
            stack.append(a)
    return counts


_VEMIT = {"bin": VectorRenderer._v_bin, "cmp": VectorRenderer._v_cmp, "neg": VectorRenderer._v_neg,
          "invert": VectorRenderer._v_not, "not": VectorRenderer._v_not, "select": VectorRenderer._v_select,
          "cast": VectorRenderer._v_cast, "bitcast": VectorRenderer._v_bitcast, "intr": VectorRenderer._v_intr}


def render(kir: ki.KernelIR, key: str, bits: int) -> str:
    """The kernel's LLVM IR (as ``ir_loops.render``) with its innermost contiguous loops in ``bits``-wide vector
    blocks (0: none), or ``ir_loops.Unsupported``."""
    try:
        text = VectorRenderer(ir_loops.symbol(key), bits).kernel(kir)
    except TypeError as e:
        raise ir_loops.Unsupported(f"{type(e).__name__}: {e}") from None
    return f"{ir_loops.HEADER}{key}\n{text}"


__all__ = ["render", "VectorRenderer", "STATS"]
