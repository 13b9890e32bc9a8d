"""Collective primitives: ``all_reduce``, ``all_reduce_start``/``all_reduce_wait``, ``broadcast``,
``all_gather``, ``reduce_scatter``.

Inside ``@jg.compile`` a data-parallel step's communication is part of the graph: DistributedDataParallel's
bucket all-reduces and a user's ``dist.all_reduce(p.grad)`` bind these ops, so they sit in the graph where the
gradients they read are ready and run from the compiled driver: as native steps calling MPI where
``codegen/program/collective_steps.py`` can (MPICH: all_reduce and the start/wait pair), else as Python steps whose
impls (below) call the transport.

The ops name their process group by an integer key (``group``), never by an object, so a graph stays plain
data: ``TRANSPORTS`` maps the key to the object that moves the bytes.  ``jitgrad.distributed`` registers one
transport per process group it creates (MPI communicators); key 0 is this process alone (a world of one, like
``MPI_COMM_SELF``), which needs no MPI at all.  ``ir`` imports nothing else of jitgrad, so the registry lives
here and is filled from outside.

``all_reduce_start`` / ``all_reduce_wait`` are an all-reduce split in two for overlap, over a bucket of tensors:
``start(*xs)`` begins a non-blocking all-reduce of the tensors' elements (flattened, concatenated) and returns a
token (an int64 scalar naming the request in the transport); ``wait(token, *xs)`` completes it and returns the
result flat (the ``xs`` are there for the shapes, the dtype and the gradients).  DistributedDataParallel binds
``start`` where a bucket's gradients are ready and ``wait`` at the end of backward, so the kernels in between
run while the bytes move.  Each ``start`` carries a unique ``seq``
parameter, so common-subexpression elimination never merges two requests.

A transport has ``rank``, ``size`` and four methods on C-contiguous NumPy arrays, each returning a new array:
``all_reduce(x, op)``, ``broadcast(x, src)``, ``all_gather(x)`` (shape ``(size,) + x.shape``) and
``reduce_scatter(x, op)`` (``x`` of shape ``(size,) + s`` gives shape ``s``: this rank's row of the reduction),
plus ``all_reduce_start(flat, op) -> int`` and ``all_reduce_wait(token, flat_fn) -> flat array`` (``flat_fn()``
makes the flat input, for a transport that needs it).

Gradients (the usual data-parallel algebra; every rank runs the same graph, so the vjps are collectives too):
``all_reduce`` SUM and AVG are self-adjoint (the cotangent is all-reduced with the same op); MAX, MIN and
PRODUCT have no gradient here.  ``broadcast``'s adjoint is a SUM all-reduce kept on the source rank only.
``all_gather`` and ``reduce_scatter`` (SUM/AVG) are each other's adjoint.
"""
from __future__ import annotations

import numpy as np

from .opdef import LINEAR, Aval, OpDef, OpError, fmt_shape, register

REDUCE_OPS = ("sum", "avg", "max", "min", "product")


class SelfTransport:
    """A process group of one process: every collective is a copy (key 0 in ``TRANSPORTS``)."""

    rank = 0
    size = 1

    def all_reduce(self, x, op):
        return np.array(x, copy=True)

    def broadcast(self, x, src):
        return np.array(x, copy=True)

    def all_gather(self, x):
        return np.array(x, copy=True)[None]

    def reduce_scatter(self, x, op):
        return np.array(x[0], copy=True)

    def all_reduce_start(self, x, op):
        return 0            # alone, the result is x itself: nothing is in flight

    def all_reduce_wait(self, token, flat_fn):
        return flat_fn()


TRANSPORTS: dict = {0: SelfTransport()}


def watched(group: int, label: str, count: int):
    """The context a compiled step whose graph holds ``count`` collectives on ``group`` runs in: a section of the
    group's collective watchdog (``timeout=``, ``jitgrad/distributed/watchdog.py``; the native MPI steps run
    inside the one C call), or nothing for a transport without one."""
    watch = getattr(TRANSPORTS.get(group), "watch", None)
    return _NO_WATCH if watch is None else watch.section(label, count=count)


class _NoWatch:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_WATCH = _NoWatch()


def transport(opname: str, group: int):
    """The transport behind group key ``group``; a clear error if it was destroyed."""
    t = TRANSPORTS.get(group)
    if t is None:
        raise RuntimeError(f"{opname}: process group {group} does not exist (destroyed, or this graph was "
                           "built before the process group was created); call init_process_group() again and "
                           "retrace")
    return t


def _check_op(opname, params):
    if params["reduce_op"] not in REDUCE_OPS:
        raise OpError(f"{opname}: unknown reduce op {params['reduce_op']!r} (expected one of {', '.join(REDUCE_OPS)})")


def _same_rule(opname):
    def shape_dtype(avals, params):
        if "reduce_op" in params:
            _check_op(opname, params)
            if params["reduce_op"] == "avg" and not avals[0].dtype.is_floating_point:
                raise OpError(f"{opname}: ReduceOp.AVG needs a floating-point tensor, got {avals[0].dtype.name}")
        return [Aval(avals[0].shape, avals[0].dtype)]
    return shape_dtype


def _all_gather_rule(avals, params):
    return [Aval((params["size"],) + tuple(avals[0].shape), avals[0].dtype)]


def _reduce_scatter_rule(avals, params):
    _check_op("reduce_scatter", params)
    a = avals[0]
    if a.ndim == 0 or a.shape[0] != params["size"]:
        raise OpError(f"reduce_scatter: the input's first dimension must be the group size {params['size']}, "
                      f"got {a.dtype.name}{fmt_shape(a.shape)}")
    return [Aval(tuple(a.shape[1:]), a.dtype)]


def _contig(x):
    return np.ascontiguousarray(x)


def _all_reduce_vjp(c, g):
    op = c.params["reduce_op"]
    if op not in ("sum", "avg"):
        raise RuntimeError(f"all_reduce: ReduceOp.{op.upper()} has no gradient (only SUM and AVG are "
                           "differentiable)")
    return (c.bind("all_reduce", g, group=c.params["group"], reduce_op=op),)


def _linear_sum_avg(c, t):
    # a SUM or AVG reduction is linear: the same collective on the tangents (the others have no derivative)
    op = c.params["reduce_op"]
    if op not in ("sum", "avg"):
        raise RuntimeError(f"{c.op.name}: ReduceOp.{op.upper()} has no derivative (only SUM and AVG are "
                           "differentiable)")
    return (c.bind(c.op.name, t, **c.params),)


def _broadcast_vjp(c, g):
    # d(x_src)/dx: every rank's cotangent flows back to the source; the all-reduce runs on every rank (it is a
    # collective) and the non-source ranks multiply it by zero, so all ranks run the same graph
    total = c.bind("all_reduce", g, group=c.params["group"], reduce_op="sum")
    keep = 1.0 if transport("broadcast", c.params["group"]).rank == c.params["src"] else 0.0
    return (total * keep,)


def _all_gather_vjp(c, g):
    return (c.bind("reduce_scatter", g, group=c.params["group"], reduce_op="sum", size=c.params["size"]),)


def _reduce_scatter_vjp(c, g):
    op = c.params["reduce_op"]
    if op not in ("sum", "avg"):
        raise RuntimeError(f"reduce_scatter: ReduceOp.{op.upper()} has no gradient (only SUM and AVG are "
                           "differentiable)")
    out = c.bind("all_gather", g, group=c.params["group"], size=c.params["size"])
    return (out * (1.0 / c.params["size"]) if op == "avg" else out,)


register(OpDef("all_reduce", "collective", _same_rule("all_reduce"),
               lambda x, group, reduce_op: transport("all_reduce", group).all_reduce(_contig(x), reduce_op),
               _all_reduce_vjp, grad_name="AllReduceBackward0", jvp=_linear_sum_avg,
               doc="the element-wise reduction of x over the ranks of a process group, on every rank"))
_SEQ = [0]


def next_seq() -> int:
    """A fresh ``seq`` for an ``all_reduce_start`` eqn (keeps CSE from merging two requests)."""
    _SEQ[0] += 1
    return _SEQ[0]


def _start_rule(avals, params):
    _check_op("all_reduce_start", params)
    _same_dtypes("all_reduce_start", avals, params)
    from .. import dtypes as dt
    return [Aval((), dt.int64)]


def _same_dtypes(opname, avals, params):
    if not avals:
        raise OpError(f"{opname}: needs at least one tensor")
    d = avals[0].dtype
    if any(a.dtype is not d for a in avals):
        raise OpError(f"{opname}: the tensors of one all-reduce must share a dtype, got "
                      f"{', '.join(a.dtype.name + fmt_shape(a.shape) for a in avals)}")
    if params["reduce_op"] == "avg" and not d.is_floating_point:
        raise OpError(f"{opname}: ReduceOp.AVG needs a floating-point tensor, got {d.name}")


def _wait_rule(avals, params):
    tok, xs = avals[0], avals[1:]
    if tok.shape != () or tok.dtype.name != "int64":
        raise OpError(f"all_reduce_wait: the token must be an int64 scalar from all_reduce_start, got "
                      f"{tok.dtype.name}{fmt_shape(tok.shape)}")
    _check_op("all_reduce_wait", params)
    _same_dtypes("all_reduce_wait", xs, params)
    return [Aval((sum(a.size for a in xs),), xs[0].dtype)]


def _flat(xs):
    return np.concatenate([np.ravel(x) for x in xs]) if len(xs) > 1 else np.ravel(np.ascontiguousarray(xs[0]))


def _wait_vjp(c, g):
    total = _all_reduce_vjp(c, g)[0]
    out, off = [None], 0
    for shape in c.shapes[1:]:
        n = 1
        for d in shape:
            n *= d
        out.append(total[off:off + n].reshape(shape))
        off += n
    return tuple(out)


def _wait_jvp(c, tok_t, *ts):
    # the request reduces the xs: its tangent is the same reduction of their tangents, flat
    flat = [(t if t is not None else x.new_zeros(x.shape)).reshape((-1,)) for x, t in zip(c.inputs[1:], ts)]
    t = flat[0] if len(flat) == 1 else c.bind("cat", *flat, axis=0)
    return _linear_sum_avg_as(c, "all_reduce", t)


def _linear_sum_avg_as(c, name, t):
    op = c.params["reduce_op"]
    if op not in ("sum", "avg"):
        raise RuntimeError(f"{name}: ReduceOp.{op.upper()} has no derivative (only SUM and AVG are differentiable)")
    return (c.bind(name, t, group=c.params["group"], reduce_op=op),)


register(OpDef("all_reduce_start", "collective", _start_rule,
               lambda *xs, group, reduce_op, seq: np.array(
                   transport("all_reduce_start", group).all_reduce_start(_flat(xs), reduce_op), np.int64),
               None, doc="starts a non-blocking all-reduce of the tensors xs (flattened and concatenated); returns "
                         "its token (see all_reduce_wait)"))
register(OpDef("all_reduce_wait", "collective", _wait_rule,
               lambda token, *xs, group, reduce_op: transport("all_reduce_wait", group).all_reduce_wait(
                   int(token), lambda: _flat(xs)),
               _wait_vjp, grad_name="AllReduceBackward0", nondiff_inputs=(0,), jvp=_wait_jvp,
               doc="completes the all-reduce that all_reduce_start(*xs) began and returns the result, flat (the "
                   "tensors' elements in order)"))
register(OpDef("broadcast", "collective", _same_rule("broadcast"),
               lambda x, group, src: transport("broadcast", group).broadcast(_contig(x), src),
               _broadcast_vjp, grad_name="BroadcastBackward0", jvp=LINEAR,
               doc="the source rank's x, on every rank of a process group"))
register(OpDef("all_gather", "collective", _all_gather_rule,
               lambda x, group, size: transport("all_gather", group).all_gather(_contig(x)),
               _all_gather_vjp, grad_name="AllGatherBackward0", jvp=LINEAR,
               doc="every rank's x stacked along a new first axis (rank order), on every rank"))
register(OpDef("reduce_scatter", "collective", _reduce_scatter_rule,
               lambda x, group, reduce_op, size: transport("reduce_scatter", group).reduce_scatter(_contig(x),
                                                                                                   reduce_op),
               _reduce_scatter_vjp, grad_name="ReduceScatterBackward0", jvp=_linear_sum_avg,
               doc="row r of the reduction over ranks of x (first axis: one row per rank), on rank r"))
