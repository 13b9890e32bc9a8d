"""``torch.einsum``: Einstein summation lowered to existing primitives.

The equation is parsed as torch parses it (letters ``[a-zA-Z]``, ``...`` for broadcast dims, an optional ``->``
output; without it the output is the ellipsis dims, then the letters that occur once, in ASCII order).  Each
operand then takes its diagonals (a letter repeated in one operand), sums the letters no one else needs, and the
operands are contracted left to right, a pair at a time, as one batched ``matmul`` over permuted and reshaped
operands (batch letters, left-only, shared-summed, right-only).  Only ``diagonal``, ``sum``, ``expand``,
``permute``, ``reshape`` and ``matmul`` appear, so einsum differentiates to any order, compiles, and its matmuls
run as BLAS calls.
"""
from __future__ import annotations

import math

from ...declarations import published
from ...ir import dtypes as dt
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ..shaping.triangular import diagonal


def _err(msg):
    return RuntimeError("einsum(): " + msg)


def _parse_subscripts(text: str, start: int, what: str):
    """``text`` (one operand's or the output's subscripts, starting at ``start`` in the equation) as a list of
    letters with ``"..."`` for the ellipsis; torch's errors for anything else."""
    labels, i = [], 0
    while i < len(text):
        c = text[i]
        if c == ".":
            if text[i:i + 3] != "..." or "..." in labels:
                raise _err(f"found '.' for {what} that is not part of any ellipsis"
                           + (" (...)" if what == "output" else ""))
            labels.append("...")
            i += 3
            continue
        if c == " ":
            i += 1
            continue
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            raise _err(f"invalid subscript given at index {start + i} in the equation string, subscripts must be "
                       "in [a-zA-Z]")
        labels.append(c)
        i += 1
    return labels


def _parse(equation: str, operands):
    lhs, arrow, rhs = equation.partition("->")
    if arrow and "->" in rhs:
        raise _err(f"invalid subscript given at index {len(lhs) + 2 + rhs.index('-')} in the equation string, "
                   "subscripts must be in [a-zA-Z]")
    terms, pos = [], 0
    for k, text in enumerate(lhs.split(",")):
        if k >= len(operands):
            raise _err("fewer operands were provided than specified in the equation")
        terms.append(_parse_subscripts(text, pos, f"operand {k}"))
        pos += len(text) + 1
    if len(terms) < len(operands):
        raise _err("more operands were provided than specified in the equation")
    out = _parse_subscripts(rhs, len(lhs) + 2, "output") if arrow else None
    return terms, out


@published("jitgrad")
def einsum(equation, *operands, **torch_kw):
    """Sums the product of ``operands`` over the indices the ``equation`` leaves out of its output.

    ``"ij,jk->ik"`` is a matrix product, ``"bhqd,bhkd->bhqk"`` attention scores, ``"ii->i"`` a diagonal,
    ``"...ij->...ji"`` a batched transpose; without ``->`` the output is the indices that occur once, sorted.

    >>> import jitgrad as jg
    >>> a, b = jg.ones(2, 3), jg.ones(3, 4)
    >>> jg.einsum("ij,jk->ik", a, b).shape
    jitgrad.Size([2, 4])
    >>> jg.einsum("ii", jg.eye(3))
    tensor(3.)
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(einsum, "einsum", (equation, *operands), {}, torch_kw)
    if not isinstance(equation, str):
        from ..torch_kwargs import UnsupportedError
        raise UnsupportedError("jitgrad does not support einsum's sublist format (operand, [0, 1], ...) yet")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                         "operand and its subscripts list")
    for t in operands:
        if t.dtype is not operands[0].dtype:
            raise RuntimeError(f"expected scalar type {dt.torch_scalar_name(operands[0].dtype)} but found "
                               f"{dt.torch_scalar_name(t.dtype)}")
    terms, out = _parse(equation, operands)

    # 1. each operand's labels, one per dim: the ellipsis becomes the labels 0, 1, ... (right-aligned: an operand
    #    with fewer ellipsis dims has the last ones), as torch broadcasts them
    n_ell = 0
    for k, (labels, t) in enumerate(zip(terms, operands)):
        n = len(labels) - ("..." in labels)
        if "..." in labels:
            if n > t.ndim:
                raise _err(f"the number of subscripts in the equation ({n}) is more than the number of dimensions "
                           f"({t.ndim}) for operand {k}")
            n_ell = max(n_ell, t.ndim - n)
        elif n != t.ndim:
            raise _err(f"the number of subscripts in the equation ({n}) does not match the number of dimensions "
                       f"({t.ndim}) for operand {k} and no ellipsis was given")
    ops = []
    for labels, t in zip(terms, operands):
        if "..." in labels:
            i = labels.index("...")
            e = t.ndim - (len(labels) - 1)
            labels = labels[:i] + list(range(n_ell - e, n_ell)) + labels[i + 1:]
        ops.append(_take_diagonals(t, labels, len(ops)))

    # 2. the output's labels (implicit: those the equation names once, so "ii" is a trace)
    counts = {}
    for labels in terms:
        for c in labels:
            if c != "...":
                counts[c] = counts.get(c, 0) + 1
    ell = list(range(n_ell))
    if out is None:
        output = ell + sorted(c for c in counts if counts[c] == 1)
    else:
        output = []
        for c in out:
            if c == "...":
                output += ell
                continue
            if c in output:
                raise _err(f"output subscript {c} appears more than once in the output")
            if c not in counts:
                raise _err(f"output subscript {c} does not appear in the equation for any input operand")
            output.append(c)
    sizes = _label_sizes(ops)

    # 3. sum each label out of the first operand that holds it alone, then contract left to right
    needed_later = [set(output)]
    for _, labels in reversed(ops[1:]):
        needed_later.insert(0, needed_later[0] | set(labels))
    t, labels = _sum_unneeded(*ops[0], needed_later[0])
    for k in range(1, len(ops)):
        u, ulabels = _sum_unneeded(*ops[k], needed_later[k - 1] | set(labels))
        t, labels = _contract(t, labels, u, ulabels, needed_later[k] if k < len(ops) - 1 else set(output), sizes)
    t, labels = _sum_unneeded(t, labels, set(output))
    # a label broadcast at size 1 in every operand that reached the output keeps its size 1; others their size
    t = t.permute([labels.index(c) for c in output]) if labels != output else t
    full = tuple(sizes[c] for c in output)
    return t.expand(full) if t.shape != full else (t if t is not operands[0] else t.clone())


def _take_diagonals(t, labels, k):
    """Operand ``k`` with each label once: a repeated label keeps the diagonal of its two dims (as the last dim)."""
    labels = list(labels)
    while len(set(labels)) < len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        if t.shape[i] != t.shape[j]:
            raise _err(f"subscript {c} is repeated for operand {k} but the sizes don't match, {t.shape[j]} != "
                       f"{t.shape[i]}")
        t = diagonal(t, 0, i, j)
        labels = [x for n, x in enumerate(labels) if n not in (i, j)] + [c]
    return t, labels


def _label_sizes(ops):
    """Each label's size; a size 1 broadcasts against the others (torch's rule and error)."""
    sizes = {}
    for k, (t, labels) in enumerate(ops):
        for c, n in zip(labels, t.shape):
            seen = sizes.get(c, 1)
            if n != seen and 1 not in (n, seen):
                what = f"subscript {c}" if isinstance(c, str) else "ellipsis dimension"
                raise _err(f"{what} has size {n} for operand {k} which does not broadcast with previously seen "
                           f"size {seen}")
            sizes[c] = max(n, seen) if c in sizes else n
    return sizes


def _sum_unneeded(t, labels, needed):
    drop = [i for i, c in enumerate(labels) if c not in needed]
    if not drop:
        return t, labels
    return t.sum(drop), [c for c in labels if c in needed]


def _contract(a, alabels, b, blabels, keep, sizes):
    """``a`` times ``b`` summed over the labels both hold and ``keep`` lacks, as one batched matmul; the result's
    labels are batch, a-only, b-only."""
    shared = [c for c in alabels if c in blabels]
    batch = [c for c in shared if c in keep]
    summed = [c for c in shared if c not in keep]
    a_only = [c for c in alabels if c not in blabels]
    b_only = [c for c in blabels if c not in alabels]

    def arrange(t, labels, order):
        t = t.permute([labels.index(c) for c in order]) if labels != order else t
        # shared labels broadcast (size 1 on one side) are expanded to the pair's size
        want = tuple(sizes[c] if c in shared else n for c, n in zip(order, t.shape))
        return t.expand(want) if want != t.shape else t

    a = arrange(a, alabels, batch + a_only + summed)
    b = arrange(b, blabels, batch + summed + b_only)
    nb = a.shape[:len(batch)]
    m = a.shape[len(batch):len(batch) + len(a_only)]
    n = b.shape[len(batch) + len(summed):]
    k = math.prod(a.shape[len(batch) + len(a_only):])
    r = a.reshape(nb + (math.prod(m), k)) @ b.reshape(nb + (k, math.prod(n)))
    return r.reshape(nb + m + n), batch + a_only + b_only


__all__ = ["einsum"]
