"""Eager and compiled agree on every public op and function: values, first-order grads (``.backward()`` inside the
function and ``autograd.grad`` outside it), second-order grads (``create_graph=True`` outside and inside), all in
float64.  Each program runs under the ``mode`` fixture: in "eager" it is checked against central differences, in
"compiled" against eager (to ~1e-9) *and* central differences, so compiled is tested on everything eager is.
"""
import zlib

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad import autograd

from compiled import assert_agree, assert_close_lists, evaluate, fd_grads, fd_hvp, maybe_compile

ANY, POS, UNIT = "any", "pos", "unit"


def _arrays(name, shapes, domain):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for s in shapes:
        if domain == POS:
            a = rng.uniform(0.5, 2.0, s)
        elif domain == UNIT:
            a = rng.uniform(-0.8, 0.8, s)
        else:
            a = rng.standard_normal(s)
            a = a + np.sign(a) * 0.05     # keep away from the kinks of relu/abs/sign/clamp at 0
        out.append(a)
    return out


class _Square(autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _ScaleShift(autograd.Function):
    """Two inputs, a non-tensor argument, two outputs."""

    @staticmethod
    def forward(ctx, a, b, k):
        ctx.k = k
        ctx.save_for_backward(a, b)
        return a * b * k, a + b

    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        return g1 * b * ctx.k + g2, g1 * a * ctx.k + g2, None


class _CtxAttr(autograd.Function):
    """A tensor kept as a ctx attribute (not save_for_backward), an integer output marked non-differentiable,
    and set_materialize_grads(False)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.w = w
        ctx.x = x
        ctx.set_materialize_grads(False)
        idx = x.argmax(dim=-1)
        ctx.mark_non_differentiable(idx)
        return (x * w).tanh(), idx

    @staticmethod
    def backward(ctx, g, _):
        y = (ctx.x * ctx.w).tanh()
        d = g * (1 - y * y)
        return d * ctx.w, (d * ctx.x).sum(0)


IDX = jg.tensor([2, 0, 1, 2])
GATHER_IDX = jg.tensor([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 3]])
TARGETS = jg.tensor([1, 0, 3])


def _setitem_rows(x):
    y = x * 1.5
    y[0] = x[1] * 2
    y[:, 1] = y[:, 1].exp()
    return y


def _setitem_tensor_index(x):
    y = x.clone()
    y[jg.tensor([0, 2])] = x[jg.tensor([1, 1])] * x[0]
    return y.sin()


def _inplace_chain(x):
    y = x.clone()
    y.mul_(2).add_(x.exp())
    y.sub_(x * 0.5)
    y.div_(x * x + 1)
    return y


def _fill(x):
    y = x * 2
    y[1:] = 0.5
    z = (x * 3).fill_(0.25)
    return y * x + z * x


def _split_chunk(x):
    a, b, c = x.split([1, 2, 1], dim=1)
    d, e = x.chunk(2, dim=0)
    return a * c, (b.sum(1) + d.sum() * e.sum()).exp()


def _no_grad_region(x):
    with jg.no_grad():
        scale = x.abs().amax() + 1
    return x.sin() / scale


PROGRAMS = [
    # elementwise unary
    ("exp", lambda x: x.exp(), [(3, 4)], ANY),
    ("log", lambda x: x.log(), [(3, 4)], POS),
    ("log1p", lambda x: jg.log1p(x), [(3, 4)], POS),
    ("expm1", lambda x: jg.expm1(x), [(3, 4)], ANY),
    ("log2_log10", lambda x: jg.log2(x) + jg.log10(x), [(5,)], POS),
    ("sqrt", lambda x: x.sqrt(), [(3, 4)], POS),
    ("rsqrt", lambda x: x.rsqrt(), [(3, 4)], POS),
    ("sin_cos", lambda x: x.sin() * x.cos(), [(3, 4)], ANY),
    ("tan", lambda x: x.tan(), [(3, 4)], UNIT),
    ("tanh", lambda x: x.tanh(), [(3, 4)], ANY),
    ("sigmoid", lambda x: x.sigmoid(), [(3, 4)], ANY),
    ("relu", lambda x: x.relu() * x, [(3, 4)], ANY),
    ("abs", lambda x: x.abs() * x, [(3, 4)], ANY),
    ("sign", lambda x: x.sign() * x * x, [(3, 4)], ANY),
    ("neg", lambda x: -x * x.exp(), [(3, 4)], ANY),
    ("reciprocal", lambda x: x.reciprocal(), [(3, 4)], POS),
    ("pow_scalar", lambda x: x ** 3 + x ** 2.5, [(3, 4)], POS),
    ("rpow", lambda x: 2.0 ** x, [(3, 4)], ANY),
    ("square", lambda x: jg.square(x).sin(), [(3, 4)], ANY),
    ("erf", lambda x: x.erf(), [(3, 4)], ANY),
    ("clamp", lambda x: x.clamp(-0.5, 0.7) * x, [(4, 5)], ANY),
    ("clamp_min", lambda x: jg.clamp(x, min=0.1) * x, [(4, 5)], ANY),
    ("clamp_tensor_bounds", lambda x, lo: jg.clamp(x, min=lo) * x, [(4, 5), (5,)], ANY),
    ("where", lambda x: jg.where(x > 0, x * x, x.exp()), [(3, 4)], ANY),
    ("where_scalar", lambda x, y: jg.where(x < y, x, 0.5) * y, [(3, 4), (4,)], ANY),
    ("min_max_elementwise", lambda x, y: jg.minimum(x, y) * jg.maximum(x, y).exp(), [(3, 4), (3, 4)], ANY),
    ("remainder", lambda x: jg.remainder(x, 1.3) * x, [(3, 4)], POS),
    ("comparisons_as_masks", lambda x: x * (x > 0.2) + x * (x <= -0.1) * 3, [(3, 4)], ANY),
    # binary with broadcasting
    ("add_broadcast", lambda x, y: (x + y).tanh(), [(3, 4), (4,)], ANY),
    ("sub_broadcast", lambda x, y: (x - y) * x, [(3, 1), (1, 4)], ANY),
    ("mul_broadcast", lambda x, y: x * y * y, [(2, 3, 4), (3, 1)], ANY),
    ("div_broadcast", lambda x, y: x / y, [(3, 4), (4,)], POS),
    ("pow_tensor", lambda x, y: x ** y, [(3, 4), (4,)], POS),
    ("add_alpha", lambda x, y: jg.add(x, y, alpha=2.5) * jg.sub(x, y, alpha=0.5), [(3, 4), (3, 4)], ANY),
    ("scalar_ops", lambda x: (2 - x) * (1 / (x + 3)) + 4 * x - x / 2, [(3, 4)], POS),
    # reductions
    ("sum_all", lambda x: (x * x).sum(), [(3, 4)], ANY),
    ("sum_dim", lambda x: x.exp().sum(dim=1), [(3, 4)], ANY),
    ("sum_keepdim", lambda x: x * x.sum(dim=0, keepdim=True), [(3, 4)], ANY),
    ("sum_tuple_dims", lambda x: x.sin().sum(dim=(0, 2)), [(2, 3, 4)], ANY),
    ("mean", lambda x: x.mean() * x.mean(dim=-1, keepdim=True), [(3, 4)], ANY),
    ("prod", lambda x: x.prod(dim=1) + x.prod(), [(3, 4)], POS),
    ("amax_amin", lambda x: x.amax(dim=1) * x.amin(dim=0).sum(), [(3, 4)], ANY),
    ("max_min_dim", lambda x: (x.max(dim=1).values * x.min(dim=0, keepdim=True)[0].sum(), x.max(dim=1)[1]),
     [(3, 4)], ANY),
    ("max_all", lambda x: x.max() * x.min(), [(3, 4)], ANY),
    ("argmax", lambda x: (x.argmax(dim=1), x.argmin(), x * 2), [(3, 4)], ANY),
    ("var_std", lambda x: x.var() + x.std(dim=1) * x.var(dim=0, keepdim=True).sum(), [(3, 4)], ANY),
    ("var_correction", lambda x: x.var(dim=1, correction=0) + x.std(dim=1, unbiased=False), [(3, 4)], ANY),
    ("logsumexp", lambda x: jg.logsumexp(x, dim=1) + x.logsumexp(dim=0).sum(), [(3, 4)], ANY),
    ("norm", lambda x: x.norm() + x.norm(dim=1).sum() + jg.norm(x, p=2, dim=0, keepdim=True).sum(), [(3, 4)], ANY),
    # shape ops
    ("reshape_view", lambda x: x.reshape(4, 3).exp() * x.view(2, 6).reshape(4, 3), [(3, 4)], ANY),
    ("reshape_infer", lambda x: x.reshape(-1, 2).sin(), [(3, 4)], ANY),
    ("flatten", lambda x: x.flatten(1) * x.flatten().sum(), [(2, 3, 2)], ANY),
    ("squeeze_unsqueeze", lambda x: x.unsqueeze(0).squeeze(2) * x.squeeze().unsqueeze(-1).squeeze(-1), [(3, 1, 4)],
     ANY),
    ("expand", lambda x: x.expand(2, 3, 4).sin() * x, [(3, 1)], ANY),
    ("broadcast_to", lambda x: jg.broadcast_to(x, (3, 4)) * x, [(4,)], ANY),
    ("transpose_permute", lambda x: x.transpose(0, 2).exp() * x.permute(2, 1, 0), [(2, 3, 4)], ANY),
    ("T_mT_t", lambda x, y: x.T * x.t() + y.mT.sum(0), [(3, 4), (2, 3, 4)], ANY),
    ("contiguous_swapaxes", lambda x: jg.swapaxes(x, 0, 1).contiguous() ** 2, [(3, 4)], ANY),
    # indexing
    ("getitem_basic", lambda x: x[1] * x[:, 2:].sum() + x[0, ::2].sum() * x[-1, None, 1:3].sum(), [(3, 4)], ANY),
    ("getitem_ellipsis", lambda x: x[..., 1] * x[None, ..., 0].sum(), [(2, 3, 4)], ANY),
    ("getitem_tensor", lambda x: x[IDX] * x[IDX, 1:2], [(3, 4)], ANY),
    ("getitem_list_pairs", lambda x: x[[0, 2], [1, 3]] * 2 + x[:, [3, 0]].sum(), [(3, 4)], ANY),
    ("setitem_nonleaf", _setitem_rows, [(3, 4)], ANY),
    ("setitem_tensor_index", _setitem_tensor_index, [(3, 4)], ANY),
    ("inplace_chain", _inplace_chain, [(3, 4)], ANY),
    ("fill_slice", _fill, [(3, 4)], ANY),
    # concatenation and splitting
    ("cat", lambda x, y: jg.cat([x, y * y, x.exp()], dim=0).sin(), [(2, 4), (3, 4)], ANY),
    ("cat_dim1", lambda x, y: jg.cat((x, y), dim=1) * 2, [(3, 2), (3, 4)], ANY),
    ("stack", lambda x, y: jg.stack([x, y, x * y], dim=1).tanh(), [(3, 4), (3, 4)], ANY),
    ("split_chunk", _split_chunk, [(2, 4)], ANY),
    ("unbind", lambda x: [r * (i + 1) for i, r in enumerate(x.unbind(1))], [(3, 3)], ANY),
    ("gather", lambda x: x.gather(1, GATHER_IDX).exp(), [(3, 4)], ANY),
    ("index_select", lambda x: jg.index_select(x, 0, IDX) * x.index_select(1, IDX[:2]).sum(), [(3, 4)], ANY),
    ("take_along_dim", lambda x: jg.take_along_dim(x, GATHER_IDX, 1).sin(), [(3, 4)], ANY),
    # matmul variants
    ("matmul_2d", lambda a, b: (a @ b).tanh(), [(3, 4), (4, 5)], ANY),
    ("matmul_vec", lambda a, b, v: (a @ v) * (v @ b).sum() + v @ v, [(3, 4), (4, 2), (4,)], ANY),
    ("matmul_batched", lambda a, b: jg.matmul(a, b).sin(), [(2, 3, 4), (2, 4, 5)], ANY),
    ("matmul_broadcast", lambda a, b: a @ b, [(2, 3, 4), (4, 2)], ANY),
    ("matmul_broadcast_batch", lambda a, b: (a @ b) ** 2, [(2, 1, 3, 4), (3, 4, 2)], ANY),
    ("mm_bmm", lambda a, b, c, d: jg.mm(a, b).sum() * jg.bmm(c, d), [(3, 4), (4, 2), (2, 2, 3), (2, 3, 2)], ANY),
    ("outer_dot", lambda u, v: jg.outer(u, v) * jg.dot(u, u), [(3,), (4,)], ANY),
    # composites
    ("softmax", lambda x: x.softmax(dim=1) * jg.softmax(x, dim=0), [(3, 4)], ANY),
    ("log_softmax", lambda x: x.log_softmax(dim=-1) * F.log_softmax(x, dim=0), [(3, 4)], ANY),
    ("cross_entropy", lambda x: F.cross_entropy(x, TARGETS), [(3, 4)], ANY),
    ("cross_entropy_sum", lambda x: F.cross_entropy(x * 2, TARGETS, reduction="sum"), [(3, 4)], ANY),
    ("nll_loss", lambda x: F.nll_loss(x.log_softmax(1), TARGETS), [(3, 4)], ANY),
    ("mse_loss", lambda x, y: F.mse_loss(x, y) + F.mse_loss(x, y, reduction="sum"), [(3, 4), (3, 4)], ANY),
    ("l1_loss", lambda x, y: F.l1_loss(x * x, y), [(3, 4), (3, 4)], ANY),
    ("gelu", lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [(3, 4)], ANY),
    ("nn_activations", lambda x: F.relu(x) * F.sigmoid(x) + F.tanh(x), [(3, 4)], ANY),
    ("mlp", lambda x, w1, w2: F.cross_entropy((x @ w1).tanh() @ w2, TARGETS), [(3, 5), (5, 6), (6, 4)], ANY),
    ("layernorm_by_hand", lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False)
                                                                       + 1e-5).sqrt(), [(3, 4)], ANY),
    # custom autograd.Function (its backward written with jitgrad ops, so differentiable)
    ("custom_function", lambda x: _Square.apply(x.sin()) * x, [(3, 4)], ANY),
    ("custom_function_multi", lambda a, b: _ScaleShift.apply(a, b.exp(), 1.5), [(3,), (3,)], ANY),
    ("custom_function_ctx_attr", lambda x, w: _CtxAttr.apply(x.sin(), w), [(2, 3), (3,)], ANY),
    # detach and no_grad regions inside
    ("detach", lambda x: x * x.detach().exp(), [(3, 4)], ANY),
    ("no_grad_region", _no_grad_region, [(3, 4)], ANY),
]

NO_FD = {"detach", "no_grad_region"}    # they differ from the numerical derivative on purpose

IDS = [p[0] for p in PROGRAMS]


@pytest.mark.parametrize("name,fn,shapes,domain", PROGRAMS, ids=IDS)
def test_program(name, fn, shapes, domain, mode):
    arrays = _arrays(name, shapes, domain)
    got = evaluate(fn, arrays, mode)
    assert_close_lists(got["values_again"], got["values"], 0, 0, "values on the second call")
    if mode != "eager":
        want = evaluate(fn, arrays, "eager")
        assert_agree(got, want)
    if "grads" not in got or name in NO_FD:
        return
    ws = got["ws"]
    fd = fd_grads(fn, arrays, ws)
    assert_close_lists(got["grads"], fd, 1e-5, 1e-6, "backward() inside vs finite differences")
    assert_close_lists(got["outer"], fd, 1e-5, 1e-6, "autograd.grad outside vs finite differences")
    h = fd_hvp(fn, arrays, ws)
    assert_close_lists(got["hvp"], h, 1e-4, 1e-5, "second order (create_graph outside) vs finite differences")
    assert_close_lists(got["inner_hvp"], h, 1e-4, 1e-5, "second order (create_graph inside) vs finite differences")


# ---- gradcheck / gradgradcheck on compiled functions -------------------------------------------------

GRADCHECK = ["exp", "tanh", "div_broadcast", "sum_keepdim", "var_std", "logsumexp", "reshape_view",
             "transpose_permute", "getitem_tensor", "setitem_nonleaf", "cat", "gather", "matmul_batched",
             "softmax", "cross_entropy", "gelu", "custom_function", "split_chunk", "layernorm_by_hand"]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_compiled(name, mode):
    _, fn, shapes, domain = PROGRAMS[IDS.index(name)]
    xs = tuple(jg.tensor(a, requires_grad=True) for a in _arrays(name, shapes, domain))
    f = maybe_compile(fn, mode)
    assert autograd.gradcheck(f, xs)
    assert autograd.gradgradcheck(f, xs)
    if mode != "eager":
        assert f.stats["traces"] >= 1 and f.stats["hits"] >= 1


def test_gradcheck_of_compiled_gradient():
    """A compiled function that itself returns a gradient (create_graph inside) passes gradcheck."""
    @jg.compile
    def g(x, w):
        (gx,) = autograd.grad(((x @ w).tanh() ** 2).sum(), x, create_graph=True)
        return gx

    x = jg.tensor(np.random.default_rng(0).standard_normal((2, 3)), requires_grad=True)
    w = jg.tensor(np.random.default_rng(1).standard_normal((3, 2)), requires_grad=True)
    assert autograd.gradcheck(g, (x, w))
    assert autograd.gradgradcheck(g, (x, w))


def test_gradcheck_catches_a_wrong_compiled_backward():
    """The oracle is not vacuous: a custom Function with a wrong backward fails gradcheck when compiled too."""
    class Wrong(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * g

    f = jg.compile(lambda x: Wrong.apply(x))
    x = jg.tensor([0.5, -1.0], dtype=jg.float64, requires_grad=True)
    with pytest.raises(autograd.GradcheckError):
        autograd.gradcheck(f, (x,))


# ---- float32: compiled agrees with eager to float32 rounding ------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "softmax", "layernorm_by_hand", "matmul_batched", "var_std"])
def test_float32_agreement(name):
    _, fn, shapes, domain = PROGRAMS[IDS.index(name)]
    arrays = [a.astype(np.float32) for a in _arrays(name, shapes, domain)]
    got = evaluate(fn, arrays, "compiled", second_order=False)
    want = evaluate(fn, arrays, "eager", ws=got["ws"], second_order=False)
    for key in ("values", "grads", "outer"):
        assert_close_lists(got[key], want[key], 1e-5, 1e-6, key)
        for g in got[key]:
            assert g.dtype in (np.float32, np.int64), (key, g.dtype)
