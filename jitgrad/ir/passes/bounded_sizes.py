"""Data-dependent sizes given their bound: a trace's unbacked symbols (``ir/unbacked.py``: the length of
``nonzero(mask)``, so of ``x[mask]``) become the bound's size, and the run's count says how much of it is valid.

XLA's dynamic padder does the same for bounded dynamic shapes.  ``nonzero_bounded(mask, n; size=u)`` writes its
``n`` coordinates into a buffer of the bound's rows (the mask's number of elements), the first repeated after
them, and ``n`` (the count, computed in the graph) is the value of ``u`` for the call.  Every value whose shape
holds ``u`` is laid out at the bound's size; its first ``u`` entries along that dim are its elements, the rest
padding:

- elementwise ops, broadcasts, permutes, gathers by those coordinates (the padding repeats the first selected
  element's, so it computes what the data gives) and reshapes that keep ``u`` in the leading dim compute on the
  padding too, harmlessly;
- reductions over such a dim (``sum``, ``mean``'s sum, ``amax`` ...) and reverse scans read the padding as
  their identity (``where(iota < n, x, identity)``), a product over it (``matmul`` contracting it) as zeros, an
  accumulating ``index_put`` by such coordinates (``x[mask]``'s gradient) adds zeros for it, and a plain one
  (``y[mask] = v``) becomes accumulating ones (``write``);
- a literal computed from ``u`` (``mean``'s ``1 / u``) is computed from ``n``;
- outputs that hold ``u`` are trimmed after the call (``trims``: the output, its dim, and the graph output
  holding the valid length).

Any other use of such a dim (a slice or an index along it, a sort, a reshape moving it, state that keeps it) is
refused with :class:`~jitgrad.ir.unbacked.DataDependentSizeError` naming the op, the shapes and the user's line:
never a wrong answer.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..graph import Eqn, Graph, Lit, Var
from ..ops import OPS, Aval
from ..symbolic import _ATOMS, SymFloat, SymInt, has_symbols
from ..unbacked import DataDependentSizeError, is_unbacked, origin_of, poly_unbacked

PRODUCER = "nonzero_bounded"
_REDUCTION_FILL = {"sum": "zero", "normp": "zero", "norm2": "zero", "prod": "one", "prod_others": "one",
                   "amax": "low", "argmax": "low", "amin": "high", "argmin": "high"}
_PASS = frozenset(("broadcast_to", "permute", "copy", "cast", "delayed_error"))


def has_unbacked(g: Graph) -> bool:
    """Whether ``g`` holds a data-dependent size (an eqn that makes one; one bound with a plain size is none)."""
    return any(e.op.name == PRODUCER and type(e.params["size"]) is SymInt and poly_unbacked(e.params["size"].poly)
               for e in g.eqns)


def _unbacked_dims(aval) -> dict:
    """{dim: size} of the dims of ``aval`` whose size holds an unbacked symbol."""
    return {d: n for d, n in enumerate(aval.shape) if type(n) is SymInt and poly_unbacked(n.poly)}


def _symbol_of(size) -> str:
    (m, c), = size.poly
    return m[0]


class _Padder:
    def __init__(self, hints):
        self.hints = hints
        self.values: dict = {}      # unbacked name -> its bound (int or backed SymInt)
        self.counts: dict = {}      # unbacked name -> the count Var of the new graph
        self.sub: dict = {}         # old Var -> new Var
        self.eqns: list = []
        self.memo: dict = {}

    # -- building ---------------------------------------------------------------------------------------------
    def emit(self, name, ins, loc, diff=False, needs=None, **params):
        op = OPS[name]
        out = Var(op.shape_dtype([v.aval for v in ins], params)[0])
        self.eqns.append(Eqn(op, ins, [out], params, loc, diff=diff, needs=needs if diff else None))
        return out

    def size(self, x):
        """``x`` (shapes, params) with every unbacked symbol at its bound."""
        return _substitute(x, self.values, self.hints) if has_symbols(x) else x

    def poly_var(self, p, loc):
        """An int64 0-d value of the polynomial ``p`` at this call: unbacked symbols are their counts."""
        key = ("poly", p)
        v = self.memo.get(key)
        if v is not None:
            return v
        total = None
        for m, c in p:
            term = None if c == 1 else Lit(c, Aval((), dt.int64, True))
            for a in m:
                f = self.atom_var(a, loc)
                term = f if term is None else self.emit("mul", [term, f], loc)
            if term is None:
                term = Lit(c, Aval((), dt.int64, True))
            total = term if total is None else self.emit("add", [total, term], loc)
        if total is None:
            total = Lit(0, Aval((), dt.int64, True))
        if type(total) is Lit:
            total = self.emit("cast", [total], loc, dtype=dt.int64)
        self.memo[key] = total
        return total

    def atom_var(self, a, loc):
        if a in self.counts:
            return self.counts[a]
        if a in _ATOMS:
            op, x, y = _ATOMS[a]
            return self.emit("floordiv" if op == "floordiv" else "mod",
                             [self.poly_var(x, loc), self.poly_var(y, loc)], loc)
        return Lit(SymInt((((a,), 1),), self.hints.get(a, 0)), Aval((), dt.int64, True))

    def float_var(self, expr, loc):
        k = expr[0]
        if k == "int":
            return self.emit("cast", [self.poly_var(expr[1], loc)], loc, dtype=dt.float64)
        if k == "const":
            return Lit(np.array(expr[1], np.float64), Aval((), dt.float64))
        name = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow"}[k]
        return self.emit(name, [self.float_var(expr[1], loc), self.float_var(expr[2], loc)], loc)

    def valid(self, size, n_padded, ndim, d, loc):
        """A bool mask, broadcastable against a value of rank ``ndim``, true along dim ``d`` for its valid entries
        (``size``: the dim's symbolic size; ``n_padded``: its padded length)."""
        key = ("valid", size.poly, ndim, d)
        v = self.memo.get(key)
        if v is not None:
            return v
        one = Lit(np.array(1, np.int64), Aval((), dt.int64))
        ones = self.emit("broadcast_to", [one], loc, shape=(n_padded,))
        iota = self.emit("sub", [self.emit("cumsum", [ones], loc, axis=0, reverse=False),
                                 Lit(1, Aval((), dt.int64, True))], loc)
        v = self.emit("lt", [iota, self.poly_var(size.poly, loc)], loc)
        if ndim > 1:
            v = self.emit("reshape", [v], loc, shape=(1,) * d + (n_padded,) + (1,) * (ndim - d - 1))
        self.memo[key] = v
        return v

    def masked(self, new, old_aval, dims, fill, loc, diff):
        """``new`` with its padding along ``dims`` replaced by ``fill`` ("zero", "one", "low", "high"; "first":
        the dim's first entry, which the data gives when there is one, else 0; ``("first", value)``: else
        ``value``)."""
        for d in sorted(dims):
            size = old_aval.shape[d]
            nd = len(old_aval.shape)
            ok = self.valid(size, new.aval.shape[d], nd, d, loc)
            if fill == "first" or type(fill) is tuple:     # (0, or the given value, when the dim is empty)
                head = self.emit("getitem", [new], loc,
                                 spec=(("slice", None, None, None),) * d + (("slice", 0, 1, None),))
                some = self.emit("gt", [self.poly_var(size.poly, loc), Lit(0, Aval((), dt.int64, True))], loc)
                other = self.emit("where", [some, head, fill[1] if type(fill) is tuple else
                                            _fill_lit("zero", new.aval.dtype)], loc)
            else:
                other = _fill_lit(fill, new.aval.dtype)
            new = self.emit("where", [ok, new, other], loc, diff=diff, needs=(False, True, False))
        return new

    # -- the walk ---------------------------------------------------------------------------------------------
    def value(self, v, e):
        if type(v) is Var:
            return self.sub.get(v, v)
        val = v.value
        if type(val) is SymInt and poly_unbacked(val.poly):
            return self.poly_var(val.poly, e.loc)
        if type(val) is SymFloat and "u" in repr(val):
            f = self.float_var(val.expr, e.loc)
            out = e.outs[0].aval.dtype if e.outs and e.outs[0].aval.dtype.is_floating_point else v.aval.dtype
            return self.emit("cast", [f], e.loc, dtype=out)
        if type(val) is SymInt:
            return Lit(self.size(val), v.aval)
        return v

    def run(self, g: Graph, n_user: int):
        for v in g.inputs:
            self.sub[v] = v
        for e in g.eqns:
            self.eqn(e)
        outs, trims, extra = [], [], []
        for k, v in enumerate(g.outputs):
            nv = self.value(v, None) if type(v) is Lit else self.sub.get(v, v)
            outs.append(nv)
            dims = _unbacked_dims(v.aval) if type(v) is Var else {}
            if not dims:
                continue
            if k >= n_user:
                raise _refuse("state written back by the function", [v.aval], None, dims,
                              "a value of data-dependent size kept outside the function (a write-back, a .grad)")
            for d, size in sorted(dims.items()):
                extra.append(self.poly_var(size.poly, None))
                trims.append((k, d, len(g.outputs) + len(extra) - 1))
        return Graph(list(g.inputs), self.eqns, outs + extra), tuple(trims)

    def eqn(self, e: Eqn):
        name = e.op.name
        old_in = [v.aval for v in e.ins]
        ins = [self.value(v, e) for v in e.ins]
        dims = [_unbacked_dims(v.aval) if type(v) is Var else {} for v in e.ins]
        params = self.size(e.params)
        diff = e.diff

        def needs(i):
            return diff and i < len(e.needs) and e.needs[i]
        if name == PRODUCER and type(e.params["size"]) is SymInt and poly_unbacked(e.params["size"].poly):
            if dims[0]:         # nonzero of a value of data-dependent size: its padding counts as zeros
                ins[0] = self.masked(ins[0], old_in[0], dims[0], "zero", e.loc, False)
            u = _symbol_of(e.params["size"])
            bound = 1
            for n in ins[0].aval.shape:
                bound = bound * n
            self.values[u] = bound
            self.counts[u] = ins[1]
            params = dict(e.params, size=bound)
        elif not any(dims) or e.op.family == "elementwise" or name in _PASS:
            pass
        elif name in _REDUCTION_FILL:
            axes = e.params.get("axes", e.params.get("axis"))
            axes = tuple(range(len(old_in[0].shape))) if axes is None else \
                (axes,) if type(axes) is int else tuple(axes)
            red = {d for d in dims[0] if d in axes}
            if red:
                ins[0] = self.masked(ins[0], old_in[0], red, _REDUCTION_FILL[name], e.loc, needs(0))
        elif name in ("cumsum", "cumprod"):
            # a prefix scan's valid entries never read the padding; a reverse one's read it as the identity
            if e.params.get("reverse") and e.params["axis"] in dims[0]:
                ins[0] = self.masked(ins[0], old_in[0], {e.params["axis"]}, "zero" if name == "cumsum" else "one",
                                     e.loc, needs(0))
        elif name == "reshape":
            if not _leading(old_in[0].shape, e.outs[0].aval.shape):
                raise _refuse(name, old_in, e, dims[0], "it moves a data-dependent size out of the leading dim")
        elif name in ("getitem", "index_put"):
            r = self.index(e, ins, old_in, dims, needs)
            if r is not None:       # the eqn became others: its output is their value
                self.sub[e.outs[0]] = r
                return
        elif name == "matmul":
            a, b = old_in
            ka, kb = len(a.shape) - 1, (len(b.shape) - 2 if len(b.shape) >= 2 else 0)
            if ka in dims[0] or kb in dims[1]:      # a product over the data-dependent dim: padding as zeros
                if ka in dims[0]:
                    ins[0] = self.masked(ins[0], a, {ka}, "zero", e.loc, needs(0))
                if kb in dims[1]:
                    ins[1] = self.masked(ins[1], b, {kb}, "zero", e.loc, needs(1))
        elif name in ("cat", "flip") or e.op.family in ("reduce", "scan"):
            axes = e.params.get("axes", e.params.get("axis", e.params.get("dims")))
            axes = set(range(len(old_in[0].shape))) if axes is None else {axes} if type(axes) is int else set(axes)
            if any(axes & set(dd) for dd in dims):
                raise _refuse(name, old_in, e, next(dd for dd in dims if dd),
                              "it works along a data-dependent size")
        else:
            raise _refuse(name, old_in, e, next(dd for dd in dims if dd), "it cannot take a data-dependent size")
        outs = []
        for v in e.outs:
            a = v.aval
            w = Var(Aval(self.size(a.shape), a.dtype, a.weak)) if has_symbols(a.shape) else v
            self.sub[v] = w
            outs.append(w)
        self.eqns.append(e.replace(ins=ins, outs=outs, params=params))


    def index(self, e, ins, old_in, dims, needs):
        """getitem / index_put with values of data-dependent size: their index tensors' padding points where
        their first entry does (an accumulated value there is zero); an index into a data-dependent dim is
        checked against the count (negatives wrap by it; out of range it points past the bound, where the
        kernel's check raises).  A Var when the eqn's output is computed otherwise (``write``), else None."""
        name, spec, k0 = e.op.name, e.params["spec"], 1 if e.op.name == "getitem" else 2
        put = name == "index_put"
        for d, s in _spec_dims(spec, len(old_in[0].shape)):
            if d in dims[0] and not (type(s) is tuple and s[0] == "tensor") and not _whole(s):
                raise _refuse(name, old_in, e, dims[0], "it slices or indexes along a data-dependent size")
        idx_syms = {a for dd in dims[k0:] for a in _names(dd)}
        accumulate = put and e.params.get("accumulate")
        if put and not idx_syms and dims[1]:
            raise _refuse(name, old_in, e, dims[1], "its value has a data-dependent size its indices do not have")
        if accumulate and not idx_syms <= _names(dims[1]):
            raise _refuse(name, old_in, e, next(dd for dd in dims[k0:] if dd),
                          "its value does not follow the data-dependent indices")
        for d, s in _spec_dims(spec, len(old_in[0].shape)):
            if not (type(s) is tuple and s[0] == "tensor"):
                continue
            j = k0 + s[1]
            if d in dims[0]:
                ins[j] = self.checked(ins[j], dims[0][d], ins[0].aval.shape[d], e.loc)
            if dims[j]:         # (an index computed from padding, arange(u)'s, may be out of range)
                ins[j] = self.masked(ins[j], old_in[j], dims[j], "first", e.loc, False)
        if accumulate and dims[1]:
            ins[1] = self.masked(ins[1], old_in[1], dims[1], "zero", e.loc, needs(1))
        elif put and idx_syms:
            return self.write(e, ins, old_in, k0, needs)
        return None

    def write(self, e, ins, old_in, k0, needs):
        """``y[mask] = v`` (index_put by data-dependent indices, not accumulating), as a value for its output.  A
        float one is ``where(hits > 0, scatter_add(0, v), x)``, the padding adding zeros and no hits: every later
        pass, the transpose pass's vjps included, sees only writes the padding cannot disturb (torch leaves
        duplicate indices undefined; nonzero's have none).  Others (no gradient): the padding's indices point where
        the first valid one does and write its value, or with none valid at element 0 its own value back."""
        spec, loc, x = e.params["spec"], e.loc, ins[0]
        old_tgt = OPS["getitem"].shape_dtype([old_in[0]] + old_in[k0:], {"spec": spec})[0]
        tgt = self.size(old_tgt.shape)
        dtype = x.aval.dtype
        v = ins[1]
        if type(v) is Lit and not isinstance(v.value, np.ndarray):     # a Python scalar: an array to broadcast
            v = Lit(np.array(v.value, dtype.np), Aval((), dtype))
        if v.aval.dtype is not dtype:
            v = self.emit("cast", [v], loc, diff=needs(1), needs=(True,), dtype=dtype)
        if tuple(v.aval.shape) != tuple(tgt):
            v = self.emit("broadcast_to", [v], loc, diff=needs(1), needs=(True,), shape=tuple(tgt))
        udims = _unbacked_dims(old_tgt)
        if not dtype.is_floating_point:
            cur = self.emit("getitem", [x] + ins[k0:], loc, spec=spec)
            ins[1] = self.masked(v, old_tgt, udims, ("first", cur), loc, needs(1))
            return None
        zero = self.emit("broadcast_to", [Lit(np.array(0, dtype.np), Aval((), dtype))], loc, shape=tuple(x.aval.shape))
        one = self.emit("broadcast_to", [Lit(np.array(1, dtype.np), Aval((), dtype))], loc, shape=tuple(tgt))
        n = len(ins) - k0
        added = self.emit("index_put", [zero, self.masked(v, old_tgt, udims, "zero", loc, needs(1))] + ins[k0:], loc,
                          diff=needs(1), needs=(False, True) + (False,) * n, spec=spec, accumulate=True)
        hits = self.emit("index_put", [zero, self.masked(one, old_tgt, udims, "zero", loc, False)] + ins[k0:], loc,
                         spec=spec, accumulate=True)
        hit = self.emit("gt", [hits, Lit(0, Aval((), dt.int64, True))], loc)
        return self.emit("where", [hit, added, x], loc, diff=e.diff, needs=(False, needs(1), needs(0)))

    def checked(self, idx, size, n_padded, loc):
        """Index values into a dim of data-dependent ``size`` (padded to ``n_padded``): wrapped by the count when
        negative, and ``n_padded`` (out of range: the kernel's bounds check raises) unless in [0, count)."""
        n = self.poly_var(size.poly, loc)
        zero = Lit(0, Aval((), dt.int64, True))
        j = self.emit("where", [self.emit("lt", [idx, zero], loc), self.emit("add", [idx, n], loc), idx], loc)
        ok = self.emit("logical_and", [self.emit("ge", [j, zero], loc), self.emit("lt", [j, n], loc)], loc)
        past = n_padded if type(n_padded) is int else SymInt(n_padded.poly, n_padded.hint)
        return self.emit("where", [ok, j, Lit(past, Aval((), dt.int64, True))], loc)


def _whole(s) -> bool:
    return type(s) is tuple and s[0] == "slice" and s[1] in (None, 0) and s[2] is None and s[3] in (None, 1)


def _spec_dims(spec, ndim):
    """(input dim, spec entry) for each entry of an index ``spec`` that takes an input dim (Ellipsis expanded as
    whole slices)."""
    out, k = [], 0
    rest = sum(1 for s in spec if s is not None and s is not Ellipsis and type(s) is not bool)
    for s in spec:
        if s is None or type(s) is bool:
            continue
        if s is Ellipsis:
            for _ in range(ndim - rest):
                out.append((k, ("slice", None, None, None)))
                k += 1
            continue
        out.append((k, s))
        k += 1
    return out


def _names(dims) -> set:
    return {a for n in dims.values() for m, _ in n.poly for a in m if is_unbacked(a)}


def _leading(a, b) -> bool:
    """A reshape from shape ``a`` to ``b`` keeps the valid entries a prefix: no unbacked symbol, or one only in the
    leading dim of both (linearly), the same number of elements per unit of it."""
    da, db = [_unbacked_dims(Aval(s, dt.int64)) for s in (a, b)]
    if not da and not db:
        return True
    return set(da) == {0} == set(db) and _names(da) == _names(db) and len(_names(da)) == 1


def _fill_lit(kind, dtype):
    if kind in ("zero", "one"):
        return Lit(kind == "one", Aval((), dt.bool_, True)) if dtype is dt.bool_ else \
            Lit(1 if kind == "one" else 0, Aval((), dt.int64 if not dtype.is_floating_point else dt.float32, True))
    low = kind == "low"
    if dtype is dt.bool_:
        return Lit(not low, Aval((), dt.bool_, True))
    if dtype.is_floating_point:
        return Lit(-np.inf if low else np.inf, Aval((), dt.float32, True))
    info = np.iinfo(dtype.np)
    return Lit(int(info.min if low else info.max), Aval((), dt.int64, True))


def _refuse(name, avals, e, dims, why) -> DataDependentSizeError:
    where = e.loc.where() if e is not None and e.loc is not None else "an unknown line"
    text = f" ({e.loc.text})" if e is not None and e.loc is not None and e.loc.text else ""
    return DataDependentSizeError(
        f"{name} on {', '.join(map(repr, avals))} inside a @jitgrad.compile function, at {where}{text}: {why}. "
        f"Data-dependent sizes ({origin_of(sorted(_names(dims)))}) are bounded, not known, when the function is "
        "compiled: elementwise ops, reductions, matmul, gathers and writes by a mask, leading-dim reshapes take "
        "them. "
        "Fix: keep full shapes with torch.where(mask, x, 0) / mask.sum(), use nonzero_static(size=...), or "
        "pass fullgraph=False to run this signature eagerly.")


def _substitute(x, values, hints):
    """``x`` with the symbols named in ``values`` replaced (ints or SymInts), the others kept."""
    t = type(x)
    if t is SymInt:
        return _subst(x.poly, values, hints) if poly_unbacked(x.poly) else x
    if t is tuple or isinstance(x, tuple):
        return tuple(_substitute(v, values, hints) for v in x)
    if t is list:
        return [_substitute(v, values, hints) for v in x]
    if t is dict:
        return {k: _substitute(v, values, hints) for k, v in x.items()}
    if t is slice:
        return slice(*(_substitute(v, values, hints) for v in (x.start, x.stop, x.step)))
    return x


def _subst(p, values, hints):
    total = 0
    for m, c in p:
        term = c
        for a in m:
            v = values.get(a)
            if v is None:
                if a in _ATOMS:
                    op, x, y = _ATOMS[a]
                    xv, yv = _subst(x, values, hints), _subst(y, values, hints)
                    v = xv // yv if op == "floordiv" else xv % yv
                else:
                    v = SymInt((((a,), 1),), hints.get(a, 0))
            term = term * v
        total = total + term
    return total


def pad_unbacked(g: Graph, n_user: int, hints: dict | None = None):
    """``(graph, trims)``: ``g`` with every data-dependent size at its bound (see the module docstring);
    ``trims``: ``(output, dim, length output)`` for the first ``n_user`` outputs that hold one (the graph returns
    their valid lengths after its own outputs).  ``hints``: the backed symbols' values in the trace."""
    return _Padder(hints or {}).run(g, n_user)


__all__ = ["PRODUCER", "has_unbacked", "pad_unbacked"]
