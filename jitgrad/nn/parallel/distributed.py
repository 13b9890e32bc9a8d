"""DistributedDataParallel: torch's data-parallel wrapper on jitgrad.distributed (MPI).

What it does, as torch's does:
- at wrap time, the module's parameters and buffers are broadcast from rank 0 (one coalesced broadcast per
  dtype), after checking that every rank wraps the same parameter shapes;
- gradients are averaged in buckets: parameters are assigned to buckets in reverse registration order (roughly
  the order backward produces their gradients), the first bucket capped at 1 MB and the others at
  ``bucket_cap_mb`` (25 MB by default).  A post-accumulate-grad hook on every parameter counts the bucket's
  gradients; when a bucket is complete its gradients are copied into the bucket's flat buffer and a non-blocking
  ``MPI_Iallreduce`` starts, while backward goes on computing the earlier layers' gradients.  Buckets start in
  index order on every rank (MPI requires the same order of collectives everywhere).  At the end of backward
  (an engine callback) the remaining buckets start, every bucket is waited for, divided by the world size and
  copied back into ``.grad``.  A parameter that got no gradient on this rank contributes zeros (so a parameter
  used on some ranks only still gets the average, as torch's ``find_unused_parameters=True``);
- ``no_sync()``: inside it, backward only accumulates locally; the first backward outside it averages the
  accumulated gradients;
- ``broadcast_buffers=True`` (the default): at the start of each forward with grad mode on and outside
  ``no_sync()``, the buffers (BatchNorm's running statistics) are broadcast from rank 0.  Each rank's
  BatchNorm normalises with its own batch's statistics, as in torch (a SyncBatchNorm would be a separate
  module).

Inside ``@jg.compile`` the same Python runs once under the trace: the hooks bind ``all_reduce_start`` on the
concatenated (symbolic) gradients of each bucket at the point of backward where the bucket completes, the
end-of-backward callback binds the matching ``all_reduce_wait`` and the slices written to ``.grad``, and the
buffer broadcast binds a ``broadcast``.  The compiled step runs them from its driver in graph order, one
non-blocking collective per bucket, overlapped with the backward kernels that follow its start; with MPICH the
C entry calls MPI itself (``codegen/program/collective_steps.py``), so the step stays one native dispatch.
Whether a step runs inside ``no_sync()`` is a compile guard (entering it retraces).
"""
from __future__ import annotations

import contextlib
import zlib

import numpy as np

from ...distributed import process_group as _pgm
from ...distributed.collectives import check_same_shape
from ...ir.graph import Var
from ...ir.ops import OPS
from ...ir.ops.collective import next_seq
from ...jit.guards import guard
from ...runtime import grad_mode
from ...runtime.backward import engine
from ...runtime.dispatch import bind
from ...library.elementary import cat
from ...runtime.tensor import Tensor
from ...tracer import STATE as _TR
from ..modules.module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024


class _Bucket:
    """Parameters whose gradients are all-reduced together, and their places in one flat buffer."""

    def __init__(self, params, dtype):
        self.params = params
        self.dtype = dtype
        self.offsets = []
        n = 0
        for p in params:
            self.offsets.append(n)
            n += p.numel()
        self.numel = n
        self.flat = np.zeros(n, dtype.np)
        self.section = None     # the watchdog's section of its eager all-reduce in flight
        self.ready = 0
        self.request = None
        self.traced = None      # the bucket's all-reduced gradients (a symbolic tensor) while tracing

    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _bucket_assignment(params, cap_bytes):
    """torch's compute_bucket_assignment_by_size: reverse order, one open bucket per dtype, the first closed
    at 1 MB and the rest at ``cap_bytes``."""
    open_ = {}
    limits = {}
    out = []
    for p in reversed(params):
        d = p.dtype
        cur = open_.setdefault(d, [])
        cur.append(p)
        limit = limits.get(d, min(_FIRST_BUCKET_BYTES, cap_bytes))
        if sum(q.numel() for q in cur) * d.itemsize >= limit:
            out.append(_Bucket(cur, d))
            open_[d] = []
            limits[d] = cap_bytes
    for d, cur in open_.items():
        if cur:
            out.append(_Bucket(cur, d))
    return out


def _traced(t) -> bool:
    return type(t._data) is Var


class DistributedDataParallel(Module):
    """Data parallelism at the module level (torch.nn.parallel.DistributedDataParallel) over MPI.

    >>> import jitgrad as jg, jitgrad.distributed as dist
    >>> from jitgrad.nn.parallel import DistributedDataParallel as DDP
    >>> dist.init_process_group("mpi")                      # doctest: +SKIP
    >>> model = DDP(jg.nn.Linear(4, 2))                     # doctest: +SKIP
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, init_sync=True):
        super().__init__()
        if device_ids not in (None, [], ["cpu"]) or output_device not in (None, "cpu"):
            raise ValueError("DistributedDataParallel: device_ids/output_device are for CUDA modules; jitgrad's MPI "
                             "backend trains CPU modules (leave them out)")
        self.module = module
        pg = _pgm.group_of(process_group, "DistributedDataParallel")
        object.__setattr__(self, "process_group", pg)
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        params = [p for p in module.parameters() if p.requires_grad]
        object.__setattr__(self, "_params", params)
        self._check_same_parameters(module)
        if init_sync:
            self._broadcast_state([p for p in module.parameters()] + list(module.buffers()))
        buckets = _bucket_assignment(params, self.bucket_bytes_cap)
        object.__setattr__(self, "_buckets", buckets)
        where = {}
        for b in buckets:
            for i, p in enumerate(b.params):
                where[id(p)] = (b, i)
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_require_sync", True)
        object.__setattr__(self, "_armed", False)
        object.__setattr__(self, "_next", 0)
        object.__setattr__(self, "_seen", set())
        handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]
        object.__setattr__(self, "_handles", handles)

    # ---- wrap time ------------------------------------------------------------------------------------------
    def _check_same_parameters(self, module):
        """Every rank must wrap the same parameter list (shapes and dtypes), else the buckets would not match."""
        desc = ";".join(f"{n}:{p.dtype.name}{list(p.shape)}" for n, p in module.named_parameters())
        total = sum(p.numel() for p in module.parameters())
        try:
            check_same_shape(self.process_group, "DistributedDataParallel", (total,), np.float64,
                             (zlib.crc32(desc.encode()),))
        except RuntimeError as e:
            raise RuntimeError(f"DistributedDataParallel: the ranks wrap modules with different parameters "
                               f"(this rank: {desc}); {e}") from None

    def _broadcast_state(self, tensors):
        """Copy ``tensors`` from the group's first rank into every rank's tensors, one broadcast per dtype."""
        pg = self.process_group
        if pg.size() == 1:
            return
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for d, ts in by_dtype.items():
            if any(_traced(t) for t in ts) or _TR.active is not None:
                flat = cat([t.reshape(-1) for t in ts])
                out = bind(OPS["broadcast"], flat, group=pg.key, src=0)
                off = 0
                with grad_mode.no_grad():
                    for t in ts:
                        n = t.numel()
                        t.copy_(out[off:off + n].reshape(t.shape))
                        off += n
                continue
            flat = np.concatenate([t._data.reshape(-1) for t in ts]) if ts else np.zeros(0, d.np)
            with pg.watch.section("BROADCAST", flat.size):
                pg.comm.Bcast(flat, root=0)
            off = 0
            for t in ts:
                n = t.numel()
                t._data[...] = flat[off:off + n].reshape(t.shape)
                t._vc[0] += 1
                off += n

    # ---- forward ----------------------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        guard(lambda: self._require_sync)
        # torch syncs buffers when the coming backward will sync gradients: grad mode on, outside no_sync()
        if self.broadcast_buffers and grad_mode.is_grad_enabled() and self._require_sync:
            bufs = list(self.module.buffers())
            if bufs:
                self._broadcast_state(bufs)
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside: backward accumulates gradients locally, without communication; the first backward after it
        averages the accumulated gradients over the ranks."""
        prev = self._require_sync
        object.__setattr__(self, "_require_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_require_sync", prev)

    # ---- backward: hooks and buckets -------------------------------------------------------------------------
    def _grad_ready(self, p):
        guard(lambda: self._require_sync)
        if not self._require_sync or self.process_group.size() == 1:
            return
        if not self._armed:
            object.__setattr__(self, "_armed", True)
            object.__setattr__(self, "_next", 0)
            self._seen.clear()
            for b in self._buckets:
                b.ready = 0
                b.request = None
                b.traced = None
            engine.queue_callback(self._finish)
        if id(p) in self._seen:       # accumulated twice in one backward (a shared graph): counted once
            return
        self._seen.add(id(p))
        b, _ = self._where[id(p)]
        b.ready += 1
        if b.ready == len(b.params):
            self._start_ready()
        elif self._next > 0:
            self._progress()

    def _start_ready(self):
        bs = self._buckets
        while self._next < len(bs) and bs[self._next].ready == len(bs[self._next].params):
            self._start(bs[self._next])
            object.__setattr__(self, "_next", self._next + 1)

    def _progress(self):
        """Drive MPI's progress on the buckets in flight (MPICH progresses non-blocking collectives inside MPI
        calls)."""
        for b in self._buckets[:self._next]:
            if b.request is not None:
                b.request.Test()

    def _start(self, b: _Bucket):
        pg = self.process_group
        grads = [p.grad for p in b.params]
        if _TR.active is not None or any(g is not None and _traced(g) for g in grads):
            from ...library.creation.factories import zeros
            parts = [g if g is not None else zeros(p.shape, dtype=p.dtype) for p, g in zip(b.params, grads)]
            # SUM, scaled after the wait: the scaling fuses with the code that reads it, and the driver calls MPI
            # itself (codegen/program/collective_steps.py; AVG would need a Python step)
            token = bind(OPS["all_reduce_start"], *parts, group=pg.key, reduce_op="sum", seq=next_seq())
            b.traced = (token, parts)
            return
        for p, g, off in zip(b.params, grads, b.offsets):
            n = p.numel()
            if g is None:
                b.flat[off:off + n] = 0
            else:
                b.flat[off:off + n] = g._data.reshape(-1)
        with pg.watch.section("ALLREDUCE", b.flat.size) as sec:       # (the watchdog: timeout= covers the wait)
            b.request = pg.comm.Iallreduce(_pgm._mpi().IN_PLACE, b.flat, _pgm._mpi().SUM)
        b.section = sec.again()

    def _finish(self):
        """End of backward: start the buckets not started yet, wait for all, write the averages into .grad."""
        try:
            while self._next < len(self._buckets):
                self._start(self._buckets[self._next])
                object.__setattr__(self, "_next", self._next + 1)
            n = self.process_group.size()
            for b in self._buckets:
                if b.traced is not None:
                    token, parts = b.traced
                    total = bind(OPS["all_reduce_wait"], token, *parts, group=self.process_group.key,
                                 reduce_op="sum")
                    avg = total * (1.0 / n)
                    with grad_mode.no_grad():
                        for p, off in zip(b.params, b.offsets):
                            k = p.numel()
                            p.grad = avg[off:off + k].reshape(p.shape)
                    b.traced = None
                    continue
                if b.section is not None:
                    with b.section:
                        b.request.Wait()
                else:
                    b.request.Wait()
                b.request = None
                b.flat /= n
                for p, off in zip(b.params, b.offsets):
                    k = p.numel()
                    avg = b.flat[off:off + k].reshape(p.shape)
                    if p._grad is None:
                        p._grad = Tensor._make(avg.copy())
                    else:
                        np.copyto(p._grad._data, avg)
                        p._grad._vc[0] += 1
        finally:
            object.__setattr__(self, "_armed", False)

    def __del__(self):
        for h in getattr(self, "_handles", ()):
            h.remove()


__all__ = ["DistributedDataParallel"]
