"""Process-wide settings that both the eager runtime and codegen read (neither imports the other, both import ir).

- ``num_threads`` (``torch.set_num_threads``): the intra-op thread count.  It sets OpenBLAS's thread count at once
  (eager and compiled matmuls: the count ``ir/ops/blas.all_threads`` sets for large GEMMs); with 1,
  graphs compiled from then on plan every loop serial (``codegen/program/layout.py``), and those compiled before
  keep their launches off the pool from their next call (``codegen/native/workpool.follow_threads``: the same
  chunks on the calling thread, the same bits); with ``n`` under the pool's size, ``n - 1`` of its workers take
  part in the rounds from the next launch and the others sleep (the same chunks, the same bits).  The worker pool
  of parallel compiled kernels (``codegen/native/workpool.py``) keeps its size (``default_threads()``:
  ``NUMBA_NUM_THREADS``, ``OMP_NUM_THREADS`` or the cores, shared between a launcher's processes).  ``None``: not
  set.
- ``num_interop_threads`` (``torch.set_num_interop_threads``): recorded and reported only; jitgrad runs no
  inter-op thread pool.
- ``matmul_precision`` (``torch.set_float32_matmul_precision``): recorded and reported only; float32 matmuls on
  the CPU are computed in float32 whatever it says (as torch's CPU matmuls; TF32/bfloat16 passes are GPU things).
- ``deterministic`` / ``deterministic_warn_only`` (``torch.use_deterministic_algorithms``): results that do not
  depend on when a build finishes.  By default a compiled function serves its first calls eagerly (or on the
  interpreter) while its code builds and switches at the first call after the code is ready, and an eager op
  switches from NumPy to its native kernel once the kernel is linked; eager, interpreted and compiled code round
  reductions and fused multiply-adds differently, so the switch's timing reaches the last bits.  With the flag, a
  compiled function builds before its first call (as ``background=False``) and eager kernels build at their first
  call (as ``JITGRAD_EAGER_KERNELS=sync``): for a fixed thread count, the same bits run to run.
"""
from __future__ import annotations

import os


class _Settings:
    __slots__ = ("num_threads", "num_interop_threads", "interop_set", "matmul_precision", "deterministic",
                 "deterministic_warn_only")

    def __init__(self):
        self.num_threads = None
        self.num_interop_threads = None
        self.interop_set = False
        self.matmul_precision = "highest"
        self.deterministic = False
        self.deterministic_warn_only = False


STATE = _Settings()


def default_threads() -> int:
    """The thread count when none was set: ``NUMBA_NUM_THREADS``; else ``OMP_NUM_THREADS``, torch's default
    intra-op count (what ``torchrun``, batch schedulers and users set per process), at most one per core this
    process may run on; else its share of the cores (``core_share``).  Read once per process: every large eager
    GEMM asks (an environment read and a system call, ~12,000 instructions a call)."""
    n = _DEFAULT[0]
    if n is None:
        n = _count(os.environ.get("NUMBA_NUM_THREADS"))
        if n is None:
            n = _count(os.environ.get("OMP_NUM_THREADS"))
            n = min(n, _cores()) if n is not None else core_share()
        _DEFAULT[0] = n
    return n


def core_share() -> int:
    """One thread per core this process may run on, shared with the other processes of its job on this machine
    when its launcher says how many there are (``LOCAL_PROCESS_COUNTS``) and left each of them every core (a
    process bound to cores of its own keeps them): ``mpiexec -n 4`` on 16 cores gives each process 4, not 16 (64
    threads on 16 cores, each process's pool spinning for cores the others hold)."""
    cores = _cores()
    if cores != (os.cpu_count() or cores):
        return cores
    return max(1, cores // max([_count(os.environ.get(k)) or 1 for k in LOCAL_PROCESS_COUNTS]))


def numba_threads() -> int:
    """Numba's own thread count (the chunks its parallel kernels split into): ``NUMBA_NUM_THREADS``, else one per
    core this process may run on."""
    return _count(os.environ.get("NUMBA_NUM_THREADS")) or _cores()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# launchers' variables for the processes of one job on this machine: MPICH's (and Intel MPI's) ``mpiexec``,
# Open MPI's, ``torchrun``'s
LOCAL_PROCESS_COUNTS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")


def _count(text):
    """A positive thread or process count from an environment variable's text, else None (unset, empty, not a
    number: ``OMP_NUM_THREADS="4,2"``'s nested form counts its first level)."""
    if not text:
        return None
    try:
        n = int(text.split(",")[0])
    except ValueError:
        return None
    return n if n >= 1 else None


_DEFAULT = [None]       # default_threads' answer (a forked child reads its own)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _DEFAULT.__setitem__(0, None))


def num_threads() -> int:
    """The intra-op thread count in effect (``torch.get_num_threads``)."""
    n = STATE.num_threads
    if n is None:
        n = _DEFAULT[0]     # (default_threads' answer, once read: no second frame per call)
        if n is None:
            n = default_threads()
    return n
