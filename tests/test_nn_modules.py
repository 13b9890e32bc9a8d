"""jg.nn modules against torch.nn (float64): outputs, gradients, initialisation, parameter layout, state_dict,
repr, train/eval, and Module's registration and traversal."""
import math
import re

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn

RNG = np.random.default_rng(0)


def _copy_from_torch(jm, tm):
    """Load a torch module's state into the jitgrad module (same keys and shapes)."""
    jm.load_state_dict({k: jg.tensor(v.detach().numpy().copy()) for k, v in tm.state_dict().items()})


def _run_pair(jm, tm, xs, torch, loss_on_output=True):
    """Forward both modules on the same float64 inputs; backward a random projection; return the two sides'
    outputs, input grads and parameter grads as numpy."""
    jx = [jg.tensor(x, requires_grad=x.dtype.kind == "f") for x in xs]
    tx = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in xs]
    jo, to = jm(*jx), tm(*tx)
    w = RNG.standard_normal(to.shape)
    (jo * jg.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    j = {"out": jo.detach().numpy()}
    t = {"out": to.detach().numpy()}
    for i, (a, b) in enumerate(zip(jx, tx)):
        if b.requires_grad:
            j[f"x{i}"], t[f"x{i}"] = a.grad.detach().numpy(), b.grad.detach().numpy()
    for (n, p), (m, q) in zip(jm.named_parameters(), tm.named_parameters()):
        assert n == m
        if q.grad is not None:
            j[n], t[n] = p.grad.detach().numpy(), q.grad.detach().numpy()
    return j, t


def _assert_close(j, t, atol=1e-10):
    assert j.keys() == t.keys()
    for k in j:
        np.testing.assert_allclose(j[k], t[k], rtol=1e-9, atol=atol, err_msg=k)


# ---- layers against torch ----------------------------------------------------------------------------------

LAYERS = [
    ("Linear", lambda m: m.Linear(4, 3), [(5, 4)]),
    ("Linear-nobias-3d", lambda m: m.Linear(4, 3, bias=False), [(2, 5, 4)]),
    ("LayerNorm", lambda m: m.LayerNorm(4), [(5, 4)]),
    ("LayerNorm-2d", lambda m: m.LayerNorm([3, 4], eps=1e-3), [(2, 3, 4)]),
    ("LayerNorm-noaffine", lambda m: m.LayerNorm(4, elementwise_affine=False), [(5, 4)]),
    ("BatchNorm1d", lambda m: m.BatchNorm1d(3), [(6, 3)]),
    ("BatchNorm1d-3d", lambda m: m.BatchNorm1d(3, momentum=0.3), [(4, 3, 5)]),
    ("BatchNorm1d-nostats", lambda m: m.BatchNorm1d(3, track_running_stats=False, affine=False), [(6, 3)]),
    ("ReLU", lambda m: m.ReLU(), [(4, 5)]),
    ("GELU", lambda m: m.GELU(), [(4, 5)]),
    ("GELU-tanh", lambda m: m.GELU(approximate="tanh"), [(4, 5)]),
    ("Tanh", lambda m: m.Tanh(), [(4, 5)]),
    ("Sigmoid", lambda m: m.Sigmoid(), [(4, 5)]),
    ("Softmax", lambda m: m.Softmax(dim=1), [(4, 5)]),
    ("Flatten", lambda m: m.Flatten(), [(2, 3, 4)]),
    ("Identity", lambda m: m.Identity(7, k=1), [(2, 3)]),
]


@pytest.mark.parametrize("name,make,shapes", LAYERS, ids=[c[0] for c in LAYERS])
def test_layer_matches_torch(name, make, shapes):
    torch = pytest.importorskip("torch")
    tm = make(torch.nn).double()
    jm = make(nn).double()
    with torch.no_grad():       # non-trivial affine parameters
        for p in tm.parameters():
            p.add_(torch.tensor(RNG.standard_normal(tuple(p.shape))) * 0.3)
    _copy_from_torch(jm, tm)
    assert repr(jm) == repr(tm)
    assert list(jm.state_dict()) == list(tm.state_dict())
    xs = [RNG.standard_normal(s) for s in shapes]
    j, t = _run_pair(jm, tm, xs, torch)
    _assert_close(j, t)
    for (k, b) in tm.named_buffers():       # running statistics after one training step
        np.testing.assert_allclose(jm.get_buffer(k).detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=k)


def test_batchnorm_running_stats_and_eval():
    torch = pytest.importorskip("torch")
    for momentum in (0.1, None):
        tm = torch.nn.BatchNorm1d(3, momentum=momentum).double()
        jm = nn.BatchNorm1d(3, momentum=momentum).double()
        for _ in range(3):
            x = RNG.standard_normal((5, 3)) * 2 + 1
            tm(torch.tensor(x))
            jm(jg.tensor(x))
        assert int(jm.num_batches_tracked) == 3 and jm.num_batches_tracked.dtype == jg.int64
        np.testing.assert_allclose(jm.running_mean.detach().numpy(), tm.running_mean.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(jm.running_var.detach().numpy(), tm.running_var.detach().numpy(), rtol=1e-12)
        tm.eval()
        jm.eval()
        assert not jm.training
        x = RNG.standard_normal((2, 3))
        before = jm.running_mean.detach().numpy().copy()
        np.testing.assert_allclose(jm(jg.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-12)
        np.testing.assert_array_equal(jm.running_mean.detach().numpy(), before)     # eval does not update
        assert int(jm.num_batches_tracked) == 3
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(jg.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm1d(3)(jg.zeros(1, 3))


def test_embedding_matches_torch():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Embedding(6, 3, padding_idx=2).double()
    jm = nn.Embedding(6, 3, padding_idx=2).double()
    np.testing.assert_array_equal(jm.weight.detach().numpy()[2], 0.0)      # the padding row starts at zero
    _copy_from_torch(jm, tm)
    idx = np.array([[0, 2, 5], [2, 1, 1]])
    jo, to = jm(jg.tensor(idx)), tm(torch.tensor(idx))
    w = RNG.standard_normal(to.shape)
    (jo * jg.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy())
    np.testing.assert_allclose(jm.weight.grad.detach().numpy(), tm.weight.grad.detach().numpy(), rtol=1e-12)
    assert repr(jm) == repr(tm) == "Embedding(6, 3, padding_idx=2)"
    assert nn.Embedding(6, 3, padding_idx=-1).padding_idx == 5
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(6, 3, padding_idx=6)
    e = nn.Embedding.from_pretrained(jg.tensor([[1., 2.], [3., 4.]]))
    assert not e.weight.requires_grad and e(jg.tensor([1])).tolist() == [[3., 4.]]


LOSSES = [
    ("CrossEntropyLoss", lambda m: m.CrossEntropyLoss(), "cls"),
    ("CrossEntropyLoss-opts", lambda m, w=None: m.CrossEntropyLoss(reduction="sum", ignore_index=1,
                                                                    label_smoothing=0.1), "cls"),
    ("CrossEntropyLoss-none", lambda m: m.CrossEntropyLoss(reduction="none"), "cls"),
    ("NLLLoss", lambda m: m.NLLLoss(), "cls"),
    ("NLLLoss-ignore", lambda m: m.NLLLoss(ignore_index=0, reduction="sum"), "cls"),
    ("MSELoss", lambda m: m.MSELoss(), "reg"),
    ("MSELoss-none", lambda m: m.MSELoss(reduction="none"), "reg"),
]


@pytest.mark.parametrize("name,make,kind", LOSSES, ids=[c[0] for c in LOSSES])
def test_loss_matches_torch(name, make, kind):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((6, 4))
    y = RNG.integers(0, 4, 6) if kind == "cls" else RNG.standard_normal((6, 4))
    if name.startswith("NLL"):
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
    jx, tx = jg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jl, tl = make(nn)(jx, jg.tensor(y)), make(torch.nn)(tx, torch.tensor(y))
    w = RNG.standard_normal(tl.shape)
    (jl * jg.tensor(w)).sum().backward()
    (tl * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(jl.detach().numpy(), tl.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(jx.grad.detach().numpy(), tx.grad.detach().numpy(), rtol=1e-10, atol=1e-14)
    assert repr(make(nn)) == repr(make(torch.nn))


def test_weighted_loss_registers_weight_buffer():
    torch = pytest.importorskip("torch")
    w = np.array([1.0, 2.0, 0.5])
    x, y = RNG.standard_normal((5, 3)), RNG.integers(0, 3, 5)
    jm, tm = nn.CrossEntropyLoss(weight=jg.tensor(w)), torch.nn.CrossEntropyLoss(weight=torch.tensor(w))
    assert list(jm.state_dict()) == list(tm.state_dict()) == ["weight"]
    np.testing.assert_allclose(float(jm(jg.tensor(x), jg.tensor(y))), float(tm(torch.tensor(x), torch.tensor(y))),
                               rtol=1e-12)


def test_functional_layers_gradcheck():
    x = jg.tensor(RNG.standard_normal((4, 3)), requires_grad=True)
    w = jg.tensor(RNG.standard_normal(3) + 1, requires_grad=True)
    b = jg.tensor(RNG.standard_normal(3), requires_grad=True)
    F = nn.functional
    assert jg.autograd.gradcheck(lambda x, w, b: F.layer_norm(x, (3,), w, b), (x, w, b))
    assert jg.autograd.gradgradcheck(lambda x, w, b: F.layer_norm(x, (3,), w, b), (x, w, b))
    assert jg.autograd.gradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b))
    assert jg.autograd.gradgradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b))
    lw = jg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    assert jg.autograd.gradcheck(lambda x, lw, b: F.linear(x, lw, b[:2]), (x, lw, b))
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(4x3 and 2x3\)"):
        F.linear(x, jg.zeros(3, 2, dtype=jg.float64))


# ---- initialisation ----------------------------------------------------------------------------------------

def test_default_init_distributions_and_layout():
    torch = pytest.importorskip("torch")
    lin = nn.Linear(400, 300)
    assert lin.weight.shape == (300, 400) and lin.bias.shape == (300,)
    assert lin.weight.dtype == jg.float32 and isinstance(lin.weight, nn.Parameter)
    bound = 1 / math.sqrt(400)          # kaiming_uniform_(a=sqrt(5)) on fan_in=400
    w = lin.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(lin.bias.detach().numpy()).max() <= bound
    e = nn.Embedding(300, 200).weight.detach().numpy()
    assert abs(e.mean()) < 0.01 and abs(e.std() - 1) < 0.01
    bn, ln = nn.BatchNorm1d(5), nn.LayerNorm(5)
    for m in (bn, ln):
        np.testing.assert_array_equal(m.weight.detach().numpy(), 1.0)
        np.testing.assert_array_equal(m.bias.detach().numpy(), 0.0)
    np.testing.assert_array_equal(bn.running_var.detach().numpy(), 1.0)
    for nl, param in [("linear", None), ("relu", None), ("tanh", None), ("leaky_relu", None), ("leaky_relu", 0.2),
                      ("selu", None), ("sigmoid", None)]:
        assert nn.init.calculate_gain(nl, param) == pytest.approx(torch.nn.init.calculate_gain(nl, param))
    with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
        nn.init.calculate_gain("foo")


@pytest.mark.parametrize("shape", [(30, 20), (8, 6, 3, 3)])
def test_init_functions(shape):
    torch = pytest.importorskip("torch")
    t = jg.empty(*shape, dtype=jg.float64)
    fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(t)
    assert (fan_in, fan_out) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    n = t.numel()
    cases = [
        (lambda: nn.init.kaiming_uniform_(t, a=0.1, mode="fan_out", nonlinearity="leaky_relu"),
         math.sqrt(2 / 1.01) / math.sqrt(fan_out), "uniform"),
        (lambda: nn.init.kaiming_normal_(t, nonlinearity="relu"), math.sqrt(2) / math.sqrt(fan_in), "normal"),
        (lambda: nn.init.xavier_uniform_(t, gain=2.0), 2 * math.sqrt(2 / (fan_in + fan_out)), "uniform"),
        (lambda: nn.init.xavier_normal_(t), math.sqrt(2 / (fan_in + fan_out)), "normal"),
        (lambda: nn.init.normal_(t, 0.0, 0.5), 0.5, "normal"),
        (lambda: nn.init.uniform_(t, -2.0, 2.0), 2 / math.sqrt(3), "uniform"),
    ]
    for fn, std, kind in cases:
        assert fn() is t
        v = t.detach().numpy()
        assert abs(v.std() - std) < 5 * std / math.sqrt(n)
        if kind == "uniform":
            assert np.abs(v).max() <= math.sqrt(3) * std * (1 + 1e-12)
    assert nn.init.constant_(t, 0.25) is t and (t.detach().numpy() == 0.25).all()
    nn.init.ones_(t)
    assert (t.detach().numpy() == 1).all()
    nn.init.zeros_(t)
    assert (t.detach().numpy() == 0).all()
    with pytest.raises(ValueError, match="Fan in and fan out can not be computed for tensor with fewer than 2"):
        nn.init.xavier_uniform_(jg.zeros(3))
    with pytest.raises(ValueError, match=r"Mode fan_avg not supported, please use one of \['fan_in', 'fan_out'\]"):
        nn.init.kaiming_uniform_(t, mode="fan_avg")
    p = nn.Parameter(jg.zeros(3, 4))
    nn.init.normal_(p)                      # on a parameter that requires grad: no autograd error, stays a leaf
    assert p.is_leaf and p.requires_grad and p.detach().numpy().std() > 0


# ---- Module ------------------------------------------------------------------------------------------------

def _mlp(m):
    return m.Sequential(m.Linear(3, 4, bias=False), m.BatchNorm1d(4), m.ReLU(), m.Linear(4, 2))


def test_module_traversal_matches_torch():
    torch = pytest.importorskip("torch")
    jm, tm = _mlp(nn), _mlp(torch.nn)
    assert [n for n, _ in jm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [tuple(p.shape) for p in jm.parameters()] == [tuple(p.shape) for p in tm.parameters()]
    assert [n for n, _ in jm.named_buffers()] == [n for n, _ in tm.named_buffers()]
    assert [n for n, _ in jm.named_modules()] == [n for n, _ in tm.named_modules()]
    assert [n for n, _ in jm.named_children()] == [n for n, _ in tm.named_children()]
    assert [type(m).__name__ for m in jm.modules()] == [type(m).__name__ for m in tm.modules()]
    assert list(jm.state_dict()) == list(tm.state_dict())
    assert repr(jm) == repr(tm)
    assert len(list(jm[1].buffers())) == 3 and len(list(jm.children())) == 4
    assert jm.get_parameter("3.bias") is jm[3].bias and jm.get_submodule("1") is jm[1]
    shared = nn.Linear(2, 2)
    assert len(list(nn.Sequential(shared, shared).parameters())) == 2      # shared parameters once


def test_state_dict_round_trip_and_strict_errors():
    torch = pytest.importorskip("torch")
    a, b = _mlp(nn), _mlp(nn)
    sd = a.state_dict()
    assert not sd["0.weight"].requires_grad
    w_before = b[0].weight
    assert repr(b.load_state_dict(sd)) == "<All keys matched successfully>"
    assert b[0].weight is w_before          # copied in place: identities (captured by compiled steps) are kept
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[k].detach().numpy(), v.detach().numpy())
    sd["0.weight"].detach().numpy()                  # state_dict shares storage with the module
    bad = dict(sd)
    del bad["3.bias"]
    bad["extra.weight"] = jg.zeros(1)
    tbad = {k: torch.tensor(v.detach().numpy()) for k, v in bad.items()}
    with pytest.raises(RuntimeError) as je:
        b.load_state_dict(bad)
    with pytest.raises(RuntimeError) as te:
        _mlp(torch.nn).load_state_dict(tbad)
    assert str(je.value) == str(te.value)
    r = b.load_state_dict(bad, strict=False)
    assert r.missing_keys == ["3.bias"] and r.unexpected_keys == ["extra.weight"]
    wrong = dict(sd)
    wrong["3.weight"] = jg.zeros(3, 4)
    with pytest.raises(RuntimeError) as je:
        b.load_state_dict(wrong)
    with pytest.raises(RuntimeError) as te:
        _mlp(torch.nn).load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in wrong.items()})
    assert str(je.value) == str(te.value)


def test_train_eval_zero_grad_apply_to():
    m = _mlp(nn)
    assert m.training and all(c.training for c in m.modules())
    assert m.eval() is m and not any(c.training for c in m.modules())
    m.train()
    assert m[1].training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        m.train(1)
    m(jg.randn(5, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and (p.grad.detach().numpy() == 0).all() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "BatchNorm1d", "ReLU", "Linear", "Sequential"]
    w = m[0].weight
    assert m.double() is m and m[0].weight is w and w.dtype == jg.float64
    assert m[1].running_mean.dtype == jg.float64 and m[1].num_batches_tracked.dtype == jg.int64
    m.to(jg.float32)
    assert w.dtype == jg.float32 and m.cpu() is m
    with pytest.raises(RuntimeError, match="CUDA"):
        m.cuda()
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point"):
        m.to(jg.int64)


def test_registration_rules():
    m = nn.Module()
    m.w = nn.Parameter(jg.zeros(2))
    m.register_buffer("b", jg.ones(2))
    m.register_buffer("tmp", jg.ones(1), persistent=False)
    m.child = nn.Linear(1, 1)
    m.plain = jg.zeros(1)           # a plain tensor attribute is neither parameter nor buffer
    assert list(m.state_dict()) == ["w", "b", "child.weight", "child.bias"]
    assert [n for n, _ in m.named_buffers()] == ["b", "tmp"]
    m.b = jg.zeros(2)               # assigning to a buffer name replaces the buffer
    assert (m.get_buffer("b").detach().numpy() == 0).all()
    with pytest.raises(TypeError, match=r"cannot assign 'torch.FloatTensor' as parameter 'w' \(torch.nn.Parameter "
                                        r"or None expected\)"):
        m.w = jg.zeros(2)
    with pytest.raises(TypeError, match=r"cannot assign 'int' object to buffer 'x' \(torch Tensor or None required\)"):
        m.register_buffer("x", 3)
    with pytest.raises(KeyError, match="attribute 'plain' already exists"):
        m.register_buffer("plain", jg.zeros(1))
    with pytest.raises(KeyError, match="contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'nope'"):
        m.nope
    m.w = None
    assert "w" not in m.state_dict()
    del m.child
    assert list(m.state_dict()) == ["b"]
    with pytest.raises(AttributeError, match="cannot assign parameters before Module.__init__"):
        class Bad(nn.Module):
            def __init__(self):
                self.p = nn.Parameter(jg.zeros(1))
        Bad()
    p = nn.Parameter(jg.tensor([1.0]))
    assert repr(p) == "Parameter containing:\ntensor([1.], requires_grad=True)"
    assert not nn.Parameter(jg.zeros(1), requires_grad=False).requires_grad


def test_forward_hooks():
    lin = nn.Linear(2, 2)
    calls = []
    h = lin.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out * 0)
    assert (lin(jg.ones(1, 2)).detach().numpy() == 0).all() and calls == [(1, 2)]
    h.remove()
    assert (lin(jg.ones(1, 2)).detach().numpy() != 0).any()


def test_containers():
    torch = pytest.importorskip("torch")
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(s) == 3 and isinstance(s[-1], nn.Linear) and isinstance(s[1:], nn.Sequential)
    assert list(s[1:].state_dict()) == ["2.weight", "2.bias"]       # torch keeps the names
    s.append(nn.Tanh())
    assert len(s) == 4 and s(jg.ones(4, 2)).shape == (4, 1)
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU()])
    tl = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)] + [torch.nn.ReLU()])
    assert repr(ml) == repr(tl) and len(ml) == 4
    ml.insert(0, nn.Tanh())
    ml += [nn.Sigmoid()]
    assert [type(m).__name__ for m in ml] == ["Tanh", "Linear", "Linear", "Linear", "ReLU", "Sigmoid"]
    assert list(ml.state_dict())[0] == "1.weight"
    md = nn.ModuleDict({"a": nn.Linear(1, 2), "b": nn.ReLU()})
    td = torch.nn.ModuleDict({"a": torch.nn.Linear(1, 2), "b": torch.nn.ReLU()})
    assert repr(md) == repr(td) and list(md) == ["a", "b"] and "a" in md
    md["c"] = nn.Tanh()
    assert list(md.keys()) == ["a", "b", "c"] and isinstance(md.pop("b"), nn.ReLU) and len(md) == 2
    assert list(md.state_dict()) == ["a.weight", "a.bias"]


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    for norm_type, max_norm in [(2.0, 0.5), (math.inf, 0.1), (1.0, 100.0)]:
        gs = [RNG.standard_normal((3, 2)), RNG.standard_normal(4)]
        jp = [nn.Parameter(jg.zeros(*g.shape, dtype=jg.float64)) for g in gs]
        tp = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in gs]
        for a, b, g in zip(jp, tp, gs):
            a.grad, b.grad = jg.tensor(g), torch.tensor(g)
        jt = nn.utils.clip_grad_norm_(jp, max_norm, norm_type)
        tt = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type)
        np.testing.assert_allclose(float(jt), float(tt), rtol=1e-12)
        for a, b in zip(jp, tp):
            np.testing.assert_allclose(a.grad.detach().numpy(), b.grad.detach().numpy(), rtol=1e-12)
    p = nn.Parameter(jg.zeros(2))
    p.grad = jg.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match=re.escape("The total norm of order 2.0 for gradients from `parameters` "
                                                     "is non-finite, so it cannot be clipped.")):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    assert math.isnan(float(nn.utils.clip_grad_norm_([p], 1.0)))


def test_docstring_examples_run():
    import doctest
    from jitgrad.nn import parameter
    from jitgrad.nn.modules import module
    from jitgrad.optim import sgd
    for mod in (module, parameter, sgd):
        r = doctest.testmod(mod)
        assert r.attempted > 0 and r.failed == 0, mod.__name__


def test_deepcopy_and_pickle_keep_layout():
    import copy
    import pickle
    m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert list(c.state_dict()) == list(m.state_dict())
        assert isinstance(c[0].weight, nn.Parameter) and c[0].weight is not m[0].weight
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(c.state_dict()[k].numpy(), v.numpy())


def test_modules_in_compiled_function_match_eager():
    """Embedding lookups, LayerNorm and BatchNorm1d(momentum=None) (factor read from num_batches_tracked in
    the graph) inside @jg.compile (reference interpreter) equal eager, call after call."""
    def make():
        jg.manual_seed(3)
        return nn.ModuleDict({"emb": nn.Embedding(5, 4, padding_idx=0), "ln": nn.LayerNorm(4),
                              "bn": nn.BatchNorm1d(4, momentum=None)}).double()
    a, b = make(), make()

    def run(m, idx):
        h = m["bn"](m["ln"](m["emb"](idx)).reshape(-1, 4))
        h.sum().backward()
        return h.detach()
    f = jg.compile(lambda idx: run(a, idx), backend="interpret")
    for i in range(3):
        idx = jg.tensor(RNG.integers(0, 5, (2, 3)))
        np.testing.assert_allclose(f(idx).numpy(), run(b, idx).numpy(), rtol=1e-12)
    assert f.stats["traces"] <= 2      # the first call starts from grads that are None
    for k, v in b.state_dict().items():
        np.testing.assert_allclose(a.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, err_msg=k)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, err_msg=n)
    assert int(a["bn"].num_batches_tracked) == 3


def test_relu_inplace():
    x = jg.tensor([-1.0, 2.0], requires_grad=True)
    h = x * 1
    out = nn.ReLU(inplace=True)(h)
    assert out is h and out.tolist() == [0.0, 2.0]
    out.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0]
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"
