"""Forked LLVM compilers (codegen/native/forked_llvm.py): a synchronous cold build hands kernels' LLVM IR to a forked
child while this process compiles others.  Counted and compared, never timed: the child's object code is
bit-identical to this process's, a child that dies or is busy costs nothing but the job compiled here, and a cold
B11 step built with a forked compiler gives the same graph file and losses as one built without.
"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.kernels import ir_loops, kernel_ir as ki, loops
from jitgrad.codegen.native import build, cache, forked_llvm, llvm_build, objstore

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not forked_llvm.available(), reason="forked compilers need a Linux fork")


def _kernel_text(scale):
    """The LLVM IR text and key of a small elementwise kernel ``out = x * scale``."""
    b = ki.Builder()
    n0 = b.let("n0", b.A[0])
    px, po = b.let("p0", b.A[1].ptr(ki.F32)), b.let("p1", b.A[2].ptr(ki.F32))
    with b.loop("i0", n0) as i0:
        x = b.let("x0", px[i0])
        b.store(po, i0, b.let("t0", ki.cast(x * ki.const(scale, ki.F32), ki.F32)))
    k = loops.Kernel("kernel", b.finish(), rank=1, operands=(), classes=(), parallel=False)
    key = cache.cache_key(k.source, extra=("test-forked-llvm",))
    return key, ir_loops.render(k.ir, key)


def test_child_object_code_is_this_process_s():
    texts = [_kernel_text(s) for s in (2.0, 3.0)]
    fc = forked_llvm.ForkedCompiler()
    try:
        for key, text in texts:
            blob = fc.object_code(key, text)
            here = llvm_build.object_code(key, text)
            assert blob is not None and blob.data == here.data and blob.symbol == here.symbol
            assert list(blob.needs) == list(here.needs)
        assert fc.compiled == 2
    finally:
        fc.close()
    with pytest.raises(ChildProcessError):      # reaped
        os.waitpid(fc.pid, os.WNOHANG)


def test_busy_or_dead_child_leaves_the_job_here():
    key, text = _kernel_text(4.0)
    fc = forked_llvm.ForkedCompiler()
    try:
        with fc._busy:                          # another thread's job is in the child: not waited for
            assert fc.object_code(key, text) is None
        os.kill(fc.pid, signal.SIGKILL)
        failed = forked_llvm.STATS["failed"]
        assert fc.object_code(key, text) is None
        assert not fc.alive and forked_llvm.STATS["failed"] == failed + 1
        assert fc.object_code(key, text) is None          # closed: never asked again
        # the build's call: the job compiled here
        blob = llvm_build.compile_kernel(key, text, forked_llvm.ForkedCompilers(0))
        assert blob.data == llvm_build.object_code(key, text).data
    finally:
        fc.close()


def test_stuck_child_is_ended_and_the_job_done_here(monkeypatch):
    key, text = _kernel_text(5.0)
    fc = forked_llvm.ForkedCompiler()
    try:
        os.kill(fc.pid, signal.SIGSTOP)         # alive, never answers
        monkeypatch.setattr(forked_llvm, "REPLY_TIMEOUT_S", 0.2)
        assert fc.object_code(key, text) is None and not fc.alive
    finally:
        fc.close()
    with pytest.raises(ChildProcessError):      # killed and reaped
        os.waitpid(fc.pid, os.WNOHANG)


def test_few_kernels_or_one_core_fork_nothing(monkeypatch):
    n = forked_llvm.FORK_KERNELS
    assert forked_llvm.for_build(n - 1, 4) is None and forked_llvm.for_build(n, 1) is None
    monkeypatch.setattr(forked_llvm, "FORKS", 0)
    assert forked_llvm.for_build(n, 4) is None


# a cold B11 step (benchmarks/force_field.py), built synchronously as if on two cores
B11 = """
import importlib.util, json, os, sys, functools
import numpy as np, jitgrad as jg
from jitgrad.codegen.native import build, forked_llvm
build._cores = lambda: 2
spec = importlib.util.spec_from_file_location("force_field", os.path.join(sys.argv[1], "force_field.py"))
ff = importlib.util.module_from_spec(spec); spec.loader.exec_module(ff)
call, fn, args, _ = ff.torch_style(jg, "compiled", np.float32,
                                   compile_=functools.partial(jg.compile, backend="numba", background=False))
losses = [float(call()) for _ in range(3)]
print(json.dumps({"losses": losses, "counts": build.COUNTS, "forked": forked_llvm.STATS,
                  "numba": "numba" in sys.modules}))
"""


def _cold_b11(root, forks):
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND")}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), JITGRAD_CACHE_DIR=str(root),
               JITGRAD_BUILD_FORKS=str(forks))
    # one thread everywhere: how a busy machine splits a parallel loop or a BLAS call must not move the losses
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", B11, str(REPO / "benchmarks")], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def _graph_files(root):
    return {p.name: p.read_bytes() for p in Path(root).rglob("*") if p.is_file() and p.suffix == objstore.SUFFIX}


def test_cold_b11_build_with_a_forked_compiler_is_the_same_build(tmp_path):
    forked, alone = _cold_b11(tmp_path / "forked", 3), _cold_b11(tmp_path / "alone", 0)
    assert forked["losses"] == alone["losses"]
    assert forked["counts"]["forked_compilers"] == 1 and alone["counts"]["forked_compilers"] == 0
    # every kernel compiled once, by one process or the other, all from LLVM IR; no Numba, no build process
    assert forked["counts"]["kernels_compiled"] == alone["counts"]["kernels_compiled"] > forked_llvm.FORK_KERNELS
    assert forked["counts"]["kernels_ir"] == forked["counts"]["kernels_compiled"]
    # the child compiled some kernels, this process the rest, and no job fell back after a child failed
    assert forked["forked"]["kernels"] >= 1
    assert forked["forked"]["kernels"] < forked["counts"]["kernels_compiled"]
    assert forked["forked"]["failed"] == 0
    assert alone["forked"]["kernels"] == 0
    assert forked["counts"]["build_processes"] == 0 and not forked["numba"]
    # the same object code, whichever process compiled each kernel: the same files, byte for byte
    files = _graph_files(tmp_path / "forked")
    assert files and files == _graph_files(tmp_path / "alone")


def test_entry_is_built_by_a_forked_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_cores", lambda: 2)
    monkeypatch.setattr(forked_llvm, "FORK_KERNELS", 1)
    x = jg.tensor(np.linspace(-1, 1, 7).astype(np.float32))
    f = jg.compile(lambda x: (jg.tanh(x) * 3).sum() + jg.sigmoid(x).max(), backend="numba", background=False)
    before = dict(forked_llvm.STATS), build.COUNTS["drivers_compiled"]
    got = float(f(x))
    assert got == pytest.approx(float(np.tanh(np.linspace(-1, 1, 7)).sum() * 3 + 1 / (1 + np.exp(-1))), rel=1e-5)
    assert forked_llvm.STATS["entries"] == before[0]["entries"] + 1 and forked_llvm.STATS["failed"] == before[0]["failed"]
    assert build.COUNTS["drivers_compiled"] == before[1] + 1 and f.stats["compiled_calls"] == 1
