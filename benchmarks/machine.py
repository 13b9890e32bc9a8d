"""What the benchmark machine has and is doing: which modules are installed, this process's memory (RSS and
its peak, from /proc), and the CPU load of other processes (from /proc/stat and Linux PSI), which the harness
(harness.py) uses to wait for a quiet machine and to flag runs timed under load.

``JITGRAD_BENCH_QUIET`` (CPUs of background load, default 0.3): below it the machine counts as quiet.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import time

QUIET = float(os.environ.get("JITGRAD_BENCH_QUIET", "0.3") or 0.3)             # CPUs of background load
# one thread everywhere (fresh benchmark processes): set before NumPy, torch or JAX start their thread pools, so
# this module imports none of them
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                  "NUMBA_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
                  "JITGRAD_BACKGROUND_COMPILE": "0"}


# ------------------------------------------------------------------------------------------------ installed

def have(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(mod):
    try:
        return importlib.import_module(mod).__version__
    except Exception:  # noqa: BLE001
        return "not installed"


# ------------------------------------------------------------------------------------------------ memory

def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_kb() -> int | None:
    """Current resident set size (VmRSS) in KiB, from /proc."""
    return _proc_status_kb("VmRSS")


def peak_rss_kb() -> int | None:
    """Peak resident set size of this process so far (VmHWM) in KiB, from /proc."""
    return _proc_status_kb("VmHWM")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs).  False when not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------ CPU load

def cpu_ticks():
    """(machine busy seconds from /proc/stat, this process's + children's CPU seconds) or None."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
        busy = sum(int(v) for v in parts[1:4]) + sum(int(v) for v in parts[6:9])   # user nice system irq softirq steal
        t = os.times()
        return busy / hz, t.user + t.system + t.children_user + t.children_system
    except (OSError, ValueError, IndexError):
        return None


def cpu_stall_us():
    """Total microseconds in which some task waited for a CPU (Linux PSI, /proc/pressure/cpu), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, ValueError, IndexError):
        return None


def contended(stall_frac, other):
    """A batch is contended when other processes used CPU during it *and* tasks were kept waiting for a CPU
    (PSI) for a noticeable part of it.  Waiting caused only by this process's own threads does not count."""
    if other is None:
        return False
    if stall_frac is None:
        return other >= QUIET
    return other >= 0.15 and stall_frac >= 0.15


def wait_quiet(max_s, window=0.25):
    """Sleep until other processes keep fewer than ``QUIET`` CPUs busy (sampled over ``window``), at most
    ``max_s`` seconds; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_s:
        a, t = cpu_ticks(), time.perf_counter()
        time.sleep(window)
        ld = foreign_load(a, cpu_ticks(), time.perf_counter() - t)
        if ld is None or ld < QUIET:
            break
    return time.perf_counter() - t0


def foreign_load(a, b, wall):
    """Average number of CPUs kept busy by processes other than this one (and its children) between two
    :func:`cpu_ticks` samples: the background load of a shared machine."""
    if a is None or b is None or wall <= 0:
        return None
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / wall)
