"""A compiled graph's C entry, its GEMM steps (``entry.py``'s ``bgemm`` branches): a batch of ``?gemm`` calls run one
after another on the calling thread, or split between the pool's workers from the entry itself (a batch of small
products, the blocks of a split GEMM), and the loop helpers the entry's emitters share.  Emitted as LLVM IR text
(``llvm_text``), as the entry is.
"""
from __future__ import annotations

from ...ir.ops.blas import BLAS_THREADED_MACS
from ..kernels import llvm_text as T, pool_abi
from . import batch_prefetch
from ..kernels.llvm_text import DOUBLE, I1, I32, I64, PTR, VOID, for_loop


def _ops_on(b, p):
    """``(ld, st, add, mul)`` on int64 values at ``b`` (``p``: an i64 pointer; an index an int or a value)."""
    def ld(k):
        return b.load(I64, b.gep(I64, p, str(k)))

    def st(k, v):
        b.store(I64, v, b.gep(I64, p, str(k)))

    def add(x, y):
        return b.op("add", I64, str(x), str(y))

    def mul(x, y):
        return b.op("mul", I64, str(x), str(y))
    return ld, st, add, mul


def gemm_batch(b, ab, fn, p, gemm):
    """A ``bgemm`` step inline in the entry: the loop of ``abi.call_gemm_batched`` (its docstring has the block
    layout) over every batch entry, pointing the scratch block's B, A, C at that entry's matrices (``ab``: the
    builder of the entry block, where its slots are)."""
    ld, st, add, mul = _ops_on(b, p)
    nd = ld(13)
    var = {name: ab.alloca(I64, name=name) for name in ("t", "d", "dd", "r", "ob", "oa", "oc", "total", "pc", "pl")}
    s = add(14, mul(4, nd))
    for k in range(13):
        st(add(s, k), ld(k))
    b0, a0, c0 = ld(6), ld(8), ld(11)
    item = ld(add(s, batch_prefetch.SLOT))

    def loop(name, init, cond, body, step):
        for_loop(b, fn, var[name], f"{name}{{}}", init, cond, body, step)

    b.store(I64, "1", var["total"])
    loop("d", "0", lambda d: b.icmp("slt", I64, d, nd),
         lambda d: b.store(I64, mul(b.load(I64, var["total"]), ld(add(14, d))), var["total"]), lambda d: add(d, 1))
    total = b.load(I64, var["total"])

    def addresses(t):      # B, A and C of batch entry t
        b.store(I64, t, var["r"])
        for o in ("ob", "oa", "oc"):
            b.store(I64, "0", var[o])

        def dim(d):
            size = ld(add(14, d))
            r = b.load(I64, var["r"])
            j = b.op("srem", I64, r, size)
            b.store(I64, b.op("sdiv", I64, r, size), var["r"])
            for k, o in enumerate(("ob", "oa", "oc"), start=1):
                stride = ld(add(add(14, mul(k, nd)), d))
                b.store(I64, add(b.load(I64, var[o]), mul(j, stride)), var[o])
        loop("dd", b.op("sub", I64, nd, "1"), lambda d: b.icmp("sge", I64, d, "0"), dim,
             lambda d: b.op("sub", I64, d, "1"))
        return [add(base, b.load(I64, var[o])) for base, o in ((b0, "ob"), (a0, "oa"), (c0, "oc"))]

    def entry_body(t):
        for k, x in zip((6, 8, 11), addresses(t)):
            st(add(s, k), x)
        args = [ld(add(s, k)) for k in range(13)]
        _last_entry_size(b, args, b.icmp("eq", I64, t, b.op("sub", I64, total, "1")), ld(add(s, 13)),
                         ld(add(s, 14)))
        nxt = add(t, 1)
        with b.if_then(b.op("and", I1, b.icmp("sgt", I64, item, "0"), b.icmp("slt", I64, nxt, total))):
            batch_prefetch.prefetch_next(b, fn, (var["pc"], var["pl"]), args, addresses(nxt), item)
        b.call(VOID, gemm, [f"ptr {b.cast('inttoptr', I64, x, PTR)}" for x in args])
    loop("t", "0", lambda t: b.icmp("slt", I64, t, total), entry_body, lambda t: add(t, 1))


def _last_entry_size(b, args, is_last, which, address):
    """Point ``args``' m or n (index ``which``: 2 or 3; 0: neither) at ``address`` where ``is_last``: the last
    batch entry's own size (``abi.call_gemm_batched``: a split GEMM's last block)."""
    for k in (2, 3):
        use = b.op("and", I1, is_last, b.icmp("eq", I64, which, str(k)))
        args[k] = b.select(use, I64, address, args[k])


def _gemm_chunk(mod):
    """``chunk(task, dims, steps, p)``: the batch entries ``[task[0], task[1])`` of the ``bgemm`` block ``p``, each
    one ``?gemm`` call (at address ``task[2]``) on the calling thread, its arguments read from the block with B,
    A and C moved to that entry (no scratch slots: chunks run at once).  One function per entry module."""
    name = mod.name + "_gemm_chunk"
    if name in mod.symbols:
        return f'@"{name}"'
    fn = mod.function(name, [PTR] * 4, linkage="internal")
    task, p = fn.args[0], fn.args[3]
    b = T.Builder(fn, fn.block("entry"))
    ld_p, _, add, mul = _ops_on(b, p)
    ld_task = _ops_on(b, task)[0]
    var = {v: b.alloca(I64, name=v) for v in ("t", "d", "r", "ob", "oa", "oc", "nd", "total", "pc", "pl")}
    nd = ld_p(13)
    gemm = b.cast("inttoptr", I64, ld_task(2), PTR)
    fixed = [ld_p(k) for k in range(13)]
    s = add(14, mul(4, nd))
    which, address = ld_p(add(s, 13)), ld_p(add(s, 14))     # the last entry's own size
    item = ld_p(add(s, batch_prefetch.SLOT))

    def loop(name, init, cond, body, step):
        for_loop(b, fn, var[name], f"{name}{{}}", init, cond, body, step)
    b.store(I64, "1", var["total"])
    loop("nd", "0", lambda d: b.icmp("slt", I64, d, nd),
         lambda d: b.store(I64, mul(b.load(I64, var["total"]), ld_p(add(14, d))), var["total"]),
         lambda d: add(d, 1))
    final = b.op("sub", I64, b.load(I64, var["total"]), "1")

    def addresses(t):      # B, A and C of batch entry t
        b.store(I64, t, var["r"])
        for o in ("ob", "oa", "oc"):
            b.store(I64, "0", var[o])

        def dim(d):
            size = ld_p(add(14, d))
            r = b.load(I64, var["r"])
            j = b.op("srem", I64, r, size)
            b.store(I64, b.op("sdiv", I64, r, size), var["r"])
            for k, o in enumerate(("ob", "oa", "oc"), start=1):
                stride = ld_p(add(add(14, mul(k, nd)), d))
                b.store(I64, add(b.load(I64, var[o]), mul(j, stride)), var[o])
        loop("d", b.op("sub", I64, nd, "1"), lambda d: b.icmp("sge", I64, d, "0"), dim,
             lambda d: b.op("sub", I64, d, "1"))
        return [add(fixed[k], b.load(I64, var[o])) for k, o in ((6, "ob"), (8, "oa"), (11, "oc"))]

    def entry_body(t):
        args = list(fixed)
        args[6], args[8], args[11] = addresses(t)
        _last_entry_size(b, args, b.icmp("eq", I64, t, final), which, address)
        nxt = add(t, 1)
        with b.if_then(b.op("and", I1, b.icmp("sgt", I64, item, "0"), b.icmp("slt", I64, nxt, ld_task(1)))):
            batch_prefetch.prefetch_next(b, fn, (var["pc"], var["pl"]), args, addresses(nxt), item)
        b.call(VOID, gemm, [f"ptr {b.cast('inttoptr', I64, x, PTR)}" for x in args])
    loop("t", ld_task(0), lambda t: b.icmp("slt", I64, t, ld_task(1)), entry_body, lambda t: add(t, 1))
    b.ret_void()
    return fn.ref


def gemm_batch_on_pool(b, ab, fn, p, gemm_addr, n, gated=False, bounded=True):
    """A parallel ``bgemm`` step: its batch entries split into one equal chunk per thread of a pooled launch (chunk
    ``t`` of ``w``: ``[total * t / w, total * (t + 1) / w)``, fixed by the thread count, never by timing), each chunk's
    products run one after the other on one thread (``_gemm_chunk``; chunk 0 on the calling thread itself when it is one
    of them: ``pool_abi.round_``); all on the calling thread when the pool has one thread.  ``gated``: only in calls
    where each product is at most ``BLAS_THREADED_MACS`` multiply-adds (m, n, k read from the block's parameters;
    ``bounded=False``: any size, the blocks of a split GEMM; an ``i1`` value: bounded where it holds) and the batch's
    (the last entry's at its own size: a split GEMM counts its whole product) reach the pool's minimum work
    (``workpool.takes_batch``, ``takes_split``), and while the pool's pacer does not hold launches off the pool
    (``pool_abi.launch``); else all on the calling thread.  The caller holds ``threads.LAUNCH_LOCK``
    (``cpu.CompiledGraph``).  ``ab``: the entry block's builder (the step's slots); ``n``: a word its blocks' names
    start with."""
    mod = fn.module
    add_task = pool_abi.declare(mod)[0]
    chunk = _gemm_chunk(mod)
    ld, _, add, mul = _ops_on(b, p)
    nd = ld(13)
    total_v, t_v = ab.alloca(I64, name=f"ptotal{n}"), ab.alloca(I64, name=f"ptask{n}")
    b.store(I64, "1", total_v)
    b.store(I64, "0", t_v)

    def loop(name, limit, body):
        for_loop(b, fn, t_v, f"{name}{{}}{n}", "0", lambda t: b.icmp("slt", I64, t, limit), body,
                  lambda t: add(t, 1))
    loop("pdims", nd, lambda d: b.store(I64, mul(b.load(I64, total_v), ld(add(14, d))), total_v))
    total = b.load(I64, total_v)
    nw = b.load(I64, pool_abi.pool_global(mod, "threads"))
    pooled = b.op("and", I1, b.icmp("sgt", I64, nw, "1"), b.icmp("sgt", I64, total, "1"))
    takes, pace, work = pooled, None, None
    if gated:       # slots 2, 3, 4: the addresses of the int32 sizes m, n, k (batched_gemm._emit_gemm_block)
        def size(addr):
            return b.cast("sext", I32, b.load(I32, b.cast("inttoptr", I64, addr, PTR)), I64)
        macs = "1"
        for k in (2, 3, 4):
            macs = mul(macs, size(ld(k)))
        # the last entry's multiply-adds with its own size (a split GEMM's last block: the whole product counts)
        s = add(14, mul(4, nd))
        args = [ld(k) for k in range(5)]
        _last_entry_size(b, args, T.TRUE, ld(add(s, 13)), ld(add(s, 14)))
        last = "1"
        for k in (2, 3, 4):
            last = mul(last, size(args[k]))
        work = b.cast("sitofp", I64, add(mul(macs, b.op("sub", I64, total, "1")), last), DOUBLE)
        takes = b.op("and", I1, pooled, pool_abi.reaches_min_work(b, mod, work))
        if bounded is True:     # small products: only where OpenBLAS would not thread one itself
            takes = b.op("and", I1, takes, b.icmp("sle", I64, macs, str(BLAS_THREADED_MACS)))
        elif bounded is not False:      # (an i1 value: bounded in the steps where it holds)
            small = b.icmp("sle", I64, macs, str(BLAS_THREADED_MACS))
            takes = b.op("and", I1, takes, b.select(bounded, I1, small, T.TRUE))
        pooled, pace = pool_abi.paced(b, mod, takes)
    # its blocks may join the pool round pending from the steps before (round_groups.py: the entry sets ``join``
    # for that step); else that round runs first
    joining = pool_abi.joining(b, mod, pooled, pace)
    with b.if_then(b.op("xor", I1, joining, "true")):
        pool_abi.flush(b, mod)
    ntasks = b.select(pooled, I64, nw, "1")
    tasks = b.alloca(I64, mul(ntasks, 3), name=f"ptasks{n}")

    def fill(t):
        rec = b.gep(I64, tasks, mul(t, 3))
        b.store(I64, b.op("sdiv", I64, mul(total, t), ntasks), rec)
        b.store(I64, b.op("sdiv", I64, mul(total, add(t, 1)), ntasks), b.gep(I64, rec, "1"))
        b.store(I64, gemm_addr, b.gep(I64, rec, "2"))
        queue = b.op("and", I1, b.op("and", I1, pooled, pool_abi.queued(b, mod, t)), b.op("xor", I1, joining, "true"))
        with b.if_then(queue):
            b.call(VOID, add_task, [f"ptr {chunk}", f"ptr {rec}", "ptr null", "ptr null", f"ptr {p}"])
    loop("pfill", ntasks, fill)

    def join(t):
        rec = b.gep(I64, tasks, mul(t, 3))
        pool_abi.join_chunk(b, mod, chunk, t, [b.load(I64, b.gep(I64, rec, str(k))) for k in range(3)], p)

    def on_pool():      # chunk 0 (the first record) on the calling thread when it is the caller's
        with b.if_else(joining) as (then, other):
            with then:
                pool_abi.count_join(b, mod)
                loop("pjoin", ntasks, join)
            with other:
                pool_abi.round_(b, mod, lambda: b.call(VOID, chunk, [f"ptr {tasks}", "ptr null", "ptr null",
                                                                     f"ptr {p}"]))

    def on_caller():
        b.call(VOID, chunk, [f"ptr {tasks}", "ptr null", "ptr null", f"ptr {p}"])
    pool_abi.launch(b, mod, pooled, takes, pace, work, on_pool, on_caller, ab)


__all__ = ["gemm_batch", "gemm_batch_on_pool"]
