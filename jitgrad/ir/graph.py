"""Source locations carried by every recorded op (and, with the tracer, by every Eqn)."""
from __future__ import annotations

import linecache
import os
import sys


def cell_label(file: str) -> str | None:
    """``"Cell In[3]"`` when ``file`` is the name IPython compiled a cell under (``/tmp/ipykernel_1/18873.py``
    in a kernel, ``<ipython-input-3-...>`` in a terminal), as IPython's own tracebacks name it; else None.
    IPython is asked only when it is already loaded, at formatting time, so a re-run cell shows its latest
    number as IPython would."""
    ipy = sys.modules.get("IPython")
    if ipy is None:
        return None
    try:
        shell = ipy.get_ipython()
        named = shell.compile.format_code_name(file) if shell is not None else None
    except Exception:  # noqa: BLE001 - an IPython without this API names no cells
        return None
    return f"{named[0]} {named[1]}" if named else None


class SourceLoc:
    """Where a user's line created an op: file, line, function and the line's text (read lazily)."""

    __slots__ = ("file", "line", "function", "_text")

    def __init__(self, file: str, line: int, function: str, text: str | None = None):
        self.file = file
        self.line = line
        self.function = function
        self._text = text

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = linecache.getline(self.file, self.line).strip()
        return self._text

    def short(self) -> str:
        """``train.py:14``; in a notebook, ``Cell In[3], line 4``."""
        cell = cell_label(self.file)
        if cell is not None:
            return f"{cell}, line {self.line}"
        return f"{os.path.basename(self.file)}:{self.line}"

    def where(self) -> str:
        """The full ``/path/train.py:14`` for messages; in a notebook, ``Cell In[3], line 4``."""
        cell = cell_label(self.file)
        if cell is not None:
            return f"{cell}, line {self.line}"
        return f"{self.file}:{self.line}"

    def __str__(self):
        cell = cell_label(self.file)
        if cell is not None:
            return f"{cell}, line {self.line}, in {self.function}"
        return f'File "{self.file}", line {self.line}, in {self.function}'

    def __repr__(self):
        return f"SourceLoc({self.short()} {self.function})"

    def __eq__(self, other):
        return (isinstance(other, SourceLoc) and (self.file, self.line, self.function)
                == (other.file, other.line, other.function))

    def __hash__(self):
        return hash((self.file, self.line, self.function))


# ---- the SSA graph --------------------------------------------------------------------------------
import itertools as _it

import numpy as _np

from .dtypes import DType
from .listing import Listing, distinct_locs
from .ops.opdef import Aval

_var_ids = _it.count()


class _Flags:
    c_contiguous = True
    writeable = True


class Var:
    """An SSA value: defined once (a graph input or one Eqn's output).  Mimics an ndarray's metadata
    (``shape``, ``dtype`` as a NumPy dtype, ``ndim``, ``size``) so a Tensor can hold a Var as its payload."""

    __slots__ = ("id", "aval")
    flags = _Flags()

    def __init__(self, aval: Aval):
        self.id = next(_var_ids)
        self.aval = aval

    @property
    def shape(self) -> tuple:
        return self.aval.shape

    @property
    def dtype(self):
        return self.aval.dtype.np

    @property
    def jdtype(self) -> DType:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.aval.shape:
            n *= d
        return n

    @property
    def itemsize(self) -> int:
        return self.aval.dtype.itemsize

    def __repr__(self):
        return f"Var(%{self.id}: {self.aval})"


class Lit:
    """A constant: a Python scalar (weak type) or a NumPy array baked into the graph."""

    __slots__ = ("value", "aval")

    def __init__(self, value, aval: Aval):
        self.value = value
        self.aval = aval

    def __repr__(self):
        return f"Lit({_lit_str(self)})"


def _lit_str(lit: "Lit") -> str:
    v = lit.value
    if isinstance(v, _np.ndarray):
        if v.size <= 4:
            return _np.array2string(v, separator=",").replace("\n", "") + f":{lit.aval}"
        return f"const:{lit.aval}"
    return repr(v)


class Eqn:
    """``outs = op(ins; params) @ loc``.

    diff:  gradients flow through this eqn (it was recorded by autograd when traced);
    needs: per input, whether that input required grad when traced;
    fwd:   for eqns made by the transpose pass, the SourceLoc of the forward op they differentiate.
    check: anomaly mode only: ``AnomalyCheck`` for a value whose NaN/Inf must raise (a backward function's
           result, or any forward value under check_forward).
    """

    __slots__ = ("op", "ins", "outs", "params", "loc", "diff", "needs", "fwd", "check", "stack", "scope")

    def __init__(self, op, ins, outs, params, loc=None, diff=False, needs=None, fwd=None, check=None, stack=None):
        self.op = op
        self.ins = list(ins)
        self.outs = list(outs)
        self.params = dict(params)
        self.loc = loc
        self.diff = diff
        self.needs = tuple(needs) if needs is not None else tuple(isinstance(v, Var) for v in ins)
        self.fwd = fwd
        self.check = check
        self.stack = stack      # the forward Python stack (traced with anomaly mode on)
        self.scope = ()         # names of the record_function ranges open when the eqn was traced

    def replace(self, **changes) -> "Eqn":
        """A copy with some fields changed (passes use it so no annotation is dropped)."""
        e = Eqn(self.op, self.ins, self.outs, self.params, self.loc, self.diff, self.needs, self.fwd, self.check,
                self.stack)
        e.scope = self.scope
        for k, v in changes.items():
            setattr(e, k, list(v) if k in ("ins", "outs") else tuple(v) if k == "needs" else v)
        return e

    def __repr__(self):
        return f"Eqn({self.op.name})"


class AnomalyCheck:
    """What anomaly mode reports if an eqn's output is not finite: the backward function's name (or the
    forward op's), which of its outputs, forward or backward, and the forward Python stack."""

    __slots__ = ("name", "index", "backward", "loc", "stack")

    def __init__(self, name, index, backward, loc, stack=None):
        self.name = name
        self.index = index
        self.backward = backward
        self.loc = loc
        self.stack = stack


class Graph:
    """inputs (Vars), eqns (in a valid order), outputs (Vars or Lits)."""

    __slots__ = ("inputs", "eqns", "outputs", "compiled")

    def __init__(self, inputs, eqns, outputs):
        self.inputs = list(inputs)
        self.eqns = list(eqns)
        self.outputs = list(outputs)
        self.compiled = {}      # backends keep what they built for this graph here (it lives as long as the graph)

    def __str__(self):
        return format_graph(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return graphs_listing([(self, "graph")])._repr_html_()

    def copy(self) -> "Graph":
        return Graph(self.inputs, [e.replace() for e in self.eqns], self.outputs)


def _fmt_param(v) -> str:
    if isinstance(v, DType):
        return v.name
    return repr(v)


def format_graph(g: Graph, name: str = "graph") -> str:
    """The printer: every Var with its type, every eqn with the user's file:line."""
    return "\n".join(body.ljust(60) + "  # " + notes if notes else body
                     for body, notes, _ in graph_rows(g, name))


def graph_rows(g: Graph, name: str = "graph") -> list:
    """The printed graph as rows ``(code, notes, loc)``: ``notes`` is the trailing comment (the user's
    file:line, "grad of ...", "nograd") or None, ``loc`` the SourceLoc whose line the row comes from."""
    names = {}

    def nm(v):
        if isinstance(v, Lit):
            return _lit_str(v)
        if v not in names:
            names[v] = f"%{len(names)}"
        return names[v]

    head = ", ".join(f"{nm(v)}: {v.aval}" for v in g.inputs)
    rows = [(f"{name}({head}) {{", None, None)]
    for e in g.eqns:
        outs = ", ".join(f"{nm(o)}: {o.aval}" for o in e.outs)
        params = ""
        if e.params:
            params = "[" + ", ".join(f"{k}={_fmt_param(v)}" for k, v in e.params.items()) + "]"
        body = f"  {outs} = {e.op.name}{params} " + " ".join(nm(v) for v in e.ins)
        where = []
        if e.loc is not None:
            where.append(f"{e.loc.short()} {e.loc.function}")
        if e.fwd is not None and e.fwd is not e.loc:
            where.append(f"grad of {e.fwd.short()}")
        if not e.diff and e.op.vjp is not None:
            where.append("nograd")
        rows.append((body, "; ".join(where) if where else None, e.loc if e.loc is not None else e.fwd))
    rows.append(("  return " + ", ".join(nm(v) for v in g.outputs), None, None))
    rows.append(("}", None, None))
    return rows


def graphs_listing(graphs, sep: str = "\n\n") -> Listing:
    """``(graph, name)`` pairs printed as :func:`format_graph` prints them, joined by ``sep``: a notebook
    :class:`~jitgrad.ir.listing.Listing`."""
    texts, rows = [], []
    for g, name in graphs:
        texts.append(format_graph(g, name))
        if rows:
            rows.append(("", None, ()))
        rows.extend((body, notes, distinct_locs(loc)) for body, notes, loc in graph_rows(g, name))
    return Listing(sep.join(texts), rows)


class GraphError(AssertionError):
    pass


def verify(g: Graph) -> bool:
    """Check SSA form and types: each Var defined once before use, avals agree with the ops' rules."""
    defined = set()
    for v in g.inputs:
        if not isinstance(v, Var):
            raise GraphError(f"graph input {v!r} is not a Var")
        if v in defined:
            raise GraphError(f"graph input {v!r} appears twice")
        defined.add(v)
    for i, e in enumerate(g.eqns):
        for v in e.ins:
            if isinstance(v, Var) and v not in defined:
                raise GraphError(f"eqn {i} ({e.op.name}) uses {v!r} before it is defined")
            if not isinstance(v, (Var, Lit)):
                raise GraphError(f"eqn {i} ({e.op.name}) has an input that is neither Var nor Lit: {v!r}")
        try:
            want = e.op.shape_dtype([v.aval for v in e.ins], e.params)
        except Exception as err:  # noqa: BLE001 - report any rule failure as a graph error
            raise GraphError(f"eqn {i} ({e.op.name}) fails its shape/dtype rule: {err}") from None
        if len(want) != len(e.outs):
            raise GraphError(f"eqn {i} ({e.op.name}) has {len(e.outs)} outputs, rule says {len(want)}")
        for o, w in zip(e.outs, want):
            if o in defined:
                raise GraphError(f"eqn {i} ({e.op.name}) redefines {o!r}")
            if o.aval.shape != w.shape or o.aval.dtype is not w.dtype:
                raise GraphError(f"eqn {i} ({e.op.name}) output {o!r} has type {o.aval}, rule says {w}")
            defined.add(o)
        if len(e.needs) != len(e.ins):
            raise GraphError(f"eqn {i} ({e.op.name}) needs has {len(e.needs)} entries for {len(e.ins)} inputs")
    for v in g.outputs:
        if isinstance(v, Var) and v not in defined:
            raise GraphError(f"graph output {v!r} is not defined")
    return True
