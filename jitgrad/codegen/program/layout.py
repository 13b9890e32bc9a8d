"""The CPU target's layout of a compiled graph: the steps, and the argument blocks of every step.

A graph has fixed shapes, so all of this is computed once, in Python, when the graph is compiled:
- every Var gets a *place* from ``places.Places``, the place assignment the CUDA target shares (a root buffer:
  a graph input, a fresh output array, a workspace slot, a literal; plus an element offset, shape and element
  strides; views free, workspace slots reused once their readers ran, state updates computed in place);
- intermediates live in one workspace allocated on the first call and kept with the compiled graph;
- each step's argument block (sizes, addresses, strides; ``codegen/kernels/abi.py``) is written into one int64 table.
  Addresses of workspace and literal buffers are final here; those of inputs and fresh outputs are patched by
  the driver on every call (``dynamic``: slot -> root, with the element offset in ``OFF``).

This module is the builder the step emitters write into (``Program``: places, the table, slots, steps, kernels,
and the copy and check steps every kind needs); the emitters themselves are functions registered per step kind
(``lowering.emits``) in the step modules (``loop_steps.py``, ``gemm_steps.py``, ``batched_gemm.py``,
``region_steps.py``, ``collective_steps.py``), which import this module; ``cpu.lay_out`` walks a plan through
them.  Nothing here depends on Numba; the driver source built from this (``cpu.py``) depends on structure only,
so it is shared across batch sizes.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ...ir import settings
from ...ir.ops.blas import BLAS_THREADED_MACS, MIN_BLOCK_ROWS, block_unit, cut, least_height, small_path_macs
from ...ir.symbolic import SymInt, hint_of, known_equal, size_arg
from ...ir.plan import Group, LoopBatch, batching
from ..kernels.batch_loops import HEADER, copy_member, gen_batch, plan_pieces
from ..kernels.copy_loops import gen_check, gen_copy
from ..kernels.loops import BCAST, CONTIG, STRIDED
from ..native import workpool
from ..places import Place, Places, Root, bcast_strides, coalesce

# Which loops may take the worker pool (``workpool.py`` has the threshold and where it was measured): a loop is
# *parallel-capable* when its work may reach ``workpool.min_work()`` (its size is symbolic, or it reaches it
# now), and then it compares its work per call (``kernel_ir.For.gate``), so a program laid out for every size
# records no guard on the choice.  A loop of concrete size below the threshold stays serial, as it always was.
# Every element costs at least MIN_ELEMENT_COST (a float32 read and written: 8 bytes moved), so from
# loops.PARALLEL_MIN elements every loop takes the pool at a threshold up to 2^23.  A cost, not a threshold: a
# measured ``workpool.PARALLEL_WORK`` moves which loops take the pool, never what a loop costs.
MIN_ELEMENT_COST = 8.0
# Big GEMMs on the pool (``split_rows``): their rows (or columns) in one block per worker, each block one
# single-threaded BLAS call, so one set of threads serves loops, batched products and GEMMs alike.  Every block
# starts at a multiple of OpenBLAS's row (column) unit (``blas.block_unit``), so the blocks give the bits of one
# single-threaded call of the whole product, whatever the number of workers (and eager's bits).  OpenBLAS's own threads spin ~0.4 ms
# after each call (``native/threads.py``), on the cores the pool's next launch needs: measured in B9's compiled
# step at 2 threads, its row kernels on the pool took 1.6x their serial time behind the GEMMs.
# ``JITGRAD_POOL_GEMMS=0``: OpenBLAS threads big GEMMs itself, as before.
POOL_GEMMS = os.environ.get("JITGRAD_POOL_GEMMS", "1") != "0"
# Mid-size GEMMs (over OpenBLAS's threading threshold, but so small that any block of them falls on OpenBLAS's
# small-matrix path, so no split gives one call's bits: B11's 256 x 64 x 64 products) are cut into at most
# GEMM_BLOCKS blocks of rows (``fixed_blocks``) whose height depends on the product only, never on the workers: the
# same calls, the same bits at every thread count, on the pool when the product reaches its threshold.
GEMM_BLOCKS = 8
# units of work per pool thread a parallel batch (``batch_loops.py``) is cut into, members' pieces packed to similar
# sizes: the pool hands each worker a contiguous run of units, so a few per thread even out unequal members
UNITS_PER_THREAD = 4


def pool_workers() -> int:
    """The threads a parallel launch may run on in this process (the pool's, at most ``set_num_threads``)."""
    w = workpool.threads() or workpool.default_threads()
    if settings.STATE.num_threads:
        w = min(w, settings.STATE.num_threads)
    return max(int(w), 1)


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
    twins = [next((b for b in range(a) if _same_place(places[a], places[b])), None) for a in range(n)]
    return OperandAliasing(out, twins) if any(t is not None for t in twins) else out


def _same_place(p, q) -> bool:
    # (sizes compared without a guard: a symbolic one that may differ is not the same place)
    return p.root is q.root and p.dtype is q.dtype and known_equal(p.offset, q.offset) is True \
        and known_equal(tuple(p.shape), tuple(q.shape)) is True \
        and known_equal(tuple(p.strides), tuple(q.strides)) is True


class OperandAliasing(list):
    """Alias classes per operand (a list, as ``alias_classes`` returns) that also names, per operand, an
    earlier operand at the very same place (``twins``; None where there is none): a state updated in place and
    its old value.  The kernel reads and writes such a pair through one pointer, so LLVM sees one address at one
    index and vectorises the loop without its runtime overlap check, which fails for equal pointers and left
    AdamW's in-place update scalar."""

    def __init__(self, classes, twins):
        super().__init__(classes)
        self.twins = list(twins)


def stride_class(strides) -> str:
    """The loop class of an operand's innermost stride: contiguous, broadcast (0) or strided."""
    if not strides:
        return CONTIG
    s = strides[-1]
    return CONTIG if s == 1 else BCAST if s == 0 else STRIDED


class Step:
    """One call of the program: ``kind`` kernel | gemm | native (a fixed cfunc, e.g. an MPI call) | py (NumPy
    impl); ``block``: its slot in the table."""
    __slots__ = ("kind", "kernel", "block", "label", "eqn", "ins", "out", "shapes", "scope", "guarded", "gemm",
                 "state_write", "native", "parallel", "work", "gate", "split", "fold", "units", "rows")

    def __init__(self, kind, kernel=None, label="", eqn=None, shapes=(), scope=()):
        self.kind, self.kernel, self.label, self.eqn, self.shapes, self.scope = kind, kernel, label, eqn, shapes, scope
        self.block, self.ins, self.out, self.guarded, self.gemm = None, (), None, False, None
        self.state_write = False     # writes a state input in place: skipped when an earlier step raised
        self.native = None          # kind "native": the address of a cfunc taking the argument block
        self.parallel = False       # kind "bgemm": its batch entries split between the pool's workers
        self.work = 0.0             # its work in the plan's cost unit, as the parallel choice saw it (0: unknown)
        # a parallel step that takes the pool by its work per call: (elements, per-element cost) of a kernel,
        # (multiply-adds of one product, products) of a bgemm, (the whole product's multiply-adds, blocks) of a
        # split GEMM (sizes may be symbolic); None: it always does
        self.gate = None
        self.split = False          # a big GEMM's rows split between the pool's workers (batched_gemm.split_rows)
        self.fold = None            # a GEMM block's (alpha offset, beta offset, C's slot), for an update folded in
        self.units = 0              # a batch kernel's units (batch_loops.plan_pieces): one never splits (0: not a batch)
        self.rows = None            # a parallel loop's (split length, operand rows): round_groups.access_rows


class Program:
    """The steps, kernels, places and tables of one graph (see the module docstring): the builder the step emitters
    write into.  ``finish()`` after the plan's steps adds the outputs and the write-backs."""

    def __init__(self, plan, writes=(), parallel=None, check_ids=None):
        self.graph = graph = plan.graph
        self.plan_steps = plan.steps     # emitters may look ahead at a value's readers (batched_gemm.permuted_c)
        self.triangles = plan.triangles  # products a causal mask halves (ir/passes/causal.py): batched_gemm
        self.region_chains = None        # id(index_put) -> its ZeroChain (region_steps.zero_chain), found once
        self.check_ids = check_ids or {}
        self.parallel = parallel
        self.places = Places(graph, plan, writes, self.check_ids, copy=self.copy_step)
        self.steps = []
        self.kernels = {}            # key -> Kernel (each distinct loop once)
        self.table = []              # the int64 argument table
        self.dynamic = []            # (slot, root, element offset): patched per call
        self.params = bytearray()    # BLAS scalar arguments (chars, int32s, alpha/beta)
        self.sym_params = []         # (params byte offset, SymInt): int32 sizes of a program lowered for every size
        self.param_slots = []        # (table slot, params byte offset): address patched once params is allocated
        self.lit_slots = []          # (table slot, lit array, byte offset)
        self.ws_slots = []           # (table slot, root, byte offset)
        self.err_slots = []          # table slots that receive the err array's address
        self.ierr_slots = []         # table slots that receive the index-error array's address
        self.index_steps = []        # eqns of the bounds-checked steps (gather, scatter), by step id
        self.gemm_outs = {}          # Var -> (gemm step, plan index, alpha/beta byte offsets, C's table slot)
        self.native_tokens = {}      # all_reduce_start's token Var -> its receive buffer (collective_steps.py)
        self.native_keep = []        # buffers native steps own, alive with the program
        self.native = True
        self.outputs, self.writes = [], []

    def finish(self):
        """After the plan's steps: where each output is, and the write-backs (run after every step, and only when
        no check failed)."""
        self.outputs = [self.places.output(v) for v in self.graph.outputs]
        pairs = self.places.write_backs()
        for st in self._write_back_batches(pairs) + [self.copy_step(src, dst, "write-back") for src, dst in pairs]:
            self.steps.remove(st)
            st.guarded = True
            self.writes.append(st)

    def _write_back_batches(self, pairs) -> list:
        """Write-backs that are small serial copies of one kind (an optimiser's step counts) as one batch launch
        each (``batch_loops.gen_batch``); they are taken out of ``pairs``.  Not when a copy reads a buffer another
        one writes (the batch runs them in any order)."""
        if not batching() or {id(s.root) for s, _ in pairs} & {id(d.root) for _, d in pairs}:
            return []
        kinds = {}
        for src, dst in pairs:
            it = dst.shape
            size = math.prod(it)
            if type(size) is not int or not dst.contiguous() or (dst.strides and dst.strides[-1] != 1) \
                    or any(type(s) is not int for s in src.strides) or (it and self.pool_choice(size)[0]):
                continue
            sst = bcast_strides(src, it) if src.shape != it else list(src.strides)
            shape, (sst, dst_st) = coalesce(it, [sst, list(dst.strides)])
            kind = (src.dtype, dst.dtype, len(shape), stride_class(sst))
            kinds.setdefault(kind, []).append((src, dst, shape, sst, dst_st, size))
        out = []
        for (sd, dd, rank, cls), copies in kinds.items():
            if len(copies) < 2:
                continue
            total = sum(c[5] for c in copies)
            par, gate = self.pool_choice(total) if rank else (False, None)
            k = gen_batch(copy_member(sd, dd, rank, cls), rank, [cls, CONTIG], par, gate, rank == 0, "batch copy")

            def writer(src, dst, shape, sst, dst_st):
                def write():
                    self.table.extend(size_arg(d) for d in shape)
                    self.operand(src, sst)
                    self.operand(dst, dst_st)
                return write
            members = [(c[5], c[2][0] if rank else 1, writer(*c[:5])) for c in copies]
            out.append(self.batch_step(k, members, rank == 0, MIN_ELEMENT_COST, f"write-back (batch of {len(copies)})",
                                       [list(copies[0][1].shape)]))
            done = {id(c[1]) for c in copies}
            pairs[:] = [(s, d) for s, d in pairs if id(d) not in done]
        return out

    def batch_step(self, k, members, whole, per_element, label, shapes=(), scope=()) -> Step:
        """The step of batch kernel ``k`` (``batch_loops.gen_batch``) over ``members``: ``(elements, outer rows,
        write)``, ``write()`` appending that member's own argument block to the table; ``whole``: a member is one
        piece.  Its block: the unit and piece tables, then the members' blocks (``batch_loops``'s layout)."""
        sizes = [m[0] for m in members]
        elements = sum(sizes)
        units, pieces = plan_pieces([(n, rows) for n, rows, _ in members],
                                    UNITS_PER_THREAD * pool_workers() if k.parallel else 1, whole=whole)
        st = Step("kernel", k, label=label, shapes=shapes, scope=scope)
        st.work = elements * per_element
        st.units = len(units) - 1
        if k.per_element is not None:
            st.gate = (elements, k.per_element)
        st.block = b0 = len(self.table)
        self.table += [len(units) - 1, elements] + units
        at = len(self.table)
        for m, c, parts in pieces:
            self.table += [m, c, parts]         # m: the member's block, once it is written (below)
        starts = []
        for _, _, write in members:
            starts.append(len(self.table) - b0)
            write()
        for q, (m, _, _) in enumerate(pieces):
            self.table[at + 3 * q] = starts[m]
        assert at - b0 == HEADER + len(units)
        return self.add(st)

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
    def slot_addr(self, place: Place):
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

    def move_slot(self, slot, place: Place):
        """Point an already written table slot at ``place`` instead."""
        for lst in (self.dynamic, self.lit_slots, self.ws_slots):
            lst[:] = [t for t in lst if t[0] != slot]
        self._register_slot(slot, place)

    def operand(self, place, strides):
        """Append an operand: its address, then its element strides."""
        self.slot_addr(place)
        self.table.extend(size_arg(s) for s in strides)

    def put_param(self, data) -> int:
        """Append a BLAS scalar argument in an 8-byte cell: ``bytes`` as they are, an int (a size, or a
        symbolic one: bound per call's sizes, ``sized.py``) as an int32; its byte offset in ``params``."""
        off = len(self.params)
        if not isinstance(data, (bytes, bytearray)):
            if type(data) is SymInt:
                self.sym_params.append((off, data))
                data = data.hint
            data = np.int32(data).tobytes()
        self.params += bytes(data).ljust(8, b"\0")
        return off

    def add(self, step: Step):
        """Append ``step`` (its kernel shared with an earlier step of the same key)."""
        if step.kernel is not None:
            step.kernel = self.kernels.setdefault(step.kernel.key, step.kernel)
        self.steps.append(step)
        return step

    # ---- steps --------------------------------------------------------------------------------------------
    def copy_step(self, src: Place, dst: Place, label) -> Step:
        """A copy of ``src`` into ``dst`` (broadcast, cast): a copy kernel, or NumPy into a strided view."""
        it = dst.shape
        sst = bcast_strides(src, it) if src.shape != it else list(src.strides)
        dst_st = list(dst.strides)
        size = math.prod(it)
        if dst_st and dst_st[-1] != 1 or not dst.contiguous():
            # the destination is a strided view (state written back into a view): copy in plain NumPy
            self.native = False
            st = Step("pycopy", label=label)
            st.ins, st.out = (src,), dst
            return self.add(st)
        shape, (sst, dst_st) = coalesce(it, [sst, dst_st])
        par, per_element = self.pool_choice(size) if shape else (False, None)
        k = gen_copy(src.dtype, dst.dtype, len(shape), stride_class(sst), par, per_element)
        st = Step("kernel", k, label=label, shapes=[list(it)])
        st.work = hint_of(size) * MIN_ELEMENT_COST
        if k.per_element is not None:
            st.gate = (size, k.per_element)
        st.block = len(self.table)
        self.table.extend(size_arg(d) for d in shape)
        self.operand(src, sst)
        self.operand(dst, dst_st)
        return self.add(st)

    def pool_choice(self, size, per_element=MIN_ELEMENT_COST):
        """``(parallel, per_element)`` for a kernel of ``size`` elements, each costing ``per_element`` (the plan's
        cost unit: bytes moved plus ``ir/plan.op_cost`` per op; at least MIN_ELEMENT_COST): whether its outer loop
        is parallel-capable, and the cost its run-time test uses (``kernel_ir.For.gate``; None: it always takes
        the pool).  A symbolic size is capable and decides per call; a concrete one is capable when it takes the
        pool now (``workpool.takes``).  ``parallel=True/False`` (tests, benchmarks) and ``torch.set_num_threads(1)``
        decide here once: forced loops from 4096 elements always take the pool."""
        want = self.parallel
        if settings.STATE.num_threads == 1:       # torch.set_num_threads(1): no worker pool
            return False, None
        if want is not None:
            return bool(want) and size >= 4096, None
        per_element = max(float(per_element), MIN_ELEMENT_COST)
        if type(size) is SymInt or workpool.takes(size, per_element):
            return True, per_element
        return False, None

    def split_rows(self, rows, macs, dtype, by_rows=True) -> tuple:
        """``(blocks, height)``: a GEMM of ``rows`` result rows (``by_rows=False``: columns) of ``dtype`` and
        ``macs`` multiply-adds split between the pool's workers into ``blocks`` blocks of ``height`` rows, the last
        one the ``rows - (blocks - 1) * height`` rows left (under twice ``height``), one BLAS call on one thread each, all
        in one pooled launch; ``(0, 0)``: one call, OpenBLAS's own threads.  Only products big enough for OpenBLAS
        to thread, with concrete rows, ``height`` a multiple of OpenBLAS's unit for ``dtype`` in that direction
        (``blas.block_unit``: none, no split; so every block starts on one) and ``blas.MIN_BLOCK_ROWS`` at least,
        as ``blas.row_blocks`` cuts eager GEMMs."""
        if not POOL_GEMMS or settings.STATE.num_threads == 1 or self.parallel is False:
            return 0, 0
        if type(rows) is not int or macs <= BLAS_THREADED_MACS or rows < 2 * MIN_BLOCK_ROWS:
            return 0, 0
        u = block_unit(dtype, by_rows)
        if u is None:
            return 0, 0
        # every block over OpenBLAS's small-matrix path (``blas.cut``: a short last block joins the one before)
        per = float(macs) / rows
        h = max(least_height(u, per), -(-rows // (pool_workers() * u)) * u)
        nb = len(cut(rows, h, per))
        return (nb, h) if nb >= 2 else (0, 0)

    def fixed_blocks(self, rows, macs) -> tuple:
        """``(blocks, height)``: a product of ``rows`` result rows (or columns) and ``macs`` multiply-adds that
        ``split_rows`` cannot cut into one call's bits, cut into at most ``GEMM_BLOCKS`` blocks of ``height``
        rows (``MIN_BLOCK_ROWS`` at least; the last one the rows left), one single-threaded BLAS call each: a
        geometry of the product's alone (module comment).  ``(0, 0)``: one call, as before: not over OpenBLAS's
        threading threshold, sizes not concrete, ``parallel=False``, or under the pool's threshold now."""
        if not POOL_GEMMS or self.parallel is False or type(rows) is not int or macs <= BLAS_THREADED_MACS:
            return 0, 0
        # only where no exact cut exists at any worker count (two blocks each over the small path): a product
        # that ``split_rows`` cuts at two workers and not at one keeps one call's bits at both
        if macs > 2 * small_path_macs() or rows < 2 * MIN_BLOCK_ROWS or not workpool.takes_split(macs, 2):
            return 0, 0
        h = max(MIN_BLOCK_ROWS, -(-rows // GEMM_BLOCKS))
        return -(-rows // h), h

    def batch_choice(self, macs, count):
        """``(parallel, gated)`` for a batch of ``count`` independent products of ``macs`` multiply-adds each (a
        ``bgemm`` step, ``batched_gemm.py``): whether the entry may split it between the pool's workers, each
        product on one thread, and whether it tests per call that the split pays and that OpenBLAS would not
        thread a product itself (``workpool.takes_batch``), as ``pool_choice`` decides for loops."""
        if settings.STATE.num_threads == 1:
            return False, False
        if self.parallel is not None:
            return bool(self.parallel) and macs <= BLAS_THREADED_MACS and count >= 2, False
        if type(macs) is SymInt or type(count) is SymInt:
            return True, True
        t = workpool.takes_batch(macs, count, BLAS_THREADED_MACS)
        return t, t

    def _check(self, e, place: Place):
        if e not in self.check_ids:
            return
        shape, (sts,) = coalesce(place.shape, [list(place.strides)])
        k = gen_check(place.dtype, len(shape), stride_class(sts))
        st = Step("kernel", k, label=f"check {e.op.name}")
        st.block = len(self.table)
        self.table.extend(size_arg(d) for d in shape)
        self.operand(place, sts)
        self.err_slots.append(len(self.table))
        self.table.extend([0, self.check_ids[e]])
        self.add(st)

    def after_step(self, s):
        """After each plan entry: the anomaly check of a single eqn's output (groups check inside their loop)."""
        if not isinstance(s, (Group, LoopBatch)):
            self._check(s, self.places[s.outs[0]])

    def index_check_slot(self, e):
        """The block's last two slots: the index-error array's address (set with the tables) and a step id."""
        self.ierr_slots.append(len(self.table))
        self.table.extend([0, len(self.index_steps)])
        self.index_steps.append(e)


__all__ = ["Program", "Place", "Root", "Step", "alias_classes", "stride_class", "MIN_ELEMENT_COST"]
