"""Memory layout of a compiled graph: where every value lives, and the argument blocks of every step.

A graph has fixed shapes, so all of this is computed once, in Python, when the graph is compiled:
- every Var gets a *place*: a root buffer (a graph input, a fresh output array, a workspace slot, a literal)
  plus an element offset, shape and element strides.  View ops (reshape of contiguous data, permute, expand,
  basic indexing) cost nothing at run time: their place is computed here, by applying the op's NumPy impl to a
  strided dummy array (views never read data);
- intermediates live in one workspace allocated on the first call and kept with the compiled graph; a slot is
  reused by a later value of the same byte size once every reader has run;
- each step's argument block (sizes, addresses, strides; ``codegen/abi.py``) is written into one int64 table.
  Addresses of workspace and literal buffers are final here; those of inputs and fresh outputs are patched by
  the driver on every call (``dynamic``: slot -> root, with the element offset in ``OFF``).

Nothing here depends on Numba; the driver source built from this (``cpu.py``) depends on structure only, so it
is shared across batch sizes.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Lit, Var
from ..ir.passes.fuse import Group
from .batched_gemm import BatchedGemmSteps
from .gemm_steps import GemmSteps
from .region_steps import RegionSteps
from .loops import (BCAST, CONTIG, PARALLEL_MIN, STRIDED, gen_check, gen_copy, gen_gather, gen_group, gen_scatter,
                    raises_in_loop)
from .lowering import lower_plan, step_kind

_ALIGN = 64


class Place:
    __slots__ = ("root", "offset", "shape", "strides", "dtype")

    def __init__(self, root, offset, shape, strides, dtype):
        self.root, self.offset, self.shape, self.strides, self.dtype = root, offset, tuple(shape), tuple(strides), dtype

    def contiguous(self) -> bool:
        return self.strides == _c_strides(self.shape) or int(np.prod(self.shape)) <= 1


class Root:
    """A buffer: ``kind`` in input | fresh | ws | lit; ``index`` (input/fresh number), ``array`` (lit),
    ``offset`` (ws byte offset)."""
    __slots__ = ("kind", "index", "array", "offset", "nbytes", "shape", "dtype")

    def __init__(self, kind, index=None, array=None, nbytes=0, shape=(), dtype=None):
        self.kind, self.index, self.array, self.nbytes = kind, index, array, nbytes
        self.shape, self.dtype, self.offset = tuple(shape), dtype, None


def _c_strides(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))


def view_place(e, src: Place):
    """The place of view op ``e``'s output over ``src``, found by running the op's NumPy impl on a strided dummy
    array (views never read data); None when the result is not a view of it (then the op must run)."""
    item = src.dtype.np.itemsize
    dummy = np.lib.stride_tricks.as_strided(np.zeros(1, src.dtype.np), src.shape, [s * item for s in src.strides])
    base = dummy.__array_interface__["data"][0]
    res = e.op.impl(dummy, **e.params)
    if not isinstance(res, np.ndarray) or not np.may_share_memory(res, dummy) or res.shape != e.outs[0].aval.shape:
        return None
    off = (res.__array_interface__["data"][0] - base) // item
    return Place(src.root, src.offset + off, res.shape, [s // item for s in res.strides], src.dtype)


def _bcast_strides(place: Place, it_shape):
    """Element strides of ``place`` broadcast into iteration space ``it_shape`` (0 where broadcast)."""
    lead = len(it_shape) - len(place.shape)
    out = [0] * lead
    for k, d in enumerate(place.shape):
        out.append(0 if (d == 1 and it_shape[lead + k] != 1) or d == 1 else place.strides[k])
    return out


def _coalesce(shape, strides):
    """Drop size-1 dims and merge neighbours that every operand walks as one (``strides``: per operand), so
    that one kernel serves every rank and shape with the same access pattern (an SGD update of a matrix and of
    a vector is the same 1-D loop)."""
    if any(d == 0 for d in shape):
        return list(shape), [list(s) for s in strides]
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    shape = [shape[d] for d in keep]
    sts = [[s[d] for d in keep] for s in strides]
    i = len(shape) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * shape[i + 1] for st in sts):
            shape[i] *= shape[i + 1]
            del shape[i + 1]
            for st in sts:
                st[i] = st[i + 1]
                del st[i + 1]
        i -= 1
    return shape, sts


def alias_classes(places) -> list:
    """The alias class of each operand place of one kernel (``alias_scopes.py``): places over one buffer share a
    class (a state updated in place and its old value), and so do workspace places whose byte ranges overlap;
    all others are distinct memory.  Graph inputs are distinct buffers as far as writes go: a signature that
    writes an input sharing memory with another runs eagerly (``jit/signatures.writes_alias``), and inputs that
    are only read may overlap harmlessly.  Numbered by first appearance, so the kernel text is canonical."""
    n = len(places)
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    spans = []
    for p in places:
        r = p.root
        spans.append((r.offset, r.offset + r.nbytes) if r.kind == "ws" else None)
    for a in range(n):
        for b in range(a):
            ra, rb = places[a].root, places[b].root
            same = ra is rb or (spans[a] is not None and spans[b] is not None
                                and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1])
            if same:
                parent[find(a)] = find(b)
    ids, out = {}, []
    for a in range(n):
        out.append(ids.setdefault(find(a), len(ids)))
    return out


def _cls(strides):
    if not strides:
        return CONTIG
    s = strides[-1]
    return CONTIG if s == 1 else BCAST if s == 0 else STRIDED


class Step:
    """One call of the program: ``kind`` kernel | gemm | native (a fixed cfunc, e.g. an MPI call) | py (NumPy
    impl); ``block``: its slot in the table."""
    __slots__ = ("kind", "kernel", "block", "label", "eqn", "ins", "out", "shapes", "scope", "guarded", "gemm",
                 "state_write", "native")

    def __init__(self, kind, kernel=None, label="", eqn=None, shapes=(), scope=()):
        self.kind, self.kernel, self.label, self.eqn, self.shapes, self.scope = kind, kernel, label, eqn, shapes, scope
        self.block, self.ins, self.out, self.guarded, self.gemm = None, (), None, False, None
        self.state_write = False     # writes a state input in place: skipped when an earlier step raised
        self.native = None          # kind "native": the address of a cfunc taking the argument block


class Program(GemmSteps, BatchedGemmSteps, RegionSteps):
    """The steps, kernels, places and tables of one graph (see the module docstring)."""

    def __init__(self, graph, plan, writes=(), parallel=None, check_ids=None):
        self.graph = graph
        self.check_ids = check_ids or {}
        self.parallel = parallel
        self.places = {}
        self.roots = []
        self.steps = []
        self.kernels = {}            # key -> Kernel (each distinct loop once)
        self.table = []              # the int64 argument table
        self.dynamic = []            # (slot, root, element offset): patched per call
        self.params = bytearray()    # BLAS scalar arguments (chars, int32s, alpha/beta)
        self.param_slots = []        # (table slot, params byte offset): address patched once params is allocated
        self.lit_slots = []          # (table slot, lit array, byte offset)
        self.ws_slots = []           # (table slot, root, byte offset)
        self.err_slots = []          # table slots that receive the err array's address
        self.ierr_slots = []         # table slots that receive the index-error array's address
        self.index_steps = []        # eqns of the bounds-checked steps (gather, scatter), by step id
        self.native = True
        self._users_end = len(plan.steps)
        self._plan_liveness(plan, writes)
        self._free = {}
        self.ws_size = 0
        for v, k in zip(graph.inputs, range(len(graph.inputs))):
            if v not in self.places:
                r = self._root("input", index=k, shape=v.aval.shape, dtype=v.aval.dtype)
                self.places[v] = Place(r, 0, v.aval.shape, _c_strides(v.aval.shape), v.aval.dtype)
        self.fresh = []              # fresh output roots, in allocation order
        # state updates computed straight into the state's buffer when nothing reads the old value afterwards
        # and no anomaly check could veto the update: no copy pass, no fresh buffer (an SGD step over all params)
        outs = [v for v in graph.outputs if isinstance(v, Var)]
        # an anomaly check vetoes the state updates: then none may be computed in place.  A step that can raise
        # (an index out of range, a zero integer divisor, a NumPy step) vetoes those computed in place before or
        # with it; later
        # ones run only when it did not raise (``state_write`` steps, guarded by the driver)
        # (a collective counts: it may decline to a Python step, which can raise)
        self.last_raising = max([n for n, s in enumerate(plan.steps) if step_kind(s) in (
            "gather", "scatter", "scatter_reduce", "host", "collective") or (
            isinstance(s, Group) and any(raises_in_loop(e) for e in s.eqns))], default=-1)
        self._inplace = {} if self.check_ids else {
            graph.outputs[o]: i for o, i in writes
            if isinstance(graph.outputs[o], Var) and outs.count(graph.outputs[o]) == 1
            and graph.outputs[o] not in graph.inputs}
        self.inplace_done = set()
        lower_plan(self, plan)
        self.outputs = [self._output(v) for v in graph.outputs]
        self.writes = []
        for o, i in writes:
            if graph.outputs[o] in self.inplace_done:
                continue
            src, dst = self.places.get(graph.outputs[o]) or self._lit_place(graph.outputs[o]), \
                self.places[graph.inputs[i]]
            st = self._copy_step(src, dst, "write-back")
            self.steps.remove(st)        # write-backs run after every step, and only when no check failed
            st.guarded = True
            self.writes.append(st)

    # ---- liveness ---------------------------------------------------------------------------------------
    def _plan_liveness(self, plan, writes):
        self.last_use = {}
        self.uses = {}               # Var -> plan step indices that read it
        self.gemm_outs = {}          # Var -> (gemm step, plan index, alpha/beta byte offsets, C's table slot)
        for n, s in enumerate(plan.steps):
            ins = s.inputs if isinstance(s, Group) else s.ins
            for v in ins:
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

    def _hold(self, r, v):
        """Workspace root ``r`` stays in use until the last reader of ``v`` (its value or a view of it) ran."""
        end = self.last_use.get(v, -1)
        cur = self._live_ws.get(id(r))
        if cur is not None and cur[1] >= end:
            return
        self._live_ws[id(r)] = (r, end)
        self._ends.setdefault(end if end >= getattr(self, "n", 0) else -1, []).append(r)

    def _release(self, n):
        for end in [e for e in (-1, n) if e in self._ends]:
            for r in self._ends.pop(end):
                cur = self._live_ws.get(id(r))
                if cur is not None and cur[1] <= n:
                    del self._live_ws[id(r)]
                    self._free.setdefault(r.nbytes, []).append(r.offset)

    # ---- roots and places ---------------------------------------------------------------------------------
    def _root(self, kind, **kw):
        r = Root(kind, **kw)
        self.roots.append(r)
        return r

    def _new_buffer(self, v, shape, dtype: dt.DType, fresh=None):
        """A contiguous buffer for ``v``: fresh if it is a graph output, else a workspace slot."""
        nbytes = max(int(np.prod(shape)) * dtype.np.itemsize, 1)
        if fresh is None:
            fresh = v is not None and any(o is v for o in self.graph.outputs)
        if fresh:
            r = self._root("fresh", index=len(self.fresh), shape=shape, dtype=dtype, nbytes=nbytes)
            self.fresh.append(r)
        else:
            r = self._root("ws", shape=shape, dtype=dtype, nbytes=-(-nbytes // _ALIGN) * _ALIGN)
            free = self._free.get(r.nbytes)
            if free:
                r.offset = free.pop()
            else:
                r.offset = self.ws_size
                self.ws_size += r.nbytes
            if v is not None:
                self._hold(r, v)
        return Place(r, 0, shape, _c_strides(shape), dtype)

    def _track_view(self, v, place):
        if id(place.root) in self._live_ws:
            self._hold(place.root, v)

    def _lit_place(self, v: Lit) -> Place:
        a = np.array(v.value if isinstance(v.value, np.ndarray) else np.asarray(v.value, v.aval.dtype.np),
                     dtype=v.aval.dtype.np, order="C", copy=True)
        r = self._root("lit", array=a, shape=a.shape, dtype=v.aval.dtype)
        return Place(r, 0, a.shape, _c_strides(a.shape), v.aval.dtype)

    def place(self, v) -> Place:
        if isinstance(v, Lit):
            p = self.places.get(id(v))
            if p is None:
                p = self.places[id(v)] = self._lit_place(v)
            return p
        return self.places[v]

    # ---- the table ----------------------------------------------------------------------------------------
    def _slot_addr(self, place: Place):
        """Append the address of ``place`` to the table (patched per call, or final)."""
        slot = len(self.table)
        self.table.append(0)
        self._register_slot(slot, place)
        return slot

    def _register_slot(self, slot, place: Place):
        r = place.root
        byte_off = place.offset * place.dtype.np.itemsize
        if r.kind in ("input", "fresh"):
            self.dynamic.append((slot, r, byte_off))
        elif r.kind == "lit":
            self.lit_slots.append((slot, r.array, byte_off))
        else:
            self.ws_slots.append((slot, r, byte_off))

    def _move_slot(self, slot, place: Place):
        """Point an already written table slot at ``place`` instead."""
        for lst in (self.dynamic, self.lit_slots, self.ws_slots):
            lst[:] = [t for t in lst if t[0] != slot]
        self._register_slot(slot, place)

    def _operand(self, place, strides):
        self._slot_addr(place)
        self.table.extend(int(s) for s in strides)

    def _add(self, step: Step):
        if step.kernel is not None:
            step.kernel = self.kernels.setdefault(step.kernel.key, step.kernel)
        self.steps.append(step)
        return step

    # ---- steps --------------------------------------------------------------------------------------------
    def _copy_step(self, src: Place, dst: Place, label) -> Step:
        it = dst.shape
        sst = _bcast_strides(src, it) if src.shape != it else list(src.strides)
        dst_st = list(dst.strides)
        size = int(np.prod(it))
        par = self._parallel(size)
        if dst_st and dst_st[-1] != 1 or not dst.contiguous():
            # the destination is a strided view (state written back into a view): copy in plain NumPy
            self.native = False
            st = Step("pycopy", label=label)
            st.ins, st.out = (src,), dst
            return self._add(st)
        shape, (sst, dst_st) = _coalesce(it, [sst, dst_st])
        k = gen_copy(src.dtype, dst.dtype, len(shape), _cls(sst), par and len(shape) > 0)
        st = Step("kernel", k, label=label, shapes=[list(it)])
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        self._operand(src, sst)
        self._operand(dst, dst_st)
        return self._add(st)

    def _parallel(self, size):
        want = self.parallel
        return size >= PARALLEL_MIN if want is None else bool(want) and size >= 4096

    def _check(self, e, place: Place):
        if e not in self.check_ids:
            return
        shape, (sts,) = _coalesce(place.shape, [list(place.strides)])
        k = gen_check(place.dtype, len(shape), _cls(sts))
        st = Step("kernel", k, label=f"check {e.op.name}")
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        self._operand(place, sts)
        self.err_slots.append(len(self.table))
        self.table.extend([0, self.check_ids[e]])
        self._add(st)

    # the emitter of each step kind (codegen/lowering.py); a kind not listed (cat) runs its NumPy impl
    EMITTERS = {"fused": "_group", "view": "_view", "gemm": "_gemm", "gather": "_gather", "scatter": "_scatter",
                "scatter_reduce": "_scatter",
                "scan": "_scan", "region": "_region", "collective": "_collective",
                "row_gather": "_row_gather", "row_scatter": "_row_scatter", "host": "_py"}

    def after_step(self, n, s):
        if not isinstance(s, Group):
            self._check(s, self.places[s.outs[0]])
        self._release(n)

    def _collective(self, e) -> bool:
        """MPI called from the entry as a native step (collective_steps.py); False: a Python step.  Imported
        here, not at the top: it imports Numba, which a warm start of a graph without collectives never needs."""
        from . import collective_steps
        return collective_steps.emit(self, e)

    def _group(self, g: Group):
        if self._fold_update_into_gemm(g):
            return
        it = g.shape
        ins = [v for v in g.inputs if isinstance(v, Var) or isinstance(v.value, np.ndarray)]
        in_st = [_bcast_strides(self.place(v), it) for v in ins]
        out_places, out_st = [], []
        in_place = False
        red = g.reduce
        for o in g.outputs:
            if red is not None and o is red.outs[0]:
                p = self._new_buffer(o, o.aval.shape, o.aval.dtype)
                axes = red.params["axes"]
                kd = tuple(1 if i in axes else d for i, d in enumerate(it))
                cs = _c_strides(kd)
                out_st.append([0 if i in axes else cs[i] for i in range(len(it))])
            elif self._writes_in_place(o, g):
                p = self.places[self.graph.inputs[self._inplace[o]]]
                self.inplace_done.add(o)
                in_place = True
                out_st.append(list(_c_strides(it)))
            else:
                p = self._new_buffer(o, o.aval.shape, o.aval.dtype)
                out_st.append(list(_c_strides(it)))
            self.places[o] = p
            out_places.append(p)
        size = int(np.prod(it)) if it else 1
        shape, sts = _coalesce(it, in_st + out_st)
        classes = [_cls(st) for st in sts]
        red_axes = None
        if red is not None:
            ro = sts[len(ins) + g.outputs.index(red.outs[0])]
            red_axes = tuple(d for d in range(len(shape)) if ro[d] == 0)
        k = gen_group(g, classes, len(shape) > 0 and self._parallel(size), self.check_ids, len(shape), red_axes,
                      alias_classes([self.place(v) for v in ins] + out_places))
        st = Step("kernel", k, label=f"{g.name} {g.lines()}".strip(), shapes=[list(self.place(v).shape) for v in ins],
                  scope=g.all_eqns[0].scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        for v, s_ in zip(ins, sts[:len(ins)]):
            self._operand(self.place(v), s_)
        for p, s_ in zip(out_places, sts[len(ins):]):
            self._operand(p, s_)
        if red is not None:
            self.table.append(int(np.prod(red.outs[0].aval.shape)))
        if k.checks:
            self.err_slots.append(len(self.table))
            self.table.append(0)
            self.table.extend(k.checks)
        if k.guards:
            self.ierr_slots.append(len(self.table))
            self.table.append(0)
            for e in k.guards:
                self.table.append(len(self.index_steps))
                self.index_steps.append(e)
        st.state_write = in_place
        self._add(st)

    def _writes_in_place(self, o, g) -> bool:
        """Output ``o`` of group ``g`` may be written straight into the state input it updates: same shape and
        dtype as the iteration space, and every read of that input's buffer happens before this step, or in it
        at the very element being written."""
        i = self._inplace.get(o)
        if i is None:
            return False
        v = self.graph.inputs[i]
        p = self.places[v]
        if o.aval.shape != g.shape or v.aval.shape != g.shape or o.aval.dtype is not v.aval.dtype:
            return False
        n = self.n
        if n <= self.last_raising:
            return False
        for u, pu in self.places.items():
            if isinstance(pu, Place) and pu.root is p.root and u is not v and self.last_use.get(u, -1) >= n:
                return False
        return self.last_use.get(v, -1) <= n

    def _materialize(self, v, place: Place) -> Place:
        """A contiguous copy of ``place`` in a workspace slot (tracked as ``v``'s buffer)."""
        dst = self._new_buffer(None, place.shape, place.dtype)
        self._hold(dst.root, v)
        self._copy_step(place, dst, "copy (layout)")
        return dst

    def _view(self, e):
        src = self.place(e.ins[0])
        out = e.outs[0]
        if e.op.name == "reshape":
            # a strided source reshapes in place when its strides allow (torch's view rule: heads of a split)
            p = None if src.contiguous() else view_place(e, src)
            if p is None:
                if not src.contiguous():
                    src = self._materialize(e.ins[0], src)
                p = Place(src.root, src.offset, out.aval.shape, _c_strides(out.aval.shape), src.dtype)
        else:
            p = view_place(e, src)
            if p is None:
                return self._py(e)
        self.places[out] = p
        self._track_view(out, p)

    def _gather(self, e):
        x, idx = e.ins[0], e.ins[1:]
        out = e.outs[0]
        k = gen_gather(e)
        it = out.aval.shape
        po = self._new_buffer(out, it, out.aval.dtype)
        self.places[out] = po
        px = self.place(x)
        st = Step("kernel", k, label="gather", shapes=[list(x.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in it)
        self._slot_addr(px)
        self.table.extend(px.strides)
        self.table.extend(px.shape)
        for v in idx:
            self._operand(self.place(v), _bcast_strides(self.place(v), it))
        self._operand(po, _c_strides(it))
        self._index_check_slot(e)
        self._add(st)

    def _index_check_slot(self, e):
        """The block's last two slots: the index-error array's address (set with the tables) and a step id."""
        self.ierr_slots.append(len(self.table))
        self.table.extend([0, len(self.index_steps)])
        self.index_steps.append(e)

    def _scatter(self, e):
        base, v, idx = e.ins[0], e.ins[1], e.ins[2:]
        out = e.outs[0]
        po = self._new_buffer(out, out.aval.shape, out.aval.dtype)
        self.places[out] = po
        self._copy_step(self.place(base), po, "copy (index_put)")
        k = gen_scatter(e)
        it = np.broadcast_shapes(*[i.aval.shape for i in idx]) if idx else ()
        st = Step("kernel", k, label="scatter", shapes=[list(out.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in it)
        self._slot_addr(po)
        self.table.extend(po.strides)
        self.table.extend(po.shape)
        pv = self.place(v)
        self._operand(pv, _bcast_strides(pv, it))
        for iv in idx:
            self._operand(self.place(iv), _bcast_strides(self.place(iv), it))
        self._index_check_slot(e)
        self._add(st)

    def _scan(self, e):
        """cumsum/cumprod along one axis: the other dims are the iteration space (codegen/scan_loops.py)."""
        from .scan_loops import gen_scan
        x, out = e.ins[0], e.outs[0]
        ax = e.params["axis"]
        po = self._new_buffer(out, out.aval.shape, out.aval.dtype)
        self.places[out] = po
        px = self.place(x)
        ost = _c_strides(out.aval.shape)
        outer = [d for i, d in enumerate(out.aval.shape) if i != ax]
        st = Step("kernel", gen_scan(e), label=e.op.name, shapes=[list(x.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in outer)
        self._operand(px, [s for i, s in enumerate(px.strides) if i != ax])
        self._operand(po, [s for i, s in enumerate(ost) if i != ax])
        self.table.extend([int(out.aval.shape[ax]), int(px.strides[ax]), int(ost[ax])])
        self._add(st)

    def _py(self, e):
        """An op with no loop form runs its NumPy impl: the graph gets a Python driver."""
        self.native = False
        st = Step("py", label=e.op.name, eqn=e, shapes=[list(v.aval.shape) for v in e.ins], scope=e.scope)
        st.ins = tuple(self.place(v) for v in e.ins)
        outs = []
        for o in e.outs:
            p = self._new_buffer(o, o.aval.shape, o.aval.dtype)
            self.places[o] = p
            outs.append(p)
        st.out = outs
        self._add(st)

    def _output(self, v):
        """How output ``v`` reaches the user: ("input", k) as is, ("fresh", j) a fresh array, or copied."""
        if isinstance(v, Var) and v in self.graph.inputs and self.places[v].root.kind == "input" \
                and self.places[v].offset == 0 and self.places[v].contiguous() \
                and self.places[v].shape == self.places[v].root.shape:
            return ("input", self.places[v].root.index)
        p = self.place(v)
        if v in self.inplace_done:      # the caller ignores write-back outputs: hand back the state itself
            return ("input", p.root.index)
        if p.root.kind == "fresh" and p.offset == 0 and p.shape == p.root.shape and p.contiguous() \
                and p.dtype is p.root.dtype:
            return ("fresh", p.root.index)
        dst = self._new_buffer(None, p.shape, p.dtype, fresh=True)
        self._copy_step(p, dst, "copy (output)")
        return ("fresh", dst.root.index)


__all__ = ["Program", "Place", "Root", "Step"]
