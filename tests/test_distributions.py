"""jitgrad.distributions against torch.distributions on shared float64 inputs: log_prob, entropy, mean, mode,
variance, stddev, cdf/icdf, enumerate_support, batch/event shapes, expand, sample shapes and dtypes, gradients of
all of them w.r.t. the parameters (and gradcheck), argument validation (torch's ValueError texts),
constraints and transforms."""
import math

import numpy as np
import pytest
import torch
import torch.distributions as T

import jitgrad as jg
import jitgrad.distributions as D
from jitgrad.distributions import constraints as C

_S = [[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]]
# name, parameters (keyword -> list, or a bare number kept as a number), values to score, inputs of icdf
CASES = [
    ("Normal", dict(loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, 2.0], [0.2, 0.9]),
    ("Uniform", dict(low=[0.0, -1.0], high=[2.0, 3.0]), [0.5, 1.0], [0.2, 0.9]),
    ("Laplace", dict(loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, -2.0], [0.2, 0.9]),
    ("Cauchy", dict(loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, 2.0], [0.2, 0.9]),
    ("Exponential", dict(rate=[0.5, 2.0]), [0.1, 2.0], [0.2, 0.9]),
    ("Gumbel", dict(loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, 2.0], [0.2, 0.9]),
    ("HalfNormal", dict(scale=[1.5, 0.7]), [0.1, 2.0], [0.2, 0.9]),
    ("LogNormal", dict(loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, 2.0], [0.2, 0.9]),
    ("Gamma", dict(concentration=[0.7, 3.0], rate=[2.0, 0.5]), [0.4, 3.0], None),
    ("Chi2", dict(df=[1.5, 4.0]), [0.4, 3.0], None),
    ("Beta", dict(concentration1=[0.7, 3.0], concentration0=[2.0, 0.5]), [0.3, 0.8], None),
    ("Dirichlet", dict(concentration=[[0.5, 1.0, 2.0], [3.0, 1.0, 0.7]]), _S, None),
    ("StudentT", dict(df=[3.0, 5.0], loc=[0.3, -1.0], scale=[1.5, 0.7]), [0.1, 2.0], None),
    ("Bernoulli", dict(probs=[0.3, 0.8]), [0.0, 1.0], None),
    ("Bernoulli", dict(logits=[-0.4, 1.3]), [1.0, 0.0], None),
    ("Categorical", dict(probs=_S), [2, 0], None),
    ("Categorical", dict(logits=[[0.1, -1.0, 2.0], [0.0, 0.5, -0.5]]), [1, 2], None),
    ("OneHotCategorical", dict(probs=_S), [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], None),
    ("Binomial", dict(total_count=5, probs=[0.3, 0.8]), [2.0, 5.0], None),
    ("Binomial", dict(total_count=[4.0, 6.0], logits=[-0.4, 1.3]), [0.0, 3.0], None),
    ("Multinomial", dict(total_count=6, probs=_S), [[1.0, 2.0, 3.0], [6.0, 0.0, 0.0]], None),
    ("Poisson", dict(rate=[0.5, 4.0]), [0.0, 3.0], None),
    ("Geometric", dict(probs=[0.3, 0.8]), [0.0, 4.0], None),
    ("Geometric", dict(logits=[-0.4, 1.3]), [2.0, 0.0], None),
    ("RelaxedBernoulli", dict(temperature=[0.5, 2.0], probs=[0.3, 0.8]), [0.2, 0.9], None),
    ("RelaxedBernoulli", dict(temperature=[0.5], logits=[-0.4, 1.3]), [0.6, 0.1], None),
    ("LogitRelaxedBernoulli", dict(temperature=[0.5, 2.0], probs=[0.3, 0.8]), [-1.2, 0.9], None),
    ("RelaxedOneHotCategorical", dict(temperature=[0.7], probs=_S), _S, None),
    ("RelaxedOneHotCategorical", dict(temperature=[1.5], logits=[[0.1, -1.0, 2.0], [0.0, 0.5, -0.5]]), _S, None),
]
IDS = [f"{c[0]}-{'-'.join(c[1])}" for c in CASES]
_INT_VALUED = {"Categorical"}


def _pair(name, params, grad=False):
    """The same distribution in jitgrad and torch, and the parameter tensors (float64) of each."""
    jp, tp, leaves = {}, {}, []
    for k, v in params.items():
        if not isinstance(v, list):
            jp[k] = tp[k] = v
            continue
        a = np.array(v, np.float64)
        j, t = jg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)
        jp[k], tp[k] = j, t
        leaves.append((j, t))
    return getattr(D, name)(**jp), _torch_cls(name)(**tp), leaves


def _torch_cls(name):
    if name == "LogitRelaxedBernoulli":       # not exported by torch.distributions
        return T.relaxed_bernoulli.LogitRelaxedBernoulli
    return getattr(T, name)


def _value(name, v):
    a = np.array(v, np.int64 if name in _INT_VALUED else np.float64)
    return jg.tensor(a), torch.tensor(a)


def _close(j, t, tol=1e-10):
    tn = t.detach().numpy()
    jn = j.detach().numpy()
    assert jn.shape == tn.shape, (jn.shape, tn.shape)
    np.testing.assert_allclose(jn, tn, rtol=tol, atol=tol, equal_nan=True)


def _methods(name, jd, td, value, u):
    """(jitgrad result, torch result) of every method torch implements for this distribution."""
    out = []
    for attr in ("mean", "mode", "variance", "stddev"):
        try:
            t = getattr(td, attr)
        except NotImplementedError:
            continue
        out.append((attr, getattr(jd, attr), t))
    try:
        out.append(("entropy", jd.entropy(), td.entropy()))
    except NotImplementedError:         # torch's Poisson; a Binomial with several total_counts (both raise)
        with pytest.raises(NotImplementedError):
            jd.entropy()
    out.append(("log_prob", jd.log_prob(value[0]), td.log_prob(value[1])))
    try:
        out.append(("cdf", jd.cdf(value[0]), td.cdf(value[1])))
    except NotImplementedError:
        pass
    if u is not None:
        uj, ut = jg.tensor(np.array(u)), torch.tensor(np.array(u))
        out.append(("icdf", jd.icdf(uj), td.icdf(ut)))
    return [o for o in out if o is not None]


@pytest.mark.parametrize("name, params, value, u", CASES, ids=IDS)
def test_values_match_torch(name, params, value, u):
    jd, td, _ = _pair(name, params)
    assert tuple(jd.batch_shape) == tuple(td.batch_shape) and tuple(jd.event_shape) == tuple(td.event_shape)
    assert jd.has_rsample == td.has_rsample and jd.has_enumerate_support == td.has_enumerate_support
    assert repr(jd.support).replace("jitgrad.", "torch.") == repr(td.support)
    for what, j, t in _methods(name, jd, td, _value(name, value), u):
        _close(j, t), what
        assert j.dtype.name == str(t.dtype).split(".")[1], what
    if td.has_enumerate_support:
        for expand in (True, False):
            try:
                t = td.enumerate_support(expand)
            except NotImplementedError:     # a Binomial with several total_counts
                with pytest.raises(NotImplementedError):
                    jd.enumerate_support(expand)
                continue
            _close(jd.enumerate_support(expand), t)
    if name != "HalfNormal":    # torch's, a TransformedDistribution, prints no parameter: "HalfNormal()"
        assert repr(jd).replace("jitgrad.", "torch.") == repr(td)


@pytest.mark.parametrize("name, params, value, u", CASES, ids=IDS)
def test_gradients_match_torch(name, params, value, u):
    jd, td, leaves = _pair(name, params, grad=True)
    if not leaves:
        pytest.skip("no float parameters")
    parts = [(j, t) for what, j, t in _methods(name, jd, td, _value(name, value), u)
             if what not in ("mode",) and t.requires_grad]
    sum(j.sum() for j, _ in parts).backward()
    sum(t.sum() for _, t in parts).backward()
    for j, t in leaves:
        _close(j.grad, t.grad, 1e-9)


@pytest.mark.parametrize("name, params, value, u", [c for c in CASES if c[0] in (
    "Normal", "Gamma", "Beta", "Dirichlet", "StudentT", "Bernoulli", "Categorical", "Binomial", "LogNormal")],
    ids=lambda x: x if isinstance(x, str) else None)
def test_gradcheck_log_prob_and_entropy(name, params, value, u):
    keys = [k for k, v in params.items() if isinstance(v, list)]
    fixed = {k: v for k, v in params.items() if not isinstance(v, list)}
    inputs = [jg.tensor(np.array(params[k], np.float64), requires_grad=True) for k in keys]
    v = _value(name, value)[0]

    def f(*ps):
        d = getattr(D, name)(**fixed, **dict(zip(keys, ps)), validate_args=False)
        return d.log_prob(v).sum() + (d.entropy().sum() if "total_count" not in keys else 0)
    assert jg.autograd.gradcheck(f, inputs)
    assert jg.autograd.gradgradcheck(f, inputs)


@pytest.mark.parametrize("name, params, value, u", CASES, ids=IDS)
def test_sample_shapes_dtypes_and_expand(name, params, value, u):
    jg.manual_seed(0)
    jd, td, _ = _pair(name, params)
    for shape in ((), (4,), (3, 2)):
        j, t = jd.sample(shape), td.sample(shape)
        assert tuple(j.shape) == tuple(t.shape) and j.dtype.name == str(t.dtype).split(".")[1]
        assert not j.requires_grad
        if td.has_rsample:
            assert tuple(jd.rsample(shape).shape) == tuple(t.shape)
    je, te = jd.expand((3, 2)), td.expand((3, 2))
    assert tuple(je.batch_shape) == tuple(te.batch_shape) and tuple(je.event_shape) == tuple(te.event_shape)
    vj, vt = _value(name, value)
    _close(je.log_prob(vj), te.log_prob(vt))
    assert tuple(je.sample((5,)).shape) == tuple(te.sample((5,)).shape)


def _mvn_inputs():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 3, 3))
    cov = A @ A.transpose(0, 2, 1) + np.eye(3)
    return rng.standard_normal((2, 3)), cov, rng.standard_normal((4, 2, 3))


@pytest.mark.parametrize("kw", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_multivariate_normal_matches_torch(kw):
    loc, cov, x = _mvn_inputs()
    m = np.linalg.cholesky(cov) if kw == "scale_tril" else cov
    jl, jm = jg.tensor(loc, requires_grad=True), jg.tensor(m, requires_grad=True)
    tl, tm = torch.tensor(loc, requires_grad=True), torch.tensor(m, requires_grad=True)
    jd, td = D.MultivariateNormal(jl, **{kw: jm}), T.MultivariateNormal(tl, **{kw: tm})
    outs = [(jd.log_prob(jg.tensor(x)), td.log_prob(torch.tensor(x))), (jd.entropy(), td.entropy())]
    for a in ("mean", "mode", "variance", "covariance_matrix", "precision_matrix", "scale_tril"):
        outs.append((getattr(jd, a), getattr(td, a)))
    for j, t in outs:
        _close(j, t, 1e-9)
    sum((j * jg.tensor(np.linspace(0.5, 1.5, j.numel())).reshape(j.shape)).sum() for j, _ in outs).backward()
    sum((t * torch.tensor(np.linspace(0.5, 1.5, t.numel())).reshape(t.shape)).sum() for _, t in outs).backward()
    _close(jl.grad, tl.grad, 1e-8)
    if kw == "scale_tril":
        # above the diagonal torch's cholesky_inverse (precision_matrix) reports a gradient for entries it never
        # reads; jitgrad's solve_triangular, like torch's, reads and differentiates the lower triangle only
        jm.grad, tm.grad = jm.grad.tril(), tm.grad.tril()
        _close(jl.grad, tl.grad, 1e-8)
    _close(jm.grad, tm.grad, 1e-8)
    assert tuple(jd.rsample((5,)).shape) == (5, 2, 3)
    assert tuple(jd.expand((4, 2)).batch_shape) == (4, 2)


def test_mixture_and_independent_match_torch():
    w, loc, scale = [0.3, 0.7], [[-1.0, 2.0], [0.5, 0.0]], [[1.0, 0.5], [2.0, 1.5]]
    j = [jg.tensor(np.array(a), requires_grad=True) for a in (w, loc, scale)]
    t = [torch.tensor(np.array(a), requires_grad=True) for a in (w, loc, scale)]
    jm = D.MixtureSameFamily(D.Categorical(j[0]), D.Independent(D.Normal(j[1].T, j[2].T), 1))
    tm = T.MixtureSameFamily(T.Categorical(t[0]), T.Independent(T.Normal(t[1].T, t[2].T), 1))
    x = np.array([[0.0, 1.0], [2.0, -1.0], [0.3, 0.3]])
    pairs = [(jm.log_prob(jg.tensor(x)), tm.log_prob(torch.tensor(x))), (jm.mean, tm.mean),
             (jm.variance, tm.variance)]
    for a, b in pairs:
        _close(a, b)
    sum(a.sum() for a, _ in pairs).backward()
    sum(b.sum() for _, b in pairs).backward()
    for a, b in zip(j, t):
        _close(a.grad, b.grad)
    assert tuple(jm.sample((7,)).shape) == tuple(tm.sample((7,)).shape) == (7, 2)
    ji, ti = jm.component_distribution, tm.component_distribution
    assert (tuple(ji.batch_shape), tuple(ji.event_shape)) == (tuple(ti.batch_shape), tuple(ti.event_shape))
    _close(ji.entropy(), ti.entropy())


_TRANSFORMS = [("ExpTransform", (), [0.3, -1.2]), ("SigmoidTransform", (), [0.3, -1.2]),
               ("TanhTransform", (), [0.3, -1.2]), ("SoftplusTransform", (), [0.3, -1.2]),
               ("AffineTransform", (1.5, -2.0), [0.3, -1.2]), ("PowerTransform", (2.5,), [0.3, 1.2]),
               ("StickBreakingTransform", (), [0.3, -1.2])]


@pytest.mark.parametrize("name, args, x", _TRANSFORMS, ids=[t[0] for t in _TRANSFORMS])
def test_transforms_match_torch(name, args, x):
    jt, tt = getattr(D, name)(*args), getattr(T, name)(*args)
    jx, tx = jg.tensor(np.array(x), requires_grad=True), torch.tensor(np.array(x), requires_grad=True)
    jy, ty = jt(jx), tt(tx)
    _close(jy, ty)
    _close(jt.inv(jy), tt.inv(ty))
    jl, tl = jt.log_abs_det_jacobian(jx, jy), tt.log_abs_det_jacobian(tx, ty)
    _close(jl, tl)
    (jl.sum() + jy.sum()).backward()
    (tl.sum() + ty.sum()).backward()
    _close(jx.grad, tx.grad)
    assert repr(jt.domain) == repr(tt.domain) and repr(jt.codomain) == repr(tt.codomain)
    assert tuple(jt.forward_shape((4, 2))) == tuple(tt.forward_shape((4, 2)))


def test_transformed_distribution_matches_torch():
    base_j = D.Normal(jg.tensor([0.2, -0.3], dtype=jg.float64), jg.tensor([1.0, 0.5], dtype=jg.float64))
    base_t = T.Normal(torch.tensor([0.2, -0.3], dtype=torch.float64), torch.tensor([1.0, 0.5], dtype=torch.float64))
    jd = D.TransformedDistribution(base_j, [D.AffineTransform(0.5, -2.0), D.TanhTransform()])
    td = T.TransformedDistribution(base_t, [T.AffineTransform(0.5, -2.0), T.TanhTransform()])
    y = np.array([0.3, -0.6])
    _close(jd.log_prob(jg.tensor(y)), td.log_prob(torch.tensor(y)))
    _close(jd.cdf(jg.tensor(y)), td.cdf(torch.tensor(y)))
    _close(jd.icdf(jg.tensor([0.2, 0.7], dtype=jg.float64)), td.icdf(torch.tensor([0.2, 0.7], dtype=torch.float64)))
    sb_j = D.TransformedDistribution(D.Normal(jg.zeros(3, dtype=jg.float64), 1.0), D.StickBreakingTransform())
    sb_t = T.TransformedDistribution(T.Normal(torch.zeros(3, dtype=torch.float64), 1.0), T.StickBreakingTransform())
    s = np.array([0.1, 0.2, 0.3, 0.4])
    _close(sb_j.log_prob(jg.tensor(s)), sb_t.log_prob(torch.tensor(s)))
    assert tuple(sb_j.event_shape) == tuple(sb_t.event_shape) == (4,)
    assert tuple(jd.expand((3, 2)).sample().shape) == (3, 2)


_CONSTRAINTS = ["real", "positive", "nonnegative", "unit_interval", "simplex", "boolean", "nonnegative_integer",
                "positive_integer", "lower_cholesky", "lower_triangular", "positive_definite", "real_vector",
                "one_hot", "symmetric", "square"]


@pytest.mark.parametrize("name", _CONSTRAINTS)
def test_constraints_match_torch(name):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 3))
    samples = [a, np.abs(a), np.round(np.abs(a)), a @ a.transpose(0, 2, 1) + np.eye(3), np.tril(np.abs(a)) + 0.1,
               np.eye(3)[None].repeat(2, 0), np.full((2, 3, 3), 1 / 3), np.array([[[0.0, 1.0, 0.0]] * 3] * 2)]
    jc, tc = getattr(C, name), getattr(T.constraints, name)
    assert repr(jc) == repr(tc) and jc.event_dim == tc.event_dim and jc.is_discrete == tc.is_discrete
    for s in samples:
        assert np.array_equal(jc.check(jg.tensor(s)).numpy(), tc.check(torch.tensor(s)).numpy())


@pytest.mark.parametrize("ctor", [lambda: C.interval(0.0, 2.0), lambda: C.half_open_interval(0.0, 2.0),
                                  lambda: C.greater_than(1.0), lambda: C.greater_than_eq(1.0),
                                  lambda: C.less_than(1.0), lambda: C.integer_interval(0, 2)])
def test_parametrised_constraints_match_torch(ctor):
    jc = ctor()
    tc = getattr(T.constraints, {"_Interval": "interval", "_HalfOpenInterval": "half_open_interval",
                                 "_GreaterThan": "greater_than", "_GreaterThanEq": "greater_than_eq",
                                 "_LessThan": "less_than", "_IntegerInterval": "integer_interval"}[
        type(jc).__name__])(*vars(jc).values())
    v = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0])
    assert repr(jc) == repr(tc)
    assert np.array_equal(jc.check(jg.tensor(v)).numpy(), tc.check(torch.tensor(v)).numpy())


def _error(f):
    try:
        f()
    except Exception as e:      # noqa: BLE001 - the type is compared too
        return type(e), str(e).replace("jitgrad.", "torch.")
    return None


def _errors():
    f64 = dict(dtype=np.float64)
    return [
        lambda M, t: M.Normal(t([0.0, 1.0]), t([1.0, -1.0])),
        lambda M, t: M.Normal(t([0.0]), t([1.0])).log_prob(1.0),
        lambda M, t: M.Exponential(t([2.0])).log_prob(t([-1.0])),
        lambda M, t: M.Categorical(t([0.2, 0.8])).log_prob(t(3, dtype=np.int64)),
        lambda M, t: M.MultivariateNormal(t([0.0, 0.0]), t(np.eye(2))).log_prob(t([0.0, 0.0, 0.0])),
        lambda M, t: M.Normal(t([0.0, 0.0]), 1.0).log_prob(t([0.0, 0.0, 0.0])),
        lambda M, t: M.Bernoulli(probs=t([0.5]), logits=t([0.0])),
        lambda M, t: M.Bernoulli(probs=t([1.5])),
        lambda M, t: M.Uniform(t([1.0]), t([0.0])),
        lambda M, t: M.Geometric(t([0.5, 0.0])),
        lambda M, t: M.Dirichlet(t(1.0)),
        lambda M, t: M.Categorical(t(1.0)),
        lambda M, t: M.Beta(t([1.0]), t([-2.0])),
        lambda M, t: M.Gamma(t([1.0]), t([0.0])),
        lambda M, t: M.Binomial(t([3.0]), t([0.5])).log_prob(t([4.0])),
        lambda M, t: M.Dirichlet(t([0.5, 0.5])).log_prob(t([0.5, 0.6])),
        lambda M, t: M.MultivariateNormal(t([0.0, 0.0]), t([[1.0, 2.0], [2.0, 1.0]])),
        lambda M, t: M.MultivariateNormal(t([0.0, 0.0]), t(np.eye(2)), scale_tril=t(np.eye(2))),
        lambda M, t: M.Independent(M.Normal(t([0.0]), t([1.0])), 2),
        lambda M, t: M.kl_divergence(M.Cauchy(t([0.0]), t([1.0])), M.Laplace(t([0.0]), t([1.0]))),
    ], f64


@pytest.fixture
def validating():
    """Both libraries validate (their default): another test in the same worker may have turned torch's off."""
    before = T.Distribution._validate_args, D.Distribution._validate_args
    T.Distribution.set_default_validate_args(True)
    D.Distribution.set_default_validate_args(True)
    yield
    T.Distribution.set_default_validate_args(before[0])
    D.Distribution.set_default_validate_args(before[1])


@pytest.mark.parametrize("i", range(len(_errors()[0])))
def test_validation_errors_match_torch(i, validating):
    f = _errors()[0][i]
    je = _error(lambda: f(D, lambda v, dtype=np.float64: jg.tensor(np.array(v, dtype))))
    te = _error(lambda: f(T, lambda v, dtype=np.float64: torch.tensor(np.array(v, dtype))))
    assert te is not None and je == te


def test_set_default_validate_args():
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args("yes")
    D.Distribution.set_default_validate_args(False)
    try:
        d = D.Normal(jg.tensor([0.0]), jg.tensor([-1.0]))      # no error
        assert math.isnan(float(d.log_prob(jg.tensor([-1.0]))))
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(jg.tensor([0.0]), jg.tensor([-1.0]))
    D.Normal(jg.tensor([0.0]), jg.tensor([-1.0]), validate_args=False)


def test_low_rank_multivariate_normal_matches_torch():
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((2, 4)), rng.standard_normal((4, 2)), np.abs(rng.standard_normal((2, 4))) + 0.5]
    j = [jg.tensor(a, requires_grad=True) for a in arrays]
    t = [torch.tensor(a, requires_grad=True) for a in arrays]
    jd, td = D.LowRankMultivariateNormal(*j), T.LowRankMultivariateNormal(*t)
    x = rng.standard_normal((3, 2, 4))
    outs = [(jd.log_prob(jg.tensor(x)), td.log_prob(torch.tensor(x))), (jd.entropy(), td.entropy())]
    outs += [(getattr(jd, a), getattr(td, a)) for a in ("mean", "variance", "covariance_matrix",
                                                         "precision_matrix", "scale_tril")]
    for a, b in outs:
        _close(a, b, 1e-9)
    sum(a.sum() for a, _ in outs).backward()
    sum(b.sum() for _, b in outs).backward()
    for a, b in zip(j, t):
        _close(a.grad, b.grad, 1e-8)
    assert (tuple(jd.batch_shape), tuple(jd.event_shape)) == (tuple(td.batch_shape), tuple(td.event_shape))
    assert tuple(jd.rsample((5,)).shape) == (5, 2, 4)
    assert tuple(jd.expand((3, 2)).log_prob(jg.tensor(x)).shape) == (3, 2)
    with pytest.raises(ValueError, match="cov_factor must be a batch of matrices with shape 4 x m"):
        D.LowRankMultivariateNormal(j[0], j[1].T, j[2])


def test_docstring_examples_run():
    import doctest
    from jitgrad.distributions import constraints, continuous
    for mod in (D, constraints, continuous):
        r = doctest.testmod(mod)
        assert r.attempted and not r.failed, mod.__name__
