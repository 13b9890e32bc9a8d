"""Building compiled graphs: Numba compiles, we keep and load the object code.

- **Keys.**  A kernel is keyed by its text (its structure: ``kernel_key``), a graph's C entry by its text
  (``entry_key``), and a compiled graph by its entry and its kernels (``graph_key``).  Every key also covers the
  Numba/llvmlite/NumPy/Python versions, jitgrad's codegen sources and the host CPU (``cache.cache_key``).
- **What lands on disk** (``objstore.py``): one object file per kernel and per entry as they are compiled, and
  one file per compiled graph holding all of its objects.  A warm start reads that one file and links it with
  llvmlite (``objload.py``): no Numba import at all.  A graph whose file is missing but whose kernels and entry
  are on disk (another graph shares them, or the build that wrote them was cut short) is assembled from them,
  still without Numba.
- **Compiling** happens in this process (Numba, in memory: no generated module or ``__pycache__`` is ever
  imported from disk) or in build processes (``python -m jitgrad.codegen.build``, isolated from the caller's
  working directory), which are detached: a build that has started finishes and lands in the cache even when
  the script that asked for it exits.  Builds still queued at exit are handed to build processes then.
- **One builder per key across processes**: a builder holds ``objstore.BuildLock(key)`` while it compiles;
  others wait for it and load its result, and no build process is started for a key someone else is building.
- **A full disk** or an unusable cache directory: what this process compiled is used from memory.
"""
from __future__ import annotations

import atexit
import os
import stat
import subprocess
import sys
import threading

from pathlib import Path

from . import cache, objstore

_ADDRESSES: dict = {}       # kernel/entry key -> address of its code in this process
_BLOBS: dict = {}           # key -> objstore.Blob compiled in this process (assembling a graph's file needs it)
_FUNCS: dict = {}           # key -> Numba cfunc compiled in this process (keeps its code alive)
_MODULES: dict = {}         # kernel key -> Numba module built for inspection (build_module)
_BLOBS_MADE_HERE: set = set()   # kernel/entry keys compiled by this process (not loaded from disk)
_lock = threading.RLock()
KERNEL_EXTRA = ("cpu-kernel", 3)
ENTRY_EXTRA = ("cpu-entry", 2)
LEAN_LLVM = os.environ.get("JITGRAD_LEAN_LLVM", "0") == "1"     # opt-in, see _lean
# kernels straight to LLVM IR where ir_loops can (JITGRAD_IR_LOOPS=0: every kernel through Numba, e.g. to compare)
IR_LOOPS = os.environ.get("JITGRAD_IR_LOOPS", "1") != "0"
STARTUP = 3                 # a build process's start (Python, jitgrad, Numba) costs about this many kernel compiles
GRAPH_EXTRA = ("cpu-graph", 1)
COUNTS = {"kernels_compiled": 0, "kernels_ir": 0, "kernels_loaded": 0, "drivers_compiled": 0, "drivers_loaded": 0,
          "build_processes": 0, "graph_files_loaded": 0, "graph_files_assembled": 0}


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def kernel_key(kernel) -> str:
    return cache.cache_key(kernel.source, extra=_kernel_extra())


def _kernel_extra():
    # which compiler builds a kernel is part of its key: the two paths' object code is never mixed up
    return KERNEL_EXTRA + (("lean-llvm", LEAN_LLVM), ("ir-loops", IR_LOOPS))


def entry_key(source: str) -> str:
    return cache.cache_key(source, extra=ENTRY_EXTRA)


def graph_key(kernel_keys, ekey) -> str:
    return cache.cache_key("\n".join(sorted(set(kernel_keys))), extra=GRAPH_EXTRA + (ekey,))


# ------------------------------------------------------------------------------------------------ compiling

_HELPERS = ("jitgrad.codegen.mathlib", "jitgrad.codegen.intmath", "jitgrad.codegen.philox")
_NUMBA_DIR = None


def numba_default_dir() -> Path:
    """Where Numba would put the helpers' cache files by itself: ``$NUMBA_CACHE_DIR`` (under a subpath) or
    ``__pycache__`` next to jitgrad's codegen sources."""
    env = os.environ.get("NUMBA_CACHE_DIR", "")
    return Path(env) if env else Path(__file__).resolve().parent / "__pycache__"


def _untrusted(d: Path, link_ok: bool) -> str | None:
    """Why Numba's files under ``d`` could come from someone else (None: only we can write there)."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        parent = d.parent       # Numba creates it: then its parent decides who could have made it first
        return None if objstore._trusted_dir(parent) is None else f"{parent} is not private to this user"
    except OSError as e:
        return f"cannot stat {d} ({e})"
    if not link_ok and os.path.islink(d):
        return f"{d} is a symbolic link"
    why = objstore._trusted_dir(Path(os.path.realpath(d)))
    if why is not None:
        return f"{d}: {why}"
    try:
        names = os.listdir(d)
    except OSError as e:
        return f"cannot list {d} ({e})"
    for n in names:                             # a file others may rewrite is as bad as a directory they may
        if n.endswith((".nbi", ".nbc")):
            try:
                fst = os.lstat(d / n)
            except OSError:
                continue
            why = objstore._owned_private(fst)
            if why is not None or not stat.S_ISREG(fst.st_mode):
                return f"{d / n}: {why or 'not a regular file'}"
    return None


def numba_cache_dir() -> str | None:
    """Where Numba caches jitgrad's own ``cache=True`` helpers (mathlib, intmath, philox).  Numba's index files are
    pickles, so a cache entry is code: Numba's own location (``numba_default_dir``) is used only when nobody else
    can write there; otherwise ``<cache dir>/numba``, private like the rest of the cache, or a private temporary
    directory.  None: Numba's own location is trusted."""
    global _NUMBA_DIR
    if _NUMBA_DIR is None:
        default = numba_default_dir()
        why = _untrusted(default, link_ok=bool(os.environ.get("NUMBA_CACHE_DIR")))
        if why is None:
            _NUMBA_DIR = ""
            return None
        root = cache.cache_dir()
        d = None
        if root is not None:
            d = root / "numba"
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                pass
            except OSError:
                d = None
            if d is not None and objstore._trusted_dir(d) is not None:
                d = None
        if d is None:
            import tempfile
            d = tempfile.mkdtemp(prefix="jitgrad-numba-")      # mode 0o700
        cache._warn_once(("numba-dir", str(default)), f"jitgrad: Numba's cache files for jitgrad's helpers are not "
                                                      f"used from {default} ({why}); using {d}")
        _NUMBA_DIR = str(d)
    return _NUMBA_DIR or None


def _secure_numba_cache() -> None:
    """Import jitgrad's Numba helpers with their caches located in ``numba_cache_dir()`` (re-located if they
    were imported before); the user's own Numba functions keep ``$NUMBA_CACHE_DIR``."""
    from numba.core import config
    from numba.core.dispatcher import Dispatcher
    private = numba_cache_dir()
    old = config.CACHE_DIR
    if private is not None:
        config.CACHE_DIR = private
    try:
        import importlib
        for name in _HELPERS:
            was = name in sys.modules
            mod = importlib.import_module(name)
            if getattr(mod, "_jitgrad_cache_secured", False):
                continue
            if was:
                for v in list(vars(mod).values()):
                    if isinstance(v, Dispatcher) and getattr(v, "_cache", None) is not None \
                            and type(v._cache).__name__ == "FunctionCache":
                        v.enable_caching()
            mod._jitgrad_cache_secured = True
    finally:
        config.CACHE_DIR = old


class _ObjectCapture:
    """While compiling, every Numba code library keeps the object code MCJIT emits for it (Numba's own cache
    does the same for its ``.nbc`` files)."""

    def __enter__(self):
        _secure_numba_cache()
        from numba.core.registry import cpu_target
        self.codegen = cg = cpu_target.target_context.codegen()
        self.orig = orig = cg.create_library

        def create_library(name, **kw):
            lib = orig(name, **kw)
            lib.enable_object_caching()
            if LEAN_LLVM:
                _lean(lib)
            return lib
        cg.create_library = create_library
        return self

    def __exit__(self, *exc):
        self.codegen.create_library = self.orig


def _lean(lib) -> None:
    """One LLVM optimisation of a kernel's module instead of three (``JITGRAD_LEAN_LLVM=1``, opt-in).  Numba
    runs function passes on every module it adds, then a "cheap" module pipeline whose purpose is to inline NRT
    reference-count operations so they can be pruned, then the full pipeline.  Our kernels work on raw pointers
    (no NRT refcounts) and the full pipeline (O3, loop vectorisation) does most of what the first two would.
    Measured (2026-11-24, B1+B2+B3's 33 kernels): 15-20% less compile time per kernel, the same vector code
    (zmm/ymm instruction counts equal within 0.3%), 3.7% more instructions in all; off by default until steady
    state is timed on a quiet machine."""
    def optimize_functions(ll_module, lib=lib):
        ll_module.data_layout = lib._codegen._data_layout

    def optimize_final_module(lib=lib):
        mpm, mpb = lib._codegen._module_pass_manager()
        with lib._recorded_timings.record("Module passes (full optimization)", mpb):
            mpm.run(lib._final_module, mpb)
    lib._optimize_functions = optimize_functions
    lib._optimize_final_module = optimize_final_module


def _needs(lib) -> list:
    """External symbols the library's code refers to (resolved at load time; see ``objload.py``)."""
    m = lib._final_module
    names = [f.name for f in m.functions if f.is_declaration and not f.name.startswith("llvm.")]
    names += [g.name for g in m.global_variables if g.is_declaration]
    return sorted(set(names))


def compile_code(key: str, source: str, kind: str) -> int:
    """Compile ``source`` (a kernel's or an entry's module) in this process and return the address of its code;
    its object code is kept for the disk (``_BLOBS``).  A kernel goes straight to LLVM IR when ``ir_loops`` can
    translate it (no Numba; LLVM runs without the GIL, so threads compile kernels in parallel), else to Numba."""
    if key in _ADDRESSES:
        return _ADDRESSES[key]
    if kind == "kernel" and IR_LOOPS:
        from . import ir_loops
        blob = ir_loops.compile_kernel(key, source)
        if blob is not None:
            with _lock:
                if key not in _ADDRESSES:
                    _load_blobs([blob])
                    _BLOBS[key] = blob
                    _BLOBS_MADE_HERE.add(key)
                    COUNTS["kernels_compiled"] += 1
                    COUNTS["kernels_ir"] += 1
                return _ADDRESSES[key]
    return compile_numba(key, source, kind)


def compile_numba(key: str, source: str, kind: str) -> int:
    """Compile ``source`` (a kernel's or an entry's module) with Numba in this process; keeps its object code
    for the disk (``_BLOBS``) and returns the address of its code."""
    with _lock:
        if key in _ADDRESSES:
            return _ADDRESSES[key]
        with _ObjectCapture():
            mod = cache._in_memory(cache._module_name(kind, key), key, source)
        fn = mod.kernel if kind == "kernel" else mod.entry
        lib = fn._library
        if not lib.has_dynamic_globals:     # code with a process's addresses baked in is never persisted
            _BLOBS[key] = objstore.Blob(key, fn.native_name, lib._get_compiled_object(), _needs(lib))
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


def obtain(key: str, source: str, kind: str, disk=True) -> int:
    """The address of one kernel's/entry's code: from this process, from disk, or compiled now (one builder per
    key across processes: if another process is compiling it, wait for it and load its result)."""
    addr = _ADDRESSES.get(key)
    if addr is not None:
        return addr
    if not disk or cache.cache_dir() is None:
        return compile_code(key, source, kind)
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
        addr = compile_code(key, source, kind)
        blob = _BLOBS.get(key)
        if blob is not None:
            objstore.write(key, [blob])
        return addr
    finally:
        lock.release()


def build_module(kernel):
    """A Numba module of ``kernel`` (its ``kernel`` attribute is the cfunc), for tests and introspection; compiled
    in this process when the kernel's code was loaded from object code."""
    key = kernel_key(kernel)
    mod = _MODULES.get(key)
    if mod is None:
        with _lock:
            mod = _MODULES[key] = cache._in_memory(cache._module_name("kernel", key) + "_inspect", key, kernel.source)
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
        self.elsewhere = set()                # keys our build processes compiled (then linked here)
        self.how = None                       # "process" | "graph file" | "assembled" | "built"
        self.spawned = False                  # its build processes have started (they finish even if we exit)
        self.errors = []

    def _keys(self):
        ks = list(dict.fromkeys(self.kkeys.values()))
        return ks + ([self.ekey] if self.ekey else [])

    def _kind(self, key):
        return "entry" if key == self.ekey else "kernel"

    def _source(self, key):
        for k in self.kernels:
            if self.kkeys[k.key] == key:
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
        self.loaded_keys.update(todo)
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

    def pending_jobs(self):
        """(kind, key, source path) of the kernels not compiled anywhere yet (the entry is built here, at once);
        None without a usable disk cache."""
        if not self.disk or cache.cache_dir() is None:
            return None
        self.ensure_entry(load=False)
        jobs = []
        for key in self.missing():
            if key == self.ekey or objstore.exists(key):
                continue
            path = cache.store_entry(key, self._source(key))
            if path is None:
                return None
            jobs.append((self._kind(key), key, str(path)))
        return jobs

    def build(self, background: bool):
        """Compile what is missing.  ``background``: everything in build processes (this process only loads
        their results, so it never imports Numba while it serves calls); else this process compiles a share
        while build processes take the rest, in parallel.  Then write the graph's file."""
        with _lock:
            if self.try_load():
                return
        self.ensure_entry()
        todo = self.pending_jobs()
        procs, mine = [], None
        if todo:
            busy = [j for j in todo if objstore.BuildLock(j[1]).held_elsewhere()]   # someone builds them: wait
            todo = [j for j in todo if j not in busy]
            cores = _cores()
            if background:
                parts = min(cores, len(todo))
                shares = _split(todo, parts) if parts else []
                procs = [spawn(s, self if i == 0 else None) for i, s in enumerate(shares)]
                self.elsewhere.update(j[1] for j in todo)
                self.spawned = True
                mine = []
            else:
                # kernels that translate to LLVM IR (ir_loops) compile here, on a thread per core; the rest need
                # Numba.  A build process costs ~0.9 s to start Python and Numba; it pays off from a few Numba
                # kernels on.
                from . import ir_loops
                direct = [j for j in todo if j[0] == "kernel" and IR_LOOPS
                          and ir_loops.translatable(j[1], self._source(j[1]))]
                slow = [j for j in todo if j not in direct]
                mine = slow
                helpers = min(cores - 1, len(slow) // 4)
                if helpers > 0:
                    # a build process spends ~STARTUP kernels' time starting Python and Numba: this process, which
                    # is up already, takes that many more
                    n_mine = min(len(slow), -(-(len(slow) + STARTUP * helpers) // (helpers + 1)))
                    mine = slow[:n_mine]
                    rest = _split(slow[n_mine:], helpers)
                    procs = [spawn(s) for s in rest if s]
                    self.elsewhere.update(j[1] for s in rest for j in s)
                    self.spawned = True
                mine = mine + direct        # the long (Numba) jobs first
        self._obtain_all([key for _, key, _ in (mine or [])])
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

    def _obtain_all(self, keys):
        """``_obtain`` each key, on one thread per core when there are several (LLVM releases the GIL; Numba's
        jobs serialise on its compiler lock and overlap with the LLVM-only ones)."""
        workers = min(_cores(), len(keys))
        if workers < 2:
            for key in keys:
                self._obtain(key)
            return
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jitgrad-build") as ex:
            for fut in [ex.submit(self._obtain, key) for key in keys]:
                fut.result()

    def _obtain(self, key):
        if key in _ADDRESSES:
            return
        if key == self.ekey:
            self.ensure_entry()
            return
        obtain(key, self._source(key), self._kind(key), self.disk)
        if key in _BLOBS_MADE_HERE:
            self.compiled_keys.add(key)
        else:
            self.loaded_keys.add(key)


# ------------------------------------------------------------------------------------------------ background builds

_QUEUE = None               # background builds run one at a time (their build processes use every core)
_QUEUED: list = []          # CompiledGraphs queued or building


def queue_background(cg) -> None:
    """Run ``cg._build(True)`` on the background build thread (started on first use)."""
    global _QUEUE
    import queue
    with _lock:
        if _QUEUE is None:
            _QUEUE = queue.Queue()
            q = _QUEUE

            def worker():
                while True:
                    job = q.get()
                    try:
                        job._build(True)
                    finally:
                        try:
                            _QUEUED.remove(job)
                        except ValueError:
                            pass
                        q.task_done()
            threading.Thread(target=worker, daemon=True, name="jitgrad-compile").start()
        _QUEUED.append(cg)
        _QUEUE.put(cg)


def _after_fork_in_child():
    """A forked child has no build thread and may have forked while a lock was held: fresh locks and queue,
    and the builds that were queued or running in the parent are pending again (``wait()`` restarts them)."""
    global _QUEUE, _lock
    _lock = threading.RLock()
    _QUEUE = None
    from . import objload
    objload._lock = threading.RLock()
    for cg in _QUEUED:
        if cg.run is None and cg.error is None:
            cg.pending = True
    _QUEUED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _leftovers():
    """At exit: builds still queued go to detached build processes, so the next run finds them compiled."""
    for cg in list(_QUEUED):
        code = cg.code
        if code.spawned:
            continue
        try:
            todo = code.pending_jobs()
        except Exception:   # noqa: BLE001 - exiting: nothing to report to
            continue
        if todo:
            defer(todo, code)


def _split(todo, parts):
    shares = [[] for _ in range(max(parts, 1))]
    for i, job in enumerate(todo):
        shares[i % len(shares)].append(job)
    return [s for s in shares if s]


# ------------------------------------------------------------------------------------------------ build processes

def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The build process's first statement: drop the working directory ('' or '.') from sys.path before anything is
# imported, and import jitgrad from where this process imported it (a numba.py, numpy.py or jitgrad/ in the
# caller's working directory never runs).  ``-P`` does the same where Python has it (3.11+); both are applied.
_BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; sys.path.insert(0, sys.argv[1]); "
         "from jitgrad.codegen.build import _main; _main(sys.argv[2:])")


def command(jobs, graph=None) -> list:
    """The build process's command line (see ``_BOOT``): ``kind key path lock-fd`` per job (``-``: no lock handed
    over), then ``graph gkey keys -``."""
    args = [sys.executable] + (["-P"] if sys.version_info >= (3, 11) else []) + ["-c", _BOOT, _package_root()]
    for job in jobs:
        args += [job[0], job[1], job[2], job[3] if len(job) > 3 else "-"]
    if graph is not None:
        args += ["graph", graph.gkey, ",".join(graph._keys()), "-"]
    return args


def spawn(jobs, graph=None) -> subprocess.Popen | None:
    """A detached build process compiling ``jobs`` into the disk cache (it outlives this process); with
    ``graph``, it also writes that graph's file once every object of it is on disk.

    This process takes each job's build lock and hands it to the child (an inherited descriptor: the lock is
    held from before the child starts until it finishes), so a run that starts meanwhile sees the key being built
    and starts no second builder for it.  Jobs whose lock someone else holds are left to that builder."""
    locks, handed = [], []
    try:
        for job in jobs:
            lock = objstore.BuildLock(job[1])
            if not lock.acquire(block=False):
                continue
            locks.append(lock)
            handed.append(tuple(job[:3]) + ((str(lock.fd) if lock.fd is not None else "-"),))
        if not handed and graph is None:
            return None
        root = cache.cache_dir()
        COUNTS["build_processes"] += 1
        return subprocess.Popen(command(handed, graph), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True,
                                cwd=str(root) if root is not None else "/",
                                pass_fds=[lk.fd for lk in locks if lk.fd is not None])
    finally:
        for lock in locks:
            lock.release()          # the child's inherited descriptor keeps the lock


_DETACHED_AT_EXIT: list = []     # (jobs, graph) queued for a background build that had not started when we exit


def defer(jobs, graph=None):
    _DETACHED_AT_EXIT.append((jobs, graph))


@atexit.register
def _spawn_leftovers():
    _leftovers()
    while _DETACHED_AT_EXIT:
        jobs, graph = _DETACHED_AT_EXIT.pop(0)
        try:
            p = spawn(jobs, graph)
            if p is not None and p.stderr is not None:
                p.stderr.close()
        except OSError:
            pass


def _read_job(kind, key, path):
    """A job's source, checked against its key (the key is the hash of the text: a changed file is refused)."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    extra = _kernel_extra() if kind == "kernel" else ENTRY_EXTRA
    if cache.cache_key(src, extra=extra) != key:
        raise SystemExit(f"jitgrad build: {path} does not match its key; not compiled")
    return src


def _main(argv):
    """Build-process entry: compile each (kind, key, path) into the disk cache; then a graph's file."""
    try:
        _build_jobs(argv)
    finally:
        _report()


def _build_jobs(argv):
    it = iter(argv)
    jobs, graph = {}, None
    for kind, key, path, fd in zip(it, it, it, it):
        if kind == "graph":
            graph = (key, path.split(","))
            continue
        jobs[key] = (kind, path, fd)
    for key, (kind, path, fd) in jobs.items():
        lock = objstore.BuildLock(key)
        if fd != "-":
            lock.fd = int(fd)               # handed over by the process that started us: already held
        elif not lock.acquire(block=False):
            continue                        # another process builds it
        try:
            if objstore.read(key, warn=False):
                continue
            compile_code(key, _read_job(kind, key, path), kind)
            blob = _BLOBS.get(key)
            if blob is not None:
                objstore.write(key, [blob])
        finally:
            lock.release()
    if graph is not None:
        gkey, keys = graph
        blobs = []
        for key in keys:
            with objstore.BuildLock(key):   # a build of it in another process: wait for it
                got = objstore.read(key, warn=False)
            if not got:
                if key not in jobs:
                    return                  # not ours to compile and nobody finished it: the next run does
                kind, path, _ = jobs[key]
                compile_code(key, _read_job(kind, key, path), kind)
                got = [_BLOBS[key]]
                objstore.write(key, got)
            blobs.extend(got)
        objstore.write(gkey, blobs)


def _report():
    if os.environ.get("JITGRAD_BUILD_REPORT"):      # tests: what this build process did
        import json
        print(json.dumps(COUNTS), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
