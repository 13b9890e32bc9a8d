"""nn.MultiheadAttention, F.multi_head_attention_forward and the nn.Transformer family against torch: with torch's
weights loaded, outputs and gradients (parameters and inputs) agree in float64 in eval mode for each mask kind and
layout; parameter names, state_dict keys, reprs, initialisation schemes, warnings and errors are torch's; and in
train mode with dropout, eager and compiled steps (interpreter, and Numba once) draw the same masks and agree."""
import copy
import math
import re
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
E, H = 8, 2


def _build(name, *args, t_kw=(), j_kw=(), **kw):
    """torch's module and jitgrad's, float64, with torch's weights copied into jitgrad's (``t_kw``/``j_kw``: the
    keywords that differ, such as an activation module)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # TransformerEncoder's nested-tensor warning (tested on its own)
        t = getattr(torch.nn, name)(*args, dtype=torch.float64, **kw, **dict(t_kw))
        j = getattr(nn, name)(*args, dtype=jg.float64, **kw, **dict(j_kw))
    assert list(j.state_dict()) == list(t.state_dict())
    assert [n for n, _ in j.named_parameters()] == [n for n, _ in t.named_parameters()]
    j.load_state_dict({k: jg.tensor(v.numpy()) for k, v in t.state_dict().items()})
    return t.eval(), j.eval()


def _inputs(arrays):
    """The same arrays as torch and jitgrad tensors; float arrays require grad, bool masks do not."""
    ts, js = [], []
    for a in arrays:
        if a is None:
            ts.append(None)
            js.append(None)
            continue
        grad = a.dtype == np.float64
        ts.append(torch.tensor(a, requires_grad=grad))
        js.append(jg.tensor(a, requires_grad=grad))
    return ts, js


def _check_same(t_mod, j_mod, t_out, j_out, t_in, j_in, rtol=1e-10):
    """Forward outputs equal; a weighted sum's gradients equal for every parameter and every float input."""
    t_out = t_out if isinstance(t_out, tuple) else (t_out,)
    j_out = j_out if isinstance(j_out, tuple) else (j_out,)
    t_loss, j_loss = 0, 0
    for to, jo in zip(t_out, j_out):
        assert (to is None) == (jo is None)
        if to is None:
            continue
        np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=rtol, atol=1e-12)
        w = RNG.standard_normal(tuple(to.shape))     # a weighted sum: LayerNorm's output sums to a constant
        t_loss = t_loss + (to * torch.tensor(w)).sum()
        j_loss = j_loss + (jo * jg.tensor(w)).sum()
    t_loss.backward()
    j_loss.backward()
    jp = dict(j_mod.named_parameters())
    for n, p in t_mod.named_parameters():
        assert (p.grad is None) == (jp[n].grad is None), n
        if p.grad is not None:
            np.testing.assert_allclose(jp[n].grad.numpy(), p.grad.numpy(), rtol=rtol, atol=1e-12, err_msg=n)
    for ti, ji in zip(t_in, j_in):
        if ti is not None and ti.requires_grad:
            np.testing.assert_allclose(ji.grad.numpy(), ti.grad.numpy(), rtol=rtol, atol=1e-12)


def _mask(shape, p=0.3, keep_first=True):
    """A bool mask (True: excluded) that never excludes a whole row: the first key always takes part."""
    m = RNG.random(shape) < p
    if keep_first:
        m[..., 0] = False
    return m


L, S, N = 4, 5, 3
MHA_CASES = {
    "plain": (dict(), dict(), dict()),
    "batch_first_sdpa_bool_masks": (dict(batch_first=True), dict(need_weights=False), dict(am="bool2", kpm="bool")),
    "float_masks_3d_per_head_weights": (dict(), dict(average_attn_weights=False), dict(am="float3", kpm="float")),
    "float_masks_sdpa": (dict(), dict(need_weights=False), dict(am="float2", kpm="float")),
    "kdim_vdim": (dict(kdim=4, vdim=6), dict(), dict(kpm="bool")),
    "kdim_vdim_sdpa_batch_first": (dict(kdim=4, vdim=6, batch_first=True), dict(need_weights=False), dict(am="bool3")),
    "bias_kv_zero_attn": (dict(add_bias_kv=True, add_zero_attn=True), dict(), dict(am="bool2", kpm="bool")),
    "bias_kv_zero_attn_sdpa": (dict(add_bias_kv=True, add_zero_attn=True), dict(need_weights=False),
                               dict(am="float3", kpm="bool")),
    "no_bias": (dict(bias=False), dict(), dict(am="float2")),
    "unbatched": (dict(), dict(), dict(unbatched=True, am="bool3", kpm="bool")),
    "unbatched_sdpa": (dict(batch_first=True), dict(need_weights=False), dict(unbatched=True, am="float2")),
}


@pytest.mark.parametrize("case", MHA_CASES)
def test_multihead_attention_matches_torch(case):
    ctor, call, data = MHA_CASES[case]
    t, j = _build("MultiheadAttention", E, H, **ctor)
    kd, vd = ctor.get("kdim", E), ctor.get("vdim", E)
    unbatched, bf = data.get("unbatched", False), ctor.get("batch_first", False)

    def seq(n, d):
        return RNG.standard_normal((n, d) if unbatched else ((N, n, d) if bf else (n, N, d)))
    q, k, v = seq(L, E), seq(S, kd), seq(S, vd)
    am = {None: None, "bool2": _mask((L, S)), "float2": RNG.standard_normal((L, S)),
          "bool3": _mask((H if unbatched else N * H, L, S)),
          "float3": RNG.standard_normal((N * H, L, S))}[data.get("am")]
    kpm = {None: None, "bool": _mask((S,) if unbatched else (N, S)),
           "float": np.where(_mask((N, S)), -1e9, 0.0)}[data.get("kpm")]
    ts, js = _inputs([q, k, v, am, kpm])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # mixed bool/float masks: torch's deprecation warning (tested below)
        to = t(*ts[:3], attn_mask=ts[3], key_padding_mask=ts[4], **call)
        jo = j(*js[:3], attn_mask=js[3], key_padding_mask=js[4], **call)
    assert (jo[1] is None) == (call.get("need_weights", True) is False)
    _check_same(t, j, to, jo, ts, js)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_self_and_cross_attention_share_tensors_as_torch(batch_first, need_weights):
    """q is k is v (one packed product), k is v (two), and a causal hint with its mask."""
    t, j = _build("MultiheadAttention", E, H, batch_first=batch_first)
    x = RNG.standard_normal((N, L, E) if batch_first else (L, N, E))
    mem = RNG.standard_normal((N, S, E) if batch_first else (S, N, E))
    causal = np.triu(np.full((L, L), -np.inf), 1)
    ts, js = _inputs([x, mem, causal])
    ts[2].requires_grad_(False)
    js[2].requires_grad_(False)
    to = t(ts[0], ts[0], ts[0], attn_mask=ts[2], is_causal=True, need_weights=need_weights)[0] \
        + t(ts[0], ts[1], ts[1], need_weights=need_weights)[0]
    jo = j(js[0], js[0], js[0], attn_mask=js[2], is_causal=True, need_weights=need_weights)[0] \
        + j(js[0], js[1], js[1], need_weights=need_weights)[0]
    _check_same(t, j, to, jo, ts[:2], js[:2])


def test_functional_multi_head_attention_forward_with_static_kv():
    TF = torch.nn.functional
    x = RNG.standard_normal((L, N, E))
    w_in, w_out = RNG.standard_normal((3 * E, E)), RNG.standard_normal((E, E))
    b_in = RNG.standard_normal(3 * E)
    sk, sv = RNG.standard_normal((N * H, S, E // H)), RNG.standard_normal((N * H, S, E // H))
    ts, js = _inputs([x, w_in, b_in, w_out, sk, sv])
    for need_weights in (True, False):
        to = TF.multi_head_attention_forward(ts[0], ts[0], ts[0], E, H, ts[1], ts[2], None, None, False, 0.0, ts[3],
                                             None, static_k=ts[4], static_v=ts[5], need_weights=need_weights)
        jo = nn.functional.multi_head_attention_forward(js[0], js[0], js[0], E, H, js[1], js[2], None, None, False,
                                                        0.0, js[3], None, static_k=js[4], static_v=js[5],
                                                        need_weights=need_weights)
        _check_same(torch.nn.Module(), nn.Module(), to, jo, ts, js)
        for a in ts + js:
            a.grad = None


def test_multihead_attention_init_repr_and_layout():
    torch.manual_seed(0)
    jg.manual_seed(0)
    e = 32
    for kw in (dict(), dict(kdim=8, vdim=16, add_bias_kv=True), dict(bias=False)):
        t, j = torch.nn.MultiheadAttention(e, 4, **kw), nn.MultiheadAttention(e, 4, **kw)
        assert repr(j) == repr(t)
        assert type(j.out_proj).__name__ == "NonDynamicallyQuantizableLinear" and isinstance(j.out_proj, nn.Linear)
        assert list(j.state_dict()) == list(t.state_dict())
        assert [n for n, _ in j.named_parameters()] == [n for n, _ in t.named_parameters()]
        for name in ("_qkv_same_embed_dim", "head_dim", "kdim", "vdim", "batch_first", "dropout", "add_zero_attn"):
            assert getattr(j, name) == getattr(t, name), name
        params = dict(j.named_parameters())
        for n, p in params.items():
            a = p.detach().numpy()
            if n.endswith("bias") and n != "bias_k" and n != "bias_v":
                assert np.all(a == 0), n          # in_proj_bias and out_proj.bias start at zero
            elif n == "out_proj.weight":        # Linear's kaiming_uniform_(a=sqrt(5)): U(+-1/sqrt(fan_in))
                assert 0.9 / math.sqrt(e) < np.abs(a).max() <= 1 / math.sqrt(e)
            elif n in ("bias_k", "bias_v"):     # xavier_normal_ of (1, 1, E): std 1/sqrt(E)
                assert 0.6 < a.std() * math.sqrt(e) < 1.4
            else:                               # xavier_uniform_: U(+-sqrt(6 / (fan_in + fan_out)))
                bound = math.sqrt(6 / (a.shape[0] + a.shape[1]))
                assert 0.9 * bound < np.abs(a).max() <= bound, n
        if not kw.get("add_bias_kv"):
            assert j.bias_k is None and j.bias_v is None


def test_multihead_attention_errors_and_warnings_match_torch():
    def both(fn_t, fn_j):
        with pytest.raises(Exception) as et:
            fn_t()
        with pytest.raises(type(et.value), match="^" + re.escape(str(et.value)) + "$"):
            fn_j()
    both(lambda: torch.nn.MultiheadAttention(7, 2), lambda: nn.MultiheadAttention(7, 2))
    both(lambda: torch.nn.MultiheadAttention(0, 2), lambda: nn.MultiheadAttention(0, 2))
    t, j = _build("MultiheadAttention", E, H)
    ts, js = _inputs([RNG.standard_normal((L, N, E)), RNG.standard_normal((L, N, E, 1))])
    for kw in (dict(attn_mask=np.zeros((L, L + 1))), dict(attn_mask=np.zeros((N, L, L))),
               dict(attn_mask=np.zeros((L, L), np.int64)), dict(key_padding_mask=np.zeros((N, L + 1), bool))):
        ((key, a),) = kw.items()
        both(lambda: t(ts[0], ts[0], ts[0], **{key: torch.tensor(a)}),
             lambda: j(js[0], js[0], js[0], **{key: jg.tensor(a)}))
    both(lambda: t(ts[0], ts[0], ts[0], is_causal=True), lambda: j(js[0], js[0], js[0], is_causal=True))
    both(lambda: t(ts[0], ts[1], ts[1]), lambda: j(js[0], js[1], js[1]))
    both(lambda: t(ts[1], ts[1], ts[1]), lambda: j(js[1], js[1], js[1]))
    am, kpm = np.zeros((L, L)), np.zeros((N, L), bool)
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn_mask is deprecated"):
        j(js[0], js[0], js[0], attn_mask=jg.tensor(am), key_padding_mask=jg.tensor(kpm))


# --- the transformer layers ----------------------------------------------------------------------------------
D, FF = 8, 16


def _seq(n, batch_first, d=D):
    return RNG.standard_normal((N, n, d) if batch_first else (n, N, d))


@pytest.mark.parametrize("kw,masks", [
    (dict(), dict(src_mask="causal")),
    (dict(batch_first=True, activation="gelu"), dict(src_key_padding_mask="bool")),
    (dict(norm_first=True, bias=False), dict(src_mask="causal", src_key_padding_mask="bool")),
    (dict(batch_first=True, norm_first=True, activation="GELU()"), dict(src_mask="bool", is_causal=False)),
    (dict(layer_norm_eps=1e-3), dict(src_mask="causal", is_causal=True)),
], ids=["post_norm_causal", "batch_first_gelu_padding", "norm_first_no_bias", "gelu_module_bool_mask",
        "causal_hint"])
def test_encoder_layer_and_encoder_match_torch(kw, masks):
    bf = kw.get("batch_first", False)
    t_kw = j_kw = ()
    if kw.get("activation") == "GELU()":    # a module as the activation: a child, in the repr and the traversal
        t_kw, j_kw = dict(activation=torch.nn.GELU()), dict(activation=nn.GELU())
        kw = {k: v for k, v in kw.items() if k != "activation"}
    for name in ("TransformerEncoderLayer", "TransformerEncoder"):
        t, j = _build("TransformerEncoderLayer", D, H, FF, t_kw=t_kw, j_kw=j_kw, **kw)
        if name == "TransformerEncoder":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = torch.nn.TransformerEncoder(t, 2, norm=torch.nn.LayerNorm(D, dtype=torch.float64))
                j = nn.TransformerEncoder(j, 2, norm=nn.LayerNorm(D, dtype=jg.float64))
            assert list(j.state_dict()) == list(t.state_dict())
            j.load_state_dict({k: jg.tensor(v.numpy()) for k, v in t.state_dict().items()})
        assert repr(j) == repr(t)
        x = _seq(L, bf)
        arrays = {"causal": np.triu(np.full((L, L), -np.inf), 1), "bool": _mask((L, L)), None: None}
        ts, js = _inputs([x, arrays[masks.get("src_mask")],
                          None if "src_key_padding_mask" not in masks else _mask((N, L))])
        for a in ts[1:] + js[1:]:
            if a is not None:
                a.requires_grad_(False)
        mask_kw = "src_mask" if name == "TransformerEncoderLayer" else "mask"
        call = {} if "is_causal" not in masks else {"is_causal": masks["is_causal"]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            to = t(ts[0], **{mask_kw: ts[1]}, src_key_padding_mask=ts[2], **call)
            jo = j(js[0], **{mask_kw: js[1]}, src_key_padding_mask=js[2], **call)
        _check_same(t, j, to, jo, ts[:1], js[:1])


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True, norm_first=True)], ids=["post_norm", "pre_norm"])
def test_decoder_layer_decoder_and_transformer_match_torch(kw):
    bf = kw.get("batch_first", False)
    tgt, src = _seq(L, bf), _seq(S, bf)
    causal = np.triu(np.full((L, L), -np.inf), 1)
    mem_mask = _mask((L, S))
    tgt_kpm, src_kpm = _mask((N, L)), _mask((N, S))
    t, j = _build("TransformerDecoderLayer", D, H, FF, **kw)
    assert repr(j) == repr(t)
    ts, js = _inputs([tgt, src])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # a float tgt_mask with a bool padding mask: torch's deprecation warning
        to = t(ts[0], ts[1], tgt_mask=torch.tensor(causal), memory_mask=torch.tensor(mem_mask),
               tgt_key_padding_mask=torch.tensor(tgt_kpm), memory_key_padding_mask=torch.tensor(src_kpm))
        jo = j(js[0], js[1], tgt_mask=jg.tensor(causal), memory_mask=jg.tensor(mem_mask),
               tgt_key_padding_mask=jg.tensor(tgt_kpm), memory_key_padding_mask=jg.tensor(src_kpm))
    _check_same(t, j, to, jo, ts, js)

    t, j = _build("Transformer", D, H, 2, 1, FF, **kw)
    assert repr(j) == repr(t)
    ts, js = _inputs([src, tgt])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to = t(ts[0], ts[1], tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64),
               src_key_padding_mask=torch.tensor(src_kpm), memory_key_padding_mask=torch.tensor(src_kpm))
        jo = j(js[0], js[1], tgt_mask=nn.Transformer.generate_square_subsequent_mask(L, dtype=jg.float64),
               src_key_padding_mask=jg.tensor(src_kpm), memory_key_padding_mask=jg.tensor(src_kpm))
    _check_same(t, j, to, jo, ts, js)
    # the decoder alone, tgt_is_causal given, unbatched
    ts, js = _inputs([tgt[0] if bf else tgt[:, 0], src[0] if bf else src[:, 0]])
    to = t.decoder(ts[0], ts[1], tgt_mask=torch.tensor(causal), tgt_is_causal=True)
    jo = j.decoder(js[0], js[1], tgt_mask=jg.tensor(causal), tgt_is_causal=True)
    _check_same(t.decoder, j.decoder, to, jo, ts, js)


def test_transformer_init_masks_and_errors():
    torch.manual_seed(0)
    jg.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.nn.Transformer(16, 2, 1, 1, 32)
    j = nn.Transformer(16, 2, 1, 1, 32, batch_first=True)
    tp = dict(t.named_parameters())
    assert list(j.state_dict()) == list(t.state_dict())
    for n, p in j.named_parameters():
        a = p.detach().numpy()
        if a.ndim > 1:      # every matrix re-initialised xavier-uniform
            bound = math.sqrt(6 / (a.shape[0] + a.shape[1]))
            assert 0.85 * bound < np.abs(a).max() <= bound, n
        elif "norm" in n and n.endswith("weight"):
            assert np.all(a == 1), n
        elif "in_proj_bias" in n or "out_proj.bias" in n or "norm" in n:
            assert np.all(a == 0), n
        else:               # Linear biases keep U(+-1/sqrt(fan_in))
            fan_in = tp[n.replace("bias", "weight")].shape[1]
            assert 0 < np.abs(a).max() <= 1 / math.sqrt(fan_in), n
    m = nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(m.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    assert m.dtype is jg.float32
    with pytest.raises(RuntimeError, match="^the batch number of src and tgt must be equal$"):
        j(jg.randn(2, 3, 16), jg.randn(3, 3, 16))
    with pytest.raises(RuntimeError, match="^the feature number of src and tgt must be equal to d_model$"):
        j(jg.randn(2, 3, 16), jg.randn(2, 3, 8))
    with pytest.raises(RuntimeError, match="^activation should be relu/gelu, not tanh$"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert layer.activation is nn.functional.relu and layer.activation_relu_or_gelu == 1
    assert nn.TransformerEncoderLayer(8, 2, activation="gelu").activation_relu_or_gelu == 2


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True), dict(batch_first=True, norm_first=True),
                                dict(batch_first=True, bias=False), dict(batch_first=True, activation="tanh_fn")])
def test_encoder_warns_about_nested_tensors_as_torch(kw):
    """torch's warning when enable_nested_tensor cannot be honoured: the same text, or none when torch gives none;
    the encoder holds deep copies of the layer."""
    if kw.get("activation") == "tanh_fn":
        kw = dict(kw, activation=None)
        t_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, **dict(kw, activation=torch.tanh))
        j_layer = nn.TransformerEncoderLayer(8, 2, 16, **dict(kw, activation=jg.tanh))
    else:
        t_layer, j_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, **kw), nn.TransformerEncoderLayer(8, 2, 16, **kw)
    with warnings.catch_warnings(record=True) as wt:
        warnings.simplefilter("always")
        t = torch.nn.TransformerEncoder(t_layer, 2)
    with warnings.catch_warnings(record=True) as wj:
        warnings.simplefilter("always")
        j = nn.TransformerEncoder(j_layer, 2)
    assert [str(w.message) for w in wj] == [str(w.message) for w in wt]
    assert all(w.filename == __file__ for w in wj)
    assert j.use_nested_tensor == t.use_nested_tensor and j.enable_nested_tensor and j.mask_check
    assert j.layers[0] is not j_layer and j.layers[0].linear1.weight is not j.layers[1].linear1.weight
    with warnings.catch_warnings(record=True) as wj:
        warnings.simplefilter("always")
        nn.TransformerEncoder(j_layer, 2, enable_nested_tensor=False)
    assert not wj


# --- compiled -----------------------------------------------------------------------------------------------
def _train_step(model, opt, run):
    opt.zero_grad()
    out = run(model)
    loss = (out * out).mean()
    loss.backward()
    opt.step()
    return out.detach(), loss.detach()


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_encoder_training_step_compiled_equals_eager_with_dropout(backend):
    """A post-norm encoder (dropout 0.3 in attention and feed-forward) trained with Adam: eager and compiled
    draw the same dropout masks from the same seed and end with the same parameters."""
    jg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.3, batch_first=True, dtype=jg.float64)
    a = nn.TransformerEncoder(layer, 2)
    b = copy.deepcopy(a)
    oa, ob = jg.optim.Adam(a.parameters(), lr=1e-2), jg.optim.Adam(b.parameters(), lr=1e-2)
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=jg.float64)

    def run(m, x, kpm):
        return m(x, mask=mask, src_key_padding_mask=kpm)
    step = jg.compile(lambda x, kpm: _train_step(a, oa, lambda m: run(m, x, kpm)), backend=backend,
                      background=False)
    for i in range(3):
        x, kpm = jg.tensor(_seq(L, True)), jg.tensor(np.where(_mask((N, L)), -np.inf, 0.0))
        jg.manual_seed(100 + i)
        out_c, loss_c = step(x, kpm)
        jg.manual_seed(100 + i)
        out_e, loss_e = _train_step(b, ob, lambda m: run(m, x, kpm))
        # float64, summed in another order: Adam's normalised steps carry the last bits on
        np.testing.assert_allclose(out_c.numpy(), out_e.numpy(), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(loss_c.numpy(), loss_e.numpy(), rtol=1e-9)
    with jg.no_grad():
        assert not np.allclose(b.eval()(x, mask=mask).numpy(), out_e.numpy())   # dropout was on
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-7, atol=1e-9, err_msg=n)


def test_transformer_and_weights_compiled_equal_eager():
    """A Transformer training step with SGD and an MHA returning its weights (dropout on them), compiled
    (interpreter) against eager; and jg.compile(module) in eval mode against torch."""
    jg.manual_seed(1)
    a = nn.Transformer(D, H, 1, 1, FF, dropout=0.2, batch_first=True, dtype=jg.float64)
    b = copy.deepcopy(a)
    oa, ob = jg.optim.SGD(a.parameters(), lr=0.1, momentum=0.9), jg.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=jg.float64)
    step = jg.compile(lambda s, t: _train_step(a, oa, lambda m: m(s, t, tgt_mask=tgt_mask)), backend="interpret")
    for i in range(2):
        s, t = jg.tensor(_seq(S, True)), jg.tensor(_seq(L, True))
        jg.manual_seed(7 + i)
        out_c, _ = step(s, t)
        jg.manual_seed(7 + i)
        out_e, _ = _train_step(b, ob, lambda m: m(s, t, tgt_mask=tgt_mask))
        np.testing.assert_allclose(out_c.numpy(), out_e.numpy(), rtol=1e-9, atol=1e-12)
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-8, atol=1e-12)

    jg.manual_seed(2)
    mha = nn.MultiheadAttention(E, H, dropout=0.5, dtype=jg.float64)
    f = jg.compile(lambda x: mha(x, x, x, average_attn_weights=False), backend="interpret")
    x = jg.tensor(_seq(L, False, E))
    jg.manual_seed(3)
    out_c, w_c = f(x)
    jg.manual_seed(3)
    out_e, w_e = mha(x, x, x, average_attn_weights=False)
    np.testing.assert_allclose(out_c.detach().numpy(), out_e.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(w_c.detach().numpy(), w_e.detach().numpy(), rtol=1e-10)
    assert (w_e.detach().numpy() == 0).any()            # dropout zeroed some weights

    t, j = _build("MultiheadAttention", E, H, kdim=4, add_bias_kv=True)
    cj = jg.compile(j, backend="interpret")
    q, kv = _seq(L, False, E), _seq(S, False, 4)
    am = _mask((L, S))
    vv = _seq(S, False, E)
    to = t(torch.tensor(q), torch.tensor(kv), torch.tensor(vv), attn_mask=torch.tensor(am), need_weights=False)
    jo = cj(jg.tensor(q), jg.tensor(kv), jg.tensor(vv), attn_mask=jg.tensor(am), need_weights=False)
    assert jo[1] is None
    np.testing.assert_allclose(jo[0].detach().numpy(), to[0].detach().numpy(), rtol=1e-10)


def test_docstring_examples_run():
    import doctest
    from jitgrad.nn.modules import activation, transformer
    from jitgrad.nn.functional import attention
    for mod in (activation, attention, transformer):
        r = doctest.testmod(mod)
        assert r.attempted > 0 and r.failed == 0, mod.__name__
