"""``jitgrad.nn.Module``: the base class of layers, with torch's registration, traversal, state_dict and repr.

Parameters and buffers are ordinary tensors: inside a ``@jitgrad.compile`` step they are captured by identity
(read afresh at every call) and in-place updates to them (optimiser steps, BatchNorm running statistics) become
graph outputs written back after the call.
"""
from __future__ import annotations

from collections import namedtuple, OrderedDict

import numpy as np

from ...ir import dtypes as dt
from ...jit.guards import guard, is_compiling
from ...runtime import grad_mode
from ...runtime.tensor import Tensor, Device
from ...tracer.trace import DEPARTED as _DEPARTED
from ...runtime.devices import check_device
from ..parameter import Parameter


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it did not find and the keys it did not expect."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s, num_spaces):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * num_spaces + line for line in lines)


def _torch_type_name(value):
    if isinstance(value, Tensor):
        return {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "int64": "torch.LongTensor",
                "int32": "torch.IntTensor", "bool": "torch.BoolTensor"}.get(value.dtype.name, "torch.Tensor")
    return type(value).__name__


def zero_grads(params, set_to_none: bool = True) -> None:
    """Reset ``params``' gradients, as ``Module.zero_grad`` and ``Optimizer.zero_grad`` do: to None, or to zeros
    in place (detached from any graph first, as torch does)."""
    for p in params:
        g = p.grad
        if g is None:
            continue
        if set_to_none:
            p.grad = None
            continue
        if g.grad_fn is not None:
            g.detach_()
        else:
            g.requires_grad_(False)
        g.zero_()


class Module:
    """Base class for all neural network modules (``torch.nn.Module``).  Subclasses assign parameters, buffers
    and submodules as attributes in ``__init__`` and define ``forward``.

    >>> import jitgrad as jg
    >>> class Net(jg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = jg.nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         return self.fc(x)
    >>> list(Net().state_dict())
    ['fc.weight', 'fc.bias']
    """

    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_forward_hooks", {})
        object.__setattr__(self, "_forward_pre_hooks", {})
        object.__setattr__(self, "_backward_hooks", {})
        object.__setattr__(self, "_backward_pre_hooks", {})

    # --- calling ---------------------------------------------------------------------------------------
    def forward(self, *input):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        # (a trace runs only where some thread's state departs from the default: tracer/trace.py)
        if _DEPARTED and is_compiling():
            # train()/eval() changes what forward does (BatchNorm, Dropout): a compiled step retraces on a switch
            guard(lambda: self.training, what=f"{type(self).__name__}.training changed (train()/eval())")
        d = self.__dict__
        hooks = self._forward_pre_hooks
        if hooks:
            for hook in list(hooks.values()):
                r = hook(self, args)
                if r is not None:
                    args = r if isinstance(r, tuple) else (r,)
        if d.get("_backward_hooks") or d.get("_backward_pre_hooks"):
            from .backward_hooks import call_with_backward_hooks
            out = call_with_backward_hooks(self, args, kwargs, self.forward)
        else:
            out = self.forward(*args, **kwargs)
        hooks = self._forward_hooks
        if hooks:
            for hook in list(hooks.values()):
                r = hook(self, args, out)
                if r is not None:
                    out = r
        return out

    def register_forward_pre_hook(self, hook):
        """``hook(module, args) -> None or new args`` runs before ``forward``; returns a handle with ``remove()``."""
        return _HookHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook):
        """``hook(module, args, output) -> None or new output`` runs after ``forward``; returns a handle."""
        return _HookHandle(self._forward_hooks, hook)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output) -> None or new grad_input`` runs when the gradients of the
        module's inputs are computed (see nn/modules/backward_hooks.py); returns a handle."""
        if "_backward_hooks" not in self.__dict__:
            object.__setattr__(self, "_backward_hooks", {})
        return _HookHandle(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output) -> None or new grad_output`` runs when the gradients of the module's
        outputs are computed, before anything inside the module; returns a handle."""
        if "_backward_pre_hooks" not in self.__dict__:
            object.__setattr__(self, "_backward_pre_hooks", {})
        return _HookHandle(self._backward_pre_hooks, hook, prepend)

    # --- registration ----------------------------------------------------------------------------------
    def register_parameter(self, name: str, param) -> None:
        """Add a parameter (a :class:`Parameter` or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter", self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_torch_type_name(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                             f"explicitly. To express '{name}' as a function of another Tensor, compute the value in "
                             "the forward() method.")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Add a buffer (state that is not a parameter: BatchNorm's running statistics); ``persistent=False``
        keeps it out of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_torch_type_name(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module) -> None:
        """Add a child module under ``name`` (``self.name = module`` does the same)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module", self._modules)
        self._modules[name] = module

    register_module = add_module

    def _check_name(self, name, kind, table):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if hasattr(self, name) and name not in table:
            raise KeyError(f"attribute '{name}' already exists")

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, self.__dict__, self._buffers, self._modules)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_torch_type_name(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, self.__dict__, self._parameters, self._buffers)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_torch_type_name(value)}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = value
            return
        buffers = self.__dict__.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_torch_type_name(value)}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, *tables):
        for t in tables:
            t.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers) | set(self._modules))

    # --- traversal ------------------------------------------------------------------------------------
    def _named_members(self, get, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for k, v in get(mod):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                memo.add(id(v))
                yield (mod_prefix + ("." if mod_prefix else "") + k, v)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """``(name, parameter)`` pairs, with dotted names like ``'0.weight'``; shared parameters once."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        """The parameters of this module and (``recurse``) its descendants."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """``(name, buffer)`` pairs."""
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        """The buffers of this module and (``recurse``) its descendants."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        """``(name, module)`` for the direct children."""
        memo = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield name, m

    def children(self):
        """The direct child modules."""
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """``(name, module)`` for this module (name ``prefix``) and every descendant, depth first."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        """This module and every descendant."""
        for _, m in self.named_modules():
            yield m

    def get_submodule(self, target: str) -> "Module":
        """The descendant named by a dotted path (``'0.fc'``); ``''`` is self."""
        mod = self
        for item in target.split(".") if target else []:
            if item not in mod._modules:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter named by a dotted path (``'0.weight'``)."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        """The buffer named by a dotted path (``'0.running_mean'``)."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{mod._get_name()} has no buffer `{name}`")
        return mod._buffers[name]

    # --- state ----------------------------------------------------------------------------------------
    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An ordered dict of parameters and persistent buffers by dotted name (detached unless
        ``keep_vars``), sharing storage with the module like torch's."""
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy parameters and buffers from ``state_dict`` into this module (in place, keeping the tensors'
        identities, so compiled steps that captured them stay valid).  With ``strict``, missing or unexpected
        keys raise torch's error; returns ``(missing_keys, unexpected_keys)``."""
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, errors = [], []
        expected = set()
        # as state_dict does: a module shared under two names has its keys under each
        for mod_prefix, mod in self.named_modules(remove_duplicate=False):
            pre = mod_prefix + "." if mod_prefix else ""
            local = [(n, t) for n, t in mod._parameters.items() if t is not None]
            local += [(n, t) for n, t in mod._buffers.items()
                      if t is not None and n not in mod._non_persistent_buffers_set]
            for name, t in local:
                key = pre + name
                expected.add(key)
                if key not in state_dict:
                    missing.append(key)
                    continue
                src = state_dict[key]
                if not isinstance(src, Tensor):
                    errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or '
                                  f"Tensor-like object from checkpoint but received {type(src)}")
                    continue
                if tuple(src.shape) != tuple(t.shape):
                    errors.append(f"size mismatch for {key}: copying a param with shape "
                                  f"torch.Size({list(src.shape)}) from checkpoint, the shape in current model is "
                                  f"torch.Size({list(t.shape)}).")
                    continue
                with grad_mode.no_grad():
                    if assign:
                        t._data = np.array(src._data, copy=True)
                    else:
                        t.copy_(src)
        unexpected = [k for k in state_dict.keys() if k not in expected]
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    # --- modes and grads --------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode on this module and its descendants (BatchNorm and Dropout behave differently)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        """``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the parameters' gradients: to None (the default), or to zeros in place."""
        zero_grads(self.parameters(), set_to_none)

    # --- conversion -------------------------------------------------------------------------------------
    def _apply(self, fn):
        """Replace the payload of every parameter, buffer and gradient by ``fn(array)`` (the tensors keep their
        identities, like ``param.data = ...`` in torch)."""
        for m in self.modules():
            for table in (m._parameters, m._buffers):
                for t in table.values():
                    if t is None:
                        continue
                    t._data = fn(t._data)
                    if t._grad is not None:
                        t._grad._data = fn(t._grad._data)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``to(dtype)``, ``to(device)``, ``to(tensor)``, ``to(device, dtype)``: converts floating-point
        parameters and buffers in place."""
        dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, dt.DType):
                dtype = a
            elif isinstance(a, (str, Device)):
                device = a
            else:
                raise TypeError(f"to() received an invalid combination of arguments: {type(a).__name__}")
        if device is not None:
            check_device(device)
        if dtype is not None:
            dtype = dt.as_dtype(dtype)
            if not dtype.is_floating_point:
                raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                                f"dtype={dtype}")
            self._apply(lambda a: a.astype(dtype.np) if a.dtype.kind == "f" else a)
        return self

    def cpu(self) -> "Module":
        """Parameters and buffers are already on the CPU."""
        return self

    def cuda(self, device=None) -> "Module":
        """Move to a CUDA device: raises the device layer's error while eager tensors live on the CPU only."""
        check_device("cuda" if device is None else (device if isinstance(device, (str, Device)) else f"cuda:{device}"))
        return self

    def double(self) -> "Module":
        """Floating-point parameters and buffers to float64."""
        return self.to(dt.float64)

    def float(self) -> "Module":
        """Floating-point parameters and buffers to float32."""
        return self.to(dt.float32)

    def type(self, dst_type) -> "Module":
        return self.to(dst_type)

    def apply(self, fn) -> "Module":
        """Call ``fn(m)`` on every descendant (children first) and then on self; returns self (for init)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # --- printing ---------------------------------------------------------------------------------------
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self) -> str:
        """The module's own settings for its repr (``in_features=2, out_features=3, bias=True``)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({k}): " + _addindent(repr(m), 2) for k, m in self._modules.items()]
        lines = extra_lines + child_lines
        s = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                s += extra_lines[0]
            else:
                s += "\n  " + "\n  ".join(lines) + "\n"
        return s + ")"


class _HookHandle:
    """``handle.remove()`` unregisters a hook."""

    _next = [0]

    def __init__(self, table, hook, prepend=False):
        self.table = table
        self.id = _HookHandle._next[0]
        _HookHandle._next[0] += 1
        table[self.id] = hook
        if prepend:         # dicts keep insertion order: move the new hook to the front
            rest = {k: v for k, v in table.items() if k != self.id}
            table.clear()
            table[self.id] = hook
            table.update(rest)

    def remove(self):
        self.table.pop(self.id, None)


__all__ = ["Module"]
