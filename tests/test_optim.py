"""jg.optim against torch.optim (float64): update rules, param groups, state_dict format and round trips,
schedulers; and optimiser steps inside @jg.compile (state and lr as graph state, guards that retrace)."""
import math

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn

X = np.random.default_rng(0).standard_normal((8, 3))
Y = np.random.default_rng(1).integers(0, 2, 8)


def _mlp(m, seed=0):
    # no bias before BatchNorm: its gradient is zero up to rounding, which Adam would amplify into noise
    if m is nn:
        jg.manual_seed(seed)
    else:
        import torch
        torch.manual_seed(seed)
    return m.Sequential(m.Linear(3, 5, bias=False), m.BatchNorm1d(5), m.Tanh(), m.Linear(5, 2)).double()


def _pair():
    import torch
    tm, jm = _mlp(torch.nn), _mlp(nn)
    jm.load_state_dict({k: jg.tensor(v.numpy().copy()) for k, v in tm.state_dict().items()})
    return tm, jm


def _torch_step(tm, topt, torch):
    topt.zero_grad()
    loss = torch.nn.functional.cross_entropy(tm(torch.tensor(X)), torch.tensor(Y))
    loss.backward()
    topt.step()
    return float(loss.detach())


def _jg_step(jm, jopt):
    jopt.zero_grad()
    loss = nn.functional.cross_entropy(jm(jg.tensor(X)), jg.tensor(Y))
    loss.backward()
    jopt.step()
    return float(loss)


def _assert_same_model(jm, tm, rtol=1e-9, atol=1e-12):
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(jm.state_dict()[k].numpy(), v.numpy(), rtol=rtol, atol=atol, err_msg=k)


def _groups(m, model):
    """Two param groups (the second with its own lr) when asked, to exercise per-group hyperparameters."""
    ps = list(model.parameters())
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": 0.05}] if m else ps


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.8, dampening=0.3)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=0.01, maximize=True, decoupled_weight_decay=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, amsgrad=True, weight_decay=0.3)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, centered=True, momentum=0.5, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, maximize=True)),
]


@pytest.mark.parametrize("groups", [False, True], ids=["one-group", "two-groups"])
@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_optimizer_matches_torch(name, kw, groups):
    torch = pytest.importorskip("torch")
    tm, jm = _pair()
    topt = getattr(torch.optim, name)(_groups(groups, tm), **kw)
    jopt = getattr(jg.optim, name)(_groups(groups, jm), **kw)
    for _ in range(6):
        lt, lj = _torch_step(tm, topt, torch), _jg_step(jm, jopt)
        assert lj == pytest.approx(lt, rel=1e-12)
    _assert_same_model(jm, tm)
    ts, js = topt.state_dict(), jopt.state_dict()
    assert js["param_groups"] == ts["param_groups"]
    assert js["state"].keys() == ts["state"].keys()
    for i, st in ts["state"].items():
        assert list(js["state"][i]) == list(st)
        for k, v in st.items():
            assert js["state"][i][k].dtype.name == str(v.dtype).replace("torch.", "")
            np.testing.assert_allclose(js["state"][i][k].numpy(), v.numpy(), rtol=1e-9, atol=1e-12)


def test_defaults_and_repr_match_torch():
    torch = pytest.importorskip("torch")
    for name in ("SGD", "Adam", "AdamW", "RMSprop"):
        t = getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))])
        j = getattr(jg.optim, name)([nn.Parameter(jg.zeros(2))])
        assert j.defaults == t.defaults
        assert repr(j) == repr(t)


def test_state_dict_round_trip_continues_identically():
    torch = pytest.importorskip("torch")
    tm, jm = _pair()
    topt, jopt = torch.optim.Adam(tm.parameters(), lr=0.02), jg.optim.Adam(jm.parameters(), lr=0.02)
    for _ in range(3):
        _torch_step(tm, topt, torch)
        _jg_step(jm, jopt)
    # a fresh jitgrad optimiser loaded from torch's state_dict (tensors converted) continues like torch
    tsd = topt.state_dict()
    loaded = jg.optim.Adam(jm.parameters(), lr=0.5)
    loaded.load_state_dict({"state": {i: {k: jg.tensor(v.numpy()) for k, v in s.items()}
                                      for i, s in tsd["state"].items()},
                            "param_groups": tsd["param_groups"]})
    assert loaded.param_groups[0]["lr"] == 0.02
    assert loaded.state_dict()["state"][0]["step"].dtype == jg.float32
    own = jopt.state_dict()
    assert own["state"][0]["exp_avg"] is jopt.state[next(jm.parameters())]["exp_avg"]     # not copies
    for _ in range(3):
        _torch_step(tm, topt, torch)
        _jg_step(jm, loaded)
    _assert_same_model(jm, tm)
    # load copies: the saved dict is not aliased by the optimiser that loaded it
    again = jg.optim.Adam(jm.parameters())
    again.load_state_dict(own)
    assert again.state[next(jm.parameters())]["exp_avg"] is not own["state"][0]["exp_avg"]


def test_optimizer_errors_and_groups():
    p, q = nn.Parameter(jg.zeros(2)), nn.Parameter(jg.zeros(3))
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        jg.optim.SGD([])
    with pytest.raises(TypeError, match="params argument given to the optimizer should be an iterable"):
        jg.optim.SGD(p)
    with pytest.raises(TypeError, match="ordering of tensors in sets will change between runs"):
        jg.optim.SGD([{"params": {p}}])
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        jg.optim.SGD([p * 2])
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        jg.optim.Adam([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        jg.optim.SGD([p], nesterov=True)
    opt = jg.optim.SGD([p], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": q, "lr": 0.2})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.2] and opt.param_groups[1]["momentum"] == 0.5
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [p]})
    other = jg.optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="loaded state dict has a different number of parameter groups"):
        other.load_state_dict(opt.state_dict())
    p.grad, q.grad = jg.ones(2), jg.ones(3)
    opt.zero_grad(set_to_none=False)
    assert (p.grad.numpy() == 0).all()
    opt.zero_grad()
    assert p.grad is None and q.grad is None
    loss = opt.step(lambda: 3.0)        # closure's loss is returned; params without grad are skipped
    assert loss == 3.0 and len(opt.state) == 0


def _scheduled(lib, name, kw, epochs=14):
    p = lib.nn.Parameter(lib.zeros(2))
    opt = lib.optim.SGD([{"params": [p]}, {"params": [lib.nn.Parameter(lib.zeros(1))], "lr": 0.3}], lr=0.1)
    sched = getattr(lib.optim.lr_scheduler, name)(opt, **kw)
    lrs = [sched.get_last_lr()]
    for _ in range(epochs):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
    return lrs, sched, opt


SCHEDULES = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01)),      # past T_max the recursive form keeps going
    ("LambdaLR", dict(lr_lambda=lambda e: 0.9 ** e)),
]


@pytest.mark.parametrize("name,kw", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_scheduler_matches_torch(name, kw):
    torch = pytest.importorskip("torch")
    jl, js, jopt = _scheduled(jg, name, kw)
    tl, ts, _ = _scheduled(torch, name, kw)
    np.testing.assert_allclose(np.array(jl), np.array(tl), rtol=1e-13)
    assert jopt.param_groups[0]["initial_lr"] == 0.1
    # closed form when given an epoch (deprecated, warns like torch)
    if name != "LambdaLR":
        with pytest.warns(UserWarning, match="The epoch parameter in `scheduler.step\\(\\)` was not necessary"):
            js.step(4)
        with pytest.warns(UserWarning):
            ts.step(4)
        np.testing.assert_allclose(js.get_last_lr(), ts.get_last_lr(), rtol=1e-13)
    # state_dict round trip: a new scheduler loaded from it continues identically
    sd = js.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == js.last_epoch
    js2 = getattr(jg.optim.lr_scheduler, name)(jopt, **kw)
    js2.load_state_dict(sd)
    saved = [g["lr"] for g in jopt.param_groups]
    js.step()
    expect = js.get_last_lr()
    for g, lr in zip(jopt.param_groups, saved):     # replay the same epoch with the loaded copy
        g["lr"] = lr
    js2.step()
    np.testing.assert_allclose(js2.get_last_lr(), expect, rtol=1e-13)


# ---- inside @jg.compile --------------------------------------------------------------------------------------

def _train_adam(compiled, steps=20, backend="numba"):
    model = _mlp(nn)
    opt = jg.optim.Adam(model.parameters(), lr=0.01)
    lossf = nn.CrossEntropyLoss()

    def step(x, y):
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    f = jg.compile(step, backend=backend, background=False) if compiled else step
    x, y = jg.tensor(X), jg.tensor(Y)
    losses = [float(f(x, y)) for _ in range(steps)]
    return model, opt, losses, f


@pytest.fixture(scope="module")
def adam_runs():
    """The MLP with BatchNorm1d trained 20 steps with Adam: eagerly, and compiled to Numba code (one graph)."""
    return _train_adam(False), _train_adam(True)


def test_compiled_adam_batchnorm_loop_equals_eager_and_torch(adam_runs):
    torch = pytest.importorskip("torch")
    (em, eopt, elosses, _), (cm, copt, closses, f) = adam_runs
    assert f.stats["traces"] == 1 and f.stats["compiled_calls"] == 20 and f.stats["interpreted_calls"] == 0
    np.testing.assert_allclose(closses, elosses, rtol=1e-9)
    for k, v in em.state_dict().items():
        np.testing.assert_allclose(cm.state_dict()[k].numpy(), v.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)
    assert int(cm[1].num_batches_tracked) == 20
    assert float(copt.state[cm[0].weight]["step"]) == 20.0
    # and torch, started from the same initial parameters
    tm = _mlp(torch.nn)
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in _mlp(nn).state_dict().items()})
    topt = torch.optim.Adam(tm.parameters(), lr=0.01)
    tlosses = [_torch_step(tm, topt, torch) for _ in range(20)]
    np.testing.assert_allclose(closses, tlosses, rtol=1e-9)
    _assert_same_model(cm, tm)


def test_compiled_sgd_momentum_with_lr_changes():
    """lr changed by a scheduler and by hand between compiled calls is read afresh (no retrace), and the loop
    equals the eager one and torch's."""
    torch = pytest.importorskip("torch")
    tm, jm = _pair()
    jm_e = _mlp(nn)
    jm_e.load_state_dict(jm.state_dict())
    kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    jopt, eopt, topt = jg.optim.SGD(jm.parameters(), **kw), jg.optim.SGD(jm_e.parameters(), **kw), \
        torch.optim.SGD(tm.parameters(), **kw)
    scheds = [jg.optim.lr_scheduler.StepLR(jopt, 3, 0.5), jg.optim.lr_scheduler.StepLR(eopt, 3, 0.5),
              torch.optim.lr_scheduler.StepLR(topt, 3, 0.5)]

    def make_step(model, opt):
        def step(x, y):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        return step
    f = jg.compile(make_step(jm, jopt), backend="numba", background=False)
    g = make_step(jm_e, eopt)
    x, y = jg.tensor(X), jg.tensor(Y)
    for i in range(10):
        lc, le, lt = float(f(x, y)), float(g(x, y)), _torch_step(tm, topt, torch)
        np.testing.assert_allclose([lc, le], [lt, lt], rtol=1e-9)
        for s in scheds:
            s.step()
        if i == 6:
            for o in (jopt, eopt, topt):
                o.param_groups[0]["lr"] = 0.3
    assert jopt.param_groups[0]["lr"] == topt.param_groups[0]["lr"] == 0.15
    assert f.stats["traces"] == 1 and f.stats["compiled_calls"] == 10
    _assert_same_model(jm, tm)
    _assert_same_model(jm_e, tm)


def _interp_step(model, opt):
    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return jg.compile(step, backend="interpret")


@pytest.mark.parametrize("name,kw,change", [
    ("SGD", dict(lr=0.1, momentum=0.8, dampening=0.3), ("momentum", 0.5)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5), ("alpha", 0.9)),
    ("AdamW", dict(lr=0.01, amsgrad=True), ("betas", (0.5, 0.9))),
])
def test_compiled_guards_retrace_on_structural_changes(name, kw, change):
    """Hyperparameters other than lr and the optimiser's state tensors are guards: changing them, or loading a
    state_dict (new state tensors), retraces and stays equal to eager.  SGD with dampening takes torch's
    first-step branch (buf = g), a graph of its own: one extra trace."""
    ma, mb = _mlp(nn), _mlp(nn)
    oa, ob = getattr(jg.optim, name)(ma.parameters(), **kw), getattr(jg.optim, name)(mb.parameters(), **kw)
    f = _interp_step(ma, oa)
    x, y = jg.tensor(X), jg.tensor(Y)

    def run(n):
        for _ in range(n):
            lc = float(f(x, y))
            le = _jg_step_end_zero(mb, ob)
            assert lc == pytest.approx(le, rel=1e-12)
    run(3)
    first = 2 if name == "SGD" else 1
    assert f.stats["traces"] == first
    for o in (oa, ob):
        o.param_groups[0][change[0]] = change[1]
    run(2)
    assert f.stats["traces"] == first + 1
    sd = ob.state_dict()
    for o in (oa, ob):
        o.load_state_dict(sd)
    run(2)
    assert f.stats["traces"] == first + 2
    _assert_same_jg(ma, mb)


def _jg_step_end_zero(m, o):
    loss = nn.functional.cross_entropy(m(jg.tensor(X)), jg.tensor(Y))
    loss.backward()
    o.step()
    o.zero_grad()
    return float(loss)


def _assert_same_jg(a, b):
    for k, v in b.state_dict().items():
        np.testing.assert_allclose(a.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, atol=1e-15, err_msg=k)


def test_lr_change_inside_compiled_function_is_refused():
    model = _mlp(nn)
    opt = jg.optim.SGD(model.parameters(), lr=0.1)
    sched = jg.optim.lr_scheduler.StepLR(opt, 1)

    @jg.compile(backend="interpret")
    def step(x, y):
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
    with pytest.raises(RuntimeError, match="'lr' was changed inside a @jitgrad.compile function"):
        step(jg.tensor(X), jg.tensor(Y))


def test_compiled_clip_grad_norm_in_step():
    """clip_grad_norm_ is tensor ops (no data-dependent branch), so it compiles inside a step."""
    ma, mb = _mlp(nn), _mlp(nn)
    oa, ob = jg.optim.SGD(ma.parameters(), lr=0.5), jg.optim.SGD(mb.parameters(), lr=0.5)

    def make(m, o):
        def step(x, y):
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            n = nn.utils.clip_grad_norm_(m.parameters(), 0.1)
            o.step()
            o.zero_grad()
            return n
        return step
    f, g = jg.compile(make(ma, oa), backend="interpret"), make(mb, ob)
    x, y = jg.tensor(X), jg.tensor(Y)
    for _ in range(3):
        assert float(f(x, y)) == pytest.approx(float(g(x, y)), rel=1e-12)
    assert f.stats["traces"] == 1
    _assert_same_jg(ma, mb)
    assert math.isfinite(float(f(x, y)))


def test_param_group_lr_tensor_follows_every_write():
    """The tensor a compiled step reads for lr follows item assignment, update() and load_state_dict (which
    updates the groups in place)."""
    p = nn.Parameter(jg.zeros(2))
    opt = jg.optim.SGD([p], lr=0.1)
    g = opt.param_groups[0]
    t = g.lr_tensor
    g["lr"] = 0.2
    assert float(t) == 0.2
    g.update(lr=0.3)
    assert float(t) == 0.3
    opt.load_state_dict({"state": {}, "param_groups": [{**g, "lr": 0.4, "params": [0]}]})
    assert opt.param_groups[0] is g and g["params"][0] is p and float(t) == 0.4
    assert isinstance(g, dict) and dict(g) == g


@pytest.mark.parametrize("name,kw", [("Adam", dict(lr=0.01)), ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.5))])
def test_ir_before_first_call_leaves_correct_state(name, kw):
    """Asking for the IR before the first call traces the step without running it: the state it creates must
    still give torch's first step when the function then runs."""
    ma, mb = _mlp(nn), _mlp(nn)
    oa, ob = getattr(jg.optim, name)(ma.parameters(), **kw), getattr(jg.optim, name)(mb.parameters(), **kw)
    f = _interp_step(ma, oa)
    x, y = jg.tensor(X), jg.tensor(Y)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "sub" in str(f.ir(x, y))
    if name == "SGD":       # the one-shot trace gave the buffer the first step's value; torch would not have one
        mb_state = ob.state
        _jg_step_end_zero(mb, ob)
        for p in mb.parameters():
            p.grad = None
        for pa, pb in zip(ma.parameters(), mb.parameters()):
            np.testing.assert_allclose(oa.state[pa]["momentum_buffer"].numpy(),
                                       mb_state[pb]["momentum_buffer"].numpy(), rtol=1e-12)
        with jg.no_grad():      # the IR call did not update the parameters: align the eager model with that
            for pa, pb in zip(ma.parameters(), mb.parameters()):
                pb.copy_(pa)
            for ba, bb in zip(ma.buffers(), mb.buffers()):
                bb.copy_(ba)
    for _ in range(3):
        assert float(f(x, y)) == pytest.approx(_jg_step_end_zero(mb, ob), rel=1e-12)
    _assert_same_jg(ma, mb)


def test_float32_model_stays_float32():
    """lr and bias corrections are float64 0-d tensors; a float32 model's parameters and state stay float32
    (torch's promotion: a 0-d tensor does not widen a dimensioned one), eagerly and compiled."""
    def make():
        jg.manual_seed(0)
        # no bias before BatchNorm: its gradient is rounding noise, which Adam amplifies (eager and traced
        # programs round differently since eager cross_entropy is one fused op)
        return nn.Sequential(nn.Linear(3, 4, bias=False), nn.BatchNorm1d(4), nn.Linear(4, 2))
    ma, mb = make(), make()
    oa, ob = jg.optim.Adam(ma.parameters(), lr=0.01), jg.optim.Adam(mb.parameters(), lr=0.01)
    f = _interp_step(ma, oa)
    x, y = jg.tensor(X, dtype=jg.float32), jg.tensor(Y)
    for _ in range(3):
        f(x, y)
        loss = nn.functional.cross_entropy(mb(x), y)
        loss.backward()
        ob.step()
        ob.zero_grad()
    for m, o in ((ma, oa), (mb, ob)):
        assert all(p.dtype == jg.float32 for p in m.parameters())
        st = o.state[m[0].weight]
        assert st["exp_avg"].dtype == jg.float32 and st["step"].dtype == jg.float32
    for k, v in mb.state_dict().items():
        np.testing.assert_allclose(ma.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def _train_adam_dropout(compiled, steps=20):
    jg.manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 6, bias=False), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(6, 2)).double()
    opt = jg.optim.Adam(model.parameters(), lr=0.01)
    lossf = nn.CrossEntropyLoss()

    def step(x, y):
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    f = jg.compile(step, backend="numba", background=False) if compiled else step
    x, y = jg.tensor(X), jg.tensor(Y)
    jg.manual_seed(11)              # the dropout masks: the same draws eagerly and in the kernels
    losses = [float(f(x, y)) for _ in range(steps)]
    model.eval()
    with jg.no_grad():
        ev = model(x)
    return model, losses, f, ev, (x, y)


def test_compiled_adam_dropout_batchnorm_loop_equals_eager():
    """The issue's loop: Adam + Dropout + BatchNorm1d, 20 steps inside @jg.compile, against the same loop run
    eagerly (torch's masks come from another generator, so torch itself is compared without dropout above)."""
    em, elosses, _, eev, _ = _train_adam_dropout(False)
    cm, closses, f, cev, (x, y) = _train_adam_dropout(True)
    assert f.stats["traces"] == 1 and f.stats["compiled_calls"] == 20
    np.testing.assert_allclose(closses, elosses, rtol=1e-9)
    assert len(set(closses)) == 20                       # a new mask (and new weights) every call
    for k, v in em.state_dict().items():
        np.testing.assert_allclose(cm.state_dict()[k].numpy(), v.numpy(), rtol=1e-8, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(cev.numpy(), eev.numpy(), rtol=1e-8)
    # eval() switches BatchNorm to running statistics and Dropout off: the compiled step retraces, deterministic
    before = f.stats["traces"]
    a, b = float(f(x, y)), None
    assert f.stats["traces"] == before + 1
    cm.eval()
    b = float(f(x, y))
    assert np.isfinite(a) and np.isfinite(b)
