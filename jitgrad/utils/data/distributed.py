"""``torch.utils.data.distributed``: :class:`DistributedSampler`, each rank's share of a dataset's indices.

The class lives with the process groups it reads its rank and world size from (``jitgrad/distributed/
sampler.py``); importing it loads no MPI.
"""
from ...distributed.sampler import DistributedSampler

__all__ = ["DistributedSampler"]
