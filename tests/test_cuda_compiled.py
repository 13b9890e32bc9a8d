"""Compiled functions on CUDA (Numba's simulator) == the same functions compiled for the CPU == eager.

Each case runs in a child process with the simulator on (it must be switched on before Numba's CUDA module is
imported), as in tests/test_cuda.py.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

_ROLE = os.environ.get("JITGRAD_CUDA_TEST_ROLE", "")
_HAVE = importlib.util.find_spec("numba_cuda") is not None

sim = pytest.mark.skipif(_ROLE != "compiled", reason="runs in its own process on the CUDA simulator "
                                                     "(test_compiled_cuda_set_on_the_simulator)")


@pytest.mark.skipif(_ROLE != "", reason="the parent test of a child process")
def test_compiled_cuda_set_on_the_simulator():
    # the simulator must be switched on before Numba's CUDA module is imported: a process of its own
    if not _HAVE:
        pytest.skip("numba-cuda is not installed (pip install -e '.[cuda]')")
    env = dict(os.environ, JITGRAD_CUDA_TEST_ROLE="compiled")
    if os.environ.get("JITGRAD_CUDA_REAL") != "1":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-k", "sim"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]
    assert " passed" in out and " failed" not in out, out[-3000:]


if _ROLE == "compiled":
    import jitgrad as jg
    import jitgrad.nn.functional as JF
    # the simulator's launcher polls its threads in a busy loop: a short GIL switch interval lets the threads
    # run (about 3x faster here)
    sys.setswitchinterval(5e-4)


# ---- focused cases ---------------------------------------------------------------------------------------------

@sim
@pytest.mark.parametrize("view", ["row", "strided", "transposed"])
def test_sim_state_that_is_a_view_of_a_cuda_tensor_writes_through_to_its_base(view):
    """CUDA views are copies that eager in-place ops write through to their base (cuda/eager.py); a compiled
    step's write-back into such a view must too, and refresh the base's other views."""
    def run(dev):
        big = jg.tensor(np.arange(30.0).reshape(3, 10) / 7.0, device=dev)
        s = {"row": lambda: big[1], "strided": lambda: big[:, ::2], "transposed": lambda: big.t()}[view]()
        other = big[:, 1]

        @jg.compile
        def step(x):
            with jg.no_grad():
                s.mul_(0.5).add_(x)
            return s * 2.0
        res = []
        for k in range(2):
            out = step(jg.tensor(np.full(tuple(s.shape), k + 1.0), device=dev))
            res.append([t.detach().cpu().numpy().copy() for t in (out, s, big, other)])
        return res
    for got, want in zip(run("cuda"), run("cpu")):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)


@sim
def test_sim_compiled_backward_accumulates_into_the_existing_grad_tensor():
    """As on the CPU (and in torch), ``.backward()`` on CUDA, compiled or eager, accumulates into the ``.grad``
    tensor already there (the same object, updated in place), so a reference taken to it sees the new gradient."""
    def run(dev, compiled):
        p = jg.tensor(np.arange(4.0), device=dev, requires_grad=True)

        def step(x):
            (p * x).sum().backward()
            return x * 2.0
        step = jg.compile(step) if compiled else step
        step(jg.tensor(np.ones(4), device=dev))
        g = p.grad
        step(jg.tensor(np.full(4, 3.0), device=dev))
        assert g is p.grad
        return g.cpu().numpy()
    for compiled in (True, False):      # eagerly too: a CUDA .grad was replaced by old + g
        np.testing.assert_array_equal(run("cuda", compiled), run("cpu", compiled))
