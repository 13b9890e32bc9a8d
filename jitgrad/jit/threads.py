"""Threads and processes around compiled functions.

Tracing swaps the payloads of the tensors it captures (parameters, optimiser state) for symbolic values while
the user's function runs once.  ``TRACE_LOCK`` makes that swap invisible to other threads' compiled calls: a
trace holds it, and so does every compiled call while it reads its inputs and runs, so a call in another
thread never reads a captured tensor mid-trace, and two threads tracing the same function for the first time
do it one after the other (the second finds the first one's entry).  It is re-entrant: a compiled function
called while another is traced traces through it.

A forked child inherits the parent's record of the builds it started but not the threads and processes that
run them: ``forked()`` tells a waiter that the builds it knows of belong to another process.
"""
from __future__ import annotations

import os
import threading

TRACE_LOCK = threading.RLock()
_PID = [os.getpid()]


def _after_fork_in_child():
    global TRACE_LOCK
    # a lock held by a thread of the parent at fork time would never be released in the child
    TRACE_LOCK = threading.RLock()
    from . import compile as _compile
    _compile.TRACE_LOCK = TRACE_LOCK


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def process_id() -> int:
    """The current process id (compiled functions remember the one that started their builds)."""
    return os.getpid()


__all__ = ["TRACE_LOCK", "process_id"]
