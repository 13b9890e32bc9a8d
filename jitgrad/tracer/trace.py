"""The trace builder: bind appends Eqns here while a trace is active."""
from __future__ import annotations

import contextlib
import threading

from ..ir.graph import Eqn, Graph, Lit, Var


class TraceError(RuntimeError):
    """Something in a traced function cannot be captured in a graph."""


class TracedValueError(TraceError):
    """Python tried to read the value of a traced tensor (bool, item, numpy, ...)."""


class _State(threading.local):
    def __init__(self):
        self.active = None


STATE = _State()


class Trace:
    """Collects eqns.  ``created`` holds ids of tensors made while tracing (constants, not inputs)."""

    def __init__(self, parent=None):
        self.parent = parent
        self.inputs: list[Var] = []
        self.eqns: list[Eqn] = []
        self.created: set = set()
        self.loc_override = None
        self.keep = []    # objects whose ids are in `created`, kept alive so ids are not reused
        self.made = None  # a list when set: tensors bind made while tracing (compile checks which outlive the trace)
        self.on_capture = None   # tensor -> Var: a concrete tensor met while tracing becomes a graph input
        self.on_mutate = None    # tensor: its payload is about to be replaced by a traced value
        self.on_grad_write = None  # tensor: its .grad is about to be replaced

    # --- building ---------------------------------------------------------------------------------
    def new_input(self, aval) -> Var:
        v = Var(aval)
        self.inputs.append(v)
        return v

    def add_eqn(self, op, ins, params, out_avals, loc, diff, needs):
        outs = [Var(a) for a in out_avals]
        fwd = None
        if self.loc_override is not None:
            fwd = self.loc_override
            loc = fwd
        self.eqns.append(Eqn(op, ins, outs, params, loc, diff, needs, fwd))
        return outs

    @contextlib.contextmanager
    def located(self, loc):
        """Eqns added inside carry ``loc`` (the forward op a backward eqn differentiates)."""
        prev = self.loc_override
        self.loc_override = loc if loc is not None else prev
        try:
            yield self
        finally:
            self.loc_override = prev

    def finish(self, inputs, outputs) -> Graph:
        return Graph(inputs, self.eqns, outputs)

    # --- activation -------------------------------------------------------------------------------
    def __enter__(self):
        self._prev = STATE.active
        STATE.active = self
        return self

    def __exit__(self, *exc):
        STATE.active = self._prev
        return False


def lit(value, aval) -> Lit:
    return Lit(value, aval)
