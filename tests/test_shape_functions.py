"""Shape, indexing and set functions (library/shaping/stacking.py, index_writes.py, uniques.py): values, dtypes, shapes,
gradients and grad_fn names against torch; gradcheck / gradgradcheck in float64; the in-place forms; Tensor.unfold
as a view that writes reach; torch's errors; eager == compiled (interpreter and Numba) on one batched program; the
traced-value error for the data-dependent ones."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4))
S = RNG.standard_normal((5, 3))
Y = RNG.standard_normal((4, 3))


def _name(lib, t):
    if t.grad_fn is None:
        return None
    return type(t.grad_fn).__name__ if lib is torch else t.grad_fn.name()


def _both(fn, *arrays, names=True):
    """fn(lib, *tensors) on torch and jitgrad (float64 leaves requiring grad): outputs (values, dtypes, shapes),
    the gradients of a weighted sum, and the node names agree."""
    res = []
    for lib in (torch, jg):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(lib, *ts)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        loss = sum((o * (k + 1) * lib.arange(float(o.numel())).reshape(tuple(o.shape))).sum()
                   for k, o in enumerate(out) if o.numel() and o.is_floating_point() and o.requires_grad)
        if not isinstance(loss, int):
            loss.backward()
        res.append(([o.detach().numpy() for o in out], [None if t.grad is None else t.grad.numpy() for t in ts],
                    [_name(lib, o) for o in out]))
    (tv, tg, tn), (jv, jgr, jn) = res
    assert len(tv) == len(jv)
    for a, b in zip(tv, jv):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    for a, b in zip(tg, jgr):
        if a is None:
            assert b is None or not b.any()
        else:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    if names:
        assert jn == tn


def I(lib, v):      # noqa: E743 - an index tensor
    return lib.tensor(v)


SHAPE_CASES = {
    "movedim": lambda m, t: [m.movedim(t, (0, 2), (2, 0)), t.moveaxis(-1, 0), m.moveaxis(t, 1, 2)],
    "ravel": lambda m, t: [m.ravel(t.transpose(0, 1)), t.ravel()],
    "rot90": lambda m, t: [m.rot90(t, k, [1, 2]) for k in range(-1, 6)] + [t.rot90(1, [2, 0])],
    "diag": lambda m, t: [m.diag(t[0, 0], k) for k in (-2, 0, 1)] + [t[0].diag(k) for k in (-1, 0, 2, 9)],
    "diag_embed": lambda m, t: [m.diag_embed(t, o, a, b) for o, a, b in [(0, -2, -1), (1, 0, 2), (-1, 3, 1)]],
    "diagflat": lambda m, t: [m.diagflat(t[0], 1), t[0, 0].diagflat(-2)],
    "tensor_split": lambda m, t: [*m.tensor_split(t, 3, 2), *t.tensor_split([1, -1, 5], dim=-1),
                                  *m.tensor_split(t, m.tensor([1, 2]), 1), *t.tensor_split(m.tensor(2))],
    "hvdsplit": lambda m, t: [*m.hsplit(t, 3), *m.vsplit(t, [1]), *t.dsplit(2), *t[0, 0].hsplit([1, 3])],
    "stacks": lambda m, t: [m.hstack([t, t]), m.vstack([t[0], t[1, 0]]), m.dstack([t[0], t[1]]),
                            m.column_stack([t[0, :, 0], t[1, :, :2]]), m.row_stack([t[0, 0], t[1, 0]]),
                            m.hstack((t[0, 0], t[1, 1])), m.dstack([t[0, 0, 0], t[1, 1, 1]])],
    "atleast": lambda m, t: [m.atleast_1d(t[0, 0, 0]), *m.atleast_2d(t[0, 0], t[0, 0, 0]),
                             *m.atleast_3d([t[0], t[0, 0], t[0, 0, 0], t])],
    "unfold": lambda m, t: [t.unfold(1, 2, 1), t.unfold(-1, 3, 2), t[:, 1].unfold(0, 1, 1),
                            t.transpose(0, 2).unfold(1, 2, 2), t[0, 0, 0].unfold(0, 1, 1)],
    "clone_numel": lambda m, t: [m.clone(t), m.tensor(float(m.numel(t)))],
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
def test_shape_functions_equal_torch(name):
    _both(SHAPE_CASES[name], X)


INDEX_CASES = {
    "take": lambda m, a, b: m.take(a, I(m, [[0, -1], [5, 5]])),
    "put": lambda m, a, b: [a.put(I(m, [0, -1, 5]), b[0]), m.put(a, I(m, [1, 1, 2]), b[1], accumulate=True)],
    "index_add": lambda m, a, b: [a.index_add(0, I(m, [0, 2, 0, 3, 0]), b),
                                  m.index_add(a, 1, I(m, [2, 2]), b[:4, :2], alpha=-1.5),
                                  a[0, 0].index_add(0, I(m, [0]), b[0, 0])],
    "index_copy": lambda m, a, b: [a.index_copy(0, I(m, [3, 1]), b[:2]), m.index_copy(a, -1, I(m, [0, 2]), b[:4, 1:])],
    "index_fill": lambda m, a, b: [a.index_fill(0, I(m, [3, 1]), 2.5), m.index_fill(a, 1, I(m, [0, 0]), b[0, 0])],
    "masked_scatter": lambda m, a, b: [a.masked_scatter(a > 0, b.reshape(-1)),
                                       m.masked_scatter(a, I(m, [True, False, True]), b.reshape(-1)),
                                       a.masked_scatter(a > 9, b[:0, 0])],
    "index_put": lambda m, a, b: [a.index_put((I(m, [0, 2]), I(m, [1, 1])), b[0, :2]),
                                  m.index_put(a, (I(m, [0, 0]),), b[:2], accumulate=True),
                                  a.index_put((a > 0,), b[0, 0])],
}


@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_index_functions_equal_torch(name):
    _both(INDEX_CASES[name], Y, S)


def test_inplace_index_writes_equal_torch():
    def run(m, a, b):
        y = a * 1
        y.index_add_(0, I(m, [1, 1]), b[:2], alpha=2).index_copy_(1, I(m, [0]), b[:4, :1])
        y.index_fill_(0, I(m, [2]), -1.).put_(I(m, [0, 4]), b[0, :2], accumulate=True)
        y.masked_scatter_(y > 0.5, b.reshape(-1)).index_put_((I(m, [3]),), b[4], accumulate=True)
        y.fill_diagonal_(3.)
        z = m.zeros(5, 3, dtype=m.float64)
        z.fill_diagonal_(7., wrap=True)
        w = m.zeros(3, 3, 3, dtype=m.int64)
        w.fill_diagonal_(2)
        return [y, z, w, m.index_put_(z, (I(m, [1]),), b[0, 0])]
    _both(run, Y, S, names=False)


def test_unfold_is_a_view_that_writes_reach():
    for lib in (torch, jg):
        w = lib.arange(6., requires_grad=True)
        y = w * 1
        u = y.unfold(0, 2, 2)
        assert u._base is y
        u[:, 0] *= 3
        (y * lib.arange(6.)).sum().backward()
        assert y.tolist() == [0., 1., 6., 3., 12., 5.] and w.grad.tolist() == [0., 1., 6., 3., 12., 5.]
    x = jg.zeros(2, 4)
    x.unfold(1, 2, 2).select(2, 1).fill_(1.)
    assert x.tolist() == [[0, 1, 0, 1], [0, 1, 0, 1]]


GRAD_FNS = {
    "rot90_diag": lambda t: (t.rot90(1, [1, 2]) * 2).sum(0) + t[0].diag().sum(),
    "diag_embed": lambda t: jg.diag_embed(t, 1, 0, 2),
    "splits_stacks": lambda t: jg.dstack(jg.tensor_split(t, 2, 2)) * jg.vstack([t[0], t[1]]).reshape(2, 3, 4),
    "unfold": lambda t: t.unfold(2, 3, 1) ** 2,
    "movedim": lambda t: jg.movedim(t, 0, -1) * jg.dstack([t[0], t[1]]),
}


@pytest.mark.parametrize("name", sorted(GRAD_FNS))
def test_shape_gradcheck_and_gradgradcheck(name):
    x = jg.tensor(X, requires_grad=True)
    assert gradcheck(GRAD_FNS[name], (x,)) and gradgradcheck(GRAD_FNS[name], (x,))


def test_index_gradcheck_and_gradgradcheck():
    a, b = jg.tensor(Y, requires_grad=True), jg.tensor(S, requires_grad=True)
    fns = [lambda a, b: a.index_add(0, jg.tensor([0, 2, 0, 3, 0]), b, alpha=0.5) ** 2,
           lambda a, b: a.index_copy(0, jg.tensor([3, 1]), b[:2] ** 2),
           lambda a, b: a.index_fill(1, jg.tensor([1]), b[0, 0]) * a,
           lambda a, b: a.masked_scatter(jg.tensor([True, False, True]), b.reshape(-1) ** 2),
           lambda a, b: a.index_put((jg.tensor([1, 1]),), b[:2], accumulate=True) * a,
           lambda a, b: jg.take(a, jg.tensor([1, 1, 5])) * b[0],
           lambda a, b: a.put(jg.tensor([1, 2]), b[0, :2] ** 2, accumulate=True)]
    for f in fns:
        assert gradcheck(f, (a, b)) and gradgradcheck(f, (a, b))


def test_integer_and_bool_inputs_keep_their_dtype():
    for lib in (torch, jg):
        x = lib.tensor([[1, 2], [3, 4]])
        r = [lib.rot90(x), lib.diag(x[0]), lib.hstack([x, x]), x.index_add(0, lib.tensor([1]), x[:1], alpha=2),
             x.index_fill(1, lib.tensor([0]), 7), lib.take(x, lib.tensor([3])), x.unfold(0, 1, 1)]
        if lib is torch:
            ref = [(t.numpy(), t.numpy().dtype) for t in r]
        else:
            for (a, d), t in zip(ref, r):
                assert t.numpy().dtype == d and np.array_equal(t.numpy(), a)


# ---- the data-dependent ones ---------------------------------------------------------------------------------
A = np.array([[1, 2], [1, 2], [0, 5], [1, 2]])
SET_CASES = {
    "unique": (lambda m, x: m.unique(x, return_inverse=True, return_counts=True), A),
    "unique_dim0": (lambda m, x: x.unique(dim=0, return_inverse=True, return_counts=True), A),
    "unique_dim1": (lambda m, x: x.unique(sorted=False, dim=1, return_inverse=True), A),
    "unique_nan": (lambda m, x: m.unique(x), np.array([1., np.nan, np.nan, 1.])),
    "unique_plain": (lambda m, x: x.unique(), A.astype(np.float32)),
    "consecutive_dim0": (lambda m, x: m.unique_consecutive(x, dim=0, return_inverse=True, return_counts=True), A),
    "consecutive": (lambda m, x: x.unique_consecutive(return_inverse=True, return_counts=True), A),
    "consecutive_dim1": (lambda m, x: m.unique_consecutive(x, dim=1, return_counts=True), A),
    "argwhere": (lambda m, x: m.argwhere(x), A - 1),
    "argwhere_0d": (lambda m, x: x.argwhere(), np.array(1.)),
    "mode_1d": (lambda m, x: tuple(m.mode(x)), np.array([3, 1, 2, 1, 3, 2, 2, 3])),
    "mode_keepdim": (lambda m, x: tuple(x.mode(0, True)), RNG.integers(0, 3, (6, 4, 2))),
    "mode_float": (lambda m, x: tuple(x.mode(1)), RNG.integers(0, 3, (6, 5, 2)).astype(float)),
    "mode_0d": (lambda m, x: tuple(m.mode(x)), np.array(2.)),
}


@pytest.mark.parametrize("name", sorted(SET_CASES))
def test_set_functions_equal_torch(name):
    fn, a = SET_CASES[name]
    t, j = fn(torch, torch.tensor(a)), fn(jg, jg.tensor(a))
    t, j = (t if isinstance(t, tuple) else (t,)), (j if isinstance(j, tuple) else (j,))
    assert len(t) == len(j)
    for p, q in zip(t, j):
        assert p.numpy().dtype == q.numpy().dtype and p.numpy().shape == q.numpy().shape
        np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_mode_gradient_goes_to_the_returned_index():
    a = RNG.integers(0, 3, (6, 5)).astype(float)
    _both(lambda m, x: x.mode(0).values, a)
    _both(lambda m, x: m.mode(x, 1, keepdim=True).values, a)


@pytest.mark.parametrize("what", ["unique_consecutive", "unique_dim"])
def test_data_dependent_shapes_refused_inside_compile_naming_the_op_and_line(what):
    fn = jg.unique_consecutive if what == "unique_consecutive" else lambda x: jg.unique(x, dim=0)

    @jg.compile(backend="interpret")
    def f(x):
        return fn(x) * 1      # the user's line
    name = "unique_consecutive" if what == "unique_consecutive" else "unique"
    with pytest.raises(jg.tracer.TracedValueError, match=rf"{name}\(\) reads the value .*test_shape_functions\.py"):
        f(jg.ones(3))


@pytest.mark.parametrize("what", ["unique", "argwhere"])
def test_unique_and_argwhere_compile_with_a_bounded_size(what):
    # (a size bounded by the input's: tests/test_data_dependent_sizes.py)
    f = jg.compile(lambda x: getattr(jg, what)(x) * 1, backend="interpret")
    for x in ([1.0, 0.0, 1.0], [0.0, 0.0, 2.0], [3.0, 2.0, 1.0]):
        x = jg.tensor(x)
        np.testing.assert_array_equal(f(x).numpy(), (getattr(jg, what)(x) * 1).numpy())
    assert f.stats["traces"] == 1


ERRORS = [
    (lambda m: m.rot90(m.ones(3)), RuntimeError, "expected total dims >= 2, but got total dims = 1"),
    (lambda m: m.rot90(m.ones(3, 1), 1, [0]), RuntimeError, "expected total rotation dims == 2, but got dims = 1"),
    (lambda m: m.rot90(m.ones(3, 1), 1, [0, 0]), RuntimeError, "expected rotation dims to be different"),
    (lambda m: m.diag(m.ones(2, 2, 2)), RuntimeError, "diag(): Supports 1D or 2D tensors. Got 3D"),
    (lambda m: m.tensor_split(m.ones(3), 0), RuntimeError, "number of sections must be larger than 0, got 0"),
    (lambda m: m.tensor_split(m.tensor(1.), 1), RuntimeError, "tensor_split expected at least a 1-dimensional"),
    (lambda m: m.hsplit(m.ones(2, 3), 2), RuntimeError, "torch.hsplit attempted to split along dimension 1, but "
                                                         "the size of the dimension 3 is not divisible by the "
                                                         "split_size 2!"),
    (lambda m: m.vsplit(m.ones(3), 1), RuntimeError, "torch.vsplit requires a tensor with at least 2 dimension, "
                                                      "but got a tensor with 1 dimensions!"),
    (lambda m: m.dsplit(m.ones(3), 1), RuntimeError, "torch.dsplit requires a tensor with at least 3 dimension"),
    (lambda m: m.hstack([]), RuntimeError, "hstack expects a non-empty TensorList"),
    (lambda m: m.movedim(m.ones(2), (0,), (0, 0)), RuntimeError, "movedim: Invalid source or destination dims"),
    (lambda m: m.movedim(m.ones(2, 2), (0, 0), (0, 1)), RuntimeError, "movedim: repeated dim in `source`"),
    (lambda m: m.movedim(m.ones(2, 2), 2, 0), IndexError, "Dimension out of range"),
    (lambda m: m.ones(3).unfold(0, 4, 1), RuntimeError, "maximum size for tensor at dimension 0 is 3 but size is 4"),
    (lambda m: m.ones(3).unfold(0, 2, 0), RuntimeError, "step is 0 but must be > 0"),
    (lambda m: m.take(m.ones(3, 4), m.tensor([12])), IndexError, "out of range: tried to access index 12 on a "
                                                                  "tensor of 12 elements."),
    (lambda m: m.take(m.ones(3), m.tensor([1.])), RuntimeError, "take(): Expected a long tensor for index, but got "
                                                                 "Float"),
    (lambda m: m.ones(3).put_(m.tensor([1, 2]), m.ones(3)), IndexError, "put_(): Expected source and index to have"),
    (lambda m: m.ones(3).put(m.tensor([1]), m.ones(1, dtype=m.float64)), RuntimeError, "put_(): self and source "
                                                                                        "expected to have the same"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([0.]), m.ones(1, 4)), RuntimeError,
     "index_add_(): Expected dtype int32/int64 for index but got: Float"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([[0]]), m.ones(1, 4)), IndexError,
     "index_add_(): Index is supposed to be a vector"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([0, 1]), m.ones(1, 4)), RuntimeError,
     r"index_add_\(\): Number of indices \(2\) should be equal to source.size\(dim\): \(1\), for dim: 0"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([5]), m.ones(1, 4)), RuntimeError,
     "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([0]), m.ones(1, 3)), RuntimeError,
     "source tensor shape must match self tensor shape"),
    (lambda m: m.ones(3, 4).index_add(0, m.tensor([0]), m.ones(1, 4, dtype=m.float64)), RuntimeError,
     r"index_add_\(\): self \(Float\) and source \(Double\) must have the same scalar type"),
    (lambda m: m.ones(3, 4).index_copy(0, m.tensor([5]), m.ones(1, 4)), IndexError,
     r"index_copy_\(\): index 5 is out of bounds for dimension 0 with size 3"),
    (lambda m: m.ones(3, 4).index_copy(0, m.tensor([0, 1]), m.ones(1, 4)), IndexError,
     r"index_copy_\(\): Number of indices \(2\) should be equal to source.size\(dim\) \(1\)"),
    (lambda m: m.ones(3, 4).index_fill(0, m.tensor([0.]), 1.), IndexError, "Expected dtype int64 for index"),
    (lambda m: m.ones(3, 4).index_fill(0, m.tensor([0]), m.ones(2)), RuntimeError,
     "index_fill_ only supports a 0-dimensional value tensor"),
    (lambda m: m.ones(3, 4).masked_scatter(m.ones(3, 4), m.ones(12)), RuntimeError,
     "masked_scatter_ only supports boolean masks, but got mask with dtype Float"),
    (lambda m: m.ones(3, 4).masked_scatter(m.ones(3, 4, dtype=m.bool), m.ones(11)), RuntimeError,
     "Number of elements of source < number of ones in mask"),
    (lambda m: m.ones(3, 4).index_put((m.tensor([0]),), m.ones(4, dtype=m.float64)), RuntimeError,
     "Index put requires the source and destination dtypes match, got Float for the destination and Double"),
    (lambda m: m.zeros(3).fill_diagonal_(1), RuntimeError, "dimensions must larger than 1"),
    (lambda m: m.zeros(2, 3, 2).fill_diagonal_(1), RuntimeError, "all dimensions of input must be of equal length"),
    (lambda m: m.mode(m.ones(2, 0), 1), IndexError, r"mode\(\): Expected reduction dim 1 to have non-zero size"),
    (lambda m: m.unique(m.ones(2, 2), dim=2), IndexError, "Dimension out of range"),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_as_torch(k):
    fn, exc, msg = ERRORS[k]
    with pytest.raises(exc, match=msg if "\\" in msg else msg.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        fn(torch)
    with pytest.raises(exc, match=msg if "\\" in msg else msg.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        fn(jg)


# ---- eager == compiled, one batched program --------------------------------------------------------------------
def _program(x, a, b):
    i = jg.tensor([0, 2, 0])
    outs = [jg.movedim(x, 0, -1), x.ravel(), jg.rot90(x, 1, [1, 2]), jg.diag(x[0, 0]), x[0].diag(1),
            jg.diag_embed(x, 1), jg.diagflat(x[0, 0]), *jg.tensor_split(x, 3, 2), *jg.hsplit(x, 3),
            jg.hstack([x, x]), jg.vstack([x[0], x[1]]), jg.dstack([x[0], x[1]]), jg.column_stack([x[0, 0], x[1, 0]]),
            jg.atleast_3d(x[0]), x.unfold(2, 2, 1), jg.take(a, jg.tensor([1, -1])),
            a.put(jg.tensor([0, 0]), b[0, :2], accumulate=True), a.index_add(0, i, b[:3], alpha=2.),
            a.index_copy(0, jg.tensor([3, 1]), b[:2]), a.index_fill(1, jg.tensor([1]), b[0, 0]),
            a.masked_scatter(a > 0, b.reshape(-1)), a.index_put((jg.tensor([0, 0]),), b[:2], accumulate=True),
            x.mode(1).values, x.mode(1).indices]
    y = a * 1
    y.index_add_(0, i, b[:3]).fill_diagonal_(0.5).masked_scatter_(y < 0, b.reshape(-1))
    outs.append(y)
    loss = sum((o * (k + 1)).sum() for k, o in enumerate(outs) if o.is_floating_point())
    loss.backward()
    return outs + [x.grad, a.grad, b.grad]


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_eager_equals_compiled(backend):
    def run(fn):
        x, a, b = (jg.tensor(v, requires_grad=True) for v in (X, Y, S))
        return [o.detach().numpy() for o in fn(x, a, b)]
    eager = run(_program)
    f = jg.compile(_program, backend=backend)
    for _ in range(2):              # the second call replays the cached graph
        for e, c in zip(eager, run(f)):
            assert e.dtype == c.dtype and e.shape == c.shape
            np.testing.assert_allclose(c, e, rtol=1e-12, atol=1e-12)
