"""What eager dispatch keeps per signature (op, input shapes and dtypes, params): the rule's results, the impl to
call, and what ``dispatch._record`` builds a node from; the rules are pure, so each is evaluated once per signature.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from ..ir.ops import Aval, OpError
from .op_errors import op_error
from .tensor import Tensor

_FROM_NP = dt._FROM_NP
# the avals of Python scalars (weakly typed, as torch treats them)
WEAK = {bool: Aval((), dt.bool_, True), int: Aval((), dt.int64, True), float: Aval((), dt.float32, True)}


def avals_of(op, args) -> list:
    """The avals of ``op``'s arguments (tensors and Python scalars)."""
    avals = []
    for a in args:
        if isinstance(a, Tensor):
            avals.append(Aval(a._data.shape, _FROM_NP[a._data.dtype]))
        else:
            avals.append(WEAK[type(a)])
    return avals


def rule_entry(op, args, params, avals=None):
    """What eager dispatch keeps per signature: (output avals, input avals, output NumPy dtype, differentiable
    (a vjp and a float result), input shapes, input dtypes, the impl to call (``OpDef.eager_impl``'s choice for
    the signature, else ``impl``; ``OpDef.eager_kernel``'s native kernel where it serves the signature), the
    node's ``out_meta``, the ``inputs`` of a node that saves none, {needs_grad: the inputs a node saves} (filled by
    ``_record``), whether the impl's result is known to be an array of the output dtype (``exact_ufunc``), and
    {(needs_grad, cotangent's shape, dtype): the pullback plan} (filled by ``pullback_plans.pullback``); ``avals``
    instead of ``args``: a plan's step."""
    avals = avals_of(op, args) if avals is None else avals
    try:
        out_avals = op.shape_dtype(avals, params)
    except OpError as e:
        raise op_error(op, avals, e) from None
    want = out_avals[0].dtype.np
    impl = signature_impl(op, avals, params)
    if op.eager_kernel is not None:     # a native kernel over large arrays (jit/eager_kernels.py), NumPy otherwise
        impl = op.eager_kernel(avals, params, impl) or impl
    return (out_avals, avals, want, op.vjp is not None and np.dtype(want).kind == "f",
            tuple(a.shape for a in avals), tuple(a.dtype for a in avals), impl,
            ((out_avals[0].shape, out_avals[0].dtype),), (None,) * len(avals), {},
            exact_ufunc(impl, avals, params, out_avals, want), {})


def signature_impl(op, avals, params):
    """The NumPy callable of ``op``'s signature: ``OpDef.eager_impl``'s choice, else ``impl`` (before
    ``eager_kernel``'s)."""
    return (op.eager_impl(avals, params) if op.eager_impl is not None else None) or op.impl


def by_form(op) -> bool:
    """Whether ``signature_impl``'s answer for ``op`` is the same at every shape of a signature's form (the same
    ranks, dtypes, params, sizes 0 and 1, equal sizes equal): ``op`` has no ``eager_impl``, or its chooser declares
    that it reads nothing else (``by_form = True`` on the chooser: dtypes, ranks, which shapes are equal)."""
    return op.eager_impl is None or getattr(op.eager_impl, "by_form", False)


def exact_ufunc(impl, avals, params, out_avals, want) -> bool:
    """Whether ``impl`` is a NumPy ufunc that, called on arrays of these avals (Python scalars as themselves, weak)
    with no keywords, returns an array (not a NumPy scalar: the result has dims) of dtype ``want``: NumPy resolves
    a ufunc's loop from its operands' dtypes alone, so eager dispatch need not check each result."""
    if type(impl) is not np.ufunc or params or impl.nout != 1 or len(out_avals) != 1 or not out_avals[0].shape:
        return False
    ins = []
    for a in avals:
        if a.weak:
            t = {1: int, 2: float}.get(a.dtype.category)    # (a bool scalar: NumPy takes no Python bool here)
            if t is None:
                return False
            ins.append(t)
        else:
            ins.append(np.dtype(a.dtype.np))
    try:
        return impl.resolve_dtypes((*ins, None))[-1] == want
    except (TypeError, ValueError, AttributeError):     # (no loop; an older NumPy)
        return False


def record_entry(out_avals, avals, out_shape):
    """The part of a ``rule_entry`` that ``_record`` reads, for an op bound outside the eager cache (traced, on a
    device): output and input avals, the input shapes and dtypes, ``out_meta`` from ``out_shape`` (a traced
    payload's shape may hold symbols)."""
    return (out_avals, avals, None, True, tuple(a.shape for a in avals), tuple(a.dtype for a in avals), None,
            ((out_shape, out_avals[0].dtype),), (None,) * len(avals), {}, False, {})


def saved_inputs(op, n: int, needs: tuple) -> tuple:
    """The indices of the inputs a node of ``op`` over ``n`` arguments saves, given which inputs need a gradient:
    ``op.saves_in``, less those ``op.saved_for`` ties to inputs that need none (torch saves nothing it will not
    read)."""
    only_for = op.saved_for
    saved = []
    for i in op.saves_in:
        if i >= n:
            break
        if only_for and i in only_for and not any(needs[j] for j in only_for[i]):
            continue
        saved.append(i)
    return tuple(saved)
