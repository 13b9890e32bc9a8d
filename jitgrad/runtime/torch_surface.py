"""The edges of the torch surface: what tutorial code written for torch meets first.

- NumPy's spelling ``keepdims=`` beside torch's ``keepdim=`` on every reduction;
- torch's ``grad_fn`` names on compositions (``MeanBackward0``, ``NllLossBackward0``, ...; see grad_names.py);
- ``format(t, spec)`` on 0-d tensors (``f"{loss:.4f}"``), torch's TypeError for other tensors;
- a name or keyword argument torch has and jitgrad lacks raises ``UnsupportedError`` ("jitgrad does not support
  ... yet"), never a bare AttributeError/TypeError.  ``UnsupportedError`` is a NotImplementedError and an
  AttributeError, so ``hasattr(jg, "fft")`` is still honestly False.

``install`` runs once, at the end of ``jitgrad/__init__``: it wraps the public functions (in the ``jitgrad``
namespace, as Tensor methods and in ``jitgrad.nn.functional``) and adds the module-level ``__getattr__``.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .grad_names import getitem_name, named
from .tensor import Tensor
from .torch_names import NN_FUNCTIONAL, TENSOR_METHODS, TORCH_FUNCTIONS


class UnsupportedError(NotImplementedError, AttributeError):
    """A torch function, method or argument that jitgrad does not support yet."""


REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "prod", "var", "std", "norm", "logsumexp",
                        "all", "any", "argmax", "argmin", "nansum", "nanmean", "count_nonzero"})


def torch_function(fn, name: str, where: str):
    """``fn`` with the ``keepdims`` alias (reductions) and an UnsupportedError for a keyword torch's ``name``
    takes that jitgrad's does not (or that neither knows)."""
    reduction = name in REDUCTIONS

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if reduction and "keepdims" in kwargs:
            if "keepdim" in kwargs:
                raise TypeError(f"{name}(): got both 'keepdim' and its alias 'keepdims'")
            kwargs["keepdim"] = kwargs.pop("keepdims")
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            # only when the arguments do not fit the signature (an error from inside the function stays as is)
            if "out" in kwargs and where == "" and "unexpected keyword argument 'out'" in str(e):
                out = kwargs.pop("out")
                return write_out(name, fn(*args, **kwargs), out, args)
            if "unexpected keyword argument" in str(e) and not _binds(fn, args, kwargs):
                bad = str(e).rsplit("argument", 1)[-1].strip(" '\"")
                raise UnsupportedError(f"jitgrad does not support the argument '{bad}' of {where}{name}() yet "
                                       f"(supported: {_params(fn)})") from None
            raise
    call.__wrapped_torch__ = fn
    return call


def write_out(name, result, out, args):
    """torch's ``out=``: the result is written into ``out`` (resized when its shape differs, with torch's warning
    unless it was empty), which is returned; refused when autograd would have to record the call."""
    from . import grad_mode
    results = result if isinstance(result, tuple) else (result,)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(results) or not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be {'a Tensor' if len(results) == 1 else f'a tuple of {len(results)} Tensors'}")
    if grad_mode.STATE.grad_enabled and (any(o.requires_grad for o in outs) or any(
            isinstance(a, Tensor) and a.requires_grad for a in _flat(args))):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, but "
                           "one of the arguments requires grad.")
    for o, r in zip(outs, results):
        if r.dtype is not o.dtype and not np.can_cast(r._data.dtype, o._data.dtype, "same_kind"):
            names = {"float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int", "bool": "Bool",
                     "float16": "Half"}
            raise RuntimeError(f"result type {names.get(r.dtype.name, r.dtype.name)} can't be cast to the desired "
                               f"output type {names.get(o.dtype.name, o.dtype.name)}")
        if o.shape != r.shape:
            if o.numel():
                warnings.warn(f"An output with one or more elements was resized since it had shape {list(o.shape)}, "
                              "which does not match the required output shape "
                              f"{list(r.shape)}. This behavior is deprecated, and in a future PyTorch release outputs "
                              "will not be resized unless they have zero elements. You can explicitly reuse an out "
                              "tensor t by resizing it, inplace, to zero elements with t.resize_(0).", UserWarning,
                              stacklevel=3)
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


def _binds(fn, args, kwargs) -> bool:
    import inspect
    try:
        inspect.signature(fn).bind(*args, **kwargs)     # follows functools.wraps to the real signature
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _params(fn) -> str:
    import inspect
    try:
        return ", ".join(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return "?"


def unsupported_attribute(owner: str, name: str, known) -> AttributeError:
    if name in known:
        torch_owner = {"jitgrad": "torch", "Tensor": "torch.Tensor"}.get(owner, owner.replace("jitgrad", "torch"))
        return UnsupportedError(f"jitgrad does not support {torch_owner}.{name} yet")
    return AttributeError(f"module '{owner}' has no attribute '{name}'" if owner != "Tensor" else
                          f"'Tensor' object has no attribute '{name}'")


def _tensor_getattr(self, name):
    # only reached when normal lookup fails: a name torch's Tensor has and ours lacks, or a typo
    raise unsupported_attribute("Tensor", name, TENSOR_METHODS)


def _tensor_format(self, spec):
    """``f"{t:.4f}"`` and ``f"{t}"``: a 0-d tensor formats its number (as torch); others accept only the empty
    spec.  (A traced 0-d value keeps its str: reading its number would end the trace.)"""
    if self.ndim == 0 and type(self._data) is np.ndarray:
        return format(self.item(), spec)    # f"{loss}" prints the number, as torch
    if spec:
        raise TypeError("unsupported format string passed to Tensor.__format__")
    return str(self)


# ---- grad_fn names of compositions ------------------------------------------------------------------

def _fresh(result, input, name):
    """Name ``result``'s node only if the call made one (``reshape`` to the same shape returns its input)."""
    return named(result, name) if result is not input else result


def _fixed(torch_name):
    """A wrapper naming the result's grad_fn ``torch_name`` (when the result is a new node of this call)."""
    def wrap(fn):
        def f(input, *args, **kwargs):
            return _fresh(fn(input, *args, **kwargs), input, torch_name)
        return f
    return wrap


def _name_rules(F):
    """{function name: wrapper} renaming the result's grad_fn as torch names it."""
    def by_dim(base):
        def wrap(fn):
            def f(input, dim=None, *args, **kwargs):
                r = fn(input, dim, *args, **kwargs)
                return _fresh(r, input, f"{base}Backward0" if dim is None else f"{base}Backward1")
            return f
        return wrap

    def max_min(base):
        def wrap(fn):
            def f(input, dim=None, *args, **kwargs):
                r = fn(input, dim, *args, **kwargs)
                if isinstance(r, tuple):            # (values, indices) with a dim
                    named(r[0], f"{base}Backward0")
                elif dim is None and not args and "other" not in kwargs:
                    named(r, f"{base}Backward1")
                return r
            return f
        return wrap

    def squeeze(fn):
        def f(input, dim=None):
            return _fresh(fn(input, dim), input, "SqueezeBackward0" if dim is None else "SqueezeBackward1")
        return f
    return {"sum": by_dim("Sum"), "mean": by_dim("Mean"), "prod": by_dim("Prod"), "max": max_min("Max"),
            "min": max_min("Min"), "var": _fixed("VarBackward0"), "std": _fixed("StdBackward0"),
            "norm": _fixed("LinalgVectorNormBackward0"), "logsumexp": _fixed("LogsumexpBackward0"),
            "softmax": _fixed("SoftmaxBackward0"), "log_softmax": _fixed("LogSoftmaxBackward0"),
            "unsqueeze": _fixed("UnsqueezeBackward0"), "squeeze": squeeze, "t": _fixed("TBackward0"),
            "transpose": _fixed("TransposeBackward0"), "stack": _stack_name, "gather": _fixed("GatherBackward0"),
            "index_select": _fixed("IndexSelectBackward0")}


def _stack_name(fn):
    def stack(tensors, dim=0, **kwargs):
        tensors = list(tensors)
        r = fn(tensors, dim, **kwargs)
        return named(r, "StackBackward0") if all(r is not t for t in tensors) else r
    return stack


def _nn_rules(nnF):
    def loss(torch_name, integer_target=False):
        def wrap(fn):
            def f(input, target, *args, **kwargs):
                r = fn(input, target, *args, **kwargs)
                if integer_target and getattr(target, "is_floating_point", lambda: False)():
                    return r            # class probabilities: torch's result is not an NLL node either
                return named(r, torch_name)
            return f
        return wrap

    def linear(fn):
        def f(input, weight, bias=None, *args, **kwargs):
            r = fn(input, weight, bias, *args, **kwargs)
            if input.ndim == 2:
                named(r, "AddmmBackward0" if bias is not None else "MmBackward0")
            return r
        return f
    return {"cross_entropy": loss("NllLossBackward0", True), "nll_loss": loss("NllLossBackward0"),
            "mse_loss": loss("MseLossBackward0"), "l1_loss": loss("L1LossBackward0"),
            "softmax": _fixed("SoftmaxBackward0"), "log_softmax": _fixed("LogSoftmaxBackward0"),
            "gelu": _fixed("GeluBackward0"), "linear": linear}


def _wrap_all(namespace: dict, rules: dict):
    for n, rule in rules.items():
        fn = namespace.get(n)
        if fn is not None:
            namespace[n] = functools.wraps(fn)(rule(fn))


def _named_getitem(getitem):
    def __getitem__(self, key):
        r = getitem(self, key)
        gf = r.grad_fn
        if gf is not None and r is not self and gf.op.name == "getitem":
            gf.torch_name = getitem_name(gf.params["spec"])
        return r
    return __getitem__


# ---- install ---------------------------------------------------------------------------------------

def install(jg: dict):
    """Wire the surface into the ``jitgrad`` namespace ``jg`` (its ``globals()``), Tensor and nn.functional."""
    from . import counting, functions, masking, ordering, slicing
    from ..nn import functional as nnF
    extra = (ordering, counting, masking, slicing)

    # 1. the new functions, as functions and methods
    for mod in extra:
        for n in mod.METHODS:
            setattr(functions, n, getattr(mod, n))
    for n, f in masking.INPLACE.items():
        setattr(Tensor, n, f)
    from . import inplace_math
    inplace_math.install(Tensor)

    # 2. torch's grad_fn names on compositions (in the modules, so internal callers see the same functions)
    fvars = vars(functions)
    before = {n: fvars[n] for n in functions._METHODS + ["stack"] if n in fvars}
    _wrap_all(fvars, _name_rules(functions))
    _wrap_all(vars(nnF), _nn_rules(nnF))
    Tensor.__getitem__ = _named_getitem(Tensor.__getitem__)

    # 3. keepdims alias and unsupported keywords on everything public
    public = list(functions.__all__) + [n for mod in extra for n in mod.METHODS]
    methods = set(functions._METHODS) | ({n for mod in extra for n in mod.METHODS} - slicing.FUNCTION_ONLY)
    for n in dict.fromkeys(public):
        fn = getattr(functions, n)
        jg[n] = torch_function(fn, n, "")
        if n in methods and (n not in Tensor.__dict__ or Tensor.__dict__[n] is before.get(n)):
            setattr(Tensor, n, torch_function(fn, n, "Tensor."))
    for n in nnF.__all__:
        f = getattr(nnF, n, None)
        if callable(f):
            setattr(nnF, n, torch_function(f, n, "nn.functional."))
    for n in ("where", "cat", "concat", "max", "min", "abs", "sum", "pow"):
        jg[n] = torch_function(getattr(functions, n), n, "")
    from . import factories     # torch.randn(..., pin_memory=True) and the like: "not supported yet" too
    for n in ("tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "eye", "rand", "randn",
              "randint", "randperm", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
              "randn_like"):
        if jg.get(n) is getattr(factories, n, None) is not None:
            jg[n] = torch_function(jg[n], n, "")

    # 4. names torch has and jitgrad lacks
    Tensor.__getattr__ = _tensor_getattr
    Tensor.__format__ = _tensor_format
    jg["__getattr__"] = lambda name: _raise(unsupported_attribute("jitgrad", name, TORCH_FUNCTIONS))
    vars(nnF)["__getattr__"] = lambda name: _raise(
        unsupported_attribute("jitgrad.nn.functional", name, NN_FUNCTIONAL))
    jg["UnsupportedError"] = UnsupportedError


def _raise(e):
    raise e


__all__ = ["UnsupportedError", "install", "torch_function", "REDUCTIONS"]
