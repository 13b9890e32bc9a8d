"""Native kernels for eager ops over large arrays (jit/eager_kernels.py): the compiled kernel's bits, NumPy where
the kernel does not serve a call, the disk cache across processes, the same bits at 1 and 2 pool threads.
Counted, never timed."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import erf as scipy_erf

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.codegen.native import build
from jitgrad.codegen.kernels.loops import PARALLEL_MIN
from jitgrad.codegen.native.workpool import EAGER_PARALLEL_GRAIN
from jitgrad.ir.ops import OPS
from jitgrad.jit import eager_kernels as ek
from jitgrad.jit import graph_code
from jitgrad.runtime import dispatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN = ek.MIN_ELEMENTS
_SQRT_HALF = 1.0 / np.sqrt(2.0)


def _gelu_backward(g, x):
    return dispatch.bind(OPS["gelu_backward"], g, x)


def _inputs(n, dtype, seed=0, special=True):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    if special and n >= 8:
        x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 40.0, -40.0, 1e-30]
    g = rng.standard_normal(n).astype(dtype)
    return x, g


def _native(fn, *arrays):
    """``fn`` on tensors of ``arrays``, asserting the native path ran (once)."""
    before = dict(ek.COUNTS)
    out = fn(*(jg.tensor(a) for a in arrays)).numpy()
    assert ek.COUNTS["native_calls"] == before["native_calls"] + 1, (ek.COUNTS, before)
    assert ek.COUNTS["numpy_calls"] == before["numpy_calls"]
    return out


def _compiled(fn, *arrays):
    """``fn`` compiled (synchronous build), and the build keys of its kernels."""
    cf = jg.compile(fn, backend="numba", background=False)
    out = cf(*(jg.tensor(a) for a in arrays)).numpy()
    keys = set()
    for cg in list(graph_code._COMPILED.values()):
        keys |= {build.kernel_key(k) for k in cg.kernels}
    return out, keys


def _gelu_ref(x):
    return 0.5 * x * (1.0 + scipy_erf(x * _SQRT_HALF))


def _gelu_bwd_ref(g, x):
    return g * (0.5 * (1.0 + scipy_erf(x * _SQRT_HALF)) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi))


CASES = [
    ("gelu", lambda x: F.gelu(x), 1),
    ("gelu", lambda x: F.gelu(x, approximate="tanh"), 1),
    ("gelu_backward", _gelu_backward, 2),
    ("tanh_backward", lambda g, y: dispatch.bind(OPS["tanh_backward"], g, y), 2),
    ("tanh", lambda x: jg.tanh(x), 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_native_gives_the_compiled_kernels_bits(sync, high_thresholds, case, dtype):
    name, fn, nin = CASES[case]
    for n in (MIN, MIN + 1, EAGER_PARALLEL_GRAIN - 1, EAGER_PARALLEL_GRAIN + 3):
        x, g = _inputs(n, dtype, seed=n)
        arrays = (g, x) if nin == 2 else (x,)
        with np.errstate(all="ignore"):
            got = _native(fn, *arrays)
        want, keys = _compiled(fn, *arrays)
        np.testing.assert_array_equal(got, want)
        # the very kernel the compiled graph runs (same key: one build serves both)
        mine = {v[2] for k, v in ek.structures().items() if k[0] == name and v[0] == "ready"}
        assert mine & keys, (name, n)


def _lsm_backward(g, out):
    return dispatch.bind(OPS["log_softmax_backward"], g, out, axis=g.ndim - 1)


ROW_CASES = [   # (op, the call, inputs, the NumPy impl's params)
    ("softmax", lambda x: F.softmax(x, -1), 1, lambda nd: {"axis": nd - 1}),
    ("log_softmax", lambda x: F.log_softmax(x, -1), 1, lambda nd: {"axis": nd - 1}),
    ("log_softmax_backward", _lsm_backward, 2, lambda nd: {"axis": nd - 1}),
    ("softmax_backward", lambda g, y: dispatch.bind(OPS["softmax_backward"], g, y, axis=g.ndim - 1), 2,
     lambda nd: {"axis": nd - 1}),
    ("layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]), 1, lambda nd: {"naxes": 1, "eps": 1e-5}),
    ("layer_norm_backward", lambda g, x, y: dispatch.bind(OPS["layer_norm_backward"], g, x, y, naxes=1, eps=1e-5), 3,
     lambda nd: {"naxes": 1, "eps": 1e-5}),
]


def _row_inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    flat = x.reshape(-1, shape[-1])
    if flat.shape[0] >= 3:
        flat[0, :3] = [np.inf, 1.0, 2.0]      # a row holding +inf: nan throughout (torch's)
        flat[1, :] = -np.inf                  # a row of -inf: nan
        flat[2, 5] = np.nan
    g = rng.standard_normal(shape).astype(dtype)
    return x, g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(ROW_CASES)))
def test_row_kernels_give_the_compiled_kernels_bits(sync, high_thresholds, case, dtype):
    name, fn, nin, impl_params = ROW_CASES[case]
    for shape in ((MIN // 64, 64), (16, 4, 64, 64), (7, MIN // 7 + 1), (3 * MIN + 1,)):
        x, g = _row_inputs(shape, dtype, seed=len(shape))
        with np.errstate(all="ignore"):
            arrays = {1: (x,), 2: (g, np.log(np.abs(x) + 0.25).astype(dtype)),
                      3: (g, x, OPS["layer_norm"].impl(x, naxes=1, eps=1e-5))}[nin]
            got = _native(fn, *arrays)
            ref = OPS[name].impl(*arrays, **impl_params(len(shape)))
        want, keys = _compiled(fn, *arrays)
        np.testing.assert_array_equal(got, want)
        mine = {v[2] for k, v in ek.structures().items() if k[0] == name and v[0] == "ready"}
        # (a 1-D array is one row: the compiled path builds that as a rank-1 kernel, eager calls the rank-2 one)
        assert mine & keys or len(shape) == 1, (name, shape)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
        ok = np.isfinite(ref)
        scale = np.abs(ref[ok]).max()
        tol = (1e-5 if dtype == np.float32 else 1e-13) * scale
        np.testing.assert_allclose(got[ok], ref[ok], rtol=tol, atol=tol)


def test_row_ops_over_another_axis_keep_numpy(sync):
    x, _ = _row_inputs((64, 128), np.float32)
    before = dict(ek.COUNTS)
    with np.errstate(all="ignore"):
        y = F.softmax(jg.tensor(x), 0).numpy()
        np.testing.assert_array_equal(y, OPS["softmax"].impl(x, axis=0))
        z = F.layer_norm(jg.tensor(x), (64, 128)).numpy()     # two axes normalised: NumPy
        np.testing.assert_array_equal(z, OPS["layer_norm"].impl(x, naxes=2, eps=1e-5))
    assert ek.COUNTS == before


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_native_is_close_to_scipy(sync, dtype, rtol):
    x, g = _inputs(3 * MIN + 5, dtype, special=False)
    y = _native(lambda t: F.gelu(t), x)
    np.testing.assert_allclose(y, _gelu_ref(x.astype(np.float64)), rtol=rtol, atol=rtol)
    dx = _native(_gelu_backward, g, x)
    np.testing.assert_allclose(dx, _gelu_bwd_ref(g.astype(np.float64), x.astype(np.float64)), rtol=rtol * 4,
                               atol=rtol * 4)


def test_nan_and_inf_propagate_as_numpy(sync):
    x, g = _inputs(MIN * 2, np.float32)
    with np.errstate(all="ignore"):
        y = _native(lambda t: F.gelu(t), x)
        dx = _native(_gelu_backward, g, x)
        ref_y = _gelu_ref(x.astype(np.float64))
        ref_dx = _gelu_bwd_ref(g.astype(np.float64), x.astype(np.float64))
    for got, ref in ((y, ref_y), (dx, ref_dx)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
        assert (np.sign(got[np.isinf(got)]) == np.sign(ref[np.isinf(ref)])).all()


def test_small_arrays_keep_numpy(sync):
    before = dict(ek.COUNTS)
    x = jg.tensor(np.linspace(-3, 3, MIN - 1, dtype=np.float32), requires_grad=True)
    F.gelu(x).sum().backward()
    F.gelu(jg.tensor(np.ones((8, 8), np.float32)))
    assert ek.COUNTS == before          # no kernel requested, none called, no NumPy fallback counted
    hit = dispatch._RULES[(OPS["gelu"], (8, 8), np.dtype(np.float32), (("approximate", "none"),))]
    assert hit[6] is OPS["gelu"].impl   # the signature's entry holds the NumPy impl itself


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_ufunc_ops_take_the_kernel_where_the_pool_takes_every_loop(sync, monkeypatch, dtype):
    """add, sub and mul run their kernel from ``POOLED_MIN`` elements (the compiled rule's ``PARALLEL_MIN``: every
    loop of that size takes the pool), on the pool at two threads, with NumPy's bits (one rounding, NaN and signed
    zeros included); below it NumPy's one ufunc serves the signature (its entry holds the impl)."""
    from jitgrad.codegen.native import workpool
    from jitgrad.ir import settings
    assert ek.POOLED_MIN == PARALLEL_MIN
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    rng = np.random.default_rng(4)
    for n, native in ((PARALLEL_MIN // 8, False), (PARALLEL_MIN + 123, True)):
        x, y = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        x[:4], y[:4] = [np.nan, np.inf, -0.0, 0.0], [1.0, -np.inf, 0.0, -0.0]
        X, Y = jg.tensor(x), jg.tensor(y)
        with np.errstate(all="ignore"):
            for _ in range(2):                  # (the first call builds; the second runs the parallel kernel)
                before, r0 = dict(ek.COUNTS), workpool.rounds()
                outs = [(X + Y).numpy(), (X - Y).numpy(), (X * Y).numpy()]
                assert [o.tobytes() for o in outs] == [(x + y).tobytes(), (x - y).tobytes(), (x * y).tobytes()]
                assert ek.COUNTS["native_calls"] - before["native_calls"] == (3 if native else 0)
        if native and workpool.threads() >= 2:
            assert workpool.rounds() - r0 == 3
            pool = workpool.spinning()
            if pool is not None:
                # an eager round leaves its worker spinning the eager spin (EAGER_LAUNCH: the next eager product
                # finds it awake), then asleep; a compiled call's launch puts the pool's own spin back
                import time
                from jitgrad.codegen.native import threads
                from jitgrad.codegen.native.threads import LAUNCH_LOCK
                s0 = pool.stats()
                X + Y
                assert pool.spin_ns() == threads._EAGER_SPIN[0] >= threads._EAGER_SPIN[1]
                time.sleep(0.01)        # (longer than the eager spin: the worker's spin has run out by now)
                d = {k: v - s0[k] for k, v in pool.stats().items()}
                assert d["worker_sleeps"] == 1, d       # (how each wait ended, in its spin or not, is the load's)
                with LAUNCH_LOCK:
                    assert pool.spin_ns() == threads._EAGER_SPIN[1]
        hit = dispatch._RULES[(OPS["add"], (n,), np.dtype(dtype), (n,), np.dtype(dtype))]
        assert (hit[6] is OPS["add"].impl) != native


def test_layouts_it_does_not_serve_run_numpy(sync):
    x, g = _inputs(2 * MIN, np.float32)
    X = x.reshape(64, -1)
    before = dict(ek.COUNTS)
    y = F.gelu(jg.tensor(X.T)).numpy()      # a transposed view: not C-contiguous
    assert ek.COUNTS["numpy_calls"] == before["numpy_calls"] + 1
    assert ek.COUNTS["native_calls"] == before["native_calls"]
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(y, OPS["gelu"].impl(X.T))
    # broadcasting and mixed dtypes never take the kernel (the signature keeps NumPy)
    before = dict(ek.COUNTS)
    _gelu_backward(jg.tensor(g[: X.shape[1]]), jg.tensor(X))
    _gelu_backward(jg.tensor(g.astype(np.float64)), jg.tensor(x))
    assert ek.COUNTS == before


def test_autograd_versions_and_results_as_numpy(sync):
    x0, _ = _inputs(3 * MIN, np.float32, special=False)
    x = jg.tensor(x0, requires_grad=True)
    before = ek.COUNTS["native_calls"]
    y = F.gelu(x)
    assert y.grad_fn.name() == "GeluBackward0" and y._version == 0
    assert not np.shares_memory(y.detach().numpy(), x0)
    g0 = np.random.default_rng(1).standard_normal(x0.shape).astype(np.float32)
    y.backward(jg.tensor(g0))
    assert ek.COUNTS["native_calls"] == before + 2          # forward and gelu_backward
    ref = _gelu_bwd_ref(g0.astype(np.float64), x0.astype(np.float64))
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=2e-6, atol=2e-6)
    # sum()'s gradient arrives expanded (stride 0): NumPy serves that call
    x.grad = None
    numpy_before = ek.COUNTS["numpy_calls"]
    F.gelu(x).sum().backward()
    assert ek.COUNTS["numpy_calls"] == numpy_before + 1
    np.testing.assert_allclose(x.grad.numpy(), _gelu_bwd_ref(1.0, x0.astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_gradcheck_and_gradgradcheck_through_the_kernel(sync, monkeypatch):
    monkeypatch.setattr(ek, "MIN_ELEMENTS", 1)      # small enough to check, large enough to take the kernel
    dispatch._RULES.clear()
    x = jg.tensor(np.random.default_rng(2).standard_normal((3, 5)), requires_grad=True)
    before = ek.COUNTS["native_calls"]
    assert jg.autograd.gradcheck(lambda t: F.gelu(t), (x,))
    assert jg.autograd.gradgradcheck(lambda t: F.gelu(t), (x,))
    assert ek.COUNTS["native_calls"] > before


def test_background_build_runs_numpy_until_the_kernel_is_linked(monkeypatch):
    from jitgrad.codegen.native import build_thread
    import threading
    monkeypatch.setattr(ek, "SYNC", False)
    monkeypatch.setattr(ek, "ENABLED", True)
    monkeypatch.setattr(ek, "REQUEST_AFTER_S", 0.0)     # asked for at the first call
    dispatch._RULES.clear()
    gate = threading.Event()
    build_thread.hold_builds(gate)
    try:
        # a structure no other test asks for: float64 tanh-GELU's vjp binds no kernel op; gelu_backward float64
        # with a fresh key is requested here
        x, g = _inputs(MIN + 7, np.float64, seed=11, special=False)
        st = ek._structure("gelu_backward", ("float64", "float64"), (), False, False)
        fresh = st.state == "new"
        before = dict(ek.COUNTS)
        r1 = _gelu_backward(jg.tensor(g), jg.tensor(x)).numpy()
        if fresh:
            assert ek.COUNTS["numpy_calls"] == before["numpy_calls"] + 1 and st.state == "queued"
    finally:
        gate.set()
        build_thread.hold_builds(None)
    assert ek.wait(120)
    assert st.state == "ready", st.error
    r2 = _native(_gelu_backward, g, x)
    np.testing.assert_allclose(r1, r2, rtol=1e-13, atol=1e-13)
    dispatch._RULES.clear()


def test_off_switch(monkeypatch):
    monkeypatch.setattr(ek, "ENABLED", False)
    dispatch._RULES.clear()
    before = dict(ek.COUNTS)
    F.gelu(jg.tensor(np.ones(4 * MIN, np.float32)))
    assert ek.COUNTS == before
    dispatch._RULES.clear()


_CHILD = r"""
import hashlib, json, sys
import numpy as np
import jitgrad as jg, jitgrad.nn.functional as F
from jitgrad.codegen.native import workpool
from jitgrad.jit import eager_kernels as ek
n = int(sys.argv[1])
x = np.random.default_rng(5).standard_normal(n).astype(np.float32) * 3
y = F.gelu(jg.tensor(x)).numpy()
y = F.gelu(jg.tensor(x)).numpy()      # (the parallel kernel is chosen once the serial one told its cost)
print(json.dumps({"counts": ek.COUNTS, "bits": hashlib.sha256(y.tobytes()).hexdigest(),
                  "pool": workpool.threads(), "numba": "numba" in sys.modules,
                  "parallel": [k[3] for k, v in ek.structures().items() if v[0] == "ready"]}))
"""


def _child(cache, n, threads=None):
    env = dict(os.environ, JITGRAD_CACHE_DIR=str(cache), JITGRAD_EAGER_KERNELS="sync",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if threads is not None:
        env["NUMBA_NUM_THREADS"] = str(threads)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(n)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_loads_from_the_disk_cache(tmp_path):
    first = _child(tmp_path, 2 * MIN)
    assert first["counts"]["kernels_compiled"] >= 1 and first["counts"]["native_calls"] == 2
    second = _child(tmp_path, 2 * MIN)
    assert second["counts"]["kernels_compiled"] == 0
    assert second["counts"]["kernels_loaded"] == first["counts"]["kernels_compiled"]
    assert second["bits"] == first["bits"] and not first["numba"] and not second["numba"]


def test_same_bits_at_one_and_two_pool_threads(tmp_path):
    n = PARALLEL_MIN + 12345                         # parallel by the compiled path's rule, an uneven split
    one, two = _child(tmp_path, n, threads=1), _child(tmp_path, n, threads=2)
    assert any(one["parallel"]) and any(two["parallel"])      # some call ran the parallel kernel
    assert one["pool"] == 1 and two["pool"] == 2
    assert one["bits"] == two["bits"]


def test_serial_and_parallel_kernels_agree(sync, monkeypatch):
    from jitgrad.ir import settings
    x, _ = _inputs(PARALLEL_MIN + 3, np.float32, seed=9)
    with np.errstate(all="ignore"):
        F.gelu(jg.tensor(x))                         # the serial kernel tells the loop's cost
        par = _native(lambda t: F.gelu(t), x)
        # the parallel-capable kernel is the one a compiled graph of this size runs (its gate's cost included)
        want, keys = _compiled(lambda t: F.gelu(t), x)
        monkeypatch.setattr(settings.STATE, "num_threads", 1)     # torch.set_num_threads(1): the serial kernel
        ser = _native(lambda t: F.gelu(t), x)
    kinds = {k[3] for k, v in ek.structures().items() if k[0] == "gelu" and v[0] == "ready"}
    assert kinds == {False, True}
    np.testing.assert_array_equal(par, ser)
    np.testing.assert_array_equal(par, want)
    mine = {v[2] for k, v in ek.structures().items() if k[0] == "gelu" and k[3] and v[0] == "ready"}
    assert mine & keys


def test_a_kernel_that_bakes_a_size_in_is_refused_unless_keyed_by_it():
    """layer_norm's mean divides by the row length: traced at two row lengths its kernel differs, so it is built
    per row length (``sized``), never reused for another."""
    params = (("eps", 1e-5), ("naxes", 1))
    with pytest.raises(RuntimeError, match="depends on the sizes"):
        ek._kernel("layer_norm", ("float32",), params, False, True)
    a, _, _ = ek._kernel("layer_norm", ("float32",), params, False, True, row_length=64)
    b, _, _ = ek._kernel("layer_norm", ("float32",), params, False, True, row_length=128)
    assert a.source != b.source
    ek._kernel("softmax", ("float32",), (("axis", 1),), False, True)      # any row length: one kernel


def test_a_process_exits_cleanly_with_eager_builds_queued(tmp_path):
    """Builds queued on the build thread at exit are dropped (they have no graph code to hand to build
    processes): the process exits at once, with nothing on stderr."""
    code = ("import numpy as np, jitgrad as jg, jitgrad.nn.functional as F\n"
            "x = jg.tensor(np.ones((256, 512), np.float32))\n"
            "F.gelu(x); F.softmax(x, -1); F.layer_norm(x, (512,))\n")
    env = dict(os.environ, JITGRAD_CACHE_DIR=str(tmp_path), JITGRAD_EAGER_KERNELS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-3000:]


@pytest.mark.filterwarnings("ignore::UserWarning")     # (anomaly mode's own warnings, as torch's)
def test_anomaly_mode_sees_the_kernels_nan(sync):
    """A NaN the native vjp returns is reported by anomaly mode as the NumPy one was (the checks run on the
    impl's result, whichever computed it)."""
    x0, g0 = _inputs(2 * MIN, np.float32, special=False)
    g0[5] = np.nan
    x = jg.tensor(x0, requires_grad=True)
    with jg.autograd.detect_anomaly():
        y = F.gelu(x)
        before = ek.COUNTS["native_calls"]
        with pytest.raises(RuntimeError, match="GeluBackward0' returned nan"):
            y.backward(jg.tensor(g0))
    assert ek.COUNTS["native_calls"] == before + 1


def test_eager_launches_read_their_own_pool_threshold(sync, monkeypatch):
    """Eager kernels' launches compare their work with the eager threshold (``workpool.eager_min_work``), not the
    compiled steps' (``min_work``): a compiled threshold out of reach leaves an eager add on the pool, an eager one
    out of reach keeps it on the calling thread (same bits), and after each call the compiled threshold is back in
    the globals the kernels read."""
    from jitgrad.codegen.native import workpool
    from jitgrad.ir import settings
    monkeypatch.setattr(settings.STATE, "num_threads", 2)
    n = PARALLEL_MIN + 77
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    X, Y = jg.tensor(x), jg.tensor(y)
    (X + Y).numpy()                                     # (builds; the signature chooses its kernel)
    compiled = workpool.set_min_work(1 << 62)
    try:
        r0 = workpool.rounds()
        assert (X + Y).numpy().tobytes() == (x + y).tobytes()
        if workpool.threads() >= 2:
            assert workpool.rounds() - r0 == 1          # the eager threshold (the default) is reached
        assert workpool.min_work() == 1 << 62           # the compiled one is back after the launch
        workpool.set_min_work(*compiled)
        eager = workpool.set_eager_min_work(1 << 62)
        try:
            r0 = workpool.rounds()
            assert (X + Y).numpy().tobytes() == (x + y).tobytes()
            assert workpool.rounds() == r0               # the eager threshold out of reach: the calling thread
            assert (workpool.min_work(), workpool.grain()) == compiled
            assert workpool.takes(n, 8.0) and not workpool.takes(n, 8.0, eager=True)
        finally:
            workpool.set_eager_min_work(*eager)
    finally:
        workpool.set_min_work(*compiled)
