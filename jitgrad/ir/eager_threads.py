"""Eager work split between ``set_num_threads`` threads: the multi-tensor optimiser updates by parameter
(``optim/multi_tensor.py``), each parameter's arithmetic on one thread, in order, so the bits are those of one
thread (issue 32, item 3); and big GEMMs by blocks of rows, each a single-threaded OpenBLAS call
(``ops/blas.row_blocks``: blocks aligned to OpenBLAS's row unit give one thread's bits), and stacks of small
products over their leading axis (``ops/stacked_gemm.py``: attention's (batch, head) products).

The helpers are Python threads (started on first use, and again after a fork); a part is a run of NumPy calls on
big arrays, which release the GIL.  Measured on 2 cores (BENCHMARKS.md): B9's AdamW step over 810K parameters
8.4-8.9 ms on one thread, 5.4-7.0 ms split in two.  Splitting single elementwise ops by element was tried and
measured slower for B9's eager step (281 ms against 251 ms): memory-bound ufuncs gain nothing from a second
core here, and ops that loop in Python between NumPy calls (the blocked erf of GELU, Philox's rounds) contend
for the GIL.  A split call never runs beside a BLAS call of ours (eager ops run one at a time per thread), so
the two never oversubscribe the cores.  A split call that waits long for its workers (another process holds a
core) makes the next calls serial for a while (``_Pacer``, the policy eager BLAS follows too).
"""
from __future__ import annotations

import os
import queue
import threading
import time


from . import settings

# elements per thread below which a split is not worth a Python thread hand-off (~10 us)
MIN_CHUNK = int(os.environ.get("JITGRAD_EAGER_MIN_CHUNK", 1 << 16))
_DEFAULT_ERR = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}
# split calls that waited long for their workers, and calls split at all (counted, for tests)
STATS = {"contended": 0, "split_calls": 0}


class _Workers:
    """Python threads that run chunks (``threads - 1`` of them: the caller runs one chunk itself)."""

    def __init__(self):
        self.tasks = queue.SimpleQueue()
        self.threads = []
        self.lock = threading.Lock()

    def ensure(self, n: int) -> bool:
        """Start threads until there are ``n``; True when this call started one."""
        if len(self.threads) >= n:
            return False
        with self.lock:
            started = False
            while len(self.threads) < n:
                t = threading.Thread(target=self._run, name=f"jitgrad-eager-{len(self.threads)}", daemon=True)
                t.start()
                self.threads.append(t)
                started = True
        return started

    def _run(self):
        while True:
            fn, args, kwargs, done = self.tasks.get()
            try:
                fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
                done.error = e
            # nothing of the finished part stays referenced (dropped before the caller is woken): its arrays are
            # freed when the caller drops them, not when this thread takes its next part
            fn = args = kwargs = None
            done.set()


class _Done(threading.Event):
    error = None


_WORKERS = _Workers()


def _after_fork_in_child():
    global _WORKERS
    _WORKERS = _Workers()       # the parent's threads do not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Pacer:
    """Serial for a while after a split call waited long for its workers: another process holds a core, and a
    chunk there finishes a scheduler slice late (ir/ops/blas.BlasPacer's policy for BLAS threads: ``HOLD`` calls,
    doubled each time a retry is slow again, at most ``MAX_HOLD``)."""
    SLOW = 2.5          # the whole call against the caller's own chunk (equal chunks: about 1 when cores are free)
    HOLD = 32
    MAX_HOLD = 1024

    def __init__(self):
        self.left = 0
        self.hold = self.HOLD

    def note(self, own: float, whole: float, allowed: float | None = None) -> None:
        if whole > (self.SLOW * own + 50e-6 if allowed is None else allowed):
            self.left = self.hold
            self.hold = min(self.hold * 2, self.MAX_HOLD)
            STATS["contended"] += 1
        else:
            self.hold = self.HOLD


_PACER = _Pacer()


def run_split(tasks) -> None:
    """Run ``fn(*args)`` for each ``(fn, args)`` of ``tasks``, the first on this thread and the others on the
    workers at once; returns when all are done, raising the first error (after every task has finished, so none
    still writes into what the caller owns)."""
    done = []
    started = False
    if len(tasks) > 1:
        started = _WORKERS.ensure(len(tasks) - 1)
        STATS["split_calls"] += 1
    t0 = time.perf_counter()
    for fn, args in tasks[1:]:
        ev = _Done()
        _WORKERS.tasks.put((fn, args, {}, ev))
        done.append(ev)
    err = None
    try:
        fn, args = tasks[0]
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - re-raised once the workers are done
        err = e
    t1 = time.perf_counter()
    for ev in done:
        ev.wait()
        if err is None and ev.error is not None:
            err = ev.error
    if err is not None:
        raise err
    t2 = time.perf_counter()
    if not started:     # (a thread's start is not a core taken by another process: no hold for it)
        _PACER.note(t1 - t0, t2 - t0)


def note_split(own: float, whole: float, allowed: float | None = None) -> None:
    """A split call run elsewhere (an eager GEMM's blocks on the worker pool: ``jit/pooled_gemm.py``) took
    ``whole`` seconds, the calling thread's own part ``own``: the pacer's reading, as for the eager threads'
    splits (a long wait for the others makes ``split_threads`` answer 1 for a while).  ``allowed``: the longest
    call that is not a taken core, where the caller's own rule knows it (the pool's late-round rule for its
    rounds), instead of the pacer's ``SLOW`` x ``own``."""
    _PACER.note(own, whole, allowed)


def threads_for(elements: int) -> int:
    """How many threads an eager parallel call over ``elements`` elements uses (1: run it serially)."""
    return split_threads(elements // MIN_CHUNK)


def split_threads(parts: int) -> int:
    """How many threads an eager call that may be cut into ``parts`` parts uses: at most ``set_num_threads``'s
    count, and 1 while the pacer holds split calls on the calling thread (another process holds a core)."""
    if parts < 2:       # (most calls: asked before the thread count, which reads the process's affinity)
        return 1
    n = min(settings.num_threads(), parts)
    if n < 2:
        return 1
    if _PACER.left:
        _PACER.left -= 1
        return 1
    return n


__all__ = ["run_split", "note_split", "threads_for", "split_threads", "MIN_CHUNK", "STATS"]
