"""Trace a Python function at per-example shapes into a Graph, for ``vmap``'s batching interpreter.

The function runs on symbolic tensors (one graph input per tensor argument).  Tensors it meets from outside
become graph inputs too, so the batched evaluation binds the very tensors the function closed over and
gradients reach them: concrete ones (a module's parameters) through the same capture hook ``@jitgrad.compile``
uses, symbolic ones of an enclosing trace (an outer ``vmap`` or a compiled function) through ``Trace.on_var``.
"""
from __future__ import annotations

from ..ir import dtypes as dt
from ..ir.graph import Var
from ..ir.ops import Aval
from ..jit.trace_entries import _Tracer
from ..runtime.tensor import Tensor
from ..tracer import TracedValueError

_DATA_DEPENDENT = (
    "vmap: It looks like you're either (1) calling .item() on a Tensor or (2) attempting to use a Tensor in some "
    "data-dependent control flow or (3) encountering this error in PyTorch internals. For (1): we don't support vmap "
    "over calling .item() on a Tensor, please try to rewrite what you're doing with other operations. For (2): we "
    "don't support data-dependent control flow in vmap yet, please file an issue at "
    "https://github.com/pytorch/pytorch/issues . For (3): please file an issue.")


class _FuncTracer(_Tracer):
    """Compile's tracer (capture and restore of outside tensors) plus inputs for an enclosing trace's Vars."""

    def __init__(self):
        super().__init__(())
        self.trace.made = None
        self.foreign = {}          # outer Var -> (input Var here, the tensor that held it)
        self.known = set()         # Vars of this trace (inputs and eqn outputs) seen so far
        self.scanned = (0, 0)
        self.trace.on_var = self.on_var

    def on_var(self, t):
        d = t._data
        if d in self.known:
            return d
        tr = self.trace
        n_in, n_eq = self.scanned
        self.known.update(tr.inputs[n_in:])
        for e in tr.eqns[n_eq:]:
            self.known.update(e.outs)
        self.scanned = (len(tr.inputs), len(tr.eqns))
        if d in self.known:
            return d
        ent = self.foreign.get(d)
        if ent is None:
            v = tr.new_input(d.aval)
            self.known.add(v)
            ent = self.foreign[d] = (v, t)
        return ent[0]

    def owns(self, d) -> bool:
        """Whether Var ``d`` belongs to this trace (after the function ran)."""
        if d in self.known:
            return True
        tr = self.trace
        self.known.update(tr.inputs)
        for e in tr.eqns[self.scanned[1]:]:
            self.known.update(e.outs)
        self.scanned = (len(tr.inputs), len(tr.eqns))
        return d in self.known


def trace_function(fn, leaves, shapes, build_args):
    """Run ``fn`` on symbolic stand-ins for ``leaves`` (tensors) with per-example ``shapes``.

    ``build_args(stand_ins)`` -> (args, kwargs) for ``fn``.  Returns ``(graph, sources, out)``: the graph, one
    tensor per graph input beyond the stand-ins (captured or outer tensors, fed as they are), and ``fn``'s result
    with each tensor leaf replaced by a ``("var", Var)`` or ``("const", tensor)`` marker (see ``result_marker``)."""
    ft = _FuncTracer()
    tr = ft.trace
    tr.grad_off = ft.grad_off = set()     # eqns traced under no_grad: replayed under it (batching.run_graph)
    try:
        with tr:
            stand_ins = []
            for t, shape in zip(leaves, shapes):
                v = tr.new_input(Aval(tuple(shape), dt._FROM_NP[t._data.dtype]))
                stand_ins.append(Tensor._make(v))
            args, kwargs = build_args(stand_ins)
            out = fn(*args, **kwargs)
    except TracedValueError as e:
        ft.restore()
        tr.abort()
        raise RuntimeError(_DATA_DEPENDENT + f"\n(jitgrad: {e})") from None
    except BaseException:
        ft.restore()
        tr.abort()
        raise
    # in-place writes into tensors from outside (the generator's draw offset, a counter): their final values are
    # extra results, written back after the batched run (``ft.writes``: (tensor, Var))
    ft.writes = [(t, t._data) for i, t in ft.mutated.items() if i in ft.captured and type(t._data) is Var]
    ft.restore()
    n = len(leaves)
    captured = {c.var: c.ref() for c in ft.order}
    foreign = {v: t for v, t in ft.foreign.values()}
    sources = []
    for v in tr.inputs[n:]:
        sources.append(captured[v] if v in captured else foreign[v])
    from ..ir.graph import Graph
    return Graph(tr.inputs, tr.eqns, []), sources, out, ft


def result_marker(ft, t):
    """What a tensor the function returned stands for: a value of the graph, or a constant used as it is."""
    d = t._data
    if type(d) is Var and ft.owns(d):
        return ("var", d)
    return ("const", t)
