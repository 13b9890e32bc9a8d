"""Where every value of a compiled graph lives: the place assignment both targets share.

A graph has fixed shapes, so this is decided once, in Python, while a target lowers the fusion plan
(``lowering.lower_plan``): every Var gets a *place*, a root buffer plus an element offset, shape, element strides
and dtype.  Roots are:

- ``input``: the k-th graph input (a state updated in place is written here);
- ``lit``: a literal array, uploaded or pointed at once;
- ``ws``: a slot of the workspace, one buffer kept with the compiled graph (``offset``: its byte offset);
- ``fresh``: an array handed to the caller, new per call (``index``: its number in ``Places.fresh``).

Decided here, for the CPU (``layout.Program``) and CUDA (``cuda_launches.Launches``) alike:

- views are free: a view op's place is computed by running its NumPy impl on a strided dummy array (views never
  read data); a reshape of data its strides cannot express is materialised first (a contiguous workspace copy);
- a workspace slot is reused by a later value of the same byte size once every reader of the value it held
  (and of every view of it) has run: the workspace is bounded by the live values, not by the graph's length;
- a state update (``writes``: output -> input) that nothing reads afterwards, and that no anomaly check or
  raising step could veto, is computed straight into the state's buffer; the others are copied back at the end
  by a guarded *write-back*;
- an output is handed back as it is (an input, or a whole fresh buffer), or copied into a fresh buffer.

The place rules are target-neutral; a target only emits its copies (``copy(src, dst, label)``, given at
construction) and lays out its own arguments (the CPU's argument-table slots, CUDA's device arrays).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Lit, Var
from ..ir.symbolic import SymInt, has_symbols, size_key
from ..ir.ops.index import np_index, single_tensor_axis
from ..ir.plan import Group, LoopBatch
from .input_reuse import over_dying_input
from .place_types import Place, Root, bcast_strides, c_strides, coalesce
from .kernels.loops import raises_in_loop
from .lowering import step_kind

_ALIGN = 64      # workspace slots start at cache-line (and vector-width) boundaries

# step kinds whose step may raise at run time (an index out of range, a NumPy step's error; a collective may
# decline to a Python step): no state is written in place at or before them
RAISING_KINDS = ("gather", "scatter", "scatter_reduce", "row_gather", "row_scatter", "host", "collective")


def _dummy(place: Place):
    """A strided dummy array with ``place``'s shape and strides over one element (views never read data)."""
    item = place.dtype.np.itemsize
    return np.lib.stride_tricks.as_strided(np.zeros(1, place.dtype.np), place.shape,
                                           [s * item for s in place.strides])


def _place_of(res, dummy, src: Place) -> Place | None:
    base = res      # a view's bases reach the dummy (a copy may well lie in the span it does not own)
    while base is not None and base is not dummy:
        base = getattr(base, "base", None)
    if base is None:
        return None
    item = src.dtype.np.itemsize
    off = (res.__array_interface__["data"][0] - dummy.__array_interface__["data"][0]) // item
    return Place(src.root, src.offset + off, res.shape, [s // item for s in res.strides], src.dtype)


def view_place(e, src: Place):
    """The place of view op ``e``'s output over ``src``, found by running the op's NumPy impl on a strided dummy
    array; None when the result is not a view of it (then the op must run)."""
    if has_symbols(src.shape) or has_symbols(src.strides) or has_symbols(e.outs[0].aval.shape) \
            or has_symbols(e.params):
        p = _symbolic_view(e, src)
        if p is not _UNKNOWN:
            return p
    dummy = _dummy(src)     # (symbolic sizes: specialised, guarded, for the views _symbolic_view lacks)
    if e.op.name == "reshape":      # never NumPy's copy: it would read all the memory the dummy spans
        res = dummy.view()
        with contextlib.suppress(AttributeError):   # (a copy needed: the shape stays the source's)
            res.shape = e.params["shape"]
    else:
        res = e.op.impl(dummy, **e.params)
    if not isinstance(res, np.ndarray) or not np.may_share_memory(res, dummy) or res.shape != e.outs[0].aval.shape:
        return None
    return _place_of(res, dummy, src)


def _symbolic_view(e, src: Place):
    """A view over a place with symbolic sizes, computed on the sizes themselves (a dummy array needs ints):
    permute, broadcast_to, a reshape (None when its strides do not allow it), a basic index; ``_UNKNOWN`` for
    the others.  Each decision on
    a size is a guard of the active ShapeEnv (``ir/symbolic.py``), as any comparison of sizes."""
    name = e.op.name
    if name == "reshape":
        st = _reshape_strides(src.shape, src.strides, e.outs[0].aval.shape)
        return None if st is None else Place(src.root, src.offset, e.outs[0].aval.shape, st, src.dtype)
    if name == "getitem" and len(e.ins) == 1:
        p = _basic_index(src, e.params["spec"])
        return _UNKNOWN if p is None else p
    if name == "permute":
        perm = e.params["perm"]
        return Place(src.root, src.offset, [src.shape[p] for p in perm], [src.strides[p] for p in perm], src.dtype)
    if name == "broadcast_to":
        shape = tuple(e.params["shape"])
        lead = len(shape) - len(src.shape)
        st = [0] * lead + [0 if (type(d) is int and d == 1 and not (type(n) is int and n == 1)) else s
                           for d, s, n in zip(src.shape, src.strides, shape[lead:])]
        return Place(src.root, src.offset, shape, st, src.dtype)
    return _UNKNOWN


_UNKNOWN = object()     # (_symbolic_view: a view it does not compute)


def _reshape_strides(old, strides, new):
    """Element strides of ``old``-shaped data with ``strides`` viewed as shape ``new`` without a copy, or None when
    its strides cannot express it (torch's view rule: each run of dims walked as one is split or merged)."""
    if math.prod(old) != math.prod(new):
        return None
    out = [0] * len(new)
    if not old:
        return tuple(c_strides(new))
    view_d = len(new) - 1
    base = strides[-1]
    t_numel = v_numel = 1
    for d in range(len(old) - 1, -1, -1):
        t_numel = t_numel * old[d]
        if d == 0 or (not (type(old[d - 1]) is int and old[d - 1] == 1)
                      and strides[d - 1] != t_numel * base):
            while view_d >= 0 and (v_numel < t_numel or (type(new[view_d]) is int and new[view_d] == 1)):
                out[view_d] = v_numel * base
                v_numel = v_numel * new[view_d]
                view_d -= 1
            if v_numel != t_numel:
                return None
            if d > 0:
                base = strides[d - 1]
                t_numel = v_numel = 1
    if view_d != -1:
        return None
    return tuple(out)


def _basic_index(place: Place, spec):
    """The place of ``x[spec]`` over ``place`` for a basic index (slices of step 1 or more, ints, None,
    Ellipsis) computed on its sizes; None for anything else (the dummy array's way answers it)."""
    n_real = sum(1 for s in spec if s is not None and s is not Ellipsis)
    shape, strides, off, k = [], [], place.offset, 0
    for s in spec:
        if s is Ellipsis:
            for _ in range(len(place.shape) - n_real):
                shape.append(place.shape[k])
                strides.append(place.strides[k])
                k += 1
        elif s is None:
            shape.append(1)
            strides.append(0)
        elif type(s) is tuple and s[0] == "slice":
            start, stop, step = s[1:]
            step = 1 if step is None else step
            if type(step) is not int or step < 1:
                return None
            n = place.shape[k]
            start = 0 if start is None else _clamp(start + n if start < 0 else start, n)
            stop = n if stop is None else _clamp(stop + n if stop < 0 else stop, n)
            length = stop - start if stop > start else 0
            if step != 1:
                length = (length + step - 1) // step
            shape.append(length)
            strides.append(place.strides[k] * step)
            off = off + start * place.strides[k]
            k += 1
        elif type(s) is int or type(s) is SymInt:
            n = place.shape[k]
            off = off + (s + n if s < 0 else s) * place.strides[k]
            k += 1
        else:
            return None
    shape += place.shape[k:]
    strides += place.strides[k:]
    return Place(place.root, off, shape, strides, place.dtype)


def _clamp(i, n):
    return 0 if i < 0 else n if i > n else i


def region_place(place: Place, spec):
    """The place of ``x[spec]`` (a basic index) over ``place``, found on a strided dummy array as views are;
    None when it is not a view."""
    if has_symbols(place.shape) or has_symbols(place.strides) or has_symbols(spec):
        p = _basic_index(place, spec)
        if p is not None:
            return p
    dummy = _dummy(place)
    res = dummy[np_index(spec, ())]
    return _place_of(res, dummy, place) if isinstance(res, np.ndarray) else None


class GroupOperands:
    """The operands of one fused loop (``Places.group``): ``ins`` (the Vars and array literals it reads) and
    their places ``in_places``, ``out_places`` (one per group output), the coalesced iteration ``shape``, each
    operand's element strides over it (``in_strides``, ``out_strides``; a reduction's output has stride 0 along
    the reduced axes), ``red_out`` (the reduction's output index) and ``red_axes`` (its axes in ``shape``),
    ``in_place`` (an output is written into its state's buffer) and ``size`` (elements iterated).  A group that
    loads or stores by an index (``Group.gathers``, ``Group.scatters``) has, after its plain inputs, each gather's
    index and array, then each scatter's index; after its plain outputs, each scatter's output; ``indexed``: the
    indexed axis's (stride, size) of each gather, then of each scatter."""
    __slots__ = ("ins", "in_places", "out_places", "shape", "in_strides", "out_strides", "red_out", "red_axes",
                 "in_place", "size", "indexed")

    def __init__(self, ins, in_places, out_places, shape, in_strides, out_strides, red_out, red_axes, in_place,
                 size, indexed=()):
        self.ins, self.in_places, self.out_places, self.shape = ins, in_places, out_places, shape
        self.in_strides, self.out_strides, self.red_out, self.red_axes = in_strides, out_strides, red_out, red_axes
        self.in_place, self.size = in_place, size
        self.indexed = list(indexed)     # (stride, size) of the indexed axis: per gather, then per scatter


class Places:
    """The places of one graph's values as a target lowers its plan (see the module docstring).

    Reads like a dict ``Var -> Place`` (``places[v]``, ``in``, ``items``); ``place(v)`` also takes literals.
    ``n`` is the plan step being lowered (set by ``lowering.lower_plan``); ``release(n)`` after each step frees
    the workspace slots nothing reads any more.  ``copy(src, dst, label)`` is the target's copy emitter, called
    for materialised views and output copies."""

    def __init__(self, graph, plan, writes=(), check_ids=None, copy=None):
        self.graph = graph
        self.copy = copy
        self._of = {}                # Var -> Place; id(Lit) -> Place
        self.roots = []
        self.fresh = []              # fresh output roots, in allocation order
        self.ws_size = 0             # bytes of workspace
        self.n = 0
        self._free = {}              # slot byte size -> free slot offsets
        self._liveness(plan)
        for k, v in enumerate(graph.inputs):
            if v not in self._of:
                r = self._root("input", index=k, shape=v.aval.shape, dtype=v.aval.dtype)
                self._of[v] = Place(r, 0, v.aval.shape, c_strides(v.aval.shape), v.aval.dtype)
        # state updates computed straight into the state's buffer when nothing reads the old value afterwards
        # and nothing could veto the update: no copy pass, no fresh buffer (an SGD step over all params).  An
        # anomaly check vetoes every state update: then none is computed in place.  A step that can raise vetoes
        # those computed at or before it; later ones run only when it did not raise (the targets skip their
        # ``state_write`` steps once a step raised)
        self.last_raising = max([n for n, s in enumerate(plan.steps) if step_kind(s) in RAISING_KINDS or (
            isinstance(s, Group) and (s.gathers or s.scatters or any(raises_in_loop(e) for e in s.eqns)))],
            default=-1)
        outs = [v for v in graph.outputs if isinstance(v, Var)]
        self.out_ids = {id(v) for v in outs}      # the graph's outputs by id (buffer, base_reusable, permuted_c)
        self.inplace = {} if check_ids else {
            graph.outputs[o]: i for o, i in writes
            if isinstance(graph.outputs[o], Var) and outs.count(graph.outputs[o]) == 1
            and graph.outputs[o] not in graph.inputs}
        self.inplace_done = set()    # outputs computed in place (their write-back is done)
        self.writes = tuple(writes)

    # ---- the mapping ------------------------------------------------------------------------------------
    def __getitem__(self, v) -> Place:
        return self._of[v]

    def __setitem__(self, v, place: Place):
        self._of[v] = place

    def __contains__(self, v) -> bool:
        return v in self._of

    def items(self):
        return self._of.items()

    def place(self, v) -> Place:
        """The place of Var or literal ``v`` (a literal gets a root holding a C-contiguous copy of its value)."""
        if isinstance(v, Lit):
            p = self._of.get(id(v))
            if p is None:
                a = np.array(v.value if isinstance(v.value, np.ndarray) else np.asarray(v.value, v.aval.dtype.np),
                             dtype=v.aval.dtype.np, order="C", copy=True)
                r = self._root("lit", array=a, shape=a.shape, dtype=v.aval.dtype)
                p = self._of[id(v)] = Place(r, 0, a.shape, c_strides(a.shape), v.aval.dtype)
            return p
        return self._of[v]

    # ---- liveness ---------------------------------------------------------------------------------------
    def _liveness(self, plan):
        self.last_use = {}           # Var -> the last plan step that reads it (graph outputs: after the last)
        self.uses = {}               # Var -> plan step indices that read it
        for n, s in enumerate(plan.steps):
            for v in (s.reads if isinstance(s, (Group, LoopBatch)) else s.ins):
                if isinstance(v, Var):
                    self.last_use[v] = n
                    self.uses.setdefault(v, []).append(n)
        end = len(plan.steps)
        for v in self.graph.outputs:
            if isinstance(v, Var):
                self.last_use[v] = end
        # workspace roots not yet free: id(root) -> (root, last plan step that reads it or a view of it); and
        # step -> roots that may become free after it (stale entries are skipped): linear in the graph
        self._live_ws = {}
        self._ends = {}

    def hold(self, r: Root, v):
        """Workspace root ``r`` stays in use until the last reader of ``v`` (its value or a view of it) ran."""
        self._hold_until(r, self.last_use.get(v, -1))

    def _hold_until(self, r: Root, end: int):
        cur = self._live_ws.get(id(r))
        if cur is not None and cur[1] >= end:
            return
        self._live_ws[id(r)] = (r, end)
        self._ends.setdefault(end if end >= self.n else -1, []).append(r)

    def release(self, n: int):
        """After plan step ``n``: the workspace slots nothing reads any more are free for later values."""
        for end in [e for e in (-1, n) if e in self._ends]:
            for r in self._ends.pop(end):
                cur = self._live_ws.get(id(r))
                if cur is not None and cur[1] <= n:
                    del self._live_ws[id(r)]
                    self._free.setdefault(size_key(r.nbytes), []).append(r.offset)

    # ---- buffers ----------------------------------------------------------------------------------------
    def _root(self, kind, **kw) -> Root:
        r = Root(kind, **kw)
        self.roots.append(r)
        return r

    def lit_root(self, array: np.ndarray, dtype: dt.DType) -> Root:
        """A root over ``array`` (a buffer a step owns, e.g. a collective's send buffer)."""
        return self._root("lit", array=array, shape=array.shape, dtype=dtype, nbytes=array.nbytes)

    def buffer(self, v, shape, dtype: dt.DType, fresh=None) -> Place:
        """A contiguous buffer for ``v``: fresh if it is a graph output, else a workspace slot held until
        ``v``'s last reader (``v`` None: never released)."""
        nbytes = math.prod(shape) * dtype.np.itemsize
        if type(nbytes) is not SymInt:
            nbytes = max(int(nbytes), 1)
        if fresh is None:
            fresh = v is not None and id(v) in self.out_ids
        if fresh:
            r = self._root("fresh", index=len(self.fresh), shape=shape, dtype=dtype, nbytes=nbytes)
            self.fresh.append(r)
        else:
            r = self._root("ws", shape=shape, dtype=dtype, nbytes=(nbytes + _ALIGN - 1) // _ALIGN * _ALIGN)
            free = self._free.get(size_key(r.nbytes))
            if free:
                r.offset = free.pop()
            else:
                r.offset = self.ws_size
                self.ws_size += r.nbytes
            if v is not None:
                self.hold(r, v)
        return Place(r, 0, shape, c_strides(shape), dtype)

    def assign(self, v) -> Place:
        """``v``'s own buffer (see ``buffer``), recorded as its place."""
        p = self._of[v] = self.buffer(v, v.aval.shape, v.aval.dtype)
        return p

    def scratch(self, shape, dtype: dt.DType) -> Place:
        """A workspace buffer that only the step being lowered uses (a reduction's partial results)."""
        p = self.buffer(None, shape, dtype)
        self._hold_until(p.root, self.n)
        return p

    def materialize(self, v, place: Place) -> Place:
        """A contiguous copy of ``place`` in a workspace slot, held as ``v``'s buffer (the copy is emitted)."""
        dst = self.buffer(None, place.shape, place.dtype)
        self.hold(dst.root, v)
        self.copy(place, dst, "copy (layout)")
        return dst

    # ---- views ------------------------------------------------------------------------------------------
    def view(self, e):
        """Record the place of view op ``e``'s output; None when it is not a view (the op runs as a step)."""
        src = self.place(e.ins[0])
        out = e.outs[0]
        if e.op.name == "reshape":
            # a strided source reshapes in place when its strides allow (torch's view rule: heads of a split)
            p = None if src.contiguous() else view_place(e, src)
            if p is None:
                if not src.contiguous():
                    src = self.materialize(e.ins[0], src)
                p = Place(src.root, src.offset, out.aval.shape, c_strides(out.aval.shape), src.dtype)
        else:
            p = view_place(e, src)
            if p is None:
                return None
        self._of[out] = p
        if id(p.root) in self._live_ws:
            self.hold(p.root, out)
        return p

    # ---- fused loops ------------------------------------------------------------------------------------
    def group(self, g: Group, reuse=False) -> "GroupOperands":
        """The operands of fusion group ``g``'s loop, its outputs placed (a reduction's in a buffer of its own,
        an update in place when ``writes_in_place`` allows, the others in buffers of their own or, ``reuse``, over
        a dying input's), and the iteration space with every operand's strides coalesced (``GroupOperands``)."""
        it = g.shape
        ins = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
        in_st = [bcast_strides(self.place(v), it) for v in ins]
        # loads by an index: each gather's index, then its array (strides 0 along the index's dims; the indexed
        # axis's stride and size are ``indexed``'s); then each scatter's index
        indexed = []
        for e in g.gathers:
            (xs, ix), (k, stride, size) = self._indexed(e.ins[0], e.ins[1], e.params["spec"], self.place(e.ins[0]))
            ins += [e.ins[1], e.ins[0]]
            in_st += [ix, xs]
            indexed.append((stride, size))
        for e in g.scatters:
            ins.append(e.ins[2])
        red = g.reduce
        outs, out_st, in_place = [], [], False
        for o in g.outputs:
            if red is not None and o is red.outs[0]:
                p = self.assign(o)
                axes = red.params["axes"]
                cs = c_strides(tuple(1 if i in axes else d for i, d in enumerate(it)))
                out_st.append([0 if i in axes else cs[i] for i in range(len(it))])
            elif len(o.aval.shape) == len(it) and tuple(o.aval.shape) != tuple(it):
                # a value of a row-wise group (ir/passes/row_chains.py) of the row's shape (..., 1): one element
                # per row, stride 0 along the row axis, as a reduction's
                p = self.assign(o)
                out_st.append(list(bcast_strides(p, it)))
            else:
                if self.writes_in_place(o, g):
                    p, in_place = self.state_place(o), True
                else:       # (a fused loop's: over an input it is the last to read, ``input_reuse.py``)
                    p = reuse and over_dying_input(self, o, g, outs) or self.assign(o)
                out_st.append(list(c_strides(it)))
            outs.append(p)
        # stores by an index: each scatter's output (its base copied in first by the target), its index's strides
        # among the inputs'
        for e in g.scatters:
            p = self.assign(e.outs[0])
            (os_, ix), (k, stride, size) = self._indexed(e.outs[0], e.ins[2], e.params["spec"], p)
            in_st.append(ix)
            out_st.append(os_)
            outs.append(p)
            indexed.append((stride, size))
        shape, sts = coalesce(it, in_st + out_st)
        red_out = red_axes = None
        if red is not None:
            red_out = g.outputs.index(red.outs[0])
            red_axes = tuple(d for d in range(len(shape)) if sts[len(ins) + red_out][d] == 0)
        return GroupOperands(ins, [self.place(v) for v in ins], outs, shape, sts[:len(ins)], sts[len(ins):],
                             red_out, red_axes, in_place, math.prod(it), indexed)

    def _indexed(self, x, idx, spec, px):
        """``(x's strides, the index's strides)`` over the iteration space of ``x[:, ..., idx]`` (x's place
        ``px``; 0 along the index's dims, resp. along x's others), and ``(axis, its stride, its size)``."""
        k = single_tensor_axis(spec, x.aval.ndim, 1)
        m = idx.aval.ndim
        xs = list(px.strides[:k]) + [0] * m + list(px.strides[k + 1:])
        xs = [0 if d == 1 else st for d, st in zip(list(x.aval.shape[:k]) + [1] * m + list(x.aval.shape[k + 1:]), xs)]
        pi = self.place(idx)
        ix = [0] * k + bcast_strides(pi, idx.aval.shape) + [0] * (x.aval.ndim - k - 1)
        return (xs, ix), (k, px.strides[k], x.aval.shape[k])

    # ---- state updates ----------------------------------------------------------------------------------
    def writes_in_place(self, o, g) -> bool:
        """Output ``o`` of group ``g`` may be written straight into the state input it updates: same shape and
        dtype as the iteration space, and every read of that input's buffer happens before this step, or in it
        at the very element being written."""
        i = self.inplace.get(o)
        if i is None:
            return False
        v = self.graph.inputs[i]
        p = self._of[v]
        if o.aval.shape != g.shape or v.aval.shape != g.shape or o.aval.dtype is not v.aval.dtype:
            return False
        n = self.n
        if n <= self.last_raising:
            return False
        if self.reads_root_later(p.root, v, n):
            return False
        return self.last_use.get(v, -1) <= n

    def reads_root_later(self, root: Root, but, n: int) -> bool:
        """Whether a value over ``root`` other than ``but`` is read at or after plan step ``n``."""
        for u, pu in self._of.items():
            if pu.root is root and u is not but and self.last_use.get(u, -1) >= n:
                return True
        return False

    def state_place(self, o) -> Place:
        """Record that output ``o`` is computed into the state input it updates; its place."""
        p = self._of[o] = self._of[self.graph.inputs[self.inplace[o]]]
        self.inplace_done.add(o)
        return p

    def base_reusable(self, base, out):
        """The place of ``base`` when an ``index_put`` may write its result into base's own buffer: a whole
        workspace buffer of the output's shape and dtype, not a graph output, read by nothing after this step
        (its value, or any other view of the buffer)."""
        if not isinstance(base, Var) or id(base) in self.out_ids:
            return None
        p = self._of.get(base)
        if p is None or p.root.kind != "ws" or p.offset != 0 or p.dtype is not out.aval.dtype \
                or tuple(p.shape) != tuple(out.aval.shape) or tuple(p.strides) != tuple(c_strides(out.aval.shape)):
            return None
        if self.last_use.get(base, -1) != self.n or self.reads_root_later(p.root, base, self.n):
            return None
        return p

    # ---- outputs and write-backs ------------------------------------------------------------------------
    def output(self, v):
        """How output ``v`` reaches the caller: ``("input", k)`` as is, ``("fresh", j)`` a fresh array (copied
        into one when its place is not a whole fresh buffer)."""
        if isinstance(v, Var) and v in self.graph.inputs:
            p = self._of[v]
            if p.root.kind == "input" and p.offset == 0 and p.contiguous() and p.shape == p.root.shape:
                return ("input", p.root.index)
        p = self.place(v)
        if v in self.inplace_done:      # the caller ignores write-back outputs: hand back the state itself
            return ("input", p.root.index)
        if p.root.kind == "fresh" and p.offset == 0 and p.shape == p.root.shape and p.contiguous() \
                and p.dtype is p.root.dtype:
            return ("fresh", p.root.index)
        dst = self.buffer(None, p.shape, p.dtype, fresh=True)
        self.copy(p, dst, "copy (output)")
        return ("fresh", dst.root.index)

    def write_backs(self):
        """``(src, dst)`` of each state update not computed in place: copied back after every step, and only
        when no check failed and no step raised."""
        return [(self.place(self.graph.outputs[o]), self._of[self.graph.inputs[i]])
                for o, i in self.writes if self.graph.outputs[o] not in self.inplace_done]


__all__ = ["Place", "Root", "Places", "RAISING_KINDS", "c_strides", "bcast_strides", "coalesce", "view_place",
           "region_place"]
