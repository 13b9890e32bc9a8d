"""Shared test settings: hypothesis profiles sized for a 2-core CI machine."""
import os
import warnings

import numpy as np
import pytest
from hypothesis import settings, HealthCheck

# generated kernels go to a cache of their own shared by test runs and xdist workers (entries are keyed by
# content, so a stale one is never used), never to the user's ~/.cache/jitgrad
_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "jitgrad-tests")
os.environ.setdefault("JITGRAD_CACHE_DIR", _CACHE)
# tests check the compiled code itself, not the interpreter that serves calls while a background build runs
os.environ.setdefault("JITGRAD_BACKGROUND_COMPILE", "0")
# jg.compile without backend= runs the reference interpreter in tests (Numba builds cost seconds each); the numba
# backend is tested explicitly: the "numba" mode of the ``mode`` fixture and tests that pass backend="numba"
os.environ.setdefault("JITGRAD_BACKEND", "interpret")
# the worker pool's pacer (codegen/native/pool_pacer.py, off by default) would move the pool rounds tests count on
# a shared test machine: off even where the environment turns it on; its own tests drive it through a given clock
os.environ["JITGRAD_POOL_PACER"] = "0"
# so would the pool's busy rule (launches on the calling thread while its spinners see a core taken: workpool.py),
# on a machine other processes load: off, but where a test turns it on (its own tests script the clock)
os.environ["JITGRAD_POOL_BUSY_HOLD"] = "0"

# "ci" is derandomized: the same examples every run, so a CI result never depends on luck (use "dev" to explore)
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, suppress_health_check=_SUPPRESS)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SUPPRESS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with grad mode on and anomaly mode off, whatever the previous one did."""
    import jitgrad as jg
    from jitgrad.runtime import anomaly, grad_mode
    grad_mode.STATE.grad_enabled = True
    grad_mode.STATE.inference = False
    anomaly.set_anomaly_enabled(False)
    jg.manual_seed(0)
    yield
    grad_mode.STATE.grad_enabled = True
    grad_mode.STATE.inference = False
    anomaly.set_anomaly_enabled(False)


@pytest.fixture
def high_thresholds():
    """The compiled steps' pool thresholds at the eager kernels' (2^23 work, 2^15 elements) for one test: for tests
    of something else (the kernel eager and compiled mode share, grouping, a GEMM's bias fold) whose sizes sit
    between the two pairs, where the compiled default would put a loop or a product on the pool."""
    from jitgrad.codegen.native import workpool
    prev = workpool.set_min_work(workpool.EAGER_PARALLEL_WORK, workpool.EAGER_PARALLEL_GRAIN)
    yield
    workpool.set_min_work(*prev)


@pytest.fixture
def sync(monkeypatch):
    """Eager kernels built at their first call (no background build to wait for), signatures chosen afresh."""
    from jitgrad.jit import eager_kernels
    from jitgrad.runtime import dispatch
    monkeypatch.setattr(eager_kernels, "SYNC", True)
    monkeypatch.setattr(eager_kernels, "ENABLED", True)
    dispatch._RULES.clear()
    yield
    dispatch._RULES.clear()


@pytest.fixture(params=["eager", "compiled", "numba"])
def mode(request):
    """Run a test's programs eagerly and under ``@jg.compile`` on both backends ("compiled" is the reference
    interpreter, "numba" the generated kernels): pair it with ``compiled.maybe_compile(fn, mode)``
    (tests/compiled.py) so compiled code is tested on everything eager code is."""
    if request.param == "numba":
        request.applymarker(pytest.mark.filterwarnings("error::jitgrad.codegen.program.cpu.CodegenWarning"))
    return request.param
