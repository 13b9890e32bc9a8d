"""The public shape functions (``jg.reshape(x, ...)`` and ``x.reshape(...)``): views, cat/stack, split/chunk/
unbind, gather/index_select.  Each is a primitive ``bind`` or a composition of primitives, declared with ``@published``
(function and Tensor method); ``elementary.py`` re-exports them."""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ...ir.graph import Var
from ...ir.ops import OpError
from ...ir.symbolic import SymInt
from ...runtime.symbolic_values import arange as symbolic_arange, symbolic_size
from ..dim_args import dim_arg as _axis, dims_arg as _axes, fresh_result as _fresh
from ...runtime import dispatch as _dispatch
from ...runtime.bind_route import ROUTE as _ROUTE
from ...runtime.dispatch import bind
from ...runtime.op_errors import op_error
from ...runtime.grad_names import named
from ...runtime.multi_view import join as join_views
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.traced import definite_view, layout_key, traced_strides
from ...runtime.checked_index import IN_DIM, IN_SELF, checked_index


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    for s in shape:
        if type(s) is not int:
            break
    else:
        return tuple(shape)         # (the common case, without a generator's frames)
    return tuple(s if type(s) is SymInt else int(s) for s in shape)      # (sizes of a trace stay symbolic)


def _infer(name, shape, input):
    if -1 not in shape:
        return shape
    numel = input.numel()

    def error(msg):
        from ...ir.ops import Aval
        return op_error(O["reshape"], [Aval(input.shape, input.dtype)],
                         OpError(f"{name}: {msg} (input shape {list(input.shape)})"))
    if shape.count(-1) > 1:
        raise error("only one dimension can be inferred")
    if -1 in shape:
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if known == 0 or numel % known:
            raise error(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = list(shape)
        shape[shape.index(-1)] = numel // known      # (the only -1: checked above)
        shape = tuple(shape)
    return shape


@published("jitgrad", "Tensor")
def reshape(input, *shape, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(reshape, 'reshape', (input, *shape), {}, torch_kw)
    shape = _infer("reshape", _shape_arg(shape), input)
    if shape == input.shape:
        return input
    return bind(O["reshape"], input, shape=shape)


@published("jitgrad", "Tensor")
def view(input, *shape, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(view, 'view', (input, *shape), {}, torch_kw)
    if len(shape) == 1 and isinstance(shape[0], dt.DType):
        raise NotImplementedError("view(dtype) is not supported; use .to(dtype)")
    d = input._data
    new = _infer("view", _shape_arg(shape), input)
    # a traced value has the strides eager mode would give it, when known (runtime/traced.py)
    strides = traced_strides(input) if type(d) is Var else layout_key(d)
    if strides is not None and d.size > 1:
        from ...runtime.view_rule import viewable
        if not viewable(d.shape, strides, new):
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                               "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
    if new == input.shape:
        new = input.shape       # as torch: a view is a new tensor, even of one shape
    r = _dispatch._bind(_RESHAPE, (input,), {"shape": new}) if _ROUTE.plain else bind(_RESHAPE, input, shape=new)
    return definite_view(r, input)


@published("jitgrad", "Tensor")
def flatten(input, start_dim=0, end_dim=-1, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(flatten, 'flatten', (input, start_dim, end_dim), {}, torch_kw)
    if input.ndim == 0:
        return input.reshape(1)
    s = _axis("flatten", input, start_dim)
    e = _axis("flatten", input, end_dim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input.shape[:s] + (int(np.prod(input.shape[s:e + 1])),) + input.shape[e + 1:]
    return reshape(input, shape)


@published("jitgrad", "Tensor")
def squeeze(input, dim=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(squeeze, 'squeeze', (input, dim), {}, torch_kw)
    if dim is None:
        shape = tuple(d for d in input.shape if d != 1)
    else:
        axes = _axes("squeeze", input, dim) if input.ndim else ()
        shape = tuple(d for i, d in enumerate(input.shape) if not (i in axes and d == 1))
    return definite_view(_fresh(reshape(input, shape), input, "SqueezeBackward0" if dim is None else "SqueezeBackward1"),
                         input)


@published("jitgrad", "Tensor")
def unsqueeze(input, dim, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unsqueeze, 'unsqueeze', (input, dim), {}, torch_kw)
    ax = dim if dim >= 0 else dim + input.ndim + 1
    if not 0 <= ax <= input.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-input.ndim - 1}, {input.ndim}], "
                         f"but got {dim})")
    return definite_view(_fresh(bind(O["reshape"], input, shape=input.shape[:ax] + (1,) + input.shape[ax:]), input,
                                "UnsqueezeBackward0"), input)


@published("jitgrad", "Tensor")
def permute(input, *dims, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(permute, 'permute', (input, *dims), {}, torch_kw)
    dims = _shape_arg(dims)
    nd = input.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {nd} is not equal to "
                           f"len(dims) = {len(dims)}")
    perm = []
    for d in dims:      # (an int in range taken as it is: dim_arg's frames for the rest, and its errors)
        perm.append(d if type(d) is int and 0 <= d < nd else d + nd if type(d) is int and -nd <= d < 0
                    else _axis("permute", input, d))
    perm = tuple(perm)
    if perm == tuple(range(nd)):
        return input
    return _dispatch._bind(_PERMUTE, (input,), {"perm": perm}) if _ROUTE.plain else bind(_PERMUTE, input, perm=perm)


_PERMUTE, _RESHAPE = O["permute"], O["reshape"]


def _swap_last2(input):
    """``.mT`` / ``.t()`` of a matrix: one permute bind, no argument normalisation."""
    n = input._data.ndim
    perm = (1, 0) if n == 2 else tuple(range(n - 2)) + (n - 1, n - 2)
    if _ROUTE.plain:
        return _dispatch._bind(_PERMUTE, (input,), {"perm": perm})
    return bind(_PERMUTE, input, perm=perm)


@published("jitgrad", "Tensor")
def transpose(input, dim0, dim1, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(transpose, 'transpose', (input, dim0, dim1), {}, torch_kw)
    return _fresh(_transpose(input, dim0, dim1), input, "TransposeBackward0")


def _transpose(input, dim0, dim1):
    nd = input.ndim
    if nd == 2 and type(dim0) is int and type(dim1) is int and -2 <= dim0 <= 1 and -2 <= dim1 <= 1:
        return _swap_last2(input) if dim0 % 2 != dim1 % 2 else input
    a = dim0 if type(dim0) is int and 0 <= dim0 < nd else _axis("transpose", input, dim0)
    b = dim1 if type(dim1) is int and 0 <= dim1 < nd else _axis("transpose", input, dim1)
    perm = list(range(nd))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, perm)


swapaxes = published("jitgrad", "Tensor", name="swapaxes")(transpose)


@published("jitgrad", "Tensor")
def t(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(t, 't', (input,), {}, torch_kw)
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _fresh(transpose(input, 0, 1), input, "TBackward0") if input.ndim == 2 else input


@published("jitgrad", "Tensor")
def expand(input, *sizes, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(expand, 'expand', (input, *sizes), {}, torch_kw)
    sizes = _shape_arg(sizes)
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({input.ndim})")
    shape = tuple(input.shape[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(sizes))
    if shape == input.shape:
        return input
    return bind(O["broadcast_to"], input, shape=shape)


@published("jitgrad", "Tensor")
def broadcast_to(input, shape, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(broadcast_to, 'broadcast_to', (input, shape), {}, torch_kw)
    return expand(input, tuple(shape))


@published("jitgrad", "Tensor")
def expand_as(input, other, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(expand_as, 'expand_as', (input, other), {}, torch_kw)
    return expand(input, other.shape)


@published("jitgrad")
def broadcast_tensors(*tensors, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(broadcast_tensors, 'broadcast_tensors', (*tensors,), {}, torch_kw)
    shape = np.broadcast_shapes(*(x.shape for x in tensors))
    return tuple(expand(x, shape) for x in tensors)


@published("jitgrad")
def cat(tensors, dim=0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cat, 'cat', (tensors, dim), {}, torch_kw)
    tensors = [x for x in tensors]
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    ax = _axis("cat", tensors[0], dim)
    if len(tensors) == 1:
        return tensors[0]
    return bind(O["cat"], *tensors, axis=ax)


concat = published("jitgrad", name="concat")(cat)
concatenate = published("jitgrad", name="concatenate")(cat)


@published("jitgrad")
def stack(tensors, dim=0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(stack, 'stack', (tensors, dim), {}, torch_kw)
    tensors = list(tensors)
    r = _stack(tensors, dim)
    return named(r, "StackBackward0")       # always a new tensor (unsqueeze or cat)


def _stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0].shape
    for i, x in enumerate(tensors):
        if x.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(x.shape)} at entry {i}")
    ax = dim if dim >= 0 else dim + len(shape) + 1
    return cat([unsqueeze(x, ax) for x in tensors], ax) if len(tensors) > 1 else unsqueeze(tensors[0], ax)


@published("jitgrad", "Tensor")
def split(tensor, split_size_or_sections, dim=0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(split, 'split', (tensor, split_size_or_sections, dim), {}, torch_kw)
    ax = _axis("split", tensor, dim)
    n = tensor.shape[ax]
    if isinstance(split_size_or_sections, (int, SymInt)):
        step = split_size_or_sections
        if step <= 0 and n:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
        if n and (type(n) is SymInt or type(step) is SymInt):
            k = int((n + step - 1) // step)      # symbolic sizes: only the number of pieces is guarded
            sizes = [step] * (k - 1) + [n - step * (k - 1)]
        else:
            sizes = [min(step, n - i) for i in range(0, n, step)] if n else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {dim}), but got split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(tensor[(slice(None),) * ax + (slice(start, start + s),)])
        start += s
    return _multi_view(out, tensor, "Split" if isinstance(split_size_or_sections, (int, SymInt))
                       else "SplitWithSizes", cat, ax)


def _multi_view(outs, input, name, combine, axis):
    """Mark the views a multi-output function returns (torch refuses in-place ops on them when recorded) and
    give them torch's single node (UnbindBackward0, SplitBackward0, ...; ``combine`` joins the pieces'
    gradients into the input's along ``axis``)."""
    for k, t in enumerate(outs):
        if t._base is not None:
            t._view_origin = (name, k)
        if t.grad_fn is not None and t is not input:
            t.grad_fn.torch_name = name + "Backward0"   # (pieces that keep a node each: traced, on a device)
    join_views(outs, input, name, combine, axis)
    return tuple(outs)


@published("jitgrad", "Tensor")
def chunk(input, chunks, dim=0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(chunk, 'chunk', (input, chunks, dim), {}, torch_kw)
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0")
    n = input.shape[_axis("chunk", input, dim)]
    return split(input, max(1, -(-n // chunks)), dim)


@published("jitgrad", "Tensor")
def unbind(input, dim=0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unbind, 'unbind', (input, dim), {}, torch_kw)
    ax = _axis("unbind", input, dim)
    return _multi_view([input[(slice(None),) * ax + (i,)] for i in range(input.shape[ax])], input, "Unbind",
                       stack, ax)


@published("jitgrad", "Tensor")
def gather(input, dim, index, *, range_error=IN_DIM, **torch_kw):
    """``out[i][j][k] = input[index[i][j][k]][j][k]`` (dim=0), as torch.gather, via advanced indexing.
    ``range_error``: the error of an index out of range (``checked_index.py``; torch's gather message by default,
    a library composition that gathers passes its own op's, as nll_loss does)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(gather, 'gather', (input, dim, index), {}, torch_kw)
    return _fresh(_gather(input, dim, index, range_error), input, "GatherBackward0")


def _gather(input, dim, index, range_error=IN_DIM):
    ax = _axis("gather", input, dim)
    if index.ndim != input.ndim:
        raise RuntimeError(f"gather(): Index tensor must have the same number of dimensions as input tensor "
                           f"(index {list(index.shape)}, input {list(input.shape)})")
    if input.ndim == 0:     # torch treats a 0-d tensor as one element along dim 0
        return gather(input.reshape(1), 0, index.reshape(1), range_error=range_error).reshape(())
    for i in range(input.ndim):
        if i != ax and index.shape[i] > input.shape[i]:
            raise RuntimeError(f"gather(): Size does not match at dimension {i} expected index {list(index.shape)} to "
                               f"be smaller than self {list(input.shape)} apart from dimension {ax}")
    # torch refuses a negative index (Python indexing wraps it): checked eagerly and in compiled code
    return getitem_checked(input, tuple(index_grid(index, ax)), range_error, check=(ax,))


def getitem_checked(x: Tensor, key, oob, check=None):
    """``x[key]`` (``key``: full slices and integer index tensors, one per leading dim) with the index tensors at
    positions ``check`` (default: all) checked against their dims as ``oob`` says."""
    spec, idx, params = [], [], None
    for ax, k in enumerate(key):
        if isinstance(k, Tensor):
            if check is None or ax in check:
                k, o = checked_index(k, x.shape[ax], ax, oob)
                params = params or o
            spec.append(("tensor", len(idx)))
            idx.append(k)
        else:
            spec.append(("slice", None, None, None))
    if params is None:
        return x[tuple(key)]
    return bind(O["getitem"], x, *idx, spec=tuple(spec), oob=params)


def index_grid(index, ax):
    """The advanced-indexing key of gather/scatter along ``ax``: ``index`` there, elsewhere the broadcast
    ``arange`` of each of ``index``'s dimensions (on ``index``'s device)."""
    key = []
    for i in range(index.ndim):
        if i == ax:
            key.append(index)
        else:
            shp = [1] * index.ndim
            shp[i] = index.shape[i]
            if symbolic_size(shp):
                key.append(symbolic_arange(shp[i]).reshape(shp))
            else:
                key.append(index._same_device(Tensor._make(np.arange(index.shape[i], dtype=np.int64).reshape(shp))))
    return key


@published("jitgrad", "Tensor")
def take_along_dim(input, indices, dim, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(take_along_dim, 'take_along_dim', (input, indices, dim), {}, torch_kw)
    return gather(input, dim, indices)


@published("jitgrad", "Tensor")
def index_select(input, dim, index, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(index_select, 'index_select', (input, dim, index), {}, torch_kw)
    ax = _axis("index_select", input, dim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    return _fresh(getitem_checked(input, (slice(None),) * ax + (index.reshape(-1),), IN_SELF), input,
                  "IndexSelectBackward0")


__all__ = ['reshape', 'view', 'flatten', 'squeeze', 'unsqueeze', 'permute', 'transpose', 't', 'expand', 'broadcast_to', 'expand_as', 'broadcast_tensors', 'cat', 'stack', 'split', 'chunk', 'unbind', 'gather', 'take_along_dim', 'index_select', 'swapaxes', 'concat', 'concatenate']
