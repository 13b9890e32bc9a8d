"""Build processes: detached ``python`` processes that compile a graph's missing kernels into the disk cache.

They are started with the caller's working directory off ``sys.path`` (``_BOOT``), so a ``numba.py`` or
``jitgrad/`` there never runs; they outlive the script that started them, so a build that has started lands in
the cache even when the script exits (builds still queued at exit are handed to them too, ``defer``).  The
process that starts one takes each job's build lock and hands it over (an inherited descriptor), so no second
builder starts for a key meanwhile.  A build process compiles like this process does (``build.compile_code``:
LLVM IR where ``ir_loops`` can, else Numba), so one whose kernels all translate never imports Numba.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys

from . import cache, objstore

def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The build process's first statement: drop the working directory ('' or '.') from sys.path before anything is
# imported, and import jitgrad from where this process imported it (a numba.py, numpy.py or jitgrad/ in the
# caller's working directory never runs).  ``-P`` does the same where Python has it (3.11+); both are applied.
_BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; sys.path.insert(0, sys.argv[1]); "
         "from jitgrad.codegen.build_procs import _main; _main(sys.argv[2:])")


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
        from .build import COUNTS
        COUNTS["build_processes"] += 1
        env = os.environ if root is None else {**os.environ, cache.ENV_VAR: str(root)}   # the same cache as ours
        return subprocess.Popen(command(handed, graph), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, env=env,
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
    from .build import _leftovers
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
    from .build import ENTRY_EXTRA, _kernel_extra
    with open(path, encoding="utf-8") as f:
        src = f.read()
    from .ir_loops import HEADER
    if kind == "kernel" and src.startswith(HEADER):     # LLVM IR rendered for this key (ir_loops.compile_text)
        if not src.startswith(f"{HEADER}{key}\n"):
            raise SystemExit(f"jitgrad build: {path} does not match its key; not compiled")
        return src
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
    from .build import _BLOBS, compile_to_disk
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
            compile_to_disk(key, _read_job(kind, key, path), kind)
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
                compile_to_disk(key, _read_job(kind, key, path), kind)
                got = [_BLOBS[key]]
            blobs.extend(got)
        objstore.write(gkey, blobs)


def _report():
    if os.environ.get("JITGRAD_BUILD_REPORT"):      # tests: what this build process did
        import json
        from .build import COUNTS
        print(json.dumps(COUNTS), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
