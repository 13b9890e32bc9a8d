"""Plan -> kernels + a driver (the CPU backend).

The caller plans the graph (``ir.passes.fusion_plan``); ``lay_out`` walks the plan through the CPU step emitters
(``lowering.lower_plan`` over the modules in ``STEP_MODULES``, which register them) into a ``layout.Program``.
Each fusion group (``ir/plan.Group``) becomes a loop kernel keyed by its structure (``loops.py``); matmul
calls BLAS ``?gemm`` directly (transposed operands through its transpose flags); view ops cost nothing at run
time (``layout.py``).  When every step has a native form, a small C entry (``entry.py``, LLVM IR) calls the
kernels through their addresses (one native call per call; its text is free of sizes, so it is shared across
batch sizes);
otherwise a Python driver runs the steps, calling the same kernels, and the NumPy impls of the rest.
Intermediates live in a workspace kept between calls; only outputs handed to the user are fresh arrays.
Fastmath never includes ``nnan``/``ninf``, so NaN/inf propagate (anomaly mode relies on it).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import warnings
from typing import NamedTuple

import numpy as np

from ...ir.interpret import ScopeTracker, run_eqn
from ...ir import settings
from ...ir.ops import blas, blas_library
from ...ir.plan import Plan
from . import batch_steps, batched_gemm, collective_steps, gemm_steps, loop_steps, region_steps, round_groups
from ..native import build_thread, graph_build, threads
from .layout import Program
from ..lowering import lower_plan, step_error
from ..kernels import small_gemm
from ..kernels.loops import FASTMATH, PARALLEL_MIN, gen_group  # noqa: F401  (re-exported)
from .output_pool import take


class Launch(NamedTuple):
    """A step of a compiled call (``CompiledGraph.launches``): its label, kind (``fused``, ``rows``, ``copy``...
    for loop kernels; ``gemm``, ``bgemm``, ``py``, ``native``...), whether it runs on the worker pool in this call,
    and the most threads it runs on at once; ``work``: its size in the plan's cost unit as the parallel choice
    saw it; ``routine``: a matrix product's routine (``sgemm``/``dgemm``: BLAS; ``small_sgemm``/``small_dgemm``:
    ``kernels/small_gemm.py``); ``gated``: a parallel-capable step that decides per call, by its work, whether
    to take the pool; ``elements``: a gated loop's elements, which the per-call test compares with
    ``workpool.grain()`` (0 for other steps); ``joined``: it runs in the pool round of a step before it (its chunks
    queued into that round: ``round_groups.py``), so it wakes no round of its own."""
    label: str
    kind: str
    parallel: bool
    threads: int
    work: float = 0.0
    routine: str = ""
    gated: bool = False
    elements: int = 0
    joined: bool = False


class CodegenWarning(UserWarning):
    """Numba code generation failed for a graph; it runs on the reference interpreter instead."""


ALLOCATIONS = {"workspaces": 0, "fresh_arrays": 0}    # counted, so tests can check reuse (never timed)
_KERNEL_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_GEMM_CALL = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 13))


_NUMBA_SPLITS: dict = {}        # kernel key -> whether Numba builds it (its prange splits the loop every call)


def _split_by_numba(k) -> bool:
    """Whether parallel kernel ``k`` is built by Numba (``ir_loops`` cannot lower it), which ignores its gate."""
    got = _NUMBA_SPLITS.get(k.key)
    if got is None:
        from ..native import llvm_build
        got = _NUMBA_SPLITS[k.key] = not llvm_build.translatable(k.key, k.source)
    return got


def blas_address(name: str, quick=False) -> int:
    """Address of a GEMM step's routine: SciPy's Fortran BLAS ``sgemm``/``dgemm`` (the library eager matmul calls
    too), or ``small_sgemm``/``small_dgemm`` (``kernels/small_gemm.py``, same calling convention).  ``quick``: a
    quick build's (see ``CompiledGraph._optimise``), which takes BLAS's routine while the small GEMMs' module is
    not linked yet (building it costs a cold process ~0.3-0.6 s, most of it Python) and swaps it in later."""
    if name.startswith("small_"):
        if quick and not small_gemm.linked(name[6:]):
            return blas_library.gemm_address(small_gemm.blas_routine(name[6:]))
        return small_gemm.address(name[6:], blas_library.gemm_address)
    return blas_library.gemm_address(name)


def _numba_array_type(d, ndim) -> str:
    return f"Array({'boolean' if d.name == 'bool' else d.np.name}, {ndim}, 'C')"


_background = build_thread.queue_background

# the CPU target's step modules: importing them registers their emitters (``lowering.emits``)
STEP_MODULES = (loop_steps, batch_steps, gemm_steps, batched_gemm, region_steps, collective_steps)


def lay_out(plan: Plan, writes=(), parallel=None, check_ids=None) -> Program:
    """The CPU program of ``plan``: every entry through its registered emitter, then outputs and write-backs."""
    prog = Program(plan, writes, parallel, check_ids)
    lower_plan(prog, plan, "cpu")
    prog.finish()
    return prog


class CompiledGraph:
    """A plan compiled for the CPU: ``run(*arrays) -> sequence of arrays``; ``source`` is what was generated.

    ``kernels``: the distinct loop kernels; ``nopython``: whether the C entry runs the whole graph."""

    def __init__(self, plan: Plan, writes=(), background=None, parallel=None, phase=None, disk_cache=True,
                 program=None):
        self.graph = graph = plan.graph
        self.writes = tuple(writes)
        self.plan = plan
        # anomaly mode: the values that must be finite, by id (the err slot reports the smallest failing id)
        self.checks = [e for e in graph.eqns if e.check is not None and e.outs[0].aval.dtype.is_floating_point]
        self.check_ids = {e: i for i, e in enumerate(self.checks)}
        # (``program``: laid out already, with symbolic sizes: ``sized.py``)
        self.program = program if program is not None else lay_out(plan, self.writes, parallel, self.check_ids)
        self.kernels = list(self.program.kernels.values())
        self.nopython = self.program.native
        self.driver_source, self.signature = self._driver_source() if self.nopython else (None, None)
        # the entry's step table (its code is a loop over it: ``entry.step_table``)
        self.S = self._step_table() if self.nopython else None
        self.module_source = "\n\n".join(k.source for k in self.kernels) + (
            "\n\n" + self.driver_source if self.driver_source else "")
        self.names = {g.index: g.name for g in self.plan.groups}
        self.run = None          # set once built; until then callers use the interpreter
        self._phase = phase      # name -> context manager: profiler events for a synchronous build
        self.disk_cache = disk_cache
        self.error = None
        self.seconds = 0.0
        self._ws = None
        self.entry_address, self.call_lock = None, None     # (set with ``run``: sized.py binds them per sizes)
        # [1, step id, index, dim] after a gather/scatter met an index out of range (codegen/kernels/loops.py)
        self._ierr = np.zeros(6, np.int64)     # kernels/index_checks.py: a record, then a parallel loop's claim
        self._busy = False
        self._lock = threading.Lock()
        self.on_ready = []       # callables(cg) run once its code is ready (from the thread that built it)
        # a background build's first tier runs quick code (``build.py``): ``optimising`` until its kernels' optimised
        # code is swapped in, then ``on_optimised``'s callables(cg) run (from the build thread)
        self.optimising = False
        self.on_optimised = []
        self.label = "graph"     # what it is in the build thread's job log ("lowering": ``jit/graph_code.sized_graph``)
        # (the entry's identity: its listing with the step table, one entry per graph as its files and counts
        # assume, though graphs of the same step kinds compile to the same code: ``entry.code_listing``)
        self.code = graph_build.GraphCode(self.kernels, self.driver_source if self.nopython else None, disk_cache,
                                         self._entry_build)
        if background is None:
            background = os.environ.get("JITGRAD_BACKGROUND_COMPILE", "1") != "0"
        if settings.STATE.deterministic:
            background = False      # no switch whose timing reaches the bits (``use_deterministic_algorithms``)
        t0 = time.perf_counter()
        if self.code.try_load():
            # every kernel and the entry are compiled (on disk or in this process): linking them takes
            # milliseconds and needs no Numba, so the very first call runs compiled
            with (phase("compile/cache_hit") if phase else contextlib.nullcontext()):
                self._ready(t0)
            background = False
        elif not background:
            self._build(False)
        # background: the build is queued by ``start()``, which the caller invokes *after* serving the first call
        self.pending = background and self.run is None and self.error is None

    # ---- building -----------------------------------------------------------------------------------------
    def start(self):
        """Queue the background build (once), or its optimised tier (a forked child's, whose parent had queued it)."""
        if self.pending:
            self.pending = False
            _background(self, build_thread.OPTIMISE if self.optimising else build_thread.FIRST)

    def drop(self):
        """No call will run this graph (``jit/symbolic_entries.drop_static_builds``): a background build not done yet
        stops between two kernels, or at its start; the kernels it compiled stay for the graphs that share them."""
        if self.run is None:
            self.code.dropped = True

    def _build(self, background: bool):
        if self.code.dropped:
            return
        if self.optimising:         # queued again after the quick build's switch: the optimised tier
            return self._optimise()
        t0 = time.perf_counter()
        if any(k.parallel for k in self.kernels):
            threads.configure()     # the threading layer, before any parallel kernel can launch (it imports Numba)
        try:
            phase = self._phase if (self._phase is not None and not background) else None
            with (phase("compile/numba") if phase else contextlib.nullcontext()):
                self.code.build(background, self.kernel_work() if background else None)
            self.optimising = bool(self.code.quick_keys)
            self._ready(t0)
        except build_thread.BuildStopped:     # the process is exiting: build processes finish the job for the next run
            return
        except BaseException as e:  # noqa: BLE001 - any codegen failure falls back to the interpreter, loudly
            self.fail(e)
            return
        if self.optimising:         # behind every first build queued meanwhile (their calls wait for them)
            _background(self, build_thread.OPTIMISE)

    def _optimise(self):
        """The optimised tier of a quick build: each kernel built at O3 and swapped into the address table, where
        the next call's entry reads it (one aligned word per kernel: a call running meanwhile runs either build
        of it, both the same function), then ``on_optimised``.  An error leaves the quick code in place."""
        try:
            self.code.optimise(self._swap, self.kernel_work())
            for n, st in enumerate(self.program.steps):     # small products: their own module (``blas_address``)
                if st.kind in ("gemm", "bgemm") and st.gemm.startswith("small_"):
                    self.F[n] = blas_address(st.gemm)
        except build_thread.BuildStopped:
            return
        except Exception as e:  # noqa: BLE001 - the quick code keeps serving; say why once
            warnings.warn(f"jitgrad: the optimised build of a graph failed ({type(e).__name__}: {e}); its quick "
                          f"build keeps serving it", CodegenWarning, stacklevel=2)
            self.code.quick_keys.clear()
        self.optimising = False
        for fn in self.on_optimised:
            fn(self)

    def kernel_work(self) -> dict:
        """Build key -> the work a call's launches of that kernel do, in the plan's cost unit (at the sizes the
        program was laid out for, or their hints)."""
        from ...ir.symbolic import hint_of
        work = {}
        for st in self.program.steps + self.program.writes:
            if st.kind == "kernel":
                key = self.code.kkeys[st.kernel.key]
                work[key] = work.get(key, 0.0) + float(hint_of(st.work))
        return work

    def _swap(self, key, address):
        """Kernel ``key``'s (a build key) optimised code at ``address`` replaces its quick code in the tables."""
        kkeys = self.code.kkeys
        for n, st in enumerate(self.program.steps + self.program.writes):
            if st.kind == "kernel" and kkeys[st.kernel.key] == key:
                self._addrs[st.kernel.key] = address
                self.F[n] = address

    def _ready(self, t0):
        """Every kernel and the entry have code in this process: fill the tables, make ``run``."""
        from . import entry
        self._addrs, entry_addr = self.code.addresses()
        self.entry_address = entry_addr
        self.driver = None
        self._tables()
        if self.nopython and entry.layout_ok():
            # one parallel launch at a time per process; BLAS on one thread while the cores are contended
            steps = self.program.steps + self.program.writes
            lock = self.call_lock = threads.call_guard(
                any(k.parallel for k in self.kernels) or entry.has_pool_steps(self.program),
                threads.blas_threaded(self.program.steps), any(st.split for st in self.program.steps),
                any(st.gate is not None for st in steps))
            self.run = entry.caller(entry_addr, self.program, len(self.checks), self.A, self.F, self.OFF, self.S,
                                    self._python_run, self._ierr, self.step_error, lock)
        else:
            self.run = self._python_run
        self.seconds = time.perf_counter() - t0
        for fn in self.on_ready:    # the functions using this graph count its build (jit/build_policy.py)
            fn(self)

    def launches(self, sizes=None, workers=None) -> list:
        """One ``Launch`` per step a call runs, in order (the write-backs last): what runs where, counted and never
        timed.  ``parallel``: whether the step runs on the worker pool in a call of these sizes (a gated step's
        test, ``workpool.takes``, at the pool's threshold now; ``sizes``: symbol name -> value for a program laid
        out with symbolic sizes, else the sizes it was laid out for).  ``threads``: the most threads the step
        runs on at once in this process: the pool's workers for a parallel kernel or a parallel batch of small
        products (one thread each), OpenBLAS's threads for a GEMM large enough for OpenBLAS to split, else 1.
        ``workers``: the pool's size to decide for instead of this process's (what the same program runs where at
        two threads, asked at one: ``benchmarks/step_work.py``)."""
        from ..native import workpool
        from ...ir.symbolic import concretize, hint_of
        pool = workers or workpool.threads() or workpool.default_threads()
        if settings.STATE.num_threads and not workers:      # (set_num_threads: at most so many, at run time too)
            pool = min(pool, settings.STATE.num_threads)
        ctl = blas_library.thread_control()
        blas_n = max(1, int(ctl[0]())) if ctl else 1

        def size(x):
            return concretize(x, sizes) if sizes else hint_of(x)
        # a pool of one worker runs every chunk on the calling thread (the kernels' and the entry's launch test
        # ``jitgrad_wq_threads > 1``): nothing of ours runs parallel then, whatever the kernels could do
        ours = (workers or workpool.threads() or workpool.default_threads()) > 1
        out = []
        for st in self.program.steps + self.program.writes:
            gated = st.gate is not None
            if st.kind == "kernel":
                par = bool(st.kernel.parallel) and (ours or _split_by_numba(st.kernel))
                if gated and not workpool.takes(size(st.gate[0]), st.gate[1]):
                    par = _split_by_numba(st.kernel)      # (Numba's prange splits every call)
                if st.units == 1:       # a batch of one unit: its one chunk runs on the calling thread
                    par = False
                out.append(Launch(st.label, st.kernel.kind, par, pool if par else 1, st.work, gated=gated,
                                  elements=int(size(st.gate[0])) if gated else 0))
            elif st.kind in ("gemm", "bgemm"):
                par = bool(st.parallel) and ours
                if gated and st.split:      # (the whole product's work, its blocks of any size)
                    par = ours and workpool.takes_split(size(st.gate[0]), size(st.gate[1]))
                elif gated:
                    par = ours and workpool.takes_batch(size(st.gate[0]), size(st.gate[1]), blas.BLAS_THREADED_MACS)
                big = threads.blas_threaded([st], size)
                out.append(Launch(st.label, st.kind, par, pool if par else blas_n if big else 1, st.work, st.gemm,
                                  gated))
            else:
                out.append(Launch(st.label, st.kind, False, 1))
        pool_joins = workpool.can_join() or (bool(workers) and workpool.POOL == "spin" and workpool.PRIVATE_POOL)
        joined = round_groups.launch_joins(round_groups.entry_joins(self.program),
                                           [la.parallel for la in out], pool, pool_joins)
        return [la._replace(joined=True) if j else la for la, j in zip(out, joined)]

    def step_error(self) -> Exception:
        """The error of the last call's first failing step, as eager mode raises it, naming the op, the shapes and
        the user's line: IndexError for an index out of range (gather/scatter), RuntimeError("ZeroDivisionError")
        for a zero integer divisor."""
        code, sid, value, dim = (int(v) for v in self._ierr[:4])
        return step_error(self.program.index_steps[sid], code, value, dim)

    def fail(self, e):
        """Give up on compiled code for this graph: warn once, and let callers use the interpreter."""
        detail = f"{type(e).__name__}: {e}"
        self.error = detail
        self.run = None
        warnings.warn(f"jitgrad: Numba code generation failed for a graph ({', '.join(self.names.values())[:200]});"
                      f" running it on the reference interpreter instead.\n{detail}", CodegenWarning, stacklevel=3)

    def wait(self, timeout=None, optimised=True) -> bool:
        """Block until the background build finished (True if compiled code is available); ``optimised``: and a
        quick build's optimised tier (False: until the switch only)."""
        t0 = time.perf_counter()
        while (self.run is None and self.error is None) or (optimised and self.optimising):
            if self.pending:
                self.start()
            if timeout is not None and time.perf_counter() - t0 > timeout:
                break
            if (self.run is not None and build_thread.stopping()) or (self.run is None and self.code.dropped):
                break
            build_thread.serve_caller()     # (the optimised tier's fork: graph_build.GraphCode.optimise)
            time.sleep(0.005)
        return self.run is not None

    # ---- tables and workspace -----------------------------------------------------------------------------
    def _tables(self, ws=None):
        """The argument table with final addresses (workspace, literals, BLAS parameters), the kernel address
        table and the per-call offsets (the fresh outputs come in as arrays: their sizes need no table).  ``ws``: another workspace (a concurrent call)."""
        p = self.program
        if ws is None:
            if self._ws is None:
                self._ws = np.empty(max(p.ws_size, 64) + 64, np.uint8)
                ALLOCATIONS["workspaces"] += 1
            ws = self._ws
        base = ws.ctypes.data
        base += (-base) % 64
        params = np.frombuffer(bytes(p.params) or b"\0", np.uint8).copy()
        A = np.array(p.table if p.table else [0], np.int64)
        OFF = np.zeros_like(A)
        for slot, root, off in p.ws_slots:
            A[slot] = base + root.offset + off
        for slot, arr, off in p.lit_slots:
            A[slot] = arr.ctypes.data + off
        for slot, off in p.param_slots:
            A[slot] = params.ctypes.data + off
        for slot in p.ierr_slots:
            A[slot] = self._ierr.ctypes.data
        for slot, root, off in p.dynamic:
            OFF[slot] = off
        F = []
        for st in p.steps + p.writes:
            if st.kind == "kernel":
                F.append(self._addrs[st.kernel.key])
            elif st.kind in ("gemm", "bgemm"):
                F.append(blas_address(st.gemm, self.optimising))
            elif st.kind == "native":
                F.append(st.native)
            else:
                F.append(0)
        tables = (A, np.array(F or [0], np.int64), OFF)
        self._keep = (params, ws)
        if ws is self._ws:
            self.A, self.F, self.OFF = tables
            self._params, self._base = params, base
        return tables + (params, base)

    # ---- the C entry ------------------------------------------------------------------------------------------
    def _driver_source(self):
        from .entry import entry_source
        return entry_source(self.program, len(self.graph.inputs), len(self.checks)), None

    def _step_table(self):
        from .entry import step_table
        return step_table(self.program, len(self.graph.inputs), len(self.checks))

    def _entry_build(self, key):
        from .entry import compile_entry
        return compile_entry(self.program, len(self.graph.inputs), len(self.checks), key)

    # ---- the Python driver (ops without a native form; the profiler's instrumented run) ----------------------
    def _python_run(self, *arrays, prof=None):
        if not self._writable_targets(arrays):
            return None
        with self._lock:
            busy, self._busy = self._busy, True
        if busy:        # a concurrent (or re-entrant) call: its own workspace and tables
            ws = np.empty(max(self.program.ws_size, 64) + 64, np.uint8)
            ALLOCATIONS["workspaces"] += 1
            A, F, OFF, params, base = self._tables(ws)
            return self._execute(arrays, A, F, OFF, base, prof, keep=(ws, params))
        try:
            return self._execute(arrays, self.A, self.F, self.OFF, self._base, prof)
        finally:
            self._busy = False

    def _writable_targets(self, arrays):
        """In-place write-backs need the user's own contiguous buffers (else: the interpreter, for this call)."""
        for _, i in self.writes:
            if not arrays[i].flags.c_contiguous:
                return False
        return True

    def _execute(self, arrays, A, F, OFF, base, prof, keep=None):
        p = self.program
        arrays = [np.ascontiguousarray(a) for a in arrays]
        fresh = [take(r.shape, r.dtype.np) for r in p.fresh]
        ALLOCATIONS["fresh_arrays"] += len(fresh)
        self._ierr[0] = 0
        for slot, r, _ in p.dynamic:
            arr = arrays[r.index] if r.kind == "input" else fresh[r.index]
            A[slot] = arr.ctypes.data + OFF[slot]
        err = None
        if self.checks:
            err = np.array([len(self.checks), 0], np.int64)
            for s in p.err_slots:
                A[s] = err.ctypes.data
        a_addr = A.ctypes.data
        sc = ScopeTracker(prof) if prof is not None else None
        for n, st in enumerate(p.steps + p.writes):
            if (st.guarded or st.state_write) and self._ierr[0] or st.guarded and err is not None \
                    and err[0] != len(self.checks):
                continue
            if sc is not None:
                sc.enter(tuple(st.scope))
            cm = prof.range(st.label, st.shapes, "kernel") if prof is not None else contextlib.nullcontext()
            with cm:
                if st.kind == "kernel" and st.kernel.parallel:
                    with threads.LAUNCH_LOCK:
                        _KERNEL_CALL(int(F[n]))(a_addr + 8 * st.block)
                elif st.kind == "kernel" or st.kind == "native":
                    _KERNEL_CALL(int(F[n]))(a_addr + 8 * st.block)
                elif st.kind == "gemm":
                    _GEMM_CALL(int(F[n]))(*[int(x) for x in A[st.block:st.block + 13]])
                elif st.kind == "bgemm":      # (the Python driver only: abi imports Numba, a warm start does not)
                    from ..kernels.abi import call_gemm_batched
                    call_gemm_batched(int(F[n]), a_addr + 8 * st.block)
                elif st.kind == "pycopy":
                    np.copyto(self._view(st.out, arrays, fresh, base), self._view(st.ins[0], arrays, fresh, base),
                              casting="unsafe")
                else:
                    vals = [self._view(pl, arrays, fresh, base) for pl in st.ins]
                    e = st.eqn
                    try:
                        with np.errstate(all="ignore"):
                            res = run_eqn(e, vals) if e.op.nout == 1 else e.op.impl(*vals, **e.params)
                    except IndexError as err:      # raised before any state write-back ran
                        if self._ierr[0]:       # an earlier step's bad index comes first (eager met it first)
                            raise self.step_error() from None
                        where = f"\n  at {e.loc.where()} in {e.loc.function}: {e.loc.text}" if e.loc else ""
                        raise IndexError(f"{e.op.name}: {err} (shapes {[list(v.shape) for v in vals]}; compiled "
                                         f"code, no state was updated){where}") from None
                    for pl, r in zip(st.out, (res,) if e.op.nout == 1 else res):
                        np.copyto(self._view(pl, arrays, fresh, base), r, casting="unsafe")
        if sc is not None:
            sc.close()
        if self._ierr[0]:
            raise self.step_error()
        outs = [arrays[i] if kind == "input" else fresh[i] for kind, i in p.outputs]
        if err is not None:
            outs.append(err)
        return outs

    def _view(self, pl, arrays, fresh, base):
        """A NumPy view of a place (Python driver only)."""
        r = pl.root
        if r.kind == "input":
            flat = arrays[r.index].reshape(-1)
        elif r.kind == "fresh":
            flat = fresh[r.index].reshape(-1)
        elif r.kind == "lit":
            flat = r.array.reshape(-1)
        else:
            n = int(np.prod(r.shape))
            buf = (ctypes.c_char * max(n * r.dtype.np.itemsize, 1)).from_address(base + r.offset)
            flat = np.frombuffer(buf, r.dtype.np, count=n)
        item = pl.dtype.np.itemsize
        if flat.dtype != pl.dtype.np:
            flat = flat.view(pl.dtype.np)
        if flat.size == 0 or int(np.prod(pl.shape)) == 0:
            return np.empty(pl.shape, pl.dtype.np)
        return np.lib.stride_tricks.as_strided(flat[pl.offset:], pl.shape, [s * item for s in pl.strides])

    def profiled_run(self, prof):
        """The instrumented run: one profiler event per kernel and BLAS call."""
        return lambda *arrays: self._python_run(*arrays, prof=prof)

    @property
    def source(self) -> str:
        src = "# fusion plan\n# " + str(self.plan).replace("\n", "\n# ") + "\n\n"
        for k in self.kernels:
            src += f"# kernel {k.name}: {k.label}\n{k.source}\n\n"
        if self.nopython:
            src += self.driver_source
        else:
            src += "# Python driver (some steps have no native form):\n" + "\n".join(
                f"#   {st.kind:7s} {st.label}" for st in self.program.steps)
        return src


__all__ = ["CompiledGraph", "Launch", "lay_out", "STEP_MODULES", "CodegenWarning", "gen_group", "FASTMATH", "PARALLEL_MIN", "ALLOCATIONS"]
