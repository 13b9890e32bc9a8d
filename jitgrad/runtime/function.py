"""Custom autograd Functions (``jg.autograd.Function``) with torch's full ctx API."""
from __future__ import annotations

import warnings
import weakref
import copy

import numpy as np

from . import anomaly, forward_state, grad_mode, saved_hooks
from .node import Node, zeros_for
from .saved_output import save_outputs_without_history, unpack_output
from .dual import output_kinds
from .source import user_loc, user_stack
from .dispatch import refresh_view
from .tensor import Tensor
from ..tracer import STATE as _TR

_FWD = forward_state.STATE


class FunctionCtx:
    """The ``ctx`` passed to forward/backward: save_for_backward, saved_tensors, mark_dirty,
    mark_non_differentiable, needs_input_grad, set_materialize_grads, and any attribute you set."""

    def __init__(self):
        self._saved = None
        self._saved_versions = None
        self._dirty = ()
        self._non_diff = ()
        self.materialize_grads = True
        self.needs_input_grad = ()
        self._freed = False
        self._node_ref = None      # a weak reference: the node owns the ctx, not the other way round
        self._packed = None
        self._clear_on_access = False     # the Function's clear_saved_tensors_on_access
        self._accessed = False
        self._in_jvp = False
        self._forward_outputs = None    # () when applied under a dual level: then _output_kinds (runtime/dual.py)
        # {position in saved: (output number, weak ref to its grad_fn or None when that is the node)} for saved
        # tensors that are outputs, kept without their history (saved_output.save_outputs_without_history)
        self._saved_outputs = None

    @property
    def _node(self):
        r = self._node_ref
        return None if r is None else r()

    @_node.setter
    def _node(self, node):
        self._node_ref = None if node is None else weakref.ref(node)

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument is of type "
                                f"{type(t).__name__}")
        self._saved = tensors

    def save_for_forward(self, *tensors):
        self._saved_forward = tensors

    def mark_dirty(self, *args):
        self._dirty = args

    def mark_non_differentiable(self, *args):
        self._non_diff = args

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        if self._in_jvp:       # the Function's jvp reads what save_for_forward kept
            return tuple(getattr(self, "_saved_forward", ()))
        if self._clear_on_access:
            # clear_saved_tensors_on_access = True on the Function: the values are handed over once, and the
            # ctx keeps no reference (backward can free them early), as torch
            if self._accessed:
                raise RuntimeError("saved_tensors can only be accessed once when clear_saved_tensors_on_access=True "
                                   "is set on the autograd.Function. Either access saved_tensors only once, or set "
                                   "clear_saved_tensors_on_access=False.")
            out = self._read_saved()
            self._accessed = True
            self._saved = self._packed = None
            return out
        return self._read_saved()

    def _read_saved(self):
        if self._freed or (self._node_ref is not None and self._node_ref() is None):
            # freed by backward, or its graph is gone (a ctx kept past its node's life): torch's error
            from .saved_access import FREED_MSG
            raise RuntimeError(FREED_MSG)
        if self._saved is None:
            return ()
        if self._packed is not None:        # saved through saved_tensors_hooks: unpacked at each access
            from .saved_hooks import unpack
            return tuple(None if p is None else unpack(p) for p in self._packed)
        if self._saved_versions is not None:
            for i, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
                if t is not None and t._vc[0] != v:
                    name = self._node.name() if self._node is not None else "a custom Function"
                    raise RuntimeError(
                        "one of the variables needed for gradient computation has been modified by an inplace "
                        f"operation: [jitgrad.{t.dtype.name} {list(t.shape)}], which is saved tensor {i} of {name}, "
                        f"is at version {t._vc[0]}; expected version {v} instead. Hint: enable anomaly detection to "
                        "find the operation that failed to compute its gradient, with "
                        "jitgrad.autograd.set_detect_anomaly(True).")
        if self._saved_outputs:
            return self._unpack_outputs()
        return self._saved

    def _unpack_outputs(self):
        """The saved tensors with the outputs among them unpacked as torch does: new tensors whose grad_fn is
        the output's when it was saved (a view rebased by mark_dirty), else this Function's node."""
        node = self._node
        saved = list(self._saved)
        for i, (nr, ref) in self._saved_outputs.items():
            gf = ref() if ref is not None else None
            if gf is None:
                gf = node
            if saved[i] is not None and gf is not None:
                saved[i] = unpack_output(saved[i], gf, nr)
        return tuple(saved)

    @property
    def saved_variables(self):
        """Deprecated name of ``saved_tensors`` (warns, as torch)."""
        warnings.warn("'saved_variables' is deprecated; use 'saved_tensors'", DeprecationWarning, stacklevel=2)
        return self.saved_tensors


class _FnOp:
    """Stands in for an OpDef on a custom Function's node."""

    saves_in = saves_out = ()

    def __init__(self, cls):
        self.name = cls.__name__
        self.grad_name = cls.__name__ + "Backward"
        self.cls = cls


class BackwardCFunction(Node):
    """The grad_fn of a custom Function's outputs: calls ``cls.backward(ctx, *grads)``."""

    __slots__ = ("ctx", "input_meta", "non_diff_outputs")

    def apply(self, grads):
        ctx = self.ctx
        if self.non_diff_outputs and not getattr(ctx, "_materialize_non_diff_grads", True):
            grads = list(grads)
            for k in self.non_diff_outputs:     # torch: no zeros made up for outputs marked non-differentiable
                grads[k] = None
        if ctx._freed:
            if ctx._saved:
                from .saved_access import FREED_MSG
                raise RuntimeError(FREED_MSG)
        res = _user_backward(self.op.cls)(ctx, *grads)
        return _checked_grads(self.name(), res, self.input_meta, self.needs_grad)

    def materialize(self):
        return self.ctx.materialize_grads

    def __getattr__(self, name):
        # torch: a custom Function's grad_fn is its ctx (``y.grad_fn.saved_tensors``, attributes set in forward)
        if name in ("ctx", "input_meta") or name.startswith("__"):
            raise AttributeError(name)
        try:
            ctx = self.ctx
        except AttributeError:
            raise AttributeError(name) from None
        return getattr(ctx, name)

    def release(self):
        self._freed = True
        self.ctx._freed = True
        self.ctx._saved = None
        self.ctx._packed = None


def _user_backward(cls):
    """The Function's backward: ``vjp`` when it defines that name instead (torch; defining both is an error)."""
    backward, vjp = cls.backward, cls.vjp
    if vjp is Function.vjp:
        return backward
    if backward is not Function.backward:
        raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is not allowed. You should "
                           "only implement one of them.")
    return vjp


def _checked_grads(name, res, input_meta, needs_grad):
    """A custom backward's results, checked against the forward inputs: count, shapes (broadcast results are
    summed down), dtypes; None where no gradient is wanted."""
    if not isinstance(res, tuple):
        res = (res,)
    n = len(input_meta)
    if len(res) != n:
        if len(res) > n and all(r is None for r in res[n:]):
            res = res[:n]
        else:
            raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected {n}, "
                               f"got {len(res)})")
    out = []
    for i, (g, (shape, dtype, is_tensor)) in enumerate(zip(res, input_meta)):
        if g is None or not needs_grad[i]:
            if g is not None and not is_tensor:
                raise RuntimeError(f"function {name} returned a gradient different than None at position "
                                   f"{i + 1}, but the corresponding forward input was not a Variable")
            out.append(None)
            continue
        if not isinstance(g, Tensor):
            raise TypeError(f"function {name} returned a non-Tensor gradient at index {i}: {type(g).__name__}")
        if g.shape != shape:
            try:
                np.broadcast_shapes(shape, g.shape)
                if np.broadcast_shapes(shape, g.shape) != g.shape:
                    raise ValueError
                g = g.sum_to_size(shape)
            except ValueError:
                raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} - got "
                                   f"{list(g.shape)} but expected shape compatible with {list(shape)}") from None
        if g.dtype is not dtype:
            g = g.to(dtype)
        out.append(g)
    return tuple(out)


def _trace_custom(tr, cls, ctx, node, args, outs, loc):
    """Under @jg.compile: give each differentiable output of a custom Function an eqn ``custom_function`` whose
    value is the forward's and whose vjp calls ``cls.backward``, so the transpose pass (compiled backward,
    any order) differentiates the Function as its backward says, not through its forward (which ran without
    recording).  The eqn reads the tensor arguments, the saved tensors and the tensors set as ctx attributes:
    in the vjp those are the backward graph's values of them.  One eqn per output; its vjp calls backward
    with that output's cotangent and zeros for the others (backward is linear in them)."""
    from ..ir.graph import Lit, Var
    from ..ir.ops import Aval
    from ..ir.ops.opdef import OpDef
    from ..ir import dtypes as dt
    from .traced import traced_payload as _traced_payload

    def payload(t):
        d = _traced_payload(t, tr)
        return d if type(d) is Var else Lit(d, Aval(d.shape, dt._FROM_NP[d.dtype]))

    arg_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    saved = list(ctx._saved or ())
    saved_pos = [i for i, t in enumerate(saved) if isinstance(t, Tensor)]
    attrs = [k for k, v in vars(ctx).items() if not k.startswith("_") and isinstance(v, Tensor)]
    ins = ([payload(args[i]) for i in arg_pos] + [payload(saved[i]) for i in saved_pos]
           + [payload(getattr(ctx, k)) for k in attrs])
    n_a, n_s, n_saved = len(arg_pos), len(saved_pos), len(saved)
    needs_grad, meta, name = node.needs_grad, node.input_meta, node.name()
    needs = tuple(needs_grad[i] for i in arg_pos) + (False,) * (len(ins) - n_a + 1)
    diff_k = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.grad_fn is node]
    out_avals = [(o.shape, o.dtype) if isinstance(o, Tensor) else None for o in outs]
    # the backward's ctx: the user's attributes, without the traced tensors (the graph must not keep them)
    bctx = copy.copy(ctx)
    bctx._saved = bctx._saved_versions = bctx._node = None
    bctx._dirty = bctx._non_diff = ()
    bctx.__dict__.pop("_saved_forward", None)
    bctx._freed = False
    for a in attrs:
        setattr(bctx, a, None)
    del saved

    def vjp_for(k):
        def vjp(c, g):
            lifted = list(c.inputs)
            new_saved = [None] * n_saved
            for j, i in enumerate(saved_pos):
                new_saved[i] = lifted[n_a + j]
            bctx._saved = tuple(new_saved)
            for j, a in enumerate(attrs):
                setattr(bctx, a, lifted[n_a + n_s + j])
            grads = []
            for j, av in enumerate(out_avals):
                if j == k:
                    grads.append(g)
                elif av is None or not bctx.materialize_grads:
                    grads.append(None)
                else:
                    grads.append(Tensor._make(np.zeros(av[0], av[1].np)))
            try:
                res = _user_backward(cls)(bctx, *grads)
            finally:
                bctx._saved = None
                for a in attrs:
                    setattr(bctx, a, None)
            res = _checked_grads(name, res, meta, needs_grad)
            return tuple(res[i] for i in arg_pos) + (None,) * (len(ins) - n_a + 1)
        return vjp

    for k in diff_k:
        o = outs[k]
        src = payload(o)
        aval = src.aval
        op = OpDef("custom_function", "custom", lambda avals, params: [avals[-1]],
                   lambda *xs, **params: xs[-1], vjp_for(k), saves_in=range(n_a, len(ins)),
                   grad_name=name)
        (v,) = tr.add_eqn(op, ins + [src], {"fn": cls.__name__, "output": k}, [aval], loc, True, needs)
        o._data = v


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._op = _FnOp(cls)
        # the grad_fn's type is named after the Function, as torch's (``type(y.grad_fn).__name__``)
        cls._backward_cls = type(name + "Backward", (BackwardCFunction,), {"__slots__": (), "__module__":
                                                                           cls.__module__})


class Function(metaclass=_FunctionMeta):
    """Define a differentiable op with static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``.

    >>> import jitgrad as jg
    >>> class Exp(jg.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, i):
    ...         result = i.exp()
    ...         ctx.save_for_backward(result)
    ...         return result
    ...     @staticmethod
    ...     def backward(ctx, grad_output):
    ...         result, = ctx.saved_tensors
    ...         return grad_output * result
    >>> x = jg.tensor([0., 1.], requires_grad=True)
    >>> Exp.apply(x).sum().backward()
    >>> x.grad
    tensor([1.0000, 2.7183])
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    # torch's vmap support: jitgrad has no vmap, so no Function generates a rule and ``vmap`` refuses
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        """torch's per-Function vmap rule hook; jitgrad has no vmap."""
        raise NotImplementedError("jitgrad has no vmap: autograd.Function.vmap is not supported")

    @staticmethod
    def setup_context(ctx, inputs, output):
        return NotImplemented

    def __init__(self, *args, **kwargs):
        # torch: instantiating warns; calling the instance (a legacy non-static forward) is the error
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd functions are all static, so you "
                      "should invoke them on the class itself. Instantiating an autograd function will raise an error "
                      "in a future version of PyTorch.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use new-style "
                           "autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """The forward-mode rule (``forward_ad``, ``func.jvp``): the outputs' tangents from the inputs' tangents;
        tensors saved with ``ctx.save_for_forward`` are ``ctx.saved_tensors`` here."""
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it with "
                                  "forward mode AD.")

    jvp._not_implemented = True

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        fwd = _FWD.active
        if fwd is not None:     # a dual level is open: the tangents go through the Function's jvp
            return fwd.apply_function(cls, ctx, args, kwargs, cls._apply)
        return cls._apply(ctx, args, kwargs)

    @classmethod
    def _apply(cls, ctx, args, kwargs):
        ctx._clear_on_access = bool(getattr(cls, "clear_saved_tensors_on_access", False))
        tensors_in = [a for a in args if isinstance(a, Tensor)]
        record = (grad_mode.STATE.grad_enabled and not grad_mode.STATE.inference
                  and any(t.requires_grad for t in tensors_in))
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        versions_before = {id(t): t._vc[0] for t in tensors_in}
        with grad_mode.no_grad():
            if cls.setup_context is not Function.setup_context:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, _with_defaults(cls.forward, args, kwargs), out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        dirty = {id(t) for t in ctx._dirty}
        if dirty:
            in_ids = {id(t) for t in tensors_in}
            for t in ctx._dirty:
                if id(t) not in in_ids:     # torch warns, and refuses when that tensor is a view (no base to rebase)
                    msg = ("ctx.mark_dirty() received a tensor that was not an input. Only input Tensors that have "
                           "been mutated should be passed to ctx.mark_dirty().")
                    if t._base is not None:
                        raise RuntimeError(msg)
                    warnings.warn(msg, UserWarning, stacklevel=2)
            out_ids = {id(o) for o in outs}
            if any(id(t) in in_ids and id(t) not in out_ids for t in ctx._dirty):
                raise RuntimeError("Some elements marked as dirty during the forward method were not returned as "
                                   "output. The inputs that are modified inplace must all be outputs of the "
                                   "Function.")
            if record:
                for t in ctx._dirty:
                    t._check_inplace_view()     # torch's checks for an in-place op on a view (multi-output, leaf)
                    if t._base is not None and id(t) in in_ids and \
                            sum(isinstance(o, Tensor) for o in outs) > 1:
                        raise RuntimeError(
                            "If your Function modifies inplace an input that is a view of another Tensor, your "
                            "Function cannot return more than one Tensor. This is not supported by the current "
                            "autograd engine. You should either make sure the input is not a view (using .clone() "
                            "for example) or make your Function only return one Tensor (potentially splitting it "
                            "into two Functions: one doing the inplace that returns a single Tensor and a second "
                            "one that does the other operations). You can ask on the forum "
                            "https://discuss.pytorch.org/ if you need help to do this change.")
        for t in ctx._dirty:
            if t._vc[0] == versions_before.get(id(t), -1):
                t._vc[0] += 1   # modified through .data / numpy: still count it as a write
        non_diff = {id(t) for t in ctx._non_diff}
        # the ctx outlives forward in the node: it keeps no reference to the outputs it marked (torch clears them
        # too), which would make output -> node -> ctx -> output cycles
        ctx._dirty = ctx._non_diff = ()
        if ctx._forward_outputs is not None:    # under a dual level: what its jvp's results are checked against
            ctx._forward_outputs = output_kinds(args, outs, dirty, non_diff)
        if ctx._saved is not None:
            ctx._saved_versions = [None if t is None else t._vc[0] for t in ctx._saved]
            if record and saved_hooks.STATE.stack and _TR.active is None:
                ctx._packed = tuple(None if t is None else saved_hooks.pack(t) for t in ctx._saved)
                ctx._saved = (None,) * len(ctx._saved)
        if not record:
            # an input returned as is still comes back as a new tensor (as in torch: under no_grad it must not
            # carry the input's requires_grad)
            dirty_or_in = {id(t) for t in tensors_in} - dirty
            if any(isinstance(o, Tensor) and id(o) in dirty_or_in for o in outs):
                outs = tuple(o.detach() if isinstance(o, Tensor) and id(o) in dirty_or_in else o for o in outs)
                _mark_custom_views(cls, outs, dirty, False)
                return outs[0] if single else outs
            _mark_custom_views(cls, outs, dirty, False)
            return out
        nf, needs, meta = [], [], []
        for a in args:
            if isinstance(a, Tensor) and a._base is not None:
                refresh_view(a)
            if isinstance(a, Tensor) and a.requires_grad:
                nf.append((a.grad_fn, a._out_nr) if a.grad_fn is not None else (a._accumulator(), 0))
                needs.append(True)
            else:
                nf.append((None, 0))
                needs.append(False)
            meta.append((a.shape, a.dtype, True) if isinstance(a, Tensor) else ((), None, False))
        node = cls._backward_cls(cls._op, {}, tuple(nf), tuple(needs))
        node.ctx = ctx
        ctx._node = node
        node.input_meta = meta
        node.shapes = tuple(m[0] for m in meta)
        node.dtypes = tuple(m[1] for m in meta)
        node.inputs = node.outputs = ()
        node.versions = node.out_versions = None
        node.loc = user_loc(2)
        if anomaly.STATE.enabled:
            node.stack = user_stack(2)
            node.anomaly_parent = anomaly.STATE.current
        new_outs = []
        out_meta = []
        non_diff_pos = []
        dirty_views = []
        input_ids = {id(t) for t in tensors_in}
        for k, o in enumerate(outs):
            if not isinstance(o, Tensor):
                new_outs.append(o)
                out_meta.append(((), None))
                continue
            if id(o) in dirty:
                if o.grad_fn is None and o._requires_grad:
                    raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
                t = o
                if t._base is not None:
                    dirty_views.append((t, t.grad_fn))
            elif id(o) in input_ids:
                t = o.detach()      # an input returned as is: a new tensor viewing it
            else:
                t = o
            out_meta.append((t.shape, t.dtype))
            if id(o) in non_diff:
                non_diff_pos.append(k)
            if id(o) not in non_diff and t.is_floating_point():
                t.grad_fn = node
                t._out_nr = k
                t._requires_grad = False
            new_outs.append(t)
        node.out_meta = tuple(out_meta)
        node.non_diff_outputs = tuple(non_diff_pos)
        if dirty_views:
            from .view_writes import rebase_custom_write    # writes run ops: view_writes sits above this module
            for t, view_fn in dirty_views:
                if t.grad_fn is node:
                    rebase_custom_write(t, view_fn)
        _mark_custom_views(cls, new_outs, dirty, True)
        if ctx._saved and _TR.active is None:
            save_outputs_without_history(ctx, node, new_outs)
        tr = _TR.active
        if tr is not None:
            _trace_custom(tr, cls, ctx, node, args, new_outs, node.loc)
        # materialized zero grads for outputs that receive none
        return new_outs[0] if single else tuple(new_outs)


def _mark_custom_views(cls, outs, dirty, recorded):
    """Outputs of a custom Function that are views (made in forward, or inputs returned as they are) refuse
    in-place ops that autograd would record: the view+inplace logic would bypass the custom backward (torch)."""
    from .view_inplace import custom_fn_origin
    for k, o in enumerate(outs):
        if isinstance(o, Tensor) and o._base is not None and id(o) not in dirty:
            # named by its node as PyTorch's own suite expects ("Output 0 of MyFnBackward"); newer torch says "MyFn"
            o._view_origin = custom_fn_origin(cls.__name__ + "Backward", k, recorded)


def _with_defaults(forward, args, kwargs):
    """The inputs ``setup_context`` sees: the call's arguments with forward's defaults filled in (torch)."""
    import inspect
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        return args
    if not kwargs and all(p.default is inspect.Parameter.empty or i < len(args)
                          for i, p in enumerate(sig.parameters.values())):
        return args
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args) + tuple(bound.kwargs.values())


class DelayedError(Function):
    """Identity whose backward raises: marks gradients that must not be differentiated again."""

    msg = "trying to differentiate twice a function that was marked with @once_differentiable"

    @staticmethod
    def forward(ctx, *tensors):
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DelayedError.msg)


DelayedError._backward_cls.__name__ = DelayedError._backward_cls.__qualname__ = "Error"   # torch's node type


class InplaceFunction(Function):
    pass


class NestedIOFunction(Function):
    pass


def once_differentiable(fn):
    """Marks a backward as not differentiable twice: with create_graph it runs without recording."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        # with create_graph, the results require grad but differentiating them raises (torch's Error node)
        if not grad_mode.STATE.grad_enabled or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        fake = [o.detach().requires_grad_(True) if isinstance(o, Tensor) and o.is_floating_point() else o
                for o in outs]
        r = DelayedError.apply(*fake)
        r = r if isinstance(r, tuple) else (r,)
        for t in r:
            if isinstance(t, Tensor) and t.grad_fn is not None:
                t.grad_fn.torch_name = "Error"
        return r[0] if single else r
    return wrapper


__all__ = ["Function", "FunctionCtx", "once_differentiable", "zeros_for"]
