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
    try:
        with tr:
            stand_ins = []
            for t, shape in zip(leaves, shapes):
                v = tr.new_input(Aval(tuple(shape), dt._FROM_NP[t._data.dtype]))
                stand_ins.append(Tensor._make(v))
            args, kwargs = build_args(stand_ins)
            out = fn(*args, **kwargs)
    except BaseException:
        ft.restore()
        tr.abort()
        raise
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
