"""The target-neutral half of lowering: which kind of step each entry of a fusion plan becomes, and who emits it.

Both targets (the CPU's ``layout.Program``, CUDA's ``cuda_launches.Launches``) walk the same plan
(``ir/plan.Plan``, made by the planning passes before codegen is called) with ``lower_plan``, take every value's
place from one ``places.Places`` (views, workspace, outputs, state updates in place: the same rules on both),
and ask ``step_kind`` what each entry is.  An emitter is a function registered for a kind and a target
(``@emits("gemm", target="cpu")``) in the module of its step: ``fn(builder, entry)``, where the builder is the
target's program under construction.  An emitter may decline (return ``False``: the CPU has no ``cat`` loop,
CUDA's GEMM takes floats only), and the entry runs as the target's ``host`` step: the op's NumPy impl.

Kinds:
- ``fused``: a fusion group (elementwise loop, optionally closed by a reduction);
- ``batch``: independent fusion groups of one body (``ir/plan.LoopBatch``) as one launch (CPU only; CUDA plans
  have none);
- ``view``: a view op whose output is a place over its input (reshape, permute, expand, basic indexing);
- ``gemm``: matmul;
- ``gather`` / ``scatter``: indexing with one integer tensor per dim (``x[i, j]``, ``x[i, j] = v``), and
  ``scatter_reduce`` (the same loop combining with prod / max / min; CUDA has no emitter: a host step);
- ``row_gather`` / ``row_scatter``: ``w[idx]`` and its index_put (embedding rows; ``region_steps.py``);
- ``region``: ``index_put`` with a basic index (``x[:, a:b] = v``, the backward of slicing and ``split``);
- ``scan``: cumsum / cumprod along one axis;
- ``nonzero``: ``nonzero_bounded``'s coordinates into a buffer of its bound's rows (a data-dependent size, CPU
  only: CUDA has no emitter, a host step);
- ``cat``: concatenation (copies into slabs of the output);
- ``collective``: an op of the ``collective`` family (all_reduce...): on the CPU, MPI called natively
  (``collective_steps.py``) when the group's transport allows it;
- ``host``: anything else (the op's NumPy impl).
Copies (materialising a view, write-backs, outputs) are decided by ``places.Places`` and emitted through the
target's copy emitter; anomaly checks are steps the targets add themselves.

A new op with a native form on some target is one entry in ``_BY_OP`` plus an ``@emits`` function for that
target, in a step module the target's assembly imports (``cpu.py``: ``STEP_MODULES``; ``cuda.py``).
"""
from __future__ import annotations

from ..ir.ops.index import index_dim, oob_error, tensor_axis
from ..ir.plan import Group, LoopBatch

KINDS = ("fused", "batch", "view", "gemm", "gather", "scatter", "scatter_reduce", "region", "row_gather", "row_scatter", "scan",
         "nonzero", "cat", "collective", "host")


def all_tensor_spec(spec, ndim):
    """The spec indexes every dim with an integer tensor (x[i0, i1, ...]): a gather/scatter loop."""
    return len(spec) == ndim and all(type(s) is tuple and s[0] == "tensor" for s in spec)


def row_spec(spec, ndim) -> bool:
    """``x[idx]`` / ``x[idx, :, ...]``: one integer tensor on the first dim of a tensor of rank >= 2, the rest whole
    (an embedding lookup and its scatter-add backward): whole rows moved per index."""
    if ndim < 2 or not spec or not (type(spec[0]) is tuple and spec[0][0] == "tensor"):
        return False
    return all(type(t) is tuple and t == ("slice", None, None, None) for t in spec[1:])


def _has_tensor_index(spec):
    return any(type(s) is tuple and s[0] == "tensor" for s in spec)


def _getitem(e):
    if not _has_tensor_index(e.params["spec"]):
        return "view"
    if all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim) and e.outs[0].aval.size:
        return "gather"
    if row_spec(e.params["spec"], e.ins[0].aval.ndim) and len(e.ins) == 2:
        return "row_gather"      # an embedding lookup: whole rows per index
    return "host"


def _index_put(e):
    if all_tensor_spec(e.params["spec"], e.ins[0].aval.ndim) and e.outs[0].aval.size:
        return "scatter"
    if not _has_tensor_index(e.params["spec"]) and e.outs[0].aval.size:
        return "region"      # a basic index: the base copied, the value written into a strided region
    if row_spec(e.params["spec"], e.ins[0].aval.ndim) and len(e.ins) == 3:
        return "row_scatter"     # an embedding's backward: whole rows added per index
    return "host"


def _scan(e):
    return "scan" if e.ins[0].aval.ndim > 0 and e.outs[0].aval.size else "host"


_BY_OP = {
    "matmul": lambda e: "gemm",
    "getitem": _getitem,
    "index_put": _index_put,
    "cumsum": _scan,
    "cumprod": _scan,
    "nonzero_bounded": lambda e: "nonzero",
    "cat": lambda e: "cat" if e.outs[0].aval.ndim > 0 else "host",
    "scatter_reduce": lambda e: "scatter_reduce" if e.outs[0].aval.size and e.ins[1].aval.size else "host",
}


def step_kind(s) -> str:
    """The kind of step plan entry ``s`` (a Group or an Eqn) lowers to (see the module docstring)."""
    if isinstance(s, Group):
        return "fused"
    if isinstance(s, LoopBatch):
        return "batch"
    rule = _BY_OP.get(s.op.name)
    if rule is not None:
        return rule(s)
    if s.op.family == "collective":
        return "collective"
    return "view" if s.op.view else "host"


def index_error(e, value: int, dim: int) -> IndexError:
    """The IndexError for a gather/scatter step ``e`` that met ``value`` out of range along ``dim``, as eager
    mode raises it, naming the op, the shapes and the user's line (both targets raise it after the step, with
    no state written back)."""
    x = e.ins[0]
    oob = e.params.get("oob")
    if oob is not None:         # a range-checked index (ir/ops/index.py): torch's text for the op that bound it
        ax = tensor_axis(e.params["spec"], dim, x.aval.ndim)
        err = oob_error(oob, value, ax, x.aval.shape[ax])
        if e.loc is not None:
            err.args = (f"{err.args[0]}\n  at {e.loc.where()} in {e.loc.function}: {e.loc.text}",)
        return err
    idx = e.ins[1:] if e.op.name == "getitem" else e.ins[2:]
    what = "indexing" if e.op.name == "getitem" else "index assignment"
    name_dim = dim
    if "spec" in e.params:      # the loops record which index tensor met it; torch names it as index_dim does
        spec = e.params["spec"]
        name_dim = index_dim(spec, [v.aval.shape for v in idx], dim)
        dim = tensor_axis(spec, dim, x.aval.ndim)
    msg = (f"{e.op.name}: index {value} is out of bounds for dimension {name_dim} with size {x.aval.shape[dim]} "
           f"({what} of a tensor of shape {list(x.aval.shape)} with index tensors of shapes "
           f"{[list(v.aval.shape) for v in idx]}; compiled code, no state was updated)")
    if e.loc is not None:
        msg += f"\n  at {e.loc.where()} in {e.loc.function}: {e.loc.text}"
    return IndexError(msg)


def step_error(e, code: int, value: int, dim: int) -> Exception:
    """The error a loop recorded for eqn ``e`` (``code`` 1: an index out of range, 2: a zero integer divisor), as
    eager mode raises it: IndexError, or torch's RuntimeError("ZeroDivisionError ...")."""
    if code == 2:
        where = f"\n  at {e.loc.where()} in {e.loc.function}: {e.loc.text}" if e.loc else ""
        ins = ", ".join(f"{v.aval.dtype.name}{list(v.aval.shape)}" for v in e.ins)
        return RuntimeError(f"{e.op.name}: ZeroDivisionError: integer division or modulo by zero (inputs: {ins}; "
                            f"compiled code, no state was updated){where}")
    return index_error(e, value, dim)


EMITTERS: dict = {}       # target -> {kind: emitter}: filled by the step modules' @emits


def emits(kind: str, target: str):
    """Register the decorated function as ``target``'s emitter of step ``kind`` (one of ``KINDS``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown step kind {kind!r}")

    def register(fn):
        table = EMITTERS.setdefault(target, {})
        if kind in table:
            raise ValueError(f"{target} already has an emitter for {kind!r}: {table[kind].__qualname__}")
        table[kind] = fn
        return fn
    return register


def lower_plan(builder, plan, target: str):
    """Walk ``plan`` once and call ``target``'s emitter for each entry's kind with ``(builder, entry)``; an emitter
    that returns False, or a kind the target has no emitter for, becomes a host step (the target's ``host``
    emitter).  The emitters take their places from ``builder.places`` (a ``places.Places``, whose ``n`` is the
    index of the entry being lowered); ``builder.after_step(entry)`` runs after each entry (anomaly checks), then
    the places release the workspace slots nothing reads any more."""
    table = EMITTERS[target]
    host = table["host"]
    places = builder.places
    for n, s in enumerate(plan.steps):
        places.n = n
        fn = table.get(step_kind(s))
        if fn is None or fn(builder, s) is False:
            host(builder, s)
        builder.after_step(s)
        places.release(n)


__all__ = ["KINDS", "EMITTERS", "emits", "step_kind", "lower_plan", "all_tensor_spec", "row_spec", "index_error", "step_error"]
