"""``F.embedding_bag`` / ``nn.EmbeddingBag`` and ``F.ctc_loss`` / ``nn.CTCLoss`` against torch 2.13: values,
dtypes, shapes and gradients (float64; CTC's through ``log_softmax``, where torch's gradient is the exact one),
gradcheck and gradgradcheck, torch's errors and reprs, and a sequence-model step using both compiled on the
interpreter and with Numba against eager."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

W = np.random.default_rng(0).standard_normal((7, 3))
INPUT = np.array([1, 2, 4, 5, 4, 3, 2, 0, 6, 6])
OFFSETS = np.array([0, 3, 3, 7])


def _bag(m, kw, psw=False, inp=INPUT, offsets=OFFSETS):
    w = m.tensor(W, requires_grad=True)
    p = m.tensor(np.linspace(-1, 1, inp.size).reshape(inp.shape), requires_grad=True) if psw else None
    out = m.nn.functional.embedding_bag(m.tensor(inp), w, None if offsets is None else m.tensor(offsets),
                                        per_sample_weights=p, **kw)
    out.backward(m.tensor(np.arange(out.numel(), dtype=float).reshape(tuple(out.shape))))
    return out.detach().numpy(), str(out.dtype).split(".")[-1], w.grad.numpy(), None if p is None else p.grad.numpy()


BAGS = [dict(mode="sum"), dict(mode="mean"), dict(mode="max"), dict(mode="sum", padding_idx=4),
        dict(mode="mean", padding_idx=-5), dict(mode="max", padding_idx=6)]


@pytest.mark.parametrize("kw", BAGS, ids=str)
@pytest.mark.parametrize("form", ["offsets", "last_offset", "2d"])
def test_embedding_bag_matches_torch(kw, form):
    inp, offsets = INPUT, OFFSETS
    if form == "last_offset":       # (torch's float64 and float32 kernels disagree when the last offset < len)
        kw, offsets = dict(kw, include_last_offset=True), np.append(OFFSETS, INPUT.size)
    elif form == "2d":
        inp, offsets = INPUT[:8].reshape(2, 4), None
    j, t = _bag(jg, kw, inp=inp, offsets=offsets), _bag(torch, kw, inp=inp, offsets=offsets)
    assert j[0].shape == t[0].shape and j[1] == t[1]
    np.testing.assert_allclose(j[0], t[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(j[2], t[2], rtol=1e-12, atol=1e-14)


def test_embedding_bag_per_sample_weights_match_torch():
    j, t = _bag(jg, dict(mode="sum"), psw=True), _bag(torch, dict(mode="sum"), psw=True)
    for a, b in zip(j[:1] + j[2:], t[:1] + t[2:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_embedding_bag_module_and_from_pretrained():
    t = torch.nn.EmbeddingBag(7, 3, mode="max", padding_idx=2)
    j = jg.nn.EmbeddingBag(7, 3, mode="max", padding_idx=2)
    assert repr(j) == repr(t) and list(j.state_dict()) == list(t.state_dict())
    assert float(j.weight[2].abs().sum()) == 0.0
    tp = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(W), mode="sum", include_last_offset=True)
    jp = jg.nn.EmbeddingBag.from_pretrained(jg.tensor(W), mode="sum", include_last_offset=True)
    assert repr(jp) == repr(tp) and jp.weight.requires_grad is tp.weight.requires_grad is False
    offs = np.append(OFFSETS, INPUT.size)
    np.testing.assert_allclose(jp(jg.tensor(INPUT), jg.tensor(offs)).numpy(),
                               tp(torch.tensor(INPUT), torch.tensor(offs)).numpy(), rtol=1e-12)
    assert jg.nn.EmbeddingBag.from_pretrained(jg.tensor(W), freeze=False).weight.requires_grad


def _same_error(fn):
    with pytest.raises(Exception) as te:
        fn(torch)
    with pytest.raises(type(te.value)) as je:
        fn(jg)
    assert str(je.value).replace("jitgrad.runtime.tensor.Tensor", "torch.Tensor") == str(te.value)


BAG_ERRORS = [
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 2]), m.ones(5, 3)),
    lambda m: m.nn.functional.embedding_bag(m.tensor([[1, 2]]), m.ones(5, 3), m.tensor([0])),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 2]), m.ones(5, 3), m.tensor([1])),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 7]), m.ones(5, 3), m.tensor([0])),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1., 2.]), m.ones(5, 3), m.tensor([0])),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 2]), m.ones(5, 3), m.tensor([0]), mode="max",
                                            per_sample_weights=m.ones(2)),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 2]), m.ones(5, 3), m.tensor([0]), mode="foo"),
    lambda m: m.nn.functional.embedding_bag(m.tensor([1, 2]), m.ones(5, 3), m.tensor([0]), mode="sum",
                                            per_sample_weights=m.ones(3)),
]


@pytest.mark.parametrize("i", range(len(BAG_ERRORS)))
def test_embedding_bag_errors_are_torchs(i):
    _same_error(BAG_ERRORS[i])


# ---- CTC --------------------------------------------------------------------------------------------------

T, N, C = 7, 3, 5
Z = np.random.default_rng(1).standard_normal((T, N, C))
TARGETS = np.array([[1, 2, 2, 0], [3, 3, 1, 4], [4, 1, 2, 3]])


def _ctc(m, z=Z, targets=TARGETS, il=(7, 5, 7), tl=(3, 2, 4), as_tensors=False, **kw):
    zt = m.tensor(z, requires_grad=True)
    lp = zt.log_softmax(-1)
    if as_tensors:
        il, tl = m.tensor(list(il)), m.tensor(list(tl))
    loss = m.nn.functional.ctc_loss(lp, m.tensor(targets), il, tl, **kw)
    loss.backward(m.tensor(np.linspace(0.5, 1.5, loss.numel()).reshape(tuple(loss.shape))))
    return loss.detach().numpy(), str(loss.dtype).split(".")[-1], zt.grad.numpy()


CTC = [dict(), dict(reduction="none"), dict(reduction="sum", blank=4), dict(as_tensors=True, reduction="sum"),
       dict(targets=np.array([1, 2, 2, 3, 3, 4, 1, 2, 3])),                                # concatenated targets
       dict(reduction="none", il=(7, 2, 3), zero_infinity=True),                           # impossible alignments
       dict(tl=(0, 1, 4), il=(7, 0, 7), zero_infinity=True),                               # empty target, T = 0
       dict(z=Z[:, 0], targets=TARGETS[0, :3], il=(7,), tl=(3,), reduction="none"),        # unbatched
       dict(z=Z[:, 0], targets=TARGETS[0, :3], il=(6,), tl=(3,))]


@pytest.mark.parametrize("kw", CTC, ids=str)
def test_ctc_loss_matches_torch(kw):
    j, t = _ctc(jg, **kw), _ctc(torch, **kw)
    assert j[0].shape == t[0].shape and j[1] == t[1]
    np.testing.assert_allclose(j[0], t[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(j[2], t[2], rtol=1e-11, atol=1e-13)


def test_ctc_loss_float32_and_module():
    lp = Z.astype(np.float32)
    t = torch.nn.CTCLoss()(torch.tensor(lp).log_softmax(2), torch.tensor(TARGETS), (7, 5, 7), (3, 2, 3))
    j = jg.nn.CTCLoss()(jg.tensor(lp).log_softmax(2), jg.tensor(TARGETS), (7, 5, 7), (3, 2, 3))
    assert j.dtype is jg.float32 and j.shape == ()
    assert abs(j.item() - t.item()) < 1e-5
    assert repr(jg.nn.CTCLoss(zero_infinity=True)) == repr(torch.nn.CTCLoss(zero_infinity=True))


def test_ctc_gradcheck_and_gradgradcheck():
    z = jg.tensor(Z[:4, :2, :4], requires_grad=True)
    tg = jg.tensor([[1, 2], [3, 3]])
    for red in ("mean", "none"):
        f = lambda z: jg.nn.functional.ctc_loss(z.log_softmax(2), tg, (4, 3), (2, 1), reduction=red)  # noqa: E731
        assert gradcheck(f, (z,))
        assert gradgradcheck(f, (z,))
    # the exact derivative with respect to log_probs themselves (torch's adds exp(log_probs): see nn/functional/ctc.py)
    lp = jg.tensor(Z[:4, :2, :4], requires_grad=True)
    assert gradcheck(lambda lp: jg.nn.functional.ctc_loss(lp, tg, (4, 3), (2, 1)), (lp,))


def test_ctc_target_holding_the_blank_matches_torchs_value_with_the_exact_gradient():
    """torch's forward allows a target symbol equal to ``blank``; its gradient then fails torch's own gradcheck,
    jitgrad's (reverse mode through the same recursion) passes it."""
    j, t = _ctc(jg, blank=2), _ctc(torch, blank=2)
    np.testing.assert_allclose(j[0], t[0], rtol=1e-12)
    f = lambda z: jg.nn.functional.ctc_loss(z.log_softmax(2), jg.tensor(TARGETS), (7, 5, 7), (3, 2, 4),  # noqa
                                            blank=2)
    assert gradcheck(f, (jg.tensor(Z, requires_grad=True),))


CTC_ERRORS = [
    lambda m: m.nn.functional.ctc_loss(m.zeros(5, 2, 4), m.tensor([[1, 2], [1, 1]]), [5, 5], [2, 3]),
    lambda m: m.nn.functional.ctc_loss(m.zeros(5, 2, 4), m.tensor([[1, 2], [1, 1]]), [6, 5], [2, 2]),
    lambda m: m.nn.functional.ctc_loss(m.zeros(5, 2, 4), m.tensor([[1, 2], [1, 1]]), [5], [2, 2]),
    lambda m: m.nn.functional.ctc_loss(m.zeros(5, 2, 4), m.tensor([[1, 2], [1, 1]]), [5, 5], [2, 2], blank=4),
    lambda m: m.nn.functional.ctc_loss(m.zeros(5, 2, 4), m.tensor([[1, 2], [1, 1]]), [5, 5], [2, 2],
                                       reduction="foo"),
]


@pytest.mark.parametrize("i", range(len(CTC_ERRORS)))
def test_ctc_errors_are_torchs(i):
    _same_error(CTC_ERRORS[i])


# ---- compiled --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_bag_of_words_ctc_step_compiled_matches_eager(backend):
    nn = jg.nn
    inp, offs = jg.tensor(INPUT), jg.tensor(OFFSETS[:3])
    tg, il, tl = jg.tensor([[1, 2], [3, 3], [2, 0]]), jg.tensor([4, 3, 4]), jg.tensor([2, 2, 1])

    def make():
        jg.manual_seed(0)
        return nn.ModuleList([nn.EmbeddingBag(7, 6, mode="max", padding_idx=0),
                              nn.EmbeddingBag(7, 6, mode="mean"), nn.Conv1d(6, 5, 3, padding=1),
                              nn.CTCLoss(blank=0)]).double()
    runs = []
    for compiled in (False, True):
        m = make()
        opt = jg.optim.SGD(m.parameters(), lr=0.1)

        def step(inp, offs, tg, il, tl):
            opt.zero_grad()
            h = m[0](inp, offs) + m[1](inp, offs, None)                  # (3 bags, 6)
            seq = h.unsqueeze(-1).expand(3, 6, 4) * jg.arange(1., 5.).double()
            lp = m[2](seq).permute(2, 0, 1).log_softmax(2)               # (T=4, N=3, C=5)
            loss = m[3](lp, tg, il, tl)
            loss.backward()
            opt.step()
            return loss.detach()
        f = jg.compile(step, backend=backend) if compiled else step
        losses = [f(inp, offs, tg, il, tl).item() for _ in range(3)]
        runs.append((losses, [t.detach().numpy().copy() for t in m.parameters()]))
    assert runs[0][0][2] < runs[0][0][0]
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
