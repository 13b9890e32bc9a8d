"""gradcheck / gradgradcheck: finite differences against the analytical (reverse-mode) Jacobian.

Semantics follow ``torch.autograd.gradcheck``: only floating tensors with ``requires_grad`` are checked, outputs
are the returned tensors that require grad, the comparison is ``allclose(analytical, numerical, rtol, atol)`` and
a failure raises :class:`GradcheckError` (or returns False with ``raise_exception=False``).

How it works, and what makes it fast:

* Numerical Jacobian: central differences, column by column, on *copies* of the inputs (float64 copies, so a
  float32 function is differentiated numerically in double precision; the caller's tensors are never written).
  Each evaluation runs under ``no_grad`` when the function allows it (it falls back to grad mode for functions
  that differentiate internally), so no autograd graph is built for the 2 * numel evaluations.
* Analytical Jacobian: the forward runs once; each row is one ``autograd.grad`` call with a one-hot
  ``grad_output`` and ``retain_graph=True``.  Rows are computed twice and compared (reentrancy, ``nondet_tol``).
* ``fast_mode``: torch's random projection, ``v^T J u``, comparing ``v^T (J u)_numerical`` with
  ``(v^T J)_analytical u``: two evaluations per input and one backward per output.
* Forward AD (``check_forward_ad``): ``func`` runs on dual tensors (``runtime/dual.py``), one jvp per input
  element (slow mode) or per random direction (fast mode); with ``check_undefined_grad``, twice more per input,
  with a zero tangent and with none (forward_checks.py, as torch's; and the batched forward check).
* gradgradcheck checks ``(inputs, grad_outputs) -> autograd.grad(outputs, inputs, grad_outputs,
  create_graph=True)``; its numerical evaluations only need values, so they run that backward without building
  the double-backward graph.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..runtime import grad_mode
from ..runtime.backward.engine import grad as _grad
from ..runtime.tensor import Tensor
from .jacobians import (  # noqa: F401  (GradcheckError is public here too)
    _as_tuple, _is_diff, _differentiable_outputs, _arr, _fmt, _allclose, _notallclose_msg, _Evaluator,
    _numerical_jacobian, _numerical_jvp, _vjp, _analytical_rows, _check_reentrant, _analytical_jacobian,
    _analytical_vJ, _forward_columns, forward_tangents, GradcheckError, _FAST_SEED)
from .forward_checks import batched_forward_check, undefined_tangent_check

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck", "get_numerical_jacobian", "get_analytical_jacobian"]



FAST_FAIL_SLOW_OK_MSG = """
Fast gradcheck failed but element-wise differences are small. This means that the
test might've passed in slow_mode!

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck:

If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `fast_mode=False` as a keyword argument.
""".strip()

FAILED_BATCHED_GRAD_MSG = """
gradcheck or gradgradcheck failed while testing batched gradient computation.
jitgrad has no vmap: check_batched_grad=True checks that the backward is linear in grad_output, i.e. that
the gradients for a combination of grad_outputs equal the same combination of the separate gradients
(which is what a batched backward computes).
""".strip()




# ---- the extra backward tests ----------------------------------------------------------------------

def _zeros_like(o):
    return Tensor._make(np.zeros(o.shape, o._data.dtype))


def _test_backward_mul_by_grad_output(outputs, diff_inputs):
    grads = _grad(outputs, diff_inputs, tuple(_zeros_like(o) for o in outputs), retain_graph=True,
                  allow_unused=True)
    for gi, di in zip(grads, diff_inputs):
        if gi is None:
            continue
        if not np.all(gi._data == 0):
            raise GradcheckError("backward not multiplied by grad_output")
        if gi.dtype is not di.dtype:
            raise GradcheckError("grad is incorrect type")
        if gi.shape != di.shape:
            raise GradcheckError("grad is incorrect size")
    return True


def _test_undefined_backward_mode(outputs, diff_inputs, all_zero_done=False):
    """Backward must cope with outputs whose gradient is undefined: all zero, and (with several outputs) each
    output left out of the backward in turn (its node then receives no gradient for it).  ``all_zero_done``:
    the all-zero backward already ran (``_test_backward_mul_by_grad_output`` is the same computation)."""
    def warn_bc_breaking():
        warnings.warn("Backwards compatibility: New undefined gradient support checking feature is enabled by "
                      "default, but it may break existing callers of this function. If this is true for you, you "
                      "can call this function with \"check_undefined_grad=False\" to disable the feature",
                      stacklevel=4)

    # undefined (None) gradients for every output, as torch's UndefinedGrad: hooks and backward see None
    from ..runtime.backward.engine import run as _run
    outs = tuple(o for o in outputs if o.requires_grad)
    if outs:
        try:
            _run(outs, [None] * len(outs), True, False, tuple(diff_inputs), False)
        except RuntimeError as e:
            warn_bc_breaking()
            raise GradcheckError("Expected backward function to handle undefined output grads. Please look at "
                                 "\"Notes about undefined output gradients\" in \"tools/autograd/derivatives.yaml\""
                                 f" (got: {e})") from e
    subsets = [] if all_zero_done else [outputs]
    if len(outputs) > 1:
        subsets += [tuple(o for k, o in enumerate(outputs) if k != skip) for skip in range(len(outputs))]
    for outs in subsets:
        outs = tuple(o for o in outs if o.requires_grad)
        if not outs:
            continue
        try:
            grads = _grad(outs, diff_inputs, tuple(_zeros_like(o) for o in outs), retain_graph=True,
                          allow_unused=True)
        except RuntimeError as e:
            warn_bc_breaking()
            raise GradcheckError("Expected backward function to handle undefined output grads. Please look at "
                                 "\"Notes about undefined output gradients\" in \"tools/autograd/derivatives.yaml\""
                                 f" (got: {e})") from e
        for gi in grads:
            if gi is not None and not np.all(gi._data == 0):
                warn_bc_breaking()
                raise GradcheckError("Expected all input grads to be undefined or zero when all output grads are "
                                     "undefined or zero. Please look at \"Notes about undefined output gradients\" "
                                     "in \"tools/autograd/derivatives.yaml\"")
    return True


def _test_batched_grad(output, output_idx, diff_inputs):
    rng = np.random.default_rng(_FAST_SEED + output_idx)
    dt_ = output._data.dtype
    g1 = rng.standard_normal(output.shape).astype(dt_)
    g2 = rng.standard_normal(output.shape).astype(dt_)

    def vjp(g):
        try:
            r = _vjp(output, diff_inputs, Tensor._make(np.asarray(g)))
        except RuntimeError as ex:
            raise GradcheckError(f"While computing batched gradients, got: {ex}\n\n{FAILED_BATCHED_GRAD_MSG}") from ex
        return [np.zeros(x.shape) if gi is None else gi._data.astype(np.float64) for gi, x in zip(r, diff_inputs)]

    a, b, c = vjp(g1), vjp(g2), vjp(g1 + 2 * g2)
    for k, (x1, x2, x3) in enumerate(zip(a, b, c)):
        exp = x1 + 2 * x2
        if not np.allclose(x3, exp, rtol=1e-5, atol=1e-6 if dt_ == np.float64 else 1e-4):
            raise GradcheckError(f"For output {output_idx} and input {k}:\n\n{FAILED_BATCHED_GRAD_MSG}\n\nGot:\n"
                                 f"{_fmt(x3)}\n\nExpected:\n{_fmt(exp)}")
    return True


# ---- slow and fast checks --------------------------------------------------------------------------

class _Ctx:
    def __init__(self, func, tupled_inputs, func_out, outputs, out_pos, eps, rtol, atol, nondet_tol,
                 check_grad_dtypes, value_fn):
        self.func = func
        self.inputs = tupled_inputs
        self.func_out = func_out
        self.outputs = outputs
        self.out_pos = out_pos
        self.eps, self.rtol, self.atol, self.nondet_tol = eps, rtol, atol, nondet_tol
        self.check_grad_dtypes = check_grad_dtypes
        self.value_fn = value_fn
        self.diff_pos = [i for i, x in enumerate(tupled_inputs) if _is_diff(x)]
        self.diff_inputs = tuple(tupled_inputs[i] for i in self.diff_pos)
        self._ev = None

    def evaluator(self, positions=None):
        if positions is None and self._ev is not None:
            return self._ev
        pos = self.out_pos if positions is None else positions
        ref = [_arr(_as_tuple(self.func_out)[p]).shape for p in pos]
        ev = _Evaluator(self.func, self.inputs, self.diff_pos, pos, ref, self.value_fn)
        if positions is None:
            self._ev = ev
        return ev


def _float_positions(func_out):
    return [p for p, o in enumerate(_as_tuple(func_out)) if isinstance(o, Tensor) and o.is_floating_point()]


def _check_no_differentiable_outputs(c: _Ctx, fast: bool):
    pos = _float_positions(c.func_out)
    if not pos:
        return True
    ev = c.evaluator(pos)
    if fast:
        rng = np.random.default_rng(_FAST_SEED)
        for k, x in enumerate(c.diff_inputs):
            u = rng.random(x.numel())
            u /= np.linalg.norm(u) or 1.0
            for jvp in _numerical_jvp(ev, k, u, c.eps):
                if jvp.size and np.abs(jvp).max() > c.nondet_tol:
                    raise GradcheckError("Numerical gradient for function expected to be zero")
        return True
    for per_input in _numerical_jacobian(ev, c.eps):
        for jac in per_input:
            if np.count_nonzero(jac):
                raise GradcheckError("Numerical gradient for function expected to be zero")
    return True


def _slow_gradcheck(c: _Ctx, forward_ad: bool, backward_ad: bool):
    if not c.outputs:
        return _check_no_differentiable_outputs(c, fast=False)
    numerical = _numerical_jacobian(c.evaluator(), c.eps)   # [input][output]
    in_shapes = [x.shape for x in c.diff_inputs]
    if backward_ad:
        for o_idx, o in enumerate(c.outputs):
            analytical = _analytical_jacobian(o, c.diff_inputs, c.nondet_tol, c.check_grad_dtypes)
            for k, a in enumerate(analytical):
                n = numerical[k][o_idx]
                if not _allclose(a, n, c.rtol, c.atol):
                    raise GradcheckError(_notallclose_msg(a, n, o_idx, k, c.rtol, c.atol, in_shapes[k], o.shape,
                                                          c.diff_pos[k]))
    if forward_ad:
        fwd = _forward_columns(c.func, c.inputs, c.diff_pos, c.out_pos)
        for k in range(len(c.diff_inputs)):
            for o_idx, o in enumerate(c.outputs):
                a, n = fwd[k][o_idx], numerical[k][o_idx]
                if not _allclose(a, n, c.rtol, c.atol):
                    raise GradcheckError(_notallclose_msg(a, n, o_idx, k, c.rtol, c.atol, in_shapes[k], o.shape,
                                                          c.diff_pos[k], forward=True))
    return True


def _fast_gradcheck(c: _Ctx, forward_ad: bool, backward_ad: bool):
    rng = np.random.default_rng(_FAST_SEED)
    all_u = []
    for x in c.diff_inputs:
        u = rng.random(x.numel())
        all_u.append(u / (np.linalg.norm(u) or 1.0))
    if not c.outputs:
        return _check_no_differentiable_outputs(c, fast=True)
    all_v = []
    for o in c.outputs:
        v = rng.random(o.numel())
        all_v.append(v / (np.linalg.norm(v) or 1.0))
    ev = c.evaluator()
    numerical_Ju = [_numerical_jvp(ev, k, u, c.eps) for k, u in enumerate(all_u)]   # [input][output] flat
    if backward_ad:
        analytical = [_analytical_vJ(o, c.diff_inputs, v, c.nondet_tol, c.check_grad_dtypes)
                      for o, v in zip(c.outputs, all_v)]                              # [output][input] flat
        for k, u in enumerate(all_u):
            for o_idx, v in enumerate(all_v):
                n = np.array([v @ numerical_Ju[k][o_idx]]) if v.size else np.zeros(1)
                a = np.array([analytical[o_idx][k] @ u]) if u.size else np.zeros(1)
                atol = c.atol * float(u.sum()) * float(v.sum())
                if not _allclose(a, n, c.rtol, atol):
                    raise GradcheckError(_notallclose_msg(a, n, o_idx, k, c.rtol, atol, matrices=True)
                                         + _slow_mode_error(c, k, o_idx, forward=False))
    if forward_ad:
        for k, u in enumerate(all_u):
            ts = [None] * len(all_u)
            ts[k] = u
            ju = forward_tangents(c.func, c.inputs, c.diff_pos, c.out_pos, ts)
            for o_idx, o in enumerate(c.outputs):
                a = ju[o_idx]
                n = numerical_Ju[k][o_idx]
                if not _allclose(a, n, c.rtol, c.atol * float(u.sum())):
                    raise GradcheckError(_notallclose_msg(a, n, o_idx, k, c.rtol, c.atol * float(u.sum()),
                                                          forward=True)
                                         + _slow_mode_error(c, k, o_idx, forward=True))
    return True


def _slow_mode_error(c: _Ctx, k: int, o_idx: int, forward: bool) -> str:
    """Recompute the full Jacobian of (input k, output o_idx) to say where fast mode's disagreement comes from."""
    try:
        slow_n = _numerical_jacobian(c.evaluator(), c.eps, which=k)[k][o_idx]
        if forward:
            slow_a = _forward_columns(c.func, c.inputs, c.diff_pos, c.out_pos, which_input=k)[k][o_idx]
        else:
            slow_a = _analytical_rows(c.outputs[o_idx], c.diff_inputs, [True, True])[k]
    except Exception as e:  # noqa: BLE001 - the fast-mode message stands on its own
        return f"\n(recomputing the Jacobian in slow mode failed: {e})\n"
    diff = float(np.abs(slow_n - slow_a).max()) if slow_n.size else 0.0
    msg = ("\nThe above quantities relating the numerical and analytical jacobians are computed \n"
           "in fast mode. See: https://github.com/pytorch/pytorch/issues/53876 for more background \n"
           "about fast mode. Below, we recompute numerical and analytical jacobians in slow mode:\n\n"
           f"Numerical:\n {_fmt(slow_n)}\nAnalytical:\n{_fmt(slow_a)}\n\n"
           f"The max per-element difference (slow mode) is: {diff}.\n")
    if _allclose(slow_a, slow_n, c.rtol, c.atol):
        msg += FAST_FAIL_SLOW_OK_MSG
    else:
        msg += _notallclose_msg(slow_a, slow_n, o_idx, k, c.rtol, c.atol, c.diff_inputs[k].shape,
                                c.outputs[o_idx].shape, c.diff_pos[k], forward=forward, matrices=False)
    return msg


# ---- public entry points ---------------------------------------------------------------------------

def _check_inputs(tupled_inputs):
    any_diff = False
    for idx, inp in enumerate(tupled_inputs):
        if _is_diff(inp):
            if inp.dtype.name != "float64":
                warnings.warn(f"Input #{idx} requires gradient and is not a double precision floating point or "
                              "complex. This check will likely fail if all the inputs are not of double precision "
                              "floating point or complex. ", stacklevel=4)
            a = inp._data
            if a.size and not all(st > 0 or sz <= 1 for st, sz in zip(a.strides, a.shape)):
                raise RuntimeError(f"The {idx}th input has a dimension with stride 0. gradcheck only supports inputs "
                                   "that are non-overlapping to be able to compute the numerical gradients "
                                   "correctly. You should call .contiguous on the input before passing it to "
                                   "gradcheck.")
            any_diff = True
    if not any_diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have "
                         "requires_grad=True.")


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, nondet_tol: float = 0.0, check_undefined_grad: bool = True,
              check_grad_dtypes: bool = False, check_batched_grad: bool = False,
              check_batched_forward_grad: bool = False, check_forward_ad: bool = False,
              check_backward_ad: bool = True, fast_mode: bool = False, masked=None, check_sparse_nnz=None) -> bool:
    """Check the gradients of ``func`` at ``inputs`` against central finite differences.

    ``func`` takes tensors and returns a Tensor or a tuple of Tensors; the floating ``inputs`` with
    ``requires_grad=True`` are checked against every output that requires grad.  Returns True, or raises
    :class:`GradcheckError` naming the input, the output and the worst element (returns False instead with
    ``raise_exception=False``).  ``fast_mode=True`` compares random projections ``v^T J u`` instead of whole
    Jacobians.  ``check_forward_ad`` checks Jacobian-vector products computed in forward mode (dual tensors),
    ``check_batched_forward_grad`` that ``jitgrad.func.vmap`` over those jvps gives the same tangents.

    >>> import jitgrad as jg
    >>> x = jg.randn(3, dtype=jg.float64, requires_grad=True)
    >>> jg.autograd.gradcheck(lambda t: (t * t).sin(), (x,))
    True
    """
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires check_forward_ad to be True")
    kw = dict(eps=eps, atol=atol, rtol=rtol, nondet_tol=nondet_tol, check_undefined_grad=check_undefined_grad,
              check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
              check_forward_ad=check_forward_ad, check_backward_ad=check_backward_ad, fast_mode=fast_mode,
              check_batched_forward_grad=check_batched_forward_grad)
    if not raise_exception:
        try:
            return _gradcheck_helper(func, inputs, **kw)
        except GradcheckError:
            return False
    return _gradcheck_helper(func, inputs, **kw)


def _through_host(func, inputs):
    """Device inputs (CUDA tensors): the check perturbs host copies, and ``func`` runs on the device through
    differentiable transfers, so the device's kernels and vjps are what is checked."""
    devs = [x.device if isinstance(x, Tensor) else None for x in inputs]
    if all(d is None or d.type == "cpu" for d in devs):
        return func, inputs
    host = tuple(x.detach().cpu().requires_grad_(x.requires_grad) if d is not None and d.type != "cpu" else x
                 for x, d in zip(inputs, devs))

    def on_device(*xs):
        out = func(*[x.to(d) if d is not None and isinstance(x, Tensor) else x for x, d in zip(xs, devs)])
        if isinstance(out, (tuple, list)):
            return tuple(o.cpu() if isinstance(o, Tensor) else o for o in out)
        return out.cpu() if isinstance(out, Tensor) else out
    return on_device, host


def _gradcheck_helper(func, inputs, *, eps, atol, rtol, nondet_tol, check_undefined_grad, check_grad_dtypes,
                      check_batched_grad, check_forward_ad, check_backward_ad, fast_mode, _value_fn=None,
                      check_batched_forward_grad=False):
    func, inputs = _through_host(func, _as_tuple(inputs))
    tupled_inputs = _as_tuple(inputs)
    _check_inputs(tupled_inputs)
    func_out = func(*tupled_inputs)
    tupled_out = _as_tuple(func_out)
    out_pos = [p for p, o in enumerate(tupled_out) if _is_diff(o)]
    outputs = tuple(tupled_out[p] for p in out_pos)
    c = _Ctx(func, tupled_inputs, func_out, outputs, out_pos, eps, rtol, atol, nondet_tol, check_grad_dtypes,
             _value_fn)
    (_fast_gradcheck if fast_mode else _slow_gradcheck)(c, check_forward_ad, check_backward_ad)
    if check_forward_ad and check_undefined_grad:
        undefined_tangent_check(c)
    if check_batched_forward_grad and c.outputs:
        batched_forward_check(c)
    if not check_backward_ad:
        return True
    if check_batched_grad:
        for i, o in enumerate(outputs):
            _test_batched_grad(o, i, c.diff_inputs)
    if outputs:
        _test_backward_mul_by_grad_output(outputs, c.diff_inputs)
        if check_undefined_grad:
            _test_undefined_backward_mode(outputs, c.diff_inputs, all_zero_done=True)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  gen_non_contig_grad_outputs: bool = False, raise_exception: bool = True, nondet_tol: float = 0.0,
                  check_undefined_grad: bool = True, check_grad_dtypes: bool = False,
                  check_batched_grad: bool = False, check_fwd_over_rev: bool = False,
                  check_rev_over_rev: bool = True, fast_mode: bool = False, masked: bool = False) -> bool:
    """Check second derivatives: gradcheck of ``(inputs, grad_outputs) -> autograd.grad(func(inputs), inputs,
    grad_outputs, create_graph=True)``.  ``grad_outputs`` default to random tensors (uniform in [-1, 1], the
    outputs' dtype, ``requires_grad=True``; non-contiguous with ``gen_non_contig_grad_outputs``).

    >>> import jitgrad as jg
    >>> x = jg.randn(3, dtype=jg.float64, requires_grad=True)
    >>> jg.autograd.gradgradcheck(lambda t: (t * t).sin(), (x,))
    True
    """
    if not (check_fwd_over_rev or check_rev_over_rev):
        raise AssertionError("Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_undefined_grad=True requires check_rev_over_rev to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_batched_grad=True requires check_rev_over_rev to be True")
    from ..runtime.generator import CHECK_RNG as _RNG
    func, inputs = _through_host(func, _as_tuple(inputs))
    tupled_inputs = _as_tuple(inputs)
    if grad_outputs is not None:        # the check runs on host copies (see _through_host)
        grad_outputs = tuple(g.detach().cpu().requires_grad_(g.requires_grad) if isinstance(g, Tensor) else g
                             for g in _as_tuple(grad_outputs))
    if grad_outputs is None:
        outs = _differentiable_outputs(func(*tupled_inputs))
        gos = []
        for x in outs:
            d = x._data.dtype if x.is_floating_point() else np.float64
            shape = x.shape
            if gen_non_contig_grad_outputs and x.numel() > 1:
                big = (_RNG[0].random(shape + (2,)) * 2.0 - 1.0).astype(d)
                a = big[..., 0]
            else:
                a = (_RNG[0].random(shape) * 2.0 - 1.0).astype(d)
            gos.append(Tensor._make(a, requires_grad=True))
        tupled_grad_outputs = tuple(gos)
    else:
        tupled_grad_outputs = _as_tuple(grad_outputs)
    num_outputs = len(tupled_grad_outputs)
    n_in = len(tupled_inputs)
    diff_in = {i for i, x in enumerate(tupled_inputs) if _is_diff(x)}

    def _split(args):
        input_args = tuple(x.requires_grad_() if i in diff_in and not x.requires_grad else x
                           for i, x in enumerate(args[:n_in]))
        gouts = tuple(args[n_in:n_in + num_outputs])
        return input_args, gouts

    def new_func(*args):
        input_args, gouts = _split(args)
        with grad_mode.enable_grad():
            outputs = _differentiable_outputs(func(*input_args))
            diff_args = tuple(x for i, x in enumerate(input_args) if i in diff_in)
            grads = _grad(outputs, diff_args, gouts, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    def value_fn(args):
        # the numerical part only needs the values: the same backward without building its own graph
        input_args, gouts = _split(args)
        with grad_mode.enable_grad():
            outputs = _differentiable_outputs(func(*input_args))
            diff_args = tuple(x for i, x in enumerate(input_args) if i in diff_in)
            grads = _grad(outputs, diff_args, gouts, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    kw = dict(eps=eps, atol=atol, rtol=rtol, nondet_tol=nondet_tol, check_undefined_grad=check_undefined_grad,
              check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
              check_forward_ad=check_fwd_over_rev, check_backward_ad=check_rev_over_rev, fast_mode=fast_mode,
              _value_fn=value_fn)
    all_inputs = tupled_inputs + tupled_grad_outputs
    if not raise_exception:
        try:
            return _gradcheck_helper(new_func, all_inputs, **kw)
        except GradcheckError:
            return False
    return _gradcheck_helper(new_func, all_inputs, **kw)


# ---- torch's deprecated public helpers ----------------------------------------------------------

_PRIVATE_API = ("`{}` was part of PyTorch's private API and not meant to be exposed. We are deprecating it and it "
                "will be removed in a future version of PyTorch. If you have a specific use for this or feature "
                "request for this to be a stable API, please file us an issue at "
                "https://github.com/pytorch/pytorch/issues/new")


def _deprecated(name, grad_out):
    warnings.warn(_PRIVATE_API.format(name), FutureWarning, stacklevel=3)
    if grad_out != 1.0:
        raise ValueError(f"Expected grad_out to be 1.0. {name} no longer supports values of grad_out != 1.0.")


def get_numerical_jacobian(fn, inputs, target=None, eps=1e-3, grad_out=1.0):
    """Deprecated (torch's old private API, warns): the numerical Jacobians of ``fn(inputs)`` (``fn`` takes the
    tuple of inputs) w.r.t. each input of ``target`` (default: the inputs that require grad), as tensors of shape
    (numel input, numel output) for the first output."""
    _deprecated("get_numerical_jacobian", grad_out)
    tupled = _as_tuple(inputs)

    def call(*xs):
        return fn(xs)
    out = call(*tupled)
    pos = _float_positions(out)[:1]
    c = _Ctx(call, tupled, out, (), pos, eps, 0.0, 0.0, 0.0, False, None)
    jac = _numerical_jacobian(c.evaluator(pos), eps)
    if target is not None:
        wanted = {id(t) for t in _as_tuple(target)}
        diff = [x for x in tupled if _is_diff(x)]
        jac = [j for j, x in zip(jac, diff) if id(x) in wanted]
    return tuple(Tensor._make(j[0]) for j in jac)


def get_analytical_jacobian(inputs, output, nondet_tol=0.0, grad_out=1.0):
    """Deprecated (torch's old private API, warns): (jacobians, reentrant, correct_grad_sizes,
    correct_grad_types)."""
    _deprecated("get_analytical_jacobian", grad_out)
    diff = tuple(x for x in _as_tuple(inputs) if _is_diff(x))
    check = [True, True]
    j1 = _analytical_rows(output, diff, check)
    j2 = _analytical_rows(output, diff, [True, True])
    try:
        _check_reentrant(j1, j2, nondet_tol)
        reentrant = True
    except GradcheckError:
        reentrant = False
    return tuple(Tensor._make(j) for j in j1), reentrant, check[0], check[1]
