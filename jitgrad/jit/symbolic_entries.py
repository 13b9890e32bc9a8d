"""Compile once for every shape: which dims of a compiled function's tensor arguments are symbolic, the trace
that holds them as symbols (``ir/symbolic.py``), and its instances per call's sizes.

- Which dims: torch's automatic dynamic shapes.  A call that misses only because some argument sizes differ
  from a cached signature (same structure, ranks, dtypes, modes) marks those dims dynamic for that structure;
  ``jitgrad.compile(dynamic=True)`` marks every dim from the first call, ``dynamic=False`` none, and
  ``jitgrad._dynamo.mark_dynamic(t, dim)`` marks one (read at a miss; ``mark_static`` keeps one out).  As torch does, a size of 0 or 1 is
  never symbolic: it stays in the key and gets a trace of its own (broadcasting decides on it).
- The key of a structure with dynamic dims holds ``None`` for them, so every size finds the one entry.
- The trace runs with those dims as :class:`~jitgrad.ir.symbolic.SymInt`; what it decided on sizes is in its
  ``ShapeEnv``'s guards, checked per call (a call that breaks one misses and retraces).
- The entry keeps the symbolic graph as a template; each distinct tuple of sizes gets an instance.  The first
  is concrete: the graph with its symbols replaced by the sizes, run through the passes and codegen as any
  static trace (and the build policy: eager or interpreted calls while its kernels build).  At the next new
  tuple the template is lowered once for every size (``Lowered``): the passes, the fusion plan and the layout
  run on the symbolic graph, every decision they make on a size recorded as a guard of the lowering, and the
  kernels and the C entry are those the concrete instance built (structure only).  Each later tuple whose
  sizes keep the lowering's guards is *bound* to it (``SizedEntry``, ``codegen/program/sized.py``): its tables
  computed from the sizes by a precomputed plan, the workspace shared and grown to the largest size, outputs
  pooled by capacity; no pass, no layout, no entry build.  A tuple that breaks a lowering's guards is lowered
  again for its own sizes (up to ``MAX_LOWERINGS``); after that, and for entries that cannot be bound (outputs
  that need an autograd node, a Python driver, collectives), tuples get concrete instances, as before.
- Background builds: while a lowering's code builds, new tuples run the user's function eagerly.  So that they
  wait for as short a chain of builds as ``background=False``'s, the template is lowered while the first
  instance's code still builds (not at the first call after it), and at its first tuple (no concrete instance)
  while another trace of the function still builds; the build thread makes the ``SizedProgram`` once the code
  is ready (``Lowered._prepare``), so it is no new-size call's work.
"""
from __future__ import annotations

import contextlib
import copy
import threading
import time
import weakref

import numpy as np

from ..ir.graph import Graph, Lit, Var
from ..ir.ops import Aval
from ..ir import symbolic
from ..ir.symbolic import ShapeEnv, concretize, has_symbols, rehint
from ..runtime.profiler_state import STATE as _PROF
from . import build_policy
from .trace_entries import _Entry, copied_outputs

MAX_INSTANCES = 256     # concrete instances kept per symbolic entry (the oldest go first)
MAX_LOWERINGS = 4       # lowerings per symbolic entry, each for the sizes where its decisions hold


def shapeless(key):
    """A signature key without its tensors' sizes (ranks kept)."""
    return (key[0], tuple((len(s[0]),) + s[1:] for s in key[1]), key[2], key[3])


def symbolic_key(dyn_dims, key):
    """``key`` with the sizes of dynamic dims (``dyn_dims``: shapeless key -> {(leaf, dim)}) as None; sizes 0
    and 1 stay (specialised, as torch)."""
    dims = dyn_dims.get(shapeless(key))
    if not dims:
        return key
    sig = list(key[1])
    for i, d in dims:
        s = sig[i]
        if s[0][d] not in (0, 1):
            shape = list(s[0])
            shape[d] = None
            sig[i] = (tuple(shape),) + s[1:]
    return (key[0], tuple(sig), key[2], key[3])


def mark_on_miss(cf, key, leaves) -> bool:
    """A miss: with automatic (or forced) dynamic shapes, mark the dims in which this call differs from a cached
    signature of the same structure (every dim with ``dynamic=True``; those ``mark_dynamic`` named).  True when
    that changed which dims are dynamic (the call is keyed again)."""
    if cf.dynamic is False:
        return False
    base = shapeless(key)
    if base in cf._dyn_dims and not cf._dyn_dims[base]:
        return False        # pinned static (pin_static)
    have = cf._dyn_dims.get(base, frozenset())
    new = set()
    if _MARKS:
        for i, t in enumerate(leaves):
            m = _MARKS.get(id(t))
            if m is not None and m[0]() is t:
                new |= {(i, d) for d in m[1]}
    if cf.dynamic:
        new |= {(i, d) for i, s in enumerate(key[1]) for d in range(len(s[0]))}
    else:
        # every dim of an argument whose shape changed (torch marks only the dims that changed: a batch size
        # changing first, a length later, would cost a trace each)
        for k in cf._cache:
            if k is not key and k[1] != key[1] and shapeless(k) == base:
                for i, (a, b) in enumerate(zip(k[1], key[1])):
                    if a[0] != b[0]:
                        new |= {(i, d) for d in range(len(b[0]))}
    new = {(i, d) for i, d in new if d < len(key[1][i][0]) and key[1][i][0][d] is not None
           and key[1][i][0][d] not in (0, 1) and not _static(leaves[i], d)}
    if new <= have:
        return False
    cf._dyn_dims[base] = frozenset(have | new)
    return True


def retry_static(cf, key, exc, leaves, trace):
    """A symbolic trace of ``key`` raised ``exc``: trace again with the call's sizes as constants (``trace(key)``).
    If that works, library code needed plain ints: the structure is traced per shape from now on (the retrace says
    why under ``JITGRAD_LOG=recompiles``).  If it raises too, the error is the call's own (a real shape mismatch):
    it propagates and the dims stay symbolic."""
    cf.stats["traces"] -= 1         # (the failed trace is not counted: the retry is)
    reasons = cf.stats["trace_reasons"]
    reasons[cf._last_reason[0]] -= 1
    if not reasons[cf._last_reason[0]]:
        del reasons[cf._last_reason[0]]
    base = shapeless(key)
    before = cf._dyn_dims.get(base)
    cf._dyn_dims[base] = frozenset()
    first = str(exc).splitlines()[0][:160] if str(exc) else ""
    cf._last_reason = ("static retry", f"a trace with symbolic sizes failed ({type(exc).__name__}: {first}); "
                                       "sizes are constants for these arguments from now on")
    sig = tuple((tuple(leaves[i]._data.shape),) + s[1:] for i, s in enumerate(key[1]))
    try:
        return trace((key[0], sig, key[2], key[3]))
    except Exception:
        if before is None:
            cf._dyn_dims.pop(base, None)
        else:
            cf._dyn_dims[base] = before
        raise


_MARKS: dict = {}       # id(tensor) -> (weakref to it, dims marked dynamic, dims marked static)


def mark(t, index, kind):
    """``jitgrad._dynamo.mark_dynamic`` / ``mark_static``: remember ``t``'s dims (by a weak reference)."""
    dims = range(t.ndim) if index is None else [index] if isinstance(index, int) else list(index)
    dims = {d % t.ndim for d in dims}
    m = _MARKS.get(id(t))
    if m is None or m[0]() is not t:
        m = _MARKS[id(t)] = (weakref.ref(t, lambda _, k=id(t): _MARKS.pop(k, None)), set(), set())
    (m[1] if kind == "dynamic" else m[2]).update(dims)
    (m[2] if kind == "dynamic" else m[1]).difference_update(dims)


def _static(t, d) -> bool:
    m = _MARKS.get(id(t)) if _MARKS else None
    return m is not None and m[0]() is t and d in m[2]


def trace_shapes(key, leaves):
    """-> (ShapeEnv, {id(leaf): symbolic shape}, [(symbol, leaf index, dim)]) for a key with ``None`` dims; (None,
    None, None) for a static key.  A tensor given twice has one set of symbols."""
    sym = [(i, d) for i, s in enumerate(key[1]) for d, n in enumerate(s[0]) if n is None]
    if not sym:
        return None, None, ()
    env = ShapeEnv()
    shapes, sources = {}, []
    for i, d in sym:
        t = leaves[i]
        shape = shapes.get(id(t))
        if shape is None:
            shape = shapes[id(t)] = list(t._data.shape)
        if type(shape[d]) is int:
            shape[d] = env.symbol(shape[d], (i, d))
            sources.append((shape[d].poly[0][0][0], i, d))
    return env, {k: tuple(v) for k, v in shapes.items()}, tuple(sources)


def instance(cf, e, leaves):
    """The concrete entry of the symbolic entry ``e`` for these arguments' sizes, made on first use; None when
    a guard of the trace fails for them (the call misses).  Sizes seen before skip the guards (they depend on
    the sizes alone).  A new tuple of sizes is bound to a lowering of the template whose guards (and the
    trace's) it keeps (``Lowered``: no pass, no layout, no entry build; ``_bound``), else gets a concrete build
    of its own."""
    k = tuple([leaves[i]._data.shape[d] for _, i, d in e.sym_sources])
    inst = e.instances.get(k)
    if inst is not None:
        return inst
    inst = _bound(cf, e, k, None)       # (the trace's guards are checked with the lowering's, natively)
    if inst is None:
        values = {name: v for (name, _, _), v in zip(e.sym_sources, k)}
        if not e.shape_env.holds(values):
            return None
        inst = _bound(cf, e, k, values)
        if inst is BUILDING and build_policy.release_held(cf.stats["calls"]):
            for low in e.lowered:       # (the test hook's call past the held ones: it waits for the code)
                low.cg.wait(optimised=False)
            inst = _bound(cf, e, k, values)
        if inst is BUILDING:
            return _eager_while_building(cf, e)
        if inst is None:
            inst = _concrete(cf, e, values)
            cf.stats["shape_instances"] += 1
    if len(e.instances) >= MAX_INSTANCES:
        e.instances.pop(next(iter(e.instances)))
    e.instances[k] = inst
    return inst


BUILDING = object()     # _bound's answer while the lowering these sizes need is being built


def _eager_while_building(cf, e):
    """The entry serving a call whose sizes wait for a lowering's code (kept nowhere: the next call with these
    sizes binds once it is built).  It runs the user's function eagerly, as the build policy serves a static
    trace's first calls: a concrete build of these sizes would run every pass and the layout for one call."""
    inst = e.__dict__.get("_while_building")
    if inst is None:
        inst = copy.copy(e)
        inst.instances = inst.shape_env = inst.lowered = None
        inst.eager = True
        e.__dict__["_while_building"] = inst
    cf.stats["eager_calls"] += 1
    cf.stats["last_path"] = "eager"
    return inst


def _concrete(cf, e, values):
    """A concrete entry of template ``e`` at ``values``: its graph with the sizes put in, through the passes and
    codegen as any static trace (kernels are keyed by structure, so they are built already)."""
    inst = copy.copy(e)
    inst.instances = inst.shape_env = inst.lowered = None
    inst.code_ready, inst.direct, inst.slow_times = False, None, {}
    cf._build(inst, instantiate(e.raw_graph, values), e.out_diff)
    return inst


class Lowered:
    """A template lowered once for every size: its graph after the passes (symbolic shapes), the
    ``CompiledGraph`` of that graph laid out with symbolic sizes (``graph_code.sized_graph``), and once its code
    is ready, the ``codegen/program/sized.SizedProgram`` that binds it per tuple of sizes."""

    def __init__(self, graph, cg, guards, copy_outs, wrap, lifted, compiled_result, names, trace_guards, stats):
        self.graph, self.cg, self.guards, self.copy_outs, self.wrap = graph, cg, guards, copy_outs, wrap
        self.names, self.trace_guards = names, trace_guards
        self.lifted = lifted        # (aval, SymInt | SymFloat): the trailing inputs lift_literals made
        self.compiled_result = compiled_result      # graph_code's (imported by _lower, kept: no import per binding)
        self.sized = None
        self._making = threading.Lock()
        # what every entry bound to it has of its own (``_bound``), and the maker of their calls
        self.entry_fields = {"instances": None, "shape_env": None, "lowered": None, "copy_outs": copy_outs,
                             "code_ready": True}
        self.direct_call = _direct_calls(self, stats)
        if cg.run is None and cg.error is None:
            # a background build: the thread that builds the code makes the SizedProgram too (its size plan, the
            # fill program, the fill function's first link), which would otherwise fall to the first call that
            # binds after the build, a call of new sizes; background=False makes it in the lowering's call
            cg.on_ready.append(self._prepare)

    def ready(self):
        """The SizedProgram once the code is built (None while it builds or when its build failed; the build is
        started once)."""
        if self.sized is None:
            cg = self.cg
            if cg.run is None:
                if cg.pending:
                    cg.start()
                return None
            return self._make()
        return self.sized

    def _make(self):
        with self._making:      # (once: the build thread's ``_prepare`` and a call may ask at the same time)
            if self.sized is None:
                from ..codegen.program.sized import SizedProgram
                self.sized = SizedProgram(self.cg, self.guards, self.names, self.trace_guards)
        return self.sized

    def _prepare(self, cg):
        """``cg.on_ready``'s callback (on the build thread): make the SizedProgram there.  Never raises: an error
        would fail the build; the next call's ``ready`` makes it instead (and raises in the caller's thread)."""
        try:
            self._make()
        except Exception:   # noqa: BLE001 - see the docstring
            pass

    def building(self) -> bool:
        """Whether its code is still being built (neither ready nor failed)."""
        return self.sized is None and self.cg.run is None and self.cg.error is None


def _may_lower(cf, e):
    """Lowering once for every size is for entries whose calls take the compiled C entry directly: the numba
    backend on the CPU and no output that needs an autograd node (those run through GraphFunction's transpose).
    True when an instance's code is built, or is being built (the lowering's build is queued behind it on the
    build thread, which links the kernels they share first: waiting for it would add the lowering's passes and
    a call to the calls that run eagerly meanwhile); True too for the first tuple of sizes while another trace
    of the function is still building (background builds on an empty cache: a concrete instance would only
    queue a build of its own between that one and the lowering's), else False."""
    if cf.backend != "numba" or cf.device is not None or any(e.out_diff) or e.eager:
        return False
    insts = list(e.instances.values())
    if any(i.code_ready and i.direct for i in insts):
        return True
    for i in insts:
        cg = i.__dict__.get("building")
        if cg is not None and cg.error is None:
            return True
    return not insts and _other_builds_pending(cf)


def drop_static_builds(cf) -> None:
    """Dims of ``cf`` just turned symbolic: its traces whose keys held those sizes are never looked up again (a call's
    key has ``None`` there now), so their background builds not done yet are dropped (``CompiledGraph.drop``):
    they would delay the symbolic trace's lowering on the build thread and compete with the calls for the cores."""
    for k, entries in cf._cache.items():
        if symbolic_key(cf._dyn_dims, k) != k:
            for e in entries:
                cg = e.__dict__.get("building")
                if cg is not None:
                    cg.drop()
                    cf.stats["builds_dropped"] = cf.stats.get("builds_dropped", 0) + (cg.run is None)


def unreachable(cf, key) -> bool:
    """Whether no call can reach the entries cached under ``key`` any more (its sizes are symbolic now)."""
    return bool(cf._dyn_dims) and symbolic_key(cf._dyn_dims, key) != key


def wait(e, timeout=None) -> bool:
    """Wait for the builds of the symbolic entry ``e``'s concrete instances and lowerings (``CompiledFunction.wait``);
    True when each produced code.  (A bound entry's concrete graph, made only on need, is not waited for.)"""
    ok = True
    for inst in list((e.instances or {}).values()):
        gf = inst.__dict__.get("gf")
        if gf is not None:
            ok = gf.wait(timeout) and ok
    for low in e.lowered or ():
        built = low.cg.wait(timeout)
        ok = built and low.ready() is not None and ok      # (its SizedProgram made too: the build thread's last step)
    return ok


def _other_builds_pending(cf) -> bool:
    """Whether a trace of ``cf`` is waiting for its code (a background build queued or running)."""
    for entries in cf._cache.values():
        for o in entries:
            cg = o.__dict__.get("building")
            if cg is not None and cg.run is None and cg.error is None:
                return True
    return False


def _lower(cf, e, values):
    """``e``'s Lowered at the sizes ``values`` (its decisions taken for them), or False when its program cannot be
    bound per sizes (a Python driver, collectives)."""
    from .graph_code import compiled_result, sized_graph
    from ..ir.passes import run_pipeline
    t0 = time.perf_counter()
    name = getattr(cf.fn, "__name__", "compiled")
    env = ShapeEnv()
    env.hints, env.sources = dict(values), dict(e.shape_env.sources)
    try:
        graph, lifted = lift_literals(instantiate(e.raw_graph, values, rehint))
        with active(env):
            graph = run_pipeline(graph, name)
        if build_policy.collectives(graph, name) is not None:
            return False
        writes = tuple((oi, ci) for ci, oi in e.writes)
        cg = sized_graph(graph, env, writes, cf.parallel, cf.use_cache, cf.background)
    except Exception:       # noqa: BLE001 - the concrete builds serve every size, as before
        return False
    finally:
        cf.stats["compile_seconds"] += time.perf_counter() - t0
    build_policy.attach(cg, cf.stats)       # (its build counted as the concrete builds are)
    if not cg.nopython or cg.error is not None:
        return False
    cf.stats["shape_lowerings"] += 1
    from .graph_function import GraphFunction
    wrap = GraphFunction(graph, e.out_diff, array_outs={oi for _, oi in e.writes})._wrap
    return Lowered(graph, cg, env.guards, copied_outputs(graph, e.writes, e.same_outs), wrap, lifted,
                   compiled_result, tuple(n for n, _, _ in e.sym_sources), tuple(e.shape_env.guards), cf.stats)


def lift_literals(g: Graph):
    """``(graph, lifted)``: ``g`` with each scalar literal whose value depends on the sizes (a mean's ``1 / n``,
    ``T - 1`` in arithmetic) made a graph input appended after the others, and their ``(aval, value)``: a kernel
    would bake a literal in (a guard equal to one size), an input is read per call (``_bound`` passes each
    binding's values)."""
    lifted, sub = [], {}

    def var(v):
        if type(v) is Lit and (type(v.value) is symbolic.SymInt or type(v.value) is symbolic.SymFloat):
            w = sub.get(id(v))
            if w is None:
                w = sub[id(v)] = Var(v.aval)
                lifted.append((w, v.value))
            return w
        return v
    eqns = [e.replace(ins=[var(x) for x in e.ins]) if any(type(x) is Lit for x in e.ins) else e for e in g.eqns]
    outs = [var(v) for v in g.outputs]
    if not lifted:
        return g, ()
    return Graph(list(g.inputs) + [w for w, _ in lifted], eqns, outs), tuple((w.aval, x) for w, x in lifted)


def _bound(cf, e, k, values):
    """An entry of template ``e`` at the sizes ``k`` bound to a lowering whose guards (and the trace's) hold
    there.  With ``values`` (``k`` by symbol name, the trace's guards known to hold), a tuple no lowering takes
    is lowered again for its own sizes (up to ``MAX_LOWERINGS``: sizes on both sides of a decision, a view that
    is contiguous at one size; whether a loop takes the worker pool is no such decision, its kernel tests it per
    call), and ``BUILDING`` is the answer while that lowering's code builds.
    None when there is none (not possible, or not yet: ``values`` is None)."""
    lows = e.lowered
    if lows is False:
        return None
    if lows is None:
        may = values is not None and _may_lower(cf, e)
        if may is not True:
            return may or None
    lows = e.lowered = lows or []
    for n, low in enumerate(lows):        # (the one that bound last first: nearby sizes keep its decisions)
        sized = low.sized or low.ready()
        run = None if sized is None else sized.bind(k)
        if run is not None:
            if n:
                lows.insert(0, lows.pop(n))
            break
    else:
        if values is None:
            return None
        if any(low.building() for low in lows):
            return BUILDING
        if len(lows) >= MAX_LOWERINGS:
            return None
        low = _lower(cf, e, values)
        if low is False:
            if not lows:
                e.lowered = False
            return None
        lows.insert(0, low)
        sized = low.ready()
        if sized is None:
            return BUILDING if low.building() else None
        run = sized.bind(k)
        if run is None:
            return None
    extra = ()
    if low.lifted:
        values = values or dict(zip(low.names, k))
        extra = tuple([np.asarray(concretize(x, values), dtype=aval.dtype.np) for aval, x in low.lifted])
    inst = SizedEntry.__new__(SizedEntry)
    d = inst.__dict__
    d.update(e.__dict__)
    del d["graph"], d["gf"]
    d.update(low.entry_fields)
    d["slow_times"], d["concrete_of"] = {}, (cf, e, k)
    d["direct"] = low.direct_call(inst, run, extra)
    cf.stats["shape_bindings"] += 1
    return inst


class SizedEntry(_Entry):
    """An entry bound to its template's lowering (``_bound``).  Its calls run the bound C entry; what needs a
    graph of its own (introspection, a call the entry cannot take: a profiler, inputs that are not C-contiguous)
    uses a concrete entry at the same sizes, built on first need."""

    def __getattr__(self, name):
        if name in ("graph", "gf"):
            return getattr(self.concrete(), name)
        raise AttributeError(name)

    def concrete(self):
        c = self.__dict__.get("_concrete")
        if c is None:
            cf, e, k = self.concrete_of
            values = {name: v for (name, _, _), v in zip(e.sym_sources, k)}
            c = self.__dict__["_concrete"] = _concrete(cf, e, values)
        return c


def _direct_calls(low, stats):
    """``make(inst, run, extra) -> call``: the call of an entry bound to the lowering ``low`` on the graph's input
    tensors (as ``GraphFunction.direct``'s), made once per lowering; ``run``: the binding's caller; ``extra``: the
    arrays of the lifted literals at its sizes, passed after the inputs."""
    compiled_result = low.compiled_result
    prof, nd, cg, wrap = _PROF, np.ndarray, low.cg, low.wrap
    bound_copies = set(low.copy_outs)

    def make(inst, run, extra):
        def slow(inputs):
            c = inst.concrete()
            outs = c.gf(inputs)
            for k in c.copy_outs:       # the outputs its own graph hands back as inputs' buffers
                if k not in bound_copies:
                    outs[k]._data = outs[k]._data.copy()
            return outs

        def call(inputs):
            if prof.active is not None:
                return slow(inputs)
            arrays = [t._data for t in inputs]
            for a in arrays:
                if type(a) is not nd:
                    return slow(inputs)
            try:
                res = run(*arrays, *extra) if extra else run(*arrays)
                if res is None:
                    return slow(inputs)
                return wrap(compiled_result(cg, res, stats))
            except (IndexError, RuntimeError):
                # an index out of range, a zero divisor, an anomaly check: the step wrote no state, and its error
                # names the symbolic graph's shapes; the concrete graph raises eager mode's error with this call's
                return slow(inputs)
        return call
    return make


def instantiate(g: Graph, values: dict, put=concretize) -> Graph:
    """The graph ``g`` with every symbol replaced by its value in ``values`` (shapes, params, literals); with
    ``put=rehint``, kept symbolic and hinted at those values."""
    new = {}

    def var(v):
        if type(v) is Lit:
            val = v.value
            if type(val) is symbolic.SymInt or type(val) is symbolic.SymFloat:
                val = put(val, values)
            return Lit(val, aval(v.aval))
        w = new.get(v)
        if w is None:
            w = new[v] = Var(aval(v.aval))
        return w

    def aval(a):
        return Aval(put(a.shape, values), a.dtype, a.weak) if has_symbols(a.shape) else a

    ins = [var(v) for v in g.inputs]
    eqns = []
    for e in g.eqns:
        params = put(e.params, values) if has_symbols(e.params) else e.params
        ne = e.replace(ins=[var(v) for v in e.ins], outs=[var(v) for v in e.outs], params=params)
        eqns.append(ne)
    return Graph(ins, eqns, [var(v) for v in g.outputs])


@contextlib.contextmanager
def active(env):
    """While a trace runs: its decisions on sizes are recorded into ``env`` (None: a static trace)."""
    if env is None:
        yield
        return
    prev = symbolic.ACTIVE.env
    symbolic.ACTIVE.env = env
    try:
        yield
    finally:
        symbolic.ACTIVE.env = prev


__all__ = ["MAX_INSTANCES", "MAX_LOWERINGS", "Lowered", "SizedEntry", "active", "instance", "instantiate",
           "lift_literals", "mark", "mark_on_miss", "drop_static_builds", "unreachable", "retry_static", "shapeless",
           "symbolic_key", "trace_shapes", "wait"]
