"""torch's attributes for a node's saved values: ``y.grad_fn._saved_self`` / ``_saved_other`` / ``_saved_result``
(the tensors the backward reads) and ``_raw_saved_*`` (a ``SavedTensor`` whose ``register_hooks(pack, unpack)``
puts hooks on that one saved value, as saved_tensors_hooks does for all of them).

Names follow torch's for the common ops: ``self`` is the op's first input, ``other`` its second, ``result`` its
output (what an OpDef saves: ``saves_in`` / ``saves_out``).
"""
from __future__ import annotations

from .saved_output import unpack_output


_WHERE = {"self": ("in", 0), "other": ("in", 1), "result": ("out", 0)}
# the attribute names a node answers (``Node``'s class attributes: ``SavedValueAttribute``)
SAVED_NAMES = tuple(p + w for w in _WHERE for p in ("_saved_", "_raw_saved_"))


FREED_MSG = ("Trying to backward through the graph a second time (or directly access saved tensors after they have "
             "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
             "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
             "if you need to access saved tensors after calling backward.")


def _identity(x):
    return x


def saved_attribute(node, name):
    """``node._saved_<what>`` or ``node._raw_saved_<what>`` (AttributeError when the node saves no such value)."""
    from .saved_hooks import unpack
    raw = name.startswith("_raw_saved_")
    what = name[len("_raw_saved_"):] if raw else name[len("_saved_"):]
    where = _WHERE.get(what)
    kind, i = where if where is not None else ("in", -1)
    if i not in (node.op.saves_out if kind == "out" else node.op.saves_in):
        raise AttributeError(f"'{node.name()}' object has no attribute '{name}'")
    if node._freed:
        raise RuntimeError(FREED_MSG)
    if raw:
        return SavedTensor(node, kind, i)
    if node.packed is not None:
        entry = node.packed[0 if kind == "in" else 1][i]
        if entry is None:
            return None
        r = unpack(entry)
        # an output unpacked by hooks has this node as its grad_fn (torch), as one unpacked without them
        return unpack_output(r, node, i) if kind == "out" and r.grad_fn is None else r
    vals = node.inputs if kind == "in" else node.outputs
    t = vals[i] if vals is not None and i < len(vals) else None
    if kind == "out" and t is not None:
        # torch unpacks a saved output as a new tensor (same data and version counter, this node as grad_fn),
        # never the output object itself
        return unpack_output(t, node, i)
    return t


class SavedValueAttribute:
    """``node._saved_self`` (and ``_raw_saved_self``, ``_saved_other``, ``_saved_result`` ...) as a class attribute
    of ``Node``: a descriptor per name rather than ``Node.__getattr__``, which would leave every attribute read of
    every node unspecialised by CPython's adaptive interpreter (the backward engine reads a dozen per node)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, node, owner=None):
        return self if node is None else saved_attribute(node, self.name)


class SavedTensor:
    """One value a node saved for backward (torch.autograd.graph's ``SavedTensor``)."""

    def __init__(self, *args):
        if len(args) != 3:
            raise RuntimeError("Trying to create a SavedTensor object from Python is forbidden.")
        self._node, self._kind, self._index = args

    def _entry(self):
        """(packed entry or None, the saved value when not packed)."""
        node = self._node
        if node._freed:
            raise RuntimeError(FREED_MSG)
        if node.packed is not None:
            return node.packed[0 if self._kind == "in" else 1][self._index], None
        vals = node.inputs if self._kind == "in" else node.outputs
        return None, vals[self._index]

    @property
    def data(self):
        """The packed object as-is when hooks packed it; else the saved tensor (detached when it is the node's
        output, as torch stores outputs without their grad_fn to avoid a cycle)."""
        entry, t = self._entry()
        if entry is not None:
            if entry[0] is not _identity:
                return entry[1]
            t = entry[1]
        return t.detach() if self._kind == "out" and t is not None else t

    @property
    def unpack_hook(self):
        """The unpack hook of this saved value (None when it was saved without hooks)."""
        entry, _ = self._entry()
        return entry[0] if entry is not None and entry[0] is not _identity else None

    def register_hooks(self, pack_hook, unpack_hook):
        """Store the saved value as ``pack_hook(value)``; backward reads ``unpack_hook(packed)``."""
        from .saved_hooks import run_pack_hook
        from .tensor import Tensor
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("register_hooks expects two callables (pack_hook, unpack_hook)")
        node = self._node
        if node._freed:
            raise RuntimeError(FREED_MSG)
        if node.packed is None:       # one value gets hooks: every saved value moves to the packed form
            node.packed = (tuple((_identity, t) if isinstance(t, Tensor) else None for t in node.inputs),
                           tuple((_identity, t) if isinstance(t, Tensor) else None for t in node.outputs))
            node.versions = node.out_versions = None
        side = 0 if self._kind == "in" else 1
        entries = list(node.packed[side])
        entry = entries[self._index]
        if entry is None:
            raise RuntimeError("None is forbidden")
        if entry[0] is not _identity:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have already been set. Hint: "
                               "only one pair of hooks is allowed at a time.")
        packed = run_pack_hook(pack_hook, entry[1])
        from .saved_hooks import identity_of
        ident = identity_of(entry[1]) if side == 0 else None     # a saved input keeps its history (torch)
        entries[self._index] = (unpack_hook, packed, ident)
        node.packed = (tuple(entries), node.packed[1]) if side == 0 else (node.packed[0], tuple(entries))


__all__ = ["saved_attribute", "SavedTensor", "SavedValueAttribute", "SAVED_NAMES"]
