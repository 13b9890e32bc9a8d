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
- The entry keeps the symbolic graph as a template; each distinct tuple of sizes gets an instance: the graph
  with its symbols replaced by the sizes, run through the passes and codegen as any static trace (kernels are
  keyed by structure, so an instance's kernels are already built; its entry and layout are per instance).
"""
from __future__ import annotations

import contextlib
import copy
import weakref

from ..ir.graph import Graph, Lit, Var
from ..ir.ops import Aval
from ..ir import symbolic
from ..ir.symbolic import ShapeEnv, concretize, has_symbols

MAX_INSTANCES = 256     # concrete instances kept per symbolic entry (the oldest go first)


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
    """The concrete entry of the symbolic entry ``e`` for these arguments' sizes, built on first use; None when
    a guard of the trace fails for them (the call misses).  Sizes seen before skip the guards (they depend on
    the sizes alone)."""
    k = tuple([leaves[i]._data.shape[d] for _, i, d in e.sym_sources])
    inst = e.instances.get(k)
    if inst is not None:
        return inst
    values = {name: v for (name, _, _), v in zip(e.sym_sources, k)}
    if not e.shape_env.holds(values):
        return None
    if len(e.instances) >= MAX_INSTANCES:
        e.instances.pop(next(iter(e.instances)))
    inst = copy.copy(e)
    inst.instances = None
    inst.shape_env = None
    inst.code_ready, inst.direct, inst.slow_times = False, None, {}
    cf._build(inst, instantiate(e.raw_graph, values), e.out_diff)
    e.instances[k] = inst
    cf.stats["shape_instances"] = cf.stats.get("shape_instances", 0) + 1
    return inst


def instantiate(g: Graph, values: dict) -> Graph:
    """The graph ``g`` with every symbol replaced by its value in ``values`` (shapes, params, literals)."""
    new = {}

    def var(v):
        if type(v) is Lit:
            val = v.value
            if type(val) is symbolic.SymInt or type(val) is symbolic.SymFloat:
                val = concretize(val, values)
            return Lit(val, aval(v.aval))
        w = new.get(v)
        if w is None:
            w = new[v] = Var(aval(v.aval))
        return w

    def aval(a):
        return Aval(concretize(a.shape, values), a.dtype, a.weak) if has_symbols(a.shape) else a

    ins = [var(v) for v in g.inputs]
    eqns = []
    for e in g.eqns:
        params = concretize(e.params, values) if has_symbols(e.params) else e.params
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


__all__ = ["MAX_INSTANCES", "active", "instance", "instantiate", "mark", "mark_on_miss", "retry_static", "shapeless", "symbolic_key",
           "trace_shapes"]
