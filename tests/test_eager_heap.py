"""Eager mode's arrays reuse freed heap memory instead of touching fresh pages every step (runtime/heap.py).

Counted in page faults, in fresh processes (the glibc settings are process-wide): a step that keeps 30 live
1 MiB activations and frees them in backward takes ~5,600 faults a step with glibc's defaults, ~0 with
jitgrad's settings.
"""
import os
import subprocess
import sys

import pytest

_STEP = """
import resource
import jitgrad as jg
x = jg.randn(256, 1024, requires_grad=True)
def step():
    h = x
    for _ in range(30):
        h = (h * 0.5).tanh()
    h.sum().backward()
for _ in range(3):
    step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10)
"""


def _faults_per_step(**env):
    # (NumPy's ops, whose temporaries are what the heap settings are for: an eager kernel built in a background
    # thread during the counted steps would count its build's memory, and once built it makes no temporaries)
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", JITGRAD_EAGER_KERNELS="0", **env)
    r = subprocess.run([sys.executable, "-c", _STEP], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return float(r.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap settings")
def test_eager_step_reuses_freed_memory():
    kept = _faults_per_step()
    default = _faults_per_step(JITGRAD_MALLOC="keep")
    assert kept < 50, kept
    assert default > 1000, default     # the workload does fault with glibc's defaults: the test can fail
