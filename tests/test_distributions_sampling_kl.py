"""jitgrad.distributions: kl_divergence values and gradients against torch (float64), register_kl dispatch,
sample statistics on 20k seeded draws, reparameterised gradients (rsample) against analytic ones, the implicit
gamma gradient against torch's _standard_gamma_grad, and one compiled function using several distributions
(interpreter and Numba) equal to eager."""
import numpy as np
import pytest
import torch
import torch.distributions as T

import jitgrad as jg
import jitgrad.distributions as D
from jitgrad.distributions.gamma import _standard_gamma_grad

_A = [0.3, -1.0]
_B = [1.5, 0.7]
_P = [[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]
_Q = [[0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]
KL_CASES = [
    ("Normal", dict(loc=_A, scale=_B), dict(loc=[1.0, 0.0], scale=[0.5, 2.0])),
    ("Bernoulli", dict(probs=[0.3, 0.8]), dict(probs=[0.6, 0.1])),
    ("Bernoulli", dict(logits=[0.3, -2.0]), dict(logits=[1.0, 0.5])),
    ("Categorical", dict(probs=_P), dict(probs=_Q)),
    ("Categorical", dict(logits=_P), dict(logits=_Q)),
    ("OneHotCategorical", dict(probs=_P), dict(probs=_Q)),
    ("Beta", dict(concentration1=[0.7, 3.0], concentration0=[2.0, 0.5]), dict(concentration1=[1.0, 2.0],
                                                                           concentration0=[1.5, 4.0])),
    ("Gamma", dict(concentration=[0.7, 3.0], rate=[2.0, 0.5]), dict(concentration=[1.0, 2.0], rate=[1.5, 4.0])),
    ("Dirichlet", dict(concentration=[[0.5, 1.0, 2.0], [3.0, 1.0, 0.7]]), dict(concentration=_Q)),
    ("Exponential", dict(rate=[0.5, 2.0]), dict(rate=[1.5, 0.3])),
    ("Uniform", dict(low=[0.0, -1.0], high=[1.0, 3.0]), dict(low=[-1.0, -2.0], high=[2.0, 4.0])),
    ("Laplace", dict(loc=_A, scale=_B), dict(loc=[1.0, 0.0], scale=[0.5, 2.0])),
    ("Cauchy", dict(loc=_A, scale=_B), dict(loc=[1.0, 0.0], scale=[0.5, 2.0])),
    ("Gumbel", dict(loc=_A, scale=_B), dict(loc=[1.0, 0.0], scale=[0.5, 2.0])),
    ("HalfNormal", dict(scale=_B), dict(scale=[0.5, 2.0])),
    ("Poisson", dict(rate=[0.5, 4.0]), dict(rate=[1.5, 3.0])),
    ("Geometric", dict(probs=[0.3, 0.8]), dict(probs=[0.6, 0.1])),
    ("Binomial", dict(total_count=5, probs=[0.3, 0.8]), dict(total_count=5, probs=[0.6, 0.1])),
    ("LogNormal", dict(loc=_A, scale=_B), dict(loc=[1.0, 0.0], scale=[0.5, 2.0])),
]


def _build(name, params, grad=True):
    jp, tp, leaves = {}, {}, []
    for k, v in params.items():
        if not isinstance(v, list):
            jp[k] = tp[k] = v
            continue
        j = jg.tensor(np.array(v, np.float64), requires_grad=grad)
        t = torch.tensor(np.array(v, np.float64), requires_grad=grad)
        jp[k], tp[k] = j, t
        leaves.append((j, t))
    return getattr(D, name)(**jp), getattr(T, name)(**tp), leaves


def _close(j, t, tol=1e-10):
    np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name, p, q", KL_CASES, ids=[f"{c[0]}-{next(iter(c[1]))}" for c in KL_CASES])
def test_kl_values_and_gradients_match_torch(name, p, q):
    jp, tp, lp = _build(name, p)
    jq, tq, lq = _build(name, q)
    jk, tk = D.kl_divergence(jp, jq), T.kl_divergence(tp, tq)
    _close(jk, tk)
    jk.sum().backward()
    tk.sum().backward()
    for j, t in lp + lq:
        _close(j.grad, t.grad, 1e-9)


def test_kl_multivariate_normal_and_independent_match_torch():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, 3, 3)), rng.standard_normal((3, 3))
    arrays = [rng.standard_normal((2, 3)), A @ A.transpose(0, 2, 1) + np.eye(3), rng.standard_normal(3),
              B @ B.T + np.eye(3)]
    j = [jg.tensor(a, requires_grad=True) for a in arrays]
    t = [torch.tensor(a, requires_grad=True) for a in arrays]
    jk = D.kl_divergence(D.MultivariateNormal(j[0], j[1]), D.MultivariateNormal(j[2], precision_matrix=j[3]))
    tk = T.kl_divergence(T.MultivariateNormal(t[0], t[1]), T.MultivariateNormal(t[2], precision_matrix=t[3]))
    _close(jk, tk, 1e-9)
    ji = D.kl_divergence(D.Independent(D.Normal(j[0], j[1][..., 0].exp()), 1), D.Independent(D.Normal(j[2], 1.0), 1))
    ti = T.kl_divergence(T.Independent(T.Normal(t[0], t[1][..., 0].exp()), 1), T.Independent(T.Normal(t[2], 1.0), 1))
    _close(ji, ti)
    (jk.sum() + ji.sum()).backward()
    (tk.sum() + ti.sum()).backward()
    for a, b in zip(j, t):
        _close(a.grad, b.grad, 1e-8)
    with pytest.raises(ValueError, match="different event shapes"):
        D.kl_divergence(D.MultivariateNormal(j[0], j[1]), D.MultivariateNormal(jg.zeros(2, dtype=jg.float64),
                                                                              jg.eye(2, dtype=jg.float64)))


def test_register_kl_prefers_the_most_specific_pair():
    class MyNormal(D.Normal):
        pass

    n = D.Normal(jg.tensor(0.0), jg.tensor(1.0))
    m = MyNormal(jg.tensor(1.0), jg.tensor(2.0))
    assert float(D.kl_divergence(m, n)) == pytest.approx(float(D.kl_divergence(D.Normal(1.0, 2.0), n)))

    @D.register_kl(MyNormal, D.Normal)
    def _mine(p, q):
        return jg.tensor(42.0)
    assert float(D.kl_divergence(m, n)) == 42.0
    assert float(D.kl_divergence(n, m)) != 42.0      # (Normal, MyNormal) still resolves to (Normal, Normal)
    with pytest.raises(TypeError):
        D.register_kl(1, D.Normal)


N = 20000
# name, parameters, the distribution's moments come from torch (mean, variance)
STAT_CASES = [
    ("Normal", dict(loc=[0.5, -2.0], scale=[2.0, 0.3])), ("Uniform", dict(low=[0.0, -1.0], high=[2.0, 3.0])),
    ("Laplace", dict(loc=[0.5, -2.0], scale=[2.0, 0.3])), ("Exponential", dict(rate=[0.5, 3.0])),
    ("Gumbel", dict(loc=[0.5, -2.0], scale=[2.0, 0.3])), ("HalfNormal", dict(scale=[2.0, 0.3])),
    ("LogNormal", dict(loc=[0.5, -2.0], scale=[0.5, 0.3])),
    ("Gamma", dict(concentration=[0.3, 0.9, 5.0], rate=[2.0, 1.0, 0.5])), ("Chi2", dict(df=[1.0, 7.0])),
    ("Beta", dict(concentration1=[0.5, 3.0], concentration0=[2.0, 0.7])),
    ("Dirichlet", dict(concentration=[[0.5, 1.0, 2.0], [3.0, 1.0, 0.7]])),
    ("StudentT", dict(df=[5.0, 9.0], loc=[0.5, -2.0], scale=[2.0, 0.3])),
    ("Bernoulli", dict(probs=[0.3, 0.8])), ("OneHotCategorical", dict(probs=_P)),
    ("Binomial", dict(total_count=[4.0, 20.0], probs=[0.3, 0.8])), ("Multinomial", dict(total_count=6, probs=_P)),
    ("Poisson", dict(rate=[0.0, 0.5, 4.0, 9.9, 10.0, 30.0, 500.0])), ("Geometric", dict(probs=[0.3, 0.8])),
]


@pytest.mark.parametrize("name, params", STAT_CASES, ids=[c[0] for c in STAT_CASES])
def test_sample_statistics(name, params):
    jg.manual_seed(1234)
    jd, td, _ = _build(name, params, grad=False)
    s = jd.sample((N,)).numpy()
    mean, var = td.mean.numpy(), td.variance.numpy()
    # the sample mean is within 5 standard errors; the sample variance within 5 standard errors of a variance
    # (the fourth central moment is estimated from the draws)
    se_mean = np.sqrt(var / N)
    assert np.all(np.abs(s.mean(0) - mean) <= 5 * se_mean + 1e-12), (s.mean(0), mean)
    m4 = ((s - s.mean(0)) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - var ** 2, 0) / N)
    assert np.all(np.abs(s.var(0) - var) <= 5 * se_var + 1e-12), (s.var(0), var)
    jg.manual_seed(1234)
    assert np.array_equal(jd.sample((N,)).numpy(), s)            # seeded: the same draws again
    if td.support.is_discrete:
        assert np.all(np.round(s) == s)
    assert np.all(td.support.check(torch.tensor(s)).numpy())


def test_categorical_and_mixture_frequencies():
    jg.manual_seed(7)
    probs = np.array(_P)
    s = D.Categorical(jg.tensor(probs)).sample((N,)).numpy()
    assert s.dtype == np.int64 and s.shape == (N, 2)
    for b in range(2):
        freq = np.bincount(s[:, b], minlength=3) / N
        assert np.all(np.abs(freq - probs[b]) <= 5 * np.sqrt(probs[b] * (1 - probs[b]) / N))
    m = D.MixtureSameFamily(D.Categorical(jg.tensor([0.3, 0.7], dtype=jg.float64)),
                            D.Normal(jg.tensor([-3.0, 3.0], dtype=jg.float64), jg.tensor([1.0, 1.0], dtype=jg.float64)))
    x = m.sample((N,)).numpy()
    assert abs(x.mean() - float(m.mean)) < 5 * np.sqrt(float(m.variance) / N)
    assert abs((x > 0).mean() - 0.7) < 5 * np.sqrt(0.21 / N)


def test_gamma_implicit_gradient_matches_torch():
    alpha = np.array([0.05, 0.3, 0.9, 1.0, 2.5, 7.9, 8.5, 30.0, 200.0])[:, None].repeat(6, 1)
    q = np.array([0.01, 0.2, 0.5, 0.95, 1.0, 1.05])
    x = alpha * q * 2
    x[:, 0] = 0.3
    a64, x64 = alpha.ravel(), x.ravel()
    mine = _standard_gamma_grad(jg.tensor(a64), jg.tensor(x64)).numpy()
    ref = torch._standard_gamma_grad(torch.tensor(a64), torch.tensor(x64)).numpy()
    np.testing.assert_allclose(mine, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name, params, f, analytic", [
    # d/dtheta E[f(X)], estimated with rsample, against the closed form
    ("Normal", dict(loc=[0.5], scale=[2.0]), lambda x: x ** 2, lambda loc, scale: [2 * loc, 2 * scale]),
    ("Laplace", dict(loc=[0.5], scale=[2.0]), lambda x: x ** 2, lambda loc, scale: [2 * loc, 4 * scale]),
    ("Exponential", dict(rate=[2.0]), lambda x: x ** 2, lambda rate: [-4 / rate ** 3]),
    ("Gamma", dict(concentration=[0.6], rate=[2.0]), lambda x: x,
     lambda c, r: [1 / r, -c / r ** 2]),
    ("Gamma", dict(concentration=[3.0], rate=[0.5]), lambda x: x ** 2,
     lambda c, r: [(2 * c + 1) / r ** 2, -2 * c * (c + 1) / r ** 3]),
    ("Beta", dict(concentration1=[2.0], concentration0=[3.0]), lambda x: x,
     lambda a, b: [b / (a + b) ** 2, -a / (a + b) ** 2]),
    ("LogNormal", dict(loc=[0.2], scale=[0.5]), lambda x: x,
     lambda m, s: [np.exp(m + s * s / 2), s * np.exp(m + s * s / 2)]),
    ("Uniform", dict(low=[0.0], high=[2.0]), lambda x: x ** 2, lambda lo, hi: [(2 * lo + hi) / 3, (lo + 2 * hi) / 3]),
])
def test_rsample_gradients_match_analytic(name, params, f, analytic):
    jg.manual_seed(5)
    d, _, leaves = _build(name, params)
    f(d.rsample((N,))).mean().backward()
    expected = analytic(*[float(p[0]) for p in params.values()])
    for (j, _), e in zip(leaves, expected):
        g = float(j.grad[0])
        assert abs(g - e) <= 0.05 * abs(e) + 1e-3, (g, e)


def test_rsample_dirichlet_gradient_matches_analytic():
    jg.manual_seed(6)
    c = jg.tensor([1.0, 2.0, 3.0], dtype=jg.float64, requires_grad=True)
    x = D.Dirichlet(c).rsample((N,))
    x[:, 0].mean().backward()                 # d/dc E[x0] = d/dc c0 / sum(c)
    expected = np.array([5.0, -1.0, -1.0]) / 36
    np.testing.assert_allclose(c.grad.numpy(), expected, atol=0.01)


def _program(loc, scale, conc, logits, value):
    n, q = D.Normal(loc, scale), D.Normal(jg.zeros_like(loc), scale * 2 + 0.5)
    g = D.Gamma(conc, jg.ones_like(conc))
    c = D.Categorical(logits=logits)
    mvn = D.MultivariateNormal(loc, scale_tril=jg.diag_embed(scale) + 0.1 * jg.ones(2, 2).tril(-1))
    z = n.rsample((3,))
    y = g.rsample((2,))
    e = D.Exponential(scale).rsample()
    loss = (n.log_prob(value).sum() + D.kl_divergence(n, q).sum() + (z ** 2).mean() + y.mean()
            + c.entropy().sum() + c.log_prob(jg.tensor([0, 2])).sum() + mvn.log_prob(value).sum()
            + mvn.entropy() + D.kl_divergence(g, D.Gamma(conc + 1, conc)).sum() + e.sum()
            + D.Beta(conc, conc + 1).log_prob(value.sigmoid()).sum() + n.cdf(value).sum())
    loss.backward()
    return loss, z, y, loc.grad, scale.grad, conc.grad, logits.grad


def _inputs():
    mk = lambda v: jg.tensor(v, dtype=jg.float64, requires_grad=True)      # noqa: E731
    return (mk([0.1, 0.5]), mk([1.0, 2.0]), mk([0.5, 3.0]), mk([[0.1, 0.2, 0.3], [1.0, 0.0, -1.0]]),
            jg.tensor([0.3, -0.2], dtype=jg.float64))


@pytest.mark.parametrize("backend", ["interpret", None])
def test_compiled_program_equals_eager(backend):
    jg.manual_seed(3)
    eager = _program(*_inputs())
    cf = jg.compile(_program, backend=backend)
    for _ in range(2):                        # the second call reuses the compiled function
        jg.manual_seed(3)
        got = cf(*_inputs())
        for a, b in zip(eager, got):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    a, b = cf(*_inputs())[1], cf(*_inputs())[1]
    assert not np.array_equal(a.detach().numpy(), b.detach().numpy())      # new draws at every call


def test_multivariate_normal_sample_covariance():
    jg.manual_seed(11)
    loc = jg.tensor([1.0, -2.0, 0.5], dtype=jg.float64)
    W = jg.tensor([[1.0, 0.2], [0.5, -1.0], [0.0, 0.3]], dtype=jg.float64)
    diag = jg.tensor([0.5, 1.0, 0.2], dtype=jg.float64)
    for d in (D.MultivariateNormal(loc, W @ W.T + jg.diag_embed(diag)), D.LowRankMultivariateNormal(loc, W, diag)):
        s = d.sample((N,)).numpy()
        cov = d.covariance_matrix.numpy()
        assert np.all(np.abs(s.mean(0) - loc.numpy()) <= 5 * np.sqrt(np.diag(cov) / N))
        se = np.sqrt((cov ** 2 + np.outer(np.diag(cov), np.diag(cov))) / N)     # of a Gaussian sample covariance
        assert np.all(np.abs(np.cov(s.T) - cov) <= 5 * se)


def _samplers(p, r):
    return (D.Categorical(probs=p).sample((4,)), D.Poisson(r * 8).sample((3,)), D.Binomial(5, p).sample(),
            D.Dirichlet(r).sample(), D.OneHotCategorical(p).sample((2,)), D.Multinomial(4, p).sample(),
            D.Binomial(5, p).entropy(), D.Bernoulli(p).sample(), D.Geometric(p).sample(), D.StudentT(r).rsample(),
            D.Beta(r, r + 1).sample(), D.Laplace(r, r).sample(), D.Gumbel(r, r).sample(), D.Cauchy(r, r).sample(),
            D.RelaxedOneHotCategorical(jg.tensor(0.5), probs=p).rsample(), D.Uniform(r, r + 1).sample())


@pytest.mark.parametrize("backend", ["interpret", None])
def test_compiled_samplers_draw_what_eager_draws(backend):
    args = (jg.tensor([0.2, 0.3, 0.5]), jg.tensor([1.0, 2.5, 0.3]))
    f = jg.compile(_samplers, backend=backend)
    jg.manual_seed(0)
    eager = _samplers(*args)
    jg.manual_seed(0)
    compiled = f(*args)
    for a, b in zip(eager, compiled):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
