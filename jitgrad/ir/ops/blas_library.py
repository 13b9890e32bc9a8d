"""SciPy's OpenBLAS, the library behind every ``matmul`` (``blas.py`` calls it): loaded once, its kernels chosen
for this CPU, its thread-count controls and ``?gemm`` addresses.

Why jitgrad touches the kernel choice: OpenBLAS built with ``DYNAMIC_ARCH`` picks its kernels at load time, from
the CPU or from ``OPENBLAS_CORETYPE``. On CPUs with AVX-512 it may pick (or be told to pick) the AVX2
``Haswell`` kernels, which are ~1.6x slower on B1's GEMMs than the AVX-512 ``SkylakeX`` kernels
(measured 2026-11-23, 256x784 @ 784x512 float32: 1.02 ms vs 0.64 ms). So, when jitgrad first needs BLAS:

* ``JITGRAD_BLAS_CORETYPE`` unset or ``auto``: if the CPU has AVX-512 (F, CD, BW, DQ, VL) and SciPy's OpenBLAS
  runs narrower kernels, jitgrad selects ``SkylakeX`` for **SciPy's** OpenBLAS (NumPy's own OpenBLAS, which
  ``np.dot``/``@`` on arrays use, is a separate library and is left alone);
* ``keep``: jitgrad never changes the kernel choice;
* any other value (``Haswell``, ``SkylakeX``, ``Zen`` ...): that OpenBLAS core type.

The switch uses OpenBLAS's own re-initialisation entry points (``gotoblas_dynamic_quit``/``_init``, with
``OPENBLAS_CORETYPE`` set only for that call and restored at once), right after SciPy loads its BLAS for jitgrad.
If the user's code had loaded SciPy's BLAS already, the switch happens all the same, once, at jitgrad's first
matmul: do not let that first matmul race a SciPy BLAS call in another thread (or set ``keep``).
:func:`info` says what was chosen and why.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading

ENV_VAR = "JITGRAD_BLAS_CORETYPE"
_AVX512 = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
_WIDE = frozenset({"skylakex", "cooperlake", "sapphirerapids"})   # AVX-512 kernels already
_LOCK = threading.Lock()
LIBRARY: dict = {}          # "lib", "corename", "before", "action", "addresses"


def _cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _library_path():
    import scipy
    base = os.path.dirname(os.path.dirname(scipy.__file__))
    found = sorted(glob.glob(os.path.join(base, "scipy.libs", "libscipy_openblas*.so*")))
    return found[0] if found else None


def _loaded(path) -> bool:
    try:
        with open("/proc/self/maps") as f:
            return any(path in line for line in f)
    except OSError:
        return False


def _corename(lib) -> str:
    for sym in ("scipy_openblas_get_corename", "openblas_get_corename"):
        fn = getattr(lib, sym, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            return (fn() or b"").decode().strip()
    return ""


def _wanted(current: str):
    setting = os.environ.get(ENV_VAR, "auto").strip()
    if setting.lower() == "keep":
        return None, "JITGRAD_BLAS_CORETYPE=keep"
    if setting.lower() != "auto":
        return (None if setting.lower() == current.lower() else setting), f"JITGRAD_BLAS_CORETYPE={setting}"
    if current.lower() in _WIDE:
        return None, "OpenBLAS already runs AVX-512 kernels"
    if not _AVX512 <= _cpu_flags():
        return None, "the CPU has no AVX-512 (F, CD, BW, DQ, VL)"
    return "SkylakeX", f"the CPU has AVX-512 and OpenBLAS chose {current or 'its default'}"


def load():
    """Load SciPy's BLAS with the kernels :func:`_wanted` asks for; idempotent."""
    with _LOCK:
        if "lib" in LIBRARY:
            return
        path = _library_path() if sys.platform.startswith("linux") else None
        action = "left as loaded"
        before = ""
        if path is None:                      # not the scipy-openblas wheel layout: use SciPy's BLAS as it is
            from scipy.linalg import cython_blas  # noqa: F401
            LIBRARY.update(lib=None, corename="", before="", action="unknown BLAS library: left as loaded",
                          addresses={})
            return
        # when SciPy had not loaded its BLAS yet, nothing else can be inside it while it is re-initialised
        LIBRARY["was_loaded"] = _loaded(path)
        lib = ctypes.CDLL(path)     # the library SciPy's BLAS wrappers call (importing scipy.linalg costs ~0.3 s)
        before = _corename(lib)
        want, why = _wanted(before)
        if want is not None:
            quit_, init = getattr(lib, "gotoblas_dynamic_quit", None), getattr(lib, "gotoblas_dynamic_init", None)
            if quit_ is not None and init is not None:
                old = os.environ.get("OPENBLAS_CORETYPE")
                os.environ["OPENBLAS_CORETYPE"] = want
                try:
                    quit_()
                    init()
                finally:
                    if old is None:
                        del os.environ["OPENBLAS_CORETYPE"]
                    else:
                        os.environ["OPENBLAS_CORETYPE"] = old
                action = f"switched to {want}: {why}"
            else:
                action = f"wanted {want} ({why}), but this OpenBLAS has no re-initialisation entry points"
        else:
            action = f"left as loaded: {why}"
        LIBRARY.update(lib=lib, corename=_corename(lib), before=before, action=action, addresses={})


def info() -> dict:
    """What BLAS jitgrad's matmuls run: ``{"library", "corename", "before", "action"}``.

    >>> from jitgrad.ir.ops import blas_library
    >>> sorted(blas_library.info())
    ['action', 'before', 'corename', 'library']
    """
    load()
    lib = LIBRARY["lib"]
    return {"library": getattr(lib, "_name", None), "corename": LIBRARY["corename"], "before": LIBRARY["before"],
            "action": LIBRARY["action"]}


def thread_control():
    """``(get, set)``: ctypes functions reading and setting the number of threads SciPy's OpenBLAS runs a call on
    (``BlasPacer`` lowers it while the cores are contended); None when this BLAS has none."""
    load()
    lib = LIBRARY["lib"]
    if lib is None:
        return None
    get = getattr(lib, "scipy_openblas_get_num_threads", None) or getattr(lib, "openblas_get_num_threads", None)
    set_ = getattr(lib, "scipy_openblas_set_num_threads", None) or getattr(lib, "openblas_set_num_threads", None)
    if get is None or set_ is None:
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    set_.restype, set_.argtypes = None, [ctypes.c_int]
    return get, set_


def told_count() -> bool:
    """Whether OpenBLAS was told its thread count (its variables); else it took every core."""
    return any(os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"))


def gemm_address(name: str) -> int:
    """Address of SciPy's Fortran-ABI ``sgemm``/``dgemm`` (compiled graphs call it directly)."""
    addr = LIBRARY.get("addresses", {}).get(name)
    if addr is None:
        load()
        fn = getattr(LIBRARY["lib"], f"scipy_{name}_", None) if LIBRARY["lib"] is not None else None
        if fn is not None:          # the routine cython_blas forwards to, without importing scipy.linalg
            addr = LIBRARY["addresses"][name] = ctypes.cast(fn, ctypes.c_void_p).value
            return addr
        from scipy.linalg import cython_blas
        cap = cython_blas.__pyx_capi__[name]
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
        get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        addr = LIBRARY["addresses"][name] = get_ptr(cap, get_name(cap))
    return addr
