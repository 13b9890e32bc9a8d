"""nn.RNNCell/LSTMCell/GRUCell, nn.RNN/LSTM/GRU and nn.utils.rnn.pad_sequence against torch: with torch's weights
loaded, outputs, final states and the gradients of every parameter and input agree in float64 over layers,
directions, layouts, unbatched inputs, given or missing initial states and bias; parameter names, state_dict keys,
reprs, initialisation bounds and errors are torch's; compiled training steps (interpreter, Numba once) equal
torch's, and with dropout between layers eager and compiled draw the same masks from the same seed."""
import copy
import math
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
IN, HID, L, N = 3, 4, 3, 2


def _build(name, *args, **kw):
    """torch's module and jitgrad's, float64, with torch's weights copied into jitgrad's."""
    torch.manual_seed(0)
    t = getattr(torch.nn, name)(*args, dtype=torch.float64, **kw)
    j = getattr(nn, name)(*args, dtype=jg.float64, **kw)
    assert list(j.state_dict()) == list(t.state_dict())
    assert [n for n, _ in j.named_parameters()] == [n for n, _ in t.named_parameters()]
    j.load_state_dict({k: jg.tensor(v.numpy()) for k, v in t.state_dict().items()})
    return t, j


def _pair(shape):
    a = RNG.standard_normal(shape)
    return torch.tensor(a, requires_grad=True), jg.tensor(a, requires_grad=True)


def _flat(out):
    return [o for x in out for o in (_flat(x) if isinstance(x, tuple) else [x])]


def _check(t_mod, j_mod, t_out, j_out, t_in, j_in):
    """Outputs equal; a weighted sum's gradients equal for every parameter and input."""
    t_loss, j_loss = 0, 0
    for to, jo in zip(_flat(t_out), _flat(j_out), strict=True):
        assert tuple(jo.shape) == tuple(to.shape)
        np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-11, atol=1e-13)
        w = RNG.standard_normal(tuple(to.shape))
        t_loss = t_loss + (to * torch.tensor(w)).sum()
        j_loss = j_loss + (jo * jg.tensor(w)).sum()
    t_loss.backward()
    j_loss.backward()
    jp = dict(j_mod.named_parameters())
    for n, p in t_mod.named_parameters():
        np.testing.assert_allclose(jp[n].grad.numpy(), p.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=n)
    for ti, ji in zip(t_in, j_in, strict=True):
        np.testing.assert_allclose(ji.grad.numpy(), ti.grad.numpy(), rtol=1e-10, atol=1e-12)


# --- cells --------------------------------------------------------------------------------------------------
CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}), ("GRUCell", {})]


@pytest.mark.parametrize("name,kw", CELLS, ids=[c[0] + "-".join(c[1].values()) for c in CELLS])
@pytest.mark.parametrize("batched,with_hx,bias", [(True, True, True), (True, False, True), (False, True, True),
                                                  (False, False, False), (True, True, False)])
def test_cell_matches_torch(name, kw, batched, with_hx, bias):
    t, j = _build(name, IN, HID, bias=bias, **kw)
    lead = (N,) if batched else ()
    tx, jx = _pair(lead + (IN,))
    t_in, j_in, t_args, j_args = [tx], [jx], [tx], [jx]
    if with_hx:
        states = [_pair(lead + (HID,)) for _ in range(2 if name == "LSTMCell" else 1)]
        t_in += [s[0] for s in states]
        j_in += [s[1] for s in states]
        if name == "LSTMCell":
            t_args.append(tuple(s[0] for s in states))
            j_args.append(tuple(s[1] for s in states))
        else:
            t_args.append(states[0][0])
            j_args.append(states[0][1])
    _check(t, j, (t(*t_args),), (j(*j_args),), t_in, j_in)


# --- sequence modules ---------------------------------------------------------------------------------------
MODULES = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {}), ("LSTM", {"proj_size": 2})]
# (num_layers, bidirectional, batch_first, batched, with initial state, bias)
CONFIGS = [(1, False, False, True, False, True), (1, False, False, True, True, True),
           (2, False, True, True, True, True), (1, True, False, True, True, True),
           (2, True, True, True, False, True), (2, True, False, False, True, True),
           (1, False, True, False, False, True), (2, True, False, True, True, False)]


@pytest.mark.parametrize("name,kw", MODULES, ids=[m[0] + "-".join(map(str, m[1].values())) for m in MODULES])
@pytest.mark.parametrize("layers,bidir,batch_first,batched,with_hx,bias", CONFIGS,
                         ids=["-".join(f"{k}{int(v)}" for k, v in zip("lDfbhB", c)) for c in CONFIGS])
def test_module_matches_torch(name, kw, layers, bidir, batch_first, batched, with_hx, bias):
    t, j = _build(name, IN, HID, num_layers=layers, bidirectional=bidir, batch_first=batch_first, bias=bias, **kw)
    shape = ((N, L) if batch_first else (L, N)) if batched else (L,)
    tx, jx = _pair(shape + (IN,))
    t_in, j_in, t_args, j_args = [tx], [jx], [tx], [jx]
    if with_hx:
        lead = (layers * (2 if bidir else 1),) + ((N,) if batched else ())
        sizes = [kw.get("proj_size", HID), HID] if name == "LSTM" else [HID]
        states = [_pair(lead + (s,)) for s in sizes]
        t_in += [s[0] for s in states]
        j_in += [s[1] for s in states]
        t_args.append(tuple(s[0] for s in states) if name == "LSTM" else states[0][0])
        j_args.append(tuple(s[1] for s in states) if name == "LSTM" else states[0][1])
    t_out, j_out = t(*t_args), j(*j_args)
    assert isinstance(j_out, tuple) and len(j_out) == 2 and isinstance(j_out[1], tuple) == (name == "LSTM")
    _check(t, j, t_out, j_out, t_in, j_in)


def test_pad_sequence_matches_torch():
    from jitgrad.nn.utils.rnn import pad_sequence
    pairs = [_pair((n, 2)) for n in (2, 4, 3)]
    for batch_first, side in ((False, "right"), (True, "left")):
        to = torch.nn.utils.rnn.pad_sequence([p[0] for p in pairs], batch_first, -1.5, side)
        jo = pad_sequence([p[1] for p in pairs], batch_first, -1.5, side)
        np.testing.assert_array_equal(jo.detach().numpy(), to.detach().numpy())
        w = RNG.standard_normal(tuple(to.shape))
        (to * torch.tensor(w)).sum().backward()
        (jo * jg.tensor(w)).sum().backward()
    for tp, jp in pairs:
        np.testing.assert_array_equal(jp.grad.numpy(), tp.grad.numpy())
    with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right, but got mid."):
        pad_sequence([p[1] for p in pairs], padding_side="mid")


# --- surface ------------------------------------------------------------------------------------------------
SURFACE = [("RNN", (IN, HID), {}), ("RNN", (IN, HID, 2, "relu"), {"bias": False, "batch_first": True}),
           ("LSTM", (IN, HID), {"num_layers": 2, "dropout": 0.5, "bidirectional": True}),
           ("LSTM", (IN, HID, 1, True, True), {"proj_size": 2}), ("GRU", (IN, HID, 3, False), {"bidirectional": True}),
           ("RNNCell", (IN, HID), {"nonlinearity": "relu"}), ("RNNCell", (IN, HID, False), {}),
           ("LSTMCell", (IN, HID), {}), ("GRUCell", (IN, HID, False), {})]


@pytest.mark.parametrize("name,args,kw", SURFACE, ids=[s[0] for s in SURFACE])
def test_names_reprs_and_init_bounds_are_torchs(name, args, kw):
    t = getattr(torch.nn, name)(*args, **kw)
    j = getattr(nn, name)(*args, **kw)
    assert repr(j) == repr(t)
    assert [(n, tuple(p.shape)) for n, p in j.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in t.named_parameters()]
    bound = 1 / math.sqrt(HID)
    for n, p in j.named_parameters():
        a = p.detach().numpy()
        assert np.all(np.abs(a) <= bound) and a.std() > bound / 4, n     # U(-b, b), not zeros or constants
    if not name.endswith("Cell"):
        assert [[tuple(p.shape) for p in ps] for ps in j.all_weights] == \
            [[tuple(p.shape) for p in ps] for ps in t.all_weights]
        assert j.flatten_parameters() is None


def _raises(f_t, f_j):
    with pytest.raises(Exception) as et:
        f_t()
    with pytest.raises(type(et.value)) as ej:
        f_j()
    assert str(ej.value) == str(et.value)


def test_constructor_errors_and_warning_are_torchs():
    for args, kw in [((IN, HID), {"nonlinearity": "gelu"}), ((IN, HID), {"dropout": 2}), ((IN, 0), {}),
                     ((IN, HID), {"num_layers": 0}), ((IN, 5.0), {})]:
        _raises(lambda: torch.nn.RNN(*args, **kw), lambda: nn.RNN(*args, **kw))
    for kw in ({"proj_size": HID}, {"proj_size": -1}):
        _raises(lambda: torch.nn.LSTM(IN, HID, **kw), lambda: nn.LSTM(IN, HID, **kw))
    for name, args, kw in [("GRU", (IN, HID), {"proj_size": 2}), ("RNN", (IN, HID), {"proj_size": 2}),
                           ("GRU", (IN,), {"hidden": HID}), ("LSTM", (IN,), {})]:
        _raises(lambda: getattr(torch.nn, name)(*args, **kw), lambda: getattr(nn, name)(*args, **kw))
    with warnings.catch_warnings(record=True) as wt:
        warnings.simplefilter("always")
        torch.nn.GRU(IN, HID, dropout=0.5)
    with warnings.catch_warnings(record=True) as wj:
        warnings.simplefilter("always")
        nn.GRU(IN, HID, dropout=0.5)
    assert [str(w.message) for w in wj] == [str(w.message) for w in wt] and wj[0].filename == __file__


def _zeros(lib, *shape):
    return lib.zeros(*shape, dtype=lib.float64)


def test_forward_errors_are_torchs():
    for name in ("RNN", "LSTM", "GRU"):
        t = getattr(torch.nn, name)(IN, HID, num_layers=2, dtype=torch.float64)
        j = getattr(nn, name)(IN, HID, num_layers=2, dtype=jg.float64)
        lstm = name == "LSTM"

        def state(lib, h, c=None):
            return (_zeros(lib, *h), _zeros(lib, *(c or h))) if lstm else _zeros(lib, *h)
        cases = [((4,), None), ((L, N, 5), None), ((L, 5), None), ((L, N, IN), ((2, N, 5), (2, N, HID))),
                 ((L, N, IN), ((1, N, HID), None)), ((L, N, IN), ((2, 3, HID), None)),
                 ((L, N, IN), ((2, HID), (2, N, HID))), ((L, IN), ((2, 1, HID), (2, HID)))]
        if lstm:
            cases.append(((L, N, IN), ((2, N, HID), (2, N, 5))))
        for x, hx in cases:
            _raises(lambda: t(_zeros(torch, *x), None if hx is None else state(torch, *hx)),
                    lambda: j(_zeros(jg, *x), None if hx is None else state(jg, *hx)))
    for name in ("RNNCell", "LSTMCell", "GRUCell"):
        t = getattr(torch.nn, name)(IN, HID, dtype=torch.float64)
        j = getattr(nn, name)(IN, HID, dtype=jg.float64)
        two = name == "LSTMCell"

        def state(lib, h, c=None):
            return (_zeros(lib, *h), _zeros(lib, *(c or h))) if two else _zeros(lib, *h)
        cases = [((N, N, IN), None), ((N, 5), None), ((N, IN), ((3, HID), None)), ((N, IN), ((N, 5), None)),
                 ((N, IN), ((1, N, HID), None)), ((IN,), ((N, HID), (HID,)))]
        if two:
            cases.append(((N, IN), ((N, HID), (N, 5))))
        for x, hx in cases:
            _raises(lambda: t(_zeros(torch, *x), None if hx is None else state(torch, *hx)),
                    lambda: j(_zeros(jg, *x), None if hx is None else state(jg, *hx)))
    t, j = torch.nn.RNNCell(IN, HID, nonlinearity="gelu"), nn.RNNCell(IN, HID, nonlinearity="gelu")
    _raises(lambda: t(torch.zeros(N, IN)), lambda: j(jg.zeros(N, IN)))


# --- compiled -----------------------------------------------------------------------------------------------
def _sgd_step(model, opt, x, hx):
    opt.zero_grad()
    out, h = model(x, hx)
    h = h if isinstance(h, tuple) else (h,)
    loss = (out * out).mean() + sum((s * s).sum() for s in h)
    loss.backward()
    opt.step()
    return out.detach(), loss.detach()


@pytest.mark.parametrize("name,kw,backend", [("LSTM", {"num_layers": 2, "bidirectional": True}, "interpret"),
                                             ("GRU", {"batch_first": True}, "interpret"),
                                             ("RNN", {"nonlinearity": "relu", "num_layers": 2}, "interpret"),
                                             ("GRU", {"num_layers": 2, "bidirectional": True}, "numba")])
def test_compiled_training_step_matches_torch(name, kw, backend):
    """Forward, backward and an SGD step inside @jg.compile, twice, against the same steps in torch."""
    t, j = _build(name, IN, HID, **kw)
    ot, oj = torch.optim.SGD(t.parameters(), lr=0.1), jg.optim.SGD(j.parameters(), lr=0.1)
    step = jg.compile(lambda x: _sgd_step(j, oj, x, None), backend=backend, background=False)
    for _ in range(2):
        x = RNG.standard_normal((N, L, IN) if kw.get("batch_first") else (L, N, IN))
        out_t, loss_t = _sgd_step(t, ot, torch.tensor(x), None)
        out_j, loss_j = step(jg.tensor(x))
        np.testing.assert_allclose(out_j.numpy(), out_t.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(loss_j.numpy(), loss_t.numpy(), rtol=1e-10)
    jp = dict(j.named_parameters())
    for n, p in t.named_parameters():
        np.testing.assert_allclose(jp[n].detach().numpy(), p.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=n)


def test_compiled_cells_match_eager():
    """A hand-written loop over LSTMCell and GRUCell steps, compiled (interpreter) against eager."""
    jg.manual_seed(0)
    lstm, gru = nn.LSTMCell(IN, HID, dtype=jg.float64), nn.GRUCell(HID, HID, bias=False, dtype=jg.float64)

    def run(x):
        state, h = None, None
        for t in range(x.shape[0]):
            state = lstm(x[t], state)
            h = gru(state[0], h)
        loss = (h * h).sum()
        loss.backward()
        return loss.detach()
    x = jg.tensor(RNG.standard_normal((L, N, IN)))
    loss_c = jg.compile(run, backend="interpret")(x)
    grads_c = [p.grad.numpy().copy() for p in (*lstm.parameters(), *gru.parameters())]
    for p in (*lstm.parameters(), *gru.parameters()):
        p.grad = None
    loss_e = run(x)
    np.testing.assert_allclose(loss_c.numpy(), loss_e.numpy(), rtol=1e-12)
    for gc, p in zip(grads_c, (*lstm.parameters(), *gru.parameters()), strict=True):
        np.testing.assert_allclose(gc, p.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_dropout_between_layers_compiled_equals_eager():
    """dropout=0.4 between the layers of a 3-layer LSTM in training: eager and compiled draw the same masks from
    the same seed (and the masks change the output); in eval mode no dropout."""
    jg.manual_seed(0)
    a = nn.LSTM(IN, HID, num_layers=3, dropout=0.4, dtype=jg.float64)
    b = copy.deepcopy(a)
    oa, ob = jg.optim.SGD(a.parameters(), lr=0.1), jg.optim.SGD(b.parameters(), lr=0.1)
    step = jg.compile(lambda x: _sgd_step(a, oa, x, None), backend="interpret")
    for i in range(2):
        x = jg.tensor(RNG.standard_normal((L, N, IN)))
        jg.manual_seed(10 + i)
        out_c, loss_c = step(x)
        jg.manual_seed(10 + i)
        out_e, loss_e = _sgd_step(b, ob, x, None)
        np.testing.assert_allclose(out_c.numpy(), out_e.numpy(), rtol=1e-10, atol=1e-12)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-9, atol=1e-12)
    with jg.no_grad():
        jg.manual_seed(10 + i)
        train_out = b(x)[0].numpy()
        b.eval()
        assert not np.allclose(b(x)[0].numpy(), train_out)             # the masks changed the output
        jg.manual_seed(10 + i)
        np.testing.assert_array_equal(b(x)[0].numpy(), b(x)[0].numpy())   # eval: no draws


def test_docstring_examples_run():
    import doctest
    from jitgrad.nn.modules import rnn as recurrent
    from jitgrad.nn.utils import rnn
    for mod in (recurrent, rnn):
        assert doctest.testmod(mod, raise_on_error=True).attempted > 0
