"""Kernels of gathers and scatters with integer index tensors (``getitem``, ``index_put``, ``scatter_reduce``),
built as kernel IR: every index wrapped and bounds-checked, the first bad one recorded for the driver to raise.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtypes as dt
from . import kernel_ir as ki
from .kernel_ir import I64, U8, cast, const, read, select
from .index_checks import record_index_error
from .loops import CONTIG, STRIDED, Kernel, _elem, _load, _Nest, _store, _stored, _T


def _bounds_checked(b, n, raw, sizes, access, IE, wrap=True):
    """Statements that wrap negative indices (``wrap``: Python's indexing; scatter_reduce refuses them, as
    torch), check every index against its dim and do ``access(j)`` (j: the wrapped indices; returns statements)
    only when all are in range; otherwise the first failure is recorded in the index-error array (block slot
    ``IE``: its address, then this step's id): ``[1, step id, index, dim]``.  Kernels cannot raise; the driver
    raises IndexError after the step, and no state write-back runs (codegen/program/cpu.py)."""
    with b.capture() as out:
        js = []
        for k in range(n):
            r = b.let(f"r{k}", cast(raw[k], I64))
            js.append(b.let(f"j{k}", select(r < 0, r + sizes[k], r) if wrap else r))
        if not n:
            b.emit(access(js))
            return out
        bad = b.var("bad", I64)
        bv = b.var("bv", I64)
        b.set(bad, -1)
        for k in reversed(range(n)):
            with b.if_(ki.or_(js[k] < 0, js[k] >= sizes[k])):
                b.set(bad, k)
                b.set(bv, read(b.var(f"r{k}", I64)))
        with b.if_(read(bad) < 0) as s:
            b.emit(access(js))
        with b.else_(s):
            b.emit([record_index_error(b, IE, 1, 0, (read(bv), read(bad)))])
    return out


def gen_gather(e) -> Kernel:
    """getitem(x, i0, ..., i_{n-1}) with one integer index tensor per dim, broadcast over the output.
    Block: output dims; x (address, n strides, n sizes); each index (address, strides); out."""
    x, idx = e.ins[0], e.ins[1:]
    r = e.outs[0].aval.ndim
    n = len(idx)
    classes = [STRIDED] * (1 + n) + [CONTIG]
    b = ki.Builder()
    nest = _Nest(b, r, classes, False)
    px = b.let("px", b.A[nest.slot].ptr(_elem(x.aval.dtype)))
    sx = [b.let(f"sx{k}", b.A[nest.slot + 1 + k]) for k in range(n)]
    nx = [b.let(f"nx{k}", b.A[nest.slot + 1 + n + k]) for k in range(n)]
    nest.slot += 1 + 2 * n
    for k, v in enumerate(idx):
        nest.operand(k + 1, v.aval.dtype)
    nest.operand(n + 1, x.aval.dtype)
    IE = nest.slot
    nest.slot += 2

    def access(js):
        at = const(0)
        for k in range(n):
            at = js[k] * sx[k] if k == 0 else at + js[k] * sx[k]
        return [_store(n + 1, nest, x.aval.dtype, px[at])]
    body = _bounds_checked(b, n, [_load(k + 1, nest, idx[k].aval.dtype) for k in range(n)], nx, access, IE)
    nest.loops(body, range(1, n + 2))
    return Kernel("gather", b.finish(), rank=r, operands=[x] + list(idx) + [e.outs[0]], classes=classes,
                  parallel=False, label="gather")


def _reduce_write(b, reduce, od, po, at, val):
    """Statements combining ``val`` into ``po[at]`` for scatter_reduce's ``reduce`` (prod, amax, amin), as its
    NumPy impl: np.multiply / np.maximum / np.minimum, so a NaN on either side wins."""
    tgt = po[at]
    if od is dt.bool_:
        both = (ki.and_ if reduce in ("prod", "amin") else ki.or_)(tgt != 0, val)
        return [ki.Store(po, at, select(both, const(1, U8), const(0, U8)))]
    if reduce == "prod":
        return [ki.Store(po, at, cast(tgt * val, _T(od)))]
    with b.capture() as out:
        v = b.let("v", val)
        c = b.let("c", tgt)
        better = v > c if reduce == "amax" else v < c
        if od.is_floating_point:
            better = ki.or_(better, v != v)
        with b.if_(ki.and_(c == c, better)):
            b.store(po, at, v)
    return out


def _reduce_identity(reduce, od) -> ki.Val:
    """The value a target starts from when scatter_reduce leaves its own value out (include_self=False)."""
    if od is dt.bool_:
        return const(0 if reduce == "amax" else 1, U8)
    if reduce == "prod":
        return const(1, _T(od)) if not od.is_floating_point else cast(const(1.0), _T(od))
    if od.is_floating_point:
        return cast(const(-np.inf if reduce == "amax" else np.inf), _T(od))
    info = np.iinfo(od.np)
    return const(int(info.min if reduce == "amax" else info.max), _T(od))


def gen_scatter(e) -> Kernel:
    """index_put(base, v, i0, ..., i_{n-1}; accumulate) into ``out`` (already a copy of base); or
    scatter_reduce(base, v, i0, ...; reduce, include_self), the same loop combining with prod/max/min (after a
    first pass that writes the reduction's identity into every target when the targets' own values are left out).
    Block: index-space dims; out (address, n strides, n sizes); v (address, strides); each index."""
    base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
    r = max(len(i.aval.shape) for i in idx) if idx else 0
    n = len(idx)
    classes = [STRIDED] * (1 + n)
    b = ki.Builder()
    nest = _Nest(b, r, classes, False)
    od = e.outs[0].aval.dtype
    po = b.let("po", b.A[nest.slot].ptr(_elem(od)))
    so = [b.let(f"so{k}", b.A[nest.slot + 1 + k]) for k in range(n)]
    no = [b.let(f"no{k}", b.A[nest.slot + 1 + n + k]) for k in range(n)]
    nest.slot += 1 + 2 * n
    nest.operand(0, v.aval.dtype)
    for k, iv in enumerate(idx):
        nest.operand(k + 1, iv.aval.dtype)
    IE = nest.slot
    nest.slot += 2

    def target(js):
        at = const(0)
        for k in range(n):
            at = js[k] * so[k] if k == 0 else at + js[k] * so[k]
        return at

    def write(js):
        at = target(js)
        val = _load(0, nest, v.aval.dtype)
        if e.op.name == "scatter_reduce":
            return _reduce_write(b, e.params["reduce"], od, po, at, val)
        if od is dt.bool_:
            return [ki.Store(po, at, _stored(od, val))]
        if e.params["accumulate"]:
            return [ki.Store(po, at, cast(po[at] + val, _T(od)))]
        return [ki.Store(po, at, cast(val, _T(od)))]

    def first(js):
        return [ki.Store(po, target(js), _reduce_identity(e.params["reduce"], od))]
    passes = [write]
    if e.op.name == "scatter_reduce" and not e.params["include_self"]:
        passes.insert(0, first)
    for access in passes:
        body = _bounds_checked(b, n, [_load(k + 1, nest, idx[k].aval.dtype) for k in range(n)], no, access, IE,
                               wrap=e.op.name != "scatter_reduce")
        nest.loops(body, range(n + 1))
    return Kernel("scatter", b.finish(), rank=r, operands=[e.outs[0], v] + list(idx), classes=classes,
                  parallel=False, label="scatter")


__all__ = ["gen_gather", "gen_scatter"]
