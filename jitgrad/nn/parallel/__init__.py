"""torch.nn.parallel: DistributedDataParallel over jitgrad.distributed (MPI); DataParallel (runs the module)."""
from .distributed import DistributedDataParallel
from .data_parallel import DataParallel, data_parallel

DDP = DistributedDataParallel

__all__ = ["DistributedDataParallel", "DataParallel", "data_parallel"]
