"""Object code we keep and load ourselves (issue 17), and the cache trust rule for it (issue 19, items 4 and 7).

Counted, never timed: what a warm start imports, how many kernels it loads from how many files and compiles,
which files are refused and rebuilt.  Processes that must start fresh run as children.
"""
import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.codegen.native import build_procs, cache, numba_build, objstore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(root))
    cache._warned.clear()
    return root


def _env(root, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("JITGRAD_BACKGROUND_COMPILE", "JITGRAD_BACKEND")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["JITGRAD_CACHE_DIR"] = str(root)
    env.update(extra)
    return env


# a step with a captured parameter, a matmul, a fused loop with math, a reduction and an in-place update
STEP = textwrap.dedent("""
    import json, sys
    import numpy as np, jitgrad as jg
    from jitgrad.codegen.native import build, objstore
    from jitgrad.codegen.kernels import small_gemm
    W = jg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), requires_grad=True)

    @jg.compile(backend="numba", background=BACKGROUND)
    def step(x):
        loss = (jg.tanh(x @ W) * 2).sum()
        loss.backward()
        with jg.no_grad():
            W.sub_(0.1 * W.grad)
            W.grad = None
        return loss.detach()
    v = float(step(jg.tensor(np.ones((2, 4), np.float32))))
    step.wait()
    v2 = float(step(jg.tensor(np.ones((2, 4), np.float32))))
    print(json.dumps({"loss": [v, v2], "stats": step.stats, "counts": build.COUNTS, "files": objstore.STATS,
                      "small_gemm": small_gemm.STATS,
                      "compiler": "numba.core.compiler" in sys.modules, "numba": "numba" in sys.modules,
                      "rejected": objstore.last_error}))
    """)


def _run_step(root, background=False, **env):
    r = subprocess.run([sys.executable, "-c", STEP.replace("BACKGROUND", str(background))], env=_env(root, **env),
                       capture_output=True, text=True, timeout=300, cwd=str(root.parent))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _graph_files(root):
    return sorted(root.rglob("*" + objstore.SUFFIX))


# ------------------------------------------------------------------------------------------------ warm start

def test_warm_start_loads_one_file_and_imports_no_numba(tmp_path):
    root = tmp_path / "cache"
    cold = _run_step(root)
    # (one kernel since codegen fuses the backward into the forward loop; two GEMMs, one with the update)
    assert cold["counts"]["kernels_compiled"] >= 1 and cold["counts"]["drivers_compiled"] == 1
    warm = _run_step(root)
    c = warm["counts"]
    # N kernels and the entry linked from the graph's one file; nothing compiled; Numba never imported
    assert c["kernels_compiled"] == 0 and c["drivers_compiled"] == 0 and c["build_processes"] == 0, c
    assert c["kernels_loaded"] == cold["counts"]["kernels_compiled"] and c["drivers_loaded"] == 1, c
    # the graph's one file, and the small-GEMM kernels' module (kernels/small_gemm.py: its 4x3 product), once per
    # process for every graph
    assert warm["small_gemm"] == {"modules_built": 0, "modules_loaded": 1}, warm["small_gemm"]
    assert c["graph_files_loaded"] == 1 and warm["files"]["files_read"] == 2, warm["files"]
    assert not warm["compiler"] and not warm["numba"]
    assert warm["loss"] == cold["loss"]
    assert warm["stats"]["compiled_calls"] == 2 and warm["stats"]["interpreted_calls"] == 0
    # kernels are never Numba-cached modules: Numba's files are only those of jitgrad's helpers, in <cache>/numba
    assert not list(root.rglob("__pycache__"))
    assert all((root / "numba") in p.parents for p in root.rglob("*.nbi"))


def test_corrupt_graph_and_object_files_are_rebuilt_not_trusted(tmp_path):
    root = tmp_path / "cache"
    cold = _run_step(root)
    files = _graph_files(root)
    assert len(files) >= 3          # each kernel, the entry, and the graph's file
    for k, p in enumerate(files):   # damage every one: truncated, flipped bytes, emptied
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2] if k % 3 == 0 else
                      (data[:-10] + bytes(b ^ 0xFF for b in data[-10:]) if k % 3 == 1 else b""))
    again = _run_step(root)
    assert again["loss"] == cold["loss"]
    assert again["counts"]["kernels_compiled"] == cold["counts"]["kernels_compiled"]     # rebuilt, not loaded
    assert again["files"]["files_rejected"] >= 1
    healed = _run_step(root)            # and not left degraded: the next run loads the rewritten file
    assert healed["counts"]["kernels_compiled"] == 0 and healed["counts"]["graph_files_loaded"] == 1
    assert healed["loss"] == cold["loss"]


# ------------------------------------------------------------------------------------------------ the file format

def _blob(name="k" * 64, data=b"\x7fELF" + b"\0" * 60):
    return objstore.Blob(name, "sym", data, ["memset"])


KEY = "ab" * 32


def _written(root):
    assert objstore.write(KEY, [_blob(), _blob("e" * 64)], root) is not None
    return objstore.path_for(KEY, root)


def test_intact_file_round_trips(tmp_path):
    p = _written(tmp_path)
    blobs = objstore.read(KEY, tmp_path)
    assert [b.name for b in blobs] == ["k" * 64, "e" * 64] and blobs[0].needs == ("memset",)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600 and stat.S_IMODE(p.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("damage, why", [
    (lambda d: d[:-1], "truncated"),
    (lambda d: d[:40], "truncated header"),
    (lambda d: d[:-3] + b"xyz", "checksum mismatch"),
    (lambda d: d + b"\0", "trailing bytes"),
    (lambda d: b"GARBAGE!" + d[8:], "not a jitgrad object file"),
    (lambda d: b"", "not a jitgrad object file"),
])
def test_damaged_file_is_refused(tmp_path, damage, why):
    p = _written(tmp_path)
    p.write_bytes(damage(p.read_bytes()))
    with pytest.warns(cache.JitgradCacheWarning, match="rebuilding"):
        assert objstore.read(KEY, tmp_path) is None
    assert why in objstore.last_error[KEY]
    _written(tmp_path)                  # a rebuild replaces it
    assert objstore.read(KEY, tmp_path) is not None


def test_foreign_file_under_our_key_is_refused(tmp_path):
    other = "cd" * 32
    objstore.write(other, [_blob()], tmp_path)
    dst = objstore.path_for(KEY, tmp_path)
    dst.parent.mkdir(mode=0o700, exist_ok=True)
    dst.write_bytes(objstore.path_for(other, tmp_path).read_bytes())
    os.chmod(dst, 0o600)
    with pytest.warns(cache.JitgradCacheWarning):
        assert objstore.read(KEY, tmp_path) is None
    assert "another key" in objstore.last_error[KEY]


def test_object_that_is_not_elf_is_refused(tmp_path):
    objstore.write(KEY, [_blob(data=b"#!/bin/sh\n" * 10)], tmp_path)
    with pytest.warns(cache.JitgradCacheWarning):
        assert objstore.read(KEY, tmp_path) is None
    assert "not ELF" in objstore.last_error[KEY]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_world_or_group_writable_file_is_refused(tmp_path):
    p = _written(tmp_path)
    for mode in (0o666, 0o620):
        os.chmod(p, mode)
        with pytest.warns(cache.JitgradCacheWarning):
            assert objstore.read(KEY, tmp_path) is None
        assert "writable" in objstore.last_error[KEY]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_group_writable_shard_directory_is_refused(tmp_path):
    p = _written(tmp_path)
    os.chmod(p.parent, 0o770)
    with pytest.warns(cache.JitgradCacheWarning):
        assert objstore.read(KEY, tmp_path) is None
    assert "directory" in objstore.last_error[KEY]
    assert objstore.write(KEY, [_blob()], tmp_path) is None     # nor written into


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership")
def test_file_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    _written(tmp_path)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 1)
    with pytest.warns(cache.JitgradCacheWarning):
        assert objstore.read(KEY, tmp_path) is None
    assert "owned by uid" in objstore.last_error[KEY]


def test_symlinked_file_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere.jgo"
    target.write_bytes(objstore.encode(KEY, [_blob()]))
    os.chmod(target, 0o600)
    p = objstore.path_for(KEY, tmp_path)
    p.parent.mkdir(mode=0o700)
    p.symlink_to(target)
    with pytest.warns(cache.JitgradCacheWarning):
        assert objstore.read(KEY, tmp_path) is None
    assert "symbolic link" in objstore.last_error[KEY]
    objstore.write(KEY, [_blob()], tmp_path)
    assert not p.is_symlink() and target.read_bytes() == objstore.encode(KEY, [_blob()])


# ------------------------------------------------------------------------------------------------ build processes

def test_build_process_never_runs_code_from_the_callers_directory(tmp_path, cache_root):
    """A numba.py (or numpy.py) in the working directory must not run in a build process."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "pwned"
    for name in ("numba.py", "numpy.py", "llvmlite.py"):
        (evil / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(3)\n")
    f = jg.compile(lambda x: (jg.exp(x) * 3).sum(), backend="numba", background=True)
    cg = _unstarted(f, jg.ones(5))
    jobs = cg.code.pending_jobs()
    assert jobs
    r = subprocess.run(build_procs.command(jobs, cg.code), cwd=str(evil), capture_output=True, text=True, timeout=300,
                       env=_env(cache_root, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    assert objstore.read(cg.code.gkey) is not None        # and the build did its job
    assert f.wait(timeout=300) and float(f(jg.ones(5))) == pytest.approx(3 * 5 * np.e, rel=1e-6)


def _unstarted(f, *args):
    """The CompiledGraph of ``f(*args)``, traced but not called: its background build is not started."""
    from jitgrad.jit.graph_code import compiled_graph
    e = f._entry_for(args, {})
    cg = compiled_graph(e.graph, e.gf.writes, background=True)
    assert cg.run is None and cg.pending
    return cg


def test_one_builder_per_kernel_across_processes(cache_root):
    f = jg.compile(lambda x: (jg.sigmoid(x) * 5 - 1).sum(), backend="numba", background=True)
    x = jg.tensor(np.linspace(-1, 1, 9).astype(np.float32))
    cg = _unstarted(f, x)
    jobs = cg.code.pending_jobs()
    env = _env(cache_root, JITGRAD_BUILD_REPORT="1")
    # a builder holds the lock of the first job: a build process skips that key, builds the rest
    held = objstore.BuildLock(jobs[0][1])
    assert held.acquire()
    try:
        r = subprocess.run(build_procs.command(jobs), capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        assert not objstore.exists(jobs[0][1]) and all(objstore.exists(k) for _, k, _ in jobs[1:])
    finally:
        held.release()
    # two build processes on the same jobs at once: each key is compiled by one of them
    procs = [subprocess.Popen(build_procs.command(jobs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for _ in range(2)]
    compiled = 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
        c = json.loads(out.decode().splitlines()[-1])
        compiled += c["kernels_compiled"] + c["drivers_compiled"]
    assert compiled == 1          # only the job the first run skipped was left
    want = float((1 / (1 + np.exp(-np.linspace(-1, 1, 9))) * 5 - 1).sum())
    # its build found every kernel built (only its entry, LLVM IR in milliseconds, was made here): linked only
    assert f.wait(timeout=300) and cg.code.compiled_keys <= {cg.code.ekey}
    assert float(f(x)) == pytest.approx(want, rel=1e-5) and f.stats["compiled_calls"] == 1


def test_numba_helper_cache_never_uses_an_untrusted_numba_cache_dir(tmp_path):
    """jitgrad's own cache=True helpers (intmath...) cache under the private jitgrad cache, never in a
    world-writable NUMBA_CACHE_DIR (nor in __pycache__ next to jitgrad's sources)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    root = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import jitgrad as jg, numpy as np
        from jitgrad.codegen.kernels import intmath
        # (an integer power: a kernel Numba compiles, intmath.pow_i64 has a loop; codegen/kernels/ir_loops.py builds the
        # others without Numba or its helpers' caches)
        f = jg.compile(lambda x: (x ** x).sum(), backend="numba", background=False)
        f(jg.ones(3, dtype=jg.int64))
        print(intmath.pow_i64._cache._cache_path)
        """)], env=_env(root, NUMBA_CACHE_DIR=str(shared)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    path = r.stdout.split()[-1]
    assert path.startswith(str(root / "numba")), path
    assert not [p for p in shared.rglob("*") if p.is_file()]     # nothing read or written there


def test_full_disk_falls_back_to_the_in_memory_build(cache_root, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(objstore.tempfile, "mkstemp", full)
    monkeypatch.setattr(cache.tempfile, "mkstemp", full)
    f = jg.compile(lambda x: (jg.log1p(x * x) + 2).sum(), backend="numba", background=True)
    x = jg.tensor(np.arange(6, dtype=np.float32))
    want = float(np.log1p(np.arange(6.0) ** 2).sum() + 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cache.JitgradCacheWarning)
        assert float(f(x)) == pytest.approx(want, rel=1e-5)
        assert f.wait(timeout=300)              # the promised build happened, in memory
        assert float(f(x)) == pytest.approx(want, rel=1e-5)
    assert f.stats["compiled_calls"] == 1
    assert not _graph_files(cache_root)


def test_wait_in_a_forked_child_does_not_block(cache_root):
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    f = jg.compile(lambda x: (x * 7 + 1).sum(), backend="numba", background=True)
    x = jg.ones(3)
    assert float(f(x)) == 24.0          # the build is queued in this process's thread
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: the parent's build thread does not exist here
        try:
            import signal
            signal.alarm(240)           # blocking forever would kill the child: no result, the test fails
            ok = f.wait()
            os.write(w, json.dumps([ok, float(f(x)), f.stats["compiled_calls"]]).encode())
        finally:
            os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    got = json.loads(os.read(r, 1000).decode() or "null")
    assert got == [True, 24.0, 1], status
    assert f.wait(timeout=300)


def test_build_lock_is_held_from_the_moment_a_build_process_is_started(cache_root):
    """The starter takes each key's lock and hands it to the child: a script started right after sees every key
    being built (and starts no builder of its own), even before the child has imported anything."""
    f = jg.compile(lambda x: (jg.erf(x) * 2).sum(), backend="numba", background=True)
    cg = _unstarted(f, jg.ones(4))
    jobs = cg.code.pending_jobs()
    p = build_procs.spawn(jobs, cg.code)
    try:
        assert all(objstore.BuildLock(key).held_elsewhere() for _, key, _ in jobs)
        assert build_procs.spawn(jobs) is None            # nothing left to hand to a second builder
    finally:
        _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err.decode()
    assert not any(objstore.BuildLock(key).held_elsewhere() for _, key, _ in jobs)
    assert objstore.read(cg.code.gkey) is not None


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("how", ["world-writable dir", "foreign file", "symlink"])
def test_helpers_pycache_others_can_write_is_replaced_by_a_private_dir(tmp_path, cache_root, monkeypatch, how):
    pyc = tmp_path / "codegen" / "__pycache__"
    pyc.parent.mkdir(mode=0o700)
    if how == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        pyc.symlink_to(tmp_path / "real")
    else:
        pyc.mkdir(mode=0o700)
        if how == "world-writable dir":
            os.chmod(pyc, 0o777)
        else:
            (pyc / "mathlib.exp_f32-1.py311.nbi").write_bytes(b"pickle")
            os.chmod(pyc / "mathlib.exp_f32-1.py311.nbi", 0o666)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(numba_build, "numba_default_dir", lambda: pyc)
    monkeypatch.setattr(numba_build, "_NUMBA_DIR", None)
    with pytest.warns(cache.JitgradCacheWarning, match="not used from"):
        d = numba_build.numba_cache_dir()
    assert d == str(cache_root / "numba") and stat.S_IMODE(os.stat(d).st_mode) == 0o700
    # and a private __pycache__ of our own is Numba's own place, used as is
    ok = tmp_path / "ok" / "__pycache__"
    ok.mkdir(parents=True, mode=0o700)
    os.chmod(ok.parent, 0o700)
    monkeypatch.setattr(numba_build, "numba_default_dir", lambda: ok)
    monkeypatch.setattr(numba_build, "_NUMBA_DIR", None)
    assert numba_build.numba_cache_dir() is None


@pytest.mark.parametrize("ir_parallel", ["1", "0"])
def test_parallel_kernel_links_only_the_runtime_it_needs(tmp_path, ir_parallel):
    """A prange kernel built without Numba (the default) calls jitgrad's worker pool: its file names the pool's
    symbols and a warm start links it without importing Numba.  Built by Numba (``JITGRAD_IR_PARALLEL=0``) it
    calls Numba's threading layer and NRT: its file says so, and a warm start initialises just that runtime
    before linking it.  Values as the cold build gave, both ways."""
    code = textwrap.dedent("""
        import json, sys, numpy as np, jitgrad as jg
        from jitgrad.codegen.native import build, objload
        f = jg.compile(lambda x: (jg.tanh(x) * 2).sum(), backend="numba", background=False, parallel=True)
        x = jg.tensor(np.linspace(0, 1, SIZE, dtype=np.float32))    # large enough for a prange loop
        print(json.dumps({"v": float(f(x)), "counts": build.COUNTS, "runtime": objload.STATS["numba_runtime"],
                          "numba": "numba" in sys.modules}))
        """).replace("SIZE", str((1 << 20) + 8))
    root = tmp_path / "cache"
    outs = []
    env = dict(_env(root), JITGRAD_IR_PARALLEL=ir_parallel)
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout.splitlines()[-1]))
    cold, warm = outs
    assert warm["counts"]["kernels_compiled"] == 0 and warm["counts"]["graph_files_loaded"] == 1
    assert warm["v"] == cold["v"]
    # a float32 sum: over [0, 1] it is well conditioned (over [-1, 1] it is ~0, and its rounding error depends on
    # how the chunks split between threads)
    assert warm["v"] == pytest.approx(float((np.tanh(np.linspace(0, 1, (1 << 20) + 8)) * 2).sum()), rel=1e-5)
    needs = {s for p in _graph_files(root) for b in (objstore.read(p.stem, root) or []) for s in b.needs}
    if ir_parallel == "1":
        assert warm["runtime"] == 0 and not warm["numba"] and not cold["numba"], (cold, warm)
        assert {"jitgrad_wq_add_task", "jitgrad_wq_ready", "jitgrad_wq_synchronize", "jitgrad_wq_threads"} <= needs
    else:
        assert warm["runtime"] == 1
        assert "numba_parallel_for" in needs or "do_scheduling_unsigned" in needs, sorted(needs)[:20]


def test_lean_llvm_option_gives_the_same_results_under_its_own_keys(tmp_path):
    root = tmp_path / "cache"
    plain = _run_step(root)
    lean = _run_step(root, JITGRAD_LEAN_LLVM="1")
    assert lean["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert lean["counts"]["kernels_compiled"] == plain["counts"]["kernels_compiled"]    # not the plain build's code
