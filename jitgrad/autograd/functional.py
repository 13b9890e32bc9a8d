"""``jitgrad.autograd.functional``: vjp, jvp, jacobian, hessian, vhp, hvp with torch's signatures and results.

``vjp``, ``vhp`` and reverse-mode ``jacobian``/``hessian`` are built on ``autograd.grad``.  ``jvp`` uses the
double-vjp trick as torch's does (the vjp ``u -> J^T u`` is linear in ``u``, so differentiating ``<J^T u, v>``
with respect to ``u`` gives ``J v``; its ``strict`` checks are torch's), ``hvp`` is forward over reverse (the
jvp of the gradient, in forward mode) unless ``strict``, and ``strategy="forward-mode"`` /
``outer_jacobian_strategy="forward-mode"`` use forward mode (dual tensors, batched by ``jitgrad.func.vmap``).  Return structures follow torch exactly: a single Tensor where the user passed/returned
one, tuples (nested for jacobian/hessian: ``[output][input]``) otherwise.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS
from ..runtime import grad_mode
from ..runtime.dispatch import bind
from ..runtime.dual import DUALS
from ..runtime.backward.engine import grad as _grad
from ..runtime.tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


# ---- helpers (torch.autograd.functional's, same names and messages) ----------------------------

def _as_tuple(inp, arg_name=None, fn_name=None):
    if arg_name is None and fn_name is None:
        if isinstance(inp, tuple):
            return inp
        if isinstance(inp, list):
            return tuple(inp)
        return (inp,)
    is_inp_tuple = True
    if not isinstance(inp, tuple):
        inp = (inp,)
        is_inp_tuple = False
    for i, el in enumerate(inp):
        if not isinstance(el, Tensor):
            if is_inp_tuple:
                raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors but "
                                f"the value at index {i} has type {type(el)}.")
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors but the "
                            f"given {arg_name} has type {type(el)}.")
    return is_inp_tuple, inp


def _tuple_postprocess(res, to_unpack):
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _grad_preprocess(inputs, create_graph, need_graph):
    """Fresh tensor objects (so inputs given as arguments differ from the same tensors captured by ``func``):
    a differentiable view when the graph must reach back to them, else a detached alias."""
    res = []
    for inp in inputs:
        if create_graph and inp.requires_grad:
            with grad_mode.enable_grad():
                res.append(bind(OPS["reshape"], inp, shape=inp.shape))
        else:
            res.append(inp.detach().requires_grad_(need_graph))
    return tuple(res)


def _grad_postprocess(inputs, create_graph):
    if len(inputs) and isinstance(inputs[0], Tensor):
        if not create_graph:
            return tuple(inp.detach() for inp in inputs)
        return inputs
    return tuple(_grad_postprocess(inp, create_graph) for inp in inputs)


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for idx, (el_v, el_other) in enumerate(zip(v, other)):
        if el_v.size() != el_other.size():
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise RuntimeError(f"{prepend}v has invalid size: should be {_size(el_other)} but got {_size(el_v)}.")


def _size(t):
    return str(t.shape)         # a jitgrad.Size


def _check_requires_grad(inputs, input_type, strict):
    if not strict:
        return
    for i, inp in enumerate(inputs):
        if inp is None:
            raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode.")
        if not inp.requires_grad:
            if input_type == "hessian":
                raise RuntimeError(f"The hessian of the user-provided function with respect to input {i} is "
                                   "independent of the input. This is not allowed in strict mode. You should ensure "
                                   "that your function is thrice differentiable and that the hessian depends on the "
                                   "inputs.")
            if input_type == "jacobian":
                raise RuntimeError("While computing the hessian, found that the jacobian of the user-provided "
                                   f"function with respect to input {i} is independent of the input. This is not "
                                   "allowed in strict mode. You should ensure that your function is twice "
                                   "differentiable and that the jacobian depends on the inputs (this would be "
                                   "violated by a linear function for example).")
            if input_type == "grad_inputs":
                raise RuntimeError(f"The gradient with respect to input {i} is independent of the inputs of the "
                                   "user-provided function. This is not allowed in strict mode.")
            raise RuntimeError(f"Output {i} of the user-provided function does not require gradients. The outputs "
                               "must be computed in a differentiable manner from the input when running in strict "
                               "mode.")


def _autograd_grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """autograd.grad that skips outputs which do not require grad (None for every input if none does)."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    new_outputs, new_grad_outputs = [], []
    for out, g in zip(outputs, grad_outputs):
        if out is not None and out.requires_grad:
            new_outputs.append(out)
            new_grad_outputs.append(g)
    if not new_outputs:
        return (None,) * len(inputs)
    return _grad(tuple(new_outputs), inputs, tuple(new_grad_outputs), allow_unused=True, create_graph=create_graph,
                 retain_graph=retain_graph)


def _zeros_like(t, requires_grad=False):
    z = Tensor._make(np.zeros(t.shape, t._data.dtype))
    if requires_grad:
        z.requires_grad_(True)
    return z


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    res = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                if stage == "back":
                    raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This "
                                       "is not allowed in strict mode.")
                if stage == "back_trick":
                    raise RuntimeError(f"The gradient with respect to the input is independent of entry {i} in the "
                                       "grad_outputs when using the double backward trick to compute forward mode "
                                       "gradients. This is not allowed in strict mode.")
                if stage == "double_back":
                    raise RuntimeError(f"The jacobian of the user-provided function is independent of input {i}. "
                                       "This is not allowed in strict mode.")
                raise RuntimeError(f"The hessian of the user-provided function is independent of entry {i} in the "
                                   "grad_jacobian. This is not allowed in strict mode as it prevents from using the "
                                   "double backward trick to replace forward mode AD.")
            g = _zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            if "double" not in stage:
                raise RuntimeError(f"The jacobian of the user-provided function is independent of input {i}. This is "
                                   "not allowed in strict mode when create_graph=True.")
            raise RuntimeError(f"The hessian of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode when create_graph=True.")
        res.append(g)
    return tuple(res)


def _v_or_scalar(v, ref, is_ref_tuple, fn, create_graph, what):
    if v is not None:
        _, v = _as_tuple(v, "v", fn)
        v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
        _validate_v(v, ref, is_ref_tuple)
        return v
    if len(ref) != 1 or ref[0].nelement() != 1:
        raise RuntimeError(what)
    return None


_V_NONE_INPUT = ("The vector v can only be None if the input to the user-provided function is a single Tensor with a "
                 "single element.")


def _single_scalar_output(outputs, is_outputs_tuple, fn):
    if is_outputs_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {fn} should return a single Tensor")
    if outputs[0].nelement() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn} should contain a single element")


# ---- public functions ----------------------------------------------------------------------------

def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    >>> import jitgrad as jg
    >>> out, g = jg.autograd.functional.vjp(lambda x: x * x, jg.tensor([1., 2.]), jg.tensor([1., 1.]))
    >>> g
    tensor([2., 4.])
    """
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "vjp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        v = _v_or_scalar(v, outputs, is_outputs_tuple, "vjp", create_graph,
                         "The vector v can only be None if the user-provided function returns a single Tensor with "
                         "a single element.")
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(outputs, inputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "back")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product, by the double-vjp trick.

    >>> import jitgrad as jg
    >>> out, t = jg.autograd.functional.jvp(lambda x: x * x, jg.tensor([1., 2.]), jg.tensor([1., 0.]))
    >>> t
    tensor([2., 0.])
    """
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        v = _v_or_scalar(v, inputs, is_inputs_tuple, "jvp", create_graph, _V_NONE_INPUT)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jvp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        # the backward is linear in grad_outputs, so their value does not matter (zeros: no inf/nan)
        grad_outputs = tuple(_zeros_like(out, requires_grad=out.is_floating_point()) for out in outputs)
        grad_inputs = _autograd_grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict=strict)
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(grad_inputs, grad_outputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, outputs, strict, create_graph, "back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_outputs_tuple)


def _construct_standard_basis_for(tensors, tensor_numels):
    """torch's helper: for tensors with numels (n_1, ..., n_k), N = sum n_i, the N x N identity cut into column
    blocks, block i of shape (N, n_i) with tensor i's dtype and device (the grad_outputs of a batched jacobian)."""
    from ..library.creation.factories import zeros
    total = sum(tensor_numels)
    out, start = [], 0
    for t, n in zip(tensors, tensor_numels):
        a = np.zeros((total, n), t._data.dtype)
        a[np.arange(start, start + n), np.arange(n)] = 1
        b = zeros(total, n, dtype=t.dtype)
        b._data[...] = a
        out.append(t._same_device(b))
        start += n
    return tuple(out)


def _one_hot(out, j):
    g = np.zeros(out.numel(), out._data.dtype)
    g[j] = 1
    return Tensor._make(g.reshape(out.shape))


def _stack_rows(rows, shape, dtype):
    """Rows of a Jacobian (one per output element) -> one tensor of ``shape`` (zeros when there are none)."""
    if not rows:
        return Tensor._make(np.zeros(shape, dtype.np))
    if not any(r.requires_grad for r in rows):
        return Tensor._make(np.stack([r._data for r in rows]).reshape(shape))
    if len(rows) == 1:
        return rows[0].reshape(shape)
    from ..library.elementary import stack
    return stack(rows, 0).reshape(shape)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: a Tensor of shape ``out.shape + in.shape``, or tuples of them
    (``[output][input]``) when ``func`` returns / ``inputs`` is a tuple.  ``vectorize`` changes nothing but the
    argument checks (there is no vmap: rows are computed one backward at a time); ``strategy="forward-mode"``
    (requires ``vectorize=True``, as in torch) builds columns in forward mode (jvps batched by ``func.vmap``).

    >>> import jitgrad as jg
    >>> jg.autograd.functional.jacobian(lambda x: x * x, jg.tensor([1., 2.]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                             'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                             'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError("jitgrad.autograd.functional.jacobian: `create_graph=True` and "
                                      '`strategy="forward-mode"` are not supported together (yet). Please either set '
                                      '`create_graph=False` or `strategy="reverse-mode"`.')
        return _jacfwd(func, inputs, strict, vectorize)

    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jacobian")
        _check_requires_grad(outputs, "outputs", strict=strict)
        if vectorize and strict:
            raise RuntimeError("jitgrad.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                               "supported together. Please either set `strict=False` or `vectorize=False`.")
        jac = []
        for i, out in enumerate(outputs):
            rows = tuple([] for _ in inputs)
            for j in range(out.nelement()):
                vj = _autograd_grad((out,), inputs, (_one_hot(out, j),), retain_graph=True,
                                    create_graph=create_graph)
                for el_idx, (rows_el, vj_el, inp_el) in enumerate(zip(rows, vj, inputs)):
                    if vj_el is not None:
                        if strict and create_graph and not vj_el.requires_grad:
                            raise RuntimeError(f"The jacobian of the user-provided function is independent of input "
                                               f"{i}. This is not allowed in strict mode when create_graph=True.")
                        rows_el.append(vj_el)
                    else:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is independent of input "
                                               f"{el_idx}. This is not allowed in strict mode.")
                        rows_el.append(_zeros_like(inp_el))
            jac.append(tuple(_stack_rows(rows_el, out.shape + inputs[el_idx].shape, inputs[el_idx].dtype)
                             for el_idx, rows_el in enumerate(rows)))
        jac = _grad_postprocess(tuple(jac), create_graph)
        return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def _jacfwd(func, inputs, strict=False, vectorize=False):
    if strict:
        raise RuntimeError('jitgrad.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not '
                           'supported together (yet). Please either set `strict=False` or '
                           '`strategy="reverse-mode"`.')
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    if not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
                                  "implemented for `vectorize=True`.")
    # forward mode, one jvp per input element batched by jitgrad.func.vmap (torch: vmap over forward AD)
    from ..func import jvp as _fwd_jvp, vmap
    inputs = tuple(x.detach() for x in inputs)
    out = func(*inputs)
    is_outputs_tuple, outputs = _as_tuple(out, "outputs")
    jac = [[None] * len(inputs) for _ in outputs]
    for k, inp in enumerate(inputs):
        n = inp.numel()
        basis = Tensor._make(np.eye(n, dtype=inp._data.dtype).reshape((n,) + tuple(inp.shape))) if n else None

        def push(t, k=k):
            ts = tuple(t if j == k else _zeros_like(x) for j, x in enumerate(inputs))
            r = _fwd_jvp(lambda *xs: _as_tuple(func(*xs)), inputs, ts)[1]
            return tuple(r)
        cols = vmap(push)(basis) if n else None
        for o, out_o in enumerate(outputs):
            if cols is None:
                c = np.zeros((0,) + tuple(out_o.shape), out_o._data.dtype)
            else:
                c = cols[o].detach()._data
                if c.shape != (n,) + tuple(out_o.shape):    # not batched: the same (zero) column for every element
                    c = np.broadcast_to(c, (n,) + tuple(out_o.shape))
            # columns are (input element, output element...): move the input dims last
            m = out_o.numel()
            jac[o][k] = Tensor._make(np.ascontiguousarray(c.reshape(n, m).T).reshape(tuple(out_o.shape) +
                                                                                     tuple(inp.shape)))
    # lists, not tuples: torch's forward-mode jacobian returns them so
    return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar ``func``: shape ``in.shape + in.shape``, or a tuple of tuples
    (``[input_i][input_j]``) for several inputs.

    >>> import jitgrad as jg
    >>> jg.autograd.functional.hessian(lambda x: (x ** 3).sum(), jg.tensor([1., 2.]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def ensure_single_output_function(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(t_out, "outputs", strict=strict)
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.nelement() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should contain a single element")
        return out.squeeze()

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(ensure_single_output_function, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
        return jac

    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))


def _gradient_of_scalar(func, inputs, v, create_graph, strict, name):
    """vhp/hvp's shared first half (call under enable_grad): checked inputs and ``v``, the scalar output, and its
    gradient with a graph (so it can be differentiated again)."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", name)
    inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
    v = _v_or_scalar(v, inputs, is_inputs_tuple, name, create_graph, _V_NONE_INPUT)
    outputs = func(*inputs)
    is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", name)
    _check_requires_grad(outputs, "outputs", strict=strict)
    _single_scalar_output(outputs, is_outputs_tuple, name)
    jac = _autograd_grad(outputs, inputs, create_graph=True)
    _check_requires_grad(jac, "jacobian", strict=strict)
    return is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` for a scalar ``func``.

    >>> import jitgrad as jg
    >>> out, r = jg.autograd.functional.vhp(lambda x: (x ** 3).sum(), jg.tensor([1., 2.]), jg.tensor([1., 1.]))
    >>> r
    tensor([ 6., 12.])
    """
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _gradient_of_scalar(
            func, inputs, v, create_graph, strict, "vhp")
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(jac, inputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


def _hvp_forward_over_reverse(func, inputs, v, create_graph):
    """hvp as the forward-mode jvp of the gradient: one forward and one backward pass, each carrying tangents."""
    from ..func import jvp as _fwd_jvp
    is_inputs_tuple, tup = _as_tuple(inputs, "inputs", "hvp")
    v = _v_or_scalar(v, tup, is_inputs_tuple, "hvp", create_graph, _V_NONE_INPUT)
    if v is None:       # a single-element input: v is one (torch)
        v = (_zeros_like(tup[0]) + 1,)
    box = {}

    def gradient(*xs):
        with grad_mode.enable_grad():
            # fresh leaves that keep the tangents hvp's jvp gave the arguments
            xs = tuple(DUALS.carry(x, p) for x, p in zip(xs, _grad_preprocess(xs, create_graph=create_graph,
                                                                               need_graph=True)))
            outputs = func(*xs)
            is_outputs_tuple, outs = _as_tuple(outputs, "outputs of the user-provided function", "hvp")
            _single_scalar_output(outs, is_outputs_tuple, "hvp")
            jac = _autograd_grad(outs, xs, create_graph=True)
        box["out"] = (is_outputs_tuple, outs)
        return tuple(j if j is not None else _zeros_like(x) for j, x in zip(jac, xs))
    _, res = _fwd_jvp(gradient, tuple(tup), tuple(v))
    is_outputs_tuple, outputs = box["out"]
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(tuple(res), create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a scalar ``func``: forward over reverse (with ``strict``, torch's double-vjp
    trick on top of vhp's double backward, whose checks ``strict`` makes).

    >>> import jitgrad as jg
    >>> out, r = jg.autograd.functional.hvp(lambda x: (x ** 3).sum(), jg.tensor([1., 2.]), jg.tensor([1., 1.]))
    >>> r
    tensor([ 6., 12.])
    """
    if not strict:
        return _hvp_forward_over_reverse(func, inputs, v, create_graph)
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _gradient_of_scalar(
            func, inputs, v, create_graph, strict, "hvp")
        grad_jac = tuple(_zeros_like(inp, requires_grad=True) for inp in inputs)
        double_back = _autograd_grad(jac, inputs, grad_jac, create_graph=True)
        _check_requires_grad(jac, "hessian", strict=strict)
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(double_back, grad_jac, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)
