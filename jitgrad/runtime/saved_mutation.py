"""``torch.autograd.graph.allow_mutation_on_saved_tensors``: inside it, a tensor saved for backward may be
modified in place; the first write after the save clones the saved value, and backward reads the clone.

The context installs saved-tensor hooks (saved_hooks.py): pack keeps the tensor and files it under its
version counter (shared by a tensor, its views and ``detach()``, so it identifies the storage); every in-place
write (``InPlaceOps._check_inplace``) asks ``STATE.active.before_write`` to clone what is filed under the
written tensor's counter first.
"""
from __future__ import annotations

import collections
import weakref

from . import grad_mode
from .saved_hooks import saved_tensors_hooks


class _State:
    __slots__ = ("active",)

    def __init__(self):
        self.active = None


STATE = _State()


class _Handle:
    """What a saved tensor is packed into: the key of ``original`` / ``cloned``.  It lives as long as a node
    holds it, so the context's weak maps forget a saved value once backward frees its graph."""
    __slots__ = ("__weakref__",)


class allow_mutation_on_saved_tensors:
    """Context manager: in-place changes to tensors saved for backward are allowed (backward sees the values
    as they were saved).  Backward must run inside the same context.

    Entering returns the context's state, kept as torch keeps it (its fields are what torch's tests read):
    ``original`` / ``cloned`` (weak maps handle -> saved tensor / its clone made before the first write),
    ``tid_to_weakhandle`` (``(id(tensor), version)`` -> handle, weak: one handle for a tensor saved several
    times at one version) and ``sid_to_tid`` (storage -> tensor ids saved on it).  All are cleared on exit.
    """

    def __init__(self):
        self.cloned = weakref.WeakKeyDictionary()
        self.original = weakref.WeakKeyDictionary()
        self.tid_to_weakhandle = weakref.WeakValueDictionary()
        self.sid_to_tid = collections.defaultdict(set)
        self.closed = False
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)

    def clear(self):
        self.cloned.clear()
        self.original.clear()
        self.tid_to_weakhandle.clear()
        self.sid_to_tid.clear()

    @staticmethod
    def _tid(t):
        return id(t), t._vc[0]

    @staticmethod
    def _sid(t):
        return id(t._vc)        # the version counter is shared by a storage's tensors (views, detach)

    def _pack(self, t):
        tid = self._tid(t)
        self.sid_to_tid[self._sid(t)].add(tid)
        h = self.tid_to_weakhandle.get(tid)
        if h is None:           # the same tensor at the same version saved again shares the handle
            h = _Handle()
            self.tid_to_weakhandle[tid] = h
            self.original[h] = t
        return h

    def _unpack(self, h):
        msg = ("Trying to backward outside of the 'allow_mutation_on_saved_tensors' context in which the graph "
               "was originally recorded.")
        if self.closed:
            raise AssertionError(msg)       # torch's type
        if h in self.cloned:
            return self.cloned[h]
        if h not in self.original:
            raise AssertionError(msg)
        return self.original[h]

    def before_write(self, t):
        """``t`` is about to be written in place: clone every still-saved tensor on its storage first."""
        tids = self.sid_to_tid.get(self._sid(t))
        if not tids:
            return
        with grad_mode.no_grad():
            for tid in tids:
                h = self.tid_to_weakhandle.get(tid)
                if h is None or h in self.cloned:   # freed by a backward already, or cloned before
                    continue
                self.cloned[h] = self.original[h].detach().clone()
                del self.original[h]

    def __enter__(self):
        if STATE.active is not None:
            raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
        self._hooks.__enter__()
        STATE.active = self
        return self

    def __exit__(self, *exc):
        STATE.active = None
        self._hooks.__exit__(*exc)
        self.closed = True
        self.clear()


__all__ = ["allow_mutation_on_saved_tensors", "STATE"]
