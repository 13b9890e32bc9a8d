"""addmv/addr/addbmm/baddbmm (and their in-place forms), chain_matmul, dist, renorm
(library/linalg/matrix_forms.py); cov, corrcoef, trapezoid/trapz/cumulative_trapezoid, vander, combinations
(library/reductions/statistics.py); the in-place samplers exponential_/geometric_/log_normal_/cauchy_ (library/creation/sampling.py): values, dtypes, shapes and gradients against
torch, gradcheck/gradgradcheck in float64, torch's errors, eager == compiled on one batched program, and the
samplers' distributions and seed reproducibility (eager and compiled)."""
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
A, B, C, D, E = (RNG.standard_normal(s) for s in ((3, 5), (5,), (2, 3, 4), (2, 4, 5), (3,)))
FW, AW = np.array([1, 2, 0, 3, 1]), RNG.uniform(0.1, 1, 5)


def _both(fn, names=True):
    res = []
    for lib in (torch, jg):
        ts = [lib.tensor(v, requires_grad=True) for v in (A, B, C, D, E)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # chain_matmul's deprecation
            out = fn(lib, *ts)
        sum((o * (k + 1)).sum() for k, o in enumerate(out) if o.numel()).backward()
        res.append(([o.detach().numpy() for o in out], [None if t.grad is None else t.grad.numpy() for t in ts],
                    [type(o.grad_fn).__name__ if lib is torch else o.grad_fn.name() for o in out]))
    (tv, tg, tn), (jv, jgr, jn) = res
    for a, b in zip(tv, jv):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    for a, b in zip(tg, jgr):
        if a is None:
            assert b is None or not b.any()
        else:
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    if names:
        assert jn == tn


CASES = {
    "addmv": (lambda m, a, b, c, d, e: [m.addmv(e, a, b), e.addmv(a, b, beta=0.5, alpha=2), m.addmv(e, a, b, beta=0),
                                        m.addmv(e[:1], a, b)], True),
    "addr": (lambda m, a, b, c, d, e: [m.addr(a, e, b), a.addr(e, b, beta=2, alpha=-1), m.addr(b, e, b)], True),
    "addbmm": (lambda m, a, b, c, d, e: [m.addbmm(a, c, d), a[:, :1].addbmm(c, d, beta=0.3, alpha=0.7)], True),
    "baddbmm": (lambda m, a, b, c, d, e: [m.baddbmm(a, c, d), a.baddbmm(c, d, beta=0.3, alpha=0.7),
                                          m.baddbmm(b, c, d, beta=0)], True),
    "chain_matmul": (lambda m, a, b, c, d, e: [m.chain_matmul(a, a.t(), c[0]), m.chain_matmul(a)], False),
    "dist": (lambda m, a, b, c, d, e: [m.dist(a, b), a.dist(b, 1), m.dist(a, a * 1, 2), m.dist(a, b, float("inf")),
                                       m.dist(a, b, 0.5)], True),
    "renorm": (lambda m, a, b, c, d, e: [m.renorm(a, 2, 0, 1.5), c.renorm(1, -1, 2.), a.renorm(3, 1, 100.)], True),
    "cov": (lambda m, a, b, c, d, e: [m.cov(a), a.cov(correction=0), m.cov(b), m.cov(a, fweights=m.tensor(FW)),
                                      m.cov(a, aweights=m.tensor(AW)), a[:1].cov(),
                                      m.cov(a, fweights=m.tensor(FW), aweights=m.tensor(AW), correction=2)], True),
    "corrcoef": (lambda m, a, b, c, d, e: [m.corrcoef(a), a[:1].corrcoef(), m.corrcoef(b)], True),
    "trapezoid": (lambda m, a, b, c, d, e: [m.trapezoid(a), m.trapezoid(a, dx=0.5, dim=0),
                                            m.trapezoid(a, b.cumsum(0)), m.trapz(c, e.cumsum(0), dim=1),
                                            m.trapz(a, dx=2.), m.trapezoid(c, d[:, :3, :4].cumsum(1), dim=1),
                                            m.trapezoid(a[:, :0])], False),
    "cumulative_trapezoid": (lambda m, a, b, c, d, e: [m.cumulative_trapezoid(a),
                                                       m.cumulative_trapezoid(a, dx=0.5, dim=0),
                                                       m.cumulative_trapezoid(a, b.cumsum(0))], False),
    "combinations": (lambda m, a, b, c, d, e: [m.combinations(b), m.combinations(e, 3, True),
                                               m.combinations(e, 4)], True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_equal_torch(name):
    fn, names = CASES[name]
    _both(fn, names)


def test_inplace_forms_equal_torch():
    def run(m, a, b, c, d, e):
        y = a * 1
        y.addr_(e, b, beta=0.5).renorm_(2, 0, 1.)
        z = (e * 1).addmv_(a, b, alpha=3)
        w = (a * 1).addbmm_(c, d)
        v = (c @ d).baddbmm_(c, d, beta=2)
        return [y, z, w, v, m.addmv_(e * 1, a, b)]
    _both(run, names=False)


def test_vander_values_dtypes_and_gradients():
    # torch's own vander backward fails (an in-place cumprod it saved): values against torch, gradients by gradcheck
    for x in (E, np.array([0., 2., -1.]), np.array([1, 2, 3]), np.array([True, False])):
        for kw in ({}, {"N": 4}, {"N": 1, "increasing": True}, {"N": 0}, {"increasing": True}):
            t, j = torch.vander(torch.tensor(x), **kw), jg.vander(jg.tensor(x), **kw)
            assert t.numpy().dtype == j.numpy().dtype and t.shape == j.shape
            np.testing.assert_allclose(j.numpy(), t.numpy(), rtol=1e-12)
    for x in (E, np.array([0., 2., -1.])):
        xt = jg.tensor(x, requires_grad=True)
        assert gradcheck(lambda v: jg.vander(v, 4), (xt,)) and gradgradcheck(lambda v: jg.vander(v, 4), (xt,))


GRADS = [
    lambda a, b, c, d, e: jg.addmv(e, a, b, beta=0.5, alpha=2) * e,
    lambda a, b, c, d, e: jg.addr(a, e, b, beta=2) ** 2,
    lambda a, b, c, d, e: jg.addbmm(a, c, d, alpha=0.5) * a,
    lambda a, b, c, d, e: jg.baddbmm(a, c, d) ** 2,
    lambda a, b, c, d, e: jg.dist(a, b, 3) + jg.dist(a, b),
    lambda a, b, c, d, e: jg.renorm(a, 2, 0, 1.5) + jg.renorm(c, 1.5, 1, 2.).sum(),
    lambda a, b, c, d, e: jg.cov(a, aweights=jg.tensor(AW)) + jg.corrcoef(a),
    lambda a, b, c, d, e: jg.trapezoid(a, b.cumsum(0)) + jg.cumulative_trapezoid(a, dx=0.3).sum(),
    lambda a, b, c, d, e: jg.combinations(b, 2).prod(1),
]


@pytest.mark.parametrize("k", range(len(GRADS)))
def test_gradcheck_and_gradgradcheck(k):
    ts = tuple(jg.tensor(v, requires_grad=True) for v in (A, B, C, D, E))
    assert gradcheck(GRADS[k], ts) and gradgradcheck(GRADS[k], ts)


ERRORS = [
    (lambda m: m.addmv(m.ones(2, 2), m.ones(2, 3), m.ones(3)), RuntimeError,
     "vector + matrix @ vector expected, got 2, 2, 1"),
    (lambda m: m.baddbmm(m.ones(3, 2, 2), m.ones(2, 2, 3), m.ones(2, 3, 2)), RuntimeError,
     "The expanded size of the tensor (2) must match the existing size (3) at non-singleton dimension 0.  Target "
     "sizes: [2, 2, 2].  Tensor sizes: [3, 2, 2]"),
    (lambda m: m.addr(m.ones(3), m.ones(2), m.ones(2)), RuntimeError,
     "The expanded size of the tensor (2) must match the existing size (3) at non-singleton dimension 1.  Target "
     "sizes: [2, 2].  Tensor sizes: [3]"),
    (lambda m: m.vander(m.ones(2, 2)), RuntimeError, "x must be a one-dimensional tensor."),
    (lambda m: m.vander(m.ones(2), -1), RuntimeError, "N must be non-negative."),
    (lambda m: m.cov(m.ones(2, 2, 2)), RuntimeError, "cov(): expected input to have two or fewer dimensions"),
    (lambda m: m.cov(m.ones(3, 4), fweights=m.ones(4)), RuntimeError,
     "cov(): expected fweights to have integral dtype but got fweights with Float dtype"),
    (lambda m: m.cov(m.ones(3, 4), aweights=-m.ones(4)), RuntimeError, "cov(): aweights cannot be negative"),
    (lambda m: m.trapezoid(m.ones(3, 4), m.arange(3.)), RuntimeError,
     "trapezoid: There must be one `x` value for each sample point"),
    (lambda m: m.cumulative_trapezoid(m.ones(3, 4), m.ones(2)), RuntimeError,
     "cumulative_trapezoid: There must be one `x` value for each sample point"),
    (lambda m: m.renorm(m.ones(3), 2, 0, 1), RuntimeError, "renorm: input needs at least 2 dimensions, got 1"),
    (lambda m: m.renorm(m.ones(3, 3), 0, 0, 1), RuntimeError, "renorm: non-positive-norm not supported"),
    (lambda m: m.renorm(m.ones(3, 3), 1, 0, -1), RuntimeError, "renorm: expected maxnorm to be >= 0 but got -1"),
    (lambda m: m.zeros(3).exponential_(-1), RuntimeError, "exponential_ expects lambda > 0.0, but found lambda=-1"),
    (lambda m: m.zeros(3, dtype=m.int64).exponential_(), RuntimeError,
     "Exponential distribution is a continuous probability distribution. dtype must be a floating point but you "
     "specified Long"),
    (lambda m: m.zeros(3).geometric_(1), RuntimeError, "geometric_ expects p to be in (0, 1), but got p=1"),
    (lambda m: m.zeros(3).log_normal_(1, 0), RuntimeError, "log_normal_ expects std > 0.0, but found std=0"),
    (lambda m: m.zeros(3, dtype=m.int64).log_normal_(), NotImplementedError,
     "\"log_normal_cpu\" not implemented for 'Long'"),
    (lambda m: m.zeros(3).cauchy_(0, -1), RuntimeError, "cauchy_ expects sigma > 0.0, but found sigma=-1"),
    (lambda m: m.zeros(3, dtype=m.int64).cauchy_(), RuntimeError, "you specified long int"),
    (lambda m: m.zeros(3, requires_grad=True).exponential_(), RuntimeError,
     "a leaf Variable that requires grad is being used in an in-place operation."),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_as_torch(k):
    import re
    fn, exc, msg = ERRORS[k]
    for lib in (torch, jg):
        with pytest.raises(exc, match=re.escape(msg)):
            fn(lib)


def test_samplers_distributions_and_seeds():
    jg.manual_seed(3)
    a = jg.empty(20000, dtype=jg.float64).exponential_(2.)
    b = jg.empty(20000).geometric_(0.25)
    c = jg.empty(20000, dtype=jg.float64).log_normal_(0.5, 0.3)
    d = jg.empty(20000).cauchy_(1., 2.)
    assert a.dtype == jg.float64 and b.dtype == jg.float32 and d.dtype == jg.float32
    assert abs(a.mean().item() - 0.5) < 0.02 and a.min().item() >= 0
    assert abs(b.mean().item() - 4.0) < 0.1 and b.min().item() == 1 and (b.numpy() == np.round(b.numpy())).all()
    lc = np.log(c.numpy())
    assert abs(lc.mean() - 0.5) < 0.01 and abs(lc.std() - 0.3) < 0.01
    q = np.quantile(d.numpy(), [0.25, 0.5, 0.75])          # Cauchy(1, 2): quartiles at 1 -+ 2
    np.testing.assert_allclose(q, [-1., 1., 3.], atol=0.15)
    e = jg.zeros(50, dtype=jg.int64).geometric_(0.5)
    assert e.dtype == jg.int64 and e.min().item() >= 1
    jg.manual_seed(3)
    np.testing.assert_array_equal(jg.empty(20000, dtype=jg.float64).exponential_(2.).numpy(), a.numpy())
    g = jg.Generator().manual_seed(5)
    x1 = jg.empty(4).cauchy_(generator=g)
    g.manual_seed(5)
    np.testing.assert_array_equal(jg.empty(4).cauchy_(generator=g).numpy(), x1.numpy())


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_samplers_compiled_equal_eager_for_one_seed(backend):
    def draw(x):
        return (x.clone().exponential_(3.), x.clone().geometric_(0.3), x.clone().log_normal_(), x.clone().cauchy_())
    f = jg.compile(draw, backend=backend)
    jg.manual_seed(7)
    eager = draw(jg.zeros(64))
    for _ in range(2):
        jg.manual_seed(7)
        for e, c in zip(eager, f(jg.zeros(64))):
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-5)


def _program(a, b, c, d, e):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = [jg.addmv(e, a, b, beta=0.5), jg.addr(a, e, b, alpha=2), jg.addbmm(a, c, d), jg.baddbmm(a, c, d),
                jg.chain_matmul(a, a.t(), c[0]), jg.dist(a, b), jg.renorm(a, 2, 0, 1.5), jg.cov(a),
                jg.cov(a, aweights=jg.tensor(AW)), jg.corrcoef(a), jg.trapezoid(a, b.cumsum(0)), jg.trapz(a, dx=0.5),
                jg.cumulative_trapezoid(a), jg.vander(e, 4), jg.combinations(b, 2)]
    y = a * 1
    y.addr_(e, b).renorm_(1, 1, 2.)
    outs.append(y)
    sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
    return outs + [a.grad, b.grad, c.grad, d.grad, e.grad]


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_eager_equals_compiled(backend):
    def run(fn):
        return [o.detach().numpy() for o in fn(*(jg.tensor(v, requires_grad=True) for v in (A, B, C, D, E)))]
    eager = run(_program)
    f = jg.compile(_program, backend=backend)
    for _ in range(2):
        for e, c in zip(eager, run(f)):
            assert e.dtype == c.dtype and e.shape == c.shape
            np.testing.assert_allclose(c, e, rtol=1e-10, atol=1e-12)
