"""Which matrix products under a causal mask need only half their work: a fact of the graph that the plan carries
(``Plan.triangles``) and the product emitters turn into the small-product kernel's triangular variants
(``codegen/kernels/small_gemm.py``).

Attention written as nanoGPT writes it, ``masked_fill(q @ k.mT, tril[:T, :T] == 0, -inf)``, softmax, ``@ v``, and
its backward compute whole ``T x T`` blocks of which the strict upper triangle is masked: the scores there are
overwritten, their exponentials are exact zeros, and ``masked_fill``'s backward zeroes the score gradient there.
From a mask whose value the graph holds (a literal: ``jit/constant_masks.py`` folds a captured causal buffer into
one) this analysis follows, per value whose last two dims are ``n x n``:

- forward, what is known of a value's strict upper (lower) triangle: -inf (``ninf``), or exact zeros (``zu``,
  ``zl``: a softmax of masked scores, the masked score gradient, their transposes);
- backward, whether a value's strict upper triangle is read at all (``dead``): only through the masked ``where``,
  through a product with a ``zu`` value (0 times it), or through elementwise steps whose own upper triangle is dead.

A product ``A @ B`` is then marked (``triangular_products``): ``"out_lower"`` when its result's strict upper
triangle is dead (the scores ``q @ k.mT``, the gradient ``dO @ v.mT``), ``"a_lower"``/``"a_upper"`` when ``A`` is
zero above/below its diagonal (``P @ v``, ``P.mT @ dO``), ``"b_lower"``/``"b_upper"`` likewise for ``B``.  The terms
left out are exact zeros (or values nothing reads), so for finite values every element computed has the bits of
the whole product (the sign of a zero result aside).  Where a value is not finite the whole product may differ
(``0 * inf`` is not computed): as torch's ``scaled_dot_product_attention(is_causal=True)``, the masked half is
skipped, not multiplied by zero.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..graph import Graph, Lit

# ``JITGRAD_CAUSAL=0``: no product is marked (every one computed whole, as before; to compare)
ENABLED = os.environ.get("JITGRAD_CAUSAL", "1") != "0"
MAX_ELEMENTS = 1 << 16      # constants evaluated to find a mask (per graph: a few small arrays)
# ops through which a constant mask is followed (NumPy impls on small arrays)
_CONST_OPS = frozenset({"getitem", "eq", "ne", "logical_not", "reshape", "broadcast_to", "where", "cast", "permute",
                        "squeeze", "unsqueeze", "expand_dims", "lt", "le", "gt", "ge", "logical_and", "logical_or"})
# elementwise ops whose result's strict upper triangle depends only on the operand's (the others scalars or
# per-row values) and stays finite where it is
_ROW_OPS = frozenset({"mul", "add", "sub", "neg"})


def triangle_kind(arr) -> str | None:
    """``"lower"`` where ``arr``'s nonzeros are exactly its last two dims' lower triangle with the diagonal (a
    ``tril(ones)`` mask, for every leading index), ``"upper"`` where they are exactly the strict upper triangle
    (``triu(ones, 1)``, or ``tril(...) == 0``: the masked places); else None."""
    if not isinstance(arr, np.ndarray) or arr.ndim < 2 or arr.size > MAX_ELEMENTS or arr.size == 0:
        return None
    n = arr.shape[-1]
    if arr.shape[-2] != n or n < 2 or not (arr.dtype == np.bool_ or arr.dtype.kind in "fiu"):
        return None
    nz = arr != 0
    lower = np.tri(n, dtype=bool)
    if (nz == lower).all():
        return "lower"
    if (nz == ~lower).all():
        return "upper"
    return None


def _square(v) -> int | None:
    """``n`` where ``v``'s last two dims are ``n x n`` (concrete), else None."""
    sh = v.aval.shape
    if len(sh) < 2 or type(sh[-1]) is not int or sh[-1] != sh[-2] or sh[-1] < 2:
        return None
    return sh[-1]


def _scalar(x):
    """The Python value of a scalar literal, else None."""
    if type(x) is not Lit:
        return None
    v = x.value
    if isinstance(v, np.ndarray):
        return v.reshape(()).item() if v.size == 1 else None
    return v


def _per_row(x) -> bool:
    """A scalar, or a value broadcast along the last axis (``[..., n, 1]``: a row's max or sum)."""
    if type(x) is Lit:
        s = _scalar(x)
        return s is not None and math.isfinite(s)
    sh = x.aval.shape
    return len(sh) == 0 or sh[-1] == 1


def _constants(g: Graph) -> dict:
    """Small values computed from literals alone (a mask sliced, compared, negated): Var -> ndarray."""
    const = {}

    def val(x):
        if type(x) is Lit:
            return np.asarray(x.value, x.aval.dtype.np)
        return const.get(x)
    for e in g.eqns:
        if e.op.name not in _CONST_OPS or len(e.outs) != 1:
            continue
        out = e.outs[0]
        if not all(type(d) is int for d in out.aval.shape) or math.prod(out.aval.shape) > MAX_ELEMENTS:
            continue
        vals = [val(x) for x in e.ins]
        if any(v is None for v in vals):
            continue
        try:
            with np.errstate(all="ignore"):
                r = e.op.impl(*vals, **e.params)
        except Exception:  # noqa: BLE001 - a constant the analysis cannot evaluate is just not a mask
            continue
        const[out] = np.asarray(r)
    return const


def _mask(x, const, n) -> str | None:
    """``"upper"``/``"lower"`` when ``x`` (a literal or a constant value) is a triangular mask over ``n x n``."""
    arr = np.asarray(x.value) if type(x) is Lit else const.get(x)
    if arr is None or arr.ndim < 2 or arr.shape[-1] != n:
        return None
    return triangle_kind(arr)


def _facts(g: Graph, const: dict, producer: dict) -> dict:
    """Var -> set of ``"ninf"`` (strict upper triangle -inf), ``"zu"`` (strict upper zero), ``"zl"`` (strict lower
    zero), followed forward from the masks."""
    facts = {}

    def has(x, f):
        return type(x) is not Lit and f in facts.get(x, ())
    for e in g.eqns:
        if len(e.outs) != 1:
            continue
        out = e.outs[0]
        n = _square(out)
        if n is None:
            continue
        name, ins, got = e.op.name, e.ins, set()
        if name == "where" and len(ins) == 3:
            kind = _mask(ins[0], const, n)
            upper = ins[1] if kind == "upper" else ins[2] if kind == "lower" else None
            if upper is not None:
                s = _scalar(upper)
                if s == 0:
                    got.add("zu")
                elif s == -math.inf:
                    got.add("ninf")
                elif has(upper, "zu"):
                    got.add("zu")
        elif name in ("sub", "add") and has(ins[0], "ninf") and _per_row(ins[1]):
            got.add("ninf")
        elif name == "add" and has(ins[1], "ninf") and _per_row(ins[0]):
            got.add("ninf")
        elif name == "mul":
            for x, y in ((ins[0], ins[1]), (ins[1], ins[0])):
                s = _scalar(y)
                if s is not None and math.isfinite(s):
                    if has(x, "ninf") and s > 0:
                        got.add("ninf")
                    for f in ("zu", "zl"):
                        if has(x, f):
                            got.add(f)
        elif name == "exp" and has(ins[0], "ninf"):
            got.add("zu")
        elif name == "neg":
            got |= facts.get(ins[0], set()) & {"zu", "zl"}
        elif name == "div" and type(ins[0]) is not Lit:
            # zeros over their row's sum (a softmax): a zero sum makes the row's other entries NaN as well
            d = ins[1]
            s = _scalar(d)
            src = producer.get(d) if type(d) is not Lit else None
            by_sum = src is not None and src.op.name == "sum" and src.ins[0] is ins[0]
            if by_sum or (s is not None and s != 0 and math.isfinite(s)):
                got |= facts.get(ins[0], set()) & {"zu", "zl"}
        elif name == "permute" and type(ins[0]) is not Lit:
            perm = tuple(e.params.get("perm", ()))
            r = len(perm)
            if r >= 2 and perm[:-2] == tuple(range(r - 2)):
                f = facts.get(ins[0], set())
                if perm[-2:] == (r - 2, r - 1):
                    got |= f
                elif perm[-2:] == (r - 1, r - 2):
                    got |= {"zl"} if "zu" in f else set()
                    got |= {"zu"} if "zl" in f else set()
        if got:
            facts[out] = got
    return facts


def _dead_uppers(g: Graph, const: dict, facts: dict) -> set:
    """Values whose strict upper triangle no output reads (as long as it is finite), by a backward walk."""
    uses = {}
    for e in g.eqns:
        for x in e.ins:
            if type(x) is not Lit:
                uses.setdefault(x, []).append(e)
    outputs = {v for v in g.outputs if type(v) is not Lit}
    dead = set()
    for e in reversed(g.eqns):
        for v in e.outs:
            n = _square(v)
            if n is None or v in outputs or v not in uses:
                continue
            if all(_discards(u, v, n, const, facts, dead) for u in uses[v]):
                dead.add(v)
    return dead


def _discards(u, v, n, const, facts, dead) -> bool:
    """Whether eqn ``u`` reads no element of ``v``'s strict upper triangle into anything live."""
    name, ins = u.op.name, u.ins
    if len(u.outs) != 1 or u.outs[0].aval.shape != v.aval.shape:
        return False
    if name == "where" and len(ins) == 3 and ins[0] is not v:
        kind = _mask(ins[0], const, n)
        return (kind == "upper" and ins[2] is v and ins[1] is not v) or \
            (kind == "lower" and ins[1] is v and ins[2] is not v)
    others = [x for x in ins if x is not v]
    if name == "mul" and len(others) == 1 and type(others[0]) is not Lit and "zu" in facts.get(others[0], ()):
        return True         # 0 times a finite value
    if name in _ROW_OPS and all(_per_row(x) for x in others):
        return u.outs[0] in dead
    if name == "div" and ins[0] is v and len(ins) == 2:
        s = _scalar(ins[1])
        return s is not None and s != 0 and math.isfinite(s) and u.outs[0] in dead
    return False


def triangular_products(g: Graph) -> dict:
    """Var (a ``matmul``'s result) -> which half it needs: ``"out_lower"``, ``"a_lower"``, ``"a_upper"``,
    ``"b_lower"``, ``"b_upper"`` (see the module's text).  Empty where the graph holds no triangular mask (or
    ``ENABLED`` is off)."""
    if not ENABLED:
        return {}
    const = _constants(g)
    conds = [e.ins[0] for e in g.eqns if e.op.name == "where" and e.ins]
    if not any(triangle_kind(np.asarray(x.value) if type(x) is Lit else const.get(x)) for x in conds):
        return {}
    facts = _facts(g, const, {v: e for e in g.eqns for v in e.outs})
    dead = _dead_uppers(g, const, facts)
    out = {}
    for e in g.eqns:
        if e.op.name != "matmul" or len(e.ins) != 2 or any(type(x) is Lit for x in e.ins):
            continue
        a, b = e.ins
        if a.aval.ndim < 2 or b.aval.ndim < 2:
            continue
        c = e.outs[0]
        fa, fb = facts.get(a, ()), facts.get(b, ())
        if c in dead and _square(c):
            out[c] = "out_lower"
        elif _square(a) and ("zu" in fa or "zl" in fa):
            out[c] = "a_lower" if "zu" in fa else "a_upper"
        elif _square(b) and ("zu" in fb or "zl" in fb):
            out[c] = "b_lower" if "zu" in fb else "b_upper"
    return out


__all__ = ["triangular_products", "triangle_kind"]
