"""Loop-kernel source for fusion groups and integer-tensor indexing (gather/scatter).

A fusion group becomes one loop nest with static bounds: broadcast inputs are read through index arithmetic,
intermediate values live in registers, the scalar bodies come from the OpDefs, and math functions resolve to
precision-specific helpers (``tanh_f32``) from ``mathlib`` (vectorisable) or ``libm``: float32 stays float32.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Lit, Var
from ..ir.ops.opdef import result_dtype
from ..ir.passes.fuse import Group

PARALLEL_MIN = 1 << 20      # elements; below this a kernel runs serial (see BENCHMARKS.md: thread wake-up
                            # costs ~10 us on an idle machine and ~20 ms when the cores are busy)
_MATH = ("exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "pow", "sqrt", "isfinite",
         "max", "min", "sign")
_MATH_RE = re.compile(r"\b(" + "|".join(_MATH) + r")\(")
_NP_TYPE = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "b1"}


# what mathlib provides, per precision (tests check this table against the module): generating source must not
# import mathlib, which imports Numba (~0.15 s) before the first call has been served
MATHLIB_FUNCS = ("exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos", "tan", "pow", "sqrt", "rsqrt",
                 "abs", "sign", "max", "min", "isfinite")


def math_import(name: str) -> str:
    """The module a math helper (``tanh_f32``) is imported from: mathlib if it has it, else libm."""
    base, _, suffix = name.rpartition("_")
    if suffix in ("f32", "f64") and base in MATHLIB_FUNCS:
        return "mathlib"
    return "libm"


def _tname(d: dt.DType) -> str:
    return {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64", "bool": "bool"}[d.name]


class KernelSource:
    def __init__(self, name, source, args, outputs, parallel):
        self.name = name
        self.source = source
        self.args = args          # input Vars/Lit arrays in call order
        self.outputs = outputs    # output Vars in call order
        self.parallel = parallel


def _index(shape, it_shape, ivars):
    """Index expression reading an array of ``shape`` broadcast into the iteration space."""
    nd, lead = len(shape), len(it_shape) - len(shape)
    if nd == 0:
        return "[()]"
    parts = []
    for k, d in enumerate(shape):
        parts.append("0" if d == 1 and it_shape[lead + k] != 1 else ivars[lead + k])
    return "[" + ", ".join(parts) + "]"


def _compute_dtype(e):
    name = e.op.name
    if name in ("lt", "le", "gt", "ge", "eq", "ne"):
        return result_dtype([v.aval for v in e.ins])
    if name in ("cast", "isfinite", "logical_not", "logical_and", "logical_or", "where"):
        return None
    return e.outs[0].aval.dtype


def _literal(v, d: dt.DType, consts):
    """A typed module-level constant for a scalar literal (``c0 = np.float32(0.1)``): never a bare Python
    float, which would promote float32 arithmetic to float64."""
    val = v.value
    if d is None:
        d = v.aval.dtype if not v.aval.weak else dt.result_type([], [val])
    if isinstance(val, bool) and d is not dt.bool_:
        val = int(val)
    if d is dt.bool_:
        return "True" if val else "False"
    val = d.np.type(val).item()
    text = repr(val) if not (isinstance(val, float) and not math.isfinite(val)) else f"float('{val}')"
    name = f"c{len(consts)}"
    consts[name] = f"np.{d.np.name}({text})"
    return name


def gen_group(g: Group, name: str, consts: dict, parallel=None, check_ids=None) -> KernelSource:
    """One loop nest for a fusion group.  ``check_ids`` (anomaly mode): eqn -> id for values that must be
    finite; each gets two integer reduction counters (non-finite, NaN) that vectorise with the loop, and after
    the loop a non-zero count reports the id through the ``err`` slot: no branch leaves the fast path."""
    shape = g.shape
    nd = len(shape)
    ivars = [f"i{k}" for k in range(nd)]
    size = 1
    for d in shape:
        size *= d
    arrays_in = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
    argname = {v: f"a{k}" for k, v in enumerate(arrays_in)}
    red = g.reduce
    outs = list(g.outputs)
    outname = {v: f"o{k}" for k, v in enumerate(outs)}
    body = []
    checks = []
    local = {}
    for k, v in enumerate(arrays_in):
        local[v] = f"x{k}"
        body.append(f"x{k} = {argname[v]}{_index(v.aval.shape, shape, ivars)}")

    def ref(v, cd):
        if isinstance(v, Lit) and v not in argname:
            return _literal(v, cd if v.aval.weak else v.aval.dtype, consts)
        expr = local[v]
        if cd is not None and v.aval.dtype is not cd:
            expr = f"{_tname(cd)}({expr})"
        return expr

    for n, e in enumerate(g.eqns):
        cd = _compute_dtype(e)
        od = e.outs[0].aval.dtype
        if e.op.name == "where":
            args = [ref(e.ins[0], None), ref(e.ins[1], od), ref(e.ins[2], od)]
        elif e.op.name in ("cast", "broadcast_to"):
            args = [ref(e.ins[0], None)]
        else:
            args = [ref(v, cd) for v in e.ins]
        expr = args[0] if e.op.name == "broadcast_to" else e.op.scalar(*args, **e.params)
        sd = cd or (e.ins[0].aval.dtype if e.op.name == "isfinite" else od)
        suffix = _NP_TYPE[sd.name]
        if sd.is_floating_point:
            expr = _MATH_RE.sub(lambda m: f"{m.group(1)}_{suffix}(", expr)
        else:   # integers: Python's max/min/abs are exact; the float math (exp, ...) takes float64
            expr = _MATH_RE.sub(lambda m: m.group(0) if m.group(1) in ("max", "min") else
                                "sign_i64(" if m.group(1) == "sign" else f"{m.group(1)}_f64(", expr)
        if od is dt.bool_:
            expr = f"bool({expr})"
        else:
            expr = f"{_tname(od)}({expr})"
        t = f"t{n}"
        body.append(f"{t} = {expr}")
        local[e.outs[0]] = t
        if check_ids and e in check_ids and od.is_floating_point:
            cid = check_ids[e]
            checks.append(cid)
            body.append(f"k{cid} += 0 if isfinite_{_NP_TYPE[od.name]}({t}) else 1")
            body.append(f"q{cid} += 0 if {t} == {t} else 1")
        if e.outs[0] in outname:
            body.append(f"{outname[e.outs[0]]}{_index(shape, shape, ivars)} = {t}")
    pre, post = [], []
    want = parallel
    parallel = nd > 0 and (size >= PARALLEL_MIN if want is None else bool(want) and size >= 4096)
    if red is not None:
        src = red.ins[0]
        v = ref(src, None) if src in local or isinstance(src, Lit) else None
        if v is None:
            local[src] = "x_red"
            body.append(f"x_red = {argname[src]}{_index(src.aval.shape, shape, ivars)}")
            v = "x_red"
        od = red.outs[0].aval.dtype
        v = f"{_tname(od)}({v})"
        axes = red.params["axes"]
        full = len(axes) == nd
        init = {"sum": "0", "amax": "-np.inf", "amin": "np.inf"}[red.op.name]
        if not od.is_floating_point and red.op.name != "sum":
            init = {"amax": str(np.iinfo(od.np).min), "amin": str(np.iinfo(od.np).max)}[red.op.name]
        combine = {"sum": "{a} + {v}", "amax": "{v} if ({v} > {a} or {v} != {v}) else {a}",
                   "amin": "{v} if ({v} < {a} or {v} != {v}) else {a}"}[red.op.name]
        ro = outname[red.outs[0]]
        if full:
            pre.append(f"acc = {_tname(od)}({init})")
            body.append(f"rv = {v}")
            body.append("acc = " + combine.format(a="acc", v="rv"))
            post.append(f"{ro}[()] = acc")
            parallel = parallel and red.op.name == "sum"
        else:
            kidx = "[" + ", ".join("0" if k in axes else ivars[k] for k in range(nd)) + "]"
            pre.append(f"{ro}[...] = {_tname(od)}({init})")
            body.append(f"rv = {v}")
            body.append(f"{ro}{kidx} = " + combine.format(a=f"{ro}{kidx}", v="rv"))
            parallel = False
    if checks:
        pre += [f"k{c} = 0\nq{c} = 0".replace("\n", "\n    ") for c in checks]
        post += [f"if k{c} > 0:\n        _report(err, {c}, q{c})" for c in checks]
    params = [argname[v] for v in arrays_in] + [outname[v] for v in outs] + (["err"] if checks else [])
    lines = [f"def {name}({', '.join(params)}):"]
    lines += ["    " + p for p in pre]
    ind = "    "
    for k in range(nd):
        rng = "prange" if (k == 0 and parallel) else "range"
        lines.append(f"{ind}for {ivars[k]} in {rng}({shape[k]}):")
        ind += "    "
    lines += [ind + b for b in body]
    lines += ["    " + p for p in post]
    ks = KernelSource(name, "\n".join(lines), arrays_in, outs, parallel)
    ks.checked = bool(checks)
    return ks


def all_tensor_spec(spec, ndim):
    """The spec indexes every dim with an integer tensor (x[i0, i1, ...]): a gather/scatter loop."""
    return len(spec) == ndim and all(type(s) is tuple and s[0] == "tensor" for s in spec)


def basic_spec(spec):
    return all(type(s) is int or (type(s) is tuple and s[0] == "slice") for s in spec)


def basic_index_src(spec):
    parts = []
    for s in spec:
        if type(s) is int:
            parts.append(str(s))
        else:
            a, b, c = s[1:]
            parts.append(("" if a is None else str(a)) + ":" + ("" if b is None else str(b))
                         + ("" if c is None else f":{c}"))
    return "[" + ", ".join(parts) + ("," if len(parts) == 1 else "") + "]"


def gen_gather(e, name):
    """getitem(x, i0, ..., i_{n-1}) with one integer index tensor per dim, broadcast together."""
    x, idx = e.ins[0], e.ins[1:]
    out = e.outs[0].aval.shape
    iv = [f"b{k}" for k in range(len(out))]
    lines = [f"def {name}(x, {', '.join(f'i{k}' for k in range(len(idx)))}, out):"]
    ind = "    "
    for k, d in enumerate(out):
        lines.append(f"{ind}for {iv[k]} in range({d}):")
        ind += "    "
    for k, v in enumerate(idx):
        n = x.aval.shape[k]
        lines.append(f"{ind}j{k} = i{k}{_index(v.aval.shape, out, iv)}")
        lines.append(f"{ind}j{k} = j{k} + {n} if j{k} < 0 else j{k}")
    lines.append(f"{ind}out{_index(out, out, iv)} = x[{', '.join(f'j{k}' for k in range(len(idx)))}]")
    return "\n".join(lines)


def gen_scatter(e, name):
    """index_put(base, v, i0, ..., i_{n-1}; accumulate) with one integer index tensor per dim."""
    base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
    bshape = np.broadcast_shapes(*[i.aval.shape for i in idx]) if idx else ()
    iv = [f"b{k}" for k in range(len(bshape))]
    acc = e.params["accumulate"]
    lines = [f"def {name}(out, v, {', '.join(f'i{k}' for k in range(len(idx)))}):"]
    ind = "    "
    for k, d in enumerate(bshape):
        lines.append(f"{ind}for {iv[k]} in range({d}):")
        ind += "    "
    for k, iv_ in enumerate(idx):
        n = base.aval.shape[k]
        lines.append(f"{ind}j{k} = i{k}{_index(iv_.aval.shape, bshape, iv)}")
        lines.append(f"{ind}j{k} = j{k} + {n} if j{k} < 0 else j{k}")
    tgt = f"out[{', '.join(f'j{k}' for k in range(len(idx)))}]"
    val = f"v{_index(v.aval.shape, bshape, iv)}" if isinstance(v, Var) or isinstance(v.value, np.ndarray) else "v"
    lines.append(f"{ind}{tgt} = {tgt + ' + ' if acc else ''}{val}")
    return "\n".join(lines)
