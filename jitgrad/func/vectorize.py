"""``jitgrad.func.vmap``: the function traced once at per-example shapes, then run by the batching interpreter
(``batching.py``) on the whole batch.  ``in_dims`` / ``out_dims`` follow torch (ints, None, nested tuples, lists
and dicts matching the arguments / results)."""
from __future__ import annotations

import functools

from ..tracer import pytree
from ..runtime.tensor import Tensor
from . import batch_values, batching
from .tracing import result_marker, trace_function


def _name(fn):
    return getattr(fn, "__name__", repr(fn))


def _is_container(x):
    return isinstance(x, (tuple, list, dict))


def _flatten(tree):
    return pytree.flatten(tree, lambda x: not _is_container(x))


def _structure(tree) -> str:
    """A TreeSpec-like description for the structure-mismatch messages."""
    if isinstance(tree, dict):
        return f"TreeSpec(dict, {list(tree.keys())}, [{', '.join(_structure(v) for v in tree.values())}])"
    if isinstance(tree, (tuple, list)):
        return f"TreeSpec({type(tree).__name__}, None, [{', '.join(_structure(v) for v in tree)}])"
    return "*"


def _broadcast(dims, tree, fail):
    """One dim per leaf of ``tree`` (``pytree.flatten`` order) from the prefix ``dims``; ``fail()`` raises."""
    if dims is None or isinstance(dims, int) and not isinstance(dims, bool) or not _is_container(dims):
        return [dims] * len(_flatten(tree)[0])
    if isinstance(dims, dict):
        if not isinstance(tree, dict) or list(dims.keys()) != list(tree.keys()):
            fail()
        return [d for k in dims for d in _broadcast(dims[k], tree[k], fail)]
    if not isinstance(tree, (tuple, list)) or type(tree) is not type(dims) and not (
            isinstance(tree, tuple) and isinstance(dims, tuple)) or len(tree) != len(dims):
        fail()
    return [d for dd, t in zip(dims, tree) for d in _broadcast(dd, t, fail)]


def _in_leaves(fn, in_dims, args):
    prefix = f"vmap({_name(fn)}, in_dims={in_dims}, ...)(<inputs>): "
    if not isinstance(in_dims, (int, tuple)) or isinstance(in_dims, bool):
        raise ValueError(prefix + "expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    if len(args) == 0:
        raise ValueError(f"vmap({_name(fn)})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you are "
                         "trying to vmap over a function with no inputs. The latter is unsupported.")

    def fail():
        raise ValueError(prefix + "in_dims is not compatible with the structure of `inputs`. in_dims has structure "
                         f"{_structure(in_dims)} but inputs has structure {_structure(args)}.")
    dims = _broadcast(in_dims, args, fail)
    leaves, treedef = _flatten(args)
    out = []
    for x, d in zip(leaves, dims):
        if d is None:
            out.append(None)
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(prefix + f"Got in_dim={d} for an input but in_dim must be either an integer dimension "
                             "or None.")
        if not isinstance(x, Tensor):
            raise ValueError(prefix + f"Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                             "vmap over non-Tensor arguments, please use None as the respective in_dim")
        if not -x.ndim <= d < x.ndim:
            raise ValueError(prefix + f"Got in_dim={d} for some input, but that input is a Tensor of "
                             f"dimensionality {x.ndim} so expected in_dim to satisfy {-x.ndim} <= in_dim < {x.ndim}.")
        out.append(d % x.ndim)
    return leaves, treedef, out


def _batch_size(leaves, dims):
    sizes = [x.shape[d] for x, d in zip(leaves, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0]


def _check_out_dims(fn, out_dims):
    ok = out_dims is None or isinstance(out_dims, int) and not isinstance(out_dims, bool)
    if isinstance(out_dims, (tuple, list, dict)):
        ok = all(d is None or isinstance(d, int) and not isinstance(d, bool)
                 for d in _flatten(out_dims)[0])
    if not ok:
        raise ValueError(f"vmap({_name(fn)}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a python "
                         "collection of ints representing where in the outputs the vmapped dimension should appear.")


def _run(fn, leaves, treedef, dims, kwargs, randomness):
    """The traced graph and the batched results (``(tensor, batched)`` per tensor result) for one batch."""
    B = _batch_size(leaves, dims)
    tensors = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    shapes = []
    vals = []
    for i in tensors:
        x, d = leaves[i], dims[i]
        if d is None:
            shapes.append(tuple(x.shape))
            vals.append((x, False))
        else:
            shapes.append(tuple(x.shape[:d]) + tuple(x.shape[d + 1:]))
            vals.append((x.movedim(d, 0) if d else x, True))

    def build(stand_ins):
        ls = list(leaves)
        for i, s in zip(tensors, stand_ins):
            ls[i] = s
        return pytree.unflatten(treedef, ls), kwargs
    graph, sources, out, ft = trace_function(fn, [leaves[i] for i in tensors], shapes, build)
    out_leaves, out_def = _flatten(out)
    markers = [result_marker(ft, o) for o in out_leaves if isinstance(o, Tensor)]
    graph.outputs = markers + [("var", v) for _, v in ft.writes]
    results = batching.run_graph(graph, vals + [(s, False) for s in sources], B, randomness, ft.grad_off)
    n = len(markers)
    _write_back(ft.writes, results[n:])
    return B, out, out_leaves, out_def, results[:n]


def _write_back(writes, results):
    from ..runtime.grad_mode import no_grad
    if any(b for _, b in results):
        raise RuntimeError("vmap: the function wrote a value that depends on the mapped inputs in place into a tensor "
                           "from outside it (a closure, global, or a module's buffer, e.g. BatchNorm's running stats "
                           "in training mode), which has no batch dimension: pass that tensor as an argument or "
                           "return the new value instead")
    with no_grad():
        for (t, _), (v, _) in zip(writes, results):
            t.copy_(v)


def _finish(fn, out_dims, B, out, out_leaves, out_def, results):
    name = _name(fn)

    def fail():
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with the "
                         f"structure of `outputs`. out_dims has structure {_structure(out_dims)} but outputs has "
                         f"structure {_structure(out)}.")
    if isinstance(out_dims, (tuple, list)) and not _is_container(out):
        fail()
    dims = _broadcast(out_dims, out, fail)
    res = iter(results)
    final = []
    for x, d in zip(out_leaves, dims):
        if not isinstance(x, Tensor):
            if d is not None:
                raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(x)}. Did "
                                 "you mean to set out_dims= to None for output?")
            final.append(x)
            continue
        t, b = next(res)
        if d is None:
            if b:
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
            final.append(t)
            continue
        if not b:
            t = batch_values.to_batched(t, False, B, tuple(t.shape))
        final.append(t.movedim(0, d) if d != 0 else t)
    return pytree.unflatten(out_def, final)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``torch.func.vmap``: ``func`` mapped over a dimension of its inputs (``in_dims``, per argument: an int,
    None for an unmapped argument, or a nested tuple/list/dict matching it), results stacked along ``out_dims``.

    ``func`` is traced once per call at the per-example shapes, and the trace is evaluated on the whole batch
    with per-primitive batching rules; the result is built from ordinary jitgrad ops, so it is differentiable,
    composes with ``grad`` (``vmap(grad(loss), in_dims=(None, 0, 0))`` gives per-sample gradients), nests, and
    compiles inside ``@jitgrad.compile``.  ``randomness``: ``'error'`` (a random op inside raises), ``'same'``
    (one draw shared by the batch) or ``'different'`` (a draw per example).  ``chunk_size`` runs the batch in
    chunks of that many examples.  Python control flow on tensor values inside ``func`` cannot be traced."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        _check_out_dims(func, out_dims)
        leaves, treedef, dims = _in_leaves(func, in_dims, args)
        B = _batch_size(leaves, dims)
        if chunk_size is None or chunk_size >= B:
            return _finish(func, out_dims, *_run(func, leaves, treedef, dims, kwargs, randomness))
        parts = []
        for s in range(0, B, chunk_size):
            sub = [x.narrow(d, s, min(chunk_size, B - s)) if d is not None else x for x, d in zip(leaves, dims)]
            parts.append(_finish(func, out_dims, *_run(func, sub, treedef, dims, kwargs, randomness)))
        return _concat(parts, out_dims)
    return wrapped


def _concat(parts, out_dims):
    from ..library.elementary import cat
    flat = [_flatten(p) for p in parts]
    out_def = flat[0][1]
    dims = _broadcast(out_dims, pytree.unflatten(out_def, flat[0][0]), lambda: None)
    merged = []
    for k, d in enumerate(dims):
        xs = [f[0][k] for f in flat]
        merged.append(cat(xs, d) if d is not None and isinstance(xs[0], Tensor) else xs[0])
    return pytree.unflatten(out_def, merged)


__all__ = ["vmap"]
