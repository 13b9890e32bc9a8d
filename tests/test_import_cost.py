"""What ``import jitgrad`` pulls in (issue 17, item 5): counted in a fresh process, never timed."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "numba.core.compiler", "llvmlite", "scipy.linalg", "scipy", "torch", "jax")


def _modules_after(code):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code + f"\nimport sys, json; print(json.dumps([m for m in {HEAVY!r} "
                        "if m in sys.modules]))"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_import_jitgrad_imports_neither_numba_nor_scipy():
    assert _modules_after("import jitgrad, jitgrad.nn, jitgrad.optim, jitgrad.autograd") == []


def test_eager_matmul_does_not_import_scipy_linalg():
    # eager GEMMs call SciPy's OpenBLAS through its C symbol: no scipy.linalg (its import alone is ~0.3 s)
    got = _modules_after("import jitgrad as jg\nx = jg.randn(64, 64, requires_grad=True)\n"
                         "(x @ jg.randn(64, 64)).sum().backward()")
    assert "scipy.linalg" not in got and "numba" not in got, got
