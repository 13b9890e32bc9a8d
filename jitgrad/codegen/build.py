"""Building compiled graphs: kernels and drivers compiled (or loaded from the disk cache) once per process.

- A kernel is loaded at most once per process (``_ADDRESSES``, by its identity) and compiled at most once per
  machine (Numba's cache next to the entry file).
- Cold builds use the cores: kernels not yet compiled are split among build processes (``python -m
  jitgrad.codegen.build``), each compiling its share into the disk cache, while this process compiles its own
  share; then everything is loaded from the cache, which costs ~2 ms a kernel.
- Build processes are detached: a build that has started finishes and lands in the cache even when the process
  that asked for it exits (a script that calls its step once and exits leaves compiled code for the next run).
  Builds still queued at exit are handed to detached processes then.
- Two processes building the same kernel both succeed: entries are written atomically (``cache.py``) and
  Numba's index and object files are replaced atomically.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading

from . import cache

_ADDRESSES: dict = {}       # kernel cache key -> address of its compiled code (kept alive by the module)
_MODULES: dict = {}         # cache key -> module
_lock = threading.RLock()
KERNEL_EXTRA = ("cpu-kernel", 2)
DRIVER_EXTRA = ("cpu-driver", 2)
COUNTS = {"kernels_compiled": 0, "kernels_loaded": 0, "drivers_compiled": 0, "drivers_loaded": 0,
          "build_processes": 0}


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def kernel_key(kernel) -> str:
    return cache.cache_key(kernel.source, extra=KERNEL_EXTRA)


def _count(kind, key, disk):
    path = cache.entry_path(key) if disk else None
    return "loaded" if cache.compiled_on_disk(path) else "compiled"


def kernel_address(kernel, disk=True) -> int:
    """The address of ``kernel``'s compiled code: from this process, the disk cache, or compiled now."""
    key = kernel_key(kernel)
    addr = _ADDRESSES.get(key)
    if addr is None:
        with _lock:
            addr = _ADDRESSES.get(key)
            if addr is None:
                how = _count("kernel", key, disk)
                mod = cache.load_module(key, kernel.source, "kernel", disk)
                addr = mod.kernel.address
                _MODULES[key] = mod
                _ADDRESSES[key] = addr
                COUNTS[f"kernels_{how}"] += 1
    return addr


def kernel_module(kernel):
    """The loaded module of ``kernel`` (its ``kernel`` attribute is the cfunc)."""
    kernel_address(kernel)
    return _MODULES[kernel_key(kernel)]


def load_driver(source: str, signature: str, disk=True):
    """The driver's dispatcher, compiled for ``signature`` (or loaded from the disk cache)."""
    key = cache.cache_key(source, extra=DRIVER_EXTRA)
    mod = _MODULES.get(key)
    if mod is None:
        with _lock:
            mod = _MODULES.get(key)
            if mod is None:
                how = _count("driver", key, disk)
                mod = cache.load_module(key, source, "driver", disk)
                mod.run.compile(signature)
                _MODULES[key] = mod
                COUNTS[f"drivers_{how}"] += 1
    return mod.run


def _pending(kernels, driver):
    """(key, path, kind) of what is neither loaded here nor compiled on disk; entries written for children."""
    todo = []
    for k in kernels:
        key = kernel_key(k)
        if key in _ADDRESSES:
            continue
        path = cache.store_entry(key, k.source)
        if path is None:
            return None          # no usable disk cache: everything in this process
        if not cache.compiled_on_disk(path):
            todo.append((key, path, "k"))
    if driver is not None:
        src, sig = driver
        key = cache.cache_key(src, extra=DRIVER_EXTRA)
        if key not in _MODULES:
            path = cache.store_entry(key, src)
            if path is None:
                return None
            if not cache.compiled_on_disk(path):
                todo.append((key, path, "d:" + sig))
    return todo


def spawn(jobs) -> subprocess.Popen | None:
    """A detached build process compiling ``jobs`` into the disk cache (it outlives this process)."""
    if not jobs:
        return None
    args = [sys.executable, "-m", "jitgrad.codegen.build"]
    for key, path, kind in jobs:
        args += [key, str(path), kind]
    COUNTS["build_processes"] += 1
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _split(todo, parts):
    shares = [[] for _ in range(parts)]
    for i, job in enumerate(todo):
        shares[i % parts].append(job)
    return [s for s in shares if s]


def build(kernels, driver=None, disk=True, detach_all=False):
    """Start compiling what is missing: returns ``(processes, mine)``, the build processes started and the keys
    this process compiles itself (in ``finish``).

    ``detach_all``: compile everything in build processes (a background build: this process only loads the
    results), else this process compiles a share itself while build processes take the rest in parallel."""
    todo = _pending(kernels, driver) if disk else None
    if not todo:
        return [], None
    cores = _cores()
    if detach_all:
        return [spawn(s) for s in _split(todo, min(cores, len(todo)))], set()
    # a build process costs ~0.4 s to start Numba; it pays off from a few kernels on.  The driver goes to a
    # build process: this one also traces and runs the first call.
    helpers = min(cores - 1, len(todo) // 4)
    if helpers <= 0:
        return [], None
    drv = [j for j in todo if j[2] != "k"]
    ks = [j for j in todo if j[2] == "k"]
    shares = _split(ks, helpers + 1)
    mine = shares[0] if shares else []
    rest = shares[1:] or [[]]
    rest[0] = drv + rest[0]
    return [spawn(s) for s in rest if s], {key for key, _, _ in mine}


def finish(kernels, driver, disk, started):
    """Compile this process's share, wait for the build processes, then load everything (from the cache)."""
    procs, mine = started
    if mine:
        for k in kernels:
            if kernel_key(k) in mine:
                kernel_address(k, disk)
    errors = []
    for p in procs:
        if p is None:
            continue
        _, err = p.communicate()
        if p.returncode != 0:
            errors.append(err.decode(errors="replace")[-2000:])
    addrs = {k.key: kernel_address(k, disk) for k in kernels}
    run = load_driver(driver[0], driver[1], disk) if driver is not None else None
    return addrs, run, errors


_DETACHED_AT_EXIT: list = []     # jobs queued for a background build that had not started when we exit


def defer(jobs):
    _DETACHED_AT_EXIT.append(jobs)


@atexit.register
def _spawn_leftovers():
    for jobs in _DETACHED_AT_EXIT:
        try:
            spawn(jobs)
        except OSError:
            pass


def _main(argv):
    """Build-process entry: compile each (key, path, kind) into the disk cache."""
    it = iter(argv)
    for key, path, kind in zip(it, it, it):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        if kind == "k":
            cache.load_module(key, src, "kernel").kernel.address
        else:
            cache.load_module(key, src, "driver").run.compile(kind[2:])


if __name__ == "__main__":
    _main(sys.argv[1:])
