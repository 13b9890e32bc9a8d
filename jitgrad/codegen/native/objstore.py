"""Object code on disk: the machine code of kernels and graph entries, in files we write, check and load ourselves.

A cache entry is code, so nothing is loaded unless every check passes:

* **trust**: the file and every directory from the cache root down to it are owned by the current user and not
  writable by group or others (``cache.cache_dir()`` checks the root; ``_trusted`` the shard and the file), the
  file is a regular file opened without following links;
* **integrity**: a fixed magic and format version, the key the file was asked for (a foreign or renamed file has
  another), the exact length, a SHA-256 of the header and one of each object blob (a truncated, partial or corrupt
  file fails one of them), and each blob is an ELF relocatable object for this machine.

A file that fails is reported as such (``read`` returns ``None`` with the reason in ``last_error``); the caller
rebuilds it and ``write`` replaces it atomically (temp file, fsync, rename).

Format (little endian)::

    b"JGOBJ\\x02\\n\\0"  u32 header length  header (JSON)  sha256(header)  blob 0  blob 1 ...

The header: ``{"key": key, "blobs": [{"name": kernel key or "entry", "symbol": ..., "size": n,
"sha256": hex, "needs": [undefined symbols]}]}``.  One file per kernel (keyed by structure) and one per compiled
graph (keyed by the graph's entry and its kernels), which holds every kernel's object and the entry's: a warm
start reads that one file.

Build locks (``BuildLock``): one builder per key across processes, an ``flock`` on ``<key>.lock`` next to the
entry; the lock dies with its process, so a crashed builder never blocks anyone.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from . import cache

MAGIC = b"JGOBJ\x02\n\0"
SUFFIX = ".jgo"
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
try:
    import fcntl as _fcntl
except ImportError:     # pragma: no cover - not POSIX: builds are not coordinated
    _fcntl = None
_HERE_LOCK = threading.Lock()
_HERE: dict = {}        # key -> descriptors of this process holding its build lock now (``BuildLock``)


def _after_fork_in_child():
    """A forked child holds none of the parent's locks as its own (it may have forked mid-acquire)."""
    global _HERE_LOCK
    _HERE_LOCK = threading.Lock()
    _HERE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_POSIX = os.name == "posix"
_ELF = b"\x7fELF"
MAX_BYTES = 256 << 20        # no object file of ours comes near this: a bigger one is not ours

last_error: dict = {}         # key -> why its file was not used (for warnings and tests)
STATS = {"files_read": 0, "files_written": 0, "files_rejected": 0, "write_failures": 0}


class Blob:
    """One object file: ``name`` (the kernel key, or ``"entry"``), the code's entry ``symbol``, the object
    ``data`` and the external symbols it ``needs`` at load time."""

    __slots__ = ("name", "symbol", "data", "needs")

    def __init__(self, name: str, symbol: str, data: bytes, needs=()):
        self.name, self.symbol, self.data, self.needs = name, symbol, bytes(data), tuple(needs)


def path_for(key: str, root: Path | None = None) -> Path | None:
    root = cache.cache_dir() if root is None else root
    return None if root is None else Path(root) / key[:2] / f"{key}{SUFFIX}"


def _owned_private(st) -> str | None:
    if not _POSIX:
        return None
    if st.st_uid != os.geteuid():
        return f"it is owned by uid {st.st_uid}, not by the current user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is group- or other-writable (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def _trusted_dir(d: Path) -> str | None:
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"cannot stat it ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory (or is a symbolic link)"
    return _owned_private(st)


# ----------------------------------------------------------------------------------------------------- encoding

def encode(key: str, blobs) -> bytes:
    header = {"key": key, "blobs": [{"name": b.name, "symbol": b.symbol, "size": len(b.data),
                                     "sha256": hashlib.sha256(b.data).hexdigest(), "needs": list(b.needs)}
                                    for b in blobs]}
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(h)), h, hashlib.sha256(h).digest()] + [b.data for b in blobs])


def decode(key: str, data: bytes):
    """The blobs in ``data`` if it is an intact file for ``key``; else raises ValueError saying why."""
    if not data.startswith(MAGIC):
        raise ValueError("not a jitgrad object file (bad magic or another format version)")
    p = len(MAGIC)
    if len(data) < p + 4:
        raise ValueError("truncated header")
    (n,) = struct.unpack_from("<I", data, p)
    p += 4
    if n > 1 << 24 or len(data) < p + n + 32:
        raise ValueError("truncated header")
    h = data[p:p + n]
    if hashlib.sha256(h).digest() != data[p + n:p + n + 32]:
        raise ValueError("header checksum mismatch")
    p += n + 32
    try:
        header = json.loads(h)
    except ValueError:
        raise ValueError("unreadable header") from None
    if header.get("key") != key:
        raise ValueError("it belongs to another key (a foreign or renamed file)")
    blobs = []
    for b in header["blobs"]:
        size = int(b["size"])
        chunk = data[p:p + size]
        if len(chunk) != size:
            raise ValueError(f"truncated ({len(data)} bytes)")
        if hashlib.sha256(chunk).hexdigest() != b["sha256"]:
            raise ValueError(f"checksum mismatch in object {b['name'][:16]}")
        if sys.platform.startswith("linux") and not chunk.startswith(_ELF):
            raise ValueError("an object is not ELF")
        blobs.append(Blob(str(b["name"]), str(b["symbol"]), chunk, [str(s) for s in b["needs"]]))
        p += size
    if p != len(data):
        raise ValueError("trailing bytes after the last object")
    return blobs


# ----------------------------------------------------------------------------------------------------- files

def _reject(key: str, path: Path, why: str, warn: bool) -> None:
    last_error[key] = why
    STATS["files_rejected"] += 1
    if warn:
        warnings.warn(cache.JitgradCacheWarning(f"jitgrad cache: {path} is not used: {why}; rebuilding it"),
                      stacklevel=4)


def read(key: str, root: Path | None = None, warn: bool = True):
    """The blobs of the file for ``key``, or None (missing, untrusted, corrupt: ``last_error[key]`` says why)."""
    path = path_for(key, root)
    if path is None:
        last_error[key] = "no usable cache directory"
        return None
    why = _trusted_dir(path.parent)
    if why is not None:
        if why != "missing":
            _reject(key, path, f"its directory {path.parent}: {why}", warn)
        else:
            last_error[key] = "missing"
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    except FileNotFoundError:
        last_error[key] = "missing"
        return None
    except OSError as e:
        _reject(key, path, "it is a symbolic link" if e.errno == errno.ELOOP else f"cannot open it ({e})", warn)
        return None
    try:
        st = os.fstat(fd)
        why = "it is not a regular file" if not stat.S_ISREG(st.st_mode) else _owned_private(st)
        if why is None and st.st_size > MAX_BYTES:
            why = "it is too large to be ours"
        if why is not None:
            _reject(key, path, why, warn)
            return None
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
    except OSError as e:
        _reject(key, path, f"cannot read it ({e})", warn)
        return None
    finally:
        os.close(fd)
    try:
        blobs = decode(key, data)
    except (ValueError, KeyError, TypeError) as e:
        _reject(key, path, str(e), warn)
        return None
    STATS["files_read"] += 1
    last_error.pop(key, None)
    return blobs


def write(key: str, blobs, root: Path | None = None) -> Path | None:
    """Publish the file for ``key`` atomically (replacing a bad one); None when there is no usable cache
    directory or the write failed (a full disk: the caller keeps its in-memory code)."""
    root = cache.cache_dir() if root is None else root
    if root is None:
        return None
    data = encode(key, blobs)
    path = path_for(key, root)
    try:
        try:
            os.mkdir(path.parent, 0o700)
        except FileExistsError:
            pass
        why = _trusted_dir(path.parent)
        if why is not None:
            raise OSError(f"{path.parent}: {why}")
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            tmp = None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    except OSError as e:
        STATS["write_failures"] += 1
        cache._warn_once((str(root), "object-write", type(e).__name__),
                         f"jitgrad cache directory {root}: cannot write object code ({e}); the code compiled in "
                         f"this process is used from memory")
        return None
    STATS["files_written"] += 1
    return path


def exists(key: str, root: Path | None = None) -> bool:
    path = path_for(key, root)
    return path is not None and os.path.isfile(path)


# ----------------------------------------------------------------------------------------------------- locks

class BuildLock:
    """An exclusive ``flock`` on ``<key>.lock`` in the key's shard: one builder of ``key`` across processes.

    ``acquire(block)`` returns True when held (always True without a cache directory or without ``fcntl``:
    nothing to coordinate then).  The kernel drops the lock when the process dies.

    ``flock`` also excludes two descriptors of one process, so the locks this process holds are counted by key
    (``_HERE``): a probe (``held_elsewhere``) that meets another thread of this process, mid-build or mid-probe, is
    not told "another process builds it" (at exit that answer would drop the key from the build processes'
    jobs, and the next run would find it missing)."""

    def __init__(self, key: str, root: Path | None = None):
        self.key = key
        root = cache.cache_dir() if root is None else root
        self.path = None if root is None else Path(root) / key[:2] / f"{key}.lock"
        self.fd = None

    def _open(self):
        """A descriptor of the lock file; None when there is nothing to coordinate (no cache directory, not
        POSIX, a read-only or planted shard: build without the lock)."""
        if self.path is None or _fcntl is None:
            return None
        try:
            os.mkdir(self.path.parent, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW, 0o600)
        except OSError:
            return None

    def acquire(self, block: bool = False) -> bool:
        fd = self._open()
        if fd is None:
            return True
        with _HERE_LOCK:
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
            except OSError:
                got = False
            else:
                got = True
                _HERE.setdefault(self.key, []).append(fd)
        if not got and block:
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX)     # (not under _HERE_LOCK: the holder may be this process)
            except OSError:
                os.close(fd)
                return False
            with _HERE_LOCK:
                _HERE.setdefault(self.key, []).append(fd)
            got = True
        if not got:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            with _HERE_LOCK:
                try:
                    os.close(self.fd)     # closing the last descriptor of the open file drops the flock
                finally:
                    fds = _HERE.get(self.key, [])
                    if self.fd in fds:
                        fds.remove(self.fd)
                    if not fds:
                        _HERE.pop(self.key, None)
                    self.fd = None

    def share(self) -> bool:
        """Hold the lock a thread of this process holds, through a descriptor of the same open file (``dup``):
        the ``flock`` stays until both are closed.  Handed to a build process, that descriptor keeps the key locked
        after this process exits (at exit: the build thread's kernel), with no moment between when another run
        could find it free and the entry missing.  False when no thread here holds it."""
        with _HERE_LOCK:
            fds = _HERE.get(self.key)
            if not fds:
                return False
            self.fd = os.dup(fds[0])
            fds.append(self.fd)
            return True

    def held_here(self) -> bool:
        """A thread of this process holds the lock now."""
        return self.key in _HERE

    def held_elsewhere(self) -> bool:
        """Another process holds the lock now (a build of this key is running there); False when the holder is
        this process (see the class docstring)."""
        fd = self._open()
        if fd is None:
            return False
        with _HERE_LOCK:        # (a thread of ours takes or drops it under this lock: no probe between)
            try:
                if self.key in _HERE:
                    return False
                try:
                    _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                except OSError:
                    return True
                return False
            finally:
                os.close(fd)    # (drops the probe's flock before another thread may try)

    def __enter__(self):
        self.acquire(block=True)
        return self

    def __exit__(self, *exc):
        self.release()


__all__ = ["Blob", "read", "write", "exists", "encode", "decode", "path_for", "BuildLock", "last_error", "STATS"]
