"""Big eager elementwise ops on every core: the output split into one chunk per thread (issue 32, item 3).

NumPy's ufuncs run on one thread (and release the GIL), so an eager ``x * y`` over a million elements leaves the
other cores idle where torch's ``parallel_for`` splits it.  For a signature whose output has at least
``2 * MIN_CHUNK`` elements, eager dispatch (``runtime/dispatch._rule_entry``) wraps the op's impl in
:func:`for_signature`'s chunked form: the output is allocated once, each thread computes the impl on its slice of
the inputs into its slice of the output (``out=`` for a ufunc), the calling thread takes the first chunk.

Elementwise results do not depend on where the split falls (each element is computed alone, by the same NumPy
loop), so a chunked op gives the bits of the serial one at any thread count (``tests/test_eager_chunks.py``).  A
call runs serially when it cannot split cheaply or safely: fewer threads than two (``set_num_threads(1)``), an
input that is not C-contiguous or not of the output's shape (broadcasting: only 0-d inputs and Python numbers
may sit beside the full-shape ones), an op with no full-shape input (random draws: their values depend on the
element's index), or a non-default ``np.errstate`` (it is per thread: a worker would not raise).

Threads: ``settings.num_threads()`` (``torch.set_num_threads``), the knob the compiled kernels and eager BLAS
follow; the helpers are Python threads started on first use and again after a fork.  A chunked op never runs
beside a BLAS call of ours (eager ops run one at a time per thread), so the two never oversubscribe the cores.
A split call that waits long for its workers (another process holds a core) makes the next calls serial for a
while (``_Pacer``, the policy eager BLAS follows too).
"""
from __future__ import annotations

import math
import os
import queue
import threading
import time

import numpy as np

from . import settings

# torch's grain (at::internal::GRAIN_SIZE) is 32768 elements per thread; a Python thread hand-off costs ~10 us, so
# a chunk here is worth it from 64K float32 elements (~30 us of a ufunc): measured in BENCHMARKS.md
MIN_CHUNK = int(os.environ.get("JITGRAD_EAGER_MIN_CHUNK", 1 << 16))
_DEFAULT_ERR = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}
STATS = {"chunked_calls": 0, "chunks": 0, "contended": 0}       # counted, for tests


class _Workers:
    """Python threads that run chunks (``threads - 1`` of them: the caller runs one chunk itself)."""

    def __init__(self):
        self.tasks = queue.SimpleQueue()
        self.threads = []
        self.lock = threading.Lock()

    def ensure(self, n: int) -> None:
        if len(self.threads) >= n:
            return
        with self.lock:
            while len(self.threads) < n:
                t = threading.Thread(target=self._run, name=f"jitgrad-eager-{len(self.threads)}", daemon=True)
                t.start()
                self.threads.append(t)

    def _run(self):
        while True:
            fn, args, kwargs, done = self.tasks.get()
            try:
                fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
                done.error = e
            done.set()


class _Done(threading.Event):
    error = None


_WORKERS = _Workers()


def _after_fork_in_child():
    global _WORKERS
    _WORKERS = _Workers()       # the parent's threads do not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def for_signature(impl, avals, out_aval, params):
    """The chunked form of ``impl`` for this signature (input avals -> ``out_aval``), or None when the op's
    output is too small to split or no input has its leading size.

    Inputs of the output's shape (and 0-d ones) are split by element; with broadcasting (a bias, a mask of
    ``(1, 1, T, T)``), the output is split along its first axis instead: an input whose first axis is the
    output's is sliced with it, one that broadcasts along it (size 1, or fewer dims) goes whole to every chunk."""
    shape = tuple(out_aval.shape)
    n = math.prod(shape)
    if n < 2 * MIN_CHUNK or not shape:
        return None
    full = by_rows = False
    for a in avals:
        s = tuple(a.shape)
        if s == shape:
            full = True
        elif s != () and not a.weak:
            by_rows = True
            if len(s) == len(shape) and s[0] not in (1, shape[0]):
                return None
    if not full and not by_rows:
        return None       # no input of the output's size (random draws: their values depend on the index)
    if by_rows:
        if shape[0] < 2:
            return None
        sliced = tuple(len(a.shape) == len(shape) and a.shape[0] == shape[0] for a in avals)
        if not any(sliced):
            return None
        return _by_rows(impl, shape, n, out_aval.dtype.np, sliced)
    is_ufunc = isinstance(impl, np.ufunc) and impl.nout == 1
    dtype = out_aval.dtype.np

    def chunked(*xs, **kw):
        nt = threads_for(n)
        if nt < 2 or np.geterr() != _DEFAULT_ERR:
            return impl(*xs, **kw)
        flat = []
        for x in xs:
            if type(x) is np.ndarray and x.ndim:
                if not x.flags.c_contiguous:
                    return impl(*xs, **kw)
                flat.append(x.reshape(-1))
            else:
                flat.append(x)
        out = np.empty(shape, dtype)
        o = out.reshape(-1)
        bounds = [n * k // nt for k in range(nt + 1)]
        run_split([(_chunk, (impl, is_ufunc, flat, o, bounds[k], bounds[k + 1], kw)) for k in range(nt)])
        STATS["chunked_calls"] += 1
        STATS["chunks"] += nt
        return out
    chunked.__name__ = f"chunked_{getattr(impl, '__name__', 'impl')}"
    return chunked


def _by_rows(impl, shape, n, dtype, sliced):
    """A broadcasting elementwise op split along the output's first axis (``sliced``: which inputs go with it)."""
    rows = shape[0]

    def row_chunked(*xs, **kw):
        nt = min(threads_for(n), rows)
        if nt < 2 or np.geterr() != _DEFAULT_ERR:
            return impl(*xs, **kw)
        for x in xs:
            if type(x) is np.ndarray and x.ndim and not x.flags.c_contiguous:
                return impl(*xs, **kw)      # (the serial result's layout would follow the input's)
        out = np.empty(shape, dtype)
        bounds = [rows * k // nt for k in range(nt + 1)]
        run_split([(_row_slices, (impl, xs, sliced, out, bounds[k], bounds[k + 1], kw)) for k in range(nt)])
        STATS["chunked_calls"] += 1
        STATS["chunks"] += nt
        return out
    row_chunked.__name__ = f"row_chunked_{getattr(impl, '__name__', 'impl')}"
    return row_chunked


def _row_slices(impl, xs, sliced, out, a, b, kw):
    out[a:b] = impl(*(x[a:b] if s else x for x, s in zip(xs, sliced)), **kw)


def _reduced_axes(params, ndim):
    """The axes a reduce-family op works along, from its params (``axes``, ``axis`` or layer_norm's ``naxes``),
    or None when they do not say."""
    if "axes" in params:
        return tuple(a % ndim for a in params["axes"])
    if "axis" in params and type(params["axis"]) is int:
        return (params["axis"] % ndim,)
    if "naxes" in params:
        return tuple(range(ndim - params["naxes"], ndim))
    return None


def for_rows(impl, avals, out_aval, params):
    """The row-split form of a reduce-family ``impl`` (softmax, log_softmax and its vjp, layer_norm, sum, amax
    over trailing axes) for this signature, or None.  Every input has one shape whose leading axis the op does
    not reduce, so output rows ``[a, b)`` are the op on input rows ``[a, b)`` alone: the same bits."""
    shape = tuple(avals[0].shape)
    if len(shape) < 2 or shape[0] < 2 or any(tuple(a.shape) != shape for a in avals):
        return None
    n = math.prod(shape)
    axes = _reduced_axes(params, len(shape))
    if n < 2 * MIN_CHUNK or not axes or 0 in axes:
        return None
    rows, oshape, dtype = shape[0], tuple(out_aval.shape), out_aval.dtype.np
    if not oshape or oshape[0] != rows:
        return None

    def row_chunked(*xs, **kw):
        nt = min(threads_for(n), rows)
        if nt < 2 or np.geterr() != _DEFAULT_ERR or not all(x.flags.c_contiguous for x in xs):
            return impl(*xs, **kw)
        out = np.empty(oshape, dtype)
        bounds = [rows * k // nt for k in range(nt + 1)]
        run_split([(_rows, (impl, xs, out, bounds[k], bounds[k + 1], kw)) for k in range(nt)])
        STATS["chunked_calls"] += 1
        STATS["chunks"] += nt
        return out
    row_chunked.__name__ = f"row_chunked_{getattr(impl, '__name__', 'impl')}"
    return row_chunked


def _rows(impl, xs, out, a, b, kw):
    out[a:b] = impl(*(x[a:b] for x in xs), **kw)


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

    def note(self, own: float, whole: float) -> None:
        if whole > self.SLOW * own + 50e-6:
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
    if len(tasks) > 1:
        _WORKERS.ensure(len(tasks) - 1)
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
    _PACER.note(t1 - t0, time.perf_counter() - t0)


def threads_for(elements: int) -> int:
    """How many threads an eager parallel call over ``elements`` elements uses (1: run it serially)."""
    n = min(settings.num_threads(), elements // MIN_CHUNK)
    if n < 2:
        return 1
    if _PACER.left:
        _PACER.left -= 1
        return 1
    return n


def _chunk(impl, is_ufunc, flat, o, a, b, kw):
    part = [x[a:b] if type(x) is np.ndarray and x.ndim else x for x in flat]
    if is_ufunc and not kw:
        impl(*part, out=o[a:b], casting="unsafe")     # (as dispatch's astype of the result)
    else:
        o[a:b] = impl(*part, **kw)


__all__ = ["for_signature", "for_rows", "run_split", "threads_for", "MIN_CHUNK", "STATS"]
