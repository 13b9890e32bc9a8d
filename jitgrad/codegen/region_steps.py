"""``index_put`` with a basic index (slices, integers, None, Ellipsis) as native steps (``layout.Program``
mixes this in).

The backward of basic indexing (``q, k, v = x.split(C, dim=2)``, ``x[:, -1]``) is ``index_put(zeros, g;
spec, accumulate=True)``.  Without a native form it was a NumPy host step, and one host step gives the whole graph
a Python driver.  Here it is two loops: the base copied into the output's buffer, then the value written (or
added) into the region the index selects, a strided view of that buffer, read and written in place by a
``region`` kernel whose destination may have any strides.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from ..ir.ops.index import np_index
from .loops import BCAST, CONTIG, STRIDED, Kernel, _load, _Nest, _store, _tname


def _cls(strides):
    if not strides:
        return CONTIG
    s = strides[-1]
    return CONTIG if s == 1 else BCAST if s == 0 else STRIDED


def gen_region(dtype: dt.DType, rank: int, src_cls: str, dst_cls: str, accumulate: bool) -> Kernel:
    """``dst[...] = src`` or ``dst[...] += src`` over ``rank`` dims, both operands strided."""
    nest = _Nest(rank, [src_cls, dst_cls], False)
    nest.operand(0, dtype)
    nest.operand(1, dtype)
    v = _load(0, nest, dtype)
    if accumulate:
        v = f"{_tname(dtype)}({v} + {_load(1, nest, dtype)})"
    body = [f"v = {v}", _store(1, nest, dtype, "v")]
    lines = ["def kernel(A):"] + nest.loops(body, (0, 1))
    return Kernel("copy", "\n".join(lines), rank=rank, operands=[None, None], classes=[src_cls, dst_cls],
                  parallel=False, label="index_put (region)")


def region_place(place, spec):
    """The place of ``x[spec]`` (a basic index) over ``place``, found on a strided dummy array as views are."""
    from .layout import Place
    item = place.dtype.np.itemsize
    dummy = np.lib.stride_tricks.as_strided(np.zeros(1, place.dtype.np), place.shape,
                                            [s * item for s in place.strides])
    res = dummy[np_index(spec, ())]
    res = np.asarray(res) if not isinstance(res, np.ndarray) else res
    if not np.may_share_memory(res, dummy) and res.size:
        return None
    off = (res.__array_interface__["data"][0] - dummy.__array_interface__["data"][0]) // item
    return Place(place.root, place.offset + off, res.shape, [s // item for s in res.strides], place.dtype)


class RegionSteps:
    """``Program`` methods for basic-index ``index_put`` (see the module docstring)."""

    def _region(self, e) -> bool:
        from .layout import Step, _bcast_strides, _coalesce
        base, v = e.ins[0], e.ins[1]
        out = e.outs[0]
        acc = e.params["accumulate"]
        if out.aval.dtype is dt.bool_ and acc or v.aval.dtype is not out.aval.dtype:
            return False
        po = self._new_buffer(out, out.aval.shape, out.aval.dtype)
        region = region_place(po, e.params["spec"])
        if region is None:
            return False
        self.places[out] = po
        self._copy_step(self.place(base), po, "copy (index_put)")
        pv = self.place(v)
        it = region.shape
        sst = _bcast_strides(pv, it) if tuple(pv.shape) != tuple(it) else list(pv.strides)
        shape, (sst, dst) = _coalesce(list(it), [sst, list(region.strides)])
        k = gen_region(out.aval.dtype, len(shape), _cls(sst), _cls(dst), acc)
        st = Step("kernel", k, label="index_put (region)", shapes=[list(out.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        self._operand(pv, sst)
        self._operand(region, dst)
        self._add(st)
        return True


__all__ = ["RegionSteps", "gen_region", "region_place"]
