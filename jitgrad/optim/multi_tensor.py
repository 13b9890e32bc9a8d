"""Eager multi-tensor optimiser updates (torch's ``foreach``): a group's parameters updated with NumPy ``out=``
ufuncs on their own buffers, no Tensor, no dispatch, no graph per operation.  Each optimiser declares a
:class:`Rule` (``multi_tensor_rules.py``: its constants, version bumps and arithmetic); :func:`run_rule` does the
rest, the same for all of them.

The per-parameter path (``Adam.step``'s loop of tensor ops) dispatches ~20 ops per parameter and allocates a
result for each; a GPT with 52 parameters spent ~10 ms a step there.  The rules compute the *same* arithmetic in
the same order and precision, operation for operation, so the values are bit-identical
(``tests/test_optim_multi_tensor.py`` and ``tests/test_optim_multi_tensor_rules.py`` compare them):

- a Python number meets a float32 array in float32 (NumPy's weak scalars, as dispatch does);
- a 0-d float64 tensor (the ``lr`` tensor, the bias corrections) meets a float32 array in float64, rounded to
  float32 once: dispatch computes ``np.multiply(f32, f64_0d)`` (a float64 result) and casts it back; here the
  ufunc writes through ``out=`` into a float32 buffer, which rounds the same float64 values the same way;
- the 0-d scalars (bias corrections, step size) are computed by the tensor ops themselves, once per distinct
  step count, not re-derived.

They run only where that equivalence is plain: CPU NumPy payloads, no trace, no profiler, gradients of the
parameter's shape and dtype; everything else (a compile trace, a device, capturable, a tensor hyperparameter,
...) takes the per-parameter path.  Each written tensor gets the checks and the version bump of an in-place op.
"""
from __future__ import annotations

import operator

import numpy as np

from ..ir.eager_threads import _DEFAULT_ERR, run_split, threads_for
from ..jit.guards import is_compiling
from ..runtime.bind_route import ROUTE as _ROUTE
from ..tracer import STATE as _TR

STATS = {"split_steps": 0}      # multi-tensor updates split between threads (counted, for tests)


def eager_ready() -> bool:
    """True when no trace, profiler or dual level is active: the multi-tensor path may run (it binds no op, so
    none of them would see its arithmetic)."""
    return _TR.active is None and _ROUTE.plain and not is_compiling()


def _plain(p):
    """p's gradient array when p and its gradient are same-shape, same-dtype float NumPy arrays (else None)."""
    g = p.grad
    if g is None:
        return None
    pd, gd = p._data, g._data
    if type(pd) is not np.ndarray or type(gd) is not np.ndarray or pd.dtype != gd.dtype or pd.shape != gd.shape \
            or pd.dtype.kind != "f" or p._base is not None:
        return None
    return gd


def _plain_items(group):
    """[(p, grad array)] for the group's parameters that have a gradient, or None when one is not ``_plain``."""
    items = []
    for p in group["params"]:
        if p.grad is None:
            continue
        g = _plain(p)
        if g is None:
            return None
        items.append((p, g))
    return items


class _Scratch:
    """Flat per-dtype work buffers, reused across parameters and steps (a parameter-sized view each)."""

    def __init__(self):
        self.bufs = {}

    def get(self, k, dtype, shape, size):
        key = (k, dtype)
        b = self.bufs.get(key)
        if b is None or b.size < size:
            b = self.bufs[key] = np.empty(max(size, 1), dtype)
        return b[:size].reshape(shape)


class Rule:
    """One optimiser's multi-tensor update, declared for :func:`run_rule` (which does everything the optimisers
    share: the checks, the state, the step count, the per-step scalars, the version bumps, the split):

    - ``scalar_state``: names of its 0-d state tensors, ``"step"`` first (``run_rule`` adds 1 to it), or none;
    - ``state``: names of its parameter-shaped state tensors (of the parameter's dtype), or a function of the
      group giving them; one missing (a momentum buffer the first step makes) declines;
    - ``consts(group)``: the group's constants for ``arrays`` (Python numbers, 0-d arrays), or None to decline
      (an option this path does not do);
    - ``bumps(group)``: version bumps, one per tensor of ``(param, *state, *scalar_state[1:])``: the in-place
      writes the per-parameter path makes to each;
    - ``arrays(work, consts, scratch)``: the arithmetic on ``(param, grad, *state arrays, scalars)`` entries, in
      the per-parameter path's order, one parameter after another;
    - ``native(work, consts)``, optional: the same arithmetic with the same bits in one native pass over the
      entries it serves (``adam_native.py``), returning the others, which ``arrays`` then updates.

    The scalars come from the optimiser's ``_multi_tensor_scalars(group, scalar_state_tensors)``: ``(scalars,
    new values of scalar_state[1:])``, computed with the tensor ops of its per-parameter loop (so the bits are
    the same), once per distinct value of the 0-d state; they never write it (``run_rule`` writes the new
    values before any array is updated, so the scalars must not alias the state: ``.to(dtype)`` may return
    the tensor itself)."""

    __slots__ = ("scalar_state", "state", "consts", "bumps", "arrays", "native")

    def __init__(self, scalar_state, state, consts, bumps, arrays, native=None):
        if not callable(state):
            state = (lambda names: lambda group: names)(tuple(state))
        self.scalar_state, self.state = tuple(scalar_state), state
        self.consts, self.bumps, self.arrays, self.native = consts, bumps, arrays, native


_DTYPE = operator.attrgetter("dtype")
_DATA = operator.attrgetter("_data")


def run_rule(opt, group, rule) -> bool:
    """One update of ``group`` in place by ``rule``; False (nothing done) when the group needs the general path
    (an option the rule declines, a gradient or state tensor that is not a plain array of the parameter's
    dtype and shape, a state tensor still to be made, a parameter listed twice).  ``opt._state_for(p, group)``
    makes or returns a parameter's state (not called when the rule has none)."""
    consts = rule.consts(group)
    if consts is None:
        return False
    items = _plain_items(group)
    if items is None:
        return False
    if not items:
        return True
    if len(set(map(id, group["params"]))) != len(group["params"]):
        return False        # (torch warns) updated twice in turn: the split could run the two at once
    names0, names = rule.scalar_state, rule.state(group)
    state_for = opt._state_for if names0 or names else None
    zs = arrs = ()
    tensors = []
    for p, g in items:
        if state_for is not None:
            state = state_for(p, group)
            zs = list(map(state.get, names0))
            arrs = list(map(state.get, names))
        pd = p._data
        for t in zs:
            if t is None or type(t._data) is not np.ndarray or t._data.ndim != 0 or t._base is not None:
                return False
        for t in arrs:
            if t is None:
                return False
            d = t._data
            if type(d) is not np.ndarray or d.dtype != pd.dtype or d.shape != pd.shape or t._base is not None:
                return False
        tensors.append((p, g, zs, arrs))
    for p, g, zs, arrs in tensors:      # every check before any write: a refused one changes nothing
        p._check_inplace()
        for t in zs:
            t._check_inplace()
        for t in arrs:
            t._check_inplace()
    bumps = rule.bumps(group)
    by_key = {}
    work = []
    sc = ()
    for p, g, zs, arrs in tensors:
        if zs:
            step_t = zs[0]
            sd = step_t._data
            sd[...] = sd + 1
            step_t._vc[0] += 1
            zds = list(map(_DATA, zs))
            key = (tuple(map(float, zds)), tuple(map(_DTYPE, zds)))
            sc = by_key.get(key)
            if sc is None:      # tensor ops: on this thread, before the arithmetic is split
                sc = by_key[key] = opt._multi_tensor_scalars(group, zs)
            sc, new = sc
            for t, v in zip(zs[1:], new):
                t._data[...] = v
        work.append((p._data, g, *map(_DATA, arrs), sc))
        for t, b in zip((p, *arrs, *zs[1:]), bumps):
            t._vc[0] += b
    if rule.native is not None:
        work = rule.native(work, consts)
    if work:
        _split_by_size(opt, work, lambda part, scratch: rule.arrays(part, consts, scratch))
    return True


def _split_by_size(opt, work, run):
    """``run(part, scratch)`` over ``work`` (one entry per parameter, its array first): on one thread, or, when
    the parameters are big enough, split into balanced parts run at once on eager threads (each parameter's
    arithmetic stays on one thread, in order, so the bits are the same), each part with scratch of its own."""
    sizes = [w[0].size for w in work]
    nt = max(1, min(threads_for(sum(sizes)), len(work)))
    scratches = opt.__dict__.setdefault("_multi_tensor_scratches", [])
    while len(scratches) < nt:
        scratches.append(_Scratch())
    if nt < 2 or np.geterr() != _DEFAULT_ERR:
        run(work, scratches[0])
        return
    parts, loads = [[] for _ in range(nt)], [0] * nt
    for i in sorted(range(len(work)), key=sizes.__getitem__, reverse=True):  # largest first, to the lightest
        k = loads.index(min(loads))
        parts[k].append(work[i])
        loads[k] += sizes[i]
    run_split([(run, (part, scratches[k])) for k, part in enumerate(parts) if part])
    STATS["split_steps"] += 1
