"""Plan -> CUDA kernels + a launcher (the CUDA backend).

The same kind of fusion plan as the CPU backend (``ir/plan.Plan``, planned by the caller without row-wise
chains); ``lowering.lower_plan`` walks it through the CUDA step emitters (``cuda_steps.py``) into launches
(``cuda_launches.Launches``): kernels from ``cuda_kernels.py`` (fused elementwise loops, block-tree reductions
with a second pass, a tiled GEMM, gathers, scatters, copies, anomaly checks), or, for an op with no CUDA form, a
documented host step (the op's NumPy impl on a copy, uploaded back: correct, and slow, so every primitive runs
on a CUDA tensor).

Every value's place comes from ``places.Places``, the place assignment the CPU target shares: view ops cost
nothing (a buffer, an element offset, strides), intermediates live in slots of one device workspace kept with
the graph and reused once their readers ran, state updates that nothing reads afterwards are computed in place,
and outputs are fresh device arrays.  Launch sizes are computed once per graph; kernels are compiled once per
process by identity (their text), with explicit signatures, so ``ptx()`` builds every kernel's PTX with NVVM
and no GPU.  Anomaly checks count non-finite values per check in one device array, read once after the step;
write-backs of state run only when no check failed and no step raised (as on the CPU).
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from ...ir.interpret import run_eqn
from ...ir.plan import Plan
from . import cuda_kernels as K
from . import cuda_steps
from .cuda_launches import Launches
from ..kernels.index_checks import NO_KEY
from ..lowering import lower_plan, step_error
from ..places import Place, Root

_KERNELS: dict = {}        # key -> compiled dispatcher (one per kernel identity, per process)


# settle: shared arrays are taken twice around a barrier (the simulator's lookup races: cuda_kernels._shared)
GPU_CONFIG = {"threads": 256, "blocks": 1024, "tpb": 256, "tile": 16, "settle": False}
SIMULATOR_CONFIG = {"threads": 32, "blocks": 4, "tpb": 16, "tile": 4, "settle": True}


def launch_config():
    """Threads per block for loops, reductions and GEMM tiles: smaller on the simulator (each thread is a
    Python thread there)."""
    from numba import config
    return SIMULATOR_CONFIG if config.ENABLE_CUDASIM else GPU_CONFIG


def _dispatcher(kern: K.CudaKernel):
    fn = _KERNELS.get(kern.key)
    if fn is None:
        from numba import cuda
        ns = {}
        exec(compile(kern.source, f"<jitgrad cuda {kern.name}>", "exec"), ns)
        fn = _KERNELS[kern.key] = cuda.jit(kern.signature)(ns["kernel"])
    return fn


def ptx_of(kern: K.CudaKernel, cc=(9, 0)) -> str:
    """The PTX of one kernel for compute capability ``cc``, built by NVVM (no GPU or driver needed)."""
    from numba import cuda
    ns = {}
    exec(compile(kern.source, f"<jitgrad cuda {kern.name}>", "exec"), ns)
    ptx, _ = cuda.compile_ptx(ns["kernel"], kern.signature, cc=tuple(cc))
    return ptx


STEP_MODULES = (cuda_steps,)     # importing them registers the CUDA target's emitters (``lowering.emits``)


class CudaGraph:
    """A plan compiled for CUDA: ``run(*device_arrays) -> list of device arrays`` (plus, with anomaly checks,
    a host array ``[first failing check id, is_nan]`` as on the CPU).  ``kernels``: the distinct kernels; ``steps``
    the launches and host steps in order; ``places``: where every value lives (``places.Places``)."""

    def __init__(self, plan: Plan, writes=(), config=None):
        self.graph = graph = plan.graph
        self.plan = plan                # planned without row-wise chains: no CUDA emitter for them (yet)
        self.writes = tuple(writes)
        self.cfg = config or launch_config()
        self.checks = [e for e in graph.eqns if e.check is not None and e.outs[0].aval.dtype.is_floating_point]
        self.check_ids = {e: i for i, e in enumerate(self.checks)}
        launches = Launches(plan, self.writes, self.cfg, self.check_ids)
        lower_plan(launches, plan, "cuda")
        launches.finish()
        self.places, self.steps, self.kernels = launches.places, launches.steps, launches.kernels
        self.native, self.index_steps, self.outputs = launches.native, launches.index_steps, launches.outputs
        self._ws = None
        self.run = self._run

    # ---- running --------------------------------------------------------------------------------------------
    def _workspace(self, cuda):
        """id(root) -> a flat device array, for the workspace roots (typed views of the slots of one device
        buffer, allocated on the first call) and the literals (uploaded once)."""
        if self._ws is None:
            buf = cuda.device_array(max(self.places.ws_size, 1), np.uint8)
            ws = {}
            for r in self.places.roots:
                if r.kind == "ws":
                    n = max(int(np.prod(r.shape)) if r.shape else 1, 1)
                    ws[id(r)] = buf[r.offset:r.offset + n * r.dtype.np.itemsize].view(r.dtype.np)
                elif r.kind == "lit":
                    ws[id(r)] = cuda.to_device(np.ascontiguousarray(r.array).reshape(-1) if r.array.size
                                               else np.zeros(1, r.array.dtype))
            self._ws = ws
        return self._ws

    def _run(self, *arrays, prof=None):
        from numba import cuda
        env = dict(self._workspace(cuda))
        for r in self.places.roots:
            if r.kind == "input":
                a = arrays[r.index]
                env[id(r)] = a.reshape(-1) if a.size else cuda.device_array(1, a.dtype)
        fresh = [cuda.device_array(r.shape, r.dtype.np) for r in self.places.fresh]
        for r, a in zip(self.places.fresh, fresh):
            env[id(r)] = a.reshape(-1) if a.size else cuda.device_array(1, r.dtype.np)
        err = cuda.to_device(np.zeros(2 * len(self.checks), np.int64)) if self.checks else None
        env["err"] = err
        # [code, step id, index, dim, the least key claimed (cuda_kernels.claim), its lock]
        ierr = env["ierr"] = cuda.to_device(np.array([0, 0, 0, 0, NO_KEY, 0], np.int64)) if self.index_steps else None
        bad_index = None        # read once, before the first write-back: an index out of range vetoes them
        failed = None
        timed = []      # (profiler range, start event, end event, host ns): kernels timed by CUDA events
        use_cuda = prof is not None and getattr(prof, "use_cuda", False)
        for st in self.steps:
            if (st.guarded or st.state_write) and ierr is not None:
                if bad_index is None:
                    bad_index = ierr.copy_to_host()
                if bad_index[0]:
                    continue
            if st.guarded and err is not None:
                if failed is None:
                    failed = self._first_failure(err)
                if failed[0] < len(self.checks):
                    continue
            cm = prof.range(st.label, None, "kernel") if prof is not None else contextlib.nullcontext()
            with cm:
                if st.kind == "kernel":
                    args = [env[id(a)] if type(a) is Root else (env[a] if type(a) is str else a) for a in st.args]
                    if use_cuda:
                        ev0, ev1 = cuda.event(), cuda.event()
                        t0 = time.perf_counter_ns()
                        ev0.record()
                        _dispatcher(st.kernel)[st.grid, st.block](*args)
                        ev1.record()
                        timed.append((cm, ev0, ev1, time.perf_counter_ns() - t0))
                    else:
                        _dispatcher(st.kernel)[st.grid, st.block](*args)
                elif st.kind == "host":
                    try:
                        self._run_host(st, env, cuda)
                    except IndexError:      # an earlier step's bad index comes first (eager met it first)
                        bad_index = ierr.copy_to_host() if ierr is not None else None
                        if bad_index is None or not bad_index[0]:
                            raise
                        raise step_error(self.index_steps[int(bad_index[1])],
                                         *(int(v) for v in bad_index[[0, 2, 3]])) from None
        if timed:
            cuda.synchronize()
            for cm, ev0, ev1, host_ns in timed:
                ms = ev0.elapsed_time(ev1)
                # the simulator's events carry no time (-1): its launches are synchronous, so the host time is it
                cm.set_device_time(ms * 1000.0 if ms >= 0 else host_ns / 1000.0)
        if ierr is not None:
            bad_index = ierr.copy_to_host() if bad_index is None else bad_index
            if bad_index[0]:
                raise step_error(self.index_steps[int(bad_index[1])], *(int(v) for v in bad_index[[0, 2, 3]]))
        outs = [arrays[i] if kind == "input" else fresh[i] for kind, i in self.outputs]
        if err is not None:
            outs.append(failed if failed is not None else self._first_failure(err))
        return outs

    def _first_failure(self, err):
        """The anomaly counters, read once: ``[smallest failing check id (or n), 1 if it saw a NaN]``."""
        counts = err.copy_to_host().reshape(-1, 2)
        bad = np.nonzero(counts[:, 0])[0]
        if not len(bad):
            return np.array([len(self.checks), 0], np.int64)
        return np.array([bad[0], 1 if counts[bad[0], 1] else 0], np.int64)

    def _host_view(self, p: Place, env, cache):
        r = p.root
        flat = cache.get(id(r))
        if flat is None:
            flat = cache[id(r)] = env[id(r)].copy_to_host().reshape(-1)
        item = p.dtype.np.itemsize
        if int(np.prod(p.shape)) == 0:
            return np.empty(p.shape, p.dtype.np)
        return np.lib.stride_tricks.as_strided(flat[p.offset:], p.shape, [s * item for s in p.strides])

    def _run_host(self, st, env, cuda):
        cache = {}
        vals = [self._host_view(p, env, cache) for p in st.ins]
        with np.errstate(all="ignore"):
            res = run_eqn(st.eqn, vals)
        p = st.outs[0]
        if p.root.kind == "fresh" or p.root.kind == "ws":
            dst = env[id(p.root)]
            src = np.ascontiguousarray(res, p.dtype.np).reshape(-1)
            if src.size:
                dst[p.offset:p.offset + src.size].copy_to_device(src)

    def wait(self, timeout=None) -> bool:
        """CUDA graphs build synchronously (kernels compile at their first launch): always ready."""
        return True

    def profiled_run(self, prof):
        return lambda *arrays: self._run(*arrays, prof=prof)

    # ---- introspection -------------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        src = "# CUDA target\n# fusion plan\n# " + str(self.plan).replace("\n", "\n# ") + "\n\n# launches\n"
        for st in self.steps:
            if st.kind == "kernel":
                src += f"#   {st.kernel.name}[{st.grid}, {st.block}]  # {st.label}\n"
            else:
                src += f"#   host step: {st.label}\n"
        for k in self.kernels.values():
            src += f"\n# kernel {k.name}: {k.label}\n{k.source}\n"
        return src

    def ptx(self, cc=(9, 0)) -> dict:
        """``{kernel name: PTX}`` for every kernel of the graph, built by NVVM for compute capability ``cc``."""
        return {k.name: ptx_of(k, cc) for k in self.kernels.values()}


__all__ = ["CudaGraph", "STEP_MODULES", "ptx_of", "launch_config", "GPU_CONFIG", "SIMULATOR_CONFIG"]
