"""What one trace of a compiled function keeps (``compile.py``'s data): the tensors it captured and their guards
(``_Captured``), the cache entry that replays it (``_Entry``: graph, write-backs, guards, the per-call fast path's
state), and the tracer whose hooks capture and functionalise while the user's function runs (``_Tracer``).
"""
from __future__ import annotations

import gc
import weakref

import numpy as np

from ..ir.graph import Lit, Var
from ..ir.passes.bounded_sizes import has_unbacked, pad_unbacked
from ..ir.unbacked import DataDependentSizeError
from ..ir.ops import Aval
from ..ir import dtypes as dt
from ..tracer import TraceError
from ..runtime.tensor import Tensor
from ..runtime.traced import layout_key
from . import python_values
from .guards import explain_guard

_MISSING = python_values._MISSING
NO_MEMO = object()      # an alias token no signature memo is (``_Entry.alias_token``)


class _Captured:
    """A concrete tensor that became a graph input: guards and what to restore after tracing."""

    __slots__ = ("ref", "shape", "dtype", "requires_grad", "grad_is_none", "var", "orig_data", "orig_grad_fn",
                 "orig_requires_grad", "orig_grad", "orig_version", "seen", "strides")

    def __init__(self, t: Tensor, var: Var):
        self.ref = weakref.ref(t)
        self.shape = tuple(t._data.shape)
        self.dtype = t._data.dtype
        self.requires_grad = t.requires_grad
        self.grad_is_none = t._grad is None
        self.var = var
        self.orig_data = t._data
        self.orig_grad_fn = (t.grad_fn, t._out_nr)
        self.orig_requires_grad = t._requires_grad
        self.orig_grad = t._grad
        self.orig_version = t._vc[0]     # in-place writes while tracing bump it; the call counts the real writes
        self.seen = None        # the last payload guards_ok found of this shape and dtype (kept: one array)
        self.strides = layout_key(t._data)     # a reshape of it is a view or a copy by these (runtime/traced.py)

    def ok(self) -> bool:
        t = self.ref()
        return (t is not None and tuple(t._data.shape) == self.shape and t._data.dtype == self.dtype
                and layout_key(t._data) == self.strides and t.requires_grad == self.requires_grad
                and (t._grad is None) == self.grad_is_none)

    def describe(self) -> str:
        t = self.ref()
        if t is None:
            return "a captured tensor was freed"
        what = f"captured tensor {list(self.shape)} {dt._FROM_NP[self.dtype].name}"
        if tuple(t._data.shape) != self.shape or t._data.dtype != self.dtype:
            return f"{what}: now shape {list(t.shape)} {t.dtype.name}"
        if t.requires_grad != self.requires_grad:
            return f"{what}: requires_grad changed to {t.requires_grad}"
        if (t._grad is None) != self.grad_is_none:
            return f"{what}: its .grad is {'None' if t._grad is None else 'no longer None'} now"
        return f"{what}: its strides changed"


class _Entry:
    """One traced signature: the graph and how to feed it and write back after it."""

    def __init__(self):
        self.graph = None
        self.gf = None
        self.captured: list[_Captured] = []   # graph inputs after the argument leaves, in order
        self.grad_src = []      # per captured tensor: None (read by identity) or i: it is argument i's .grad
        self.bindings = []      # (closure cell, None, k) or (globals dict, name, k): names bound to captured[k]
        self.n_args = 0
        self.out_treedef = None
        self.n_user_out = 0
        self.writes = []        # (captured index or weakref, graph output index): payload write-backs
        self.grad_writes = []   # (target, kind, value): kind "none" | "out" (graph output index) | "obj" (tensor);
        #                         target and an "obj" value are argument indices or weakrefs to other tensors
        self.one_shot = False
        self.materialize = []   # (weakref tensor, graph output index): state made inside a one-shot trace
        self.eager = False
        self.copy_outs = []     # output indices whose buffers are copied after each call (see _build)
        self.same_outs = []     # (k, j): user output k is the very tensor user output j (j < k) of the trace
        self.raw_graph = None
        self.guards = []        # (fn, value): Python conditions the trace relied on (jit/guards.py)
        self.guard_what = {}    # index in guards -> what that guard stands for (its retrace's explanation)
        self.values = []        # python_values.ValueGuard: closure/global/attribute values the trace read
        self.dynamic = []       # python_values.DynamicValue: floats read as graph inputs at each call
        self.arg_floats = ()    # positions (among the float arguments) that are graph inputs
        self.float_outs = ()    # user outputs that stand for Python floats (computed from dynamic floats alone)
        self.trims = ()         # (output, dim, length output): user outputs of data-dependent size (trimmed)
        self.write_roots = None  # {id(root array): written array} of the captured tensors the graph writes
        self.arg_writes = ()     # the argument inputs the graph writes in place (signatures.writes_read_only)
        self.code_ready = False  # its graph's native code is ready (or failed): no build_policy check per call
        self.building = None     # the CompiledGraph its last call found still building (build_policy)
        self.direct = None       # GraphFunction.direct's call for this entry (False: none), once code is ready
        self.alias_token = NO_MEMO  # the signature memo whose arguments args_alias_writes last cleared
        self.slow_times = {}     # build_policy: the fastest eager / interpreted call while its code builds
        self.talks = None        # (group, label) when its graph holds collectives (build_policy.collectives)
        self.shape_env = None    # a symbolic trace (a template): its symbols and size guards (ir/symbolic.py)
        self.sym_sources = ()    # (symbol, argument leaf, dim): where each symbol's value is read per call
        self.instances = None    # sizes -> the concrete entry built for them (symbolic_entries.instance)
        self.out_diff = None     # a template's outputs that require grad, for its instances' builds
        self.lowered = None      # a template's lowerings for every size (symbolic_entries.Lowered; False: cannot)

    def failure(self) -> tuple[str, str]:
        """Why this entry does not serve the call: (kind, explanation), as ``recompiles.key_change``."""
        for c, s in zip(self.captured, self.grad_src):
            if s is None and not c.ok():
                return "captured tensor", c.describe()
        for where, name, k in self.bindings:
            try:
                now = where.cell_contents if name is None else where.get(name)
            except ValueError:
                now = None
            if now is not self.captured[k].ref():
                return "name rebound", f"the name {name or 'in a closure'!s} now refers to another tensor"
        for g in self.values:
            if not g.holds():
                return "python value", g.describe()
        for d in self.dynamic:
            if type(d.read()) is not float:
                return "dynamic float", f"{d.label} is no longer a float"
        for i, (fn, value) in enumerate(self.guards):
            now = fn()
            if now != value:
                return "library guard", explain_guard(self.guard_what.get(i), value, now)
        return "unknown", "unknown"

    def guards_ok(self) -> bool:
        for c, s in zip(self.captured, self.grad_src):     # inline ``c.ok()``: this runs on every call
            if s is not None:
                continue
            t = c.ref()
            if t is None:
                return False
            d = t._data
            if d is not c.seen:     # an array's shape and dtype are fixed: compared once per array
                if d.shape != c.shape or d.dtype != c.dtype or layout_key(d) != c.strides:
                    return False
                c.seen = d
            if (t._requires_grad or t.grad_fn is not None) != c.requires_grad or (t._grad is None) != c.grad_is_none:
                return False
        for where, name, k in self.bindings:    # the closure variable / global still names that tensor
            try:
                now = where.cell_contents if name is None else where.get(name)
            except ValueError:
                return False
            if now is not self.captured[k].ref():
                return False
        same = python_values.same_value
        for g in self.values:       # inline ``g.holds()``
            if g.name is None:
                try:
                    now = g.src.cell_contents
                except ValueError:
                    return False
            else:
                now = g.src.get(g.name, _MISSING)
            if now is not g.value and not same(now, g.value, g.ident):
                return False
        for d in self.dynamic:
            if type(d.read()) is not float:
                return False
        for fn, value in self.guards:
            if fn() != value:
                return False
        return True


class _Tracer:
    """Runs one trace of the user's function, with capture and functionalisation hooks installed."""

    def __init__(self, arg_leaves, shapes=None):
        from .graph_function import new_trace
        self.shapes = shapes or {}     # id(argument) -> its shape with symbolic dims (symbolic_entries.py)
        self.trace = new_trace()
        self.captured = {}        # id(tensor) -> _Captured
        self.order = []           # _Captured in input order
        self.mutated = {}         # id(tensor) -> tensor whose payload was replaced
        self.grad_touched = {}    # id(tensor) -> (tensor, grad object before the trace)
        self.arg_ids = set()
        tr = self.trace
        tr.on_capture = self.capture
        tr.on_mutate = self.on_mutate
        tr.on_grad_write = self.on_grad_write
        tr.made = []
        tr.guards = []      # filled by jit.guards.guard while the function runs
        tr.guard_what = {}  # and what they stand for, by index
        for a in arg_leaves:
            self.capture(a)
            self.arg_ids.add(id(a))

    def capture(self, t: Tensor) -> Var:
        c = self.captured.get(id(t))
        if c is not None:
            return c.var
        d = t._data
        if type(d) is Var:
            raise TraceError("a traced tensor from another compiled function leaked into this one")
        var = self.trace.new_input(Aval(self.shapes.get(id(t)) or tuple(d.shape), dt._FROM_NP[d.dtype]))
        c = _Captured(t, var)
        if c.strides is not None:
            self.trace.layouts[var] = c.strides
        touched = self.grad_touched.get(id(t))
        if touched is not None:     # its .grad was replaced before it was met (``opt.zero_grad()`` first): guard
            c.grad_is_none = touched[1] is None     # the state a call starts from, not the traced one
        self.captured[id(t)] = c
        self.order.append(c)
        # inside the trace the tensor is a leaf with a symbolic payload
        t._data = var
        if t.grad_fn is not None:
            t.grad_fn = None
            t._requires_grad = True
        return var

    def on_mutate(self, t: Tensor):
        self.mutated.setdefault(id(t), t)

    def on_grad_write(self, t: Tensor):
        if id(t) not in self.grad_touched:
            self.grad_touched[id(t)] = (t, t._grad)

    def restore(self):
        for c in self.order:
            t = c.ref()
            if t is None:
                continue
            t._data = c.orig_data
            t.grad_fn, t._out_nr = c.orig_grad_fn
            t._requires_grad = c.orig_requires_grad
            t._vc[0] = c.orig_version
        for t, g in self.grad_touched.values():
            t._grad = g
        for c in self.order:      # the entry keeps guards, not the buffers
            c.orig_data = c.orig_grad = None
            c.orig_grad_fn = (None, 0)


def _bindings(fn, captured):
    """The function's closure cells and globals that name a captured tensor: guarded by identity, so rebinding
    the name to another tensor retraces even while the old tensor is still alive."""
    pos = {id(c.ref()): k for k, c in enumerate(captured)}
    out = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, Tensor) and id(v) in pos:
            out.append((cell, None, pos[id(v)]))
    code, g = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is not None and g is not None:
        for name in code.co_names:
            v = g.get(name)
            if isinstance(v, Tensor) and id(v) in pos:
                out.append((g, name, pos[id(v)]))
    return out


def _break_cycles(made, kept):
    """The traced autograd graph is dead after the trace: break its reference cycles (a node saving its own
    output, a leaf's AccumulateGrad) so that what is garbage goes at once, without a collection."""
    for t in made:
        n = t.grad_fn
        if n is not None and not n._freed:
            n.release()
    for t in kept:
        t._acc = None


def _payload_of(t: Tensor, tracer: _Tracer):
    d = t._data
    if type(d) is Var:
        return d
    if id(t) in tracer.trace.created or not isinstance(d, np.ndarray):
        return Lit(d, Aval(tuple(d.shape), dt._FROM_NP[d.dtype]))
    return tracer.capture(t)   # an untouched outside tensor returned as is


def materialize_leaks(e, tracer, outputs, out_diff):
    """Tensors made inside the trace that outlive it (a momentum buffer created lazily on the first call, a
    value stored in a closure's dict) hold traced values: each becomes an extra graph output whose value is
    set into the tensor after the call, and the entry is one-shot (the next call retraces with the new
    state captured by identity)."""
    tr = tracer.trace
    _break_cycles(tr.made, tr.keep)
    cands = [weakref.ref(t) for t in tr.made + tr.keep if type(t._data) is Var]
    tr.made, tr.keep, tr.pinned = None, [], {}
    tracer.mutated.clear()
    tracer.grad_touched.clear()
    if not cands:
        return

    def alive():
        return [t for t in (r() for r in cands) if t is not None and type(t._data) is Var]
    leaked = alive()
    if leaked:      # autograd nodes and their outputs form cycles: only what survives a collection leaked
        leaked = None
        gc.collect()
        leaked = alive()
    for t in leaked:
        e.one_shot = True
        e.materialize.append((weakref.ref(t), len(outputs)))
        outputs.append(t._data)
        out_diff.append(False)


def bounded(e, raw, out_diff, env, fullgraph):
    """``(graph, out_diff)``: a trace's graph with its data-dependent sizes at their bounds
    (``ir/passes/bounded_sizes.py``; ``e.trims``: the outputs trimmed after each call), or ``(None, out_diff)``
    when an op refused one and ``fullgraph`` is False (the signature runs eagerly)."""
    if not has_unbacked(raw):
        return raw, out_diff
    try:
        raw, e.trims = pad_unbacked(raw, e.n_user_out, env.hints if env is not None else None)
    except DataDependentSizeError:
        if fullgraph:
            raise
        return None, out_diff
    return raw, list(out_diff) + [False] * (len(raw.outputs) - len(out_diff))


def trimmed(t, dim, n):
    """Output ``t`` of data-dependent size (laid out at its bound: ``ir/passes/bounded_sizes.py``) cut to its ``n``
    valid entries along ``dim``: a fresh tensor, or a slice recorded by autograd when it requires grad."""
    if t.requires_grad:
        return t.narrow(dim, 0, n)
    if type(t._data) is not np.ndarray:         # a device array
        return t.narrow(dim, 0, n).clone()
    return Tensor._make(np.ascontiguousarray(t._data[(slice(None),) * dim + (slice(0, n),)]))


def copied_outputs(graph, writes, same_outs) -> list:
    """Indices of ``graph``'s outputs copied after each call: outputs that are graph inputs or constants come
    back as those very buffers, so a returned tensor or a new .grad never aliases an argument, a parameter or
    the graph's constants; so are later outputs of one value that were distinct tensors (the passes merged
    x * 2 and x * 2).  ``writes``: (input, output) write-backs (their outputs stay); ``same_outs``: (k, j)
    user outputs that are one tensor."""
    ins, written, same = set(graph.inputs), {oi for _, oi in writes}, dict(same_outs)
    at = {}
    return [k for k, v in enumerate(graph.outputs)
            if k not in written and k not in same and (isinstance(v, Lit) or v in ins or at.setdefault(v, k) != k)]
