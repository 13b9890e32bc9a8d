"""The calling convention between the driver and the kernels (imported by generated modules only).

Every kernel is a ``@cfunc`` taking one ``int64*``: its argument block, laid out by ``codegen/program/layout.py``
(sizes, then per array its address and element strides).  The driver calls kernels through their addresses
(``call_kernel``) instead of calling them as Numba functions: a Numba call would link the callee's code into
the driver and LLVM would optimise and compile it again there (measured: a driver calling 20 distinct kernels
took 1.08 s to build, 0.86 s of it re-optimising and re-emitting the kernels; through addresses it took 0.25 s).
So a kernel is compiled once per machine and shared by every graph, batch size and process.
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_I64P = ir.IntType(64).as_pointer()
_I8P = ir.IntType(8).as_pointer()


@intrinsic
def call_kernel(typingctx, fn, block):
    """``fn(block)``: call the kernel at address ``fn`` with its argument block at address ``block``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [_I64P])
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [builder.inttoptr(args[1], _I64P)])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


@intrinsic
def call_gemm(typingctx, fn, block):
    """Fortran BLAS ``?gemm`` at address ``fn``: its 13 arguments (all pointers) are read from ``block``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [_I8P] * 13)
        base = builder.inttoptr(args[1], _I64P)
        ptrs = [builder.inttoptr(builder.load(builder.gep(base, [ir.Constant(ir.IntType(64), k)])), _I8P)
                for k in range(13)]
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), ptrs)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


def _pointer_cast(nbtype, lltype):
    @intrinsic
    def cast(typingctx, addr):
        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], lltype.as_pointer())
        return types.CPointer(nbtype)(types.int64), codegen
    return cast


@intrinsic
def store(typingctx, ptr, idx, val):
    """``ptr[idx] = val``. Generated kernels write through this, not a setitem: Numba's parfor pass drops
    setitems on raw pointers inside a ``prange`` body as dead stores (Numba 0.68: a parallel kernel wrote
    nothing), while an intrinsic call is kept; it compiles to the same single store."""
    if not isinstance(ptr, types.CPointer) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i = context.cast(builder, args[1], sig.args[1], types.int64)
        v = context.cast(builder, args[2], sig.args[2], ptr.dtype)
        builder.store(v, builder.gep(args[0], [i]))
        return context.get_dummy_value()
    return types.void(ptr, idx, val), codegen


def _as_i64(builder, v, t):
    """An integer argument as an i64 (the slot indices and keys of the claims below)."""
    if v.type.width == 64:
        return v
    return builder.sext(v, ir.IntType(64)) if t.signed else builder.zext(v, ir.IntType(64))


def _slot(builder, args, sig):
    return builder.gep(args[0], [_as_i64(builder, args[1], sig.args[1])])


# ``kernel_ir.Claim`` in Numba's text (ir_loops.py writes the same atomics): ``if claim(p, at, key): lock(p, at + 1);
# if holds(p, at, key): ...; unlock(p, at + 1)``
@intrinsic
def claim(typingctx, ptr, at, key):
    """``ptr[at] = min(ptr[at], key)`` atomically; whether that lowered it."""
    def codegen(context, builder, sig, args):
        k = _as_i64(builder, args[2], sig.args[2])
        return builder.icmp_signed(">", builder.atomic_rmw("min", _slot(builder, args, sig), k, "seq_cst"), k)
    return types.boolean(ptr, at, key), codegen


@intrinsic
def holds(typingctx, ptr, at, key):
    """Whether ``ptr[at]`` (read atomically) is ``key``."""
    def codegen(context, builder, sig, args):
        v = builder.load_atomic(_slot(builder, args, sig), "monotonic", 8)
        return builder.icmp_signed("==", v, _as_i64(builder, args[2], sig.args[2]))
    return types.boolean(ptr, at, key), codegen


@intrinsic
def lock(typingctx, ptr, at):
    """Spin until a compare-and-swap takes ``ptr[at]`` from 0 to 1."""
    def codegen(context, builder, sig, args):
        slot = _slot(builder, args, sig)
        spin, held = builder.append_basic_block("claim.spin"), builder.append_basic_block("claim.held")
        builder.branch(spin)
        builder.position_at_end(spin)
        zero, one = ir.Constant(ir.IntType(64), 0), ir.Constant(ir.IntType(64), 1)
        got = builder.extract_value(builder.cmpxchg(slot, zero, one, "acquire", "monotonic"), 1)
        builder.cbranch(got, held, spin)
        builder.position_at_end(held)
        return context.get_dummy_value()
    return types.void(ptr, at), codegen


@intrinsic
def unlock(typingctx, ptr, at):
    """``ptr[at] = 0``, a release store."""
    def codegen(context, builder, sig, args):
        builder.store_atomic(ir.Constant(ir.IntType(64), 0), _slot(builder, args, sig), "release", 8)
        return context.get_dummy_value()
    return types.void(ptr, at), codegen


# typed views of an address; bool data is read and written as bytes (0/1), like NumPy stores it
ptr_f32 = _pointer_cast(types.float32, ir.FloatType())
ptr_f64 = _pointer_cast(types.float64, ir.DoubleType())
ptr_i64 = _pointer_cast(types.int64, ir.IntType(64))
ptr_i32 = _pointer_cast(types.int32, ir.IntType(32))
ptr_b1 = _pointer_cast(types.uint8, ir.IntType(8))
ptr_u8 = ptr_b1      # uint8 tensors: the same bytes as bools, read as numbers



@intrinsic
def prefetch(typingctx, addr, write):
    """Fetch the cache line at address ``addr`` (for writing where ``write``, a literal 0 or 1)."""
    if not isinstance(write, types.IntegerLiteral):
        return None
    rw = write.literal_value

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, i32, i32, i32])
        fn = builder.module.globals.get("llvm.prefetch.p0i8") or ir.Function(builder.module, fnty,
                                                                              "llvm.prefetch.p0i8")
        builder.call(fn, [builder.inttoptr(args[0], _I8P), ir.Constant(i32, rw), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(types.int64, write), codegen


@njit(cache=True)
def _batch_offsets(p, nd, t):
    """Byte offsets of batch entry ``t``'s B, A and C in a ``bgemm`` block."""
    r = t
    ob = oa = oc = 0
    for d in range(nd - 1, -1, -1):
        size = p[14 + d]
        j = r % size
        r //= size
        ob += j * p[14 + nd + d]
        oa += j * p[14 + 2 * nd + d]
        oc += j * p[14 + 3 * nd + d]
    return ob, oa, oc


@njit(cache=True)
def _prefetch_columns(base, cols, length, stride, write):
    for c in range(cols):
        start = base + c * stride
        a = start & -64
        while a < start + length:
            if write:
                prefetch(a, 1)
            else:
                prefetch(a, 0)
            a += 64


@njit(cache=True)
def _prefetch_next(p, s, b, a, c, item):
    """``codegen/program/batch_prefetch.prefetch_next``: the lines of the product whose arguments are the block's
    scratch slots ``[s, s + 13)`` with B, A, C at ``b``, ``a``, ``c``."""
    ta, tb = ptr_b1(p[s])[0], ptr_b1(p[s + 1])[0]
    m, n, k = ptr_i32(p[s + 2])[0], ptr_i32(p[s + 3])[0], ptr_i32(p[s + 4])[0]
    lda, ldb, ldc = ptr_i32(p[s + 7])[0], ptr_i32(p[s + 9])[0], ptr_i32(p[s + 12])[0]
    na, nb = ta == 78 or ta == 110, tb == 78 or tb == 110
    a_cols, a_rows = (k, m) if na else (m, k)
    b_cols, b_rows = (n, k) if nb else (k, n)
    lines = a_cols * (a_rows * item // 64 + 2) + b_cols * (b_rows * item // 64 + 2) + n * (m * item // 64 + 2)
    if lines > 2048:                 # batch_prefetch.MAX_LINES
        return
    _prefetch_columns(b, a_cols, a_rows * item, lda * item, False)
    _prefetch_columns(a, b_cols, b_rows * item, ldb * item, False)
    _prefetch_columns(c, n, m * item, ldc * item, True)


@njit(cache=True, no_cpython_wrapper=False)
def call_gemm_batched(fn, block):
    """A batch of ``?gemm`` calls (the ``bgemm`` step of ``codegen/program/batched_gemm.py``).  ``block`` holds: [0, 13)
    the gemm arguments of the first matrix (slots 6, 8, 11: B, A, C's addresses), [13] ``nd`` batch dims,
    then ``nd`` sizes, then per operand B, A, C ``nd`` byte strides, then 13 scratch slots: each call's
    arguments, the first block's with the three addresses moved to that batch entry; then the last entry's own
    size: the index of the argument it replaces (2: m, 3: n; 0: none) and its address (a split GEMM's last block
    is as high as the rows left); then the item size each entry prefetches the next one's operands with (0:
    none; ``codegen/program/batch_prefetch.py``)."""
    p = ptr_i64(block)
    nd = p[13]
    total = 1
    for d in range(nd):
        total *= p[14 + d]
    s = 14 + 4 * nd
    for i in range(13):
        store(p, s + i, p[i])
    b0, a0, c0 = p[6], p[8], p[11]
    item = p[s + 15]
    for t in range(total):
        ob, oa, oc = _batch_offsets(p, nd, t)
        store(p, s + 6, b0 + ob)
        store(p, s + 8, a0 + oa)
        store(p, s + 11, c0 + oc)
        if t == total - 1 and p[s + 13] != 0:
            store(p, s + p[s + 13], p[s + 14])
        if item > 0 and t + 1 < total:
            ob, oa, oc = _batch_offsets(p, nd, t + 1)
            _prefetch_next(p, s, b0 + ob, a0 + oa, c0 + oc, item)
        call_gemm(fn, block + 8 * s)


KERNEL_SIGNATURE = types.void(types.CPointer(types.int64))

__all__ = ["call_kernel", "call_gemm", "call_gemm_batched", "claim", "holds", "lock", "unlock", "prefetch", "ptr_f32",
           "ptr_f64", "ptr_i64", "ptr_i32", "ptr_b1", "ptr_u8", "KERNEL_SIGNATURE"]
