"""A compiled graph's C entry: ``void entry(PyObject *arrays, int64 *ctx)``, and how Python calls it.

The entry is emitted as LLVM IR from the layout (``layout.Program``) and compiled by llvmlite in milliseconds: no
Numba, neither to build it nor to run it (no NRT, no boxing, no dispatcher).  Python allocates the fresh outputs (and the anomaly error
slot) and passes one tuple holding the inputs, then the fresh outputs, then the error slot; the entry reads each
array's data pointer from the tuple (``PyTupleObject.ob_item``, ``PyArrayObject.data``: NumPy's and CPython's
stable object layouts, checked once per process by ``layout_ok``), patches them into the argument table and
calls each kernel, and BLAS, through its address.  ``ctx`` holds the addresses of the argument table ``A``, the
kernel address table ``F`` and the per-slot offsets ``OFF``.

So the object code of a graph is position independent of any Python object, and a new process loads it with
llvmlite alone (``objload.py``).  The text has no sizes in it: a new batch size reuses the entry.
"""
from __future__ import annotations

import ctypes

import numpy as np

TUPLE_ITEMS = 3 * ctypes.sizeof(ctypes.c_void_p)     # PyTupleObject: refcnt, type, size, then ob_item[]
ARRAY_DATA = 2 * ctypes.sizeof(ctypes.c_void_p)      # PyArrayObject_fields: refcnt, type, then data
_ENTRY_CALL = ctypes.CFUNCTYPE(None, ctypes.py_object, ctypes.c_void_p)
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


def _ops(program, n_inputs: int, n_checks: int):
    """The entry as a list of steps; its listing (``entry_source``) and its machine code (``entry_ir``) are both
    made from it, so what ``f.source`` shows is what runs."""
    p = program
    ops = []
    used_in = sorted({r.index for _, r, _ in p.dynamic if r.kind == "input"})
    ops += [("data", f"r{k}", k) for k in used_in]
    ops += [("data", f"q{r.index}", n_inputs + r.index) for r in p.fresh]
    for slot, r, _ in p.dynamic:
        ops.append(("patch", slot, f"r{r.index}" if r.kind == "input" else f"q{r.index}"))
    if n_checks:
        ops.append(("data", "e", n_inputs + len(p.fresh)))
        ops += [("err", s) for s in p.err_slots]
    for n, st in enumerate(p.steps):
        ops.append(("call", "gemm" if st.kind == "gemm" else "kernel", n, st.block, st.label))
    if n_checks and p.writes:       # an anomaly leaves the user's state untouched
        ops.append(("if_ok", n_checks))
    for n, st in enumerate(p.writes):
        ops.append(("call", "kernel", len(p.steps) + n, st.block, "write-back"))
    return ops


def entry_source(program, n_inputs: int, n_checks: int) -> str:
    """The entry's listing for ``program`` (a ``layout.Program``) over ``n_inputs`` graph inputs: Python-shaped
    text of exactly what ``entry_ir`` emits (its hash is the entry's identity)."""
    lines = ["def entry(T, C):          # T: tuple of arrays, C: int64[3] = {A, F, OFF}",
             "    c = ptr_i64(C)", "    A = c[0]", "    a = ptr_i64(A)", "    F = ptr_i64(c[1])",
             "    OFF = ptr_i64(c[2])", f"    t = ptr_i64(T + {TUPLE_ITEMS})"]
    ind = "    "
    for op in _ops(program, n_inputs, n_checks):
        if op[0] == "data":
            lines.append(f"{ind}{op[1]} = ptr_i64(t[{op[2]}] + {ARRAY_DATA})[0]")
        elif op[0] == "patch":
            lines.append(f"{ind}a[{op[1]}] = {op[2]} + OFF[{op[1]}]")
        elif op[0] == "err":
            lines.append(f"{ind}a[{op[1]}] = e")
        elif op[0] == "call":
            fn = "call_gemm" if op[1] == "gemm" else "call_kernel"
            lines.append(f"{ind}{fn}(F[{op[2]}], A + {8 * op[3]})  # {op[4]}")
        elif op[0] == "if_ok":
            lines.append(f"    if ptr_i64(e)[0] == {op[1]}:")
            ind = "        "
    return "# jitgrad.codegen.entry: a graph's C entry, emitted as LLVM IR (sizes come from the tables)\n" + \
        "\n".join(lines) + "\n"


def entry_ir(program, n_inputs: int, n_checks: int, name: str) -> str:
    """The entry as LLVM IR text: ``void name(i64 T, i64 C)`` (no Numba: straight-line loads, stores and calls
    through addresses)."""
    from llvmlite import ir
    i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
    i64p = i64.as_pointer()
    mod = ir.Module(name=name)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, i64]), name=name)
    fn.attributes.add("nounwind")
    T, C = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    kty = ir.FunctionType(ir.VoidType(), [i64p])
    gty = ir.FunctionType(ir.VoidType(), [i8p] * 13)

    def at(base, k):                 # base[k] for an i64* base
        return b.load(b.gep(base, [ir.Constant(i64, k)]))

    c = b.inttoptr(C, i64p)
    A = at(c, 0)
    a, F, OFF = b.inttoptr(A, i64p), b.inttoptr(at(c, 1), i64p), b.inttoptr(at(c, 2), i64p)
    t = b.inttoptr(b.add(T, ir.Constant(i64, TUPLE_ITEMS)), i64p)
    vals = {}
    for op in _ops(program, n_inputs, n_checks):
        if op[0] == "data":
            obj = at(t, op[2])
            vals[op[1]] = b.load(b.inttoptr(b.add(obj, ir.Constant(i64, ARRAY_DATA)), i64p))
        elif op[0] == "patch":
            b.store(b.add(vals[op[2]], at(OFF, op[1])), b.gep(a, [ir.Constant(i64, op[1])]))
        elif op[0] == "err":
            b.store(vals["e"], b.gep(a, [ir.Constant(i64, op[1])]))
        elif op[0] == "call":
            target = at(F, op[2])
            blk = b.add(A, ir.Constant(i64, 8 * op[3]))
            if op[1] == "gemm":
                base = b.inttoptr(blk, i64p)
                b.call(b.inttoptr(target, gty.as_pointer()), [b.inttoptr(at(base, k), i8p) for k in range(13)])
            else:
                b.call(b.inttoptr(target, kty.as_pointer()), [b.inttoptr(blk, i64p)])
        elif op[0] == "if_ok":
            ok = b.icmp_signed("==", b.load(b.inttoptr(vals["e"], i64p)), ir.Constant(i64, op[1]))
            then, done = fn.append_basic_block("write_back"), fn.append_basic_block("done")
            b.cbranch(ok, then, done)
            b.position_at_end(then)
            vals["_done"] = done
    if "_done" in vals:
        b.branch(vals["_done"])
        b.position_at_end(vals["_done"])
    b.ret_void()
    return str(mod)


def compile_entry(program, n_inputs: int, n_checks: int, key: str):
    """The entry's object code (``objstore.Blob`` named ``key``): LLVM IR straight to machine code, in
    milliseconds and without Numba."""
    from . import objload, objstore
    ll = objload._ll()
    name = f"jitgrad_entry_{key[:24]}"
    m = ll.parse_assembly(entry_ir(program, n_inputs, n_checks, name))
    m.triple = ll.get_process_triple()
    m.verify()
    tm = ll.Target.from_triple(m.triple).create_target_machine(cpu=ll.get_host_cpu_name(), opt=0,
                                                               codemodel="jitdefault")
    return objstore.Blob(key, name, tm.emit_object(m), [])


def caller(address: int, program, n_checks: int, A, F, OFF, fallback):
    """``run(*arrays) -> list of outputs`` calling the entry at ``address`` (``fallback(*arrays)`` for inputs
    that are not C-contiguous).  ``A``, ``F``, ``OFF`` are kept alive by the returned function."""
    p = program
    fn = _ENTRY_CALL(address)
    ctx = np.array([A.ctypes.data, F.ctypes.data, OFF.ctypes.data], np.int64)
    cptr = ctx.ctypes.data
    specs = [(r.shape, r.dtype.np) for r in p.fresh]
    outputs = p.outputs
    empty = np.empty

    if n_checks:
        def run(*arrays):
            for a in arrays:
                if not a.flags.c_contiguous:
                    return fallback(*arrays)
            fresh = [empty(s, d) for s, d in specs]
            err = np.array([n_checks, 0], np.int64)
            fn(arrays + tuple(fresh) + (err,), cptr)
            return [arrays[i] if kind == "input" else fresh[i] for kind, i in outputs] + [err]
    else:
        def run(*arrays):
            for a in arrays:
                if not a.flags.c_contiguous:
                    return fallback(*arrays)
            fresh = [empty(s, d) for s, d in specs]
            fn(arrays + tuple(fresh), cptr)
            return [arrays[i] if kind == "input" else fresh[i] for kind, i in outputs]
    run._keep = (A, F, OFF, ctx, fn)
    run.ncheck = n_checks
    return run


__all__ = ["entry_source", "entry_ir", "compile_entry", "caller", "layout_ok"]
