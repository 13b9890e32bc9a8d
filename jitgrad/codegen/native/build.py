"""Each kernel's and graph entry's code in this process, by key: compiled from LLVM IR (``ir_loops.py`` renders it,
``llvm_build.py`` compiles it) or by Numba (``numba_build.py``), or linked from the object code on disk.  A compiled
graph's build (which kernels, where, in which order) is ``graph_build.py``'s.

- **Keys.**  A kernel is keyed by its text (its structure: ``kernel_key``), a graph's C entry by its text
  (``entry_key``), and a compiled graph by its entry and its kernels (``graph_key``).  Every key also covers the
  Numba/llvmlite/NumPy/Python versions, jitgrad's codegen, ir, jit and tracer sources and the host CPU (``cache.cache_key``).
- **What lands on disk** (``objstore.py``): one object file per kernel and per entry as they are compiled, and
  one file per compiled graph holding all of its objects (``graph_build.GraphCode``).  Loading it needs llvmlite
  only (``objload.py``): no Numba import at all.
- **Compiling** (``compile_code``) happens in this process (a kernel's text straight to LLVM IR where
  ``ir_loops`` can translate it, else Numba, in memory: no generated module or ``__pycache__`` is
  ever imported from disk), or in build processes (``build_procs.py``), which call it too.
- **One builder per key across processes** (``obtain``): a builder holds ``objstore.BuildLock(key)`` while it
  compiles; others wait for it and load its result.
- **A full disk** or an unusable cache directory: what this process compiled is used from memory.
- **Quick code** (``compile_quick_all``): a background build's first tier (``graph_build.py``) links kernels built
  with ``llvm_build.QUICK_PASSES`` (a few cheap passes, no vectoriser; ~5x less LLVM work than O3), kept in
  memory only and by another symbol (``_QUICK``), until its optimised build is linked (``_ADDRESSES``).  The cache
  never holds quick code.
"""
from __future__ import annotations

import os
import threading

from . import cache, numba_build, objstore, workpool
from .numba_build import numba_cache_dir, numba_default_dir  # noqa: F401  (Numba's side: numba_build.py)

_ADDRESSES: dict = {}       # kernel/entry key -> address of its code in this process
_BLOBS: dict = {}           # key -> objstore.Blob compiled in this process (assembling a graph's file needs it)
_FUNCS: dict = {}           # key -> Numba cfunc compiled in this process (keeps its code alive)
_MODULES: dict = {}         # kernel key -> Numba module built for inspection (build_module)
_BLOBS_MADE_HERE: set = set()   # kernel/entry keys compiled by this process (not loaded from disk)
_UNLINKED: dict = {}        # key -> objstore.Blob compiled for a forked build, linked when it ends (``link_compiled``)
_QUICK: dict = {}           # kernel key -> address of its quick build's code in this process (until optimised)
_lock = threading.RLock()
KERNEL_EXTRA = ("cpu-kernel", 4)     # 4: parallel kernels join a pending pool round (pool_abi.joining)
ENTRY_EXTRA = ("cpu-entry", 3)       # 3: steps that share a pool round (round_groups.py)
# kernels straight to LLVM IR where ir_loops can (JITGRAD_IR_LOOPS=0: every kernel through Numba, e.g. to compare)
IR_LOOPS = os.environ.get("JITGRAD_IR_LOOPS", "1") != "0"
GRAPH_EXTRA = ("cpu-graph", 1)
COUNTS = {"kernels_compiled": 0, "kernels_ir": 0, "kernels_quick": 0, "kernels_loaded": 0, "drivers_compiled": 0,
          "drivers_loaded": 0, "build_processes": 0, "forked_compilers": 0, "graph_files_loaded": 0, "graph_files_assembled": 0,
          "forked_tiers": 0, "forked_first_tiers": 0}


def kernel_key(kernel) -> str:
    return cache.cache_key(kernel.source, extra=kernel_extra())


def kernel_extra():
    """What besides its text a kernel's key covers (``cache.cache_key``'s ``extra``)."""
    # which compiler builds a kernel is part of its key: the two paths' object code is never mixed up
    from ..kernels.ir_loops import INTERLEAVE
    return KERNEL_EXTRA + (("lean-llvm", numba_build.LEAN_LLVM), ("ir-loops", IR_LOOPS), ("interleave", INTERLEAVE),
                           ("busy-hold", workpool.BUSY_HOLD))


def entry_extra():
    """What besides its text an entry's key covers: gated launches test the busy rule only where it is on
    (``pool_abi.paced``), so the code differs with it."""
    return ENTRY_EXTRA + (("busy-hold", workpool.BUSY_HOLD),)


def entry_key(source: str) -> str:
    return cache.cache_key(source, extra=entry_extra())


def graph_key(kernel_keys, ekey) -> str:
    return cache.cache_key("\n".join(sorted(set(kernel_keys))), extra=GRAPH_EXTRA + (ekey,))


# ------------------------------------------------------------------------------------------------ compiling

def compile_code(key: str, source: str, kind: str, elsewhere=None) -> int:
    """Compile ``source`` (a kernel's or an entry's module) in this process and return the address of its code;
    its object code is kept for the disk (``_BLOBS``).  A kernel goes straight to LLVM IR when ``ir_loops`` can
    translate it (no Numba), else to Numba.  ``elsewhere``: forked compilers that may take the LLVM IR's
    optimisation and emission (``forked_llvm.ForkedCompilers``); then the kernel is linked later, with the rest
    of its build (``link_compiled``; returns None): linking takes llvmlite's lock, and a thread that got a forked
    compiler's result waiting for it while another thread compiles would leave that compiler idle."""
    if key in _ADDRESSES:
        return _ADDRESSES[key]
    if kind == "kernel" and IR_LOOPS:
        from . import llvm_build
        blob = llvm_build.compile_kernel(key, source, elsewhere)
        if blob is not None:
            with _lock:
                if key not in _ADDRESSES and key not in _UNLINKED:
                    if elsewhere is None:
                        _load_blobs([blob])
                    else:
                        _UNLINKED[key] = blob
                    _BLOBS[key] = blob
                    _BLOBS_MADE_HERE.add(key)
                    COUNTS["kernels_compiled"] += 1
                    COUNTS["kernels_ir"] += 1
                return _ADDRESSES.get(key)
    return compile_numba(key, source, kind)


def link_compiled() -> None:
    """Link the kernels compiled unlinked (``compile_code`` with ``elsewhere``) into this process, all at once."""
    with _lock:
        blobs = list(_UNLINKED.values())
        _UNLINKED.clear()
        _load_blobs(blobs)


def compile_quick_all(jobs, go=None) -> dict:
    """A background build's first tier for a graph's kernels (``jobs``: (key, source, tier), tier "quick", "minor" or
    "vector": ``graph_build.first_tiers``; an iterable that may render each source as it is taken): their texts,
    then one LLVM module per pipeline (``llvm_build.quick_objects``: at most two, the "minor" kernels' and the
    rest), each linked now and kept in memory only (``_QUICK``).  Key -> address of each kernel served (its
    optimised code when this process has it, else its quick code); those Numba must compile are left out, and so
    is what was not built when ``go()`` turned False (asked after each rendering and before each module: a dropped
    build, an exiting process)."""
    out, modules = quick_modules(jobs, go)
    out.update(link_quick(modules))
    return out


def quick_modules(jobs, go=None):
    """``compile_quick_all``'s rendering and LLVM, nothing linked (a forked child's share of a first tier,
    ``graph_build.GraphCode._first_tier_forked``): (key -> address of the kernels this process has code for
    already, [(keys, tiers, ``llvm_build.quick_objects``' answer)] for one module each of the rest)."""
    from . import llvm_build
    out, groups = {}, {}
    for key, source, tier in jobs:
        addr = _ADDRESSES.get(key) or _QUICK.get(key)
        if addr is not None:
            out[key] = addr
            continue
        quick = True if tier == "quick" else tier
        text = llvm_build.first_tier_text(key, source)
        if not llvm_build.is_llvm(text):
            llvm_build.STATS["kernels_refused"] += 1
        else:       # (LLVM's O1 pipeline, a "vector" kernel's with scalar text, has module passes: a module each)
            pipe = llvm_build.pipeline(quick)
            groups.setdefault(key if pipe == "vector" else pipe, []).append((key, text, quick))
        if go is not None and not go():
            return out, []
    modules = []
    for group in groups.values():
        if go is not None and not go():
            break
        modules.append(([k for k, _, _ in group], [q for _, _, q in group], llvm_build.quick_objects(group)))
    return out, modules


def link_quick(modules, elsewhere=False) -> dict:
    """Link ``quick_modules``' modules: key -> address of each kernel's code (its optimised code when this process
    has it, else the quick code just linked, ``_QUICK``); ``elsewhere``: built by a forked child (counted here
    as ``llvm_build.quick_objects`` counts its own)."""
    from . import llvm_build, objload
    out = {}
    for keys, tiers, built in modules:
        addrs = objload.load_module(*built)
        if elsewhere:
            llvm_build.count_first_tier(tiers)
        with _lock:
            for key, addr in zip(keys, addrs):
                if key not in _QUICK:
                    _QUICK[key] = addr
                    COUNTS["kernels_quick"] += 1
                out[key] = _ADDRESSES.get(key) or _QUICK[key]
    return out


def object_for(key: str, source: str, disk: bool = True):
    """Kernel ``key``'s optimised object code (``objstore.Blob``, from LLVM IR ``source``) compiled under its build
    lock and written to disk, or read from disk when another process wrote it first, and not linked: what a forked
    child builds for its parent (``forked_llvm.ForkedTier``).  (blob, whether it was compiled here); (None, False)
    when another process holds its lock or Numba must compile it (the parent's ``obtain`` takes over)."""
    from . import llvm_build
    use_disk = disk and cache.cache_dir() is not None
    lock = objstore.BuildLock(key) if use_disk else None
    if lock is not None and not lock.acquire(block=False):
        return None, False
    try:
        if use_disk:
            got = objstore.read(key)
            if got and [b.name for b in got] == [key]:
                return got[0], False
        blob = llvm_build.compile_kernel(key, source)
        if blob is not None and use_disk:
            objstore.write(key, [blob])
        return blob, blob is not None
    finally:
        if lock is not None:
            lock.release()


def link_forked(made) -> None:
    """Link the object code a forked child built for this process (``made``: (blob, compiled) pairs, as
    ``object_for`` returned them there), counted as this process's compiles or loads."""
    from . import llvm_build
    with _lock:
        fresh = {b.name: (b, c) for b, c in made if b.name not in _ADDRESSES}
        _load_blobs([b for b, _ in fresh.values()])
        for key, (b, compiled) in fresh.items():
            if compiled:
                _BLOBS_MADE_HERE.add(key)
                COUNTS["kernels_compiled"] += 1
                COUNTS["kernels_ir"] += 1
                llvm_build.STATS["kernels_ir"] += 1
            else:
                COUNTS["kernels_loaded"] += 1


def compile_numba(key: str, source: str, kind: str) -> int:
    """Compile ``source`` (a kernel's or an entry's module) with Numba in this process; keeps its object code
    for the disk (``_BLOBS``) and returns the address of its code."""
    with _lock:
        if key in _ADDRESSES:
            return _ADDRESSES[key]
        fn, blob = numba_build.compile_module(key, source, kind)
        if blob is not None:
            _BLOBS[key] = blob
        _FUNCS[key] = fn
        _ADDRESSES[key] = fn.address
        _BLOBS_MADE_HERE.add(key)
        COUNTS["kernels_compiled" if kind == "kernel" else "drivers_compiled"] += 1
        return fn.address


def _load_blobs(blobs) -> None:
    from . import objload
    new = [b for b in blobs if b.name not in _ADDRESSES]
    if not new:
        return
    addrs = objload.load(new)
    for b in new:
        _ADDRESSES[b.name] = addrs[b.name]
        _BLOBS.setdefault(b.name, b)


def _from_disk(key: str, kind: str) -> bool:
    """Load the object file of one kernel/entry if it is on disk and intact."""
    blobs = objstore.read(key)
    if not blobs or [b.name for b in blobs] != [key]:
        return False
    try:
        _load_blobs(blobs)
    except Exception:   # noqa: BLE001 - unlinkable: rebuilt by the caller
        return False
    COUNTS["kernels_loaded" if kind == "kernel" else "drivers_loaded"] += 1
    return True


def obtain(key: str, source: str, kind: str, disk=True, elsewhere=None) -> int:
    """The address of one kernel's/entry's code: from this process, from disk, or compiled now (one builder per
    key across processes: if another process is compiling it, wait for it and load its result).  ``elsewhere``:
    as ``compile_code``."""
    addr = _ADDRESSES.get(key)
    if addr is not None:
        return addr
    with _lock:
        if key in _UNLINKED:                # compiled for a forked build that has not linked it yet
            _load_blobs([_UNLINKED.pop(key)])
            return _ADDRESSES[key]
    if not disk or cache.cache_dir() is None:
        return compile_code(key, source, kind, elsewhere)
    with _lock:
        if key in _ADDRESSES:
            return _ADDRESSES[key]
        if _from_disk(key, kind):
            return _ADDRESSES[key]
    # not under ``_lock``: threads of this process compile different keys at once (``GraphCode.build``); two
    # threads (or processes) after one key meet at its build lock, and the second loads the first's result
    lock = objstore.BuildLock(key)
    if not lock.acquire(block=False):
        lock.acquire(block=True)         # someone else builds it: wait, then take theirs
        with _lock:
            if key in _ADDRESSES or _from_disk(key, kind):
                lock.release()
                return _ADDRESSES[key]
    try:
        return compile_to_disk(key, source, kind, elsewhere)
    finally:
        lock.release()


def compile_to_disk(key: str, source: str, kind: str, elsewhere=None) -> int:
    """``compile_code``, and its object code written to its file (the caller holds the key's build lock)."""
    addr = compile_code(key, source, kind, elsewhere)
    blob = _BLOBS.get(key)
    if blob is not None:
        objstore.write(key, [blob])
    return addr


def blob(key: str):
    """The object code of ``key`` compiled or loaded in this process (``objstore.Blob``)."""
    return _BLOBS[key]


def build_module(kernel):
    """A Numba module of ``kernel`` (its ``kernel`` attribute is the cfunc), for tests and introspection; compiled
    in this process when the kernel's code was loaded from object code."""
    key = kernel_key(kernel)
    mod = _MODULES.get(key)
    if mod is None:
        with _lock:
            mod = _MODULES[key] = numba_build.inspect_module(key, kernel.source)
    return mod


kernel_module = build_module


def _after_fork_in_child():
    """A forked child may have forked while a thread held the lock: a fresh one (the build thread's state is reset
    by ``build_thread.py``; cache, llvm_build, objload and workpool reset their own locks)."""
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
