"""Flat per-op entry points: the eager fast path of ops over one or two arguments (Tensor's operators, ``jg.relu``,
``x.tanh()``, ``x.sum()``, cross_entropy's log_softmax and nll_loss), one made per OpDef from its table row.

``flat_entry(op, arity)`` returns a function of the op's one or two arguments (and its params) that does in one
frame what ``dispatch._bind`` then ``dispatch._record`` do for the common call: every tensor a plain CPU tensor
(``Tensor`` or a subclass dispatched as one) that is no view and no inference tensor, the other argument at most a Python scalar, no
thread tracing or in inference mode, anomaly mode off and ``dispatch._bind`` not wrapped (tools that spy on it still
see every op).  It finds the signature's entry in dispatch's cache under dispatch's own key, calls the entry's impl
and builds the output and its node as ``_bind`` / ``_record`` would, every slot the same; the op's table row
(``nondiff_inputs``, ``saves_in``, ``saves_out``) is read once, when the entry point is made, not per call: the
entry's text is rendered from it (``entry_source.flat_source``, the template ``dispatch._record`` is rendered from
too, so the two paths build a node from one text), and ops with the same row share one compiled text.  Any
other call (and a signature's first) goes through ``dispatch._bind``, so semantics are the general path's.  Callers
check ``bind_route.ROUTE.plain`` first (no profiler recording, no dual level open).

View ops are never served here (their outputs share memory and history with their base): ``flat_entry`` returns
None for them.
"""
from __future__ import annotations

import sys

import numpy as np

from . import anomaly, dispatch as _d, grad_mode
from .dispatch import _NEEDS_ONE, _NO_EDGE, _NO_OUTPUT, _RULES, OpNode
from .entry_source import flat_label, flat_source, make, renamed
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
    module's docstring).  Made at its first request from the text ``entry_source.flat_source(op, arity)`` renders
    from the op's table row."""
    key = (op, arity)
    f = _ENTRIES.get(key)
    if f is None and not op.view:
        f = _ENTRIES[key] = renamed(make(flat_source(op, arity), "_make", globals(), flat_label(op, arity))(op),
                                    f"flat_{op.name}")
        f.__doc__ = f"Primitive ``{op.name}``'s {f.__doc__[2:]}"
    return f


__all__ = ["flat_entry"]
