"""The DataLoader's worker processes: ``worker_loop`` fetches and collates the batches it is asked for;
``get_worker_info()`` tells dataset code which worker it runs in (None in the main process)."""
from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass
from typing import Any

_INFO = None
END = "__jitgrad_worker_iterator_ended__"
RESTART = "__jitgrad_worker_new_epoch__"     # persistent workers: start a new iterator of the dataset copy


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker: its ``id``, ``num_workers``, ``seed``, ``dataset``
    (this worker's copy)."""
    id: int
    num_workers: int
    seed: int
    dataset: Any


def get_worker_info():
    """This worker's ``WorkerInfo``, or None in the main process."""
    return _INFO


class _KeyErrorMessage(str):
    def __repr__(self):
        return self


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process and raised there with the worker's
    traceback in its message (torch's "Caught ... in DataLoader worker process N")."""

    def __init__(self, exc_info, where):
        self.exc_type = exc_info[0]
        self.msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)     # KeyError's str() is the repr of its argument: keep the newlines
        try:
            exc = self.exc_type(msg)
        except Exception:       # an exception type that does not take one message
            raise RuntimeError(msg) from None
        raise exc


def worker_loop(dataset, index_q, result_q, collate_fn, auto_collation, batch_size, drop_last, iterable, seed,
                worker_id, num_workers, init_fn):
    """Serve tasks ``(n, indices)`` from ``index_q`` until a None: put ``(n, batch)`` (or an ExceptionWrapper,
    or the end marker when an iterable dataset's iterator is exhausted) on ``result_q``."""
    global _INFO
    from ...runtime.generator import manual_seed
    _INFO = WorkerInfo(worker_id, num_workers, seed, dataset)
    manual_seed(seed)
    random.seed(seed)
    where = f"in DataLoader worker process {worker_id}"
    try:
        if init_fn is not None:
            init_fn(worker_id)
        it = iter(dataset) if iterable else None
    except Exception:
        result_q.put((-1, ExceptionWrapper(sys.exc_info(), where)))
        return
    ended = False
    while True:
        task = index_q.get()
        if task is None:
            # the loader is shutting down and reads nothing more: exit without waiting to flush the batches still
            # buffered for it (a full pipe would hold this process until the loader's join timed out)
            result_q.cancel_join_thread()
            break
        if type(task) is str and task == RESTART:
            try:
                it = iter(dataset) if iterable else None
                ended = False
            except Exception:
                result_q.put((-1, ExceptionWrapper(sys.exc_info(), where)))
                return
            continue
        n, indices = task
        try:
            if iterable:
                if ended:
                    data = END
                elif not auto_collation:
                    data = collate_fn(next(it))
                else:
                    batch = []
                    for item in it:
                        batch.append(item)
                        if len(batch) == batch_size:
                            break
                    if not batch or (drop_last and len(batch) < batch_size):
                        ended, data = True, END
                    else:
                        data = collate_fn(batch)
            elif auto_collation:
                data = collate_fn([dataset[i] for i in indices])
            else:
                data = collate_fn(dataset[indices])
        except StopIteration:
            ended, data = True, END
        except Exception:
            data = ExceptionWrapper(sys.exc_info(), where)
        result_q.put((n, data))
