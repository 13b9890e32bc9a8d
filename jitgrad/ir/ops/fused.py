"""Fused primitives for composite functions: ``softmax``, ``log_softmax``, ``nll_loss``, the vjps of softmax,
log_softmax and tanh, ``layer_norm`` (the normalisation), ``gelu`` and ``sdpa`` (scaled dot-product attention).

Each one is a composition of smaller primitives, and says so: its ``decompose`` rebuilds it from them.  Eager CPU
mode runs the fused ``impl`` (one NumPy call and one backward node instead of six to twelve of each:
cross_entropy's 21 eager ops became 2); a trace or a device backend binds the decomposition instead
(``runtime/dispatch.py``), so compiled graphs and CUDA kernels only see the small primitives.  The vjps are
written with jitgrad ops and bind fused ops themselves where one exists, which decompose the same way: they stay
differentiable to any order in every mode.
"""
from __future__ import annotations

from math import isfinite as _isfinite_float

import numpy as np

from .opdef import LINEAR, SYMMETRIC, Aval, OpDef, OpError, broadcast_shapes, fit_to, fmt_shape, register, result_dtype


def _float_rule(name):
    def shape_dtype(avals, params):
        (x,) = avals
        if not x.dtype.is_floating_point:
            raise OpError(f"{name}: expected a floating point tensor, got {x.dtype.name}")
        if not 0 <= params["axis"] < x.ndim:
            raise OpError(f"{name}: dim {params['axis']} out of range for a tensor of shape {fmt_shape(x.shape)}")
        return [Aval(x.shape, x.dtype)]
    return shape_dtype


# the ufuncs' reduce: the ndarray methods go through NumPy's Python wrappers (_methods.py), a frame per call that
# small tensors feel
_max_reduce = np.maximum.reduce
_min_reduce = np.minimum.reduce
_add_reduce = np.add.reduce
_or_reduce = np.logical_or.reduce
# (NumPy's module has a __getattr__, so CPython specialises no ``np.X`` read: the eager impls' functions bound once)
_isfinite, _exp, _log, _subtract, _multiply, _divide = np.isfinite, np.exp, np.log, np.subtract, np.multiply, np.divide


def _finite(m):
    """Whether every max in ``m`` (a reduction's fresh, contiguous result, of more than ``_LISTED`` values: callers
    tell fewer by their sum as Python floats, cheaper than any NumPy call) is finite."""
    if m.dtype in _BLAS_FLOATS:
        # its dot with itself is (one call where a sum and an isfinite were two, each the cost of a small op; BLAS
        # raises no NumPy warning, and an overflow only takes the careful branch)
        v = m.ravel()
        return _isfinite_float(float(v.dot(v)))
    return bool(_isfinite(_add_reduce(m, axis=None)))


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# up to this many values a check reads them as a Python list: its min / max / sum cost less than one NumPy reduction
_LISTED = 64


def _none_ignored(target, ignore_index):
    """Whether no target is ``ignore_index`` (callers first try a negative one, torch's -100, against the least
    target, or search a short target's list: one reduction or none where this is two)."""
    return not _or_reduce(target == ignore_index, axis=None)


def _log_softmax_impl(x, axis, softmax=False):
    """log_softmax's impl, and with ``softmax`` softmax's: x minus its max along ``axis``, as torch (and the
    composition) do (a row holding +inf, or all -inf, is nan throughout), then the log-sum-exp's difference or the
    normalised exponentials.  (One function: a loss's log_softmax takes no frame for the shift; softmax one.)"""
    m = _max_reduce(x, axis, None, None, True)      # (the reductions' arguments positional)
    if m.size <= _LISTED:
        # every max finite: their sum as Python floats is (an overflow only takes the careful branch below)
        t = sum(m.ravel().tolist())
        finite = t - t == 0.0       # (an infinite or nan sum gives nan: isfinite without its call)
    else:
        finite = _finite(m)
    if finite:
        s = x - m
    else:
        with np.errstate(invalid="ignore"):        # inf - inf: nan on purpose, no warning
            s = x - m
    if softmax:
        e = _exp(s)
        return _divide(e, _add_reduce(e, axis, None, None, True), out=e)
    return s - _log(_add_reduce(_exp(s), axis, None, None, True))


def _softmax_impl(x, axis):
    return _log_softmax_impl(x, axis, True)


def _log_softmax_vjp(c, g):
    # d/dx (x - logsumexp x) . g = g - softmax(x) * sum(g)
    return (c.bind("log_softmax_backward", g, c.outputs[0], axis=c.params["axis"]),)


def _softmax_decompose(b, x, axis):
    # the max is subtracted as is, as torch does: a row holding +inf (or all -inf) is nan throughout
    e = b("exp", x - b("amax", x, axes=(axis,), keepdims=True).detach())
    return e / b("sum", e, axes=(axis,), keepdims=True)


def _log_softmax_decompose(b, x, axis):
    s = x - b("amax", x, axes=(axis,), keepdims=True).detach()
    return s - b("log", b("sum", b("exp", s), axes=(axis,), keepdims=True))


def _lsm_bwd_decompose(b, g, out, axis):
    return g - b("exp", out) * b("sum", g, axes=(axis,), keepdims=True)


def _gradient_and_output_rule(name):
    """The shape rule of a backward that takes a gradient and its op's output: one float array of their shape."""
    def rule(avals, params):
        g, out = avals
        if g.shape != out.shape or g.dtype is not out.dtype or not g.dtype.is_floating_point:
            raise OpError(f"{name}: expected matching float gradient and output, got "
                          f"{g.dtype.name}{fmt_shape(g.shape)} and {out.dtype.name}{fmt_shape(out.shape)}")
        return [Aval(g.shape, g.dtype)]
    return rule


_lsm_bwd_rule = _gradient_and_output_rule("log_softmax_backward")


def _lsm_bwd_impl(g, out, axis):
    if g.shape != out.shape or g.dtype != out.dtype or not out.ndim:
        return g - _exp(out) * _add_reduce(g, axis=axis, keepdims=True)
    e = _exp(out)               # the same three ops into one buffer (cross_entropy's backward: two arrays fewer)
    _multiply(e, _add_reduce(g, axis, None, None, True), out=e)
    return _subtract(g, e, out=e)


def _lsm_bwd_vjp(c, h):
    # y = g - e * sum(g), e = exp(out):  dy/dg . h = h - sum(h * e);  dy/dout . h = -h * e * sum(g)
    g, out = c.inputs
    ax = (c.params["axis"],)
    e = c.bind("exp", out)
    dg = h - c.bind("sum", h * e, axes=ax, keepdims=True) if c.needs_grad[0] else None
    dout = -(h * e * c.bind("sum", g, axes=ax, keepdims=True)) if c.needs_grad[1] else None
    return dg, dout


def _log_softmax_jvp(c, t):
    # d(x - logsumexp x) = t - sum(softmax(x) * t)
    return (t - c.bind("sum", c.bind("exp", c.outputs[0]) * t, axes=(c.params["axis"],), keepdims=True),)


def _lsm_bwd_jvp(c, tg, tout):
    # y = g - e sum(g), e = exp(out):  dy = (tg - e sum(tg)) - tout e sum(g)
    g, out = c.inputs
    total = c.bind("log_softmax_backward", tg, out, axis=c.params["axis"]) if tg is not None else None
    if tout is not None:
        d = -(tout * c.bind("exp", out) * c.bind("sum", g, axes=(c.params["axis"],), keepdims=True))
        total = d if total is None else total + d
    return (total,)


def _tanh_bwd_jvp(c, tg, ty):
    # z = g (1 - y^2):  dz = tg (1 - y^2) - 2 g y ty
    g, y = c.inputs
    total = c.bind("tanh_backward", tg, y) if tg is not None else None
    if ty is not None:
        d = ty * g * y * -2.0
        total = d if total is None else total + d
    return (fit_to(total, c.outputs[0]),)


def _softmax_vjp(c, g):
    # y * (g - sum(g * y)): one fused op (its decomposition binds exactly that) when g is laid out as y
    y = c.outputs[0]
    if g.shape == y.shape and g.dtype == y.dtype:
        return (c.bind("softmax_backward", g, y, axis=c.params["axis"]),)
    return (y * (g - c.bind("sum", g * y, axes=(c.params["axis"],), keepdims=True)),)


_sm_bwd_rule = _gradient_and_output_rule("softmax_backward")


def _sm_bwd_impl(g, y, axis):
    # the composition's ops in its order (mul, sum, sub, mul), so eager results keep their bits
    return y * (g - np.add.reduce(g * y, axis=(axis,), keepdims=True))


def _sm_bwd_decompose(b, g, y, axis):
    return y * (g - b("sum", g * y, axes=(axis,), keepdims=True))


def _sm_bwd_vjp(c, h):
    # z = y (g - s), s = sum(g y):  dz/dg . h = y (h - sum(h y));  dz/dy . h = h (g - s) - g sum(h y)
    g, y = c.inputs
    axis = c.params["axis"]
    dg = c.bind("softmax_backward", h, y, axis=axis) if c.needs_grad[0] else None
    dy = None
    if c.needs_grad[1]:
        s = c.bind("sum", g * y, axes=(axis,), keepdims=True)
        dy = h * (g - s) - g * c.bind("sum", h * y, axes=(axis,), keepdims=True)
    return dg, dy


def _sm_bwd_jvp(c, tg, ty):
    # dz = softmax_backward(tg, y) + ty (g - s) - y sum(g ty)
    g, y = c.inputs
    axis = c.params["axis"]
    total = c.bind("softmax_backward", tg, y, axis=axis) if tg is not None else None
    if ty is not None:
        s = c.bind("sum", g * y, axes=(axis,), keepdims=True)
        d = ty * (g - s) - y * c.bind("sum", g * ty, axes=(axis,), keepdims=True)
        total = d if total is None else total + d
    return (total,)


register(OpDef("log_softmax", "reduce", _float_rule("log_softmax"), _log_softmax_impl, _log_softmax_vjp,
               saves_out=(0,), jvp=_log_softmax_jvp, grad_name="LogSoftmaxBackward0", decompose=_log_softmax_decompose,
               doc="log_softmax(x; axis): x - logsumexp(x, axis), computed around the detached max"))
register(OpDef("log_softmax_backward", "reduce", _lsm_bwd_rule, _lsm_bwd_impl, _lsm_bwd_vjp, saves_in=(0, 1), jvp=_lsm_bwd_jvp,
               grad_name="LogSoftmaxBackwardBackward0", decompose=_lsm_bwd_decompose,
               doc="log_softmax's vjp in eager mode, g - exp(out) * sum(g, axis): one op instead of four"))
def _tanh_bwd_rule(avals, params):
    g, y = avals
    if not g.dtype.is_floating_point or not y.dtype.is_floating_point:
        raise OpError(f"tanh_backward: expected a float gradient and output, got "
                      f"{g.dtype.name}{fmt_shape(g.shape)} and {y.dtype.name}{fmt_shape(y.shape)}")
    return [Aval(broadcast_shapes("tanh_backward", [g.shape, y.shape]), result_dtype(avals))]


def _tanh_bwd_impl(g, y):
    if y.ndim == 0 or g.shape != y.shape or g.dtype != y.dtype:     # 0-d: NumPy scalars take no out=
        return g * (1 - y * y)
    t = y * y                       # g * (1 - y^2) with one temporary
    _subtract(1, t, out=t)
    _multiply(g, t, out=t)
    return t


def _tanh_bwd_signature(avals, params):
    """``eager_impl``: ``_tanh_bwd_impl``'s one-temporary path with its 1 a 0-d array of the dtype, made once per
    signature (a ufunc converts a Python 1 on every call, as dear as a small array's whole subtraction)."""
    g, y = avals
    if g.shape != y.shape or g.dtype is not y.dtype or not g.shape or not g.dtype.is_floating_point:
        return None
    one = np.ones((), g.dtype.np)

    def same_layout(g, y):
        t = _multiply(y, y)
        _subtract(one, t, out=t)
        return _multiply(g, t, out=t)
    return same_layout


_tanh_bwd_signature.by_form = True      # (dtypes, ranks and whether two shapes are equal: a form's)


def _tanh_bwd_vjp(c, h):
    # z = g * (1 - y^2):  dz/dg . h = h * (1 - y^2);  dz/dy . h = -2 * h * g * y
    g, y = c.inputs
    dg = dy = None
    if c.needs_grad[0]:
        dg = c.bind("tanh_backward", h, y)
        if dg.shape != c.shapes[0]:
            dg = dg.sum_to_size(c.shapes[0])
    if c.needs_grad[1]:
        dy = h * g * y * -2.0
        if dy.shape != c.shapes[1]:
            dy = dy.sum_to_size(c.shapes[1])
    return dg, dy


register(OpDef("tanh_backward", "elementwise", _tanh_bwd_rule, _tanh_bwd_impl, _tanh_bwd_vjp, jvp=_tanh_bwd_jvp,
               eager_impl=_tanh_bwd_signature,
               scalar=lambda m, g, y: g * (m.lit(1.0) - y * y), saves_in=(0, 1), grad_name="TanhBackwardBackward0",
               decompose=lambda b, g, y: g * (1.0 - y * y),
               doc="tanh's vjp in eager mode, g * (1 - y^2): one op instead of three"))
register(OpDef("softmax_backward", "reduce", _sm_bwd_rule, _sm_bwd_impl, _sm_bwd_vjp, saves_in=(0, 1), jvp=_sm_bwd_jvp,
               grad_name="SoftmaxBackwardDataBackward0", decompose=_sm_bwd_decompose,
               doc="softmax's vjp in eager mode, y * (g - sum(g * y, axis)): one op instead of four"))
register(OpDef("softmax", "reduce", _float_rule("softmax"), _softmax_impl, _softmax_vjp,
               saves_out=(0,), jvp=SYMMETRIC, grad_name="SoftmaxBackward0", decompose=_softmax_decompose, trace_vjp=True,
               doc="softmax(x; axis): exp(x - max) / sum(exp(x - max))"))

_REDUCTIONS = ("mean", "sum", "none")


def _nll_rule(avals, params):
    logp, target = avals
    if not logp.dtype.is_floating_point:
        raise OpError(f"nll_loss: expected a floating point input, got {logp.dtype.name}")
    if target.dtype.name not in ("int64", "int32"):
        raise OpError(f"nll_loss: expected target of dtype int64 (class indices), got {target.dtype.name}")
    if logp.ndim != 2 or target.shape != logp.shape[:1]:
        raise OpError(f"nll_loss: expected input (N, C) and target (N,), got {fmt_shape(logp.shape)} and "
                      f"{fmt_shape(target.shape)}")
    if params["reduction"] not in _REDUCTIONS:
        raise OpError(f"nll_loss: {params['reduction']} is not a valid value for reduction")
    return [Aval(logp.shape[:1] if params["reduction"] == "none" else (), logp.dtype)]


_ARANGE: dict = {}     # n -> np.arange(n): row indices, reused across calls


def _rows(n):
    r = _ARANGE.get(n)
    if r is None:
        if len(_ARANGE) > 64:
            _ARANGE.clear()
        r = _ARANGE[n] = np.arange(n)
        r.flags.writeable = False
    return r


def _nll_weights(target, ignore_index):
    valid = target != ignore_index
    return valid, np.where(valid, target, 0)


_UNSIGNED = {8: np.uint64, 4: np.uint32}
_COUNTS: dict = {}      # (dtype, n) -> n as a scalar of that dtype (the mean's divisor, reused across calls)


def _targets_checked(target, n_cls, ignore_index):
    """False (nll's uncommon case), once every target (N,) that is not ``ignore_index`` is known to be a class index in
    [0, n_cls): else torch's error, here, so eager checks the targets once per loss (not in ``F.nll_loss`` too)."""
    safe = np.where(target != ignore_index, target, 0)
    lo, hi = int(_min_reduce(safe, axis=None)), int(_max_reduce(safe, axis=None))
    if lo < 0 or hi >= n_cls:
        raise IndexError(f"Target {hi if hi >= n_cls else lo} is out of bounds.")      # torch's text
    return False


def _nll_impl(logp, target, ignore_index, reduction):
    n, n_cls = logp.shape
    rows = _ARANGE[n] if n in _ARANGE else _rows(n)     # (_rows, inline)
    # the common case: every target a class index in [0, n_cls) and none ignore_index (ignorable only when in range),
    # told by one pass: a short target's Python list, else one reduction of the targets read unsigned (where a
    # negative one is huge); else _targets_checked's (a frame only there)
    if 0 < n <= _LISTED:
        tl = target.tolist()
        if min(tl) >= 0 and max(tl) < n_cls:
            common = not 0 <= ignore_index < n_cls or ignore_index not in tl
        else:
            common = _targets_checked(target, n_cls, ignore_index)
    elif n and _max_reduce(target.view(_UNSIGNED[target.dtype.itemsize]), axis=None) < n_cls:
        common = not 0 <= ignore_index < n_cls or _none_ignored(target, ignore_index)
    else:
        common = n != 0 and _targets_checked(target, n_cls, ignore_index)
    if common and reduction == "mean":
        # (add.reduce of a float array accumulates in its dtype: no dtype= needed, the same loop)
        key = (logp.dtype, n)
        if key in _COUNTS:
            count = _COUNTS[key]
        else:
            if len(_COUNTS) > 64:
                _COUNTS.clear()
            count = _COUNTS[key] = logp.dtype.type(n)
        return -(_add_reduce(logp[rows, target], None) / count)
    valid, safe = _nll_weights(target, ignore_index)
    picked = np.where(valid, -logp[rows, safe], logp.dtype.type(0))     # ignored rows are skipped (-inf there too)
    if reduction == "none":
        return picked
    total = picked.sum(dtype=logp.dtype)
    if reduction == "sum":
        return total
    n = valid.sum()
    return total / logp.dtype.type(n) if n else np.array(np.nan, logp.dtype)   # all ignored or empty: 0/0, as torch


def _nll_weights_rule(avals, params):
    (target,) = avals
    return [Aval((target.shape[0], params["n_cls"]), params["dtype"])]


_ONE_HOT: dict = {}     # (n_cls, NumPy dtype, n_rows) -> (n_cls, n_cls) table: -1/n_rows on its diagonal, else 0
_ONE_HOT_CLASSES = 64   # up to this many classes (a table of 4096 values at most)


def _one_hot_table(key, value):
    if len(_ONE_HOT) > 64:
        _ONE_HOT.clear()
    n_cls, dtype, _ = key
    table = np.zeros((n_cls, n_cls), dtype)
    i = np.arange(n_cls)
    table[i, i] = value         # (the Python float rounded to the dtype, as the scatter rounds it)
    table.flags.writeable = False
    _ONE_HOT[key] = table
    return table


def _nll_weights_impl(target, n_cls, dtype, ignore_index, reduction):
    """``w`` with d loss / d logp = g * w (nll_loss is linear in logp: a constant scatter of -1, or -1/n for
    'mean', at the targets; ignored rows 0)."""
    n_rows = target.shape[0]
    dtype = dtype.np
    # every target a class (the forward checked those not ignored) when none is ignore_index: a short target's
    # list is searched, a long one reduced
    if reduction == "mean" and n_rows and (ignore_index not in target.tolist() if n_rows <= _LISTED else
                                           ignore_index < 0 and _min_reduce(target, axis=None) >= 0
                                           or _none_ignored(target, ignore_index)):
        if n_cls <= _ONE_HOT_CLASSES:
            # the rows of a table that holds -1/n at (c, c) and 0 elsewhere, picked by the targets: one call where
            # zeros and a scatter were two, the same bits
            key = (n_cls, dtype, n_rows)
            try:
                table = _ONE_HOT[key]
            except KeyError:
                table = _one_hot_table(key, -1.0 / n_rows)
            return table.take(target, 0)
        w = np.zeros((n_rows, n_cls), dtype)
        w[_ARANGE[n_rows] if n_rows in _ARANGE else _rows(n_rows), target] = -1.0 / n_rows    # (_rows, inline)
        return w
    w = np.zeros((n_rows, n_cls), dtype)
    valid, safe = _nll_weights(target, ignore_index)
    scale = -valid.astype(dtype)
    n = valid.sum()
    if reduction == "mean" and n:
        scale = scale / dtype.type(n)
    w[_rows(n_rows), safe] = scale      # ignored rows get 0 (all ignored too: torch's gradient there is 0)
    return w


def _nll_vjp(c, g):
    # the weights are an op of the targets (read by its impl, not by this rule's Python), so an eager backward
    # replays this rule on arrays as any other (runtime/backward/pullback_plans.py)
    target = c.inputs[1]
    n_rows, n_cls = c.shapes[0]
    red = c.params["reduction"]
    on_device = target.device.type != "cpu"
    if on_device:       # the scatter weights are built on the host, a constant of the device's product
        target = target.cpu()
    w = c.bind("nll_grad_weights", target, n_cls=n_cls, dtype=c.dtypes[0], ignore_index=c.params["ignore_index"],
               reduction=red)
    if red == "none":
        g = c.bind("reshape", g, shape=(n_rows, 1))
    return (g * (w._data if on_device else w), None)


register(OpDef("nll_grad_weights", "index", _nll_weights_rule, _nll_weights_impl, None,
               doc="nll_grad_weights(target (N,); n_cls, dtype, ignore_index, reduction): nll_loss's d loss / d logp "
                   "per unit cotangent, (N, n_cls): -1 (or -1/n for 'mean') at the targets, 0 elsewhere"))


# torch's error for a target out of range (runtime/checked_index.py's TARGET; ir imports nothing of runtime)
_TARGET_RANGE = ("IndexError", True, "Target {value} is out of bounds.", None)


def nll_composition(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """nll_loss of log-probabilities ``logp`` (N, C, ...) with primitives (any ``weight``, any rank): the
    decomposition of the fused ``nll_loss`` and ``F.nll_loss``'s general case.  Ignored rows are skipped, not
    multiplied by 0 (their log-probability may be -inf); the where also gives them a zero gradient when every row
    is ignored (torch's), where g / 0 * 0 would be nan."""
    valid = target != ignore_index
    safe = target.where(valid, 0)
    picked = (-logp.gather(1, safe.unsqueeze(1), range_error=_TARGET_RANGE).squeeze(1)).where(valid, 0.0)
    w = valid.to(logp.dtype)
    if weight is not None:
        w = w * weight[safe]
    loss = picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


register(OpDef("nll_loss", "index", _nll_rule, _nll_impl, _nll_vjp, saves_in=(1,), nondiff_inputs=(1,), jvp=LINEAR,
               grad_name="NllLossBackward0",
               decompose=lambda b, logp, target, ignore_index, reduction: nll_composition(
                   logp, target, None, ignore_index, reduction),
               doc="nll_loss(logp (N,C), target (N,); ignore_index, reduction): -logp[i, target[i]], reduced"))
