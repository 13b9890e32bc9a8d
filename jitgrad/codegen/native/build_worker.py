"""A build process's work (``build_procs.py`` starts it): compile the kernels and entries it is given into the
disk cache, each under its build lock (handed over by the process that started it, or taken here), then write
a graph's file once every object of it is on disk.  It compiles as any process does (``build.compile_to_disk``).
"""
from __future__ import annotations

import os
import sys

from . import build, cache, objstore


def _read_job(kind, key, path):
    """A job's source, checked against its key (the key is the hash of the text: a changed file is refused)."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    from ..kernels.ir_loops import HEADER
    if kind == "kernel" and src.startswith(HEADER):     # LLVM IR rendered for this key (llvm_build.compile_text)
        if not src.startswith(f"{HEADER}{key}\n"):
            raise SystemExit(f"jitgrad build: {path} does not match its key; not compiled")
        return src
    extra = build.kernel_extra() if kind == "kernel" else build.entry_extra()
    if cache.cache_key(src, extra=extra) != key:
        raise SystemExit(f"jitgrad build: {path} does not match its key; not compiled")
    return src


def main(argv):
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
            build.compile_to_disk(key, _read_job(kind, key, path), kind)
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
                build.compile_to_disk(key, _read_job(kind, key, path), kind)
                got = [build.blob(key)]
            blobs.extend(got)
        objstore.write(gkey, blobs)


def _report():
    if os.environ.get("JITGRAD_BUILD_REPORT"):      # tests: what this build process did
        import json
        print(json.dumps(build.COUNTS), flush=True)


__all__ = ["main"]


if __name__ == "__main__":
    main(sys.argv[1:])
