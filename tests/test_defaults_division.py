"""torch.set_default_dtype (factories, promotion, modules, compiled functions), div's rounding modes, the thread,
matmul-precision, print and deterministic settings: values, dtypes and errors against torch."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.jit import recompiles
from jitgrad.autograd import gradcheck, gradgradcheck
from torch_agreement import raises_as_torch

torch = pytest.importorskip("torch")


@pytest.fixture
def float64_default():
    jg.set_default_dtype(jg.float64)
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        jg.set_default_dtype(jg.float32)
        torch.set_default_dtype(torch.float32)


def _name(d):
    return d.name if isinstance(d, jg.dtype) else str(d).split(".")[1]


# each maker is called as maker(lib): the same factory or promotion in jitgrad and torch
MAKERS = {
    "tensor_float": lambda m: m.tensor([1.5, 2.0]),
    "tensor_scalar": lambda m: m.tensor(0.1),
    "tensor_int": lambda m: m.tensor([1, 2]),
    "zeros": lambda m: m.zeros(2),
    "ones": lambda m: m.ones(2, 3),
    "empty": lambda m: m.empty(2),
    "full_float": lambda m: m.full((2,), 1.5),
    "full_int": lambda m: m.full((2,), 3),
    "rand": lambda m: m.rand(3),
    "randn": lambda m: m.randn(3),
    "arange_float": lambda m: m.arange(0.0, 1.0, 0.25),
    "arange_int": lambda m: m.arange(3),
    "linspace": lambda m: m.linspace(0, 1, 5),
    "logspace": lambda m: m.logspace(0, 2, 3),
    "eye": lambda m: m.eye(2),
    "zeros_like_keeps": lambda m: m.zeros_like(m.ones(2, dtype=m.float32)),
    "rand_like_keeps": lambda m: m.rand_like(m.ones(2, dtype=m.float32)),
    "int_times_float": lambda m: m.tensor([1, 2]) * 1.5,
    "int_div_int": lambda m: m.tensor(2) / 3,
    "int_sqrt": lambda m: m.sqrt(m.tensor([4])),
    "int_mean_float_scalar": lambda m: m.tensor([1, 2]) + 0.5,
    "float32_keeps": lambda m: m.ones(2, dtype=m.float32) * 1.5,
    "linear_weight": lambda m: m.nn.Linear(2, 3).weight,
    "linear_bias": lambda m: m.nn.Linear(2, 3).bias,
    "legacy_Tensor": lambda m: m.Tensor([1, 2]),
    "normal": lambda m: m.normal(0.0, 1.0, (2,)),
}


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("default", ["float32", "float64"])
def test_default_dtype_follows_torch(name, default):
    jg.set_default_dtype(getattr(jg, default))
    torch.set_default_dtype(getattr(torch, default))
    try:
        assert jg.get_default_dtype() is getattr(jg, default)
        j, t = MAKERS[name](jg), MAKERS[name](torch)
        assert _name(j.dtype) == _name(t.dtype), (name, j.dtype, t.dtype)
        assert tuple(j.shape) == tuple(t.shape)
        if name in ("tensor_float", "tensor_scalar", "int_times_float", "int_div_int", "linspace", "logspace",
                    "arange_float", "eye", "int_sqrt"):
            np.testing.assert_array_equal(j.detach().numpy(), t.detach().numpy())
    finally:
        jg.set_default_dtype(jg.float32)
        torch.set_default_dtype(torch.float32)


def test_default_dtype_repr_optimizer_and_generator(float64_default):
    assert repr(jg.ones(2)) == repr(torch.ones(2))
    assert repr(jg.ones(2, dtype=jg.float32)) == repr(torch.ones(2, dtype=torch.float32)).replace("torch", "jitgrad")
    m = jg.nn.Linear(2, 2)
    opt = jg.optim.Adam(m.parameters())
    m(jg.ones(1, 2)).sum().backward()
    opt.step()
    assert opt.state[m.weight]["step"].dtype is jg.float64
    g = jg.Generator().manual_seed(0)
    assert jg.rand(2, generator=g).dtype is jg.float64


@pytest.mark.parametrize("bad", ["int64", "int32", "bool", "float64_name", "none"])
def test_set_default_dtype_errors(bad):
    arg = {"float64_name": "float64", "none": None}.get(bad, bad)
    jarg = getattr(jg, arg) if bad in ("int64", "int32", "bool") else arg
    targ = getattr(torch, arg) if bad in ("int64", "int32", "bool") else arg
    raises_as_torch(lambda: jg.set_default_dtype(jarg), lambda: torch.set_default_dtype(targ))
    assert jg.get_default_dtype() is jg.float32


def test_set_default_dtype_refuses_half():
    with pytest.raises(jg.UnsupportedError if hasattr(jg, "UnsupportedError") else NotImplementedError):
        jg.set_default_dtype(jg.float16)
    assert jg.get_default_dtype() is jg.float32


def test_set_default_tensor_type():
    try:
        with pytest.warns(UserWarning, match="deprecated"):
            jg.set_default_tensor_type(jg.DoubleTensor)
        assert jg.zeros(1).dtype is jg.float64
        with pytest.warns(UserWarning):
            jg.set_default_tensor_type("torch.FloatTensor")
        assert jg.zeros(1).dtype is jg.float32
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raises_as_torch(lambda: jg.set_default_tensor_type(jg.LongTensor),
                            lambda: torch.set_default_tensor_type(torch.LongTensor))
    finally:
        jg.set_default_dtype(jg.float32)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_compiled_default_dtype_is_guarded(backend):
    def f(x):
        return x * 0.1 + jg.zeros(2), jg.arange(2) / 3, jg.ones(2)

    cf = jg.compile(f, backend=backend)
    x = jg.tensor([1, 2])
    try:
        for default in ("float32", "float64", "float32"):
            jg.set_default_dtype(getattr(jg, default))
            want = f(x)
            got = cf(x)
            for a, b in zip(got, want):
                assert a.dtype is b.dtype is getattr(jg, default)
                np.testing.assert_array_equal(a.numpy(), b.numpy())
        # a retrace for a changed default dtype says so (JITGRAD_LOG=recompiles, f.stats["trace_reasons"])
        assert cf.stats["trace_reasons"].get("modes", 0) >= 1
        assert "default dtype" in recompiles.key_change((0, 0, 0, (1,)), (0, 0, 0, (2,)))[1]
    finally:
        jg.set_default_dtype(jg.float32)


# ---- div rounding modes ----------------------------------------------------------------------------------------
DIV_CASES = [
    ([7, -7, 5, -5, 0], [2, 2, -3, -3, 4]),
    ([7.5, -7.5, 1.0, -1.0, 0.5], [2.0, 2.0, 0.1, 0.3, -0.25]),
    ([1.0, -1.0, 0.0, 3.0], [0.0, 0.0, 0.0, float("inf")]),
]


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("case", range(len(DIV_CASES)))
@pytest.mark.parametrize("dtypes", [("int64", "int64"), ("int32", "int32"), ("int32", "int64"), ("float32", None),
                                    ("float64", None), ("int64", "float32")])
def test_div_rounding_values_and_dtypes(mode, case, dtypes):
    a, b = DIV_CASES[case]
    da, db = dtypes
    db = db or da
    if case > 0 and "int" in da + db:
        pytest.skip("float cases: their divisors truncate to 0 as integers (integer division by zero: below)")
    ja, jb = jg.tensor(a, dtype=getattr(jg, da)), jg.tensor(b, dtype=getattr(jg, db))
    ta, tb = torch.tensor(a, dtype=getattr(torch, da)), torch.tensor(b, dtype=getattr(torch, db))
    for j, t in [(jg.div(ja, jb, rounding_mode=mode), torch.div(ta, tb, rounding_mode=mode)),
                 (ja.div(2, rounding_mode=mode), ta.div(2, rounding_mode=mode)),
                 (ja.divide(2.5, rounding_mode=mode), ta.divide(2.5, rounding_mode=mode)),
                 (jg.divide(ja, jb[:1], rounding_mode=mode), torch.divide(ta, tb[:1], rounding_mode=mode))]:
        assert _name(j.dtype) == _name(t.dtype)
        np.testing.assert_array_equal(j.numpy(), t.numpy())


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_inplace(mode):
    for a, b, d in [([7.5, -7.5], [2.0, -2.0], "float32"), ([7, -7], [2, 2], "int64")]:
        j, t = jg.tensor(a, dtype=getattr(jg, d)), torch.tensor(a, dtype=getattr(torch, d))
        if d == "int64" and mode is None:
            raises_as_torch(lambda: j.div_(jg.tensor(b), rounding_mode=mode),
                            lambda: t.div_(torch.tensor(b), rounding_mode=mode))
            continue
        r = j.div_(jg.tensor(b), rounding_mode=mode)
        t.div_(torch.tensor(b), rounding_mode=mode)
        assert r is j
        np.testing.assert_array_equal(j.numpy(), t.numpy())
        j.divide_(2, rounding_mode=mode)
        t.divide_(2, rounding_mode=mode)
        np.testing.assert_array_equal(j.numpy(), t.numpy())


def test_div_rounding_errors():
    raises_as_torch(lambda: jg.div(jg.ones(2), 2, rounding_mode="round"),
                    lambda: torch.div(torch.ones(2), 2, rounding_mode="round"))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):     # torch's text is "ZeroDivisionError" alone
        jg.div(jg.tensor([5]), 0, rounding_mode="floor")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jg.div(jg.tensor([5]), jg.tensor([0]), rounding_mode="trunc")
    raises_as_torch(lambda: jg.div(jg.tensor([True]), jg.tensor([True]), rounding_mode="floor"),
                    lambda: torch.div(torch.tensor([True]), torch.tensor([True]), rounding_mode="floor"))


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_gradients_are_zero(mode):
    a = np.array([1.0, -7.0, 7.0, 2.5])
    b = np.array([0.1, 2.0, -3.0, 0.5])
    ja, jb = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    jo, to = jg.div(ja, jb, rounding_mode=mode), torch.div(ta, tb, rounding_mode=mode)
    assert jo.grad_fn.name() == to.grad_fn.name()
    np.testing.assert_array_equal(jo.detach().numpy(), to.detach().numpy())
    jo.sum().backward()
    to.sum().backward()
    np.testing.assert_array_equal(ja.grad.numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(jb.grad.numpy(), tb.grad.numpy())
    # away from the jumps the zero gradient is the true one
    x = jg.tensor([1.3, -2.6], dtype=jg.float64, requires_grad=True)
    y = jg.tensor([0.7, 0.9], dtype=jg.float64, requires_grad=True)
    assert gradcheck(lambda u, v: jg.div(u, v, rounding_mode=mode), (x, y))
    assert gradgradcheck(lambda u, v: jg.div(u, v, rounding_mode=mode) * u, (x, y))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_div_eager_equals_compiled(backend):
    def f(a, b, i, k):
        return (jg.div(a, b), jg.div(a, b, rounding_mode="trunc"), a.div(b, rounding_mode="floor"),
                jg.div(i, k, rounding_mode="trunc"), i.div(k, rounding_mode="floor"), jg.div(i, 2.5, rounding_mode="floor"),
                jg.true_divide(i, k))
    a = jg.tensor([1.0, -7.5, 7.5, 2.5], requires_grad=True)
    b = jg.tensor([0.1, 2.0, -3.0, 0.5])
    i, k = jg.tensor([7, -7, 5, -5]), jg.tensor([2, 2, -3, -3])
    want = f(a, b, i, k)
    got = jg.compile(f, backend=backend)(a, b, i, k)
    for g, w in zip(got, want):
        assert g.dtype is w.dtype
        np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())


# ---- threads and matmul precision ------------------------------------------------------------------------------
def test_num_threads():
    n0 = jg.get_num_threads()
    assert n0 >= 1
    try:
        jg.set_num_threads(1)
        assert jg.get_num_threads() == 1
        from jitgrad.ir.ops import blas_library
        ctl = blas_library.thread_control()
        if ctl:
            assert ctl[0]() == 1
        x = jg.randn(64, 64)
        np.testing.assert_allclose((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-5, atol=1e-4)
    finally:
        jg.set_num_threads(n0)
        from jitgrad.ir import settings
        settings.STATE.num_threads = None       # back to "not set"
    assert jg.get_num_threads() == n0
    for bad in (0, -1, 1.5):
        raises_as_torch(lambda: jg.set_num_threads(bad), lambda: torch.set_num_threads(bad))
        raises_as_torch(lambda: jg.set_num_interop_threads(bad), lambda: torch.set_num_interop_threads(bad))
    assert jg.get_num_interop_threads() >= 1


def test_interop_threads_once_per_process():
    code = ("import jitgrad as jg\njg.set_num_interop_threads(3)\nassert jg.get_num_interop_threads() == 3\n"
            "try:\n    jg.set_num_interop_threads(2)\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ("Error: cannot set number of interop threads after parallel work has started or "
                   "set_num_interop_threads called")


def test_set_num_threads_one_keeps_compiled_loops_serial():
    from jitgrad.codegen.kernels.loops import PARALLEL_MIN
    from jitgrad.codegen.program.layout import Program
    from jitgrad.ir import settings
    plan = Program.__new__(Program)
    n0 = settings.STATE.num_threads
    try:
        for parallel in (None, True):
            plan.parallel = parallel
            settings.STATE.num_threads = None
            assert plan.pool_choice(PARALLEL_MIN * 4)[0]
            jg.set_num_threads(1)
            assert not plan.pool_choice(PARALLEL_MIN * 4)[0]
        f = jg.compile(lambda x: (x * 2 + 1).sum(), backend="numba")
        assert f(jg.ones(PARALLEL_MIN * 4)).item() == 3 * PARALLEL_MIN * 4
    finally:
        settings.STATE.num_threads = n0
        if n0 is None:
            from jitgrad.ir.ops import blas_library
            ctl = blas_library.thread_control()
            if ctl:
                ctl[1](settings.default_threads())


def test_float32_matmul_precision():
    assert jg.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    x = jg.randn(8, 8)
    before = (x @ x).numpy()
    try:
        for p in ("high", "medium", "highest"):
            jg.set_float32_matmul_precision(p)
            assert jg.get_float32_matmul_precision() == p
            np.testing.assert_array_equal((x @ x).numpy(), before)     # no effect on CPU float32 results
        with pytest.warns(UserWarning) as jw:
            jg.set_float32_matmul_precision("low")
        with pytest.warns(UserWarning) as tw:
            torch.set_float32_matmul_precision("low")
        assert str(jw[0].message) == str(tw[0].message).split(" (Triggered")[0]
        assert jg.get_float32_matmul_precision() == "highest"
    finally:
        jg.set_float32_matmul_precision("highest")
        torch.set_float32_matmul_precision("highest")


# ---- print options, deterministic flag -----------------------------------------------------------------------
PRINT_CASES = [({"precision": 2}, [1.23456, 2.5]), ({"sci_mode": True}, [1.5, 2.0]), ({"precision": 2}, [1e-6, 1e5]),
               ({"threshold": 5, "edgeitems": 1}, list(range(10))), ({"profile": "short"}, [1.23456, 7.0]),
               ({"profile": "full"}, [float(i) for i in range(1200)]), ({"linewidth": 30}, [0.5] * 12),
               ({"sci_mode": False}, [0.5, 2.0])]


@pytest.mark.parametrize("i", range(len(PRINT_CASES)))
def test_set_printoptions_as_torch(i):
    kw, data = PRINT_CASES[i]
    try:
        jg.set_printoptions(**kw)
        torch.set_printoptions(**kw)
        for d in ("float32", "float64"):
            assert repr(jg.tensor(data, dtype=getattr(jg, d))) == \
                repr(torch.tensor(data, dtype=getattr(torch, d))).replace("torch.", "jitgrad.")
    finally:
        jg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert repr(jg.tensor([1.23456])) == "tensor([1.2346])"
    jg.set_printoptions(profile="long")         # an unknown profile changes nothing, as in torch
    assert repr(jg.tensor([1.23456])) == "tensor([1.2346])"


def test_deterministic_flag_and_empty_cache():
    try:
        assert not jg.are_deterministic_algorithms_enabled()
        jg.use_deterministic_algorithms(True, warn_only=True)
        assert jg.are_deterministic_algorithms_enabled() and jg.is_deterministic_algorithms_warn_only_enabled()
        raises_as_torch(lambda: jg.use_deterministic_algorithms(1), lambda: torch.use_deterministic_algorithms(1))
    finally:
        jg.use_deterministic_algorithms(False)
    jg.cuda.empty_cache()


def test_compile_accepts_torch_compile_arguments():
    f = lambda x: x * 2      # noqa: E731
    for kw in (dict(mode="fast"), dict(mode="max-autotune", options={"a": 1})):
        raises_as_torch(lambda: jg.compile(f, **kw), lambda: torch.compile(f, **kw))
    assert jg.compile(f, disable=True) is f and jg.compile(disable=True)(f) is f
    for kw in (dict(mode="reduce-overhead", fullgraph=True, dynamic=False), dict(backend="inductor"),
               dict(backend="aot_eager", dynamic=True), dict(options={"triton.cudagraphs": False})):
        assert jg.compile(f, **kw)(jg.ones(2)).tolist() == [2.0, 2.0]
    assert jg.compile(f, backend="eager").backend == "interpret"
