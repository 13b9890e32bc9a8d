"""The thread policy of parallel kernels: which threading layer runs ``prange`` loops, and how many threads.

Policy (knobs in parentheses):
- **Layer: fork-safe, and sleeping rather than spinning.**  Numba's default picks GNU OpenMP when it is present;
  its workers spin while they wait, so a busy machine (another process on one core, or OpenBLAS's own spinning
  workers) makes a kernel wait for descheduled spinners: 5-10x slower instead of 2x.  And a process that ran a
  GNU OpenMP region cannot fork: the child is killed ("fork() called from a process already using GNU OpenMP").
  jitgrad asks Numba for its ``forksafe`` layer: TBB when installed, else Intel OpenMP, else the built-in
  ``workqueue``, whose workers sleep on a condition until work arrives and split a loop into equal static
  chunks, so a loop slows down at most in proportion to the cores taken from it.  (``JITGRAD_THREADING_LAYER``
  picks another Numba layer name; ``NUMBA_THREADING_LAYER``, when set, is the user's choice and always wins.)
- **Threads: one per core this process may run on** (``os.sched_getaffinity``), Numba's default, or
  ``NUMBA_NUM_THREADS``.  Kernels below ``loops.PARALLEL_MIN`` elements run serially: waking threads costs
  more than they save there.
- **OpenBLAS workers sleep soon when idle** (``OPENBLAS_THREAD_TIMEOUT``, set to 20 by ``import jitgrad``
  unless already set): by default they spin ~0.1 s after every BLAS call, taking the cores Numba's workers need;
  at 20 they spin ~0.4 ms, enough to stay awake between one step's GEMMs (4, sleeping at once, made every small
  GEMM pay a wake-up) (``tests/test_threads.py`` counts the CPU time a process burns while it sleeps after a GEMM).
- **One parallel launch at a time per process.**  ``workqueue`` is not thread-safe (two threads launching
  parallel loops at once abort the process), so compiled calls whose graph has a parallel kernel take
  ``LAUNCH_LOCK``; concurrent calls of such graphs would compete for the same cores anyway.

The layer is chosen once, before this process's first parallel launch; if other code already launched one with
another layer, that layer stays (Numba cannot switch).
"""
from __future__ import annotations

import os
import threading

LAUNCH_LOCK = threading.Lock()
_configured = False


def configure():
    """Choose the threading layer (see the module docstring); cheap after the first call."""
    global _configured
    if _configured:
        return
    _configured = True
    if os.environ.get("NUMBA_THREADING_LAYER"):
        return
    from numba import config
    config.THREADING_LAYER = os.environ.get("JITGRAD_THREADING_LAYER", "forksafe")


def layer() -> str | None:
    """The layer in use, once a parallel loop ran (None before)."""
    import numba
    try:
        return numba.threading_layer()
    except ValueError:
        return None


__all__ = ["configure", "layer", "LAUNCH_LOCK"]
