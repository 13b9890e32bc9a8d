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
import math
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Graph, Lit, Var
from ..ir.interpret import run_eqn
from ..ir.ops.opdef import result_dtype
from ..ir.passes.fuse import Group, plan as fusion_plan

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
PARALLEL_MIN = 1 << 20      # elements; below this a kernel runs serial (see BENCHMARKS.md: thread wake-up
                            # costs ~10 us on an idle machine and ~20 ms when the cores are busy)
_MATH = ("exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "pow", "sqrt", "isfinite",
         "max", "min", "sign")
_MATH_RE = re.compile(r"\b(" + "|".join(_MATH) + r")\(")
_NP_TYPE = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "b1"}


_MODULES = ("mathlib", "libm")


def _math_import(name: str) -> str:
    """The module a math helper (``tanh_f32``) is imported from: mathlib if it has it, else libm."""
    import importlib
    for m in _MODULES:
        try:
            mod = importlib.import_module(f"jitgrad.codegen.{m}")
        except ImportError:
            continue
        if hasattr(mod, name):
            return m
    raise KeyError(f"no scalar math function {name}")


def _tname(d: dt.DType) -> str:
    return {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64", "bool": "bool"}[d.name]


class KernelSource:
    def __init__(self, name, source, args, outputs, parallel):
        self.name = name
        self.source = source
        self.args = args          # input Vars/Lit arrays in call order
        self.outputs = outputs    # output Vars in call order
        self.parallel = parallel


def _index(shape, it_shape, ivars):
    """Index expression reading an array of ``shape`` broadcast into the iteration space."""
    nd, lead = len(shape), len(it_shape) - len(shape)
    if nd == 0:
        return "[()]"
    parts = []
    for k, d in enumerate(shape):
        parts.append("0" if d == 1 and it_shape[lead + k] != 1 else ivars[lead + k])
    return "[" + ", ".join(parts) + "]"


def _compute_dtype(e):
    name = e.op.name
    if name in ("lt", "le", "gt", "ge", "eq", "ne"):
        return result_dtype([v.aval for v in e.ins])
    if name in ("cast", "isfinite", "logical_not", "logical_and", "logical_or", "where"):
        return None
    return e.outs[0].aval.dtype


def _literal(v, d: dt.DType, consts):
    """A typed module-level constant for a scalar literal (``c0 = np.float32(0.1)``): never a bare Python
    float, which would promote float32 arithmetic to float64."""
    val = v.value
    if d is None:
        d = v.aval.dtype if not v.aval.weak else dt.result_type([], [val])
    if isinstance(val, bool) and d is not dt.bool_:
        val = int(val)
    if d is dt.bool_:
        return "True" if val else "False"
    val = d.np.type(val).item()
    text = repr(val) if not (isinstance(val, float) and not math.isfinite(val)) else f"float('{val}')"
    name = f"c{len(consts)}"
    consts[name] = f"np.{d.np.name}({text})"
    return name


def gen_group(g: Group, name: str, consts: dict, parallel=None, check_ids=None) -> KernelSource:
    """One loop nest for a fusion group.  ``check_ids`` (anomaly mode): eqn -> id for values that must be
    finite; each gets two integer reduction counters (non-finite, NaN) that vectorise with the loop, and after
    the loop a non-zero count reports the id through the ``err`` slot: no branch leaves the fast path."""
    shape = g.shape
    nd = len(shape)
    ivars = [f"i{k}" for k in range(nd)]
    size = 1
    for d in shape:
        size *= d
    arrays_in = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
    argname = {v: f"a{k}" for k, v in enumerate(arrays_in)}
    red = g.reduce
    outs = list(g.outputs)
    outname = {v: f"o{k}" for k, v in enumerate(outs)}
    body = []
    checks = []
    local = {}
    for k, v in enumerate(arrays_in):
        local[v] = f"x{k}"
        body.append(f"x{k} = {argname[v]}{_index(v.aval.shape, shape, ivars)}")

    def ref(v, cd):
        if isinstance(v, Lit) and v not in argname:
            return _literal(v, cd if v.aval.weak else v.aval.dtype, consts)
        expr = local[v]
        if cd is not None and v.aval.dtype is not cd:
            expr = f"{_tname(cd)}({expr})"
        return expr

    for n, e in enumerate(g.eqns):
        cd = _compute_dtype(e)
        od = e.outs[0].aval.dtype
        if e.op.name == "where":
            args = [ref(e.ins[0], None), ref(e.ins[1], od), ref(e.ins[2], od)]
        elif e.op.name in ("cast", "broadcast_to"):
            args = [ref(e.ins[0], None)]
        else:
            args = [ref(v, cd) for v in e.ins]
        expr = args[0] if e.op.name == "broadcast_to" else e.op.scalar(*args, **e.params)
        sd = cd or (e.ins[0].aval.dtype if e.op.name == "isfinite" else od)
        suffix = _NP_TYPE[sd.name]
        if sd.is_floating_point:
            expr = _MATH_RE.sub(lambda m: f"{m.group(1)}_{suffix}(", expr)
        else:   # integers: Python's max/min/abs are exact; the float math (exp, ...) takes float64
            expr = _MATH_RE.sub(lambda m: m.group(0) if m.group(1) in ("max", "min") else
                                "sign_i64(" if m.group(1) == "sign" else f"{m.group(1)}_f64(", expr)
        if od is dt.bool_:
            expr = f"bool({expr})"
        else:
            expr = f"{_tname(od)}({expr})"
        t = f"t{n}"
        body.append(f"{t} = {expr}")
        local[e.outs[0]] = t
        if check_ids and e in check_ids and od.is_floating_point:
            cid = check_ids[e]
            checks.append(cid)
            body.append(f"k{cid} += 0 if isfinite_{_NP_TYPE[od.name]}({t}) else 1")
            body.append(f"q{cid} += 0 if {t} == {t} else 1")
        if e.outs[0] in outname:
            body.append(f"{outname[e.outs[0]]}{_index(shape, shape, ivars)} = {t}")
    pre, post = [], []
    want = parallel
    parallel = nd > 0 and (size >= PARALLEL_MIN if want is None else bool(want) and size >= 4096)
    if red is not None:
        src = red.ins[0]
        v = ref(src, None) if src in local or isinstance(src, Lit) else None
        if v is None:
            local[src] = "x_red"
            body.append(f"x_red = {argname[src]}{_index(src.aval.shape, shape, ivars)}")
            v = "x_red"
        od = red.outs[0].aval.dtype
        v = f"{_tname(od)}({v})"
        axes = red.params["axes"]
        full = len(axes) == nd
        init = {"sum": "0", "amax": "-np.inf", "amin": "np.inf"}[red.op.name]
        if not od.is_floating_point and red.op.name != "sum":
            init = {"amax": str(np.iinfo(od.np).min), "amin": str(np.iinfo(od.np).max)}[red.op.name]
        combine = {"sum": "{a} + {v}", "amax": "{v} if ({v} > {a} or {v} != {v}) else {a}",
                   "amin": "{v} if ({v} < {a} or {v} != {v}) else {a}"}[red.op.name]
        ro = outname[red.outs[0]]
        if full:
            pre.append(f"acc = {_tname(od)}({init})")
            body.append(f"rv = {v}")
            body.append("acc = " + combine.format(a="acc", v="rv"))
            post.append(f"{ro}[()] = acc")
            parallel = parallel and red.op.name == "sum"
        else:
            kidx = "[" + ", ".join("0" if k in axes else ivars[k] for k in range(nd)) + "]"
            pre.append(f"{ro}[...] = {_tname(od)}({init})")
            body.append(f"rv = {v}")
            body.append(f"{ro}{kidx} = " + combine.format(a=f"{ro}{kidx}", v="rv"))
            parallel = False
    if checks:
        pre += [f"k{c} = 0\nq{c} = 0".replace("\n", "\n    ") for c in checks]
        post += [f"if k{c} > 0:\n        _report(err, {c}, q{c})" for c in checks]
    params = [argname[v] for v in arrays_in] + [outname[v] for v in outs] + (["err"] if checks else [])
    lines = [f"def {name}({', '.join(params)}):"]
    lines += ["    " + p for p in pre]
    ind = "    "
    for k in range(nd):
        rng = "prange" if (k == 0 and parallel) else "range"
        lines.append(f"{ind}for {ivars[k]} in {rng}({shape[k]}):")
        ind += "    "
    lines += [ind + b for b in body]
    lines += ["    " + p for p in post]
    ks = KernelSource(name, "\n".join(lines), arrays_in, outs, parallel)
    ks.checked = bool(checks)
    return ks


def _all_tensor_spec(spec, ndim):
    """The spec indexes every dim with an integer tensor (x[i0, i1, ...]): a gather/scatter loop."""
    return len(spec) == ndim and all(type(s) is tuple and s[0] == "tensor" for s in spec)


def _basic_spec(spec):
    return all(type(s) is int or (type(s) is tuple and s[0] == "slice") for s in spec)


def _basic_index_src(spec):
    parts = []
    for s in spec:
        if type(s) is int:
            parts.append(str(s))
        else:
            a, b, c = s[1:]
            parts.append(("" if a is None else str(a)) + ":" + ("" if b is None else str(b))
                         + ("" if c is None else f":{c}"))
    return "[" + ", ".join(parts) + ("," if len(parts) == 1 else "") + "]"


def gen_gather(e, name):
    """getitem(x, i0, ..., i_{n-1}) with one integer index tensor per dim, broadcast together."""
    x, idx = e.ins[0], e.ins[1:]
    out = e.outs[0].aval.shape
    iv = [f"b{k}" for k in range(len(out))]
    lines = [f"def {name}(x, {', '.join(f'i{k}' for k in range(len(idx)))}, out):"]
    ind = "    "
    for k, d in enumerate(out):
        lines.append(f"{ind}for {iv[k]} in range({d}):")
        ind += "    "
    for k, v in enumerate(idx):
        n = x.aval.shape[k]
        lines.append(f"{ind}j{k} = i{k}{_index(v.aval.shape, out, iv)}")
        lines.append(f"{ind}j{k} = j{k} + {n} if j{k} < 0 else j{k}")
    lines.append(f"{ind}out{_index(out, out, iv)} = x[{', '.join(f'j{k}' for k in range(len(idx)))}]")
    return "\n".join(lines)


def gen_scatter(e, name):
    """index_put(base, v, i0, ..., i_{n-1}; accumulate) with one integer index tensor per dim."""
    base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
    bshape = np.broadcast_shapes(*[i.aval.shape for i in idx]) if idx else ()
    iv = [f"b{k}" for k in range(len(bshape))]
    acc = e.params["accumulate"]
    lines = [f"def {name}(out, v, {', '.join(f'i{k}' for k in range(len(idx)))}):"]
    ind = "    "
    for k, d in enumerate(bshape):
        lines.append(f"{ind}for {iv[k]} in range({d}):")
        ind += "    "
    for k, iv_ in enumerate(idx):
        n = base.aval.shape[k]
        lines.append(f"{ind}j{k} = i{k}{_index(iv_.aval.shape, bshape, iv)}")
        lines.append(f"{ind}j{k} = j{k} + {n} if j{k} < 0 else j{k}")
    tgt = f"out[{', '.join(f'j{k}' for k in range(len(idx)))}]"
    val = f"v{_index(v.aval.shape, bshape, iv)}" if isinstance(v, Var) or isinstance(v.value, np.ndarray) else "v"
    lines.append(f"{ind}{tgt} = {tgt + ' + ' if acc else ''}{val}")
    return "\n".join(lines)


class CompiledGraph:
    """A graph compiled for the CPU: ``run(*arrays) -> sequence of arrays``; ``source`` is what was generated.

    When every step has a nopython form the driver itself is ``@njit`` (one dispatch per call); otherwise a
    Python driver calls the kernels and the NumPy impls of the remaining ops.
    """

    def __init__(self, graph: Graph, writes=(), background=None, parallel=None, phase=None):
        from . import cache
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
            if step.op.name == "getitem" and _all_tensor_spec(step.params["spec"], step.ins[0].aval.ndim):
                extra.append(gen_gather(step, f"gather_{n}"))
            elif step.op.name == "index_put" and _all_tensor_spec(step.params["spec"], step.ins[0].aval.ndim):
                extra.append(gen_scatter(step, f"scatter_{n}"))
        self.kernels = kernels
        self.nopython = all(self._nopython_step(s) for s in self.plan.steps)
        fm = "{" + ", ".join(repr(f) for f in sorted(FASTMATH)) + "}"
        body = []
        for k in kernels:
            body.append(f"@njit(cache=CACHE_ENABLED, fastmath={fm}, parallel={k.parallel}, error_model='numpy')\n"
                        + k.source)
        for src in extra:
            body.append("@njit(cache=CACHE_ENABLED, error_model='numpy')\n" + src)
        if self.checks:
            body.append(_REPORT_SOURCE)
        self.driver_source, self._dns, self.lits = self._driver({k.name: k for k in kernels})
        if self.nopython:
            body.append("@njit(cache=CACHE_ENABLED, error_model='numpy')\n" + self.driver_source)
        body.append(_warmup_source(self.warm_calls))
        text = "\n\n\n".join(body)
        used = sorted(set(m.group(0)[:-1] for m in re.finditer(r"\b[a-z0-9]+_(?:f32|f64|i64)\(", text)))
        header = ["# generated by jitgrad.codegen.cpu", "import numpy as np", "from numba import njit, prange",
                  "from numpy import float32, float64, int32, int64"]
        header += [f"from jitgrad.codegen.{_math_import(n)} import {n}" for n in used]
        header += [f"{k} = {v}" for k, v in consts.items()]
        self.module_source = "\n".join(header) + "\n\n\n" + text + "\n"
        self.key = cache.cache_key(self.module_source, extra=("cpu", 1))
        self.names = {g.index: g.name for g in self.plan.groups}
        self.run = None          # set once compiled; until then callers use the interpreter
        self._phase = phase      # name -> context manager: profiler events for a synchronous build
        self.error = None
        self.seconds = 0.0
        if background is None:
            background = os.environ.get("JITGRAD_BACKGROUND_COMPILE", "1") != "0"
        if background:
            _background(self)
        else:
            self._build(False)

    def _build(self, background: bool):
        """Load the module and compile (or load from Numba's cache) every function; then publish ``run``.
        A cold cache in the background compiles in a child process, so the caller's thread keeps running."""
        from . import cache
        t0 = time.perf_counter()
        try:
            path = cache.entry_path(self.key)
            if background and path is not None and not path.exists():
                cache.load_module(self.key, self.module_source, "graph")     # writes the entry
                subprocess.run([sys.executable, "-c", _CHILD, self.key, str(path)], check=True,
                               capture_output=True, timeout=600)
            hit = path is not None and path.exists()
            with (self._phase("compile/cache_hit" if hit else "compile/numba")
                  if self._phase is not None and not background else contextlib.nullcontext()):
                mod = cache.load_module(self.key, self.module_source, "graph")
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
            detail = e.stderr.decode(errors="replace")[-2000:] if isinstance(e, subprocess.CalledProcessError) \
                else f"{type(e).__name__}: {e}"
            self.error = detail
            warnings.warn(f"jitgrad: Numba code generation failed for a graph ({', '.join(self.names.values())[:200]});"
                          f" running it on the reference interpreter instead.\n{detail}", CodegenWarning,
                          stacklevel=2)

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
            return _all_tensor_spec(spec, ins[0].aval.ndim) or (_basic_spec(spec) and name == "getitem")
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

        for n, step in enumerate(self.plan.steps):
            while pending:
                check_after(*pending.pop())
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
                    lines.append(f"    {tgt} = np.empty({shape!r}, {dtype_src(o.aval)})")
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
            out = nm(e.outs[0])
            ins = [nm(v) for v in e.ins]
            name = e.op.name
            if name == "matmul":
                if nopy:   # BLAS wants contiguous operands (a no-op when they already are)
                    lines.append(f"    {out} = np.dot(np.ascontiguousarray({ins[0]}), np.ascontiguousarray({ins[1]}))")
                else:
                    lines.append(f"    {out} = np.matmul({ins[0]}, {ins[1]})")
            elif nopy and name == "reshape":
                lines.append(f"    {out} = np.ascontiguousarray({ins[0]}).reshape({e.params['shape']!r})")
            elif nopy and name == "permute":
                lines.append(f"    {out} = np.transpose({ins[0]}, {tuple(e.params['perm'])!r})")
            elif name == "getitem" and _all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim):
                dns["__steps__"].append(f"gather_{n}")
                lines.append(f"    {out} = np.empty({e.outs[0].aval.shape!r}, {dtype_src(e.outs[0].aval)})")
                lines.append(f"    gather_{n}({', '.join(ins)}, {out})")
                warm.append((f"gather_{n}", [(v.aval.shape, v.aval.dtype.np.name) for v in e.ins + e.outs]))
            elif name == "index_put" and _all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim):
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
                lines.append(f"    {out} = {ins[0]}{_basic_index_src(e.params['spec'])}")
            else:
                key = f"E{len(dns)}"
                dns[key] = e
                lines.append(f"    {out} = _run_eqn({key}, [{', '.join(ins)}])  # {name}")
            timed(mark, "matmul (BLAS)" if name == "matmul" else name, [list(v.aval.shape) for v in e.ins])
        while pending:
            check_after(*pending.pop())
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
