"""jitgrad.func.vmap against torch.func.vmap: values, shapes and dtypes (float64), batching rules vs the loop,
gradients through vmap, randomness modes, torch's error messages, eager == compiled."""
import numpy as np
import pytest
import torch
import torch.func as tf

import jitgrad as jg
import jitgrad.func as jf
from jitgrad.func import batching

RNG = np.random.default_rng(0)


def _arr(*shape):
    return RNG.standard_normal(shape)


def _j(a):
    return jg.tensor(a) if isinstance(a, np.ndarray) else a


def _t(a):
    return torch.tensor(a) if isinstance(a, np.ndarray) else a


def _close(a, b, tol=1e-10):
    if isinstance(b, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, tol)
        return
    if isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _close(a[k], b[k], tol)
        return
    assert tuple(a.shape) == tuple(b.shape)
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _both(lib):
    """The same program for jitgrad (lib=jg) and torch (lib=torch)."""
    F = lib.nn.functional
    return {
        "elementwise": (lambda x: lib.sin(x) * 2 + x.exp() / (1 + x * x), [_arr(5, 3)], 0),
        "broadcast_unbatched": (lambda x, y: x * y - y.tanh(), [_arr(4, 3), _arr(2, 1, 3)], (0, None)),
        "scalar_per_example": (lambda x, y: x * y + x.sigmoid(), [_arr(4), _arr(3)], (0, None)),
        "where_clamp": (lambda x: lib.where(x > 0, x, 0.1 * x).clamp(-0.5, 0.7), [_arr(4, 3)], 0),
        "matmul_vec_mat": (lambda x, w: x @ w, [_arr(4, 3), _arr(3, 5)], (0, None)),
        "matmul_mat_vec": (lambda a, v: a @ v, [_arr(3, 5), _arr(4, 5)], (None, 0)),
        "matmul_both": (lambda a, b: a @ b, [_arr(4, 2, 3), _arr(4, 3, 5)], 0),
        "matmul_batched_rank": (lambda a, b: a @ b, [_arr(4, 6, 2, 3), _arr(4, 3, 5)], 0),
        "matmul_vec_vec": (lambda a, b: a @ b, [_arr(4, 3), _arr(4, 3)], 0),
        "matmul_vec_batched_mat": (lambda a, b: a @ b, [_arr(4, 3), _arr(4, 3, 5)], 0),
        "mlp": (lambda x, w1, w2: lib.tanh(x @ w1) @ w2, [_arr(6, 3), _arr(3, 4), _arr(4, 2)], (0, None, None)),
        "softmax": (lambda x: lib.softmax(x, -1) + F.log_softmax(x, 0), [_arr(4, 3, 5)], 0),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), [_arr(4, 3, 5), _arr(5), _arr(5)], (0, None, None)),
        "reductions": (lambda x: (x.sum(0), x.mean(-1), x.amax(1), x.prod(0), x.norm(), x.var(1), x.logsumexp(0)),
                       [_arr(3, 4, 5)], 0),
        "argmax": (lambda x: (x.argmax(), x.argmax(1), x.argmin(0, keepdim=True)), [_arr(3, 4, 5)], 0),
        "cumsum": (lambda x: (x.cumsum(1), x.cumprod(0), x.flip(0)), [_arr(3, 4, 5)], 0),
        "shapes": (lambda x: (x.reshape(-1), x.permute(1, 0), x.t().unsqueeze(0), x.expand(2, 4, 5), x[None]),
                   [_arr(3, 4, 5)], 0),
        "cat_stack": (lambda x, y: (lib.cat([x, y], 0), lib.stack([x, y], 1), lib.cat([x, y], -1)),
                      [_arr(3, 4, 5), _arr(4, 5)], (0, None)),
        "basic_index": (lambda x: (x[1:], x[:, 0], x[..., ::2], x[1, 2], x[None, :, 1]), [_arr(3, 4, 5)], 0),
        "tensor_index": (lambda x, i: (x[i], x[:, i], x[i, 1:], x[1, :, i]),
                         [_arr(3, 4, 5, 3), np.array([2, 0, 1, 2])], (0, None)),
        "batched_index": (lambda x, i: (x[i], x[i, 1]), [_arr(3, 4, 5), np.array([[1, 0], [2, 2], [0, 1]])], 0),
        "gather_label": (lambda logp, y: -logp[y], [_arr(6, 5), np.array([0, 4, 2, 1, 3, 3])], 0),
        "unbatched_table": (lambda emb, i: emb[i], [_arr(7, 3), np.array([[1, 2], [6, 0], [3, 3]])], (None, 0)),
        "linalg": (lambda a, b: (lib.linalg.inv(a), lib.linalg.det(a), lib.linalg.solve(a, b)),
                   [_arr(3, 4, 4) + 4 * np.eye(4), _arr(3, 4, 2)], 0),
        "in_dim_1": (lambda x, y: x * y.sum(), [_arr(5, 3), _arr(2, 4, 3)], (1, -1)),
    }


CASES = sorted(_both(torch))


@pytest.mark.parametrize("name", CASES)
def test_vmap_matches_torch(name):
    fj, args, in_dims = _both(jg)[name]
    ft = _both(torch)[name][0]
    got = jf.vmap(fj, in_dims=in_dims)(*[_j(a) for a in args])
    want = tf.vmap(ft, in_dims=in_dims)(*[_t(a) for a in args])
    _close(got, want)


def test_out_dims_and_pytrees():
    x, y = _arr(4, 3), _arr(3, 4)

    def f(lib):
        return lambda d, s: {"a": d["p"] * s, "b": (d["q"].sum(), lib.ones(2))}
    dj = {"p": jg.tensor(x), "q": jg.tensor(y)}
    dt = {"p": torch.tensor(x), "q": torch.tensor(y)}
    kw = dict(in_dims=({"p": 0, "q": 1}, None), out_dims={"a": 1, "b": (0, None)})
    _close(jf.vmap(f(jg), **kw)(dj, 2.0), tf.vmap(f(torch), **kw)(dt, 2.0))
    # an unbatched result is broadcast over the batch; out_dims=-1
    _close(jf.vmap(lambda a: (a, jg.ones(2)), out_dims=(-1, 0))(jg.tensor(x)),
           tf.vmap(lambda a: (a, torch.ones(2)), out_dims=(-1, 0))(torch.tensor(x)))


def test_nested_vmap_and_closures():
    x, y, w = _arr(4, 3), _arr(5, 3), _arr(3)

    def f(lib, w):
        return lambda a: (lambda b: (a * b * w).sum())
    got = jf.vmap(lambda a: jf.vmap(f(jg, jg.tensor(w))(a))(jg.tensor(y)))(jg.tensor(x))
    want = tf.vmap(lambda a: tf.vmap(f(torch, torch.tensor(w))(a))(torch.tensor(y)))(torch.tensor(x))
    _close(got, want)
    got = jf.vmap(jf.vmap(lambda a, b: a @ b, in_dims=(None, 0)), in_dims=(0, None))(jg.tensor(x), jg.tensor(y))
    want = tf.vmap(tf.vmap(lambda a, b: a @ b, in_dims=(None, 0)), in_dims=(0, None))(torch.tensor(x), torch.tensor(y))
    _close(got, want)


def test_dtype_promotion_of_batched_zero_dim():
    # per example, a 0-dim float64 times a float32 vector is float32 (a batched 0-dim stays "0-dim")
    s = np.arange(4.0)
    v = np.ones(3, np.float32)
    got = jf.vmap(lambda a, b: a * b, in_dims=(0, None))(jg.tensor(s), jg.tensor(v))
    want = tf.vmap(lambda a, b: a * b, in_dims=(0, None))(torch.tensor(s), torch.tensor(v))
    _close(got, want, 1e-6)


def test_chunk_size():
    x = _arr(7, 3)
    f = lambda a: a.softmax(0) * a.sum()   # noqa: E731
    _close(jf.vmap(f, chunk_size=3)(jg.tensor(x)), tf.vmap(f, chunk_size=3)(torch.tensor(x)))


def test_common_primitives_have_rules():
    common = {"add", "mul", "exp", "where", "cast", "sum", "amax", "matmul", "reshape", "permute", "broadcast_to",
              "cat", "getitem", "index_put", "softmax", "log_softmax", "cumsum", "argmax", "flip", "inv", "solve"}
    assert not common & batching.FALLBACK
    assert common <= set(batching.RULES)
    assert "conv" in batching.FALLBACK       # the list is real: the loop is used for these


def test_fallback_loop_is_correct():
    # histc has no batching rule: the interpreter loops over the batch and stacks
    x = _arr(4, 10)
    got = jf.vmap(lambda a: jg.histc(a, bins=4, min=-2, max=2))(jg.tensor(x))
    want = torch.stack([torch.histc(torch.tensor(r), bins=4, min=-2, max=2) for r in x])
    _close(got, want)


def test_gradients_through_vmap():
    x, w = _arr(4, 3), _arr(3, 2)

    def f(x, w):
        return jf.vmap(lambda r: (jg.tanh(r @ w) ** 2).sum() + r[0] * r.softmax(0)[1], in_dims=(0,))(x)
    xs = jg.tensor(x, requires_grad=True)
    ws = jg.tensor(w, requires_grad=True)
    assert jg.autograd.gradcheck(f, (xs, ws))
    assert jg.autograd.gradgradcheck(f, (xs, ws))
    # closure parameters receive gradients
    wj = jg.tensor(w, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    jf.vmap(lambda r: (r @ wj).exp().sum())(jg.tensor(x)).sum().backward()
    tf.vmap(lambda r: (r @ wt).exp().sum())(torch.tensor(x)).sum().backward()
    _close(wj.grad, wt.grad)


@pytest.mark.parametrize("mode", ["same", "different"])
def test_randomness(mode):
    x = jg.zeros(3, 4)
    r = jf.vmap(lambda a: a + jg.rand(4, dtype=jg.float64), randomness=mode)(x)
    assert r.shape == (3, 4)
    same = all(np.array_equal(r[0].numpy(), r[i].numpy()) for i in range(3))
    assert same == (mode == "same")
    # the generator advanced: the next call draws new numbers
    r2 = jf.vmap(lambda a: a + jg.rand(4, dtype=jg.float64), randomness=mode)(x)
    assert not np.array_equal(r.numpy(), r2.numpy())
    # an unbatched write into an outside tensor is written back
    count = jg.zeros((), dtype=jg.float64)

    def f(a):
        count.add_(1.0)
        return a
    jf.vmap(f)(x)
    assert float(count) == 1.0


def _err(fn, cls, match):
    with pytest.raises(cls) as ej:
        fn(jf.vmap, jg)
    with pytest.raises(cls) as et:
        fn(tf.vmap, torch)
    assert match in str(ej.value) and match in str(et.value)
    return str(ej.value), str(et.value)


def test_errors_match_torch():
    a, b = _err(lambda v, L: v(lambda x, y: x + y)(L.ones(3), L.ones(4)), ValueError, "")
    assert a == b
    a, b = _err(lambda v, L: v(lambda x: x + L.rand(3))(L.ones(2, 3)), RuntimeError, "randomness error mode")
    assert a == b
    for f in (lambda v, L: v(lambda x: x, out_dims=None)(L.ones(2, 3)),
              lambda v, L: v(lambda x: x, in_dims=2)(L.ones(2, 3)),
              lambda v, L: v(lambda x: x)(1.0),
              lambda v, L: v(lambda x: x, in_dims=None)(L.ones(2)),
              lambda v, L: v(lambda x: x)(),
              lambda v, L: v(lambda x: x, in_dims=(1.5,))(L.ones(2)),
              lambda v, L: v(lambda x: x, out_dims="a")(L.ones(2)),
              lambda v, L: v(lambda x: x, in_dims=(None,))(L.ones(2)),
              lambda v, L: v(lambda x: 1.0)(L.ones(2)),
              lambda v, L: v(lambda x: x, chunk_size=0)(L.ones(2))):
        a, b = _err(f, ValueError, "")
        assert a == b
    a, b = _err(lambda v, L: v(lambda x: x, randomness="foo")(L.ones(2)), RuntimeError, "")
    assert a == b
    _err(lambda v, L: v(lambda x: x if x.sum() > 0 else -x)(L.ones(2, 3)), RuntimeError,
         "attempting to use a Tensor in some data-dependent control flow")
    _err(lambda v, L: v(lambda x: x, in_dims=(0, 0))(L.ones(2, 3)), ValueError,
         "in_dims is not compatible with the structure of `inputs`")


def test_compiled_equals_eager():
    x, w1, w2, y = _arr(6, 3), _arr(3, 4), _arr(4, 5), np.array([0, 4, 2, 1, 3, 3])

    def step(x, w1, w2, y):
        def loss(w1, w2, xi, yi):
            h = jg.tanh(xi @ w1) @ w2
            return -jg.nn.functional.log_softmax(h, -1)[yi] + (h * h).mean()
        per_sample = jf.vmap(jf.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0, 0))(w1, w2, x, y)
        probs = jf.vmap(lambda r: (r @ w1).softmax(0).cumsum(0)[1:])(x)
        return per_sample[0], per_sample[1], probs
    args = [jg.tensor(x), jg.tensor(w1), jg.tensor(w2), jg.tensor(y)]
    eager = step(*args)
    for backend in ("interpret", None):
        cf = jg.compile(step, backend=backend) if backend else jg.compile(step)
        _close_jj(cf(*args), eager)
    # and torch agrees with the per-sample gradients

    def tloss(w1, w2, xi, yi):
        h = torch.tanh(xi @ w1) @ w2
        return -torch.log_softmax(h, -1).gather(0, yi[None])[0] + (h * h).mean()   # torch's vmap: no x[0-dim]
    tw = tf.vmap(tf.grad(tloss, argnums=(0, 1)), in_dims=(None, None, 0, 0))(
        torch.tensor(w1), torch.tensor(w2), torch.tensor(x), torch.tensor(y))
    _close(eager[:2], tw)


def _close_jj(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=1e-10, atol=1e-10)


INDEXERS = {
    "tensor_first": lambda x, i: x[i],
    "tensor_second": lambda x, i: x[:, i],
    "int_slice_tensor": lambda x, i: x[1, :, i],
    "ellipsis_tensor": lambda x, i: x[..., i],
    "slice_int": lambda x, i: x[1:, 0],
}


@pytest.mark.parametrize("name", sorted(INDEXERS))
@pytest.mark.parametrize("batched_index", [False, True])
def test_vmap_of_grad_through_indexing(name, batched_index):
    # the gradient of getitem is index_put: both batched, with the index tensor batched or shared
    x = _arr(3, 4, 4, 4)
    i = np.array([[3, 0, 1], [2, 2, 0], [1, 3, 3]]) if batched_index else np.array([3, 0, 1])
    fi = INDEXERS[name]
    in_dims = (0, 0 if batched_index else None)
    got = jf.vmap(jf.grad(lambda a, b: (fi(a, b) ** 2).sin().sum()), in_dims=in_dims)(jg.tensor(x), jg.tensor(i))
    want = jg.stack([jf.grad(lambda a: (fi(a, jg.tensor(i[k] if batched_index else i)) ** 2).sin().sum())(
        jg.tensor(x[k])) for k in range(3)])
    _close(got, want)
    if not batched_index:      # torch.func agrees (it cannot vmap over a batched index tensor in every case)
        wt = tf.vmap(tf.grad(lambda a, b: (fi(a, b) ** 2).sin().sum()), in_dims=in_dims)(torch.tensor(x),
                                                                                         torch.tensor(i))
        _close(got, wt)


def test_inplace_into_outside_tensor_is_refused():
    c = jg.zeros(4, dtype=jg.float64)

    def f(a):
        c.add_(a)
        return a * 2
    with pytest.raises(RuntimeError, match="in place into a tensor from outside"):
        jf.vmap(f)(jg.ones(3, 4, dtype=jg.float64))
    assert float(c.sum()) == 0.0

    def g(a):       # in-place on values made inside is fine
        b = a.clone()
        b.mul_(2)
        b[0] = 5.0
        return b.relu_()
    x = _arr(3, 4)
    _close(jf.vmap(g)(jg.tensor(x)), tf.vmap(lambda a: g.__code__ and _tg(a))(torch.tensor(x)))


def _tg(a):
    b = a.clone()
    b.mul_(2)
    b[0] = 5.0
    return b.relu_()


def test_primitive_without_rule_batches_through_its_decomposition():
    # traces hold decomposed ops, but a graph built by hand may hold a fused one: ``diagonal`` has a
    # decomposition and no rule, and is batched through it
    from jitgrad.ir.graph import Eqn, Graph, Var
    from jitgrad.ir.ops import OPS, Aval
    from jitgrad.ir import dtypes as dt
    op = OPS["diagonal"]
    params = {"offset": 1, "dim1": 0, "dim2": 1}
    assert "diagonal" not in batching.RULES and "diagonal" not in batching.FALLBACK
    x = Var(Aval((4, 4), dt.float64))
    (out_aval,) = op.shape_dtype([x.aval], params)
    y = Var(out_aval)
    g = Graph([x], [Eqn(op, [x], [y], params)], [("var", y)])
    a = _arr(3, 4, 4)
    (got, batched), = batching.run_graph(g, [(jg.tensor(a), True)], 3, "error")
    assert batched
    _close(got, torch.diagonal(torch.tensor(a), 1, 1, 2))
