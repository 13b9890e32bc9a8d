"""A compiled graph's C entry: ``void entry(PyObject *arrays, int64 *ctx)``, and how Python calls it.

The entry is emitted as LLVM IR from the layout (``layout.Program``) and compiled by llvmlite in milliseconds: no
Numba, neither to build it nor to run it (no NRT, no boxing, no dispatcher).  Python takes the fresh outputs from
the output pool (``output_pool.take``: recycled buffers, no page faults) and allocates the anomaly error slot, and
passes one tuple holding the inputs, then the fresh outputs, then the error slot; the entry reads each array's
data pointer from the tuple (``PyTupleObject.ob_item``, ``PyArrayObject.data``: NumPy's and CPython's stable
object layouts, checked once per process by ``layout_ok``), patches them into the argument table and calls each
kernel, and BLAS, through its address.  ``ctx`` holds the addresses of the argument table ``A``, the kernel
address table ``F``, the per-slot offsets ``OFF``, the graph's index-error array ``IE`` (``[code, step id,
value, dim]``, set by a bounds-checked or zero-dividing step) and the program's step table ``S``.  When a step
may raise, the in-place state updates after it (``Step.state_write``) and the write-backs run only if
``IE[0] == 0``; the caller raises the step's error after the call (``lowering.step_error``).

The entry's code is a loop over the step table (``step_table``: the slots each array's data pointer goes to, then
one record per step: its kind, its F index, its block in ``A``, its guard), with one branch per step kind the
program has (``kinds_of``): its text grows with the kinds, not with the steps (a straight-line entry of B9's
step was ~900 kB of IR, most of a cold build's entry cost).
So the object code of a graph is position independent of any Python object, and a new process loads it with
llvmlite alone (``objload.py``).  The text has no sizes in it: a new batch size reuses the entry.
"""
from __future__ import annotations

import contextlib
import ctypes
import math

import numpy as np

from ...ir.ops.blas import BLAS_THREADED_MACS
from ..kernels import llvm_text as T, pool_abi
from ..kernels.llvm_text import I1, I64, PTR, VOID, for_loop
from . import round_groups
from .entry_gemms import gemm_batch, gemm_batch_on_pool
from .output_pool import MIN_BYTES, take as take_by_shape

TUPLE_ITEMS = 3 * ctypes.sizeof(ctypes.c_void_p)     # PyTupleObject: refcnt, type, size, then ob_item[]
ARRAY_DATA = 2 * ctypes.sizeof(ctypes.c_void_p)      # PyArrayObject_fields: refcnt, type, then data
_ENTRY_CALL = ctypes.CFUNCTYPE(None, ctypes.py_object, ctypes.c_void_p)
_NO_LOCK = contextlib.nullcontext()
_LAYOUT_OK = None


def layout_ok() -> bool:
    """The object layouts the entry reads are the ones this process has (checked once, on real objects)."""
    global _LAYOUT_OK
    if _LAYOUT_OK is None:
        try:
            a = np.arange(3.0)
            t = (a, 1)
            item0 = ctypes.c_void_p.from_address(id(t) + TUPLE_ITEMS).value
            data = ctypes.c_void_p.from_address(id(a) + ARRAY_DATA).value
            _LAYOUT_OK = item0 == id(a) and data == a.ctypes.data
        except Exception:   # noqa: BLE001 - any surprise: use the Python driver
            _LAYOUT_OK = False
    return _LAYOUT_OK


# the step kinds the entry's loop dispatches on, by code (a kind's handler is emitted once, where a program has it)
KINDS = ("kernel", "gemm", "bgemm", "pbgemm", "gbgemm", "sbgemm")
_CALLS = {"kernel": "call_kernel", "gemm": "call_gemm", "bgemm": "call_gemm_batched",
          "pbgemm": "call_gemm_batched_on_pool", "gbgemm": "call_gemm_batched_on_pool",
          "sbgemm": "call_gemm_batched_on_pool"}
HEADER = 5          # the step table's header words: patches, err slots, steps, n_checks, the err array's tuple index
IE_OK, CHECKS_OK = 1, 2     # a record's guard bits: it runs only when no step raised / no anomaly check failed
def _kind(st) -> str:
    if st.kind == "bgemm" and st.parallel:
        # its batch split between the pool's workers (gated: in the calls where that pays)
        # (a split GEMM's blocks: gated by the work alone)
        return "pbgemm" if st.gate is None else "sbgemm" if st.split else "gbgemm"
    return st.kind if st.kind in ("gemm", "bgemm") else "kernel"


def _records(program, n_inputs: int, n_checks: int):
    """``(patches, err_slots, steps)`` of ``program``'s step table: ``(slot, tuple index)`` of every slot patched
    with an array's data pointer; the slots that get the err array's; ``(kind, F index, block, guard, label)`` of
    every step and write-back, in the order they run."""
    p = program
    patches = [(slot, r.index if r.kind == "input" else n_inputs + r.index) for slot, r, _ in p.dynamic]
    errs = list(p.err_slots) if n_checks else []
    checked = bool(p.index_steps)
    steps = []
    joins = round_groups.entry_joins(p)
    for n, st in enumerate(p.steps):
        # after a step that may raise, an in-place state update runs only when it did not
        guard = IE_OK if st.state_write and checked else 0
        guard |= round_groups.guard_bits(joins.get(n))
        steps.append((_kind(st), n, st.block, guard, st.label))
    # an anomaly or a raising step leaves the user's state untouched
    guard = (CHECKS_OK if n_checks else 0) | (IE_OK if checked else 0)
    for n, st in enumerate(p.writes):
        steps.append(("kernel", len(p.steps) + n, st.block, guard, "write-back"))
    return patches, errs, steps


def step_table(program, n_inputs: int, n_checks: int) -> np.ndarray:
    """``program``'s step table (int64, the entry's ``S``, passed in its context): the header (``HEADER`` words),
    a ``(slot, tuple index)`` pair per patched slot, the err array's slots, then a ``(kind code, F index, block,
    guard)`` record per step (``_records``)."""
    patches, errs, steps = _records(program, n_inputs, n_checks)
    words = [len(patches), len(errs), len(steps), n_checks, n_inputs + len(program.fresh) if n_checks else -1]
    for pair in patches:
        words += pair
    words += errs
    for kind, n, block, guard, _ in steps:
        words += (KINDS.index(kind), n, block, guard)
    return np.array(words, np.int64)


def kinds_of(program) -> tuple:
    """The step kinds ``program``'s entry dispatches on, in ``KINDS`` order: its code depends on these alone."""
    have = {_kind(st) for st in program.steps} | ({"kernel"} if program.writes else set())
    return tuple(k for k in KINDS if k in have)


def _branches(kinds) -> list:
    """``(name, kinds)`` of each branch of the entry's loop: one per kind, but a gated batch of products and a
    split GEMM share one (they differ in one test, made per step: ``gemm_batch_on_pool``'s ``bounded``)."""
    out = []
    for kind in kinds:
        if kind == "sbgemm" and out and out[-1][0] == "gbgemm":
            out[-1] = ("gated", ("gbgemm", "sbgemm"))
        else:
            out.append((kind, (kind,)))
    return out


def _call_text(kind: str) -> str:
    # (a gated launch also reads the pool pacer's state: pool_abi.launch)
    per_call = f", when_macs_at_most={BLAS_THREADED_MACS}, when_work_reaches=min_work, paced=pace" \
        if kind == "gbgemm" else ", when_work_reaches=min_work, paced=pace" if kind == "sbgemm" else ""
    return f"{_CALLS[kind]}(F[n], A + 8 * block{per_call})"


def code_listing(program) -> str:
    """The listing of the entry's code (Python-shaped text of exactly what ``entry_ir`` emits): a loop over the
    step table, one branch per step kind ``program`` has.  Programs with the same kinds have the same code; what
    differs between them is data (``step_table``)."""
    kinds = kinds_of(program)
    lines = ["def entry(T, C):          # T: tuple of arrays, C: int64[5] = {A, F, OFF, IE, S}",
             "    c = ptr_i64(C)", "    A = c[0]", "    a = ptr_i64(A)", "    F = ptr_i64(c[1])",
             "    OFF = ptr_i64(c[2])", "    IE = ptr_i64(c[3])", "    S = ptr_i64(c[4])   # the step table",
             f"    t = ptr_i64(T + {TUPLE_ITEMS})",
             f"    n_patches, n_errs, n_steps, n_checks, e_at = S[0:{HEADER}]", f"    k = {HEADER}",
             "    for i in range(n_patches):       # each array's data pointer into the slots that read it",
             f"        a[S[k]] = ptr_i64(t[S[k + 1]] + {ARRAY_DATA})[0] + OFF[S[k]]; k += 2",
             f"    e = ptr_i64(t[e_at] + {ARRAY_DATA})[0] if n_checks else 0     # the anomaly checks' err array",
             "    for i in range(n_errs):", "        a[S[k]] = e; k += 1",
             "    for i in range(n_steps):         # one record per step, in the order they run",
             "        kind, n, block, guard = S[k:k + 4]; k += 4",
             f"        if guard & {IE_OK} and IE[0] != 0 or guard & {CHECKS_OK} and ptr_i64(e)[0] != n_checks:",
             "            continue"]
    joining = bool(round_groups.entry_joins(program))
    if joining:
        lines[-2:-2] = round_groups.listing(IE_OK | CHECKS_OK)
    branches = _branches(kinds)
    for j, (_, group) in enumerate(branches):
        test = "if" if j == 0 else "elif"
        codes = " or ".join(f"kind == {KINDS.index(kd)}" for kd in group)
        lines.append(f"        {test} {codes}:" if j < len(branches) - 1 else f"        {'else' if j else 'if True'}:")
        if len(group) == 1:
            lines.append(f"            {_call_text(group[0])}")
        else:
            lines += [f"            {_call_text(kd)} if kind == {KINDS.index(kd)} else" for kd in group[:-1]]
            lines.append(f"            {_call_text(group[-1])}")
    if joining:
        lines += ["        join = 0", "    flush()"]
    return "# jitgrad.codegen.program.entry: a graph's C entry, emitted as LLVM IR (sizes come from the tables)\n" + \
        "\n".join(lines) + "\n"


def entry_source(program, n_inputs: int, n_checks: int) -> str:
    """The entry's listing for ``program`` (a ``layout.Program``) over ``n_inputs`` graph inputs: its code
    (``code_listing``) and its step table, each step as the call it makes (its hash is the entry's identity)."""
    patches, errs, steps = _records(program, n_inputs, n_checks)
    lines = [f"# the step table S: {len(patches)} patched slots, {len(errs)} err slots, {len(steps)} steps;"
             " the steps as the loop calls them:"]
    for kind, n, block, guard, label in steps:
        call = _call_text(kind).replace("F[n]", f"F[{n}]").replace("8 * block", str(8 * block))
        conds = (["IE[0] == 0"] if guard & IE_OK else []) + ([f"ptr_i64(e)[0] == {n_checks}"]
                                                            if guard & CHECKS_OK else [])
        label += round_groups.label(guard)
        if conds:
            lines += [f"if {' and '.join(conds)}:", f"    {call}  # {label}"]
        else:
            lines.append(f"{call}  # {label}")
    return code_listing(program) + "\n".join(lines) + "\n"


def entry_ir(program, n_inputs: int, n_checks: int, name: str) -> str:
    """The entry as LLVM IR text: ``void name(i64 T, i64 C)`` (no Numba; written by ``llvm_text``): a loop over
    the step table ``S`` (``C[4]``, ``step_table``), a branch per step kind of ``program`` (``kinds_of``: the
    text depends on nothing else; ``n_inputs`` and ``n_checks`` are the table's)."""
    kinds = kinds_of(program)
    mod = T.Module(name)
    fn = mod.function(name, [I64, I64])
    Tup, C = fn.args
    ab = T.Builder(fn, fn.block("entry"))       # the entry block: every alloca (none inside the loops)
    b = T.Builder(fn, fn.block("start"))

    def at(base, k):                 # base[k] for an i64* base (k an int or a value)
        return b.load(I64, b.gep(I64, base, str(k)))

    def ptr(v):
        return b.cast("inttoptr", I64, v, PTR)

    c = ptr(C)
    A = at(c, 0)
    a, F, OFF = ptr(A), ptr(at(c, 1)), ptr(at(c, 2))
    IE, S = ptr(at(c, 3)), ptr(at(c, 4))
    t = ptr(b.op("add", I64, Tup, str(TUPLE_ITEMS)))
    n_patches, n_errs, n_steps, n_checks_v, e_at = (at(S, k) for k in range(HEADER))
    i_v, k_v, e_v = (ab.alloca(I64, name=x) for x in ("i", "k", "e"))
    b.store(I64, str(HEADER), k_v)

    def next_k(d):                   # k, then k += d
        k = b.load(I64, k_v)
        b.store(I64, b.op("add", I64, k, str(d)), k_v)
        return k

    def loop(label, limit, body):
        for_loop(b, fn, i_v, label + "{}", "0", lambda i: b.icmp("slt", I64, i, limit), lambda i: body(),
                  lambda i: b.op("add", I64, i, "1"))

    def patch():
        k = next_k(2)
        slot = at(S, k)
        obj = at(t, at(S, b.op("add", I64, k, "1")))
        data = b.load(I64, ptr(b.op("add", I64, obj, str(ARRAY_DATA))))
        b.store(I64, b.op("add", I64, data, at(OFF, slot)), b.gep(I64, a, slot))
    loop("patch", n_patches, patch)
    b.store(I64, "0", e_v)
    with b.if_then(b.icmp("ne", I64, n_checks_v, "0")):
        b.store(I64, b.load(I64, ptr(b.op("add", I64, at(t, e_at), str(ARRAY_DATA)))), e_v)
    e = b.load(I64, e_v)
    loop("err", n_errs, lambda: b.store(I64, e, b.gep(I64, a, at(S, next_k(1)))))

    joining = bool(round_groups.entry_joins(program))

    def step():
        k = next_k(4)
        kind, n, block, guard = (at(S, b.op("add", I64, k, str(j))) for j in range(4))
        run, check, check_e, read_e, done = (fn.block(x) for x in ("run", "guard", "guard_e", "read_e", "next"))
        if joining:
            guard = round_groups.emit_join(b, mod, guard, IE_OK | CHECKS_OK)
        b.cbranch(b.icmp("eq", I64, guard, "0"), run, check)
        b.position_at_end(check)
        ie_bad = b.op("and", I1, b.icmp("ne", I64, b.op("and", I64, guard, str(IE_OK)), "0"),
                      b.icmp("ne", I64, b.load(I64, IE), "0"))
        b.cbranch(ie_bad, done, check_e)
        b.position_at_end(check_e)
        b.cbranch(b.icmp("eq", I64, b.op("and", I64, guard, str(CHECKS_OK)), "0"), run, read_e)
        b.position_at_end(read_e)
        b.cbranch(b.icmp("eq", I64, b.load(I64, ptr(e)), n_checks_v), run, done)
        b.position_at_end(run)
        target = at(F, n)
        blk = b.op("add", I64, A, b.op("mul", I64, block, "8"))
        branches = _branches(kinds)
        for j, (name, group) in enumerate(branches):
            if j < len(branches) - 1:
                this, other = fn.block(name), fn.block("not_" + name)
                hit = "false"
                for kd in group:
                    hit = b.op("or", I1, hit, b.icmp("eq", I64, kind, str(KINDS.index(kd))))
                b.cbranch(hit, this, other)
                b.position_at_end(this)
            bounded = b.icmp("eq", I64, kind, str(KINDS.index("gbgemm"))) if name == "gated" else None
            _handler(b, ab, fn, name, ptr(blk), target, bounded)
            b.branch(done)
            if j < len(branches) - 1:
                b.position_at_end(other)
        if not kinds:
            b.branch(done)
        b.position_at_end(done)
        if joining:
            b.store(I64, "0", pool_abi.pool_global(mod, "join"))
    loop("step", n_steps, step)
    if joining:
        pool_abi.flush(b, mod)
    b.ret_void()
    ab.branch(fn.blocks[1])
    return mod.text()


def _handler(b, ab, fn, kind, blk, target, bounded=None):
    """The call of one step of ``kind`` at ``b`` (``blk``: its block's address, ``target``: its F entry;
    ``bounded``: the ``i1`` that a step of the ``gated`` branch is a ``gbgemm``)."""
    if kind == "gemm":
        b.call(VOID, b.cast("inttoptr", I64, target, PTR),
               [f"ptr {b.cast('inttoptr', I64, b.load(I64, b.gep(I64, blk, str(k))), PTR)}" for k in range(13)])
    elif kind == "bgemm":
        gemm_batch(b, ab, fn, blk, b.cast("inttoptr", I64, target, PTR))
    elif kind in ("pbgemm", "gbgemm", "sbgemm", "gated"):
        # (the chunks' records are a dynamic alloca: the stack they take is given back after the step)
        save = b.call(PTR, fn.module.declare("llvm.stacksave", PTR, []), [])
        gemm_batch_on_pool(b, ab, fn, blk, target, kind, kind != "pbgemm",
                              bounded if kind == "gated" else kind == "gbgemm")
        b.call(VOID, fn.module.declare("llvm.stackrestore", VOID, [PTR]), [f"ptr {save}"])
    else:
        b.call(VOID, b.cast("inttoptr", I64, target, PTR), [f"ptr {blk}"])


def has_pool_steps(program) -> bool:
    """Whether the entry of ``program`` launches work on the pool itself (a parallel ``bgemm`` step, or a round
    that steps share: ``round_groups.entry_joins``)."""
    return any(st.kind == "bgemm" and st.parallel for st in program.steps) or bool(round_groups.entry_joins(program))


def compile_entry(program, n_inputs: int, n_checks: int, key: str):
    """The entry's object code (``objstore.Blob`` named ``key``): LLVM IR straight to machine code, in
    milliseconds and without Numba."""
    from ..native import cache, objload, objstore
    ll = objload._ll()
    name = f"jitgrad_entry_{key[:24]}"
    m = ll.parse_assembly(entry_ir(program, n_inputs, n_checks, name))
    m.triple = ll.get_process_triple()
    m.verify()
    _, cpu, features = cache._cpu()         # the CPU the cache key names (NUMBA_CPU_NAME/FEATURES honoured)
    tm = ll.Target.from_triple(m.triple).create_target_machine(cpu=cpu, features=features, opt=0,
                                                               codemodel="jitdefault")
    from ..native import workpool
    needs = list(workpool.SYMBOLS) if has_pool_steps(program) else []
    return objstore.Blob(key, name, tm.emit_object(m), needs)


def entry_function(address: int):
    """The entry at ``address`` as a ctypes function (``caller``'s; made once per entry where it is bound often)."""
    return _ENTRY_CALL(address)


def caller(address: int, program, n_checks: int, A, F, OFF, S, fallback, IE, step_error, lock=None):
    """``run(*arrays) -> list of outputs`` calling the entry at ``address`` (``fallback(*arrays)`` for inputs
    that are not C-contiguous).  ``IE``: the graph's index-error array (the one its kernels' table slots point
    at); after a call that set it, ``step_error()`` is raised.  ``lock``: held around the call (``threads.
    LAUNCH_LOCK`` when the graph has a parallel kernel).  ``A``, ``F``, ``OFF``, ``IE`` are kept alive by the
    returned function, as is ``S``, the program's ``step_table``."""
    ctx = np.array([A.ctypes.data, F.ctypes.data, OFF.ctypes.data, IE.ctypes.data, S.ctypes.data], np.int64)
    specs = [(tuple(r.shape), np.dtype(r.dtype.np)) for r in program.fresh]
    make = callers(program, n_checks, fallback, IE, step_error, lock, _ENTRY_CALL(address), take_by_shape,
                   (A, F, OFF, IE, S))
    # outputs below the pool's threshold come from np.empty directly: take() would spend ~2 us in np.prod on
    # the shape of every call's scalar loss (B5's whole budget is 15 us)
    return make(ctx.ctypes.data, specs, [math.prod(s) * d.itemsize >= MIN_BYTES for s, d in specs], ctx)


def callers(program, n_checks: int, fallback, IE, step_error, lock, fn, take, keep=()):
    """``make(ctx, specs, pooled, keep) -> run``: callers of one entry (``fn``: its ``entry_function``) that differ
    in their tables and fresh outputs only; made once per program, so that a program bound per tuple of sizes
    (``sized.py``) makes a caller per binding from data alone.  ``ctx``: the address of the context words (A's,
    F's, OFF's, IE's and the step table's addresses); ``specs``: each fresh output's (shape, dtype); ``pooled``:
    whether it is taken from the output pool (``take``: by shape, or by capacity where shapes change between
    bindings) rather than ``np.empty``; ``keep``: what the tables' memory belongs to, kept alive by ``run`` (with
    this maker's ``keep``).  See ``caller`` for ``run``."""
    empty = np.empty
    outputs = program.outputs
    checked = bool(program.index_steps)
    lock = lock if lock is not None else _NO_LOCK

    def make(cptr, specs, pooled, keep_tables):
        any_pooled = True in pooled

        def run(*arrays):
            for a in arrays:
                if not a.flags.c_contiguous:
                    return fallback(*arrays)
            if any_pooled:
                fresh = [take(s, d) if big else empty(s, d) for (s, d), big in zip(specs, pooled)]
            else:
                fresh = [empty(s, d) for s, d in specs]
            if n_checks:
                err = np.array([n_checks, 0], np.int64)
                args = arrays + tuple(fresh) + (err,)
            else:
                args = arrays + tuple(fresh)
            with lock:
                if checked:
                    IE[0] = 0
                fn(args, cptr)
                if checked and IE[0]:
                    raise step_error()
            outs = [arrays[i] if kind == "input" else fresh[i] for kind, i in outputs]
            return outs + [err] if n_checks else outs
        run._keep = (keep, keep_tables, fn)
        run.ncheck = n_checks       # (marks the C entry's caller: GraphFunction.direct asks for it)
        return run
    return make


__all__ = ["entry_source", "code_listing", "entry_ir", "step_table", "kinds_of", "KINDS", "compile_entry", "caller",
           "callers", "entry_function", "layout_ok", "has_pool_steps"]
