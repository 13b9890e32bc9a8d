"""Binding a program lowered for every size to one tuple of sizes in one native call: evaluate every polynomial of
its size plan, check every integer guard on them (the trace's and the lowering's), and write that tuple's tables.

The work is described by data (``FillProgram``: an int64 array per lowering, made from its ``SizePlan``) and done
by one function, written once as LLVM IR text (``llvm_text``) and compiled by llvmlite the first time a process binds sizes (a few
milliseconds, no Numba):

    i64 jitgrad_size_fill(i64 *program, i64 *buf, i64 ws_base)

``buf`` holds one binding's tables side by side (``FillLayout``): the argument table ``A``, the per-slot offsets
``OFF``, the workspace slots' byte offsets, the entry's context and the parameter bytes.  The program array ends
with two regions of its own: the *template* every binding's buffer starts as (the tables' constant entries; the
fill copies it into ``buf`` first, so Python allocates and copies nothing per binding) and the *scratch*: the
call's sizes (written there by the caller), the plan's values ``V`` and the values the caller reads back (the
workspace's size, fresh outputs' dims), side by side so one ``tolist`` reads them.  It returns 1 when every guard
holds (the tables are written), 0 when one fails, and -1 when an atom ``a // b`` or ``a % b`` has ``b == 0`` at
these sizes (the caller treats both as "not this lowering").  ``//`` and ``%`` round as Python's do (toward minus
infinity), which is what ``ir/symbolic.py`` means by them.

The program array (int64 words): a header of ``_HEADER`` counts and offsets, then

- the monomial rows, ``W + 1`` words each: a coefficient and ``W`` atom indices (padded with the index of an
  atom fixed at 1);
- per polynomial (the plan's, then those defining ``//`` and ``%`` atoms) its first row and its end;
- per derived atom, in dependency order: its op (0: ``//``, 1: ``%``), the polynomials of its operands and its
  atom index;
- the guards (polynomial, mask: bit ``sign(v) + 1`` set where the guard holds), the table writes (slot,
  polynomial), the int32 parameters (byte offset, polynomial), the parameter pointers (slot, byte offset), the
  offsets (slot, polynomial), the workspace slots (slot, root polynomial, offset polynomial), the float guards
  and the values read back (polynomial);
- the template (``FillLayout.words``) and the scratch (``FillLayout.scratch_words``).

A program with thousands of polynomials binds in microseconds and costs nothing to compile: a straight-line
function per lowering took seconds to build for nanoGPT's 751 polynomials.  ``SizePlan.__call__`` stays the
reference the tests compare it with.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..kernels import llvm_text as T
from ..kernels.llvm_text import DOUBLE, I1, I32, I64, I8, PTR, VOID

NAME = "jitgrad_size_fill"
_HEADER = ("n_sym", "n_atoms", "width", "rows", "polys", "n_defs", "defs", "n_guards", "guards", "n_table", "table",
           "n_i32", "i32", "n_pptr", "pptr", "n_off", "off_writes", "n_ws", "ws_writes",
           "L_off", "L_ws", "L_ctx", "L_params", "n_values", "n_fguards", "fguards", "fnodes", "stack",
           "template", "words", "scratch", "S_values", "n_read", "reads", "S_read")
_FLOAT_OPS = {"+": 2, "-": 3, "*": 4, "/": 5}       # a float guard's node kinds (0: a constant, 1: a value)
_H = {name: k for k, name in enumerate(_HEADER)}
_FILL = None
_LOCK = threading.Lock()


class FillLayout:
    """Where a binding's tables lie in its int64 buffer, in int64 words: A ``[0, n_table)``, then OFF (as long,
    at ``off``), the workspace slots' byte offsets (``ws``), the entry's context (``ctx``: the addresses of A, F,
    OFF, IE and the step table, ``entry.caller``'s; F's, IE's and the table's in the template, A's and OFF's
    written by the fill) and the parameter bytes (``params``), ``words`` in all.  And where the program's scratch
    holds the call's sizes (``[0, n_sizes)``), the plan's values (``values``) and the values read back (``read``),
    ``scratch_words`` in all."""

    __slots__ = ("n_table", "off", "ws", "ctx", "params", "words", "n_sizes", "values", "read", "scratch_words")

    def __init__(self, n_table: int, n_values: int, n_ws: int, n_sizes: int, n_param_bytes: int, n_read: int = 0):
        self.n_table = self.off = n_table
        self.ws = 2 * n_table
        self.ctx = self.ws + n_ws
        self.params = self.ctx + 5
        self.words = self.params + (n_param_bytes + 7) // 8
        self.n_sizes = self.values = n_sizes
        self.read = n_sizes + n_values
        self.scratch_words = self.read + n_read


class FillProgram:
    """A lowering's fill program (``array``, passed to the fill by its address) and views of its own regions:
    ``template`` (a binding buffer's start: the caller writes the constant entries), ``sizes`` (the caller writes
    a call's sizes here before the fill: a ctypes array, whose slice assignment from a tuple of ints costs less
    than NumPy's), ``values`` (the plan's values after a fill) and ``read`` (the values the caller reads back, in
    the order it asked for them)."""

    __slots__ = ("array", "address", "template", "sizes", "values", "read")

    def __init__(self, array, template_at: int, scratch_at: int, layout: FillLayout):
        L = layout
        self.array = array
        self.address = array.ctypes.data
        self.template = array[template_at:template_at + L.words]
        scratch = array[scratch_at:scratch_at + L.scratch_words]
        self.sizes = (ctypes.c_int64 * L.n_sizes).from_buffer(array, 8 * scratch_at)
        self.values, self.read = scratch[L.values:L.read], scratch[L.read:]


def float_guard_nodes(e, ref):
    """A float guard's folded expression ``e`` (``size_plan.fold_float``) in postfix, as ``(kind, arg)`` rows
    (kind 0: the float64 constant whose bits are arg, 1: the value of polynomial ``ref(poly)``, then the
    operators of ``_FLOAT_OPS``), or None when it uses an operator the fill does not evaluate (``**``)."""
    out = []

    def emit(x):
        k = x[0]
        if k == "const":
            out.append((0, int(np.array(float(x[1]), np.float64).view(np.int64))))
        elif k == "int":
            out.append((1, ref(x[1])))
        elif k in _FLOAT_OPS:
            emit(x[1])
            emit(x[2])
            out.append((_FLOAT_OPS[k], 0))
        else:
            raise KeyError(k)
    try:
        emit(e)
    except KeyError:
        return None
    return out


def fill_program(plan, names, guards, layout: FillLayout, table, int32_params, param_ptrs, offsets, ws_slots,
                 float_guards=(), reads=()) -> FillProgram:
    """The fill's program (see the module docstring), its template zero.

    ``plan``: a ``SizePlan`` (``atoms`` in dependency order, ``derived``, ``polys``); ``names``: the size symbols
    in the order their values are in the buffer; ``guards``: ``(poly index, mask)``; ``table``: ``(slot, poly
    index)`` written to A; ``int32_params``: ``(byte offset, poly index)``; ``param_ptrs``: ``(slot, byte
    offset)``: A[slot] = the address of the buffer's parameter bytes + offset; ``offsets``: ``(slot, poly
    index)`` written to OFF; ``ws_slots``: ``(slot, root index, offset index)``: the workspace byte offset
    V[root] + V[offset] is kept and A[slot] = ws_base + it; ``float_guards``: ``(nodes, mask)``, the float64
    value of ``nodes`` (``float_guard_nodes``) has a sign ``mask`` allows (a NaN never holds); ``reads``: poly
    indices whose values the fill copies to the scratch's ``read`` region."""
    atom_index = {n: k for k, n in enumerate(names)}
    for a in plan.atoms:
        if a not in atom_index:
            if a not in plan.derived:
                raise ValueError(f"size symbol {a} is not an argument of the fill")
            atom_index[a] = len(atom_index)
    one = len(atom_index)
    polys = list(plan.polys)
    defs = []
    for a in plan.atoms:
        if a in plan.derived:
            op, x, y = plan.derived[a]
            defs.append((0 if op == "floordiv" else 1, len(polys), len(polys) + 1, atom_index[a]))
            polys += [x, y]
    width = max([len(m) for p in polys for m, _ in p] + [1])
    rows, spans = [], []
    for p in polys:
        start = len(rows)
        for m, c in p:
            rows.append([c] + [atom_index[a] for a in m] + [one] * (width - len(m)))
        spans.append((start, len(rows)))
    parts = [np.array(rows, np.int64).reshape(-1, width + 1), np.array(spans, np.int64).reshape(-1, 2)]
    fspans, fnodes, depth = [], [], 1
    for nodes, mask in float_guards:
        fspans.append((len(fnodes), len(fnodes) + len(nodes), mask))
        fnodes += nodes
        d = 0
        for kind, _ in nodes:
            d += 1 if kind < 2 else -1
            depth = max(depth, d)
    for block, n in ((defs, 4), (guards, 2), (table, 2), (int32_params, 2), (param_ptrs, 2), (offsets, 2),
                     (ws_slots, 3), (fspans, 3), (fnodes, 2), (list(reads), 1)):
        parts.append(np.array(block, np.int64).reshape(-1, n))
    L = layout
    parts += [np.zeros(L.words, np.int64), np.zeros(L.scratch_words, np.int64)]     # the template, the scratch
    header = np.zeros(len(_HEADER), np.int64)
    at = len(_HEADER)
    starts = []
    for p in parts:
        starts.append(at)
        at += p.size
    values = dict(n_sym=len(names), n_atoms=one, width=width, rows=starts[0], polys=starts[1],
                  n_defs=len(defs), defs=starts[2], n_guards=len(guards), guards=starts[3],
                  n_table=len(table), table=starts[4], n_i32=len(int32_params), i32=starts[5],
                  n_pptr=len(param_ptrs), pptr=starts[6], n_off=len(offsets), off_writes=starts[7],
                  n_ws=len(ws_slots), ws_writes=starts[8], L_off=L.off, L_ws=L.ws, L_ctx=L.ctx,
                  L_params=L.params, n_values=len(plan.polys), n_fguards=len(fspans), fguards=starts[9],
                  fnodes=starts[10], stack=depth, template=starts[12], words=L.words, scratch=starts[13],
                  S_values=L.values, n_read=len(reads), reads=starts[11], S_read=L.read)
    if len(plan.polys) > L.read - L.values or len(reads) > L.scratch_words - L.read:
        raise ValueError("the layout's scratch is smaller than the plan's values or the values read back")
    for k, v in values.items():
        header[_H[k]] = v
    return FillProgram(np.concatenate([header] + [p.ravel() for p in parts]), starts[12], starts[13], L)


def fill_ir() -> str:
    """The fill function (one for every program) as LLVM IR text (``llvm_text``)."""
    mod = T.Module(NAME)
    fn = mod.function(NAME, [PTR, PTR, I64], ret=I64, attrs="")
    prog, buf, ws_base = fn.args
    top = T.Builder(fn, fn.block("entry"))
    body = fn.block("body")
    b = T.Builder(fn, body)
    fail, zero_div = fn.block("guard_failed"), fn.block("zero_divisor")

    def get(ptr, k):
        return b.load(I64, b.gep(I64, ptr, k))

    def put(ptr, k, v):
        b.store(I64, v, b.gep(I64, ptr, k))

    def h(name):
        return get(prog, str(_H[name]))

    def add(x, y):
        return b.op("add", I64, x, y)

    def mul(x, y):
        return b.op("mul", I64, x, y)

    def sub(x, y):
        return b.op("sub", I64, x, y)

    def icmp(pred, x, y):
        return b.icmp(pred, I64, x, y)

    def zext(x):
        return b.cast("zext", I1, x, I64)

    def loop(n, each, label):
        """``for (k = 0; k < n; k++) each(k)``: its counter in an alloca of the entry block."""
        slot = top.alloca(I64, name=label)
        b.store(I64, "0", slot)
        head, inner, done = (fn.block(f"{label}.{x}") for x in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        k = b.load(I64, slot)
        b.cbranch(icmp("slt", k, n), inner, done)
        b.position_at_end(inner)
        each(k)
        b.store(I64, add(b.load(I64, slot), "1"), slot)
        b.branch(head)
        b.position_at_end(done)

    def pair(base, k, width, j):
        return get(prog, add(base, add(mul(k, str(width)), str(j))))

    # the buffer starts as the template; the sizes and the plan's values are in the program's scratch
    template, scratch = b.gep(I64, prog, h("template")), b.gep(I64, prog, h("scratch"))
    copy = mod.declare("llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1])
    b.call(VOID, copy, [f"ptr {buf}", f"ptr {template}", f"i64 {mul(h('words'), '8')}", "i1 false"])
    # atom values: the sizes, the derived atoms in order, and a 1 the rows are padded with
    n_atoms = h("n_atoms")
    atoms = b.alloca(I64, add(n_atoms, "1"), name="atoms")
    put(atoms, n_atoms, "1")
    sizes = scratch
    loop(h("n_sym"), lambda k: put(atoms, k, get(sizes, k)), "sym")
    width = h("width")
    rows, polys = h("rows"), h("polys")
    total = top.alloca(I64, name="total")
    term = top.alloca(I64, name="term")

    def poly(p):
        """The value of polynomial ``p``: its rows' coefficient times their atoms, summed."""
        start, stop = pair(polys, p, 2, 0), pair(polys, p, 2, 1)
        b.store(I64, "0", total)

        def row(r):
            at = add(rows, mul(add(start, r), add(width, "1")))
            b.store(I64, get(prog, at), term)
            loop(width, lambda w: b.store(I64, mul(b.load(I64, term), get(atoms, get(prog, add(at, add(w, "1"))))),
                                          term), "atom")
            b.store(I64, add(b.load(I64, total), b.load(I64, term)), total)
        loop(sub(stop, start), row, "row")
        return b.load(I64, total)

    defs = h("defs")

    def derive(d):
        op = pair(defs, d, 4, 0)
        x = poly(pair(defs, d, 4, 1))
        y = poly(pair(defs, d, 4, 2))
        ok = fn.block("divisor.ok")
        b.cbranch(icmp("eq", y, "0"), zero_div, ok)
        b.position_at_end(ok)
        q, r = b.op("sdiv", I64, x, y), b.op("srem", I64, x, y)
        # toward minus infinity, as Python: a remainder whose sign differs from the divisor's moves q down one
        adjust = b.op("and", I1, icmp("ne", r, "0"), icmp("slt", b.op("xor", I64, r, y), "0"))
        v = b.select(icmp("eq", op, "0"), I64, sub(q, zext(adjust)),
                     add(r, b.select(adjust, I64, y, "0")))
        put(atoms, pair(defs, d, 4, 3), v)
    loop(h("n_defs"), derive, "def")
    V = b.gep(I64, scratch, h("S_values"))
    loop(h("n_values"), lambda p: put(V, p, poly(p)), "value")
    guards = h("guards")

    def bit_of(mask, sign):
        """Bit ``sign + 1`` of ``mask`` (the guard holds where it is set)."""
        return b.op("and", I64, b.op("lshr", I64, mask, add(sign, "1")), "1")

    def guard(g):
        v = get(V, pair(guards, g, 2, 0))
        sign = sub(zext(icmp("sgt", v, "0")), zext(icmp("slt", v, "0")))
        bit = bit_of(pair(guards, g, 2, 1), sign)
        ok = fn.block("guard.ok")
        b.cbranch(b.cast("trunc", I64, bit, I1), ok, fail)
        b.position_at_end(ok)
    loop(h("n_guards"), guard, "guard")
    stack = b.alloca(DOUBLE, h("stack"), name="stack")
    depth = top.alloca(I64, name="depth")
    fguards, fnodes = h("fguards"), h("fnodes")

    def float_guard(g):
        start, stop = pair(fguards, g, 3, 0), pair(fguards, g, 3, 1)
        b.store(I64, "0", depth)

        def node(n):
            at = add(start, n)
            kind, arg = pair(fnodes, at, 2, 0), pair(fnodes, at, 2, 1)
            d = b.load(I64, depth)
            leaf = icmp("slt", kind, "2")
            # a leaf pushes (a constant's bits, or a value converted); an operator pops two and pushes one
            x = b.select(icmp("eq", kind, "0"), DOUBLE, b.cast("bitcast", I64, arg, DOUBLE),
                         b.cast("sitofp", I64, get(V, b.select(icmp("eq", kind, "1"), I64, arg, "0")), DOUBLE))
            top_at = sub(d, "1")
            below = sub(d, "2")
            lhs = b.load(DOUBLE, b.gep(DOUBLE, stack, b.select(leaf, I64, "0", below)))
            rhs = b.load(DOUBLE, b.gep(DOUBLE, stack, b.select(leaf, I64, "0", top_at)))
            r = b.select(icmp("eq", kind, "2"), DOUBLE, b.op("fadd", DOUBLE, lhs, rhs),
                         b.select(icmp("eq", kind, "3"), DOUBLE, b.op("fsub", DOUBLE, lhs, rhs),
                                  b.select(icmp("eq", kind, "4"), DOUBLE, b.op("fmul", DOUBLE, lhs, rhs),
                                           b.op("fdiv", DOUBLE, lhs, rhs))))
            b.store(DOUBLE, b.select(leaf, DOUBLE, x, r), b.gep(DOUBLE, stack, b.select(leaf, I64, d, below)))
            b.store(I64, b.select(leaf, I64, add(d, "1"), top_at), depth)
        loop(sub(stop, start), node, "fnode")
        v = b.load(DOUBLE, stack)
        zero = T.const(DOUBLE, 0.0)
        sign = sub(zext(b.fcmp("ogt", DOUBLE, v, zero)), zext(b.fcmp("olt", DOUBLE, v, zero)))
        bit = bit_of(pair(fguards, g, 3, 2), sign)
        ok = fn.block("fguard.ok")
        holds = b.op("and", I1, b.cast("trunc", I64, bit, I1), b.fcmp("oeq", DOUBLE, v, v))  # (a NaN never holds)
        b.cbranch(holds, ok, fail)
        b.position_at_end(ok)
    loop(h("n_fguards"), float_guard, "fguard")
    table = h("table")
    loop(h("n_table"), lambda t: put(buf, pair(table, t, 2, 0), get(V, pair(table, t, 2, 1))), "table")
    base = b.cast("ptrtoint", PTR, buf, I64)
    params_word = h("L_params")
    params = add(base, mul(params_word, "8"))
    i32s = h("i32")

    def int32(k):
        at = add(mul(params_word, "8"), pair(i32s, k, 2, 0))
        b.store(I32, b.cast("trunc", I64, get(V, pair(i32s, k, 2, 1)), I32), b.gep(I8, buf, at))
    loop(h("n_i32"), int32, "i32")
    pptr = h("pptr")
    loop(h("n_pptr"), lambda k: put(buf, pair(pptr, k, 2, 0), add(params, pair(pptr, k, 2, 1))), "pptr")
    offs, off_base = h("off_writes"), h("L_off")
    loop(h("n_off"), lambda k: put(buf, add(off_base, pair(offs, k, 2, 0)), get(V, pair(offs, k, 2, 1))), "off")
    wss, ws_base_word = h("ws_writes"), h("L_ws")

    def ws(k):
        byte = add(get(V, pair(wss, k, 3, 1)), get(V, pair(wss, k, 3, 2)))
        put(buf, add(ws_base_word, k), byte)
        put(buf, pair(wss, k, 3, 0), add(ws_base, byte))
    loop(h("n_ws"), ws, "ws")
    ctx = h("L_ctx")
    put(buf, ctx, base)
    put(buf, add(ctx, "2"), add(base, mul(off_base, "8")))
    reads, read_at = h("reads"), b.gep(I64, scratch, h("S_read"))
    loop(h("n_read"), lambda k: put(read_at, k, get(V, get(prog, add(reads, k)))), "read")
    b.ret(I64, "1")
    top.branch(body)
    b.position_at_end(fail)
    b.ret(I64, "0")
    b.position_at_end(zero_div)
    b.ret(I64, "-1")
    return mod.text()


def size_fill():
    """The fill function, linked into this process on first use, as a ctypes function ``fill(program address,
    buffer address, workspace base) -> int``."""
    global _FILL
    if _FILL is None:
        with _LOCK:
            if _FILL is None:
                from ..native import llvm_build, objload, objstore
                # the quick pipeline (its counters and sums live in allocas until SROA puts them in registers):
                # O2 cost ~3.5x the instructions, on the build thread before a lowering's first compiled call
                addr = objload.load([objstore.Blob(NAME, NAME, llvm_build.quick_object(fill_ir()), [])])[NAME]
                proto = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
                _FILL = proto(addr)
    return _FILL


__all__ = ["FillLayout", "FillProgram", "NAME", "fill_ir", "fill_program", "float_guard_nodes", "size_fill"]
