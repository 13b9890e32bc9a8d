"""Loads and stores that tell LLVM which kernel operands never share memory (imported by generated kernels).

Why: a kernel reads its operands through raw pointers taken from its argument block, so LLVM must assume any
two of them may overlap.  Its loop vectoriser then guards the vector loop with a runtime overlap check per
(written operand, other operand) pair, and gives up, leaving the loop scalar, past 8 such checks: a fused
loop with 5 inputs and 5 outputs (an optimiser update, a LayerNorm backward) ran scalar code.

How: the layout (``layout.Program``) knows every operand's buffer, so it gives each kernel operand an alias
class (operands over one buffer share a class: a state updated in place and its old value, a reduction read
back).  The generated kernel reads and writes operand ``j`` with ``load(p, i, c, n)`` / ``store_to(p, i, v, c,
n)`` where ``c`` is its class and ``n`` the number of classes, both literals in the kernel's text (so they are
part of its key).  These attach LLVM scoped-noalias metadata (``!alias.scope`` its class, ``!noalias`` every
other class), which says exactly "accesses of different classes never overlap": the vectoriser needs no
runtime checks, and no other optimisation is allowed more than that.  A kernel whose operands are all of one
class gets no metadata.
"""
from __future__ import annotations

from numba import types
from numba.extending import intrinsic

from .ir_loops import ALIAS_DOMAIN


def tag_alias_class(module, instr, cls: int, n: int) -> None:
    """Scoped-noalias metadata on ``instr`` (llvmlite's, in a module Numba builds), an access of alias class ``cls``
    among ``n``: the nodes ``ir_loops.alias_md`` writes into a rendered kernel's text, here as llvmlite objects (the
    Numba fallback's path).  Fewer than two classes: no metadata."""
    if n < 2:
        return
    from llvmlite import ir
    # the module's nodes made once per (n, class): ``add_metadata`` would return the same nodes (it deduplicates),
    # after building and hashing every scope again for each access
    made = module.__dict__.setdefault("_jitgrad_alias_md", {})
    md = made.get((n, cls))
    if md is None:
        scopes = made.get(n)
        if scopes is None:
            domain = module.add_metadata([ir.MetaDataString(module, ALIAS_DOMAIN)])
            scopes = made[n] = [module.add_metadata([ir.MetaDataString(module, f"{ALIAS_DOMAIN}.{k}"), domain])
                                for k in range(n)]
        md = made[(n, cls)] = (module.add_metadata([scopes[cls]]),
                               module.add_metadata([scopes[k] for k in range(n) if k != cls]))
    instr.set_metadata("alias.scope", md[0])
    instr.set_metadata("noalias", md[1])


def _typed_access(ptr, idx, cls, n):
    """The literal ``[cls, n]`` of an access ``ptr[idx]`` that types (a pointer, an integer index, literal
    class and count), else None."""
    if not isinstance(ptr, types.CPointer) or not isinstance(idx, types.Integer):
        return None
    return _literal_ints(cls, n)


def _address(context, builder, sig, args):
    """``&ptr[idx]`` of an intrinsic's first two arguments."""
    i = context.cast(builder, args[1], sig.args[1], types.int64)
    return builder.gep(args[0], [i])


def _literal_ints(*vals):
    if not all(isinstance(v, types.IntegerLiteral) for v in vals):
        return None
    out = [v.literal_value for v in vals]
    cls, n = out
    if not 0 <= cls < max(n, 1):
        raise ValueError(f"alias class {cls} out of range for {n} classes")
    return out


@intrinsic
def load(typingctx, ptr, idx, cls, n):
    """``ptr[idx]``, an access of alias class ``cls`` (a literal) among ``n`` (a literal)."""
    lit = _typed_access(ptr, idx, cls, n)
    if lit is None:
        return None

    def codegen(context, builder, sig, args):
        instr = builder.load(_address(context, builder, sig, args))
        tag_alias_class(builder.module, instr, *lit)    # (as ir_loops.alias_md tags its own)
        return instr
    return ptr.dtype(ptr, idx, cls, n), codegen


@intrinsic
def store_to(typingctx, ptr, idx, val, cls, n):
    """``ptr[idx] = val``, an access of alias class ``cls`` among ``n`` (literals).  An intrinsic, as
    ``abi.store``: Numba's parfor pass would drop a setitem on a raw pointer inside a ``prange`` body."""
    lit = _typed_access(ptr, idx, cls, n)
    if lit is None:
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[2], sig.args[2], ptr.dtype)
        instr = builder.store(v, _address(context, builder, sig, args))
        tag_alias_class(builder.module, instr, *lit)    # (as ir_loops.alias_md tags its own)
        return context.get_dummy_value()
    return types.void(ptr, idx, val, cls, n), codegen


__all__ = ["load", "store_to"]
