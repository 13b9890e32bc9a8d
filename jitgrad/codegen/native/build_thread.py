"""The build thread: background builds (``CompiledGraph._build(True)``), one at a time, on one daemon thread per
process (started on first use), while the caller's calls run eagerly or interpreted (``jit/build_policy.py``).

One thread, because LLVM's calls are serialised by llvmlite's lock anyway and a background build should take one
core from the caller, not all of them; the kernels it compiles itself translate to LLVM IR (``graph_build.py``:
``GraphCode._build_in_background``), the rest go to build processes.  At exit (``graph_build._spawn_leftovers``) the
thread is stopped between two kernels (``stop``): it finishes the kernel it is compiling, and what it had not
compiled is handed to build processes, so the next run finds it in the cache.

Jobs run by priority, then in the order they came: first builds (``FIRST``: a graph's calls run eagerly or
interpreted until it is done), then the optimised tier of quick builds (``OPTIMISE``: their calls run compiled
already), then eager mode's kernels (``EAGER``, ``jit/eager_kernels.py``: a compiled function's first call runs
eagerly and asks for them before its own build is queued, which they would otherwise delay).

The job log (``log_jobs``): each job's queueing, start and end, stamped with a caller's clock (a compiled step's
call counter, never the time), so that which job held a step's switch back is counted (``benchmarks/
build_thread_counts.py``, ``tests/test_build_order.py``).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

from . import cache

FIRST, OPTIMISE, EAGER = 0, 1, 2   # job priorities (see the module docstring)
_lock = threading.Lock()
_QUEUE = None               # the thread's job queue (None until the first background build)
_QUEUED: list = []          # CompiledGraphs queued or building
_CALLS: list = []           # ``queue_call``'s jobs queued or running
_STOP = threading.Event()   # set at exit: the thread stops between kernels
_IN_KERNEL = threading.Lock()   # held while the thread compiles one kernel (``stop`` waits for it)
_GATE = None                # a threading.Event a background build waits for before it starts (``hold_builds``)
_OPT_GATE = None            # the same for the optimised tier's jobs (``hold_optimising``)
_LOG = None                 # (events, clock) while jobs are logged (``log_jobs``)


class BuildStopped(Exception):
    """A background build stopped because the process is exiting (its leftovers went to build processes)."""


def hold_builds(gate) -> None:
    """Background builds wait for ``gate`` (a ``threading.Event``; None: no wait) before they start.  A test hook
    (``jit/build_policy.py``, ``JITGRAD_BUILD_AFTER_CALL``): the calls before the gate opens run eagerly or
    interpreted whatever the machine's speed, so what a test counts does not depend on timing."""
    global _GATE
    _GATE = gate


def hold_optimising(gate) -> None:
    """The optimised tier's jobs (``OPTIMISE``) wait for ``gate`` (None: no wait), as ``hold_builds``: a test that
    counts the calls quick code serves holds them (other jobs queued behind one wait too)."""
    global _OPT_GATE
    _OPT_GATE = gate


def log_jobs(clock=None):
    """Log the build thread's jobs from now on (``clock``: a function whose value stamps each event, e.g. a compiled
    step's ``lambda: f.stats["calls"]``) and return the list the events go to: dicts ``{"event": "queued" |
    "started" | "finished", "job": job_label(...), "priority", "seq": the job's number, "at": clock()}``, in the
    order they happened.  ``log_jobs(None)`` stops logging (returns None)."""
    global _LOG
    _LOG = None if clock is None else ([], clock)
    return None if _LOG is None else _LOG[0]


def job_label(job, priority: int) -> str:
    """What a job is, in words: "warm-up" (a ``queue_call``'s, by its ``label``), "first build" or "optimised tier"
    of a graph (with its ``label``: "lowering" for a symbolic trace's), "eager kernel <op>"."""
    if isinstance(job, _Call):
        return job.label
    if priority == EAGER:
        return f"eager kernel {getattr(job, 'op', '?')}"
    what = "optimised tier" if priority == OPTIMISE else "first build"
    label = getattr(job, "label", None)
    return f"{what} ({label})" if label else what


def _log(event, job, priority, seq):
    log = _LOG
    if log is not None:
        try:
            at = log[1]()
        except Exception:   # noqa: BLE001 - a log stamp never fails a build
            at = None
        log[0].append({"event": event, "job": job_label(job, priority), "priority": priority, "seq": seq, "at": at})


def queue_background(cg, priority: int = FIRST) -> None:
    """Run ``cg._build(True)`` on the build thread (started on first use), after the jobs queued before it at the
    same or a lower ``priority``."""
    _put(cg, priority, True)


def _put(job, priority, tracked):
    global _QUEUE, _SEQ
    import queue
    with _lock:
        if _QUEUE is None:
            _QUEUE = queue.PriorityQueue()
            threading.Thread(target=_worker, args=(_QUEUE,), daemon=True, name="jitgrad-compile").start()
        (_QUEUED if tracked else _CALLS).append(job)
        _SEQ += 1
        _QUEUE.put((priority, _SEQ, job, cache._configured_dir()))
        _log("queued", job, priority, _SEQ)


_SEQ = 0        # jobs queued so far (equal priorities run in this order)


class _Call:
    """A job that is a plain call (``queue_call``)."""

    def __init__(self, fn, label="call"):
        self.fn, self.label = fn, label

    def _build(self, background):
        try:
            self.fn()
        except Exception:   # noqa: BLE001 - a warm-up only: whoever needs its result makes it again, and says why
            pass


def queue_call(fn, priority: int = FIRST, label: str = "call") -> None:
    """Run ``fn()`` on the build thread, as a job of ``priority`` (its exceptions are dropped: for work whose
    result its users would otherwise make themselves, made early so that it is off their path).  Not a build: an
    exiting process does not hand it on (``wait_background`` waits for it too).  ``label``: its name in the job
    log (``log_jobs``)."""
    _put(_Call(fn, label), priority, False)


CALLER_JOBS: list = []      # the build thread's request for a calling thread (``on_caller``): at most one


def on_caller(fn, timeout: float):
    """Run ``fn()`` on the next thread that calls a compiled function, at its call's start (``serve_caller``), and
    return what it returned; None when no call took it within ``timeout`` seconds (nor a ``wait``).  For a fork
    (``graph_build.GraphCode.optimise``): forked from the build thread, the fork runs every library's fork handlers
    while the calling thread may be inside one of those libraries: OpenBLAS stops its threads for a fork, and a
    threaded GEMM then waits forever for them.  At a call's start the calling thread is inside none."""
    req = {"fn": fn, "done": threading.Event(), "out": None}
    with _lock:
        CALLER_JOBS[:] = [req]
    if not req["done"].wait(timeout):
        with _lock:
            if CALLER_JOBS and CALLER_JOBS[0] is req:      # no call took it: withdrawn
                CALLER_JOBS.clear()
                return None
        req["done"].wait()
    return req["out"]


def serve_caller() -> None:
    """At a compiled function's call start, or in ``wait``: run the build thread's request (``on_caller``) if
    there is one and the process runs no other Python thread than this one, the build thread and jitgrad's eager
    helpers (idle between two calls: ``ir/eager_threads.py``); another thread could be inside a library's call
    when ``fn`` forks."""
    if not CALLER_JOBS or threading.current_thread().name == "jitgrad-compile" or not _others_idle():
        return
    with _lock:
        if not CALLER_JOBS:
            return
        req = CALLER_JOBS.pop()
    try:
        req["out"] = req["fn"]()
    except Exception:   # noqa: BLE001 - the build thread does the work itself
        req["out"] = None
    finally:
        req["done"].set()


def _others_idle() -> bool:
    if threading.active_count() <= 2:
        return True
    me = threading.current_thread()
    return all(t is me or t.name == "jitgrad-compile" or t.name.startswith("jitgrad-eager-")
               for t in threading.enumerate())


def _worker(q):
    while True:
        priority, seq, job, root = q.get()
        _log("started", job, priority, seq)
        try:
            for gate in (_GATE, _OPT_GATE if priority == OPTIMISE else None):
                while gate is not None and not gate.wait(0.05) and not _STOP.is_set():
                    pass
            if not _STOP.is_set():
                with cache.pinned_dir(root):
                    job._build(True)
        finally:
            _log("finished", job, priority, seq)
            for jobs in (_QUEUED, _CALLS):
                try:
                    jobs.remove(job)
                except ValueError:
                    pass
            q.task_done()


def wait_background(timeout: float | None = None) -> bool:
    """Wait until no build is queued or running on the build thread; False when ``timeout`` (seconds) passed
    first.  (``f.wait()`` waits for one function's build; this for all of them, e.g. before a test that counts the
    cache's work.)"""
    deadline = None if timeout is None else time.monotonic() + timeout
    while _QUEUED or _CALLS:
        if deadline is not None and time.monotonic() >= deadline:
            return False
        serve_caller()      # (a tier's fork: ``on_caller``)
        time.sleep(0.005)
    return True


def busy() -> bool:
    """Whether a build is queued or running on the build thread (it takes a core while it runs)."""
    return bool(_QUEUED or _CALLS)


@contextlib.contextmanager
def compiling():
    """``with compiling() as go:`` around one kernel the build thread compiles; ``go`` is False once the process
    is exiting (then compile nothing more)."""
    with _IN_KERNEL:
        yield not _STOP.is_set()


def stopping() -> bool:
    """Whether the process is exiting (the build thread stops)."""
    return _STOP.is_set()


def stop(timeout: float = 10.0) -> list:
    """At exit: stop the build thread after the kernel it is compiling (waiting for it at most ``timeout``
    seconds); returns the builds that were queued or running (their leftovers go to build processes)."""
    queued = list(_QUEUED)
    _STOP.set()
    if _IN_KERNEL.acquire(timeout=timeout):
        _IN_KERNEL.release()
    return queued


def _after_fork_in_child():
    """A forked child has no build thread and may have forked while a lock was held: fresh locks and queue,
    and the builds that were queued or running in the parent are pending again (``wait()`` restarts them)."""
    global _QUEUE, _lock, _IN_KERNEL
    _lock = threading.Lock()
    _IN_KERNEL = threading.Lock()
    _QUEUE = None
    _CALLS.clear()
    CALLER_JOBS.clear()
    for cg in _QUEUED:
        if cg.error is None and (cg.run is None or getattr(cg, "optimising", False)):
            cg.pending = True
    _QUEUED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["FIRST", "OPTIMISE", "EAGER", "queue_background", "queue_call", "log_jobs", "job_label", "on_caller", "serve_caller", "wait_background", "hold_builds", "hold_optimising",
           "compiling", "stopping", "stop", "BuildStopped"]
