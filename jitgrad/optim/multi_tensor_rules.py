"""Eager multi-tensor updates of SGD, Adam/AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop and ASGD,
declared as :class:`.multi_tensor.Rule`\\ s: each optimiser's constants, version bumps and NumPy arithmetic on a
parameter's arrays; :func:`.multi_tensor.run_rule` does the rest (checks, state, step counts, per-step scalars
computed by the optimiser's own tensor ops, the split between threads).

The arithmetic is the per-parameter loop's, operation for operation, in the same order and precision, so the
values are bit-identical (``tests/test_optim_multi_tensor.py``): a Python number meets an array in the array's
dtype; a 0-d float64 scalar (``lr``, a bias correction) meets a float32 array in float64, rounded to float32 once
(through ``out=``); two 0-d operands promote to the wider dtype (torch's rule), so a 0-d parameter's
intermediates after a float64 scalar are float64 (in a float64 0-d buffer where ``wide``), rounded once when
written into the parameter.  Arithmetic two rules share is a helper, the rest is inline (the Python calls per
parameter are budgeted in ``tests/test_eager_budget.py``).
An option a rule does not do (a tensor hyperparameter; ``capturable`` for the rules added with issue 28, as
before them) makes ``consts`` None: the per-parameter path runs.
"""
from __future__ import annotations

import numpy as np

from . import adam_native
from .multi_tensor import Rule

_F64 = np.float64


def _gradient(pd, g, wd, maximize, t1, t2):
    """The gradient a step uses, as the per-parameter paths compute it: ``-g`` when maximising, plus ``wd * p``
    (L2 weight decay); in ``t2`` when either applies (``t1`` is scratch), else ``g`` itself."""
    if maximize:
        g = np.negative(g, out=t2)
    if wd != 0:
        np.multiply(pd, wd, out=t1)
        g = np.add(g, t1, out=t2)
    return g


def _lerp(m, g, w, t):
    """``_lerp_(m, g, w)`` for a Python ``w`` (optim/optimizer.py): torch's two formulas; ``t`` is scratch."""
    np.subtract(g, m, out=t)
    if abs(w) < 0.5:
        np.multiply(t, w, out=t)
        np.add(m, t, out=m)
    else:
        np.multiply(t, 1 - w, out=t)
        np.subtract(g, t, out=m)


def _square_avg(v, g, beta, t):
    """``v.mul_(beta).add_(g * g * (1 - beta))``; ``t`` is scratch."""
    np.multiply(v, beta, out=v)
    np.multiply(g, g, out=t)
    np.multiply(t, 1 - beta, out=t)
    np.add(v, t, out=v)


def _plain_numbers(group, *keys):
    """True when each ``group[key]`` is a Python number or a tuple of them (else the per-parameter path runs:
    a tensor hyperparameter promotes differently)."""
    for k in keys:
        v = group[k]
        for x in (v if type(v) is tuple else (v,)):
            if type(x) not in (int, float, bool):
                return False
    return True


def _decay_const(group):
    """Decoupled weight decay's ``1 - lr * weight_decay`` (a 0-d float64, as the tensor ops give it), or None."""
    wd = group["weight_decay"]
    if wd != 0 and group.get("decoupled_weight_decay"):
        return np.asarray(1 - group.lr_tensor._data * wd)
    return None


# --- SGD ------------------------------------------------------------------------------------------------------

def _sgd_consts(group):
    if not _plain_numbers(group, "momentum", "dampening", "weight_decay"):
        return None
    return (group.lr_tensor._data, group["weight_decay"], group["momentum"], group["dampening"], group["nesterov"],
            group["maximize"])


def _sgd_arrays(work, consts, scratch):
    lr, wd, momentum, dampening, nesterov, maximize = consts
    for pd, g, *buf, _ in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        t2 = scratch.get(1, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, t2)
        if momentum != 0:
            b = buf[0]
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
        t = scratch.get(10, _F64, (), 1) if wide else t1     # p.sub_(lr * g)
        np.multiply(lr, g, out=t)
        np.subtract(pd, t, out=pd)


# no 0-d state; the momentum buffer, made by the per-parameter path's first step, updated by mul_ and add_
SGD = Rule((), lambda group: ("momentum_buffer",) if group["momentum"] != 0 else (), _sgd_consts,
           lambda group: (1, 2), _sgd_arrays)


# --- Adam/AdamW -----------------------------------------------------------------------------------------------

def _adam_consts(group):
    if not _plain_numbers(group, "betas", "eps", "weight_decay"):
        return None
    beta1, beta2 = group["betas"]
    decay = _decay_const(group)
    l2 = group["weight_decay"] if decay is None else 0
    return l2, decay, 1 - beta1, 1 - beta2, beta2, group["eps"], group["maximize"], group["amsgrad"]


def _adam_arrays(work, consts, scratch):
    l2, decay, one_m_b1, one_m_b2, beta2, eps, maximize, amsgrad = consts
    for pd, g, m, v, *max_v, (step_size, bc2_sqrt) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        t1 = scratch.get(0, dtype, shape, size)
        if maximize or l2 != 0:
            g = _gradient(pd, g, l2, maximize, t1, scratch.get(1, dtype, shape, size))
        if decay is not None:
            np.multiply(pd, decay, out=pd)                 # p.mul_(1 - lr * weight_decay)
        np.subtract(g, m, out=t1)                          # exp_avg.add_((g - exp_avg) * (1 - beta1))
        np.multiply(t1, one_m_b1, out=t1)
        np.add(m, t1, out=m)
        np.multiply(v, beta2, out=v)                       # exp_avg_sq.mul_(beta2).add_(g * g * (1 - beta2))
        np.multiply(g, g, out=t1)
        np.multiply(t1, one_m_b2, out=t1)
        np.add(v, t1, out=v)
        if amsgrad:
            v = np.maximum(max_v[0], v, out=max_v[0])       # max_exp_avg_sq.copy_(maximum(max_exp_avg_sq, v))
        np.sqrt(v, out=t1)                                 # denom = sqrt(v) / bias_correction2_sqrt + eps
        if pd.ndim == 0 and dtype != _F64:
            t1 = np.divide(t1, bc2_sqrt, out=scratch.get(10, _F64, (), 1))
        else:
            np.divide(t1, bc2_sqrt, out=t1)
        np.add(t1, eps, out=t1)
        np.divide(m, t1, out=t1)                           # p.sub_(step_size * (exp_avg / denom))
        np.multiply(step_size, t1, out=t1)
        np.subtract(pd, t1, out=pd)


ADAM = Rule(("step",), lambda group: ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ()),
            _adam_consts, lambda group: _adam_like_bumps(group, 1) + (1,), _adam_arrays, adam_native.update)


# --- RMSprop --------------------------------------------------------------------------------------------------

def _rmsprop_state(group):
    return ("square_avg",) + (("momentum_buffer",) if group["momentum"] > 0 else ()) \
        + (("grad_avg",) if group["centered"] else ())


def _rmsprop_consts(group):
    if not _plain_numbers(group, "alpha", "eps", "weight_decay", "momentum"):
        return None
    return (group.lr_tensor._data, group["alpha"], group["eps"], group["weight_decay"], group["momentum"],
            group["centered"], group["maximize"])


def _rmsprop_arrays(work, consts, scratch):
    lr, alpha, eps, wd, momentum, centered, maximize = consts
    for pd, g, sq, *more, _ in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        t3 = scratch.get(3, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, scratch.get(1, dtype, shape, size))
        _square_avg(sq, g, alpha, t1)
        if centered:
            ga = more[-1]
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
        if momentum > 0:
            b = more[0]
            np.multiply(b, momentum, out=b)                # buf.mul_(momentum).add_(g / avg)
            np.add(b, t1, out=b)
            step = b
        else:
            step = t1
        t = scratch.get(10, _F64, (), 1) if wide else t1     # p.sub_(lr * step)
        np.multiply(lr, step, out=t)
        np.subtract(pd, t, out=pd)


RMSPROP = Rule(("step",), _rmsprop_state, _rmsprop_consts,
               lambda group: (1, 2) + ((2,) if group["momentum"] > 0 else ()) + ((1,) if group["centered"] else ()),
               _rmsprop_arrays)


# --- Adagrad --------------------------------------------------------------------------------------------------

def _adagrad_consts(group):
    if not _plain_numbers(group, "lr_decay", "eps", "weight_decay"):
        return None
    return group["weight_decay"], group["eps"], group["maximize"]


def _adagrad_arrays(work, consts, scratch):
    wd, eps, maximize = consts
    for pd, g, s, (clr,) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, scratch.get(1, dtype, shape, size))
        np.multiply(g, g, out=t1)                          # sum.add_(g * g)
        np.add(s, t1, out=s)
        t3 = scratch.get(3, dtype, shape, size)
        np.sqrt(s, out=t3)                                 # std = sqrt(sum) + eps
        np.add(t3, eps, out=t3)
        np.divide(g, t3, out=t1)                           # p.sub_(clr * (g / std))
        t = scratch.get(10, _F64, (), 1) if wide else t1
        np.multiply(clr, t1, out=t)
        np.subtract(pd, t, out=pd)


ADAGRAD = Rule(("step",), ("sum",), _adagrad_consts, lambda group: (1, 1), _adagrad_arrays)


# --- Adadelta -------------------------------------------------------------------------------------------------

def _adadelta_consts(group):
    if group["capturable"] or not _plain_numbers(group, "rho", "eps", "weight_decay"):
        return None
    return group.lr_tensor._data, group["rho"], group["eps"], group["weight_decay"], group["maximize"]


def _adadelta_arrays(work, consts, scratch):
    lr, rho, eps, wd, maximize = consts
    for pd, g, sq, acc, _ in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, scratch.get(1, dtype, shape, size))
        _square_avg(sq, g, rho, t1)
        t3 = scratch.get(3, dtype, shape, size)
        np.add(sq, eps, out=t3)                            # std = sqrt(square_avg + eps)
        np.sqrt(t3, out=t3)
        np.add(acc, eps, out=t1)                           # delta = sqrt(acc_delta + eps) / std * g
        np.sqrt(t1, out=t1)
        np.divide(t1, t3, out=t1)
        np.multiply(t1, g, out=t1)
        _square_avg(acc, t1, rho, t3)
        t = scratch.get(10, _F64, (), 1) if wide else t3     # p.sub_(lr * delta)
        np.multiply(lr, t1, out=t)
        np.subtract(pd, t, out=pd)


ADADELTA = Rule(("step",), ("square_avg", "acc_delta"), _adadelta_consts, lambda group: (1, 2, 2),
                _adadelta_arrays)


# --- Adamax ---------------------------------------------------------------------------------------------------

def _adamax_consts(group):
    if group["capturable"] or not _plain_numbers(group, "betas", "eps", "weight_decay"):
        return None
    beta1, beta2 = group["betas"]
    return group["weight_decay"], group["eps"], 1 - beta1, beta2, group["maximize"]


def _adamax_arrays(work, consts, scratch):
    wd, eps, w, beta2, maximize = consts
    for pd, g, m, inf, (clr,) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, scratch.get(1, dtype, shape, size))
        _lerp(m, g, w, t1)
        t3 = scratch.get(3, dtype, shape, size)
        np.multiply(inf, beta2, out=t1)                    # exp_inf = maximum(exp_inf * beta2, |g| + eps)
        np.abs(g, out=t3)
        np.add(t3, eps, out=t3)
        np.maximum(t1, t3, out=inf)
        np.divide(m, inf, out=t1)                          # p.sub_(clr * (exp_avg / exp_inf))
        t = scratch.get(10, _F64, (), 1) if wide else t1
        np.multiply(clr, t1, out=t)
        np.subtract(pd, t, out=pd)


ADAMAX = Rule(("step",), ("exp_avg", "exp_inf"), _adamax_consts, lambda group: (1, 1, 1), _adamax_arrays)


# --- NAdam and RAdam ------------------------------------------------------------------------------------------

def _adam_like_consts(group, *more):
    if group["capturable"] or not _plain_numbers(group, "betas", "eps", "weight_decay", *more):
        return None
    beta1, beta2 = group["betas"]
    decay = _decay_const(group)
    l2 = group["weight_decay"] if decay is None else 0
    return l2, decay, 1 - beta1, beta2, group["eps"], group["maximize"]


def _adam_like_bumps(group, p_writes):
    """Versions: the parameter's ``p_writes`` updates (and ``p.mul_`` when decay is decoupled), exp_avg's lerp,
    exp_avg_sq's ``mul_().add_()``."""
    return p_writes + (_decay_const(group) is not None), 1, 2


def _adam_moments(pd, g, m, v, l2, decay, w, beta2, maximize, scratch):
    """NAdam's and RAdam's first half: the gradient (maximised, L2-decayed), decoupled decay of the parameter, the
    first moment's lerp and the second's update.  ``(g, t1)``: the gradient used and the scratch it left in t1."""
    shape, dtype, size = pd.shape, pd.dtype, pd.size
    t1 = scratch.get(0, dtype, shape, size)
    if maximize or l2 != 0:
        g = _gradient(pd, g, l2, maximize, t1, scratch.get(1, dtype, shape, size))
    if decay is not None:
        np.multiply(pd, decay, out=pd)                 # p.mul_(1 - lr * weight_decay)
    _lerp(m, g, w, t1)
    _square_avg(v, g, beta2, t1)
    return g, t1


def _nadam_arrays(work, consts, scratch):
    l2, decay, w, beta2, eps, maximize = consts
    for pd, g, m, v, (bc2, c1, c2) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        g, t1 = _adam_moments(pd, g, m, v, l2, decay, w, beta2, maximize, scratch)
        d = scratch.get(10, _F64, (), 1) if wide else scratch.get(3, dtype, shape, size)
        np.divide(v, bc2, out=d)                           # denom = sqrt(exp_avg_sq / bias_correction2) + eps
        np.sqrt(d, out=d)
        np.add(d, eps, out=d)
        q = scratch.get(11, _F64, (), 1) if wide else t1
        np.divide(g, d, out=q)                             # p.add_(c1 * (g / denom))
        np.multiply(c1, q, out=q)
        np.add(pd, q, out=pd)
        np.divide(m, d, out=q)                             # p.add_(c2 * (exp_avg / denom))
        np.multiply(c2, q, out=q)
        np.add(pd, q, out=pd)


NADAM = Rule(("step", "mu_product"), ("exp_avg", "exp_avg_sq"),
             lambda group: _adam_like_consts(group, "momentum_decay"),
             lambda group: _adam_like_bumps(group, 2) + (1,), _nadam_arrays)


def _radam_arrays(work, consts, scratch):
    l2, decay, w, beta2, eps, maximize, lr = consts
    for pd, g, m, v, (bc1, bc2_sqrt, rect, rectify) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        g, t1 = _adam_moments(pd, g, m, v, l2, decay, w, beta2, maximize, scratch)
        q = scratch.get(10, _F64, (), 1) if wide else t1
        np.divide(m, bc1, out=q)                           # plain = exp_avg / bias_correction1 * lr
        np.multiply(q, lr, out=q)
        if rectify:                                        # where(rho_t > 5, plain * adaptive_lr * rect, plain)
            t3 = scratch.get(3, dtype, shape, size)
            np.sqrt(v, out=t3)                             # adaptive_lr = sqrt(bc2) / (sqrt(exp_avg_sq) + eps)
            np.add(t3, eps, out=t3)
            a = scratch.get(11, _F64, (), 1) if wide else t3
            np.divide(bc2_sqrt, t3, out=a)
            np.multiply(q, a, out=q)
            np.multiply(q, rect, out=q)
        np.subtract(pd, q, out=pd)


def _radam_consts(group):
    c = _adam_like_consts(group)
    return None if c is None else c + (group.lr_tensor._data,)


RADAM = Rule(("step",), ("exp_avg", "exp_avg_sq"), _radam_consts, lambda group: _adam_like_bumps(group, 1),
             _radam_arrays)


# --- Rprop ----------------------------------------------------------------------------------------------------

def _rprop_consts(group):
    if group["capturable"] or not _plain_numbers(group, "etas", "step_sizes"):
        return None
    (etaminus, etaplus), (lo, hi) = group["etas"], group["step_sizes"]
    return etaminus, etaplus, lo, hi, group["maximize"]


def _rprop_arrays(work, consts, scratch):
    etaminus, etaplus, lo, hi, maximize = consts
    for pd, g, prev, ss, _ in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        t1 = scratch.get(0, dtype, shape, size)
        t3 = scratch.get(3, dtype, shape, size)
        if maximize:
            g = np.negative(g, out=scratch.get(1, dtype, shape, size))
        np.multiply(g, prev, out=t1)                       # sign = sign(g * prev)
        np.sign(t1, out=t1)
        up = np.greater(t1, 0, out=scratch.get(4, np.bool_, shape, size))
        flipped = np.less(t1, 0, out=scratch.get(5, np.bool_, shape, size))
        np.multiply(ss, etaplus, out=ss, where=up)         # step_size scaled where the sign held / flipped
        np.multiply(ss, etaminus, out=ss, where=flipped)
        np.maximum(ss, lo, out=ss)                         # step_size.clamp_(lo, hi) (np.clip's values)
        np.minimum(ss, hi, out=ss)
        t3[...] = g                                        # g = where(flipped, 0.0, g)
        t3[flipped] = 0.0
        np.sign(t3, out=t1)                                # p.sub_(sign(g) * step_size)
        np.multiply(t1, ss, out=t1)
        np.subtract(pd, t1, out=pd)
        prev[...] = t3                                     # prev.copy_(g)


RPROP = Rule(("step",), ("prev", "step_size"), _rprop_consts, lambda group: (1, 1, 2), _rprop_arrays)


# --- ASGD -----------------------------------------------------------------------------------------------------

def _asgd_consts(group):
    if group["capturable"] or not _plain_numbers(group, "lambd", "alpha", "t0", "weight_decay"):
        return None
    return group["weight_decay"], group["maximize"]


def _asgd_arrays(work, consts, scratch):
    wd, maximize = consts
    for pd, g, ax, (decay, eta, mu, mu_is_one) in work:
        shape, dtype, size = pd.shape, pd.dtype, pd.size
        wide = pd.ndim == 0 and dtype != _F64
        t1 = scratch.get(0, dtype, shape, size)
        if maximize or wd != 0:
            g = _gradient(pd, g, wd, maximize, t1, scratch.get(1, dtype, shape, size))
        np.multiply(pd, decay, out=pd)                     # p.mul_(1 - lambd * eta)
        t = scratch.get(10, _F64, (), 1) if wide else t1     # p.sub_(eta * g)
        np.multiply(eta, g, out=t)
        np.subtract(pd, t, out=pd)
        if mu_is_one:                                      # ax.copy_(where(mu == 1, p, ax + (p - ax) * mu))
            ax[...] = pd
        else:
            # (a 0-d parameter meets the 0-d mu in the wider dtype of the two)
            t = scratch.get(10, _F64, (), 1) if wide and mu.dtype.itemsize > dtype.itemsize else t1
            np.subtract(pd, ax, out=t)
            np.multiply(t, mu, out=t)
            np.add(ax, t, out=ax)


ASGD = Rule(("step", "eta", "mu"), ("ax",), _asgd_consts, lambda group: (2, 1, 1, 1), _asgd_arrays)
