"""Random numbers: Philox4x32-10 (known answers, NumPy == kernel), generators and seeding, the random functions
and their distributions, one_hot, dropout (eager, gradients, compiled: new masks per call, reproducible after
manual_seed, the same numbers as eager mode and the interpreter)."""
import numpy as np
import pytest
from scipy import stats

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.ir import philox

# ---- Philox ------------------------------------------------------------------------------------------------------
# Random123's kat_vectors for philox4x32 10: (counter, key) -> output
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_philox_known_answers_numpy(ctr, key, want):
    assert tuple(int(w) for w in philox.philox4x32(ctr, key)) == want


def test_philox_known_answers_kernel():
    from jitgrad.codegen.kernels.philox import philox4x32_10
    for ctr, key, want in KAT:
        args = [np.uint64(v) for v in ctr + key]
        assert tuple(int(w) for w in philox4x32_10(*args)) == want


# seeds stored as int64 bits (a seed >= 2**63 is negative there), offsets past 2**32, indices past 2**32
_STATES = [(0, 0), (67280421310721, 5), (-1, (1 << 32) + 3), (-(1 << 63), 1 << 40)]


@pytest.mark.parametrize("seed,offset", _STATES)
def test_numpy_philox_equals_kernel_philox(seed, offset):
    from jitgrad.codegen.kernels import philox as kp
    x = philox.words(seed, offset, 40)              # NumPy: elements 0..39 of the draw at (seed, offset)
    for i in range(40):
        got = kp._words(np.int64(seed), np.int64(offset), np.int64(i))
        assert [int(w) for w in got] == [int(w[i]) for w in x]
    s, o = seed % (1 << 64), offset
    for i in ((1 << 32) - 1, 1 << 32, (1 << 33) + 7):    # element indices past 32 bits use the second word
        want = philox.philox4x32((i & 0xffffffff, i >> 32, o & 0xffffffff, o >> 32), (s & 0xffffffff, s >> 32))
        got = kp._words(np.int64(seed), np.int64(offset), np.int64(i))
        assert [int(w) for w in got] == [int(w) for w in want]
    for dtype in (np.float32, np.float64):
        u = philox.uniform(seed, offset, (40,), dtype)
        fn = kp.rnguniform_f32 if dtype == np.float32 else kp.rnguniform_f64
        k = np.array([fn(np.int64(seed), np.int64(offset), np.int64(i)) for i in range(40)], dtype)
        np.testing.assert_array_equal(u, k)         # bit for bit
        z = philox.normal(seed, offset, (40,), dtype)
        fn = kp.rngnormal_f32 if dtype == np.float32 else kp.rngnormal_f64
        k = np.array([fn(np.int64(seed), np.int64(offset), np.int64(i)) for i in range(40)], dtype)
        np.testing.assert_allclose(z, k, rtol=1e-13 if dtype == np.float64 else 1e-6, atol=1e-13)


# ---- generators --------------------------------------------------------------------------------------------------
def test_manual_seed_reproduces_every_random_function():
    def draw():
        return [jg.rand(5), jg.randn(2, 3, dtype=jg.float64), jg.randint(0, 100, (6,)), jg.randperm(7),
                jg.multinomial(jg.tensor([0.2, 0.3, 0.5]), 4, True), jg.bernoulli(jg.full((5,), 0.5)),
                jg.normal(jg.zeros(3), 2.0), jg.zeros(4).uniform_(-1, 1), jg.zeros(4).normal_(),
                jg.zeros(4).bernoulli_(0.3), jg.zeros(4).random_(10)]
    jg.manual_seed(1234)
    a = draw()
    b = draw()
    jg.manual_seed(1234)
    c = draw()
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x.numpy(), z.numpy())
    assert not all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))
    assert not np.array_equal(a[0].numpy(), b[0].numpy())


def test_generator_isolation_and_generator_argument():
    g1, g2 = jg.Generator().manual_seed(7), jg.Generator().manual_seed(7)
    jg.manual_seed(0)
    d0 = jg.rand(4)
    a = jg.rand(4, generator=g1)
    jg.rand(100)                                    # draws from the default generator ...
    jg.randn(3, generator=jg.Generator())           # ... and from another one ...
    b = jg.rand(4, generator=g2)                    # ... do not move g2
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    jg.manual_seed(0)
    np.testing.assert_array_equal(jg.rand(4).numpy(), d0.numpy())    # g1/g2 did not move the default one
    for fn in (lambda g: jg.randn(3, generator=g), lambda g: jg.randint(5, (3,), generator=g),
               lambda g: jg.randperm(5, generator=g), lambda g: jg.multinomial(jg.ones(4), 2, generator=g),
               lambda g: jg.bernoulli(jg.full((4,), 0.5), generator=g),
               lambda g: jg.normal(0.0, 1.0, (3,), generator=g),
               lambda g: jg.zeros(3).uniform_(generator=g), lambda g: jg.zeros(3).normal_(generator=g),
               lambda g: jg.zeros(3).bernoulli_(generator=g), lambda g: jg.zeros(3).random_(9, generator=g)):
        g1.manual_seed(3)
        g2.manual_seed(3)
        np.testing.assert_array_equal(fn(g1).numpy(), fn(g2).numpy())
    with pytest.raises(TypeError, match="generator must be a jitgrad.Generator"):
        jg.rand(2, generator=3)


def test_seeds_state_round_trip_and_errors():
    g = jg.Generator()
    assert g.initial_seed() == 67280421310721 and g.device.type == "cpu"     # torch's default seed
    assert g.manual_seed(2 ** 64 - 1) is g and g.initial_seed() == 2 ** 64 - 1
    assert g.manual_seed(-5).initial_seed() == 2 ** 64 - 5        # negative seeds wrap, as in torch
    for bad in (2 ** 64, -2 ** 63 - 1):
        with pytest.raises(ValueError, match="Overflow"):
            g.manual_seed(bad)
    with pytest.raises(TypeError):
        g.manual_seed(1.5)
    s = g.seed()
    assert 0 <= s < 2 ** 64 and g.initial_seed() == s
    g.manual_seed(11)
    jg.rand(3, generator=g)
    st = g.get_state()
    assert st.dtype is jg.uint8 and st.shape == (16,)
    a = jg.rand(5, generator=g)
    jg.rand(5, generator=g)
    g.set_state(st)
    np.testing.assert_array_equal(jg.rand(5, generator=g).numpy(), a.numpy())
    assert g.initial_seed() == 11
    with pytest.raises(TypeError, match="ByteTensor"):
        g.set_state(jg.zeros(16))
    with pytest.raises(RuntimeError, match="size 16 but found the input RNG state size to be 3"):
        g.set_state(jg.from_numpy(np.zeros(3, np.uint8)))
    # the default generator, through the module functions
    assert jg.manual_seed(5) is jg.default_generator and jg.initial_seed() == 5
    st = jg.get_rng_state()
    x = jg.randn(4)
    jg.set_rng_state(st)
    np.testing.assert_array_equal(jg.randn(4).numpy(), x.numpy())
    s = jg.seed()
    assert jg.initial_seed() == s
    with pytest.raises(RuntimeError, match="no CUDA device"):
        jg.Generator(device="cuda")


# ---- distributions -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [jg.float32, jg.float64])
def test_uniform_and_normal_distributions(dtype):
    jg.manual_seed(2024)
    u = jg.rand(200_000, dtype=dtype).numpy()
    assert u.dtype == dtype.np and u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u[:20000], "uniform").pvalue > 1e-3
    assert abs(u.mean() - 0.5) < 0.005
    z = jg.randn(50_000, dtype=dtype).numpy()
    assert z.dtype == dtype.np and np.isfinite(z).all()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    assert stats.kstest(z[:20000], "norm").pvalue > 1e-3
    # the extremes of the mappings: all-one words give the largest value below 1, never 1.0
    from jitgrad.codegen.kernels import philox as kp
    ones = np.uint64(0xffffffff)
    assert kp._u53(ones, ones) == 1.0 - 2.0 ** -53


def test_randint_randperm_normal_bernoulli():
    jg.manual_seed(3)
    r = jg.randint(-3, 7, (20000,))
    assert r.dtype is jg.int64 and int(r.min()) == -3 and int(r.max()) == 6
    counts = np.bincount(r.numpy() + 3, minlength=10)
    assert stats.chisquare(counts).pvalue > 1e-3
    assert jg.randint(5, (2, 3), dtype=jg.int32).dtype is jg.int32
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to', but got from=3 >= to=2"):
        jg.randint(3, 2, (2,))
    p = jg.randperm(50)
    assert sorted(p.tolist()) == list(range(50)) and p.dtype is jg.int64
    assert jg.randperm(0).shape == (0,)
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        jg.randperm(-1)
    n = jg.normal(jg.full((20000,), 3.0), jg.full((20000,), 0.5)).numpy()
    assert abs(n.mean() - 3.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    assert jg.normal(2.0, 1.0, (2, 3)).shape == (2, 3)
    assert jg.normal(jg.zeros(2, 1, dtype=jg.float64), jg.ones(3)).shape == (2, 3)
    m = jg.zeros(4, requires_grad=True)
    assert not jg.normal(m, 1.0).requires_grad       # no gradient through a draw, as torch
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
        jg.normal(jg.zeros(2), -1.0)
    with pytest.raises(NotImplementedError, match="\"check_uniform_bounds\" not implemented for 'Long'"):
        jg.rand(2, dtype=jg.int64)
    with pytest.raises(NotImplementedError, match="\"normal_kernel_cpu\" not implemented for 'Int'"):
        jg.randn(2, dtype=jg.int32)
    b = jg.bernoulli(jg.full((20000,), 0.3, dtype=jg.float64))
    assert b.dtype is jg.float64 and set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(float(b.mean()) - 0.3) < 0.015
    assert float(jg.bernoulli(jg.zeros(100)).sum()) == 0 and float(jg.bernoulli(jg.ones(100)).sum()) == 100
    assert abs(float(jg.bernoulli(jg.zeros(20000), 0.8).mean()) - 0.8) < 0.015
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        jg.bernoulli(jg.tensor([1.5]))
    x = jg.zeros(10000, dtype=jg.float64)
    x.uniform_(2.0, 5.0)
    assert 2.0 <= float(x.min()) and float(x.max()) < 5.0
    x.random_(3, 6)
    assert set(np.unique(x.numpy())) == {3.0, 4.0, 5.0}
    x.normal_(1.0, 0.1)
    assert abs(float(x.mean()) - 1.0) < 0.01
    x.bernoulli_(0.25)
    assert abs(float(x.mean()) - 0.25) < 0.02
    w = jg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.uniform_()
    with jg.no_grad():
        w.uniform_()
    assert w.requires_grad and float(w.min()) >= 0


def test_multinomial_properties_and_errors():
    jg.manual_seed(9)
    probs = jg.tensor([0.1, 0.0, 0.6, 0.3])
    s = jg.multinomial(probs, 20000, replacement=True)
    assert s.dtype is jg.int64 and s.shape == (20000,)
    counts = np.bincount(s.numpy(), minlength=4)
    assert counts[1] == 0                           # a zero-probability category is never drawn
    expect = np.array([0.1, 0.6, 0.3]) * 20000
    assert stats.chisquare(counts[[0, 2, 3]], expect).pvalue > 1e-3
    w = jg.tensor([[1.0, 2.0, 0.0, 7.0], [5.0, 5.0, 5.0, 5.0]], dtype=jg.float64)   # weights need not sum to 1
    t = jg.multinomial(w, 3)
    assert t.shape == (2, 3)
    for row in t.tolist():
        assert len(set(row)) == 3                   # without replacement: distinct
    assert 2 not in t.tolist()[0]                   # zero weight comes last, after every positive one
    # without replacement, first draws follow the probabilities
    firsts = np.array([int(jg.multinomial(probs, 1)) for _ in range(3000)])
    assert abs((firsts == 2).mean() - 0.6) < 0.04 and (firsts == 1).sum() == 0
    assert probs.multinomial(2).shape == (2,)
    errors = [
        (lambda: jg.multinomial(jg.tensor([0.2, 0.8]), 3), "cannot sample n_sample > prob_dist.size\\(-1\\) samples"),
        (lambda: jg.multinomial(jg.tensor([0.2, 0.8]), 0), "cannot sample n_sample <= 0 samples"),
        (lambda: jg.multinomial(jg.tensor([-1.0, 2.0]), 1), "probability tensor contains either `inf`, `nan` or"),
        (lambda: jg.multinomial(jg.tensor([float("nan"), 1.0]), 1), "contains either `inf`, `nan`"),
        (lambda: jg.multinomial(jg.tensor([0.0, 0.0]), 1), "invalid multinomial distribution \\(sum of"),
        (lambda: jg.multinomial(jg.tensor([1, 2]), 1), "multinomial only supports floating-point dtypes"),
        (lambda: jg.multinomial(jg.ones(2, 2, 2), 1), "prob_dist must be 1 or 2 dim"),
    ]
    for fn, msg in errors:
        with pytest.raises(RuntimeError, match=msg):
            fn()


# ---- one_hot -----------------------------------------------------------------------------------------------------
def test_one_hot():
    y = F.one_hot(jg.tensor([[0, 2], [1, 0]]))
    assert y.dtype is jg.int64 and y.shape == (2, 2, 3)
    np.testing.assert_array_equal(y.numpy(), np.eye(3, dtype=np.int64)[[[0, 2], [1, 0]]])
    assert F.one_hot(jg.tensor([1]), 4).tolist() == [[0, 1, 0, 0]]
    assert F.one_hot(jg.tensor([], dtype=jg.int64), 3).shape == (0, 3)
    for fn, msg in [(lambda: F.one_hot(jg.tensor([1, 3]), 2), "Class values must be smaller than num_classes."),
                    (lambda: F.one_hot(jg.tensor([1, -1])), "Class values must be non-negative."),
                    (lambda: F.one_hot(jg.tensor([1.0, 2.0])), "only applicable to index tensor of type LongTensor"),
                    (lambda: F.one_hot(jg.tensor([], dtype=jg.int64)), "Can not infer total number of classes")]:
        with pytest.raises(RuntimeError, match=msg):
            fn()
    torch = pytest.importorskip("torch")
    idx = np.array([[3, 0, 1], [2, 2, 4]])
    np.testing.assert_array_equal(F.one_hot(jg.tensor(idx), 6).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor(idx), 6).numpy())
    f = jg.compile(lambda t: F.one_hot(t, 5))       # a fixed num_classes compiles
    np.testing.assert_array_equal(f(jg.tensor(idx)).numpy(), np.eye(5, dtype=np.int64)[idx])


# ---- dropout (eager) ---------------------------------------------------------------------------------------------
def test_dropout_eager():
    x = jg.ones(100, 100)
    jg.manual_seed(0)
    y = F.dropout(x, 0.3)
    vals = np.unique(y.numpy())
    np.testing.assert_allclose(vals, [0.0, 1 / 0.7], rtol=1e-6)
    kept = (y.numpy() != 0).mean()
    assert abs(kept - 0.7) < 0.015
    assert F.dropout(x, 0.3, training=False) is x and F.dropout(x, 0.0) is x
    assert float(F.dropout(x, 1.0).abs().sum()) == 0.0
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"dropout probability has to be between 0 and 1, but got {p}"):
            F.dropout(x, p)
        with pytest.raises(ValueError, match="dropout probability"):
            jg.nn.Dropout(p)
    z = jg.ones(10)
    assert F.dropout(z, 0.5, inplace=True) is z and set(np.unique(z.numpy())) <= {0.0, 2.0}
    m = jg.nn.Dropout(0.25)
    assert repr(m) == "Dropout(p=0.25, inplace=False)" and m.extra_repr() == "p=0.25, inplace=False"
    assert m.training and m.eval() is m and not m.training and m(x) is x
    m.train()
    jg.manual_seed(5)
    a = m(x)
    jg.manual_seed(5)
    np.testing.assert_array_equal(a.numpy(), F.dropout(x, 0.25).numpy())


def test_dropout_gradient_uses_the_forward_mask():
    x = jg.randn(6, 5, dtype=jg.float64, requires_grad=True)
    jg.manual_seed(1)
    y = F.dropout(x, 0.4)
    y.backward(jg.ones_like(y))
    mask = (y.detach().numpy() != 0) / 0.6
    np.testing.assert_allclose(x.grad.numpy(), mask)

    def fn(a):
        jg.manual_seed(42)        # the same mask at every evaluation
        return F.dropout(a * a, 0.4)
    assert jg.autograd.gradcheck(fn, (x,))
    assert jg.autograd.gradgradcheck(fn, (x,))


# ---- compiled ----------------------------------------------------------------------------------------------------
# few Numba graphs, shared by the tests below (background=False: the kernels really run from the first call)
_G = jg.Generator()


def _draws(xt):
    return (jg.rand(4, 8), jg.rand(5, dtype=jg.float64, generator=_G), jg.randn(6), jg.randn(3, 2, dtype=jg.float64),
            jg.randint(-2, 9, (64,)),
            xt.t() + jg.rand(3, 4),                 # a strided operand: a rank-2 loop nest (the flat index)
            jg.rand(3, 5).sum(1),                   # the draw inlined into a reduction loop
            jg.bernoulli(jg.full((16,), 0.5)))


def _train(x, w):
    h = F.dropout(x * w, 0.5)
    loss = (h * h).sum()
    loss.backward()
    return h.detach()


@pytest.fixture(scope="module")
def numba_fns():
    return {"drop": jg.compile(lambda x: F.dropout(x, 0.5), backend="numba", background=False),
            "draws": jg.compile(_draws, backend="numba", background=False),
            "train": jg.compile(_train, backend="numba", background=False)}


def _eq(a, b, exact=True):
    for x, y in zip(a, b):
        if exact or not x.is_floating_point():
            np.testing.assert_array_equal(x.numpy(), y.numpy())
        else:
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-6)


def test_compiled_draws_equal_eager_and_interpreter(numba_fns):
    xt = jg.randn(4, 3)
    interp = jg.compile(_draws, backend="interpret")
    outs = {}
    for name, fn in (("eager", _draws), ("interpret", interp), ("numba", numba_fns["draws"])):
        jg.manual_seed(77)
        _G.manual_seed(78)
        first = fn(xt)
        outs[name] = (first, fn(xt), jg.get_rng_state(), _G.get_state())
    for name in ("interpret", "numba"):
        for k in range(2):
            # uniform draws bit for bit; normals within float rounding of libm's log/cos
            _eq(outs["eager"][k], outs[name][k], exact=name == "interpret")
            _eq([outs["eager"][k][i] for i in (0, 1, 4, 5, 7)], [outs[name][k][i] for i in (0, 1, 4, 5, 7)])
        _eq(outs["eager"][2:], outs[name][2:])      # the generators advanced alike
    first, second = outs["numba"][:2]
    for a, b in zip(first, second):
        assert not np.array_equal(a.numpy(), b.numpy())     # a new draw at every call
    assert numba_fns["draws"].stats["traces"] == 1 and numba_fns["draws"].stats["compiled_calls"] >= 2


def test_compiled_dropout_new_mask_per_call_and_reproducible(numba_fns):
    f = numba_fns["drop"]
    x = jg.ones(64, 64)
    jg.manual_seed(0)
    a, b = f(x), f(x)
    assert not np.array_equal(a.numpy(), b.numpy())
    jg.manual_seed(0)
    np.testing.assert_array_equal(f(x).numpy(), a.numpy())
    np.testing.assert_array_equal(f(x).numpy(), b.numpy())
    jg.manual_seed(0)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), a.numpy())   # eager draws the same mask
    assert f.stats["traces"] == 1       # the seed and offset are graph inputs: reseeding never retraces
    # mask statistics: kept fraction ~ 1 - p per call, and a chi-square bound over 20 calls of 4096 elements
    jg.manual_seed(123)
    kept = np.array([(f(x).numpy() != 0).sum() for _ in range(20)])
    assert set(np.unique(f(x).numpy())) == {0.0, 2.0}
    n = 64 * 64
    chi2 = (((kept - n * 0.5) ** 2) / (n * 0.25)).sum()       # binomial variance n p (1 - p)
    assert stats.chi2.sf(chi2, df=20) > 1e-3
    # across positions: how often each element is kept over 40 calls follows Binomial(40, 1 - p)
    jg.manual_seed(321)
    times = np.sum([f(x).numpy() != 0 for _ in range(40)], axis=0).ravel()
    observed = np.bincount(times, minlength=41)
    expected = stats.binom(40, 0.5).pmf(np.arange(41)) * times.size
    lo, hi = 12, 28                                 # pool the tails (expected counts below 5)
    obs = np.r_[observed[:lo].sum(), observed[lo:hi + 1], observed[hi + 1:].sum()]
    exp = np.r_[expected[:lo].sum(), expected[lo:hi + 1], expected[hi + 1:].sum()]
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3


def test_compiled_dropout_backward_uses_the_mask(numba_fns):
    f = numba_fns["train"]
    w = jg.ones(8, 16)
    results = []
    for fn in (_train, f):
        x = jg.randn(8, 16, requires_grad=True) if not results else jg.tensor(results[0][2], requires_grad=True)
        jg.manual_seed(5)
        h = fn(x, w)
        results.append((h.numpy().copy(), x.grad.numpy().copy(), x.detach().numpy()))
        x.grad = None
        h2 = fn(x, w)
        assert not np.array_equal(h2.numpy(), h.numpy())
    (he, ge, xe), (hc, gc, _) = results
    np.testing.assert_allclose(hc, he, rtol=1e-6)
    mask = (hc != 0) * 2.0
    np.testing.assert_allclose(gc, 2 * hc * mask, rtol=1e-5)     # d/dx sum(h^2) = 2 h * mask * w
    np.testing.assert_allclose(gc, ge, rtol=1e-5)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_compiled_whole_array_draws_and_generators(backend):
    # randperm and multinomial run their NumPy impls as Python steps of the compiled graph
    g = jg.Generator().manual_seed(4)

    def fn(p):
        return (jg.randperm(10, generator=g), jg.multinomial(p, 5, True, generator=g), jg.multinomial(p, 2),
                jg.rand(0), jg.randn(()))
    f = jg.compile(fn, backend=backend, background=False)
    p = jg.tensor([0.5, 0.25, 0.25])
    jg.manual_seed(8)
    a = f(p)
    g.manual_seed(4)
    jg.manual_seed(8)
    e = fn(p)
    _eq(a, e)
    b = f(p)
    assert not np.array_equal(a[0].numpy(), b[0].numpy())
    assert sorted(b[0].tolist()) == list(range(10))
    from jitgrad.tracer import TraceError
    with pytest.raises(TraceError, match="initial_seed"):
        jg.compile(lambda x: x + g.initial_seed())(jg.ones(1))


def test_compiled_dropout_inside_an_eager_graph():
    # the compiled forward returns the mask as a residual: the backward graph multiplies by the same mask
    f = jg.compile(lambda x: F.dropout(x * 3.0, 0.5))
    x = jg.randn(5, 4, dtype=jg.float64, requires_grad=True)
    y = f(x)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (y.detach().numpy() != 0) * 6.0)
    jg.manual_seed(3)
    assert jg.autograd.gradcheck(lambda a: (jg.manual_seed(3), f(a))[1], (x,))
