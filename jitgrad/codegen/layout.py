"""The CPU target's layout of a compiled graph: the steps, and the argument blocks of every step.

A graph has fixed shapes, so all of this is computed once, in Python, when the graph is compiled:
- every Var gets a *place* from ``places.Places``, the place assignment the CUDA target shares (a root buffer:
  a graph input, a fresh output array, a workspace slot, a literal; plus an element offset, shape and element
  strides; views free, workspace slots reused once their readers ran, state updates computed in place);
- intermediates live in one workspace allocated on the first call and kept with the compiled graph;
- each step's argument block (sizes, addresses, strides; ``codegen/abi.py``) is written into one int64 table.
  Addresses of workspace and literal buffers are final here; those of inputs and fresh outputs are patched by
  the driver on every call (``dynamic``: slot -> root, with the element offset in ``OFF``).

Nothing here depends on Numba; the driver source built from this (``cpu.py``) depends on structure only, so it
is shared across batch sizes.
"""
from __future__ import annotations

import numpy as np

from ..ir import settings
from ..ir.passes.fuse import OP_BYTES, PLAIN_OP_BYTES, Group
from ..ir.passes.row_chains import RowGroup
from .batched_gemm import BatchedGemmSteps
from .gemm_steps import GemmSteps
from .index_loops import gen_gather, gen_scatter
from .region_steps import RegionSteps
from .loops import BCAST, CONTIG, PARALLEL_MIN, STRIDED, gen_check, gen_copy, gen_group
from .lowering import lower_plan
from .places import Place, Places, Root, bcast_strides, c_strides, coalesce
from .rowwise_loops import gen_rows

# A kernel runs its outer loop on the worker pool when its work pays for waking the workers (one wake-up round,
# ~5-30 us: workpool.py): at least PARALLEL_GRAIN elements (PyTorch's grain size) and size x per-element cost
# >= PARALLEL_WORK, about 160 us of one core's work (fuse.py's cost unit runs at ~0.02 ns on one core of this
# kind of machine: B2's loop, ~26 units, 0.53 ns an element); always from loops.PARALLEL_MIN elements.
# Measured 2026-11-24, quiet, 2 cores (benchmarks/parallel_threshold.py, min / median): waking the workers costs
# ~5 us at best and ~30 us typically; a 3-op tanh/sigmoid loop of 524,288 float32 188 / 190 us serial, 109 / 141
# us parallel; of 262,144, 103 / 104 vs 64 / 92 us (kept serial); x + 1 never gains below 1M elements.
PARALLEL_GRAIN = 1 << 15
PARALLEL_WORK = 1 << 23


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
        self.places = Places(graph, plan, writes, self.check_ids, copy=self._copy_step)
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
        self.gemm_outs = {}          # Var -> (gemm step, plan index, alpha/beta byte offsets, C's table slot)
        self.native = True
        lower_plan(self, plan)
        self.outputs = [self.places.output(v) for v in graph.outputs]
        self.writes = []
        for src, dst in self.places.write_backs():
            st = self._copy_step(src, dst, "write-back")
            self.steps.remove(st)        # write-backs run after every step, and only when no check failed
            st.guarded = True
            self.writes.append(st)

    @property
    def fresh(self) -> list:
        """The fresh output roots, in allocation order (the entry allocates one array per root per call)."""
        return self.places.fresh

    @property
    def inplace_done(self) -> set:
        """The state updates computed straight into their state's buffer (no write-back step)."""
        return self.places.inplace_done

    @property
    def ws_size(self) -> int:
        """The workspace's size in bytes."""
        return self.places.ws_size

    def place(self, v) -> Place:
        return self.places.place(v)

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
        sst = bcast_strides(src, it) if src.shape != it else list(src.strides)
        dst_st = list(dst.strides)
        size = int(np.prod(it))
        par = self._parallel(size)
        if dst_st and dst_st[-1] != 1 or not dst.contiguous():
            # the destination is a strided view (state written back into a view): copy in plain NumPy
            self.native = False
            st = Step("pycopy", label=label)
            st.ins, st.out = (src,), dst
            return self._add(st)
        shape, (sst, dst_st) = coalesce(it, [sst, dst_st])
        k = gen_copy(src.dtype, dst.dtype, len(shape), _cls(sst), par and len(shape) > 0)
        st = Step("kernel", k, label=label, shapes=[list(it)])
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        self._operand(src, sst)
        self._operand(dst, dst_st)
        return self._add(st)

    def _parallel(self, size, per_element=8.0):
        """Whether a kernel of ``size`` elements, each costing ``per_element`` (fuse.py's unit: bytes moved plus
        ``OP_BYTES`` per op), runs its outer loop on the worker pool (see PARALLEL_WORK)."""
        want = self.parallel
        if settings.STATE.num_threads == 1:       # torch.set_num_threads(1): no worker pool
            return False
        if want is not None:
            return bool(want) and size >= 4096
        return size >= PARALLEL_MIN or (size >= PARALLEL_GRAIN and size * per_element >= PARALLEL_WORK)

    def _check(self, e, place: Place):
        if e not in self.check_ids:
            return
        shape, (sts,) = coalesce(place.shape, [list(place.strides)])
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

    def _collective(self, e) -> bool:
        """MPI called from the entry as a native step (collective_steps.py); False: a Python step.  Imported
        here, not at the top: it imports Numba, which a warm start of a graph without collectives never needs."""
        from . import collective_steps
        return collective_steps.emit(self, e)

    def _group(self, g: Group):
        if self._fold_update_into_gemm(g):
            return
        op = self.places.group(g)
        shape = op.shape
        classes = [_cls(st) for st in op.in_strides + op.out_strides]
        per_element = sum(p.dtype.itemsize for p in op.in_places + op.out_places) + sum(
            OP_BYTES.get(e.op.name, PLAIN_OP_BYTES) for e in g.eqns)
        parallel = len(shape) > 0 and self._parallel(op.size, per_element)
        alias = alias_classes(op.in_places + op.out_places)
        if isinstance(g, RowGroup):     # a row-wise chain: one nest over rows, several sweeps of each
            k = gen_rows(g, classes, parallel, len(shape), op.red_axes, alias)
        else:
            k = gen_group(g, classes, parallel, self.check_ids, len(shape), op.red_axes, alias)
        st = Step("kernel", k, label=f"{g.name} {g.lines()}".strip(), shapes=[list(p.shape) for p in op.in_places],
                  scope=g.all_eqns[0].scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in shape)
        for p, s_ in zip(op.in_places + op.out_places, op.in_strides + op.out_strides):
            self._operand(p, s_)
        if g.reduce is not None:
            self.table.append(int(np.prod(g.reduce.outs[0].aval.shape)))
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
        st.state_write = op.in_place
        self._add(st)

    def _view(self, e):
        return self.places.view(e) is not None     # not a view of its input: the op runs (a Python step)

    def _gather(self, e):
        x, idx = e.ins[0], e.ins[1:]
        out = e.outs[0]
        k = gen_gather(e)
        it = out.aval.shape
        po = self.places.assign(out)
        px = self.place(x)
        st = Step("kernel", k, label="gather", shapes=[list(x.aval.shape)], scope=e.scope)
        st.block = len(self.table)
        self.table.extend(int(d) for d in it)
        self._slot_addr(px)
        self.table.extend(px.strides)
        self.table.extend(px.shape)
        for v in idx:
            self._operand(self.place(v), bcast_strides(self.place(v), it))
        self._operand(po, c_strides(it))
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
        po = self.places.assign(out)
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
        self._operand(pv, bcast_strides(pv, it))
        for iv in idx:
            self._operand(self.place(iv), bcast_strides(self.place(iv), it))
        self._index_check_slot(e)
        self._add(st)

    def _scan(self, e):
        """cumsum/cumprod along one axis: the other dims are the iteration space (codegen/scan_loops.py)."""
        from .scan_loops import gen_scan
        x, out = e.ins[0], e.outs[0]
        ax = e.params["axis"]
        po = self.places.assign(out)
        px = self.place(x)
        ost = c_strides(out.aval.shape)
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
        st.out = [self.places.assign(o) for o in e.outs]
        self._add(st)


__all__ = ["Program", "Place", "Root", "Step", "alias_classes"]
