"""The losses and distances torch has and jitgrad lacked: smooth_l1, huber, binary_cross_entropy, gaussian_nll,
poisson_nll, multilabel_soft_margin, margin_ranking, hinge_embedding, cosine_embedding, soft_margin, multi_margin,
triplet_margin; cosine_similarity, pairwise_distance, pdist; and their modules.  Values and gradients against
torch for every reduction (and the deprecated size_average/reduce), gradcheck/gradgradcheck in float64, eager ==
compiled (interpreter and Numba), torch's errors."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 5))
Y = rng.standard_normal((4, 5))
Z = rng.standard_normal((4, 5))
P = rng.uniform(0.05, 0.95, (4, 5))
T01 = rng.uniform(0, 1, (4, 5))
B01 = (rng.uniform(0, 1, (4, 5)) > 0.5).astype(np.float64)
PM1 = np.where(rng.uniform(0, 1, (4, 5)) > 0.5, 1.0, -1.0)
PM1_ROWS = np.array([1.0, -1.0, 1.0, -1.0])
CLS = np.array([0, 3, 4, 1])
W5 = rng.uniform(0.5, 2.0, (5,))
# the kinks: |d| == beta/delta, a margin hit exactly
KINK = np.array([[0.0, 1.0, -1.0, 0.5, 2.0]])

CASES = [
    ("smooth_l1_loss", (X, Y), {}), ("smooth_l1_loss", (X, Y), {"beta": 0.5}),
    ("smooth_l1_loss", (X, Y), {"beta": 0.0}),
    ("smooth_l1_loss", (KINK, np.zeros((1, 5))), {}), ("huber_loss", (X, Y), {"delta": 0.7}),
    ("huber_loss", (KINK, np.zeros((1, 5))), {}), ("huber_loss", (X, Y), {"weight": P}),
    ("l1_loss", (X, Y), {}),
    ("binary_cross_entropy", (P, T01), {}), ("binary_cross_entropy", (P, B01), {"weight": W5}),
    ("gaussian_nll_loss", (X, Y, P), {}), ("gaussian_nll_loss", (X, Y, P[:, 0]), {"full": True}),
    ("gaussian_nll_loss", (X, Y, P[:, :1]), {"eps": 0.2}), ("gaussian_nll_loss", (X, Y, 0.5), {}),
    ("poisson_nll_loss", (X, T01 * 3), {}), ("poisson_nll_loss", (P, T01 * 3), {"log_input": False, "full": True}),
    ("multilabel_soft_margin_loss", (X, B01), {}), ("multilabel_soft_margin_loss", (X, B01), {"weight": W5}),
    ("margin_ranking_loss", (X, Y, PM1), {}), ("margin_ranking_loss", (X, Y, PM1), {"margin": 0.3}),
    ("hinge_embedding_loss", (X, PM1), {}), ("hinge_embedding_loss", (X, PM1), {"margin": 0.5}),
    ("cosine_embedding_loss", (X, Y, PM1_ROWS), {}), ("cosine_embedding_loss", (X, Y, PM1_ROWS), {"margin": -0.2}),
    ("cosine_embedding_loss", (X[0], Y[0], np.array(-1.0)), {}),
    ("soft_margin_loss", (X, PM1), {}),
    ("multi_margin_loss", (X, CLS), {}), ("multi_margin_loss", (X, CLS), {"p": 2, "margin": 0.5, "weight": W5}),
    ("multi_margin_loss", (X[0], np.array(2)), {}),
    ("triplet_margin_loss", (X, Y, Z), {}), ("triplet_margin_loss", (X, Y, Z), {"p": 1, "swap": True, "margin": 2.0}),
]
REDUCTIONS = ["mean", "sum", "none"]


def _pair(a):
    if isinstance(a, float):
        return a, a
    # labels (integers, or +-1 targets: torch refuses a gradient for soft_margin_loss's) take none
    diff = np.asarray(a).dtype.kind == "f" and not np.isin(a, (-1.0, 1.0)).all()
    return jg.tensor(a, requires_grad=diff), torch.tensor(a, requires_grad=diff)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name,arrays,kw", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_loss_values_and_grads_match_torch(name, arrays, kw, reduction):
    pairs = [_pair(a) for a in arrays]
    jkw = {k: jg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    y = getattr(F, name)(*[p[0] for p in pairs], reduction=reduction, **jkw)
    ty = getattr(TF, name)(*[p[1] for p in pairs], reduction=reduction, **tkw)
    assert tuple(y.shape) == tuple(ty.shape) and y.dtype is jg.float64
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    w = np.linspace(0.5, 1.5, max(1, y.numel())).reshape(tuple(y.shape))
    (y * jg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for jp, tp in pairs:
        if isinstance(jp, jg.Tensor) and jp.requires_grad:
            np.testing.assert_allclose(jp.grad.numpy(), tp.grad.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name,arrays", [("smooth_l1_loss", (X, Y)), ("binary_cross_entropy", (P, T01)),
                                         ("soft_margin_loss", (X, PM1)), ("margin_ranking_loss", (X, Y, PM1)),
                                         ("multi_margin_loss", (X, CLS)), ("triplet_margin_loss", (X, Y, Z)),
                                         ("poisson_nll_loss", (X, T01)), ("hinge_embedding_loss", (X, PM1)),
                                         ("cosine_embedding_loss", (X, Y, PM1_ROWS)),
                                         ("multilabel_soft_margin_loss", (X, B01))])
@pytest.mark.parametrize("size_average,reduce", [(False, None), (None, False), (True, True)])
def test_deprecated_size_average_and_reduce(name, arrays, size_average, reduce):
    pairs = [_pair(a) for a in arrays]
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        y = getattr(F, name)(*[p[0] for p in pairs], size_average=size_average, reduce=reduce)
    with pytest.warns(UserWarning):
        ty = getattr(TF, name)(*[p[1] for p in pairs], size_average=size_average, reduce=reduce)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)


def test_binary_cross_entropy_saturated_probabilities():
    x = np.array([0.0, 1.0, 0.0, 1.0, 1e-50])
    t = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    jx, tx = _pair(x)
    y, ty = F.binary_cross_entropy(jx, jg.tensor(t), reduction="none"), TF.binary_cross_entropy(
        tx, torch.tensor(t), reduction="none")
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())      # -100 clamps
    y.sum().backward()
    assert np.isfinite(jx.grad.numpy()).all()


DIST_CASES = [("cosine_similarity", (X, Y), {}), ("cosine_similarity", (X, Y[:1]), {"dim": 1}),
              ("cosine_similarity", (X, Y), {"dim": 0, "eps": 0.5}),
              ("cosine_similarity", (np.zeros((2, 3)), Y[:2, :3]), {}),
              ("pairwise_distance", (X, Y), {}), ("pairwise_distance", (X, Y[0]), {"p": 1.0, "keepdim": True}),
              ("pairwise_distance", (X, Y), {"p": 3.0, "eps": 0.0}),
              ("pdist", (X,), {}), ("pdist", (X,), {"p": 1}), ("pdist", (X,), {"p": 3.5})]


@pytest.mark.parametrize("name,arrays,kw", DIST_CASES)
def test_distances_match_torch(name, arrays, kw):
    pairs = [_pair(a) for a in arrays]
    y, ty = getattr(F, name)(*[p[0] for p in pairs], **kw), getattr(TF, name)(*[p[1] for p in pairs], **kw)
    assert tuple(y.shape) == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for jp, tp in pairs:
        np.testing.assert_allclose(jp.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-13)


MODULES = [("L1Loss", (), (X, Y)), ("SmoothL1Loss", (None, None, "sum", 0.5), (X, Y)),
           ("HuberLoss", ("none", 0.5), (X, Y)),
           ("BCELoss", (), (P, T01)), ("MultiLabelSoftMarginLoss", (), (X, B01)), ("SoftMarginLoss", (), (X, PM1)),
           ("MarginRankingLoss", (0.2,), (X, Y, PM1)), ("HingeEmbeddingLoss", (0.5,), (X, PM1)),
           ("CosineEmbeddingLoss", (0.1,), (X, Y, PM1_ROWS)), ("MultiMarginLoss", (2, 0.7), (X, CLS)),
           ("GaussianNLLLoss", (), (X, Y, P)), ("PoissonNLLLoss", (False, True), (P, T01 * 3)),
           ("TripletMarginLoss", (0.5, 1.0), (X, Y, Z)), ("CosineSimilarity", (0,), (X, Y)),
           ("PairwiseDistance", (1.0, 1e-3, True), (X, Y))]


@pytest.mark.parametrize("name,args,arrays", MODULES)
def test_loss_modules_match_torch(name, args, arrays):
    m, t = getattr(jg.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(m) == repr(t)
    pairs = [_pair(a) for a in arrays]
    y, ty = m(*[p[0] for p in pairs]), t(*[p[1] for p in pairs])
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(pairs[0][0].grad.numpy(), pairs[0][1].grad.numpy(), rtol=1e-10, atol=1e-14)


def test_weighted_loss_modules_keep_weight_as_buffer():
    m = jg.nn.BCELoss(weight=jg.tensor(W5))
    assert "weight" in dict(m.named_buffers())
    np.testing.assert_allclose(m(jg.tensor(P), jg.tensor(T01)).item(),
                               torch.nn.BCELoss(torch.tensor(W5))(torch.tensor(P), torch.tensor(T01)).item())
    m = jg.nn.MultiMarginLoss(weight=jg.tensor(W5))
    np.testing.assert_allclose(m(jg.tensor(X), jg.tensor(CLS)).item(),
                               torch.nn.MultiMarginLoss(weight=torch.tensor(W5))(torch.tensor(X),
                                                                                 torch.tensor(CLS)).item())


def test_gradcheck_and_gradgradcheck():
    x = jg.tensor(X[:2, :3], requires_grad=True)
    y = jg.tensor(Y[:2, :3], requires_grad=True)
    z = jg.tensor(Z[:2, :3], requires_grad=True)
    p = jg.tensor(P[:2, :3], requires_grad=True)
    t01, pm1 = jg.tensor(T01[:2, :3]), jg.tensor(PM1[:2, :3])
    fns = [(lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), (x, y)),
           (lambda x, y: F.huber_loss(x, y, delta=0.3), (x, y)),
           (lambda p: F.binary_cross_entropy(p, t01), (p,)), (lambda x, y, p: F.gaussian_nll_loss(x, y, p), (x, y, p)),
           (lambda x: F.poisson_nll_loss(x, t01 * 3), (x,)), (lambda x: F.soft_margin_loss(x, pm1), (x,)),
           (lambda x: F.multilabel_soft_margin_loss(x, t01), (x,)),
           (lambda x, y: F.cosine_embedding_loss(x, y, jg.tensor([1.0, -1.0]), margin=-1.0), (x, y)),
           (lambda x, y: F.cosine_similarity(x, y), (x, y)), (lambda x, y: F.pairwise_distance(x, y), (x, y)),
           (lambda x: F.pdist(x, 3), (x,)), (lambda x, y, z: F.triplet_margin_loss(x, y, z, margin=5.0), (x, y, z)),
           (lambda x: F.multi_margin_loss(x, jg.tensor([0, 2]), p=2, margin=5.0), (x,))]
    for f, args in fns:
        assert gradcheck(f, args) and gradgradcheck(f, args)


def test_errors_as_torch():
    a, b = jg.rand(2, 3), jg.rand(2, 3)
    cases = [
        (RuntimeError, "smooth_l1_loss does not support negative values for beta.",
         lambda: F.smooth_l1_loss(a, b, beta=-1)),
        (RuntimeError, "huber_loss does not support non-positive values for delta.",
         lambda: F.huber_loss(a, b, delta=0)),
        (ValueError, "Weights and input must have the same size.", lambda: F.huber_loss(a, b, weight=jg.rand(3))),
        (ValueError, r"Using a target size \(torch.Size\(\[3\]\)\) that is different to the input size "
                     r"\(torch.Size\(\[2, 3\]\)\) is deprecated", lambda: F.binary_cross_entropy(a, jg.rand(3))),
        (RuntimeError, "all elements of input should be between 0 and 1", lambda: F.binary_cross_entropy(a + 1, b)),
        (ValueError, "var is of incorrect size", lambda: F.gaussian_nll_loss(a, b, jg.rand(4))),
        (ValueError, "var has negative entry/entries", lambda: F.gaussian_nll_loss(a, b, -b)),
        (ValueError, "x is not a valid value for reduction", lambda: F.poisson_nll_loss(a, b, reduction="x")),
        (ValueError, "only p == 1 and p == 2 supported", lambda: F.multi_margin_loss(a, jg.tensor([0, 1]), p=3)),
        (RuntimeError, "target out of range", lambda: F.multi_margin_loss(a, jg.tensor([0, 5]))),
        (RuntimeError, r"Expected target size \[2\], but got \[3\]",
         lambda: F.multi_margin_loss(a, jg.tensor([0, 1, 1]))),
        (ValueError, "margin must be greater than 0, got 0", lambda: F.triplet_margin_loss(a, a, a, margin=0)),
        (RuntimeError, "anchor 2D, positive 2D, and negative 1D inputs",
         lambda: F.triplet_margin_loss(a, a, jg.rand(3))),
        (RuntimeError, r"All input tensors should have same dimension but got sizes: input1: torch.Size\(\[2, 3\]\)",
         lambda: F.margin_ranking_loss(a, b, jg.rand(3))),
        (RuntimeError, r"0D target tensor expects 1D input tensors, but found inputs with sizes \[2, 3\] and \[2, 3\]",
         lambda: F.cosine_embedding_loss(a, b, jg.tensor(1.0))),
        (RuntimeError, "pdist only supports 2D tensors, got: 1D", lambda: F.pdist(jg.rand(3))),
        (RuntimeError, "pdist only supports non-negative p values", lambda: F.pdist(a, -1)),
        (IndexError, "Dimension out of range", lambda: F.cosine_similarity(a, b, 2)),
        (ValueError, "MultiMarginLoss: expected weight to be None or 1D tensor, got 2D instead",
         lambda: jg.nn.MultiMarginLoss(weight=jg.rand(2, 2))),
        (ValueError, "TripletMarginLoss: expected margin to be greater than 0, got 0 instead",
         lambda: jg.nn.TripletMarginLoss(0)),
    ]
    for exc, msg, f in cases:
        with pytest.raises(exc, match=msg):
            f()
    for name in ("smooth_l1_loss", "l1_loss", "huber_loss"):
        with pytest.warns(UserWarning, match=r"Using a target size \(torch.Size\(\[3\]\)\) that is different to "
                                             r"the input size \(torch.Size\(\[2, 3\]\)\)"):
            getattr(F, name)(a, jg.rand(3))


def _program(x, y, z, p):
    t01 = p.detach() * 0.5 + 0.25
    pm1 = jg.where(z.detach() > 0, 1.0, -1.0)
    return (F.smooth_l1_loss(x, y, beta=0.5), F.huber_loss(x, y, reduction="none"), F.binary_cross_entropy(p, t01),
            F.gaussian_nll_loss(x, y, p), F.poisson_nll_loss(x, t01, full=True), F.soft_margin_loss(x, pm1),
            F.multilabel_soft_margin_loss(x, t01), F.margin_ranking_loss(x, y, pm1),
            F.hinge_embedding_loss(x, pm1), F.cosine_embedding_loss(x, y, pm1[:, 0]),
            F.multi_margin_loss(x, jg.tensor(CLS[:3])), F.triplet_margin_loss(x, y, z, swap=True),
            F.cosine_similarity(x, y), F.pairwise_distance(x, z), F.pdist(y))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_eager_equals_compiled(backend):
    arrays = [X[:3], Y[:3], Z[:3], P[:3]]

    def step(x, y, z, p):
        outs = _program(x, y, z, p)
        sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
        return outs

    es = [jg.tensor(a, requires_grad=True) for a in arrays]
    eager = step(*es)
    cs = [jg.tensor(a, requires_grad=True) for a in arrays]
    compiled = jg.compile(step, backend=backend)(*cs)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=1e-12, atol=1e-14)
    for e, c in zip(es, cs):
        np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-12, atol=1e-14)
