"""DistributedSampler: each rank's share of a dataset's indices, with torch's semantics.

``jitgrad.utils.data.distributed.DistributedSampler`` is this class.  The partition is torch's: the indices
(a permutation drawn from ``seed + epoch`` when ``shuffle``) are padded by repeating from the start to a multiple
of ``num_replicas`` (or trimmed, with ``drop_last``), and rank r takes every ``num_replicas``-th index starting
at r.  Every rank draws the same permutation, so the shares are disjoint (up to the padding) and cover the
dataset.  The permutation comes from jitgrad's Philox generator, so with ``shuffle=True`` the order differs
from torch's (whose generator is a Mersenne twister); with ``shuffle=False`` the indices are torch's exactly.
"""
from __future__ import annotations

import math

from ..utils.data.sampler import Sampler


class DistributedSampler(Sampler):
    """Restrict data loading to a subset of the dataset, one per rank (torch.utils.data.distributed)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from . import process_group as pgm
            if not pgm.is_initialized():
                raise RuntimeError("DistributedSampler: num_replicas and rank are needed when the default process "
                                   "group is not initialized (call init_process_group first)")
            num_replicas = pgm.get_world_size() if num_replicas is None else num_replicas
            rank = pgm.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            # drop the tail so that every rank gets the same number of samples
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            from ..runtime.generator import Generator
            from ..library.creation.sampling import randperm
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        assert len(indices) == self.total_size
        indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch: with ``shuffle=True`` each epoch draws a new order (the same on every rank)."""
        self.epoch = epoch
