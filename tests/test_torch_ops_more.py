"""torch ops that transformer and modern training scripts use, against torch: repeat_interleave, roll, diff,
meshgrid, einsum, F.pad, ... Each: values and gradients equal torch's (float64), eager == compiled (the
interpreter everywhere, Numba in one shared program per theme), gradcheck/gradgradcheck, and torch's exception
type and text for bad arguments."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from torch_agreement import agree as _agree, raises_as_torch as _raises_as_torch, rng as _rng

torch = pytest.importorskip("torch")


# ---- repeat_interleave, roll, diff, meshgrid ---------------------------------------------------------------------

@pytest.mark.parametrize("args", [(2,), (3, 0), (2, 1), (1, -1), (0, 1)])
def test_repeat_interleave_int_matches_torch(args):
    x = _rng(1).standard_normal((2, 3))
    _agree(lambda a: a.repeat_interleave(*args), lambda a: a.repeat_interleave(*args), [x])


def test_repeat_interleave_tensor_repeats_matches_torch():
    x = _rng(2).standard_normal((3, 2))
    for reps, dim in (([1, 0, 3], 0), ([2, 1], 1), ([2], 0), (2, 1), ([1, 2, 0, 1, 1, 1], None)):
        _agree(lambda a: jg.repeat_interleave(a, jg.tensor(reps), dim),
               lambda a: torch.repeat_interleave(a, torch.tensor(reps), dim), [x])
    assert jg.repeat_interleave(jg.tensor([1, 2, 0, 3])).tolist() == [0, 1, 1, 3, 3, 3]
    assert jg.tensor([True, False]).repeat_interleave(2).tolist() == [True, True, False, False]
    r = jg.tensor([1.0, 2.0], requires_grad=True).repeat_interleave(jg.tensor([2, 1]))
    assert r.grad_fn.name() == "IndexSelectBackward0"


def test_repeat_interleave_traced_repeats_need_output_size():
    x = jg.tensor(_rng(3).standard_normal((2, 3)))
    f = jg.compile(lambda a, r: a.repeat_interleave(r, 0, output_size=4) * 2.0, backend="interpret")
    for reps in ([1, 3], [2, 2], [0, 4]):        # one graph: the repeats are an input, not a constant
        np.testing.assert_allclose(f(x, jg.tensor(reps)).numpy(),
                                   np.repeat(x.numpy(), reps, axis=0) * 2.0)
    g = jg.compile(lambda a, r: a.repeat_interleave(r, 0), backend="interpret")
    with pytest.raises(jg.tracer.TracedValueError, match="output_size"):
        g(x, jg.tensor([1, 2]))


def test_repeat_interleave_errors_match_torch():
    x = _rng(0).standard_normal((2, 3))
    for call in (lambda lib, a: a.repeat_interleave(-1),
                 lambda lib, a: a.repeat_interleave(lib.tensor([1, -2]), 0),
                 lambda lib, a: a.repeat_interleave(lib.tensor([1, 2, 3]), 0),
                 lambda lib, a: a.repeat_interleave(lib.tensor([[1, 2]]), 0),
                 lambda lib, a: a.repeat_interleave(2, dim=2),
                 lambda lib, a: a.repeat_interleave(lib.tensor([1.0, 2.0]), 0),
                 lambda lib, a: a.repeat_interleave(lib.tensor([1, 2]), 0, output_size=5),
                 lambda lib, a: lib.repeat_interleave(lib.tensor([[1]]))):
        _raises_as_torch(lambda: call(jg, jg.tensor(x)), lambda: call(torch, torch.tensor(x)))


@pytest.mark.parametrize("shifts,dims", [(1, None), (-4, None), (2, 1), ((1, -1), (0, 1)), ((3, 1), (1, 1)),
                                         (0, 0)])
def test_roll_matches_torch(shifts, dims):
    x = _rng(4).standard_normal((2, 3))
    _agree(lambda a: jg.roll(a, shifts, dims), lambda a: torch.roll(a, shifts, dims), [x])
    assert jg.tensor(x, requires_grad=True).roll(shifts, dims).grad_fn.name() == "RollBackward0"


def test_roll_errors_match_torch():
    x = np.ones((2, 3))
    for call in (lambda lib, a: lib.roll(a, (1, 2), 0), lambda lib, a: lib.roll(a, 1, 5),
                 lambda lib, a: lib.roll(a, (), ())):
        _raises_as_torch(lambda: call(jg, jg.tensor(x)), lambda: call(torch, torch.tensor(x)))


@pytest.mark.parametrize("n,dim,pre,app", [(1, -1, False, False), (2, 0, True, False), (1, 1, True, True),
                                           (3, 1, False, True), (5, 1, False, False), (0, 0, False, False)])
def test_diff_matches_torch(n, dim, pre, app):
    x, p, q = (_rng(5 + i).standard_normal(s) for i, s in enumerate([(3, 4), (3, 4), (3, 4)]))
    p = p[:1] if dim == 0 else p[:, :2]

    def f(lib):
        return lambda a, b, c: lib.diff(a, n, dim, b if pre else None, c if app else None)
    _agree(f(jg), f(torch), [x, p, q])
    for v in ([1, 4, 9, 16], [True, False, False, True]):
        assert jg.diff(jg.tensor(v)).tolist() == torch.diff(torch.tensor(v)).tolist()


def test_diff_errors_match_torch():
    for call in (lambda lib: lib.diff(lib.ones(2, 3), n=-1), lambda lib: lib.diff(lib.tensor(1.0)),
                 lambda lib: lib.diff(lib.ones(2, 3), prepend=lib.ones(3))):
        _raises_as_torch(lambda: call(jg), lambda: call(torch))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(indexing):
    a, b, c = _rng(6).standard_normal(2), _rng(7).standard_normal(3), np.array(0.5)
    _agree(lambda x, y, z: jg.meshgrid(x, y, z, indexing=indexing),
           lambda x, y, z: torch.meshgrid(x, y, z, indexing=indexing), [a, b, c])
    _agree(lambda x, y: jg.meshgrid([x, y], indexing=indexing),
           lambda x, y: torch.meshgrid([x, y], indexing=indexing), [a, b], modes=("eager",), second_order=None)
    with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
        gx, gy = jg.meshgrid(jg.tensor(a), jg.tensor(b))
    assert gx.shape == (2, 3)


def test_meshgrid_errors_match_torch():
    for call in (lambda lib: lib.meshgrid(lib.ones(2), lib.ones(3), indexing="foo"),
                 lambda lib: lib.meshgrid(lib.ones(2), lib.ones(3, 1), indexing="ij"),
                 lambda lib: lib.meshgrid(lib.ones(2), lib.ones(3, dtype=lib.int64), indexing="ij"),
                 lambda lib: lib.meshgrid(indexing="xy")):
        _raises_as_torch(lambda: call(jg), lambda: call(torch), upto="but got:")


def test_rearranging_numba_matches_eager():
    x = _rng(8).standard_normal((3, 4))

    def f(a):
        g1, g2 = jg.meshgrid(a[0], a[1, :2], indexing="xy")
        return (a.repeat_interleave(2, 1).roll(3, 1).diff(2, 1) * 1.5, jg.roll(a, (1, -2), (0, 1)),
                g1 * g2)
    _agree(f, lambda a: (a.repeat_interleave(2, 1).roll(3, 1).diff(2, 1) * 1.5, torch.roll(a, (1, -2), (0, 1)),
                         torch.mul(*torch.meshgrid(a[0], a[1, :2], indexing="xy"))),
           [x], modes=("numba",), second_order=None)


# ---- einsum ------------------------------------------------------------------------------------------------------

_EINSUM = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
           ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
           ("iji->j", [(2, 3, 2)]), ("...ij,...jk->...ik", [(5, 1, 2, 3), (4, 3, 4)]),
           ("ij,ij->ij", [(1, 3), (2, 3)]), ("ij,jk->ik", [(2, 1), (3, 4)]), ("ij->", [(2, 3)]),
           ("ij,jk->ikj", [(2, 3), (3, 4)]), ("Ab,ba", [(2, 3), (3, 2)]), ("->", [()]), ("ij,kl", [(2, 3), (3, 4)]),
           ("...", [(2, 3)]), ("i...->...", [(2, 3)]), ("i,i", [(3,), (3,)]), ("i,j,k->ijk", [(2,), (3,), (4,)]),
           ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("i j -> j i", [(2, 3)]), ("ab...,b->a...", [(2, 3, 4), (3,)]),
           ("iij,jk->ik", [(2, 2, 3), (3, 1)])]


@pytest.mark.parametrize("equation,shapes", _EINSUM, ids=[e for e, _ in _EINSUM])
def test_einsum_matches_torch(equation, shapes):
    arrays = [_rng(len(s)).standard_normal(s) for s in shapes]
    _agree(lambda *xs: jg.einsum(equation, *xs), lambda *xs: torch.einsum(equation, *xs), arrays)


def test_einsum_operand_list_and_integers():
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    assert jg.einsum("ij,jk", [jg.tensor(a), jg.tensor(b)]).tolist() == (a @ b).tolist()
    r = jg.einsum("ij->ji", jg.tensor(a))
    assert r.dtype is jg.int64 and r.tolist() == a.T.tolist()
    x = jg.ones(2, 2)
    assert jg.einsum("ij->ij", x) is not x


def test_einsum_errors_match_torch():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    for eq, n in (("ij,jk->ik", 1), ("ij->ij", 2), ("ijk->ij", 1), ("i->i", 1), ("...ijk->ij", 1), ("ij->ii", 1),
                  ("ij->k", 1), ("ii->i", 1), ("i1->i", 1), ("i.j->ij", 1), ("ij-ij", 1), ("ij->i->j", 1),
                  ("ij->.", 1), ("ij,jk->ik", "aa"), ("ij,jk->ik", "short")):
        def call(lib, eq=eq, n=n):
            x, y = lib.tensor(a), lib.tensor(b)
            ops = {1: (x,), 2: (x, y), "aa": (x, x), "short": (x, y[:2])}[n]
            return lib.einsum(eq, *ops)
        _raises_as_torch(lambda: call(jg), lambda: call(torch))
    _raises_as_torch(lambda: jg.einsum("ij,jk", jg.ones(2, 3), jg.ones(3, 2, dtype=jg.float64)),
                     lambda: torch.einsum("ij,jk", torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float64)))
    _raises_as_torch(lambda: jg.einsum("ij"), lambda: torch.einsum("ij"))


def test_einsum_numba_matches_eager():
    arrays = [_rng(3).standard_normal(s) for s in [(2, 3, 4), (2, 4, 3), (3, 3)]]

    def f(lib):
        return lambda a, b, c: (lib.einsum("bij,bjk->bik", a, b) * 2.0, lib.einsum("ii,bij->bj", c, a))
    _agree(f(jg), f(torch), arrays, modes=("numba",), second_order=None)


# ---- F.pad and the padding modules -------------------------------------------------------------------------------

_PADS = [("constant", (1, 2), (2, 3, 4)), ("constant", (-1, 2, 0, -1), (2, 3, 4)),
         ("constant", (1, 1, 1, 1, 1, 1), (2, 3, 4)),
         ("reflect", (1, 2), (2, 3, 4)), ("reflect", (3, 2, 2, 1), (2, 3, 4)), ("reflect", (-1, 2), (3, 4)),
         ("replicate", (4, 2), (2, 3, 4)), ("replicate", (1, 2, 3, 1, 1, 2), (1, 2, 3, 4)),
         ("replicate", (-2, 3), (3, 4)), ("circular", (4, 2), (2, 3, 4)), ("circular", (1, 2, 3, 0), (2, 3, 4)),
         ("circular", (-1, 2), (1, 4))]


@pytest.mark.parametrize("mode,amounts,shape", _PADS)
def test_pad_matches_torch(mode, amounts, shape):
    x = _rng(len(shape)).standard_normal(shape)
    value = {"constant": 2.5}.get(mode)
    _agree(lambda a: jg.nn.functional.pad(a, amounts, mode, value),
           lambda a: torch.nn.functional.pad(a, amounts, mode, value), [x])
    r = jg.nn.functional.pad(jg.tensor(x, requires_grad=True), amounts, mode, value)
    assert r.grad_fn.name() == torch.nn.functional.pad(torch.tensor(x, requires_grad=True), amounts, mode,
                                                       value).grad_fn.name() or mode == "circular"


def test_pad_integer_fill_and_list_padding():
    for lib in (jg, torch):
        assert lib.nn.functional.pad(lib.ones(3, dtype=lib.int64), (1, 2), value=2.7).tolist() == [2, 1, 1, 1, 2, 2]
    assert jg.nn.functional.pad(jg.ones(2, 2), [1, 0]).shape == (2, 3)


def test_pad_errors_match_torch():
    x = np.ones((1, 2, 3, 4))
    for call in (lambda F, a: F.pad(a, (1, 2, 3)), lambda F, a: F.pad(a, (1,) * 10), lambda F, a: F.pad(a, (-3, -2)),
                 lambda F, a: F.pad(a, (1, 2), mode="reflect"), lambda F, a: F.pad(a[0, 0, 0], (1, 2), "circular"),
                 lambda F, a: F.pad(a[0], (4, 2), mode="reflect"), lambda F, a: F.pad(a[0], (1, 2, 3, 1), "reflect"),
                 lambda F, a: F.pad(a[0], (5, 2), mode="circular"),
                 lambda F, a: F.pad(a[0][:, :0], (1, 1), "replicate"),
                 lambda F, a: F.pad(a, (1, 2), mode="foo"), lambda F, a: F.pad(a[0], (1, 2), "reflect", 1.0),
                 lambda F, a: F.pad(a, (1.5, 2))):
        _raises_as_torch(lambda: call(jg.nn.functional, jg.tensor(x)),
                         lambda: call(torch.nn.functional, torch.tensor(x)))


def test_padding_modules_match_torch():
    x = _rng(5).standard_normal((2, 3, 4))
    for name, args in (("ZeroPad1d", (1,)), ("ZeroPad2d", ((1, 2, 0, 1),)), ("ConstantPad1d", ((1, 2), 3.5)),
                       ("ConstantPad2d", (1, -1.0)), ("ConstantPad3d", (1, 0.5)), ("ReflectionPad1d", (2,)),
                       ("ReflectionPad2d", ((1, 0, 2, 1),)), ("ReplicationPad1d", ((0, 3),)),
                       ("ReplicationPad2d", (1,))):
        mj, mt = getattr(jg.nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(mj) == repr(mt)
        np.testing.assert_array_equal(mj(jg.tensor(x)).numpy(), mt(torch.tensor(x)).numpy())


def test_pad_numba_matches_eager():
    x = _rng(6).standard_normal((2, 3, 4))

    def f(F):
        return lambda a: (F.pad(a, (1, 2, 1, 0), "reflect") * 2.0, F.pad(a, (2, 1), "circular"),
                          F.pad(a, (1, 1, -1, 1), value=0.5), F.pad(a, (0, 2), "replicate"))
    _agree(f(jg.nn.functional), f(torch.nn.functional), [x], modes=("numba",), second_order=None)


# ---- softplus, logsigmoid, rms_norm, normalize, BCE with logits, kl_div ------------------------------------------

_X = np.array([[-800.0, -25.0, -1.5, 0.0, 0.7], [3.0, 19.9, 20.5, 40.0, 800.0]])


@pytest.mark.parametrize("beta,threshold", [(1.0, 20.0), (2.0, 1.0), (0.5, 10.0)])
def test_softplus_matches_torch_on_both_tails(beta, threshold):
    _agree(lambda a: jg.nn.functional.softplus(a, beta, threshold),
           lambda a: torch.nn.functional.softplus(a, beta, threshold), [_X])
    m, mt = jg.nn.Softplus(beta, threshold), torch.nn.Softplus(beta, threshold)
    assert repr(m) == repr(mt)
    assert m(jg.tensor(_X, requires_grad=True)).grad_fn.name() == "SoftplusBackward0"


def test_logsigmoid_and_silu_match_torch():
    _agree(jg.nn.functional.logsigmoid, torch.nn.functional.logsigmoid, [_X])
    _agree(lambda a: jg.nn.LogSigmoid()(a) + jg.nn.SiLU()(a), lambda a: torch.nn.LogSigmoid()(a) + torch.nn.SiLU()(a),
           [_X / 10])
    assert repr(jg.nn.SiLU(True)) == repr(torch.nn.SiLU(True)) and repr(jg.nn.LogSigmoid()) == "LogSigmoid()"
    x = jg.tensor(_X / 10)
    jg.nn.SiLU(inplace=True)(x)
    np.testing.assert_allclose(x.numpy(), torch.nn.functional.silu(torch.tensor(_X / 10)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape,eps,affine", [((4,), None, True), ((3, 4), 1e-3, True), ((4,), 1e-6, False)])
def test_rms_norm_matches_torch(shape, eps, affine):
    x = _rng(11).standard_normal((2, 3, 4))
    w = _rng(12).standard_normal(shape)
    if affine:
        _agree(lambda a, b: jg.nn.functional.rms_norm(a, shape, b, eps),
               lambda a, b: torch.nn.functional.rms_norm(a, shape, b, eps), [x, w])
    else:
        _agree(lambda a: jg.nn.functional.rms_norm(a, list(shape), eps=eps),
               lambda a: torch.nn.functional.rms_norm(a, list(shape), eps=eps), [x])
    mj = jg.nn.RMSNorm(shape[-1] if len(shape) == 1 else shape, eps=eps, elementwise_affine=affine)
    mt = torch.nn.RMSNorm(shape[-1] if len(shape) == 1 else shape, eps=eps, elementwise_affine=affine)
    assert repr(mj) == repr(mt) and [n for n, _ in mj.named_parameters()] == [n for n, _ in mt.named_parameters()]
    xf = x.astype(np.float32)      # eps=None: float32's machine epsilon
    np.testing.assert_allclose(mj(jg.tensor(xf)).detach().numpy(), mt(torch.tensor(xf)).detach().numpy(), rtol=1e-5)


def test_rms_norm_errors_match_torch():
    for call in (lambda F, a: F.rms_norm(a, (2,)), lambda F, a: F.rms_norm(a, (3,), weight=a[0, :2]),
                 lambda F, a: F.rms_norm(a, 3)):
        _raises_as_torch(lambda: call(jg.nn.functional, jg.ones(2, 3)),
                         lambda: call(torch.nn.functional, torch.ones(2, 3)))


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1, 0), (3, -1)])
def test_normalize_matches_torch(p, dim):
    x = _rng(13).standard_normal((3, 4))
    _agree(lambda a: jg.nn.functional.normalize(a, p, dim), lambda a: torch.nn.functional.normalize(a, p, dim),
           [x], second_order=p != 1)
    x[1] = 0.0        # a zero row: the eps clamp and torch's gradient there (finite differences cross the kink)
    _agree(lambda a: jg.nn.functional.normalize(a, p, dim), lambda a: torch.nn.functional.normalize(a, p, dim),
           [x], second_order=None if dim != 0 else p != 1)
    _raises_as_torch(lambda: jg.nn.functional.normalize(jg.ones(2, 3), dim=3),
                     lambda: torch.nn.functional.normalize(torch.ones(2, 3), dim=3))


@pytest.mark.parametrize("weighted,pos_weighted,reduction", [(False, False, "mean"), (True, False, "sum"),
                                                              (False, True, "none"), (True, True, "mean")])
def test_bce_with_logits_matches_torch(weighted, pos_weighted, reduction):
    x, t = _X / 10, _rng(14).uniform(0, 1, _X.shape)
    w, pw = _rng(15).uniform(0.5, 2, (5,)), _rng(16).uniform(0.5, 3, (5,))

    def f(lib):
        return lambda a, b, c, d: lib.nn.functional.binary_cross_entropy_with_logits(
            a, b, c if weighted else None, reduction=reduction, pos_weight=d if pos_weighted else None)
    _agree(f(jg), f(torch), [x, t, w, pw], needs_grad=[True, True, False, False])   # torch: no grad for weights
    lj = jg.nn.BCEWithLogitsLoss(weight=jg.tensor(w), pos_weight=jg.tensor(pw), reduction=reduction)
    lt = torch.nn.BCEWithLogitsLoss(weight=torch.tensor(w), pos_weight=torch.tensor(pw), reduction=reduction)
    np.testing.assert_allclose(lj(jg.tensor(x), jg.tensor(t)).numpy(), lt(torch.tensor(x), torch.tensor(t)).numpy(),
                               rtol=1e-12)
    assert sorted(dict(lj.named_buffers())) == sorted(dict(lt.named_buffers()))


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    x = np.log(_rng(17).dirichlet(np.ones(4), 3))
    t = _rng(18).dirichlet(np.ones(4), 3)
    t = np.log(t) if log_target else t

    def f(lib):
        return lambda a, b: lib.nn.functional.kl_div(a, b, reduction=reduction, log_target=log_target)
    with pytest.warns(UserWarning, match="batchmean") if reduction == "mean" else _no_warning():
        _agree(f(jg), f(torch), [x, t])
    if not log_target:
        # a zero probability: 0 * log 0 is 0.  torch's target gradient there is NaN (a where over 0 * inf); ours is
        # finite, so only the input's gradient is compared
        t[0, 1] = 0.0
        with pytest.warns(UserWarning, match="batchmean") if reduction == "mean" else _no_warning():
            _agree(f(jg), f(torch), [x, t], needs_grad=[True, False])
    lj, lt = jg.nn.KLDivLoss(reduction="sum", log_target=log_target), torch.nn.KLDivLoss("sum" and None, None, "sum",
                                                                                         log_target)
    np.testing.assert_allclose(lj(jg.tensor(x), jg.tensor(t)).numpy(), lt(torch.tensor(x), torch.tensor(t)).numpy(),
                               rtol=1e-12)


def _no_warning():
    import contextlib
    return contextlib.nullcontext()


def test_loss_reduction_errors_match_torch():
    for call in (lambda F, a: F.binary_cross_entropy_with_logits(a, a[:, :2]),
                 lambda F, a: F.binary_cross_entropy_with_logits(a, a, reduction="foo"),
                 lambda F, a: F.kl_div(a, a, reduction="foo")):
        _raises_as_torch(lambda: call(jg.nn.functional, jg.ones(2, 3)),
                         lambda: call(torch.nn.functional, torch.ones(2, 3)))


def test_smooth_ops_numba_match_eager():
    x, t = _X / 10, _rng(19).uniform(0, 1, _X.shape)

    def f(lib):
        F = lib.nn.functional
        return lambda a, b: (F.softplus(a, 2.0, 1.0), F.logsigmoid(a) * b, F.rms_norm(a, (5,)), F.normalize(a),
                             F.binary_cross_entropy_with_logits(a, b), F.kl_div(F.log_softmax(a, -1), b, None, None,
                                                                                 "batchmean"))
    _agree(f(jg), f(torch), [x, t], modes=("numba",), second_order=None)


# ---- lerp, logaddexp, nan_to_num, isclose, unflatten -------------------------------------------------------------

def test_lerp_matches_torch():
    a, b, w = (_rng(20 + i).standard_normal((2, 3)) for i in range(3))
    _agree(lambda x, y: jg.lerp(x, y, 0.3), lambda x, y: torch.lerp(x, y, 0.3), [a, b])
    _agree(lambda x, y, z: x.lerp(y, z[0]), lambda x, y, z: x.lerp(y, z[0]), [a, b, w])
    assert jg.lerp(jg.tensor(a, requires_grad=True), jg.tensor(b), 0.5).grad_fn.name() == "LerpBackward0"
    x = jg.tensor(a)
    x.lerp_(jg.tensor(b), 0.25)
    np.testing.assert_allclose(x.numpy(), torch.tensor(a).lerp_(torch.tensor(b), 0.25).numpy(), rtol=1e-12)
    for call in (lambda lib: lib.lerp(lib.ones(2), lib.ones(2, dtype=lib.float64), 0.3),
                 lambda lib: lib.lerp(lib.ones(2), lib.ones(2), lib.ones(2, dtype=lib.float64)),
                 lambda lib: lib.lerp(lib.ones(2), 1.0, 0.5)):
        _raises_as_torch(lambda: call(jg), lambda: call(torch))


def test_logaddexp_matches_torch():
    a = np.array([[-1000.0, 0.0, 3.0, 2.0], [1.0, 700.0, -5.0, 0.5]])
    b = np.array([[-1000.0, 0.0, -2.0, 2.5], [4.0, 710.0, -5.0, -0.5]])      # ties, both tails
    _agree(jg.logaddexp, torch.logaddexp, [a, b])
    inf = np.inf
    x, y = [-inf, inf, 1.0, -inf], [-inf, inf, inf, 2.0]
    assert jg.logaddexp(jg.tensor(x), jg.tensor(y)).tolist() == torch.logaddexp(torch.tensor(x),
                                                                                 torch.tensor(y)).tolist()
    for call in (lambda lib: lib.logaddexp(lib.ones(2, dtype=lib.int64), lib.ones(2, dtype=lib.int64)),
                 lambda lib: lib.logaddexp(lib.ones(2), 1.0)):
        _raises_as_torch(lambda: call(jg), lambda: call(torch))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_to_num_matches_torch(dtype):
    v = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0], dtype=dtype)
    for kw in ({}, {"nan": 1.0, "posinf": 2.0, "neginf": -3.0}):
        assert np.array_equal(jg.nan_to_num(jg.tensor(v), **kw).numpy(),
                              torch.nan_to_num(torch.tensor(v), **kw).numpy())
    xj, xt = jg.tensor(v.astype(np.float64), requires_grad=True), torch.tensor(v.astype(np.float64), requires_grad=True)
    jg.nan_to_num(xj).sum().backward()
    torch.nan_to_num(xt).sum().backward()
    assert xj.grad.tolist() == xt.grad.tolist()
    assert jg.tensor([1, 2]).nan_to_num().tolist() == [1, 2]
    _agree(lambda a: jg.nan_to_num(a * a), lambda a: torch.nan_to_num(a * a), [np.array([1.0, 2.0])],
           modes=("compiled",))


def test_isclose_matches_torch():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 1.0, 1e-9, 100.0])
    b = np.array([1.0 + 1e-6, np.nan, np.inf, np.inf, 1.1, 0.0, 100.001])
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 1e-3, "atol": 0.1}):
        assert jg.isclose(jg.tensor(a), jg.tensor(b), **kw).tolist() == \
            torch.isclose(torch.tensor(a), torch.tensor(b), **kw).tolist()
    assert jg.tensor([1, 2]).isclose(jg.tensor([1, 3])).tolist() == [True, False]
    f = jg.compile(lambda x, y: jg.isclose(x, y, equal_nan=True), backend="interpret")
    assert f(jg.tensor(a), jg.tensor(b)).tolist() == torch.isclose(torch.tensor(a), torch.tensor(b),
                                                                     equal_nan=True).tolist()
    for call in (lambda lib: lib.isclose(lib.ones(2), lib.ones(2, dtype=lib.float64)),
                 lambda lib: lib.isclose(lib.ones(2), lib.ones(2), rtol=-1),
                 lambda lib: lib.isclose(lib.ones(2), lib.ones(2), atol=-1),
                 lambda lib: lib.isclose(lib.ones(2), 1.0)):
        _raises_as_torch(lambda: call(jg), lambda: call(torch))


def test_unflatten_matches_torch():
    x = _rng(21).standard_normal((3, 10))
    _agree(lambda a: a.unflatten(1, (2, -1)) * 2.0, lambda a: a.unflatten(1, (2, -1)) * 2.0, [x])
    mj, mt = jg.nn.Unflatten(1, (2, 5)), torch.nn.Unflatten(1, (2, 5))
    assert repr(mj) == repr(mt) and mj(jg.tensor(x)).shape == tuple(mt(torch.tensor(x)).shape)
    _raises_as_torch(lambda: jg.ones(3, 10).unflatten(1, (2, 4)), lambda: torch.ones(3, 10).unflatten(1, (2, 4)))


def test_pointwise_composites_numba_match_eager():
    a, b = _rng(22).standard_normal((2, 5)), _rng(23).standard_normal((2, 5))

    def f(lib):
        return lambda x, y: (lib.lerp(x, y, 0.3), lib.logaddexp(x, y), lib.nan_to_num(x.log()))
    _agree(f(jg), f(torch), [a, b], modes=("numba",), second_order=None)
