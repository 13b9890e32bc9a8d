"""The keyword arguments a public function's ``**torch_kw`` catches: what torch accepts beyond the function's own
parameters.

Every public function ends its signature with ``**torch_kw`` and starts with ``if torch_kw: return
torch_kwargs(...)``, so a plain call costs nothing extra (``jg.sum`` is the function itself).  The rare call with
such a keyword comes here: NumPy's ``keepdims=`` on a reduction is ``keepdim=``; ``out=`` writes the result into
the given tensor (torch's rules); anything else raises ``UnsupportedError`` ("jitgrad does not support the argument
'layout' of zeros() yet"), which is a NotImplementedError and an AttributeError.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np

REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "prod", "var", "std", "norm", "logsumexp",
                        "all", "any", "argmax", "argmin", "nansum", "nanmean", "count_nonzero", "var_mean",
                        "std_mean"})


from ..ir.dtypes import UnsupportedError, torch_scalar_name  # noqa: E402,F401 - (dtypes raise it too)


# the factories torch gives a ``memory_format=`` (the ``*_like`` ones lay out their result like the input with
# torch.preserve_format); conversions.py applies it to the result
MEMORY_FORMAT_FACTORIES = frozenset({"empty", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                                     "randn_like"})


def torch_kwargs(fn, name, args, kwargs, extra):
    """Call ``fn(*args, **kwargs)`` honouring the extra keywords ``extra`` (see the module docstring)."""
    extra = dict(extra)
    if "keepdims" in extra and name in REDUCTIONS:
        keepdims = extra.pop("keepdims")
        sig = inspect.signature(fn)
        bound = sig.bind_partial(*args, **kwargs)
        if bound.arguments.get("keepdim") not in (None, False):
            raise TypeError(f"{name}(): got both 'keepdim' and its alias 'keepdims'")
        bound.arguments["keepdim"] = keepdims
        args, kwargs = bound.args, bound.kwargs
    out = extra.pop("out", None) if "out" in extra else _NO_OUT
    fmt = extra.pop("memory_format", None) if name in MEMORY_FORMAT_FACTORIES else None
    if extra:
        bad = next(iter(extra))
        params = ", ".join(p for p in inspect.signature(fn).parameters if p != "torch_kw")
        raise UnsupportedError(f"jitgrad does not support the argument '{bad}' of {name}() yet (supported: "
                               f"{params})")
    result = fn(*args, **kwargs)
    if fmt is not None:
        from ..runtime.conversions import factory_layout
        result = factory_layout(name, result, fmt, args)
    return result if out is _NO_OUT else write_out(name, result, out, args)


_NO_OUT = object()


def write_out(name, result, out, args):
    """torch's ``out=``: the result is written into ``out`` (resized when its shape differs, with torch's warning
    unless it was empty), which is returned; refused when autograd would have to record the call."""
    from ..runtime import grad_mode
    from ..runtime.tensor import Tensor
    results = result if isinstance(result, tuple) else (result,)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(results) or not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be "
                        + ("a Tensor" if len(results) == 1 else f"a tuple of {len(results)} Tensors"))
    if grad_mode.STATE.grad_enabled and (any(o.requires_grad for o in outs) or any(
            isinstance(a, Tensor) and a.requires_grad for a in _flat(args))):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, but "
                           "one of the arguments requires grad.")
    from ..runtime.dual import DUALS
    if DUALS.levels and any(lv.get(t) is not None for lv in DUALS.levels
                            for t in list(outs) + [a for a in _flat(args) if isinstance(a, Tensor)]):
        raise RuntimeError(f"{name}(): a tensor with a forward-mode tangent was passed to an out= function: out= "
                           "functions don't support forward mode AD.")
    from ..runtime import saved_mutation
    if saved_mutation.STATE.active is not None:     # allow_mutation_on_saved_tensors: out= is a write too
        for o in outs:
            saved_mutation.STATE.active.before_write(o)
    if any(o._inference for o in outs) and not grad_mode.STATE.inference:   # out= is an in-place write (torch)
        raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make "
                           "a clone to get a normal tensor before doing inplace update.See "
                           "https://github.com/pytorch/rfcs/pull/17 for more details.")
    for o, r in zip(outs, results):
        if r.dtype is not o.dtype and not np.can_cast(r._data.dtype, o._data.dtype, "same_kind"):
            raise RuntimeError(f"result type {torch_scalar_name(r.dtype)} can't be cast to the desired "
                               f"output type {torch_scalar_name(o.dtype)}")
        if o.shape != r.shape:
            if o.numel():
                warnings.warn(f"An output with one or more elements was resized since it had shape {list(o.shape)}, "
                              f"which does not match the required output shape {list(r.shape)}. This behavior is "
                              "deprecated, and in a future PyTorch release outputs will not be resized unless they "
                              "have zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, "
                              "to zero elements with t.resize_(0).", UserWarning, stacklevel=4)
            o._data = np.empty(r.shape, o._data.dtype)
        o._data[...] = r._data
        o._vc[0] += 1
    return out


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


__all__ = ["torch_kwargs", "write_out", "UnsupportedError", "REDUCTIONS"]
