"""jitgrad.distributed: torch.distributed's names on MPI (mpi4py).

>>> import jitgrad.distributed as dist
>>> dist.is_initialized()
False

Launch N processes with ``mpiexec -n N python train.py`` (or ``python -m jitgrad.distributed.run -n N
train.py``); in the script, ``dist.init_process_group("mpi")`` takes the rank and world size from MPI.
Importing this package loads no MPI: mpi4py is imported by ``init_process_group`` (install the
``distributed`` extra: ``pip install 'jitgrad[distributed]'``).
"""
from .collectives import (Work, all_gather, all_gather_into_tensor, all_reduce, barrier, broadcast,  # noqa: F401
                          reduce_scatter)
from .process_group import (Backend, ProcessGroup, ReduceOp, destroy_process_group, get_backend,  # noqa: F401
                            get_rank, get_world_size, init_process_group, is_available, is_initialized,
                            is_mpi_available, new_group)
from .sampler import DistributedSampler  # noqa: F401
from .watchdog import DistBackendError  # noqa: F401


class GroupMember:
    """torch.distributed.GroupMember: ``WORLD`` is None (the default group)."""

    WORLD = None


__all__ = ["Backend", "DistBackendError", "DistributedSampler", "GroupMember", "ProcessGroup", "ReduceOp", "Work", "all_gather",
           "all_gather_into_tensor", "all_reduce", "barrier", "broadcast", "destroy_process_group", "get_backend",
           "get_rank", "get_world_size", "init_process_group", "is_available", "is_initialized",
           "is_mpi_available", "new_group", "reduce_scatter"]
