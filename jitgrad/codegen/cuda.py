"""Graph -> CUDA kernels + a launcher (the CUDA backend).

The same fusion plan as the CPU backend (``ir/passes/fuse.py``); each step becomes a kernel from
``cuda_kernels.py`` (fused elementwise loops, block-tree reductions with a second pass, a tiled GEMM, gathers,
scatters, copies, anomaly checks), or, for an op with no CUDA form, a documented host step (the op's NumPy impl
on a copy, uploaded back: correct, and slow, so every primitive runs on a CUDA tensor).

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

from ..ir.graph import Graph
from ..ir.interpret import run_eqn
from ..ir.passes.fuse import Group, plan as fusion_plan
from .lowering import lower_plan, step_error
from .places import Place, Places, Root, bcast_strides, c_strides, coalesce
from . import cuda_kernels as K

_KERNELS: dict = {}        # key -> compiled dispatcher (one per kernel identity, per process)


GPU_CONFIG = {"threads": 256, "blocks": 1024, "tpb": 256, "tile": 16}
SIMULATOR_CONFIG = {"threads": 32, "blocks": 4, "tpb": 16, "tile": 4}


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


class Step:
    """A kernel launch (``kernel``, ``grid``, ``block``, ``args``: ints or Roots) or a host step (``eqn``).
    ``guarded``: a write-back; ``state_write``: writes a state input in place (both skipped once a step raised)."""
    __slots__ = ("kind", "kernel", "grid", "block", "args", "label", "eqn", "ins", "outs", "guarded", "scope",
                 "state_write")

    def __init__(self, kind, label, kernel=None, grid=0, block=0, args=(), eqn=None, scope=()):
        self.kind, self.label, self.kernel, self.grid, self.block, self.args = kind, label, kernel, grid, block, args
        self.eqn, self.ins, self.outs, self.guarded, self.scope = eqn, (), (), False, scope
        self.state_write = False


class CudaGraph:
    """A graph compiled for CUDA: ``run(*device_arrays) -> list of device arrays`` (plus, with anomaly checks,
    a host array ``[first failing check id, is_nan]`` as on the CPU).  ``kernels``: the distinct kernels."""

    def __init__(self, graph: Graph, writes=(), config=None):
        self.graph = graph
        self.writes = tuple(writes)
        self.cfg = config or launch_config()
        self.plan = fusion_plan(graph, rowwise=False)      # no row-wise kernels on CUDA (yet)
        self.checks = [e for e in graph.eqns if e.check is not None and e.outs[0].aval.dtype.is_floating_point]
        self.check_ids = {e: i for i, e in enumerate(self.checks)}
        self.places = Places(graph, self.plan, self.writes, self.check_ids, copy=self._copy)
        self.steps, self.kernels = [], {}
        self.native = True
        self.index_steps = []       # eqns of the bounds-checked steps (gather, scatter), by step id
        lower_plan(self, self.plan)
        self.outputs = [self.places.output(v) for v in graph.outputs]      # ("input", k) | ("fresh", j)
        for src, dst in self.places.write_backs():
            st = self._copy(src, dst, "write-back")
            self.steps.remove(st)       # after every step, and only when no check failed and no step raised
            st.guarded = True
            self.steps.append(st)
        self._ws = None
        self.run = self._run

    def place(self, v) -> Place:
        return self.places.place(v)

    # ---- steps --------------------------------------------------------------------------------------------
    def _add(self, kern, n, args, label, scope=(), grid=None, block=None) -> Step:
        kern = self.kernels.setdefault(kern.key, kern)
        if grid is None:
            t = self.cfg["threads"]
            grid, block = max(1, min(-(-n // t), self.cfg["blocks"])), t
        st = Step("kernel", label, kern, grid, block, list(args), scope=scope)
        if n == 0:
            st.kind = "empty"
        self.steps.append(st)
        return st

    @staticmethod
    def _operand(place, strides):
        return [place.root, place.offset] + [int(s) for s in strides]

    def _copy(self, src: Place, dst: Place, label) -> Step:
        it = dst.shape
        sst = bcast_strides(src, it) if src.shape != it else list(src.strides)
        shape, (sst, dst_st) = coalesce(it, [sst, list(dst.strides)])
        n = int(np.prod(it)) if it else 1
        kern = K.gen_copy(src.dtype, dst.dtype, len(shape))
        return self._add(kern, n, [n] + shape + self._operand(src, sst) + self._operand(dst, dst_st), label)

    # the emitter of each step kind (codegen/lowering.py)
    EMITTERS = {"fused": "_group", "view": "_view", "gemm": "_gemm", "cat": "_cat", "gather": "_gather",
                "scatter": "_scatter", "scan": "_scan", "host": "_host"}

    def after_step(self, n, s):
        if not isinstance(s, Group):
            self._check(s, self.places[s.outs[0]])

    def _check(self, e, place: Place):
        if e not in self.check_ids:
            return
        shape, (sts,) = coalesce(place.shape, [list(place.strides)])
        n = int(np.prod(place.shape)) if place.shape else 1
        self._add(K.gen_check(place.dtype, len(shape)), n, [n] + shape + self._operand(place, sts) +
                  ["err", self.check_ids[e]], f"check {e.op.name}", e.scope)

    def _group(self, g: Group):
        op = self.places.group(g)
        red, shape, size, ro, out_places = g.reduce, op.shape, op.size, op.red_out, op.out_places
        args = []
        for p, s_ in zip(op.in_places, op.in_strides):
            args += self._operand(p, s_)
        kern = K.gen_group(g, len(shape), op.red_axes, self.check_ids, self.cfg["tpb"])
        checks = [self.check_ids[e] for e in g.eqns if e in self.check_ids and e.outs[0].aval.dtype.is_floating_point]
        tail = (["err"] + checks) if checks else []
        if kern.guards:         # zero integer divisors: the index-error array, one step id per guard
            tail += ["ierr"]
            for e in kern.guards:
                tail.append(len(self.index_steps))
                self.index_steps.append(e)
        label = f"{g.name} {g.lines()}".strip()
        scope = g.all_eqns[0].scope
        if red is None:
            for p, s_ in zip(out_places, op.out_strides):
                args += self._operand(p, s_)
            self._add(kern, size, [size] + shape + args + tail, label, scope).state_write = op.in_place
        else:
            M = int(np.prod(red.outs[0].aval.shape)) if red.outs[0].aval.shape else 1
            Kn = size // M if M else 0
            tpb = self.cfg["tpb"]
            P = 1 if Kn <= 4 * tpb else min(-(-Kn // (4 * tpb)), 64)
            rp = out_places[ro]
            target = rp if P == 1 else self.places.scratch((M * P,), rp.dtype)
            for j, (p, s_) in enumerate(zip(out_places, op.out_strides)):
                args += self._operand(target if j == ro else p, s_)
            blocks = max(1, min(M * P, 65535))
            st = self._add(kern, size, [M, Kn, P] + shape + args + tail, label, scope, grid=blocks, block=tpb)
            st.state_write = op.in_place
            if size == 0:   # an empty reduction: the identity everywhere, computed by a host step
                self.steps.remove(st)
                return self._host_fill(red, rp)
            if P > 1:
                fin = K.gen_finish(red.op.name, rp.dtype, tpb)
                self._add(fin, M, [M, P, target.root, rp.root, rp.offset], f"finish {red.op.name}", scope,
                          grid=max(1, min(M, 65535)), block=tpb)
            if red in self.check_ids:
                self._check(red, rp)

    def _host_fill(self, e, place):
        st = Step("host", e.op.name, eqn=e, scope=e.scope)
        st.ins, st.outs = tuple(self.place(v) for v in e.ins), (place,)
        self.native = False
        self.steps.append(st)

    def _view(self, e):
        return self.places.view(e) is not None     # not a view of its input: the op runs (a host step)

    def _gemm(self, e):
        a, b = e.ins
        out = e.outs[0]
        if not (out.aval.dtype.is_floating_point and a.aval.dtype is b.aval.dtype and out.aval.size > 0):
            return False        # the tiled GEMM takes floats of one dtype: NumPy's matmul on the host
        pa, pb = self.place(a), self.place(b)
        ash, bsh = a.aval.shape, b.aval.shape
        # 1-D operands: a row vector on the left, a column on the right (stride 0 along the added dim)
        a_sh, a_st = ((1,) + ash, (0,) + pa.strides) if len(ash) == 1 else (ash, pa.strides)
        b_sh, b_st = (bsh + (1,), pb.strides + (0,)) if len(bsh) == 1 else (bsh, pb.strides)
        M, Kd, N = a_sh[-2], a_sh[-1], b_sh[-1]
        batch = tuple(np.broadcast_shapes(a_sh[:-2], b_sh[:-2]))
        nb = len(batch)

        def bstrides(sh, st):
            lead = nb - (len(sh) - 2)
            return [0] * lead + [0 if sh[k] == 1 else st[k] for k in range(len(sh) - 2)]
        pc = self.places.assign(out)
        if pc.offset != 0:
            raise AssertionError("gemm output must be a fresh buffer")
        tile = self.cfg["tile"]
        B = int(np.prod(batch)) if batch else 1
        args = [M, N, Kd] + list(batch) + [pa.root, pa.offset] + bstrides(a_sh, a_st) + [a_st[-2], a_st[-1]]
        args += [pb.root, pb.offset] + bstrides(b_sh, b_st) + [b_st[-2], b_st[-1], pc.root]
        grid = (-(-N // tile), -(-M // tile), B)
        self._add(K.gen_gemm(out.aval.dtype, nb, tile), M * N * B, args, "matmul (tiled GEMM)", e.scope,
                  grid=grid, block=(tile, tile))

    def _cat(self, e):
        """Each input copied (and cast) into its slab of the output."""
        out = e.outs[0]
        axis = e.params["axis"] % out.aval.ndim
        po = self.places.assign(out)
        start = 0
        for v in e.ins:
            n = v.aval.shape[axis]
            if v.aval.size:
                dst = Place(po.root, po.offset + start * po.strides[axis], v.aval.shape, po.strides, po.dtype)
                self._copy(self.place(v), dst, "cat (copy)")
            start += n

    def _gather(self, e):
        x, idx = e.ins[0], e.ins[1:]
        out = e.outs[0]
        it = out.aval.shape
        po = self.places.assign(out)
        px = self.place(x)
        n = int(np.prod(it)) if it else 1
        kern = K.gen_gather(x.aval.dtype, [v.aval.dtype for v in idx], len(it))
        args = [n] + list(it)
        for v in idx:
            args += self._operand(self.place(v), bcast_strides(self.place(v), it))
        args += self._operand(po, c_strides(it)) + [px.root, px.offset] + list(px.strides) + list(px.shape)
        self._add(kern, n, args + ["ierr", len(self.index_steps)], "gather", e.scope)
        self.index_steps.append(e)

    def _scatter(self, e):
        base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
        out = e.outs[0]
        po = self.places.assign(out)
        self._copy(self.place(base), po, "copy (index_put)")
        it = tuple(np.broadcast_shapes(*[i.aval.shape for i in idx])) if idx else ()
        n = int(np.prod(it)) if it else 1
        kern = K.gen_scatter(out.aval.dtype, v.aval.dtype, [i.aval.dtype for i in idx], len(it),
                             bool(e.params["accumulate"]))
        pv = self.place(v)
        args = [n] + list(it) + self._operand(pv, bcast_strides(pv, it))
        for iv in idx:
            args += self._operand(self.place(iv), bcast_strides(self.place(iv), it))
        args += [po.root, po.offset] + list(po.strides) + list(po.shape)
        self._add(kern, n, args + ["ierr", len(self.index_steps)], "scatter", e.scope)
        self.index_steps.append(e)

    def _scan(self, e):
        """cumsum / cumprod: a thread per point of the other dims, serial along the axis (both read and written
        through strides: a flipped or transposed operand costs nothing)."""
        x, out = e.ins[0], e.outs[0]
        ax = e.params["axis"]
        px = self.place(x)
        po = self.places.assign(out)
        outer = tuple(d for k, d in enumerate(x.aval.shape) if k != ax)
        xst = [s for k, s in enumerate(px.strides) if k != ax]
        ost = [s for k, s in enumerate(po.strides) if k != ax]
        shape, (xst, ost) = coalesce(outer, [xst, ost])
        n = int(np.prod(outer)) if outer else 1
        kern = K.gen_scan(e.op.name, x.aval.dtype, out.aval.dtype, len(shape), bool(e.params.get("reverse")))
        args = [n] + list(shape) + self._operand(px, xst) + self._operand(po, ost)
        args += [x.aval.shape[ax], px.strides[ax], po.strides[ax]]
        self._add(kern, n, args, e.op.name, e.scope)

    def _host(self, e):
        """An op with no CUDA kernel: its NumPy impl on host copies of the inputs, the result uploaded."""
        self.native = False
        st = Step("host", f"{e.op.name} (host)", eqn=e, scope=e.scope)
        st.ins = tuple(self.place(v) for v in e.ins)
        st.outs = tuple(self.places.assign(o) for o in e.outs)
        self.steps.append(st)

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
        ierr = env["ierr"] = cuda.to_device(np.zeros(4, np.int64)) if self.index_steps else None
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
                    self._run_host(st, env, cuda)
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


__all__ = ["CudaGraph", "ptx_of", "launch_config", "GPU_CONFIG", "SIMULATOR_CONFIG"]
