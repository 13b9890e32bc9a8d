"""``timeout=`` of ``init_process_group`` / ``new_group``: the collective watchdog.

A rank that stalls (a long stop in user code, a deadlock, a rank that took another path) would hold every other
rank in its collective for ever.  As torch's watchdog does, every blocking part of a collective runs inside a
*section* of its group's ``Watch``: the eager collectives and ``Work.wait()``, the transport's calls (the
interpreter serving a step while it builds), and a whole call of a compiled step that holds collectives (its
native MPI steps run inside the one C call; ``jit`` opens the section through ``ir/ops/collective.watched``).
A section has the group's next sequence numbers (``SeqNum``, counted per group in the same order on every rank,
as torch's; a compiled step takes one per collective it holds, as many as the interpreter's calls of the
transport for the same graph) and the op's name.  Sections do not nest: the transport's calls inside a compiled
step's section (the driver's Python steps) belong to it.

The failure watcher's thread (``process_group._FailureWatcher``, polling every 50 ms) checks the sections in
progress.  One older than its group's timeout ends the job: the watcher asks every other rank of the group where
it is (``state()``, answered by their watcher threads, which run while their main thread sleeps, computes or
blocks in MPI), writes torch's watchdog message naming the collective and the ranks that did not arrive
(``timeout_message``) and fails the job as an uncaught exception would: every rank prints why it stops, then
``MPI_Abort``.
"""
from __future__ import annotations

import threading
import time

DEFAULT_TIMEOUT_S = 1800.0      # torch's default_pg_timeout (30 minutes)


class DistBackendError(RuntimeError):
    """torch.distributed.DistBackendError: a collective failed in the backend (here: it timed out)."""


def timeout_seconds(timeout, default=DEFAULT_TIMEOUT_S) -> float:
    """``timeout=`` as seconds: a ``datetime.timedelta`` (torch's type) or a number of seconds; None: ``default``."""
    if timeout is None:
        return float(default)
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    if not seconds > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    return float(seconds)


_ACTIVE: dict = {}      # thread ident -> the _Section that thread blocks in


class Watch:
    """The sequence numbers and timeout of one process group on this rank (``ranks``: its global ranks)."""

    def __init__(self, ranks, timeout_s: float):
        self.ranks = tuple(ranks)
        self.timeout = float(timeout_s)
        self.seq = 0
        self.last = None        # (seq, optype) of the last section entered

    def section(self, optype: str, numel=None, count=1):
        """The context of one collective (or of the ``count`` collectives of one compiled step) of this group."""
        return _Section(self, optype, numel, None, count)


class _Section:
    __slots__ = ("watch", "optype", "numel", "seq", "count", "t0", "owner")

    def __init__(self, watch, optype, numel, seq=None, count=1):
        self.watch, self.optype, self.numel, self.seq, self.count = watch, optype, numel, seq, count
        self.owner = None

    def again(self):
        """The rest of this collective, later (``Work.wait()`` of an ``async_op=True`` call): the same SeqNum, or
        None if this section was inside another one."""
        return None if self.seq is None else _Section(self.watch, self.optype, self.numel, self.seq, self.count)

    def __enter__(self):
        me = threading.get_ident()
        if me in _ACTIVE:           # inside another section (the transport under a compiled step): that one counts
            return self
        w = self.watch
        if self.seq is None:
            self.seq = w.seq + 1
            w.seq += self.count
            w.last = (self.seq, self.optype)
        self.t0 = time.monotonic()
        self.owner = me
        _ACTIVE[me] = self
        return self

    def __exit__(self, *exc):
        if self.owner is not None:
            _ACTIVE.pop(self.owner, None)
            self.owner = None
        return False

    def work(self) -> str:
        numel = "" if self.numel is None else f", NumelIn={self.numel}, NumelOut={self.numel}"
        return (f"WorkMPI(SeqNum={_seqs(self.seq, self.count)}, OpType={self.optype}{numel}, "
                f"Timeout(ms)={int(round(self.watch.timeout * 1000))})")


def _seqs(seq, count) -> str:
    return str(seq) if count == 1 else f"{seq}-{seq + count - 1}"


def overdue():
    """The section in progress on this rank that ran past its group's timeout (else None)."""
    now = time.monotonic()
    for s in list(_ACTIVE.values()):
        if now - s.t0 > s.watch.timeout:
            return s
    return None


def state(watches) -> dict:
    """Where this rank is, for another rank's timeout message: the sections it blocks in and each group's last
    sequence number (``watches``: this rank's groups' Watch objects)."""
    now = time.monotonic()
    return {"active": [[list(s.watch.ranks), s.seq, s.count, s.optype, round(now - s.t0, 3)]
                       for s in list(_ACTIVE.values())],
            "last": [[list(w.ranks), w.last[0], w.last[1]] for w in watches if w.last is not None]}


def timeout_message(rank: int, section, replies: dict) -> str:
    """torch's watchdog message for ``section`` on ``rank``, and which ranks of the group did not arrive and where
    they are (``replies``: rank -> its ``state()``, or None when it did not answer)."""
    ranks = list(section.watch.ranks)
    ran = int((time.monotonic() - section.t0) * 1000)
    missing, where = [], []
    for r in ranks:
        if r == rank:
            continue
        st = replies.get(r)
        if st is None:
            missing.append(r)
            where.append(f"rank {r} did not answer")
            continue
        here = [a for a in st["active"] if a[0] == ranks]
        if any(a[1] < section.seq + section.count and section.seq < a[1] + a[2] for a in here):
            continue                # it waits in this very collective (or a compiled step that holds it)
        missing.append(r)
        if here:
            a = here[0]
            where.append(f"rank {r} waits in SeqNum={_seqs(a[1], a[2])} (OpType={a[3]})")
        else:
            last = [x for x in st["last"] if x[0] == ranks]
            since = f"SeqNum={last[0][1]} (OpType={last[0][2]})" if last else "the start"
            where.append(f"rank {r} has not reached a collective of this group since {since}")
    head = (f"[Rank {rank}] Watchdog caught collective operation timeout: {section.work()} ran for {ran} "
            f"milliseconds before timing out.")
    if not missing:
        return head + " Every rank of the group arrived."
    return head + f" Ranks {', '.join(map(str, missing))} did not arrive: " + "; ".join(where) + "."


__all__ = ["DistBackendError", "Watch", "timeout_seconds", "overdue", "state", "timeout_message",
           "DEFAULT_TIMEOUT_S"]
