"""``index_put`` with a basic index (slices, integers, None, Ellipsis), and row indexing ``w[idx]`` /
``index_put(w, v, idx)`` (an embedding and its backward), as native steps (``layout.Program`` mixes this in).

The backward of basic indexing (``q, k, v = x.split(C, dim=2)``, ``x[:, -1]``) is ``index_put(zeros, g;
spec, accumulate=True)``.  Without a native form it was a NumPy host step, and one host step gives the whole graph
a Python driver.  Here it is two loops: the base copied into the output's buffer, then the value written (or
added) into the region the index selects, a strided view of that buffer, read and written in place by a
``region`` kernel whose destination may have any strides.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from .places import bcast_strides, coalesce, region_place
from .region_loops import gen_region, row_kernel


class RegionSteps:
    """``Program`` methods for basic-index ``index_put`` (see the module docstring)."""

    def _region(self, e) -> bool:
        from .layout import Step, _cls     # layout imports this module
        base, v = e.ins[0], e.ins[1]
        out = e.outs[0]
        acc = e.params["accumulate"]
        if out.aval.dtype is dt.bool_ and acc or v.aval.dtype is not out.aval.dtype:
            return False
        reuse = self.places.base_reusable(base, out)
        po = reuse if reuse is not None else self.places.buffer(out, out.aval.shape, out.aval.dtype)
        region = region_place(po, e.params["spec"])
        if region is None:
            return False
        self.places[out] = po
        if reuse is not None:
            # the base is a dead intermediate: add into its buffer, no copy (a chain of index_puts, e.g. the
            # q, k, v gradients of a split written into one qkv gradient)
            self.places.hold(po.root, out)
        else:
            self._copy_step(self.place(base), po, "copy (index_put)")
        pv = self.place(v)
        it = region.shape
        sst = bcast_strides(pv, it) if tuple(pv.shape) != tuple(it) else list(pv.strides)
        shape, (sst, dst) = coalesce(list(it), [sst, list(region.strides)])
        k = gen_region(out.aval.dtype, len(shape), _cls(sst), _cls(dst), acc)
        st = Step("kernel", k, label="index_put (region)", shapes=[list(out.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        self._operand(pv, sst)
        self._operand(region, dst)
        self._add(st)
        return True

    def _row_operands(self, x, idx, v):
        """(index element stride, value row stride) when BLAS-like row moves can read the operands in place
        (``x``'s rows unit-stride, the index one strided run, the value's rows unit-stride), else None."""
        c = int(np.prod(x.aval.shape[1:]))
        if v is None:
            px = self.place(x)
            col = _row_stride(px.strides[1:], px.shape[1:])
            if col is None or (c > 1 and col != 1):
                return None
        pi = self.place(idx)
        si = _row_stride(pi.strides, pi.shape)
        if si is None:
            return None
        sv = 0
        if v is not None:
            pv = self.place(v)
            ni = idx.aval.ndim
            full = tuple(idx.aval.shape) + tuple(x.aval.shape[1:])
            vst = bcast_strides(pv, full) if tuple(pv.shape) != full else list(pv.strides)
            sv, col = _row_stride(vst[:ni], full[:ni]), _row_stride(vst[ni:], full[ni:])
            if sv is None or col is None or (c > 1 and col != 1):
                return None
        return si, sv

    def _emit_rows(self, e, kind, x, idx, pdata, pother, si, so):
        from .layout import Step
        st = Step("kernel", row_kernel(kind, x.aval.dtype, idx.aval.dtype, e.params.get("accumulate", False)),
                  label=f"row {kind}", shapes=[list(x.aval.shape), list(idx.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table += [int(np.prod(idx.aval.shape)), int(np.prod(x.aval.shape[1:]))]
        self._slot_addr(pdata)
        self.table += [int(pdata.strides[0]) if pdata.shape[0] > 1 else 0, int(x.aval.shape[0])]
        self._slot_addr(self.place(idx))
        self.table.append(int(si))
        self._slot_addr(pother)
        self.table.append(int(so))
        self._index_check_slot(e)
        self._add(st)

    def _row_gather(self, e) -> bool:
        """``x[idx]`` (rows): one row copy per index, bounds-checked."""
        x, idx = e.ins
        out = e.outs[0]
        ops = self._row_operands(x, idx, None)
        if ops is None or not out.aval.size:
            return False
        po = self.places.assign(out)
        self._emit_rows(e, "gather", x, idx, self.place(x), po, ops[0], int(np.prod(x.aval.shape[1:])))
        return True

    def _row_scatter(self, e) -> bool:
        """``index_put(base, v, idx)`` (rows, optionally accumulating): the base copied, then one row write or add
        per index, in index order (repeated indices accumulate as ``np.add.at`` does)."""
        base, v, idx = e.ins
        out = e.outs[0]
        if v.aval.dtype is not out.aval.dtype or out.aval.dtype is dt.bool_ or not out.aval.size:
            return False
        ops = self._row_operands(base, idx, v)
        if ops is None:
            return False
        po = self.places.assign(out)
        self._copy_step(self.place(base), po, "copy (index_put)")
        self._emit_rows(e, "scatter", base, idx, po, self.place(v), ops[0], ops[1])
        return True


def _row_stride(strides, shape):
    """The one element stride that walks ``shape`` with ``strides`` as a single run (0 for a single element), or
    None."""
    sh, (st,) = coalesce(list(shape), [list(strides)])
    if not sh:
        return 0
    return st[0] if len(sh) == 1 else None


__all__ = ["RegionSteps", "gen_region"]
