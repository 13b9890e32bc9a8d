"""Writes into views that need ops: an in-place op on a view when autograd records it (torch's CopySlices: the
base becomes ``index_put(base, result)`` at the positions the view reads, and the view's node follows the base's
new history), the value of a base after a write into its view (traced code and device tensors, whose views are
not shared memory), and, inside a trace, a write into a recorded view carried through to its base and the base's
other views (traced.py records them).  These run ops (``bind``), so they sit above dispatch.py; view_inplace.py
and traced.py keep what bind itself consults.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Var
from ..ir.ops import OPS as O
from . import grad_mode
from .dispatch import bind, refresh_view
from .forward_state import STATE as _FWD
from .grad_names import named
from .source import user_loc
from .traced import pin_layout, traced_payload
from .view_inplace import BY_POSITIONS, NO_GRAD_VIEW_MSG, view_positions


def inplace_on_view(self, fn, others, snapshot, check_result):
    """``self.<op>_(*others)`` for a view ``self`` when the op is recorded: see the module docstring."""
    base = self._base
    if self.grad_fn is None and base.requires_grad:
        raise RuntimeError(NO_GRAD_VIEW_MSG)
    if self.grad_fn is not None:
        # the write reads the view through a node made now from the base's current history, as torch's
        # CopySlices reads the base: hooks registered on the view before the write stay on its old node, which
        # the write leaves out of the graph; as_strided's is rebuilt from its base as well (elements beyond its
        # input, read without history, are the base's: their gradient goes there)
        refresh_view(self, force=True)
    src = snapshot(self)
    if _FWD.active is not None:
        _FWD.active.carry(self, src)    # the snapshot carries the view's tangents
    r = fn(src, *others)
    check_result(self, r)
    if r.dtype is not self.dtype:
        r = r.to(self.dtype)
    _copy_slices(base, self, r, write=True)
    self._vc[0] += 1                    # shared by the base and all its views
    if _FWD.active is not None:         # forward AD: the view's tangent (and its base's) take the result's
        _FWD.active.after_inplace(self, r)
    node = self.grad_fn
    if node is not None and node.view_args is not None:
        refresh_view(self)              # a view node on the base's new history
    else:                               # a view made when nothing required grad: its value is r
        self.grad_fn, self._out_nr = r.grad_fn, r._out_nr
    self._requires_grad = False
    return self


def _copy_slices(base, view, value, write=False):
    """``base``'s history becomes torch's CopySlices: ``base`` with ``value`` put where ``view`` shows its elements
    (``index_put``); ``write``: that result's data is also copied into ``base``'s own buffer first (the view's
    memory is part of it)."""
    b = base._data
    if b.ndim == 0:
        spec, idx = (Ellipsis,), ()
    else:
        pos = view_positions(b, view._data)
        idx = tuple(type(view)._make(a) for a in np.unravel_index(pos, b.shape))
        spec = tuple(("tensor", k) for k in range(b.ndim))
    new_base = bind(O["index_put"], base, value, *idx, spec=spec, accumulate=False)
    if write:
        b[...] = new_base._data
    base.grad_fn = named(new_base, "CopySlices").grad_fn
    base._out_nr = 0
    base._requires_grad = False


def rebase_custom_write(view, view_fn):
    """A custom Function wrote ``view`` in place (``ctx.mark_dirty``) and its node is now ``view.grad_fn``: as an
    in-place op on a view, the base's history becomes CopySlices of that write (so the gradient of the base
    reaches the Function's inputs), and the view reads the base's new history (``view_fn``: its node before)."""
    base = view._base
    b = base._data
    if type(b) is not np.ndarray or type(view._data) is not np.ndarray:
        return      # traced and device views follow their base where it is written (traced.py, cuda/eager.py)
    _copy_slices(base, view, view)
    if view_fn is not None and view_fn.view_args is not None:
        view.grad_fn, view._out_nr = view_fn, 0
        refresh_view(view)              # a view node on the base's new history


def view_write_into_base(base, view, op, params):
    """The value of ``base`` after an in-place write into ``view = op(base, **params)``: the view's new values
    put back where it reads them (traced code and device tensors, whose views are not shared memory).  A view
    whose elements share a location (``broadcast_to``) or that has no inverse here raises, naming the op."""
    with grad_mode.no_grad():
        if op.name == "reshape":
            new = view.reshape(base.shape)
        elif op.name == "permute":
            new = view.permute(*np.argsort(params["perm"]).tolist())
        elif op.name == "broadcast_to" and view.numel() == base.numel():    # only size-1 dims: no repeats
            new = view.reshape(base.shape)
        elif op.name == "flip":
            new = bind(op, view, **params)
        elif op.name == "getitem":
            new = bind(O["index_put"], base, view, spec=params["spec"], accumulate=False)
        elif op.name != "broadcast_to" and type(base._data) is Var:
            # any other traced view (diagonal): the base elements it reads, found by applying it to their flat
            # indices (a device tensor's index would have to be uploaded: refused below, as before)
            pos = np.asarray(op.impl(np.arange(base.numel(), dtype=np.int64).reshape(base.shape), **params))
            flat = bind(O["index_put"], base.reshape(-1), view.reshape(-1), type(base)._make(pos.reshape(-1)),
                        spec=(("tensor", 0),), accumulate=False)
            new = flat.reshape(base.shape)
        else:
            raise RuntimeError(f"jitgrad: in-place write into the result of {op.name} is not supported here (inside "
                               "@jg.compile or on a device: an expanded view's elements share one memory location, "
                               "and other views have no inverse yet); write into the base tensor instead")
        if new.dtype is not base.dtype:
            new = new.to(base.dtype)
    return new


def traced_write(t, r, tr):
    """In-place write inside a trace: the tensor's payload becomes the new traced value (functionalised;
    the compiled call writes it back into the real buffer afterwards).  When ``t`` is a view made in the trace,
    its base gets the written values too, and the other views of that base are recomputed (``note_view``)."""
    if r.dtype is not t.dtype:
        with grad_mode.no_grad():
            r = r.to(t.dtype)
    if tr is not None:
        traced_payload(t, tr)
        if tr.on_mutate is not None:
            tr.on_mutate(t)
    if tr is not None:
        pin_layout(tr, t)
    t._data = r._data
    if tr is not None and tr.views:
        # a recorded write: ``t``'s history becomes ``r``'s, and its views get views of it (eager mode's
        # refresh_view)
        _refresh_views(tr, t, history=r if r.grad_fn is not None and grad_mode.STATE.grad_enabled else None)
        _write_through(tr, t, r)


def _refresh_views(tr, t, skip=None, history=None):
    """Recompute the recorded views of ``t`` (and theirs) from its current value; with ``history`` (the tensor
    whose autograd history ``t`` takes), a view that has a history gets one on ``t``'s new history."""
    for k in list(tr.view_children.get(id(t), ())):
        rec = tr.views.get(k)
        v = rec[0]() if rec is not None else None
        if v is None or v is skip or rec[1] is not t:
            continue
        nv = None
        if rec[2] is None:          # an alias: the same value, no history
            v._data = t._data
        elif history is not None and (v.grad_fn is not None or v._view_origin is None):
            # (a view made before ``t`` had a history takes the new one too, as eager mode's adopt_base_history)
            old = t.grad_fn, t._out_nr
            t.grad_fn, t._out_nr = history.grad_fn, history._out_nr
            try:
                with grad_mode.enable_grad():
                    nv = bind(rec[2], t, **rec[3])
            finally:
                t.grad_fn, t._out_nr = old
            v._data, v.grad_fn, v._out_nr = nv._data, nv.grad_fn, nv._out_nr
        else:
            with grad_mode.no_grad():
                v._data = bind(rec[2], t, **rec[3])._data
        _refresh_views(tr, v, history=nv)


def _write_through(tr, t, r, recorded=True):
    """``t`` (a recorded view) was written with ``r``: write its base, then the base's base, recomputing the
    siblings on the way (``recorded``: False once the write went through an alias, which autograd never sees)."""
    rec = tr.views.get(id(t))
    if rec is None or rec[0]() is not t:
        return
    _, base, op, params = rec
    if op is None:          # an alias (detach(), .data): the written value is base's, with no history
        if tr.on_mutate is not None:
            tr.on_mutate(base)
        pin_layout(tr, base)
        base._data = t._data
        if base._vc is not t._vc:
            base._vc[0] += 1
        _refresh_views(tr, base, skip=t)
        _write_through(tr, base, t, False)
        return
    if recorded and grad_mode.STATE.grad_enabled and (base.requires_grad or r.requires_grad):
        loc = user_loc(4)
        where = f" at {loc.where()} ({loc.text})" if loc is not None else ""
        raise RuntimeError(f"jitgrad: in-place modification of a view ({op.name}) of a tensor inside @jg.compile "
                           f"while gradients are recorded is not supported{where}; use index assignment on the base "
                           "tensor (y[idx] = v), an out-of-place op, or a jitgrad.no_grad() block")
    new = view_write_into_base(base, t, op, params)
    if tr.on_mutate is not None:
        traced_payload(base, tr)
        tr.on_mutate(base)
    pin_layout(tr, base)
    base._data = new._data
    if base._vc is not t._vc:   # the base's memory changed: values saved of it are stale (eager: a shared counter)
        base._vc[0] += 1
    _refresh_views(tr, base, skip=t)
    _write_through(tr, base, new, recorded)


__all__ = ["inplace_on_view", "view_write_into_base", "traced_write"]
