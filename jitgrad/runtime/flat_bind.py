"""Flat per-op entry points: the eager fast path of ops over one or two arguments (Tensor's operators, ``jg.relu``,
``x.tanh()``, ``x.sum()``, cross_entropy's log_softmax and nll_loss), one made per OpDef from its table row.

``flat_entry(op, arity)`` returns a function of the op's one or two arguments (and its params) that does in one
frame what ``dispatch._bind`` then ``dispatch._record`` do for the common call: every tensor a plain CPU tensor
(``Tensor`` or a subclass dispatched as one; a view too, its history made current in its edge as ``_record`` makes
it) that is no inference tensor, the other argument at most a Python scalar, no thread tracing or in inference mode,
anomaly mode off and ``dispatch._bind`` not wrapped (tools that spy on it still see every op).  It finds the
signature's entry in dispatch's cache under dispatch's own key, calls the entry's impl and builds the output and its
node as ``_bind`` / ``_record`` would, every slot the same.  Any other call (and a signature's first) goes through
``dispatch._bind``, so semantics are the general path's.  Callers check ``bind_route.ROUTE.plain`` first (no
profiler recording, no dual level open).

An entry is generated: its text is rendered from the op's table row (``nondiff_inputs``, ``saves_in``,
``saves_out``: read once, when the entry is made, never per call) by ``entry_source.flat_source``, from the template
``dispatch._record`` is rendered from too, so the two paths build a node from one text.  Ops with the same row
share one compiled text; each op's entry has a code object of its own, named ``flat_<op>``.  ``python -m jitgrad
entry add 2`` prints one.

View ops are never served here (their outputs share memory and history with their base): ``flat_entry`` returns
None for them.
"""
from __future__ import annotations

import sys

import numpy as np

from ..ir.ops import OPS
from . import anomaly, dispatch as _d, grad_mode
from .dispatch import _NEEDS_ONE, _NO_EDGE, _NO_OUTPUT, _RULES, OpNode, refresh_view
from .entry_source import flat_label, flat_source
from .generated_code import make, source_of
from .node import _seq as _node_seq
from .op_errors import op_error
from .rule_entries import saved_inputs
from .saved_hooks import STATE as _SH, pack_node
from .source import _INTERNAL, _internal
from .tensor import AS_TENSOR as _AS_TENSOR, Tensor
from ..tracer.trace import DEPARTED as _DEPARTED

_GM = grad_mode.STATE
_AN = anomaly.STATE
# (the names below are the entries' globals: their text reads them as this module's own functions would)
_BIND = _d._bind        # the general path as defined: a spy set on dispatch._bind takes every call through it
_new = object.__new__
_ndarray = np.ndarray
_next = next
_getframe = sys._getframe
_internal_get = _INTERNAL.get
_ERRORS = (ValueError, TypeError, IndexError, FloatingPointError, OverflowError)   # (dispatch._bind's: op_error)
_ENTRIES: dict = {}     # (op, arity) -> its entry point


def flat_entry(op, arity: int):
    """The flat entry point of primitive ``op`` over ``arity`` (1 or 2) arguments, ``f(*args, params=None)``
    (``params``: the op's params as ``bind`` takes them, a dict the node keeps), or None for a view op (see the
    module's docstring).  The function is made at the first request (callers keep it); its code, generated from the
    op's table row, at its first call (``installed``)."""
    key = (op, arity)
    f = _ENTRIES.get(key)
    if f is None and not op.view:
        f = _ENTRIES[key] = (_first_unary if arity == 1 else _first_binary)(op)
        f.__name__ = f.__qualname__ = f"flat_{op.name}"
        f.__doc__ = f"Primitive ``{op.name}``'s flat entry point over {arity} argument{'s' * (arity > 1)} (its text: " \
                    f"``python -m jitgrad entry {op.name} {arity}``)."
    return f


def installed(op, arity: int):
    """``flat_entry(op, arity)`` with its generated code in place (put there now if its first call is still to come).

    Compiling a text costs about as much as ~300 recorded ops (the parser's work), and ``import jitgrad`` makes ~40
    entries over 7 texts: so each is compiled when an op of its text is first called, not at import.  The code goes
    into the function callers already hold (it has the same free variable, ``_op``); each entry gets a code object of
    its own, named after its op (CPython keeps a call site's specialisation in the code object: an op's calls never
    meet another op's types, and tracebacks name the op)."""
    f = flat_entry(op, arity)
    if f.__code__.co_filename == __file__:
        code = make(flat_source(op, arity), "_make", globals(), flat_label(op, arity))(op).__code__
        f.__code__ = code.replace(co_name=f.__name__, co_qualname=f.__name__)
    return f


def _first_unary(_op):
    def flat(a, params=None):
        return installed(_op, 1)(a, params)
    return flat


def _first_binary(_op):
    def flat(a, b, params=None):
        return installed(_op, 2)(a, b, params)
    return flat


def generated_text(name: str, arity: int = 2) -> str:
    """The generated text of primitive ``name``'s flat entry over ``arity`` arguments, or with ``name`` "record" of
    ``dispatch._record`` (``python -m jitgrad entry NAME [ARITY]`` prints it)."""
    if name == "record":
        return source_of(_d._record)
    if name not in OPS:
        raise KeyError(f"no primitive named {name!r}")
    if OPS[name].view:
        raise ValueError(f"{name} is a view op: it has no flat entry (its calls take dispatch._bind)")
    return source_of(installed(OPS[name], arity))


__all__ = ["flat_entry", "installed", "generated_text"]
