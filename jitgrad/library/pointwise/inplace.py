"""In-place forms: ``inplace_form`` (what ``@published(..., inplace=inplace_form)`` makes ``x.sin_()`` from), and the
ones with arguments or on metadata (``x.clamp_min_(0)``, ...).

Each runs its out-of-place function through ``InPlaceOps._apply_inplace``: the same version bump, leaf/view
checks and history rebasing as ``add_``.
"""
from __future__ import annotations

from ...declarations import published

# in-place ops with arguments: name -> the out-of-place method they apply
# (``divide_`` is division.py's: it takes ``rounding_mode=``)
WITH_ARGS = ["clamp_min", "clamp_max", "clip", "remainder", "floor_divide", "true_divide", "multiply", "subtract"]


def inplace_form(fn):
    """The Tensor method ``x.<fn>_(*args, **kwargs)``: writes ``fn(x, *args, **kwargs)`` into ``x`` (one in-place
    wrapper for the surface modules' functions)."""
    def f(self, *args, **kwargs):
        return self._apply_inplace(lambda x, *o: fn(x, *o, **kwargs), *args)
    f.__name__ = f.__qualname__ = fn.__name__ + "_"
    f.__doc__ = f"In place: ``x.{fn.__name__}_(...)`` writes ``{fn.__name__}(x, ...)`` into ``x``."
    return f


def _inplace_with_args(name):
    def f(self, *args, **kwargs):
        tensors = [a for a in args if hasattr(a, "_apply_inplace")]
        rest = [a for a in args]

        def run(s, *ts):
            it = iter(ts)
            call = [next(it) if hasattr(a, "_apply_inplace") else a for a in rest]
            return getattr(s, name)(*call, **kwargs)
        return self._apply_inplace(run, *tensors)
    f.__name__ = name + "_"
    f.__doc__ = f"In-place ``{name}``: writes ``x.{name}(...)`` into ``x`` and returns it."
    return f


# in-place view ops: the tensor itself takes the view's shape and strides (torch's node names)
METADATA = {"t_": ("t", "TBackward1"), "transpose_": ("transpose", "TransposeBackward1"),
            "unsqueeze_": ("unsqueeze", "UnsqueezeBackward1"), "squeeze_": ("squeeze", "SqueezeBackward3"),
            "swapdims_": ("transpose", "TransposeBackward1"), "swapaxes_": ("transpose", "TransposeBackward1")}


def _metadata_inplace(name, method, node_name):
    def f(self, *args):
        import numpy as np
        from ...runtime.grad_mode import STATE
        if type(self._data) is not np.ndarray:
            from ..torch_kwargs import UnsupportedError
            raise UnsupportedError(f"jitgrad does not support Tensor.{name}() inside @jg.compile or on a device yet")
        self._check_view_inplace()
        r = getattr(self, method)(*args)
        self._data = r._data if r is not self else self._data
        self._vc[0] += 1
        if STATE.grad_enabled and r.grad_fn is not None and r is not self:
            node = r.grad_fn
            node.view_args = None           # its input is this tensor, which now has the new shape
            node.torch_name = node_name
            self.grad_fn, self._out_nr = node, r._out_nr
        return self
    f.__name__ = name
    f.__doc__ = f"In place ``{method}``: this tensor becomes its ``{method}(...)`` view (same storage)."
    return f


for _n in WITH_ARGS:
    published("Tensor", name=_n + "_")(_inplace_with_args(_n))
for _n, (_method, _node_name) in METADATA.items():
    published("Tensor", name=_n)(_metadata_inplace(_n, _method, _node_name))


__all__ = ["inplace_form", "WITH_ARGS", "METADATA"]
