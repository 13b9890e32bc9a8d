"""nn.utils.rnn packed sequences, RNN/LSTM/GRU over a PackedSequence, torch.utils.checkpoint and the new
utils.data samplers/datasets, against torch: packed data, batch sizes, permutations and padding equal torch's;
packed recurrent outputs, final states (taken at each sequence's end) and every gradient equal torch's in float64;
a packed training step compiled (interpreter and Numba) equals torch's; checkpoint reruns the function once in
backward and gives the uncheckpointed gradients, dropout included; torch's errors and warnings."""
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.nn.utils import rnn as R
from jitgrad.utils.checkpoint import checkpoint, checkpoint_sequential
from jitgrad.utils import data as D

torch = pytest.importorskip("torch")
TR = torch.nn.utils.rnn
RNG = np.random.default_rng(0)


def _pair(shape):
    a = RNG.standard_normal(shape)
    return torch.tensor(a, requires_grad=True), jg.tensor(a, requires_grad=True)


@pytest.mark.parametrize("lengths,batch_first,enforce_sorted,as_tensor", [
    ([4, 3, 1], False, True, False), ([2, 4, 1, 4], True, False, True), ([1], False, True, True),
    ([3, 3, 3], True, True, False)])
def test_pack_pad_roundtrip_matches_torch(lengths, batch_first, enforce_sorted, as_tensor):
    B, T = len(lengths), 5
    tx, jx = _pair((B, T, 2) if batch_first else (T, B, 2))
    tl = torch.tensor(lengths) if as_tensor else lengths
    jl = jg.tensor(lengths) if as_tensor else lengths
    tp = TR.pack_padded_sequence(tx, tl, batch_first=batch_first, enforce_sorted=enforce_sorted)
    jp = R.pack_padded_sequence(jx, jl, batch_first=batch_first, enforce_sorted=enforce_sorted)
    assert isinstance(jp, R.PackedSequence) and isinstance(jp, tuple)
    np.testing.assert_array_equal(jp.data.detach().numpy(), tp.data.detach().numpy())
    assert jp.batch_sizes.tolist() == tp.batch_sizes.tolist() and jp.batch_sizes.dtype == jg.int64
    for a, b in ((jp.sorted_indices, tp.sorted_indices), (jp.unsorted_indices, tp.unsorted_indices)):
        assert (a is None) == (b is None) and (a is None or a.tolist() == b.tolist())
    for total in (None, 7):
        to, tlen = TR.pad_packed_sequence(tp, batch_first=batch_first, padding_value=-2.0, total_length=total)
        jo, jlen = R.pad_packed_sequence(jp, batch_first=batch_first, padding_value=-2.0, total_length=total)
        np.testing.assert_array_equal(jo.detach().numpy(), to.detach().numpy())
        assert jlen.tolist() == tlen.tolist() and jlen.dtype == jg.int64
    w = RNG.standard_normal(tuple(to.shape))
    (to * torch.tensor(w)).sum().backward()
    (jo * jg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


def test_pack_sequence_unpack_unpad_invert():
    seqs = [RNG.standard_normal((n, 3)) for n in (2, 5, 3)]
    tp = TR.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    jp = R.pack_sequence([jg.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(jp.data.numpy(), tp.data.numpy())
    for a, s in zip(R.unpack_sequence(jp), seqs):
        np.testing.assert_array_equal(a.numpy(), s)
    padded = R.pad_sequence([jg.tensor(s) for s in seqs])
    for a, s in zip(R.unpad_sequence(padded, jg.tensor([2, 5, 3])), seqs):
        np.testing.assert_array_equal(a.numpy(), s)
    for a, s in zip(R.unpad_sequence(padded.transpose(0, 1), [2, 5, 3], batch_first=True), seqs):
        np.testing.assert_array_equal(a.numpy(), s)
    perm = [2, 0, 3, 1]
    assert R.invert_permutation(jg.tensor(perm)).tolist() == TR.invert_permutation(torch.tensor(perm)).tolist()
    assert R.invert_permutation(None) is None
    # PackedSequence conversions as torch: the data moves, batch_sizes and indices stay int64
    d = jp.float()
    assert type(d) is R.PackedSequence and d.data.dtype == jg.float32 and d.batch_sizes.dtype == jg.int64
    assert jp.to(jg.float64) is jp and jp.double().data.dtype == jg.float64 and not jp.is_cuda
    assert R.PackedSequence(jp.data, jp.batch_sizes).sorted_indices is None


def test_packing_errors_as_torch():
    x = jg.randn(4, 3, 2)
    tx = torch.randn(4, 3, 2)
    for lengths in ([3, 4, 1], [3, 2], [3, 0, 0]):
        with pytest.raises(RuntimeError) as et:
            TR.pack_padded_sequence(tx, lengths)
        with pytest.raises(RuntimeError) as ej:
            R.pack_padded_sequence(x, lengths)
        assert str(ej.value) == str(et.value)
    with pytest.raises(RuntimeError) as et:
        TR.pack_padded_sequence(tx, torch.tensor([[3, 2, 1]]))
    with pytest.raises(RuntimeError) as ej:
        R.pack_padded_sequence(x, jg.tensor([[3, 2, 1]]))
    assert str(ej.value) == str(et.value)
    tp, jp = TR.pack_padded_sequence(tx, [3, 2, 1]), R.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(ValueError) as et:
        TR.pad_packed_sequence(tp, total_length=2)
    with pytest.raises(ValueError) as ej:
        R.pad_packed_sequence(jp, total_length=2)
    assert str(ej.value) == str(et.value)


def _build(name, **kw):
    torch.manual_seed(0)
    t = getattr(torch.nn, name)(3, 4, dtype=torch.float64, **kw)
    j = getattr(jg.nn, name)(3, 4, dtype=jg.float64, **kw)
    j.load_state_dict({k: jg.tensor(v.numpy()) for k, v in t.state_dict().items()})
    return t, j


def _states(h):
    return list(h) if isinstance(h, tuple) else [h]


@pytest.mark.parametrize("name,kw,sorted_,with_h0", [
    ("RNN", {"num_layers": 2, "bidirectional": True}, False, True),
    ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 2}, False, False),
    ("LSTM", {"batch_first": True}, True, True),
    ("GRU", {"bidirectional": True, "batch_first": True}, False, True),
    ("RNN", {"nonlinearity": "relu"}, True, False)])
def test_packed_rnn_matches_torch(name, kw, sorted_, with_h0):
    t, j = _build(name, **kw)
    bf = kw.get("batch_first", False)
    lengths = [5, 3, 3, 1] if sorted_ else [2, 5, 1, 3]
    tx, jx = _pair((4, 5, 3) if bf else (5, 4, 3))
    tp = TR.pack_padded_sequence(tx, lengths, batch_first=bf, enforce_sorted=sorted_)
    jp = R.pack_padded_sequence(jx, lengths, batch_first=bf, enforce_sorted=sorted_)
    hx = None
    if with_h0:
        d = 2 if kw.get("bidirectional") else 1
        th, jh = _pair((kw.get("num_layers", 1) * d, 4, 4))
        hx = ((th, th * 0.5), (jh, jh * 0.5)) if name == "LSTM" else (th, jh)
    to, th_n = t(tp, None if hx is None else hx[0])
    jo, jh_n = j(jp, None if hx is None else hx[1])
    assert isinstance(jo, R.PackedSequence)
    assert jo.batch_sizes.tolist() == to.batch_sizes.tolist()
    np.testing.assert_allclose(jo.data.detach().numpy(), to.data.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(_states(jh_n), _states(th_n)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    w = RNG.standard_normal(tuple(to.data.shape))
    lt = (to.data * torch.tensor(w)).sum() + sum((s * s).sum() for s in _states(th_n))
    lj = (jo.data * jg.tensor(w)).sum() + sum((s * s).sum() for s in _states(jh_n))
    lt.backward()
    lj.backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    jp_ = dict(j.named_parameters())
    for n, p in t.named_parameters():
        np.testing.assert_allclose(jp_[n].grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)


def test_packed_gru_gradcheck():
    _, j = _build("GRU", bidirectional=True)
    x = jg.tensor(RNG.standard_normal((3, 2, 3)), requires_grad=True)

    def f(x):
        out, h = j(R.pack_padded_sequence(x, [3, 1]))
        return out.data, h
    assert jg.autograd.gradcheck(f, (x,))


def _packed_step(model, opt, x, lengths):
    opt.zero_grad()
    out, h = model(R.pack_padded_sequence(x, lengths, enforce_sorted=False) if isinstance(x, jg.Tensor)
                   else TR.pack_padded_sequence(x, lengths, enforce_sorted=False))
    padded = (R if isinstance(x, jg.Tensor) else TR).pad_packed_sequence(out)[0]
    loss = (padded * padded).mean() + sum((s * s).sum() for s in _states(h))
    loss.backward()
    opt.step()
    return padded.detach(), loss.detach()


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_packed_training_step_compiled_matches_torch(backend):
    t, j = _build("LSTM", num_layers=2, bidirectional=True)
    ot, oj = torch.optim.SGD(t.parameters(), lr=0.1), jg.optim.SGD(j.parameters(), lr=0.1)
    lengths = [2, 4, 1]
    step = jg.compile(lambda x: _packed_step(j, oj, x, lengths), backend=backend, background=False)
    for _ in range(2):
        x = RNG.standard_normal((4, 3, 3))
        pt, lt = _packed_step(t, ot, torch.tensor(x), lengths)
        pj, lj = step(jg.tensor(x))
        np.testing.assert_allclose(pj.numpy(), pt.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(lj.numpy(), lt.numpy(), rtol=1e-10)
    jp = dict(j.named_parameters())
    for n, p in t.named_parameters():
        np.testing.assert_allclose(jp[n].detach().numpy(), p.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=n)


# --- checkpoint ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_and_matches(use_reentrant):
    """The function runs twice (forward, then once in backward); outputs and the gradients of the input and of
    the parameters it closes over equal the plain call's, with dropout inside (RNG state preserved)."""
    lin = jg.nn.Linear(4, 4, dtype=jg.float64)
    calls = [0]

    def f(x, scale):
        calls[0] += 1
        return jg.nn.functional.dropout(lin(x).tanh(), 0.5, True) * x * scale

    x = jg.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    jg.manual_seed(1)
    y = f(x, 2.0)
    y.sum().backward()
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad = None
    lin.zero_grad()
    calls[0] = 0
    jg.manual_seed(1)
    y2 = checkpoint(f, x, 2.0, use_reentrant=use_reentrant)
    after_forward = jg.rand(1).item()
    assert calls[0] == 1
    y2.sum().backward()
    assert calls[0] == 2
    assert jg.rand(1).item() != after_forward       # the rerun left the generator where it was
    np.testing.assert_array_equal(y2.detach().numpy(), y.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), gx.numpy(), rtol=1e-14)
    np.testing.assert_allclose(lin.weight.grad.numpy(), gw.numpy(), rtol=1e-14)


def test_checkpoint_without_preserved_rng_differs_and_sequential():
    x = jg.tensor(RNG.standard_normal((50,)), requires_grad=True)
    jg.manual_seed(0)
    y = checkpoint(lambda t: jg.nn.functional.dropout(t, 0.5, True), x, use_reentrant=True, preserve_rng_state=False)
    y.sum().backward()
    assert not np.array_equal((x.grad.numpy() != 0), (y.detach().numpy() != 0))
    seq = jg.nn.Sequential(jg.nn.Linear(3, 3, dtype=jg.float64), jg.nn.Tanh(), jg.nn.Linear(3, 2, dtype=jg.float64),
                           jg.nn.Tanh())
    inp = jg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    seq(inp).sum().backward()
    g = [p.grad.clone() for p in seq.parameters()] + [inp.grad.clone()]
    seq.zero_grad()
    inp.grad = None
    out = checkpoint_sequential(seq, 2, inp, use_reentrant=False)
    out.sum().backward()
    for a, b in zip([p.grad for p in seq.parameters()] + [inp.grad], g):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)


def test_checkpoint_warnings_and_errors_as_torch():
    tc = torch.utils.checkpoint
    for lib, mod, x in ((torch, tc, torch.randn(3, requires_grad=True)),
                        (jg, jg.utils.checkpoint, jg.randn(3, requires_grad=True))):
        with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
            mod.checkpoint(lib.sin, x)
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            mod.checkpoint(lib.sin, x.detach(), use_reentrant=True)
        with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
            mod.checkpoint(lib.sin, x, use_reentrant=True, foo=1)


def test_checkpoint_inside_compile_is_correct():
    lin = jg.nn.Linear(3, 3, dtype=jg.float64)

    def step(x):
        y = checkpoint(lambda t: lin(t).tanh() * t, x, use_reentrant=False)
        loss = (y * y).sum()
        loss.backward()
        return loss.detach()
    x = jg.tensor(RNG.standard_normal((2, 3)))
    loss_e = step(x)
    ge = lin.weight.grad.clone()
    lin.zero_grad()
    loss_c = jg.compile(step, backend="interpret")(x)
    np.testing.assert_allclose(loss_c.numpy(), loss_e.numpy(), rtol=1e-14)
    np.testing.assert_allclose(lin.weight.grad.numpy(), ge.numpy(), rtol=1e-14)


# --- utils.data -------------------------------------------------------------------------------------------
def test_weighted_random_sampler():
    w = [0.1, 0.0, 0.6, 0.3]
    g = jg.Generator().manual_seed(3)
    draws = list(D.WeightedRandomSampler(w, 4000, generator=g))
    assert len(draws) == 4000 and 1 not in draws
    freq = np.bincount(draws, minlength=4) / 4000
    np.testing.assert_allclose(freq, w, atol=0.03)
    g.manual_seed(3)
    assert list(D.WeightedRandomSampler(w, 4000, generator=g)) == draws
    assert sorted(D.WeightedRandomSampler([1.0] * 5, 5, replacement=False)) == list(range(5))
    for args, msg in (((w, 0), "num_samples should be a positive integer value, but got num_samples=0"),
                      ((w, 2, 1), "replacement should be a boolean value, but got replacement=1"),
                      (([[1.0]], 2), "weights should be a 1d sequence but given weights have shape (1, 1)")):
        with pytest.raises(ValueError) as ej:
            D.WeightedRandomSampler(*args)
        with pytest.raises(ValueError) as et:
            torch.utils.data.WeightedRandomSampler(*args)
        assert str(ej.value) == str(et.value) == msg


def test_stack_and_chain_datasets():
    a, b = D.TensorDataset(jg.arange(4)), list("wxyz")
    s = D.StackDataset(a, b)
    assert len(s) == 4 and s[2][1] == "y" and s[2][0][0].item() == 2
    k = D.StackDataset(n=a, c=b)
    assert k[1]["c"] == "x" and k.__getitems__([0, 3])[1]["c"] == "z"
    for args, kw in (((a, [1]), {}), ((a,), {"x": b}), ((), {})):
        with pytest.raises(ValueError) as ej:
            D.StackDataset(*args, **kw)
        with pytest.raises(ValueError) as et:
            torch.utils.data.StackDataset(*args, **kw)
        assert str(ej.value) == str(et.value)

    class It(D.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n
    c = D.ChainDataset([It(2), It(3)])
    assert list(c) == [0, 1, 0, 1, 2] and len(c) == 5
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(D.ChainDataset([a]))
    from jitgrad.utils.data import DistributedSampler
    from jitgrad.utils.data.distributed import DistributedSampler as DS
    assert DistributedSampler is DS
