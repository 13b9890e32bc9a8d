"""The storage of roots whose storage is not their own payload: a root restrided in place (``as_strided_``,
library/shaping/as_strided.py) keeps the buffer it was made with; ``v.detach()`` of a view is a root (not an
autograd view, as torch's) over its source's storage.  ``storage_offset()``, ``set_``/``resize_`` and
``as_strided`` read it here.
"""
from __future__ import annotations

import weakref

import numpy as np


# id of a root tensor whose storage is not the start of its own payload -> (weak reference to it, its storage
# buffer): a root restrided in place (as_strided_) keeps the buffer it was made with; ``v.detach()`` of a view is a
# root (not an autograd view, as torch's) over its source's storage.  Keyed by id: a Tensor's == is elementwise,
# so it cannot be a WeakKeyDictionary key.
_STORAGE: dict = {}


def restrided_storage(t):
    """The buffer a root restrided in place (``as_strided_``) keeps as its storage, or None."""
    e = _STORAGE.get(id(t))
    return e[1] if e is not None and e[0]() is t else None


def set_storage(t, flat):
    """Root ``t``'s storage is ``flat`` (not the start of its own payload)."""
    key = id(t)
    _STORAGE[key] = (weakref.ref(t, lambda _, key=key: _STORAGE.pop(key, None)), flat)


def share_storage(t, source):
    """Root ``t`` (``source.detach()``, which shares ``source``'s payload) takes ``source``'s storage, so that its
    ``storage_offset()`` and ``as_strided`` reach the storage as torch's do."""
    if source._base is None and restrided_storage(source) is None:
        return t                    # a plain root: its payload is its storage
    flat = storage_buffer(source)
    if flat is not None:
        set_storage(t, flat)
    return t


def forget_storage(t):
    """``t``'s memory was replaced (``set_``, ``resize_``): its payload is its storage again."""
    _STORAGE.pop(id(t), None)


def storage_buffer(t):
    """The NumPy buffer that is eager CPU tensor ``t``'s storage (its root's, or the one a root restrided in place
    kept), or None (traced or device tensors)."""
    root = t._base if t._base is not None else t
    flat = restrided_storage(root)
    return flat if flat is not None or type(root._data) is not np.ndarray else root._data


__all__ = ["restrided_storage", "set_storage", "share_storage", "forget_storage", "storage_buffer"]
