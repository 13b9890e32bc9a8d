"""Storage objects: what ``x.untyped_storage()`` and ``x.storage()`` return (torch's UntypedStorage and
TypedStorage), read-only windows on the memory that eager CPU tensors share.

jitgrad's storage is a NumPy buffer (strided.storage_buffer: a root's payload, or the buffer a root restrided in
place or a detached view keeps), not an object of its own.  These classes describe it as torch's do: its address
(``data_ptr``), its size in bytes or elements, its elements (reading and writing them writes the tensors over it).
As in torch, ``x.untyped_storage()`` is one object per buffer (the views of a tensor and the tensor get the same
one back, so ``is`` and ``==`` tell whether two tensors share memory), and ``x.storage()`` is a new TypedStorage
over it at each call, with torch's deprecation warning the first time.
"""
from __future__ import annotations

import warnings
import weakref

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt
from ..ir.dtypes import UnsupportedError
from .strided import storage_buffer
from .tensor import CPU, Tensor

# id(buffer) -> weak reference to its UntypedStorage (the storage holds the buffer, so the id stays its own)
_UNTYPED: dict = {}
_WARNED = [False]


def _span(buf: np.ndarray):
    """``(lowest address, size in bytes)`` of the memory NumPy array ``buf`` reaches."""
    if not buf.size:
        return 0, 0
    ptr = buf.__array_interface__["data"][0]
    lo = ptr + sum((n - 1) * s for n, s in zip(buf.shape, buf.strides) if s < 0)
    hi = ptr + sum((n - 1) * s for n, s in zip(buf.shape, buf.strides) if s > 0) + buf.itemsize
    return lo, hi - lo


def _buffer_of(t: Tensor, what: str) -> np.ndarray:
    buf = storage_buffer(t) if type(t._data) is np.ndarray else None
    if buf is None:
        raise UnsupportedError(f"jitgrad does not support Tensor.{what}() inside @jg.compile or on a device yet")
    return buf


@published("jitgrad")
class UntypedStorage:
    """The bytes of memory that tensors share (torch.UntypedStorage): one object per buffer."""

    __slots__ = ("_buffer", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("jitgrad does not support constructing a storage yet: use Tensor.untyped_storage()")

    @classmethod
    def _of(cls, buf: np.ndarray) -> "UntypedStorage":
        e = _UNTYPED.get(id(buf))
        s = e() if e is not None else None
        if s is None or s._buffer is not buf:
            s = object.__new__(cls)
            s._buffer = buf
            key = id(buf)
            _UNTYPED[key] = weakref.ref(s, lambda r, key=key: _UNTYPED.pop(key, None) if _UNTYPED.get(key) is r
                                        else None)
        return s

    def data_ptr(self) -> int:
        """The address of the storage's first byte (0 when it is empty)."""
        return _span(self._buffer)[0]

    def nbytes(self) -> int:
        return _span(self._buffer)[1]

    def size(self) -> int:
        """The size in bytes."""
        return self.nbytes()

    def __len__(self):
        return self.nbytes()

    def element_size(self) -> int:
        return 1

    @property
    def device(self):
        return CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def _elements(self, dtype) -> np.ndarray:
        """The storage's memory as a 1-d array of ``dtype`` (a view: writes reach the tensors over it)."""
        buf = self._buffer
        lo, n = _span(buf)
        if not n:
            return np.empty((0,), dtype)
        if any(s < 0 for s in buf.strides):
            raise UnsupportedError("jitgrad does not support reading the storage of a negatively strided array")
        # buf's element [0, ..., 0] is its lowest address when no stride is negative: the span starts there
        first = buf[(slice(0, 1),) * buf.ndim].reshape(1) if buf.ndim else buf.reshape(1)
        raw = np.lib.stride_tricks.as_strided(first.view(np.uint8), (n,), (1,), writeable=buf.flags.writeable)
        return raw.view(dtype)

    def tolist(self) -> list:
        return self._elements(np.uint8).tolist()

    def __getitem__(self, i):
        return self._elements(np.uint8)[i].tolist()

    def __iter__(self):
        return iter(self.tolist())

    def __repr__(self):
        body = "\n".join(f" {v}" for v in self.tolist())
        return f"{body}\n[jitgrad.storage.UntypedStorage(device=cpu) of size {self.nbytes()}]".lstrip("\n")


@published("jitgrad")
class TypedStorage:
    """A storage read as elements of one dtype (torch.TypedStorage, what ``Tensor.storage()`` returns)."""

    __slots__ = ("_untyped_storage", "_dtype")

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("jitgrad does not support constructing a storage yet: use Tensor.storage()")

    @classmethod
    def _of(cls, untyped: UntypedStorage, dtype: dt.DType) -> "TypedStorage":
        s = object.__new__(cls)
        s._untyped_storage, s._dtype = untyped, dtype
        return s

    @property
    def dtype(self) -> dt.DType:
        return self._dtype

    @property
    def device(self):
        return CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def untyped(self) -> UntypedStorage:
        return self._untyped_storage

    def data_ptr(self) -> int:
        return self._untyped_storage.data_ptr()

    def element_size(self) -> int:
        return np.dtype(self._dtype.np).itemsize

    def nbytes(self) -> int:
        return self._untyped_storage.nbytes()

    def size(self) -> int:
        """The number of elements."""
        return self.nbytes() // self.element_size()

    def __len__(self):
        return self.size()

    def _elements(self) -> np.ndarray:
        return self._untyped_storage._elements(self._dtype.np)

    def tolist(self) -> list:
        return self._elements().tolist()

    def __iter__(self):
        return iter(self.tolist())

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)):
            raise UnsupportedError("jitgrad does not support slicing a storage yet: index one element")
        n = self.size()
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for storage of size {n}")
        return self._elements()[i].item()

    def __setitem__(self, i, value):
        if not isinstance(i, (int, np.integer)):
            raise UnsupportedError("jitgrad does not support writing a slice of a storage yet: index one element")
        n = self.size()
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for storage of size {n}")
        self._elements()[i] = value

    def fill_(self, value) -> "TypedStorage":
        self._elements()[...] = value
        return self

    def __repr__(self):
        body = "\n".join(f" {v}" for v in self.tolist())
        return (f"{body}\n[jitgrad.storage.TypedStorage(dtype=jitgrad.{self._dtype.name}, device=cpu) of size "
                f"{self.size()}]").lstrip("\n")


@published("Tensor")
def untyped_storage(self) -> UntypedStorage:
    """The memory this tensor reads (its root's, shared with its views): the same object for every tensor over it."""
    return UntypedStorage._of(_buffer_of(self, "untyped_storage"))


@published("Tensor")
def storage(self) -> TypedStorage:
    """This tensor's storage read as its dtype (torch's TypedStorage, deprecated there in favour of
    ``untyped_storage()``; the same warning, once per process)."""
    untyped = UntypedStorage._of(_buffer_of(self, "storage"))
    if not _WARNED[0]:
        _WARNED[0] = True
        warnings.warn("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the "
                      "only storage class. This should only matter to you if you are using storages directly.  To "
                      "access UntypedStorage directly, use tensor.untyped_storage() instead of tensor.storage()",
                      UserWarning, stacklevel=2)
    return TypedStorage._of(untyped, self.dtype)


def storage_numel(t: Tensor) -> int:
    """The number of ``t``'s elements its storage holds (torch's ``storage().size()``)."""
    return _span(_buffer_of(t, "storage"))[1] // t._data.itemsize


__all__ = ["UntypedStorage", "TypedStorage", "untyped_storage", "storage", "storage_numel"]
