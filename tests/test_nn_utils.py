"""nn.init's new initialisers and deprecated aliases, and nn.utils (gradient norms, parameters <-> vector,
hook-based weight_norm/spectral_norm, parametrize, parametrizations, BatchNorm fusion, skip_init,
stateless.functional_call) against torch: values and gradients in float64 with torch's parameters copied in,
exact properties (orthogonality, truncation bounds, Dirac structure), distributions checked statistically,
seeded reproducibility, compiled training steps (interpreter, Numba) equal to eager/torch, torch's errors and
warnings."""
import math
import warnings

import numpy as np
import pytest
from scipy import stats

import jitgrad as jg
from jitgrad import nn
from jitgrad.nn import init
from jitgrad.nn.utils import parametrize as P
from jitgrad.nn.utils import parametrizations as PZ

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _copy(t, j):
    """torch module's state into jitgrad's (same keys)."""
    sd = t.state_dict()
    assert list(j.state_dict()) == list(sd)
    j.load_state_dict({k: jg.tensor(v.detach().numpy()) for k, v in sd.items()})


# --- nn.init -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (0.5, 2.0, -1.0, 0.0), (0.0, 1.0, 1.0, 3.0)])
def test_trunc_normal_bounds_and_distribution(mean, std, a, b):
    w = init.trunc_normal_(jg.empty(20000, dtype=jg.float64), mean, std, a, b)
    x = w.numpy()
    assert x.min() >= a and x.max() <= b
    ref = stats.truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3
    g = jg.Generator().manual_seed(5)
    w1 = init.trunc_normal_(jg.empty(50), mean, std, a, b, generator=g).clone()
    g.manual_seed(5)
    assert (init.trunc_normal_(jg.empty(50), mean, std, a, b, generator=g) == w1).all()
    jg.manual_seed(7)
    w2 = init.trunc_normal_(jg.empty(50), mean, std, a, b).clone()
    jg.manual_seed(7)
    assert (init.trunc_normal_(jg.empty(50), mean, std, a, b) == w2).all()


def test_trunc_normal_warns_as_torch():
    with pytest.warns(UserWarning, match=r"mean is more than 2 std from \[a, b\] in nn.init.trunc_normal_"):
        init.trunc_normal_(jg.empty(10), mean=10.0, std=1.0, a=-1.0, b=1.0)


@pytest.mark.parametrize("shape,gain", [((6, 4), 1.0), ((3, 8), 2.0), ((4, 2, 3), 0.5), ((5, 5), 1.0)])
def test_orthogonal_(shape, gain):
    w = init.orthogonal_(jg.empty(*shape, dtype=jg.float64), gain=gain).numpy().reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w.T @ w if rows >= cols else w @ w.T
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(min(rows, cols)), atol=1e-12)
    g = jg.Generator().manual_seed(1)
    a = init.orthogonal_(jg.empty(*shape), generator=g).clone()
    g.manual_seed(1)
    assert (init.orthogonal_(jg.empty(*shape), generator=g) == a).all()


def test_orthogonal_is_haar_distributed():
    # Mezzadri's sign fix makes Q Haar: the (0, 0) entry of a 3x3 has mean 0 and variance 1/3
    vals = np.array([init.orthogonal_(jg.empty(3, 3, dtype=jg.float64))[0, 0].item() for _ in range(1500)])
    assert abs(vals.mean()) < 0.05 and abs(vals.var() - 1 / 3) < 0.04


@pytest.mark.parametrize("shape,groups", [((4, 3, 3), 1), ((6, 4, 3, 3), 2), ((4, 4, 3, 3, 3), 4),
                                          ((2, 5, 1, 2), 1)])
def test_dirac_matches_torch(shape, groups):
    t = torch.nn.init.dirac_(torch.empty(*shape), groups)
    j = init.dirac_(jg.empty(*shape), groups)
    np.testing.assert_array_equal(j.numpy(), t.numpy())
    x = RNG.standard_normal((1, shape[1] * groups) + (5,) * (len(shape) - 2))
    conv = {3: "conv1d", 4: "conv2d", 5: "conv3d"}[len(shape)]
    if shape[0] <= shape[1] and groups == 1 and all(k % 2 for k in shape[2:]):
        # an odd Dirac kernel with padding passes its channels through
        y = getattr(jg.nn.functional, conv)(jg.tensor(x, dtype=jg.float32), j, padding=tuple(s // 2 for s in shape[2:]))
        np.testing.assert_allclose(y.numpy(), x[:, :shape[0]], rtol=1e-6)


def test_eye_sparse_and_errors_as_torch():
    np.testing.assert_array_equal(init.eye_(jg.empty(3, 5)).numpy(), np.eye(3, 5))
    w = init.sparse_(jg.empty(10, 6), sparsity=0.25, std=0.5)
    assert ((w.numpy() == 0).sum(0) >= 3).all()
    jg.manual_seed(3)
    w1 = init.sparse_(jg.empty(10, 6), 0.25).clone()
    jg.manual_seed(3)
    assert (init.sparse_(jg.empty(10, 6), 0.25) == w1).all()
    cases = [("orthogonal_", (3,), {}), ("dirac_", (3, 3), {}), ("dirac_", (3, 2, 3), {"groups": 2}),
             ("eye_", (3,), {}), ("sparse_", (2, 3, 4), {"sparsity": 0.1})]
    for name, shape, kw in cases:
        with pytest.raises(ValueError) as et:
            getattr(torch.nn.init, name)(torch.empty(*shape), **kw)
        with pytest.raises(ValueError) as ej:
            getattr(init, name)(jg.empty(*shape), **kw)
        assert str(ej.value) == str(et.value)


@pytest.mark.parametrize("name,args", [("uniform", ()), ("normal", ()), ("constant", (0.5,)), ("eye", ()),
                                       ("dirac", ()), ("xavier_uniform", ()), ("xavier_normal", ()),
                                       ("kaiming_uniform", ()), ("kaiming_normal", ()), ("orthogonal", ()),
                                       ("sparse", (0.5,))])
def test_deprecated_aliases_warn_as_torch(name, args):
    shape = (3, 3, 3) if name == "dirac" else (3, 4)
    with pytest.warns(FutureWarning) as rt:
        getattr(torch.nn.init, name)(torch.empty(*shape), *args)
    with pytest.warns(FutureWarning) as rj:
        out = getattr(init, name)(jg.empty(*shape), *args)
    assert str(rj[0].message) == str(rt[0].message) == f"`nn.init.{name}` is now deprecated in favor of " \
                                                      f"`nn.init.{name}_`."
    assert getattr(init, name).__name__ == name and out.shape == shape


# --- gradient norms, vectors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
def test_get_total_norm_and_clip_with_norm(norm_type):
    arrays = [RNG.standard_normal(s) for s in ((3, 4), (5,), (2, 2, 2))]
    tn = torch.nn.utils.get_total_norm([torch.tensor(a) for a in arrays], norm_type)
    jn = nn.utils.get_total_norm([jg.tensor(a) for a in arrays], norm_type)
    np.testing.assert_allclose(jn.item(), tn.item(), rtol=1e-12)
    tp = [torch.tensor(a, requires_grad=True) for a in arrays]
    jp = [jg.tensor(a, requires_grad=True) for a in arrays]
    for p, q, a in zip(tp, jp, arrays):
        p.grad, q.grad = torch.tensor(a * 3), jg.tensor(a * 3)
    torch.nn.utils.clip_grads_with_norm_(tp, 1.5, tn * 3)
    nn.utils.clip_grads_with_norm_(jp, 1.5, jn * 3)
    for p, q in zip(tp, jp):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-12)
    with pytest.warns(FutureWarning, match="`torch.nn.utils.clip_grad_norm` is now deprecated"):
        r = nn.utils.clip_grad_norm(jp, 0.1, norm_type)
    assert r.dim() == 0


def test_get_total_norm_nonfinite_error_as_torch():
    with pytest.raises(RuntimeError) as et:
        torch.nn.utils.get_total_norm([torch.tensor([1.0, float("inf")])], error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as ej:
        nn.utils.get_total_norm([jg.tensor([1.0, float("inf")])], error_if_nonfinite=True)
    assert str(ej.value) == str(et.value)


def test_parameters_to_vector_and_back():
    t, j = torch.nn.Linear(3, 2).double(), nn.Linear(3, 2, dtype=jg.float64)
    _copy(t, j)
    tv, jv = torch.nn.utils.parameters_to_vector(t.parameters()), nn.utils.parameters_to_vector(j.parameters())
    np.testing.assert_array_equal(jv.detach().numpy(), tv.detach().numpy())
    w = RNG.standard_normal(8)
    (jv * jg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(j.weight.grad.numpy().ravel(), w[:6])
    nn.utils.vector_to_parameters(jg.arange(8, dtype=jg.float64), j.parameters())
    np.testing.assert_array_equal(j.bias.detach().numpy(), [6.0, 7.0])
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        nn.utils.vector_to_parameters([1.0], j.parameters())


# --- weight_norm / spectral_norm -----------------------------------------------------------------------------
def _pair_modules(kind, *args):
    torch.manual_seed(0)
    t = getattr(torch.nn, kind)(*args, dtype=torch.float64)
    j = getattr(nn, kind)(*args, dtype=jg.float64)
    _copy(t, j)
    return t, j


def _run_both(t, j, shape):
    x = RNG.standard_normal(shape)
    tx, jx = torch.tensor(x, requires_grad=True), jg.tensor(x, requires_grad=True)
    yt, yj = t(tx), j(jx)
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    (yt * yt).sum().backward()
    (yj * yj).sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    jp = dict(j.named_parameters())
    for n, p in t.named_parameters():
        np.testing.assert_allclose(jp[n].grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_hook_weight_norm_matches_torch(dim):
    t, j = _pair_modules("Conv2d", 2, 3, 3)
    with pytest.warns(FutureWarning, match="`torch.nn.utils.weight_norm` is deprecated"):
        nn.utils.weight_norm(j, dim=dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(t, dim=dim)
    assert list(j.state_dict()) == list(t.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert tuple(j.weight_g.shape) == tuple(t.weight_g.shape)
    _run_both(t, j, (2, 2, 5, 5))
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks on the same parameter weight"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            nn.utils.weight_norm(j, dim=dim)
    nn.utils.remove_weight_norm(j)
    torch.nn.utils.remove_weight_norm(t)
    assert list(j.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(j.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found in"):
        nn.utils.remove_weight_norm(j)


@pytest.mark.parametrize("kind,args,shape,n_iter", [("Linear", (4, 3), (2, 4), 1),
                                                     ("ConvTranspose2d", (3, 2, 3), (1, 3, 4, 4), 2)])
def test_hook_spectral_norm_matches_torch(kind, args, shape, n_iter):
    t, j = _pair_modules(kind, *args)
    torch.nn.utils.spectral_norm(t, n_power_iterations=n_iter)
    nn.utils.spectral_norm(j, n_power_iterations=n_iter)
    assert list(j.state_dict()) == list(t.state_dict())
    _copy(t, j)                         # torch's random u, v
    for mode in ("train", "train", "eval"):
        getattr(t, mode)()
        getattr(j, mode)()
        t.zero_grad()
        j.zero_grad()
        _run_both(t, j, shape)
        np.testing.assert_allclose(j.weight_u.numpy(), t.weight_u.numpy(), rtol=1e-10)
        np.testing.assert_allclose(j.weight_v.numpy(), t.weight_v.numpy(), rtol=1e-10)
    u = j.weight_u.clone()
    j(jg.tensor(RNG.standard_normal(shape)))
    assert (j.weight_u == u).all()          # eval mode: no power iteration
    nn.utils.remove_spectral_norm(j)
    torch.nn.utils.remove_spectral_norm(t)
    np.testing.assert_allclose(j.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive, but got n_power_iterations=0"):
        nn.utils.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)


# --- parametrize, parametrizations ---------------------------------------------------------------------------
def test_parametrizations_weight_and_spectral_norm_match_torch():
    for fn in ("weight_norm", "spectral_norm"):
        t, j = _pair_modules("Linear", 4, 3)
        getattr(torch.nn.utils.parametrizations, fn)(t)
        getattr(PZ, fn)(j)
        assert type(j).__name__ == type(t).__name__ == "ParametrizedLinear"
        _copy(t, j)
        for _ in range(2):
            t.zero_grad()
            j.zero_grad()
            _run_both(t, j, (2, 4))
        P.remove_parametrizations(j, "weight")
        torch.nn.utils.parametrize.remove_parametrizations(t, "weight")
        assert type(j) is nn.Linear and list(j.state_dict()) == list(t.state_dict())
        np.testing.assert_allclose(j.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape,omap", [((4, 4), None), ((5, 3), None), ((3, 5), "householder"), ((4, 4), "cayley"),
                                        ((5, 3), "matrix_exp")])
def test_orthogonal_parametrization(shape, omap):
    j = nn.Linear(shape[1], shape[0], dtype=jg.float64)
    PZ.orthogonal(j, orthogonal_map=omap)
    w0 = j.weight.detach().numpy()
    for _ in range(3):      # stays orthogonal through gradient steps on the unconstrained original
        w = j.weight
        g = w @ w.T if shape[0] <= shape[1] else w.T @ w
        np.testing.assert_allclose(g.detach().numpy(), np.eye(min(shape)), atol=1e-10)
        (j(jg.tensor(RNG.standard_normal((2, shape[1])))) ** 3).sum().backward()
        with jg.no_grad():
            for p in j.parameters():
                p -= 0.1 * p.grad
        j.zero_grad()
    assert not np.allclose(j.weight.detach().numpy(), w0)
    # the unconstrained map is differentiable: gradcheck through the parametrization (the householder map reads
    # the original's diagonal through int(), torch's sign switch: that part is held fixed)
    orig = j.parametrizations.weight.original.detach()
    diag = orig * jg.eye(*orig.shape, dtype=jg.float64)
    assert jg.autograd.gradcheck(lambda o: j.parametrizations.weight[0](o - o * jg.eye(*o.shape, dtype=jg.float64)
                                                                        + diag), (orig.clone().requires_grad_(),))


def test_orthogonal_errors_as_torch():
    for args, kw in (((nn.Linear(3, 3), "nope"), {}), ((nn.Linear(3, 3),), {"orthogonal_map": "qr"})):
        targs = (torch.nn.Linear(3, 3),) + args[1:]
        with pytest.raises(ValueError) as et:
            torch.nn.utils.parametrizations.orthogonal(*targs, **kw)
        with pytest.raises(ValueError) as ej:
            PZ.orthogonal(*args, **kw)
        assert str(ej.value).split("'")[-1] == str(et.value).split("'")[-1]
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices. Got a tensor of 1 dimensions."):
        PZ.orthogonal(nn.Linear(3, 3), "bias")


class Symmetric(nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(-1, -2)

    def right_inverse(self, a):
        return a.triu()


class TSymmetric(torch.nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(-1, -2)

    def right_inverse(self, a):
        return a.triu()


class Scale(nn.Module):
    def forward(self, x):
        return 2 * x


def test_register_parametrization_semantics():
    j = nn.Linear(3, 3, dtype=jg.float64)
    t = torch.nn.Linear(3, 3, dtype=torch.float64)
    _copy(t, j)
    P.register_parametrization(j, "weight", Symmetric())
    torch.nn.utils.parametrize.register_parametrization(t, "weight", TSymmetric())
    assert P.is_parametrized(j) and P.is_parametrized(j, "weight") and not P.is_parametrized(j, "bias")
    assert P.type_before_parametrizations(j) is nn.Linear
    assert list(j.state_dict()) == list(t.state_dict())
    np.testing.assert_allclose(j.weight.detach().numpy(), t.weight.detach().numpy())
    w = j.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    a = RNG.standard_normal((3, 3))
    j.weight = jg.tensor(a)                         # the setter runs right_inverse
    t.weight = torch.tensor(a)
    np.testing.assert_allclose(j.parametrizations.weight.original.detach().numpy(), np.triu(a))
    np.testing.assert_allclose(j.weight.detach().numpy(), t.weight.detach().numpy())
    P.register_parametrization(j, "weight", Scale())    # chained
    np.testing.assert_allclose(j.weight.detach().numpy(), 2 * t.weight.detach().numpy())
    calls = [0]

    class Count(nn.Module):
        def forward(self, x):
            calls[0] += 1
            return x
    P.register_parametrization(j, "bias", Count())
    calls[0] = 0
    with P.cached():
        _ = j.bias + j.bias + j.bias
    assert calls[0] == 1
    _ = j.bias + j.bias
    assert calls[0] == 3
    P.remove_parametrizations(j, "weight", leave_parametrized=False)
    np.testing.assert_allclose(j.weight.detach().numpy(), np.triu(a))
    P.remove_parametrizations(j, "bias")
    assert type(j) is nn.Linear and not P.is_parametrized(j)
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        P.remove_parametrizations(j, "weight")
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized element with "
                                         "name 'nope'"):
        P.register_parametrization(j, "nope", Scale())

    class Shrink(nn.Module):
        def forward(self, x):
            return x[:2]
    with pytest.raises(ValueError, match="may not change the shape of the tensor, unless `unsafe` flag"):
        P.register_parametrization(j, "weight", Shrink())


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_parametrized_training_step_compiled_equals_eager(backend):
    """A module with parametrizations.weight_norm and spectral_norm (buffers updated in place by the power
    iteration) and a hook-based weight_norm: one SGD step per call, compiled against the same steps eagerly."""
    def build():
        jg.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 5, dtype=jg.float64), nn.Tanh(), nn.Linear(5, 3, dtype=jg.float64),
                          nn.Tanh(), nn.Linear(3, 2, dtype=jg.float64))
        PZ.weight_norm(m[0])
        PZ.spectral_norm(m[2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            nn.utils.weight_norm(m[4])
        return m, jg.optim.SGD(m.parameters(), lr=0.1)

    def step(m, opt, x):
        opt.zero_grad()
        loss = (m(x) ** 2).sum()
        loss.backward()
        opt.step()
        return loss.detach()
    me, oe = build()
    mc, oc = build()
    compiled = jg.compile(lambda x: step(mc, oc, x), backend=backend, background=False)
    for _ in range(3):
        x = jg.tensor(RNG.standard_normal((3, 4)))
        np.testing.assert_allclose(compiled(x).numpy(), step(me, oe, x).numpy(), rtol=1e-12)
    for (n, a), (_, b) in zip(me.state_dict().items(), mc.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-11, atol=1e-14, err_msg=n)


# --- fusion, skip_init, functional_call ----------------------------------------------------------------------
def test_fuse_conv_and_linear_bn_match_torch():
    tc, jc = _pair_modules("Conv2d", 2, 3, 3)
    tb, jb = _pair_modules("BatchNorm2d", 3)
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    with torch.no_grad():
        tb.running_mean.copy_(torch.tensor(rm)), tb.running_var.copy_(torch.tensor(rv))
    _copy(tb, jb)
    tc.eval(), tb.eval(), jc.eval(), jb.eval()
    tf, jf = torch.nn.utils.fuse_conv_bn_eval(tc, tb), nn.utils.fuse_conv_bn_eval(jc, jb)
    x = RNG.standard_normal((1, 2, 5, 5))
    np.testing.assert_allclose(jf(jg.tensor(x)).detach().numpy(), tf(torch.tensor(x)).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(jf(jg.tensor(x)).detach().numpy(), jb(jc(jg.tensor(x))).detach().numpy(), rtol=1e-10)
    assert isinstance(jf.weight, nn.Parameter) and jf is not jc
    tl, jl = _pair_modules("Linear", 4, 3)
    tb1, jb1 = _pair_modules("BatchNorm1d", 3)
    tl.eval(), tb1.eval(), jl.eval(), jb1.eval()
    x = RNG.standard_normal((2, 4))
    np.testing.assert_allclose(nn.utils.fuse_linear_bn_eval(jl, jb1)(jg.tensor(x)).detach().numpy(),
                               torch.nn.utils.fuse_linear_bn_eval(tl, tb1)(torch.tensor(x)).detach().numpy(),
                               rtol=1e-10)
    jl.train()
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_linear_bn_eval(jl, jb1)
    wt = RNG.standard_normal((2, 3, 3, 3))
    w, b = nn.utils.fuse_conv_bn_weights(jg.tensor(wt), None, jb.running_mean, jb.running_var, 1e-5, None, None,
                                         transpose=True)
    tw_, tb_ = torch.nn.utils.fuse_conv_bn_weights(torch.tensor(wt), None, tb.running_mean, tb.running_var, 1e-5,
                                                   None, None, transpose=True)
    np.testing.assert_allclose(w.detach().numpy(), tw_.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), tb_.detach().numpy(), rtol=1e-12)


def test_skip_init():
    jg.manual_seed(0)
    before = jg.rand(3)
    jg.manual_seed(0)
    m = nn.utils.skip_init(nn.Linear, 4, 3, dtype=jg.float64)
    assert tuple(m.weight.shape) == (3, 4) and m.weight.dtype == jg.float64 and m.weight.requires_grad
    assert (jg.rand(3) == before).all()            # nothing drawn from the default generator
    with pytest.raises(RuntimeError, match="Expected a Module; got"):
        nn.utils.skip_init(int)

    class NoDevice(nn.Module):
        def __init__(self):
            super().__init__()
    with pytest.raises(RuntimeError, match="Module must support a 'device' arg to skip initialization"):
        nn.utils.skip_init(NoDevice)


def test_functional_call_matches_torch():
    t, j = _pair_modules("Linear", 3, 2)
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal(2)
    x = RNG.standard_normal((4, 3))
    tw, jw = torch.tensor(a, requires_grad=True), jg.tensor(a, requires_grad=True)
    with pytest.warns(FutureWarning, match="`torch.nn.utils.stateless.functional_call` is deprecated"):
        yj = nn.utils.stateless.functional_call(j, {"weight": jw}, (jg.tensor(x),))
    yt = torch.func.functional_call(t, {"weight": tw}, (torch.tensor(x),))
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-12)
    yj.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(jw.grad.numpy(), tw.grad.numpy())
    assert j.weight.grad is None and isinstance(j.weight, nn.Parameter)     # restored, untouched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        y = nn.utils.stateless.functional_call(j, {"weight": jg.tensor(a), "bias": jg.tensor(b)}, jg.tensor(x),
                                               strict=True)
        np.testing.assert_allclose(y.numpy(), x @ a.T + b)
        with pytest.raises(RuntimeError) as ej:
            nn.utils.stateless.functional_call(j, {"weight": jg.tensor(a), "extra": jg.tensor(b)}, jg.tensor(x),
                                               strict=True)
    with pytest.raises(RuntimeError) as et:
        torch.func.functional_call(t, {"weight": tw, "extra": torch.tensor(b)}, torch.tensor(x), strict=True)
    assert str(ej.value) == str(et.value)
    # tied weights: a value for one name serves both
    shared = nn.Linear(2, 2, bias=False, dtype=jg.float64)
    seq = nn.Sequential(shared, shared)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        y = nn.utils.stateless.functional_call(seq, {"0.weight": jg.eye(2, dtype=jg.float64) * 2}, jg.ones(1, 2,
                                               dtype=jg.float64))
    np.testing.assert_allclose(y.numpy(), [[4.0, 4.0]])
