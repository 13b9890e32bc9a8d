"""scatter_reduce / scatter_reduce_ and index_reduce / index_reduce_ (library/indexing/scatter_reduce.py, the
primitive in ir/ops/scatter.py): values and gradients against torch on data full of ties and zeros (where the gradient rules
are decided), gradcheck / gradgradcheck in float64, integer / bool / NaN / inf behaviour, the in-place forms,
torch's error messages, and eager == compiled."""
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def _ties_and_zeros(shape, seed):
    """Small integers: many elements tie for the max / min, many products meet a zero."""
    return np.random.default_rng(seed).integers(-2, 3, shape).astype(np.float64)


def _both(fn, arrays, index, lib_index=None):
    """fn(lib, *tensors, index) run on torch and jitgrad; returns ((value, grads), ...) as NumPy."""
    out = []
    for lib in (torch, jg):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        r = fn(lib, *ts, lib.tensor(index))
        w = lib.tensor(np.linspace(-1.0, 2.0, r.numel()).reshape(tuple(r.shape)))
        (r * w).sum().backward()
        name = type(r.grad_fn).__name__ if lib is torch else r.grad_fn.name()
        out.append((r.detach().numpy(), [t.grad.numpy() for t in ts], name))
    (tv, tg, tn), (jv, jgr, jn) = out
    np.testing.assert_allclose(jv, tv, rtol=1e-12, atol=1e-12)
    for a, b in zip(jgr, tg):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert jn == tn


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_values_and_grads_equal_torch(reduce, include_self):
    for seed in range(3):
        x, s = _ties_and_zeros((4, 3), seed), _ties_and_zeros((5, 3), seed + 10)
        idx = np.random.default_rng(seed).integers(0, 4, (5, 3))
        _both(lambda m, a, b, i: a.scatter_reduce(0, i, b, reduce, include_self=include_self), [x, s], idx)
        # along dim 1, index smaller than src (torch reads src's leading block)
        idx1 = np.random.default_rng(seed).integers(0, 3, (4, 2))
        _both(lambda m, a, b, i: m.scatter_reduce(a, -1, i, b[:, :2], reduce, include_self=include_self),
              [x, s[:4]], idx1)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_values_and_grads_equal_torch(reduce, include_self):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # torch's "index_reduce() is in beta"
        for seed in range(3):
            x, s = _ties_and_zeros((4, 3), seed), _ties_and_zeros((5, 3), seed + 10)
            _both(lambda m, a, b, i: a.index_reduce(0, i, b, reduce, include_self=include_self), [x, s],
                  np.array([0, 2, 0, 3, 0]))
            _both(lambda m, a, b, i: m.index_reduce(a, 1, i, b, reduce, include_self=include_self), [x, s[:4, :2]],
                  np.array([2, 2]))


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_gradcheck_and_gradgradcheck(reduce, include_self):
    rng = np.random.default_rng(5)
    x = jg.tensor(rng.uniform(0.5, 2.0, (4, 3)), requires_grad=True)     # distinct values: no ties, no zeros
    s = jg.tensor(rng.uniform(-2.0, -0.5, (5, 3)), requires_grad=True)
    idx = jg.tensor(rng.integers(0, 4, (5, 3)))
    f = lambda a, b: a.scatter_reduce(0, idx, b, reduce, include_self=include_self)  # noqa: E731
    assert gradcheck(f, (x, s)) and gradgradcheck(f, (x, s))
    if reduce != "sum":
        i1 = jg.tensor([0, 2, 0, 3, 0])
        g = lambda a, b: a.index_reduce(0, i1, b, reduce, include_self=include_self)  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert gradcheck(g, (x, s)) and gradgradcheck(g, (x, s))


def test_prod_gradient_with_one_zero_per_target_to_second_order():
    # each target meets at most one zero among src (self's zeros are any number): the product of the others,
    # without division, is exact, and so is its own derivative
    x = jg.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=jg.float64, requires_grad=True)
    s = jg.tensor([[0.0, 1.5], [2.0, 0.0], [0.5, -1.0]], dtype=jg.float64, requires_grad=True)
    i = jg.tensor([[0, 1], [1, 1], [0, 0]])
    f = lambda a, b: a.scatter_reduce(0, i, b, "prod")  # noqa: E731
    assert gradcheck(f, (x, s)) and gradgradcheck(f, (x, s))
    r = f(x, s)
    r.sum().backward()
    # target (0, 0) holds 0 (self) * 0 * 0.5: the gradient of src[0, 0] is the product of the others, 0
    # target (1, 1) holds 0 (self) * 1.5 * 0: src[1, 1]'s gradient is 0 * 1.5
    assert s.grad.numpy()[0, 0] == 0 and s.grad.numpy()[1, 1] == 0
    # target (1, 0) holds 3 * 2: src[1, 0]'s gradient is 3
    assert s.grad.numpy()[1, 0] == 3


def test_amin_amax_share_the_gradient_among_ties():
    # PyTorch's test_scatter_index_reduce_amin_amax_backprops_to_all_values: src equal to self, every value tied
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn, reduce in [(f, r) for f in (jg.scatter_reduce, jg.index_reduce) for r in ("amin", "amax")]:
            x = jg.tensor(np.random.default_rng(1).standard_normal((2, 3)), requires_grad=True)
            s = x.clone().detach_().requires_grad_(True)
            i = jg.arange(2)
            if fn is jg.scatter_reduce:
                i = i.unsqueeze(-1).expand((2, 3))
            assert gradcheck(fn, (x, 0, i, s, reduce), check_batched_grad=False)


def test_prod_gradients_at_zeros_of_self_and_src():
    # PyTorch's OpInfo samples for prod: one zero reduced (from src, from self), two (one from each), none
    f64 = dict(dtype=jg.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = jg.tensor([[0.0, 13.0], [0.0, 0.0], [15.0, 19.0]], **f64)
        s = jg.tensor([[2.0, 0.0], [0.0, 0.0], [2.0, 3.0], [2.0, 2.0]], **f64)
        args = (x, 0, jg.tensor([0, 1, 2, 0]), s, "prod")
        assert gradcheck(jg.index_reduce, args) and gradgradcheck(jg.index_reduce, args)
        x = jg.tensor([[0.0, 13.0], [0.0, 17.0], [0.0, 19.0]], **f64)
        s = jg.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 4.0, 0.0, 1.0], [2.0, 3.0, 5.0, 6.0]], **f64)
        args = (x, 1, jg.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]]), s, "prod")
        assert gradcheck(jg.scatter_reduce, args) and gradgradcheck(jg.scatter_reduce, args)


def test_prod_double_backward_where_two_zeros_meet_is_refused_as_torch():
    # PyTorch's test_scatter_index_reduce_prod_gradgrad_error: first order fine, double backward refused
    x = jg.tensor([1.0], dtype=jg.float64, requires_grad=True)
    s = jg.tensor([0.0, 0.0], dtype=jg.float64, requires_grad=True)
    i = jg.tensor([0, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn, what in ((jg.scatter_reduce, "src"), (jg.index_reduce, "source")):
            assert gradcheck(fn, (x, 0, i, s, "prod"))
            with pytest.raises(RuntimeError, match=f"{fn.__name__}\\(\\): Double backward is unsupported for {what} "
                                                   f"when >1 zeros in {what} are scattered to the same position"):
                gradgradcheck(fn, (x, 0, i, s, "prod"))
            # one zero per target: double backward is fine
            assert gradgradcheck(fn, (x, 0, i, jg.tensor([0.0, 2.0], dtype=jg.float64, requires_grad=True), "prod"))


@pytest.mark.parametrize("include_self", [True, False])
def test_prod_traced_second_order_where_two_zeros_meet_is_exact(include_self):
    # a traced backward cannot look at the data to refuse: its gradient is written so that its own derivative is
    # exact, (product of the rest) * (the other zero), to every order with two zeros at a target
    i = jg.tensor([[0, 0], [0, 0], [0, 0]])

    def f(a, b):
        return a.scatter_reduce(0, i, b, "prod", include_self=include_self)

    def first(a, b):
        ga, gb = jg.autograd.grad((f(a, b) * jg.tensor([[1.5, -0.5]], dtype=jg.float64)).sum(), (a, b),
                                  create_graph=True)
        return ga, gb

    def second(a, b):       # the first derivative's own vjp, differentiated again: the third order
        ga, gb = first(a, b)
        return jg.autograd.grad((gb * gb).sum() + ga.sum(), (a, b), create_graph=True)

    compiled_first = jg.compile(first, backend="interpret")
    compiled_second = jg.compile(second, backend="interpret")
    for self_value in (2.0, 0.0):
        x = jg.tensor([[self_value, 3.0]], dtype=jg.float64, requires_grad=True)
        s = jg.tensor([[0.0, 1.5], [0.0, 0.0], [2.0, 0.0]], dtype=jg.float64, requires_grad=True)
        assert gradcheck(compiled_first, (x, s)) and gradcheck(compiled_second, (x, s))


def test_integer_bool_nan_and_inf_like_torch():
    cases = [
        ("mean", True, [1, 5, 3], [-3, -9]),        # integer means floor, as torch
        ("mean", False, [1, 5, 3], [3, 8]),
        ("amin", False, [1, 5, 3], [-3, -9]),
        ("prod", True, [2, 0, 1], [3, 4]),
        ("amax", True, [True, False, False], [False, True]),
        ("amin", False, [True, False, False], [False, True]),
        ("prod", False, [True, True, False], [True, False]),
        ("amax", True, [1.0, 5.0, 3.0], [float("nan"), 8.0]),       # NaN propagates
        ("amin", True, [1.0, 5.0, 3.0], [8.0, float("nan")]),
        ("sum", False, [1.0, float("inf"), 2.0], [2.0, 3.0]),       # an excluded inf is gone, not nan
        ("mean", False, [1.0, float("-inf"), 2.0], [2.0, 3.0]),
    ]
    for reduce, inc, x, s in cases:
        i = [1, 1]
        want = torch.tensor(x).scatter_reduce(0, torch.tensor(i), torch.tensor(s), reduce, include_self=inc)
        got = jg.tensor(x).scatter_reduce(0, jg.tensor(i), jg.tensor(s), reduce, include_self=inc)
        assert got.dtype.name == str(want.dtype).replace("torch.", ""), (reduce, x)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{reduce} {inc} {x} {s}")
    # torch's aliases for amax / amin, int32 indices, and 0-d tensors
    for r in ("max", "min"):
        np.testing.assert_array_equal(
            jg.zeros(3).scatter_reduce(0, jg.tensor([0, 0], dtype=jg.int32), jg.tensor([1.0, -2.0]), r).numpy(),
            torch.zeros(3).scatter_reduce(0, torch.tensor([0, 0]), torch.tensor([1.0, -2.0]), r).numpy())
    assert jg.tensor(2.0).scatter_reduce(0, jg.tensor(0), jg.tensor(3.0), "prod").item() == 6.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert jg.tensor(2.0).index_reduce(0, jg.tensor(0), jg.tensor(3.0), "amin").item() == 2.0


def test_in_place_forms():
    x = jg.zeros(3)
    v = x._version
    assert x.scatter_reduce_(0, jg.tensor([0, 0, 2]), jg.tensor([2.0, -1.0, 4.0]), "amin") is x
    assert x.tolist() == [-1.0, 0.0, 0.0] and x._version == v + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = jg.ones(3)
        y.index_reduce_(0, jg.tensor([0, 0]), jg.tensor([2.0, -1.0]), "prod", include_self=False)
        assert y.tolist() == [-2.0, 1.0, 1.0]
    # recorded as torch records them: the node of the op, on a non-leaf, with the gradient of both inputs
    for lib in (torch, jg):
        a = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        s = lib.tensor([4.0, 0.5], requires_grad=True)
        h = a * 1
        h.scatter_reduce_(0, lib.tensor([1, 1]), s, "amax", include_self=True)
        name = type(h.grad_fn).__name__ if lib is torch else h.grad_fn.name()
        assert name == "ScatterReduceBackward0"
        (h * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        if lib is torch:
            want = (a.grad.numpy(), s.grad.numpy())
        else:
            np.testing.assert_array_equal(a.grad.numpy(), want[0])
            np.testing.assert_array_equal(s.grad.numpy(), want[1])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        jg.ones(3, requires_grad=True).scatter_reduce_(0, jg.tensor([0]), jg.tensor([2.0]), "prod")


def _error(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001 - the test compares any error with torch's
        return type(e), str(e)
    return None


@pytest.mark.parametrize("case", [
    lambda m: m.ones(3).scatter_reduce(0, m.tensor([0]), m.tensor([2.0]), "foo"),
    lambda m: m.ones(3).scatter_reduce(0, m.tensor([0]), m.tensor([2]), "prod"),
    lambda m: m.ones(3).scatter_reduce(0, m.tensor([5]), m.tensor([2.0]), "amax"),
    lambda m: m.ones(3, 2).scatter_reduce(0, m.tensor([0]), m.ones(3, 2), "amax"),
    lambda m: m.ones(3, 2).scatter_reduce(0, m.zeros(3, 3, dtype=m.int64), m.ones(3, 2), "amax"),
    lambda m: m.ones(3, 2).scatter_reduce(2, m.zeros(3, 2, dtype=m.int64), m.ones(3, 2), "amax"),
    lambda m: m.ones(3).index_reduce(0, m.tensor([0]), m.tensor([2.0]), "sum"),
    lambda m: m.ones(3, 4).index_reduce(0, m.tensor([0, 1, 2]), m.ones(2, 4), "prod"),
    lambda m: m.ones(3).index_reduce(0, m.tensor([3]), m.tensor([2.0]), "prod"),
    lambda m: m.ones(3).index_reduce(0, m.tensor([-1]), m.tensor([2.0]), "prod"),
    lambda m: m.ones(3).index_reduce(0, m.tensor([[0]]), m.tensor([2.0]), "prod"),
    lambda m: m.ones(3).index_reduce(0, m.tensor([0]), m.tensor([2], dtype=m.float64), "prod"),
    lambda m: m.ones(3, 4).index_reduce(0, m.tensor([0, 1]), m.ones(2, 2), "prod"),
    lambda m: m.tensor(2.0).index_reduce(0, m.tensor([0]), m.tensor([3.0]), "prod"),
])
def test_errors_like_torch(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, got = _error(lambda: case(torch)), _error(lambda: case(jg))
    assert want is not None and got is not None
    assert issubclass(got[0], want[0]), (got, want)
    # torch's text up to its details (which name torch's dtypes: Float, Long), ours may add the op's name
    head = want[1].split(": (")[0].split(" but got")[0].split(" (")[0]
    assert len(head) > 20 and head in got[1], (got[1], want[1])


def test_index_reduce_warns_like_torch_once():
    from jitgrad.library.indexing import scatter_reduce as sr
    sr._BETA_WARNED = False
    with pytest.warns(UserWarning, match=r"index_reduce\(\) is in beta"):
        jg.ones(2).index_reduce(0, jg.tensor([0]), jg.tensor([2.0]), "prod")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jg.ones(2).index_reduce(0, jg.tensor([0]), jg.tensor([2.0]), "prod")


def _step(x, s, buf, idx, i1):
    y = x.scatter_reduce(0, idx, s, "amax", include_self=False) + x.index_reduce(0, i1, s, "prod")
    y = y + x.scatter_reduce(0, idx, s * 2.0, "amin") * x.scatter_reduce(0, idx, s, "mean", include_self=False)
    y.scatter_reduce_(0, idx, s, "prod", include_self=False)       # in place, on a non-leaf
    y.index_reduce_(1, i1[:3], s[:4] * 0.5, "amin")
    buf.scatter_reduce_(0, idx, s.detach(), "amax")                # a mutated input, written back
    loss = (y * y).sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_compiled_equals_eager(backend):
    rng = np.random.default_rng(3)
    xa, sa = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    idx, i1 = jg.tensor(rng.integers(0, 4, (5, 3))), jg.tensor([0, 2, 0, 3, 0])
    step = jg.compile(_step, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = []
        for fn in (_step, step, step):      # the compiled step twice: the second call reuses the build
            x, s = jg.tensor(xa, requires_grad=True), jg.tensor(sa, requires_grad=True)
            buf = jg.zeros(4, 3, dtype=jg.float64)
            runs.append((fn(x, s, buf, idx, i1).item(), x.grad.numpy(), s.grad.numpy(), buf.numpy()))
    assert (step.stats["traces"], step.stats["hits"], step.stats["eager_fallbacks"]) == (1, 1, 0), step.stats
    assert step.stats["compiled_calls" if backend == "numba" else "interpreted_calls"] == 2, step.stats
    for run in runs[1:]:
        for got, want in zip(run, runs[0]):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_compiled_second_order_equals_eager():
    rng = np.random.default_rng(4)
    xa, sa = rng.uniform(0.5, 2, (3, 2)), rng.uniform(0.5, 2, (4, 2))
    idx = jg.tensor(rng.integers(0, 3, (4, 2)))

    def gg(x, s):
        y = x.scatter_reduce(0, idx, s, "prod")
        gx, gs = jg.autograd.grad((y * y).sum(), (x, s), create_graph=True)
        return (gx * gx).sum() + (gs * gs).sum()

    x, s = jg.tensor(xa, requires_grad=True), jg.tensor(sa, requires_grad=True)
    want = jg.autograd.grad(gg(x, s), (x, s))
    x, s = jg.tensor(xa, requires_grad=True), jg.tensor(sa, requires_grad=True)
    got = jg.autograd.grad(jg.compile(gg, backend="interpret")(x, s), (x, s))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)


@pytest.mark.parametrize("dtype,reduce,include_self", [
    ("float32", "amax", False), ("float32", "amin", True), ("float64", "prod", False), ("int64", "amax", True),
    ("int32", "amin", False), ("bool", "prod", True), ("bool", "amax", False)])
def test_native_cpu_loop_equals_eager(dtype, reduce, include_self):
    # compiled CPU code runs scatter_reduce as a native loop (codegen/loops.gen_scatter), NaN-propagating as
    # np.maximum / np.minimum, with the identity written first when the targets' own values are left out
    rng = np.random.default_rng(7)
    dt = getattr(jg, dtype)
    xa, sa = rng.integers(-3, 4, (4, 3)), rng.integers(-3, 4, (6, 3))
    xa, sa = (xa > 0, sa > 0) if dtype == "bool" else (xa.astype(dt.np), sa.astype(dt.np))
    if dtype.startswith("float"):
        xa[0, 0], sa[1, 1] = np.nan, np.nan
    f = jg.compile(lambda x, s, i: x.scatter_reduce(0, i, s, reduce, include_self=include_self), backend="numba")
    for _ in range(2):
        i = jg.tensor(rng.integers(0, 4, (6, 3)))
        want = jg.tensor(xa).scatter_reduce(0, i, jg.tensor(sa), reduce, include_self=include_self).numpy()
        got = f(jg.tensor(xa), jg.tensor(sa), i).numpy()
        np.testing.assert_array_equal(got, want)
    assert f.stats["compiled_calls"] == 2 and "# kernel scatter_" in str(f.source(jg.tensor(xa), jg.tensor(sa), i))
    for bad in (4, -1):         # refused in the loop as in eager mode (a negative index is no wrap-around here)
        with pytest.raises(IndexError, match=f"scatter_reduce: index {bad} is out of bounds for dimension 0"):
            f(jg.tensor(xa), jg.tensor(sa), jg.tensor(np.full((6, 3), bad)))
