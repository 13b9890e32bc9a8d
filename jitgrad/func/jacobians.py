"""``jacrev``, ``jacfwd`` and ``hessian`` (torch.func): ``vmap`` of the vjp over the basis of the outputs, of the
jvp over the basis of the inputs.  ``jac[i][j]`` (per output leaf, per differentiated argument leaf) has shape
``output.shape + input.shape``; an int ``argnums`` drops the argument level, as in torch."""
from __future__ import annotations

import functools

import numpy as np

from ..runtime.tensor import Tensor
from ..tracer import pytree
from .differentiate import _argnums, _flatten, jvp, vjp
from .vectorize import vmap


def _basis(leaves):
    """One stacked basis tensor per leaf: row k of the concatenation is the k-th unit vector."""
    sizes = [int(np.prod(t.shape)) for t in leaves]
    n = sum(sizes)
    out, off = [], 0
    for t, m in zip(leaves, sizes):
        e = np.zeros((n, m), t._data.dtype)
        e[np.arange(off, off + m), np.arange(m)] = 1
        out.append(Tensor._make(e.reshape((n,) + tuple(t.shape))))
        off += m
    return out, sizes


def _split_args(func, argnums, args, kwargs):
    nums = _argnums(argnums, args)
    diff = [args[a] for a in nums]

    def f(*d):
        a = list(args)
        for k, v in zip(nums, d):
            a[k] = v
        return func(*a, **kwargs)
    return diff, f


def _assemble(out_def, per_out, argnums):
    """per_out[i]: per diff-argument pytrees of Jacobian blocks -> torch's nesting."""
    blocks = [p[0] if isinstance(argnums, int) else tuple(p) for p in per_out]
    return pytree.unflatten(out_def, blocks)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """``torch.func.jacrev``: the Jacobian of ``func`` with respect to the arguments ``argnums`` by reverse mode
    (one vjp per output element, batched by ``vmap``; ``chunk_size`` bounds how many at once)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        diff, f = _split_args(func, argnums, args, kwargs)
        r = vjp(f, *diff, has_aux=has_aux)
        out, vjp_fn = r[0], r[1]
        out_leaves, out_def = _flatten(out)
        basis, sizes = _basis(out_leaves)
        rows = vmap(lambda *ct: vjp_fn(pytree.unflatten(out_def, list(ct))), chunk_size=chunk_size)(*basis)
        arg_trees = [_flatten(a) for a in diff]
        per_out = []
        off = 0
        for o, m in zip(out_leaves, sizes):
            per_arg = []
            for (leaves, d), rt in zip(arg_trees, rows):
                rl = _flatten(rt)[0]
                per_arg.append(pytree.unflatten(d, [g[off:off + m].reshape(tuple(o.shape) + tuple(x.shape))
                                                    for g, x in zip(rl, leaves)]))
            per_out.append(per_arg)
            off += m
        jac = _assemble(out_def, per_out, argnums)
        return (jac, r[2]) if has_aux else jac
    return wrapper


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """``torch.func.jacfwd``: the Jacobian of ``func`` with respect to the arguments ``argnums`` column by column
    (one jvp per input element, batched by ``vmap``; forward mode)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        diff, f = _split_args(func, argnums, args, kwargs)
        leaves, d = _flatten(tuple(diff))
        basis, sizes = _basis(leaves)
        aux_box = []

        def push(*ts):
            r = jvp(f, tuple(diff), pytree.unflatten(d, list(ts)), has_aux=has_aux)
            if has_aux:
                aux_box.append(r[2])
            return r[1]
        cols = vmap(push, randomness=randomness)(*basis)
        col_leaves, out_def = _flatten(cols)
        per_out = []
        for c in col_leaves:
            blocks, off = [], 0
            for x, m in zip(leaves, sizes):
                blk = c[off:off + m]             # [m, *out]
                nd = blk.ndim - 1
                blk = blk.permute(tuple(range(1, nd + 1)) + (0,)) if nd else blk
                blocks.append(blk.reshape(tuple(c.shape[1:]) + tuple(x.shape)))
                off += m
            it = iter(blocks)
            per_out.append([pytree.unflatten(_flatten(a)[1], [next(it) for _ in _flatten(a)[0]]) for a in diff])
        jac = _assemble(out_def, per_out, argnums)
        if has_aux:
            return jac, f(*diff)[1]
        return jac
    return wrapper


def hessian(func, argnums=0):
    """``torch.func.hessian``: ``jacfwd(jacrev(func, argnums), argnums)``."""
    return jacfwd(jacrev(func, argnums), argnums)


__all__ = ["jacrev", "jacfwd", "hessian"]
