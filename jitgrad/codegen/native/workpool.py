"""The worker threads of parallel kernels built without Numba: Numba's ``workqueue`` library, loaded alone.

A parallel kernel (``loops.Kernel.parallel``: its outer loop is a ``prange``) built by ``ir_loops`` splits that loop
into one chunk per worker and hands the chunks to the pool through three C functions of Numba's ``workqueue``
threading layer: ``add_task`` (one task per worker queue), ``ready`` (wake them) and ``synchronize`` (wait for all).
That library is a small C extension that imports nothing from Numba, so loading it costs a ``dlopen``, not
Numba's ~0.7 s import: a cold build of a large graph needs no Numba, and a warm start loads parallel kernels with
llvmlite alone.  It is the layer jitgrad's thread policy uses for Numba-built ``prange`` kernels too
(``threads.py``), and the process has one copy of its state (the same shared object), so both kinds of kernel run
on the same workers.

One launch round per kernel (Numba's own ``parallel_for`` makes two: one to sync a thread-local count, one to
run), and no Python on the way: the kernel calls the pool itself.  The kernels reach the pool through symbols this
module registers with llvmlite before code that needs them is linked (``objload.load``):
``jitgrad_wq_add_task``, ``jitgrad_wq_ready``, ``jitgrad_wq_synchronize`` and the ``int64`` global
``jitgrad_wq_threads`` (the number of worker queues: a launch adds exactly one task per queue, since ``ready``
wakes every queue).  The object code holds no address, so a kernel from the disk cache links in any process.

Not thread-safe: one launch at a time per process (``threads.LAUNCH_LOCK``, held around calls of graphs with a
parallel kernel).  After a fork the child's pool is empty and the library starts new workers at the child's first
launch (its own ``pthread_atfork`` handler); ``threads.py`` pins them again.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import threading

from ...ir import settings

SYMBOLS = ("jitgrad_wq_add_task", "jitgrad_wq_ready", "jitgrad_wq_synchronize", "jitgrad_wq_threads")
_lock = threading.Lock()
_LIB = None
_THREADS = ctypes.c_int64(0)    # the global the kernels read (its address is the symbol jitgrad_wq_threads)


def default_threads() -> int:
    """How many workers: ``NUMBA_NUM_THREADS``, else one per core this process may run on (Numba's rule, so a
    pool Numba launches first has the same size; ``ir/settings.default_threads``).  ``torch.set_num_threads`` does
    not resize the pool: Numba's own parallel kernels may share it and assume its size."""
    return settings.default_threads()


def _library_path() -> str | None:
    mod = sys.modules.get("numba.np.ufunc.workqueue")
    if mod is not None:
        return getattr(mod, "__file__", None)
    spec = importlib.util.find_spec("numba")     # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "np", "ufunc")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(folder, "workqueue" + suffix)
        if os.path.exists(path):
            return path
    return None


def library():
    """The ``workqueue`` extension module (loaded once, without importing Numba), or None when it is missing."""
    global _LIB
    if _LIB is None:
        with _lock:
            if _LIB is None:
                mod = sys.modules.get("numba.np.ufunc.workqueue")
                if mod is None:
                    path = _library_path()
                    if path is None:
                        _LIB = False
                        return None
                    # the same file Numba would load: one copy of the pool's C state per process either way
                    loader = importlib.machinery.ExtensionFileLoader("numba.np.ufunc.workqueue", path)
                    spec = importlib.util.spec_from_file_location("numba.np.ufunc.workqueue", path, loader=loader)
                    mod = importlib.util.module_from_spec(spec)
                    loader.exec_module(mod)
                _LIB = mod
    return _LIB or None


def available() -> bool:
    """Whether parallel kernels can run on the pool without Numba."""
    return library() is not None


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()        # a thread of the parent may have held it (in ``launch``) at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _worker_count(lib) -> int:
    """The number of queues the library launched: its initial thread count, read on a fresh thread (whose
    thread-local count is unset, so the library answers with the launch count)."""
    get = ctypes.CFUNCTYPE(ctypes.c_int)(lib.get_num_threads)
    out = []
    t = threading.Thread(target=lambda: out.append(get()))
    t.start()
    t.join()
    return int(out[0])


def launch() -> int:
    """Start the workers (once per process; a no-op when Numba or an earlier call started them) and return how
    many there are.  Registers the kernels' symbols with llvmlite."""
    lib = library()
    if lib is None:
        raise RuntimeError("parallel kernels need Numba's workqueue library, which is not installed")
    with _lock:
        if _THREADS.value == 0:
            ctypes.CFUNCTYPE(None, ctypes.c_int)(lib.launch_threads)(default_threads())
            _THREADS.value = _worker_count(lib)
            import llvmlite.binding as ll
            ll.add_symbol("jitgrad_wq_add_task", lib.add_task)
            ll.add_symbol("jitgrad_wq_ready", lib.ready)
            ll.add_symbol("jitgrad_wq_synchronize", lib.synchronize)
            ll.add_symbol("jitgrad_wq_threads", ctypes.addressof(_THREADS))
    return int(_THREADS.value)


def threads() -> int:
    """The number of workers (0 before ``launch``)."""
    return int(_THREADS.value)


_TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def run_on_each(fn) -> list:
    """Call ``fn(i)`` once on each worker ``i`` (Python, under the GIL; for set-up such as pinning) and return the
    results in worker order.  The caller holds ``threads.LAUNCH_LOCK``."""
    lib = library()
    n = launch()
    results, errors = [None] * n, []

    def task(args, dims, steps, data):
        i = int(args or 0)
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - re-raised by the launching thread
            errors.append(e)
    cb = _TASK(task)
    add = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)(lib.add_task)
    for i in range(n):                  # one task per queue: ``ready`` wakes them all
        add(ctypes.cast(cb, ctypes.c_void_p), i, None, None, None)
    ctypes.CFUNCTYPE(None)(lib.ready)()
    ctypes.CFUNCTYPE(None)(lib.synchronize)()
    if errors:
        raise errors[0]
    return results


__all__ = ["available", "launch", "threads", "run_on_each", "default_threads", "library", "SYMBOLS"]
