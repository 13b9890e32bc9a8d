"""``@jg.compile``: trace a step function into one SSA graph, cache it by signature, replay it.

Tracing runs the user's function once with symbolic payloads:
- tensor arguments, and concrete tensors met while tracing (parameters in a closure, optimiser state, their
  ``.grad``), become graph inputs *by identity*: their payload is swapped for an input Var during the trace
  and restored after, and every call reads them afresh;
- in-place updates and ``.grad`` writes are functionalised (the tensor's payload/grad becomes a traced value)
  and turned into extra graph outputs written back after each call;
- ``.backward()`` / ``autograd.grad`` inside run the ordinary engine on symbolic tensors.
The cache key holds the arguments' structure, shapes, dtypes, requires_grad, static values, grad and
anomaly modes; each entry guards the identity, shape, dtype, requires_grad and grad-is-None of what it
captured.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
import weakref

import numpy as np

from ..ir import dtypes
from ..ir.graph import Graph, Var
from ..ir.passes import run_pipeline
from ..ir.unbacked import DataDependentSizeError
from ..tracer import STATE as _TR, TraceError, TracedValueError, flatten, unflatten
from ..runtime import anomaly, grad_mode
from ..runtime.traced import layout_key
from . import build_policy
from ..codegen.native import build_thread as _build_thread
from ..codegen.native.build_thread import CALLER_JOBS as _BUILD_REQUESTS
from .constant_masks import fold_masks
from .graph_function import GraphFunction
from .introspection import Introspection
from .lazy_functions import refuse_lazy, refuse_lazy_result
from . import python_values, recompiles, symbolic_entries
from .torch_options import torch_options
from .signatures import COUNTS as _SIG_COUNTS
from .trace_entries import (NO_MEMO as _NO_MEMO, _Entry, _Tracer, _bindings, _payload_of, bounded,
                            copied_outputs, materialize_leaks, trimmed)
from .signatures import (Signatures, _is_tensor_or_float, _shared_memory, _static_key, args_alias_writes,
                         distinct, state_read_only, writes_alias, writes_read_only, written_roots)
from ..tracer import trace as _trace_mod
from ..runtime.tensor import Tensor
from ..runtime import forward_state, profiler_state
from ..runtime.devices import backend_of_payload

_PROF, _FS = profiler_state.STATE, forward_state.STATE
_EAGER = object()       # _call_locked's answer: run the function eagerly (after releasing the lock)

# torch._dynamo.config.recompile_limit: past this many traces of one function, new signatures run eagerly
RECOMPILE_LIMIT = 8
_is_tensor = lambda x: isinstance(x, Tensor)  # noqa: E731


class CompiledFunction(Introspection, Signatures):
    """The callable ``@jg.compile`` returns.  ``f.ir(*args)``, ``f.source(*args)``, ``f.stats``."""

    def __init__(self, fn, device=None, anomaly=None, cache=True, parallel=None, backend=None,
                 fullgraph=True, background=None, recompile_limit=None, dynamic=None):
        if backend is None:
            backend = os.environ.get("JITGRAD_BACKEND", "numba")
        if backend not in ("interpret", "numba"):
            raise ValueError(f"jitgrad.compile: unknown backend {backend!r} (expected 'numba' or 'interpret')")
        refuse_lazy(fn)
        if device is not None:
            from ..runtime.devices import check_device
            device = check_device(device)    # raises when the device has no backend (no CUDA)
            if device.type == "cuda" and device.index is None:
                device = type(device)("cuda", 0)
        self.device = device
        self.fn = fn
        self.backend = backend
        self.fullgraph = fullgraph
        self.anomaly = anomaly
        self.use_cache = cache
        self.parallel = parallel
        if background is None:
            background = os.environ.get("JITGRAD_BACKGROUND_COMPILE", "1") != "0"
        self.background = bool(background)
        self._cache: dict = {}
        self.dynamic = dynamic      # None: automatic dynamic shapes; True: every dim symbolic; False: none
        self._dyn_dims: dict = {}   # symbolic_entries.shapeless(key) -> {(leaf, dim)}: dims that are symbols
        self._n_entries = 0
        self.recompile_limit = RECOMPILE_LIMIT if recompile_limit is None else int(recompile_limit)
        self._last_key = None
        self._last_one_shot = False
        self._last_reason = ("first call", "first call")
        self._warned_retrace = False
        # automatic dynamic scalars: float arguments (per argument structure, by position among the floats) and
        # guarded float values (by place) seen to change become graph inputs; a trace that cannot take them as
        # tensors (``if scale > 0:``) pins them static again
        self._dyn_args: dict = {}
        self._static_args: dict = {}
        self._last_floats: dict = {}
        self._dyn_sources: set = set()
        self._static_sources: set = set()
        self._warned_eager = False
        # compiled_calls / interpreted_calls: graph executions on generated code / on the reference interpreter
        # (the interpreter serves calls while a background build runs, or when codegen failed)
        self.stats = build_policy.init_stats({"traces": 0, "hits": 0, "calls": 0, "compile_seconds": 0.0,
                                              "eager_fallbacks": 0, "compiled_calls": 0, "interpreted_calls": 0,
                                              "trace_reasons": {}, "shape_instances": 0,
                                              "shape_lowerings": 0, "shape_bindings": 0})
        functools.update_wrapper(self, fn)

    def wait(self, timeout=None) -> bool:
        """Block until every build this function started has finished; True when all of them produced compiled
        code (the interpreter keeps serving the rest).  Useful with the default background build:

        >>> import jitgrad as jg
        >>> f = jg.compile(lambda x: (x * 2).sum())
        >>> _ = f(jg.ones(3)); f.wait()
        True
        """
        if self.backend != "numba":
            return True
        ok = True
        # (a forked child's build queue and locks are fresh, native/build_thread.py ``_after_fork_in_child``: a build
        # the parent had started is built again here, so waiting never blocks on the parent's threads)
        for key, entries in self._cache.items():
            if symbolic_entries.unreachable(self, key):
                continue                # (its build was dropped: no call runs it)
            for e in entries:
                gf = getattr(e, "gf", None)
                if gf is not None:
                    ok = gf.wait(timeout) and ok
                if e.shape_env is not None:     # a symbolic trace: its instances' and lowerings' builds
                    ok = symbolic_entries.wait(e, timeout) and ok
        return ok

    # --- keys ----------------------------------------------------------------------------------------
    def _modes(self):
        an = anomaly.STATE
        # the default dtype: values made while tracing (``zeros(3)``, ``int_t * 0.5``) take it (torch.compile guards it)
        return (grad_mode.STATE.grad_enabled, an.enabled, an.check_nan, an.check_forward, self.anomaly,
                dtypes.DEFAULT_FLOAT)

    def _key(self, leaves, treedef, tkey=None):
        _SIG_COUNTS["signatures"] += 1
        ids = [id(t) for t in leaves]
        first = tuple(ids.index(i) for i in ids)     # which leaves are the same object
        if len(leaves) > 1:
            alias = _shared_memory(leaves, first)
            if alias:
                first = (first, alias)
        # the payload's type: its device; its strides when not C-contiguous: a reshape of it is a view or a copy
        sig = tuple((tuple(t._data.shape), t._data.dtype, t._requires_grad or t.grad_fn is not None, t._grad is None,
                     type(t._data), layout_key(t._data)) for t in leaves)
        return (_static_key(treedef) if tkey is None else tkey, sig, first, self._modes())

    # --- calling -------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        prof = _PROF.active
        if prof is not None and _TR.active is None:   # the call is one event; kernels and compile phases nest in it
            with prof.range(f"compiled:{getattr(self.fn, '__name__', 'function')}", None, "compiled"):
                return self._call(args, kwargs)
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        self.stats["calls"] += 1
        if _BUILD_REQUESTS:             # the build thread asks this thread for a fork (build_thread.on_caller)
            _build_thread.serve_caller()
        if _TR.active is not None or _FS.active is not None:     # traced by a caller: trace through it; a dual
            return self.fn(*args, **kwargs)     # level open (func.jvp): only eager ops carry its tangents through
        with _trace_mod.TRACE_LOCK:     # no call reads a tensor another thread is tracing
            r = self._call_locked(args, kwargs)
        if r is _EAGER:                 # outside the lock: eager code may wait on other threads' compiled calls
            return self.fn(*args, **kwargs)
        return r

    def _call_locked(self, args, kwargs):
        leaves, treedef, key, floats, dyn = self._signature(args, kwargs)
        if self._dyn_dims:
            key = symbolic_entries.symbolic_key(self._dyn_dims, key)
        entries = self._cache.get(key)
        if entries:
            for e in entries:
                if e.guards_ok():
                    if e.shape_env is not None and (e := symbolic_entries.instance(self, e, leaves)) is None:
                        continue        # a size guard of that trace fails for these sizes
                    self.stats["hits"] += 1
                    if e.eager:      # fullgraph=False fallback for this signature, or aliased inputs
                        return _EAGER
                    if (e.write_roots or e.arg_writes) and e.alias_token is not self._sig_memo:
                        # (checked again only when the arguments' identities change: see Signatures._memo_key)
                        if e.write_roots and args_alias_writes(leaves, e.write_roots):
                            return _EAGER        # an argument shares memory with state the graph writes
                        if e.arg_writes and writes_read_only(distinct(leaves), e.arg_writes):
                            return _EAGER        # it writes an argument over a read-only array: eager copies
                        e.alias_token = self._sig_memo if self._sig_memo is not None else _NO_MEMO
                    return self._run(e, leaves, args, kwargs, floats)
        if floats and self._float_args_changed(treedef, floats):
            return self._call_locked(args, kwargs)     # the changed floats are graph inputs now
        if symbolic_entries.mark_on_miss(self, key, leaves):
            symbolic_entries.drop_static_builds(self)
            return self._call_locked(args, kwargs)     # the sizes that changed are symbols now
        if entries:
            self._note_changed_values(entries)
        self._last_reason = recompiles.miss_reason(self, key, entries, leaves)
        if self._n_entries >= self.recompile_limit:
            self._warn_recompile_limit()
            self.stats["eager_fallbacks"] += 1
            return _EAGER
        e = self._trace(leaves, treedef, args, kwargs, key, floats, dyn)
        if e.shape_env is not None:
            e = symbolic_entries.instance(self, e, leaves)
        if e.eager or (e.arg_writes and writes_read_only(distinct(leaves), e.arg_writes)):
            return _EAGER
        return self._run(e, leaves, args, kwargs, floats)

    def _trace(self, leaves, treedef, args, kwargs, key, floats=(), dyn=()) -> _Entry:
        t0 = time.perf_counter()
        self.stats["traces"] += 1
        recompiles.record(self.stats, self.fn, self._last_reason)
        e = _Entry()
        e.values, e.dynamic = python_values.collect(self.fn, Tensor, self._dyn_sources, (args, kwargs))
        e.arg_floats = tuple(dyn)
        # dynamic floats: symbolic 0-dim float64 tensors in their places for the trace (see python_values)
        dyn_tensors = [Tensor._make(np.array(floats[i], np.float64)) for i in dyn]
        dyn_tensors += [Tensor._make(np.array(d.read(), np.float64)) for d in e.dynamic]
        if dyn:
            it = iter(dyn_tensors)
            fl = iter(range(len(floats)))
            full, _ = flatten((args, kwargs), _is_tensor_or_float)
            full = [next(it) if type(x) is float and next(fl) in dyn else x for x in full]
            t_args, t_kwargs = unflatten(treedef, full)
        else:
            t_args, t_kwargs = args, kwargs
        saved_values = [(d, d.read()) for d in e.dynamic]
        for d, t in zip(e.dynamic, dyn_tensors[len(dyn):]):
            d.put(t)
        env, shapes, e.sym_sources = symbolic_entries.trace_shapes(key, leaves)
        tracer = _Tracer(list(leaves) + dyn_tensors, shapes)
        if dyn_tensors:      # they promote as the Python floats they stand for
            tracer.trace.python_floats = {tracer.captured[id(t)].var for t in dyn_tensors}
        try:
            with tracer.trace, grad_mode.set_grad_enabled(grad_mode.STATE.grad_enabled), symbolic_entries.active(env):
                with _phase("compile/trace"):
                    out = self.fn(*t_args, **t_kwargs)
                outputs, out_diff = self._finish(e, tracer, out)
                del out
        except BaseException as exc:
            tracer.restore()
            for d, v in saved_values:
                d.put(v)
            tracer.trace.abort()
            if env is not None and isinstance(exc, Exception):
                # a symbolic trace failed (library code that needs plain ints, or a real error, which the static
                # trace raises again): this structure is traced per shape from now on
                return symbolic_entries.retry_static(self, key, exc, leaves, lambda k: self._trace(
                    leaves, treedef, args, kwargs, k, floats, dyn))
            if (dyn or e.dynamic) and isinstance(exc, Exception):
                # the function needs these floats as Python numbers (``if lr > 0:``, ``math.exp(lr)``): pin them
                # static and trace again with their values baked in, guarded
                self.stats["traces"] -= 1
                self.stats["trace_reasons"][self._last_reason[0]] -= 1
                if dyn:
                    tk = _static_key(treedef)
                    self._static_args[tk] = tuple(self._static_args.get(tk, ())) + tuple(dyn)
                    self._dyn_args[tk] = ()
                for d in e.dynamic:
                    src = (id(d.src), d.name)
                    self._dyn_sources.discard(src)
                    self._static_sources.add(src)
                leaves2, treedef2, key2, floats2, dyn2 = self._signature(args, kwargs)
                return self._trace(leaves2, treedef2, args, kwargs, key2, floats2, dyn2)
            if not isinstance(exc, (TracedValueError, DataDependentSizeError)) or self.fullgraph:
                raise
            self._eager_signature(e)
        else:
            tracer.restore()
            for d, v in saved_values:
                d.put(v)
            materialize_leaks(e, tracer, outputs, out_diff)
            if e.writes and (not e.materialize and writes_alias(tracer.order, e.writes)
                             or state_read_only(tracer.order, e.writes, e.n_args)):
                # inputs share memory and the function writes one of them in place (the graph's functional view
                # cannot give eager mode's aliasing), or it writes captured state over a read-only array (eager
                # copies on write; compiled code would write into it): this signature runs eagerly
                e.eager = True
                self.stats["eager_fallbacks"] += 1
            else:
                e.write_roots = written_roots(tracer.order, e.writes, e.n_args)
                e.arg_writes = tuple(ci for ci, _ in e.writes if ci < e.n_args)
                raw = Graph(tracer.trace.inputs, tracer.trace.eqns, outputs)
                raw, out_diff = bounded(e, raw, out_diff, env, self.fullgraph)     # data-dependent sizes
                if raw is None:
                    self._eager_signature(e)
                elif env is None:
                    self._build(e, raw, out_diff)
                else:       # a template: instances per call's sizes (symbolic_entries.instance)
                    e.raw_graph, e.out_diff, e.shape_env, e.instances = raw, out_diff, env, {}
        self.stats["compile_seconds"] += time.perf_counter() - t0
        self._last_key = key
        self._last_one_shot = e.one_shot
        if not e.one_shot:
            self._cache.setdefault(key, []).append(e)
            self._n_entries += 1
        return e

    def _eager_signature(self, e: _Entry):
        """fullgraph=False: a trace that read a traced value (or a data-dependent size) runs eagerly."""
        e.eager = True
        self.stats["eager_fallbacks"] += 1
        if not self._warned_eager:
            self._warned_eager = True
            warnings.warn(f"jitgrad.compile(fullgraph=False): {getattr(self.fn, '__name__', 'function')} reads "
                          "a traced value; this signature runs eagerly.", stacklevel=6)

    def _finish(self, e: _Entry, tracer: _Tracer, out):
        refuse_lazy_result(self.fn, out)
        out_leaves, e.out_treedef = flatten(out, _is_tensor)
        first = {}
        for k, t in enumerate(out_leaves):      # a tensor returned twice is one tensor after each call too
            j = first.setdefault(id(t), k)
            if j != k:
                e.same_outs.append((k, j))
        outputs, out_diff = [], []
        for t in out_leaves:
            outputs.append(_payload_of(t, tracer))
            out_diff.append(t.requires_grad)
        e.n_user_out = len(outputs)
        pf = tracer.trace.python_floats
        if pf:      # a value computed from dynamic floats alone is a Python float in eager mode: returned as one
            e.float_outs = [k for k, v in enumerate(outputs) if type(v) is Var and v in pf]
        # payload write-backs
        for t in tracer.mutated.values():
            c = tracer.captured.get(id(t))
            if c is None:
                continue      # made inside the trace: a temporary, or state that outlives it (see materialize_leaks)
            if t._data is c.var:
                continue
            e.writes.append((tracer.order.index(c), len(outputs)))
            outputs.append(_payload_of(t, tracer))
            out_diff.append(False)
        # .grad write-backs: an argument's by its position (each call has its own argument tensors)
        e.n_args = len(tracer.arg_ids)
        arg_index = {id(c.ref()): i for i, c in enumerate(tracer.order[:e.n_args])}
        for t, before in tracer.grad_touched.values():
            after = t._grad
            ref = arg_index.get(id(t))
            if ref is None:
                ref = weakref.ref(t)
            if after is before:
                continue      # same object: a payload change is already a write-back
            if after is None:
                e.grad_writes.append((ref, "none", None))
            elif id(after) in tracer.captured and after._data is tracer.captured[id(after)].var:
                val = arg_index.get(id(after))
                e.grad_writes.append((ref, "obj", weakref.ref(after) if val is None else val))
            else:
                e.grad_writes.append((ref, "out", len(outputs)))
                outputs.append(_payload_of(after, tracer))
                out_diff.append(False)
        e.captured = tracer.order[e.n_args:]      # arguments come first and are not guarded by identity
        # an argument's existing .grad that backward accumulated into: read from that argument at each call
        grad_of = {id(before): arg_index[id(t)] for t, before in tracer.grad_touched.values()
                   if before is not None and id(t) in arg_index}
        e.grad_src = [grad_of.get(id(c.ref())) for c in e.captured]
        e.bindings = _bindings(self.fn, e.captured)
        e.guards = tracer.trace.guards
        e.guard_what = tracer.trace.guard_what
        return outputs, out_diff

    def _build(self, e: _Entry, raw: Graph, out_diff):
        e.raw_graph = raw
        raw = fold_masks(raw, e)        # causal masks as literals: the products they halve (ir/passes/causal.py)
        with _phase("compile/passes"):
            e.graph = run_pipeline(raw, getattr(self.fn, "__name__", "compiled"), transposable=any(out_diff))
        # payload write-backs happen inside the call (into the inputs' buffers); those outputs stay arrays
        e.talks = build_policy.collectives(e.graph, getattr(self.fn, "__name__", "compiled"))
        e.gf = GraphFunction(e.graph, out_diff, self.backend, getattr(self.fn, "__name__", "compiled"),
                             stats=self.stats, writes=[(oi, ci) for ci, oi in e.writes],
                             array_outs=[oi for _, oi in e.writes], parallel=self.parallel,
                             disk_cache=self.use_cache, background=self.background)
        e.copy_outs = copied_outputs(e.graph, e.writes, e.same_outs)

    def _check_device(self, leaves):
        """``device=``: every argument tensor must be on it (as torch, no implicit transfers)."""
        for k, t in enumerate(leaves):
            if t.device != self.device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{self.device} and {t.device}! (when checking argument {k} of the compiled "
                                   f"function {getattr(self.fn, '__name__', 'function')}, compiled for "
                                   f"device='{self.device}')")

    def _run(self, e: _Entry, leaves, args, kwargs, floats=()):
        if self.device is not None:
            self._check_device(leaves)
        # graph inputs: the distinct argument tensors in leaf order, the dynamic floats, then the captured tensors
        inputs = []
        seen = set()
        for t in leaves:
            if id(t) not in seen:
                seen.add(id(t))
                inputs.append(t)
        if e.arg_floats or e.dynamic:
            inputs.extend(Tensor._make(np.array(floats[i], np.float64)) for i in e.arg_floats)
            inputs.extend(Tensor._make(np.array(d.read(), np.float64)) for d in e.dynamic)
        inputs.extend(c.ref() if s is None else inputs[s]._grad for c, s in zip(e.captured, e.grad_src))
        building = None
        if self.backend == "numba" and not e.code_ready:
            plan = e.gf.grad_plan(inputs)       # looked up once: the build's graph and the interpreted call's
            building = e.building = build_policy.pending_build(e.gf, inputs, plan, self.stats["calls"])
            e.code_ready = building is None
        direct = e.direct
        if direct is None and e.code_ready and self.device is None and _PROF.active is None:
            # (not decided under a profiler: direct declines there, which is no reason to decline later)
            # (an argument's .grad read as an input is not guarded for requires_grad: such entries keep gf's path)
            ok = all(s is None for s in e.grad_src)
            direct = e.direct = (e.gf.direct(inputs) if ok else None) or False    # False: no direct call
        if direct:
            # (a graph that communicates runs in its group's watchdog section: timeout= covers its MPI steps)
            outs = direct(inputs) if e.talks is None else build_policy.run_watched(e.talks, direct, inputs)
        elif building is not None:        # no code yet: eagerly or on the interpreter (build_policy.py)
            path = build_policy.choose(e)
            t0 = time.perf_counter()
            if path == "eager":
                out = self.fn(*args, **kwargs)
                self.stats["eager_calls"] += 1
                build_policy.record(e, path, time.perf_counter() - t0)
                self.stats["last_path"] = "eager"
                building.start()        # after the first result: now let the build use the cores
                return out
            outs = e.gf(inputs, plan)
            build_policy.record(e, path, time.perf_counter() - t0)
        else:
            outs = e.gf(inputs) if e.talks is None else build_policy.run_watched(e.talks, e.gf, inputs)
        for k in e.copy_outs:
            outs[k]._data = _copy_payload(outs[k]._data)
        for k, j in e.same_outs:
            outs[k] = outs[j]
        for ref, oi in e.materialize:       # state made by a one-shot trace gets its value
            t = ref()
            if t is not None:
                t._data = _copy_payload(outs[oi]._data)
                t.grad_fn = None
                t._base = None
        # write-backs: payload mutations, then grads
        for ci, _ in e.writes:      # already written by the call; count the writes
            t = inputs[ci]
            t._vc[0] += 1
            if type(t._data) is not np.ndarray:     # a device view is a copy of its base: pass the write on, as
                backend_of_payload(t._data).after_write(t)      # eager writes do
        for ref, kind, val in e.grad_writes:
            t = inputs[ref] if type(ref) is int else ref()
            if t is None:
                continue
            if kind == "none":
                t._grad = None
            elif kind == "obj":
                t._grad = inputs[val] if type(val) is int else val()
            else:
                g = outs[val]
                old = t._grad
                same = old is not None and old.shape == g.shape and old.dtype is g.dtype and not old.requires_grad
                if same and type(old._data) is np.ndarray and old._data.flags.writeable:
                    np.copyto(old._data, g._data)
                    old._vc[0] += 1
                elif same and type(g._data) is not np.ndarray and \
                        (dev := backend_of_payload(g._data)) is backend_of_payload(old._data):
                    dev.write(old._data, g._data)       # into the .grad already there, as on the CPU
                    old._vc[0] += 1
                    dev.after_write(old)
                else:
                    t._grad = Tensor._make(g._data)
        for k, d, n in e.trims:     # outputs of data-dependent size: their valid entries (bounded_sizes.py)
            outs[k] = trimmed(outs[k], d, int(outs[n].item()))
        for k in e.float_outs:
            outs[k] = float(outs[k]._data)
        if e.out_treedef == ("*",):
            return outs[0]
        return unflatten(e.out_treedef, outs[:e.n_user_out])

    # --- introspection --------------------------------------------------------------------------------
    def _entry_for(self, args, kwargs) -> _Entry:
        with _trace_mod.TRACE_LOCK:
            return self._entry_for_locked(args, kwargs)

    def _entry_for_locked(self, args, kwargs) -> _Entry:
        leaves, treedef, key, floats, dyn = self._signature(args, kwargs)
        if self._dyn_dims:
            key = symbolic_entries.symbolic_key(self._dyn_dims, key)
        for e in self._cache.get(key, []):
            if e.guards_ok() and (e.shape_env is None or symbolic_entries.instance(self, e, leaves) is not None):
                return e if e.shape_env is None else symbolic_entries.instance(self, e, leaves)
        self._last_reason = recompiles.miss_reason(self, key, self._cache.get(key), leaves)
        e = self._trace(leaves, treedef, args, kwargs, key, floats, dyn)
        if e.shape_env is not None:
            e = symbolic_entries.instance(self, e, leaves)
        if e.materialize:
            # the trace made state that outlives it (an optimiser buffer created on the first call): it must not
            # keep a traced value, so it gets the value this call would give it; nothing else is updated
            from ..ir.interpret import interpret
            inputs = list({id(t): t for t in leaves}.values())
            inputs += [Tensor._make(np.array(floats[i], np.float64)) for i in e.arg_floats]
            inputs += [Tensor._make(np.array(d.read(), np.float64)) for d in e.dynamic]
            inputs += [c.ref() if s is None else inputs[s]._grad for c, s in zip(e.captured, e.grad_src)]
            outs = interpret(e.graph, [t._data for t in inputs])
            for ref, oi in e.materialize:
                t = ref()
                if t is not None:
                    t._data, t.grad_fn, t._base = np.array(outs[oi]), None, None
            warnings.warn(f"jitgrad.compile: {getattr(self.fn, '__name__', 'function')}.ir()/.source() traced a "
                          "call that creates state (a tensor made inside and kept, e.g. a buffer created on the "
                          "first call); that state now holds the value this call would give it, but the call did "
                          "not run. Call the function once before asking for its IR.", stacklevel=3)
        return e


def _copy_payload(d):
    """A copy of an output's payload (a NumPy array, or a device array copied on its device)."""
    if type(d) is np.ndarray:
        return np.array(d)
    from ..runtime.devices import copy_payload
    return copy_payload(d)


def _phase(name):
    """A profiler event for a compile phase (nothing when no profiler is active)."""
    prof = _PROF.active
    return prof.range(name, None, "compile") if prof is not None else contextlib.nullcontext()


def compile(fn=None, *, device=None, anomaly=None, cache=True, parallel=None, backend=None, fullgraph=True,
            background=None, recompile_limit=None, dynamic=None, mode=None, options=None, disable=False):
    """Compile a step function: trace it on first call into SSA IR, derive backward graphs with the
    transpose pass, cache by signature and replay.

    ``backend``: ``"numba"`` (the default; ``JITGRAD_BACKEND`` overrides it) generates fused CPU kernels, run on
    the reference interpreter until they are built (``JITGRAD_BACKGROUND_COMPILE=0`` builds them before the first
    call); ``"interpret"`` is the reference interpreter.  ``cache=False`` keeps generated code out of the disk
    cache.  ``parallel``: None picks ``prange`` loops for large kernels, True/False forces it.  ``anomaly``:
    checks inside the generated code follow ``detect_anomaly`` (part of the cache key).  ``recompile_limit``
    (default ``RECOMPILE_LIMIT`` = 8, as ``torch._dynamo.config.recompile_limit``): past that many traces, new
    signatures run eagerly with one warning naming the function and what changed.

    torch.compile's arguments are accepted, so scripts run unchanged: ``backend="inductor"`` (or
    ``"cudagraphs"``) is the default backend and ``"eager"``/``"aot_eager"`` the interpreter; ``mode``
    ("default", "reduce-overhead", "max-autotune", ...) and ``options`` are checked as torch checks them and
    change nothing; ``disable=True`` returns the function itself.  ``f.stats["trace_reasons"]`` counts traces
    by why they ran; ``JITGRAD_LOG=recompiles`` prints one line per trace naming what changed.

    ``dynamic`` (torch's): by default, argument sizes that change become symbols and one trace serves every size
    (0 and 1 specialised, size decisions guarded per call: ``jit/symbolic_entries.py``); ``True``: every dim
    symbolic from the first call; ``False``: a trace per shape.

    Data-dependent sizes (``x[mask]``, ``nonzero``, ``masked_select``, ``where(cond)``) are bounded by the mask's
    size and known when the code runs: one trace serves every mask, a masked loss, ``y[mask] = v`` and their
    gradients included; a Python decision on one (``if x[m].shape[0] > 0``) or an op needing its value (a slice
    along it, a sort) raises ``DataDependentSizeError`` naming the line (``ir/passes/bounded_sizes.py``).

    Every Python value the function reads (closure and global scalars, attributes of the objects and modules it
    reaches, an int used in ``reshape``) is guarded: a change retraces.  A float that changes (an argument, or
    a guarded value) becomes a graph input after its first change, so it does not retrace again.

    >>> import jitgrad as jg
    >>> w = jg.tensor([1., 2.], requires_grad=True)
    >>> @jg.compile
    ... def step(x):
    ...     loss = (x * w).sum()
    ...     loss.backward()
    ...     with jg.no_grad():
    ...         w.sub_(0.1 * w.grad)
    ...         w.grad = None
    ...     return loss.detach()
    >>> step(jg.tensor([1., 1.]))
    tensor(3.)
    >>> w
    tensor([0.9000, 1.9000], requires_grad=True)
    """
    backend = torch_options(backend, mode, options)

    def wrap(f):
        if disable:
            return f
        from .compiled_module import compile_module, is_module
        if is_module(f):     # torch.compile(model): a Module back (torch's OptimizedModule), see compiled_module.py
            return compile_module(f, wrap)
        return CompiledFunction(f, device=device, anomaly=anomaly, cache=cache, parallel=parallel, backend=backend,
                                background=background, fullgraph=fullgraph, recompile_limit=recompile_limit,
                                dynamic=dynamic)
    if fn is not None:
        return wrap(fn)
    return wrap


__all__ = ["compile", "CompiledFunction", "DataDependentSizeError", "TraceError", "TracedValueError"]
