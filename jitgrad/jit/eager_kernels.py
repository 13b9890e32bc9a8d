"""Native kernels for eager ops over large arrays: the compiled path's own loop, built once per structure and called
from eager dispatch, on the worker pool when the array is large enough.

NumPy runs an eager fused op such as GELU as many passes over memory (``ir/ops/numpy_erf.py``: ~30 ufunc calls a
block, ~15 ns an element), single-threaded.  Here the op's decomposition (``OpDef.decompose``, what a trace binds)
is traced on a stand-in (1-D for an elementwise op, (rows, row length) for a row-wise one), run through the
compile path's passes (``run_pipeline``, ``fusion_plan``), and its one fusion group becomes the kernel the compiled
path builds for it (``codegen/kernels/loops.gen_group``, ``rowwise_loops.gen_rows``: same scalar bodies, mathlib's
erf/exp, same fast-math flags, same key), so eager gives the compiled kernel's bits (~1 ns an element) and shares
its cache: ``codegen/native/build.obtain`` links it from the disk cache when it is there (a second process loads it
in milliseconds) and compiles it to LLVM IR, without Numba, when not.

The seam (ARCHITECTURE.md, "Eager kernels"): each op this module serves has a chooser declared here with
``@published("OpDef.eager_kernel", name=op)``; the publisher binds it into the OpDef's ``eager_kernel`` slot, and
eager dispatch (``runtime/dispatch._rule_entry``) asks it once per signature (op, shapes, dtypes, params) for the
callable to run instead of the NumPy impl.  So ``runtime/`` never imports this module or ``codegen/``, and a small
array costs nothing per call: its signature's entry holds the NumPy impl.

Per structure (op, dtypes, params, serial or parallel; the row length where the decomposition bakes it in) a
kernel is built once per process, never per size.  A call whose kernel is not linked yet runs NumPy; once such
calls have spent ``REQUEST_AFTER_S`` in NumPy, the build is queued on the build thread
(``codegen/native/build_thread.py``): measured (BENCHMARKS.md, "eagerkern"), a cold build
(trace, passes, LLVM at O3) takes 100-400 ms, far longer than a first call should wait, and even a warm one
(loaded from disk) costs 10-15 ms of tracing and kernel IR to key it, plus ~0.25 s of imports for the first.
Calls switch to the kernel once it is linked.  Inputs it does not handle (not C-contiguous, unaligned, shapes that
broadcast, mixed dtypes) run NumPy, so semantics are the impl's: out-of-place results, NaN propagation (the
kernels never carry nnan/ninf), and everything dispatch does around the impl (version counters, autograd records,
anomaly checks) is unchanged.

Parallel: the compiled path's choice (``layout.Program.pool_choice``): where a loop of that size takes the pool
now (``workpool.takes``), at the eager kernels' own thresholds (``workpool.eager_min_work``/``eager_grain``,
``JITGRAD_EAGER_PARALLEL_WORK``/``_GRAIN``: an eager round wakes sleeping workers, a compiled step's next round
finds them spinning, so the compiled thresholds can move without moving these),
the parallel-capable kernel, which tests its work per call itself; ``torch.set_num_threads(1)`` keeps the serial
kernel.  A parallel kernel splits its loop into one chunk per worker of the pool (``workpool.py``), and every
element is computed by the same instructions whichever chunk holds it: the bits do not depend on the thread
count.  Calls take ``threads.EAGER_LAUNCH`` (one parallel launch at a time per process; its workers spin the
eager spin after it, for the eager product that comes next).

Knobs: ``JITGRAD_EAGER_KERNELS=0`` turns the path off (every eager op runs its NumPy impl); ``=sync`` builds a
kernel in the calling thread at its first call (tests, benchmarks that must not time NumPy calls);
``JITGRAD_EAGER_KERNEL_AFTER_S`` the NumPy time a structure's calls spend before its build is queued
(``REQUEST_AFTER_S``); ``JITGRAD_EAGER_KERNEL_MIN`` the element count from which an op takes the native path
(``MIN_ELEMENTS``);
``JITGRAD_EAGER_POOLED_MIN`` that of the one-ufunc ops (add, sub, mul: ``POOLED_MIN``); ``JITGRAD_EAGER_DRAW_MIN``
that of uniform draws (``rand_uniform``: ``DRAW_MIN``; their kernel's numbers are NumPy's Philox bits, so a draw
gives the same numbers before and after its kernel is linked).
"""
from __future__ import annotations

import ctypes
import os
import threading
from time import perf_counter

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt, settings
from ..ir.ops import OPS, Aval
from ..ir.ops.blas import array_address

_MODE = os.environ.get("JITGRAD_EAGER_KERNELS", "1").strip().lower()
ENABLED = _MODE not in ("0", "off", "false", "no")
SYNC = _MODE == "sync"
# From this many elements an op runs its kernel.  A native call costs a few microseconds (the argument block,
# ctypes, the output's allocation); NumPy's GELU is ~30 ufunc calls (>= 10 us) plus ~15 ns an element, its
# float64 form SciPy's erf at ~10 ns an element: below a few thousand elements neither is worth a kernel's
# structure in the signature cache.
MIN_ELEMENTS = int(os.environ.get("JITGRAD_EAGER_KERNEL_MIN", "4096"))
# From this many elements a one-ufunc op (add, sub, mul) runs its kernel: where the compiled path's rule puts every
# loop on the pool at the default threshold (``loops.PARALLEL_MIN``: each element costs at least
# ``layout.MIN_ELEMENT_COST``, and that many elements reach ``workpool.EAGER_PARALLEL_WORK``; a test keeps them equal; not
# imported: the chooser runs at a signature's first call, and codegen's kernel modules take ~0.3 s to import).
POOLED_MIN = int(os.environ.get("JITGRAD_EAGER_POOLED_MIN", 1 << 20))
# From this many elements a uniform draw runs its kernel.  NumPy's Philox (``ir/philox.py``) is ~100 ufunc calls a
# draw whatever its size (ten rounds of ten) plus ~10 ns an element; the kernel is one call.
DRAW_MIN = int(os.environ.get("JITGRAD_EAGER_DRAW_MIN", "256"))
# A structure's build is asked for once its calls have spent this long in NumPy (seconds; ``SYNC`` asks at the first
# call).  A cold build takes 100-400 ms of the build thread, and a build already running delays a compiled
# function's first build queued behind it (counted: the LM's init draws, 0.5G instructions ahead of its step's quick
# tier): so, as in renting before buying, a kernel is built only for work that has shown it will recur.  A big GELU
# (~8 ms a call in NumPy) asks at its third call; init's one-off draws (~0.1 ms each) never do.
REQUEST_AFTER_S = float(os.environ.get("JITGRAD_EAGER_KERNEL_AFTER_S", "0.02"))
# the stand-ins' sizes while tracing, two of each: sizes reach a kernel as arguments, so both must give one text
# (a decomposition with a mean bakes its row length in: such an op says so, and its row length keys its kernel)
_ELEMENT_HINTS = ((1 << 16,), (3 << 14,))
_ROW_HINTS = ((256, 128), (192, 96))
_FLOATS = (dt.float32, dt.float64)

COUNTS = {"native_calls": 0, "numpy_calls": 0, "kernels_compiled": 0, "kernels_loaded": 0, "kernels_failed": 0}
_lock = threading.Lock()
_STRUCTURES: dict = {}      # (op name, dtype names, params, parallel[, row length]) -> _Structure
_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Structure:
    """One kernel: an op's decomposition for given dtypes and params, serial or parallel.  ``fn`` is its ctypes
    callable once linked (None before); ``rows``: a row-wise op over the last axis (a row kernel over (rows,
    row length)) rather than an elementwise one; ``row_length``: the row length it is built for (None: any);
    ``roles``: per operand of the kernel, what a call passes (``_kernel``)."""

    __slots__ = ("op", "dtypes", "params", "parallel", "rows", "row_length", "fn", "roles", "per_element", "state",
                 "error", "key", "how", "run", "pending", "code", "spent")

    def __init__(self, op, dtypes, params, parallel, rows, row_length):
        self.op, self.dtypes, self.params, self.parallel, self.rows = op, dtypes, params, parallel, rows
        self.row_length = row_length
        self.fn = None
        self.roles = None
        self.per_element = None
        self.state = "new"          # new -> queued -> ready | failed
        self.spent = 0.0            # seconds its calls spent in NumPy before its build was asked for
        self.error = None
        self.key = None
        self.how = None             # "compiled" | "loaded" | "process" (linked by another structure's build)
        # what the build thread's fork and exit handlers read of a queued job (no graph code: nothing to hand to
        # build processes at exit)
        self.run = self.pending = self.code = None

    def request(self) -> None:
        """Build (or load) the kernel: now when ``SYNC`` (or under ``use_deterministic_algorithms``), else on the
        build thread (once)."""
        with _lock:
            if self.state != "new":
                return
            self.state = "queued"
        if SYNC or settings.STATE.deterministic:
            self._build(False)
            return
        from ..codegen.native import build_thread
        build_thread.queue_background(self, build_thread.EAGER)

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
        kernel, roles, per_element = _kernel(self.op, self.dtypes, self.params, self.parallel, self.rows,
                                             self.row_length)
        from ..codegen.native import build, llvm_build, objstore
        key = build.kernel_key(kernel)
        source = kernel.source          # (what keys it; a kernel on disk needs nothing more)
        if key not in build._ADDRESSES and not objstore.exists(key):
            source = llvm_build.compile_text(key, kernel.source, kernel.ir)
            if not llvm_build.is_llvm(source):       # Numba would compile it: eager mode never imports Numba
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
        self.key, self.roles, self.per_element = key, roles, per_element
        self.fn = _KERNEL_FN(addr)
        self.state = "ready"


# a kernel operand's role in a call: an argument of the op (its index), the result, or scratch of the row kernel
# (a value one pass stores for the next: full-size, or one element per row)
RESULT, FULL, ROW = "result", "full", "row"
def _kernel(opname, dtypes, params, parallel, rows, row_length=None):
    """(the kernel, each operand's role (``RESULT``, ``FULL``, ``ROW`` or the op's argument index), the plan's
    cost of one element) of ``opname``'s decomposition over C-contiguous arrays of ``dtypes``: 1-D for an
    elementwise op, (rows, row length) for a row-wise one (its ``axis`` param the last; ``row_length``, when
    given, the rows' length): the loop the compiled path builds for it.  Traced at two sizes, which must give
    one kernel text: sizes are the kernel's arguments, never part of its code."""
    hints = _ROW_HINTS if rows else _ELEMENT_HINTS
    if row_length is not None:
        hints = tuple((r, row_length) for r, _ in hints)
    first, other = (_traced_kernel(opname, dtypes, params, parallel, rows, shape) for shape in hints)
    if first[0].source != other[0].source:
        raise RuntimeError(f"{opname}: its kernel depends on the sizes it was traced at")
    return first


def _traced_kernel(opname, dtypes, params, parallel, rows, shape):
    """One trace of ``_kernel``'s at stand-in ``shape``."""
    from ..codegen.kernels.loops import BCAST, CONTIG, gen_group
    from ..codegen.program.layout import MIN_ELEMENT_COST
    from ..codegen.kernels.rowwise_loops import gen_rows
    from ..ir.graph import Graph, Var
    from ..ir.passes import fusion_plan, run_pipeline
    from ..ir.plan import Group, RowGroup
    from ..runtime.dispatch import bind
    from ..runtime.tensor import Tensor
    from ..tracer import Trace
    params = dict(params)
    drawn = opname in _DRAWS
    if drawn:       # a draw's inputs are the generator's 0-dim state; its shape is a param, the loop's range
        params["shape"] = shape
    tr = Trace()
    with tr:
        ins = [Tensor._make(tr.new_input(Aval(() if drawn else shape, dt.as_dtype(d)))) for d in dtypes]
        out = bind(OPS[opname], *ins, **params)
    graph = run_pipeline(Graph(list(tr.inputs), list(tr.eqns), [out._data]), f"eager {opname}", transposable=False)
    plan = fusion_plan(graph)
    if len(plan.steps) != 1 or not isinstance(plan.steps[0], RowGroup if rows else Group):
        raise RuntimeError(f"{opname}: its decomposition is not one {'row' if rows else 'plain'} loop ({plan})")
    g = plan.steps[0]
    if g.gathers or g.scatters or (not rows and g.reduce is not None) or graph.outputs[0] not in g.outputs \
            or (rows and g.columns):
        raise RuntimeError(f"{opname}: not a kernel this module calls")
    arrays_in = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
    if any(not isinstance(v, Var) or v not in graph.inputs for v in arrays_in):
        raise RuntimeError(f"{opname}: the loop reads an array that is not an input")
    roles = [graph.inputs.index(v) for v in arrays_in]
    for v in g.outputs:
        roles.append(RESULT if v is graph.outputs[0] else FULL if v.aval.shape == shape else ROW)
    if rows and any(r == ROW for r in roles) and not all(v.aval.shape in (shape, g.row_shape) for v in g.outputs):
        raise RuntimeError(f"{opname}: a row kernel output of another shape")
    n = len(roles)
    # as the compiled path lays out a graph of this op alone (loop_steps.fused_group): contiguous operands but the
    # row values (stride 0 along the row), each its own alias class (inputs are distinct buffers as far as writes
    # go; the result and the workspace are distinct memory)
    # (a draw's seed and offset: one element read at every index)
    classes = [BCAST if r == ROW or (isinstance(r, int) and graph.inputs[r].aval.shape == ()) else CONTIG
               for r in roles]
    alias = list(range(n))
    # the cost of one element as loop_steps.fused_group prices it (a row kernel's later passes read again), at
    # least layout.MIN_ELEMENT_COST (layout.Program.pool_choice); a parallel kernel tests its work per call with it
    per_element = sum(v.aval.dtype.np.itemsize for v in arrays_in + list(g.outputs)) + g.arith_cost()
    if rows:
        per_element += (len(g.passes) - 1) * sum(v.aval.dtype.np.itemsize for v in arrays_in) \
            + max(g.cost - g.arith_cost(), 0.0)
    per_element = max(float(per_element), MIN_ELEMENT_COST)
    gate = per_element if parallel else None
    if rows:
        kernel = gen_rows(g, classes, parallel, 2, (1,), alias, gate)
    else:
        kernel = gen_group(g, classes, parallel, None, 1, None, alias, gate)
    return kernel, tuple(roles), per_element


def _parallel_pays(size: int, per_element: float) -> bool:
    """The compiled path's choice for a loop of concrete ``size`` elements each costing ``per_element``
    (``layout.Program.pool_choice``: the parallel-capable kernel when it takes the pool now, ``workpool.takes``),
    on a pool this process can start (``torch.set_num_threads(1)`` is checked per call).  The kernel itself tests
    its work per call against the threshold then in force, so a changed threshold stays correct."""
    from ..codegen.native import workpool
    return workpool.available() and workpool.takes(size, per_element, eager=True)


def _structure(opname, dtypes, params, parallel, rows, row_length=None) -> _Structure:
    key = (opname, dtypes, params, parallel) if row_length is None else (opname, dtypes, params, parallel, row_length)
    st = _STRUCTURES.get(key)
    if st is None:
        with _lock:
            st = _STRUCTURES.get(key)
            if st is None:
                st = _STRUCTURES[key] = _Structure(opname, dtypes, params, parallel, rows, row_length)
    return st


def _same_floats(avals):
    """The one float dtype and shape of ``avals`` (arrays all), else None."""
    if not avals:
        return None
    a0 = avals[0]
    if a0.dtype not in _FLOATS:
        return None
    for a in avals:
        if a.weak or a.shape != a0.shape or a.dtype is not a0.dtype:
            return None
    return a0


def _named(choose, opname, what):
    choose.__name__ = choose.__qualname__ = f"{opname}_eager_kernel"
    choose.__doc__ = f"The native kernel of eager ``{opname}`` over large float arrays ({what}; ``eager_kernels.py``)."
    return choose


def elementwise_chooser(opname):
    """The ``eager_kernel`` chooser of elementwise op ``opname``: ``(input avals, params, fallback) -> callable``
    for signatures the kernel serves (every input an array of one float dtype and one shape, at least
    ``MIN_ELEMENTS`` elements), else None."""
    def choose(avals, params, fallback):
        a0 = _same_floats(avals) if ENABLED else None
        if a0 is None or a0.size < MIN_ELEMENTS:
            return None
        return _call_for(opname, tuple(a.dtype.name for a in avals), tuple(sorted(params.items())), a0, (a0.size,),
                         fallback)
    return _named(choose, opname, "one loop over the elements")


def pooled_chooser(opname):
    """The ``eager_kernel`` chooser of a one-ufunc elementwise op (``add``, ``sub``, ``mul``: one rounding, so the
    kernel's bits are NumPy's): as ``elementwise_chooser``, but only from the size where the pool takes every loop
    (``POOLED_MIN``).  Below it the serial kernel would do what NumPy's one ufunc does (measured,
    ``workpool.py``: ``x + 1`` gained nothing from the pool below 2^20 elements), so those signatures keep NumPy;
    above it a call whose loop the pool does not take (a raised ``min_work()``, one thread) runs the serial kernel,
    whose bits are the same."""
    def choose(avals, params, fallback):
        a0 = _same_floats(avals) if ENABLED else None
        if a0 is None or a0.size < max(POOLED_MIN, MIN_ELEMENTS):
            return None
        return _call_for(opname, tuple(a.dtype.name for a in avals), tuple(sorted(params.items())), a0, (a0.size,),
                         fallback)
    return _named(choose, opname, "one loop over the elements, on the pool")


_DRAWS = ("rand_uniform",)      # the draws whose scalar body renders to LLVM IR (codegen/kernels/philox_ir.py)


def draw_chooser(opname):
    """The ``eager_kernel`` chooser of a draw (``rand_uniform``): its inputs are the generator's 0-dim seed and
    offset, its ``shape`` and ``dtype`` params the result's; from ``DRAW_MIN`` elements one loop over the result's
    elements (the kernel is keyed by the dtype alone: the shape is its size argument).  Its bits are NumPy's
    (``ir/philox.py``: integer rounds and an exact conversion), so a call gives the same numbers whichever runs."""
    def choose(avals, params, fallback):
        if not ENABLED or len(avals) != 2 or any(a.shape != () or a.dtype is not dt.int64 for a in avals):
            return None
        d = params.get("dtype")
        if d not in _FLOATS:
            return None
        out = Aval(tuple(params["shape"]), d)
        if out.size < max(DRAW_MIN, 1):
            return None
        return _call_for(opname, ("int64", "int64"), (("dtype", d),), out, (out.size,), fallback)
    return _named(choose, opname, "one loop over the drawn elements")


def _softmax_axis(params, ndim):
    """The rank-2 kernel's params of a softmax-like op over the last axis (``axis``), else None."""
    return tuple(sorted({**params, "axis": 1}.items())) if params.get("axis") == ndim - 1 else None


def _layer_norm_axes(params, ndim):
    """The rank-2 kernel's params of a layer_norm over the last axis alone (``naxes`` 1), else None."""
    return tuple(sorted(params.items())) if params.get("naxes") == 1 else None


def rowwise_chooser(opname, last_axis=_softmax_axis, sized=False):
    """The ``eager_kernel`` chooser of row-wise op ``opname``: as ``elementwise_chooser``, for signatures that
    reduce the last axis alone (``last_axis(params, ndim)``: the params of its rank-2 kernel, else None); the
    kernel runs over (rows, row length) of C-contiguous arrays.  ``sized``: its decomposition bakes the row
    length in (a mean divides by it), so a kernel is built per row length, as the compiled path's is."""
    def choose(avals, params, fallback):
        a0 = _same_floats(avals) if ENABLED else None
        if a0 is None or a0.size < MIN_ELEMENTS or a0.ndim < 1:
            return None
        key_params = last_axis(params, a0.ndim)
        if key_params is None:
            return None
        c = a0.shape[-1]
        return _call_for(opname, tuple(a.dtype.name for a in avals), key_params, a0, (a0.size // c, c), fallback,
                         c if sized else None)
    return _named(choose, opname, "a row kernel over the last axis")


def _call_for(opname, dtypes, params, aval, dims, fallback, row_length=None):
    """The callable eager dispatch keeps for one signature (result ``aval``; the kernel's loop over ``dims``: the
    element count, or rows and row length): the kernel when it is linked and the arrays are C-contiguous and
    aligned, else ``fallback`` (and the kernel's build requested)."""
    rows = len(dims) == 2
    serial = _structure(opname, dtypes, params, False, rows, row_length)
    par = _structure(opname, dtypes, params, True, rows, row_length)
    from ..codegen.native.threads import EAGER_LAUNCH
    counts = COUNTS
    empty = np.empty
    block_of = np.array
    i64 = np.int64
    shape, npdtype, size = aval.shape, aval.dtype.np, aval.size
    head = list(dims)
    # per operand after its address: its element strides over the loop (a row value: 0 along the row)
    full_strides = [dims[1], 1] if rows else [1]
    row_strides = [1, 0]
    tail = [dims[0]] if rows else []    # a row kernel's slot for its reduction's count (rowwise_loops.gen_rows)

    threads = settings.STATE
    pool = [None]       # whether the loop goes to the pool: known once the serial kernel told its cost

    def run(*arrays, **kw):
        st = serial
        if pool[0] is None and serial.per_element is not None:
            pool[0] = _parallel_pays(size, serial.per_element)
        if pool[0] and threads.num_threads != 1:
            if par.state == "new":
                par.request()       # (the serial kernel serves until it is linked)
            if par.fn is not None:
                st = par
        fn = st.fn
        if fn is None:
            if st.state == "new":
                if SYNC or settings.STATE.deterministic or st.spent >= REQUEST_AFTER_S:
                    st.request()
                    fn = st.fn      # (built now when SYNC or deterministic)
                else:
                    counts["numpy_calls"] += 1
                    t0 = perf_counter()
                    out = fallback(*arrays, **kw)
                    st.spent += perf_counter() - t0
                    return out
            if fn is None:
                counts["numpy_calls"] += 1
                return fallback(*arrays, **kw)
        for a in arrays:
            f = a.flags
            if not (f.c_contiguous and f.aligned):
                counts["numpy_calls"] += 1
                return fallback(*arrays, **kw)
        block = head[:]
        out = None
        keep = []
        for r in st.roles:
            if r == RESULT:
                out = a = empty(shape, npdtype)
            elif r == FULL:
                a = empty(shape, npdtype)
                keep.append(a)
            elif r == ROW:
                a = empty(dims[0], npdtype)
                keep.append(a)
                block.append(array_address(a))
                block.extend(row_strides)
                continue
            else:
                a = arrays[r]
            block.append(array_address(a))     # (NumPy's a.ctypes: ~7,000 instructions more a read)
            block.extend(full_strides)
        block.extend(tail)
        blk = block_of(block, i64)
        if st.parallel:
            with EAGER_LAUNCH:
                fn(array_address(blk))
        else:
            fn(array_address(blk))
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
published("OpDef.eager_kernel", name="tanh_backward")(elementwise_chooser("tanh_backward"))
published("OpDef.eager_kernel", name="tanh")(elementwise_chooser("tanh"))
published("OpDef.eager_kernel", name="add")(pooled_chooser("add"))
published("OpDef.eager_kernel", name="sub")(pooled_chooser("sub"))
published("OpDef.eager_kernel", name="mul")(pooled_chooser("mul"))
published("OpDef.eager_kernel", name="softmax")(rowwise_chooser("softmax"))
published("OpDef.eager_kernel", name="softmax_backward")(rowwise_chooser("softmax_backward"))
published("OpDef.eager_kernel", name="log_softmax")(rowwise_chooser("log_softmax"))
published("OpDef.eager_kernel", name="log_softmax_backward")(rowwise_chooser("log_softmax_backward"))
published("OpDef.eager_kernel", name="rand_uniform")(draw_chooser("rand_uniform"))
published("OpDef.eager_kernel", name="layer_norm")(rowwise_chooser("layer_norm", _layer_norm_axes, sized=True))
published("OpDef.eager_kernel", name="layer_norm_backward")(
    rowwise_chooser("layer_norm_backward", _layer_norm_axes, sized=True))


__all__ = ["elementwise_chooser", "pooled_chooser", "rowwise_chooser", "draw_chooser", "wait", "structures", "COUNTS", "ENABLED", "SYNC",
           "MIN_ELEMENTS", "POOLED_MIN", "DRAW_MIN"]
