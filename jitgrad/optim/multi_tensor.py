"""Eager multi-tensor optimiser updates (torch's ``foreach``): a group's parameters updated with NumPy ``out=``
ufuncs on their own buffers, no Tensor, no dispatch, no graph per operation.  Adam/AdamW, SGD and RMSprop are
written out here; every other optimiser declares a :class:`Rule` (``multi_tensor_rules.py``) that
:func:`run_rule` runs.

The per-parameter path (``Adam.step``'s loop of tensor ops) dispatches ~20 ops per parameter and allocates a
result for each; a GPT with 52 parameters spent ~10 ms a step there.  These functions compute the *same*
arithmetic in the same order and precision, operation for operation, so the values are bit-identical
(``tests/test_optim_multi_tensor.py`` compares them):

- a Python number meets a float32 array in float32 (NumPy's weak scalars, as dispatch does);
- a 0-d float64 tensor (the ``lr`` tensor, the bias corrections) meets a float32 array in float64, rounded to
  float32 once: dispatch computes ``np.multiply(f32, f64_0d)`` (a float64 result) and casts it back; here the
  ufunc writes through ``out=`` into a float32 buffer, which rounds the same float64 values the same way;
- the 0-d scalars (bias corrections, step size) are computed by the tensor ops themselves, once per distinct
  step count, not re-derived.

They run only where that equivalence is plain: CPU NumPy payloads, no trace, no profiler, gradients of the
parameter's shape and dtype; everything else (a compile trace, a device, amsgrad, maximize, ...) takes the
per-parameter path.  Each written tensor gets the checks and the version bump of an in-place op.
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

    - ``scalar_state``: names of its 0-d state tensors, ``"step"`` first (``run_rule`` adds 1 to it);
    - ``state``: names of its parameter-shaped state tensors (of the parameter's dtype);
    - ``consts(group)``: the group's constants for ``arrays`` (Python numbers, 0-d arrays), or None to decline
      (an option this path does not do);
    - ``bumps(group)``: version bumps, one per tensor of ``(param, *state, *scalar_state[1:])``: the in-place
      writes the per-parameter path makes to each;
    - ``arrays(work, consts, scratch)``: the arithmetic on ``(param, grad, *state arrays, scalars)`` entries, in
      the per-parameter path's order, one parameter after another.

    The scalars come from the optimiser's ``_multi_tensor_scalars(group, scalar_state_tensors)``: ``(scalars,
    new values of scalar_state[1:])``, computed with the tensor ops of its per-parameter loop (so the bits are
    the same), once per distinct value of the 0-d state; they never write it (``run_rule`` writes the new
    values before any array is updated, so the scalars must not alias the state: ``.to(dtype)`` may return
    the tensor itself)."""

    __slots__ = ("scalar_state", "state", "consts", "bumps", "arrays")

    def __init__(self, scalar_state, state, consts, bumps, arrays):
        self.scalar_state, self.state, self.consts, self.bumps, self.arrays = \
            tuple(scalar_state), tuple(state), consts, bumps, arrays


_DTYPE = operator.attrgetter("dtype")
_DATA = operator.attrgetter("_data")


def run_rule(opt, group, rule) -> bool:
    """One update of ``group`` in place by ``rule``; False (nothing done) when the group needs the general path
    (an option the rule declines, a gradient or state tensor that is not a plain array of the parameter's
    dtype and shape).  ``opt._state_for(p, group)`` makes or returns a parameter's state."""
    consts = rule.consts(group)
    if consts is None:
        return False
    items = _plain_items(group)
    if items is None:
        return False
    if not items:
        return True
    names0, names = rule.scalar_state, rule.state
    state_for = opt._state_for
    tensors = []
    for p, g in items:
        state = state_for(p, group)
        zs = list(map(state.__getitem__, names0))
        arrs = list(map(state.__getitem__, names))
        pd = p._data
        for t in zs:
            if type(t._data) is not np.ndarray or t._data.ndim != 0 or t._base is not None:
                return False
        for t in arrs:
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
    for p, g, zs, arrs in tensors:
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
    _split_by_size(opt, work, lambda part, scratch: rule.arrays(part, consts, scratch))
    return True


def adam_group(opt, group, state_for, scalars) -> bool:
    """One Adam/AdamW update of ``group`` in place; False (nothing done) when the group needs the general path.

    ``state_for(p)`` is the optimiser's state maker; ``scalars(step_tensor)`` returns the 0-d float64 arrays
    ``(step_size, bias_correction2_sqrt)`` computed with tensor ops from a step count tensor."""
    if group["amsgrad"] or group["maximize"]:
        return False
    items = _plain_items(group)
    if items is None:
        return False
    if not items:
        return True
    beta1, beta2 = group["betas"]
    eps, wd, decoupled = group["eps"], group["weight_decay"], group["decoupled_weight_decay"]
    decay = None
    if wd != 0 and decoupled:
        decay = np.asarray(1 - group.lr_tensor._data * wd)      # as p.mul_(1 - lr * wd): a 0-d float64
    one_m_b1, one_m_b2 = 1 - beta1, 1 - beta2
    by_step = {}
    tensors = []
    for p, g in items:
        state = state_for(p)
        step_t, m_t, v_t = state["step"], state["exp_avg"], state["exp_avg_sq"]
        for t in (step_t, m_t, v_t):
            if type(t._data) is not np.ndarray:
                return False
        if m_t._data.dtype != p._data.dtype or v_t._data.dtype != p._data.dtype:
            return False
        tensors.append((p, g, step_t, m_t, v_t))
    for p, g, step_t, m_t, v_t in tensors:      # every check before any write: a refused one changes nothing
        for t in (p, m_t, v_t, step_t):
            t._check_inplace()
    work = []
    for p, g, step_t, m_t, v_t in tensors:
        sd = step_t._data
        sd[...] = sd + 1
        step_t._vc[0] += 1
        key = float(sd)
        sc = by_step.get(key)
        if sc is None:
            sc = by_step[key] = scalars(step_t)    # tensor ops: on this thread, before the arithmetic is split
        work.append((p._data, g, m_t._data, v_t._data, sc))
        p._vc[0] += 2 if decay is not None else 1          # p.mul_ and p.sub_
        m_t._vc[0] += 1
        v_t._vc[0] += 1
    consts = (wd, decoupled, decay, one_m_b1, one_m_b2, beta2, eps)
    _split_by_size(opt, work, lambda part, scratch: _adam_arrays(part, consts, scratch))
    return True



def _adam_arrays(work, consts, scratch):
    """Adam's arithmetic on ``(param, grad, exp_avg, exp_avg_sq, (step_size, bias_correction2_sqrt))`` arrays,
    in the per-parameter path's order, one parameter after another."""
    wd, decoupled, decay, one_m_b1, one_m_b2, beta2, eps = consts
    for pd, g, m, v, (step_size, bc2_sqrt) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        t1 = scratch.get(0, dtype, shape, size)
        t2 = scratch.get(1, dtype, shape, size)
        if wd != 0:
            if decoupled:
                np.multiply(pd, decay, out=pd)
            else:
                g = _gradient(pd, g, wd, False, t1, t2)
        np.subtract(g, m, out=t1)                          # exp_avg.add_((g - exp_avg) * (1 - beta1))
        np.multiply(t1, one_m_b1, out=t1)
        np.add(m, t1, out=m)
        np.multiply(v, beta2, out=v)                       # exp_avg_sq.mul_(beta2).add_(g * g * (1 - beta2))
        np.multiply(g, g, out=t1)
        np.multiply(t1, one_m_b2, out=t1)
        np.add(v, t1, out=v)
        np.sqrt(v, out=t1)                                 # denom = sqrt(v) / bias_correction2_sqrt + eps
        if pd.ndim == 0 and dtype != np.float64:
            # two 0-d tensors promote to the wider dtype (torch's rule): a 0-d parameter's denominator and step
            # are float64, rounded once when written into the parameter
            t1 = np.divide(t1, bc2_sqrt, out=scratch.get(2, np.float64, (), 1))
        else:
            np.divide(t1, bc2_sqrt, out=t1)
        np.add(t1, eps, out=t1)
        np.divide(m, t1, out=t1)                           # p.sub_(step_size * (exp_avg / denom))
        np.multiply(step_size, t1, out=t1)
        np.subtract(pd, t1, out=pd)


def _gradient(pd, g, wd, maximize, t1, t2):
    """The gradient a step uses, as the per-parameter paths compute it: ``-g`` when maximising, plus ``wd * p``
    (L2 weight decay); in ``t2`` when either applies (``t1`` is scratch), else ``g`` itself."""
    if maximize:
        g = np.negative(g, out=t2)
    if wd != 0:
        np.multiply(pd, wd, out=t1)
        g = np.add(g, t1, out=t2)
    return g


# _SUB_LR: ``p.sub_(lr * step)`` in place, written out in each update (a call per parameter is what the step's
# budget counts): a 0-d float64 ``lr`` times an array rounds to the array's dtype, except beside another 0-d
# tensor (torch's rule), where the product stays float64


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

def sgd_group(opt, group) -> bool:
    """One SGD update of ``group`` in place, as ``SGD.step``'s loop computes it; False (nothing done) when the
    group needs the general path (a momentum buffer still to be made on a first step, a gradient that is not a
    plain array of the parameter's dtype)."""
    wd, momentum, dampening = group["weight_decay"], group["momentum"], group["dampening"]
    nesterov, maximize = group["nesterov"], group["maximize"]
    plain = _plain_items(group)
    if plain is None:
        return False
    items = []
    for p, g in plain:
        buf = None
        if momentum != 0:
            buf = opt.state[p].get("momentum_buffer") if p in opt.state else None
            if buf is None or type(buf._data) is not np.ndarray or buf._data.dtype != g.dtype:
                return False
        items.append((p, g, buf))
    lr = group.lr_tensor._data
    for p, g, buf in items:     # every check before any write: a refused one leaves the group as it was
        p._check_inplace()
        if buf is not None:
            buf._check_inplace()
    consts = (lr, wd, momentum, dampening, nesterov, maximize)
    _split_by_size(opt, [(p._data, g, None if buf is None else buf._data) for p, g, buf in items],
                   lambda part, scratch: _sgd_arrays(part, consts, scratch))
    for p, g, buf in items:
        p._vc[0] += 1
        if buf is not None:
            buf._vc[0] += 2
    return True


def _sgd_arrays(work, consts, scratch):
    """SGD's arithmetic on ``(param, grad, momentum buffer or None)`` arrays, as ``SGD.step``'s loop computes it."""
    lr, wd, momentum, dampening, nesterov, maximize = consts
    for pd, g, b in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        t1 = scratch.get(0, dtype, shape, size)
        t2 = scratch.get(1, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, t2)
        if b is not None:
            np.multiply(b, momentum, out=b)                # buf.mul_(momentum).add_(g, alpha=1 - dampening)
            if 1 - dampening == 1:
                np.add(b, g, out=b)
            else:
                np.multiply(g, 1 - dampening, out=t1)
                np.add(b, t1, out=b)
            if nesterov:
                np.multiply(b, momentum, out=t1)          # g = g + momentum * buf
                g = np.add(g, t1, out=t2)
            else:
                g = b
        t = scratch.get(2, np.float64, (), 1) if pd.ndim == 0 and dtype != np.float64 else t1    # (_SUB_LR)
        np.multiply(lr, g, out=t)
        np.subtract(pd, t, out=pd)


def rmsprop_group(opt, group, state_for) -> bool:
    """One RMSprop update of ``group`` in place, as ``RMSprop.step``'s loop computes it; False (nothing done) when
    the group needs the general path (state or a gradient that is not a plain array of the parameter's dtype)."""
    items = _plain_items(group)
    if items is None:
        return False
    momentum, centered = group["momentum"], group["centered"]
    names = ("square_avg",) + (("momentum_buffer",) if momentum > 0 else ()) + (("grad_avg",) if centered else ())
    tensors = []
    for p, g in items:
        state = state_for(p, group)
        ts = [state["step"]] + [state[k] for k in names]
        for t in ts:
            if type(t._data) is not np.ndarray:
                return False
        for t in ts[1:]:
            if t._data.dtype != p._data.dtype or t._data.shape != p._data.shape:
                return False
        tensors.append((p, g, ts))
    for p, g, ts in tensors:        # every check before any write: a refused one changes nothing
        p._check_inplace()
        for t in ts:
            t._check_inplace()
    work = []
    for p, g, ts in tensors:
        sd = ts[0]._data
        sd[...] = sd + 1
        ts[0]._vc[0] += 1
        sq = ts[1]
        buf = ts[2] if momentum > 0 else None
        ga = ts[-1] if centered else None
        work.append((p._data, g, sq._data, None if buf is None else buf._data, None if ga is None else ga._data))
        p._vc[0] += 1
        sq._vc[0] += 2              # square_avg.mul_(alpha).add_(...)
        if buf is not None:
            buf._vc[0] += 2         # buf.mul_(momentum).add_(...)
        if ga is not None:
            ga._vc[0] += 1
    consts = (group.lr_tensor._data, group["alpha"], group["eps"], group["weight_decay"], momentum,
              group["maximize"])
    _split_by_size(opt, work, lambda part, scratch: _rmsprop_arrays(part, consts, scratch))
    return True


def _rmsprop_arrays(work, consts, scratch):
    """RMSprop's arithmetic on ``(param, grad, square_avg, momentum buffer or None, grad_avg or None)`` arrays, in
    the per-parameter path's order."""
    lr, alpha, eps, wd, momentum, maximize = consts
    for pd, g, sq, b, ga in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        t1 = scratch.get(0, dtype, shape, size)
        t2 = scratch.get(1, dtype, shape, size)
        t3 = scratch.get(3, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, t2)
        np.multiply(sq, alpha, out=sq)                     # square_avg.mul_(alpha).add_(g * g * (1 - alpha))
        np.multiply(g, g, out=t1)
        np.multiply(t1, 1 - alpha, out=t1)
        np.add(sq, t1, out=sq)
        if ga is not None:
            np.subtract(g, ga, out=t1)                     # grad_avg.add_((g - grad_avg) * (1 - alpha))
            np.multiply(t1, 1 - alpha, out=t1)
            np.add(ga, t1, out=ga)
            np.multiply(ga, ga, out=t1)                    # avg = sqrt(square_avg - grad_avg * grad_avg) + eps
            np.subtract(sq, t1, out=t1)
            np.sqrt(t1, out=t3)
        else:
            np.sqrt(sq, out=t3)                            # avg = sqrt(square_avg) + eps
        np.add(t3, eps, out=t3)
        np.divide(g, t3, out=t1)                           # g / avg
        if b is not None:
            np.multiply(b, momentum, out=b)                # buf.mul_(momentum).add_(g / avg)
            np.add(b, t1, out=b)
            step = b
        else:
            step = t1
        t = scratch.get(2, np.float64, (), 1) if pd.ndim == 0 and dtype != np.float64 else t1    # (_SUB_LR)
        np.multiply(lr, step, out=t)
        np.subtract(pd, t, out=pd)
