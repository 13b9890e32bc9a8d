"""Small matrix products without BLAS: ``?gemm`` with BLAS's own calling convention, for products too small for
OpenBLAS to pay off.

Attention's per-head products (``q @ k.mT`` on ``[B, H, T, D]``: 64 x 32 x 64 each in B9) are ``bgemm`` steps of
many tiny ``sgemm`` calls.  Measured in B9's compiled step (2026-11-29, one thread): 1536 such calls took 20 ms, 13 us
each for 4 us of arithmetic (OpenBLAS packs both operands for every call); and on two threads the pool's two
workers calling OpenBLAS at once took as long as one thread did (OpenBLAS serialises concurrent small calls).  The
kernel here packs nothing it can read in place and shares no state, so the pool's workers run their products at
once.

``small_gemm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)`` computes, column-major as BLAS
does, ``C = alpha op(A) op(B) + beta C`` (``C`` not read when ``beta == 0``), all 13 arguments by pointer
(``int32`` sizes), so a ``gemm`` or ``bgemm`` step's table block calls it exactly as it calls SciPy's routine
(``codegen/program/gemm_steps.py``, ``batched_gemm.py``; the entry and the Python driver call whatever address the
kernel table holds).  How it computes:

- ``C`` in tiles of rows x columns held in registers across the whole ``k`` loop (``TILE_ROWS``, ``TILE_COLUMNS``):
  each step adds ``op(A)[rows, p] * op(B)[p, cols]``, a piece of ``A``'s column ``p`` (contiguous when ``transa``
  is ``N``) times broadcast elements of ``B`` (any layout: they are read one at a time);
- ``transa == T``: ``A`` is first copied transposed into a stack buffer (at most ``PACK_MAX`` elements) so its
  columns are contiguous;
- sums over ``p`` in order (so a product's result does not depend on
  which thread runs it);
- what it does not take goes to the BLAS routine itself (``fallback``: products of more than ``MAX_MACS``
  multiply-adds, a transposed ``A`` too big to pack, ``alpha == 0``).

Triangular variants (``TRIANGLES``, a second module linked on first use): the same signature and tiles, for a
product the graph proved half-needed (``ir/passes/causal.py``: attention under a causal mask).  ``p_le_col``
(``p_ge_col``, ``p_le_row``, ``p_ge_row``): op(B)'s (op(A)'s) other side of the diagonal is zero, so each tile
sums ``p`` only up to (from) its last (first) column (row); ``rows_le_col`` (``rows_ge_col``): C's elements below
(above) the diagonal are never read, so each tile of columns computes only the rows up to (from) its last (first)
column and stores 0 (``beta C`` where ``beta != 0``) in the others.  A tile's sum still runs ``p`` ascending and
leaves out only terms that are exact zeros, so every element computed has the full kernel's bits (the sign of a
zero result aside); BLAS's fallback computes it all, which is just as right.

One LLVM module (no Numba), written as text and compiled by llvmlite once per machine and kept in the disk cache of compiled code;
a process links it on first use (``address``).
"""
from __future__ import annotations

import os
import threading

from . import llvm_text as T
from .llvm_text import I64, PTR

WIDTH = {"sgemm": 8, "dgemm": 4}    # elements per vector (256-bit; LLVM splits them where the CPU is narrower)
# on a CPU with AVX-512 (``+avx512f``), 512-bit vectors: twice the multiply-adds per FMA instruction (static count
# of the k loop, sgemm: 12 FMAs in 25 instructions per 96 multiply-adds at 256 bits, in 31 per 192 at 512)
WIDE = {"sgemm": 16, "dgemm": 8}
# a tile of C held in registers over the whole k loop: rows in SIMD vectors x columns.  4 vectors x 3 columns is 12
# accumulators, 4 loads of A and 3 broadcasts of B per 12 multiply-adds (16 AVX registers in all), so the loop is
# bound by multiply-adds, not loads; then narrower tiles for the rows and columns left over.  At 512 bits (32
# registers) 2 vectors x 6 columns: 12 accumulators again, and attention's 32-row products fill a tile too
TILE_ROWS = {name: ((4, w), (1, w), (1, 1)) for name, w in WIDTH.items()}
TILE_COLUMNS = (3, 1)
TILE_ROWS_WIDE = {name: ((2, w), (1, w), (1, 1)) for name, w in WIDE.items()}
TILE_COLUMNS_WIDE = (6, 3, 1)
MAX_MACS = 1 << 21      # bigger products go to BLAS (its packing and cache blocking pay off there)
PACK_MAX = 8192         # elements of a transposed A copied to the stack (32 KiB float32)
NAMES = {"sgemm": "jitgrad_small_sgemm", "dgemm": "jitgrad_small_dgemm"}
# the triangular variants (see the module's text), in BLAS's column-major terms: C(r, c) = sum_p op(A)(r, p)
# op(B)(p, c)
TRIANGLES = ("p_le_col", "p_ge_col", "p_le_row", "p_ge_row", "rows_le_col", "rows_ge_col")
_FALLBACK = {"sgemm": "jitgrad_blas_sgemm", "dgemm": "jitgrad_blas_dgemm"}
# products up to this many multiply-adds (by their sizes' hints) call this kernel rather than BLAS: the size below
# which OpenBLAS runs a product on one thread anyway (ir/ops/blas.py's BLAS_THREADED_MACS)
SMALL_MACS = 65536 * 4
ENABLED = os.environ.get("JITGRAD_SMALL_GEMM", "1") != "0"
STATS = {"modules_built": 0, "modules_loaded": 0}
LEAN_PASSES = ("sroa", "instruction_combine", "simplify_cfg", "loop_rotate", "new_gvn", "loop_strength_reduce",
               "instruction_combine", "simplify_cfg")
_LOCK = threading.Lock()
_ADDRESSES: dict = {}


def small_gemm_ir(fma: bool = True, wide: bool = False, triangles: bool = False) -> str:
    """The module's LLVM IR: ``jitgrad_small_sgemm`` and ``jitgrad_small_dgemm`` (BLAS's signature), each calling
    its BLAS routine (an external symbol, ``jitgrad_blas_?gemm``) for what it does not take.  ``fma``: the CPU
    has fused multiply-add (``llvm.fma`` per step; else a multiply and an add, which LLVM may still contract).
    ``wide``: 512-bit vectors (``TILE_ROWS_WIDE`` x ``TILE_COLUMNS_WIDE``).  Every element of C is the same sum in the same order at
    either width (one accumulator per element, ``p`` ascending), so both give the same bits.  ``triangles``: the
    other module, the ``TRIANGLES`` variants of both (``jitgrad_small_sgemm_p_le_col`` ...).  Written as text
    (``llvm_text``)."""
    mod = T.Module("jitgrad_small_gemm_tri" if triangles else "jitgrad_small_gemm")
    for name in ("sgemm", "dgemm"):
        for tri in TRIANGLES if triangles else (None,):
            _emit(mod, name, fma, (TILE_ROWS_WIDE if wide else TILE_ROWS)[name],
                  TILE_COLUMNS_WIDE if wide else TILE_COLUMNS, tri)
    return mod.text()


def _emit(mod, name, fma, tile_rows, tile_columns, tri=None):
    t = T.FLOAT if name == "sgemm" else T.DOUBLE
    fn = mod.function(NAMES[name] + (f"_{tri}" if tri else ""), [PTR] * 13)
    if tri in ("p_le_row", "p_ge_row"):
        tile_rows = tile_rows[1:]       # a p range per tile of rows: one vector of rows, not the widest tile
    fallback = mod.declare(_FALLBACK[name], T.VOID, [PTR] * 13)
    args = fn.args
    # the stack buffer for a transposed A, every loop counter and accumulator: allocas of the first block (mem2reg
    # keeps counters and accumulators in registers)
    first = fn.block("allocas")
    ab = T.Builder(fn, first)
    b = T.Builder(fn, fn.block("entry"))
    fm = "contract "
    pack = ab.alloca(f"[{PACK_MAX} x {t}]", name="packed")
    slots = {}

    def slot(nm, ty=I64):
        if nm not in slots:
            slots[nm] = ab.alloca(ty, name=nm)
        return slots[nm]

    def mul(x, y):
        return b.op("mul", I64, x, y)

    def add(x, y):
        return b.op("add", I64, x, y)

    def least(x, y):
        return b.select(b.icmp("slt", I64, x, y), I64, x, y)

    def int_arg(k):
        return b.cast("sext", T.I32, b.load(T.I32, args[k]), I64)

    def is_t(k):
        ch = b.load(T.I8, args[k])
        hit = [b.icmp("eq", T.I8, ch, str(ord(x))) for x in "TtCc"]
        return b.op("or", T.I1, b.op("or", T.I1, hit[0], hit[1]), b.op("or", T.I1, hit[2], hit[3]))
    ta, tb = is_t(0), is_t(1)
    m, n, k = int_arg(2), int_arg(3), int_arg(4)
    alpha = b.load(t, args[5])
    A0 = args[6]
    lda0 = int_arg(7)
    B = args[8]
    ldb = int_arg(9)
    beta = b.load(t, args[10])
    C = args[11]
    ldc = int_arg(12)
    zero_t = T.const(t, 0.0)

    # what goes to BLAS: too much work, a transposed A too big to pack, alpha == 0 (A and B not read)
    big = b.icmp("sgt", I64, mul(mul(m, n), k), str(MAX_MACS))
    big = b.op("or", T.I1, big, b.op("and", T.I1, ta, b.icmp("sgt", I64, mul(m, k), str(PACK_MAX))))
    big = b.op("or", T.I1, big, b.fcmp("oeq", t, alpha, zero_t))
    to_blas, ours = fn.block("to_blas"), fn.block("ours")
    b.cbranch(big, to_blas, ours)
    b.position_at_end(to_blas)
    b.call(T.VOID, fallback, [f"ptr {x}" for x in args])
    b.ret_void()
    b.position_at_end(ours)
    empty = b.op("or", T.I1, b.icmp("sle", I64, m, "0"), b.icmp("sle", I64, n, "0"))
    done, work = fn.block("done"), fn.block("work")
    b.cbranch(empty, done, work)
    b.position_at_end(work)

    def loop(nm, start, stop, body, step=1):
        """``for nm in range(start, stop, step)`` (``stop`` a value), body(i)."""
        s = slot(nm)
        b.store(I64, start, s)
        head, inner, after = (fn.block(f"{nm}_{x}") for x in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(I64, s)
        b.cbranch(b.icmp("slt", I64, i, stop), inner, after)
        b.position_at_end(inner)
        body(i)
        b.store(I64, add(b.load(I64, s), str(step)), s)
        b.branch(head)
        b.position_at_end(after)

    # A transposed: copied into the stack buffer, so op(A)'s columns are contiguous (lda = m)
    a_slot, lda_slot = slot("A", PTR), slot("lda")
    b.store(PTR, A0, a_slot)
    b.store(I64, lda0, lda_slot)
    with b.if_then(ta):
        # blocks of sq x sq elements moved as sq vectors and transposed in registers (shuffles); the edges
        # element by element.  A copy: the product's bits do not depend on how it is made
        sq = 32 // _elem_bytes(t)
        m_sq = mul(b.op("sdiv", I64, m, str(sq)), str(sq))
        k_sq = mul(b.op("sdiv", I64, k, str(sq)), str(sq))

        def pack_one(i, p):        # op(A)[i, p] = A[p + i * lda]  ->  packed[i + p * m]
            b.store(t, b.load(t, b.gep(t, A0, add(p, mul(i, lda0)))), b.gep(t, pack, add(i, mul(p, m))))

        def pack_rows(i0):
            loop("pb", "0", k_sq, lambda p0: _transpose_block(b, t, sq, b.gep(t, A0, add(p0, mul(i0, lda0))), lda0,
                                                              b.gep(t, pack, add(i0, mul(p0, m))), m), step=sq)
            loop("pe", k_sq, k, lambda p: loop("pq", "0", str(sq), lambda q: pack_one(add(i0, q), p)))
        loop("pi", "0", m_sq, pack_rows, step=sq)
        loop("pr", m_sq, m, lambda i: loop("pp", "0", k, lambda p: pack_one(i, p)))
        b.store(PTR, pack, a_slot)
        b.store(I64, m, lda_slot)
    A, lda = b.load(PTR, a_slot), b.load(I64, lda_slot)
    beta_zero = b.fcmp("oeq", t, beta, zero_t)

    # op(B)[p, j] = B[p * bp + j * bj]: the strides chosen once, so the k loop has no select
    bp, bj = b.select(tb, I64, ldb, "1"), b.select(tb, I64, "1", ldb)

    def b_elem(p, j):
        return b.load(t, b.gep(t, B, add(mul(p, bp), mul(j, bj))))

    def splat(x, width):
        if width == 1:
            return x
        vty = f"<{width} x {t}>"
        v = b.vector_insert(vty, "undef", t, x, "0")
        return b.vector_shuffle(vty, v, "undef", "<" + ", ".join(["i32 0"] * width) + ">", width)

    def fma_of(ty, width):
        """``llvm.fma`` for ``ty`` (a float type or a vector of ``width`` of them), declared once in the module."""
        suffix = f"v{width}{'f32' if t == T.FLOAT else 'f64'}" if width > 1 else ("f32" if t == T.FLOAT else "f64")
        return mod.declare(f"llvm.fma.{suffix}", ty, [ty] * 3)

    def tile(i, j, nvec, width, ncols):
        """Rows ``[i, i + nvec * width)`` of columns ``[j, j + ncols)``: ``nvec * ncols`` accumulators across the
        whole k loop (each step: ``nvec`` loads of A's column, ``ncols`` broadcasts of B, their products)."""
        vty = f"<{width} x {t}>" if width > 1 else t
        zero = "zeroinitializer" if width > 1 else zero_t
        accs = [[slot(f"acc{nvec}x{width}x{ncols}_{v}_{q}", vty) for q in range(ncols)] for v in range(nvec)]
        for row in accs:
            for a in row:
                b.store(vty, zero, a)
        arow = b.gep(t, A, i)
        # the p range a triangular variant sums: the terms outside are exact zeros for every element of the tile
        p_lo, p_hi = "0", k
        if tri == "p_le_col":
            p_hi = least(k, add(j, str(ncols)))
        elif tri == "p_ge_col":
            p_lo = least(j, k)
        elif tri == "p_le_row":
            p_hi = least(k, add(i, str(nvec * width)))
        elif tri == "p_ge_row":
            p_lo = least(i, k)

        def step(p):
            bs = [splat(b_elem(p, add(j, str(q))), width) for q in range(ncols)]
            col = b.gep(t, arow, mul(p, lda))
            for v, row in enumerate(accs):
                x = _load(b, t, b.gep(t, col, str(v * width)), width)
                for bq, a in zip(bs, row):
                    acc = b.load(vty, a)
                    b.store(vty, b.call(vty, fma_of(vty, width), [f"{vty} {x}", f"{vty} {bq}", f"{vty} {acc}"])
                            if fma else b.op("fadd", vty, acc, b.op("fmul", vty, x, bq, fm), fm), a)
        loop(f"p{nvec}x{width}x{ncols}", p_lo, p_hi, step)
        al, be = splat(alpha, width), splat(beta, width)
        cols = [b.gep(t, C, add(i, mul(add(j, str(q)), ldc))) for q in range(ncols)]
        with b.if_else(beta_zero) as (then, other):
            with then:
                for v, row in enumerate(accs):
                    for ccol, a in zip(cols, row):
                        _store(b, t, b.op("fmul", vty, b.load(vty, a), al), b.gep(t, ccol, str(v * width)), width)
            with other:
                for v, row in enumerate(accs):
                    for ccol, a in zip(cols, row):
                        ptr = b.gep(t, ccol, str(v * width))
                        old = _load(b, t, ptr, width)
                        _store(b, t, b.op("fadd", vty, b.op("fmul", vty, b.load(vty, a), al),
                                          b.op("fmul", vty, old, be)), ptr, width)

    rows, cols_done = slot("rows"), slot("cols")

    def counted(name, done_slot, total, span, body):
        """``while *done_slot + span <= total: body(); *done_slot += span`` as a counted loop."""
        def each(_):
            body(b.load(I64, done_slot))
            b.store(I64, add(b.load(I64, done_slot), str(span)), done_slot)
        loop(name, "0", b.op("sdiv", I64, b.op("sub", I64, total, b.load(I64, done_slot)), str(span)), each)

    def unread(j, ncols, lo, hi):
        """C's rows ``[lo, hi)`` of columns ``[j, j + ncols)``, which a ``rows_*`` variant does not compute: 0, or
        ``beta C`` (C is read only where ``beta != 0``, as BLAS reads it)."""
        def fill(scaled):
            cols = [b.gep(t, C, mul(add(j, str(q)), ldc)) for q in range(ncols)]
            n_vec = b.op("sdiv", I64, b.op("sub", I64, hi, lo), str(vec))
            vty, vzero = f"<{vec} x {t}>", "zeroinitializer"

            def vrow(v):        # a vector of rows of each column at a time, then the rows left one by one
                r = add(lo, mul(v, str(vec)))
                for col in cols:
                    ptr = b.gep(t, col, r)
                    _store(b, t, b.op("fmul", vty, _load(b, t, ptr, vec), splat(beta, vec)) if scaled else vzero,
                           ptr, vec)
            loop(f"unreadv{ncols}{'b' if scaled else ''}", "0", n_vec, vrow)

            def row(r):
                for col in cols:
                    ptr = b.gep(t, col, r)
                    b.store(t, b.op("fmul", t, b.load(t, ptr), beta) if scaled else zero_t, ptr)
            loop(f"unread{ncols}{'b' if scaled else ''}", add(lo, mul(n_vec, str(vec))), hi, row)
        with b.if_else(beta_zero) as (then, other):
            with then:
                fill(False)
            with other:
                fill(True)

    # a rows_* variant's cut at the diagonal, rounded out to a vector of rows (the narrowest vector tile), so the
    # rows near the diagonal run in vector tiles, not one row at a time
    vec = tile_rows[-2][0] * tile_rows[-2][1]

    def columns(j, ncols):
        lo, hi = "0", m         # the rows computed: all, or a triangular variant's side of the diagonal
        if tri == "rows_le_col":
            up = b.op("mul", I64, b.op("sdiv", I64, add(j, str(ncols + vec - 1)), str(vec)), str(vec))
            hi = least(m, up)
        elif tri == "rows_ge_col":
            lo = least(b.op("mul", I64, b.op("sdiv", I64, j, str(vec)), str(vec)), m)
        b.store(I64, lo, rows)
        for nvec, width in tile_rows:
            counted(f"rows{nvec}x{width}x{ncols}", rows, hi, nvec * width,
                    lambda i, nvec=nvec, width=width: tile(i, j, nvec, width, ncols))
        if tri == "rows_le_col":
            unread(j, ncols, hi, m)
        elif tri == "rows_ge_col":
            unread(j, ncols, "0", lo)

    b.store(I64, "0", cols_done)
    for ncols in tile_columns:
        counted(f"cols{ncols}", cols_done, n, ncols, lambda j, ncols=ncols: columns(j, ncols))

    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    ab.branch(fn.blocks[1])


def _elem_bytes(t) -> int:
    return 4 if t == T.FLOAT else 8


def _transpose_block(b, t, sq, src, ld_src, dst, ld_dst):
    """``dst[r + c * ld_dst] = src[c + r * ld_src]`` for ``r, c < sq``: ``sq`` row vectors loaded, transposed by
    ``log2(sq)`` rounds of two-vector shuffles (each swaps one bit of the row index with that of the column
    index), stored as ``sq`` vectors.  Replaces ``sq * sq`` scalar loads and stores (a transposed A's packing:
    attention's scores and ``dO V^T``)."""
    rows = [_load(b, t, b.gep(t, src, b.op("mul", I64, str(r), ld_src)), sq) for r in range(sq)]
    vty = f"<{sq} x {t}>"
    h = sq // 2
    while h:
        low = "<" + ", ".join(f"i32 {c if not c & h else sq + c - h}" for c in range(sq)) + ">"
        high = "<" + ", ".join(f"i32 {c + h if not c & h else sq + c}" for c in range(sq)) + ">"
        for i in range(sq):
            if not i & h:
                rows[i], rows[i | h] = (b.vector_shuffle(vty, rows[i], rows[i | h], low, sq),
                                        b.vector_shuffle(vty, rows[i], rows[i | h], high, sq))
        h //= 2
    for c in range(sq):
        _store(b, t, rows[c], b.gep(t, dst, b.op("mul", I64, str(c), ld_dst)), sq)


def _load(b, t, ptr, width):
    if width == 1:
        return b.load(t, ptr)
    return b.load(f"<{width} x {t}>", ptr, f", align {_elem_bytes(t)}")


def _store(b, t, val, ptr, width):
    if width == 1:
        b.store(t, val, ptr)
    else:
        b.store(f"<{width} x {t}>", val, ptr, f", align {_elem_bytes(t)}")


def routine(blas_name: str, macs: int, triangle: str | None = None) -> str:
    """The routine a product of ``macs`` multiply-adds calls: ``blas_name`` (``sgemm``/``dgemm``), or this module's
    kernel for it (``small_sgemm``/``small_dgemm``; ``JITGRAD_SMALL_GEMM=0``: never); ``triangle`` (one of
    ``TRIANGLES``): the product needs only that side (``small_sgemm_p_le_col`` ...; BLAS computes it all)."""
    if not (ENABLED and macs <= SMALL_MACS):
        return blas_name
    return f"small_{blas_name}" + (f"_{triangle}" if triangle else "")


def macs(triangle: str | None, m: int, n: int, k: int, name: str = "sgemm", wide: bool | None = None) -> int:
    """The multiply-adds kernel ``name`` (``m``, ``n``, ``k`` in its column-major terms) does for variant
    ``triangle`` (None: the whole product, ``m n k``): its tiles walked as ``_emit`` walks them.  ``wide``: 512-bit
    tiles (None: this CPU's)."""
    if triangle is None:
        return m * n * k
    if wide is None:
        from ..native import cache
        wide = "+avx512f" in cache._cpu()[2].split(",")
    rows_tiles = [r * w for r, w in (TILE_ROWS_WIDE if wide else TILE_ROWS)[name]]
    if triangle in ("p_le_row", "p_ge_row"):
        rows_tiles = rows_tiles[1:]
    total, j = 0, 0
    for ncols in TILE_COLUMNS_WIDE if wide else TILE_COLUMNS:
        while j + ncols <= n:
            lo, hi = 0, m
            vec = rows_tiles[-2]
            if triangle == "rows_le_col":
                hi = min(m, -(-(j + ncols) // vec) * vec)
            elif triangle == "rows_ge_col":
                lo = min(j // vec * vec, m)
            i = lo
            for span in rows_tiles:
                while i + span <= hi:
                    p_lo, p_hi = 0, k
                    if triangle == "p_le_col":
                        p_hi = min(k, j + ncols)
                    elif triangle == "p_ge_col":
                        p_lo = min(j, k)
                    elif triangle == "p_le_row":
                        p_hi = min(k, i + span)
                    elif triangle == "p_ge_row":
                        p_lo = min(i, k)
                    total += span * ncols * max(0, p_hi - p_lo)
                    i += span
            j += ncols
    return total


def blas_routine(name: str) -> str:
    """The BLAS routine (``sgemm``/``dgemm``) a kernel name (``sgemm``, ``sgemm_p_le_col`` ...) stands in for."""
    return name.partition("_")[0]


def _object_code(triangles: bool = False) -> bytes:
    """The module's object code for this machine: from the disk cache when built before (its key covers this
    file's source, through the codegen digest, and the CPU), else built now (~0.3-0.6 s of LLVM) and stored.
    ``triangles``: the triangular variants' module."""
    from ..native import cache, objload, objstore
    key = cache.cache_key("jitgrad.codegen.kernels.small_gemm",
                          extra=("small-gemm-module",) + (("triangles",) if triangles else ()))
    if cache.cache_dir() is not None:
        blobs = objstore.read(key, warn=False)
        if blobs and len(blobs) == 1:
            return blobs[0].data
    ll = objload._ll()
    triple, cpu, features = cache._cpu()
    feats = features.split(",")
    m = ll.parse_assembly(small_gemm_ir(fma="+fma" in feats, wide="+avx512f" in feats, triangles=triangles))
    m.triple = triple
    m.verify()
    tm = ll.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2,
                                                             codemodel="jitdefault")
    m.data_layout = str(tm.target_data)
    # the loops are written vectorised and tiled already: a short pipeline (counters and accumulators into
    # registers, invariants out of the loops) builds in a third of O3's time for the same inner loops
    pb = ll.create_pass_builder(tm, ll.create_pipeline_tuning_options(speed_level=0))
    fpm = ll.create_new_function_pass_manager()
    for step in LEAN_PASSES:
        getattr(fpm, f"add_{step}_pass")()
    for f in m.functions:
        if not f.is_declaration:
            fpm.run(f, pb)
    data = tm.emit_object(m)
    STATS["modules_built"] += 1
    objstore.write(key, [objstore.Blob(_module(triangles), _first(triangles), data, list(_FALLBACK.values()))])
    return data


def _module(triangles: bool) -> str:
    return "jitgrad_small_gemm_tri" if triangles else "jitgrad_small_gemm"


def _first(triangles: bool) -> str:
    return NAMES["sgemm"] + (f"_{TRIANGLES[0]}" if triangles else "")


def linked(name: str | None = None) -> bool:
    """Whether the module (the one of kernel ``name``: ``sgemm``, ``sgemm_p_le_col`` ...) is linked into this
    process (``address`` costs nothing more)."""
    return bool(_ADDRESSES) if name is None else name in _ADDRESSES


def address(name: str, blas_address) -> int:
    """The address of ``jitgrad_small_<name>`` (``name``: ``sgemm`` or ``dgemm``, or a triangular variant,
    ``sgemm_p_le_col`` ...), its module linked into this process on first use; ``blas_address(name)``: the BLAS
    routine it hands big products to."""
    addr = _ADDRESSES.get(name)
    if addr is None:
        triangles = name not in NAMES
        with _LOCK:
            if name not in _ADDRESSES:
                from ..native import objload, objstore
                ll = objload._ll()
                if not _ADDRESSES:
                    for nm, sym in _FALLBACK.items():
                        ll.add_symbol(sym, blas_address(nm))
                objload.load([objstore.Blob(_module(triangles), _first(triangles), _object_code(triangles),
                                            list(_FALLBACK.values()))])
                ee = objload._engine()
                for nm, sym in NAMES.items():
                    for tri in TRIANGLES if triangles else (None,):
                        full = nm + (f"_{tri}" if tri else "")
                        _ADDRESSES[full] = ee.get_function_address(sym + (f"_{tri}" if tri else ""))
                STATS["modules_loaded"] += 1
            addr = _ADDRESSES[name]
    return addr


__all__ = ["small_gemm_ir", "address", "linked", "routine", "blas_routine", "macs", "TRIANGLES", "SMALL_MACS", "MAX_MACS", "PACK_MAX", "TILE_ROWS", "TILE_ROWS_WIDE", "TILE_COLUMNS",
           "TILE_COLUMNS_WIDE",
           "NAMES", "STATS"]
