"""GraphFunction: run a Graph on tensors, with autograd through the transpose pass.

Called on inputs that require grad (with grad mode on), the forward also returns the residuals its
transposed graph reads, and each differentiable output gets a ``CompiledFunctionBackward`` node.  That
node runs the backward graph as another GraphFunction, so with ``create_graph=True`` the backward is itself
differentiable (the residuals it reads then get the residual graph's backward as their node, reading the saved
values, or are recomputed by that graph as a differentiable GraphFunction of the inputs): any order.
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
    """grad_fn of a GraphFunction's differentiable outputs."""

    __slots__ = ("plan", "saved", "saved_versions", "input_versions", "residuals", "saved_outputs")

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
        # the inputs this backward pass reaches (autograd.grad(u, x) with parameters requiring grad too: only the
        # cotangent of x); the others' cotangents are not computed, as eager nodes compute only what is needed
        running = _RUNNING.nodes
        present = plan.transposed.present
        keep = tuple(p and (running is None or c in running) for p, (c, _) in zip(present, self.next_functions))
        bwd = plan.backward_fn(keep)
        if grad_mode.STATE.grad_enabled:
            # create_graph: the residuals the backward reads, as differentiable functions of the inputs, recomputed;
            # those it does not read are passed as saved
            res = [Tensor._make(a) for a in self.residuals]
            used = plan.residuals_read(keep)
            if used:
                for k, t in zip(used, plan.differentiable_residuals(used, self.saved, self.residuals)):
                    res[k] = t
        else:
            res = [Tensor._make(a) for a in self.residuals]
        outs = bwd(list(grads) + res)
        it = iter(outs)
        return tuple(next(it) if k else None for k in keep)

    def release(self):
        self._freed = True
        self.saved = None
        self.residuals = None


class _Plan:
    """Forward-with-residuals and the lazily built backward for one set of inputs needing grad."""

    def __init__(self, gf, wrt_idx):
        g = gf.graph
        self.gf = gf
        self.wrt_idx = wrt_idx
        wrt = [g.inputs[i] for i in wrt_idx]
        act = active_vars(g, wrt)
        self.diff_outs = [k for k, v in enumerate(g.outputs) if gf.out_diff[k] and isinstance(v, Var) and v in act]
        t0 = time.perf_counter()
        self.transposed = transpose(g, self.diff_outs, wrt, FRONT)
        self.fwd = Graph(g.inputs, g.eqns, list(g.outputs) + list(self.transposed.residuals))
        gf.stats_add("transpose_seconds", time.perf_counter() - t0)
        self._bwd = None
        self._bwd_kept = {}     # keep mask -> the backward computing only those cotangents
        self._read = {}         # keep mask -> the residuals its backward reads
        self._res = {}          # residual indices -> their recomputation
        self._saved_at = {}     # residual indices -> where their graph's own residuals are among the saved values
        self.residual_alias = [g.inputs.index(r) for r in self.transposed.residuals if r in set(g.inputs)]
        self.saved_outs = _outputs_sharing_residuals(g, self.transposed.residuals)

    def backward_fn(self, keep=None) -> "GraphFunction":
        """The backward graph as a GraphFunction; ``keep`` (per ``transposed.present``): only those cotangents
        (the others' eqns dropped), in order."""
        t = self.transposed
        if keep is None or keep == tuple(t.present):
            if self._bwd is None:
                self._bwd = self._function(run_pipeline(t.bwd, f"{self.gf.name} backward"), "_bwd")
            return self._bwd
        f = self._bwd_kept.get(keep)
        if f is None:
            outs = [v for v, k in zip(t.bwd.outputs, (k for p, k in zip(t.present, keep) if p)) if k]
            g = dce(Graph(t.bwd.inputs, t.bwd.eqns, outs))
            f = self._bwd_kept[keep] = self._function(run_pipeline(g, f"{self.gf.name} backward"), "_bwd")
        return f

    def residuals_read(self, keep) -> tuple:
        """Indices of the residuals the backward ``backward_fn(keep)`` reads."""
        hit = self._read.get(keep)
        if hit is None:
            g = self.backward_fn(keep).graph
            read = {v for e in g.eqns for v in e.ins if isinstance(v, Var)} | \
                {v for v in g.outputs if isinstance(v, Var)}
            res_inputs = g.inputs[self.transposed.n_ct:]
            hit = self._read[keep] = tuple(k for k, v in enumerate(res_inputs) if v in read)
        return hit

    def residual_fn(self, used=None) -> "GraphFunction":
        """The residuals (those of ``used``, by index: all when None) as a GraphFunction of the inputs."""
        res = list(self.transposed.residuals)
        used = tuple(range(len(res))) if used is None else tuple(used)
        f = self._res.get(used)
        if f is None:
            g = self.gf.graph
            f = self._res[used] = self._function(dce(Graph(g.inputs, g.eqns, [res[k] for k in used])), "_res")
        return f

    def differentiable_residuals(self, used, inputs, arrays) -> list:
        """The residuals of ``used`` (their saved ``arrays``) as differentiable functions of ``inputs``, for a
        backward with ``create_graph``.  Their node is the residual graph's backward; when it reads only values
        this forward saved (an MLP's activations, the weights), the saved arrays serve it: nothing is recomputed.
        Otherwise the residuals are recomputed by that graph."""
        f = self.residual_fn(used)
        rplan = f.grad_plan(inputs)
        if rplan is None:
            return f(inputs, None)
        at = self._saved_at.get(used)
        if at is None:
            g = self.gf.graph
            where = {v: ("in", i) for i, v in enumerate(g.inputs)}
            where.update({v: ("res", j) for j, v in enumerate(self.transposed.residuals) if isinstance(v, Var)})
            at = self._saved_at[used] = [where.get(v) for v in rplan.transposed.residuals]
        if any(w is None for w in at):
            return f(inputs, rplan)
        saved = [inputs[i]._data if kind == "in" else arrays[i] for kind, i in at]
        out_arrays = [arrays[k] for k in used]
        outs = [Tensor._make(a) for a in out_arrays]
        _attach_node(rplan, inputs, outs, out_arrays, saved)
        return outs

    def functions(self) -> list:
        """The backward and residual GraphFunctions made so far."""
        return ([self._bwd] if self._bwd is not None else []) + list(self._bwd_kept.values()) + \
            list(self._res.values())

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
