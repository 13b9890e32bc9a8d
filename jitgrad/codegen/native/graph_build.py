"""A compiled graph's code (``GraphCode``): loaded from its file or assembled from its objects, else built, and
who compiles which kernel (``build.py`` holds each kernel's code by key).

- **Loading.**  A warm start reads the graph's one file and links it with llvmlite: no Numba import at all.  A graph
  whose file is missing but whose kernels and entry are on disk (another graph shares them, or the build that
  wrote them was cut short) is assembled from them, still without Numba.
- **Building** in this process (the build thread for a background build, worker threads and forked LLVM compilers
  for a synchronous one), or in build processes (``build_procs.py``, isolated from the caller's working
  directory), which are detached: a build that has started finishes and lands in the cache even when the script
  that asked for it exits.  Builds still queued at exit are handed to build processes then (``_spawn_leftovers``).
  No build process is started for a key someone else is building (its build lock is held).
- **Two tiers in a background build** (``QUICK``): the kernels this process compiles are first built quickly
  (``build.compile_quick_all``: one LLVM module per pipeline; by kernel, ``first_tiers``: those doing a sliver of
  the work more cheaply still, those doing most of it with the loop vectoriser) and linked, so the caller's calls
  switch to compiled code that much sooner; the same kernels are then built at O3 (``optimise``, after every other
  graph's quick build on the build thread; by a child forked at a call's start where the platform forks,
  ``forked_llvm.ForkedTier``), written to disk and swapped in kernel by kernel.  A run that exits
  before the optimised build hands it to build processes, as any unfinished build.
"""
from __future__ import annotations

import atexit
import os

from . import build, build_procs, build_thread, cache, forked_llvm, objstore

STARTUP = 3                 # a build process's start (Python, jitgrad, Numba) costs about this many kernel compiles
# a background build compiles IR kernels on its thread (~20-80 ms each); a build process (~1 s to start Python and
# jitgrad, ~IR_STARTUP IR kernels) takes a share only of graphs with more than THREAD_KERNELS of them
IR_STARTUP = 16
THREAD_KERNELS = 48
# a background build's kernels compiled here are first built quickly (see the module docstring; 0: O3 at once)
QUICK = os.environ.get("JITGRAD_QUICK_BUILD", "1") != "0"
# ... by kernel (``first_tiers``): under MINOR_SHARE of its graph's kernel work the cheapest way, from VECTOR_SHARE
# of it and VECTOR_WORK (a call's work in it, the plan's cost unit: about an instruction a unit in quick code) with
# the loop vectoriser, which costs ~2-3.5x the quick build's instructions more (the LM step's log-softmax: +140M), so
# that the calls of a short script repay it (the LM's: 1.6M instructions a call less)
MINOR_SHARE = float(os.environ.get("JITGRAD_QUICK_MINOR_SHARE", "0.01"))
VECTOR_SHARE = float(os.environ.get("JITGRAD_QUICK_VECTOR_SHARE", "0.25"))
VECTOR_WORK = float(os.environ.get("JITGRAD_QUICK_VECTOR_WORK", str(1 << 19)))
# a background build's optimised tier is built by a forked child (``forked_llvm.ForkedTier``) where the platform
# forks: the build thread then runs none of its Python (the LLVM IR's rendering) and makes a handful of LLVM calls
# (linking) instead of hundreds, each a GIL hand-off against the calls running on the quick code meanwhile (the LM
# step of ``variable_length.py``: ~48k Python calls and 466 LLVM calls on the build thread, 768 before the host and
# a pass builder were asked for once a process).  Off by default (JITGRAD_FORKED_TIER=1 turns it on): timed in
# fresh processes on empty caches (quiet, 2026-12-01) it showed no gain: LM new/rep 7.55x and 8.07x against 1.11x
# in-process, nanoGPT 1.90x and 8.23x against 1.14x; the in-process tiers then spread as widely (LM 1.3-11x in 14
# runs, the session's starting code 0.24-1.57x), so the figure says nothing either way, and a fork inside a user's
# process waits for one that does
FORKED_TIER = os.environ.get("JITGRAD_FORKED_TIER", "0") == "1"
FORK_WAIT = 0.2     # seconds the build thread waits for a call to fork its child (``build_thread.on_caller``)


def first_tiers(keys, work) -> dict:
    """Build key -> "minor", "quick" or "vector": how a background build's first tier builds each kernel of ``keys``
    (``llvm_build.CODEGEN_LEVEL`` says how each builds).  The switch to compiled code waits for the last of them,
    while the calls' time goes to the few kernels doing most of the work.  By a kernel's share of the graph's
    kernel work (``work``: key -> a call's work in the plan's cost unit, ``CompiledGraph.kernel_work``): under
    ``MINOR_SHARE`` "minor" (the LM step of ``variable_length.py``: 12 of its 24 kernels, ~2% of a quick call's
    instructions), from ``VECTOR_SHARE`` "vector" if its work is ``VECTOR_WORK`` or more (the LM's log-softmax and
    that one's backward, ~45% of a quick call's instructions, ~13% at "vector"; B5's two heaviest kernels, a few
    thousand instructions a call, stay "quick").  A kernel of unknown work (0: gathers, scatters, scans) is
    "quick".  (With the first tier's vector text, ``llvm_build.quick_text``, a "vector" kernel builds as a "quick"
    one: its loops are vector already.)"""
    total = sum(work.get(k, 0.0) for k in keys)

    def tier(w):
        if w <= 0.0 or total <= 0.0:
            return "quick"
        if w < MINOR_SHARE * total:
            return "minor"
        return "vector" if w >= VECTOR_SHARE * total and w >= VECTOR_WORK else "quick"
    return {k: tier(work.get(k, 0.0)) for k in keys}


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class GraphCode:
    """The code of one compiled graph: its kernels (``kernel.key`` -> address) and its entry's address."""

    def __init__(self, kernels, entry_src=None, disk=True, entry_build=None):
        self.kernels = list(kernels)
        self.entry_src = entry_src             # the entry's listing (its identity)
        self.entry_build = entry_build         # key -> objstore.Blob: its machine code (entry.compile_entry)
        self.disk = disk
        self.kkeys = {k.key: build.kernel_key(k) for k in self.kernels}
        self.ekey = build.entry_key(entry_src) if entry_src is not None else None
        self.gkey = build.graph_key(self.kkeys.values(), self.ekey or "")
        self.loaded_keys, self.compiled_keys = set(), set()    # linked from object code / compiled here
        # code another graph of this process built already counts as loaded (compiled before this build), so a
        # graph's stats always add up to its kernels and entry
        self.loaded_keys |= {k for k in self._keys() if k in build._ADDRESSES}
        self.elsewhere = set()                # keys our build processes compiled (then linked here)
        self.how = None                       # "process" | "graph file" | "assembled" | "built"
        self.spawned = False                  # its build processes have started (they finish even if we exit)
        self.forked = 0                       # kernels its forked LLVM compilers compiled (``_build_here``)
        self.quick_keys = set()               # kernels it runs from quick code until ``optimise`` builds them
        self.first_tier = {}                  # key -> "minor" | "quick" | "vector": its first tier (``first_tiers``)
        self.dropped = False                  # no call will run it: a background build stops between kernels
        self.errors = []

    def _keys(self):
        ks = list(dict.fromkeys(self.kkeys.values()))
        return ks + ([self.ekey] if self.ekey else [])

    def _kind(self, key):
        return "entry" if key == self.ekey else "kernel"

    def _source(self, key, quick=False):
        """What compiles ``key``: a kernel's LLVM IR where ``ir_loops`` renders its IR (``quick``: the first tier's,
        ``llvm_build.quick_text``), else its Numba text."""
        for k in self.kernels:
            if self.kkeys[k.key] == key:
                if build.IR_LOOPS:
                    from . import llvm_build
                    return (llvm_build.quick_text if quick else llvm_build.compile_text)(key, k.source, k.ir)
                return k.source
        raise KeyError(key)

    def addresses(self):
        """(kernel name -> address, the entry's address): each kernel's optimised code, else its quick code."""
        kaddr = {k.key: build._ADDRESSES.get(self.kkeys[k.key]) or build._QUICK[self.kkeys[k.key]] for k in self.kernels}
        return kaddr, (build._ADDRESSES[self.ekey] if self.ekey else None)

    def missing(self):
        return [k for k in self._keys() if k not in build._ADDRESSES]

    def try_load(self) -> bool:
        """Without compiling (and without Numba): from this process, the graph's file, or its objects' files.
        True when every kernel and the entry have code here now."""
        with build._lock:
            todo = self.missing()
            if not todo:
                self.how = self.how or "process"
                return True
            if not self.disk or cache.cache_dir() is None:
                return False
            blobs = objstore.read(self.gkey)
            if blobs is not None and {b.name for b in blobs} >= set(self._keys()):
                try:
                    build._load_blobs(blobs)
                except Exception:  # noqa: BLE001 - unlinkable: treated as corrupt, rebuilt
                    objstore.last_error[self.gkey] = "cannot be linked"
                else:
                    self._count_loaded(todo)
                    build.COUNTS["graph_files_loaded"] += 1
                    self.how = "graph file"
                    return True
            for key in list(todo):          # the graph's file is missing: its objects may be on disk
                if not objstore.exists(key):
                    return False
            for key in todo:
                if not build._from_disk(key, self._kind(key)):
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
            build.COUNTS["kernels_loaded" if self._kind(key) == "kernel" else "drivers_loaded"] += 1

    def assemble(self) -> bool:
        """Write the graph's file from its objects (compiled here or read from their files)."""
        if not self.disk:
            return False
        blobs = []
        for key in self._keys():
            b = build._BLOBS.get(key)
            if b is None:
                got = objstore.read(key)
                if not got:
                    return False
                b = got[0]
            blobs.append(b)
        ok = objstore.write(self.gkey, blobs) is not None
        if ok:
            build.COUNTS["graph_files_assembled"] += 1
        return ok

    def ensure_entry(self, load=True) -> None:
        """The entry's object code (built here: LLVM IR to machine code in milliseconds, no Numba), written to
        disk for the graph's file, and linked into this process when ``load``."""
        key = self.ekey
        if key is None or key in build._ADDRESSES:
            return
        with build._lock:
            blob = build._BLOBS.get(key)
            if blob is None and self.disk:
                got = objstore.read(key)
                if got and [b.name for b in got] == [key]:
                    blob = got[0]
                    self.loaded_keys.add(key)
                    build.COUNTS["drivers_loaded"] += 1
            if blob is None:
                blob = build._BLOBS[key] = self.entry_build(key)
                self.compiled_keys.add(key)
                build.COUNTS["drivers_compiled"] += 1
                if self.disk:
                    objstore.write(key, [blob])
            if load:
                build._load_blobs([blob])

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

    def build(self, background: bool, work=None):
        """Compile what is missing, then write the graph's file.  ``background`` (on the build thread, while the
        caller's calls run meanwhile): kernels that translate to LLVM IR compile on this thread, one at a time
        (tens of milliseconds each), and only what is slow goes to build processes: kernels Numba must compile (this
        process never imports Numba while it serves calls) and the tail of a big graph (``_build_in_background``).
        Else (a synchronous build) this process compiles a share on worker threads while build processes take
        the rest, in parallel.  ``work``: key -> a call's work in that kernel (``first_tiers``)."""
        with build._lock:
            if self.try_load():
                return
        cores = _cores()
        forked = None       # a synchronous build forks its LLVM compilers first: one builds the entry meanwhile
        if not background and build.IR_LOOPS:
            forked = forked_llvm.for_build(sum(1 for k in self.missing() if k != self.ekey and not (
                self.disk and objstore.exists(k))), cores, self.entry_build)
            build.COUNTS["forked_compilers"] += len(forked.children) if forked is not None else 0
        procs = []
        if background and self.dropped:     # (a retrace dropped it as it started)
            raise build_thread.BuildStopped
        try:
            # a background build makes its entry last (``_obtain`` below, before the switch as before): one dropped
            # meanwhile (the first trace of a step whose second call made its sizes symbolic) stops between two
            # renderings with no LLVM work done, ahead of the build that makes the step switch
            here = forked is None and not background
            if here:
                self.ensure_entry()
            todo = self.pending_jobs(sources=False, entry=here)
            if todo is None and background and QUICK:      # no disk cache: its kernels built quickly first too
                todo = [(self._kind(k), k, None) for k in self.missing() if k != self.ekey]
            busy = [j for j in todo or () if objstore.BuildLock(j[1]).held_elsewhere()]   # someone builds them: wait
            todo = [j for j in todo or () if j not in busy]
            if background and todo:
                procs = self._build_in_background(todo, cores, work or {})
            elif todo or forked is not None:
                procs = self._build_here(todo, cores, forked)
        finally:
            if forked is not None:
                forked.close()
                self.forked = forked.compiled
                build.link_compiled()
        if forked is not None:
            self.ensure_entry()         # (its object code is here: linked)
        if build_thread.stopping() or self.dropped:
            raise build_thread.BuildStopped
        for p in procs:
            if p is None:
                continue
            _, err = p.communicate()
            if p.returncode != 0:
                self.errors.append(err.decode(errors="replace")[-2000:])
        with build._lock:
            if self.missing() and self.try_load():
                self.quick_keys.clear()
                return
            for key in self._keys():
                if key not in self.quick_keys:
                    self._obtain(key)
            if not self.quick_keys:
                self.assemble()     # (also when this process compiled everything: the next run loads one file)
            if self.how is None:
                self.how = "built"

    def optimise(self, swap, work=None):
        """A quick build's second tier (on the build thread, after the switch): each kernel run from quick code
        compiled at O3 under its build lock and written to disk (``_obtain``), then ``swap(key, address)`` so the
        graph's calls take it; then the graph's file.  ``work``: key -> what a call's launches of it do (the
        plan's cost unit): the heaviest kernels are built first, so the first to land gain the calls the most (a
        GPT step's O3 tier takes longer than a short script's 250 calls), and the first tier's "vector" kernels
        last (their code is near O3's already: the LM step's log-softmax 0.36M instructions a call, 0.33M at O3).
        Raises ``build_thread.BuildStopped`` when the process is exiting (what is left goes to build processes)."""
        keys = [k for k in self._keys() if k in self.quick_keys]
        if work:        # (stable: equal work keeps the graph's order)
            keys.sort(key=lambda k: (self.first_tier.get(k) == "vector", -work.get(k, 0.0)))
        self._optimise_forked([k for k in keys if k != self.ekey], swap)
        for key in [k for k in keys if k in self.quick_keys]:      # (what no forked child built)
            with build_thread.compiling() as go:
                if not go:
                    raise build_thread.BuildStopped
                self._obtain(key)
            self.quick_keys.discard(key)
            swap(key, build._ADDRESSES[key])
        with build._lock:
            self.assemble()

    def _optimise_forked(self, keys, swap):
        """``optimise``'s kernels ``keys`` (in that order) built by a forked child (``forked_llvm.ForkedTier``,
        ``FORKED_TIER``): each linked and swapped in as it lands; what it did not build stays in ``quick_keys``."""
        if not (FORKED_TIER and keys and forked_llvm.tier_forks_ok()) or build_thread.stopping():
            return
        root = cache._configured_dir()      # (the build's: the child forks from another thread)

        def make(key):
            with cache.pinned_dir(root):
                return build.object_for(key, self._source(key), self.disk)
        child = build_thread.on_caller(lambda: forked_llvm.ForkedTier(keys, make), FORK_WAIT)
        if child is None:       # no call came (or no more processes, or memory): built here
            return
        build.COUNTS["forked_tiers"] += 1
        try:
            for got in child.replies():     # (at exit: the child finishes its kernel, for the next run)
                build.link_forked([made for _, made in got if made is not None])
                for key, made in got:
                    if made is None or key not in build._ADDRESSES:
                        continue
                    (self.compiled_keys if made[1] else self.loaded_keys).add(key)
                    self.quick_keys.discard(key)
                    swap(key, build._ADDRESSES[key])
                if build_thread.stopping():
                    raise build_thread.BuildStopped
        finally:
            child.close()

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
                if job[0] == "kernel" and build.IR_LOOPS and llvm_build.translatable(job[1], self._source(job[1])):
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
        if key is None or key in build._ADDRESSES or key in build._BLOBS or self.entry_build is None or \
                (self.disk and objstore.exists(key)):
            return self.ensure_entry(load=False)
        blob = forked.entry_code(key)
        if blob is None:
            return self.ensure_entry(load=False)
        with build._lock:
            if key not in build._BLOBS:
                build._BLOBS[key] = blob
                self.compiled_keys.add(key)
                build.COUNTS["drivers_compiled"] += 1
                if self.disk:
                    objstore.write(key, [blob])

    def _build_in_background(self, todo, cores, work):
        """A background build's share-out (see ``build``): Numba's jobs and, for a graph of more than
        ``THREAD_KERNELS`` IR kernels on a machine with cores to spare, a tail of its IR jobs go to build processes
        (each costs ~``IR_STARTUP`` kernels' time to start Python, so this thread keeps that many more); the
        rest compile here, one at a time, each under its build lock (the first tier's rendering and LLVM in a
        forked child, ``_first_tier_forked``, where the platform forks).  Returns the build processes started."""
        from . import llvm_build
        forked = self._first_tier_forked(todo, work) if QUICK else None
        fast, slow = [], []
        for job in todo:
            if forked is not None:
                is_ir = job[1] in forked[0]
            elif self.dropped:      # (each test renders the kernel: a dropped build stops between two)
                return []
            else:
                is_ir = job[0] == "kernel" and build.IR_LOOPS and llvm_build.is_llvm(self._source(job[1], QUICK))
            (fast if is_ir else slow).append(job)
        # (quick builds: every IR kernel here, ~5x cheaper than O3; a build process would make the switch wait for it)
        helpers = min(cores - 1, len(fast) // THREAD_KERNELS) if cores > 1 and not QUICK else 0
        mine, away = fast, []
        if helpers > 0:
            n_mine = min(len(fast), -(-(len(fast) + IR_STARTUP * helpers) // (helpers + 1)))
            mine, away = fast[:n_mine], fast[n_mine:]
        shares = []
        if slow:
            shares += _split(slow, min(cores, len(slow)))
        if away:
            shares += _split(away, helpers)
        tiers = (forked[1] if forked is not None else first_tiers([j[1] for j in mine], work)) if QUICK else {}
        procs, sent = [], set()
        if shares:      # (a build process writes the graph's file once all its objects are on disk: the entry too)
            self.ensure_entry(load=False)
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
        if QUICK and mine:
            with build_thread.compiling() as go:
                if go and not self.dropped and forked is not None:
                    self._link_first_tier(forked[2], [j[1] for j in mine], tiers)
                elif go and not self.dropped:
                    self._quick([j[1] for j in mine], tiers)
            mine = [j for j in mine if j[1] not in self.quick_keys]
        for job in mine:
            with build_thread.compiling() as go:
                if not go or self.dropped:      # exiting (what is left goes to build processes, ``_spawn_leftovers``)
                    break                       # or dropped (``CompiledGraph.drop``)
                self._obtain(job[1])
        return procs

    def _first_tier_forked(self, todo, work):
        """The first tier's rendering and LLVM (``_build_in_background``: which of ``todo``'s kernels translate,
        their tiers, ``build.quick_modules``) in a child forked at a call's start (``forked_llvm.ForkedTier``,
        ``FORKED_TIER``), so that the calls served eagerly or interpreted meanwhile keep the GIL (the LM step of
        ``variable_length.py``: ~55k Python calls and 213 LLVM calls on the build thread, nanoGPT's ~222k and
        308): (the IR kernels' keys, their tiers, the modules built), or None (built here)."""
        from . import llvm_build
        if not (FORKED_TIER and todo and build.IR_LOOPS and forked_llvm.tier_forks_ok()) or self.dropped or \
                build_thread.stopping():
            return None

        def make(_):
            ir = [k for kind, k, _ in todo if kind == "kernel" and llvm_build.is_llvm(self._source(k, True))]
            tiers = first_tiers(ir, work)
            keys = [k for k in ir if k not in build._ADDRESSES]
            return ir, tiers, build.quick_modules((k, self._source(k, True), tiers.get(k, "quick")) for k in keys)[1]
        child = build_thread.on_caller(lambda: forked_llvm.ForkedTier(["first tier"], make), FORK_WAIT)
        if child is None:       # no call came (or no more processes, or memory): built here
            return None
        build.COUNTS["forked_first_tiers"] += 1
        try:
            for got in child.replies(lambda: self.dropped or build_thread.stopping()):
                return got[0][1]
        finally:
            child.close()
        return None

    def _link_first_tier(self, modules, keys, tiers):
        """``_quick`` for the modules a forked child built (``_first_tier_forked``): linked, and those of ``keys``
        this process has no optimised code for served by quick code."""
        got = build.link_quick(modules, elsewhere=True)
        for key in keys:
            if (got.get(key) or build._QUICK.get(key)) is not None and key not in build._ADDRESSES:
                self.quick_keys.add(key)
                self.first_tier[key] = tiers.get(key, "quick")

    def _quick(self, keys, tiers):
        """The first tier: kernels ``keys`` served by quick code (``build.compile_quick_all``, the graph's kernels
        in one LLVM module per pipeline; ``tiers``: ``first_tiers``'s), but those this process has optimised code
        for and those that need Numba; it stops between two kernels' renderings once the build is dropped or the
        process exits."""
        keys = [k for k in keys if k not in build._ADDRESSES]
        jobs = ((k, self._source(k, quick=True), tiers.get(k, "quick")) for k in keys)     # (rendered as taken)
        got = build.compile_quick_all(jobs, lambda: not (self.dropped or build_thread.stopping()))
        for key in keys:
            if key in got and key not in build._ADDRESSES:
                self.quick_keys.add(key)
                self.first_tier[key] = tiers.get(key, "quick")

    def _obtain(self, key, elsewhere=None):
        if key in build._ADDRESSES:
            return
        if key == self.ekey:
            self.ensure_entry()
            return
        build.obtain(key, self._source(key), self._kind(key), self.disk, elsewhere)
        if key in build._BLOBS_MADE_HERE:
            self.compiled_keys.add(key)
        else:
            self.loaded_keys.add(key)


# ------------------------------------------------------------------------------------------------ build processes

def _spawn(jobs, graph=None, exiting=False):
    """A detached build process for ``jobs`` (``build_procs.spawn``), counted."""
    build.COUNTS["build_processes"] += 1
    return build_procs.spawn(jobs, graph, exiting)


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
            p = _spawn(todo, code, exiting=True)
            if p is not None and p.stderr is not None:
                p.stderr.close()
        except OSError:
            pass


def _split(todo, parts):
    shares = [[] for _ in range(max(parts, 1))]
    for i, job in enumerate(todo):
        shares[i % len(shares)].append(job)
    return [s for s in shares if s]
