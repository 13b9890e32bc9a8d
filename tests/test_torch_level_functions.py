"""The ``torch.*`` forms of ``nn.functional`` functions (``nn/torch_level.py``): each called as torch's own
``torch.<name>`` is called, against torch (values and gradients), and torch's refusal of a missing argument."""
import numpy as np
import pytest

import jitgrad as jg

torch = pytest.importorskip("torch")


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# name -> (the arrays, a call taking the library and its tensors)
CASES = {
    "conv1d": ([_x((2, 3, 7)), _x((4, 3, 3), 1)], lambda m, x, w: m.conv1d(x, w, None, 2, 1)),
    "conv2d": ([_x((1, 2, 5, 5)), _x((3, 2, 3, 3), 1)], lambda m, x, w: m.conv2d(x, w, padding=1)),
    "conv_transpose1d": ([_x((1, 2, 4)), _x((2, 3, 3), 1)], lambda m, x, w: m.conv_transpose1d(x, w, stride=2)),
    "conv_transpose2d": ([_x((1, 2, 3, 3)), _x((2, 1, 2, 2), 1)], lambda m, x, w: m.conv_transpose2d(x, w)),
    "avg_pool1d": ([_x((2, 3, 8))], lambda m, x: m.avg_pool1d(x, 3, 2, 1)),
    "adaptive_avg_pool1d": ([_x((2, 3, 8))], lambda m, x: m.adaptive_avg_pool1d(x, 3)),
    "bilinear": ([_x((4, 3)), _x((4, 2), 1), _x((5, 3, 2), 2)], lambda m, a, b, w: m.bilinear(a, b, w)),
    "channel_shuffle": ([_x((1, 6, 2, 2))], lambda m, x: m.channel_shuffle(x, 3)),
    "cosine_similarity": ([_x((4, 5)), _x((4, 5), 1)], lambda m, a, b: m.cosine_similarity(a, b, 1)),
    "pairwise_distance": ([_x((4, 5)), _x((4, 5), 1)], lambda m, a, b: m.pairwise_distance(a, b, 3.0)),
    "pdist": ([_x((4, 5))], lambda m, x: m.pdist(x)),
    "pixel_shuffle": ([_x((1, 8, 2, 3))], lambda m, x: m.pixel_shuffle(x, 2)),
    "pixel_unshuffle": ([_x((1, 2, 4, 6))], lambda m, x: m.pixel_unshuffle(x, 2)),
    "hardshrink": ([_x((3, 4))], lambda m, x: m.hardshrink(x, 0.3)),
    "prelu": ([_x((2, 3, 4)), np.array([0.1, 0.2, 0.3])], lambda m, x, w: m.prelu(x, w)),
    "dropout": ([_x((3, 4))], lambda m, x: m.dropout(x, 0.3, False)),
    "alpha_dropout": ([_x((3, 4))], lambda m, x: m.alpha_dropout(x, 0.3, False)),
    "feature_alpha_dropout": ([_x((3, 4))], lambda m, x: m.feature_alpha_dropout(x, 0.3, False)),
    "layer_norm": ([_x((2, 3, 4)), _x((4,), 1), _x((4,), 2)], lambda m, x, w, b: m.layer_norm(x, [4], w, b, 1e-3, True)),
    "group_norm": ([_x((2, 4, 3)), _x((4,), 1), _x((4,), 2)], lambda m, x, w, b: m.group_norm(x, 2, w, b, 1e-5, True)),
    "rms_norm": ([_x((2, 3, 4)), _x((4,), 1)], lambda m, x, w: m.rms_norm(x, [4], w, 1e-6)),
    "batch_norm": ([_x((4, 3, 2)), _x((3,), 1), _x((3,), 2)],
                   lambda m, x, w, b: m.batch_norm(x, w, b, None, None, True, 0.1, 1e-5, True)),
    "instance_norm": ([_x((2, 3, 5)), _x((3,), 1), _x((3,), 2)],
                      lambda m, x, w, b: m.instance_norm(x, w, b, None, None, True, 0.1, 1e-5, True)),
    "embedding": ([_x((6, 3))], lambda m, w: m.embedding(w, m.tensor([[0, 5], [2, 2]]), 2)),
    "max_pool1d": ([_x((2, 3, 9))], lambda m, x: m.max_pool1d(x, 3)),
    "max_pool2d": ([_x((1, 2, 5, 6))], lambda m, x: m.max_pool2d(x, 2, 1, 1)),
    "max_pool1d_with_indices": ([_x((2, 3, 9))], lambda m, x: m.max_pool1d_with_indices(x, 3, 2)),
    "celu": ([_x((3, 4))], lambda m, x: m.celu(x, 0.7)),
    "selu": ([_x((3, 4))], lambda m, x: m.selu(x)),
    "rrelu": ([_x((3, 4))], lambda m, x: m.rrelu(x, 0.1, 0.3)),         # eval: the mean slope
    "threshold": ([_x((3, 4))], lambda m, x: m.threshold(x, 0.1, -2.0)),
}


def _run(m, name):
    arrays, call = CASES[name]
    ts = [m.tensor(a, requires_grad=True) for a in arrays]
    out = call(m, *ts)
    outs = out if isinstance(out, tuple) else (out,)
    vals = [o.detach().numpy() for o in outs]
    loss = (outs[0] * m.tensor(np.linspace(-1, 1, outs[0].numel()).reshape(tuple(outs[0].shape)))).sum()
    grads = m.autograd.grad(loss, ts)
    return vals, [g.numpy() for g in grads]


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_level_form_matches_torch(name):
    (jv, jgr), (tv, tgr) = _run(jg, name), _run(torch, name)
    for a, b in zip(jv + jgr, tv + tgr):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)     # (celu: torch rounds its grad 1e-8)


def _torch_level_names():
    """The jitgrad-level names declared by nn/ (F's functions and nn/torch_level.py's ATen forms)."""
    from jitgrad.publisher import PUBLISHED
    return {n for (where, n), d in PUBLISHED.items() if where == "jitgrad" and d.module.startswith("jitgrad.nn.")}


def test_every_torch_level_name_is_torchs():
    from jitgrad.nn import functional as F, torch_level
    names = _torch_level_names()
    assert {"conv2d", "dropout", "embedding", "layer_norm", "pixel_shuffle", "hardshrink"} <= names
    for n in names:
        assert hasattr(torch, n), n
        # torch.<n> is F.<n> itself, or the ATen-signature form declared in nn/torch_level.py
        assert getattr(jg, n) is getattr(F, n, None) or getattr(jg, n) is getattr(torch_level, n), n
    assert set(CASES) <= names


def test_in_place_forms_and_required_arguments():
    for name, args in (("celu_", (0.5,)), ("selu_", ()), ("relu_", ()), ("threshold_", (0.0, 9.0))):
        x = _x((3, 4))
        a, b = jg.tensor(x), torch.tensor(x)
        assert getattr(jg, name)(a, *args) is a
        getattr(torch, name)(b, *args)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    with pytest.raises(TypeError):
        torch.dropout(torch.ones(2), 0.5)
    with pytest.raises(TypeError):
        jg.dropout(jg.ones(2), 0.5)
