"""The surface GPT training scripts use (issue 18), against torch: tril/triu/diagonal, scaled_dot_product_attention,
torch's view rule, masked_fill with a buffer's mask, fused ops with decompositions, torch.save/load both ways,
torch.amp/backends/cuda seeds, pin_memory, and jg.compile(module) as torch's OptimizedModule."""
from __future__ import annotations

import io

import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _rng(seed=0):
    return np.random.default_rng(seed)


def _both(a, rg=True):
    return jg.tensor(a, requires_grad=rg), torch.tensor(a, requires_grad=rg)


def _compare(fj, ft, arrays, compiled=False, atol=1e-12):
    """Values and input gradients of ``sum(f(*xs) * w)`` in jitgrad (eager or compiled) and torch, float64."""
    js = [jg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    f = jg.compile(fj, backend="interpret") if compiled else fj
    oj, ot = f(*js), ft(*ts)
    np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), atol=atol, rtol=1e-10)
    w = _rng(9).uniform(0.5, 1.5, tuple(ot.shape))
    (oj * jg.tensor(w)).sum().backward()
    (ot * torch.tensor(w)).sum().backward()
    for a, b in zip(js, ts):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=1e-10)


# ---- tril / triu / diagonal ---------------------------------------------------------------------------

@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_tril_triu_match_torch(k, compiled):
    x = _rng(k + 5).standard_normal((2, 3, 4, 5))
    _compare(lambda a: jg.tril(a, k) + a.triu(k) * 3.0, lambda a: torch.tril(a, k) + a.triu(k) * 3.0, [x],
             compiled=compiled)


@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (0, -1, 0), (-2, 2, 0), (7, 0, 1)])
def test_diagonal_matches_torch(args):
    x = _rng(1).standard_normal((3, 4, 5))
    _compare(lambda a: jg.diagonal(a, *args), lambda a: torch.diagonal(a, *args), [x])
    _compare(lambda a: a.diagonal(*args), lambda a: a.diagonal(*args), [x], compiled=True)


def test_diagonal_is_a_view_as_in_torch():
    for lib in (jg, torch):
        x = lib.arange(12.0).reshape(3, 4)
        d = x.diagonal(1)
        v0 = x._version
        d.mul_(10.0)                                        # writes through to x
        assert x._version > v0 and d._version == x._version   # one version counter
        x[0, 1] = -1.0                                      # and x's writes show in d
        assert d.tolist() == [-1.0, 60.0, 110.0] and x.tolist()[1][2] == 60.0
    # grads through an in-place write on the diagonal of a non-leaf (torch's CopySlices)
    grads = []
    for lib in (jg, torch):
        b = lib.tensor(_rng(4).standard_normal((3, 3)), requires_grad=True)
        c = b * 1.0
        c.diagonal(-1).mul_(b[0, :2])
        (c * c).sum().backward()
        grads.append(b.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    ro = jg.from_numpy(np.arange(4.0).reshape(2, 2))
    ro._data.flags.writeable = False
    assert ro.diagonal().tolist() == [0.0, 3.0]            # a read-only base gives a read-only view


def test_tril_diagonal_second_order_and_dtypes():
    x = jg.tensor(_rng(2).standard_normal((3, 3)), requires_grad=True)
    assert gradcheck(lambda a: (jg.tril(a) * a).sum(), (x,)) and gradgradcheck(lambda a: (jg.tril(a, -1) ** 3), (x,))
    assert gradgradcheck(lambda a: a.diagonal(1) ** 3, (x,))
    assert jg.tril(x).grad_fn.name() == "TrilBackward0" and x.diagonal().grad_fn.name() == "DiagonalBackward0"
    ints = jg.arange(9).reshape(3, 3)
    assert jg.triu(ints).dtype is jg.int64 and jg.triu(ints).tolist() == torch.triu(torch.arange(9).reshape(3, 3)).tolist()
    b = jg.ones(2, 2, dtype=jg.bool)
    assert jg.tril(b).dtype is jg.bool and jg.tril(b).tolist() == [[True, False], [True, True]]
    y = jg.ones(3, 3)
    assert y.tril_(-1) is y and y.sum().item() == 3.0


def test_tril_diagonal_errors_as_torch():
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        jg.tril(jg.ones(3))
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, 1"):
        jg.ones(2, 2).diagonal(0, 1, 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        jg.ones(2, 2).diagonal(0, 0, 2)


# ---- scaled_dot_product_attention ----------------------------------------------------------------------

def _qkv(seed=0, L=5, S=6, E=4, Ev=3):
    r = _rng(seed)
    return r.standard_normal((2, 3, L, E)), r.standard_normal((2, 3, S, E)), r.standard_normal((2, 3, S, Ev))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", ["plain", "causal", "scale", "bool-mask", "float-mask", "causal-square"])
def test_sdpa_matches_torch(kind, compiled):
    q, k, v = _qkv(L=6 if kind == "causal-square" else 5)
    boolm = _rng(3).random((5, 6)) > 0.4
    boolm[2] = False         # a row that sees no key: 0, as torch
    floatm = _rng(4).standard_normal((3, 1, 6))
    kw = {"plain": {}, "causal": {"is_causal": True}, "causal-square": {"is_causal": True}, "scale": {"scale": 0.3},
          "bool-mask": {"attn_mask": boolm}, "float-mask": {"attn_mask": floatm}}[kind]

    def run(lib, F_, q, k, v):
        args = {n: (lib.tensor(m) if isinstance(m, np.ndarray) else m) for n, m in kw.items()}
        return F_.scaled_dot_product_attention(q, k, v, **args)
    _compare(lambda *a: run(jg, F, *a), lambda *a: run(torch, TF, *a), [q, k, v], compiled=compiled)


def test_sdpa_grad_of_mask_and_second_order():
    q, k, v = (jg.tensor(a[:1, :1], requires_grad=True) for a in _qkv(1, L=3, S=3, E=2, Ev=2))
    m = jg.tensor(_rng(5).standard_normal((3, 3)), requires_grad=True)

    def f(a, b, c, d):
        return F.scaled_dot_product_attention(a, b, c, attn_mask=d)
    assert gradcheck(f, (q, k, v, m)) and gradgradcheck(f, (q, k, v, m))
    assert gradgradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v))
    cf = jg.compile(f, backend="interpret")
    assert gradgradcheck(cf, (q, k, v, m))


def test_sdpa_eager_is_one_op_and_traces_to_primitives():
    q, k, v = (jg.tensor(a, requires_grad=True) for a in _qkv())
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.grad_fn.name() == "ScaledDotProductAttentionBackward0"
    text = jg.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True).sum(),
                      backend="interpret").ir(q, k, v)
    assert "sdpa" not in text and "softmax" not in text and "matmul" in text
    # every eqn, backward ones included (a view the backward takes again from its base), names the lambda's line
    assert all(line.endswith("<lambda>") for line in text.splitlines() if "#" in line), text


def test_sdpa_dropout_and_errors():
    q, k, v = (jg.tensor(a) for a in _qkv())
    jg.manual_seed(0)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    jg.manual_seed(0)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert np.array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, k, v).numpy())
    assert np.array_equal(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy(), np.zeros(a.shape))
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=jg.ones(5, 6, dtype=jg.bool), is_causal=True)
    with pytest.raises(RuntimeError, match=r"sdpa: query .* do not fit"):
        F.scaled_dot_product_attention(q, k.transpose(-1, -2), v)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("shapes", [((2, 4, 5, 3), (2, 2, 6, 3), (2, 1, 6, 2)),        # key and value grouped apart
                                    ((6, 5, 3), (3, 6, 3), (3, 6, 2)),                  # 3-D: dim -3 is the batch
                                    ((2, 2, 4, 5, 3), (1, 2, 2, 6, 3), (2, 1, 4, 6, 2))])  # 5-D, broadcast batch
def test_sdpa_enable_gqa_matches_torch(shapes, tiled):
    """``enable_gqa=True`` (torch 2.5): key/value heads repeated for their groups of query heads, causal with
    L != S; values and gradients (summed back over each group) as torch's, eager and compiled, tiled or not."""
    from jitgrad.nn.attention import attention_tiling
    arrays = [_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    for compiled in (False, True):
        with attention_tiling(0 if tiled else 1 << 62, 2, 4):
            _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                     lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                     arrays, compiled=compiled)


def test_sdpa_enable_gqa_errors_and_dropout_as_torch():
    """torch's errors for heads that do not divide and for inputs without a head dim; with dropout the grouped
    heads draw one mask of the repeated shape, the same tiled or not (the untiled path with the heads repeated by
    hand: the same Philox bits)."""
    from jitgrad.nn.attention import attention_tiling
    for qs, ks, vs in (((2, 4, 5, 3), (2, 3, 6, 3), (2, 3, 6, 3)), ((2, 2, 5, 3), (2, 4, 6, 3), (2, 4, 6, 3)),
                       ((2, 4, 5, 3), (2, 2, 6, 3), (2, 3, 6, 3)), ((5, 3), (6, 3), (6, 3))):
        arrays = [_rng(0).standard_normal(s) for s in (qs, ks, vs)]
        with pytest.raises(Exception) as want:
            TF.scaled_dot_product_attention(*(torch.tensor(a) for a in arrays), enable_gqa=True)
        with pytest.raises(type(want.value)) as got:
            F.scaled_dot_product_attention(*(jg.tensor(a) for a in arrays), enable_gqa=True)
        assert str(got.value).splitlines()[0] == str(want.value)
    arrays = [_rng(i).standard_normal(s) for i, s in enumerate(((2, 4, 5, 3), (2, 2, 6, 3), (2, 2, 6, 2)))]
    res = []
    for tiled, gqa in ((False, True), (True, True), (False, False)):
        xs = [jg.tensor(a, requires_grad=True) for a in arrays]
        q, k, v = xs if gqa else (xs[0], xs[1][:, :, None].expand(2, 2, 2, 6, 3).reshape(2, 4, 6, 3),
                                  xs[2][:, :, None].expand(2, 2, 2, 6, 2).reshape(2, 4, 6, 2))
        jg.manual_seed(5)
        with attention_tiling(0 if tiled else 1 << 62, 2, 4):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, enable_gqa=gqa)
        out.sum().backward()
        res.append([out.detach().numpy()] + [x.grad.numpy() for x in xs])
    for r in res[1:]:
        for a, b in zip(res[0], r):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    plain = F.scaled_dot_product_attention(*(jg.tensor(a) for a in arrays), enable_gqa=True).numpy()
    assert np.abs(res[0][0] - plain).max() > 0.1        # the dropout did something


_SDPA_BAD_ARGS = {      # arguments torch refuses before it computes anything: its exception type and first line
    "key-dtype": lambda T, q: dict(key=q.float()),
    "value-dtype": lambda T, q: dict(value=q.float()),
    "one-dim-query": lambda T, q: dict(query=q[0, 0, 0]),
    "mask-not-a-tensor": lambda T, q: dict(attn_mask=[[True]]),
    "query-not-a-tensor": lambda T, q: dict(query=q.tolist()),
    "dropout-above-one": lambda T, q: dict(dropout_p=1.5),
}


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("case", sorted(_SDPA_BAD_ARGS))
def test_sdpa_argument_errors_are_torchs(case, tiled):
    from jitgrad.nn.attention import attention_tiling
    got = []
    for lib, fn in ((torch, TF.scaled_dot_product_attention), (jg, F.scaled_dot_product_attention)):
        q = lib.tensor(_rng().standard_normal((2, 3, 5, 4)))
        kw = dict(query=q, key=q, value=q)
        kw.update(_SDPA_BAD_ARGS[case](lib, q))
        with attention_tiling(0 if tiled else 1 << 62, 2, 2), pytest.raises(Exception) as e:
            fn(**kw)
        got.append((type(e.value), str(e.value).splitlines()[0]))
    assert got[1] == got[0]


# ---- fused ops with decompositions --------------------------------------------------------------------

def test_fused_ops_declare_decompositions_and_eager_binds_them():
    from jitgrad.ir.ops import OPS
    for name in ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward", "tanh_backward", "nll_loss",
                 "sdpa"):
        assert OPS[name].decompose is not None, name
    x = jg.tensor(_rng().standard_normal((4, 3)), requires_grad=True)
    assert jg.softmax(x, 1).grad_fn.name() == "SoftmaxBackward0"
    # no public function branches on eager/traced any more: the dispatcher expands decompositions
    import inspect
    from jitgrad.nn import functional as nnF
    from jitgrad.library import elementary as functions
    for fn in (functions.softmax, functions.log_softmax, nnF.nll_loss):
        assert "_TR.active is None" not in inspect.getsource(fn)


# ---- view, masked_fill ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,make,new", [
    ((2, 3, 12), lambda t: t.split(4, dim=2)[1], (2, 3, 2, 2)),
    ((2, 3, 12), lambda t: t.split(4, dim=2)[1], (6, 4)),
    ((2, 3, 12), lambda t: t.split(4, dim=2)[1], (-1,)),
    ((4, 5), lambda t: t.t(), (20,)),
    ((4, 5), lambda t: t.t(), (5, 2, 2)),
    ((2, 3, 4), lambda t: t.transpose(0, 1), (3, 2, 2, 2)),
    ((2, 3, 4), lambda t: t.transpose(0, 1), (3, 8)),
    ((6, 4), lambda t: t[::2], (3, 2, 2)),
    ((6, 4), lambda t: t[::2], (12,)),
])
def test_view_follows_torchs_stride_rule(shape, make, new):
    a = _rng().standard_normal(shape)
    try:
        want = make(torch.tensor(a)).view(*new).numpy()
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's size and stride"):
            make(jg.tensor(a)).view(*new)
        assert "view size is not compatible" in str(e)
        return
    base = jg.tensor(a)
    v = make(base).view(*new)
    np.testing.assert_array_equal(v.numpy(), want)
    v.mul_(2.0)      # a view: writes reach the base, as in torch
    t = torch.tensor(a)
    make(t).view(*new).mul_(2.0)
    np.testing.assert_array_equal(base.numpy(), t.numpy())


def test_contiguous_then_view_after_transpose():
    y = jg.randn(2, 4, 3, 5).transpose(1, 2)
    c = y.contiguous()
    assert c.is_contiguous() and c.view(2, 3, 20).shape == (2, 3, 20)


@pytest.mark.parametrize("compiled", [False, True])
def test_masked_fill_with_a_buffer_mask_broadcast(compiled):
    T = 4

    class Att(nn.Module):
        def __init__(self, lib):
            super().__init__()
            self.register_buffer("bias", lib.tril(lib.ones(T, T)).view(1, 1, T, T))

        def forward(self, att):
            t = att.size(-1)
            return att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
    a = _rng().standard_normal((2, 2, 3, 3))
    m = Att(jg)
    f = jg.compile(m.forward, backend="interpret") if compiled else m.forward
    x, xt = _both(a)
    out = f(x)
    bias_t = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    want = xt.masked_fill(bias_t[:, :, :3, :3] == 0, float("-inf")).softmax(-1)
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=1e-12)
    out.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_masked_fill_broadcasts_the_input_to_a_larger_mask_as_torch(compiled):
    """Out of place, torch broadcasts input, mask and value together: a (T, T) score matrix filled by a
    (1, 1, T, T) buffer mask, or by a batched mask, is the mask's shape, and the gradients sum back; in place the
    result must keep the input's shape (torch's error)."""
    a = _rng().standard_normal((3, 3))
    mask = _rng(1).random((2, 1, 3, 3)) > 0.5
    for ms in (mask[:1], mask):
        def fn(lib, x, v):
            return x.masked_fill(lib.tensor(ms), v)
        f = jg.compile(lambda x, v: fn(jg, x, v), backend="interpret") if compiled else (lambda x, v: fn(jg, x, v))
        _compare(f, lambda x, v: fn(torch, x, v), [a, np.array(1.5)])
    with pytest.raises(RuntimeError) as want:
        torch.tensor(a).masked_fill_(torch.tensor(mask), 0.0)
    with pytest.raises(RuntimeError) as got:
        jg.tensor(a).masked_fill_(jg.tensor(mask), 0.0)
    assert str(got.value).splitlines()[0] == str(want.value)


# ---- torch.save / torch.load ---------------------------------------------------------------------------

def _tiny_model(lib):
    lib.manual_seed(0)
    m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.LayerNorm(4), lib.nn.Linear(4, 3, bias=False))
    m[2].weight = lib.nn.Parameter(m[0].weight.detach().T.clone()[:3].contiguous())
    return m


def test_checkpoint_written_by_jitgrad_loads_in_torch_weights_only(tmp_path):
    m = _tiny_model(jg)
    opt = jg.optim.AdamW([{"params": [m[0].weight, m[2].weight], "weight_decay": 0.1},
                          {"params": [m[0].bias, m[1].weight, m[1].bias], "weight_decay": 0.0}], lr=1e-2)
    m(jg.randn(5, 3)).sum().backward()
    opt.step()
    x = jg.arange(12.0).reshape(3, 4)
    ckpt = {"model": m.state_dict(), "optimizer": opt.state_dict(), "iter": 7, "best": 1.5, "view": x[:, 1:],
            "param": nn.Parameter(jg.ones(2)), "ints": jg.tensor([1, 2], dtype=jg.int32), "dtype": jg.float64,
            "flags": jg.tensor([True, False])}
    path = tmp_path / "ckpt.pt"
    jg.save(ckpt, path)
    got = torch.load(path, weights_only=True)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(got["model"][k].numpy(), v.numpy())
    assert list(got["model"]) == list(m.state_dict())
    np.testing.assert_array_equal(got["view"].numpy(), x[:, 1:].numpy())
    assert got["iter"] == 7 and got["dtype"] is torch.float64 and isinstance(got["param"], torch.nn.Parameter)
    assert got["ints"].dtype is torch.int32 and got["flags"].tolist() == [True, False]
    # the optimizer state loads into a torch AdamW over a torch copy of the model, which then steps as ours does
    tm = _tiny_model(torch)
    tm.load_state_dict(got["model"])
    topt = torch.optim.AdamW([{"params": [tm[0].weight, tm[2].weight], "weight_decay": 0.1},
                              {"params": [tm[0].bias, tm[1].weight, tm[1].bias], "weight_decay": 0.0}], lr=1e-2)
    topt.load_state_dict(got["optimizer"])
    inp = _rng(3).standard_normal((5, 3)).astype(np.float32)
    opt.zero_grad()
    m(jg.tensor(inp)).sum().backward()
    opt.step()
    tm(torch.tensor(inp)).sum().backward()
    topt.step()
    for (k, a), b in zip(m.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_checkpoint_written_by_torch_loads_in_jitgrad():
    tm = _tiny_model(torch)
    tm.lin_tied = tm[0]          # the same module twice: tied parameters
    opt = torch.optim.AdamW(tm.parameters(), lr=1e-2)
    tm(torch.randn(5, 3)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    torch.save({"model": tm.state_dict(), "optimizer": opt.state_dict(), "config": {"n_layer": 2},
                "param": torch.nn.Parameter(torch.ones(3))}, buf)
    buf.seek(0)
    got = jg.load(buf)
    m = _tiny_model(jg)
    m.lin_tied = m[0]
    m.load_state_dict(got["model"])
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(got["model"][k].numpy(), v.numpy())
    w0, w1 = got["model"]["0.weight"], got["model"]["lin_tied.weight"]
    w0.add_(1.0)
    assert np.array_equal(w0.numpy(), w1.numpy())      # one storage in the file: one memory again
    assert got["config"] == {"n_layer": 2} and isinstance(got["param"], nn.Parameter)
    jopt = jg.optim.AdamW(m.parameters(), lr=1e-2)
    jopt.load_state_dict(got["optimizer"])
    assert int(jopt.state_dict()["state"][0]["step"]) == 1


def test_load_map_location_as_torch():
    buf = io.BytesIO()
    w = torch.arange(6.0).reshape(2, 3)
    torch.save({"w": w, "wt": w.t(), "n": torch.tensor(3)}, buf)
    seen = []

    def keep(storage, location):
        seen.append(location)
        return storage

    for ml in (None, "cpu", jg.device("cpu"), {"cuda:0": "cpu"}, keep, lambda storage, loc: None):
        buf.seek(0)
        got = jg.load(buf, map_location=ml)
        np.testing.assert_array_equal(got["w"].numpy(), w.numpy())
        np.testing.assert_array_equal(got["wt"].numpy(), w.t().numpy())
        got["w"].add_(1.0)          # one storage in the file: the view sees the write
        np.testing.assert_array_equal(got["wt"].numpy(), w.t().numpy() + 1)
        assert got["n"].item() == 3
    assert seen == ["cpu", "cpu"]   # once per storage, with torch's location string
    buf.seek(0)
    with pytest.raises(TypeError, match="map_location should be a device, a str, a dict or a callable"):
        jg.load(buf, map_location=3)
    buf.seek(0)
    with pytest.raises(TypeError, match="map_location returned a str"):
        jg.load(buf, map_location=lambda s, loc: "cpu")


def test_dtype_table_of_a_training_script():
    # nanoGPT's train.py: ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': ...}[dtype]
    table = {"float32": jg.float32, "bfloat16": jg.bfloat16, "float16": jg.float16}
    assert table["bfloat16"] is jg.bfloat16 and repr(jg.bfloat16) == "jitgrad.bfloat16"
    assert jg.bfloat16.is_floating_point
    import pickle
    assert pickle.loads(pickle.dumps(jg.bfloat16)) is jg.bfloat16
    for make in (lambda: jg.zeros(2, dtype=jg.bfloat16), lambda: jg.randn(2).to(jg.bfloat16),
                 lambda: jg.tensor([1.0], dtype="bfloat16"), lambda: jg.ones(2).to(dtype=jg.bfloat16)):
        with pytest.raises(jg.UnsupportedError, match="jitgrad does not support bfloat16 tensors"):
            make()
    for dtype in (jg.bfloat16, jg.float16):
        with pytest.raises(jg.UnsupportedError, match=f"autocast to {dtype.name}"):
            jg.amp.autocast(device_type="cpu", dtype=dtype)
    with jg.amp.autocast(device_type="cpu", dtype=jg.bfloat16, enabled=False):
        assert jg.ones(2).dtype is jg.float32


def test_load_weights_only_refuses_other_globals(tmp_path):
    import argparse
    path = tmp_path / "ns.pt"
    torch.save({"args": argparse.Namespace(lr=0.1), "w": torch.ones(2)}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        jg.load(path)
    assert jg.load(path, weights_only=False)["args"].lr == 0.1


# ---- amp, backends, cuda seeds, pin_memory -------------------------------------------------------------

def test_amp_backends_and_cuda_seeds_as_torch_on_cpu():
    jg.cuda.manual_seed_all(1)
    jg.cuda.manual_seed(1)
    assert not jg.cuda.is_bf16_supported()
    jg.backends.cuda.matmul.allow_tf32 = True
    jg.backends.cudnn.allow_tf32 = True
    assert jg.backends.cuda.matmul.allow_tf32 and jg.backends.cudnn.benchmark is False
    assert jg.backends.mps.is_available() is False
    with jg.amp.autocast(device_type="cpu", enabled=False):
        y = jg.ones(2) * 2
    assert y.dtype is jg.float32
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        with jg.autocast(device_type="cpu", dtype=jg.float32):
            pass
    with pytest.raises(jg.UnsupportedError, match="autocast to bfloat16"):
        jg.amp.autocast(device_type="cpu")
    if not jg.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            jg.amp.autocast(device_type="cuda", dtype=jg.float32)
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            jg.ones(2).pin_memory()
        with pytest.warns(UserWarning, match="GradScaler is enabled, but CUDA is not available"):
            assert not jg.cuda.amp.GradScaler().is_enabled()
    assert jg.ones(2).is_pinned() is False


def test_grad_scaler_matches_torch_on_cpu():
    """An enabled CPU GradScaler: scale, unscale, skip the step on inf, back off and grow, as torch's."""
    results = []
    for lib in (jg, torch):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
        for x in ([1.0, 1.0], [float("inf"), 1.0], [1.0, 2.0], [3.0, 1.0]):
            opt.zero_grad()
            sc.scale((w * lib.tensor(x)).sum()).backward()
            sc.step(opt)
            sc.update()
            results.append((w.detach().numpy().copy(), sc.get_scale()))
        results.append(sc.state_dict())
    n = len(results) // 2
    for a, b in zip(results[:n - 1], results[n:-1]):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
        assert a[1] == b[1]
    assert results[n - 1] == results[-1]
    disabled = jg.amp.GradScaler(enabled=False)
    t = jg.ones(1)
    assert disabled.scale(t) is t and disabled.state_dict() == {} and disabled.get_scale() == 1.0


# ---- jg.compile(module) --------------------------------------------------------------------------------

class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.drop = nn.Dropout(0.5)
        self.config = {"width": 3}

    def forward(self, x):
        return self.drop(self.lin(x)).sum()

    def describe(self):
        return f"net training={self.training}"


def test_compiled_module_is_torchs_optimized_module():
    jg.manual_seed(0)
    net = _Net()
    c = jg.compile(net, backend="interpret")
    assert isinstance(c, nn.Module) and c._orig_mod is net and type(c).__name__ == "OptimizedModule"
    assert list(c.state_dict()) == ["_orig_mod.lin.weight", "_orig_mod.lin.bias"]     # as torch writes them
    assert [n for n, _ in c.named_parameters()] == ["_orig_mod.lin.weight", "_orig_mod.lin.bias"]
    assert c.config is net.config and c.lin is net.lin and c.describe() == "net training=True"
    net.config["depth"] = 2
    assert c.config["depth"] == 2                    # live, not a copy
    net.eval()
    assert c.training is False and c.describe() == "net training=False"    # torch's stale-copy bug is absent
    x = jg.ones(2, 3)
    np.testing.assert_allclose(c(x).item(), net(x).item(), rtol=1e-6)     # eval: no dropout, retraced
    traces = c.stats["traces"]
    c.train()
    assert net.training and net.drop.training
    jg.manual_seed(1)
    a = c(x)
    jg.manual_seed(1)
    b = net(x)
    np.testing.assert_allclose(a.item(), b.item(), rtol=1e-6)      # train: the same dropout mask as eager
    assert c.stats["traces"] == traces + 1
    c(x)
    assert c.stats["traces"] == traces + 1 and c.stats["hits"] >= 1
    sd = c.state_dict()
    fresh = jg.compile(_Net(), backend="interpret")
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh._orig_mod.lin.weight.detach().numpy(), net.lin.weight.detach().numpy())
    c.new_attr = 5      # set on the wrapper, as torch does
    assert c.new_attr == 5
    assert "_orig_mod" in repr(c)
