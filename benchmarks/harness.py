"""Shared benchmark harness: warm-up, median of N timed runs, output checks, peak RSS, tables.

Every workload script builds one :class:`Bench`, registers configurations with :meth:`Bench.run` (each
configuration is a factory returning a step callable, or ``(step, probe)`` where ``probe(first_result)``
returns the quantities to check), then calls :meth:`Bench.finish`, which prints the table of medians and
ratios, the reference lines, the output checks (a mismatch is printed loudly; nothing aborts the table) and
the target verdicts.  With ``JITGRAD_BENCH_JSON=path`` set, each table is also appended to ``path`` as one
JSON line (``python benchmarks/report.py path`` turns that file into the tables of ``BENCHMARKS.md``).

Environment knobs: ``JITGRAD_BENCH_SCALE`` (float, default 1) multiplies every run count and time budget
(e.g. 0.2 for a quick smoke run); ``JITGRAD_BENCH_QUIET_WAIT`` (seconds per table, default 10) bounds the
waiting for a quiet machine.

Importing this module sets ``JITGRAD_BACKGROUND_COMPILE=0`` unless it is already set: the steady-state tables
then build the Numba code synchronously at the first call (the "first call" column includes it) and time
compiled code only.  With the default background build, calls run on the reference interpreter until the
compile finishes, which would mix interpreted and compiled calls in the medians.  B4 measures both modes.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
import warnings

import numpy as np

# what the machine has and is doing (installed modules, memory, other processes' CPU load): machine.py; scripts
# read these through the harness (H.have, H.rss_kb, ...)
from machine import (ONE_THREAD_ENV, QUIET, _version, contended, cpu_stall_us, cpu_ticks, foreign_load, have,  # noqa: F401
                     peak_rss_kb, reset_peak_rss, rss_kb, wait_quiet)

SCALE = float(os.environ.get("JITGRAD_BENCH_SCALE", "1") or 1)
JSON_PATH = os.environ.get("JITGRAD_BENCH_JSON", "")
TORCH_THREADS = 2
os.environ.setdefault("JITGRAD_BACKGROUND_COMPILE", "0")
QUIET_WAIT = float(os.environ.get("JITGRAD_BENCH_QUIET_WAIT", "10") or 10)    # seconds per table, at most
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ------------------------------------------------------------------------------------------------ environment

def import_torch():
    """torch with the suite's thread setting, or None when it is not installed."""
    if not have("torch"):
        return None
    import torch
    torch.set_num_threads(TORCH_THREADS)
    return torch


def import_jax():
    if not have("jax"):
        return None
    import jax
    return jax


def machine_info() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "torch": _version("torch") if have("torch") else "not installed",
        "jax": _version("jax") if have("jax") else "not installed",
        "torch_threads": TORCH_THREADS,
    }


# ------------------------------------------------------------------------------------------------ timing

class Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raise :class:`Timeout` in the main thread after ``seconds`` (SIGALRM); no-op when None."""
    if not seconds or threading_main() is False or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise Timeout(f"exceeded the {seconds:.0f} s limit for compile + first call")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def threading_main():
    import threading
    return threading.current_thread() is threading.main_thread()


def block(r):
    """Wait for asynchronous results (JAX arrays); a no-op for everything else."""
    if type(r).__module__.startswith("jax") or (isinstance(r, (tuple, list)) and r and
                                                  type(r[0]).__module__.startswith("jax")):
        import jax
        jax.block_until_ready(r)
    return r


def call_times(fn, repeat, warmup=1):
    """Seconds of each of ``repeat`` timed calls of ``fn`` after ``warmup`` untimed ones (the caller takes the
    median or the best)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def best_per_call(fn, n, repeats, clock):
    """Best per-call seconds over ``repeats`` timings of ``n`` calls of ``fn`` on ``clock``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n)
    return best


def measure(step, runs, warmup=3, budget_s=3.0, min_runs=5, first=True):
    """Run ``step`` ``warmup`` times, then time up to ``runs`` calls (stopping early once ``budget_s`` of timed
    calls have run and ``min_runs`` are done).  Returns (median seconds, number of timed runs)."""
    runs = max(min_runs, int(runs * SCALE))
    budget_s = budget_s * max(SCALE, 0.05)
    for _ in range(warmup):
        block(step())
    ts = []
    total = 0.0
    while len(ts) < runs:
        t = time.perf_counter()
        block(step())
        dt = time.perf_counter() - t
        ts.append(dt)
        total += dt
        if total > budget_s and len(ts) >= min_runs:
            break
    return float(np.median(ts)), len(ts)


# ------------------------------------------------------------------------------------------------ checks

def max_rel_err(got, ref) -> float:
    """max |got - ref| / max(|ref|, tiny): the error relative to the reference's scale."""
    g = np.asarray(to_numpy(got), dtype=np.float64)
    r = np.asarray(to_numpy(ref), dtype=np.float64)
    if g.shape != r.shape:
        return math.inf
    if not np.all(np.isfinite(g)):
        return math.inf
    scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-30)
    return float(np.max(np.abs(g - r))) / scale if r.size else 0.0


def to_numpy(x):
    if isinstance(x, np.ndarray) or np.isscalar(x):
        return np.asarray(x)
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().cpu().numpy()
    if mod.startswith("jitgrad"):
        return np.asarray(x.detach().numpy()) if hasattr(x, "detach") else np.asarray(x)
    return np.asarray(x)


# ------------------------------------------------------------------------------------------------ tables

def fmt_time(sec, unit):
    if sec is None or (isinstance(sec, float) and not math.isfinite(sec)):
        return "-"
    if unit == "us" and sec >= 1e-3:
        unit = "ms"
    v = sec * {"s": 1, "ms": 1e3, "us": 1e6}[unit]
    return f"{v:,.0f} {unit}" if v >= 1000 else (f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}")


def fmt_ratio(r):
    if r is None or not math.isfinite(r):
        return "-"
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def print_table(headers, rows, out=None):
    out = out or sys.stdout
    w = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w[i]) for i, h in enumerate(headers))
    print("  " + line, file=out)
    print("  " + "  ".join("-" * x for x in w), file=out)
    for r in rows:
        print("  " + "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(r)),
              file=out)


def emit(record: dict):
    """Append one JSON record (a finished table) to $JITGRAD_BENCH_JSON when it is set."""
    if not JSON_PATH:
        return
    with open(JSON_PATH, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


class Row:
    def __init__(self, name, kind, note=""):
        self.name = name
        self.kind = kind            # "jitgrad" | "peer" | "floor"
        self.median = None
        self.first = None
        self.runs = 0
        self.note = note
        self.error = None
        self.checks = []            # (quantity, rel err, tol, ok)
        self.step = None            # the prepared step, until it is timed
        self.times = None
        self.est = self.budget = 0.0
        self.want = self.min_runs = 0
        self.samples = None
        self.load = None

    def ok(self):
        """Ran and every checked output matched the reference."""
        return self.error is None and all(c[3] for c in self.checks)


class Bench:
    """One workload's table.  ``reference``: quantity -> array (float64 NumPy reference) checked with
    ``tol[quantity]`` (relative to the reference's largest magnitude)."""

    def __init__(self, wid, title, unit="ms", reference=None, tol=None, baselines=("fastest peer",)):
        self.id = wid
        self.title = title
        self.unit = unit
        self.reference = reference or {}
        self.tol = tol or {}
        self.baselines = list(baselines)
        self.rows: list[Row] = []
        self.refs: list[str] = []
        self.notes: list[str] = []
        self.targets: list[tuple[str, str, str]] = []   # (target, verdict, detail)
        self.mismatches: list[str] = []
        self.t0 = time.perf_counter()
        self.load0 = cpu_ticks()
        self.waited = 0.0
        print(f"\n=== {wid}: {title}", flush=True)

    # -- configurations -----------------------------------------------------------------------------------
    def run(self, name, kind, factory, runs, warmup=3, budget_s=3.0, min_runs=5, first_limit_s=None, note=""):
        """Build one configuration: first call (timed, including any compile), output check, warm-up.  The
        timed runs happen later in :meth:`time_all`, interleaved with the other configurations.  Exceptions
        are recorded in the row, never raised."""
        row = Row(name, kind, note)
        self.rows.append(row)
        print(f"  .. {name}", end="", flush=True)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with time_limit(first_limit_s):
                    t = time.perf_counter()
                    made = factory()
                    step, probe = made if isinstance(made, tuple) else (made, None)
                    r = block(step())
                    row.first = time.perf_counter() - t
                if probe is not None:
                    self._check(row, probe(r))
                ts = []
                for _ in range(max(1, warmup)):
                    t = time.perf_counter()
                    block(step())
                    ts.append(time.perf_counter() - t)
            self._warnings(row, caught)
            row.est = float(np.median(ts))
            row.step = step
            row.want = max(min_runs, int(runs * SCALE))
            row.min_runs = min_runs
            row.budget = budget_s * max(SCALE, 0.05)
            print(f"  first call {fmt_time(row.first, 'ms')}; warm-up ~{fmt_time(row.est, self.unit)}", flush=True)
        except Exception as e:  # noqa: BLE001 - a failing configuration is a result
            self._fail(row, e)
        return row

    def _warnings(self, row, caught):
        """jitgrad warnings met while building a configuration (e.g. a Numba codegen failure that falls back to
        the interpreter) go into the row's notes; peers' warnings are ignored."""
        seen = []
        for w in caught:
            mod = getattr(w.category, "__module__", "")
            text = str(w.message).strip().splitlines()[0] if str(w.message).strip() else ""
            if (mod.startswith("jitgrad") or "jitgrad" in text) and "Anomaly Detection" not in text:
                item = f"{w.category.__name__}: {text[:160]}"
                if item not in seen:
                    seen.append(item)
        for item in seen[:2]:
            row.note = (row.note + "; " if row.note else "") + "WARNING " + item
            print(f"\n     warning: {item}", flush=True)

    def _fail(self, row, e):
        row.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        row.step = None
        print(f"  FAILED: {row.error}", flush=True)
        tb = traceback.format_exc().strip().splitlines()
        print("     " + "\n     ".join(tb[-6:]), flush=True)

    def time_all(self, round_s=0.15):
        """Time every prepared configuration in interleaved rounds (each round: one untimed call, then a batch
        of timed calls per configuration), so that drifting background load on a shared machine hits all of
        them alike.  The background load (CPUs kept busy by other processes) is measured for every batch; a
        round that follows a loaded one first waits (up to ``JITGRAD_BENCH_QUIET_WAIT`` seconds per table in
        all) for the machine to quieten.  A configuration stops after ``runs`` quiet timed calls, or once
        ``budget_s`` of timed calls and ``min_runs`` are done.  Its median is over the calls of quiet batches
        when there are at least ``min_runs`` of them, else over all its calls (flagged "noisy").  A batch is
        contended (:func:`contended`) when other processes used CPU during it while tasks waited for a CPU
        (PSI); the "uncontended" column gives the share of a configuration's timed calls that were not."""
        todo = [r for r in self.rows if getattr(r, "step", None) is not None and r.median is None]
        if not todo:
            return
        print(f"  .. timing {len(todo)} configurations in interleaved rounds", flush=True)
        for r in todo:
            r.times, r.spent, r.samples = [], 0.0, []
        wait_budget = QUIET_WAIT * max(SCALE, 0.25)
        last_load = math.inf
        while todo:
            if last_load >= QUIET and self.waited < wait_budget:
                self.waited += wait_quiet(wait_budget - self.waited)
            last_load = 0.0
            for r in list(todo):
                k = int(min(max(1, round(round_s / max(r.est, 1e-7))), max(1, r.want - len(r.times))))
                batch = []
                try:
                    block(r.step())
                    a, p0, t0 = cpu_ticks(), cpu_stall_us(), time.perf_counter()
                    for _ in range(k):
                        t = time.perf_counter()
                        block(r.step())
                        batch.append(time.perf_counter() - t)
                    wall = time.perf_counter() - t0
                    other = foreign_load(a, cpu_ticks(), wall)
                    p1 = cpu_stall_us()
                    stall = (p1 - p0) / 1e6 / wall if (p0 is not None and p1 is not None and wall > 0) else None
                    load = 1.0 if contended(stall, other) else 0.0
                except Exception as e:  # noqa: BLE001
                    self._fail(r, e)
                    todo.remove(r)
                    continue
                r.samples.append((batch, load))
                r.times.extend(batch)
                r.spent += sum(batch)
                last_load = max(last_load, load)
                quiet_n = sum(len(b) for b, ld in r.samples if not ld)
                if quiet_n >= r.want or (r.spent >= r.budget and len(r.times) >= r.min_runs):
                    todo.remove(r)
        for r in self.rows:
            if getattr(r, "samples", None):
                quiet = [(b, ld) for b, ld in r.samples if not ld]
                nq = sum(len(b) for b, _ in quiet)
                used = quiet if nq >= r.min_runs else r.samples
                times = [t for b, _ in used for t in b]
                r.median = float(np.median(times))
                r.runs = len(times)
                r.load = nq / len(r.times)          # share of its timed calls that ran uncontended
                if used is not quiet:
                    r.note = (f"noisy: only {nq} of {len(r.times)} calls ran uncontended" +
                              ("; " + r.note if r.note else ""))
                print(f"     {r.name}: {fmt_time(r.median, self.unit)} (median of {r.runs}; "
                      f"{r.load:.0%} of calls uncontended)", flush=True)
            r.step = None     # release the configuration's buffers

    def skip(self, name, kind, why):
        row = Row(name, kind, note=f"skipped: {why}")
        self.rows.append(row)
        print(f"  .. {name}  skipped ({why})", flush=True)
        return row

    def add(self, name, kind, median, note=""):
        """A row measured elsewhere (e.g. in a subprocess)."""
        row = Row(name, kind, note)
        row.median = median
        self.rows.append(row)
        return row

    def add_child(self, name, kind, result: dict, note=""):
        """A row from a fresh process's result (:func:`child_step_result`): its median, first call and runs, its
        error, and its checked quantities (``result["checks"]``) against :attr:`reference`."""
        row = self.add(name, kind, None if result.get("median_ms") is None else result["median_ms"] / 1e3, note)
        row.first = result.get("first_call_s")
        row.runs = result.get("runs", 0)
        row.error = result.get("error")
        if result.get("checks"):
            self._check(row, result["checks"])
        return row

    def _check(self, row, got: dict):
        for q, val in got.items():
            if q not in self.reference:
                continue
            err = max_rel_err(val, self.reference[q])
            tol = self.tol.get(q, 1e-4)
            ok = err <= tol
            row.checks.append((q, err, tol, ok))
            if not ok:
                msg = (f"!!! MISMATCH {self.id} {row.name}: {q} max rel err {err:.3g} > tol {tol:g} "
                       f"(got {summary(val)}, reference {summary(self.reference[q])})")
                self.mismatches.append(msg)
                print("\n" + msg, flush=True)

    # -- report -------------------------------------------------------------------------------------------
    def row(self, name):
        for r in self.rows:
            if r.name == name:
                return r
        return None

    def fastest_peer(self):
        peers = [r for r in self.rows if r.kind == "peer" and r.median is not None and r.ok()]
        return min(peers, key=lambda r: r.median) if peers else None

    def baseline(self, which):
        if which == "fastest peer":
            return self.fastest_peer()
        return self.row(which)

    def ref(self, text):
        self.refs.append(text)

    def note(self, text):
        self.notes.append(text)

    def target(self, text, met, detail=""):
        verdict = "n/a" if met is None else ("MET" if met else "MISSED")
        self.targets.append((text, verdict, detail))

    def table(self):
        headers = ["configuration", "median", "first call"]
        bases = []
        for b in self.baselines:
            r = self.baseline(b)
            bases.append(r)
            headers.append(f"vs {b}" + (f" ({r.name})" if (r is not None and b == 'fastest peer') else ""))
        headers += ["runs", "uncontended", "check", "notes"]
        rows = []
        for r in self.rows:
            cells = [r.name, fmt_time(r.median, self.unit), fmt_time(r.first, "ms")]
            for b in bases:
                cells.append(fmt_ratio(r.median / b.median) if (r.median is not None and b is not None
                                                                 and b.median) else "-")
            cells.append(str(r.runs) if r.runs else "-")
            cells.append(f"{r.load:.0%}" if r.load is not None else "-")
            if r.checks:
                bad = [c for c in r.checks if not c[3]]
                cells.append("MISMATCH " + ",".join(c[0] for c in bad) if bad else
                             "ok (" + ", ".join(f"{c[0]} {c[1]:.0e}" for c in r.checks) + ")")
            else:
                cells.append("-")
            note = r.note
            if r.kind == "peer" and r.median is not None and not r.ok():
                note = "wrong result: not counted as fastest peer" + ("; " + note if note else "")
            if r.error:
                note = ("FAILED: " + r.error + ("; " + note if note else ""))
            cells.append(note)
            rows.append(cells)
        return headers, rows

    def finish(self, extra_tables=()):
        self.time_all()
        headers, rows = self.table()
        print(f"\n{self.id}: {self.title}" + ("  (medians; ratio = this / baseline, lower is better)"
                                             if self.baselines else ""))
        if self.rows:
            print_table(headers, rows)
        else:
            headers, rows = [], []
        for h, rs, title in extra_tables:
            print(f"\n  {title}")
            print_table(h, rs)
        if self.refs:
            print("  reference lines (shared/BENCHMARKS.md, another machine; not measured here):")
            for t in self.refs:
                print("    - " + t)
        for t in self.notes:
            print("  note: " + t)
        for text, verdict, detail in self.targets:
            print(f"  target: {text}: {verdict}" + (f" ({detail})" if detail else ""))
        if self.mismatches:
            print("  " + "!" * 60)
            for m in self.mismatches:
                print("  " + m)
            print("  " + "!" * 60)
        wall = time.perf_counter() - self.t0
        other = foreign_load(self.load0, cpu_ticks(), wall)
        load = f"; other processes used {other:.2f} of {os.cpu_count()} CPUs on average" if other is not None else ""
        if self.waited:
            load += f"; waited {self.waited:.1f} s for quiet"
        print(f"  [{self.id} wall time {wall:.1f} s{load}]", flush=True)
        emit({"id": self.id, "title": self.title, "headers": headers, "rows": rows,
              "extra_tables": [{"title": t, "headers": h, "rows": rs} for h, rs, t in extra_tables],
              "refs": self.refs, "notes": self.notes, "targets": self.targets, "mismatches": self.mismatches,
              "wall_s": wall, "foreign_cpus": other, "machine": machine_info()})


def summary(x):
    a = np.asarray(to_numpy(x), dtype=np.float64)
    if a.size == 1:
        return f"{float(a.reshape(())):.7g}"
    return f"array{list(a.shape)} |max|={np.max(np.abs(a)):.4g}"


# ------------------------------------------------------------------------------------------------ subprocesses

def run_child(args, env=None, timeout=600):
    """Run ``python args...`` in a fresh process; returns (wall seconds, last JSON line printed or None,
    stdout+stderr tail)."""
    e = dict(os.environ)
    e.pop("JITGRAD_BENCH_JSON", None)
    if env:
        e.update(env)
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=e, timeout=timeout,
                           cwd=ROOT)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, None, f"timed out after {timeout} s"
    wall = time.perf_counter() - t
    out = p.stdout + p.stderr
    res = None
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                res = json.loads(line)
                break
            except ValueError:
                pass
    if p.returncode != 0 and res is None:
        res = {"error": f"exit {p.returncode}: " + (out.strip().splitlines() or ["?"])[-1]}
    return wall, res, out[-2000:]


def pin_to_one_core():
    """Pin every thread of this process to one core: XLA:CPU runs independent operations of a jitted step on its
    thread pool whatever ``XLA_FLAGS`` says."""
    core = min(os.sched_getaffinity(0))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:         # a thread that has exited meanwhile
            pass


def child_step_result(build, check=None, steps=30, warmup=5, pin=True) -> dict:
    """Time one training step in this (fresh) process.  ``build()`` returns ``call`` or ``(call, sync)``, where
    ``call()`` runs one step and returns the loss at the parameters it started from.  The first call is timed
    alone (tracing and compiling included, on every core), then after ``warmup - 1`` more calls ``steps`` timed
    ones, pinned to one core unless ``pin`` is False.  ``check()``, run afterwards, returns quantities to
    compare across processes (a fresh float64 copy of the step's losses).  Returns a JSON-able dict: median_ms,
    first_call_s, runs, loss_0, loss_after, cpu_per_wall, peak_rss_mb, checks, or error (first line of the
    exception, for a configuration that raises: that is a result too)."""
    res = {}
    try:
        made = build()
        call, sync = made if isinstance(made, tuple) else (made, None)
        sync = sync or (lambda: None)
        t0 = time.perf_counter()
        res["loss_0"] = float(call())
        sync()
        res["first_call_s"] = round(time.perf_counter() - t0, 4)
        if pin and hasattr(os, "sched_setaffinity"):
            pin_to_one_core()
        res["loss_after"] = float(call())
        for _ in range(warmup - 2):
            call()
        sync()
        times = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            t = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - t)
        res["cpu_per_wall"] = round((time.process_time() - cpu0) / (time.perf_counter() - wall0), 2)
        res["median_ms"] = round(float(np.median(times)) * 1e3, 4)
        res["runs"] = steps
        checks = {"loss float32": [res["loss_0"], res["loss_after"]]}
        if check is not None:
            checks.update({q: [float(v) for v in np.ravel(to_numpy(val))] for q, val in check().items()})
        res["checks"] = checks
    except Exception as e:  # noqa: BLE001 - a configuration that raises is a result
        res["error"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
    res["peak_rss_mb"] = round((peak_rss_kb() or 0) / 1024, 1)
    return res


def fresh_process_result(script, args, timeout=1800) -> dict:
    """Run ``python script args...`` with one thread everywhere and empty jitgrad, Numba and inductor caches (so
    the first call is a cold build); the last JSON line it prints, or an error."""
    import shutil
    import tempfile
    cache = tempfile.mkdtemp(prefix="jitgrad-bench-")
    try:
        env = dict(ONE_THREAD_ENV, JITGRAD_CACHE_DIR=os.path.join(cache, "jitgrad"),
                   NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
        wall, res, tail = run_child([os.path.abspath(script), *args], env=env, timeout=timeout)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if res is None:
        res = {"error": (tail.strip().splitlines() or ["no output"])[-1]}
    res["process_s"] = round(wall, 2)
    return res


def child_step_main(build, key, unpinned=False, check_steps=4):
    """A fresh process's side of :func:`fresh_process_table`: ``build(key, dtype)`` makes the configuration's step
    (see :func:`child_step_result`); float32 is timed, then a fresh float64 copy runs ``check_steps`` steps whose
    losses are compared across configurations.  Prints one JSON line."""
    def check():
        made = build(key, np.float64)
        call = made[0] if isinstance(made, tuple) else made
        return {"loss float64": [float(call()) for _ in range(check_steps)]}
    res = child_step_result(lambda: build(key, np.float32), check=check, pin=not unpinned)
    print(json.dumps(dict(res, key=key)), flush=True)


def fresh_process_table(bench, script, configs, only=None, unpinned=False) -> dict:
    """Run each configuration ``(row name, child key, row kind, module it needs)`` as ``script --child key`` in a
    fresh process (:func:`fresh_process_result`) and add its row to ``bench``.  The first configuration that ran
    gives the reference losses (``bench.tol`` per quantity; the first configuration, PyTorch eager, runs whatever
    ``only`` selects); a configuration whose module is missing is skipped.  Returns the results by row name."""
    results = {}
    for n, (name, key, kind, needs) in enumerate(configs):
        if n and only and only not in name and only not in key:
            continue
        if not have(needs):
            bench.skip(name, kind, f"{needs} not installed")
            continue
        print(f"  .. {name}", flush=True)
        res = fresh_process_result(script, ["--child", key] + ["--unpinned"] * unpinned)
        results[name] = res
        if not bench.reference and res.get("checks"):
            bench.reference = {q: np.asarray(v, np.float64) for q, v in res["checks"].items()}
            bench.note(f"losses checked against {name}'s in the same run (float64, {len(res['checks'].get('loss float64', []))} steps: "
                       f"{res['checks'].get('loss float64')})")
        note = f"process {res.get('process_s', 0):.1f} s, peak RSS {res.get('peak_rss_mb', 0):.0f} MB"
        if res.get("cpu_per_wall") is not None:
            note += f", CPU/wall {res['cpu_per_wall']}"
        bench.add_child(name, kind, res, note)
    bench.note("each row a fresh process, one thread, cold caches; first call = tracing and building included; "
               f"timed steps {'on any core' if unpinned else 'pinned to one core'}")
    return results


def ratio_targets(bench, names, limits, first_s=None):
    """Targets "row <= limit x baseline row" for each row of ``names`` and ``limits`` ``{baseline name: limit}``,
    and its first call <= ``first_s``; rows or baselines that did not run are left out."""
    for name in names:
        row = bench.row(name)
        if row is None or row.median is None:
            continue
        for base_name, limit in limits.items():
            base = bench.row(base_name)
            if base is not None and base.median:
                bench.target(f"{name} <= {limit}x {base_name}", row.median <= limit * base.median,
                             f"{row.median / base.median:.2f}x")
        if first_s is not None and row.first is not None:
            bench.target(f"{name}: first call cold <= {first_s:g} s", row.first <= first_s, f"{row.first:.2f} s")


def workload_build(W, key, dtype):
    """Configuration ``key`` ("lib:mode[:variant]") of a workload module ``W`` with ``torch_style``, ``torch_func``
    and ``jax_step`` (force_field.py, pinn.py) as ``call`` or ``(call, sync)``; a variant is passed to
    ``torch_style`` as its ``laplacian``.  One thread for torch; jitgrad builds before its first call returns."""
    lib, mode, *variant = key.split(":")
    extra = {"laplacian": variant[0]} if variant else {}
    if lib == "jax":
        return W.jax_step(mode, dtype)
    if lib in ("torch", "torch-func"):
        import torch
        torch.set_num_threads(1)
        if lib == "torch-func":
            return W.torch_func(torch, mode, dtype)
        return W.torch_style(torch, mode, dtype, **extra)[0]
    import functools
    import jitgrad
    return W.torch_style(jitgrad, mode, dtype, compile_=functools.partial(jitgrad.compile, background=False),
                         **extra)[0]


def workload_main(doc, script, bench_id, title, configs, W, targets, ref, check_steps=4):
    """The command line of a fresh-process step table (b11_forces.py, b12_pinn.py): ``--child KEY`` runs one
    configuration of ``W`` (:func:`workload_build`) here, else every one of ``configs`` in its own process, with
    ``targets`` (rows held to 0.5x PyTorch eager and 0.8x JAX jit, first call cold <= 2 s) and the ``ref`` line."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--child", help="run one configuration (lib:mode[:variant]) in this process; prints one JSON line")
    ap.add_argument("--only", help="run only the configurations whose name or key contains this")
    ap.add_argument("--unpinned", action="store_true", help="leave the timed steps free to run on every core")
    ap.add_argument("--json", action="store_true", help="also print every row's result as one JSON line")
    a = ap.parse_args()
    if a.child:
        return child_step_main(lambda key, dtype: workload_build(W, key, dtype), a.child, a.unpinned, check_steps)
    bench = Bench(bench_id, title, unit="ms", tol={"loss float64": 1e-8, "loss float32": 1e-4},
                  baselines=("PyTorch eager", "fastest peer"))
    results = fresh_process_table(bench, script, configs, a.only, a.unpinned)
    ratio_targets(bench, targets, {"PyTorch eager": 0.5, "JAX jit": 0.8}, first_s=2.0)
    bench.ref(ref)
    bench.finish()
    if a.json:
        print(json.dumps({"id": bench_id, "machine": machine_info(), "load_avg": os.getloadavg(), "rows": results}))


def mlp_data(B, D, H, C, seed=0):
    """The anchors' B1/B5 data: x (B,D) float32, labels y (B,), six parameters (float32)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, D), dtype=np.float32)
    y = rng.integers(0, C, B)
    ws = [rng.standard_normal((D, H), dtype=np.float32) * 0.05, np.zeros(H, np.float32),
          rng.standard_normal((H, H), dtype=np.float32) * 0.05, np.zeros(H, np.float32),
          rng.standard_normal((H, C), dtype=np.float32) * 0.05, np.zeros(C, np.float32)]
    return x, y, ws
