"""torch ops that transformer and modern training scripts use, against torch: repeat_interleave, roll, diff,
meshgrid, einsum, F.pad, ... Each: values and gradients equal torch's (float64), eager == compiled (the
interpreter everywhere, Numba in one shared program per theme), gradcheck/gradgradcheck, and torch's exception
type and text for bad arguments."""
from __future__ import annotations

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import gradcheck, gradgradcheck
from compiled import flat, maybe_compile

torch = pytest.importorskip("torch")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _agree(fj, ft, arrays, modes=("eager", "compiled"), second_order=True, atol=1e-10):
    """``fj`` (jitgrad) and ``ft`` (torch) on the float64 ``arrays``: equal values and input gradients of
    ``sum(out * w)``, in each of ``modes``; then gradcheck (and gradgradcheck) of ``fj`` eagerly."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    outs_t = flat(ft(*ts))
    ws = [_rng(9).uniform(0.5, 1.5, tuple(o.shape)) for o in outs_t]
    floats = [o.is_floating_point() for o in outs_t]
    if any(floats):
        sum(((o * torch.tensor(w)).sum() for o, w, fl in zip(outs_t, ws, floats) if fl)).backward()
    for mode in modes:
        js = [jg.tensor(a, requires_grad=True) for a in arrays]
        outs_j = flat(maybe_compile(fj, mode)(*js))
        assert len(outs_j) == len(outs_t)
        for oj, ot in zip(outs_j, outs_t):
            assert tuple(oj.shape) == tuple(ot.shape) and oj.dtype.name == str(ot.dtype).split(".")[1], mode
            np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), atol=atol, rtol=1e-10)
        if any(floats):
            sum(((o * jg.tensor(w)).sum() for o, w, fl in zip(outs_j, ws, floats) if fl)).backward()
            for a, b in zip(js, ts):
                ga = np.zeros(a.shape) if a.grad is None else a.grad.numpy()
                gb = np.zeros(tuple(b.shape)) if b.grad is None else b.grad.numpy()
                np.testing.assert_allclose(ga, gb, atol=atol, rtol=1e-9, err_msg=mode)
    if any(floats) and second_order is not None:
        js = [jg.tensor(a, requires_grad=True) for a in arrays]
        assert gradcheck(fj, js)
        if second_order:
            assert gradgradcheck(fj, js)


def _raises_as_torch(fj, ft, upto=None):
    """``fj`` raises the exception type and text that ``ft`` (the same call in torch) raises (the text up to
    ``upto`` only, where torch goes on to print a tensor in C++'s format)."""
    with pytest.raises(Exception) as tinfo:
        ft()
    with pytest.raises(type(tinfo.value)) as jinfo:
        fj()
    cut = (lambda s: s.split(upto)[0]) if upto else (lambda s: s)
    assert cut(str(jinfo.value)) == cut(str(tinfo.value))


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

_PADS = [("constant", (1, 2), (2, 3, 4)), ("constant", (-1, 2, 0, -1), (2, 3, 4)), ("constant", (1, 1, 1, 1, 1, 1), (2, 3, 4)),
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
                 lambda F, a: F.pad(a[0], (5, 2), mode="circular"), lambda F, a: F.pad(a[0][:, :0], (1, 1), "replicate"),
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
