"""In-place ops on views, recorded as torch does (its ``CopySlices``).

``v = b[1:]; v.mul_(w)`` writes into ``b``'s memory, so both histories change: the op's result ``r`` is
recorded on ``v``'s current value, and ``b`` becomes ``index_put(b, r, positions)``: a node named
``CopySlices`` whose vjp sends the gradient of the written region to ``r`` and the rest to ``b``'s previous
history.  ``v`` then gets a fresh view node on ``b``'s new history (``dispatch.refresh_view``), as do other
views of ``b`` when next used.  ``positions`` are the base elements the view covers, found from the two
arrays' strides and offsets, so any chain of view ops (slices, transposes, reshapes, narrow, select) works.

This module holds what ``bind`` consults (view origins, torch's messages, reading a view by positions); the
writes themselves run ops and are view_writes.py's.

torch's refusals: a view of a leaf that requires grad (``InPlaceOps._check_inplace``), and a view made in
no_grad mode of a base that requires grad, modified with grad mode on.
"""
from __future__ import annotations

import numpy as np

from . import grad_mode
from .tensor import Tensor

_GM = grad_mode.STATE


NO_GRAD_VIEW_MSG = ("A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given "
                    "that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
                    "moving both the view and the inplace either both inside the no_grad block (if you don't want "
                    "the inplace to be tracked) or both outside (if you want the inplace to be tracked).")


INFERENCE_VIEW_MSG = ("A view was created in inference mode and is being modified inplace in normal mode. Given "
                      "that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
                      "moving both the view and the inplace either both inside the inference_mode block (if you don't "
                      "want the inplace to be tracked) or both outside (if you want the inplace to be tracked).")
# the ``_view_origin`` of a view of a normal tensor made in inference mode (multi-output views hold (name, k))
INFERENCE_VIEW = ("inference mode",)
# ... of a view made in no_grad mode (of a tensor; in-place on it with grad mode on is refused, as torch)
NO_GRAD_VIEW = ("no_grad mode",)
# a view made (with grad mode on) of such a view inherits the refusal, with torch's "view of a view" text
VIEW_OF_NO_GRAD_VIEW = ("view of", "no_grad mode", None)
VIEW_OF_INFERENCE_VIEW = ("view of", "inference mode", None)


_CUSTOM_FN_TAIL = (" This view was created inside a custom Function (or because an input was returned as-is) and the "
                   "autograd logic to handle view+inplace would override the custom backward associated with the "
                   "custom Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
                   "cloning the output of the custom Function.")


# the view_args of a view made by no view op (as_strided): it shows its base's elements by their positions
BY_POSITIONS = ("by positions",)


def custom_fn_origin(fn_name, k, recorded):
    """The ``_view_origin`` of output ``k`` of a custom Function that is a view (a 4-tuple)."""
    return ("custom Function", fn_name, k, recorded)


def custom_fn_view_msg(origin):
    """torch's text for an in-place op on a view a custom Function returned."""
    _, name, k, recorded = origin
    if recorded:
        return f"Output {k} of {name} is a view and is being modified inplace." + _CUSTOM_FN_TAIL
    return ("A view was created in no_grad mode and is being modified inplace with grad mode enabled."
            + _CUSTOM_FN_TAIL)


def inherited_origin(base_origin):
    """The ``_view_origin`` of a view made with grad mode on of a view whose origin is ``base_origin``."""
    if base_origin is NO_GRAD_VIEW or base_origin is VIEW_OF_NO_GRAD_VIEW:
        return VIEW_OF_NO_GRAD_VIEW
    if base_origin is INFERENCE_VIEW or base_origin is VIEW_OF_INFERENCE_VIEW:
        return VIEW_OF_INFERENCE_VIEW
    if base_origin is not None and len(base_origin) == 2:
        return base_origin      # a view of an output of a multi-view function is refused like it (torch)
    return None


def stale_view_msg(t, node):
    """torch's text when the grad_fn of a view made in no_grad / inference mode (or of a view of one) is read after
    its base or another view of it was written in place (its "indirect" rebase); ``node``: the view's own."""
    import re
    origin = t._view_origin
    direct = INFERENCE_VIEW_MSG if origin is INFERENCE_VIEW or origin is VIEW_OF_INFERENCE_VIEW else NO_GRAD_VIEW_MSG
    msg = direct.replace("and is being modified inplace",
                         "and its base or another view of its base has been modified inplace")
    if node is not None:
        name = re.sub(r"Backward\d*$", "", node.name())
        msg = (f"Output {t._out_nr} of {name} is a view of a view which was created in "
               + msg.split(" created in ", 1)[1])
    return msg


# the origins of the views whose grad_fn is refused once their base was written (torch's creation_meta)
_MADE_WITHOUT_GRAD = (NO_GRAD_VIEW, INFERENCE_VIEW, VIEW_OF_NO_GRAD_VIEW, VIEW_OF_INFERENCE_VIEW)

# the slot that holds a Tensor's grad_fn, read and written past NoGradView's property
_GRAD_FN_SLOT = Tensor.__dict__["grad_fn"]


class NoGradView(Tensor):
    """A view made in no_grad or inference mode (or a view of one) of a base that requires grad: torch's
    ``creation_meta``.  Its ``grad_fn`` checks, with grad mode on, that neither its base nor another view of it was
    written in place since it was made (``_view_version``), and raises torch's error if one was: the history it
    would need is ambiguous.  It requires grad as its base does.  Only such views have this class (dispatch.bind
    sets it), so plain tensors keep their slot and the eager fast path."""

    __slots__ = ()

    @property
    def grad_fn(self):
        gf = _GRAD_FN_SLOT.__get__(self, Tensor)
        if self._vc[0] != self._view_version and _GM.grad_enabled and self._view_origin in _MADE_WITHOUT_GRAD:
            raise RuntimeError(stale_view_msg(self, gf))
        return gf

    @grad_fn.setter
    def grad_fn(self, node):
        _GRAD_FN_SLOT.__set__(self, node)

    @property
    def requires_grad(self) -> bool:
        if self._requires_grad or _GRAD_FN_SLOT.__get__(self, Tensor) is not None:
            return True
        b = self._base      # as torch's view: it requires grad while its base does (never raises)
        return b is not None and (b._requires_grad or b.grad_fn is not None)

    @requires_grad.setter
    def requires_grad(self, flag):
        Tensor.requires_grad.__set__(self, flag)


def view_of_view_msg(t):
    """torch's text for an in-place op on a view of a view made in no_grad / inference mode."""
    import re
    name = re.sub(r"Backward\d*$", "", t.grad_fn.name()) if t.grad_fn is not None else "View"
    msg = NO_GRAD_VIEW_MSG if t._view_origin is VIEW_OF_NO_GRAD_VIEW else INFERENCE_VIEW_MSG
    head = msg.split(" and is being", 1)[1]
    mode = t._view_origin[1]
    return f"Output {t._out_nr} of {name} is a view of a view which was created in {mode} and is being{head}"


def read_by_positions(a):
    """View ``a``'s value as a gather from its base's flat elements: the history of a view whose own op cannot
    be replayed (as_strided) or was never recorded (made before the base had a history)."""
    base = a._base
    return base.reshape(-1)[Tensor._make(view_positions(base._data, a._data))]


def adopt_base_history(a):
    """View ``a`` has no history but its base has one now, so the base was written in place after ``a`` was made
    (a view made in grad mode of a tracked base would have a node).  As torch, ``a`` now reads the base's new
    history (an ``AsStridedBackward0`` node).  A view made in no_grad / inference mode (or a view of one) stays
    without one: torch refuses its use once its base was written after it was made, which needs the version at
    its making, not kept yet (tests/test_view_history.py's xfail); views a multi-output or custom function
    returned keep their own rules."""
    if a._view_origin is not None:
        return
    if type(a._data) is not np.ndarray or type(a._base._data) is not np.ndarray:
        return      # traced and device views follow their base where it is written (traced.py, cuda/eager.py)
    from . import grad_mode
    gm = grad_mode.STATE
    prev, gm.grad_enabled = gm.grad_enabled, True    # torch regenerates the node in any grad mode
    try:
        r = read_by_positions(a)
    finally:
        gm.grad_enabled = prev
    node = r.grad_fn
    node.torch_name = "AsStridedBackward0"
    node.view_args, node.view_base_fn = BY_POSITIONS, a._base.grad_fn     # later writes refresh it (refresh_view)
    a.grad_fn, a._out_nr = node, 0


def view_positions(base: np.ndarray, view: np.ndarray) -> np.ndarray:
    """For each element of ``view`` (an array sharing ``base``'s memory), its flat (C-order) index in ``base``."""
    isz = base.itemsize

    def offsets(a, start):
        off = np.full(a.shape, start, dtype=np.int64)
        for k, (n, s) in enumerate(zip(a.shape, a.strides)):
            shp = [1] * a.ndim
            shp[k] = n
            off = off + (np.arange(n, dtype=np.int64) * (s // isz)).reshape(shp)
        return off

    b_off = offsets(base, 0).ravel()
    lo = int(b_off.min()) if b_off.size else 0
    inverse = np.full(int(b_off.max()) - lo + 1 if b_off.size else 1, -1, dtype=np.int64)
    inverse[b_off - lo] = np.arange(b_off.size, dtype=np.int64)
    start = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // isz
    return inverse[offsets(view, start) - lo]


__all__ = ["BY_POSITIONS", "adopt_base_history", "read_by_positions", "view_positions", "NO_GRAD_VIEW_MSG", "INFERENCE_VIEW_MSG",
           "INFERENCE_VIEW", "NO_GRAD_VIEW", "VIEW_OF_NO_GRAD_VIEW", "VIEW_OF_INFERENCE_VIEW", "inherited_origin",
           "view_of_view_msg", "custom_fn_origin", "custom_fn_view_msg"]
