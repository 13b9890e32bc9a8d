"""torch.distributed's collectives on jitgrad tensors: all_reduce, broadcast, all_gather, reduce_scatter,
barrier, with ``async_op=True`` work handles.

Like torch's, they work in place on the tensors given and are not recorded by autograd.  Eagerly they call MPI
on the tensors' own NumPy buffers (``async_op=True``: a non-blocking MPI call, completed by ``Work.wait()``).
Inside ``@jg.compile`` (a traced tensor, or any call while a trace is active) they bind the collective
primitives of ``ir/ops/collective.py`` instead, and the in-place result becomes a functional update of the
graph, so the communication runs inside the compiled step.

Shapes are checked across ranks before every eager collective (one small all-reduce of a shape signature), so a
mismatch is an error naming every rank's shape instead of a hang or garbage; ``JITGRAD_DIST_CHECK=0`` turns the
check off.  Not while tracing: ranks need not trace at the same call (one may retrace for a smaller last batch
while another runs its compiled step), and a collective issued by one trace alone would hang.  In compiled code a
mismatch is MPI's error, which aborts the job (the transport's communicator has ``MPI_ERRORS_ARE_FATAL``).
"""
from __future__ import annotations

import os

import numpy as np

from ..ir.graph import Var
from ..ir.ops import OPS
from ..ir.ops.collective import next_seq
from ..runtime import grad_mode
from ..runtime.dispatch import bind
from ..runtime.tensor import Tensor
from ..tracer import STATE as _TR
from .process_group import ReduceOp, _mpi, _mpi_op, group_of

_OPNAMES = {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT}
_SIG_DIMS = 8
_DTYPE_CODES = {}


class Work:
    """The handle of a collective (torch's ``Work``): ``wait()`` completes it, ``is_completed()`` polls."""

    def __init__(self, request=None, finish=None, result=None, keep=None, section=None):
        self._req = request
        self._section = section     # the watchdog's section of this collective (its timeout covers the wait)
        self._keep = keep           # buffers MPI reads or writes until the request completes
        self._finish = finish
        self._result = result
        self._done = request is None

    def is_completed(self) -> bool:
        if not self._done and self._req.Test():
            self._complete()
        return self._done

    def is_success(self) -> bool:
        return self.is_completed()

    def wait(self, timeout=None) -> bool:
        if not self._done:
            if self._section is not None:
                with self._section:
                    self._req.Wait()
            else:
                self._req.Wait()
            self._complete()
        return True

    def _complete(self):
        self._done = True
        self._keep = None
        if self._finish is not None:
            self._finish()
            self._finish = None

    def result(self):
        self.wait()
        return self._result


class _TracedWork(Work):
    """An ``async_op=True`` all_reduce inside ``@jg.compile``: ``wait()`` binds the ``all_reduce_wait`` op (and
    the in-place write), so the kernels traced between the call and the wait overlap the communication.  Wait
    for it inside the step: a start nobody waits for is dead code, and the tensor keeps its value."""

    def __init__(self, bind_wait):
        super().__init__()
        self._done = False
        self._bind_wait = bind_wait

    def is_completed(self) -> bool:
        return self._done

    def wait(self, timeout=None) -> bool:
        if not self._done:
            self._done = True
            self._bind_wait()
        return True


def _checks_on() -> bool:
    return os.environ.get("JITGRAD_DIST_CHECK", "1") != "0"


def _describe(sig) -> str:
    code, nd = int(sig[0]), int(sig[1])
    dt = next((k for k, v in _DTYPE_CODES.items() if v == code), "?")
    dims = [int(x) for x in sig[3:3 + min(nd, _SIG_DIMS)]]
    return f"{np.dtype(dt).name if dt != '?' else dt}{dims}"


def check_same_shape(pg, opname: str, shape, dtype, extra=()):
    """Raise on every rank if the ranks of ``pg`` pass tensors of different shapes/dtypes (or different
    ``extra`` ints, e.g. a source rank) to collective ``opname``.  Costs one small MPI all-reduce."""
    if pg.size() == 1 or not _checks_on():
        return
    MPI = _mpi()
    shape = tuple(int(s) for s in shape)
    # np.dtype(...).str is the same text on every rank, but the codes are per process: hash the text instead
    code = int.from_bytes(np.dtype(dtype).str.encode()[:8].ljust(8, b"\0"), "little") & 0x7FFFFFFFFFFF
    _DTYPE_CODES.setdefault(np.dtype(dtype).str, code)
    numel = int(np.prod(shape)) if shape else 1
    sig = np.array([code, len(shape), numel] + list(shape[:_SIG_DIMS]) + [-1] * (_SIG_DIMS - min(len(shape), _SIG_DIMS))
                   + [int(x) for x in extra], np.int64)
    both = np.concatenate([sig, -sig])
    with pg.watch.section("ALLREDUCE", both.size):      # (inside a collective's own section, part of that one)
        pg.comm.Allreduce(MPI.IN_PLACE, both, MPI.MAX)
        if np.array_equal(both[:len(sig)], -both[len(sig):]):
            return
        sigs = pg.comm.allgather(sig)
    parts = []
    for r, s in enumerate(sigs):
        item = f"rank {pg.ranks[r]}: {_describe(s)}"
        if len(extra):
            item += f" ({', '.join(str(int(x)) for x in s[3 + _SIG_DIMS:])})"
        parts.append(item)
    raise RuntimeError(f"{opname}: the ranks passed tensors of different shapes or dtypes (or different "
                       f"arguments): {'; '.join(parts)}")


def _opname(op, fn):
    op = getattr(op, "value", op)
    if op not in _OPNAMES:
        raise ValueError(f"{fn}: unknown reduce op {op!r} (use jitgrad.distributed.ReduceOp.SUM, AVG, MAX, MIN or "
                         "PRODUCT)")
    return op


def _check_tensor(t, fn, what="tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: {what} must be a jitgrad Tensor, got {type(t).__name__}")
    if type(t._data) is not np.ndarray and not _is_traced(t):
        raise RuntimeError(f"{fn}: only CPU tensors can be communicated (MPI backend), got a tensor on {t.device}")


def _is_traced(t) -> bool:
    return type(t._data) is Var


def _tracing(*ts) -> bool:
    return _TR.active is not None or any(_is_traced(t) for t in ts)


def _write(t: Tensor, value: Tensor):
    """In-place result of a traced collective: a functional update of ``t`` (written back after the call)."""
    with grad_mode.no_grad():
        t.copy_(value)


def _buffer(t: Tensor):
    """The tensor's own contiguous buffer, or a contiguous copy and a function that writes it back."""
    a = t._data
    if a.flags.c_contiguous:
        return a, None
    c = np.ascontiguousarray(a)
    return c, (lambda: np.copyto(a, c))


def _bump(t):
    t._vc[0] += 1


def _finisher(t, buf, back, avg=None):
    """What completes an in-place collective on ``t`` once its bytes are in ``buf``: AVG's scaling (``avg``: the
    group size), the write-back of a non-contiguous tensor's copy, the version bump."""
    def finish():
        if avg is not None:
            buf[...] /= avg
        if back is not None:
            back()
        _bump(t)
    return finish


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` element-wise over the ranks of ``group`` and leave the result in ``tensor`` on every
    rank (torch.distributed.all_reduce).  ``op``: ReduceOp.SUM (default), AVG, MAX, MIN, PRODUCT."""
    _check_tensor(tensor, "all_reduce")
    op = _opname(op, "all_reduce")
    pg = group_of(group, "all_reduce")
    if op == ReduceOp.AVG and not tensor.dtype.is_floating_point:
        raise RuntimeError(f"all_reduce: ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype.name}")
    if _tracing(tensor):
        return _traced_all_reduce(tensor, op, pg, async_op)
    with pg.watch.section("ALLREDUCE", tensor.numel()) as sec:
        check_same_shape(pg, "all_reduce", tensor.shape, tensor.dtype.np, (_opcode(op),))
        MPI = _mpi()
        buf, back = _buffer(tensor)
        finish = _finisher(tensor, buf, back, pg.size() if op == ReduceOp.AVG else None)
        if async_op:
            return Work(pg.comm.Iallreduce(MPI.IN_PLACE, buf, _mpi_op(op)), finish, keep=(buf,), section=sec.again())
        pg.comm.Allreduce(MPI.IN_PLACE, buf, _mpi_op(op))
    finish()
    return None


def _traced_all_reduce(tensor, op, pg, async_op):
    # AVG is SUM scaled in the graph (the scaling fuses; the driver calls MPI for SUM, MAX, MIN, PRODUCT)
    red, scale = (ReduceOp.SUM, 1.0 / pg.size()) if op == ReduceOp.AVG else (op, None)

    def result(r):
        return r if scale is None else r * scale
    if async_op:        # a start op now, the wait op when the user waits
        token = bind(OPS["all_reduce_start"], tensor, group=pg.key, reduce_op=red, seq=next_seq())
        return _TracedWork(lambda: _write(tensor, result(bind(OPS["all_reduce_wait"], token, tensor, group=pg.key,
                                                              reduce_op=red).reshape(tensor.shape))))
    _write(tensor, result(bind(OPS["all_reduce"], tensor, group=pg.key, reduce_op=red)))
    return None


def _opcode(op):
    return ("sum", "avg", "max", "min", "product").index(op)


def broadcast(tensor, src=0, group=None, async_op=False):
    """Copy ``tensor`` from global rank ``src`` to every rank of ``group`` (torch.distributed.broadcast)."""
    _check_tensor(tensor, "broadcast")
    pg = group_of(group, "broadcast")
    if src not in pg.ranks:
        raise ValueError(f"broadcast: src={src} is not a rank of {pg}")
    root = pg.ranks.index(src)
    if _tracing(tensor):
        _write(tensor, bind(OPS["broadcast"], tensor, group=pg.key, src=root))
        return Work() if async_op else None
    with pg.watch.section("BROADCAST", tensor.numel()) as sec:
        check_same_shape(pg, "broadcast", tensor.shape, tensor.dtype.np, (src,))
        buf, back = _buffer(tensor)
        finish = _finisher(tensor, buf, back)
        if async_op:
            return Work(pg.comm.Ibcast(buf, root=root), finish, keep=(buf,), section=sec.again())
        pg.comm.Bcast(buf, root=root)
    finish()
    return None


def _check_entries(entries, like, op, what, role):
    """Every entry of a per-rank list is a tensor with ``like``'s shape and dtype."""
    for t in entries:
        _check_tensor(t, op, f"{what} entry")
        if t.shape != like.shape or t.dtype is not like.dtype:
            raise ValueError(f"{op}: every {what} entry must have the {role}'s shape and dtype "
                             f"{like.dtype.name}{list(like.shape)}, got {t.dtype.name}{list(t.shape)}")


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fill ``tensor_list[r]`` with rank r's ``tensor`` on every rank of ``group`` (torch.distributed.all_gather)."""
    _check_tensor(tensor, "all_gather")
    pg = group_of(group, "all_gather")
    n = pg.size()
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != n:
        raise ValueError(f"all_gather: tensor_list must be a list of {n} tensors (the group size)")
    _check_entries(tensor_list, tensor, "all_gather", "tensor_list", "input")
    if _tracing(tensor, *tensor_list):
        out = bind(OPS["all_gather"], tensor, group=pg.key, size=n)
        for r, t in enumerate(tensor_list):
            _write(t, out[r])
        return Work() if async_op else None
    with pg.watch.section("ALLGATHER", tensor.numel()) as sec:
        check_same_shape(pg, "all_gather", tensor.shape, tensor.dtype.np)
        src = np.ascontiguousarray(tensor._data)
        recv = np.empty((n,) + src.shape, src.dtype)

        def finish():
            for r, t in enumerate(tensor_list):
                np.copyto(t._data, recv[r])
                _bump(t)
        if async_op:
            return Work(pg.comm.Iallgather(src, recv), finish, keep=(src, recv), section=sec.again())
        pg.comm.Allgather(src, recv)
    finish()
    return None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's ``input_tensor`` concatenated along dim 0 into ``output_tensor`` (torch's name)."""
    pg = group_of(group, "all_gather_into_tensor")
    n = pg.size()
    want = (n * input_tensor.shape[0],) + tuple(input_tensor.shape[1:]) if input_tensor.ndim else (n,)
    if tuple(output_tensor.shape) != want:
        raise ValueError(f"all_gather_into_tensor: output shape {list(output_tensor.shape)} should be {list(want)}")
    parts = [output_tensor[r * (want[0] // n):(r + 1) * (want[0] // n)] if input_tensor.ndim else output_tensor[r]
             for r in range(n)]
    if _tracing(output_tensor, input_tensor):
        out = bind(OPS["all_gather"], input_tensor, group=pg.key, size=n)
        _write(output_tensor, out.reshape(want))
        return Work() if async_op else None
    del parts
    tmp = [Tensor._make(np.empty(input_tensor.shape, input_tensor._data.dtype)) for _ in range(n)]
    all_gather(tmp, input_tensor, group)
    np.copyto(output_tensor._data, np.concatenate([t._data.reshape((-1,) + tuple(input_tensor.shape[1:]))
                                                   for t in tmp]).reshape(want))
    _bump(output_tensor)
    return Work() if async_op else None


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input_list[r]`` over the ranks and leave the result in rank r's ``output``
    (torch.distributed.reduce_scatter)."""
    _check_tensor(output, "reduce_scatter", "output")
    op = _opname(op, "reduce_scatter")
    pg = group_of(group, "reduce_scatter")
    n = pg.size()
    if not isinstance(input_list, (list, tuple)) or len(input_list) != n:
        raise ValueError(f"reduce_scatter: input_list must be a list of {n} tensors (the group size)")
    _check_entries(input_list, output, "reduce_scatter", "input_list", "output")
    if op == ReduceOp.AVG and not output.dtype.is_floating_point:
        raise RuntimeError(f"reduce_scatter: ReduceOp.AVG needs a floating-point tensor, got {output.dtype.name}")
    if _tracing(output, *input_list):
        from ..library.elementary import stack
        out = bind(OPS["reduce_scatter"], stack(list(input_list)), group=pg.key, reduce_op=op, size=n)
        _write(output, out)
        return Work() if async_op else None
    with pg.watch.section("REDUCE_SCATTER", output.numel()) as sec:
        check_same_shape(pg, "reduce_scatter", output.shape, output.dtype.np, (_opcode(op),))
        MPI = _mpi()
        send = np.ascontiguousarray(np.stack([t._data for t in input_list]))
        buf, back = _buffer(output)
        finish = _finisher(output, buf, back, n if op == ReduceOp.AVG else None)
        if async_op:
            return Work(pg.comm.Ireduce_scatter_block(send, buf, _mpi_op(op)), finish, keep=(send, buf),
                        section=sec.again())
        pg.comm.Reduce_scatter_block(send, buf, _mpi_op(op))
    finish()
    return None


def barrier(group=None, async_op=False, device_ids=None):
    """Block until every rank of ``group`` reaches the barrier."""
    pg = group_of(group, "barrier")
    with pg.watch.section("BARRIER") as sec:
        if async_op:
            return Work(pg.comm.Ibarrier(), section=sec.again())
        pg.comm.Barrier()
    return None
