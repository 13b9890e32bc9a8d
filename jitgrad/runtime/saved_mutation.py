"""``torch.autograd.graph.allow_mutation_on_saved_tensors``: inside it, a tensor saved for backward may be
modified in place; the first write after the save clones the saved value, and backward reads the clone.

The context installs saved-tensor hooks (saved_hooks.py): pack keeps the tensor and files it under its
version counter (shared by a tensor, its views and ``detach()``, so it identifies the storage); every in-place
write (``InPlaceOps._check_inplace``) asks ``STATE.active.before_write`` to clone what is filed under the
written tensor's counter first.
"""
from __future__ import annotations

from . import grad_mode
from .saved_hooks import saved_tensors_hooks


class _State:
    __slots__ = ("active",)

    def __init__(self):
        self.active = None


STATE = _State()


class _Handle:
    __slots__ = ("tensor", "clone", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor
        self.clone = None


class allow_mutation_on_saved_tensors:
    """Context manager: in-place changes to tensors saved for backward are allowed (backward sees the values
    as they were saved).  Backward must run inside the same context."""

    def __init__(self):
        self.by_storage = {}      # id(version counter) -> handles of saved tensors on that storage
        self.closed = False
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t):
        h = _Handle(t)
        self.by_storage.setdefault(id(t._vc), []).append(h)
        return h

    def _unpack(self, h):
        if self.closed:
            raise AssertionError("Trying to backward outside of the 'allow_mutation_on_saved_tensors' context in "
                                 "which the graph was originally recorded.")       # torch's type
        return h.clone if h.clone is not None else h.tensor

    def before_write(self, t):
        handles = self.by_storage.pop(id(t._vc), None)
        if not handles:
            return
        with grad_mode.no_grad():
            for h in handles:
                if h.clone is None:
                    h.clone = h.tensor.detach().clone()

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
        self.by_storage.clear()


__all__ = ["allow_mutation_on_saved_tensors", "STATE"]
