"""jitgrad.func's differentiation transforms against torch.func (float64): grad, grad_and_value, vjp, jvp,
linearize, jacrev, jacfwd, hessian, functional_call, per-sample gradients; compositions and torch's errors."""
import numpy as np
import pytest
import torch
import torch.func as tf

import jitgrad as jg
import jitgrad.func as jf

RNG = np.random.default_rng(1)


def _arr(*shape):
    return RNG.standard_normal(shape)


def _close(a, b, tol=1e-9):
    if isinstance(b, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, tol)
        return
    if isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _close(a[k], b[k], tol)
        return
    assert tuple(a.shape) == tuple(b.shape), (a.shape, b.shape)
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _f(lib):
    return lambda x, y: (lib.sin(x) * y.exp()).sum() + (x @ y.t()).tanh().sum()


def test_grad_argnums_aux_and_value():
    x, y = _arr(2, 3), _arr(2, 3)
    xj, yj, xt, yt = jg.tensor(x), jg.tensor(y), torch.tensor(x), torch.tensor(y)
    for argnums in (0, 1, (0, 1), -1):
        _close(jf.grad(_f(jg), argnums)(xj, yj), tf.grad(_f(torch), argnums)(xt, yt))
    _close(jf.grad_and_value(_f(jg), (1, 0))(xj, yj), tf.grad_and_value(_f(torch), (1, 0))(xt, yt))
    gj, aux_j = jf.grad(lambda x: ((x ** 3).sum(), x * 2), has_aux=True)(xj)
    gt, aux_t = tf.grad(lambda x: ((x ** 3).sum(), x * 2), has_aux=True)(xt)
    _close((gj, aux_j), (gt, aux_t))
    assert not gj.requires_grad and not aux_j.requires_grad
    # a pytree argument
    pj = {"w": jg.tensor(x), "b": jg.tensor(y[0])}
    pt = {"w": torch.tensor(x), "b": torch.tensor(y[0])}
    _close(jf.grad(lambda p: (p["w"] @ p["b"]).exp().sum())(pj), tf.grad(lambda p: (p["w"] @ p["b"]).exp().sum())(pt))


def test_nested_grad_and_perturbation_confusion():
    x = np.array(1.3)
    gj = jf.grad(jf.grad(lambda x: x.sin() * x ** 3))(jg.tensor(x))
    gt = tf.grad(tf.grad(lambda x: x.sin() * x ** 3))(torch.tensor(x))
    _close(gj, gt)
    # the inner grad differentiates with respect to its own argument only (x * d/dy[x * y] = x * x)
    fj = jf.grad(lambda x: x * jf.grad(lambda y: x * y)(x))
    ft = tf.grad(lambda x: x * tf.grad(lambda y: x * y)(x))
    _close(fj(jg.tensor(x)), ft(torch.tensor(x)))


def test_grad_connects_to_closure_parameters():
    x, w = _arr(3), _arr(3)
    wj, wt = jg.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    gj = jf.grad(lambda x: (x * wj).sin().sum())(jg.tensor(x))
    gt = tf.grad(lambda x: (x * wt).sin().sum())(torch.tensor(x))
    (gj ** 2).sum().backward()
    (gt ** 2).sum().backward()
    _close(wj.grad, wt.grad)


def test_vjp_jvp_linearize():
    x, y, u = _arr(3, 2), _arr(2), _arr(3)

    def f(lib):
        return lambda x, y: ((x @ y).exp(), (x * y).sum(0))
    xj, yj, xt, yt = jg.tensor(x), jg.tensor(y), torch.tensor(x), torch.tensor(y)
    oj, vj = jf.vjp(f(jg), xj, yj)
    ot, vt = tf.vjp(f(torch), xt, yt)
    _close(oj, ot)
    _close(vj((jg.tensor(u), jg.ones(2, dtype=jg.float64))), vt((torch.tensor(u), torch.ones(2, dtype=torch.float64))))
    _close(vj((jg.tensor(u), jg.ones(2, dtype=jg.float64))), vt((torch.tensor(u), torch.ones(2, dtype=torch.float64))))
    tx, ty = _arr(3, 2), _arr(2)
    _close(jf.jvp(f(jg), (xj, yj), (jg.tensor(tx), jg.tensor(ty))),
           tf.jvp(f(torch), (xt, yt), (torch.tensor(tx), torch.tensor(ty))))
    oj, lj = jf.linearize(f(jg), xj, yj)
    ot, lt = tf.linearize(f(torch), xt, yt)
    _close((oj, lj(jg.tensor(tx), jg.tensor(ty))), (ot, lt(torch.tensor(tx), torch.tensor(ty))))
    # has_aux
    r = jf.vjp(lambda x: (x.exp(), x.sum()), xj, has_aux=True)
    _close(r[0], xt.exp())
    _close(r[2], xt.sum())


def test_jvp_is_differentiable():
    x, t = _arr(3), _arr(3)

    def f(x, t):
        return jf.jvp(lambda a: (a.sin() * a).cumsum(0), (x,), (t,))[1]
    assert jg.autograd.gradcheck(f, (jg.tensor(x, requires_grad=True), jg.tensor(t, requires_grad=True)))


@pytest.mark.parametrize("which", ["jacrev", "jacfwd"])
def test_jacobians(which):
    x, y = _arr(3), _arr(2, 3)

    def f(lib):
        return lambda x, y: ((y @ x).sin(), (x * y).exp().sum(0), (x ** 2).sum())
    J, T = getattr(jf, which), getattr(tf, which)
    for argnums in (0, 1, (0, 1)):
        _close(J(f(jg), argnums)(jg.tensor(x), jg.tensor(y)), T(f(torch), argnums)(torch.tensor(x), torch.tensor(y)))


def test_hessian():
    x, y = _arr(4), _arr(2, 2)
    g = lambda lib: lambda x: (x.sin() * x.exp()).sum() + (x[:2] * x[2:]).prod()   # noqa: E731
    _close(jf.hessian(g(jg))(jg.tensor(x)), tf.hessian(g(torch))(torch.tensor(x)))
    h = lambda lib: lambda a, b: (a.outer(a) * b.exp()).sum()   # noqa: E731
    _close(jf.hessian(h(jg), (0, 1))(jg.tensor(x[:2]), jg.tensor(y)),
           tf.hessian(h(torch), (0, 1))(torch.tensor(x[:2]), torch.tensor(y)))


def _mlps():
    mj = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.Tanh(), jg.nn.Linear(4, 2)).double()
    mt = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    with torch.no_grad():
        for (_, pj), (_, pt) in zip(mj.named_parameters(), mt.named_parameters()):
            pt.copy_(torch.tensor(pj.detach().numpy()))
    return mj, mt


def test_functional_call_and_per_sample_gradients():
    mj, mt = _mlps()
    x, y = _arr(5, 3), np.array([0, 1, 1, 0, 1])
    pj = {k: v.detach() for k, v in mj.named_parameters()}
    pt = {k: v.detach() for k, v in mt.named_parameters()}
    _close(jf.functional_call(mj, pj, (jg.tensor(x),)), tf.functional_call(mt, pt, (torch.tensor(x),)))
    _close(jf.functional_call(mj, ({"0.weight": pj["0.weight"]}, {k: v for k, v in pj.items() if k != "0.weight"}),
                              jg.tensor(x)), mt(torch.tensor(x)))

    def loss(lib, F, m):
        def f(p, xi, yi):
            out = F.functional_call(m, p, (xi[None],))
            return lib.nn.functional.cross_entropy(out, yi[None])
        return f
    got = jf.vmap(jf.grad(loss(jg, jf, mj)), in_dims=(None, 0, 0))(pj, jg.tensor(x), jg.tensor(y))
    want = tf.vmap(tf.grad(loss(torch, tf, mt)), in_dims=(None, 0, 0))(pt, torch.tensor(x), torch.tensor(y))
    _close(got, want)
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        jf.functional_call(mj, (pj, pj), (jg.tensor(x),))


def _err(fj, ft, cls):
    with pytest.raises(cls) as ej:
        fj()
    with pytest.raises(cls) as et:
        ft()
    assert str(ej.value) == str(et.value)


def test_errors_match_torch():
    xj, xt = jg.ones(2, dtype=jg.float64), torch.ones(2, dtype=torch.float64)
    _err(lambda: jf.grad(lambda x: x)(xj), lambda: tf.grad(lambda x: x)(xt), RuntimeError)
    _err(lambda: jf.grad(lambda x: 1.0)(xj), lambda: tf.grad(lambda x: 1.0)(xt), RuntimeError)
    _err(lambda: jf.grad(lambda x: x.sum(), argnums=1)(xj), lambda: tf.grad(lambda x: x.sum(), argnums=1)(xt),
         RuntimeError)
    _err(lambda: jf.grad(lambda x: x.sum(), argnums="a")(xj), lambda: tf.grad(lambda x: x.sum(), argnums="a")(xt),
         RuntimeError)
    _err(lambda: jf.grad(lambda x: x.sum(), has_aux=True)(xj), lambda: tf.grad(lambda x: x.sum(), has_aux=True)(xt),
         RuntimeError)
    _err(lambda: jf.jvp(lambda x: x, xj, xj), lambda: tf.jvp(lambda x: x, xt, xt), RuntimeError)
    _err(lambda: jf.jvp(lambda x: x, (xj,), (jg.ones(3),)), lambda: tf.jvp(lambda x: x, (xt,), (torch.ones(3),)),
         RuntimeError)
    with pytest.raises(RuntimeError, match="floating point"):
        jf.grad(lambda x: x.sum())(jg.ones(2, dtype=jg.int64))


@pytest.mark.parametrize("name", jf.__all__)
def test_signatures_match_torch(name):
    import inspect
    sj = inspect.signature(getattr(jf, name)).parameters
    st = inspect.signature(getattr(tf, name)).parameters
    assert list(sj) == list(st)
    for k in st:
        assert (sj[k].kind, sj[k].default) == (st[k].kind, st[k].default), k


def test_jacobians_of_constants_do_not_require_grad():
    """As torch.func: a Jacobian (or a nested one) of inputs that do not require grad does not require grad (the
    inner vjp's backward, traced under no_grad by vmap, is replayed under no_grad); of inputs that do, it does
    and differentiates to the right values."""
    f = lambda x: (x ** 3).sum()
    x = jg.tensor([0.5, -1.0, 2.0])
    assert not jf.jacrev(f)(x).requires_grad
    h = jf.jacrev(jf.jacrev(f))(x)
    assert not h.requires_grad
    np.testing.assert_allclose(h.numpy(), np.diag(6 * x.numpy()), rtol=1e-6)
    xr = jg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    hr = jf.jacrev(jf.jacrev(f))(xr)
    assert hr.requires_grad
    hr.sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), [6.0, 6.0, 6.0])
    w = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert jf.vmap(lambda c: c * w)(jg.ones(2, 3)).requires_grad    # a captured tensor that requires grad
