"""``torch.utils.data``: datasets, samplers and the DataLoader, with torch's behaviour (worker processes
included)."""
from .dataset import Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, random_split
from .sampler import Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler, BatchSampler
from .collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler", "default_collate",
           "default_convert", "DataLoader", "get_worker_info"]
