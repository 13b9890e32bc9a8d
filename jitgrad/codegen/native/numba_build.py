"""Compiling with Numba: the kernels ``ir_loops`` cannot render to LLVM IR (``philox``'s normal draws, ``intmath``
calls, float floor division), from their rendered text (``numba_render.py``), keeping the object code Numba emits
(``build.py`` puts it on disk and links it like any other).

Also here: where Numba caches jitgrad's own ``cache=True`` helpers (``numba_cache_dir``: only a directory nobody
else can write, since Numba's index files are pickles), and the opt-in lean LLVM pipeline (``JITGRAD_LEAN_LLVM``).
Nothing here imports Numba until a function is called: a warm start never does.
"""
from __future__ import annotations

import os
import stat
import sys

from pathlib import Path

from . import cache, objload, objstore

LEAN_LLVM = os.environ.get("JITGRAD_LEAN_LLVM", "0") == "1"     # opt-in, see _lean


_HELPERS = ("jitgrad.codegen.kernels.mathlib_numba", "jitgrad.codegen.kernels.intmath", "jitgrad.codegen.kernels.philox")
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
        from . import threads
        threads.configure()         # the threading layer, before Numba can launch one (it is imported now)
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


def compile_module(key: str, source: str, kind: str):
    """Numba's build of ``source`` in memory: ``(cfunc, objstore.Blob or None)``; no Blob for code with this
    process's addresses baked in (never persisted)."""
    with _ObjectCapture():
        mod = cache._in_memory(cache._module_name(kind, key), key, source)
    fn = mod.kernel if kind == "kernel" else mod.entry
    lib = fn._library
    blob = None
    if not lib.has_dynamic_globals:
        blob = objstore.Blob(key, fn.native_name, lib._get_compiled_object(),
                             objload.external_symbols(lib._final_module))
    return fn, blob


def inspect_module(key: str, source: str):
    """A Numba module of a kernel's text, for tests and introspection (``build.build_module``)."""
    return cache._in_memory(cache._module_name("kernel", key) + "_inspect", key, source)
