"""nn.ParameterList and nn.ParameterDict against torch: registration names, parameters(), state_dict keys and
load_state_dict, to(), reprs, the list and dict operations and their errors; and parameters held in them train
inside a compiled step as eagerly."""
import re
from collections import OrderedDict

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


def _repr(m):
    return repr(m).replace("torch.", "jitgrad.")        # dtypes print as jitgrad's


def _same_layout(t, j):
    assert _repr(j) == repr(t).replace("torch.", "jitgrad.")
    assert [n for n, _ in j.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(j.state_dict()) == list(t.state_dict())
    for (n, p), (_, q) in zip(j.named_parameters(), t.named_parameters()):
        assert isinstance(p, nn.Parameter) and p.requires_grad == q.requires_grad, n
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=n)


def _raises_as_torch(fn_t, fn_j):
    with pytest.raises(Exception) as et:
        fn_t()
    with pytest.raises(type(et.value), match="^" + re.escape(str(et.value)) + "$"):
        fn_j()


def test_parameter_list_matches_torch():
    a, b, c, d = _arrays((2, 3), (3,), (1,), (2, 2))
    t = torch.nn.ParameterList([torch.tensor(a), torch.nn.Parameter(torch.tensor(b), requires_grad=False)])
    j = nn.ParameterList([jg.tensor(a), nn.Parameter(jg.tensor(b), requires_grad=False)])
    _same_layout(t, j)
    assert _repr(nn.ParameterList()) == repr(torch.nn.ParameterList()) == "ParameterList()"
    t.append(torch.tensor(c))
    j.append(jg.tensor(c))
    t += [torch.tensor(d)]
    j += [jg.tensor(d)]
    t.extend([torch.tensor(a)])
    j.extend([jg.tensor(a)])
    _same_layout(t, j)
    assert len(j) == 5 and [tuple(p.shape) for p in j] == [tuple(p.shape) for p in t]
    assert j[-1] is j[4] and j[1:3][0] is j[1] and len(j[::2]) == 3
    src = jg.tensor(d)
    j[0] = src                       # a plain tensor becomes a Parameter sharing its storage
    assert isinstance(j[0], nn.Parameter) and j[0].requires_grad
    with jg.no_grad():
        src.add_(1.0)
    np.testing.assert_array_equal(j[0].detach().numpy(), d + 1)
    t[0] = torch.tensor(d + 1)
    t.append(3)                      # any other object is kept, as a plain attribute
    j.append(3)
    _same_layout(t, j)
    assert j[5] == 3 and _repr(j).endswith("(5): Object of type: int\n)")
    _raises_as_torch(lambda: t[7], lambda: j[7])
    _raises_as_torch(lambda: t.extend(torch.zeros(2)), lambda: j.extend(jg.zeros(2)))
    _raises_as_torch(lambda: t(), lambda: j())


def test_parameter_dict_matches_torch():
    a, b, c = _arrays((2,), (3, 1), (1,))
    # a plain dict is added in sorted key order, an OrderedDict and a list of pairs in their own
    t = torch.nn.ParameterDict({"w": torch.tensor(a), "b": torch.tensor(b)})
    j = nn.ParameterDict({"w": jg.tensor(a), "b": jg.tensor(b)})
    _same_layout(t, j)
    assert list(j) == ["b", "w"] and list(j.keys()) == list(t.keys())
    t2 = torch.nn.ParameterDict(OrderedDict(w=torch.tensor(a), b=torch.tensor(b)))
    j2 = nn.ParameterDict(OrderedDict(w=jg.tensor(a), b=jg.tensor(b)))
    _same_layout(t2, j2)
    t.update([("z", torch.tensor(c)), ("a", torch.nn.Parameter(torch.tensor(c), requires_grad=False))])
    j.update([("z", jg.tensor(c)), ("a", nn.Parameter(jg.tensor(c), requires_grad=False))])
    _same_layout(t, j)
    assert "z" in j and "q" not in j and len(j) == 4
    assert j.get("q") is None and j.get("z") is j["z"] and j.setdefault("z") is j["z"]
    assert [k for k, _ in j.items()] == list(j) == ["b", "w", "z", "a"] and list(reversed(j))[0] == "a"
    assert j.pop("w") is not None and t.pop("w") is not None
    assert j.popitem()[0] == t.popitem()[0] == "a"
    del j["b"], t["b"]
    _same_layout(t, j)
    merged_j, merged_t = j | nn.ParameterDict({"y": jg.tensor(a)}), t | torch.nn.ParameterDict({"y": torch.tensor(a)})
    _same_layout(merged_t, merged_j)
    assert merged_j["z"] is j["z"]
    j.clear()
    assert len(j) == 0 and list(j.parameters()) == [] and _repr(j) == "ParameterDict()"
    _raises_as_torch(lambda: t[1], lambda: j[1])
    _raises_as_torch(lambda: t.update(3), lambda: j.update(3))
    _raises_as_torch(lambda: t.update([("a", torch.zeros(1), 1)]), lambda: j.update([("a", jg.zeros(1), 1)]))
    _raises_as_torch(lambda: t.update([3]), lambda: j.update([3]))
    _raises_as_torch(lambda: t(1), lambda: j(1))


def test_containers_in_a_module_state_dict_and_to():
    def make(lib, m):
        class Net(m.Module):
            def __init__(self):
                super().__init__()
                self.scales = m.ParameterList([lib.ones(2), lib.ones(2)])
                self.biases = m.ParameterDict({"out": lib.zeros(2), "in": lib.zeros(2)})
        return Net()
    t, j = make(torch, torch.nn), make(jg, nn)
    _same_layout(t, j)
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(torch.tensor(RNG.standard_normal(tuple(p.shape))))
    assert list(j.state_dict()) == ["scales.0", "scales.1", "biases.in", "biases.out"]
    r = j.load_state_dict({k: jg.tensor(v.numpy()) for k, v in t.state_dict().items()})
    assert not r.missing_keys and not r.unexpected_keys
    _same_layout(t, j)
    held = j.scales[0]
    j.to(jg.float64)
    assert j.scales[0] is held and all(p.dtype is jg.float64 for p in j.parameters())


def test_container_parameters_train_compiled_as_eagerly():
    """Per-layer scales in a ParameterList and biases in a ParameterDict, trained with SGD inside @jg.compile
    (interpreter): the same parameters after three steps as eagerly."""
    def make():
        jg.manual_seed(0)
        m = nn.Module()
        m.scales = nn.ParameterList([jg.randn(3, dtype=jg.float64) for _ in range(2)])
        m.biases = nn.ParameterDict({str(i): jg.zeros(3, dtype=jg.float64) for i in range(2)})
        return m, jg.optim.SGD(m.parameters(), lr=0.1)

    def step(m, opt, x):
        opt.zero_grad()
        for i, s in enumerate(m.scales):
            x = jg.tanh(x * s + m.biases[str(i)])
        loss = (x * x).sum()
        loss.backward()
        opt.step()
        return loss.detach()
    (a, oa), (b, ob) = make(), make()
    f = jg.compile(lambda x: step(a, oa, x), backend="interpret")
    for _ in range(3):
        x = jg.tensor(RNG.standard_normal((4, 3)))
        np.testing.assert_allclose(f(x).numpy(), step(b, ob, x).numpy(), rtol=1e-12)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, err_msg=n)
    assert not np.allclose(a.biases["0"].detach().numpy(), 0)      # the dict's parameters were trained


def test_docstring_examples_run():
    import doctest
    from jitgrad.nn.modules import container
    r = doctest.testmod(container)
    assert r.attempted > 0 and r.failed == 0
