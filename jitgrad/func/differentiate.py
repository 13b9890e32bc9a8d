"""torch.func's differentiation transforms on jitgrad's reverse mode: ``grad``, ``grad_and_value``, ``vjp``,
``jvp`` (forward mode: dual tensors and the OpDefs' jvp rules), ``linearize`` (the jvp pass on a traced graph),
``jacrev`` (``vmap`` of the vjp over the output basis), ``jacfwd`` (``vmap`` of the jvp over the input basis),
``hessian`` (forward over reverse).

Each transform runs ``func`` on fresh leaves (a differentiable alias when the argument already requires grad, so
an enclosing transform sees through it and nested transforms do not confuse their inputs).  Results stay
connected to the autograd graph only when the computation reached tensors from outside (an enclosing ``grad``,
parameters in a closure); otherwise they come back detached, as torch.func's do.
"""
from __future__ import annotations

import functools

import numpy as np

from ..runtime import grad_mode
from ..runtime.dual import DUALS
from ..runtime.backward.engine import grad as _autograd_grad
from ..runtime.tensor import Tensor
from ..tracer import pytree
from .vectorize import vmap


def _flatten(tree):
    return pytree.flatten(tree, lambda x: isinstance(x, Tensor))


def _fresh(x):
    """A new differentiable stand-in for argument ``x``."""
    if not isinstance(x, Tensor):
        return x
    if x.requires_grad:
        return x.clone()      # a new node: gradients reach ``x`` through it (and its tangents, through clone)
    if not x.is_floating_point() and not x.is_complex():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    leaf = x.detach().requires_grad_()
    return DUALS.carry(x, leaf) if DUALS.levels else leaf     # an enclosing jvp's tangent goes along


def _reaches_outer(outputs, fresh) -> bool:
    """Whether the autograd graph of ``outputs`` reaches a tensor requiring grad other than ``fresh``."""
    ids = {id(t) for t in fresh}
    stack = []
    for o in outputs:
        if isinstance(o, Tensor) and o.requires_grad:
            if o.grad_fn is None:
                if id(o) not in ids:
                    return True
            else:
                stack.append(o.grad_fn)
    seen = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        try:
            var = n.variable
        except Exception:      # noqa: BLE001 - a function node has no variable
            var = None
        if isinstance(var, Tensor) and id(var) not in ids:
            return True
        for nx, _ in n.next_functions:
            if nx is not None:
                stack.append(nx)
    return False


def _drop_local_tangent_history(out, fresh):
    """``out``'s tangents whose autograd history reaches only this call's ``fresh`` leaves lose it (forward over
    reverse): the backward reads the saved values' tangents, never ``out``'s, and nothing can differentiate with
    respect to ``fresh`` once the call returns, while that history (the forward's tangent chain, each product
    saving the tangent it multiplied) would hold every tangent of the forward alive until the backward ends."""
    for lv in DUALS.levels:
        t = lv.get(out)
        if t is not None and t.requires_grad and not _reaches_outer([t], fresh):
            lv.set(out, t.detach())


def _detach(tree, keep):
    if keep:
        return tree
    leaves, d = _flatten(tree)
    if DUALS.levels:        # an enclosing jvp's tangents stay with the values
        return pytree.unflatten(d, [DUALS.carry(t, t.detach()) for t in leaves])
    return pytree.unflatten(d, [t.detach() for t in leaves])


def _argnums(argnums, args):
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        nums = (argnums,)
    elif isinstance(argnums, tuple) and all(isinstance(a, int) and not isinstance(a, bool) for a in argnums):
        if not argnums:
            raise RuntimeError("argnums must be non-empty")
        nums = argnums
    else:
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    out = []
    for a in nums:
        if not -len(args) <= a < len(args):
            raise RuntimeError(f"Got argnum={a}, but only {len(args)} positional inputs")
        out.append(a % len(args))
    return out


def _zeros(t):
    from ..library.creation.factories import zeros_like
    return zeros_like(t)


def _grads(outputs, inputs, grad_outputs, create, retain=None):
    """autograd.grad with zeros for unused inputs."""
    gs = _autograd_grad(outputs, inputs, grad_outputs=grad_outputs, retain_graph=retain, create_graph=create,
                        allow_unused=True)
    return [g if g is not None else _zeros(x) for g, x in zip(gs, inputs)]


def grad_and_value(func, argnums=0, has_aux=False):
    """``torch.func.grad_and_value``: ``func``'s gradient with respect to the arguments ``argnums`` and its value
    (``((grad, (value, aux))`` with ``has_aux``).  ``func`` must return a scalar tensor."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, args)
        with grad_mode.enable_grad():
            args = list(args)
            diff = []
            for a in nums:
                leaves, d = _flatten(args[a])
                fresh = [_fresh(x) for x in leaves]
                diff.append((fresh, d))
                args[a] = pytree.unflatten(d, fresh)
            out = func(*args, **kwargs)
            aux = None
            if has_aux:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("grad_and_value(f)(*args): output of function f should be a tuple: (output, "
                                       "aux) if has_aux is True")
                out, aux = out
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got {type(out)}")
            if out.ndim != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                                   f"tensor with {out.ndim} dims. Maybe you wanted to use the vjp or jacrev APIs "
                                   "instead?")
            flat = [x for fresh, _ in diff for x in fresh]
            keep = _reaches_outer([out], flat)
            if not keep and DUALS.levels:
                _drop_local_tangent_history(out, flat)
            gs = _grads([out], flat, None, keep) if out.requires_grad else [_zeros(x) for x in flat]
        it = iter(gs)
        res = [pytree.unflatten(d, [next(it) for _ in fresh]) for fresh, d in diff]
        g = res[0] if isinstance(argnums, int) else tuple(res)
        value = out if keep else _detach(out, keep)
        if has_aux:
            return g, (value, _detach(aux, keep))
        return g, value
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """``torch.func.grad``: a function computing the gradient of ``func`` (which returns a scalar tensor) with
    respect to its arguments ``argnums`` (an int or a tuple of ints; each argument may be a pytree of tensors).
    With ``has_aux``, ``func`` returns ``(value, aux)`` and the result is ``(grad, aux)``.  Composes with itself,
    ``vmap`` and the other transforms."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        if has_aux:
            return g, value[1]
        return g
    return wrapper


def vjp(func, *primals, has_aux=False):
    """``torch.func.vjp``: ``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` (shaped like the output) returns
    the vector-Jacobian products as a tuple, one per primal.  ``vjp_fn`` may be called many times."""
    with grad_mode.enable_grad():
        fresh_primals = []
        flat = []
        for p in primals:
            leaves, d = _flatten(p)
            fresh = [_fresh(x) for x in leaves]
            flat += fresh
            fresh_primals.append((fresh, d))
        out = func(*[pytree.unflatten(d, f) for f, d in fresh_primals])
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError("vjp(f, *primals): output of function f should be a tuple: (output, aux) if "
                                   "has_aux is True")
            out, aux = out
    out_leaves, out_def = _flatten(out)
    keep = _reaches_outer(out_leaves, flat)

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        ct_leaves, ct_def = _flatten(cotangents)
        if pytree.treedef_key(ct_def) != pytree.treedef_key(out_def):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {ct_def}, primal output: {out_def}")
        with grad_mode.enable_grad():
            create = keep or any(c.requires_grad for c in ct_leaves) if create_graph is None else create_graph
            pairs = [(o, c) for o, c in zip(out_leaves, ct_leaves) if o.requires_grad]
            if pairs:
                gs = _grads([o for o, _ in pairs], flat, [c for _, c in pairs], create, retain=retain_graph)
            else:
                gs = [_zeros(x) for x in flat]
        it = iter(gs)
        return tuple(pytree.unflatten(d, [next(it) for _ in f]) for f, d in fresh_primals)
    res = _detach(out, keep)
    if has_aux:
        return res, vjp_fn, _detach(aux, keep)
    return res, vjp_fn


def _structure(tree):
    from .vectorize import _structure as s
    return s(tree)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``torch.func.jvp``: ``(func(*primals), J @ tangents)`` in forward mode: ``func`` runs once on dual tensors
    (a dual level of its own, ``runtime/dual.py``), each op pushing its tangent forward with its jvp rule, so
    nothing is saved.  Differentiable in the primals and the tangents (reverse over forward), nestable (forward
    over forward, forward over reverse), and traced like any ops under ``@jitgrad.compile``."""
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. E.g. it should be valid to "
                           "call f(*primals).")
    if not isinstance(tangents, tuple) or _flatten(primals)[1] != _flatten(tangents)[1] and \
            pytree.treedef_key(_flatten(primals)[1]) != pytree.treedef_key(_flatten(tangents)[1]):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same python "
                           "structure. For example, if primals is a tuple of 3 tensors, tangents also must be. Got "
                           f"primals with structure {_structure(primals)} and tangents with structure "
                           f"{_structure(tangents)}")
    p_leaves, p_def = _flatten(primals)
    t_leaves = _flatten(tangents)[0]
    for p, t in zip(p_leaves, t_leaves):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                               f"Tensor, this is not supported. Tensor is of size {list(p.shape)} while the given "
                               f"forward gradient is of size {list(t.shape)}.")
    level = DUALS.enter()
    try:
        duals = []
        for p, t in zip(p_leaves, t_leaves):
            d = _alias(p)
            if d.dtype.is_floating_point:
                level.set(d, t if t.dtype is d.dtype else t.to(d.dtype))
            duals.append(d)
        out = func(*pytree.unflatten(p_def, duals))
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError("jvp(f, primals, tangents): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            out, aux = out
        out_leaves, out_def = _flatten(out)
        res = [level.get(o) for o in out_leaves]
    finally:
        DUALS.exit(level)
    res = [r if r is not None else _zeros(o) for r, o in zip(res, out_leaves)]
    jvp_out = pytree.unflatten(out_def, res)
    if has_aux:
        return out, jvp_out, aux
    return out, jvp_out


def _alias(x):
    """A new tensor object for primal ``x`` that shares its value and history, to carry a tangent at one level."""
    if x.requires_grad and grad_mode.STATE.grad_enabled:
        return x.view_as(x)     # (bound: an enclosing level's tangent follows the view)
    # (under no_grad a view would keep no history either, yet require grad through its base: a detached alias)
    return DUALS.carry(x, x.detach())


def linearize(func, *primals):
    """``torch.func.linearize``: ``(func(*primals), jvp_fn)``, as JAX's: ``func`` is traced once into a graph, the
    jvp pass (``ir/passes/jvp.py``) gives its tangent graph, and that is cut into the primal part (run now, once)
    and the linear graph of the tangents, which ``jvp_fn(*tangents)`` evaluates without the primal computation."""
    from .linear_graphs import linearize as _linearize
    return _linearize(func, primals)
