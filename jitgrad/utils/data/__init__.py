"""``torch.utils.data``: datasets, samplers and the DataLoader, with torch's behaviour (worker processes
included)."""
from .dataset import (Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, StackDataset, ChainDataset,
                      random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler, BatchSampler,
                      WeightedRandomSampler)
from .collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "StackDataset",
           "ChainDataset", "random_split", "WeightedRandomSampler", "DistributedSampler", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler", "default_collate",
           "default_convert", "DataLoader", "get_worker_info"]


def __getattr__(name):
    # DistributedSampler lives with the process groups (jitgrad/distributed), which import this package:
    # loaded on first use to keep the import order acyclic
    if name == "DistributedSampler":
        from .distributed import DistributedSampler
        return DistributedSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
