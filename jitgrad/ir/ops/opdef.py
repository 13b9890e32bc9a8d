"""OpDef: everything about one primitive in one place, and the registry of all of them.

A vjp rule has the signature ``vjp(ctx, *cotangents) -> tuple`` (one entry per input, ``None`` for "no
gradient").  It is written with tensor *methods and operators only* (``g * ctx.inputs[1]``,
``g.sum_to_size(shape)``), so the same rule runs on eager tensors, on symbolic tensors while tracing, and
records a graph of its own when ``create_graph=True``: the rules are differentiable by construction.

``ctx`` provides:
  inputs   tuple, the input values the op declared in ``saves_in`` (others are None)
  outputs  tuple, the outputs declared in ``saves_out`` (others are None)
  shapes   tuple of input shapes;  dtypes: tuple of input DTypes
  params   dict of the op's static parameters
  needs_grad tuple of bools, which inputs want a cotangent

A jvp rule has the signature ``jvp(ctx, *tangents) -> tuple`` (one tangent per output, ``None`` for zero; one
tangent per input, ``None`` where the input has none).  It is written with tensor methods and ``ctx.bind`` too,
so it traces (the jvp pass, ``ir/passes/jvp.py``) and differentiates again.  Its ``ctx`` (``RuleCtx``) has what a
vjp's has, for *every* input and output (``needs_grad``: which inputs carry a tangent), plus ``op`` and
``transpose_vjp(ts)``: the Jacobian-vector product as the transpose of the op's own vjp (the caller's autograd
does it), for the ops where a closed form is not worth its code.  Most rules are derived, never written:
``LINEAR`` (the op applied to the tangents), elementwise ops from their vjp's scalar derivative (``ew``), and
``SYMMETRIC`` (a Jacobian equal to its transpose: the vjp is the jvp).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import dtypes as dt


class Aval:
    """Abstract value: shape, dtype, and ``weak`` for Python scalars (category-only for promotion)."""

    __slots__ = ("shape", "dtype", "weak")

    def __init__(self, shape: tuple, dtype: dt.DType, weak: bool = False):
        self.shape = shape
        self.dtype = dtype
        self.weak = weak

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __eq__(self, other):
        return isinstance(other, Aval) and (self.shape, self.dtype, self.weak) == (other.shape, other.dtype, other.weak)

    def __hash__(self):
        return hash((self.shape, self.dtype.name, self.weak))

    def __repr__(self):
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"


class OpError(RuntimeError):
    """An op was given inputs it cannot take; the message names the op, shapes and dtypes."""


class OpDef:
    """One primitive.

    name        IR name (``mul``)
    family      elementwise | reduce | shape | linalg | index
    shape_dtype (avals, params) -> list[Aval] of outputs; raises OpError naming the op
    impl        (*arrays, **params) -> array, or tuple of arrays when nout > 1 (NumPy)
    vjp         (ctx, *cotangents) -> tuple of per-input cotangents, or None if not differentiable
    scalar      elementwise only: (m, *args, **params) -> the scalar body's value, built from its argument
                values with Python's operators (``x * y``, ``x < y``) and ``m`` (math calls ``m.exp(x)``, literals
                ``m.lit(1.0)``, ``m.select(c, x, y)``, ``m.cast(x, dtype)``, ``m.not_/and_/or_``); codegen passes
                kernel IR values (codegen/math_table.MathCalls, codegen/kernels/kernel_ir.py), so no text is written
    grad_name   the backward node's name (``MulBackward0``)
    saves_in    input indices the vjp reads;  saves_out: output indices the vjp reads
    out_as_mask the vjp reads its saved outputs only through comparisons (relu's ``out <= 0``): their tangents
                never matter, so forward mode gives the saved outputs none (forward over reverse then frees an
                output's tangent with the output's last other use, not with the node)
    saved_for   {input i: inputs whose gradient reads it}: input i is saved only if one of those needs a
                gradient (mul: d/da = g*b reads b), so ``h * const`` doesn't pin ``h`` (torch does the same)
    view        the output may alias input 0's memory (shares its version counter)
    jvp         (ctx, *tangents) -> tuple of output tangents: the pushforward (see the module docstring); ``LINEAR``,
                ``SYMMETRIC`` or ``BY_TRANSPOSE`` name a derived rule.  Defaults to None iff vjp is None
    decompose   (bind, *inputs, **params) -> outputs: the same op as a composition of other primitives, for a
                fused op whose ``impl`` is one NumPy call (softmax, layer_norm, SDPA).  Eager CPU mode runs
                ``impl``; a trace and a device backend bind the decomposition instead (``runtime/dispatch.py``),
                so compiled graphs and device kernels only meet the smaller primitives.  ``bind(name, *args,
                **params)`` binds a primitive by name; the inputs are tensors, so tensor methods work too.
    trace_vjp   a trace records ``vjp`` for the decomposition's result, as eager mode records it, instead of the
                composition's rules (softmax: its backward reads the output, where the composition's reads the
                exponentials and their sum too, one more array kept from forward to backward)
    eager_impl  (input avals, params) -> a cheaper callable than ``impl`` for that one signature, or None: eager
                dispatch asks once per signature and caches the answer (``impl``'s general checks, such as
                ``_float_inputs``' integer test, then cost nothing per call).  It must compute what ``impl`` does.
    eager_kernel (input avals, params, fallback) -> a callable for that one signature, or None: a native kernel
                of the op over large arrays (``jit/eager_kernels.py``), asked once per signature after
                ``eager_impl``; ``fallback`` is the NumPy callable it runs where the kernel does not serve a call.
                Not set here: the publisher binds it from the jit layer's declaration (target
                ``"OpDef.eager_kernel"``, ``declarations.py``), so the engine never imports code generation.
    """

    __slots__ = ("name", "family", "shape_dtype", "impl", "vjp", "scalar", "grad_name", "saves_in",
                 "saves_out", "saved_for", "nout", "view", "differentiable", "nondiff_inputs", "compute_float", "doc",
                 "decompose", "jvp", "eager_impl", "eager_kernel", "out_as_mask", "trace_vjp")

    def __init__(self, name: str, family: str, shape_dtype: Callable, impl: Callable, vjp: Callable | None,
                 *, scalar: Callable | None = None, grad_name: str | None = None, saves_in=(), saves_out=(),
                 saved_for=None, nout: int = 1, view: bool = False, nondiff_inputs=(), doc: str = "",
                 decompose: Callable | None = None, jvp=None, eager_impl: Callable | None = None,
                 out_as_mask: bool = False, trace_vjp: bool = False):
        self.name = name
        self.family = family
        self.shape_dtype = shape_dtype
        self.impl = impl
        self.vjp = vjp
        self.scalar = scalar
        self.grad_name = grad_name or (name.title().replace("_", "") + "Backward0")
        self.saves_in = tuple(saves_in)
        self.saves_out = tuple(saves_out)
        self.saved_for = dict(saved_for or {})
        self.nout = nout
        self.view = view
        self.differentiable = vjp is not None
        self.nondiff_inputs = frozenset(nondiff_inputs)
        self.doc = doc
        self.decompose = decompose
        self.jvp = _derived_jvp(self, jvp)
        self.eager_impl = eager_impl
        self.out_as_mask = out_as_mask
        self.trace_vjp = trace_vjp
        self.eager_kernel = None

    def __repr__(self):
        return f"OpDef({self.name})"


class RuleCtx:
    """What a rule sees (``ctx``): filled in by whoever runs it (eager dispatch, the transpose and jvp passes)."""

    __slots__ = ("op", "inputs", "outputs", "shapes", "dtypes", "params", "needs_grad", "bind", "transposer",
                 "plain")

    def __init__(self):
        # True where the caller knows its binds record nothing (no autograd history, no tangent at another level)
        # and the values are eager arrays: a rule may then compute on the arrays themselves
        self.plain = False

    def transpose_vjp(self, ts):
        """J ts as the transpose of the op's vjp: ``self.transposer(self, ts)``, the caller's (a function of the
        context, not a closure over it: a closure stored on the context is a reference cycle, which would keep the
        rule's inputs and outputs alive until the cycle collector runs)."""
        return self.transposer(self, ts)


# derived jvp rules, named in an OpDef's ``jvp=``
LINEAR = "linear"           # linear in its float inputs: the op itself applied to the tangents (zeros where absent)
SYMMETRIC = "symmetric"     # a symmetric Jacobian (softmax, prod_others): the vjp applied to the tangent
BY_TRANSPOSE = "by_transpose"   # the transpose of the vjp, computed by the caller's autograd (see RuleCtx)
BILINEAR = "bilinear"       # linear in each float input (matmul, conv): the sum of the op with one input's tangent
REDUCTION = "reduction"     # y_j = R(x over j's group) with vjp g_j * D(x)_k: the tangent is sum(D * t) per group


def _is_float_tensor(x) -> bool:
    return hasattr(x, "new_zeros") and x.dtype.is_floating_point


def _linear_jvp(c, *ts):
    args = []
    for i, (x, t) in enumerate(zip(c.inputs, ts)):
        if t is not None:
            args.append(t)
        elif i not in c.op.nondiff_inputs and _is_float_tensor(x):
            args.append(x.new_zeros(x.shape))
        else:
            args.append(x)      # index tensors, Python numbers, non-differentiable inputs
    return (c.bind(c.op.name, *args, **c.params),)


def _bilinear_jvp(c, *ts, add_into=None):
    total = None
    for i, t in enumerate(ts):
        if t is not None:
            args = list(c.inputs)
            args[i] = t
            if total is not None and add_into is not None and c.plain and _own_buffer(total) \
                    and add_into(total._data, args, c.params):
                continue        # the op added this term into the first one's array itself
            r = c.bind(c.op.name, *args, **c.params)
            if total is None:
                total = r
            elif _own_buffer(total) and not total.requires_grad and not r.requires_grad:
                total.add_(r)   # (the first term is this rule's own array: summed into it, not into a third one)
            else:
                total = total + r
    return (total,)


def bilinear_adding(add_into):
    """BILINEAR's rule for an op that can add its result into an array: ``add_into(out, args, params)`` does
    ``out += op(*args)`` in place on the arrays (False, nothing written, where it cannot).  Where the caller's
    binds are plain (``RuleCtx.plain``), each term after the first is made in the first one's array with no array
    of its own (matmul: the GEMM with beta = 1)."""
    def jvp(c, *ts):
        return _bilinear_jvp(c, *ts, add_into=add_into)
    return jvp


def _own_buffer(t) -> bool:
    """An eager tensor that is no view and may be written (a product this rule just made)."""
    d = t._data
    return type(d) is np.ndarray and t._base is None and d.flags.writeable


def fit_to(t, out):
    """Tangent ``t`` (None: zero) broadcast to output ``out``'s shape and cast to its dtype."""
    if t is None:
        return None
    if t.shape != out.shape:
        t = t.expand(out.shape)
    if t.dtype is not out.dtype:
        t = t.to(out.dtype)
    return t


def _symmetric_jvp(c, *ts):
    return c.op.vjp(c, *ts)


def _by_transpose_jvp(c, *ts):
    return c.transpose_vjp(ts)


def _reduction_jvp(c, t):
    out = c.outputs[0]
    d = c.op.vjp(c, out.new_ones(out.shape))[0]
    axes = c.params["axes"]
    if not axes:
        return (d * t,)
    return (c.bind("sum", d * t, axes=axes, keepdims=c.params["keepdims"]),)


def elementwise_jvp(rule):
    """The jvp of an elementwise op from its vjp's ``rule`` (``ctx, g -> per-input g * d_i``, before the sums back
    to the inputs' shapes): a diagonal Jacobian is its own transpose, so input i's part is the rule applied to its
    tangent (broadcasting does the rest), asked for input i alone."""
    def jvp(c, *ts):
        out = c.outputs[0]
        needs = c.needs_grad
        total = None
        for i, t in enumerate(ts):
            if t is None:
                continue
            c.needs_grad = tuple(j == i for j in range(len(ts)))
            try:
                d = rule(c, t)[i]
            finally:
                c.needs_grad = needs
            if d is not None:
                total = d if total is None else total + d
        return (fit_to(total, out),)
    return jvp


_DERIVED = {LINEAR: _linear_jvp, BILINEAR: _bilinear_jvp, SYMMETRIC: _symmetric_jvp, BY_TRANSPOSE: _by_transpose_jvp,
            REDUCTION: _reduction_jvp}


def _derived_jvp(op, jvp):
    if isinstance(jvp, str):
        return _DERIVED[jvp]
    if jvp is None and getattr(op.vjp, "rule", None) is not None:     # elementwise: its vjp's derivative table
        return elementwise_jvp(op.vjp.rule)
    return jvp


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"duplicate OpDef {op.name}")
    OPS[op.name] = op
    return op


# ---- shared shape rules --------------------------------------------------------------------------

def fmt_shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def broadcast_shapes(opname: str, shapes) -> tuple:
    """NumPy/torch broadcasting; the error names the op and every shape."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, d in enumerate(s):
            o = out[off + i]
            if o == 1:
                out[off + i] = d
            elif d != 1 and d != o:
                raise OpError(f"{opname}: the shapes {' and '.join(fmt_shape(x) for x in shapes)} cannot be "
                              f"broadcast together (size {o} vs {d} at dimension {off + i - nd})")
    return tuple(out)


def normalize_axis(opname: str, axis: int, ndim: int) -> int:
    lo, hi = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
    if not lo <= axis <= hi:
        raise OpError(f"{opname}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {axis})")
    return axis % ndim if ndim > 0 else 0


def normalize_axes(opname: str, axes, ndim: int) -> tuple:
    """None -> all axes; int or sequence -> sorted tuple of non-negative axes."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(sorted({normalize_axis(opname, int(a), ndim) for a in axes}))
    if len(out) != len(tuple(axes)):
        raise OpError(f"{opname}: dim {tuple(axes)} appears multiple times in the list of dims")
    return out


def result_dtype(avals) -> dt.DType:
    strong = [(len(a.shape), a.dtype) for a in avals if not a.weak]
    weak = [a.dtype for a in avals if a.weak]
    return dt.result_type(strong, [_weak_proto[w.category] for w in weak])


_weak_proto = {0: True, 1: 1, 2: 1.0}
