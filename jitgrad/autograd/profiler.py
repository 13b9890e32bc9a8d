"""The autograd profiler: ``jg.autograd.profiler.profile``, ``record_function``, ``emit_nvtx``, ``load_nvprof``.

While a :class:`profile` is entered, ``profiler_state.STATE.active`` points at it.  ``dispatch.bind`` then
routes every op through :meth:`profile.record_op` (one event named by the op: ``mul``, ``tanh``), the engine
wraps each backward function and each leaf accumulation in :meth:`profile.range` (``MulBackward0``,
``AccumulateGrad``), and ``record_function`` / compiled code add their own ranges.  Events nest per thread
(a stack per thread): ``children`` / ``parent`` link them and self time is total time minus direct children.
Times are taken with ``time.perf_counter_ns`` and reported in microseconds, like torch.
"""
from __future__ import annotations

import collections
import functools
import gzip
import json
import os
import threading
import warnings
from time import perf_counter_ns

from ..tracer import STATE as _TR
from ..runtime import profiler_state
from ..runtime.bind_route import set_profiler
from .profiler_table import _build_table, _fmt_mem, _fmt_time, _html_table  # noqa: F401 (_fmt_mem: read here by tests)
from ..runtime.source import frame_file, user_stack
from ..runtime.tensor import Tensor
from ..runtime import devices as _devices
_STATE = profiler_state.STATE
_CUDA_WARNED = False
class Interval(collections.namedtuple("Interval", "start end")):
    """A time range in microseconds since the profile started."""

    def elapsed_us(self) -> float:
        return self.end - self.start


class _NoCuda:
    """CPU-only build: every CUDA quantity is zero (so ``sort_by="cuda_time"`` sorts by 0)."""

    __slots__ = ()

    cuda_time = cuda_time_total = self_cuda_time_total = 0.0
    cuda_memory_usage = self_cuda_memory_usage = 0


class FunctionEvent(_NoCuda):
    """One recorded range: an op (``mul``), a backward function (``MulBackward0``), ``AccumulateGrad``,
    a ``record_function`` label, a compiled kernel or a compile phase.

    Times are in microseconds: ``cpu_time_total`` (end - start), ``self_cpu_time_total`` (minus direct
    ``children``), ``start`` / ``end`` (since the profile started).  ``input_shapes`` is a list per input
    (``[]`` for a Python scalar) when the profile has ``record_shapes=True``, else ``[]``.
    """

    __slots__ = ("id", "name", "thread", "_start", "_end", "input_shapes", "children", "parent", "stack", "cat",
                 "args", "_mem", "_cuda_us")
    count = 1

    def __init__(self, id, name, thread, start_ns, input_shapes=None, parent=None, stack=None, cat="cpu_op",
                 args=None):
        self.id, self.name, self.thread, self._start, self._end = id, name, thread, start_ns, None
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.children, self.parent, self.stack, self.cat, self.args, self._mem = [], parent, stack or [], cat, args, 0
        self._cuda_us = 0.0     # device time (CUDA events) of a kernel, under profile(use_cuda=True)

    @property
    def cuda_time_total(self) -> float:
        """Device time in us (CUDA events around the kernel; 0 for host work)."""
        return self._cuda_us + sum(c.cuda_time_total for c in self.children)

    cuda_time = cuda_time_total

    @property
    def self_cuda_time_total(self) -> float:
        return self._cuda_us

    key = property(lambda self: self.name, doc="The grouping key (the name).")
    cpu_parent = property(lambda self: self.parent)
    cpu_children = property(lambda self: self.children)
    start = property(lambda self: self._start / 1000.0, doc="Start, us since the profile started.")
    end = property(lambda self: (self._end if self._end is not None else self._start) / 1000.0,
                   doc="End, us since the profile started.")
    time_range = property(lambda self: Interval(self.start, self.end))

    def _ns(self) -> int:
        return (self._end if self._end is not None else self._start) - self._start

    @property
    def cpu_time_total(self) -> float:
        return self._ns() / 1000.0

    cpu_time = cpu_time_total

    @property
    def self_cpu_time_total(self) -> float:
        return (self._ns() - sum(c._ns() for c in self.children)) / 1000.0

    self_cpu_time = self_cpu_time_total

    @property
    def self_cpu_memory_usage(self) -> int:
        """Bytes of the tensors this op returned (views excluded; only with ``profile_memory=True``)."""
        return self._mem

    @property
    def cpu_memory_usage(self) -> int:
        return self._mem + sum(c.cpu_memory_usage for c in self.children)

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} cpu_time={_fmt_time(self.cpu_time_total)} "
                f"start={self.start:.3f} end={self.end:.3f} cpu_children={[c.id for c in self.children]} "
                f"input_shapes={self.input_shapes}>")


class FunctionEventAvg(_NoCuda):
    """Statistics of the events sharing a key (see :meth:`EventList.key_averages`): ``count``,
    ``cpu_time_total`` / ``self_cpu_time_total`` (sums, us) and ``cpu_time`` / ``self_cpu_time`` (per call).
    """

    def __init__(self):
        self.key = None
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cuda_time_total = self.self_cuda_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.input_shapes = None
        self.stack = []

    def add(self, other):
        """Add a FunctionEvent or a FunctionEventAvg with the same key into this one; returns self."""
        if self.key is None:
            self.key, self.input_shapes, self.stack = other.key, other.input_shapes, other.stack
        elif other.key != self.key:
            raise ValueError(f"cannot add an event with key {other.key!r} to the average of {self.key!r}")
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.cuda_time_total += other.cuda_time_total
        self.self_cuda_time_total += other.self_cuda_time_total
        self.cpu_memory_usage += other.cpu_memory_usage
        self.self_cpu_memory_usage += other.self_cpu_memory_usage
        return self

    __iadd__ = add

    cpu_time = property(lambda self: self.cpu_time_total / self.count if self.count else 0.0,
                        doc="Average total time per call, us.")
    self_cpu_time = property(lambda self: self.self_cpu_time_total / self.count if self.count else 0.0,
                             doc="Average self time per call, us.")
    cuda_time = property(lambda self: self.cuda_time_total / self.count if self.count else 0.0,
                         doc="Average device time per call, us.")

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={_fmt_time(self.self_cpu_time_total)} "
                f"cpu_time={_fmt_time(self.cpu_time_total)} count={self.count} input_shapes={self.input_shapes}>")


class EventList(list):
    """A list of :class:`FunctionEvent` (``prof.function_events``) or :class:`FunctionEventAvg`
    (``prof.key_averages()``), with torch's table, averaging and chrome-trace export."""

    def __init__(self, *args, use_cuda=False, profile_memory=False):
        super().__init__(*args)
        self._use_cuda, self._profile_memory = use_cuda, profile_memory

    @property
    def self_cpu_time_total(self) -> float:
        """Sum of the self times of all events, us."""
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Average the events over their name (and input shapes with ``group_by_input_shape=True``, and the
        innermost ``group_by_stack_n`` stack frames).  Returns an EventList of FunctionEventAvg, in order of
        first appearance."""
        stats = {}
        for e in self:
            k = (e.key, str(e.input_shapes) if group_by_input_shape else None,
                 tuple(e.stack[:group_by_stack_n]) if group_by_stack_n else None)
            avg = stats.get(k)
            if avg is None:
                avg = stats[k] = FunctionEventAvg()
            avg.add(e)
        out = EventList(stats.values(), use_cuda=self._use_cuda, profile_memory=self._profile_memory)
        for avg in out:
            avg.stack = list(avg.stack[:group_by_stack_n]) if group_by_stack_n else []
            if not group_by_input_shape:
                avg.input_shapes = None
        return out

    def total_average(self):
        """Average all the events: a FunctionEventAvg with key ``"Total"``."""
        total = FunctionEventAvg()
        for e in self:
            total.key = None
            total.add(e)
        total.key = "Total"
        return total

    def table(self, sort_by=None, row_limit=100, header=None, top_level_events_only=False):
        """The events as a formatted table (a string), like torch's.

        ``sort_by``: one of ``cpu_time``, ``cuda_time``, ``cpu_time_total``, ``cuda_time_total``,
        ``self_cpu_time_total``, ``self_cuda_time_total``, ``count``, ``cpu_memory_usage``,
        ``self_cpu_memory_usage`` (descending; CUDA keys are all 0 here); default: recording order.
        ``row_limit``: at most this many rows (negative: all).  ``header``: a title line above the table.
        """
        return _build_table(self, sort_by, row_limit, header, top_level_events_only, self._profile_memory)

    def export_chrome_trace(self, path):
        """Write the events to ``path`` as Trace Event JSON (``"ph": "X"`` complete events, ``ts`` / ``dur``
        in us), loadable in chrome://tracing and https://ui.perfetto.dev; a path ending in ``.gz`` is written
        gzip-compressed, as torch does."""
        if not all(isinstance(e, FunctionEvent) for e in self):
            raise TypeError("export_chrome_trace needs FunctionEvents (prof.function_events), not averages")
        pid = os.getpid()
        trace = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "jitgrad"}}]
        for e in sorted(self, key=_trace_order):
            args = {}
            if e.input_shapes:
                args["Input Shapes"] = e.input_shapes
            if e.args is not None:
                args["Record function args"] = e.args
            if e.stack:
                args["Call stack"] = ";".join(e.stack)
            end = e._end if e._end is not None else e._start
            trace.append({"name": e.name, "ph": "X", "ts": e._start / 1000.0, "dur": (end - e._start) / 1000.0,
                          "pid": pid, "tid": e.thread, "cat": e.cat, "args": args})
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "wt") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)

    def __str__(self):
        return self.table()

    def _repr_html_(self) -> str:
        return _html_table(self, profile_memory=self._profile_memory)


def _trace_order(e):
    # parents before children: earlier start first, then the longer (enclosing) event, then recording order
    return (e.thread, e._start, -(e._end if e._end is not None else e._start), e.id)


def _out_nbytes(out) -> int:
    outs = out if isinstance(out, tuple) else (out,)
    return sum(t._data.nbytes for t in outs if isinstance(t, Tensor) and t._base is None)


class _Range:
    """The context manager :meth:`profile.range` returns (one event from ``__enter__`` to ``__exit__``)."""

    __slots__ = ("_p", "_name", "_shapes", "_cat", "_args", "_tok")

    def __init__(self, p, name, shapes, cat, args):
        self._p, self._name, self._shapes, self._cat, self._args = p, name, shapes, cat, args

    def __enter__(self):
        self._tok = self._p._begin(self._name, self._shapes, self._cat, self._args)
        return self

    def __exit__(self, *exc):
        self._p._end(self._tok)
        return False

    def set_device_time(self, us: float):
        """The device time of this range's work (a kernel timed by CUDA events), known after a synchronize."""
        for _, e in self._tok:
            e._cuda_us = us


class profile:
    """Context manager that records every op, backward function and gradient accumulation run inside it.

    Args:
        enabled: False makes it a no-op (nothing is recorded).
        use_cuda: accepted for torch compatibility; this build is CPU-only, so it warns once and times CPU only.
        record_shapes: record each op's input shapes (a list per input, ``[]`` for Python scalars); group
            by them with ``prof.key_averages(group_by_input_shape=True)``.
        with_stack: record the user's call stack (innermost frame first) for each event.
        profile_memory: record the bytes of the tensors each op returns (``cpu_memory_usage``).

    Profiles may nest: while an inner one records, the outer one records the same events too.

    Example::

        >>> import jitgrad as jg
        >>> x = jg.randn((1, 1), requires_grad=True)
        >>> with jg.autograd.profiler.profile() as prof:
        ...     for _ in range(100):  # any normal python code, really!
        ...         y = x ** 2
        ...         y.backward()
        >>> print(prof.key_averages().table(sort_by="self_cpu_time_total"))  # doctest: +SKIP
    """

    def __init__(self, enabled=True, use_cuda=False, record_shapes=False, *, with_stack=False, profile_memory=False):
        global _CUDA_WARNED
        self.enabled, self.use_cuda, self.record_shapes = enabled, use_cuda, record_shapes
        self.with_stack, self.profile_memory = with_stack, profile_memory
        if enabled and use_cuda and not _CUDA_WARNED and _devices.backend("cuda", required=False) is None:
            _CUDA_WARNED = True
            warnings.warn("profile(use_cuda=True): CUDA is not available (no numba-cuda or no GPU); "
                          "only CPU time is recorded", UserWarning, stacklevel=2)
        self.entered = self._done = self._shapes = self._stacks = self._mem = False
        self._events, self._tls, self._prev, self._chain = [], threading.local(), None, (self,)
        self._function_events = None

    # --- the context manager ------------------------------------------------------------------------
    def __enter__(self):
        if not self.enabled:
            return self
        if self.entered:
            raise RuntimeError("profiler context manager is not reentrant")
        self.entered = True
        self._prev = prev = _STATE.active
        self._chain = (self,) + (prev._chain if isinstance(prev, profile) else ())
        self._shapes = any(p.record_shapes for p in self._chain)
        self._stacks = any(p.with_stack for p in self._chain)
        self._mem = any(p.profile_memory for p in self._chain)
        self._t0 = perf_counter_ns()
        set_profiler(self)
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        set_profiler(self._prev)
        self._prev = None
        t = perf_counter_ns() - self._t0
        for e in self._events:
            if e._end is None:   # a range still open (entered in here, not yet exited): close it now
                e._end = t
        self._function_events = EventList(sorted(self._events, key=lambda e: e._start), use_cuda=self.use_cuda,
                                          profile_memory=self.profile_memory)
        self._events = []
        self._done = True
        return False

    # --- the recording hooks (bind, the engine, record_function, compiled code) ---------------------
    def record_op(self, op, args, params, fn):
        """Run ``fn(op, args, params)`` (dispatch's ``_bind``) as one event named ``op.name``."""
        shapes = [list(a.shape) if isinstance(a, Tensor) else [] for a in args] if self._shapes else None
        tok = self._begin(op.name, shapes, "cpu_op", None)
        try:
            out = fn(op, args, params)
        except BaseException:
            self._end(tok)
            raise
        self._end(tok, out)
        return out

    def range(self, name, shapes=None, cat="cpu_op", args=None):
        """A context manager recording one event ``name`` (``shapes``: its input shapes, kept under
        ``record_shapes``; ``cat``: the chrome-trace category; ``args``: a string shown in the trace)."""
        return _Range(self, name, shapes, cat, args)

    def _begin(self, name, shapes, cat, args):
        stack = None
        if self._stacks:
            stack = [f"{frame_file(f.filename)}({f.lineno}): {f.name}" for f in reversed(user_stack(1))]
        t = perf_counter_ns()
        return [p._push(name, shapes, cat, args, t, stack) for p in self._chain]

    def _end(self, tok, out=None):
        t = perf_counter_ns()
        mem = _out_nbytes(out) if out is not None and self._mem else 0
        for p, e in reversed(tok):
            p._pop(e, t, mem)

    def _push(self, name, shapes, cat, args, t, stack):
        tls = self._tls
        st = getattr(tls, "stack", None)
        if st is None:
            st = tls.stack = []
            tls.tid = threading.get_native_id()
        parent = st[-1] if st else None
        e = FunctionEvent(len(self._events), name, tls.tid, t - self._t0,
                          [list(s) for s in shapes] if shapes is not None and self.record_shapes else None,
                          parent, stack if self.with_stack else None, cat, args)
        if parent is not None:
            parent.children.append(e)
        st.append(e)
        self._events.append(e)
        return self, e

    def _pop(self, e, t, mem):
        if e._end is None:
            e._end = t - self._t0
            if self.profile_memory:
                e._mem = mem
        st = self._tls.stack
        if st and st[-1] is e:
            st.pop()
        elif e in st:   # ranges exited out of order: drop this one wherever it is
            st.remove(e)

    # --- results ------------------------------------------------------------------------------------
    @property
    def function_events(self):
        """All recorded events (an EventList of FunctionEvent, ordered by start time)."""
        if not self.enabled:
            return EventList()
        if not self._done:
            raise RuntimeError("Profiler didn't finish running")
        return self._function_events

    def events(self):
        """The recorded events (same as ``function_events``)."""
        return self.function_events

    def table(self, sort_by=None, row_limit=100, header=None, top_level_events_only=False):
        """The recorded events (not averaged) as a table; see :meth:`EventList.table`."""
        return self.function_events.table(sort_by, row_limit, header, top_level_events_only)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """Averages all function events over their keys (name, and input shapes with
        ``group_by_input_shape=True``).  Returns an EventList of FunctionEventAvg."""
        return self.function_events.key_averages(group_by_input_shape, group_by_stack_n)

    def total_average(self):
        """Averages all events: a FunctionEventAvg with key ``"Total"``."""
        return self.function_events.total_average()

    def export_chrome_trace(self, path):
        """Export the events as a Chrome tracing (Trace Event JSON) file, for chrome://tracing or Perfetto."""
        return self.function_events.export_chrome_trace(path)

    @property
    def self_cpu_time_total(self) -> float:
        """Total time spent on CPU (us), the sum of all self times across all the events."""
        return self.function_events.self_cpu_time_total

    def __str__(self):
        return self.table()

    def __repr__(self):
        return repr(self.function_events) if self._done else "<unfinished profiler.profile>"


class record_function:
    """Context manager (and decorator) that adds a label to a block of Python code when running the profiler.

    Costs one attribute read when no profiler is active.  ``args``: an optional string shown in the trace.

    Example::

        >>> import jitgrad as jg
        >>> x = jg.randn((1, 1), requires_grad=True)
        >>> with jg.autograd.profiler.profile() as prof:
        ...     y = x ** 2
        ...     with jg.autograd.profiler.record_function("label-z"):  # label the block
        ...         z = y ** 3
        ...     y.backward()
        >>> "label-z" in [e.key for e in prof.key_averages()]
        True
    """

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._tok = []

    def __enter__(self):
        p = _STATE.active
        self._tok.append(p._begin(self.name, None, "user_annotation", self.args) if p is not None else None)
        tr = _TR.active
        if tr is not None:       # inside @compile: the ops traced here carry the label; replayed at run time
            tr.scope = tr.scope + (self.name,)
        return self

    def __exit__(self, *exc):
        tok = self._tok.pop()
        if tok is not None:
            tok[0][0]._end(tok)
        tr = _TR.active
        if tr is not None and tr.scope and tr.scope[-1] == self.name:
            tr.scope = tr.scope[:-1]
        return False

    def __call__(self, fn):
        name, args = self.name, self.args

        @functools.wraps(fn)
        def wrapper(*a, **k):
            p = _STATE.active
            if _TR.active is not None:
                with record_function(name, args):
                    return fn(*a, **k)
            if p is None:
                return fn(*a, **k)
            tok = p._begin(name, None, "user_annotation", args)
            try:
                return fn(*a, **k)
            finally:
                p._end(tok)
        return wrapper


class emit_nvtx:
    """torch's NVTX-range emitter: every op, backward function, compiled call, CUDA kernel and
    ``record_function`` block inside becomes an NVTX range (seen by Nsight Systems / nvprof), named as the
    profiler names its events.  Needs a CUDA device and the ``nvtx`` package (``pip install 'jitgrad[cuda]'``);
    without them entering it warns that no ranges are emitted and otherwise does nothing.

    Example::

        >>> with jg.autograd.profiler.emit_nvtx():  # doctest: +SKIP
        ...     model(x)
    """

    def __init__(self, enabled=True, record_shapes=False):
        self.enabled, self.record_shapes = enabled, record_shapes
        self.entered = False
        self._prof = None

    def __enter__(self):
        if not self.enabled:
            return self
        if self.entered:
            raise RuntimeError("NVTX annotation context manager is not reentrant")
        self.entered = True
        nvtx = _nvtx_module()
        if nvtx is None:
            warnings.warn("emit_nvtx: NVTX ranges are not emitted: it needs a CUDA device and the nvtx package "
                          "(pip install 'jitgrad[cuda]'); use jg.autograd.profiler.profile() to time ops",
                          UserWarning, stacklevel=2)
            return self
        self._prof = _NvtxRanges(nvtx, record_shapes=self.record_shapes)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.entered = False
        if self._prof is not None:
            self._prof.__exit__(*exc)
            self._prof = None
        return False


def _nvtx_module():
    """The ``nvtx`` package when a CUDA device is there to be profiled, else None."""
    if _devices.backend("cuda", required=False) is None:
        return None
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


class _NvtxRanges(profile):
    """A profile whose every range is also pushed as an NVTX range (what emit_nvtx installs)."""

    def __init__(self, nvtx, record_shapes=False):
        super().__init__(record_shapes=record_shapes)
        self._nvtx = nvtx

    def _push(self, name, shapes, cat, args, t, stack):
        label = name if not (self.record_shapes and shapes) else f"{name}, sizes = {[list(x) for x in shapes]}"
        self._nvtx.push_range(label)
        return super()._push(name, shapes, cat, args, t, stack)

    def _pop(self, e, t, mem):
        if e._end is None:
            self._nvtx.pop_range()
        super()._pop(e, t, mem)


def load_nvprof(path):
    """Open an nvprof trace file.  Not supported: jitgrad is CPU-only and never runs under nvprof, so this
    raises RuntimeError (export a profile with ``prof.export_chrome_trace`` instead)."""
    raise RuntimeError(f"load_nvprof({str(path)!r}): nvprof traces are not supported by jitgrad (CPU-only, no "
                       "CUDA/nvprof); record with jg.autograd.profiler.profile() and use export_chrome_trace()")
