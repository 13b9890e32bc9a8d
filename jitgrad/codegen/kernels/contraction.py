"""Where the kernel renderers fence a loop's sums from FMA contraction, so every build tier computes the same bits.

LLVM fuses ``x + a*b`` into one FMA when both operations allow contraction and the product is computed in the
sum's block.  In a loop, a product that does not vary with it (``u1*u2``: uniform values, or a math function of
them) is therefore fused into a sum that varies (``x[i] + u1*u2``) by some builds and not by others:
- the quick build's scalar loop computes both in the loop's body: fused;
- O3 hoists the product out of the loop (LICM: another block): not fused;
- the first tier's vector blocks (``vector_loops.py``) compute uniform values once as scalars and broadcast them:
  not fused, while the scalar loop after them (the remainder, or all of the loop when a check of its addresses
  fails) fused them.
So an element's bits depended on the tier that ran it, on whether it fell in a vector block or in the remainder,
and (through that check) on where the buffers were.  The renderers now pass such an operand through
``llvm.arithmetic.fence`` (``fences``: which operands of which sums), which no build contracts across: every tier
computes what O3 computed.  A sum that does not vary with the loop (``1 - lr*wd``) is not fenced: every tier
computes it and its product in one block (O3 hoists the two together), fused alike.
"""
from __future__ import annotations

from . import kernel_ir as ki

# operands that no build fuses into a sum anyway: nothing to fence
_PLAIN = ("const", "var", "load", "param")
_CARRIED = (True, None)


def fences(loop: ki.For) -> dict:
    """``{id(sum): operand positions}``: the float sums and differences of ``loop``'s own body (its nested loops'
    bodies excluded: each loop has its own) that vary with the loop, and their operands computed in the body that do
    not (directly, or through the body's temporaries), which the renderer fences.  Empty for most loops."""
    out = {}
    own = {}            # the body's variables assigned at its top level so far: var -> (varies?, value)
    inner = set()       # variables assigned in a nested loop or branch of the body: taken to vary
    _assigned_below(loop.body, inner, top=True)
    assigned = inner | {st.var for st in loop.body if isinstance(st, ki.Assign)}
    lv = loop.var
    memo = {}           # id(value) -> whether it varies, for one statement (its variables' states are fixed there)

    def varies(x):      # (one call a value: rendering counts its Python calls)
        got = memo.get(id(x))
        if got is not None:
            return got
        op = x.op
        if op == "const":
            r = False
        elif op == "var":
            v = x.attr
            # (a variable of the body not assigned yet is carried from the previous iteration)
            r = v is lv or v in inner or (v in assigned and own.get(v, _CARRIED)[0])
        else:
            r = False
            for a in x.args:
                if varies(a):
                    r = True
            if r and op == "bin" and x.attr in ("+", "-") and x.t in ki.FLOATS:
                at = [j for j, a in enumerate(x.args) if not memo[id(a)] and _computed(a, own)]
                if at:
                    out[id(x)] = at
        memo[id(x)] = r
        return r

    def walk(stmts):
        for st in stmts:
            memo.clear()
            if isinstance(st, ki.Assign):
                r = varies(st.value)
                if st.var not in inner:
                    own[st.var] = (r, st.value)
            elif isinstance(st, ki.Store):
                varies(st.ptr)
                varies(st.idx)
                varies(st.value)
            elif isinstance(st, ki.If):
                varies(st.cond)
                walk(st.then)
                walk(st.orelse)
            elif not isinstance(st, (ki.For, ki.Comment)):
                for top in ki.statement_values([st]):
                    varies(top)
    walk(loop.body)
    return out


def fence(module, b, lt: str, v: str) -> str:
    """``v`` (of LLVM type ``lt``, float or double) through ``llvm.arithmetic.fence``, emitted by builder ``b`` of
    ``module``: no build contracts or reassociates an operation across it (it costs no instruction)."""
    fn = module.declare(f"llvm.arithmetic.fence.{'f32' if lt == 'float' else 'f64'}", lt, [lt])
    return b.call(lt, fn, [f"{lt} {v}"])


def _assigned_below(stmts, into, top):
    """The variables assigned inside nested loops and branches of ``stmts`` (``top``: these are the loop's own)."""
    for st in stmts:
        if isinstance(st, ki.Assign) and not top:
            into.add(st.var)
        elif isinstance(st, ki.For):
            into.add(st.var)
            _assigned_below(st.body, into, False)
        elif isinstance(st, ki.If):
            _assigned_below(st.then, into, False)
            _assigned_below(st.orelse, into, False)


def _computed(x, own) -> bool:
    """Whether ``x`` is computed in the body (through its temporaries): an operation a sum could fuse with."""
    for _ in range(len(own)):          # (bounded: ``t = t`` would not end)
        if x.op != "var" or x.attr not in own:
            break
        x = own[x.attr][1]
    return x.op not in _PLAIN


__all__ = ["fences", "fence"]
