"""Generated Python code: a rendered text compiled into functions, its text kept where tracebacks read it.

``make`` compiles each distinct text once (the eager entries and ``dispatch._record``, rendered by
``entry_source.py``; ``backward/graph_walk.py``'s slot copier) and makes its functions over the globals of the
module each serves.  The text goes into ``linecache`` (``traceback``, ``inspect.getsource``) and into a file of the
cache directory: CPython 3.11's default traceback printer (an uncaught exception in a script) reads a frame's line
from the frame's file, never from ``linecache``, so a frame in a generated entry showed no line.  Either way the
walks to the user's line skip it as jitgrad's own code (``ir/own_code.py``).

Each text is written once, to ``<cache dir>/generated/<label>-<digest of the text>.py``: a temporary file, then
linked to its name (the first writer wins; a file already there is used when its bytes are the text's).  Nothing
already in the cache directory is ever rewritten or removed.  Without a usable cache directory (missing and not
creatable, read-only, not private to the user) or a usable file, the text lives in ``linecache`` only, under a name
inside the package.

The directory is the compiled code's (codegen/native/cache.py): ``JITGRAD_CACHE_DIR``, default ``~/.cache/jitgrad``,
created 0o700, refused when it is not the user's own or is group- or other-writable.  Eager runtime/ does not import
codegen/, so those rules are restated here.
"""
from __future__ import annotations

import hashlib
import linecache
import os
import re
import stat
from types import CodeType, FunctionType

from ..ir.own_code import add_generated

_HERE = os.path.dirname(os.path.abspath(__file__))
_CODES: dict = {}       # text -> (its file name, its module's code): each distinct text is compiled once
SOURCES: dict = {}      # file name -> text, of every text compiled here (the printer's)
_DIRS: dict = {}        # cache directory -> its generated/ directory, None when unusable (judged once a process)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _cache_root() -> str:
    raw = os.environ.get("JITGRAD_CACHE_DIR", "")
    return os.path.abspath(os.path.expanduser(raw) if raw else os.path.join(os.path.expanduser("~"), ".cache",
                                                                                "jitgrad"))


def _private(path: str, root: bool) -> bool:
    """Whether ``path`` is a directory of the user's own that others cannot write, made (0o700) when missing.  The
    cache directory itself (``root``) may be a symbolic link, judged by its target, and gets its missing parents;
    the generated/ directory inside it must be a real directory."""
    try:
        if not os.path.lexists(path):
            if root:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)       # (mkdir's mode is masked by the umask)
            except FileExistsError:
                pass
        st = os.stat(path) if root else os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _directory() -> str | None:
    root = _cache_root()
    if root not in _DIRS:
        sub = os.path.join(root, "generated")
        _DIRS[root] = sub if _private(root, True) and _private(sub, False) else None
    return _DIRS[root]


def _holds(path: str, data: bytes) -> bool:
    """Whether the file ``path`` holds ``data``; False when it is missing.  Raises OSError for anything else there (a
    link, another kind of file, other bytes): it is left alone."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks, n = [], 0
        while n <= len(data) and (chunk := os.read(fd, len(data) + 1 - n)):
            chunks.append(chunk)
            n += len(chunk)
    finally:
        os.close(fd)
    if b"".join(chunks) != data:
        raise OSError(f"{path} holds other bytes")
    return True


def _write(d: str, path: str, data: bytes) -> None:
    """``data`` under ``path``, atomically: a temporary file in ``d`` linked to the name (first writer wins)."""
    import tempfile
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=d)       # mode 0o600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:         # a filesystem without hard links
            if not os.path.lexists(path):
                os.replace(tmp, path)
                tmp = None
        if not _holds(path, data):
            raise OSError(f"{path} vanished")
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def on_disk(text: str, label: str) -> str | None:
    """The file in the cache directory holding ``text`` (written now when missing; ``label`` starts its name),
    counted as jitgrad's own code (``ir/own_code.py``); None when there is no usable cache directory or file."""
    d = _directory()
    if d is None:
        return None
    data = text.encode("utf-8")
    stem = re.sub(r"[^A-Za-z0-9_.]+", "-", label).strip("-")[:40]
    path = os.path.join(d, f"{stem}-{hashlib.sha256(data).hexdigest()[:32]}.py")
    try:
        if not _holds(path, data):
            _write(d, path, data)
    except OSError:
        return None
    add_generated(path)
    return path


def make(text: str, name: str, namespace: dict, label: str):
    """The function ``name`` that ``text`` defines, its globals ``namespace`` (the dict of the module it serves, so it
    reads that module's names as the module's own functions do).  The text is kept in ``linecache`` under its file
    name, for tracebacks and ``inspect.getsource``, and in that file when the cache directory takes it (``on_disk``;
    its name starts with ``label``)."""
    hit = _CODES.get(text)
    if hit is None:
        # a file in the cache directory (the default traceback printer reads lines from files), else a name inside
        # the package; either way the frame walks that look for the user's line skip it as jitgrad's own code
        filename = on_disk(text, label) or os.path.join(_HERE, f"<generated {label}>")
        hit = _CODES[text] = (filename, compile(text, filename, "exec", dont_inherit=True))
        SOURCES[filename] = text
    filename, module = hit
    # (mtime None: linecache.checkcache keeps the entry)
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    code = next(c for c in module.co_consts if type(c) is CodeType and c.co_name == name)
    return FunctionType(code, namespace, name)


def source_of(fn) -> str | None:
    """The generated text of a function made here (of the entry an op's factory made), else None."""
    return SOURCES.get(fn.__code__.co_filename)


__all__ = ["make", "source_of", "on_disk", "SOURCES"]
