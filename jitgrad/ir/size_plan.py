"""Symbolic sizes evaluated together, per call's sizes: the polynomials of a program lowered once for every
size (its table's sizes, strides and offsets, ``codegen/program/sized.py``) and the guards of that lowering.

- :class:`SizePlan` evaluates many polynomials at once: each atom (a symbol, or a ``//`` / ``%`` of polynomials,
  as ``ir/symbolic.py`` makes them) once per call, in an order found once.
- :func:`fold_float` computes the parts of a guard on floats (the planner's cost comparisons) that do not
  depend on the sizes; :func:`float_function` turns what is left into a closure over a plan's values.

Imports nothing of jitgrad but ``ir/symbolic.py``.
"""
from __future__ import annotations

import operator

import numpy as np

from .symbolic import _ATOMS, _constant_of


class SizePlan:
    """Polynomials over the symbols evaluated together (a program's sizes, strides and offsets, bound per call's
    sizes: ``codegen/program/sized.py``): each atom (a symbol, or a ``//`` / ``%`` of polynomials: ``derived``)
    once, in an order found once (``atoms``).  ``__call__(values)`` evaluates them with NumPy: the reference for
    the native fill a program is bound with (``codegen/program/size_fill.py``)."""

    def __init__(self, polys):
        self.polys = list(polys)
        atoms, order = {}, []

        def need(name):
            if name in atoms:
                return
            spec = _ATOMS.get(name)
            if spec is not None:
                for p in spec[1:]:
                    for m, _ in p:
                        for a in m:
                            need(a)
            atoms[name] = len(order)
            order.append(name)
        for p in self.polys:
            for m, _ in p:
                for a in m:
                    need(a)
        self.atoms = order
        self.derived = {a: _ATOMS[a] for a in order if a in _ATOMS}     # atom -> (op, poly a, poly b)
        self._index = atoms
        self._rows = None

    def _table(self):
        """Every monomial of every polynomial as a row: its atoms' indices (padded with the index of a 1), its
        coefficient and its polynomial's first row, so a call multiplies and sums them with a few NumPy calls (a
        zero polynomial gets one row of coefficient 0, so every polynomial's rows are a non-empty run and one
        ``add.reduceat`` sums them).  Made on the first call: programs are bound by the native fill."""
        if self._rows is None:
            atoms = self._index
            rows = [(j, c, [atoms[a] for a in m]) for j, p in enumerate(self.polys) for m, c in (p or (((), 0),))]
            one = len(self.atoms)
            width = max((len(r[2]) for r in rows), default=0)
            idx = np.array([r[2] + [one] * (width - len(r[2])) for r in rows], np.intp).reshape(len(rows), width)
            coef = np.array([r[1] for r in rows], np.int64)
            poly_of = [r[0] for r in rows]
            starts = np.array([k for k in range(len(rows)) if k == 0 or poly_of[k] != poly_of[k - 1]], np.intp)
            self._rows = (idx, coef, starts)
        return self._rows

    def __call__(self, values: dict) -> np.ndarray:
        """Every polynomial's value at ``values`` (symbol name -> int), as an int64 array."""
        val = {}
        for name in self.atoms:
            v = values.get(name)
            if v is None:
                op, x, y = _ATOMS[name]
                x, y = _poly(x, val), _poly(y, val)
                v = x // y if op == "floordiv" else x % y
            val[name] = v
        if not self.polys:
            return np.zeros(0, np.int64)
        idx, coef, starts = self._table()
        av = np.array([val[a] for a in self.atoms] + [1], np.int64)
        terms = av[idx].prod(axis=1)
        terms *= coef
        return np.add.reduceat(terms, starts)


def _poly(p, val) -> int:
    total = 0
    for m, c in p:
        for a in m:
            c *= val[a]
        total += c
    return total


_FOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}


def fold_float(e):
    """SymFloat expression ``e`` with every part that does not depend on the symbols computed (``("const", x)``):
    a guard whose expression folds to a constant holds for every size."""
    k = e[0]
    if k == "const":
        return e
    if k == "int":
        c = _constant_of(e[1])
        return e if c is None else ("const", float(c))
    a, b = fold_float(e[1]), fold_float(e[2])
    if a[0] == "const" and b[0] == "const":
        try:
            return ("const", _FOPS[k](a[1], b[1]))
        except (ZeroDivisionError, OverflowError):
            return (k, a, b)
    if k == "/" and a[0] == "int" and b[0] == "int" and len(a[1]) == 1 and len(b[1]) == 1 \
            and a[1][0][0] == b[1][0][0]:
        # c * m / (d * m): both exact integers (below 2**53), so their correctly rounded quotient is c / d's
        return ("const", a[1][0][1] / b[1][0][1])
    return (k, a, b)


def float_function(e, ref):
    """``fn(values) -> float`` computing SymFloat expression ``e`` (folded), each polynomial read as
    ``values[ref(poly)]`` (a SizePlan's values)."""
    k = e[0]
    if k == "const":
        c = e[1]
        return lambda v: c
    if k == "int":
        i = ref(e[1])
        return lambda v: float(v[i])
    fa, fb, op = float_function(e[1], ref), float_function(e[2], ref), _FOPS[k]
    return lambda v: op(fa(v), fb(v))


__all__ = ["SizePlan", "float_function", "fold_float"]
