"""Build processes: detached ``python`` processes that compile a graph's missing kernels into the disk cache.

They are started with the caller's working directory off ``sys.path`` (``_BOOT``), so a ``numba.py`` or
``jitgrad/`` there never runs; they outlive the script that started them, so a build that has started lands in
the cache even when the script exits (``graph_build.py`` hands them the builds still queued at exit).  The process
that starts one takes each job's build lock and hands it over (an inherited descriptor), so no second builder
starts for a key meanwhile.  This module starts them; what one runs is ``build_worker.py``, which compiles like
this process does (``build.compile_code``: LLVM IR where ``ir_loops`` can, else Numba), so one whose kernels all
translate never imports Numba.
"""
from __future__ import annotations

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
         "from jitgrad.codegen.native.build_worker import main; main(sys.argv[2:])")


def command(jobs, graph=None) -> list:
    """The build process's command line (see ``_BOOT``): ``kind key path lock-fd`` per job (``-``: no lock handed
    over), then ``graph gkey keys -``."""
    args = [sys.executable] + (["-P"] if sys.version_info >= (3, 11) else []) + ["-c", _BOOT, _package_root()]
    for job in jobs:
        args += [job[0], job[1], job[2], job[3] if len(job) > 3 else "-"]
    if graph is not None:
        args += ["graph", graph.gkey, ",".join(graph._keys()), "-"]
    return args


def spawn(jobs, graph=None, exiting=False) -> subprocess.Popen | None:
    """A detached build process compiling ``jobs`` into the disk cache (it outlives this process); with
    ``graph``, it also writes that graph's file once every object of it is on disk.

    This process takes each job's build lock and hands it to the child (an inherited descriptor: the lock is
    held from before the child starts until it finishes), so a run that starts meanwhile sees the key being built
    and starts no second builder for it.  Jobs whose lock another process holds are left to that builder, and so
    are those a thread of this process holds, except ``exiting``: then that thread (the build thread, stopped
    mid-kernel) dies with us, and its lock is shared with the child (``BuildLock.share``), which builds the kernel
    unless that thread wrote it before this process exited."""
    locks, handed = [], []
    try:
        for job in jobs:
            lock = objstore.BuildLock(job[1])
            # (at exit, held by the build thread that dies with us: the child shares its lock; tried again when
            # that thread let go between the two)
            if not (lock.acquire(block=False) or exiting and (lock.share() or lock.acquire(block=False))):
                continue
            locks.append(lock)
            handed.append(tuple(job[:3]) + ((str(lock.fd) if lock.fd is not None else "-"),))
        if not handed and graph is None:
            return None
        root = cache.cache_dir()
        env = os.environ if root is None else {**os.environ, cache.ENV_VAR: str(root)}   # the same cache as ours
        return subprocess.Popen(command(handed, graph), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, env=env,
                                cwd=str(root) if root is not None else "/",
                                pass_fds=[lk.fd for lk in locks if lk.fd is not None])
    finally:
        for lock in locks:
            lock.release()          # the child's inherited descriptor keeps the lock


__all__ = ["command", "spawn"]
