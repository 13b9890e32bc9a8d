"""Innermost loops rendered as vector IR (``<16 x float>`` ...) for the first build tier (issue 30).

The first tier (``native/llvm_build.py``'s quick passes) runs no loop vectoriser: its loops were scalar, and a cold
script's calls ran them until the O3 build landed.  Here the kernel's innermost loops are written in vector form
by jitgrad itself, so cheap LLVM passes give vector code.  ``VectorRenderer`` is ``ir_loops``' renderer with one
change: an innermost ``For`` (step 1, straight-line body of assignments and stores) whose operands are walked
contiguously by its counter becomes a loop over blocks of ``width`` elements, then the scalar loop for the rest
(the remainder, and the whole loop when a check below fails).

Each value of the body has a class (``_klass``): uniform (``U``: the same in every iteration, emitted as the scalar
code computes it), the counter plus a uniform (``C``: a contiguous index, kept as its first lane), varying (``V``: a
vector of ``width`` lanes) or lane-serial (``L``: it depends on a variable the loop carries from one iteration to
the next, ``acc = acc + x``).  Lane-serial statements run after the block's vector statements, lane by lane in
order, as scalar code on the lanes' values: a sum adds its terms in the scalar loop's order, so the bits are those
of the scalar loop.  Every other operation is the scalar one applied per lane (same instruction, same fast-math
flags), and what has no vector form (the C library's functions, table loads, integer ``//`` and ``%``) is run per
lane.  Loads and stores whose index is not contiguous (strided, gathered) keep the loop scalar.

Memory order: a block loads and stores all its lanes at once, which is the scalar order unless a store and another
access of the block touch the same memory at different lanes.  Two accesses of different alias classes never do
(the layout's promise, ``alias_scopes.py``), nor two at the same address expression; any other pair is checked
before the loop (the same element, or ``width`` elements or more apart; a uniform access outside the range the
stores cover), and the scalar loop runs all of it when a check fails.
"""
from __future__ import annotations

from . import ir_loops, kernel_ir as ki, llvm_text as T

U, C, V, L = 0, 1, 2, 3     # a value's class in a loop (see the module docstring)
MAX_CHECKS = 8              # more pairs of accesses to check than this: the loop stays scalar
MAX_WIDTH = 16              # lanes at most (bytes and bools: a serial sum over 64 lanes would be long)
_BYTES = {ki.F32: 4, ki.F64: 8, ki.I64: 8, ki.I32: 4, ki.U8: 1, ki.U64: 8, ki.BOOL: 1}
STATS = {"loops_vector": 0, "loops_scalar": 0}      # innermost loops rendered each way (for tests)


class _Refuse(Exception):
    """The loop stays scalar (the reason)."""


def _widest(t) -> int:
    return 8 if t == ki.BOOL else ki.BITS.get(t, 0) if not ki.is_ptr(t) else 0


class _Plan:
    """What the analysis found: lanes, carried variables, accesses to check, variables read after the loop."""
    __slots__ = ("width", "carried", "checks", "live_out", "lanes")

    def __init__(self, width, carried, checks, live_out, lanes):
        self.width, self.carried, self.checks, self.live_out = width, carried, checks, live_out
        self.lanes = lanes      # var -> the exact operation it reduces with, lane by lane (``_exact_reduction``)


class VectorRenderer(ir_loops._Renderer):
    """``ir_loops``' renderer whose innermost contiguous loops run ``bits``-wide vector blocks first."""

    def __init__(self, name, bits: int):
        super().__init__(name)
        self.bits = bits
        self._kernel_body = ()
        self._once = self._accesses = self._widths = None
        self._lanes = {}

    def kernel(self, k: ki.KernelIR) -> str:
        self._kernel_body = k.body
        return super().kernel(k)

    # ---- analysis -----------------------------------------------------------------------------------------
    def _klass(self, x, memo):
        """``x``'s class (U, C, V, L) in the loop being planned or emitted (``self._ivar``, ``_carried``, ``_state``),
        refusing what the vector loop cannot do; ``memo``: classes of this statement's values."""
        got = memo.get(id(x))
        if got is not None:
            return got
        op = x.op
        if op == "const":
            k = U
        elif op == "var":
            v = x.attr
            k = C if v is self._ivar else V if v in self._lanes else L if v in self._carried else \
                self._state.get(v, (U,))[0]
        elif op == "load":
            kp, kx = self._klass(x.args[0], memo), self._klass(x.args[1], memo)
            if kp != U or kx > C:
                raise _Refuse("load not contiguous" if kp == U and kx == V else "load's address")
            k = V if kx == C else U
            if self._accesses is not None:
                self._accesses.append((False, x.args[0], x.args[1], kx, x.t, x.attr))
        elif op == "ptr":
            k = self._klass(x.args[0], memo)
            if k != U:
                raise _Refuse("varying pointer")
        elif op == "param":
            raise _Refuse("param")
        else:
            k = U
            for a in x.args:
                ka = self._klass(a, memo)
                if ka > k:
                    k = ka
            if k == C:
                ks = [self._klass(a, memo) for a in x.args]
                if not (op == "bin" and x.t == ki.I64 and (x.attr == "+" and U in ks or x.attr == "-" and ks[1] == U)):
                    k = V
        memo[id(x)] = k
        return k

    def _plan(self, s: ki.For):
        if s.step != 1:
            raise _Refuse("step")
        body = [st for st in s.body if not isinstance(st, ki.Comment)]
        in_body, assigned, carried = _assigned_vars(body), set(), set()
        for st in body:
            if not isinstance(st, (ki.Assign, ki.Store)):
                raise _Refuse(type(st).__name__)
            carried.update(v for v in _reads(st) if v in in_body and v not in assigned)
            if isinstance(st, ki.Assign):
                assigned.add(st.var)
        lanes = {}
        for v in carried:
            op = _exact_reduction(v, body)
            if op is not None:
                lanes[v] = op
        carried -= set(lanes)
        if self._once is None:
            self._once = _assigned_once(self._kernel_body)
        self._ivar, self._carried, self._state, self._lanes = s.var, carried, {}, lanes
        self._accesses, self._widths = [], set()
        accesses = []       # (store?, key, class of the index, type, alias, (pointer, index))
        for st in body:
            memo = {}
            before = len(self._accesses)
            if isinstance(st, ki.Assign):
                k = self._klass(st.value, memo)
                if st.var in carried or st.var in lanes:
                    self._widths.add(_widest(st.var.t))
            else:
                kp, kx, kv = (self._klass(v, memo) for v in (st.ptr, st.idx, st.value))
                if kp != U or kx != C:
                    raise _Refuse("store not contiguous")
                if kv == L:
                    raise _Refuse("store of a carried value")
                self._accesses.append((True, st.ptr, st.idx, kx, st.ptr.t.elem, st.alias))
            key = _Keys(self._once, self._state, carried)       # addresses as this statement reads them
            for store, ptr, idx, kx, t, alias in self._accesses[before:]:
                accesses.append((store, (key(ptr), key(idx), t), kx, t, alias, (ptr, idx)))
                if kx == C:
                    self._widths.add(_widest(t))
            if isinstance(st, ki.Assign):
                self._state[st.var] = (L if st.var in carried else V if st.var in lanes else k, st.value)
        if not any(k[0] != U for k in self._state.values()) and not any(a[0] for a in accesses):
            raise _Refuse("nothing varies")
        checks = _pairs(accesses, in_body)
        width = max(2, min(MAX_WIDTH, self.bits // max(self._widths | {8})))
        live = _live_after(self._kernel_body, s) & (in_body | {s.var})
        return _Plan(width, carried, checks, live, lanes)

    # ---- emission -----------------------------------------------------------------------------------------
    def loop(self, s: ki.For, start, stop):
        plan = None
        if self.bits:
            try:
                plan = self._plan(s)
            except _Refuse:
                plan = None
            finally:
                self._accesses = self._widths = None
        if plan is None:
            STATS["loops_scalar"] += 1
            return super().loop(s, start, stop)
        STATS["loops_vector"] += 1
        rest = self._vector_loop(s, plan, start, stop)
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
        self._ibase, self._ivar, self._carried, self._state = None, s.var, plan.carried, {}
        self._lanes = plan.lanes
        acc = {}
        for var, op in plan.lanes.items():      # a lane-parallel accumulator per exact reduction, at its identity
            acc[var] = self.alloca_b.alloca(self._vt(var.t), name=f"{var.name}.lanes")
            b.store(self._vt(var.t), self._splat(var.t, _IDENTITY[op](var.t)), acc[var])
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
        self._accesses = self._widths = None
        self._texts = {var: b.load(self._vt(var.t), slot) for var, slot in acc.items()}
        deferred = []
        for st in s.body:
            if isinstance(st, ki.Comment):
                continue
            memo, kmemo = {}, {}
            if isinstance(st, ki.Store):
                self._store(st, memo, kmemo)
                continue
            var = st.var
            k = L if var in plan.carried else self._klass(st.value, kmemo)
            self._state[var] = (k, None)
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
            for st, seeds in deferred:
                memo = {}
                for key, (node, k, text) in seeds.items():
                    memo[key] = (node, self._lane(node.t, k, text, lane))
                b.store(ir_loops.lltype(st.var.t), self.value(st.value, memo), self.slot(st.var))
        for var in plan.live_out - set(plan.lanes):
            k = C if var is s.var else self._state[var][0]
            if k in (C, V):
                text = i if var is s.var else self._texts[var]
                b.store(ir_loops.lltype(var.t), self._lane(var.t, k, text, W - 1), self.slot(var))
        b.branch(head)
        b.position_at_end(done)
        for var, op in plan.lanes.items():      # the lanes' results, then the value from before the loop
            vt, lt = self._vt(var.t), ir_loops.lltype(var.t)
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
        """A lane-serial value's inputs that are not lane-serial, emitted now: id -> (node, class, text)."""
        seeds, stack, seen = {}, [x], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            k = self._klass(n, kmemo)
            if k == L:
                if n.op != "var":
                    stack.extend(n.args)
                continue
            seeds[id(n)] = (n,) + self._val(n, memo, kmemo)
        return seeds

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
        k = self._klass(x, kmemo)
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


_VEMIT = {"bin": VectorRenderer._v_bin, "cmp": VectorRenderer._v_cmp, "neg": VectorRenderer._v_neg,
          "invert": VectorRenderer._v_not, "not": VectorRenderer._v_not, "select": VectorRenderer._v_select,
          "cast": VectorRenderer._v_cast, "bitcast": VectorRenderer._v_bitcast, "intr": VectorRenderer._v_intr}


# ---------------------------------------------------------------------------------------------------- accesses
def _pairs(accesses, in_body):
    """The pairs (store, access) of a loop that need a check before it (see the module docstring)."""
    out, seen = [], set()
    for s in accesses:
        if not s[0]:
            continue
        for x in accesses:
            if x is s:
                continue
            if s[4] is not None and x[4] is not None and s[4][1] == x[4][1] and s[4][0] != x[4][0]:
                continue        # alias classes apart
            if s[1] == x[1]:
                continue        # the same element in every lane
            pair = (s[1], x[1])
            if pair in seen:
                continue
            seen.add(pair)
            if any(n.op == "var" and n.attr in in_body for node in s[5] + x[5] for n in ki.walk_values(node)):
                raise _Refuse("checked address from the loop's own variables")
            out.append((s, x))
    if len(out) > MAX_CHECKS:
        raise _Refuse("too many accesses to check")
    return out


class _Keys:
    """A structural key per value (for addresses): variables assigned once in the kernel stand for their values,
    the loop's temporaries for their values at this point of its body (``state``)."""

    def __init__(self, once, state, carried):
        self.once, self.state, self.carried, self.memo = once, state, carried, {}

    def __call__(self, x):
        got = self.memo.get(id(x))
        if got is not None:
            return got[1]
        if x.op == "var":
            v = x.attr
            if v in self.state:
                k = ("var", id(v)) if v in self.carried else self(self.state[v][1])
            elif v in self.once:
                k = self(self.once[v])
            else:
                k = ("var", id(v))
        elif x.op == "const":
            k = ("const", x.t, x.attr)
        else:
            k = (x.op, x.t, x.attr if x.op in ("bin", "cmp", "intr", "libm") else None,
                 tuple(self(a) for a in x.args))
        self.memo[id(x)] = (x, k)
        return k


# ---------------------------------------------------------------------------------------------------- reductions
def _ints_of(x):
    """``x`` below value-preserving integer widenings (sext / zext casts)."""
    while x.op == "cast" and x.t in ki.INTS and x.args[0].t in ki.INTS and ki.BITS[x.t] >= ki.BITS[x.args[0].t]:
        x = x.args[0]
    return x


def _is(x, var) -> bool:
    return x.op == "var" and x.attr is var


def _same(a, c) -> bool:
    return a is c or (a.op == "var" and c.op == "var" and a.attr is c.attr)


def _exact_reduction(var, body):
    """The exact associative operation (add, or, and, xor, smax, smin, umax, umin) ``var`` accumulates with, when its
    one update in ``body`` is ``var = var OP e`` (integer widenings and a truncation back allowed) or a select of the
    larger / smaller of ``var`` and ``e``, and nothing else in ``body`` reads it: its lanes may then reduce apart and
    combine at the end, in any order, to the same bits.  None otherwise (float sums: their order is their bits)."""
    t = var.t
    if t not in ki.INTS and t != ki.BOOL:
        return None
    updates = [st for st in body if isinstance(st, ki.Assign) and st.var is var]
    if len(updates) != 1 or any(var in _reads(st) for st in body if st is not updates[0]):
        return None
    x = updates[0].value
    if x.op == "cast" and x.t == t and x.args[0].t in ki.INTS and t != ki.BOOL:
        x = x.args[0]           # a truncation back to the variable's type: low bits of +, |, &, ^ are exact
    if x.op == "bin" and x.attr in ("+", "|", "&", "^") and not (x.attr == "+" and x.t == ki.BOOL):
        a, c = (_ints_of(y) for y in x.args)
        if _is(a, var) != _is(c, var) and var not in _reads_values([c if _is(a, var) else a]):
            return {"+": "add", "|": "or", "&": "and", "^": "xor"}[x.attr]
        return None
    if x.op != "select" or x.t != t or x.args[0].op != "cmp" or x.args[0].attr not in ("<", "<=", ">", ">="):
        return None
    cond, pick, other = x.args
    a, c = (_ints_of(y) for y in cond.args)
    if _is(a, var) == _is(c, var):
        return None
    e = c if _is(a, var) else a
    if not ((_is(pick, var) and _same(_ints_of(other), e)) or (_is(other, var) and _same(_ints_of(pick), e))):
        return None
    if var in _reads_values([e]):
        return None
    greater = (cond.attr in (">", ">=")) == _is(c, var)    # the condition says e is the larger
    larger = greater == _same(_ints_of(pick), e)           # the select keeps the larger
    if t == ki.BOOL:
        return "or" if larger else "and"
    return ("u" if t in ki.UNSIGNED else "s") + ("max" if larger else "min")


def _all_ones(t):
    return "true" if t == ki.BOOL else "-1"


_IDENTITY = {"add": lambda t: "0" if t != ki.BOOL else "false", "or": lambda t: "0" if t != ki.BOOL else "false",
             "xor": lambda t: "0" if t != ki.BOOL else "false", "and": _all_ones, "umax": lambda t: "0",
             "umin": _all_ones, "smax": lambda t: str(-(1 << (ki.BITS[t] - 1))),
             "smin": lambda t: str((1 << (ki.BITS[t] - 1)) - 1)}


# ---------------------------------------------------------------------------------------------------- variables
def _reads(st):
    """The variables statement ``st`` reads."""
    out = []
    for top in ki.statement_values([st]):
        for x in ki.walk_values(top):
            if x.op == "var":
                out.append(x.attr)
    return out


def _assigned_vars(body):
    return {st.var for st in body if isinstance(st, ki.Assign)}


def _assigned_once(stmts) -> dict:
    """Variables assigned exactly once in ``stmts`` (a kernel), and never by a loop: var -> its value."""
    count, value, loops = {}, {}, set()

    def walk(ss):
        for st in ss:
            if isinstance(st, ki.Assign):
                count[st.var] = count.get(st.var, 0) + 1
                value[st.var] = st.value
            elif isinstance(st, ki.For):
                loops.add(st.var)
                walk(st.body)
            elif isinstance(st, ki.If):
                walk(st.then)
                walk(st.orelse)
    walk(stmts)
    return {v: value[v] for v, n in count.items() if n == 1 and v not in loops}


def _live_after(stmts, loop) -> set:
    """Variables read anywhere in the kernel outside ``loop``'s body (may be read after it)."""
    out = set()

    def walk(ss):
        for st in ss:
            if st is loop:
                out.update(_reads_values((st.start, st.stop)))
                continue
            if isinstance(st, ki.For):
                out.update(_reads_values((st.start, st.stop)))
                walk(st.body)
            elif isinstance(st, ki.If):
                out.update(_reads_values((st.cond,)))
                walk(st.then)
                walk(st.orelse)
            else:
                out.update(_reads(st))
    walk(stmts)
    return out


def _reads_values(values):
    return {x.attr for top in values for x in ki.walk_values(top) if x.op == "var"}


def render(kir: ki.KernelIR, key: str, bits: int) -> str:
    """The kernel's LLVM IR (as ``ir_loops.render``) with its innermost contiguous loops in ``bits``-wide vector
    blocks (0: none), or ``ir_loops.Unsupported``."""
    try:
        text = VectorRenderer(ir_loops.symbol(key), bits).kernel(kir)
    except TypeError as e:
        raise ir_loops.Unsupported(f"{type(e).__name__}: {e}") from None
    return f"{ir_loops.HEADER}{key}\n{text}"


__all__ = ["render", "VectorRenderer", "STATS", "MAX_WIDTH"]
