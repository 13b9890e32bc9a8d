"""torch's memory formats, ``Tensor.type`` and ``type_as``.

``jitgrad.contiguous_format``, ``channels_last`` (rank 4: N, C, H, W stored as N, H, W, C), ``channels_last_3d``
(rank 5) and ``preserve_format`` are ``jitgrad.memory_format`` values, accepted where torch accepts them:
``x.contiguous(memory_format=)``, ``x.clone(memory_format=)``, ``x.to(memory_format=)``,
``x.is_contiguous(memory_format=)``, ``x.resize_(..., memory_format=)`` and the factories that take one
(``empty``, ``*_like``).  A NumPy payload can have any strides, so
a channels-last tensor really is stored channels-last (``x.stride()`` is torch's); values and gradients do not
depend on the layout.  Inside ``@jg.compile`` the layout is not tracked (a traced value has no strides): the
format is accepted and the values are the same.
"""
from __future__ import annotations

import numpy as np

from ..declarations import published
from .tensor import Tensor


@published("jitgrad")
class memory_format:  # noqa: N801  (torch's class name)
    """A memory layout name (``jitgrad.channels_last``), as ``torch.memory_format``."""

    __slots__ = ("_name", "_perm")

    def __init__(self, name: str, perm):
        self._name = name
        self._perm = perm       # the dims in memory order (outermost first), or None: no fixed layout

    def __repr__(self):
        return f"torch.{self._name}"

    def __reduce__(self):
        return self._name


contiguous_format = published("jitgrad", name="contiguous_format")(memory_format("contiguous_format", "rowmajor"))
preserve_format = published("jitgrad", name="preserve_format")(memory_format("preserve_format", None))
channels_last = published("jitgrad", name="channels_last")(memory_format("channels_last", (0, 2, 3, 1)))
channels_last_3d = published("jitgrad", name="channels_last_3d")(memory_format("channels_last_3d", (0, 2, 3, 4, 1)))
FORMATS = {f._name: f for f in (contiguous_format, preserve_format, channels_last, channels_last_3d)}


def layout_for(fmt, ndim: int, op: str):
    """The memory order of the dims for ``fmt`` at rank ``ndim`` ("rowmajor", a permutation, or None to keep
    the current layout); torch's errors for a rank the format does not fit."""
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{op}(): argument 'memory_format' must be torch.memory_format, not {type(fmt).__name__}")
    perm = fmt._perm
    if isinstance(perm, tuple) and len(perm) != ndim:
        raise RuntimeError(f"required rank {len(perm)} tensor to use {fmt._name} format")
    return perm


def in_layout(a: np.ndarray, fmt: memory_format) -> np.ndarray:
    """``a``'s values stored in ``fmt``'s layout (``a`` itself when it already is)."""
    perm = layout_for(fmt, a.ndim, "contiguous")
    if perm is None:
        return a
    if perm == "rowmajor":
        return np.ascontiguousarray(a)
    if np.transpose(a, perm).flags.c_contiguous:
        return a
    inverse = tuple(int(i) for i in np.argsort(perm))
    return np.ascontiguousarray(np.transpose(a, perm)).transpose(inverse)


def is_in_layout(a, fmt: memory_format) -> bool:
    perm = fmt._perm
    if perm is None:
        raise RuntimeError("is_contiguous(): preserve_format is not a layout a tensor can be checked against")
    if perm == "rowmajor":
        return a.flags.c_contiguous
    return a.ndim == len(perm) and np.transpose(a, perm).flags.c_contiguous


def relayout(t: Tensor, fmt) -> Tensor:
    """``t`` (a fresh result: a clone) stored in ``fmt``'s layout; traced and device payloads keep theirs."""
    layout_for(fmt, t.ndim, "clone")
    if type(t._data) is np.ndarray:
        t._data = in_layout(t._data, fmt)
    return t


def dense_like(src: np.ndarray, dtype=None):
    """An empty array with ``src``'s strides (in elements) when ``src`` is dense and non-overlapping, as torch's
    ``preserve_format`` lays out a new tensor; None when it has gaps or overlaps (torch falls back to row-major)."""
    laid = np.empty_like(src, dtype=dtype)      # order "K": the input's strides exactly when it is dense
    return laid if laid.strides == tuple(st // src.itemsize * laid.itemsize for st in src.strides) else None


def factory_layout(name: str, result: Tensor, fmt, args) -> Tensor:
    """A factory's fresh ``result`` laid out as ``memory_format=fmt`` asks (torch_kwargs.py routes the keyword
    here): ``preserve_format`` copies the layout of a ``*_like`` factory's input when that is dense (else
    row-major), as torch."""
    if fmt is preserve_format:
        if name == "empty":
            raise RuntimeError("unsupported memory format Preserve")
        src = args[0]._data if isinstance(args[0], Tensor) else None
        d = result._data
        if type(d) is np.ndarray and type(src) is np.ndarray and not src.flags.c_contiguous:
            laid = dense_like(src, d.dtype)
            if laid is not None:
                laid[...] = d
                result._data = laid
        return result
    return relayout(result, fmt)


def contiguous_in(t: Tensor, fmt) -> Tensor:
    """``t.contiguous(memory_format=fmt)``: ``t`` itself when already stored so, else a differentiable copy."""
    layout_for(fmt, t.ndim, "contiguous")
    if fmt is preserve_format or type(t._data) is not np.ndarray:
        return t if fmt is preserve_format or t.is_contiguous() else t.contiguous()
    if is_in_layout(t._data, fmt):
        return t
    return relayout(t.clone(), fmt)


@published("Tensor")
def type_as(self, other) -> Tensor:
    """This tensor cast to ``other``'s dtype (``self`` when it already has it), as torch's ``type_as``."""
    if not isinstance(other, Tensor):
        raise TypeError(f"type_as(): argument 'other' (position 1) must be Tensor, not {type(other).__name__}")
    return self.to(other.dtype)


_LEGACY_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor", "int64": "LongTensor",
                 "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
                 "bool": "BoolTensor"}


@published("Tensor", name="type")
def tensor_type(self, dtype=None, non_blocking=False, **kwargs):
    """torch's ``Tensor.type``: with no argument the type name (``'torch.FloatTensor'``); with a dtype, a legacy
    type (``torch.DoubleTensor``) or its name, this tensor cast to it (``self`` when it already has it)."""
    if dtype is None:
        name = _LEGACY_NAMES.get(self.dtype.name, self.dtype.name)
        return f"torch.cuda.{name}" if self.device.type == "cuda" else f"torch.{name}"
    device = None
    if isinstance(dtype, str):
        by_name = {f"torch.{v}": k for k, v in _LEGACY_NAMES.items()}
        by_name.update({f"torch.cuda.{v}": k for k, v in _LEGACY_NAMES.items()})
        if dtype not in by_name:
            raise ValueError(f"invalid type: '{dtype}'")
        device = "cuda" if dtype.startswith("torch.cuda.") else "cpu"
        dtype = by_name[dtype]
    else:
        dtype = getattr(dtype, "dtype", dtype)      # a legacy type class (torch.DoubleTensor) carries its dtype
    t = self.to(dtype)
    return t if device is None else t.to(device)


__all__ = ["memory_format", "contiguous_format", "preserve_format", "channels_last", "channels_last_3d",
           "type_as", "contiguous_in", "relayout", "is_in_layout", "in_layout", "layout_for", "dense_like"]
