"""Tensors inside a @jitgrad.compile trace: reading their values (an error naming the user's line), capturing
outside tensors as graph inputs, and functionalised in-place writes."""
from __future__ import annotations

import weakref

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Var
from ..tracer import STATE as _TR
from . import grad_mode

_FROM_NP = dt._FROM_NP


def is_traced(t) -> bool:
    """Whether reading ``t``'s value in Python would bake a trace-time value into a compiled graph: a traced value,
    or (inside a @jitgrad.compile trace) a tensor from outside the function, which is read afresh at each call."""
    d = t._data
    if type(d) is Var:
        return True
    if type(d) is not np.ndarray:   # a device array: traced only when captured from outside, as below
        tr = _TR.active
        return tr is not None and tr.on_capture is not None and id(t) not in tr.created
    tr = _TR.active
    return tr is not None and tr.on_capture is not None and id(t) not in tr.created


def traced_read(t, what):
    from ..tracer import TracedValueError
    if _TR.active is None and type(t._data) is Var:
        # not tracing here: another thread's trace has swapped this tensor's payload; it is restored when that
        # trace ends, and then the read goes on
        from ..tracer.trace import wait_for_other_traces
        wait_for_other_traces()
        if type(t._data) is not Var:
            return
    from .source import user_loc
    loc = user_loc(3)
    where = f"{loc.where()} ({loc.text})" if loc is not None else "an unknown line"
    d = t._data
    kind = (f"a traced tensor ({d.aval})" if type(d) is not np.ndarray else
            f"a tensor from outside the function ({_FROM_NP[d.dtype].short}[{','.join(map(str, d.shape))}]: a "
            "closure or global, read afresh at every call)")
    raise TracedValueError(
        f"{what} reads the value of {kind} inside a @jitgrad.compile function, at {where}. "
        "A compiled function is traced once and replayed, so Python cannot branch on or convert tensor values. "
        "Fix: use tensor ops instead (jitgrad.where(cond, a, b) for an `if`, keep results as tensors and convert "
        "outside the compiled function), or pass fullgraph=False to run this signature eagerly.")


def traced_mask(t):
    from ..tracer import TracedValueError
    from .source import user_loc
    loc = user_loc(3)
    where = f"{loc.where()} ({loc.text})" if loc is not None else "an unknown line"
    d = t._data
    what = d.aval if type(d) is not np.ndarray else f"{_FROM_NP[d.dtype].short}[{','.join(map(str, d.shape))}] from outside"
    raise TracedValueError(
        f"indexing with a traced boolean mask ({what}) inside a @jitgrad.compile function, at {where}: the "
        "result's shape depends on the data, which a compiled function cannot trace. Fix: use "
        "jitgrad.where(mask, x, 0) or multiply by the mask instead, or pass fullgraph=False to run eagerly.")


def traced_payload(t, tr):
    """The Var a tensor stands for in the active trace (capturing it as a graph input if needed)."""
    d = t._data
    if type(d) is np.ndarray and tr is not None and tr.on_capture is not None and id(t) not in tr.created:
        tr.on_capture(t)
        d = t._data
    return d


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
    t._data = r._data
    if tr is not None and tr.views:
        _refresh_views(tr, t)
        _write_through(tr, t, r)


# ---- views inside a trace ------------------------------------------------------------------------------------
# Traced values are immutable, so a view op makes a new value, not an alias: an in-place write into a view (``w[1]
# .add_(x)``, ``y.T.mul_(2)``, ``y[1][:, idx] = v``) must be carried to its base by hand, as eager mode's shared
# memory does.  Each view a trace makes is recorded with its base; a write into it writes the base (the view's
# inverse: ``view_write_into_base``), on up a chain of views, and recomputes the base's other views.

def note_view(tr, t, base, op, params):
    """Record that tensor ``t`` made in trace ``tr`` is the view ``op(base, **params)``."""
    k = id(t)

    def forget(_, k=k, b=id(base)):
        tr.views.pop(k, None)
        kids = tr.view_children.get(b)
        if kids is not None:
            kids.discard(k)
    tr.views[k] = (weakref.ref(t, forget), base, op, params)
    tr.view_children.setdefault(id(base), set()).add(k)


def is_traced_view(op, params) -> bool:
    """Whether a trace records the result of view op ``op`` as a view of its input: not a plain reshape (see
    ``definite_view``), nor an index by an index tensor or a Python bool (advanced indexing: a copy, as in eager
    mode and torch)."""
    if op.name == "reshape":
        return False
    if op.name == "getitem":
        return not any(type(s) is bool or type(s) is tuple and s[0] == "tensor" for s in params["spec"])
    return True


def definite_view(t, base):
    """``t`` is a reshape of ``base`` that is a view whatever the strides (``view``, ``squeeze``, ``unsqueeze``):
    record it as one in the active trace.  A plain ``reshape`` is not recorded: eager mode copies when the strides
    forbid a view, and a trace does not know the strides eager mode would have (its writes stay its own)."""
    tr = _TR.active
    if tr is not None and t is not base and type(t._data) is Var:
        from ..ir.ops import OPS
        note_view(tr, t, base, OPS["reshape"], {"shape": tuple(t.shape)})
    return t


def traced_alias(t, base):
    """``t`` shares ``base``'s storage (``detach()``, ``.data``): inside a trace it takes base's traced value and is
    recorded as an alias of it (op None), so a write into either reaches the other, never recorded in base's
    history (torch: in-place on ``p.data`` is allowed).  A tensor from outside the function is captured here, so
    its alias is read afresh at each call (it was a constant of the graph)."""
    tr = _TR.active
    if tr is not None and is_traced(base):
        t._data = traced_payload(base, tr)
        note_view(tr, t, base, None, None)
    return t


def _refresh_views(tr, t, skip=None):
    """Recompute the recorded views of ``t`` (and theirs) from its current value."""
    from .dispatch import bind
    for k in list(tr.view_children.get(id(t), ())):
        rec = tr.views.get(k)
        v = rec[0]() if rec is not None else None
        if v is None or v is skip or rec[1] is not t:
            continue
        if rec[2] is None:          # an alias: the same value
            v._data = t._data
        else:
            with grad_mode.no_grad():
                v._data = bind(rec[2], t, **rec[3])._data
        _refresh_views(tr, v)


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
        base._data = t._data
        _refresh_views(tr, base, skip=t)
        _write_through(tr, base, t, False)
        return
    if recorded and grad_mode.STATE.grad_enabled and (base.requires_grad or r.requires_grad):
        from .source import user_loc
        loc = user_loc(4)
        where = f" at {loc.where()} ({loc.text})" if loc is not None else ""
        raise RuntimeError(f"jitgrad: in-place modification of a view ({op.name}) of a tensor inside @jg.compile "
                           f"while gradients are recorded is not supported{where}; use index assignment on the base "
                           "tensor (y[idx] = v), an out-of-place op, or a jitgrad.no_grad() block")
    from .view_inplace import view_write_into_base
    new = view_write_into_base(base, t, op, params)
    if tr.on_mutate is not None:
        traced_payload(base, tr)
        tr.on_mutate(base)
    base._data = new._data
    _refresh_views(tr, base, skip=t)
    _write_through(tr, base, new, recorded)
