"""Data-dependent sizes: the length of ``nonzero(mask)`` (so of ``x[mask]``, ``masked_select``, one-argument
``where``) depends on the mask's values, which a trace does not have.  Inside ``@jitgrad.compile`` such a length is
an *unbacked* symbol (``u0``, ``u1``, ... : torch's name for a size no input's shape gives), a
:class:`~jitgrad.ir.symbolic.SymInt` whose value only the run knows, bounded by the mask's number of elements.

Python's decisions on it are of two kinds:

- made by jitgrad's own code (a shape rule's broadcasting test ``n == 1``, mean's ``if n``): answered as torch's
  *size-oblivious* reasoning does, for every size from 2 up (``u == 1`` is False, ``u != 0`` True), recording no
  guard, since the generated code handles 0 and 1 the same way;
- made by the user's code (``if x[m].shape[0] > 0``, ``int(n)``, ``range(n)``): refused with
  :class:`DataDependentSizeError`, naming the user's line and where the size came from.

The graph keeps the symbol until ``ir/passes/bounded_sizes.py`` gives every such value its bound's size, padded,
with the count the run computed.  Imports nothing of jitgrad but ``own_code`` (which frames are jitgrad's).
"""
from __future__ import annotations

import itertools
import os
import sys

from .own_code import own_file

_HERE = (os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "symbolic.py"))
_names = itertools.count()
_ORIGINS: dict = {}         # symbol name -> what made it (for error messages)


class DataDependentSizeError(RuntimeError):
    """Python needed the value of a data-dependent size (``nonzero``'s count) inside a compiled function."""


def fresh(origin: str) -> str:
    """A new unbacked symbol's name; ``origin`` says what made it (``nonzero() of a bool[4,5] at f.py:3``)."""
    name = f"u{next(_names)}"
    _ORIGINS[name] = origin
    return name


def is_unbacked(name: str) -> bool:
    """Whether a symbol (or an atom ``(a//b)`` over symbols) involves an unbacked symbol: backed symbols are
    ``s<k>`` (ShapeEnv.symbol), atoms are written from symbol names, so a ``u`` marks an unbacked one."""
    return "u" in name


def poly_unbacked(p) -> bool:
    """Whether the polynomial ``p`` (symbolic.py's form) involves an unbacked symbol."""
    return any(is_unbacked(a) for m, _ in p for a in m)


def unbacked_names(p) -> list:
    return sorted({a for m, _ in p for a in m if is_unbacked(a)})


def user_site(api=False) -> str:
    """``file:line (text)`` of the first frame outside jitgrad, or "an unknown line"; with ``api``, prefixed by
    the jitgrad function that line called (``reshape() at f.py:3 (...)``), when it called one."""
    f, called = sys._getframe(1), None
    while f is not None and own_file(f.f_code.co_filename):
        # (a decision the user's own code made goes through SymInt's operators: no jitgrad function to name)
        called = None if os.path.abspath(f.f_code.co_filename) in _HERE else f.f_code.co_name
        f = f.f_back
    if f is None:
        return "an unknown line"
    import linecache
    text = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    site = f"{f.f_code.co_filename}:{f.f_lineno}" + (f" ({text})" if text else "")
    return f"{called.strip('_')}() at {site}" if api and called and not called.startswith("<") else site


def decided_by_library() -> bool:
    """Whether the decision being made comes from jitgrad's own code (the first frame outside this module and
    symbolic.py is inside the package)."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename) in _HERE:
        f = f.f_back
    return f is not None and own_file(f.f_code.co_filename)


def origin_of(names) -> str:
    return "; ".join(f"{n}: {_ORIGINS.get(n, 'a data-dependent size')}" for n in names)


def refuse(what: str, names) -> DataDependentSizeError:
    """The error for Python needing the value of unbacked sizes ``names`` (``what``: the decision)."""
    return DataDependentSizeError(
        f"{what} needs the value of a data-dependent size ({origin_of(names)}) inside a @jitgrad.compile "
        f"function, in {user_site(api=True)}. The size is known only when the compiled code runs (it is bounded by the "
        "mask's number of elements), so Python cannot branch on it or use it as an int. Fix: keep it in tensor "
        "ops (x[mask].sum() / mask.sum(), torch.where(mask, x, 0)), use nonzero_static(size=...), or pass "
        "fullgraph=False to run this signature eagerly.")


def base_names(p, atoms: dict, only_unbacked=False) -> list:
    """The symbols polynomial ``p`` is made of (its atoms ``a // b``, named in ``atoms``, opened up), sorted."""
    out = set()
    for m, _ in p:
        for a in m:
            if a in atoms:
                out.update(base_names(atoms[a][1], atoms), base_names(atoms[a][2], atoms))
            else:
                out.add(a)
    return sorted(a for a in out if is_unbacked(a)) if only_unbacked else sorted(out)


def expr_unbacked(e, atoms: dict) -> list:
    """The unbacked symbols of a SymFloat's expression."""
    if e[0] == "int":
        return base_names(e[1], atoms, True)
    if e[0] == "const":
        return []
    return sorted(set(expr_unbacked(e[1], atoms) + expr_unbacked(e[2], atoms)))


def decide(d, op, atoms, evaluate, env, what):
    """``(d op 0)`` for a polynomial ``d`` over unbacked symbols (``oblivious``), backed ones at ``env``'s hints
    (the active ShapeEnv, or None)."""
    from operator import eq, ge, gt, le, lt, ne
    cmp = {"==": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}[op]
    names = base_names(d, atoms)
    unb = [a for a in names if is_unbacked(a)]
    hints = env.hints if env is not None else {}
    return oblivious(lambda vs: cmp(evaluate(d, {**hints, **vs}), 0), what, unb)


# sizes an unbacked symbol is tried at when jitgrad's code decides on it (torch's size-oblivious range: 2 up)
OBLIVIOUS_SIZES = (2, 3, 1 << 20)


def oblivious(at, what: str, names):
    """A decision on unbacked sizes ``names``: ``at(values)`` answers it for a {name: size} assignment.  Made by
    jitgrad's code and the same for every size from 2 up of each (independently: two masks' counts differ): that
    answer; otherwise refused (raises)."""
    if decided_by_library() and len(names) <= 3:
        answers = {at(dict(zip(names, vs))) for vs in itertools.product(OBLIVIOUS_SIZES, repeat=len(names))}
        if len(answers) == 1:
            return answers.pop()
    raise refuse(what, names)


__all__ = ["DataDependentSizeError", "OBLIVIOUS_SIZES", "base_names", "decide", "decided_by_library",
           "expr_unbacked", "fresh", "is_unbacked",
           "oblivious", "origin_of", "poly_unbacked", "refuse", "unbacked_names", "user_site"]
