"""The cache directory, the keys, and the job sources build processes read.

Compiled graphs keep object code (``objstore.py``, see ``build.py``); this module gives them the cache directory
(``cache_dir``), the keys (``cache_key``), the sources handed to build processes (``store_entry``: a build
process checks a job's text against its key before compiling it) and in-memory modules for Numba's builds
(``_in_memory``: nothing generated is ever imported from disk).  (Generated modules loaded through Numba's own
``cache=True`` files are gone: Numba's index files are pickles, so a cache entry was code.)

Layout: ``<cache_dir()>/<key[:2]>/<key>.py`` (job sources), ``<key>.jgo`` (object code, ``objstore.py``),
``<key>.lock`` (build locks), and ``<cache_dir()>/numba`` (Numba's files for jitgrad's own helpers, only when
Numba's usual place is not private: ``numba_build.numba_cache_dir``).

Keys: ``cache_key(source, extra)`` hashes the text with every compile-time setting not in it (``extra``: a tuple
of ``str``/``bytes``/``int``/``float``/``bool``/``None`` or tuples of those), the Numba/llvmlite/NumPy/Python
versions, jitgrad's sources (their content digest) and the host CPU and its features.

Guarantees
----------
* The directory (``JITGRAD_CACHE_DIR``, default ``~/.cache/jitgrad``) is created with mode ``0o700``.  An
  existing one that is not a directory, not owned by the current user, group/other-writable, or not
  writable is refused: one ``JitgradCacheWarning`` per directory and reason, and ``cache_dir()`` returns
  ``None``; callers then build in memory (still works, just no reuse across processes).
* Writes are atomic: the source goes to a temp file in the entry's directory, is fsync'ed, then published
  with ``os.link`` (first writer wins; the loser verifies and uses the winner's file) or ``os.replace``
  (rebuild).  A reader never sees a partial file; concurrent processes on the same key both succeed.
* An existing entry is never trusted: its bytes must equal the source being stored.  An identical entry is not
  rewritten.  A corrupt, truncated, or non-regular entry, or a symlink, is replaced (with a
  ``JitgradCacheWarning``); the link itself is replaced, its target is never opened or touched.
* ``clear()`` only removes files that have the names this module and ``objstore.py`` create (entries, object
  files, build locks, their temp files, Numba/Python cache files of older versions); it never follows symlinks
  and never touches anything else.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import linecache
import os
import re
import stat
import sys
import tempfile
import threading
import types
import warnings
from dataclasses import dataclass, asdict
from pathlib import Path

__all__ = ["JitgradCacheWarning", "CacheStats", "stats", "cache_dir", "cache_key", "entry_path", "clear",
           "store_entry"]

ENV_VAR = "JITGRAD_CACHE_DIR"
FORMAT = "jitgrad-codegen-cache/1"          # bump to invalidate every key when the layout/contract changes
_FALLBACK_VERSION = "0.1.0"                  # jitgrad's version when it is not installed (source checkout)
_KEY_RE = re.compile(r"[0-9a-f]{64}")
_SHARD_RE = re.compile(r"[0-9a-f]{2}")
_ENTRY_RE = re.compile(r"([0-9a-f]{64})\.(?:py|jgo|lock)")     # sources, object files (objstore.py), locks
_TMP_RE = re.compile(r"\.([0-9a-f]{64})\.[^/]*\.tmp")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_POSIX = os.name == "posix"


class JitgradCacheWarning(UserWarning):
    """The compilation cache could not be used as is (unsafe directory, corrupt entry, failed write)."""


@dataclass
class CacheStats:
    """Counters of this process: ``hits`` (entry on disk and intact), ``misses`` (entry written),
    ``rebuilt`` (corrupt entry replaced; also counted in ``misses``), ``in_memory`` (compiled without the disk
    cache)."""
    hits: int = 0
    misses: int = 0
    rebuilt: int = 0
    in_memory: int = 0

    def reset(self) -> None:
        self.hits = self.misses = self.rebuilt = self.in_memory = 0

    def as_dict(self) -> dict:
        return asdict(self)


stats = CacheStats()
_lock = threading.RLock()
_warned: set = set()


def _warn_once(token, message: str) -> None:
    with _lock:
        if token in _warned:
            return
        _warned.add(token)
    warnings.warn(JitgradCacheWarning(message), stacklevel=3)


# ---------------------------------------------------------------------------------------------------- directory

_pinned = threading.local()       # a background build's directory, fixed when the build was queued


@contextlib.contextmanager
def pinned_dir(path: Path):
    """Within this thread, ``cache_dir()`` judges and returns ``path`` whatever ``$JITGRAD_CACHE_DIR`` says
    now: a build queued on the background thread writes where the cache was when it was queued, not where a
    later change of the variable points (a test's own directory, another project's cache)."""
    old = getattr(_pinned, "path", None)
    _pinned.path = path
    try:
        yield
    finally:
        _pinned.path = old


def _configured_dir() -> Path:
    pinned = getattr(_pinned, "path", None)
    if pinned is not None:
        return pinned
    raw = os.environ.get(ENV_VAR, "")
    p = Path(raw).expanduser() if raw else Path.home() / ".cache" / "jitgrad"
    return Path(os.path.abspath(p))


def _unsafe_reason(path: Path) -> str | None:
    """Why ``path`` (an existing directory entry) must not be used as the cache, or None when it is fine."""
    try:
        st = os.stat(path)       # the root may be a symlink (e.g. ~/.cache on another disk): judge its target
    except OSError as e:
        return f"cannot stat it ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if _POSIX:
        uid = os.geteuid()
        if st.st_uid != uid:
            return f"it is owned by uid {st.st_uid}, not by the current user (uid {uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"it is group- or other-writable (mode {stat.S_IMODE(st.st_mode):#o})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "it is not writable"
    return None


def cache_dir() -> Path | None:
    """The cache directory (``$JITGRAD_CACHE_DIR`` or ``~/.cache/jitgrad``), created private (0o700) if missing.

    Returns None (after one ``JitgradCacheWarning`` per directory and reason) when the directory cannot be
    created or is unsafe: not a directory, not owned by the current user, group/other-writable, or not
    writable.  Callers then compile in memory only.
    """
    path = _configured_dir()
    try:
        if not os.path.lexists(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)      # mkdir's mode is masked by the umask: make sure, it is ours
            except FileExistsError:
                pass                       # another process created it meanwhile: judged below like any other
    except OSError as e:
        _warn_once((str(path), "create"), f"jitgrad cache directory {path} is not used: cannot create it "
                                          f"({e.strerror or e}); compiling in memory only")
        return None
    reason = _unsafe_reason(path)
    if reason is not None:
        _warn_once((str(path), reason), f"jitgrad cache directory {path} is not used: {reason}; "
                                        f"compiling in memory only")
        return None
    return path


# ---------------------------------------------------------------------------------------------------- keys

def _dist_version(name: str) -> str:
    """The installed version of distribution ``name``: from its ``<name>-<version>.dist-info`` directory on
    ``sys.path`` (what importlib.metadata finds first, without importing it: ~30 ms of a warm start), else
    importlib.metadata."""
    prefix = name.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info") and n.lower().startswith(prefix):
                return n[len(prefix):-len(".dist-info")]
    import importlib.metadata
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return _FALLBACK_VERSION if name == "jitgrad" else "unknown"


def _cpu() -> tuple:
    """(triple, cpu name, cpu features), honouring Numba's NUMBA_CPU_NAME / NUMBA_CPU_FEATURES overrides."""
    triple, name, feats = _host()
    return triple, os.environ.get("NUMBA_CPU_NAME") or name, os.environ.get("NUMBA_CPU_FEATURES") or feats


_HOST = []


def _host() -> tuple:
    """The process's triple and the host's cpu name and features, asked of LLVM once a process: each call into
    LLVM gives the GIL up and takes it back (a background build asks per module, while calls run)."""
    if not _HOST:
        import llvmlite.binding as ll
        f = ll.get_host_cpu_features()
        feats = f.flatten() if hasattr(f, "flatten") else str(f)
        # LLVM tunes Intel's AVX-512 cores to prefer 256-bit vectors (the loop vectoriser's width); jitgrad's
        # first tier writes the host's full width already (``llvm_build.vector_bits``), and at the full width
        # the optimised build's kernels ran B2 at 1.18x its memory floor against 1.43x, B9's GELU kernels 2.5
        # against 3.1 ms (a Xeon reported as "rocketlake", 2026-12-01), and batched and lone reductions kept
        # equal bits (tests/test_loop_batches.py, which failed at 256).  A different feature string is a
        # different cache key: code built for one width never loads for the other.
        if "+avx512f" in feats.split(","):
            feats += ",-prefer-256-bit"
        _HOST.append((ll.get_process_triple(), ll.get_host_cpu_name(), feats))
    return _HOST[0]


# the packages whose source decides what a cached program is and means: codegen (generated source imports from
# it, mathlib..., and Numba's cache does not notice when an imported module changes), and the trace, the passes
# and the step's inputs, outputs and writes (tracer, ir, jit).  A source checkout edited between runs (the version
# unchanged) loaded programs built by other code while only codegen/ was digested: B9's compiled loss went from
# 4.052 to 4.19 with a warm cache, on a tree whose codegen/ matched the entries' but whose passes did not.
_DIGESTED = ("codegen", "ir", "jit", "tracer")


def _codegen_digest() -> str:
    """Digest of the ``_DIGESTED`` packages' ``*.py`` files (their paths and contents)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent.parent      # jitgrad
    for p in sorted(q for d in _DIGESTED for q in (root / d).rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        try:
            data = p.read_bytes()
        except OSError:
            data = b"<unreadable>"
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _environment() -> tuple:
    """Everything besides the source that decides what the compiled code is (computed once per process)."""
    impl = sys.implementation
    return (
        ("format", FORMAT),
        ("jitgrad", _dist_version("jitgrad")),
        ("codegen", _codegen_digest()),
        ("numba", _dist_version("numba")),
        ("llvmlite", _dist_version("llvmlite")),
        ("numpy", _dist_version("numpy")),
        ("python", f"{impl.name}-{sys.version}-{getattr(sys, 'abiflags', '')}"),
        ("cpu", _cpu()),
    )


def _encode(value) -> bytes:
    """Unambiguous, process-independent encoding of a key component."""
    if isinstance(value, bytes):
        tag, data = b"b", value
    elif isinstance(value, str):
        tag, data = b"s", value.encode("utf-8", "surrogatepass")
    elif value is None or isinstance(value, (bool, int, float)):
        tag, data = b"r", f"{type(value).__name__}:{value!r}".encode()
    elif isinstance(value, tuple):
        tag, data = b"t", b"".join(_encode(v) for v in value)
    else:
        raise TypeError(f"cache_key: extra items must be str, bytes, int, float, bool, None or tuples of them, "
                        f"not {type(value).__name__} (its repr may differ between processes)")
    return tag + len(data).to_bytes(8, "little") + data


def cache_key(source: str, extra=()) -> str:
    """sha256 hex digest of ``source`` + ``extra`` + jitgrad/codegen, Numba, llvmlite, NumPy and Python
    versions + host CPU (name and features)."""
    if not isinstance(source, str):
        raise TypeError(f"cache_key: source must be str, not {type(source).__name__}")
    h = hashlib.sha256()
    h.update(_encode(_environment()))
    h.update(_encode(tuple(extra)))
    h.update(_encode(source))
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------- entries

def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 64 lowercase hex digits (from cache_key()), got {key!r}")


def entry_path(key: str, directory: Path | None = None) -> Path | None:
    """Where the entry for ``key`` lives (``<dir>/<key[:2]>/<key>.py``); None when there is no cache dir."""
    _check_key(key)
    root = directory if directory is not None else cache_dir()
    return None if root is None else Path(root) / key[:2] / f"{key}.py"


def _read_entry(path: Path, expected: bytes) -> str | None:
    """None when ``path`` holds exactly ``expected``; otherwise why not ("missing" when it does not exist).
    Never follows a symlink, never blocks on a FIFO."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "it is not a regular file"
        chunks, n = [], 0
        while n <= len(expected):
            b = os.read(fd, max(len(expected) + 1 - n, 1 << 16))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        data = b"".join(chunks)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    finally:
        os.close(fd)
    if data == expected:
        return None
    if len(data) < len(expected) and expected.startswith(data):
        return f"truncated ({len(data)} of {len(expected)} bytes)"
    return "its content does not match its key"


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _publish(path: Path, data: bytes, key: str, replace: bool, old_mtime_ns: int | None) -> bool:
    """Write ``data`` to ``path`` atomically.  ``replace=False``: only create it; returns False when another
    writer got there first (nothing written).  Raises OSError when the write fails."""
    d = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=d)     # mode 0o600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if old_mtime_ns is not None:
            st = os.stat(tmp)
            if st.st_mtime_ns == old_mtime_ns:     # same-size garbage in the same clock tick: force a new stamp
                os.utime(tmp, ns=(st.st_atime_ns, old_mtime_ns + 1_000_000))
        if replace:
            os.replace(tmp, path)
            published = True
        else:
            try:
                os.link(tmp, path)          # atomic create-if-absent: the first writer wins
                published = True
            except FileExistsError:
                published = False
            except OSError:                 # filesystem without hard links
                os.replace(tmp, path)
                tmp = None
                published = True
        _fsync_dir(d)
        return published
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _store(root: Path, key: str, data: bytes) -> Path:
    """Make ``<root>/<key[:2]>/<key>.py`` hold exactly ``data``; returns its path.  Raises OSError."""
    shard = root / key[:2]
    try:
        os.mkdir(shard, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(shard)
    if not stat.S_ISDIR(st.st_mode):       # a symlink (possibly out of the dir) or a file: do not write into it
        raise OSError(f"{shard} is not a directory (or is a symbolic link)")
    path = shard / f"{key}.py"
    for _ in range(3):
        why = _read_entry(path, data)
        if why is None:
            with _lock:
                stats.hits += 1
            return path
        if why == "missing":
            if _publish(path, data, key, replace=False, old_mtime_ns=None):
                with _lock:
                    stats.misses += 1
                return path
            continue                        # lost the race: verify the winner's file
        try:
            old = os.lstat(path).st_mtime_ns
        except OSError:
            old = None
        warnings.warn(JitgradCacheWarning(f"jitgrad cache entry {path} is corrupt: {why}; rebuilding it"),
                      stacklevel=3)
        _publish(path, data, key, replace=True, old_mtime_ns=old)
        with _lock:
            stats.misses += 1
            stats.rebuilt += 1
        return path
    raise OSError(f"{path} keeps changing under us")


# ---------------------------------------------------------------------------------------------------- modules

def _module_name(name: str, key: str) -> str:
    safe = re.sub(r"\W", "_", str(name), flags=re.ASCII)[:48] or "module"
    return f"_jitgrad_gen_{safe}_{key[:16]}"


def _in_memory(modname: str, key: str, source: str) -> types.ModuleType:
    filename = f"<jitgrad generated {modname}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)   # tracebacks/inspect
    module = types.ModuleType(modname)
    module.CACHE_ENABLED = False
    module.__jitgrad_cache_path__ = None
    prev = sys.modules.get(modname)
    sys.modules[modname] = module
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        if prev is None:
            sys.modules.pop(modname, None)
        else:
            sys.modules[modname] = prev
        raise
    with _lock:
        stats.in_memory += 1
    return module


def store_entry(key: str, source: str) -> Path | None:
    """Write ``source`` as the entry for ``key`` without importing it (a build process will); None when there is
    no usable cache directory or the write failed."""
    _check_key(key)
    root = cache_dir()
    if root is None:
        return None
    try:
        return _store(root, key, source.encode("utf-8", "surrogatepass"))
    except OSError:
        return None


def clear(directory: Path | str | None = None) -> int:
    """Remove the entries this module created (and their temp files and Numba/Python cache files) from
    ``directory`` (default: ``cache_dir()``).  Returns how many files were removed.  Anything else in the
    directory is left alone; symlinks are removed as links, never followed."""
    root = Path(directory) if directory is not None else cache_dir()
    if root is None:
        return 0
    removed = 0

    def unlink(p: Path) -> None:
        nonlocal removed
        try:
            os.unlink(p)
            removed += 1
        except FileNotFoundError:
            pass

    try:
        shards = list(os.scandir(root))
    except OSError:
        return 0
    for shard in shards:
        if not (_SHARD_RE.fullmatch(shard.name) and shard.is_dir(follow_symlinks=False)):
            continue
        sdir = Path(shard.path)
        for e in list(os.scandir(sdir)):
            if e.is_dir(follow_symlinks=False):
                continue
            m = _ENTRY_RE.fullmatch(e.name) or _TMP_RE.fullmatch(e.name)
            if m and m.group(1).startswith(shard.name):
                unlink(Path(e.path))
        pyc = sdir / "__pycache__"
        if os.path.isdir(pyc) and not os.path.islink(pyc):
            for e in list(os.scandir(pyc)):
                if e.is_dir(follow_symlinks=False):
                    continue
                k = e.name.split(".", 1)[0]
                if _KEY_RE.fullmatch(k) and k.startswith(shard.name) and \
                        re.search(r"\.(nbi|nbc|pyc)(\.tmp\.[0-9a-f]+)?$", e.name):
                    unlink(Path(e.path))
            try:
                os.rmdir(pyc)
            except OSError:
                pass
        try:
            os.rmdir(sdir)
        except OSError:
            pass                             # not empty: something that is not ours lives there
    numba_dir = root / "numba"               # Numba's files for jitgrad's helpers (build.numba_cache_dir)
    if os.path.isdir(numba_dir) and not os.path.islink(numba_dir):
        for sub in list(os.scandir(numba_dir)):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in list(os.scandir(sub.path)):
                if not e.is_dir(follow_symlinks=False) and re.search(r"\.(nbi|nbc)$", e.name):
                    unlink(Path(e.path))
            try:
                os.rmdir(sub.path)
            except OSError:
                pass
        try:
            os.rmdir(numba_dir)
        except OSError:
            pass
    # the generated eager entries' texts (runtime/generated_code.py: ``<label>-<32 hex digits>.py``, and the
    # temporary files of their atomic writes), which tracebacks read: a process that made them keeps its functions
    gen_dir = root / "generated"
    if os.path.isdir(gen_dir) and not os.path.islink(gen_dir):
        for e in list(os.scandir(gen_dir)):
            if not e.is_dir(follow_symlinks=False) and _GENERATED_RE.fullmatch(e.name):
                unlink(Path(e.path))
        try:
            os.rmdir(gen_dir)
        except OSError:
            pass
    return removed


_GENERATED_RE = re.compile(r"[A-Za-z0-9_.-]{0,40}-[0-9a-f]{32}\.py|\.[A-Za-z0-9_]+\.tmp")


def _after_fork_in_child():
    global _lock
    _lock = threading.RLock()       # a thread of the parent may have been writing a job's source at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
