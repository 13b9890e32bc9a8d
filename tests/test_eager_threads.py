"""Eager work split between threads (ir/eager_threads.py): the pacer that turns splitting off while another
process holds a core, errors from a worker, and a forked child's own workers (counted, never timed)."""

import multiprocessing
import os
import time

import pytest

from jitgrad.ir import eager_threads, settings


def test_a_late_worker_makes_the_next_calls_serial(monkeypatch):
    """A split call whose workers finish long after the caller's own part (a core taken by another process)
    runs the next ``HOLD`` calls on one thread, then tries again; a retry that is slow again holds twice as long."""
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", 2.5)
    monkeypatch.setattr(eager_threads, "_PACER", eager_threads._Pacer())
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    n = 4 * eager_threads.MIN_CHUNK
    assert eager_threads.threads_for(n) == 2
    assert eager_threads.threads_for(eager_threads.MIN_CHUNK) == 1       # too little work to split
    eager_threads._WORKERS.ensure(1)        # (a call that starts a worker is not paced: the next test)
    eager_threads.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    hold = eager_threads._Pacer.HOLD
    assert [eager_threads.threads_for(n) for _ in range(hold)] == [1] * hold
    assert eager_threads.threads_for(n) == 2
    eager_threads.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    assert eager_threads._PACER.left == 2 * hold


def test_a_call_that_starts_its_worker_is_not_held_for_it(monkeypatch):
    """A split call that had to start a worker thread waits for the start as well: that is not a core taken by
    another process, so it holds nothing; the same slow call with the worker running does."""
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", 2.5)
    monkeypatch.setattr(eager_threads, "_PACER", eager_threads._Pacer())
    monkeypatch.setattr(eager_threads, "_WORKERS", eager_threads._Workers())
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    before = eager_threads.STATS["contended"]
    eager_threads.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    assert eager_threads._PACER.left == 0 and eager_threads.STATS["contended"] == before
    assert eager_threads.threads_for(4 * eager_threads.MIN_CHUNK) == 2
    eager_threads.run_split([(lambda: None, ()), (time.sleep, (0.05,))])
    assert eager_threads._PACER.left == eager_threads._Pacer.HOLD and eager_threads.STATS["contended"] == before + 1


def test_a_worker_error_is_raised_after_every_part_finished(monkeypatch):
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", float("inf"))
    done = []

    def fail():
        raise ValueError("in a worker")

    def slow():
        time.sleep(0.05)
        done.append(True)
    with pytest.raises(ValueError, match="in a worker"):
        eager_threads.run_split([(lambda: None, ()), (fail, ()), (slow, ())])
    assert done == [True]       # the caller waited for the slow part before raising


def _child(q):
    out = []
    eager_threads.run_split([(out.append, (1,)), (out.append, (2,))])
    q.put(sorted(out))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_split_calls_after_fork(monkeypatch):
    """The workers are threads of the parent: a forked child starts its own (and does not wait on the parent's)."""
    eager_threads.run_split([(lambda: None, ()), (lambda: None, ())])      # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) == [1, 2]


def test_a_worker_keeps_nothing_of_a_finished_part(monkeypatch):
    """A worker waiting for its next part holds no reference to the last one's arguments: an array handed to a
    part is freed when the caller drops it (one held a part longer made eager peak memory depend on timing)."""
    import gc
    import weakref

    import numpy as np
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", float("inf"))
    arr = np.ones(1000)
    ref = weakref.ref(arr)
    eager_threads.run_split([(lambda: None, ()), (np.add, (arr, 1.0))])
    gc.disable()        # (a reference held anywhere, not a cycle, would keep it)
    try:
        del arr
        assert ref() is None
    finally:
        gc.enable()
