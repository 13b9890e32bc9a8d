"""GraphFunction: run a Graph on tensors, with autograd through the transpose pass.

Called on inputs that require grad (with grad mode on), the forward also returns the residuals its
transposed graph reads, and each differentiable output gets a ``CompiledBackward`` node.  That node runs the
backward graph as another GraphFunction, so with ``create_graph=True`` the backward is itself differentiable: the
residuals it reads become outputs of the same node (an activation's cotangent from the double backward meets the
output's there, and the forward is transposed once for all of them, as eager nodes are), the inputs it reads are
the inputs themselves, and a value the forward did not save is recomputed by a differentiable GraphFunction of the
inputs: any order.
"""
from __future__ import annotations

import contextlib
import time
import weakref

import numpy as np

from ..ir import interpret as _interp
from ..ir.graph import Graph, Lit, Var
from ..ir.ops import OPS, Aval
from ..ir.passes import dce, run_pipeline, transpose, active_vars
from ..tracer import Trace, STATE as _TR
from ..runtime import grad_mode, profiler_state
from ..runtime.dual import transpose_vjp
from ..runtime.graph_hooks import RUNNING as _RUNNING
from ..runtime.node import Node
from ..runtime.tensor import Tensor
from .device_exec import execute_on_device, on_device
from .graph_code import compiled_graph, compiled_result, nonfinite_error


class _Front:
    """The frontend protocol the transpose pass needs (see ir/passes/transpose.py)."""

    @contextlib.contextmanager
    def tracing(self):
        tr = new_trace()
        prev_mode = grad_mode.STATE.grad_enabled
        grad_mode.STATE.grad_enabled = True   # record, so the backward graph is differentiable again
        with tr:
            try:
                yield tr
            finally:
                grad_mode.STATE.grad_enabled = prev_mode

    @staticmethod
    def wrap(v, requires_grad):
        if isinstance(v, Lit):
            if isinstance(v.value, np.ndarray):
                return Tensor._make(v.value)
            return v.value
        t = Tensor._make(v)
        if requires_grad:
            t._requires_grad = True
        return t

    @staticmethod
    def unwrap(t):
        d = t._data
        if type(d) is Var:
            return d
        return Lit(d, Aval(tuple(d.shape), t.dtype))

    @staticmethod
    def bind_name(opname, *args, **params):
        from ..runtime.dispatch import bind
        return bind(OPS[opname], *args, **params)

    @staticmethod
    def zeros(aval):
        return Tensor._make(np.zeros(aval.shape, aval.dtype.np))

    @staticmethod
    def transpose_vjp(ctx, tangents):
        """For the jvp pass: a jvp rule derived from the op's vjp, by reverse mode on the trace."""
        return transpose_vjp(ctx, tangents)


FRONT = _Front()
_PROF = profiler_state.STATE


def _on_nonfinite(e, value):
    raise nonfinite_error(e, "nan" if np.isnan(value).any() else "inf")


def new_trace() -> Trace:
    """A Trace configured with the current anomaly mode (checks and forward stacks go into the graph)."""
    from ..runtime import anomaly
    from ..runtime.source import user_stack
    tr = Trace()
    an = anomaly.STATE
    if an.enabled:
        tr.anomaly = an.check_nan
        tr.check_forward = an.check_nan and an.check_forward
        tr.stack_of = lambda: user_stack(4)
    return tr


_ASK = object()     # GraphFunction.__call__ without a plan: it looks the plan up
def execute(graph: Graph, arrays, backend: str, writes=(), parallel=None, disk_cache=True, background=None,
            stats=None):
    """Run a graph on arrays: ``interpret`` (the reference) or ``numba`` (fused CPU kernels).

    ``writes``: (output index, input index) pairs whose output is copied into the input's buffer at the end
    of the call (in-place state updates; the numba driver does it inside the compiled call).  Arrays on a device
    (CUDA tensors' payloads) run there, whatever the backend (``device_exec.py``)."""
    if on_device(arrays):
        return execute_on_device(graph, arrays, writes, stats)
    if backend == "numba":
        cg = compiled_graph(graph, writes, parallel, disk_cache, background)
        run = cg.run
        if run is not None:
            prof = _PROF.active
            if prof is not None:        # the instrumented driver: one event per kernel / BLAS call
                run = cg.profiled_run(prof)
            arrays = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
            try:
                res = run(*arrays)
                if res is None:         # this call's buffers don't fit the compiled layout: the interpreter
                    return execute(graph, arrays, "interpret", writes, parallel, disk_cache, stats=stats)
            except Exception as e:  # noqa: BLE001 - a Numba failure at call time: interpreter, loudly
                if not type(e).__module__.startswith("numba"):
                    raise
                cg.fail(e)
                return execute(graph, arrays, "interpret", writes, parallel, disk_cache, stats=stats)
            return compiled_result(cg, res, stats)
        # still compiling in the background (or codegen failed): the reference interpreter meanwhile
        outs = _interp.interpret(graph, arrays, _on_nonfinite, _PROF.active)
        for o, i in writes:
            np.copyto(arrays[i], outs[o], casting="unsafe")
        cg.start()          # the first result is computed: now let the build use the cores
        if stats is not None:
            stats["interpreted_calls"] = stats.get("interpreted_calls", 0) + 1
            stats["last_path"] = "interpreted"
        return outs
    if stats is not None:
        stats["interpreted_calls"] = stats.get("interpreted_calls", 0) + 1
        stats["last_path"] = "interpreted"
    outs = _interp.interpret(graph, arrays, _on_nonfinite, _PROF.active)
    for o, i in writes:
        np.copyto(arrays[i], outs[o], casting="unsafe")
    return outs


class _CompiledOp:
    saves_in = (0,)
    saves_out = ()

    def __init__(self, name):
        self.name = name
        self.grad_name = name


class CompiledBackward(Node):
    """grad_fn of a GraphFunction's differentiable outputs.

    Its outputs are the graph's differentiable outputs and, once a backward with ``create_graph`` has handed them
    out as differentiable tensors, the residuals this forward saved (output ``len(plan.diff_outs) + j`` is residual
    ``j``): cotangents reaching the activations from a double backward meet the outputs' at this one node, so the
    forward is transposed once for all of them, as eager nodes are."""

    __slots__ = ("plan", "saved", "saved_versions", "input_versions", "residuals", "saved_outputs")

    def materialize(self) -> bool:
        # outputs no cotangent reached are left out of the transpose (apply), not fed zeros
        return False

    def apply(self, grads):
        if self._freed:
            from ..runtime.saved_access import FREED_MSG
            raise RuntimeError(FREED_MSG)
        # residuals that alias inputs always matter; with create_graph every input is read again
        checks = self.saved_versions + (self.input_versions if grad_mode.STATE.grad_enabled else [])
        for t, v in checks:
            if t._vc[0] != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [jitgrad.{t.dtype.name} {list(t.shape)}], which is an input of {self.name()}, is at "
                    f"version {t._vc[0]}; expected version {v} instead. Hint: a compiled function that updates "
                    "its inputs in place cannot be differentiated afterwards.")
        for k, ref, v in self.saved_outputs:
            t = ref()
            if t is not None and t._vc[0] != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [jitgrad.{t.dtype.name} {list(t.shape)}], which is output {k} of {self.name()}, "
                    f"is at version {t._vc[0]}; expected version {v} instead. Hint: the compiled function's "
                    "backward reads this output's buffer; modify a clone instead.")
        plan = self.plan
        cts = tuple(g is not None for g in grads)
        # the inputs this backward pass reaches (autograd.grad(u, x) with parameters requiring grad too: only the
        # cotangent of x); the others' cotangents are not computed, as eager nodes compute only what is needed
        running = _RUNNING.nodes
        if running is None:
            want = (True,) * len(self.next_functions)
        else:
            cb = CompiledBackward
            want = tuple(c in running and (type(c) is not cb or c.output_reaches(nr, running))
                         for c, nr in self.next_functions)
        bk = plan.backward(cts, want)
        if bk.fn is None:
            outs = ()
        else:
            outs = bk.fn([g for g in grads if g is not None] + self._residuals_of(bk))
        it = iter(outs)
        zeros = _zeros_like_input
        return tuple(next(it) if k == _COMPUTED else zeros(self, i) if k == _ZERO else None
                     for i, k in enumerate(bk.kinds))

    def output_reaches(self, nr, running) -> bool:
        """Whether output ``nr`` depends on an input whose node the running backward reaches (an activation
        does, the transposed weight a linear layer saved does not when only the input's cotangent is asked for)."""
        for k in self.plan.output_inputs()[nr]:
            if self.next_functions[k][0] in running:
                return True
        return False

    def _residuals_of(self, bk) -> list:
        """The forward values backward ``bk`` reads, as tensors: with create_graph, differentiable (this node's
        residual outputs, the inputs themselves, or recomputed as a differentiable function of the inputs)."""
        arrays, inputs = self.residuals, self.saved
        diff = grad_mode.STATE.grad_enabled
        if diff and len(self.out_meta) == len(self.plan.diff_outs):
            # residuals become outputs of this node
            self.out_meta = self.out_meta + tuple((a.shape, t) for a, t in zip(arrays, self.plan.residual_dtypes))
        res = []
        missing = None
        n_diff = len(self.plan.diff_outs)
        for kind, j in bk.sources:
            if kind == _SAVED:
                t = Tensor._make(arrays[j])
                if diff and self.plan.residual_active[j]:
                    t.grad_fn = self
                    t._out_nr = n_diff + j
                res.append(t)
            elif kind == _INPUT:
                res.append(inputs[j])
            else:
                if missing is None:
                    missing = iter(self.plan.residual_fn(bk.recomputed)(inputs))
                res.append(next(missing))
        return res

    def release(self):
        self._freed = True
        self.saved = None
        self.residuals = None


_COMPUTED, _ZERO, _NONE = 0, 1, 2       # an input's cotangent: from the backward graph, zeros, or None
_SAVED, _INPUT, _RECOMPUTED = 0, 1, 2   # where a backward graph's forward value comes from


def _zeros_like_input(node, i):
    """Zeros for the node's ``i``-th edge, on its input's device."""
    k = node.plan.wrt_idx[i]
    return node.saved[k]._same_device(Tensor._make(np.zeros(tuple(node.shapes[k]), node.dtypes[k].np)))


class _Backward:
    """One backward of a plan: for the outputs that have a cotangent and the inputs asked for, the graph
    (``fn``, None when it computes nothing), what each input gets (``kinds``: _COMPUTED, _ZERO or _NONE) and where
    each forward value the graph reads comes from (``sources``: (_SAVED, residual index), (_INPUT, input index)
    or (_RECOMPUTED, k), the k-th of ``recomputed``, forward Vars this forward did not save)."""

    __slots__ = ("fn", "kinds", "sources", "recomputed")


class _Plan:
    """Forward-with-residuals and the lazily built backwards for one set of inputs needing grad."""

    def __init__(self, gf, wrt_idx):
        g = gf.graph
        self.gf = gf
        self.wrt_idx = wrt_idx
        wrt = [g.inputs[i] for i in wrt_idx]
        act = active_vars(g, wrt)
        self.diff_outs = [k for k, v in enumerate(g.outputs) if gf.out_diff[k] and isinstance(v, Var) and v in act]
        t0 = time.perf_counter()
        self.transposed = transpose(g, self.diff_outs, wrt, FRONT)
        res = self.transposed.residuals
        self.fwd = Graph(g.inputs, g.eqns, list(g.outputs) + list(res))
        gf.stats_add("transpose_seconds", time.perf_counter() - t0)
        inputs = set(g.inputs)
        # residuals a double backward differentiates through this node (the others are inputs or constants)
        self.residual_active = [isinstance(r, Var) and r in act and r not in inputs for r in res]
        self.residual_dtypes = [r.aval.dtype for r in res]
        self._transposed = {}   # output cotangent mask -> its Transposed (the first order's: self.transposed)
        self._backward = {}     # (output cotangent mask, inputs wanted) -> _Backward
        self._res = {}          # forward Vars -> their recomputation
        self._output_inputs = None
        self.residual_alias = [g.inputs.index(r) for r in res if r in inputs]
        self.saved_outs = _outputs_sharing_residuals(g, res)

    def output_inputs(self) -> list:
        """For each node output (the differentiable outputs, then the residuals): the inputs (by position in
        ``wrt_idx``) it depends on differentiably."""
        deps = self._output_inputs
        if deps is None:
            g = self.gf.graph
            bits = {g.inputs[i]: 1 << k for k, i in enumerate(self.wrt_idx)}
            for e in g.eqns:
                if e.diff:
                    b = 0
                    for v, n in zip(e.ins, e.needs):
                        if n and isinstance(v, Var):
                            b |= bits.get(v, 0)
                    if b:
                        for o in e.outs:
                            bits[o] = b
            outs = [g.outputs[k] for k in self.diff_outs] + list(self.transposed.residuals)
            n = len(self.wrt_idx)
            deps = self._output_inputs = [tuple(k for k in range(n) if bits.get(v, 0) >> k & 1) for v in outs]
        return deps

    def transposed_for(self, cts) -> "Transposed":
        """The transpose from the outputs (the differentiable outputs, then the residuals) marked in ``cts``."""
        first = len(self.diff_outs)
        if len(cts) == first and all(cts):
            return self.transposed
        t = self._transposed.get(cts)
        if t is None:
            n = len(self.gf.graph.outputs)
            idx = [k for k, c in zip(self.diff_outs, cts) if c] + [n + j for j, c in enumerate(cts[first:]) if c]
            g = self.gf.graph
            t0 = time.perf_counter()
            t = self._transposed[cts] = transpose(self.fwd, idx, [g.inputs[i] for i in self.wrt_idx], FRONT)
            self.gf.stats_add("transpose_seconds", time.perf_counter() - t0)
        return t

    def backward(self, cts, want) -> _Backward:
        """The backward for output cotangents ``cts`` (a flag per node output: the differentiable outputs, then
        the residuals handed out) computing the inputs marked in ``want`` (per ``wrt_idx``)."""
        n_diff = len(self.diff_outs)
        if len(cts) > n_diff and not any(cts[n_diff:]):
            cts = cts[:n_diff]      # (no residual's cotangent: the first order's backward)
        key = (cts, want)
        bk = self._backward.get(key)
        if bk is not None:
            return bk
        bk = _Backward()
        t = self.transposed_for(cts) if any(cts) else None
        # an input the first-order backward reaches gets zeros when a differentiable output's cotangent came (or
        # none came at all) but none reaches the input now: the outputs' missing cotangents count as zeros, as
        # before; when only residuals' came (a double backward through the activations) it gets None, as eager
        first = self.transposed.present
        as_zero = any(cts[:n_diff]) or not any(cts)
        kinds, outs = [], []
        at = iter(t.bwd.outputs) if t is not None else iter(())
        for i, w in enumerate(want):
            here = t is not None and t.present[i]
            v = next(at) if here else None
            if w and here:
                kinds.append(_COMPUTED)
                outs.append(v)
            else:
                kinds.append(_ZERO if w and first[i] and as_zero else _NONE)
        bk.kinds = tuple(kinds)
        bk.fn, bk.sources, bk.recomputed = None, (), ()
        if not outs:
            self._backward[key] = bk
            return bk
        bwd = t.bwd
        g = run_pipeline(dce(Graph(bwd.inputs, bwd.eqns, outs)), f"{self.gf.name} backward")
        # the forward values it reads: inputs as themselves, saved residuals, else recomputed
        read = {v for e in g.eqns for v in e.ins if isinstance(v, Var)} | {v for v in g.outputs if isinstance(v, Var)}
        saved = {r: j for j, r in enumerate(self.transposed.residuals)}
        ins = {v: i for i, v in enumerate(self.gf.graph.inputs)}
        sources, recomputed = [], []
        n_ct = t.n_ct
        keep_inputs = list(g.inputs[:n_ct])
        for fv, bv in zip(t.residuals, bwd.inputs[n_ct:]):
            if bv not in read:
                continue
            keep_inputs.append(bv)
            if fv in ins:       # (an input is read as itself: with create_graph, through its own history)
                sources.append((_INPUT, ins[fv]))
            elif fv in saved:
                sources.append((_SAVED, saved[fv]))
            else:
                sources.append((_RECOMPUTED, len(recomputed)))
                recomputed.append(fv)
        bk.fn = self._function(Graph(keep_inputs, g.eqns, g.outputs), "_bwd")
        bk.sources, bk.recomputed = tuple(sources), tuple(recomputed)
        self._backward[key] = bk
        return bk

    def residual_fn(self, vars_) -> "GraphFunction":
        """Forward values (Vars of the graph) as a GraphFunction of the inputs."""
        f = self._res.get(vars_)
        if f is None:
            g = self.gf.graph
            f = self._res[vars_] = self._function(dce(Graph(g.inputs, g.eqns, list(vars_))), "_res")
        return f

    def functions(self) -> list:
        """The backward and residual GraphFunctions made so far."""
        return [bk.fn for bk in self._backward.values() if bk.fn is not None] + list(self._res.values())

    def _function(self, g, suffix) -> "GraphFunction":
        return GraphFunction(g, [True] * len(g.outputs), self.gf.backend, self.gf.name + suffix,
                             stats=self.gf.stats, parallel=self.gf.parallel, disk_cache=self.gf.disk_cache,
                             background=self.gf.background)


class GraphFunction:
    """A Graph callable on tensors: ``gf(list_of_tensors) -> list_of_tensors``."""

    def __init__(self, graph: Graph, out_diff, backend="interpret", name="compiled", stats=None, writes=(),
                 array_outs=(), parallel=None, disk_cache=True, background=None):
        self.parallel = parallel
        self.background = background
        self.disk_cache = disk_cache
        self.writes = tuple(writes)             # (output, input): written into the input's buffer
        self.array_outs = frozenset(array_outs)  # outputs returned as NumPy arrays, not tensors
        self.graph = graph
        self.out_diff = list(out_diff)
        self.backend = backend
        self.name = name
        self.stats = stats if stats is not None else {}
        self._plans = {}

    def wait(self, timeout=None) -> bool:
        """Wait for the builds of this function's graphs (forward, with residuals, backward) to finish."""
        if self.backend != "numba":
            return True
        ok = True
        graphs = [self.graph] + [p.fwd for p in self._plans.values()]
        for g in graphs:
            for cg in g.compiled.values():
                ok = cg.wait(timeout) and ok
        for p in self._plans.values():
            for sub in p.functions():       # (each waits for its own graphs)
                ok = sub.wait(timeout) and ok
        return ok

    def stats_add(self, key, v):
        self.stats[key] = self.stats.get(key, 0.0) + v

    def plan(self, wrt_idx) -> _Plan:
        p = self._plans.get(wrt_idx)
        if p is None:
            p = self._plans[wrt_idx] = _Plan(self, wrt_idx)
        return p

    def grad_plan(self, inputs):
        """The plan ``self(inputs)`` runs (forward with residuals) when an output needs an autograd node, else
        None (it runs ``self.graph``)."""
        if grad_mode.STATE.grad_enabled:
            wrt = tuple([i for i, t in enumerate(inputs) if t._requires_grad or t.grad_fn is not None])
            if wrt:
                plan = self.plan(wrt)
                if plan.diff_outs:
                    return plan
        return None

    def _wrap(self, arrays):
        ao = self.array_outs
        if not ao:
            return [Tensor._make(a) for a in arrays]
        return [a if k in ao else Tensor._make(a) for k, a in enumerate(arrays)]

    def direct(self, inputs):
        """A shorter way to ``self(inputs)`` for calls of the same signature as ``inputs`` (grad mode, which inputs
        require grad and the payloads' kind are part of a compiled function's key and guards), or None: when the
        graph's compiled code is ready, no output needs an autograd node and no profiler is active.  It skips the
        per-call lookups ``execute`` makes (device, which plan, which compiled graph); a call it cannot serve
        (code dropped after a failure, a non-array payload, inputs that do not fit the layout) goes through
        ``self(inputs)``."""
        if self.backend != "numba" or _PROF.active is not None:
            return None
        arrays = [t._data for t in inputs]
        if any(type(a) is not np.ndarray for a in arrays):
            return None
        if self.grad_plan(inputs) is not None:
            return None
        cg = compiled_graph(self.graph, self.writes, self.parallel, self.disk_cache, self.background)
        run = cg.run
        if run is None or getattr(run, "ncheck", None) is None:     # only the C entry's caller (entry.caller)
            return None
        stats, wrap, slow, nd = self.stats, self._wrap, self.__call__, np.ndarray

        def call(inputs):
            arrays = [t._data for t in inputs]
            if cg.run is not run or _PROF.active is not None:
                return slow(inputs)
            for a in arrays:
                if type(a) is not nd:
                    return slow(inputs)
            res = run(*arrays)      # (the C entry is LLVM IR: no Numba error at call time, unlike execute's drivers)
            if res is None:
                return slow(inputs)
            return wrap(compiled_result(cg, res, stats))
        return call

    def __call__(self, inputs, plan=_ASK):
        """Run the graph on ``inputs`` (Tensors); ``plan``: ``self.grad_plan(inputs)`` when the caller has it."""
        arrays = [t._data for t in inputs]
        if plan is _ASK:
            plan = self.grad_plan(inputs)
        if plan is None:
            return self._wrap(execute(self.graph, arrays, self.backend, self.writes, self.parallel, self.disk_cache,
                                      self.background, self.stats))
        allout = execute(plan.fwd, arrays, self.backend, self.writes, self.parallel, self.disk_cache,
                         self.background, self.stats)
        n = len(self.graph.outputs)
        outs = self._wrap(allout[:n])
        _attach_node(plan, inputs, outs, allout[:n], allout[n:])
        return outs


def _attach_node(plan, inputs, outs, out_arrays, residuals):
    """Give ``outs`` (the Tensors of ``plan``'s graph's outputs on ``inputs``) their ``CompiledBackward`` node: the
    backward of ``plan`` reading ``residuals`` (arrays)."""
    wrt = plan.wrt_idx
    nf = tuple((inputs[i].grad_fn, inputs[i]._out_nr) if inputs[i].grad_fn is not None
               else (inputs[i]._accumulator(), 0) for i in wrt)
    node = CompiledBackward(_CompiledOp("CompiledFunctionBackward"), {}, nf, (True,) * len(wrt))
    node.plan = plan
    node.saved = list(inputs)
    node.residuals = residuals
    node.saved_versions = [(inputs[i], inputs[i]._vc[0]) for i in plan.residual_alias]
    node.input_versions = [(t, t._vc[0]) for t in inputs]
    node.saved_outputs = _saved_outputs(plan, outs, out_arrays, residuals)
    node.inputs = node.outputs = ()
    node.versions = node.out_versions = None
    node.shapes = tuple(t.shape for t in inputs)
    node.dtypes = tuple(t.dtype for t in inputs)
    node.loc = None
    meta = []
    for j, k in enumerate(plan.diff_outs):
        o = outs[k]
        o.grad_fn = node
        o._out_nr = j
        meta.append((o.shape, o.dtype))
    node.out_meta = tuple(meta)


def _saved_outputs(plan, outs, out_arrays, residuals):
    """The outputs whose buffers the backward reads (an output that is a residual, or a view of one): an
    in-place change to one of them before backward must raise, as torch's saved-tensor version check does.
    Weak references, so the node does not keep its own outputs alive."""
    saved = []
    by_graph = plan.saved_outs
    nd = [r for r in residuals if type(r) is np.ndarray]
    for k, (t, a) in enumerate(zip(outs, out_arrays)):
        if not isinstance(t, Tensor):
            continue
        if k in by_graph or (type(a) is np.ndarray and any(np.may_share_memory(a, r) for r in nd)):
            saved.append((k, weakref.ref(t), t._vc[0]))
    return saved


def _outputs_sharing_residuals(g, residuals) -> frozenset:
    """Indices of the graph's outputs that are a residual, or a view (reshape, permute, expand...) of one or of
    which one is a view: as in torch, where a view shares its base's version counter, changing such an output in
    place invalidates the saved value, whether or not the backend gave them one buffer."""
    defs = {o: e for e in g.eqns for o in e.outs}

    def base(v):
        while True:
            e = defs.get(v)
            if e is None or not getattr(e.op, "view", False):
                return v
            v = e.ins[0]
    res = {base(r) for r in residuals if isinstance(r, Var)}
    return frozenset(k for k, v in enumerate(g.outputs) if isinstance(v, Var) and base(v) in res)


__all__ = ["GraphFunction", "FRONT", "execute"]
del _TR
