"""The trace builder: bind appends Eqns here while a trace is active."""
from __future__ import annotations

import contextlib
import os
import threading

from ..ir.graph import AnomalyCheck, Eqn, Graph, Var


class TraceError(RuntimeError):
    """Something in a traced function cannot be captured in a graph."""


class TracedValueError(TraceError):
    """Python tried to read the value of a traced tensor (bool, item, numpy, ...)."""


# Threads whose eager state departs from the default: thread id -> bits (TRACING: a trace is active in it;
# INFERENCE: inference mode is on, runtime/grad_mode.py).  A read of a thread-local state costs ~500 instructions
# (CPython specialises no attribute read of one), so eager dispatch reads this thread's states only while the dict
# is non-empty.  A thread sets and clears its own bits as its states change, so a thread whose state departs is
# always in it; a bit a thread left when it died only sends others the slow way.
DEPARTED: dict = {}
TRACING = 1
INFERENCE = 2


def mark_departed(bit: int, on: bool) -> None:
    """Set (``on``) or clear ``bit`` of the calling thread in DEPARTED."""
    k = threading.get_ident()
    m = DEPARTED.get(k, 0)
    m = m | bit if on else m & ~bit
    if m:
        DEPARTED[k] = m
    else:
        DEPARTED.pop(k, None)


_local_setattr = threading.local.__setattr__


class _State(threading.local):
    def __init__(self):
        self.active = None

    def __setattr__(self, name, value):
        _local_setattr(self, name, value)
        if name == "active":
            mark_departed(TRACING, value is not None)


STATE = _State()

# Held by a @jitgrad.compile trace (which swaps its captured tensors' payloads for symbolic values while the
# function runs) and by compiled calls; eager code in another thread that meets a symbolic payload waits on it
# (runtime/dispatch.py, runtime/traced.py).  Re-entrant: a compiled function called inside a trace traces through.
# See jit/threads.py.  A forked child gets a fresh one (a parent thread may have held it at the fork).
TRACE_LOCK = threading.RLock()


def wait_for_other_traces():
    """Block until no other thread is tracing (the caller met a tensor whose payload another thread's trace has
    swapped for a symbolic value; it is restored when that trace ends)."""
    with TRACE_LOCK:
        pass


def _after_fork_in_child():
    global TRACE_LOCK
    TRACE_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Trace:
    """Collects eqns.  ``created`` holds ids of tensors made while tracing (constants, not inputs)."""

    def __init__(self, parent=None):
        self.parent = parent
        self.inputs: list[Var] = []
        self.eqns: list[Eqn] = []
        self.created: set = set()
        self.loc_override = None
        self.fwd_name = None      # inside a backward function: its name and the forward op's stack
        self.fwd_stack = None
        self.anomaly = False      # set by the runtime: anomaly mode with check_nan while tracing
        self.check_forward = False
        self.stack_of = None      # callable -> the user's Python stack (anomaly mode keeps it per eqn)
        self.scope = ()           # record_function ranges open while tracing: replayed by the profiler
        self.keep = []    # objects whose ids are in `created`, kept alive so ids are not reused
        self.made = None  # a list when set: tensors bind made while tracing (compile checks which outlive the trace)
        self.on_capture = None   # tensor -> Var: a concrete tensor met while tracing becomes a graph input
        self.on_var = None       # tensor with a Var payload -> the Var to use (a nested trace maps an outer one)
        self.on_mutate = None    # tensor: its payload is about to be replaced by a traced value
        self.on_grad_write = None  # tensor: its .grad is about to be replaced
        self.on_abort = []       # callables run when the trace fails: library code undoes Python-level state
        self.python_floats = None  # a set when set: Vars standing for Python floats (runtime/dispatch.py)
        self.grad_off = None     # a set when set: first outputs of eqns traced with grad mode off (func/tracing.py)
        self.views = {}          # id(view tensor) -> (weakref to it, base tensor, view op, params) (runtime/traced.py)
        self.view_children = {}  # id(base tensor) -> ids of its recorded views
        self.layouts = {}        # Var -> eager mode's element strides when not C-contiguous, None: unknown (traced.py)
        self.pinned = {}         # id(tensor written in place) -> (it, its strides, which writes do not change)
        self.nonzeros = {}       # mask Var -> its nonzero tensor (weakly): one data-dependent size per mask
        self.fused = False       # fused ops stay one eqn, not their decomposition (eager replay: pullback_plans)

    # --- building ---------------------------------------------------------------------------------
    def new_input(self, aval) -> Var:
        v = Var(aval)
        self.inputs.append(v)
        return v

    def add_eqn(self, op, ins, params, out_avals, loc, diff, needs):
        outs = [Var(a) for a in out_avals]
        fwd = stack = check = None
        if self.loc_override is not None:
            fwd = self.loc_override
            loc = fwd
            stack = self.fwd_stack
        elif self.stack_of is not None:
            stack = self.stack_of()
            if self.check_forward and out_avals[0].dtype.is_floating_point:
                check = AnomalyCheck(op.name, 0, False, loc, stack)
        e = Eqn(op, ins, outs, params, loc, diff, needs, fwd, check, stack)
        e.scope = self.scope
        self.eqns.append(e)
        return outs

    @contextlib.contextmanager
    def located(self, loc, name=None, stack=None):
        """Eqns added inside carry ``loc`` (the forward op a backward eqn differentiates), and in anomaly mode
        the backward function's name and the forward stack."""
        prev = (self.loc_override, self.fwd_name, self.fwd_stack)
        self.loc_override = loc if loc is not None else prev[0]
        self.fwd_name = name if name is not None else prev[1]
        self.fwd_stack = stack if stack is not None else prev[2]
        try:
            yield self
        finally:
            self.loc_override, self.fwd_name, self.fwd_stack = prev

    def mark_results(self, start: int, results, name, loc, stack):
        """Anomaly mode: the values a backward function returned (``(output index, Var)`` pairs) must be
        finite; the eqns since ``start`` that define them get a check naming the function."""
        if not self.anomaly:
            return
        defs = {}
        for e in self.eqns[start:]:
            for o in e.outs:
                defs[o] = e
        for i, v in results:
            e = defs.get(v)
            if e is not None and e.check is None and v.aval.dtype.is_floating_point:
                e.check = AnomalyCheck(name, i, True, loc, stack)

    def abort(self):
        """The trace failed: run the undo callbacks library code registered (latest first), once."""
        fns, self.on_abort = self.on_abort, []
        for fn in reversed(fns):
            fn()

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
