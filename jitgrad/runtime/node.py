"""Backward graph nodes (``grad_fn``): one per recorded op, plus AccumulateGrad for leaves.

A Node is also the ``ctx`` its OpDef's vjp receives (inputs/outputs/shapes/dtypes/params/needs_grad/bind).
"""
from __future__ import annotations

import weakref

import itertools
from collections import OrderedDict

import numpy as np

from ..ir.graph import SourceLoc
from . import grad_mode
from .saved_access import FREED_MSG, SAVED_NAMES, SavedValueAttribute
from .source import line_at
from .saved_output import vjp_through_outputs

_GM = grad_mode.STATE
_seq = itertools.count()
_hook_ids = itertools.count()


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    __slots__ = ("_store", "id")

    def __init__(self, store: dict):
        self._store = store
        self.id = next(_hook_ids)

    def remove(self):
        self._store.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class NodeExtras:
    """What few nodes have, in one record made on the first write of one (``Node._x``; None for most nodes), so
    recording an op sets one slot for them all and the backward loop tests one slot for all."""

    __slots__ = ("pre_hooks", "hooks", "tensor_hooks", "retain_grad_refs", "stack", "metadata", "packed",
                 "anomaly_parent")

    def __init__(self):
        self.pre_hooks = self.hooks = None
        self.tensor_hooks = None     # {output_nr: OrderedDict of hooks registered on that output tensor}
        self.retain_grad_refs = None  # {output_nr: weakref to the tensor that retains its grad}
        self.stack = None            # anomaly mode: the forward traceback
        self.metadata = None         # torch's Node.metadata dict, made on first use
        self.packed = None           # saved values packed by saved_tensors_hooks (saved_hooks.py)
        self.anomaly_parent = None   # anomaly mode: the node whose backward made this one


def _extra(field: str, doc: str):
    """A Node attribute kept in its NodeExtras (None while it has none; setting None makes none)."""
    def get(node):
        x = node._x
        return None if x is None else getattr(x, field)

    def put(node, value):
        x = node._x
        if x is None:
            if value is None:
                return
            x = node._x = NodeExtras()
        setattr(x, field, value)
    return property(get, put, doc=doc)


class Node:
    """A backward function.  ``name()`` is e.g. ``MulBackward0``; ``next_functions`` the edges to inputs."""

    __slots__ = ("op", "params", "inputs", "outputs", "shapes", "dtypes", "needs_grad", "next_functions",
                 "versions", "out_versions", "out_meta", "_loc", "seq", "_freed", "view_args", "view_base_fn",
                 "torch_name", "_x", "plans", "__weakref__")

    # the rarely set attributes (NodeExtras): hot code reads ``_x`` first (None: all of them are None)
    _pre_hooks = _extra("pre_hooks", "{id: fn(grad_outputs)} run before this node (register_prehook)")
    _hooks = _extra("hooks", "{id: fn(grad_inputs, grad_outputs)} run after this node (register_hook)")
    tensor_hooks = _extra("tensor_hooks", "{output_nr: OrderedDict of hooks registered on that output tensor}")
    retain_grad_refs = _extra("retain_grad_refs", "{output_nr: weakref to the tensor that retains its grad}")
    stack = _extra("stack", "anomaly mode: the forward traceback of the op that made this node")
    _metadata = _extra("metadata", "torch's Node.metadata dict, made on first use")
    packed = _extra("packed", "saved values packed by saved_tensors_hooks (saved_hooks.py)")
    anomaly_parent = _extra("anomaly_parent", "anomaly mode: the node whose backward made this one")

    def __init__(self, op, params, next_functions, needs_grad):
        self.op = op
        self.params = params
        self.next_functions = next_functions
        self.needs_grad = needs_grad
        self.seq = next(_seq)
        self._freed = False
        self._x = None
        # for a view op's node: the op's args and its base's grad_fn when the view was made (see refresh_view)
        self.view_args = None
        self.view_base_fn = None
        self.torch_name = None   # set by a composition (mean, log_softmax, ...) to torch's name for the whole
        # an op's node: its forward signature's table of pullback plans (the dispatch entry's, pullback_plans.py)
        self.plans = None

    @property
    def loc(self):
        """The SourceLoc of the user's line that created this node (built on first use: recording keeps only
        the code object and the instruction's offset, which is cheaper on the eager hot path)."""
        lo = self._loc
        if type(lo) is tuple:
            code, lasti = lo
            lo = self._loc = SourceLoc(code.co_filename, line_at(code, lasti), code.co_name)
        return lo

    @loc.setter
    def loc(self, value):
        self._loc = value

    # --- torch.autograd.graph.Node surface -------------------------------------------------------
    @property
    def metadata(self) -> dict:
        """A dict for the user's own annotations of this node (``torch.autograd.graph.Node.metadata``)."""
        m = self._metadata
        if m is None:
            m = self._metadata = {}
        return m

    def name(self) -> str:
        return self.torch_name or self.op.grad_name

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) -> None or replacement grad_inputs; runs after this node."""
        if self._hooks is None:
            self._hooks = OrderedDict()
        h = RemovableHandle(self._hooks)
        self._hooks[h.id] = fn
        return h

    def register_prehook(self, fn):
        """fn(grad_outputs) -> None or replacement grad_outputs; runs before this node."""
        if self._pre_hooks is None:
            self._pre_hooks = OrderedDict()
        h = RemovableHandle(self._pre_hooks)
        self._pre_hooks[h.id] = fn
        return h

    @property
    def saved_any(self) -> bool:
        return bool(self.op.saves_in or self.op.saves_out)

    def release(self):
        # (the engine's backward loop inlines this for an op's node, and calls check_saved only where one of
        # versions, out_versions, _freed or packed is set: keep both in step with these methods)
        self._freed = True
        self.inputs = self.outputs = None
        if self._x is not None:
            self._x.packed = None

    def check_saved(self):
        """Raise if saved values were freed or modified in place since they were saved."""
        if self._freed:
            if self.saved_any:
                raise RuntimeError(FREED_MSG)
            return
        if self._x is not None and self._x.packed is not None:     # saved through saved_tensors_hooks: unpacked
            # for each run, not checked
            from .saved_hooks import unpack_node
            unpack_node(self)
            return
        versions, inputs = self.versions, self.inputs
        if _LAST_DETACH > self.seq and versions:    # only a node older than some detach_ can hold such a value
            for i, _ in versions:
                if _detached_after(inputs[i], self.seq):
                    raise RuntimeError("Trying to use a saved tensor that has been detached in-place, i.e. with "
                                       ".detach_().This is not supported, please use out-of-place `.detach()` "
                                       "instead")
        if versions:            # the common case first: every saved value still at its saved version
            for i, v in versions:
                if inputs[i]._vc[0] != v:
                    break
            else:
                versions = None
        ov = self.out_versions
        if ov and self.outputs[ov[0][0]]._vc[0] == ov[0][1] and len(ov) == 1:
            ov = None
        if not versions and not ov:
            return
        for vals, versions, what in ((self.inputs, self.versions, "input"), (self.outputs, self.out_versions, "output")):
            if versions is None:
                continue
            for i, v in versions:
                t = vals[i]
                if t._vc[0] != v:
                    # a saved output names this node (its grad_fn when saved), as torch does
                    gf, nr = (self, i) if what == "output" else (t.grad_fn, t._out_nr)
                    origin = (f"which is output {nr} of {gf.name()}" if gf is not None else "which is a leaf")
                    raise RuntimeError(
                        "one of the variables needed for gradient computation has been modified by an inplace "
                        f"operation: [jitgrad.{t.dtype.name} {list(t.shape)}], {origin}, is at version {t._vc[0]}; "
                        f"expected version {v} instead (saved as {what} {i} of {self.name()}"
                        + (f", created at {self.loc.short()}: {self.loc.text}" if self.loc is not None else "")
                        + "). Hint: enable anomaly detection to find the operation that failed to compute its "
                        "gradient, with jitgrad.autograd.set_detect_anomaly(True).")

    def materialize(self) -> bool:
        """Whether outputs that received no gradient get zeros (custom Functions may opt out)."""
        return True

    def apply(self, grads):
        """Cotangents of the outputs -> cotangents of the inputs (a tuple, None for 'no gradient')."""
        self.check_saved()
        if self.op.saves_out and _GM.grad_enabled:
            return vjp_through_outputs(self, grads)
        return self.op.vjp(self, *grads)

    def __call__(self, *grads):
        """``grad_fn(grad)``: run this backward function once on the given output cotangents (as torch: the
        input cotangents, one tensor for a one-input node, else a tuple with None for inputs that need none)."""
        grads = list(grads)
        if len(grads) != len(self.out_meta):
            raise TypeError(f"expected {len(self.out_meta)} arguments, got {len(grads)} instead")     # torch's text
        if self.materialize():
            for i, g in enumerate(grads):
                if g is None and self.out_meta[i][1] is not None:
                    grads[i] = zeros_for(self.out_meta[i])
        out = tuple(self.apply(grads))
        return out[0] if len(out) == 1 else out


# added to an AccumulateGrad's sequence number (torch gives it UINT64_MAX): the engine runs a ready one first
ACC_SEQ = 1 << 62


# torch's ``node._saved_self`` / ``_raw_saved_self`` ... : class attributes of every node (saved_access.py)
for _name in SAVED_NAMES:
    setattr(Node, _name, SavedValueAttribute(_name))


class _AccOp:
    name = "AccumulateGrad"
    grad_name = "torch::autograd::AccumulateGrad"      # torch's name(); the type (and repr) say AccumulateGrad
    saves_in = saves_out = ()


class AccumulateGrad(Node):
    """The node at a leaf that requires grad: runs the leaf's hooks and adds into ``.grad``."""

    __slots__ = ("variable", "post_hooks")

    def __init__(self, variable):
        super().__init__(_AccOp, {}, (), ())
        self.seq = ACC_SEQ + self.seq   # above every op node's (torch: UINT64_MAX): it runs before them
        self.variable = variable
        self.post_hooks = None      # register_post_accumulate_grad_hook: fn(leaf) after .grad is updated
        self.out_meta = ((variable.shape, variable.dtype),)
        self.loc = None

    def apply(self, grads):
        return ()

    def __repr__(self):
        return f"<AccumulateGrad object at {hex(id(self))}>"


# non-leaf tensors detached in place (Tensor.detach_): a node that saved one as an input *before* it was detached
# refuses to run (torch); a node made after the detach saved a plain leaf and runs
_DETACHED: dict = {}        # id(tensor) -> (weakref to it, the node sequence number at its detach_)
_LAST_DETACH = -1           # the sequence number of the latest detach_ (a global int: the hot path's only test)


def mark_detached_inplace(t) -> None:
    """Record that ``t`` (a non-leaf) was detached in place now (see ``Node.check_saved``)."""
    global _LAST_DETACH
    if len(_DETACHED) > 1024:           # drop the entries of tensors that died
        for k in [k for k, (r, _) in _DETACHED.items() if r() is None]:
            del _DETACHED[k]
    _LAST_DETACH = next(_seq)
    _DETACHED[id(t)] = (weakref.ref(t), _LAST_DETACH)


def _detached_after(t, seq) -> bool:
    """Whether ``t`` was detached in place after the node numbered ``seq`` saved it."""
    hit = _DETACHED.get(id(t))
    return hit is not None and hit[1] > seq and hit[0]() is t


class _CopyOp:
    name = "copy_"
    grad_name = "CopyBackwards"
    saves_in = saves_out = ()


class CopyBackwards(Node):
    """The node of ``copy_(src)`` into a fresh tensor, as torch makes it: AccumulateGrad's first gradient under
    ``backward(create_graph=True)`` is copied into the leaf's layout, so ``type(x.grad.grad_fn).__name__`` is
    ``CopyBackwards``.  Its edges are the overwritten tensor's (none: it had no history) and ``src``'s; the
    gradient goes to ``src`` unchanged, and nothing is saved."""

    __slots__ = ()

    def __init__(self, dst, src):
        edge = (src.grad_fn, src._out_nr) if src.grad_fn is not None else (src._accumulator(), 0)
        super().__init__(_CopyOp, {}, ((None, 0), edge), (False, True))
        self.inputs = (None, None)
        self.outputs = ()
        self.versions = self.out_versions = None
        self.shapes = (dst.shape, src.shape)
        self.dtypes = (dst.dtype, src.dtype)
        self.out_meta = ((dst._data.shape, dst.dtype),)
        self.loc = None

    def apply(self, grads):
        return (None, grads[0])


def zeros_for(meta):
    from .tensor import Tensor
    shape, dtype = meta
    return Tensor._make(np.zeros(shape, dtype.np))

