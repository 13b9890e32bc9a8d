"""The calling convention between the driver and the kernels (imported by generated modules only).

Every kernel is a ``@cfunc`` taking one ``int64*``: its argument block, laid out by ``codegen/layout.py``
(sizes, then per array its address and element strides).  The driver calls kernels through their addresses
(``call_kernel``) instead of calling them as Numba functions: a Numba call would link the callee's code into
the driver and LLVM would optimise and compile it again there (measured: a driver calling 20 distinct kernels
took 1.08 s to build, 0.86 s of it re-optimising and re-emitting the kernels; through addresses it took 0.25 s).
So a kernel is compiled once per machine and shared by every graph, batch size and process.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
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


# typed views of an address; bool data is read and written as bytes (0/1), like NumPy stores it
ptr_f32 = _pointer_cast(types.float32, ir.FloatType())
ptr_f64 = _pointer_cast(types.float64, ir.DoubleType())
ptr_i64 = _pointer_cast(types.int64, ir.IntType(64))
ptr_i32 = _pointer_cast(types.int32, ir.IntType(32))
ptr_b1 = _pointer_cast(types.uint8, ir.IntType(8))

KERNEL_SIGNATURE = types.void(types.CPointer(types.int64))

__all__ = ["call_kernel", "call_gemm", "ptr_f32", "ptr_f64", "ptr_i64", "ptr_i32", "ptr_b1", "KERNEL_SIGNATURE"]
