"""Convolutions (``F.conv1d/2d``, ``F.conv_transpose1d/2d``, ``F.unfold/fold`` and their modules) against torch
2.13: values and gradients in float64 over a grid of configurations, gradcheck/gradgradcheck, eager against
compiled (interpreter; a CNN's SGD step on the Numba backend), torch's errors, reprs, state_dict keys and init.
The primitives themselves (``ir/ops/conv.py``) are in tests/test_ops.py's SMOKE and tests/singular_samples.py."""
import math
import re

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as JF
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402


def _run(lib, fn, arrays, cot):
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = fn(lib, *xs)
    y.backward(lib.tensor(cot))
    return y.detach().numpy(), [x.grad.numpy() for x in xs]


def _vs_torch(fn, *arrays, seed=0):
    """``fn(m, *tensors)`` in jitgrad and torch: the same value and gradients (float64, to rounding)."""
    yt = fn(torch, *[torch.tensor(a) for a in arrays])
    cot = np.random.default_rng(seed).standard_normal(tuple(yt.shape))
    yj, gj = _run(jg, fn, arrays, cot)
    yt, gt = _run(torch, fn, arrays, cot)
    assert yj.shape == yt.shape
    np.testing.assert_allclose(yj, yt, rtol=1e-12, atol=1e-12)
    for a, b in zip(gj, gt):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _r(*shape, seed=1):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


# (input shape, weight shape, bias?, keywords)
CONV2D = [
    ((2, 3, 6, 7), (4, 3, 3, 3), True, {}),
    ((2, 3, 6, 7), (4, 3, 3, 2), False, dict(stride=2, padding=1)),                    # non-square kernel
    ((2, 3, 7, 8), (4, 3, 2, 3), True, dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1))),
    ((1, 4, 5, 6), (6, 2, 3, 3), True, dict(groups=2, padding="same")),                # batch of 1, groups
    ((2, 4, 6, 6), (4, 1, 3, 3), True, dict(groups=4, padding=1)),                     # depthwise
    ((2, 4, 6, 6), (8, 1, 2, 3), False, dict(groups=4, padding="same", dilation=2)),   # depthwise x2, even kernel
    ((2, 2, 5, 5), (3, 2, 4, 4), True, dict(padding="same")),                          # asymmetric 'same'
    ((2, 2, 5, 5), (3, 2, 3, 3), True, dict(padding="valid", stride=(1, 3))),
    ((3, 6, 6), (5, 3, 3, 3), True, dict(padding=1)),                                  # unbatched (C, H, W)
    ((2, 3, 4, 4), (2, 3, 1, 1), True, dict(stride=2)),                                # 1x1 kernel
]
CONV1D = [
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((2, 4, 9), (4, 2, 4), True, dict(stride=2, padding=2, dilation=2, groups=2)),
    ((2, 4, 9), (4, 1, 4), False, dict(padding="same", groups=4)),
    ((3, 8), (2, 3, 3), True, dict(padding=1, stride=3)),                              # unbatched (C, L)
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")     # torch's, about its own copy
@pytest.mark.parametrize("xs,ws,bias,kw", CONV2D + CONV1D, ids=lambda v: str(v))
def test_conv_matches_torch(xs, ws, bias, kw):
    f = "conv1d" if len(ws) == 3 else "conv2d"
    arrays = [_r(*xs), _r(*ws, seed=2)] + ([_r(ws[0], seed=3)] if bias else [])
    _vs_torch(lambda m, *t: getattr(m.nn.functional, f)(*t, **kw), *arrays)


CONV_T = [
    ((2, 4, 3, 4), (4, 3, 3, 3), True, {}),
    ((2, 4, 3, 4), (4, 3, 3, 2), True, dict(stride=2, padding=1, output_padding=1)),
    ((1, 4, 3, 3), (4, 2, 2, 3), False, dict(stride=(2, 3), groups=2, dilation=(1, 2), output_padding=(1, 2))),
    ((2, 4, 3, 3), (4, 1, 3, 3), True, dict(stride=1, dilation=2, output_padding=1)),   # output_padding >= stride
    ((4, 3, 3), (4, 2, 3, 3), True, dict(stride=2)),                                      # unbatched
    ((2, 4, 5), (4, 3, 3), True, dict(stride=3, padding=1, output_padding=2)),            # 1-d
]


@pytest.mark.parametrize("xs,ws,bias,kw", CONV_T, ids=lambda v: str(v))
def test_conv_transpose_matches_torch(xs, ws, bias, kw):
    f = "conv_transpose1d" if len(ws) == 3 else "conv_transpose2d"
    g = kw.get("groups", 1)
    arrays = [_r(*xs), _r(*ws, seed=2)] + ([_r(ws[1] * g, seed=3)] if bias else [])
    _vs_torch(lambda m, *t: getattr(m.nn.functional, f)(*t, **kw), *arrays)


def test_unfold_and_fold_match_torch():
    kw = dict(dilation=(1, 2), padding=1, stride=(2, 1))
    _vs_torch(lambda m, x: m.nn.functional.unfold(x, (2, 3), **kw), _r(2, 3, 5, 6))
    _vs_torch(lambda m, x: m.nn.functional.unfold(x, 2), _r(3, 4, 4))           # unbatched
    _vs_torch(lambda m, c: m.nn.functional.fold(c, (5, 6), (2, 3), padding=1, stride=2), _r(2, 24, 9))
    _vs_torch(lambda m, c: m.nn.functional.fold(c, 4, 2), _r(8, 9))             # unbatched
    u = JF.unfold(jg.ones(1, 2, 3, 3, requires_grad=True), 2)
    assert u.grad_fn.name() == "Im2ColBackward0"


def test_gradcheck_and_gradgradcheck():
    """Each primitive's vjp binds the other two, so second order runs all three rules (and their vjps)."""
    t = lambda *s, seed=4: jg.tensor(_r(*s, seed=seed), requires_grad=True)   # noqa: E731
    cases = [
        (lambda x, w, b: JF.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
         (t(1, 4, 5, 5), t(2, 2, 2, 2, seed=5), t(2, seed=6))),
        (lambda x, w: JF.conv1d(x, w, padding="same"), (t(2, 2, 5), t(3, 2, 2, seed=5))),
        (lambda x, w, b: JF.conv_transpose2d(x, w, b, stride=2, output_padding=1), (t(1, 2, 2, 3),
                                                                                     t(2, 2, 2, 2, seed=5), t(2))),
        (lambda c: JF.fold(c, (3, 4), 2), (t(1, 8, 6),)),
    ]
    for fn, xs in cases:
        assert gradcheck(fn, xs)
        assert gradgradcheck(fn, xs)


def test_compiled_matches_eager_with_double_backward():
    """The interpreter runs the same three primitives: value, gradient and a gradient penalty's gradient."""
    def f(x, w, b):
        y = JF.conv2d(x, w, b, stride=2, padding="valid", groups=2).tanh()
        z = JF.conv_transpose2d(y, w * 1.5, stride=2, output_padding=1, groups=2)
        gx, = jg.autograd.grad(z.square().sum(), x, create_graph=True)
        return z.sum() + gx.square().sum()

    arrays = [_r(2, 4, 6, 7), _r(4, 2, 3, 3, seed=2), _r(4, seed=3)]
    outs = []
    for fn in (f, jg.compile(f, backend="interpret")):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        loss = fn(*xs)
        loss.backward()
        outs.append([loss.detach().numpy()] + [x.grad.numpy() for x in xs])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_cnn_sgd_step_compiled_with_numba_matches_eager():
    nn = jg.nn

    def make():
        jg.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, stride=2, groups=2),
                             nn.Flatten(), nn.Linear(4 * 3 * 3, 5)).double()

    x = jg.tensor(_r(2, 3, 8, 8))
    y = jg.tensor([1, 3])
    runs = []
    for compiled in (False, True):
        m = make()
        opt = jg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = JF.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        f = jg.compile(step, backend="numba") if compiled else step
        runs.append(([f(x, y).item() for _ in range(3)], [p.detach().numpy().copy() for p in m.parameters()]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-12)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


# ---- torch's errors --------------------------------------------------------------------------------------

def _x(*s):
    return np.zeros(s)


BAD_CALLS = [
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 3, 3, 3)), {}),                      # channels
    ("conv2d", (_x(8, 8), _x(16, 3, 3, 3)), {}),                            # rank
    ("conv2d", (_x(2, 3, 8), _x(16, 3, 3, 3)), {}),                         # unbatched, then channels
    ("conv1d", (_x(2, 4, 8, 3), _x(16, 4, 3)), {}),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3)), {}),                         # weight rank
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 9, 9)), {}),                      # kernel > input
    ("conv2d", (_x(2, 4, 4, 4), _x(16, 4, 3, 3)), dict(dilation=2)),        # dilated kernel > input
    ("conv2d", (_x(2, 4, 8, 8), _x(3, 2, 3, 3)), dict(groups=2)),           # out channels % groups
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3), _x(8)), {}),               # bias size
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3), _x(16, 1)), {}),           # bias rank
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(stride=2, padding="same")),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(padding="foo")),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(stride=0)),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(padding=-1)),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(dilation=0)),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(groups=0)),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(stride=(1, 1, 1))),
    ("conv2d", (_x(2, 4, 8, 8), _x(16, 4, 3, 3)), dict(padding=(1, 1, 1))),
    ("conv_transpose2d", (_x(2, 4, 8, 8), _x(4, 3, 3, 3)), dict(output_padding=1)),
    ("conv_transpose2d", (_x(2, 4, 8, 8), _x(4, 3, 3, 3)), dict(stride=2, output_padding=2)),
    ("conv_transpose1d", (_x(2, 4, 8), _x(4, 3, 3)), dict(output_padding=1)),
    ("conv_transpose2d", (_x(2, 4, 8, 8), _x(3, 3, 3, 3)), {}),
    ("conv_transpose2d", (_x(2, 4, 3, 3), _x(4, 3, 3, 3), _x(4)), {}),
    ("fold", (_x(2, 12, 8), (4, 4), 2), {}),
    ("fold", (_x(2, 13, 9), (4, 4), 2), {}),
]


@pytest.mark.parametrize("name,args,kw", BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_errors_are_torchs(name, args, kw):
    def call(m):
        a = [m.tensor(v) if isinstance(v, np.ndarray) else v for v in args]
        return getattr(m.nn.functional, name)(*a, **kw)
    with pytest.raises(Exception) as want:
        call(torch)
    with pytest.raises(type(want.value)) as got:
        call(jg)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


def test_dtype_mismatch_errors():
    x, w = jg.zeros(2, 4, 8, 8), jg.zeros(16, 4, 3, 3)
    with pytest.raises(RuntimeError, match=re.escape("Input type (torch.FloatTensor) and weight type "
                                                     "(torch.DoubleTensor) should be the same")):
        JF.conv2d(x, w.double())
    with pytest.raises(RuntimeError, match=re.escape("Input type (float) and bias type (double) should be the same")):
        JF.conv2d(x, w, jg.zeros(16, dtype=jg.float64))


def test_module_errors_are_torchs():
    nn = jg.nn
    for kw, msg in ((dict(groups=2, out_channels=5), "out_channels must be divisible by groups"),
                    (dict(groups=3), "in_channels must be divisible by groups"),
                    (dict(groups=0), "groups must be a positive integer"),
                    (dict(padding="same", stride=2), "padding='same' is not supported for strided convolutions"),
                    (dict(padding="bad"), r"Invalid padding string 'bad', should be one of \{'(valid|same)', "
                                          r"'(valid|same)'\}"),
                    (dict(padding_mode="foo"), r"padding_mode must be one of \{.*\}, but got padding_mode='foo'")):
        with pytest.raises(ValueError, match=msg):
            nn.Conv2d(4, kw.pop("out_channels", 6), 3, **kw)
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        nn.ConvTranspose2d(4, 6, 3, padding_mode="reflect")
    m = nn.ConvTranspose2d(4, 6, 3, stride=2)
    with pytest.raises(ValueError, match=re.escape("requested an output size of (13, 13), but valid sizes range from "
                                                   "[11, 11] to [12, 12]")):
        m(jg.zeros(1, 4, 5, 5), output_size=(13, 13))


# ---- modules ---------------------------------------------------------------------------------------------

MODULES = [
    ("Conv2d", (4, 6, 3), {}),
    ("Conv2d", (4, 6, (3, 5)), dict(stride=2, padding=1, dilation=2, groups=2, bias=False, padding_mode="reflect")),
    ("Conv2d", (4, 6, (3, 4)), dict(padding="same", dilation=(1, 2), padding_mode="circular")),
    ("Conv2d", (4, 4, 3), dict(padding=(1, 2), groups=4, padding_mode="replicate")),
    ("Conv1d", (4, 6, 3), dict(padding="same")),
    ("Conv1d", (2, 4, 2), dict(padding=1, padding_mode="reflect", stride=2)),
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, output_padding=1)),
    ("ConvTranspose2d", (4, 6, (2, 3)), dict(stride=(1, 2), padding=1, groups=2, dilation=2, bias=False)),
    ("ConvTranspose1d", (4, 2, 3), dict(stride=2)),
    ("Unfold", ((2, 3),), dict(padding=1)),
    ("Fold", ((4, 5), 2), {}),
]


@pytest.mark.parametrize("name,args,kw", MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)])
def test_modules_match_torch(name, args, kw):
    """repr, state_dict keys and shapes, torch's attributes, and the forward/backward with the same weights."""
    jm, tm = getattr(jg.nn, name)(*args, **kw).double(), getattr(torch.nn, name)(*args, **kw).double()
    assert repr(jm) == repr(tm)
    sd = jm.state_dict()
    assert list(sd) == list(tm.state_dict())
    assert [tuple(v.shape) for v in sd.values()] == [tuple(v.shape) for v in tm.state_dict().values()]
    for attr in ("kernel_size", "stride", "padding", "dilation", "output_padding", "groups", "padding_mode",
                 "_reversed_padding_repeated_twice", "transposed"):
        if hasattr(tm, attr):
            assert getattr(jm, attr) == getattr(tm, attr), attr
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items()})
    shape = {"Unfold": (2, 3, 5, 6), "Fold": (2, 12, 12)}.get(name) or (2, args[0]) + (9, 11)[:len(tm.kernel_size)]
    x = _r(*shape)
    cot = None
    outs = []
    for m, lib in ((jm, jg), (tm, torch)):
        xt = lib.tensor(x, requires_grad=True)
        y = m(xt)
        cot = np.random.default_rng(0).standard_normal(tuple(y.shape)) if cot is None else cot
        y.backward(lib.tensor(cot))
        outs.append([y.detach().numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in m.parameters()])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls,args", [("Conv2d", (6, 8, (3, 5))), ("Conv1d", (4, 6, 7)),
                                      ("ConvTranspose2d", (6, 4, 3))])
def test_init_is_torchs(cls, args):
    """kaiming_uniform_(a=sqrt(5)) on the weight: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bias the same bound;
    fan_in = weight.shape[1] * prod(kernel_size) (in/groups for a conv, out/groups for a transposed one)."""
    m = getattr(jg.nn, cls)(*args, groups=2)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    bound = 1 / math.sqrt(w.shape[1] * math.prod(w.shape[2:]))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound and b.std() > 0.2 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.15 * bound
    assert m.weight.dtype is jg.float32 and m.weight.requires_grad



@pytest.mark.parametrize("name", ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "avg_pool1d",
                                  "avg_pool2d", "adaptive_avg_pool1d"])
def test_builtin_signatures_are_torchs_documented_ones(name):
    """torch's C builtins have no inspectable signature (tests/test_torch_signatures.py skips them); their
    docstrings open with it: ``conv2d(input, weight, bias=None, stride=1, ...) -> Tensor``."""
    import inspect
    doc = getattr(torch.nn.functional, name).__doc__.strip().splitlines()[0]
    want = re.fullmatch(rf"{name}\((.*)\) -> Tensor", doc).group(1).split(", ")
    ps = [p for p in inspect.signature(getattr(JF, name)).parameters.values() if p.kind != p.VAR_KEYWORD]
    assert [p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in ps] == want


def test_docstring_examples_run():
    import doctest
    from jitgrad.nn.modules import conv
    from jitgrad.nn.functional import conv as convolution, dropouts, pooling
    for mod in (conv, convolution, pooling, dropouts):
        r = doctest.testmod(mod)
        assert r.attempted > 0 and r.failed == 0, mod.__name__
