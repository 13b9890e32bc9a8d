"""Indexing primitives.

``getitem(x, *index_tensors; spec)`` and ``index_put(x, v, *index_tensors; spec, accumulate)``.  ``spec`` is a
hashable tuple describing the index: ints, None, Ellipsis, ``("slice", start, stop, step)`` and
``("tensor", k)`` for the k-th integer index tensor input.  Boolean masks are turned into integer index
tensors before binding (their shape depends on data).

Range-checked indexing (``oob`` param, optional): torch's index-taking ops each raise their own error for an
index out of range, and most (embedding, index_select, gather, scatter, index_add, one_hot, nll_loss) refuse
negative indices where Python indexing wraps them.  ``oob = (exception name, shifted, template, template for a
negative value or None)``, the templates over ``value``, ``dim`` and ``size``.  ``shifted``: the op refuses
negatives, and binds its index tensor with negative values shifted by ``-size`` (``idx - size`` where
``idx < 0``), so that the kernels' wrap-around (``j + size``) leaves them negative and their bounds check records
them; else negatives wrap as in Python (take, put).  The impls here, and the compiled steps' error
(``codegen/lowering.index_error``), raise the message with the original value (``oob_error``).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import LINEAR, Aval, OpDef, OpError, broadcast_shapes, fmt_shape, register
from ..symbolic import has_symbols


def np_index(spec, arrays):
    out = []
    for s in spec:
        if type(s) is tuple:
            if s[0] == "slice":
                out.append(slice(s[1], s[2], s[3]))
            else:
                out.append(arrays[s[1]])
        else:
            out.append(s)
    return tuple(out)


def spec_str(spec) -> str:
    parts = []
    for s in spec:
        if type(s) is tuple:
            if s[0] == "slice":
                a, b, c = s[1:]
                parts.append(("" if a is None else str(a)) + ":" + ("" if b is None else str(b))
                             + ("" if c is None else f":{c}"))
            else:
                parts.append(f"idx{s[1]}")
        elif s is None:
            parts.append("None")
        elif s is Ellipsis:
            parts.append("...")
        else:
            parts.append(str(s))
    return "[" + ", ".join(parts) + "]"


class IndexOpError(OpError, IndexError):
    """An index out of range or too many indices: an IndexError (as in torch and Python) naming the op."""


def _index_shape(name, x: Aval, idx_avals, spec):
    for a in idx_avals:
        if a.dtype not in (dt.int64, dt.int32):
            raise OpError(f"{name}: tensors used as indices must be long, int or bool tensors, got {a.dtype.name}")
    if has_symbols((x.shape, [a.shape for a in idx_avals], spec)):
        return _symbolic_index_shape(name, x, idx_avals, spec)
    _check_ints(name, x.shape, spec)
    if len(idx_avals) > 1:
        shapes = [a.shape for a in idx_avals]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:      # (torch's words, not NumPy's "indexing arrays ... (3,) (2,)")
            raise IndexOpError(f"{name}: shape mismatch: indexing tensors could not be broadcast together with shapes "
                               f"{', '.join(fmt_shape(s) for s in shapes)}") from None
    # zero-stride stand-ins: NumPy computes the result shape (and raises on bad indices) without data
    dummy = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), x.shape, (0,) * x.ndim)
    idx = np_index(spec, [np.zeros(a.shape, np.intp) for a in idx_avals])
    try:
        return dummy[idx].shape
    except IndexError as e:
        raise IndexOpError(f"{name}: index {spec_str(spec)} is invalid for a tensor of shape {fmt_shape(x.shape)}: "
                           f"{e}") from None


def _consumed(spec) -> int:
    """The dims of the indexed tensor that ``spec``'s entries but an Ellipsis index (None and bools index none)."""
    return sum(1 for s in spec if s is not None and s is not Ellipsis and type(s) is not bool)


def _check_ints(name, shape, spec):
    e = int_key_error(shape, spec)
    if e is not None:
        raise IndexOpError(f"{name}: {e}")


def int_key_error(shape, spec) -> IndexError | None:
    """torch's error for a key's integers, which it applies left to right before any index tensor: too many
    indices, or an integer out of range, whose "dimension" is its position in the key (``x[..., 7]``: 1)."""
    consumed = _consumed(spec)
    if consumed > len(shape):
        return IndexError(f"too many indices for tensor of dimension {len(shape)}")
    dim = 0
    for pos, s in enumerate(spec):
        if s is None or type(s) is bool:
            continue
        if s is Ellipsis:
            dim += len(shape) - consumed
            continue
        if type(s) is not tuple and not -shape[dim] <= s < shape[dim]:
            return IndexError(f"index {s} is out of bounds for dimension {pos} with size {shape[dim]}")
        dim += 1
    return None


def _symbolic_index_shape(name, x: Aval, idx_avals, spec):
    """NumPy's result shape of ``x[spec]`` with symbolic sizes: decisions on sizes (bounds, slice clamps) are
    comparisons, guarded by the trace (ir/symbolic.py).  A Python bool indexes no dim of x: it is an advanced index
    of shape (1,) (True) or (0,) (False) over a new dim, as NumPy treats it."""
    consumed = _consumed(spec)
    if consumed > x.ndim:
        raise IndexOpError(f"{name}: too many indices for tensor of dimension {x.ndim}")
    full, at_pos = [], []       # (at_pos: each entry's position in the key, torch's "dimension" of an integer)
    for pos, s in enumerate(spec):
        more = [("slice", None, None, None)] * (x.ndim - consumed) if s is Ellipsis else [s]
        full.extend(more)
        at_pos.extend([pos] * len(more))
    if Ellipsis not in spec:
        full.extend([("slice", None, None, None)] * (x.ndim - consumed))
        at_pos.extend([len(spec)] * (x.ndim - consumed))
    adv = any(type(s) is bool or type(s) is tuple and s[0] == "tensor" for s in full)
    out, adv_at, dim, groups, prev = [], None, 0, 0, False
    for s, pos in zip(full, at_pos):
        if s is None:
            out.append(1)
            prev = False
            continue
        if type(s) is not bool:
            size = x.shape[dim]
            dim += 1
            if type(s) is tuple and s[0] == "slice":
                out.append(_slice_len(size, s[1], s[2], s[3]))
                prev = False
                continue
            if type(s) is not tuple and not (-size <= s < size):
                raise IndexOpError(f"{name}: index {s} is out of bounds for dimension {pos} with size {size}")
        if type(s) is tuple or adv:         # with index tensors or bools, an int index is one too (NumPy's rule)
            if not prev:
                groups += 1
                if adv_at is None:
                    adv_at = len(out)
            prev = True
    if adv:
        bshape = broadcast_shapes(name, [a.shape for a in idx_avals] + [(int(s),) for s in spec if type(s) is bool])
        at = adv_at if groups == 1 else 0
        out[at:at] = list(bshape)
    return tuple(out)


def _slice_len(size, start, stop, step):
    step = 1 if step is None else step
    if step <= 0:
        raise OpError("slice step must be positive")
    start = 0 if start is None else (max(start + size, 0) if start < 0 else min(start, size))
    stop = size if stop is None else (max(stop + size, 0) if stop < 0 else min(stop, size))
    n = stop - start
    if step != 1:
        n = (n + step - 1) // step
    return n if n > 0 else 0        # (a symbolic length: guarded positive)


def tensor_axis(spec, k: int, ndim: int = 0) -> int:
    """The dimension of the indexed tensor (of ``ndim`` dims: needed where ``spec`` has an Ellipsis) that index
    tensor ``k`` of ``spec`` indexes."""
    ax = 0
    for s in spec:
        if type(s) is tuple and s[0] == "tensor" and s[1] == k:
            return ax
        if s is Ellipsis:
            ax += ndim - _consumed(spec)
        elif s is not None and type(s) is not bool:
            ax += 1
    return k


def index_dim(spec, shapes, k: int) -> int:
    """torch's "dimension" in the error for index tensor ``k`` of ``spec`` (``shapes``: the index tensors' shapes):
    its number among the key's tensors (``x[:, idx]``: 0), not the dimension of x it indexes; a key of 0-d ones only
    (integers, which torch selects by) names them by their position in the key (``x[i, None, j]``: j is 2).  A key
    mixing 0-d and other index tensors reaches an op only from ``index_put_``, whose indices are all tensors (a key
    selects by its 0-d tensors first: ``mutation.ints_before_tensors``), so both rules agree there."""
    if len(shapes[k]) == 0:
        return next(p for p, s in enumerate(spec) if type(s) is tuple and s[0] == "tensor" and s[1] == k)
    return k


def index_range_error(shape, spec, idx) -> IndexError | None:
    """torch's error for the first index out of range of a key's index tensors ``idx`` (arrays) (or for index
    tensors whose shapes do not broadcast), None when all are in range: element by element of the broadcast index, each element's tensors in order (torch's order, which a
    compiled loop over the result follows too)."""
    sizes = [shape[tensor_axis(spec, k, len(shape))] for k in range(len(idx))]
    shapes = [np.shape(a) for a in idx]
    if not idx:
        return None
    try:
        arrays = np.broadcast_arrays(*[np.asarray(a) for a in idx])
    except ValueError:
        return IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                          + ", ".join(fmt_shape(s) for s in shapes))
    bad = np.stack([((a < -sizes[k]) | (a >= sizes[k])).reshape(-1) for k, a in enumerate(arrays)])
    hit = bad.any(axis=0)
    if not hit.any():
        return None
    at = int(np.argmax(hit))
    k = int(np.argmax(bad[:, at]))
    return IndexError(f"index {int(arrays[k].reshape(-1)[at])} is out of bounds for dimension "
                      f"{index_dim(spec, shapes, k)} with size {sizes[k]}")


def single_tensor_axis(spec, ndim: int, n_index: int):
    """The axis ``k`` when ``spec`` is ``x[:, ..., :, idx]`` (``index_select`` along ``k``): whole slices on every
    other dim (trailing ones may be left out) and one index tensor on dim ``k``; None otherwise.  Such an index
    reads ``x[o_0..o_{k-1}, idx[o_k..o_{k+m-1}], o_{k+m}..]`` at output position ``o`` (m = the index's rank):
    the form the fusion planner turns into loads and stores inside a loop (``ir/passes/fuse.py``)."""
    if n_index != 1 or len(spec) > ndim:
        return None
    k = None
    for d, s in enumerate(spec):
        if type(s) is not tuple:
            return None
        if s[0] == "tensor":
            k = d
        elif s != ("slice", None, None, None):
            return None
    return k


def oob_error(oob, value: int, axis: int, size: int) -> Exception:
    """The error of a range-checked index (``oob`` param: see the module docstring) that met ``value`` (as bound:
    shifted when negative, for a shifted ``oob``) along ``axis`` of size ``size``."""
    exc, shifted, template, negative = oob
    if shifted and value < 0:
        value += size
    if negative is not None and value < 0:
        template = negative
    return (IndexError if exc == "IndexError" else RuntimeError)(template.format(value=value, dim=axis, size=size))


def _check_range(shape, idx, spec, oob):
    for k, a in enumerate(idx):
        ax = tensor_axis(spec, k, len(shape))
        size = shape[ax]
        bad = ((a < 0) if oob[1] else (a < -size)) | (a >= size)
        if bad.any():
            raise oob_error(oob, int(np.asarray(a)[bad].flat[0]), ax, size)


def _getitem_rule(avals, params):
    x, *idx = avals
    return [Aval(_index_shape("getitem", x, idx, params["spec"]), x.dtype)]


def _getitem_impl(x, *idx, spec, oob=None):
    if oob is not None:
        _check_range(x.shape, idx, spec, oob)
    key = np_index(spec, idx)
    if Ellipsis not in spec:
        # a trailing Ellipsis changes no result but one: for one element NumPy gives a 0-d view instead of a
        # scalar copy (torch's x[i] is a view), so x is indexed once whatever the result
        key += (Ellipsis,)
    try:
        return x[key]
    except IndexError as e:     # torch's text and order, as compiled code's check says it (lowering.py)
        raise (index_range_error(x.shape, spec, idx) or e) from None


def _getitem_vjp(c, g):
    x_shape = c.shapes[0]
    idx = c.inputs[1:]
    zeros = g.new_zeros(x_shape)
    return (c.bind("index_put", zeros, g, *idx, spec=c.params["spec"], accumulate=True),) + (None,) * len(idx)


def _is_basic(spec):
    return not any(type(s) is tuple and s[0] == "tensor" for s in spec)


def _getitem_for_signature(avals, params):
    """The eager impl of a basic index (no index tensor, no range check): NumPy's key made once per signature."""
    spec = params["spec"]
    if len(avals) > 1 or params.get("oob") is not None:
        return None
    for s in spec:
        if (type(s) is bool or type(s) is int) and (s == 0 or s == 1):
            # x[True] and x[1] (x[False], x[0]) have equal specs, so one signature's cache entry serves both
            return None
    key = np_index(spec, ())
    if Ellipsis not in spec:
        key += (Ellipsis,)      # (as _getitem_impl: one element is a 0-d view)

    def basic_index(x, spec, oob=None):
        return x[key]
    return basic_index


register(OpDef("getitem", "index", _getitem_rule, _getitem_impl, _getitem_vjp,
               saves_in=tuple(range(1, 64)), view=True, grad_name="IndexBackward0", jvp=LINEAR,
               eager_impl=_getitem_for_signature))


def _index_put_rule(avals, params):
    x, v, *idx = avals
    tgt = _index_shape("index_put", x, idx, params["spec"])
    # the value must broadcast to the indexed region
    nd = len(tgt)
    if v.ndim > nd and any(d != 1 for d in v.shape[:v.ndim - nd]):
        raise OpError(f"index_put: shape mismatch: value tensor of shape {fmt_shape(v.shape)} cannot be broadcast "
                      f"to indexing result of shape {fmt_shape(tgt)}")
    for a, b in zip(v.shape[::-1], tgt[::-1]):
        if a != 1 and a != b:
            raise OpError(f"index_put: shape mismatch: value tensor of shape {fmt_shape(v.shape)} cannot be "
                          f"broadcast to indexing result of shape {fmt_shape(tgt)}")
    return [Aval(x.shape, x.dtype)]


def _index_put_impl(x, v, *idx, spec, accumulate, oob=None):
    if oob is not None:
        _check_range(x.shape, idx, spec, oob)
    out = np.array(x, copy=True)
    ix = np_index(spec, idx)
    v = np.asarray(v).astype(out.dtype, copy=False)
    try:
        if accumulate:
            if _is_basic(spec):
                out[ix] += v
            else:
                np.add.at(out, ix, np.broadcast_to(v, out[ix].shape))
        else:
            out[ix] = v
    except IndexError as e:     # torch's text and order (NumPy names x's axis, array by array)
        raise (index_range_error(out.shape, spec, idx) or e) from None
    return out


def _index_put_vjp(c, g):
    spec, idx = c.params["spec"], c.inputs[2:]
    gx = gv = None
    if c.needs_grad[0]:
        gx = g if c.params["accumulate"] else c.bind("index_put", g, 0.0, *idx, spec=spec, accumulate=False)
    if c.needs_grad[1]:
        gv = c.bind("getitem", g, *idx, spec=spec)
        vshape = c.shapes[1]
        if gv.shape != vshape:
            gv = gv.sum_to_size(vshape)
        if gv.dtype is not c.dtypes[1]:
            gv = gv.to(c.dtypes[1])
    return (gx, gv) + (None,) * len(idx)


_FULL = ("slice", None, None, None)
_TILED_MAX = 1 << 14      # elements of a tiled row kept per signature (128 KiB)


def _index_put_for_signature(avals, params):
    """The eager impl of ``x.index_put_((i,), v, accumulate=True)`` on a float ``x`` indexed along its first axis by
    one integer tensor (an embedding's or ``x[idx]``'s backward): ``np.add.at`` on ``x`` seen as one flat axis, each
    index standing for its row's elements, where NumPy runs a plain loop over the indices (its 2-D form iterates a
    row at a time: ~160,000 instructions for makemore's (32, 3) of (27, 10), against ~50,000).  Each element sums its
    values in the same order (the index positions in order), so the bits are the general impl's."""
    spec = params.get("spec")
    if not params.get("accumulate") or len(avals) != 3 or not spec or spec[0] != ("tensor", 0) \
            or any(s != _FULL for s in spec[1:]):
        return None
    x, _, i = avals
    if not x.shape or has_symbols(x.shape) or has_symbols(i.shape) or x.dtype.np.kind != "f" \
            or i.dtype.np.kind not in "iu":
        return None
    n, row = x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))
    if n == 0 or row == 0:
        return None
    starts = np.arange(n, dtype=np.intp) * row     # np.take wraps a negative index as Python does
    cols = np.arange(row, dtype=np.intp)
    region = tuple(i.shape) + tuple(x.shape[1:])
    count = int(np.prod(i.shape, dtype=np.int64))
    # each index's row of element numbers: its start repeated, plus 0..row-1 tiled (kept per signature where small;
    # a (count, 1) + (row,) broadcast costs ~2x more)
    tiled = np.tile(cols, count) if count * row <= _TILED_MAX else None

    def index_put_rows(x, v, i, spec, accumulate, oob=None):
        out = np.array(x, copy=True)
        if not out.flags.c_contiguous:
            return _index_put_impl(x, v, i, spec=spec, accumulate=accumulate, oob=oob)
        if oob is not None:
            _check_range(x.shape, (i,), spec, oob)
        v = np.asarray(v).astype(out.dtype, copy=False)
        if v.shape != region:
            v = np.broadcast_to(v, region)
        try:
            if tiled is not None:
                at = starts.take(i.reshape(-1)).repeat(row)
                at += tiled
            else:
                at = (np.take(starts, i).reshape(-1, 1) + cols).reshape(-1)
        except IndexError as e:     # torch's text (NumPy's names an axis)
            raise (index_range_error(x.shape, spec, (i,)) or e) from None
        np.add.at(out.reshape(-1), at, v.reshape(-1))
        return out
    return index_put_rows


register(OpDef("index_put", "index", _index_put_rule, _index_put_impl, _index_put_vjp,
               saves_in=tuple(range(2, 64)), grad_name="IndexPutBackward0", jvp=LINEAR,
               eager_impl=_index_put_for_signature))


# ---- data-dependent sizes (ir/unbacked.py, ir/passes/bounded_sizes.py) ---------------------------------------
def _nonzero_bounded_rule(avals, params):
    x, n = avals
    if n.shape != () or n.dtype is not dt.int64:
        raise OpError(f"nonzero_bounded: the count must be an int64 scalar, got {n}")
    return [Aval((params["size"], len(x.shape)), dt.int64)]


def _nonzero_bounded_impl(x, n, size):
    """The coordinates of ``x``'s nonzero elements in row-major order, in the first rows of a (size, ndim) buffer,
    the first row repeated after them (zeros when there is none: the padding indexes a selected element, in
    range); ``n`` is their count, computed beside it."""
    out = np.zeros((size, x.ndim), np.int64)
    nz = np.argwhere(np.asarray(x))[:size]
    out[:len(nz)] = nz
    if len(nz):
        out[len(nz):] = nz[0]
    return out


register(OpDef("nonzero_bounded", "index", _nonzero_bounded_rule, _nonzero_bounded_impl, None,
               doc="nonzero_bounded(x, n; size): nonzero(x) as (size, ndim) int64 coordinates, n of them valid "
                   "(n: the count of nonzero elements); size is a data-dependent symbol in a trace, the bound "
                   "(x's number of elements) once ir/passes/bounded_sizes.py has run"))
