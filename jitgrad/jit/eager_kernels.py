"""Native kernels for eager ops over large arrays: the compiled path's own loop, built once per structure and called
from eager dispatch, on the worker pool when the array is large enough.

NumPy runs an eager fused op such as GELU as many passes over memory (``ir/ops/numpy_erf.py``: ~30 ufunc calls a
block, ~15 ns an element), single-threaded.  Here the op's decomposition (``OpDef.decompose``, what a trace binds)
is traced on a 1-D stand-in, run through the compile path's passes (``run_pipeline``, ``fusion_plan``) and its one
fusion group becomes the same kernel the compiled path builds for it (``codegen/kernels/loops.gen_group``: same
scalar bodies, mathlib's erf/exp, same fast-math flags, same key), so eager gives the compiled kernel's bits
(~1 ns an element) and shares its cache: ``codegen/native/build.obtain`` links it from the disk cache when it is
there (a second process loads it in milliseconds) and compiles it to LLVM IR, without Numba, when not.

The seam (ARCHITECTURE.md, "Eager kernels"): each op this module serves has a chooser declared here with
``@published("OpDef.eager_kernel", name=op)``; the publisher binds it into the OpDef's ``eager_kernel`` slot, and
eager dispatch (``runtime/dispatch._rule_entry``) asks it once per signature (op, shapes, dtypes, params) for the
callable to run instead of the NumPy impl.  So ``runtime/`` never imports this module or ``codegen/``, and a small
array costs nothing per call: its signature's entry holds the NumPy impl.

Per structure (op, dtypes, params, serial or parallel) a kernel is built once per process, never per size.  A
call whose kernel is not linked yet runs NumPy and queues the build on the build thread
(``codegen/native/build_thread.py``): a cold build (trace, passes, LLVM at O3) takes tens of milliseconds, longer
than any first call should wait, and a warm one still imports llvmlite and renders the kernel's text to key it.
Calls switch to the kernel once it is linked.  Inputs it does not handle (not C-contiguous, unaligned, shapes that
broadcast, mixed dtypes) run NumPy, so semantics are the impl's: out-of-place results, NaN propagation (the
kernels never carry nnan/ninf), and everything dispatch does around the impl (version counters, autograd records,
anomaly checks) is unchanged.

Parallel: the compiled path's rule (``codegen/program/layout``: at least ``PARALLEL_GRAIN`` elements and size x
per-element cost >= ``PARALLEL_WORK``, always from ``PARALLEL_MIN``), with ``torch.set_num_threads(1)`` keeping
the serial kernel.  A parallel kernel splits its loop into one chunk per worker of the pool (``workpool.py``), and
every element is computed by the same instructions whichever chunk holds it: the bits do not depend on the thread
count.  Calls take ``threads.LAUNCH_LOCK`` (one parallel launch at a time per process).

Knobs: ``JITGRAD_EAGER_KERNELS=0`` turns the path off (every eager op runs its NumPy impl); ``=sync`` builds a
kernel in the calling thread at its first call (tests, benchmarks that must not time NumPy calls);
``JITGRAD_EAGER_KERNEL_MIN`` the element count from which an op takes the native path (``MIN_ELEMENTS``).
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt, settings
from ..ir.ops import OPS, Aval

_MODE = os.environ.get("JITGRAD_EAGER_KERNELS", "1").strip().lower()
ENABLED = _MODE not in ("0", "off", "false", "no")
SYNC = _MODE == "sync"
# From this many elements an op runs its kernel.  A native call costs a few microseconds (the argument block,
# ctypes, the output's allocation); NumPy's GELU is ~30 ufunc calls (>= 10 us) plus ~15 ns an element, its
# float64 form SciPy's erf at ~10 ns an element: below a few thousand elements neither is worth a kernel's
# structure in the signature cache.
MIN_ELEMENTS = int(os.environ.get("JITGRAD_EAGER_KERNEL_MIN", "4096"))
_N_HINT = 1 << 16       # the stand-in's length while tracing (sizes reach the kernel as arguments)
_FLOATS = (dt.float32, dt.float64)

COUNTS = {"native_calls": 0, "numpy_calls": 0, "kernels_compiled": 0, "kernels_loaded": 0, "kernels_failed": 0}
_lock = threading.Lock()
_STRUCTURES: dict = {}      # (op name, dtype names, params, parallel) -> _Structure
_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Structure:
    """One kernel: an op's decomposition for given dtypes and params, serial or parallel.  ``fn`` is its ctypes
    callable once linked (None before); ``order`` maps the kernel's input operands to the op's arguments."""

    __slots__ = ("op", "dtypes", "params", "parallel", "fn", "order", "per_element", "state", "error", "key",
                 "how", "run", "pending")

    def __init__(self, op, dtypes, params, parallel):
        self.op, self.dtypes, self.params, self.parallel = op, dtypes, params, parallel
        self.fn = None
        self.order = None
        self.per_element = None
        self.state = "new"          # new -> queued -> ready | failed
        self.error = None
        self.key = None
        self.how = None             # "compiled" | "loaded" | "process" (linked by another structure's build)
        self.run = self.pending = None      # (what the build thread's fork handler reads of a queued job)

    def request(self) -> None:
        """Build (or load) the kernel: now when ``SYNC``, else on the build thread (once)."""
        with _lock:
            if self.state != "new":
                return
            self.state = "queued"
        if SYNC:
            self._build(False)
            return
        from ..codegen.native import build_thread
        build_thread.queue_background(self)

    def _build(self, background: bool) -> None:
        """What the build thread runs (``build_thread.queue_background``): never raises (the thread would die)."""
        try:
            if background:
                from ..codegen.native import build_thread
                with build_thread.compiling() as go:
                    if not go:
                        self.state = "new"
                        return
                    self._link()
            else:
                self._link()
        except Exception as e:  # noqa: BLE001 - the op keeps its NumPy impl; the reason is kept for inspection
            self.error = f"{type(e).__name__}: {e}"
            self.state = "failed"
            COUNTS["kernels_failed"] += 1

    def _link(self) -> None:
        kernel, order, per_element = _kernel(self.op, self.dtypes, self.params, self.parallel)
        from ..codegen.kernels import ir_loops
        from ..codegen.native import build
        key = build.kernel_key(kernel)
        source = ir_loops.compile_text(key, kernel.source, kernel.ir)
        if not ir_loops.is_llvm(source):       # Numba would compile it: eager mode never imports Numba
            raise RuntimeError(f"{self.op}: its kernel does not translate to LLVM IR")
        before = key in build._ADDRESSES
        addr = build.obtain(key, source, "kernel")
        if before:
            self.how = "process"
        elif key in build._BLOBS_MADE_HERE:
            self.how = "compiled"
            COUNTS["kernels_compiled"] += 1
        else:
            self.how = "loaded"
            COUNTS["kernels_loaded"] += 1
        self.key, self.order, self.per_element = key, order, per_element
        self.fn = _KERNEL_FN(addr)
        self.state = "ready"


def _kernel(opname, dtypes, params, parallel):
    """(the kernel, the op's argument index of each kernel input, the plan's cost of one element) of ``opname``'s
    decomposition over 1-D contiguous arrays of ``dtypes``: the loop the compiled path builds for it."""
    from ..codegen.kernels.loops import CONTIG, gen_group
    from ..ir.graph import Graph, Var
    from ..ir.passes import fusion_plan, run_pipeline
    from ..ir.plan import Group
    from ..runtime.dispatch import bind
    from ..runtime.tensor import Tensor
    from ..tracer import Trace
    tr = Trace()
    with tr:
        ins = [Tensor._make(tr.new_input(Aval((_N_HINT,), dt.as_dtype(d)))) for d in dtypes]
        out = bind(OPS[opname], *ins, **dict(params))
    graph = run_pipeline(Graph(list(tr.inputs), list(tr.eqns), [out._data]), f"eager {opname}", transposable=False)
    plan = fusion_plan(graph)
    if len(plan.steps) != 1 or not isinstance(plan.steps[0], Group):
        raise RuntimeError(f"{opname}: its decomposition is not one loop ({plan})")
    g = plan.steps[0]
    if g.reduce is not None or g.gathers or g.scatters or len(g.outputs) != 1 or g.outputs[0] is not graph.outputs[0]:
        raise RuntimeError(f"{opname}: not a plain elementwise loop")
    arrays_in = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
    if any(not isinstance(v, Var) or v not in graph.inputs for v in arrays_in):
        raise RuntimeError(f"{opname}: the loop reads an array that is not an input")
    order = tuple(graph.inputs.index(v) for v in arrays_in)
    n = len(arrays_in) + 1
    # as the compiled path for a graph of this op alone: contiguous operands, each its own alias class (inputs
    # are distinct buffers as far as writes go, the output is fresh memory; loop_steps.fused_group)
    kernel = gen_group(g, [CONTIG] * n, parallel, None, 1, None, list(range(n)))
    per_element = sum(v.aval.dtype.np.itemsize for v in arrays_in + list(g.outputs)) + g.arith_cost()
    return kernel, order, per_element


def _runs_parallel(size: int, per_element: float) -> bool:
    """The compiled path's rule (``layout.Program.runs_parallel``) for a loop of ``size`` elements."""
    if settings.STATE.num_threads == 1:
        return False
    from ..codegen.program.layout import PARALLEL_GRAIN, PARALLEL_MIN, PARALLEL_WORK
    return size >= PARALLEL_MIN or (size >= PARALLEL_GRAIN and size * per_element >= PARALLEL_WORK)


def _structure(opname, dtypes, params, parallel) -> _Structure:
    key = (opname, dtypes, params, parallel)
    st = _STRUCTURES.get(key)
    if st is None:
        with _lock:
            st = _STRUCTURES.get(key)
            if st is None:
                st = _STRUCTURES[key] = _Structure(opname, dtypes, params, parallel)
    return st


def _pool_ok() -> bool:
    from ..codegen.native import workpool
    return workpool.available()


def elementwise_chooser(opname):
    """The ``eager_kernel`` chooser of elementwise op ``opname``: ``(input avals, params, fallback) -> callable``
    for signatures the kernel serves (every input an array of one float dtype and one shape, at least
    ``MIN_ELEMENTS`` elements), else None."""
    def choose(avals, params, fallback):
        if not ENABLED or not avals:
            return None
        a0 = avals[0]
        shape, d = a0.shape, a0.dtype
        if d not in _FLOATS or a0.size < MIN_ELEMENTS:
            return None
        for a in avals:
            if a.weak or a.shape != shape or a.dtype is not d:
                return None
        return _call_for(opname, tuple(a.dtype.name for a in avals), tuple(sorted(params.items())), shape,
                         d.np, a0.size, fallback)
    choose.__name__ = f"{opname}_eager_kernel"
    choose.__qualname__ = choose.__name__
    choose.__doc__ = f"The native kernel of eager ``{opname}`` over large float arrays (``eager_kernels.py``)."
    return choose


def _call_for(opname, dtypes, params, shape, npdtype, size, fallback):
    """The callable eager dispatch keeps for one signature: the kernel when it is linked and the arrays are
    C-contiguous and aligned, else ``fallback`` (and the kernel's build requested)."""
    serial = _structure(opname, dtypes, params, False)
    par = _structure(opname, dtypes, params, True)
    from ..codegen.native.threads import LAUNCH_LOCK
    counts = COUNTS
    empty = np.empty
    block_of = np.array
    i64 = np.int64

    def run(*arrays, **kw):
        st = serial
        if par.state != "failed" and serial.per_element is not None and _runs_parallel(size, serial.per_element) \
                and _pool_ok():
            st = par
        fn = st.fn
        if fn is None:
            if st.state == "new":
                st.request()
                fn = st.fn      # (built now when SYNC)
            if fn is None:
                counts["numpy_calls"] += 1
                return fallback(*arrays, **kw)
        block = [size]
        for j in st.order:
            a = arrays[j]
            f = a.flags
            if not (f.c_contiguous and f.aligned):
                counts["numpy_calls"] += 1
                return fallback(*arrays, **kw)
            block.append(a.ctypes.data)
            block.append(1)
        out = empty(shape, npdtype)
        block.append(out.ctypes.data)
        block.append(1)
        blk = block_of(block, i64)
        if st.parallel:
            with LAUNCH_LOCK:
                fn(blk.ctypes.data)
        else:
            fn(blk.ctypes.data)
        counts["native_calls"] += 1
        return out
    run.__name__ = f"{opname}_native"
    return run


def wait(timeout: float | None = None) -> bool:
    """Wait until no eager kernel build is queued (``build_thread.wait_background``); False on timeout."""
    from ..codegen.native import build_thread
    return build_thread.wait_background(timeout)


def structures() -> dict:
    """The kernels requested so far: {(op, dtypes, params, parallel): (state, how, key, error)} (for tests)."""
    return {k: (s.state, s.how, s.key, s.error) for k, s in list(_STRUCTURES.items())}


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()
    for st in _STRUCTURES.values():     # a build queued in the parent never runs here: requested again
        if st.state == "queued":
            st.state = "new"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# the ops served (declared: the publisher binds each into its OpDef's ``eager_kernel`` slot)
published("OpDef.eager_kernel", name="gelu")(elementwise_chooser("gelu"))
published("OpDef.eager_kernel", name="gelu_backward")(elementwise_chooser("gelu_backward"))


__all__ = ["elementwise_chooser", "wait", "structures", "COUNTS", "ENABLED", "SYNC", "MIN_ELEMENTS"]
