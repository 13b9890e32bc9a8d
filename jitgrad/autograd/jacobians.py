"""The Jacobians gradcheck compares: central differences on float64 copies of the inputs (column by column,
under no_grad where the function allows), and reverse mode (one ``autograd.grad`` per output element on a
single forward, with a reentrancy re-check), plus the helpers that format a mismatch."""
from __future__ import annotations

import numpy as np

from ..runtime import grad_mode
from ..runtime.dual import DUALS
from ..runtime.backward.engine import grad as _grad
from ..runtime.tensor import Tensor

# torch.Generator()'s default seed: fast mode draws its random vectors from a private generator, never from
# the user's RNG stream.
_FAST_SEED = 67280421310721

FAILED_NONDET_MSG = """

NOTE: If your op relies on non-deterministic operations i.e., it is listed here:
https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html
this failure might be expected.

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck.
If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `nondet_tol=<tol>` as a keyword argument.
"""


class GradcheckError(RuntimeError):
    """Raised by gradcheck / gradgradcheck when the numerical and analytical gradients disagree."""


# ---- small helpers -------------------------------------------------------------------------------

def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _is_diff(x) -> bool:
    return isinstance(x, Tensor) and x.requires_grad


def _differentiable_outputs(x):
    return tuple(o for o in _as_tuple(x) if _is_diff(o))


def _arr(t) -> np.ndarray:
    return t._data if isinstance(t, Tensor) else np.asarray(t)


def _fmt(a: np.ndarray) -> str:
    """torch-style ``tensor(...)`` text of a Jacobian (summarised when large)."""
    from ..library.tensor_info.printing import tensor_repr
    return tensor_repr(Tensor._make(np.asarray(a)))


def _allclose(a: np.ndarray, n: np.ndarray, rtol: float, atol: float) -> bool:
    """torch.allclose(analytical, numerical): |a - n| <= atol + rtol * |n|, NaN never close."""
    if a.size == 0:
        return True
    return bool(np.all(np.abs(a - n) <= atol + rtol * np.abs(n)))


def _worst(a: np.ndarray, n: np.ndarray, rtol: float, atol: float):
    """(flat index, excess) of the element that violates the tolerance the most (NaN counts as worst)."""
    excess = np.abs(a - n) - (atol + rtol * np.abs(n))
    excess = np.where(np.isnan(excess), np.inf, excess)
    k = int(np.argmax(excess))
    return k, float(excess.reshape(-1)[k])


def _elem(shape, k) -> str:
    if not shape:
        return "()"
    return "(" + ", ".join(str(int(i)) for i in np.unravel_index(k, shape)) + ("," if len(shape) == 1 else "") + ")"


def _notallclose_msg(a, n, out_idx, in_idx, rtol, atol, in_shape=None, out_shape=None, in_pos=None,
                     forward=False, matrices=True) -> str:
    mode = "computed with forward mode " if forward else ""
    msg = f"Jacobian {mode}mismatch for output {out_idx:d} with respect to input {in_idx:d},\n"
    if matrices:
        msg += f"numerical:{_fmt(n)}\nanalytical:{_fmt(a)}\n"
    if a.ndim == 2 and a.size:
        k, _ = _worst(a, n, rtol, atol)
        r, c = divmod(k, a.shape[1])
        nv, av = float(n[r, c]), float(a[r, c])
        where = f"row {r}, column {c}"
        if in_shape is not None and out_shape is not None:
            where += f": input {in_idx} element {_elem(in_shape, r)}, output {out_idx} element {_elem(out_shape, c)}"
        arg = f" (argument {in_pos} of func)" if in_pos is not None and in_pos != in_idx else ""
        msg += (f"The worst element is at {where}{arg}: numerical {nv!r} vs analytical {av!r} "
                f"(|difference| {abs(nv - av):.6g}, allowed atol + rtol * |numerical| = "
                f"{atol + rtol * abs(nv):.6g}).\n")
    return msg


# ---- numerical evaluation ------------------------------------------------------------------------

class _Evaluator:
    """Evaluates ``func`` on the inputs' values, which the numerical differentiation perturbs in place: the
    inputs' own memory when it is already in the evaluation dtype and contiguous (as torch), else copies.

    ``positions`` picks which entries of the returned tuple are compared.  The mode (float64 copies or the
    inputs' own dtype; no_grad or grad mode) is the first that runs and returns the same output structure as
    the reference call.
    """

    def __init__(self, func, inputs, diff_pos, positions, ref_shapes, value_fn=None):
        self.func = func
        self.inputs = inputs
        self.diff_pos = diff_pos
        self.positions = positions
        self.value_fn = value_fn
        self.ref_shapes = ref_shapes
        first_error = None
        native = all(inputs[i]._data.dtype == np.float64 for i in diff_pos)
        modes = [(f64, grad) for f64 in ((True,) if native else (True, False))
                 for grad in ((True,) if value_fn is not None else (False, True))]
        if len(modes) == 1:    # nothing to choose: errors surface from the first real evaluation
            self._setup(*modes[0])
            return
        for f64, grad in modes:
            self._setup(f64, grad)
            try:
                vals = self()
            except Exception as e:  # noqa: BLE001 - try the next mode; re-raised below if none works
                first_error = first_error or e
                continue
            if len(vals) == len(ref_shapes) and all(v.shape == s for v, s in zip(vals, ref_shapes)):
                return
        if first_error is not None:
            raise first_error
        raise GradcheckError("gradcheck: the function returns outputs of different shapes for the same inputs")

    def _setup(self, f64: bool, grad: bool):
        self.grad = grad
        args = list(self.inputs)
        flats = {}
        memo = {}
        for i in self.diff_pos:
            x = self.inputs[i]
            c = memo.get(id(x))
            if c is None:
                a = x._data
                if type(a) is np.ndarray and a.flags.c_contiguous and a.flags.writeable and (
                        a.dtype == np.float64 or not f64) and (x.requires_grad or not grad):
                    # the input itself, as torch evaluates it: a function that reads it through a closure (not
                    # its argument) sees the perturbation, and its gradient, too; each entry is restored after use
                    c = memo[id(x)] = x
                else:
                    a = np.array(a, dtype=np.float64 if f64 else a.dtype, order="C", copy=True)
                    c = memo[id(x)] = Tensor._make(a, requires_grad=grad)
            args[i] = c
            flats[i] = c._data.reshape(-1)
        self.args = tuple(args)
        self.flats = flats

    def __call__(self):
        if self.value_fn is not None:
            out = self.value_fn(self.args)
        elif self.grad:
            out = self.func(*self.args)
        else:
            prev = grad_mode.STATE.grad_enabled
            grad_mode.STATE.grad_enabled = False
            try:
                out = self.func(*self.args)
            finally:
                grad_mode.STATE.grad_enabled = prev
        out = _as_tuple(out)
        return [_arr(out[p]) for p in self.positions]


class PerturbedOutputError(GradcheckError, AssertionError):
    """``func``'s outputs change shape or dtype when an input is perturbed (torch raises an AssertionError)."""


def _check_same(a, b, eps, idx=None):
    if a.shape != b.shape or a.dtype != b.dtype:
        on_index = f"on index {idx} " if idx is not None else ""
        what = "shape" if a.shape != b.shape else "dtype"
        raise PerturbedOutputError(f"Expected `func` to return outputs with the same {what} when inputs are "
                                   f"perturbed {on_index}by {eps}, but got: {what}s "
                                   f"{a.shape if what == 'shape' else a.dtype} and "
                                   f"{b.shape if what == 'shape' else b.dtype}.")


def _numerical_jacobian(ev: _Evaluator, eps: float, which=None):
    """``J[k][o]``: (numel of diff input k) x (numel of output o), central differences, float64."""
    res = []
    two_eps = 2.0 * eps
    for k, i in enumerate(ev.diff_pos):
        if which is not None and k != which:
            res.append(None)
            continue
        flat = ev.flats[i]
        n = flat.size
        cols = None
        for j in range(n):
            orig = flat[j]
            try:            # the input itself may be perturbed (see _Evaluator): restored whatever happens
                flat[j] = orig - eps
                raw = ev()
                a = [np.array(v, dtype=np.float64).reshape(-1) for v in raw]
                flat[j] = orig + eps
                b = [np.array(v) for v in ev()]     # copies: an output may be a view of the input
            finally:
                flat[j] = orig
            for av, bv in zip(raw, b):
                if av.dtype != bv.dtype:
                    _check_same(av.reshape(-1), bv.reshape(-1), eps, j)
            if len(b) != len(a):
                raise GradcheckError(f"Expected `func` to return the same number of outputs when inputs are perturbed "
                                     f"on index {j} by {eps}, but got {len(a)} and {len(b)}.")
            if cols is None:
                cols = [np.empty((n, v.size)) for v in a]
            for o, (col, bv) in enumerate(zip(cols, b)):
                if bv.size != col.shape[1]:
                    _check_same(a[o].reshape(-1), bv.reshape(-1), eps, j)
                np.subtract(bv.reshape(-1), a[o], out=col[j])
        if cols is None:
            cols = [np.empty((0, int(np.prod(s)))) for s in ev.ref_shapes]
        for col in cols:
            col /= two_eps
        res.append(cols)
    return res


def _numerical_jvp(ev: _Evaluator, k: int, u: np.ndarray, eps: float):
    """(f(x + eps u) - f(x - eps u)) / (2 eps) for diff input k, one flat array per output."""
    flat = ev.flats[ev.diff_pos[k]]
    orig = flat.copy()
    d = (u * eps).astype(flat.dtype)
    try:                # the input itself may be perturbed (see _Evaluator): restored whatever happens
        np.subtract(orig, d, out=flat)
        raw = ev()
        a = [np.array(v, dtype=np.float64).reshape(-1) for v in raw]
        np.add(orig, d, out=flat)
        b = [np.array(v) for v in ev()]     # copies: an output may be a view of the input
    finally:
        flat[...] = orig
    out = []
    for av, rv, bv in zip(a, raw, b):
        if rv.dtype != bv.dtype:
            _check_same(rv.reshape(-1), bv.reshape(-1), eps)
        if av.size != bv.size:
            _check_same(av, bv.reshape(-1), eps)
        out.append((bv.reshape(-1) - av) / (2.0 * eps))
    return out


# ---- analytical ----------------------------------------------------------------------------------

def _vjp(output, diff_inputs, g):
    return _grad((output,), diff_inputs, (g,), retain_graph=True, allow_unused=True)


def _analytical_rows(output, diff_inputs, check, only=None):
    """``A[k]``: (numel input k) x (numel output) from one backward per output element (only the rows in ``only``
    when given; the others stay zero).  ``check`` collects (sizes_ok, types_ok)."""
    n_o = output.numel()
    rows = [np.zeros((n_o, x.numel())) for x in diff_inputs]
    odt = output._data.dtype
    shape = output.shape
    for j in (range(n_o) if only is None else only):
        g = np.zeros(n_o, odt)
        g[j] = 1
        grads = _vjp(output, diff_inputs, Tensor._make(g.reshape(shape)))
        for k, (gi, x) in enumerate(zip(grads, diff_inputs)):
            if gi is None:
                continue
            if gi.shape != x.shape:
                check[0] = False
                continue
            if gi.dtype is not x.dtype:
                check[1] = False
            rows[k][j] = gi._data.reshape(-1)
    return [r.T for r in rows]


# Reentrancy: torch recomputes every row.  Rows are recomputed here too when there are few of them or a
# nondeterminism tolerance is given; otherwise an evenly spaced sample of _REENTRANT_ROWS rows (first and last
# included) is recomputed, which catches a backward that depends on state changed by a previous call while
# keeping gradgradcheck's analytical part from doubling.
_REENTRANT_ROWS = 64


def _recheck_rows(n_o, nondet_tol):
    if n_o <= _REENTRANT_ROWS or nondet_tol > 0:
        return None
    return sorted(set(np.linspace(0, n_o - 1, _REENTRANT_ROWS).round().astype(int).tolist()))


def _check_reentrant(j1, j2, nondet_tol, cols=None):
    for a, b in zip(j1, j2):
        if cols is not None:
            a, b = a[:, cols], b[:, cols]
        if a.size and not (np.abs(a - b).max() <= nondet_tol):
            raise GradcheckError(
                "Backward is not reentrant, i.e., running backward with same input and grad_output multiple times "
                "gives different values, although analytical gradient matches numerical gradient."
                f"The tolerance for nondeterminism was {nondet_tol}." + FAILED_NONDET_MSG)


def _check_attrs(check, check_grad_dtypes):
    if not check[1] and check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch")
    if not check[0]:
        raise GradcheckError("Analytical gradient has incorrect size")


def _analytical_jacobian(output, diff_inputs, nondet_tol, check_grad_dtypes):
    check = [True, True]
    j1 = _analytical_rows(output, diff_inputs, check)
    again = _recheck_rows(output.numel(), nondet_tol)
    j2 = _analytical_rows(output, diff_inputs, [True, True], again)
    _check_attrs(check, check_grad_dtypes)
    _check_reentrant(j1, j2, nondet_tol, again)
    return j1


def _analytical_vJ(output, diff_inputs, v, nondet_tol, check_grad_dtypes):
    """v^T J for each diff input (flat float64), computed twice for the reentrancy check."""
    res = []
    check = [True, True]
    g = Tensor._make(v.astype(output._data.dtype).reshape(output.shape))
    for _ in range(2):
        grads = _vjp(output, diff_inputs, g)
        vj = []
        for gi, x in zip(grads, diff_inputs):
            if gi is None:
                vj.append(np.zeros(x.numel()))
            elif gi.shape != x.shape:
                check[0] = False
                vj.append(np.zeros(x.numel()))
            else:
                if gi.dtype is not x.dtype:
                    check[1] = False
                vj.append(np.array(gi._data, dtype=np.float64).reshape(-1))
        res.append(vj)
    _check_attrs(check, check_grad_dtypes)
    _check_reentrant(res[0], res[1], nondet_tol)
    return res[0]


def forward_tangents(func, inputs, diff_pos, out_pos, tangents, zero_tangents=True):
    """The tangents of ``func``'s outputs ``out_pos`` (flat float64 arrays) at ``inputs`` for the tangents of the
    inputs ``diff_pos`` (flat arrays, or None for zero), in forward mode: ``func`` runs once on dual tensors.  As
    torch's gradcheck, every input of ``diff_pos`` is dual, a None one with a zero tangent (``zero_tangents``;
    otherwise it carries none)."""
    level = DUALS.enter()
    try:
        args = list(inputs)
        for i, t in zip(diff_pos, tangents):
            if t is None:
                if not zero_tangents:
                    continue
                t = np.zeros(inputs[i].numel())
            x = inputs[i]
            with DUALS.hidden():
                d = x.view_as(x)
            level.set(d, Tensor._make(np.asarray(t, x._data.dtype).reshape(x.shape)))
            args[i] = d
        out = _as_tuple(func(*args))
        res = []
        for p in out_pos:
            t = level.get(out[p])
            res.append(np.zeros(out[p].numel()) if t is None else t.detach()._data.astype(np.float64).reshape(-1))
    finally:
        DUALS.exit(level)
    return res


def _forward_columns(func, inputs, diff_pos, out_pos, which_input=None):
    """Forward-mode Jacobians, one jvp per input element.  ``F[k][o]``: (numel input k) x (numel output o)."""
    res = []
    for k, i in enumerate(diff_pos):
        if which_input is not None and k != which_input:
            res.append(None)
            continue
        x = inputs[i]
        n = x.numel()
        cols = None
        for j in range(n):
            e = np.zeros(n)
            e[j] = 1
            ts = [None] * len(diff_pos)
            ts[k] = e
            outs = forward_tangents(func, inputs, diff_pos, out_pos, ts)
            if cols is None:
                cols = [np.zeros((n, o.size)) for o in outs]
            for o, c in enumerate(outs):
                cols[o][j] = c
        if cols is None:
            outs = _as_tuple(func(*inputs))
            cols = [np.zeros((0, outs[p].numel())) for p in out_pos]
        res.append(cols)
    return res
