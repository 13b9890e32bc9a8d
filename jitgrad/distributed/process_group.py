"""Process groups on MPI: ``init_process_group``, ranks, ``new_group``, the MPI transport, failure handling.

mpi4py is imported here on first use only (``init_process_group``), so ``import jitgrad`` and
``import jitgrad.distributed`` work, and never load MPI, on an install without the ``distributed`` extra.

Each ``ProcessGroup`` owns an MPI communicator and registers an ``MPITransport`` for it in
``jitgrad.ir.ops.collective.TRANSPORTS``: the collective primitives (eager and inside ``@jg.compile``) name a
group by that integer key.

Failure behaviour.  An uncaught exception on one rank would leave the others blocked in their next collective
for ever.  ``init_process_group`` therefore installs a ``sys.excepthook`` that prints the error, tells every
other rank (a message on a private duplicate of the world communicator), waits until each of them acknowledges
that it printed why it stops (at most 2 s) and then calls ``MPI_Abort``.  Every rank runs a watcher thread that polls for such a message (``MPI_Test`` every
``JITGRAD_DIST_POLL_S`` seconds, 0.05 by default: the main thread may be blocked inside MPI, and mpi4py
releases the GIL there) and, on receipt, prints ``rank k failed ...`` and ends its process with exit status 1.
The same thread enforces ``timeout=`` (``watchdog.py``): it ends the job when a collective of this rank runs past
its group's timeout, and answers other ranks' questions about where this rank is.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import traceback

import numpy as np

from ..ir.ops import collective as _coll
from . import watchdog


class ReduceOp:
    """torch.distributed.ReduceOp: the element-wise reductions of ``all_reduce`` and ``reduce_scatter``."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


class Backend:
    """torch.distributed.Backend: the only backend is MPI."""

    MPI = "mpi"


_MPI = None          # the mpi4py.MPI module, once imported


def _mpi():
    global _MPI
    if _MPI is None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise RuntimeError("jitgrad.distributed needs mpi4py and an MPI library: pip install "
                               "'jitgrad[distributed]' (mpi4py and mpich)") from e
        _MPI = MPI
    return _MPI


def _mpi_op(op: str):
    MPI = _mpi()
    return {"sum": MPI.SUM, "avg": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}[op]


class MPITransport:
    """The bytes-moving side of a process group for the collective primitives (``ir/ops/collective.py``): MPI
    collectives on NumPy arrays.

    It works on a duplicate of the group's communicator whose errors abort, shared by the primitives' Python
    impls and by the compiled driver's native MPI steps (``native()``).  One communicator for both matters: the
    first call of a compiled step may run on the interpreter on one rank while another rank already runs the
    native driver, and MPI matches their collectives only on the same communicator.  The eager public
    functions use the group's own communicator."""

    def __init__(self, comm, watch):
        MPI = _mpi()
        self.watch = watch      # its group's collective watchdog: every blocking call runs in one of its sections
        self.comm = comm.Dup()
        self.comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.inflight = {}      # token -> (request, buffer, op) of the all_reduce_start steps not waited for
        self.next_token = 0
        self._native = None     # native(): MPI's entry points and a communicator for the compiled driver

    def native(self, op, np_dtype):
        """What the compiled driver needs to call MPI itself (``codegen/program/collective_steps.py``): the C handles
        and the entry points, or None where it cannot (not MPICH, AVG, an unsupported dtype, or
        ``JITGRAD_DIST_NATIVE=0``)."""
        if op == "avg" or os.environ.get("JITGRAD_DIST_NATIVE", "1") == "0":
            return None
        if self._native is None:
            self._native = _native_entry_points() or {}
        if not self._native or np.dtype(np_dtype) not in _NATIVE_TYPES:
            return None
        MPI = _mpi()
        handle = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}[op].py2f()
        return dict(self._native, comm=self.comm.py2f(), op=handle, dtype=_NATIVE_TYPES[np.dtype(np_dtype)]().py2f())

    def all_reduce(self, x, op):
        out = np.empty_like(x)
        with self.watch.section("ALLREDUCE", x.size):
            self.comm.Allreduce(x, out, _mpi_op(op))
        if op == "avg":
            out /= self.size
        return out

    def broadcast(self, x, src):
        out = np.array(x, copy=True)
        with self.watch.section("BROADCAST", x.size):
            self.comm.Bcast(out, root=src)
        return out

    def all_gather(self, x):
        out = np.empty((self.size,) + x.shape, x.dtype)
        with self.watch.section("ALLGATHER", x.size):
            self.comm.Allgather(x, out)
        return out

    def reduce_scatter(self, x, op):
        out = np.empty(x.shape[1:], x.dtype)
        with self.watch.section("REDUCE_SCATTER", x.size):
            self.comm.Reduce_scatter_block(x, out, _mpi_op(op))
        if op == "avg":
            out /= self.size
        return out

    def all_reduce_start(self, x, op):
        buf = np.array(x, copy=True)
        with self.watch.section("ALLREDUCE_START", buf.size):      # (one SeqNum, as the native step's)
            req = self.comm.Iallreduce(_mpi().IN_PLACE, buf, _mpi_op(op))
        # MPICH moves a non-blocking collective's bytes inside MPI calls: test the ones already in flight
        for r, _, _ in self.inflight.values():
            r.Test()
        self.next_token += 1
        self.inflight[self.next_token] = (req, buf, op)
        return self.next_token

    def all_reduce_wait(self, token, flat_fn):
        item = self.inflight.pop(int(token), None)
        if item is None:
            raise RuntimeError(f"all_reduce_wait: no all-reduce in flight with token {int(token)} (waited for twice, "
                               "or started in another call)")
        req, buf, op = item
        with self.watch.section("ALLREDUCE", buf.size):
            req.Wait()
        if op == "avg":
            buf /= self.size
        return buf


_NATIVE_TYPES = {}


def _native_entry_points():
    """MPICH's ``MPI_Allreduce``/``MPI_Iallreduce``/``MPI_Wait`` addresses, or None if this is not MPICH or
    libmpi is not found."""
    import ctypes
    MPI = _mpi()
    if MPI.get_vendor()[0] != "MPICH":
        return None
    path = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                name = line.rsplit(None, 1)[-1]
                if os.path.basename(name).startswith("libmpi.so"):
                    path = name
                    break
    except OSError:
        pass
    try:
        lib = ctypes.CDLL(path or "libmpi.so.12")
        addr = {k: ctypes.cast(getattr(lib, f), ctypes.c_void_p).value
                for k, f in (("allreduce", "MPI_Allreduce"), ("iallreduce", "MPI_Iallreduce"), ("wait", "MPI_Wait"))}
    except (OSError, AttributeError):
        return None
    if not _NATIVE_TYPES:
        _NATIVE_TYPES.update({np.dtype(np.float32): lambda: MPI.FLOAT, np.dtype(np.float64): lambda: MPI.DOUBLE,
                              np.dtype(np.int32): lambda: MPI.INT32_T, np.dtype(np.int64): lambda: MPI.INT64_T})
    return addr


class ProcessGroup:
    """A set of ranks that run collectives together (torch's ProcessGroup): an MPI communicator.

    ``ranks`` are global ranks in group-rank order.  A process outside the group holds a ``ProcessGroup`` whose
    ``comm`` is None (torch's ``GroupMember.NON_GROUP_MEMBER``); collectives on it raise."""

    _next_key = 1

    def __init__(self, comm, ranks, timeout_s=watchdog.DEFAULT_TIMEOUT_S):
        self.comm = comm
        self.ranks = tuple(ranks)
        self.key = None
        self.watch = watchdog.Watch(self.ranks, timeout_s)
        if comm is not None:
            self.key = ProcessGroup._next_key
            ProcessGroup._next_key += 1
            self.transport = MPITransport(comm, self.watch)
            _coll.TRANSPORTS[self.key] = self.transport

    def rank(self) -> int:
        return -1 if self.comm is None else self.transport.rank

    def size(self) -> int:
        return len(self.ranks)

    def name(self) -> str:
        return "mpi"

    def _free(self):
        if self.key is not None:
            _coll.TRANSPORTS.pop(self.key, None)
            # the transport's communicator is not freed: a compiled step may still hold its handle
        if self.comm is not None and self.comm != _mpi().COMM_WORLD:
            self.comm.Free()
        self.comm = None

    def __repr__(self):
        return f"ProcessGroup(backend='mpi', ranks={list(self.ranks)})"


class _State:
    world: ProcessGroup | None = None
    groups: list = []
    watcher = None


_S = _State()


def is_available() -> bool:
    """True if the MPI backend can be used (mpi4py importable); imports nothing."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def is_mpi_available() -> bool:
    """torch.distributed.is_mpi_available."""
    return is_available()


def is_initialized() -> bool:
    """True between ``init_process_group`` and ``destroy_process_group``."""
    return _S.world is not None


def _world() -> ProcessGroup:
    if _S.world is None:
        raise RuntimeError("Default process group has not been initialized, please make sure to call "
                           "init_process_group.")
    return _S.world


def group_of(group, opname="collective") -> ProcessGroup:
    """The ProcessGroup ``group`` names (None: the world); raises if this rank is not a member."""
    g = _world() if group is None else group
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{opname}: group must be a ProcessGroup from new_group() or None, got {type(g).__name__}")
    if g.comm is None:
        raise RuntimeError(f"{opname}: this rank ({get_rank()}) is not a member of {g}")
    return g


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "", pg_options=None,
                       device_id=None):
    """Initialise the default process group (torch.distributed.init_process_group) on MPI.

    Rank and world size come from MPI (launch with ``mpiexec -n N python train.py`` or
    ``python -m jitgrad.distributed.run -n N train.py``).  ``backend`` must be ``"mpi"`` (or None).
    ``init_method="env://"`` (or none) is accepted: where torch's ``RANK`` / ``WORLD_SIZE`` variables are set,
    or ``rank`` / ``world_size`` are passed, they must agree with MPI's.  Afterwards ``RANK``, ``WORLD_SIZE``
    and ``LOCAL_RANK`` are set in ``os.environ`` where missing, as torchrun would set them.

    ``timeout`` (a ``datetime.timedelta`` or seconds; default 30 minutes, as torch's): a collective or barrier
    that waits longer ends the job on every rank with torch's watchdog error, naming the collective and the
    ranks that did not arrive (``watchdog.py``).

    >>> import jitgrad.distributed as dist
    >>> dist.init_process_group("mpi")          # doctest: +SKIP
    """
    if _S.world is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if backend is not None and str(backend).lower() != "mpi":
        raise ValueError(f"init_process_group: backend {backend!r} is not available in jitgrad; the backend is "
                         "'mpi' (launch with mpiexec)")
    if init_method is not None and not str(init_method).startswith("env://"):
        raise ValueError(f"init_process_group: init_method {init_method!r} is not supported with the MPI backend "
                         "(ranks come from mpiexec); use 'env://' or leave it out")
    timeout_s = watchdog.timeout_seconds(timeout)
    MPI = _mpi()
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    for what, given, env, actual in (("rank", rank, "RANK", r), ("world_size", world_size, "WORLD_SIZE", n)):
        if given is not None and given != -1 and int(given) != actual:
            raise ValueError(f"init_process_group: {what}={given} but MPI says {actual} (the MPI launcher decides "
                             "ranks)")
        if env in os.environ and os.environ[env].strip() and int(os.environ[env]) != actual:
            raise ValueError(f"init_process_group: the environment has {env}={os.environ[env]} but MPI says "
                             f"{actual}")
    os.environ.setdefault("RANK", str(r))
    os.environ.setdefault("WORLD_SIZE", str(n))
    os.environ.setdefault("LOCAL_RANK", os.environ.get("MPI_LOCALRANKID", str(r)))
    _S.world = ProcessGroup(comm, range(n), timeout_s)
    _S.groups = [_S.world]
    if n > 1:
        _S.watcher = _FailureWatcher(comm)


def destroy_process_group(group=None):
    """Free ``group`` (default: every group, and leave the initialised state)."""
    if group is not None and group is not _S.world:
        group._free()
        if group in _S.groups:
            _S.groups.remove(group)
        return
    if _S.world is None:
        return
    if _S.watcher is not None:
        _S.watcher.stop()
        _S.watcher = None
    for g in _S.groups:
        g._free()
    _S.groups = []
    _S.world = None


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (default: the world); -1 if it is not a member."""
    g = _world() if group is None else group
    return g.rank()


def get_world_size(group=None) -> int:
    """The number of processes in ``group`` (default: the world)."""
    g = _world() if group is None else group
    return g.size()


def get_backend(group=None) -> str:
    _world()
    return "mpi"


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False):
    """A process group of the given global ``ranks`` (default: all).  Like torch, every rank of the world must
    call it, in the same order; a rank outside ``ranks`` gets a group it cannot use.  ``timeout``: as
    ``init_process_group``'s (default: the world's)."""
    world = _world()
    timeout_s = watchdog.timeout_seconds(timeout, world.watch.timeout)
    n = world.size()
    ranks = list(range(n)) if ranks is None else sorted(int(x) for x in ranks)
    if not ranks or any(x < 0 or x >= n for x in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: ranks {ranks} must be distinct ranks of the world (0..{n - 1})")
    MPI = _mpi()
    me = world.rank()
    color = 0 if me in ranks else MPI.UNDEFINED
    comm = world.comm.Split(color, ranks.index(me) if me in ranks else 0)
    g = ProcessGroup(comm if comm != MPI.COMM_NULL else None, ranks, timeout_s)
    _S.groups.append(g)
    return g


# ---- failure: one rank's exception ends every rank -----------------------------------------------------------

_FAIL_TAG = 7031
_ACK_TAG = 7032         # "I printed my line": the failing rank aborts once every other rank said so (or at _GRACE_S)
_GRACE_S = 2.0
_QUERY_TAG = 7033       # "where are you?": another rank's collective timed out (watchdog.py)
_REPLY_TAG = 7034       # the answer: this rank's watchdog.state(), as JSON
_ANSWER_S = 1.0         # how long a timed-out rank waits for the others' answers


class _FailureWatcher:
    """Posts a receive for failure notices on a duplicate of the world communicator and polls it from a daemon
    thread; installs the excepthook that sends them."""

    def __init__(self, world_comm):
        MPI = _mpi()
        self.comm = world_comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.buf = bytearray(4096)
        self.req = self.comm.Irecv([self.buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=_FAIL_TAG)
        self.status = MPI.Status()
        self.qbuf = bytearray(8)
        self.qstatus = MPI.Status()
        self.qreq = self.comm.Irecv([self.qbuf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=_QUERY_TAG)
        self.sent = []          # (request, buffer) of answers in flight
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.poll = float(os.environ.get("JITGRAD_DIST_POLL_S", "0.05"))
        self.thread = threading.Thread(target=self._watch, name="jitgrad-dist-watcher", daemon=True)
        self.thread.start()
        self.prev_hook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self.stop)

    def _watch(self):
        while not self.done.wait(self.poll):
            with self.lock:
                if self.done.is_set():
                    return
                got = self.req.Test(self.status)
                self._answer()
            if got:
                self._stop_for_failure()
            late = watchdog.overdue()
            if late is not None:
                self._time_out(late)

    def _stop_for_failure(self):
        n = self.status.Get_count(_mpi().BYTE)
        msg = bytes(self.buf[:n]).decode("utf-8", "replace")
        src = self.status.Get_source()
        sys.stderr.write(f"jitgrad.distributed: rank {self.rank} stops because rank {src} failed: {msg}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        try:        # the failing rank waits for this before its abort ends the job (and this process)
            ack = self.comm.Isend([b"1", _mpi().BYTE], dest=src, tag=_ACK_TAG)
            t0 = time.monotonic()
            while not ack.Test() and time.monotonic() - t0 < _GRACE_S:
                time.sleep(0.01)
        finally:
            os._exit(1)

    def _answer(self):
        """Answer another rank's question about where this rank is (its collective timed out)."""
        MPI = _mpi()
        self.sent = [(r, b) for r, b in self.sent if not r.Test()]
        while self.qreq.Test(self.qstatus):
            src = self.qstatus.Get_source()
            watches = [g.watch for g in _S.groups if g.comm is not None]
            data = json.dumps(watchdog.state(watches)).encode()[:4096]
            self.sent.append((self.comm.Isend([data, MPI.BYTE], dest=src, tag=_REPLY_TAG), data))
            self.qreq = self.comm.Irecv([self.qbuf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=_QUERY_TAG)

    def _time_out(self, section):
        """``section`` ran past its group's timeout: ask the other ranks of the group where they are, then fail
        the job with torch's watchdog message (every rank prints it, then MPI_Abort)."""
        MPI = _mpi()
        others = [r for r in section.watch.ranks if r != self.rank]
        asks = [self.comm.Isend([b"?", MPI.BYTE], dest=r, tag=_QUERY_TAG) for r in others]
        bufs = {r: bytearray(4096) for r in others}
        stats = {r: MPI.Status() for r in others}
        reqs = {r: self.comm.Irecv([bufs[r], MPI.BYTE], source=r, tag=_REPLY_TAG) for r in others}
        replies = {}
        t0 = time.monotonic()
        while len(replies) < len(others) and time.monotonic() - t0 < _ANSWER_S:
            with self.lock:
                self._answer()          # another rank may be timing out too and asking us
                for r in others:
                    if r not in replies and reqs[r].Test(stats[r]):
                        n = stats[r].Get_count(MPI.BYTE)
                        replies[r] = json.loads(bytes(bufs[r][:n]).decode())
            time.sleep(0.01)
        del asks
        msg = watchdog.timeout_message(self.rank, section, replies)
        summary = f"DistBackendError: {msg}"
        sys.stderr.write(f"[rank {self.rank}] {summary}\njitgrad.distributed: rank {self.rank} of {self.size} failed "
                         f"({summary}); ending every rank\n")
        sys.stderr.flush()
        self.fail(summary)

    def _excepthook(self, tp, value, tb):
        head = f"[rank {self.rank}] "
        text = "".join(traceback.format_exception(tp, value, tb))
        sys.stderr.write("".join(head + line + "\n" for line in text.rstrip("\n").split("\n")))
        summary = f"{tp.__name__}: {value}"
        sys.stderr.write(f"jitgrad.distributed: rank {self.rank} of {self.size} failed ({summary}); ending every "
                         "rank\n")
        sys.stderr.flush()
        self.fail(summary)

    def fail(self, summary: str):
        """Tell every other rank that this one failed, then abort the MPI job."""
        MPI = _mpi()
        data = summary.encode("utf-8", "replace")[:4000]
        reqs = [self.comm.Isend([data, MPI.BYTE], dest=r, tag=_FAIL_TAG) for r in range(self.size) if r != self.rank]
        # each other rank acknowledges once it printed its line: abort then, so the abort never kills a rank before
        # it said why it stops (a loaded machine may not run its watcher for a while); at most _GRACE_S
        acks = [self.comm.Irecv([bytearray(1), MPI.BYTE], source=r, tag=_ACK_TAG) for r in range(self.size)
                if r != self.rank]
        t0 = time.monotonic()
        while time.monotonic() - t0 < _GRACE_S and not MPI.Request.Testall(reqs + acks):
            time.sleep(0.01)
        self.comm.Abort(1)

    def stop(self):
        if self.done.is_set():
            return
        with self.lock:
            self.done.set()
            try:
                for req in (self.req, self.qreq):
                    req.Cancel()
                    req.Wait()
            except Exception:       # noqa: BLE001  (MPI already finalised at interpreter exit)
                pass
        if sys.excepthook is self._excepthook:
            sys.excepthook = self.prev_hook
