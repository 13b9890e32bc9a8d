"""LLVM assembly written as text: the small emitter every LLVM IR jitgrad renders is written with (kernels, parallel
kernels' pool launches, graph entries, the size fill, the small GEMMs).

llvmlite's IR builder made a Python object per value, type, constant and block and rendered each again in its
``str()``: ~40 Python calls per LLVM instruction, holding the GIL while a cold build ran beside a script's eager
calls.  This writes each instruction's line at once.  A value is a string (its name, ``%.7``, or a constant's
text); a type is a string (``i64``, ``float``, ``ptr``: pointers are opaque, as LLVM has them); every method that
makes an instruction takes the types it needs.  Names come from one counter per function; blocks are laid out in
the order they are made (as llvmlite's builder laid them out, so the code LLVM emits is the same).

Only what jitgrad emits is here: integer, float and pointer scalars, arithmetic with fast-math flags, compares,
casts, selects, loads and stores with metadata (alias scopes, loop IDs), a few atomics, calls (direct, through an address, with
fast-math flags), allocas, branches, ``if_then``/``if_else`` as llvmlite shaped them, declarations, external and
constant globals, and metadata nodes (deduplicated; ``distinct`` ones for loop IDs).
"""
from __future__ import annotations

import contextlib
import struct

VOID, I1, I8, I32, I64, FLOAT, DOUBLE, PTR = "void", "i1", "i8", "i32", "i64", "float", "double", "ptr"
TRUE, FALSE = "true", "false"
_PACK_F, _PACK_D, _UNPACK_Q = struct.Struct("<f").pack, struct.Struct("<d").pack, struct.Struct("<Q").unpack


def const(ty: str, v) -> str:
    """The text of constant ``v`` of type ``ty``: a float as its double's bits in hex (a ``float``'s rounded to
    single precision first, so LLVM reads it exactly), ``i1`` as true/false, other integers in decimal."""
    if ty == FLOAT:
        v = struct.unpack("<f", _PACK_F(v))[0]
        return "0x%016x" % _UNPACK_Q(_PACK_D(v))[0]
    if ty == DOUBLE:
        return "0x%016x" % _UNPACK_Q(_PACK_D(v))[0]
    if ty == I1:
        return TRUE if v else FALSE
    return str(int(v))


class Module:
    """A module: its functions' text, declarations, globals and metadata nodes, rendered by ``text()``."""

    def __init__(self, name: str):
        self.name = name
        self.functions = []         # Function, in the order they are made
        self.symbols = {}           # name -> its declaration's or global's line (None: defined here)
        self._md = {}               # a node's body -> its number
        self._md_lines = []
        self.cache = {}             # what emitters keep per module (alias-scope nodes)

    def declare(self, name: str, ret: str, args, attrs: str = "") -> str:
        """``@name`` declared (once): a function returning ``ret`` taking ``args`` (types)."""
        if name not in self.symbols:
            self.symbols[name] = f"declare {ret} @\"{name}\"({', '.join(args)}){' ' + attrs if attrs else ''}"
        return f'@"{name}"'

    def external(self, name: str, ty: str) -> str:
        """``@name``, an external global of type ``ty`` (once)."""
        if name not in self.symbols:
            self.symbols[name] = f'@"{name}" = external global {ty}'
        return f'@"{name}"'

    def constant(self, name: str, ty: str, init: str) -> str:
        """``@name``, an internal constant global of type ``ty`` with initializer text ``init``."""
        self.symbols[name] = f'@"{name}" = internal constant {ty} {init}'
        return f'@"{name}"'

    def metadata(self, body: str, distinct: bool = False) -> str:
        """A metadata node ``!{body}`` (its operands' text; equal plain nodes are one node); a ``distinct`` one
        may name itself as ``!SELF`` in ``body`` (a loop ID)."""
        if not distinct:
            got = self._md.get(body)
            if got is not None:
                return got
        ref = f"!{len(self._md_lines)}"
        if distinct:
            self._md_lines.append(f"{ref} = distinct !{{{body.replace('!SELF', ref)}}}")
        else:
            self._md[body] = ref
            self._md_lines.append(f"{ref} = !{{{body}}}")
        return ref

    def function(self, name: str, args, ret: str = VOID, linkage: str = "", attrs: str = "nounwind") -> Function:
        """A function defined here (``args``: its parameters' types), its text added to the module's."""
        fn = Function(self, name, args, ret, linkage, attrs)
        self.functions.append(fn)
        self.symbols[name] = None
        return fn

    def text(self) -> str:
        out = [f'; ModuleID = "{self.name}"']
        out += [fn.text() for fn in self.functions]
        out += [line for line in self.symbols.values() if line is not None]
        out += self._md_lines
        return "\n".join(out) + "\n"


class Block:
    """A basic block: its label and lines; ``terminated`` once a branch or return ends it."""
    __slots__ = ("label", "lines", "terminated")

    def __init__(self, label):
        self.label = label
        self.lines = []
        self.terminated = False


class Function:
    """A function being written: its blocks in the order they are made, its names from one counter."""

    def __init__(self, module, name, args, ret, linkage, attrs):
        self.module, self.name = module, name
        self.ref = f'@"{name}"'
        self.args = [f"%.a{k}" for k in range(len(args))]
        self._head = (f"define {linkage + ' ' if linkage else ''}{ret} {self.ref}("
                      f"{', '.join(f'{t} {a}' for t, a in zip(args, self.args))}){' ' + attrs if attrs else ''}")
        self.blocks = []
        self._labels = {}
        self.n = 0                  # the last value name's number (every builder of the function counts here)

    def block(self, name: str) -> Block:
        """A new block at the end of the function (its label ``name``, made unique)."""
        n = self._labels.get(name, 0)
        self._labels[name] = n + 1
        blk = Block(f"{name}.{n}" if n else name)
        self.blocks.append(blk)
        return blk

    def text(self) -> str:
        out = [self._head, "{"]
        for blk in self.blocks:
            out.append(f'"{blk.label}":')
            out += blk.lines
        out.append("}")
        return "\n".join(out)


class Builder:
    """Writes instructions at the end of a block (``position_at_end``); each returns its result's name."""

    def __init__(self, fn: Function, block: Block | None = None):
        self.fn = fn
        self.block = block
        self.lines = block.lines if block is not None else None

    def position_at_end(self, block: Block) -> None:
        self.block, self.lines = block, block.lines

    def _def(self, rhs: str) -> str:
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f"  %.{n} = {rhs}")
        return f"%.{n}"

    # ---- memory
    def alloca(self, ty: str, count: str | None = None, name: str = "") -> str:
        """A slot of ``ty`` (``count`` of them); ``name``: a word its name starts with, for readers."""
        rhs = f"alloca {ty}" if count is None else f"alloca {ty}, i64 {count}"
        if not name:
            return self._def(rhs)
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f'  %"{name}.{n}" = {rhs}')
        return f'%"{name}.{n}"'

    def load(self, ty: str, ptr: str, md: str = "") -> str:
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f"  %.{n} = load {ty}, ptr {ptr}{md}")
        return f"%.{n}"

    def store(self, ty: str, v: str, ptr: str, md: str = "") -> None:
        self.lines.append(f"  store {ty} {v}, ptr {ptr}{md}")

    def gep(self, elem: str, ptr: str, idx: str, idx_ty: str = I64) -> str:
        """``&ptr[idx]`` (elements of type ``elem``)."""
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f"  %.{n} = getelementptr {elem}, ptr {ptr}, {idx_ty} {idx}")
        return f"%.{n}"

    def gep2(self, elem: str, ptr: str, first: str, idx: str, idx_ty: str = I64) -> str:
        """``&(*ptr)[idx]`` of an aggregate ``elem`` (its first index ``first``)."""
        return self._def(f"getelementptr {elem}, ptr {ptr}, {idx_ty} {first}, {idx_ty} {idx}")

    # ---- atomics (8-byte aligned integers)
    def atomicrmw(self, op: str, ty: str, ptr: str, v: str, order: str = "seq_cst") -> str:
        """``*ptr = op(*ptr, v)`` atomically (op: min, max, add, xchg ...); returns the old value."""
        return self._def(f"atomicrmw {op} ptr {ptr}, {ty} {v} {order}, align 8")

    def cmpxchg(self, ty: str, ptr: str, cmp: str, new: str, order: str = "acquire", fail: str = "monotonic") -> str:
        """``*ptr = new`` if ``*ptr == cmp``, atomically; returns whether it swapped (an ``i1``)."""
        pair = self._def(f"cmpxchg ptr {ptr}, {ty} {cmp}, {ty} {new} {order} {fail}, align 8")
        return self._def(f"extractvalue {{ {ty}, i1 }} {pair}, 1")

    def load_atomic(self, ty: str, ptr: str, order: str = "monotonic") -> str:
        return self._def(f"load atomic {ty}, ptr {ptr} {order}, align 8")

    def store_atomic(self, ty: str, v: str, ptr: str, order: str = "release") -> None:
        self.lines.append(f"  store atomic {ty} {v}, ptr {ptr} {order}, align 8")

    # ---- arithmetic
    def op(self, opcode: str, ty: str, a: str, b: str, flags: str = "") -> str:
        """``opcode`` (add, fmul, sdiv, xor ...) on ``ty``; ``flags``: fast-math flags' text (``"fast "``)."""
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f"  %.{n} = {opcode} {flags}{ty} {a}, {b}")
        return f"%.{n}"

    def fneg(self, ty: str, a: str, flags: str = "") -> str:
        return self._def(f"fneg {flags}{ty} {a}")

    def icmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self._def(f"icmp {pred} {ty} {a}, {b}")

    def fcmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self._def(f"fcmp {pred} {ty} {a}, {b}")

    def select(self, cond: str, ty: str, a: str, b: str, cond_ty: str = I1) -> str:
        """``cond ? a : b`` (``cond_ty``: ``<N x i1>`` picks by lane)."""
        return self._def(f"select {cond_ty} {cond}, {ty} {a}, {ty} {b}")

    def cast(self, opcode: str, src: str, v: str, ty: str) -> str:
        """``opcode`` (sext, fptrunc, inttoptr ...) of ``v`` from ``src`` to ``ty``."""
        fn = self.fn
        n = fn.n = fn.n + 1
        self.lines.append(f"  %.{n} = {opcode} {src} {v} to {ty}")
        return f"%.{n}"

    # ---- vectors
    def vector_insert(self, vty: str, vec: str, ety: str, v: str, idx: str) -> str:
        """``vec`` (a ``vty``) with element ``idx`` set to ``v`` (an ``ety``)."""
        return self._def(f"insertelement {vty} {vec}, {ety} {v}, i32 {idx}")

    def vector_extract(self, vty: str, vec: str, idx) -> str:
        """Element ``idx`` of ``vec`` (a ``vty``)."""
        return self._def(f"extractelement {vty} {vec}, i32 {idx}")

    def vector_shuffle(self, vty: str, a: str, b: str, mask: str, width: int) -> str:
        """The elements of ``a`` and ``b`` (``vty``) that ``mask`` (``<i32 ...>``, ``width`` of them) picks."""
        return self._def(f"shufflevector {vty} {a}, {vty} {b}, <{width} x i32> {mask}")

    # ---- calls
    def call(self, ret: str, fn: str, args, flags: str = "") -> str | None:
        """``fn(args)`` (``args``: ``"type value"`` strings); ``fn`` a declared name or a pointer value."""
        text = f"call {flags}{ret} {fn}({', '.join(args)})"
        if ret == VOID:
            self.lines.append("  " + text)
            return None
        return self._def(text)

    # ---- control
    def branch(self, target: Block, md: str = "") -> None:
        self.lines.append(f'  br label %"{target.label}"{md}')
        self.block.terminated = True

    def cbranch(self, cond: str, then: Block, other: Block) -> None:
        self.lines.append(f'  br i1 {cond}, label %"{then.label}", label %"{other.label}"')
        self.block.terminated = True

    def ret_void(self) -> None:
        self.lines.append("  ret void")
        self.block.terminated = True

    def ret(self, ty: str, v: str) -> None:
        self.lines.append(f"  ret {ty} {v}")
        self.block.terminated = True

    @contextlib.contextmanager
    def if_then(self, cond: str):
        """The body runs where ``cond``: blocks ``<here>.if`` and ``<here>.endif``, as llvmlite's builder made."""
        here = self.block.label
        then, end = self.fn.block(here + ".if"), self.fn.block(here + ".endif")
        self.cbranch(cond, then, end)
        self.position_at_end(then)
        yield
        if not self.block.terminated:
            self.branch(end)
        self.position_at_end(end)

    @contextlib.contextmanager
    def if_else(self, cond: str):
        """``with b.if_else(c) as (then, other): with then: ...; with other: ...``, as llvmlite's builder."""
        here = self.block.label
        then, other, end = (self.fn.block(here + s) for s in (".if", ".else", ".endif"))
        self.cbranch(cond, then, other)

        @contextlib.contextmanager
        def arm(block):
            self.position_at_end(block)
            yield
            if not self.block.terminated:
                self.branch(end)
        yield arm(then), arm(other)
        self.position_at_end(end)


def for_loop(b, fn, slot, label, init, cond, body, step):
    """``for (*slot = init; cond(*slot); *slot = step(*slot)) body(*slot)`` at builder ``b``, in blocks of ``fn``
    named ``label.format("_head")`` (``_body``, ``_done``); ``slot``: an i64 alloca; values are i64."""
    head, inner, done = (fn.block(label.format(x)) for x in ("_head", "_body", "_done"))
    b.store(I64, init, slot)
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(cond(b.load(I64, slot)), inner, done)
    b.position_at_end(inner)
    body(b.load(I64, slot))
    b.store(I64, step(b.load(I64, slot)), slot)
    b.branch(head)
    b.position_at_end(done)


__all__ = ["Module", "Function", "Block", "Builder", "const", "VOID", "I1", "I8", "I32", "I64", "FLOAT", "DOUBLE",
           "PTR", "TRUE", "FALSE", "for_loop"]
