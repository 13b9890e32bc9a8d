"""Building compiled graphs: kernels compiled from LLVM IR (``ir_loops.py`` renders it, ``llvm_build.py`` compiles
it) or by Numba (``numba_build.py``); we keep and load the object code.

- **Keys.**  A kernel is keyed by its text (its structure: ``kernel_key``), a graph's C entry by its text
  (``entry_key``), and a compiled graph by its entry and its kernels (``graph_key``).  Every key also covers the
  Numba/llvmlite/NumPy/Python versions, jitgrad's codegen, ir, jit and tracer sources and the host CPU (``cache.cache_key``).
- **What lands on disk** (``objstore.py``): one object file per kernel and per entry as they are compiled, and
  one file per compiled graph holding all of its objects.  A warm start reads that one file and links it with
  llvmlite (``objload.py``): no Numba import at all.  A graph whose file is missing but whose kernels and entry
  are on disk (another graph shares them, or the build that wrote them was cut short) is assembled from them,
  still without Numba.
- **Compiling** (``compile_code``) happens in this process (a kernel's text straight to LLVM IR where
  ``ir_loops`` can translate it, else Numba, in memory: no generated module or ``__pycache__`` is
  ever imported from disk), or in build processes (``build_procs.py``, isolated from the caller's working
  directory), which are detached: a build that has started finishes and lands in the cache even when the script
  that asked for it exits.  Builds still queued at exit are handed to build processes then.
- **One builder per key across processes**: a builder holds ``objstore.BuildLock(key)`` while it compiles;
  others wait for it and load its result, and no build process is started for a key someone else is building.
- **A full disk** or an unusable cache directory: what this process compiled is used from memory.
"""
from __future__ import annotations

import os
import threading

import atexit

from . import build_procs, build_thread, cache, forked_llvm, numba_build, objstore
from .numba_build import numba_cache_dir, numba_default_dir  # noqa: F401  (Numba's side: numba_build.py)

_ADDRESSES: dict = {}       # kernel/entry key -> address of its code in this process
_BLOBS: dict = {}           # key -> objstore.Blob compiled in this process (assembling a graph's file needs it)
_FUNCS: dict = {}           # key -> Numba cfunc compiled in this process (keeps its code alive)
_MODULES: dict = {}         # kernel key -> Numba module built for inspection (build_module)
_BLOBS_MADE_HERE: set = set()   # kernel/entry keys compiled by this process (not loaded from disk)
_UNLINKED: dict = {}        # key -> objstore.Blob compiled for a forked build, linked when it ends (``link_compiled``)
_lock = threading.RLock()
KERNEL_EXTRA = ("cpu-kernel", 3)
ENTRY_EXTRA = ("cpu-entry", 2)
# kernels straight to LLVM IR where ir_loops can (JITGRAD_IR_LOOPS=0: every kernel through Numba, e.g. to compare)
IR_LOOPS = os.environ.get("JITGRAD_IR_LOOPS", "1") != "0"
STARTUP = 3                 # a build process's start (Python, jitgrad, Numba) costs about this many kernel compiles
# a background build compiles IR kernels on its thread (~20-80 ms each); a build process (~1 s to start Python and
# jitgrad, ~IR_STARTUP IR kernels) takes a share only of graphs with more than THREAD_KERNELS of them
IR_STARTUP = 16
THREAD_KERNELS = 48
GRAPH_EXTRA = ("cpu-graph", 1)
COUNTS = {"kernels_compiled": 0, "kernels_ir": 0, "kernels_loaded": 0, "drivers_compiled": 0, "drivers_loaded": 0,
          "build_processes": 0, "forked_compilers": 0, "graph_files_loaded": 0, "graph_files_assembled": 0}


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def kernel_key(kernel) -> str:
    return cache.cache_key(kernel.source, extra=kernel_extra())


def kernel_extra():
    """What besides its text a kernel's key covers (``cache.cache_key``'s ``extra``)."""
    # which compiler builds a kernel is part of its key: the two paths' object code is never mixed up
    from ..kernels.ir_loops import INTERLEAVE
    return KERNEL_EXTRA + (("lean-llvm", numba_build.LEAN_LLVM), ("ir-loops", IR_LOOPS), ("interleave", INTERLEAVE))


def entry_key(source: str) -> str:
    return cache.cache_key(source, extra=ENTRY_EXTRA)


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


# ------------------------------------------------------------------------------------------------ graphs

class GraphCode:
    """The code of one compiled graph: its kernels (``kernel.key`` -> address) and its entry's address."""

    def __init__(self, kernels, entry_src=None, disk=True, entry_build=None):
        self.kernels = list(kernels)
        self.entry_src = entry_src             # the entry's listing (its identity)
        self.entry_build = entry_build         # key -> objstore.Blob: its machine code (entry.compile_entry)
        self.disk = disk
        self.kkeys = {k.key: kernel_key(k) for k in self.kernels}
        self.ekey = entry_key(entry_src) if entry_src is not None else None
        self.gkey = graph_key(self.kkeys.values(), self.ekey or "")
        self.loaded_keys, self.compiled_keys = set(), set()    # linked from object code / compiled here
        # code another graph of this process built already counts as loaded (compiled before this build), so a
        # graph's stats always add up to its kernels and entry
        self.loaded_keys |= {k for k in self._keys() if k in _ADDRESSES}
        self.elsewhere = set()                # keys our build processes compiled (then linked here)
        self.how = None                       # "process" | "graph file" | "assembled" | "built"
        self.spawned = False                  # its build processes have started (they finish even if we exit)
        self.forked = 0                       # kernels its forked LLVM compilers compiled (``_build_here``)
        self.errors = []

    def _keys(self):
        ks = list(dict.fromkeys(self.kkeys.values()))
        return ks + ([self.ekey] if self.ekey else [])

    def _kind(self, key):
        return "entry" if key == self.ekey else "kernel"

    def _source(self, key):
        """What compiles ``key``: a kernel's LLVM IR where ``ir_loops`` renders its IR, else its Numba text."""
        for k in self.kernels:
            if self.kkeys[k.key] == key:
                if IR_LOOPS:
                    from . import llvm_build
                    return llvm_build.compile_text(key, k.source, k.ir)
                return k.source
        raise KeyError(key)

    def addresses(self):
        kaddr = {k.key: _ADDRESSES[self.kkeys[k.key]] for k in self.kernels}
        return kaddr, (_ADDRESSES[self.ekey] if self.ekey else None)

    def missing(self):
        return [k for k in self._keys() if k not in _ADDRESSES]

    def try_load(self) -> bool:
        """Without compiling (and without Numba): from this process, the graph's file, or its objects' files.
        True when every kernel and the entry have code here now."""
        with _lock:
            todo = self.missing()
            if not todo:
                self.how = self.how or "process"
                return True
            if not self.disk or cache.cache_dir() is None:
                return False
            blobs = objstore.read(self.gkey)
            if blobs is not None and {b.name for b in blobs} >= set(self._keys()):
                try:
                    _load_blobs(blobs)
                except Exception:  # noqa: BLE001 - unlinkable: treated as corrupt, rebuilt
                    objstore.last_error[self.gkey] = "cannot be linked"
                else:
                    self._count_loaded(todo)
                    COUNTS["graph_files_loaded"] += 1
                    self.how = "graph file"
                    return True
            for key in list(todo):          # the graph's file is missing: its objects may be on disk
                if not objstore.exists(key):
                    return False
            for key in todo:
                if not _from_disk(key, self._kind(key)):
                    return False
                self.loaded_keys.add(key)
            self.assemble()
            self.how = "assembled"
            return True

    @property
    def loaded(self) -> int:
        """This graph's kernels and entry that were linked from object code compiled before its build."""
        return len(self.loaded_keys - self.elsewhere)

    @property
    def compiled(self) -> int:
        """This graph's kernels and entry compiled for its build (here or in its build processes)."""
        return len(self.compiled_keys | (self.elsewhere & self.loaded_keys))

    def _count_loaded(self, todo):
        self.loaded_keys |= set(todo)
        for key in todo:
            COUNTS["kernels_loaded" if self._kind(key) == "kernel" else "drivers_loaded"] += 1

    def assemble(self) -> bool:
        """Write the graph's file from its objects (compiled here or read from their files)."""
        if not self.disk:
            return False
        blobs = []
        for key in self._keys():
            b = _BLOBS.get(key)
            if b is None:
                got = objstore.read(key)
                if not got:
                    return False
                b = got[0]
            blobs.append(b)
        ok = objstore.write(self.gkey, blobs) is not None
        if ok:
            COUNTS["graph_files_assembled"] += 1
        return ok

    def ensure_entry(self, load=True) -> None:
        """The entry's object code (built here: LLVM IR to machine code in milliseconds, no Numba), written to
        disk for the graph's file, and linked into this process when ``load``."""
        key = self.ekey
        if key is None or key in _ADDRESSES:
            return
        with _lock:
            blob = _BLOBS.get(key)
            if blob is None and self.disk:
                got = objstore.read(key)
                if got and [b.name for b in got] == [key]:
                    blob = got[0]
                    self.loaded_keys.add(key)
                    COUNTS["drivers_loaded"] += 1
            if blob is None:
                blob = _BLOBS[key] = self.entry_build(key)
                self.compiled_keys.add(key)
                COUNTS["drivers_compiled"] += 1
                if self.disk:
                    objstore.write(key, [blob])
            if load:
                _load_blobs([blob])

    def pending_jobs(self, sources=True, entry=True):
        """(kind, key, source path) of the kernels not compiled anywhere yet (the entry is built here, at once,
        unless ``entry`` is False); None without a usable disk cache.  ``sources=False``: no source files written
        (path None; a synchronous build writes them only for the jobs it hands to build processes)."""
        if not self.disk or cache.cache_dir() is None:
            return None
        if entry:
            self.ensure_entry(load=False)
        jobs = []
        for key in self.missing():
            if key == self.ekey or objstore.exists(key):
                continue
            path = None
            if sources:
                path = cache.store_entry(key, self._source(key))
                if path is None:
                    return None
            jobs.append((self._kind(key), key, None if path is None else str(path)))
        return jobs

    def build(self, background: bool):
        """Compile what is missing, then write the graph's file.  ``background`` (on the build thread, while the
        caller's calls run meanwhile): kernels that translate to LLVM IR compile on this thread, one at a time
        (tens of milliseconds each), and only what is slow goes to build processes: kernels Numba must compile (this
        process never imports Numba while it serves calls) and the tail of a big graph (``_build_in_background``).
        Else (a synchronous build) this process compiles a share on worker threads while build processes take
        the rest, in parallel."""
        with _lock:
            if self.try_load():
                return
        cores = _cores()
        forked = None       # a synchronous build forks its LLVM compilers first: one builds the entry meanwhile
        if not background and IR_LOOPS:
            forked = forked_llvm.for_build(sum(1 for k in self.missing() if k != self.ekey and not (
                self.disk and objstore.exists(k))), cores, self.entry_build)
            COUNTS["forked_compilers"] += len(forked.children) if forked is not None else 0
        procs = []
        try:
            if forked is None:
                self.ensure_entry()
            todo = self.pending_jobs(sources=False, entry=forked is None)
            busy = [j for j in todo or () if objstore.BuildLock(j[1]).held_elsewhere()]   # someone builds them: wait
            todo = [j for j in todo or () if j not in busy]
            if background and todo:
                procs = self._build_in_background(todo, cores)
            elif todo or forked is not None:
                procs = self._build_here(todo, cores, forked)
        finally:
            if forked is not None:
                forked.close()
                self.forked = forked.compiled
                link_compiled()
        if forked is not None:
            self.ensure_entry()         # (its object code is here: linked)
        if build_thread.stopping():
            raise build_thread.BuildStopped
        for p in procs:
            if p is None:
                continue
            _, err = p.communicate()
            if p.returncode != 0:
                self.errors.append(err.decode(errors="replace")[-2000:])
        with _lock:
            if self.missing() and self.try_load():
                return
            for key in self._keys():
                self._obtain(key)
            self.assemble()         # (also when this process compiled everything: the next run loads one file)
            if self.how is None:
                self.how = "built"

    def _build_here(self, todo, cores, forked=None):
        """A synchronous build: kernels that translate to LLVM IR (``ir_loops``) compile here, each handed to a
        worker thread as soon as it is translated; the rest need Numba.  llvmlite serialises LLVM's calls with one
        lock, so the threads do not run LLVM in parallel: they overlap LLVM's work (which releases the GIL) with
        the next translation and with Numba's Python front end.  A build process costs ~0.9 s to start Python
        and Numba, so it takes a share of the Numba jobs only from a few of them on.  Returns the build processes started."""
        from . import llvm_build
        pool = None
        if cores > 1:
            from concurrent.futures import ThreadPoolExecutor
            workers = max(cores, len(forked.children) + 1) if forked is not None else cores
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jitgrad-build")
        futures, slow, procs = [], [], []
        if forked is not None and pool is not None:
            futures.append(pool.submit(self._entry_elsewhere, forked))

        def start(key):
            if pool is None:
                self._obtain(key)
            else:
                futures.append(pool.submit(self._obtain, key, forked))
        try:
            for job in todo:
                if job[0] == "kernel" and IR_LOOPS and llvm_build.translatable(job[1], self._source(job[1])):
                    start(job[1])
                else:
                    slow.append(job)
            mine = slow
            helpers = min(cores - 1, len(slow) // 4)
            if helpers > 0:
                # a build process spends ~STARTUP kernels' time starting Python and Numba: this process, which is
                # up already, takes that many more
                n_mine = min(len(slow), -(-(len(slow) + STARTUP * helpers) // (helpers + 1)))
                mine, rest = slow[:n_mine], []
                for job in slow[n_mine:]:
                    path = cache.store_entry(job[1], self._source(job[1]))     # the build process reads it
                    if path is None:
                        mine.append(job)
                    else:
                        rest.append((job[0], job[1], str(path)))
                shares = _split(rest, helpers) if rest else []
                procs = [_spawn(share) for share in shares]
                self.elsewhere |= {j[1] for share in shares for j in share}
                self.spawned = bool(shares)
            for job in mine:
                start(job[1])
            for fut in futures:
                fut.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        return procs

    def _entry_elsewhere(self, forked):
        """The entry's object code built by a forked compiler while this process renders kernels (else here),
        kept and written to disk, linked at the build's end (``ensure_entry``)."""
        key = self.ekey
        if key is None or key in _ADDRESSES or key in _BLOBS or self.entry_build is None or \
                (self.disk and objstore.exists(key)):
            return self.ensure_entry(load=False)
        blob = forked.entry_code(key)
        if blob is None:
            return self.ensure_entry(load=False)
        with _lock:
            if key not in _BLOBS:
                _BLOBS[key] = blob
                self.compiled_keys.add(key)
                COUNTS["drivers_compiled"] += 1
                if self.disk:
                    objstore.write(key, [blob])

    def _build_in_background(self, todo, cores):
        """A background build's share-out (see ``build``): Numba's jobs and, for a graph of more than
        ``THREAD_KERNELS`` IR kernels on a machine with cores to spare, a tail of its IR jobs go to build processes
        (each costs ~``IR_STARTUP`` kernels' time to start Python, so this thread keeps that many more); the
        rest compile here, one at a time, each under its build lock.  Returns the build processes started."""
        from . import llvm_build
        fast, slow = [], []
        for job in todo:
            is_ir = job[0] == "kernel" and IR_LOOPS and llvm_build.translatable(job[1], self._source(job[1]))
            (fast if is_ir else slow).append(job)
        helpers = min(cores - 1, len(fast) // THREAD_KERNELS) if cores > 1 else 0
        mine, away = fast, []
        if helpers > 0:
            n_mine = min(len(fast), -(-(len(fast) + IR_STARTUP * helpers) // (helpers + 1)))
            mine, away = fast[:n_mine], fast[n_mine:]
        shares = []
        if slow:
            shares += _split(slow, min(cores, len(slow)))
        if away:
            shares += _split(away, helpers)
        procs, sent = [], set()
        for share in shares:
            jobs = []
            for kind, key, _ in share:
                path = cache.store_entry(key, self._source(key))     # the build process reads it
                if path is None:
                    mine.append((kind, key, None))
                else:
                    jobs.append((kind, key, str(path)))
            if jobs:
                procs.append(_spawn(jobs, self if not self.spawned else None))
                self.spawned = True
                sent |= {j[1] for j in jobs}
        self.elsewhere |= sent
        for job in mine:
            with build_thread.compiling() as go:
                if not go:          # exiting: what is left goes to build processes (``_spawn_leftovers``)
                    break
                self._obtain(job[1])
        return procs

    def _obtain(self, key, elsewhere=None):
        if key in _ADDRESSES:
            return
        if key == self.ekey:
            self.ensure_entry()
            return
        obtain(key, self._source(key), self._kind(key), self.disk, elsewhere)
        if key in _BLOBS_MADE_HERE:
            self.compiled_keys.add(key)
        else:
            self.loaded_keys.add(key)


# ------------------------------------------------------------------------------------------------ build processes

def _after_fork_in_child():
    """A forked child may have forked while a thread held the lock: a fresh one (the build thread's state is reset
    by ``build_thread.py``; cache, llvm_build, objload and workpool reset their own locks)."""
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _spawn(jobs, graph=None):
    """A detached build process for ``jobs`` (``build_procs.spawn``), counted."""
    COUNTS["build_processes"] += 1
    return build_procs.spawn(jobs, graph)


@atexit.register
def _spawn_leftovers():
    """At exit: builds still queued, and what the build thread had not compiled yet (it stops after the kernel
    it is compiling), go to detached build processes, so the next run finds them compiled."""
    queued = build_thread.stop()
    left = []
    for cg in queued:
        code = cg.code
        try:
            todo = code.pending_jobs()
        except Exception:   # noqa: BLE001 - exiting: nothing to report to
            continue
        todo = [j for j in todo or () if not objstore.BuildLock(j[1]).held_elsewhere()]   # (its build processes')
        if todo:
            left.append((todo, code))
    for todo, code in left:
        try:
            p = _spawn(todo, code)
            if p is not None and p.stderr is not None:
                p.stderr.close()
        except OSError:
            pass


def _split(todo, parts):
    shares = [[] for _ in range(max(parts, 1))]
    for i, job in enumerate(todo):
        shares[i % len(shares)].append(job)
    return [s for s in shares if s]
