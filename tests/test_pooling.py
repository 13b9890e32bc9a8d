"""Pooling (``F.max_pool1d/2d``, ``F.avg_pool1d/2d``, ``F.adaptive_avg_pool1d/2d`` and their modules),
``nn.BatchNorm2d`` and ``nn.Dropout1d/2d`` against torch 2.13: values, indices and gradients in float64,
gradcheck/gradgradcheck, torch's errors and reprs, and a CNN step (conv, batch norm, pooling) compiled on the
interpreter and with Numba against eager."""
import re

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as JF
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def _r(*shape, seed=1):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


def _both(fn, x, seed=0):
    """``fn(m, x)`` in jitgrad and torch: outputs (a tensor, or (values, indices)) and the input's gradient."""
    res = []
    cot = None
    for m in (jg, torch):
        t = m.tensor(x, requires_grad=True)
        out = fn(m, t)
        vals, idx = out if isinstance(out, tuple) else (out, None)
        cot = np.random.default_rng(seed).standard_normal(tuple(vals.shape)) if cot is None else cot
        vals.backward(m.tensor(cot))
        res.append((vals.detach().numpy(), None if idx is None else idx.numpy(), t.grad.numpy()))
    (vj, ij, gj), (vt, it, gt) = res
    assert vj.shape == vt.shape
    np.testing.assert_allclose(vj, vt, rtol=1e-12, atol=1e-14)
    if it is not None:
        np.testing.assert_array_equal(ij, it)
    np.testing.assert_allclose(gj, gt, rtol=1e-12, atol=1e-14)


MAX = [
    ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=2)),
    ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=(2, 3), stride=(2, 1), ceil_mode=True)),
    ("max_pool2d", (1, 2, 9, 8), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)),
    ("max_pool2d", (3, 6, 5), dict(kernel_size=2, stride=1)),                              # unbatched
    ("max_pool1d", (2, 3, 9), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("max_pool1d", (3, 9), dict(kernel_size=4, dilation=2)),                               # unbatched
]


@pytest.mark.parametrize("f,shape,kw", MAX, ids=lambda v: str(v))
def test_max_pool_values_indices_and_gradients_match_torch(f, shape, kw):
    _both(lambda m, x: getattr(m.nn.functional, f)(x, return_indices=True, **kw), _r(*shape))


def test_max_pool_ties_nan_and_inf_follow_torch():
    """Ties: the first maximum gets the gradient; NaN: the last NaN; a window of -inf: its first input position."""
    ties = np.round(_r(2, 3, 6, 7) * 1.5) / 2
    _both(lambda m, x: m.nn.functional.max_pool2d(x, 3, 1, 1, return_indices=True), ties)
    _both(lambda m, x: m.nn.functional.max_pool2d(x, 2, return_indices=True), np.zeros((1, 2, 4, 4)))
    odd = np.array([[[[np.nan, 1.0, np.nan, 2.0], [np.nan, np.inf, 3.0, -0.0], [-np.inf, -np.inf, 5.0, 5.0],
                      [-np.inf, -np.inf, 5.0, 5.0]]]])
    _both(lambda m, x: m.nn.functional.max_pool2d(x, 2, padding=1, return_indices=True), np.nan_to_num(
        odd, nan=7.0))
    vj, ij = JF.max_pool2d(jg.tensor(odd), 2, padding=1, return_indices=True)
    vt, it = torch.nn.functional.max_pool2d(torch.tensor(odd), 2, padding=1, return_indices=True)
    np.testing.assert_array_equal(vj.numpy(), vt.numpy())
    np.testing.assert_array_equal(ij.numpy(), it.numpy())


AVG = [
    ((2, 3, 7, 8), dict(kernel_size=2)),
    ((2, 3, 7, 8), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 7, 8), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True)),
    ((2, 3, 7, 8), dict(kernel_size=(2, 3), ceil_mode=True, divisor_override=5)),
    ((2, 3, 6, 6), dict(kernel_size=3, stride=2, ceil_mode=True, padding=1)),
    ((3, 6, 5), dict(kernel_size=2, stride=1, padding=1)),                               # unbatched
]


@pytest.mark.parametrize("shape,kw", AVG, ids=lambda v: str(v))
def test_avg_pool2d_matches_torch(shape, kw):
    _both(lambda m, x: m.nn.functional.avg_pool2d(x, **kw), _r(*shape))


def test_avg_pool1d_and_adaptive_pools_match_torch():
    _both(lambda m, x: m.nn.functional.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), _r(2, 3, 9))
    _both(lambda m, x: m.nn.functional.avg_pool1d(x, 2), _r(3, 8))
    for size in (1, (3, 4), (None, 3), 5, (7, 8)):
        _both(lambda m, x: m.nn.functional.adaptive_avg_pool2d(x, size), _r(2, 3, 7, 8))
    _both(lambda m, x: m.nn.functional.adaptive_avg_pool2d(x, 2), _r(3, 5, 5))
    _both(lambda m, x: m.nn.functional.adaptive_avg_pool1d(x, 4), _r(2, 3, 9))


def test_pooling_grad_names_are_torchs():
    x = jg.ones(1, 1, 4, 4, requires_grad=True)
    assert JF.max_pool2d(x, 2).grad_fn.name() == "MaxPool2DWithIndicesBackward0"
    assert JF.avg_pool2d(x, 2).grad_fn.name() == "AvgPool2DBackward0"
    assert JF.adaptive_avg_pool2d(x, 2).grad_fn.name() == "AdaptiveAvgPool2DBackward0"


def test_gradcheck_and_gradgradcheck():
    x = jg.tensor(np.random.default_rng(3).permutation(60).reshape(1, 3, 4, 5) * 0.1, requires_grad=True)
    for fn in (lambda x: JF.max_pool2d(x, 2, stride=1, padding=1, ceil_mode=True),
               lambda x: JF.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
               lambda x: JF.adaptive_avg_pool2d(x, (3, 2)),
               lambda x: JF.max_pool1d(x[0], 3, 2, 1)):
        assert gradcheck(fn, (x,))
        assert gradgradcheck(fn, (x,))


# ---- errors and modules -----------------------------------------------------------------------------------

BAD = [
    ("max_pool2d", (2, 3, 5, 5), (3,), dict(padding=2)),
    ("max_pool2d", (2, 3, 5, 5), (3,), dict(dilation=2, padding=2)),
    ("max_pool2d", (2, 3, 5, 5), (6,), {}),
    ("max_pool2d", (5, 5), (2,), {}),
    ("max_pool2d", (2, 3, 5, 5), (2,), dict(stride=0)),
    ("max_pool2d", (2, 3, 5, 5), ((2, 2, 2),), {}),
    ("avg_pool2d", (2, 3, 5, 5), (3,), dict(padding=2)),
    ("avg_pool2d", (2, 3, 5, 5), (6,), {}),
    ("avg_pool2d", (2, 3, 5, 5), (2,), dict(divisor_override=0)),
    ("max_pool1d", (2, 3, 5), (3,), dict(padding=2)),
    ("max_pool1d", (5,), (3,), {}),
    ("adaptive_avg_pool2d", (5, 5), (2,), {}),
    ("adaptive_avg_pool2d", (2, 3, 5, 5), ((2, 2, 2),), {}),
]


@pytest.mark.parametrize("name,shape,args,kw", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_errors_are_torchs(name, shape, args, kw):
    with pytest.raises(Exception) as want:
        getattr(torch.nn.functional, name)(torch.zeros(shape), *args, **kw)
    with pytest.raises(type(want.value)) as got:
        getattr(JF, name)(jg.zeros(shape), *args, **kw)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


MODULES = [("MaxPool2d", (2,), {}), ("MaxPool2d", ((2, 3),), dict(stride=1, padding=1, dilation=2, ceil_mode=True)),
           ("MaxPool1d", (3,), {}), ("AvgPool2d", (3,), {}), ("AvgPool2d", (3, 2, 1, True, False, 2), {}),
           ("AvgPool1d", (2,), {}), ("AdaptiveAvgPool2d", ((None, 3),), {}), ("AdaptiveAvgPool1d", (4,), {}),
           ("BatchNorm2d", (3,), {}), ("BatchNorm2d", (3,), dict(momentum=None, affine=False)),
           ("Dropout2d", (), {}), ("Dropout1d", (0.2,), {})]


@pytest.mark.parametrize("name,args,kw", MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)])
def test_module_repr_and_state_dict_keys_are_torchs(name, args, kw):
    jm, tm = getattr(jg.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(jm) == repr(tm)
    assert list(jm.state_dict()) == list(tm.state_dict())


def test_max_pool_module_returns_indices():
    x = _r(2, 3, 6, 6)
    vj, ij = jg.nn.MaxPool2d(3, 2, 1, return_indices=True)(jg.tensor(x))
    vt, it = torch.nn.MaxPool2d(3, 2, 1, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(vj.numpy(), vt.numpy())
    np.testing.assert_array_equal(ij.numpy(), it.numpy())


def test_batch_norm2d_matches_torch_in_training_and_eval():
    x = _r(4, 3, 5, 6) * 2 + 1
    jm, tm = jg.nn.BatchNorm2d(3).double(), torch.nn.BatchNorm2d(3).double()
    for step in range(3):
        _both(lambda m, t: (jm if m is jg else tm)(t * (step + 1)), x, seed=step)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(jm, name).numpy(), getattr(tm, name).numpy(), rtol=1e-12)
    jm.eval()
    tm.eval()
    _both(lambda m, t: (jm if m is jg else tm)(t), x)
    with pytest.raises(ValueError, match=re.escape("expected 4D input (got 3D input)")):
        jm(jg.zeros(2, 3, 4))
    assert not isinstance(jm, jg.nn.BatchNorm1d)


def test_dropout2d_and_dropout1d_drop_whole_channels():
    y = JF.dropout2d(jg.ones(8, 16, 3, 4), 0.5)
    per_channel = y.numpy().reshape(8, 16, -1)
    assert (per_channel.min(-1) == per_channel.max(-1)).all()              # one draw per (sample, channel)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    y1 = jg.nn.Dropout1d(0.25)(jg.ones(6, 10, 5)).numpy()
    assert (y1.min(-1) == y1.max(-1)).all() and set(np.unique(y1)) == {0.0, np.float32(1 / 0.75)}
    assert JF.dropout1d(jg.ones(10, 5), 0.5).shape == (10, 5)
    m = jg.nn.Dropout2d(0.5).eval()
    x = jg.ones(2, 3, 4, 4)
    assert m(x) is x
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        JF.dropout2d(jg.ones(2, 3, 4))
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but received a 4D input"):
        JF.dropout1d(jg.ones(2, 3, 4, 5))
    x = jg.ones(2, 3, 4, 4, requires_grad=True)
    JF.dropout2d(x, 0.5).sum().backward()
    g = x.grad.numpy().reshape(2, 3, -1)
    assert (g.min(-1) == g.max(-1)).all()


# ---- compiled --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_cnn_step_with_batch_norm_and_pooling_compiled_matches_eager(backend):
    nn = jg.nn

    def make():
        jg.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.MaxPool2d(2, ceil_mode=True), nn.Conv2d(4, 6, 3, padding="same"),
                             nn.AvgPool2d(2, padding=1, count_include_pad=False), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(6, 3)).double()

    x = jg.tensor(_r(2, 3, 7, 7))
    y = jg.tensor([0, 2])
    runs = []
    for compiled in (False, True):
        m = make()
        opt = jg.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = JF.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        f = jg.compile(step, backend=backend) if compiled else step
        losses = [f(x, y).item() for _ in range(3)]
        runs.append((losses, [t.detach().numpy().copy() for t in list(m.parameters()) + list(m.buffers())]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
