"""Eager forward mode: dual levels, the tangents they attach to tensors, and the jvp rules run at each op.

A level (``forward_ad.dual_level``, ``func.jvp``) keeps a table tensor -> tangent.  While any level is open,
``dispatch.bind`` hands each op to ``DUALS.bind``: it finds the innermost level whose tangents reach the op's
inputs, computes the primal with that level hidden (lower levels still apply, so levels nest: forward over
forward), then the output tangents with the OpDef's ``jvp`` rule, also with that level hidden, so the rule's own
ops carry the lower levels' tangents and record autograd history like any op (forward over reverse and reverse
over forward).  Under a trace the same rule binds traced ops: the tangent eqns land in the graph beside the
primal ones.
"""
from __future__ import annotations

import contextlib
import weakref

import numpy as np

from ..ir.ops.opdef import RuleCtx
from . import grad_mode
from .bind_route import set_forward
from .dispatch import bind
from .storage_objects import UntypedStorage, storage_numel
from .strided import storage_buffer
from .tensor import Tensor
from ..tracer import STATE as _TR



class Level:
    """One dual level: tensor -> tangent, for the tensors that carry one at this level."""

    __slots__ = ("index", "tangents", "__weakref__")

    def __init__(self, index):
        self.index = index
        self.tangents = {}      # id(tensor) -> (weakref to the tensor, tangent)

    def get(self, t):
        e = self.tangents.get(id(t))
        if e is None:
            return None
        if e[0]() is not t:         # the id was reused by a new tensor
            del self.tangents[id(t)]
            return None
        return e[1]

    def set(self, t, tangent):
        if tangent is None:
            self.tangents.pop(id(t), None)
            return
        key = id(t)
        table = self.tangents
        ref = weakref.ref(t, lambda _r, key=key, table=table: table.pop(key, None))
        table[key] = (ref, tangent)


class Duals:
    """The open levels (innermost last) and the handler ``dispatch.bind`` calls while any is open."""

    def __init__(self):
        self.levels = []
        self.visible = 0        # levels[:visible] apply to the ops bound now (a rule runs with its own hidden)

    # ---- levels ------------------------------------------------------------------------------------------
    def enter(self) -> Level:
        lv = Level(len(self.levels))
        self.levels.append(lv)
        self.visible = len(self.levels)
        set_forward(self)
        return lv

    def exit(self, lv):
        if not self.levels or self.levels[-1] is not lv:
            raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created. This "
                               "is not supported.")
        self.levels.pop()
        lv.tangents.clear()
        self.visible = len(self.levels)
        set_forward(self if self.levels else None)

    @contextlib.contextmanager
    def hidden(self):
        """Ops bound inside see no tangents (make_dual's view, unpack_dual's primal)."""
        prev = self._hide(0)
        try:
            yield
        finally:
            self._show(prev)

    def _hide(self, k):
        prev = self.visible
        self.visible = k
        set_forward(self if k else None)
        return prev

    def _show(self, prev):
        self.visible = prev
        set_forward(self if prev else None)

    # ---- ops ---------------------------------------------------------------------------------------------
    def _innermost(self, args):
        """(k, level, tangents): the innermost visible level ``k`` where some of ``args`` have tangents, and
        their tangents there (None each where they have none); ``(0, None, [])`` when no level has any."""
        k = self.visible
        while k > 0:
            k -= 1
            lv = self.levels[k]
            ts = [lv.get(a) if isinstance(a, Tensor) else None for a in args]
            if any(t is not None for t in ts):
                return k, lv, ts
        return 0, None, []

    def bind(self, op, args, params):
        """``bind(op, *args, **params)`` with tangents: the primal, and each output's tangent at the innermost
        level that reaches the inputs."""
        k, found, ts = self._innermost(args)
        if found is not None and op.decompose is not None and _TR.active is not None:
            # traced, a fused op is bound as its composition: each primitive of it carries its own tangent, so the
            # values its autograd nodes save are dual too (forward over reverse reads their tangents)
            return op.decompose(_bind_name, *args, **params)
        if found is None or op.jvp is None:
            prev = self._hide(0)
            try:
                return bind(op, *args, **params)
            finally:
                self._show(prev)
        prev = self._hide(k)
        try:
            out = bind(op, *args, **params)
            outs = out if isinstance(out, tuple) else (out,)
            if not any(o.dtype.is_floating_point for o in outs):
                return out
            res = apply_jvp(op, args, params, outs, ts)
        finally:
            self._show(prev)
        for o, t in zip(outs, res):
            if t is not None and o.dtype.is_floating_point:
                found.set(o, t)
                node = o.grad_fn
                if node is not None and node.op.saves_out and node.outputs and not node.op.out_as_mask:
                    # the node keeps the output without its history (saved_output.py): the kept value carries
                    # the tangent too, for a backward that reads it under this level (forward over reverse)
                    saved = node.outputs[o._out_nr] if o._out_nr < len(node.outputs) else None
                    if saved is not None:
                        self.carry(o, saved)
        return out

    def apply_function(self, cls, ctx, args, kwargs, plain):
        """A custom ``autograd.Function`` applied with tangents: ``forward`` runs with no tangents (as torch's),
        then the Function's ``jvp(ctx, *tangents)`` gives its outputs' tangents."""
        k, found, ts = self._innermost(args)
        if found is not None:
            ctx._forward_outputs = ()       # (the forward records what the jvp's results are checked against)
        prev = self._hide(0)
        try:
            out = plain(ctx, args, kwargs)
        finally:
            self._show(prev)
        if found is None:
            return out
        if getattr(cls.jvp, "_not_implemented", False):
            raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it "
                                      "with forward mode AD.")
        tin = []
        for a, t in zip(args, ts):
            if t is None and isinstance(a, Tensor) and a.dtype.is_floating_point and ctx.materialize_grads:
                t = a.new_zeros(a.shape)
            tin.append(t)
        prev = self._hide(k)
        ctx._in_jvp = True
        versions = [None if t is None else t._vc[0] for t in tin]
        try:
            res = cls.jvp(ctx, *tin)
        finally:
            ctx._in_jvp = False
            self._show(prev)
        outs = out if isinstance(out, tuple) else (out,)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(outs):
            raise RuntimeError(f"function {cls.__name__}_jvp returned an incorrect number of forward gradients "
                               f"(expected {len(outs)}, got {len(res)})")
        _check_jvp_results(ctx._forward_outputs, args, tin, versions, res)
        for o, t in zip(outs, res):
            if isinstance(o, Tensor) and t is not None and o.dtype.is_floating_point:
                if tuple(t.shape) != tuple(o.shape):
                    raise RuntimeError("Trying to set a forward gradient that has a different size than that of the "
                                       f"original Tensor, this is not supported. Tensor is of size {list(o.shape)} "
                                       f"while the given forward gradient is of size {list(t.shape)}.")
                found.set(o, t)
        if ctx._saved_outputs:      # outputs the ctx saved without their history carry their tangents too
            for i, (nr, _) in ctx._saved_outputs.items():
                o = outs[nr] if nr < len(outs) else None
                if isinstance(o, Tensor) and ctx._saved[i] is not None:
                    self.carry(o, ctx._saved[i])
        return out

    def carry(self, src, dst):
        """Give ``dst`` (a new stand-in for ``src``: func's fresh leaves) ``src``'s tangents at every level."""
        for lv in self.levels:
            t = lv.get(src)
            if t is not None:
                lv.set(dst, t)
        return dst

    def follow_view(self, src, out, view_of):
        """``out`` is a view of ``src`` made outside ``bind`` (``as_strided``): at each level where ``src`` has a
        tangent, ``out``'s is ``view_of(tangent)``, the same view of it (computed with that level hidden, so it is
        differentiable and carries the lower levels' tangents)."""
        for k in range(self.visible):
            lv = self.levels[k]
            t = lv.get(src)
            if t is None:
                continue
            prev = self._hide(k)
            try:
                lv.set(out, view_of(t))
            finally:
                self._show(prev)

    def forget(self, t):
        """``t`` carries no tangent at any level any more (``detach_``)."""
        for lv in self.levels:
            lv.set(t, None)

    def after_inplace(self, target, result):
        """``target`` was overwritten in place with ``result``'s value: its tangent is now ``result``'s, written
        into its existing tangent where it has one (so views of it, and its base, see the change).  A view with no
        tangent gets one first, as torch's: the same view of its base's tangent (a zero one, laid out as the base,
        made for a base that has none), so the base's tangent sees the write too."""
        for lv in self.levels[:self.visible]:
            rt = lv.get(result)
            old = lv.get(target)
            if rt is None and old is None:
                continue
            if rt is None:
                rt = old.new_zeros(old.shape)
            if rt.dtype is not target.dtype:
                rt = rt.to(target.dtype)
            if old is None and type(rt._data) is np.ndarray:
                old = _view_tangent(lv, target) if target._base is not None else None
                if old is None and target._base is None and not rt.requires_grad and not same_layout(rt, target):
                    old = zeros_with_layout(target)     # a root's tangent is laid out as the root (as torch's)
                if old is not None:
                    lv.set(target, old)
            if old is not None and type(old._data) is np.ndarray and type(rt._data) is np.ndarray:
                old._data[...] = rt._data
                old._vc[0] += 1
            else:
                lv.set(target, rt)


DUALS = Duals()


def same_layout(tangent: Tensor, t: Tensor) -> bool:
    """torch's layout check of a tangent given to ``t``: the same sizes and strides (where a dim has more than one
    element), a storage of the same number
    of elements and the same storage offset (which a tensor with no elements may differ in: pytorch#80507), so
    that a view of ``t`` and the same view of its tangent read corresponding elements.  Traced and device tensors
    pass (their layout is not memory)."""
    if type(tangent._data) is not np.ndarray or type(t._data) is not np.ndarray:
        return True
    if tangent._data.shape != t._data.shape:
        return False
    if any(a != b and n > 1 for n, a, b in zip(t._data.shape, tangent.stride(), t.stride())):
        return False        # (a dim of size 1 is read at one stride as well as at another)
    if storage_numel(tangent) != storage_numel(t):
        return False
    return not t._data.size or tangent.storage_offset() == t.storage_offset()


def _view_tangent(lv, view):
    """The tangent of ``view`` (an eager view with none at level ``lv``): its base's tangent read with the view's
    sizes, strides and storage offset, a view of it; the base gets a zero tangent laid out as itself when it has
    none.  None where that cannot be done (a base tangent laid out otherwise, an overlapping or traced tensor)."""
    base = view._base
    bt = lv.get(base)
    if bt is None:
        bt = zeros_with_layout(base)
        if bt is None:
            return None
        lv.set(base, bt)
    elif not same_layout(bt, base):
        return None
    d = view._data
    if type(d) is not np.ndarray or type(bt._data) is not np.ndarray or bt.dtype is not view.dtype:
        return None
    elems = UntypedStorage._of(storage_buffer(bt))._elements(d.dtype)
    off = view.storage_offset()
    if d.size and off + 1 + sum((n - 1) * st for n, st in zip(d.shape, view.stride())) > elems.size:
        return None
    data = np.lib.stride_tricks.as_strided(elems[off:], d.shape, d.strides, writeable=True) if d.size \
        else np.zeros(d.shape, d.dtype)
    root = bt if bt._base is None else bt._base
    vt = Tensor._make(data)
    vt._base, vt._vc = root, root._vc
    return vt


def zeros_with_layout(t: Tensor):
    """Zeros with ``t``'s sizes, strides and storage offset, a view of a fresh zero storage as large as ``t``'s
    (torch's new_with_same_meta); None when ``t``'s elements overlap in memory (an expanded tensor: nothing could
    be written into it) or ``t`` is traced or on a device."""
    d = t._data
    if type(d) is not np.ndarray or (d.size and 0 in d.strides and any(n > 1 for n, st in zip(d.shape, d.strides)
                                                                       if st == 0)):
        return None
    buf = np.zeros(storage_numel(t), d.dtype)
    root = Tensor._make(buf)
    off = t.storage_offset()
    data = np.lib.stride_tricks.as_strided(buf[off:], d.shape, d.strides) if d.size else np.zeros(d.shape, d.dtype)
    view = Tensor._make(data)
    view._base, view._vc = root, root._vc
    return view


def output_kinds(args, outs, dirty, non_diff):
    """Per output of a Function's forward, what its forward-mode tangent must be (torch's checks of ``jvp``):
    ("non_diff",) none; ("dirty", i) input i's tangent, written in place; ("view", i) a view of input i's tangent
    (an input returned as-is counts as its view); None anything."""
    kinds = []
    for o in outs:
        kind = None
        if isinstance(o, Tensor):
            if id(o) in non_diff:
                kind = ("non_diff",)
            else:
                for i, a in enumerate(args):
                    if not isinstance(a, Tensor):
                        continue
                    if o is a:
                        kind = ("dirty", i) if id(o) in dirty else ("view", i)
                        break
                    root = a if a._base is None else a._base
                    if o._base is not None and o._base is root:
                        kind = ("view", i)
                        break
        kinds.append(kind)
    return tuple(kinds)


def _check_jvp_results(kinds, args, tin, versions, res):
    """torch's checks of a custom Function's jvp results against what its forward returned (``kinds``:
    output_kinds): no tangent for a non-differentiable output, the input's own tangent written in place for
    an input written in place, a view of the input's tangent for an input returned as-is or viewed."""
    if not kinds:
        return
    for k, (kind, t) in enumerate(zip(kinds, res)):
        if kind is None:
            continue
        if kind[0] == "non_diff":
            if t is not None:
                raise RuntimeError(f"Function's jvp returned a gradient at position {k}, but  the corresponding "
                                   "forward output is not a differentiable Tensor.You should return None at that "
                                   "position instead.")
            continue
        i = kind[1]
        t_in = tin[i]
        if t_in is None:
            continue
        if kind[0] == "dirty":
            if t is not t_in or t_in._vc[0] == versions[i]:
                raise RuntimeError("inplace custom Function is not modifying the forward mode gradients inplace. If "
                                   "the forward is modifying an input inplace, then the jvp function must modify the "
                                   "corresponding gradient inplace.")
            continue
        if t is None or t._base is None:
            raise RuntimeError("A custom Function's forward is returning a view (or an input as-is) but the jvp is "
                               "not returning a view.")
        if t._base is not (t_in if t_in._base is None else t_in._base):
            if t_in._base is None:
                raise RuntimeError("A custom Function is returning a view but the jvp is not returning a view of the "
                                   "given grad input.")
            raise RuntimeError("A custom Function is returning a view but the jvp is not returning a view of the same "
                               "base as the given grad input.")


def _requires_grad(x) -> bool:
    return isinstance(x, Tensor) and x.requires_grad


def _float_tensor(x) -> bool:
    return isinstance(x, Tensor) and x.dtype.is_floating_point


def apply_jvp(op, args, params, outs, tangents):
    """The tangents of ``op``'s outputs ``outs`` (at inputs ``args``) for input tangents ``tangents`` (None:
    zero), by the OpDef's jvp rule; None for an output with a zero tangent."""
    c = RuleCtx()
    c.op = op
    c.inputs = tuple(args)
    c.outputs = tuple(outs)
    c.shapes = tuple(tuple(a.shape) if isinstance(a, Tensor) else () for a in args)
    c.dtypes = tuple(a.dtype if isinstance(a, Tensor) else None for a in args)
    c.params = params
    ts = tuple(t if t is not None and i not in op.nondiff_inputs and _float_tensor(a) else None
               for i, (a, t) in enumerate(zip(args, tangents)))
    c.needs_grad = tuple(t is not None for t in ts)
    c.bind = _bind_name
    c.transposer = transpose_vjp
    if not any(c.needs_grad):
        return (None,) * len(outs)
    # the rule's binds record nothing (no lower level shows, no history, not traced): it may work on the arrays
    c.plain = DUALS.visible == 0 and _TR.active is None and not (
        grad_mode.STATE.grad_enabled and (any(_requires_grad(a) for a in args) or any(_requires_grad(t) for t in ts)))
    res = op.jvp(c, *ts)
    return tuple(res)


def _bind_name(opname, *args, **params):
    from ..ir.ops import OPS
    return bind(OPS[opname], *args, **params)


def transpose_vjp(c, ts):
    """J t as the transpose of the op's vjp (linear in its cotangent ``u``): d/du <vjp(u), t>, by reverse mode
    with ``create_graph``, so it stays differentiable in the primals and the tangents."""
    from .backward.engine import grad as _grad
    outs = c.outputs
    with grad_mode.enable_grad():
        us = [o.new_zeros(o.shape).requires_grad_() for o in outs]
        cts = c.op.vjp(c, *us)
        total = None
        for ct, t in zip(cts, ts):
            if ct is None or t is None or not ct.requires_grad:
                continue
            term = (ct * t).sum()
            total = term if total is None else total + term
        if total is None:
            return (None,) * len(outs)
        keep = any(isinstance(x, Tensor) and x.requires_grad for x in c.inputs) or \
            any(t is not None and t.requires_grad for t in ts)
        gs = _grad([total], us, create_graph=True, allow_unused=True)
    if not keep:
        gs = [None if g is None else g.detach() for g in gs]
    return tuple(gs)
