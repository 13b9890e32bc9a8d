"""torch's other spellings and small forms of existing ops: the comparison aliases (``greater``, ``less_equal``,
``not_equal``, ...), in-place comparisons and logical ops (``x.eq_(y)`` writes 1/0 in ``x``'s dtype), ``cumsum_``,
``cumprod_``, ``addmm_``, ``swapdims``, ``adjoint`` and ``Tensor.H``, ``narrow_copy``, ``new_empty_strided``,
``resize_as_``, ``nonzero_static`` (a fixed-size ``nonzero``, so it compiles), and ``apply_`` / ``map_`` /
``map2_`` (Python callables over CPU tensors, as torch).

In-place forms run through ``InPlaceOps._apply_inplace``: torch's version bump, leaf and view checks.

>>> import jitgrad as jg
>>> x = jg.tensor([1.0, 2.0, 3.0])
>>> x.gt_(1.5)
tensor([0., 1., 1.])
>>> jg.nonzero_static(jg.tensor([0, 3, 0, 5]), size=3)
tensor([[ 1],
        [ 3],
        [-1]])
"""
from __future__ import annotations

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt
from ..ir.ops import OPS as O
from . import elementary as F
from ..runtime.dispatch import bind
from .creation.factories import full, ones_like
from ..runtime.grad_names import named
from .indexing.masking import addmm
from ..runtime.tensor import Tensor
from .torch_kwargs import torch_kwargs

# ---- comparison aliases --------------------------------------------------------------------------------------
greater = published("jitgrad", "Tensor", name="greater")(F.gt)
greater_equal = published("jitgrad", "Tensor", name="greater_equal")(F.ge)
less = published("jitgrad", "Tensor", name="less")(F.lt)
less_equal = published("jitgrad", "Tensor", name="less_equal")(F.le)
not_equal = published("jitgrad", "Tensor", name="not_equal")(F.ne)
swapdims = published("jitgrad", "Tensor", name="swapdims")(F.transpose)


def _as_own_dtype(s, r, node):
    """The bool result ``r`` as 1 and 0 of ``s``'s dtype; where ``s`` requires grad, still on its graph with a
    zero gradient (torch's in-place comparison records a node: EqBackward0 ...)."""
    if not s.requires_grad:
        return r.to(s.dtype)
    low = F.where(ones_like(s, dtype=dt.bool_), 0.0, s)        # zeros that hang on s's graph
    return named(F.where(r, 1.0, low), node)


def _cmp_inplace(name, fn, node):
    def f(self, other):
        nd = node[:-1] + "1" if isinstance(other, Tensor) and node[:2] in ("Eq", "Ne", "Lt", "Le", "Gt", "Ge") else node
        return self._apply_inplace(lambda s, *o: _as_own_dtype(s, fn(s, *o if o else (other,)), nd),
                                   *((other,) if isinstance(other, Tensor) else ()))
    f.__name__ = f.__qualname__ = name + "_"
    f.__doc__ = f"In place: ``x.{name}_(other)`` writes ``{name}(x, other)`` into ``x`` as 1 and 0 of its dtype."
    return f


@published("Tensor", name="logical_not_")
def _logical_not_(self):
    """In place: ``x.logical_not_()`` writes ``logical_not(x)`` into ``x`` as 1 and 0 of its dtype."""
    return self._apply_inplace(lambda s: _as_own_dtype(s, F.logical_not(s), "LogicalNotBackward0"))


@published("Tensor", name="cumsum_")
def _cumsum_(self, dim, *, dtype=None):
    """In place: ``x.cumsum_(dim)`` writes ``cumsum(x, dim)`` into ``x``."""
    return self._apply_inplace(lambda s: s.cumsum(dim, dtype=dtype))


@published("Tensor", name="cumprod_")
def _cumprod_(self, dim, *, dtype=None):
    """In place: ``x.cumprod_(dim)`` writes ``cumprod(x, dim)`` into ``x``."""
    return self._apply_inplace(lambda s: s.cumprod(dim, dtype=dtype))


@published("Tensor", name="addmm_")
def _addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    """In place: ``x.addmm_(m1, m2)`` writes ``beta * x + alpha * (m1 @ m2)`` into ``x``."""
    return self._apply_inplace(lambda s, a, b: addmm(s, a, b, beta=beta, alpha=alpha), mat1, mat2)


@published("jitgrad", "Tensor")
def resize_as_(input, the_template, *, memory_format=None):
    """``input.resize_(the_template.shape)`` (torch.resize_as_)."""
    if memory_format is not None:
        return input.resize_(tuple(the_template.shape), memory_format=memory_format)
    return input.resize_(tuple(the_template.shape))


# ---- views and copies ------------------------------------------------------------------------------------------
@published("jitgrad", "Tensor")
def adjoint(input):
    """The conjugate transpose of the last two dimensions (a view; real tensors: ``transpose(-2, -1)``)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"adjoint(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if input.ndim < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of matrices. Got "
                           f"{input.ndim}-D tensor.")
    return input.transpose(-2, -1)


@published("Tensor.property", name="H")
def _H(self):
    """The conjugate transpose of a matrix (2-d tensors only; ``mH`` for batches)."""
    if self.ndim != 2:
        extra = " For batches of matrices, consider using tensor.mH" if self.ndim > 2 else ""
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.{extra}")
    return self.transpose(0, 1)


@published("jitgrad", "Tensor")
def narrow_copy(input, dim, start, length, **torch_kw):
    """A copy of ``input.narrow(dim, start, length)`` (not a view)."""
    if torch_kw:
        return torch_kwargs(narrow_copy, "narrow_copy", (input, dim, start, length), {}, torch_kw)
    return input.narrow(dim, start, length).clone()


@published("Tensor", name="new_empty_strided")
def _new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False, layout=None,
                       pin_memory=False):
    """An uninitialised tensor of ``size`` and ``stride`` with this tensor's dtype and device by default."""
    from ..runtime.storage import empty_strided
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


@published("jitgrad", "Tensor")
def nonzero_static(input, *, size, fill_value=-1, **torch_kw):
    """The first ``size`` rows of ``nonzero(input)``, padded with ``fill_value`` rows (int64, shape
    ``(size, input.ndim)``).  Its shape does not depend on the values, so it compiles: a running count of the
    nonzero elements places each one's coordinates."""
    if torch_kw:
        return torch_kwargs(nonzero_static, "nonzero_static", (input,), {"size": size, "fill_value": fill_value},
                            torch_kw)
    if not isinstance(input, Tensor):
        raise TypeError(f"nonzero_static(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    nd, n = input.ndim, input.numel()
    out = full((size + 1, nd), fill_value, dtype=dt.int64, device=input.device)
    if n == 0 or size == 0:
        return out[:size]
    hit = (input != 0).reshape(-1)
    count = hit.long().cumsum(0) - 1
    row = F.where(hit & (count < size), count, size)      # the rest go to a row that is dropped
    coords = np.stack(np.unravel_index(np.arange(n), tuple(input.shape)), axis=1).astype(np.int64) if nd else \
        np.zeros((n, 0), np.int64)
    src = input._same_device(Tensor._make(coords))
    out = bind(O["index_put"], out, src, row, spec=(("tensor", 0),), accumulate=False)
    return out[:size]


# ---- Python callables over CPU tensors -----------------------------------------------------------------------
def _callable_check(name, fn, *tensors):
    for t in tensors:
        if t.requires_grad:
            raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() "
                               f"instead.")
        if type(t._data) is not np.ndarray:
            raise RuntimeError(f"{name}_ is only implemented on CPU tensors")
    if not callable(fn):
        raise TypeError(f"'{type(fn).__name__}' object is not callable")


def _write_python(self, values):
    """Write Python results into ``self`` as torch's scalar conversion does (integers truncate)."""
    buf = self._data
    flat = np.asarray(values, dtype=object)
    if buf.dtype.kind in "iu":
        flat = np.array([int(v) for v in flat.reshape(-1)], dtype=object).reshape(flat.shape)
    elif buf.dtype.kind == "b":
        flat = np.array([bool(v) for v in flat.reshape(-1)], dtype=object).reshape(flat.shape)
    buf[...] = flat.astype(buf.dtype)


def _tensor_type(t):
    return f"torch.{dt.torch_scalar_name(t.dtype)}Tensor"


def _others(name, self, *others):
    out = []
    names = ("other",) if name == "map_" else ("argument 'x'", "argument 'y'")
    for o, what in zip(others, names):
        if not isinstance(o, Tensor):
            raise TypeError(f"{name}(): argument must be Tensor, not {type(o).__name__}")
        if o.dtype is not self.dtype:
            what = "'other'" if what == "other" else what
            raise TypeError(f"{name}: expected {_tensor_type(self)} for {what} (got {_tensor_type(o)})")
        target, have = tuple(self.shape), tuple(o.shape)
        for i in range(1, len(have) + 1):
            if i > len(target) or have[-i] not in (1, target[-i]):
                raise RuntimeError(f"The expanded size of the tensor ({target[-i] if i <= len(target) else -1}) "
                                   f"must match the existing size ({have[-i]}) at non-singleton dimension "
                                   f"{len(target) - i}.  Target sizes: {list(target)}.  Tensor sizes: {list(have)}")
        out.append(np.broadcast_to(o._data, target))
    return out


@published("Tensor", name="apply_")
def _apply_(self, callable):
    """Replace each element ``v`` by ``callable(v)`` (a Python number), in place (CPU tensors that do not
    require grad, as torch; slow: one Python call per element)."""
    _callable_check("apply_", callable, self)
    vals = [callable(v) for v in self._data.reshape(-1).tolist()]
    _write_python(self, np.array(vals, dtype=object).reshape(self._data.shape))
    return self


@published("Tensor", name="map_")
def _map_(self, tensor, callable):
    """``self[i] = callable(self[i], tensor[i])`` elementwise, ``tensor`` broadcast to ``self``, in place."""
    _callable_check("map_", callable, self, *([tensor] if isinstance(tensor, Tensor) else []))
    (o,) = _others("map_", self, tensor)
    vals = [callable(a, b) for a, b in zip(self._data.reshape(-1).tolist(),
                                           np.ascontiguousarray(o).reshape(-1).tolist())]
    _write_python(self, np.array(vals, dtype=object).reshape(self._data.shape))
    return self


@published("Tensor", name="map2_")
def _map2_(self, x, y, callable):
    """``self[i] = callable(self[i], x[i], y[i])`` elementwise, ``x`` and ``y`` broadcast to ``self``, in place."""
    _callable_check("map2_", callable, self, *[t for t in (x, y) if isinstance(t, Tensor)])
    a, b = _others("map2_", self, x, y)
    vals = [callable(s, u, v) for s, u, v in zip(self._data.reshape(-1).tolist(),
                                                 np.ascontiguousarray(a).reshape(-1).tolist(),
                                                 np.ascontiguousarray(b).reshape(-1).tolist())]
    _write_python(self, np.array(vals, dtype=object).reshape(self._data.shape))
    return self


_NODES = {"eq": "EqBackward0", "ne": "NeBackward0", "lt": "LtBackward0", "le": "LeBackward0", "gt": "GtBackward0",
          "ge": "GeBackward0"}
# x.eq_(y), x.greater_(y), x.logical_and_(y), ...: in-place comparisons writing 1/0 in x's dtype
for _n in _NODES:
    published("Tensor", name=_n + "_")(_cmp_inplace(_n, getattr(F, _n), _NODES[_n]))
for _n, _f, _node in (("greater", F.gt, "GtBackward0"), ("greater_equal", F.ge, "GeBackward0"),
                      ("less", F.lt, "LtBackward0"), ("less_equal", F.le, "LeBackward0"),
                      ("not_equal", F.ne, "NeBackward0"), ("logical_and", F.logical_and, "LogicalAndBackward0"),
                      ("logical_or", F.logical_or, "LogicalOrBackward0")):
    published("Tensor", name=_n + "_")(_cmp_inplace(_n, _f, _node))


__all__ = ["greater", "greater_equal", "less", "less_equal", "not_equal", "swapdims", "adjoint", "narrow_copy",
           "nonzero_static", "resize_as_"]
