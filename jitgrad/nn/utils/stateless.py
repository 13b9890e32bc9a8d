"""``functional_call``: run a module with some of its parameters and buffers replaced by given tensors (for
per-sample gradients, meta-learning, ensembling); the module is restored afterwards."""
from __future__ import annotations

import warnings
from contextlib import contextmanager


def _owner(module, name):
    *path, attr = name.split(".")
    for p in path:
        module = getattr(module, p)
    return module, attr


def _swap(module, name, value):
    """Put ``value`` at ``name`` (dotted); returns what was there (or a marker for nothing)."""
    owner, attr = _owner(module, name)
    for table in (owner._parameters, owner._buffers):
        if attr in table:
            old = table[attr]
            table[attr] = value
            return old
    old = owner.__dict__.get(attr, _MISSING)
    if value is _MISSING:
        owner.__dict__.pop(attr, None)
    else:
        owner.__dict__[attr] = value
    return old


_MISSING = object()


def _untie(module, tensors):
    """With tied weights (one tensor under several names) a value given for one name replaces all of them."""
    names_of = {}
    for name, t in list(module.named_parameters(remove_duplicate=False)) + list(
            module.named_buffers(remove_duplicate=False)):
        names_of.setdefault(id(t), []).append(name)
    out = dict(tensors)
    for names in names_of.values():
        given = [n for n in names if n in tensors]
        if not given:
            continue
        values = {id(tensors[n]) for n in given}
        if len(values) > 1:
            raise ValueError(f"functional_call got multiple values for keys {given}, which are tied. "
                             "Consider using tie_weights=False")
        for n in names:
            out.setdefault(n, tensors[given[0]])
    return out


@contextmanager
def _reparametrize_module(module, parameters_and_buffers, tie_weights=False, strict=False):
    tensors = _untie(module, parameters_and_buffers) if tie_weights else dict(parameters_and_buffers)
    if strict:
        known = {n for n, _ in module.named_parameters(remove_duplicate=False)} | {
            n for n, _ in module.named_buffers(remove_duplicate=False)}
        unexpected = sorted(set(tensors) - known)
        missing = sorted(known - set(tensors))
        msgs = []
        if unexpected:
            msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if msgs:
            raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(module._get_name(),
                                                                                 "\n\t".join(msgs)))
    saved = []
    try:
        for name, t in tensors.items():
            saved.append((name, _swap(module, name, t)))
        yield
    finally:
        for name, old in reversed(saved):
            _swap(module, name, old)


def _functional_call(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights, strict=strict):
        return module(*args, **kwargs)


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the parameters and buffers named in ``parameters_and_buffers``
    (dotted names, as ``named_parameters``) replaced for the call; gradients flow to the given tensors.  With
    ``tie_weights`` a value for one of several tied names serves them all; ``strict`` requires exactly the
    module's names.  Deprecated in torch in favour of ``torch.func.functional_call`` (warns FutureWarning)."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed "
                  "in a future version of PyTorch. Please use `torch.func.functional_call` instead which is a "
                  "drop-in replacement.", FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)


__all__ = ["functional_call"]
