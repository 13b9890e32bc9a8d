"""torch.nn.parallel: DistributedDataParallel over jitgrad.distributed (MPI)."""
from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["DistributedDataParallel"]
