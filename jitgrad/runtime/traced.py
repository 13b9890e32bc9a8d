"""Tensors inside a @jitgrad.compile trace: reading their values (an error naming the user's line), capturing
outside tensors as graph inputs, and functionalised in-place writes."""
from __future__ import annotations

import weakref

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Var
from ..ir.ops import OPS, Aval
from ..ir.symbolic import has_symbols, known_equal
from ..tracer import STATE as _TR
from .source import user_loc
from .view_rule import contiguous_strides, element_strides

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


def is_traced_view(op, params, tr=None, x=None) -> bool:
    """Whether a trace records the result of view op ``op`` on ``x`` as a view of it: not an index by an index
    tensor or a Python bool (advanced indexing: a copy, as in eager mode and torch), and a plain reshape only when
    eager mode's strides for ``x`` (``eager_strides``) allow a view; with strides unknown it stays a copy."""
    if op.name == "reshape":
        st = eager_strides(tr, x) if tr is not None else None
        return st is not None and _reshaped(x.shape, st, params["shape"]) is not None
    if op.name == "getitem":
        return not any(type(s) is bool or type(s) is tuple and s[0] == "tensor" for s in params["spec"])
    return True


# ---- eager layouts inside a trace ------------------------------------------------------------------------------
# Whether a reshape is a view or a copy, and whether ``view`` is allowed, depend on the strides eager mode would
# have, which a traced value lacks: ``Trace.layouts`` maps a Var to the element strides eager mode gives it when
# they are not C-contiguous, or to None when unknown (absent: C-contiguous).  Inputs get their arrays' strides
# (part of the key / guards, jit/compile.py, jit/trace_entries.py), recorded views the strides of the same view
# of their base's, other ops C-contiguous outputs of C-contiguous inputs (NumPy and torch keep a permuted input's
# layout: unknown then).
_LAYOUT_OPS = ("getitem", "permute", "broadcast_to", "diagonal", "flip")


def _fake(shape, strides):
    # an int8 array whose byte strides are the element strides; its memory is never read (views only)
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape), tuple(strides))


def _reshaped(shape, strides, new):
    """Element strides of a view of ``(shape, strides)`` as ``new`` (NumPy's no-copy reshape, as eager mode's), or
    None when eager mode copies."""
    if has_symbols((shape, new)):
        # symbolic sizes (ir/symbolic.py): a C-contiguous layout reshapes to a C-contiguous view; other layouts
        # are not followed (a copy, as when strides are unknown)
        return contiguous_strides(new) if tuple(strides) == contiguous_strides(shape) else None
    a = _fake(shape, strides).view()
    try:
        a.shape = tuple(new)
    except (AttributeError, ValueError):
        return None
    return a.strides


def _symbolic_view_strides(op, params, x_shape, st):
    """The element strides of view ``op`` of a value with strides ``st`` and symbolic sizes: permutes and basic
    indexing by ints, unit-step slices and None; other views are not followed (None: unknown)."""
    if op.name == "permute":
        return tuple(st[p] for p in params["perm"])
    if op.name == "broadcast_to":       # new leading dims and stretched size-1 dims take stride 0
        shape = params["shape"]
        lead = len(shape) - len(st)
        return (0,) * lead + tuple(0 if type(n) is int and n == 1 and shape[lead + k] is not n else s
                                   for k, (n, s) in enumerate(zip(x_shape, st)))
    if op.name == "getitem" and Ellipsis not in params["spec"]:
        out, k = [], 0
        for s in params["spec"]:
            if s is None:
                out.append(0)
            elif type(s) is tuple:
                if s[0] != "slice" or s[3] not in (None, 1):
                    return None
                out.append(st[k])
                k += 1
            else:
                k += 1
        return tuple(out) + tuple(st[k:])
    return None


def layout_key(d):
    """An array's element strides when it is not C-contiguous, else None: what a trace's view/copy decisions read
    of an input, so part of the key of arguments and of the guards of captured tensors."""
    flags = getattr(d, "flags", None)
    if flags is None or flags.c_contiguous or d.size <= 1:
        return None
    return element_strides(d)


def pin_layout(tr, t):
    """``t`` is written in place: its strides stay those of its first value, whatever op makes the new one (an
    index_put over a strided view, a copy_ of a transposed source)."""
    if id(t) not in tr.pinned:
        # the entry holds ``t``, so its id stays its own while the trace lives; not through ``tr.keep``, whose
        # tensors still holding traced values after the trace count as leaked state (a captured parameter is not)
        tr.pinned[id(t)] = (t, eager_strides(tr, t))


def eager_strides(tr, x):
    """The element strides eager mode gives tensor (or payload) ``x`` in trace ``tr``, or None when unknown."""
    if tr is not None and tr.pinned and id(x) in tr.pinned:
        return tr.pinned[id(x)][1]
    d = x._data if hasattr(x, "_data") else x
    if type(d) is np.ndarray:
        return element_strides(d)
    if type(d) is not Var:
        return None
    return tr.layouts.get(d, contiguous_strides(d.shape)) if tr.layouts else contiguous_strides(d.shape)


def traced_strides(t):
    """The eager strides of traced tensor ``t`` in the active trace when known and not C-contiguous, else None."""
    tr = _TR.active
    st = eager_strides(tr, t) if tr is not None else None
    return None if st is None or st == contiguous_strides(t.shape) else st


def _elementwise_strides(tr, op, args, out):
    """An elementwise op over one tensor of ``out``'s shape and scalars keeps its axes' order (NumPy's and torch's
    rule for a permuted input: ``(y.T * 2).T`` is contiguous); other ops over non-contiguous inputs: unknown."""
    if op.family != "elementwise":
        return None
    full = [a for a in args if hasattr(a, "_data") and a.ndim and a._data.size > 1]
    st = eager_strides(tr, full[0]) if len(full) == 1 and full[0].shape == out.shape else None
    if st is None or any(s <= 0 for s in st):
        return None
    res, n = [0] * len(st), 1
    for k in sorted(range(len(st)), key=lambda k: st[k]):       # innermost (smallest stride) first
        res[k] = n
        n *= out.shape[k]
    return tuple(res)


def note_layout(tr, op, params, args, out, recorded):
    """Record the eager strides of ``out``, the result of ``op`` on ``args`` (``recorded``: it is a traced view of
    ``args[0]``)."""
    if recorded and op.name in _LAYOUT_OPS + ("reshape",):
        st = eager_strides(tr, args[0])
        if st is not None:
            x = args[0]
            try:
                st = _reshaped(x.shape, st, params["shape"]) if op.name == "reshape" else \
                    _symbolic_view_strides(op, params, x.shape, st) if has_symbols((x.shape, st, params)) else \
                    op.impl(_fake(x.shape, st), **params).strides
            except Exception:   # noqa: BLE001 - a geometry this cannot follow: unknown
                st = None
    elif recorded:
        st = None       # a view this does not follow
    elif tr.layouts and any(type(getattr(a, "_data", None)) is Var and a._data in tr.layouts for a in args):
        st = _elementwise_strides(tr, op, args, out)     # an op over a non-contiguous input
    else:
        return
    if st is not None and has_symbols((st, out.shape)):
        # symbolic sizes: contiguous or not may depend on the sizes (a slice of a buffer): unknown then,
        # rather than a guard on the sizes for bookkeeping
        same = known_equal(tuple(st), contiguous_strides(out.shape))
        if same is not True:
            tr.layouts[out] = None if same is None else tuple(st)
        return
    if st is None or tuple(st) != contiguous_strides(out.shape) and out.size > 1:
        tr.layouts[out] = None if st is None else tuple(st)


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


def python_float_inputs(tr, op, ins) -> bool:
    """A Python float a compiled function takes as a graph input (a float argument that changes between calls;
    ``tr.python_floats`` holds its float64 0-dim Var and the values computed from such floats alone) must
    promote as the Python number it stands for: next to tensors it is cast, as torch casts a scalar operand, to
    the type a Python float would give (``int_tensor * lr`` is float32, ``f64_tensor * lr`` float64).  Rewrites
    ``ins`` in place; True when every input is such a number (the result is one too)."""
    pf = tr.python_floats
    idx = [i for i, v in enumerate(ins) if type(v) is Var and v in pf]
    if not idx:
        return False
    strong = [(len(v.aval.shape), v.aval.dtype) for i, v in enumerate(ins) if i not in idx and not v.aval.weak]
    if not strong:
        return True
    target = dt.result_type(strong, [0.0])
    cast = OPS["cast"]
    for i in idx:
        v = ins[i]
        if v.aval.dtype is not target:
            ins[i] = tr.add_eqn(cast, [v], {"dtype": target}, [Aval(v.aval.shape, target)], user_loc(3), False,
                                (False,))[0]
    return False
