"""A program's size plan as native code: one call per new tuple of sizes evaluates every polynomial of a program
lowered once for every size (``sized.py``), checks every integer guard on them (the trace's and the lowering's)
and writes that tuple's tables.

The function is straight-line LLVM IR made from the plan (``ir/size_plan.SizePlan``: its atoms in dependency
order, its polynomials) and compiled by llvmlite when the program is first bound (a few milliseconds, no Numba):

    i64 fill(i64 *buf, i64 ws_base, i64 s0, ..., i64 s{n-1})

``buf`` holds one binding's tables side by side (``FillLayout``): the argument table ``A``, the per-slot offsets
``OFF``, the plan's values ``V``, the workspace slots' byte offsets, the entry's context and the parameter bytes.  It returns 1 when
every guard holds (the tables are written), 0 when one fails and -1 when an atom ``a // b`` or ``a % b`` has
``b == 0`` at these sizes (the caller treats both as "not this lowering").  ``//`` and ``%`` round as Python's
do (toward minus infinity), which is what ``ir/symbolic.py`` means by them.

Replaces per-binding NumPy and Python work (a dozen array calls and a loop over the atoms: ~60-90 us per new
size) by one foreign call; ``SizePlan.__call__`` stays the reference the tests compare it with.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading

NAME = "jitgrad_sizefill"   # the function's name in the IR (renamed per plan when linked)
_LOADED: dict = {}          # digest of the IR -> address (one symbol per distinct plan in this process)
_LOCK = threading.Lock()


class FillLayout:
    """Where a binding's tables lie in its int64 buffer, in int64 words: A ``[0, n_table)``, then OFF (as long),
    the plan's values ``V`` (``values``), the workspace slots' byte offsets (``ws``), the entry's context
    (``ctx``: the addresses of A, F, OFF and IE, ``entry.caller``'s; F's and IE's in the template, A's and OFF's
    written by the fill) and the parameter bytes (``params``), ``words`` in all."""

    __slots__ = ("n_table", "off", "values", "ws", "ctx", "params", "words")

    def __init__(self, n_table: int, n_values: int, n_ws: int, n_param_bytes: int):
        self.n_table = self.off = n_table
        self.values = 2 * n_table
        self.ws = self.values + n_values
        self.ctx = self.ws + n_ws
        self.params = self.ctx + 4
        self.words = self.params + (n_param_bytes + 7) // 8


def fill_ir(plan, names, guards, layout: FillLayout, table, int32_params, param_ptrs, offsets, ws_slots):
    """The fill function as LLVM IR text.

    ``plan``: a ``SizePlan`` (``atoms``, ``polys``); ``names``: the size symbols in argument order; ``guards``:
    ``(poly index, mask)``, the guard holds when bit ``sign(V[i]) + 1`` of ``mask`` is set; ``table``:
    ``(slot, poly index)`` written to A; ``int32_params``: ``(byte offset, poly index)``; ``param_ptrs``:
    ``(slot, byte offset)``: A[slot] = address of the buffer's parameter bytes + offset; ``offsets``: ``(slot,
    poly index)`` written to OFF; ``ws_slots``: ``(slot, root index, offset index)``: the workspace byte offset
    V[root] + V[offset] is kept and A[slot] = ws_base + it."""
    from llvmlite import ir
    i1, i32, i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    i64p = i64.as_pointer()
    mod = ir.Module(name=NAME)
    fn = ir.Function(mod, ir.FunctionType(i64, [i64p, i64] + [i64] * len(names)), name=NAME)
    buf, ws_base = fn.args[0], fn.args[1]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail = fn.append_basic_block("guard_failed")
    zero_div = fn.append_basic_block("zero_divisor")

    def c(k):
        return ir.Constant(i64, int(k))

    def guarded(ok_flag, target):
        nxt = fn.append_basic_block()
        b.cbranch(ok_flag, nxt, target)
        b.position_at_end(nxt)

    atom = {n: fn.args[2 + k] for k, n in enumerate(names)}
    monos: dict = {(): c(1)}

    def mono(m):
        v = monos.get(m)
        if v is None:
            v = monos[m] = b.mul(mono(m[:-1]), atom[m[-1]])
        return v

    def poly(p):
        total = c(0)
        for m, coef in p:
            total = b.add(total, b.mul(mono(m), c(coef)) if coef != 1 else mono(m))
        return total

    for a in plan.atoms:
        if a in atom:
            continue
        op, px, py = plan.derived[a]
        x, y = poly(px), poly(py)
        guarded(b.icmp_signed("!=", y, c(0)), zero_div)
        q, r = b.sdiv(x, y), b.srem(x, y)
        # toward minus infinity, as Python: a remainder whose sign differs from the divisor's moves q down one
        adjust = b.and_(b.icmp_signed("!=", r, c(0)), b.icmp_signed("<", b.xor(r, y), c(0)))
        atom[a] = b.sub(q, b.zext(adjust, i64)) if op == "floordiv" else b.add(r, b.select(adjust, y, c(0)))

    def at(word):
        return b.gep(buf, [c(word)])

    values = [poly(p) for p in plan.polys]
    for i, v in enumerate(values):
        b.store(v, at(layout.values + i))
    for i, mask in guards:
        v = values[i]
        sign = b.sub(b.zext(b.icmp_signed(">", v, c(0)), i64), b.zext(b.icmp_signed("<", v, c(0)), i64))
        bit = b.and_(b.lshr(c(mask), b.add(sign, c(1))), c(1))
        guarded(b.trunc(bit, i1), fail)
    for slot, i in table:
        b.store(values[i], at(slot))
    base = b.ptrtoint(buf, i64)
    b.store(base, at(layout.ctx))
    b.store(b.add(base, c(8 * layout.off)), at(layout.ctx + 2))
    params = b.add(base, c(8 * layout.params))
    raw = b.bitcast(buf, ir.IntType(8).as_pointer())
    for off, i in int32_params:
        b.store(b.trunc(values[i], i32), b.bitcast(b.gep(raw, [c(8 * layout.params + off)]), i32.as_pointer()))
    for slot, off in param_ptrs:
        b.store(b.add(params, c(off)), at(slot))
    for slot, i in offsets:
        b.store(values[i], at(layout.off + slot))
    for k, (slot, root, off) in enumerate(ws_slots):
        byte = b.add(values[root], values[off])
        b.store(byte, at(layout.ws + k))
        b.store(b.add(ws_base, byte), at(slot))
    b.ret(c(1))
    b.position_at_end(fail)
    b.ret(c(0))
    b.position_at_end(zero_div)
    b.ret(c(-1))
    return str(mod)


def compile_fill(text: str, n_sizes: int):
    """The fill function of IR ``text`` (``fill_ir``), linked into this process once per distinct text, as a
    ctypes function ``fill(buffer address, workspace base, *sizes) -> int``."""
    from ..native import objload, objstore
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    with _LOCK:
        addr = _LOADED.get(digest)
        if addr is None:
            ll = objload._ll()
            symbol = f"jitgrad_sizefill_{digest}"
            m = ll.parse_assembly(text)
            m.get_function(NAME).name = symbol
            m.triple = ll.get_process_triple()
            m.verify()
            tm = ll.Target.from_triple(m.triple).create_target_machine(cpu=ll.get_host_cpu_name(), opt=1,
                                                                       codemodel="jitdefault")
            blob = objstore.Blob(symbol, symbol, tm.emit_object(m), [])
            addr = _LOADED[digest] = objload.load([blob])[symbol]
    proto = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, *[ctypes.c_int64] * n_sizes)
    return proto(addr)


__all__ = ["NAME", "FillLayout", "compile_fill", "fill_ir"]
