"""DataLoader: batches from a dataset through a sampler and a collate function, in this process or in worker
processes (``num_workers > 0``), with torch's arguments, checks and ordering.

Worker processes (``worker.py``) each get their own queue of batch indices, assigned round-robin, and send
collated batches back on one result queue; the loader keeps ``prefetch_factor`` batches per worker in flight and
yields them in sampler order.  Each worker seeds jitgrad's and Python's generators with ``base_seed +
worker_id`` (``base_seed`` drawn from the loader's generator at each epoch), as torch does.
"""
from __future__ import annotations

import multiprocessing
import queue as _queue
import warnings

from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler
from .worker import RESTART, END, ExceptionWrapper, get_worker_info, worker_loop

_UNSET = object()


class DataLoader:
    """Iterate ``dataset`` in batches (torch.utils.data.DataLoader)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in {False, None}:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        if pin_memory:
            from ... import cuda
            if not cuda.is_available():
                warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device "
                              "pinned memory won't be used.", stacklevel=2)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self.batch_sampler if self._auto_collation else self.sampler)

    def __iter__(self):
        if self.num_workers == 0:
            return self._single_process()
        if self.persistent_workers:
            # torch's persistent workers: one set of processes (and dataset copies, seeds, worker_init_fn calls)
            # serves every epoch; each ``iter(loader)`` starts a new epoch on them
            it = self.__dict__.get("_workers_iter")
            if it is None or it.failed:
                it = self.__dict__["_workers_iter"] = _MultiProcessIter(self, persistent=True)
            else:
                it.new_epoch()
            return it
        return _MultiProcessIter(self)

    # ---- in this process ----
    def _single_process(self):
        ds, collate = self.dataset, self.collate_fn
        if self._iterable:
            it = iter(ds)
            if not self._auto_collation:
                for item in it:
                    yield collate(item)
                return
            while True:
                batch = []
                for item in it:
                    batch.append(item)
                    if len(batch) == self.batch_size:
                        break
                if not batch or (self.drop_last and len(batch) < self.batch_size):
                    return
                yield collate(batch)
                if len(batch) < self.batch_size:
                    return
        elif self._auto_collation:
            for indices in self.batch_sampler:
                yield collate([ds[i] for i in indices])
        else:
            for i in self.sampler:
                yield collate(ds[i])

    def _base_seed(self) -> int:
        from ...ir import dtypes as dt
        from ...library.creation.factories import randint
        return int(randint(0, 2 ** 62, (), dtype=dt.int64, generator=self.generator).item())


class _InfiniteConstantSampler:
    """The sampler of an iterable dataset: every index is None (the dataset's iterator decides)."""

    def __iter__(self):
        while True:
            yield None


class _MultiProcessIter:
    """One epoch over worker processes: tasks ``(n, indices)`` go round-robin to the workers' queues; results
    come back on one queue and are yielded in task order."""

    def __init__(self, loader: DataLoader, persistent: bool = False):
        self.loader = loader
        self.persistent = persistent
        self.failed = False
        ctx = loader.multiprocessing_context
        if ctx is None:
            ctx = multiprocessing.get_context()
        elif isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        nw = loader.num_workers
        seed = loader._base_seed()
        self.result_q = ctx.Queue()
        self.index_qs = [ctx.Queue() for _ in range(nw)]
        self.workers = []
        for w in range(nw):
            p = ctx.Process(target=worker_loop, daemon=True,
                            args=(loader.dataset, self.index_qs[w], self.result_q, loader.collate_fn,
                                  loader._auto_collation, loader.batch_size, loader.drop_last, loader._iterable,
                                  seed + w, w, nw, loader.worker_init_fn))
            p.start()
            self.workers.append(p)
        self.sent = 0
        self.done = False
        self._start_epoch()

    def _start_epoch(self):
        loader, nw = self.loader, len(self.workers)
        self.active = [True] * nw        # iterable datasets: a worker whose iterator ended gets no more tasks
        self.tasks = iter(loader.batch_sampler if loader._auto_collation else loader.sampler) \
            if not loader._iterable else None
        # task numbers keep counting across epochs: a result of an earlier epoch (one left unread when the loop
        # over it stopped early) is told apart and dropped
        self.epoch_start = self.next_out = self.sent
        self.owner: dict = {}            # task number -> worker
        self.ready: dict = {}            # task number -> batch (arrived out of order)
        self.turn = 0
        for _ in range(loader.prefetch_factor * nw):
            if not self._send():
                break

    def new_epoch(self):
        """Persistent workers: the next pass over the data on the same worker processes (an iterable dataset's
        workers start a new iterator of their dataset copy)."""
        if self.loader._iterable:
            for q in self.index_qs:
                q.put(RESTART)
        self._start_epoch()

    def _send(self) -> bool:
        nw = len(self.workers)
        if not any(self.active):
            return False
        if self.tasks is not None:
            try:
                indices = next(self.tasks)
            except StopIteration:
                return False
        else:
            indices = None
        while not self.active[self.turn % nw]:
            self.turn += 1
        w = self.turn % nw
        self.turn += 1
        self.index_qs[w].put((self.sent, indices))
        self.owner[self.sent] = w
        self.sent += 1
        return True

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.next_out >= self.sent:
                if not self.persistent:
                    self._shutdown()
                raise StopIteration
            if self.next_out in self.ready:
                data = self.ready.pop(self.next_out)
                n = self.next_out
                self.next_out += 1
                if data is _EXHAUSTED:
                    self.active[self.owner[n]] = False
                    continue
                self._send()
                return data
            self._receive()

    def _receive(self):
        timeout = self.loader.timeout or None
        while True:
            try:
                n, data = self.result_q.get(timeout=timeout if timeout else 5.0)
                break
            except _queue.Empty:
                if timeout:
                    self._shutdown()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
                dead = [i for i, p in enumerate(self.workers) if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    codes = ", ".join(str(self.workers[i].pid) for i in dead)
                    self._shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {codes}) exited unexpectedly") from None
        if n < self.epoch_start and n >= 0:
            return                      # an earlier epoch's batch that nobody read
        if isinstance(data, ExceptionWrapper):
            self._shutdown()
            data.reraise()
        self.ready[n] = _EXHAUSTED if type(data) is str and data == END else data

    def _shutdown(self):
        if self.done:
            return
        self.done = True
        self.failed = True              # a persistent loader starts new workers on its next epoch
        for q in self.index_qs:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self.workers:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1)       # reaped: no zombie left behind
        for q in self.index_qs + [self.result_q]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        try:
            self._shutdown()
        except Exception:       # interpreter shutdown: the queues may be gone already
            pass


_EXHAUSTED = object()

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]
