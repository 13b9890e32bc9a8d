"""3-d convolution and pooling, adaptive max pooling, max unpooling, power-average pooling, ``BatchNorm3d`` and
``SyncBatchNorm`` against torch 2.13: values, indices, dtypes, shapes and gradients (float64), gradcheck and
gradgradcheck, torch's errors and reprs, and a volumetric CNN step compiled on the interpreter and with Numba
against eager."""
import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def _r(*shape, seed=1):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


def _both(fn, arrays, seed=0, ints=()):
    """``fn(m, *tensors)`` in jitgrad and torch: values, indices, dtypes and every float input's gradient."""
    res = []
    for m in (jg, torch):
        ts = [m.tensor(a) if i in ints else m.tensor(a, requires_grad=True) for i, a in enumerate(arrays)]
        out = fn(m, *ts)
        vals, idx = out if isinstance(out, tuple) else (out, None)
        cot = np.random.default_rng(seed).standard_normal(tuple(vals.shape))
        vals.backward(m.tensor(cot))
        res.append((vals.detach().numpy(), str(vals.dtype).split(".")[-1], None if idx is None else idx.numpy(),
                    [t.grad.numpy() for i, t in enumerate(ts) if i not in ints]))
    (vj, dj, ij, gj), (vt, dtt, it, gt) = res
    assert vj.shape == vt.shape and dj == dtt
    np.testing.assert_allclose(vj, vt, rtol=1e-11, atol=1e-13)
    if it is not None:
        np.testing.assert_array_equal(ij, it)
    for a, b in zip(gj, gt):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


CONV = [
    ((2, 4, 5, 6, 7), (6, 2, 3, 2, 3), dict(groups=2)),
    ((2, 4, 5, 6, 7), (6, 4, 3, 3, 3), dict(stride=2, padding=1, dilation=(1, 2, 1))),
    ((2, 4, 5, 6, 7), (6, 2, 2, 3, 2), dict(padding="same", groups=2, dilation=(2, 1, 1))),
    ((4, 5, 6, 7), (3, 4, 2, 2, 2), dict(padding="valid", stride=(1, 2, 3))),           # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", CONV, ids=str)
def test_conv3d_matches_torch(xs, ws, kw):
    _both(lambda m, x, w, b: m.nn.functional.conv3d(x, w, b, **kw), [_r(*xs), _r(*ws), _r(ws[0])])
    _both(lambda m, x, w, b: m.conv3d(x, w, b, **kw), [_r(*xs), _r(*ws), _r(ws[0])])     # torch.conv3d


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1, groups=2),
                                dict(stride=(2, 1, 3), dilation=2, output_padding=(1, 0, 2))], ids=str)
def test_conv_transpose3d_matches_torch(kw):
    cout = 3 * kw.get("groups", 1)
    _both(lambda m, x, w, b: m.conv_transpose3d(x, w, b, **kw), [_r(2, 4, 3, 4, 3), _r(4, 3, 3, 2, 3), _r(cout)])


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv3d_modules_match_torch(mode):
    for bias in (True, False):
        mods = []
        for m in (jg, torch):
            m.manual_seed(0)
            mods.append(m.nn.Conv3d(4, 6, (3, 2, 3), padding=(1, 1, 2), groups=2, bias=bias, padding_mode=mode)
                        .double())
        mods[0].load_state_dict({k: jg.tensor(v.detach().numpy()) for k, v in mods[1].state_dict().items()})
        assert repr(mods[0]) == repr(mods[1])
        x = _r(2, 4, 4, 5, 6)
        np.testing.assert_allclose(mods[0](jg.tensor(x)).detach().numpy(), mods[1](torch.tensor(x)).detach().numpy(),
                                   rtol=1e-11, atol=1e-12)
    t = torch.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1, output_padding=1).double()
    j = jg.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1, output_padding=1).double()
    j.load_state_dict({k: jg.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    assert repr(j) == repr(t)
    x = _r(1, 4, 3, 3, 4)
    np.testing.assert_allclose(j(jg.tensor(x), output_size=(6, 5, 8)).detach().numpy(),
                               t(torch.tensor(x), output_size=(6, 5, 8)).detach().numpy(), rtol=1e-11, atol=1e-12)


POOL = [
    ("max_pool3d", (2, 3, 5, 6, 7), dict(kernel_size=2, return_indices=True)),
    ("max_pool3d", (2, 3, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, dilation=(1, 1, 2),
                                         return_indices=True)),
    ("max_pool3d", (3, 5, 6, 7), dict(kernel_size=(2, 3, 1), stride=1, return_indices=True)),
    ("avg_pool3d", (2, 3, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                         count_include_pad=False)),
    ("avg_pool3d", (2, 3, 5, 6, 7), dict(kernel_size=2, divisor_override=3)),
    ("adaptive_avg_pool3d", (2, 3, 5, 6, 7), dict(output_size=(3, None, 2))),
    ("adaptive_avg_pool3d", (3, 5, 6, 7), dict(output_size=4)),
    ("adaptive_max_pool3d", (2, 3, 5, 6, 7), dict(output_size=(3, 2, 4), return_indices=True)),
    ("adaptive_max_pool2d", (3, 7, 5, 6), dict(output_size=(3, None), return_indices=True)),
    ("adaptive_max_pool2d", (3, 4, 5), dict(output_size=(9, 7), return_indices=True)),       # windows overlap
    ("adaptive_max_pool1d", (2, 3, 10), dict(output_size=4, return_indices=True)),
    ("lp_pool1d", (2, 3, 10), dict(norm_type=2, kernel_size=3, stride=2)),
    ("lp_pool2d", (2, 3, 7, 8), dict(norm_type=3, kernel_size=(2, 3), ceil_mode=True)),
    ("lp_pool3d", (2, 3, 5, 6, 7), dict(norm_type=1.5, kernel_size=2, stride=1)),
]


@pytest.mark.parametrize("f,shape,kw", POOL, ids=str)
def test_pooling_matches_torch(f, shape, kw):
    x = _r(*shape)
    if f.startswith("lp"):
        x = np.abs(x) + 0.1
    _both(lambda m, t: getattr(m.nn.functional, f)(t, **kw), [x])


def test_adaptive_max_pool_ties_take_the_first_maximum():
    x = np.round(_r(2, 3, 6, 7) * 1.5) / 2
    _both(lambda m, t: m.nn.functional.adaptive_max_pool2d(t, (4, 3), True), [x])


@pytest.mark.parametrize("nd,shape,kw", [
    (1, (2, 3, 9), dict(kernel_size=2)),
    (2, (2, 3, 7, 8), dict(kernel_size=3, stride=2, padding=1, output_size=(7, 8))),      # overlapping windows
    (2, (3, 6, 6), dict(kernel_size=2)),
    (3, (2, 2, 5, 6, 7), dict(kernel_size=2, output_size=(2, 2, 5, 6, 7))),
], ids=str)
def test_max_unpool_matches_torch(nd, shape, kw):
    kw = dict(kw)
    out = kw.pop("output_size", None)

    def f(m, x):
        F = m.nn.functional
        v, i = getattr(F, f"max_pool{nd}d")(x, return_indices=True, **kw)
        return getattr(F, f"max_unpool{nd}d")(v * 2, i, output_size=out, **kw)
    _both(f, [_r(*shape)])


def test_max_unpool_with_arbitrary_indices_keeps_the_last_write_and_gathers_the_gradient():
    # torch's CPU kernel writes repeated indices from parallel threads: "last write wins" holds for it on one thread
    # only (with a warm thread pool, a full-suite run saw it keep the first), so torch runs on one thread here
    idx = np.array([[[0, 3, 3, 1]]])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _both(lambda m, x, i: m.nn.functional.max_unpool1d(x, i, 2), [_r(1, 1, 4), idx], ints=(1,))
    finally:
        torch.set_num_threads(threads)


def test_gradcheck_and_gradgradcheck():
    F = jg.nn.functional
    x = jg.tensor(_r(1, 2, 3, 4, 3), requires_grad=True)
    w = jg.tensor(_r(2, 1, 2, 2, 2), requires_grad=True)
    wt = jg.tensor(_r(2, 1, 2, 2, 2), requires_grad=True)
    fns = [lambda x, w: F.conv3d(x, w, stride=(1, 2, 1), padding=1, groups=2),
           lambda x, w: F.conv_transpose3d(x, w, stride=2, output_padding=1, groups=2),
           lambda x: F.max_pool3d(x, 2, 1), lambda x: F.avg_pool3d(x, 2, padding=1, count_include_pad=False),
           lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)),
           lambda x: F.lp_pool3d(x * x + 0.5, 2, 2, 1),
           lambda x: F.max_unpool3d(*F.max_pool3d(x, (1, 2, 1), return_indices=True), (1, 2, 1))]
    for f in fns:
        args = (x, w) if f.__code__.co_argcount == 2 else (x,)
        if "conv_transpose3d" in f.__code__.co_names:
            args = (x, wt)
        assert gradcheck(f, args)
        assert gradgradcheck(f, args)


ERRORS = [
    ("max_pool3d", (4, 4), (2,), {}),
    ("avg_pool3d", (4, 4), (2,), {}),
    ("max_pool3d", (1, 1, 4, 4, 4), ((2, 2),), {}),
    ("avg_pool3d", (1, 1, 4, 4, 4), ((2, 2),), {}),
    ("avg_pool3d", (1, 1, 4, 4, 4), (2,), dict(padding=2)),
    ("max_pool3d", (1, 1, 4, 4, 4), (5,), {}),
    ("avg_pool3d", (1, 1, 4, 4, 4), (5,), {}),
    ("adaptive_avg_pool3d", (4, 4), (2,), {}),
    ("adaptive_max_pool3d", (4, 4), (2,), {}),
    ("adaptive_max_pool2d", (4,), (2,), {}),
    ("adaptive_max_pool1d", (4,), (2,), {}),
]


@pytest.mark.parametrize("name,shape,args,kw", ERRORS, ids=str)
def test_errors_are_torchs(name, shape, args, kw):
    with pytest.raises(Exception) as te:
        getattr(torch.nn.functional, name)(torch.zeros(shape), *args, **kw)
    with pytest.raises(type(te.value)) as je:
        getattr(jg.nn.functional, name)(jg.zeros(shape), *args, **kw)
    assert str(je.value) == str(te.value)


def test_unpool_and_conv3d_errors_are_torchs():
    def same(fn):
        with pytest.raises(Exception) as te:
            fn(torch)
        with pytest.raises(type(te.value)) as je:
            fn(jg)
        assert str(je.value) == str(te.value)
    same(lambda m: m.nn.functional.max_unpool2d(m.ones(1, 1, 2, 2), m.full((1, 1, 2, 2), 20, dtype=m.int64), 2))
    same(lambda m: m.nn.functional.max_unpool1d(m.ones(1, 1, 2), m.full((1, 1, 2), -1, dtype=m.int64), 2))
    same(lambda m: m.nn.functional.max_unpool2d(m.ones(1, 1, 2, 2), m.zeros(1, 1, 2, 2, dtype=m.int64), 2,
                                                output_size=(5, 9)))
    same(lambda m: m.nn.functional.max_unpool2d(m.ones(1, 1, 2, 2), m.zeros(1, 2, 2, dtype=m.int64), 2))
    same(lambda m: m.nn.functional.conv3d(m.ones(1, 1, 4, 4, 4), m.ones(1, 1, 2, 2)))
    same(lambda m: m.nn.functional.conv3d(m.ones(1, 2, 4, 4, 4), m.ones(1, 1, 2, 2, 2)))
    same(lambda m: m.nn.BatchNorm3d(3)(m.ones(2, 3, 4)))
    same(lambda m: m.nn.SyncBatchNorm(3)(m.ones(2)))


MODULES = [("MaxPool3d", (2,), {}), ("AvgPool3d", (2,), dict(stride=1)), ("AdaptiveAvgPool3d", ((2, None, 3),), {}),
           ("AdaptiveMaxPool1d", (3,), {}), ("AdaptiveMaxPool2d", (3,), dict(return_indices=True)),
           ("AdaptiveMaxPool3d", (2,), {}), ("MaxUnpool1d", (2,), {}), ("MaxUnpool2d", (2,), dict(stride=1)),
           ("MaxUnpool3d", (3,), dict(padding=1)), ("LPPool1d", (2, 3), {}), ("LPPool2d", (2, 3), dict(stride=2)),
           ("LPPool3d", (1.5, 2), {}), ("BatchNorm3d", (4,), {}), ("SyncBatchNorm", (4,), dict(momentum=None)),
           ("Conv3d", (2, 4, 3), dict(stride=2)), ("ConvTranspose3d", (2, 4, 3), dict(dilation=2))]


@pytest.mark.parametrize("name,args,kw", MODULES, ids=str)
def test_module_repr_and_state_dict_keys_are_torchs(name, args, kw):
    t, j = getattr(torch.nn, name)(*args, **kw), getattr(jg.nn, name)(*args, **kw)
    assert repr(j) == repr(t)
    assert list(j.state_dict()) == list(t.state_dict())


def test_batch_norm3d_and_sync_batch_norm_match_torch():
    x = _r(3, 4, 2, 3, 2)
    for name in ("BatchNorm3d", "SyncBatchNorm"):
        t, j = getattr(torch.nn, name)(4).double(), getattr(jg.nn, name)(4).double()
        for train in (True, False):
            t.train(train), j.train(train)
            _both(lambda m, v: (j if m is jg else t)(v), [x])
            np.testing.assert_allclose(j.running_var.numpy(), t.running_var.numpy(), rtol=1e-12)
    seq = torch.nn.Sequential(torch.nn.Conv3d(2, 4, 1), torch.nn.BatchNorm3d(4), torch.nn.Sequential(
        torch.nn.BatchNorm1d(4)))
    jseq = jg.nn.Sequential(jg.nn.Conv3d(2, 4, 1), jg.nn.BatchNorm3d(4), jg.nn.Sequential(jg.nn.BatchNorm1d(4)))
    jseq.eval()
    conv = jg.nn.SyncBatchNorm.convert_sync_batchnorm(jseq)
    assert repr(conv) == repr(torch.nn.SyncBatchNorm.convert_sync_batchnorm(seq))
    assert conv[1].weight is jseq[1].weight and conv[2][0].running_mean is jseq[2][0].running_mean
    assert not conv[1].training


# ---- compiled --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_volumetric_cnn_step_compiled_matches_eager(backend):
    nn = jg.nn
    F = jg.nn.functional

    def make():
        jg.manual_seed(0)
        return nn.ModuleList([nn.Conv3d(2, 4, 3, padding=1, padding_mode="replicate", bias=False), nn.BatchNorm3d(4),
                              nn.MaxPool3d(2, ceil_mode=True, return_indices=True), nn.MaxUnpool3d(2),
                              nn.ConvTranspose3d(4, 3, 2, stride=2, output_padding=1),
                              nn.AvgPool3d(2, padding=1, count_include_pad=False), nn.LPPool3d(2, 2, stride=1),
                              nn.AdaptiveMaxPool3d((2, 1, 2)), nn.AdaptiveAvgPool3d(1), nn.Linear(3, 3)]).double()

    x = jg.tensor(_r(2, 2, 4, 5, 4))
    y = jg.tensor([0, 2])
    runs = []
    for compiled in (False, True):
        m = make()
        opt = jg.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            h = F.relu(m[1](m[0](x)))
            v, i = m[2](h)
            h = m[4](m[3](v, i, output_size=h.shape[2:]) + h)
            h = m[6](m[5](h) + 1.0)
            h = m[7](h).sum((2, 3, 4)) + m[8](h).flatten(1)
            loss = F.cross_entropy(m[9](h), y)
            loss.backward()
            opt.step()
            return loss.detach()
        f = jg.compile(step, backend=backend) if compiled else step
        losses = [f(x, y).item() for _ in range(3)]
        runs.append((losses, [t.detach().numpy().copy() for t in list(m.parameters()) + list(m.buffers())]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
