"""Forked LLVM compilers: child processes of this one that turn kernels' LLVM IR text into object code while this
process does the same, so a synchronous cold build runs LLVM on more than one core.

llvmlite serialises every LLVM call of a process with one lock, so the build's worker threads overlap LLVM only
with Python (rendering the next kernel's IR), never with each other; a build process (``build_procs.py``) costs
~1 s to start Python and jitgrad, more than a whole graph's IR kernels take.  A fork costs milliseconds and the
child has everything loaded already (llvmlite, jitgrad's renderer): it reads ``(key, text)`` from a pipe, runs
the same LLVM passes and emission as this process (``llvm_build.object_code``), and writes the object back.  The
parent does everything else (build locks, disk, linking), so a kernel's object code does not depend on which
process compiled it.

Fork safety: ``objload`` takes llvmlite's lock around the fork (no thread is inside LLVM then) and the child gets
fresh locks (``objload``, ``llvm_build``, ``build``, ``workpool``... reset their own).  The child runs only LLVM and
the pipe, and leaves with ``os._exit`` (no atexit handler, no buffered output flushed twice).  A child that dies or
answers nothing usable is closed and its job compiled here: a forked compiler only ever saves time.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import threading
import warnings

_HEADER = struct.Struct("<Q")
STATS = {"forked": 0, "kernels": 0, "entries": 0, "failed": 0}     # counted, so tests can check who compiled what
# a synchronous build of FORK_KERNELS kernels or more forks one compiler per FORK_KERNELS kernels, up to one per
# core besides this process's, FORKS at most (JITGRAD_BUILD_FORKS=0: none)
FORK_KERNELS = 6
FORKS = int(os.environ.get("JITGRAD_BUILD_FORKS", "3"))
REPLY_TIMEOUT_S = 60.0       # one kernel takes well under a second: a child silent this long is stuck (killed, and
#                              its job compiled here)
POLL_S = 0.05                # a ForkedTier's parent asks whether to stop waiting this often


def available() -> bool:
    """Whether this platform forks cheaply and safely enough (Linux)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def tier_forks_ok() -> bool:
    """Whether a background build's tiers may fork (``ForkedTier``): a cheap, safe fork here and no MPI in the
    process (an MPI library may warn about, or break on, a fork of a rank)."""
    return available() and "mpi4py.MPI" not in sys.modules


def for_build(kernels: int, cores: int, entry_build=None):
    """Forked compilers for a synchronous build of ``kernels`` kernels on ``cores`` cores (forked before the
    build's threads start; ``entry_build`` as ``ForkedCompiler``), or None: too few kernels, no core to spare, or
    no cheap fork here."""
    n = min(cores - 1, FORKS, kernels // FORK_KERNELS)
    if n <= 0 or not available():
        return None
    return ForkedCompilers(n, entry_build)


def _write(fd: int, payload: bytes) -> None:
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data):]


def _read(fd: int, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _message(fd: int):
    head = _read(fd, _HEADER.size)
    if head is None:
        return None
    body = _read(fd, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _serve(rfd: int, wfd: int, entry_build) -> None:
    """The child's loop: ``("kernel", key, LLVM IR text)`` or ``("entry", key, None)`` in, ``(key, object bytes,
    symbol, needs)`` or ``(key, None, error)`` out."""
    from . import llvm_build
    while True:
        msg = _message(rfd)
        if msg is None:
            return
        kind, key, text = msg
        try:
            blob = llvm_build.object_code(key, text) if kind == "kernel" else entry_build(key)
            reply = (key, blob.data, blob.symbol, list(blob.needs))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which compiles it itself
            reply = (key, None, f"{type(e).__name__}: {e}", None)
        _write(wfd, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


class ForkedCompiler:
    """One forked child compiling, one job at a time, kernels' LLVM IR text (``object_code``) and, with
    ``entry_build`` (key -> ``objstore.Blob``, run in the child on the state this process had at the fork), a
    graph's entry (``entry_code``)."""

    def __init__(self, entry_build=None):
        from . import objload
        objload._ll()                       # llvmlite initialised before the fork: the child inherits it
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        try:
            with warnings.catch_warnings():     # (3.12+ warns on any fork of a process with threads: see above)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
                os.close(fd)
            raise
        if pid == 0:                        # the child
            code = 0
            try:
                os.close(to_child_w)
                os.close(to_parent_r)
                _serve(to_child_r, to_parent_w, entry_build)
            except BaseException:   # noqa: BLE001 - the parent sees the pipe close and compiles the rest
                code = 1
            finally:
                os._exit(code)
        os.close(to_child_r)
        os.close(to_parent_w)
        self.pid, self._w, self._r = pid, to_child_w, to_parent_r
        self._busy = threading.Lock()
        self.alive = True
        self.compiled = 0
        STATS["forked"] += 1

    def object_code(self, key: str, text: str):
        """``text`` (a kernel's LLVM IR, keyed ``key``) compiled by the child (``objstore.Blob``), or None when the
        child is busy with another job or cannot compile it (the caller compiles it itself)."""
        blob = self._job("kernel", key, text)
        if blob is not None:
            STATS["kernels"] += 1
        return blob

    def entry_code(self, key: str):
        """The entry ``key`` built by the child (its ``entry_build``), or None as ``object_code``."""
        blob = self._job("entry", key, None)
        if blob is not None:
            STATS["entries"] += 1
        return blob

    def _job(self, kind, key, text):
        if not self.alive or not self._busy.acquire(blocking=False):
            return None
        try:
            try:
                _write(self._w, pickle.dumps((kind, key, text), protocol=pickle.HIGHEST_PROTOCOL))
                # (select and os.read release the GIL: this process goes on meanwhile)
                ready = select.select([self._r], [], [], REPLY_TIMEOUT_S)[0]
                reply = _message(self._r) if ready else None
                if not ready:                   # a child stuck for minutes on one kernel: ended, the job done here
                    os.kill(self.pid, signal.SIGKILL)
            except OSError:
                reply = None
            if reply is None or reply[0] != key:
                self._fail()
                return None
            _, data, symbol, needs = reply
            if data is None:
                STATS["failed"] += 1
                return None
            from . import objstore
            self.compiled += 1
            return objstore.Blob(key, symbol, data, needs)
        finally:
            self._busy.release()

    def _fail(self):
        STATS["failed"] += 1
        self.close()

    def close(self) -> None:
        """End the child (it exits when its pipe closes) and reap it."""
        if not self.alive:
            return
        self.alive = False
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


class ForkedTier:
    """A forked child that builds ``keys`` one after the other (``make(key)``, run in the child: e.g.
    ``build.object_for``; what it returns is pickled) and sends each result back, in order, then exits.  A background build's optimised
    tier (``graph_build.GraphCode.optimise``) goes this way: the child renders the kernels' LLVM IR from the state
    the fork copied and runs LLVM, so the parent's build thread neither runs that Python nor gives up and takes
    back the GIL around each of LLVM's calls (hundreds a graph) while the caller's calls run; it only waits on a
    pipe and links what lands.  Made on a calling thread at a call's start (``build_thread.on_caller``: a fork runs
    every library's fork handlers, OpenBLAS's stop its threads), never mid-call.  The child closes the descriptors
    it inherited but its pipe (a build lock a thread here holds stays this process's alone) and stops once its
    parent is gone."""

    def __init__(self, keys, make):
        from . import objload
        objload._ll()                       # llvmlite initialised before the fork: the child inherits it
        r, w = os.pipe()
        parent = os.getpid()
        try:
            with warnings.catch_warnings():     # (3.12+ warns on any fork of a process with threads)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
        if pid == 0:                        # the child
            code = 0
            try:
                os.close(r)
                os.closerange(3, w)
                os.closerange(w + 1, 1 << 16)
                for key in keys:
                    if os.getppid() != parent:
                        break
                    try:
                        reply = (key, make(key))
                    except Exception:   # noqa: BLE001 - the parent builds it itself
                        reply = (key, None)
                    _write(w, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
            except BaseException:   # noqa: BLE001 - the parent sees the pipe close and builds the rest
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self._r = pid, r
        self.left = list(keys)
        STATS["forked"] += 1

    def replies(self, stop=None):
        """Lists of ``(key, what make(key) returned, or None: the parent builds that one)`` in the keys' order as
        they land (what landed together in one list); ends early if the child dies or stays silent
        ``REPLY_TIMEOUT_S``, or once ``stop()`` (asked every ``POLL_S`` while waiting) is true (the child killed)."""
        while self.left and self._r is not None:
            got, waited = [], 0.0
            while self.left:
                # (select and os.read release the GIL: the caller's calls go on meanwhile)
                if not select.select([self._r], [], [], POLL_S if not got else 0)[0]:
                    if got:
                        break
                    waited += POLL_S
                    if waited >= REPLY_TIMEOUT_S or (stop is not None and stop()):
                        self.close(kill=True)
                        break
                    continue
                msg = _message(self._r)
                if msg is None or msg[0] != self.left[0]:
                    self.close(kill=True)
                    break
                self.left.pop(0)
                got.append(msg)
                STATS["kernels" if msg[1] is not None else "failed"] += 1
            if got:
                yield got

    def close(self, kill=False) -> None:
        """Stop reading (the child stops at its next result) and reap it (``kill``: at once)."""
        if self._r is None:
            return
        os.close(self._r)
        self._r = None
        try:
            if kill:
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass


class ForkedCompilers:
    """A few forked compilers; ``object_code`` and ``entry_code`` hand a job to one that is idle, else return
    None."""

    def __init__(self, n: int, entry_build=None):
        self.children = []
        for _ in range(n):
            try:
                self.children.append(ForkedCompiler(entry_build))
            except OSError:     # no more processes or memory: compile here
                break

    def object_code(self, key: str, text: str):
        for child in self.children:
            blob = child.object_code(key, text)
            if blob is not None:
                return blob
        return None

    def entry_code(self, key: str):
        for child in self.children:
            blob = child.entry_code(key)
            if blob is not None:
                return blob
        return None

    @property
    def compiled(self) -> int:
        return sum(c.compiled for c in self.children)

    def close(self) -> None:
        for child in self.children:
            child.close()


__all__ = ["ForkedCompiler", "ForkedCompilers", "ForkedTier", "for_build", "available", "tier_forks_ok", "FORK_KERNELS", "FORKS", "STATS"]
