"""What makes a call of a compiled function a new signature, beyond its tensors' shapes and dtypes.

- Float arguments are leaves of the signature by value until one changes; then its position is a graph input
  (torch.compile's automatic dynamic scalars), so a learning rate passed each call does not retrace.
- Guarded Python values (``python_values.py``) that are floats and change become graph inputs the same way.
- Argument tensors that share memory (two ``from_numpy`` over one array) are part of the key.
- Past ``recompile_limit`` traces, a new signature runs eagerly with one warning naming the function and what
  changed, as ``torch._dynamo.config.recompile_limit``.
"""
from __future__ import annotations

import warnings
import weakref

import numpy as np

from ..runtime.tensor import Tensor
from ..tracer import flatten
from ..tracer.pytree import treedef_key

_is_tensor_or_float = lambda x: isinstance(x, Tensor) or type(x) is float  # noqa: E731


def _static_key(treedef):
    return treedef_key(treedef)


_POSITIONAL = {}


def _positional_treedef(n):
    """The treedef (and its key) of ``(args, {})`` for n tensor arguments, built once per n."""
    r = _POSITIONAL.get(n)
    if r is None:
        treedef = ("tuple", (("tuple", (("*",),) * n), ("dict", (), ())))
        r = _POSITIONAL[n] = (treedef, _static_key(treedef))
    return r


# work counted (never timed), so tests can check that a repeated call skips it
COUNTS = {"signatures": 0, "shared_memory_checks": 0, "write_alias_checks": 0}


class Signatures:
    """The signature side of ``CompiledFunction`` (keys, dynamic floats, the recompile limit)."""

    _sig_memo = None    # (per-argument identities, key without the modes): see ``_memo_key``

    def _signature(self, args, kwargs):
        """-> (tensor leaves, treedef, key, float arguments, positions of the floats that are graph inputs)."""
        if not kwargs and all(type(a) is Tensor for a in args):   # the common case: skip the pytree walk
            treedef, tkey = _positional_treedef(len(args))
            base = self._memo_key(args)
            if base is None:
                key = self._key(args, treedef, tkey)
                self._remember(args, key[:3])
                return list(args), treedef, key, (), ()
            return list(args), treedef, base + (self._modes(),), (), ()
        self._sig_memo = None       # (it stands for the last call's arguments: see CompiledFunction's alias check)
        leaves, treedef = flatten((args, kwargs), _is_tensor_or_float)
        tkey = _static_key(treedef)
        floats = tuple(x for x in leaves if type(x) is float)
        if not floats:
            return leaves, treedef, self._key(leaves, treedef, tkey), (), ()
        leaves = [x for x in leaves if type(x) is not float]
        dyn = self._dyn_args.get(tkey, ())
        fkey = tuple("dynamic" if i in dyn else v for i, v in enumerate(floats))
        return leaves, treedef, self._key(leaves, treedef, (tkey, fkey)), floats, dyn

    def _memo_key(self, args):
        """The key (less the modes) of the last positional call when these are the very same tensors over the
        very same arrays with the same requires-grad and grad-is-None: shapes, dtypes, devices, which arguments
        are one tensor and which share memory cannot have changed (an array's shape and base are fixed; jitgrad
        never reshapes an array in place), so none of it is computed again."""
        m = self._sig_memo
        if m is None:
            return None
        ids, base = m
        if len(ids) != len(args):
            return None
        for t, (tr, dr, rg, gn) in zip(args, ids):
            if tr() is not t or dr() is not t._data or (t._requires_grad or t.grad_fn is not None) != rg \
                    or (t._grad is None) != gn:
                return None
        return base

    def _remember(self, args, base):
        try:        # weak references: the memo keeps no batch alive
            ids = tuple((weakref.ref(t), weakref.ref(t._data), bool(t._requires_grad or t.grad_fn is not None),
                         t._grad is None) for t in args)
        except TypeError:       # a payload without weak references: no memo
            self._sig_memo = None
            return
        self._sig_memo = (ids, base)

    def _float_args_changed(self, treedef, floats) -> bool:
        """A miss with float arguments: the positions whose value changed since the last call of this structure
        become graph inputs (torch's automatic dynamic scalars).  True when that changed the signature."""
        tkey = _static_key(treedef)
        last = self._last_floats.get(tkey)
        self._last_floats[tkey] = floats
        if last is None or len(last) != len(floats):
            return False
        dyn = set(self._dyn_args.get(tkey, ()))
        pinned = self._static_args.get(tkey, ())
        new = {i for i, (a, b) in enumerate(zip(last, floats)) if a != b and i not in dyn and i not in pinned}
        if not new:
            return False
        self._dyn_args[tkey] = tuple(sorted(dyn | new))
        return True

    def _note_changed_values(self, entries):
        """Guarded floats (closure, global, attribute) whose value changed become graph inputs at the next trace."""
        for e in entries:
            for g in e.values:
                if type(g.value) is float and type(g.read()) is float and not g.holds() \
                        and g.source() not in self._static_sources:
                    self._dyn_sources.add(g.source())

    def _warn_recompile_limit(self):
        if self._warned_retrace:
            return
        self._warned_retrace = True
        reason = self._last_reason[1]
        fn = self.fn
        code = getattr(fn, "__code__", None) or getattr(getattr(fn, "forward", None), "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        warnings.warn(f"jitgrad.compile hit the recompile limit ({self.recompile_limit})\n"
                      f"   function: '{getattr(fn, '__name__', type(fn).__name__)}'{where}\n"
                      f"   last reason: {reason}\n"
                      "New signatures of this function now run eagerly (as torch.compile does past "
                      "torch._dynamo.config.recompile_limit); the compiled ones still serve. Keep that value stable, "
                      "pass it as a tensor, or raise jitgrad.compile(..., recompile_limit=N).", stacklevel=5)


def _shared_memory(leaves, first):
    """Pairs of distinct argument tensors whose buffers overlap (two ``from_numpy`` tensors over one array, a
    view of another argument's array): part of the key, since a graph that writes one of them in place cannot
    keep the other's value as eager mode sees it (such a signature runs eagerly, see ``_trace``)."""
    COUNTS["shared_memory_checks"] += 1
    # the common case at a cost of one pass: each leaf owns its memory (no base) and no two share a buffer
    bufs = set()
    n = 0
    for i, t in enumerate(leaves):
        if first[i] == i:
            d = t._data
            if type(d) is not np.ndarray or d.base is not None:
                break
            bufs.add(id(d))
            n += 1
    else:
        if len(bufs) == n:
            return ()
    roots = {}
    pairs = []
    for i, t in enumerate(leaves):
        if first[i] != i:
            continue
        d = t._data
        if type(d) is not np.ndarray:
            continue
        r = d
        while r.base is not None and type(r.base) is np.ndarray:
            r = r.base
        if r.base is not None:
            r = r.base      # memory owned by another object (a buffer, mmap): compare by that owner
        prev = roots.get(id(r))
        if prev is None:
            roots[id(r)] = [i]
            continue
        for j in prev:
            if np.may_share_memory(leaves[j]._data, d):
                pairs.append((j, i))
        prev.append(i)
    return tuple(pairs)


def _root(a):
    """The array that owns ``a``'s memory (the end of its ``.base`` chain of arrays)."""
    while type(a.base) is np.ndarray:
        a = a.base
    return a


def _overlap(a, b) -> bool:
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True


def writes_alias(order, writes) -> bool:
    """At the end of a trace: whether a tensor the graph writes in place shares memory with another graph input
    (an argument and a parameter over one array): then the signature runs eagerly."""
    arrays = []
    for c in order:
        t = c.ref()
        arrays.append(t._data if t is not None and type(t._data) is np.ndarray else None)
    for ci, _ in writes:
        a = arrays[ci]
        if a is None:
            continue
        for j, b in enumerate(arrays):
            if j != ci and b is not None and _overlap(a, b):
                return True
    return False


def written_roots(order, writes, n_args):
    """``{id(root): array}`` for the captured tensors the graph writes (None when it writes none): a later call
    whose argument shares memory with one of them runs eagerly (``args_alias_writes``)."""
    out = {}
    for ci, _ in writes:
        if ci < n_args:
            continue
        t = order[ci].ref()
        if t is not None and type(t._data) is np.ndarray:
            out[id(_root(t._data))] = t._data
    return out or None


def writes_read_only(tensors, indices) -> bool:
    """Whether one of ``tensors[i]`` (``i`` in ``indices``: inputs the graph writes in place) is over a read-only
    array (``jg.from_numpy(np.load(path, mmap_mode="r"))``).  Compiled code would write into it (a crash on a
    read-only mapping), so such a call runs eagerly, which copies on write as eager mode does."""
    for i in indices:
        t = tensors[i]
        if t is not None and isinstance(t._data, np.ndarray) and not t._data.flags.writeable:
            return True
    return False


def state_read_only(order, writes, n_args) -> bool:
    """At the end of a trace: whether the graph writes captured state (not an argument) over a read-only array."""
    state = [order[ci].ref() for ci, _ in writes if ci >= n_args]
    return writes_read_only(state, range(len(state)))


def distinct(leaves):
    """The distinct tensors among ``leaves``, in order (a compiled graph's argument inputs)."""
    seen, out = set(), []
    for t in leaves:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def args_alias_writes(leaves, roots) -> bool:
    """Whether an argument shares memory with state the graph writes (``written_roots``)."""
    COUNTS["write_alias_checks"] += 1
    for t in leaves:
        d = t._data
        if type(d) is np.ndarray:
            w = roots.get(id(_root(d)))
            if w is not None and _overlap(d, w):
                return True
    return False

