"""Graph -> Python driver + fused Numba loop kernels (the CPU backend).

Each fusion group (``ir/passes/fuse.py``) becomes one ``@njit`` loop nest with static bounds: broadcast inputs
are read through index arithmetic, intermediate values live in registers, the scalar bodies come from the
OpDefs, and math functions resolve to ``mathlib`` (vectorisable, precision-specific: float32 stays float32).
Matmul calls BLAS (``np.matmul``); other ops call their NumPy impl.  The driver allocates the buffers and
calls the steps in order.  Fastmath never includes ``nnan``/``ninf``, so NaN/inf propagate (anomaly mode
relies on it).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np

from ..ir.graph import Graph, Lit, Var
from ..ir.interpret import ScopeTracker, run_eqn
from ..ir.passes.fuse import Group, plan as fusion_plan
from .loops import (PARALLEL_MIN, all_tensor_spec, basic_index_src, basic_spec, gen_gather, gen_group,  # noqa: F401
                    gen_scatter, math_import)

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


_REPORT_SOURCE = """@njit(cache=CACHE_ENABLED)
def _report(err, cid, nans):
    if cid < err[0]:
        err[0] = cid
        err[1] = 1 if nans > 0 else 0"""


class CodegenWarning(UserWarning):
    """Numba code generation failed for a graph; it runs on the reference interpreter instead."""


# run in a child process to fill the cache for a module (argv: key, path of the cached source)
_CHILD = ("import sys; from jitgrad.codegen import cache; key, path = sys.argv[1], sys.argv[2]; "
          "src = open(path).read(); cache.load_module(key, src, 'graph').__warmup__()")


_QUEUE = None     # background builds, one at a time (one compiling child process, never a swarm)


def _background(cg):
    global _QUEUE
    import queue
    if _QUEUE is None:
        _QUEUE = queue.Queue()

        def worker():
            while True:
                job = _QUEUE.get()
                try:
                    job._build(True)
                finally:
                    _QUEUE.task_done()
        threading.Thread(target=worker, daemon=True, name="jitgrad-compile").start()
    _QUEUE.put(cg)


def _warmup_source(calls) -> str:
    """A plain function calling every compiled function once with dummy arguments of the exact types, so
    that loading the module compiles (or loads from Numba's cache) everything before real calls arrive."""
    lines = ["def __warmup__():"]
    for name, args in calls:
        parts = []
        for a in args:
            if isinstance(a, tuple):
                shape, dtype = a
                parts.append(f"np.zeros({tuple(shape)!r}, np.{'bool_' if dtype == 'bool' else dtype})")
            else:
                parts.append(str(a))
        lines.append(f"    {name}({', '.join(parts)})")
    lines.append("    return None")
    return "\n".join(lines)
class _BufferPool:
    """Buffer reuse in the driver: an intermediate's buffer (with every view of it) is free once its last reader
    has run and it is not a graph output; a later step needing the same shape and dtype takes it instead of a
    fresh ``np.empty``."""

    def __init__(self, plan, graph, check_ids):
        self.last = {}
        for n, step in enumerate(plan.steps):
            ins = step.inputs if isinstance(step, Group) else step.ins
            for v in ins:
                if isinstance(v, Var):
                    self.last[v] = n
            for e in (step.all_eqns if isinstance(step, Group) else [step]):
                if e in check_ids:          # checked at the start of the next step
                    for o in e.outs:
                        self.last[o] = max(self.last.get(o, n), n + 1)
        self.keep = {v for v in graph.outputs if isinstance(v, Var)} | set(graph.inputs)
        self.root = {}        # var -> the var that owns its buffer
        self.members = {}     # owner -> vars sharing its buffer
        self.owned = {}       # owner -> (buffer name, key)
        self.free = {}        # key -> buffer names free for reuse
        self.n_reused = 0

    def alloc(self, v, name, shape, dtype_src) -> str:
        key = (tuple(shape), dtype_src)
        self.root[v] = v
        self.members[v] = [v]
        self.owned[v] = (name, key)
        names = self.free.get(key)
        if names:
            self.n_reused += 1
            return names.pop()
        return f"np.empty({tuple(shape)!r}, {dtype_src})"

    def view(self, v, of):
        r = self.root.get(of, of)
        self.root[v] = r
        self.members.setdefault(r, [r]).append(v)

    def pin(self, v):
        """``v``'s buffer is never reused (an op run through its NumPy impl may return views of its inputs)."""
        self.keep.add(self.root.get(v, v))

    def release_after(self, n):
        for owner, (name, key) in list(self.owned.items()):
            ms = self.members[owner]
            if all(self.last.get(m, -1) <= n and m not in self.keep for m in ms):
                del self.owned[owner]
                self.free.setdefault(key, []).append(name)


class CompiledGraph:
    """A graph compiled for the CPU: ``run(*arrays) -> sequence of arrays``; ``source`` is what was generated.

    When every step has a nopython form the driver itself is ``@njit`` (one dispatch per call); otherwise a
    Python driver calls the kernels and the NumPy impls of the remaining ops.
    """

    def __init__(self, graph: Graph, writes=(), background=None, parallel=None, phase=None, disk_cache=True):
        self.graph = graph
        self.writes = tuple(writes)
        self.plan = fusion_plan(graph)
        consts = {}
        # anomaly mode: the values that must be finite, by id (the err slot reports the smallest failing id)
        self.checks = [e for e in graph.eqns if e.check is not None and e.outs[0].aval.dtype.is_floating_point]
        self.check_ids = {e: i for i, e in enumerate(self.checks)}
        kernels = [gen_group(g, f"fused_{g.index}", consts, parallel, self.check_ids) for g in self.plan.groups]
        extra = []
        for n, step in enumerate(self.plan.steps):
            if isinstance(step, Group):
                continue
            if step.op.name == "getitem" and all_tensor_spec(step.params["spec"], step.ins[0].aval.ndim):
                extra.append(gen_gather(step, f"gather_{n}"))
            elif step.op.name == "index_put" and all_tensor_spec(step.params["spec"], step.ins[0].aval.ndim):
                extra.append(gen_scatter(step, f"scatter_{n}"))
        self.kernels = kernels
        self.nopython = all(self._nopython_step(s) for s in self.plan.steps)
        fm = "{" + ", ".join(repr(f) for f in sorted(FASTMATH)) + "}"
        body = []
        # with an njit driver every kernel is inlined into it (Numba IR inlining): one compilation unit per graph
        # instead of one per kernel, which is most of the compile time of a many-kernel graph
        inl = ", inline='always'" if self.nopython else ""
        for k in kernels:
            body.append(f"@njit(cache=CACHE_ENABLED, fastmath={fm}, parallel={k.parallel}, error_model='numpy'{inl})\n"
                        + k.source)
        for src in extra:
            body.append(f"@njit(cache=CACHE_ENABLED, error_model='numpy'{inl})\n" + src)
        if self.checks:
            body.append(_REPORT_SOURCE)
        self.driver_source, self._dns, self.lits = self._driver({k.name: k for k in kernels})
        if self.nopython:
            par = any(k.parallel for k in kernels)
            body.append(f"@njit(cache=CACHE_ENABLED, fastmath={fm}, parallel={par}, error_model='numpy')\n"
                        + self.driver_source)
        body.append(_warmup_source(self.warm_calls))
        text = "\n\n\n".join(body)
        used = sorted(set(m.group(0)[:-1] for m in re.finditer(r"\b[a-z0-9]+_(?:f32|f64|i64)\(", text)))
        header = ["# generated by jitgrad.codegen.cpu", "import numpy as np", "from numba import njit, prange",
                  "from numpy import float32, float64, int32, int64"]
        header += [f"from jitgrad.codegen.{math_import(n)} import {n}" for n in used]
        header += [f"{k} = {v}" for k, v in consts.items()]
        self.module_source = "\n".join(header) + "\n\n\n" + text + "\n"
        self.key = None          # the cache key (hashing versions, CPU features) is computed by the build
        self.names = {g.index: g.name for g in self.plan.groups}
        self.run = None          # set once compiled; until then callers use the interpreter
        self._phase = phase      # name -> context manager: profiler events for a synchronous build
        self.disk_cache = disk_cache
        self.error = None
        self.seconds = 0.0
        if background is None:
            background = os.environ.get("JITGRAD_BACKGROUND_COMPILE", "1") != "0"
        # background: the build is queued by ``start()``, which the caller invokes *after* serving the first call
        # on the interpreter, so loading Numba never competes with the first result for the interpreter lock
        self.pending = background
        if not background:
            self._build(False)

    def start(self):
        """Queue the background build (once)."""
        if self.pending:
            self.pending = False
            _background(self)

    def _build(self, background: bool):
        """Load the module and compile (or load from Numba's cache) every function; then publish ``run``.
        A cold cache in the background compiles in a child process, so the caller's thread keeps running."""
        from . import cache
        t0 = time.perf_counter()
        try:
            self.key = cache.cache_key(self.module_source, extra=("cpu", 1))
            path = cache.entry_path(self.key) if self.disk_cache else None
            if background and path is not None and not path.exists():
                cache.load_module(self.key, self.module_source, "graph", self.disk_cache)     # writes the entry
                subprocess.run([sys.executable, "-c", _CHILD, self.key, str(path)], check=True,
                               capture_output=True, timeout=600)
            hit = path is not None and path.exists()
            with (self._phase("compile/cache_hit" if hit else "compile/numba")
                  if self._phase is not None and not background else contextlib.nullcontext()):
                mod = cache.load_module(self.key, self.module_source, "graph", self.disk_cache)
                mod.__warmup__()
            self.module = mod
            if self.nopython:
                run, lits = mod.run, tuple(self.lits)
                run_fn = (lambda *a: run(*a, *lits)) if lits else run
            else:
                dns = self._dns
                for k in self.kernels:
                    dns[k.name] = getattr(mod, k.name)
                for n in dns.get("__steps__", ()):
                    dns[n] = getattr(mod, n)
                if self.checks:
                    dns["_report"] = mod._report
                exec(compile(self.driver_source, f"<jitgrad driver {self.key[:8]}>", "exec"), dns)
                run_fn = dns["run"]
            self.seconds = time.perf_counter() - t0
            self.run = run_fn
        except BaseException as e:  # noqa: BLE001 - any codegen failure falls back to the interpreter, loudly
            self.fail(e)

    def fail(self, e):
        """Give up on compiled code for this graph: warn once, and let callers use the interpreter."""
        detail = e.stderr.decode(errors="replace")[-2000:] if isinstance(e, subprocess.CalledProcessError) \
            else f"{type(e).__name__}: {e}"
        self.error = detail
        self.run = None
        warnings.warn(f"jitgrad: Numba code generation failed for a graph ({', '.join(self.names.values())[:200]});"
                      f" running it on the reference interpreter instead.\n{detail}", CodegenWarning, stacklevel=3)

    def profiled_run(self, prof):
        """The instrumented variant (one profiler event per kernel and BLAS call), built on first use."""
        if getattr(self, "_profiled", None) is None:
            src, dns, lits = self._driver({k.name: k for k in self.kernels}, profile=True)
            for k in self.kernels:
                dns[k.name] = getattr(self.module, k.name)
            for n in dns.get("__steps__", ()):
                dns[n] = getattr(self.module, n)
            if self.checks:
                dns["_report"] = self.module._report
            exec(compile(src, f"<jitgrad profiled driver {self.key[:8]}>", "exec"), dns)
            self._profiled = dns
        dns = self._profiled
        dns["_P"] = prof
        dns["_SC"] = ScopeTracker(prof)
        return dns["run"]

    def wait(self, timeout=None) -> bool:
        """Block until the background build finished (True if compiled code is available)."""
        t0 = time.perf_counter()
        while self.run is None and self.error is None:
            if timeout is not None and time.perf_counter() - t0 > timeout:
                break
            time.sleep(0.005)
        return self.run is not None

    @staticmethod
    def _nopython_step(step) -> bool:
        if isinstance(step, Group):
            return True
        name, ins = step.op.name, step.ins
        if name == "matmul":
            return all(v.aval.ndim <= 2 for v in ins) and ins[0].aval.dtype.is_floating_point
        if name in ("reshape", "permute"):
            return True
        if name in ("getitem", "index_put"):
            spec = step.params["spec"]
            return all_tensor_spec(spec, ins[0].aval.ndim) or (basic_spec(spec) and name == "getitem")
        return False

    @property
    def source(self) -> str:
        src = "# fusion plan\n# " + str(self.plan).replace("\n", "\n# ") + "\n\n" + self.module_source
        if not self.nopython:
            src += "\n\n# Python driver (some steps have no nopython form)\n" + self.driver_source
        return src

    def _driver(self, kernels, profile=False):
        """The driver's source; with the njit driver, literal arrays become trailing parameters.  ``profile``:
        a Python driver timing each step as a profiler event (``_P.range``), built only while profiling."""
        g = self.graph
        names = {}
        nopy = self.nopython and not profile
        dns = {"np": np, "_run_eqn": run_eqn, "__steps__": []}
        lits = []
        warm = []                       # (kernel, [aval or scalar...]): typed dummy calls that compile it
        kernel_avals = {}               # kernel -> [(shape, dtype name)] of its arguments
        if not profile:
            self.warm_calls, self.kernel_avals = warm, kernel_avals

        def nm(v):
            if isinstance(v, Lit):
                val = v.value if isinstance(v.value, np.ndarray) else np.asarray(v.value, v.aval.dtype.np)
                key = f"L{len(lits)}"
                lits.append(np.array(val, order="C", copy=True))    # keeps 0-d arrays 0-d
                dns[key] = lits[-1]
                return key
            if v not in names:
                names[v] = f"v{len(names)}"
            return names[v]

        def dtype_src(aval):
            return f"np.{aval.dtype.np.name}" if aval.dtype.name != "bool" else "np.bool_"

        lines = [None]
        pending = []     # the previous step's checked output, verified before the next step runs

        def check_after(e, var_name):
            if e in self.check_ids:
                lines.append(f"    if not np.isfinite(np.ravel({var_name})).all():")
                lines.append(f"        _report(err, {self.check_ids[e]}, np.isnan(np.ravel({var_name})).sum())")

        def timed(mark, name, shapes):
            """Profile mode: the step's lines (from ``mark``) run inside one profiler event."""
            if profile:
                body = ["    " + ln for ln in lines[mark:]]
                del lines[mark:]
                lines.append(f"    with _P.range({name!r}, {shapes!r}, 'kernel'):")
                lines.extend(body)

        pool = _BufferPool(self.plan, g, self.check_ids)

        for n, step in enumerate(self.plan.steps):
            while pending:
                check_after(*pending.pop())
            if n:
                pool.release_after(n - 1)
            if profile:     # record_function blocks traced inside the function open/close around their steps
                first = step.all_eqns[0] if isinstance(step, Group) else step
                lines.append(f"    _SC.enter({tuple(first.scope)!r})")
            mark = len(lines)
            if isinstance(step, Group):
                k = kernels[f"fused_{step.index}"]
                outs = []
                for o in k.outputs:
                    shape = o.aval.shape
                    is_red = step.reduce is not None and o is step.reduce.outs[0]
                    if is_red:
                        axes = step.reduce.params["axes"]
                        full = len(axes) == len(step.shape)
                        shape = () if full else tuple(1 if i in axes else d for i, d in enumerate(step.shape))
                    tgt = f"{nm(o)}_k" if is_red else nm(o)
                    lines.append(f"    {tgt} = {pool.alloc(o, tgt, shape, dtype_src(o.aval))}")
                    outs.append(tgt)
                args = [nm(v) for v in k.args]
                if getattr(k, "checked", False):
                    outs.append("err")
                lines.append(f"    {k.name}({', '.join(args + outs)})  # {step.name} {step.lines()}")
                out_avals = []
                for o in k.outputs:
                    shape = o.aval.shape
                    if step.reduce is not None and o is step.reduce.outs[0]:
                        axes = step.reduce.params["axes"]
                        shape = () if len(axes) == len(step.shape) else tuple(
                            1 if i in axes else d for i, d in enumerate(step.shape))
                    out_avals.append((shape, o.aval.dtype.np.name))
                kernel_avals[k.name] = [(v.aval.shape, v.aval.dtype.np.name) for v in k.args] + out_avals
                if getattr(k, "checked", False):
                    kernel_avals[k.name] = kernel_avals[k.name] + [((2,), "int64")]
                warm.append((k.name, kernel_avals[k.name]))
                if step.reduce is not None:
                    o = step.reduce.outs[0]
                    lines.append(f"    {nm(o)} = {nm(o)}_k.reshape({o.aval.shape!r})")
                    pending.append((step.reduce, nm(o)))
                timed(mark, f"{step.name} {step.lines()}".strip(), [list(v.aval.shape) for v in k.args])
                continue
            e = step
            pending.append((e, nm(e.outs[0])))
            if e.op.view and isinstance(e.ins[0], Var):
                pool.view(e.outs[0], e.ins[0])
            out = nm(e.outs[0])
            ins = [nm(v) for v in e.ins]
            name = e.op.name
            if name == "matmul":
                if nopy:   # BLAS wants contiguous operands (a no-op when they already are); vec @ vec -> 0-d array
                    dot = f"np.dot(np.ascontiguousarray({ins[0]}), np.ascontiguousarray({ins[1]}))"
                    lines.append(f"    {out} = np.asarray({dot})" if e.outs[0].aval.ndim == 0 else f"    {out} = {dot}")
                else:
                    lines.append(f"    {out} = np.matmul({ins[0]}, {ins[1]})")
            elif nopy and name == "reshape":
                lines.append(f"    {out} = np.ascontiguousarray({ins[0]}).reshape({e.params['shape']!r})")
            elif nopy and name == "permute":
                lines.append(f"    {out} = np.transpose({ins[0]}, {tuple(e.params['perm'])!r})")
            elif name == "getitem" and all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim):
                dns["__steps__"].append(f"gather_{n}")
                lines.append(f"    {out} = {pool.alloc(e.outs[0], out, e.outs[0].aval.shape, dtype_src(e.outs[0].aval))}")
                lines.append(f"    gather_{n}({', '.join(ins)}, {out})")
                warm.append((f"gather_{n}", [(v.aval.shape, v.aval.dtype.np.name) for v in e.ins + e.outs]))
            elif name == "index_put" and all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim):
                dns["__steps__"].append(f"scatter_{n}")
                lines.append(f"    {out} = {ins[0]}.copy()")
                v = ins[1]
                if isinstance(e.ins[1], Lit) and not isinstance(e.ins[1].value, np.ndarray):
                    v = repr(e.outs[0].aval.dtype.np.type(e.ins[1].value).item())
                lines.append(f"    scatter_{n}({out}, {v}, {', '.join(ins[2:])})")
                warm.append((f"scatter_{n}", [(e.outs[0].aval.shape, e.outs[0].aval.dtype.np.name)]
                             + [v if (isinstance(e.ins[1], Lit) and not isinstance(e.ins[1].value, np.ndarray))
                                else (e.ins[1].aval.shape, e.ins[1].aval.dtype.np.name)]
                             + [(x.aval.shape, x.aval.dtype.np.name) for x in e.ins[2:]]))
            elif nopy and name == "getitem":
                lines.append(f"    {out} = {ins[0]}{basic_index_src(e.params['spec'])}")
            else:
                key = f"E{len(dns)}"
                dns[key] = e
                for v in e.ins:
                    if isinstance(v, Var):
                        pool.pin(v)
                lines.append(f"    {out} = _run_eqn({key}, [{', '.join(ins)}])  # {name}")
            timed(mark, "matmul (BLAS)" if name == "matmul" else name, [list(v.aval.shape) for v in e.ins])
        while pending:
            check_after(*pending.pop())
        if profile:
            lines.append("    _SC.close()")
        outs = [nm(v) for v in g.outputs]
        if self.checks:
            lines.insert(1, f"    err = np.array([{len(self.checks)}, 0], np.int64)")
            outs.append("err")
        ind = "    "
        if self.checks and self.writes:    # an anomaly leaves the user's state untouched
            lines.append(f"    if err[0] == {len(self.checks)}:")
            ind = "        "
        for o, i in self.writes:     # in-place state updates, after every read of the old values
            lines.append(f"{ind}{nm(g.inputs[i])}[...] = {outs[o]}")
        lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        params = [nm(v) for v in g.inputs] + ([f"L{k}" for k in range(len(lits))] if nopy else [])
        lines[0] = f"def run({', '.join(params)}):"
        if nopy:
            warm[:] = [("run", [(v.aval.shape, v.aval.dtype.np.name) for v in g.inputs]
                        + [(a.shape, a.dtype.name) for a in lits])]
        return "\n".join(lines), dns, lits


__all__ = ["CompiledGraph", "CodegenWarning", "gen_group", "FASTMATH", "PARALLEL_MIN"]
