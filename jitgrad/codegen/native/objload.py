"""Loading object code with llvmlite: the warm start's only native dependency.

Numba compiles kernels and graph entries; what it emits is ordinary relocatable object code (``objstore.py``
keeps it on disk).  Loading it needs no Numba: llvmlite's MCJIT links the objects into this process and resolves
their external symbols from the process (libc's ``memset``, libm).  Serial kernels and entries need nothing else
(measured: their only undefined symbol is ``memset``), so a warm start imports neither Numba's compiler nor its
target.  Parallel kernels built by ``ir_loops`` call the worker pool (``workpool.py``), whose symbols are
registered when an object needs them, without Numba.  A kernel whose code needs Numba's runtime (a ``prange`` loop
Numba built calls the threading layer, NRT and the helper library) says so in its file (``needs``): then, and only
then, Numba's runtime is initialised first, which registers those symbols with llvmlite.

One engine per process; objects are added to it once (by kernel key) and stay for the process's life.

Forking: llvmlite serialises every LLVM call with one process-wide lock.  A fork while another thread is inside
LLVM (a background build compiling an entry or linking objects) would leave the child with that lock held and LLVM
mid-operation, and the child's first LLVM call would block forever; so a fork waits for LLVM to be idle (it takes
the lock around the fork), and the child gets a fresh lock.
"""
from __future__ import annotations

import os
import re
import sys
import threading

from . import workpool

_lock = threading.RLock()
_ENGINE = None
_LL = None
_RUNTIME = False
STATS = {"objects_loaded": 0, "numba_runtime": 0}
# symbols found in the process once: they stay (nothing unregisters one), so each is searched for once a process
_RESOLVED: set = set()


def _ll():
    global _LL
    if _LL is None:
        import llvmlite.binding as ll
        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        _LL = ll
    return _LL


def _engine():
    global _ENGINE
    if _ENGINE is None:
        ll = _ll()
        tm = ll.Target.from_default_triple().create_target_machine()
        _ENGINE = ll.create_mcjit_compiler(ll.parse_assembly(""), tm)
    return _ENGINE


def external_symbols(module) -> list:
    """The symbols an LLVM module (llvmlite) declares and does not define, which ``load`` resolves from the
    process: a ``Blob``'s ``needs``."""
    return sorted({f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")}
                  | {g.name for g in module.global_variables if g.is_declaration})


# a ``declare`` line or an external global of LLVM IR text (``codegen/kernels/llvm_text.py`` writes both)
_DECLARED = re.compile(r'^(?:declare [^@\n]*@"?([^"(\s]+)"?\(|@"?([^"\s=]+)"? = external global )', re.M)


def declared_symbols(text: str) -> list:
    """``external_symbols`` of the module LLVM IR ``text`` parses to, read from the text: its ``declare`` lines and
    external globals, LLVM's intrinsics left out.  Not one call into LLVM per function and global of the module:
    on the build thread each such call gives the GIL up and waits to take it back from the calls running
    meanwhile (a kernel declares some twenty of the worker pool's globals).  What LLVM's passes and code generator
    add (``memset``, a libm function for a folded call) is the C library's, which every process has."""
    return sorted({n for a, b in _DECLARED.findall(text) for n in (a or b,) if not n.startswith("llvm.")})


def _missing(needs) -> list:
    ll = _ll()
    miss = []
    for s in needs:
        if s in _RESOLVED or s.startswith("llvm."):
            continue
        if ll.address_of_symbol(s) is None:
            miss.append(s)
        else:
            _RESOLVED.add(s)
    return miss


def numba_runtime() -> None:
    """Initialise Numba's runtime (NRT, helper library, threading layer): it registers their symbols with
    llvmlite.  Only for code that needs them (parallel kernels)."""
    global _RUNTIME
    if _RUNTIME:
        return
    from numba.core.registry import cpu_target
    from numba.core.base import _load_global_helpers
    from numba.core.runtime import rtsys
    _load_global_helpers()                     # the helper library's symbols (numba_*), PyExc_*
    rtsys.initialize(cpu_target.target_context)     # NRT's (not ``refresh()``: every registry, ~0.5 s)
    from numba.np.ufunc.parallel import _launch_threads
    from . import threads
    threads.configure()                        # jitgrad's thread policy picks the layer before it launches
    _launch_threads()                          # the threading layer's symbols
    _RUNTIME = True
    STATS["numba_runtime"] += 1


class UnresolvedSymbols(RuntimeError):
    """An object file needs symbols this process does not have: it is rebuilt, never linked half-resolved."""


def _resolve(needs) -> None:
    """Every symbol of ``needs`` found in the process (the pool's or Numba's runtime started for them), else
    ``UnresolvedSymbols``: linking an object whose symbol is missing would abort the process."""
    if needs and _missing(needs):
        if any(s in workpool.SYMBOLS for s in needs):
            workpool.launch()                  # a parallel kernel built without Numba: the pool's symbols
        if _missing(needs):
            numba_runtime()
        missing = _missing(needs)
        if missing:
            raise UnresolvedSymbols(f"object code needs symbols this process lacks: {missing[:8]}")


def load_module(data: bytes, symbols, needs) -> list:
    """Link one object (``data``, needing ``needs``) that defines several ``symbols`` (a first tier's kernels,
    ``llvm_build.quick_objects``): their addresses, in order."""
    ll = _ll()
    with _lock:
        _resolve(sorted(set(needs)))
        ee = _engine()
        ee.add_object_file(ll.ObjectFileRef.from_data(data))
        ee.finalize_object()
        out = []
        for sym in symbols:
            addr = ee.get_function_address(sym)
            if not addr:
                raise UnresolvedSymbols(f"an object does not define {sym}")
            out.append(addr)
        STATS["objects_loaded"] += 1
        return out


def load(blobs) -> dict:
    """Link ``blobs`` (``objstore.Blob``) into this process: ``{blob.name: address of blob.symbol}``."""
    ll = _ll()
    with _lock:
        _resolve(sorted({s for b in blobs for s in b.needs}))
        ee = _engine()
        for b in blobs:
            ee.add_object_file(ll.ObjectFileRef.from_data(b.data))
        ee.finalize_object()
        out = {}
        for b in blobs:
            addr = ee.get_function_address(b.symbol)
            if not addr:
                raise UnresolvedSymbols(f"object {b.name[:16]} does not define {b.symbol}")
            out[b.name] = addr
        STATS["objects_loaded"] += len(blobs)
        return out


def _llvm_lock():
    ffi = sys.modules.get("llvmlite.binding.ffi")
    return getattr(getattr(ffi, "lib", None), "_lock", None)


def _before_fork():
    lk = _llvm_lock()
    if lk is not None:
        lk._lock.acquire()


def _after_fork_in_parent():
    lk = _llvm_lock()
    if lk is not None:
        lk._lock.release()


def _after_fork_in_child():
    global _lock
    _lock = threading.RLock()
    lk = _llvm_lock()
    if lk is not None:
        lk._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


__all__ = ["load", "load_module", "external_symbols", "declared_symbols", "numba_runtime", "UnresolvedSymbols", "STATS"]
