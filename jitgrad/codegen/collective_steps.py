"""Collectives as native steps of the compiled driver: MPI called through its C entry points.

A graph with ``all_reduce`` / ``all_reduce_start`` / ``all_reduce_wait`` (``ir/ops/collective.py``) would
otherwise get a Python driver (the ops' impls call mpi4py).  When the group's transport says it can
(``transport.native()`` returns the communicator's C handle and the addresses of ``MPI_Allreduce``,
``MPI_Iallreduce`` and ``MPI_Wait`` from the loaded libmpi), ``layout.py`` asks ``emit`` here for a step instead:
a ``@cfunc`` with the kernels' calling convention (``abi.py``: one ``int64*`` argument block), which the njit
driver calls through its address like any kernel.  The MPI functions' addresses travel in the argument block,
so the cfuncs hold no process-specific constant and are cached on disk like the kernels.

MPICH's handles (``MPI_Comm``, ``MPI_Datatype``, ``MPI_Op``, ``MPI_Request``) are C ints, equal to the Fortran
handles mpi4py reports (``py2f``); another MPI library keeps the Python steps.  Only SUM, MAX, MIN and PRODUCT
run natively (AVG needs a division: jitgrad.distributed binds SUM and scales in the graph, where the scaling
fuses with the code that reads the result); counts beyond ``int`` fall back too.

``all_reduce_start`` writes the request handle into its token (an int64 scalar of the graph) and reduces into a
receive buffer that the step owns (it lives as long as the compiled graph); ``all_reduce_wait`` waits on the
token's request and copies that buffer into its output.  The send buffer, the wait's second input, stays alive
and untouched until the wait by the layout's liveness.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.extending import intrinsic

from ..ir.graph import Var
from ..ir.ops.collective import TRANSPORTS
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


def _address(name) -> int:
    """The address of one of the step cfuncs, compiled on first use (then from Numba's cache)."""
    a = _BUILT.get(name)
    if a is None:
        fn = {"all_reduce": _allreduce_step, "all_reduce_start": _start_step, "all_reduce_wait": _wait_step}[name]
        a = _BUILT[name] = cfunc(KERNEL_SIGNATURE, cache=True)(fn)
    return a.address


_INT_MAX = 2 ** 31 - 1


def emit(prog, e) -> bool:
    """Lay out eqn ``e`` (a collective) as a native step of ``prog`` (a ``layout.Program``); False: not possible
    here (the caller makes a Python step)."""
    from .layout import Step
    name = e.op.name
    if name not in ("all_reduce", "all_reduce_start", "all_reduce_wait"):
        return False
    t = TRANSPORTS.get(e.params["group"])
    native = getattr(t, "native", None)
    info = native(e.params["reduce_op"], e.ins[-1].aval.dtype.np) if native is not None else None
    if info is None:
        return False
    tokens = prog.__dict__.setdefault("native_tokens", {})     # token Var -> (recv buffer, its nbytes)
    keep = prog.__dict__.setdefault("native_keep", [])         # buffers the steps own, alive with the program
    x = e.ins[-1]
    if not isinstance(x, Var):
        return False
    px = prog.place(x)
    n = int(x.aval.size)
    if not px.contiguous() or px.root.kind == "lit" or n > _INT_MAX or n == 0:
        return False
    if name == "all_reduce_wait":
        got = tokens.get(e.ins[0])
        if got is None:         # its start is a Python step: the token is the transport's, not MPI's
            return False
        recv, nbytes = got
        out = e.outs[0]
        po = prog._new_buffer(out, out.aval.shape, out.aval.dtype)
        prog.places[out] = po
        status = np.zeros(16, np.int64)
        keep.append(status)
        st = Step("native", label="all_reduce_wait (MPI)", eqn=e, shapes=[list(x.aval.shape)], scope=e.scope)
        st.native = _address(name)
        st.block = len(prog.table)
        prog.table.append(info["wait"])
        prog._slot_addr(prog.place(e.ins[0]))
        prog.table.append(status.ctypes.data)
        prog._slot_addr(po)
        prog.table.extend([recv.ctypes.data, nbytes])
        prog._add(st)
        return True
    out = e.outs[0]
    po = prog._new_buffer(out, out.aval.shape, out.aval.dtype)
    prog.places[out] = po
    st = Step("native", label=f"{name} (MPI)", eqn=e, shapes=[list(x.aval.shape)], scope=e.scope)
    st.native = _address(name)
    st.block = len(prog.table)
    if name == "all_reduce":
        prog.table.append(info["allreduce"])
        prog._slot_addr(px)
        prog._slot_addr(po)
        prog.table.extend([n, info["dtype"], info["op"], info["comm"]])
    else:
        recv = np.zeros(n, x.aval.dtype.np)
        keep.append(recv)
        tokens[out] = (recv, recv.nbytes)
        prog.table.append(info["iallreduce"])
        prog._slot_addr(px)
        prog.table.extend([recv.ctypes.data, n, info["dtype"], info["op"], info["comm"]])
        prog._slot_addr(po)
    prog._add(st)
    return True


__all__ = ["emit"]
