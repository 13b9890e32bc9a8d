"""The native MPI steps' code: ``@cfunc``s with the kernels' calling convention (``abi.py``: one ``int64*``
argument block) that call ``MPI_Allreduce``, ``MPI_Iallreduce`` and ``MPI_Wait`` through addresses that travel in
the block, so the cfuncs hold no process-specific constant and are cached on disk like the kernels.  Laid out by
``collective_steps.py``; this module imports Numba, so it is imported only when a graph has such a step.
"""
from __future__ import annotations

from llvmlite import ir
from numba import cfunc, types
from numba.extending import intrinsic

from .abi import KERNEL_SIGNATURE

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _ptr(builder, v):
    return builder.inttoptr(v, _I8P)


def _int(builder, v):
    return builder.trunc(v, _I32)


@intrinsic
def _mpi_allreduce(typingctx, fn, send, recv, count, dtype, op, comm):
    """``MPI_Allreduce(send, recv, count, dtype, op, comm)`` at address ``fn`` (MPICH: handles are ints)."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(_I32, [_I8P, _I8P, _I32, _I32, _I32, _I32])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.sext(builder.call(f, [_ptr(builder, args[1]), _ptr(builder, args[2])]
                                         + [_int(builder, a) for a in args[3:7]]), _I64)
    return types.int64(*([types.int64] * 7)), codegen


@intrinsic
def _mpi_iallreduce(typingctx, fn, send, recv, count, dtype, op, comm, request):
    """``MPI_Iallreduce(send, recv, count, dtype, op, comm, request)`` at address ``fn``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(_I32, [_I8P, _I8P, _I32, _I32, _I32, _I32, _I8P])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.sext(builder.call(f, [_ptr(builder, args[1]), _ptr(builder, args[2])]
                                         + [_int(builder, a) for a in args[3:7]] + [_ptr(builder, args[7])]), _I64)
    return types.int64(*([types.int64] * 8)), codegen


@intrinsic
def _mpi_wait(typingctx, fn, request, status):
    """``MPI_Wait(request, status)`` at address ``fn``."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(_I32, [_I8P, _I8P])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.sext(builder.call(f, [_ptr(builder, args[1]), _ptr(builder, args[2])]), _I64)
    return types.int64(types.int64, types.int64, types.int64), codegen


@intrinsic
def _copy_bytes(typingctx, dst, src, nbytes):
    """memcpy of ``nbytes`` bytes (LLVM's intrinsic)."""
    def codegen(context, builder, sig, args):
        cgutils_memcpy = builder.module.declare_intrinsic("llvm.memcpy", [_I8P, _I8P, _I64])
        builder.call(cgutils_memcpy, [_ptr(builder, args[0]), _ptr(builder, args[1]), args[2],
                                      ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


# argument blocks (int64 each); the communicator's error handler is MPI_ERRORS_ARE_FATAL, so an MPI error
# aborts the job (with MPICH's message) instead of returning a code nobody reads
#   all_reduce: fn, send, recv, count, dtype, op, comm
#   start:      fn, send, recvbuf, count, dtype, op, comm, token (the request is written there)
#   wait:       fn, token, status, out, recvbuf, nbytes
def _allreduce_step(b):
    _mpi_allreduce(b[0], b[1], b[2], b[3], b[4], b[5], b[6])


def _start_step(b):
    _mpi_iallreduce(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])


def _wait_step(b):
    _mpi_wait(b[0], b[1], b[2])
    _copy_bytes(b[3], b[4], b[5])


_BUILT: dict = {}


def address(name) -> int:
    """The address of one of the step cfuncs, compiled on first use (then from Numba's cache)."""
    a = _BUILT.get(name)
    if a is None:
        from numba.core import config

        from .build import numba_cache_dir
        fn = {"all_reduce": _allreduce_step, "all_reduce_start": _start_step, "all_reduce_wait": _wait_step}[name]
        # Numba's cache files are code: they go where jitgrad's other helpers' go (build.numba_cache_dir)
        private, old = numba_cache_dir(), config.CACHE_DIR
        if private is not None:
            config.CACHE_DIR = private
        try:
            a = _BUILT[name] = cfunc(KERNEL_SIGNATURE, cache=True)(fn)
        finally:
            config.CACHE_DIR = old
    return a.address


__all__ = ["address"]
