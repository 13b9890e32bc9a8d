"""jitgrad.codegen.native.cache: the cache directory, keys, and the job sources build processes read."""
import ast
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from jitgrad.codegen.native import cache

REPO = Path(__file__).resolve().parents[1]

# a kernel-like source (a build process's job)
LONG_SRC = textwrap.dedent('''\
    import numpy as np
    from numba import njit


    @njit
    def twice_sum(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += 2.0 * x[i]
        return s
    ''')

PLAIN_SRC = "def answer():\n    return 42\n"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache dir, fresh counters and warn-once memory, and Numba caching next to the
    entries (NUMBA_CACHE_DIR would move Numba's files elsewhere).  A background build an earlier test of this
    worker left running finishes first: it counts into the same process-wide stats and warns through the same
    warnings machinery the tests read."""
    from jitgrad.codegen.native import build_thread
    assert build_thread.wait_background(300)
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    cache.stats.reset()
    cache._warned.clear()
    cache._environment.cache_clear()
    yield
    cache.stats.reset()
    cache._warned.clear()
    cache._environment.cache_clear()


def _cache_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, cache.JitgradCacheWarning)]


# ------------------------------------------------------------------------------------------------ directory

def test_cache_dir_is_created_private(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b" / "jitgrad"
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(target))
    old = os.umask(0o000)              # even with a permissive umask the dir ends up 0o700
    try:
        d = cache.cache_dir()
    finally:
        os.umask(old)
    assert d == target and d.is_dir()
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_cache_dir_default_is_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv("JITGRAD_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "jitgrad"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_world_writable_dir_is_refused_and_nothing_is_written(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.warns(cache.JitgradCacheWarning) as rec:
        assert cache.cache_dir() is None
    (msg,) = _cache_warnings(rec)
    assert str(d) in msg and "writable" in msg and "0o777" in msg
    # a job's source has no place there (the build then runs in this process, from memory)
    assert cache.store_entry(cache.cache_key(PLAIN_SRC), PLAIN_SRC) is None
    assert cache.stats.misses == 0
    assert list(d.iterdir()) == []      # nothing was written into the refused dir


@pytest.mark.skipif(os.name != "posix", reason="POSIX ownership")
def test_dir_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    me = os.geteuid()
    monkeypatch.setattr(cache.os, "geteuid", lambda: me + 12345)
    with pytest.warns(cache.JitgradCacheWarning, match="owned by uid") as rec:
        assert cache.cache_dir() is None
    assert str(d) in _cache_warnings(rec)[0]
    assert cache.store_entry(cache.cache_key(PLAIN_SRC), PLAIN_SRC) is None


def test_unwritable_dir_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    # running as root makes chmod 0o500 ineffective, so simulate the access check
    monkeypatch.setattr(cache.os, "access", lambda path, mode: False)
    with pytest.warns(cache.JitgradCacheWarning, match="not writable"):
        assert cache.cache_dir() is None


def test_cache_dir_that_is_a_file_is_refused(tmp_path, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("user data")
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(f))
    with pytest.warns(cache.JitgradCacheWarning, match="not a directory"):
        assert cache.cache_dir() is None
    assert f.read_text() == "user data"


def test_refusal_warns_once(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, 0o777)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(3):
            assert cache.cache_dir() is None
            assert cache.store_entry(cache.cache_key(PLAIN_SRC), PLAIN_SRC) is None
    assert len(_cache_warnings(rec)) == 1


def test_background_build_writes_where_the_cache_was_when_it_was_queued(tmp_path, monkeypatch):
    # a build still running on the background thread must not follow a later change of $JITGRAD_CACHE_DIR
    # (in a test run: into the next test's directory, which it created or wrote before that test could judge it)
    import threading
    from jitgrad.codegen.native import build_thread
    first, later = tmp_path / "first", tmp_path / "later"
    go, seen = threading.Event(), []

    class Job:
        def _build(self, background):
            go.wait(10)
            seen.append((background, cache.cache_dir()))

    job = Job()
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(first))
    build_thread.queue_background(job)
    monkeypatch.setenv("JITGRAD_CACHE_DIR", str(later))
    assert not build_thread.wait_background(0.05)      # the job waits for go: still queued
    go.set()
    assert build_thread.wait_background(10)
    assert seen == [(True, first)]
    assert cache.cache_dir() == later           # this thread follows the variable
    assert first.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["first", "later"]


def test_failed_write_stores_nothing(monkeypatch):
    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cache, "_publish", boom)
    assert cache.store_entry(cache.cache_key(PLAIN_SRC), PLAIN_SRC) is None     # the caller builds in memory


# ------------------------------------------------------------------------------------------------ keys

def test_key_is_deterministic_and_depends_on_source_and_extra():
    k = cache.cache_key(PLAIN_SRC)
    assert len(k) == 64 and set(k) <= set("0123456789abcdef")
    assert cache.cache_key(PLAIN_SRC) == k
    assert cache.cache_key(PLAIN_SRC + " ") != k
    assert cache.cache_key(PLAIN_SRC, extra=("parallel",)) != k
    assert cache.cache_key(PLAIN_SRC, extra=(1,)) != cache.cache_key(PLAIN_SRC, extra=("1",))
    assert cache.cache_key(PLAIN_SRC, extra=(("a", "b"),)) != cache.cache_key(PLAIN_SRC, extra=("a", "b"))
    with pytest.raises(TypeError):
        cache.cache_key(PLAIN_SRC, extra=({"a"},))     # a set's repr is not stable across processes


@pytest.mark.parametrize("dist", ["jitgrad", "numba", "llvmlite", "numpy"])
def test_key_changes_with_versions(monkeypatch, dist):
    k = cache.cache_key(PLAIN_SRC)
    real = cache._dist_version
    monkeypatch.setattr(cache, "_dist_version", lambda name: "999.0" if name == dist else real(name))
    cache._environment.cache_clear()
    assert cache.cache_key(PLAIN_SRC) != k


def test_key_changes_with_python_and_cpu(monkeypatch):
    k = cache.cache_key(PLAIN_SRC)
    monkeypatch.setattr(cache, "_cpu", lambda: ("x86_64-unknown-linux-gnu", "generic", ""))
    cache._environment.cache_clear()
    k_cpu = cache.cache_key(PLAIN_SRC)
    assert k_cpu != k
    monkeypatch.setattr(cache.sys, "version", sys.version + "+other")
    cache._environment.cache_clear()
    assert cache.cache_key(PLAIN_SRC) not in (k, k_cpu)


def test_key_includes_cpu_features():
    env = dict(cache._environment())
    triple, name, feats = env["cpu"]
    assert name and "+" in feats          # llvmlite's flattened "+avx2,-avx512f,..." list


def test_bad_keys_are_rejected():
    for bad in ["../../etc/passwd", "ABC", "0" * 63, "g" * 64, None]:
        with pytest.raises(ValueError):
            cache.store_entry(bad, PLAIN_SRC)


# ------------------------------------------------------------------------------------------------ entries

def test_entry_written_once_and_identical_rewrite_keeps_mtime(tmp_path):
    key = cache.cache_key(PLAIN_SRC)
    path = cache.store_entry(key, PLAIN_SRC)
    assert path == cache.entry_path(key) == tmp_path / "cache" / key[:2] / f"{key}.py"
    assert path.read_text() == PLAIN_SRC
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
    st1 = os.stat(path)
    time.sleep(0.01)
    assert cache.store_entry(key, PLAIN_SRC) == path
    st2 = os.stat(path)
    assert (st2.st_mtime_ns, st2.st_ino) == (st1.st_mtime_ns, st1.st_ino)
    assert cache.stats.as_dict() == {"hits": 1, "misses": 1, "rebuilt": 0, "in_memory": 0}
    # no temp files
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_truncated_entry_is_rebuilt_with_warning():
    key = cache.cache_key(LONG_SRC)
    path = cache.store_entry(key, LONG_SRC)
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.warns(cache.JitgradCacheWarning, match="truncated") as rec:
        assert cache.store_entry(key, LONG_SRC) == path
    assert str(path) in _cache_warnings(rec)[0]
    assert path.read_text() == LONG_SRC
    assert cache.stats.rebuilt == 1


def test_garbage_entry_is_rebuilt_not_executed(tmp_path):
    key = cache.cache_key(PLAIN_SRC)
    path = cache.store_entry(key, PLAIN_SRC)
    st = os.stat(path)
    # same length, valid Python, same mtime: would be trusted by a size/mtime check
    evil = "import sys; sys.exit(3)\n".ljust(len(PLAIN_SRC) - 1, "#") + "\n"
    assert len(evil) == len(PLAIN_SRC)
    path.write_text(evil)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.warns(cache.JitgradCacheWarning, match="does not match"):
        assert cache.store_entry(key, PLAIN_SRC) == path
    assert path.read_text() == PLAIN_SRC                    # a build process reads the verified text
    assert os.stat(path).st_mtime_ns != st.st_mtime_ns


def test_symlinked_entry_is_replaced_and_target_untouched(tmp_path):
    key = cache.cache_key(PLAIN_SRC)
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    path = tmp_path / "cache" / key[:2] / f"{key}.py"
    path.parent.mkdir(parents=True)
    os.symlink(outside, path)
    with pytest.warns(cache.JitgradCacheWarning, match="symbolic link"):
        assert cache.store_entry(key, PLAIN_SRC) == path
    assert not path.is_symlink() and path.read_text() == PLAIN_SRC
    assert outside.read_text() == "SECRET = 1\n"


def test_symlinked_shard_dir_is_not_written_through(tmp_path):
    key = cache.cache_key(PLAIN_SRC)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir(mode=0o700)
    os.symlink(elsewhere, tmp_path / "cache" / key[:2])
    assert cache.store_entry(key, PLAIN_SRC) is None      # never written through the link
    assert list(elsewhere.iterdir()) == []


def test_losing_the_create_race_uses_the_winners_file(monkeypatch):
    """Another process publishes the entry between our check and our write: we must not replace it."""
    key = cache.cache_key(PLAIN_SRC)
    path = cache.entry_path(key)
    real_read = cache._read_entry
    calls = []

    def racing_read(p, expected):
        calls.append(p)
        why = real_read(p, expected)
        if len(calls) == 1:            # the other writer wins right after our first look
            assert why == "missing"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(expected)
            calls.append(os.stat(p).st_ino)
        return why

    monkeypatch.setattr(cache, "_read_entry", racing_read)
    assert cache.store_entry(key, PLAIN_SRC) == path and len(calls) == 3
    assert cache.stats.hits == 1 and cache.stats.misses == 0
    assert os.stat(path).st_ino == calls[1]                                # the winner's file, not replaced
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]    # our temp file is gone


def test_errors_in_the_source_propagate_and_leave_no_module():
    """A module built in memory (Numba's kernels, numba_build.py): its errors propagate, no half module stays."""
    src = "x = 1\nraise ValueError('generated code bug')\n"
    key = cache.cache_key(src)
    with pytest.raises(ValueError, match="generated code bug"):
        cache._in_memory(cache._module_name("bug", key), key, src)
    assert cache._module_name("bug", key) not in sys.modules


def test_clear_removes_only_our_files(tmp_path):
    key = cache.cache_key(LONG_SRC)
    cache.store_entry(key, LONG_SRC)
    shard = tmp_path / "cache" / key[:2]
    (shard / "__pycache__").mkdir()                  # Numba's files of an older jitgrad's cache
    (shard / "__pycache__" / f"{key}.twice_sum-5.py311.nbi").write_bytes(b"index")
    (shard / "__pycache__" / f"{key}.twice_sum-5.py311.1.nbc").write_bytes(b"object")
    root = tmp_path / "cache"
    (root / "notes.txt").write_text("mine")
    (shard / "user.txt").write_text("mine too")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.py").write_text("keep")
    os.symlink(outside, root / "ff")                   # looks like a shard, is a link out of the dir
    n = cache.clear()
    assert n >= 3                                      # the entry, the index, the object file
    assert not cache.entry_path(key).exists()
    assert (root / "notes.txt").read_text() == "mine"
    assert (shard / "user.txt").read_text() == "mine too"
    assert (outside / "keep.py").read_text() == "keep"
    assert not (shard / "__pycache__").exists()
    # and it can be used again after clearing
    assert cache.store_entry(key, LONG_SRC) == cache.entry_path(key)


def test_clear_removes_the_generated_entries_texts(tmp_path, monkeypatch):
    """``clear`` also removes the generated eager entries' texts (``runtime/generated_code.py``), and only those."""
    from jitgrad.runtime import generated_code
    root = tmp_path / "cache"
    monkeypatch.setattr(generated_code, "_DIRS", {})
    path = generated_code.on_disk("def f():\n    return 1\n", "flat entry over 1 argument")
    assert path is not None and os.path.dirname(path) == str(root / "generated")
    gen = root / "generated"
    (gen / ".k2j_x9ab.tmp").write_text("half written")         # a temporary file of a write cut short
    (gen / "notes.py").write_text("mine")                      # not named as ours: kept
    assert cache.clear() >= 2
    assert not os.path.exists(path) and not (gen / ".k2j_x9ab.tmp").exists()
    assert (gen / "notes.py").read_text() == "mine"
    (gen / "notes.py").unlink()
    monkeypatch.setattr(generated_code, "_DIRS", {})
    assert generated_code.on_disk("def f():\n    return 1\n", "flat entry over 1 argument") == path   # again
    assert cache.clear() == 1 and not gen.exists()


def test_codegen_layering():
    """codegen imports only jitgrad.ir (and this module needs none of jitgrad)."""
    tree = ast.parse(Path(cache.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("jitgrad"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert all(not a.name.startswith("jitgrad") for a in node.names)


# ------------------------------------------------------------------------------------------------ processes

CHILD = textwrap.dedent('''\
    import json, sys, time, warnings
    from jitgrad.codegen.native import cache
    src = open(sys.argv[1]).read()
    start = float(sys.argv[2])
    key = cache.cache_key(src)
    while time.time() < start:      # line the processes up
        pass
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        path = cache.store_entry(key, src)
    print(json.dumps({"key": key, "text_ok": open(path).read() == src, "stats": cache.stats.as_dict(),
                      "warnings": [str(w.message) for w in rec if issubclass(w.category, cache.JitgradCacheWarning)],
                      "path": str(path)}))
    ''')


def _spawn(tmp_path, src_text, start=0.0):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    src = tmp_path / "gen_src.txt"
    src.write_text(src_text)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, str(script), str(src), repr(start)], cwd=str(tmp_path), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_corrupt_entry_is_rebuilt_in_new_process(tmp_path):
    first = _result(_spawn(tmp_path, LONG_SRC))
    entry = Path(first["path"])
    st = os.stat(entry)
    # a different function of the same length/mtime: a build process must never read it
    bad = LONG_SRC.replace("2.0 * x[i]", "3.0 * x[i]")
    assert len(bad) == len(LONG_SRC)
    entry.write_text(bad)
    os.utime(entry, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = _result(_spawn(tmp_path, LONG_SRC))
    assert second["text_ok"]
    assert second["stats"]["rebuilt"] == 1 and any("corrupt" in w for w in second["warnings"])
    assert entry.read_text() == LONG_SRC


def test_concurrent_writers_same_key(tmp_path):
    start = time.time() + 2.0        # both are past their imports by then
    procs = [_spawn(tmp_path, LONG_SRC, start) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert [r["text_ok"] for r in results] == [True, True]
    assert all(r["warnings"] == [] for r in results)
    assert results[0]["key"] == results[1]["key"] and results[0]["path"] == results[1]["path"]
    entry = Path(results[0]["path"])
    assert entry.read_text() == LONG_SRC
    leftovers = [p.name for p in entry.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    # exactly one of them published it (os.link: first writer wins), the other verified and used it
    assert sorted((r["stats"]["misses"], r["stats"]["hits"], r["stats"]["rebuilt"]) for r in results) == \
        [(0, 1, 0), (1, 0, 0)]


@pytest.mark.parametrize("package", ["codegen", "ir", "jit", "tracer"])
def test_key_changes_with_the_source_of_what_shapes_a_program(monkeypatch, tmp_path, package):
    """A source checkout edited between runs keeps its version: a change to the passes, the tracer or the step's
    bookkeeping (not only codegen) must change every key, or an old program is loaded for new code."""
    import shutil
    from pathlib import Path
    real = Path(cache.__file__).resolve().parent.parent.parent
    fake = tmp_path / "jitgrad"
    for d in cache._DIGESTED:
        shutil.copytree(real / d, fake / d, ignore=shutil.ignore_patterns("__pycache__"))
    (fake / "codegen" / "native").mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(cache, "__file__", str(fake / "codegen" / "native" / "cache.py"))
    cache._environment.cache_clear()
    k = cache.cache_key(PLAIN_SRC)
    target = sorted((fake / package).rglob("*.py"))[0]
    target.write_text(target.read_text() + "\n# edited\n")
    cache._environment.cache_clear()
    assert cache.cache_key(PLAIN_SRC) != k
    cache._environment.cache_clear()


def test_code_is_built_for_the_cpu_the_key_names(monkeypatch):
    """``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` name the CPU in every cache key (``cache._cpu``); the kernels'
    target machine builds for that CPU too, not for the host's, so an entry keyed for a baseline x86-64 (a cache
    shared between machines, or a Haswell-keyed cache read under valgrind on an AVX-512 host) holds no wider
    instructions: a 16-lane float add becomes SSE code (xmm registers only)."""
    import threading
    from jitgrad.codegen.native import llvm_build, objload
    monkeypatch.setenv("NUMBA_CPU_NAME", "x86-64")
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+sse,+sse2")
    assert cache._cpu()[1:] == ("x86-64", "+sse,+sse2")
    ll = objload._ll()
    src = ("define void @twice(<16 x float>* %p) {\n  %v = load <16 x float>, <16 x float>* %p\n"
           "  %w = fadd <16 x float> %v, %v\n  store <16 x float> %w, <16 x float>* %p\n  ret void\n}\n")
    out = []

    def build():        # (a fresh thread: the target machine is made once per thread)
        _, _, tm = llvm_build._tools()
        m = ll.parse_assembly(src)
        m.triple = ll.get_process_triple()
        out.append(tm.emit_assembly(m))
    t = threading.Thread(target=build)
    t.start()
    t.join()
    asm = out[0]
    assert "xmm" in asm and "ymm" not in asm and "zmm" not in asm
