"""jg.optim's Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor and LBFGS against torch.optim
(float64, same initial weights): parameters after N steps for several option sets and param groups, state_dict
keys/dtypes, defaults/repr, argument errors, loading torch's state_dict; and the steps inside @jg.compile (all
optimisers in one compiled function, so one Numba build) equal to eager and to torch."""
import copy

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn
from test_optim import X, Y, _assert_same_model, _groups, _jg_step, _mlp, _pair, _torch_step

torch = pytest.importorskip("torch")

CASES = [
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.2, eps=1e-6)),
    ("Adagrad", dict(lr=0.05, maximize=True, foreach=False)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01, betas=(0.8, 0.99))),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True, foreach=True)),
    ("RAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, betas=(0.9, 0.8))),     # rho_t crosses 5 at step 7
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.1), maximize=True)),
    ("Rprop", dict(lr=0.02, foreach=True)),
    ("ASGD", dict()),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=2, weight_decay=0.1)),       # mu != 1 after step 2
    ("ASGD", dict(lr=0.05, t0=3, maximize=True, capturable=False)),
    ("Adafactor", dict()),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-4, 1e-2), d=1.5, weight_decay=0.1, maximize=True)),
    ("Adafactor", dict(lr=0.02, foreach=True)),      # torch's multi-tensor variant: the same values
]
STEPS = 8


def _pick(name, k):
    """The k-th case of optimiser ``name``."""
    return [c for c in CASES if c[0] == name][k]


def _state_close(js, ts):
    assert js["param_groups"] == ts["param_groups"]
    assert js["state"].keys() == ts["state"].keys()
    for i, st in ts["state"].items():
        assert list(js["state"][i]) == list(st)
        for k, v in st.items():
            assert js["state"][i][k].dtype.name == str(v.dtype).replace("torch.", ""), k
            np.testing.assert_allclose(js["state"][i][k].numpy(), v.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("name,kw,groups", [(n, kw, i % 2 == 1) for i, (n, kw) in enumerate(CASES)],
                         ids=[f"{n}-{i}" + ("-two-groups" if i % 2 else "") for i, (n, _) in enumerate(CASES)])
def test_optimizer_matches_torch(name, kw, groups):
    """N steps from the same weights give torch's parameters and state (every other case with two param
    groups, the second with its own lr)."""
    tm, jm = _pair()
    topt = getattr(torch.optim, name)(_groups(groups, tm), **kw)
    jopt = getattr(jg.optim, name)(_groups(groups, jm), **kw)
    for _ in range(STEPS):
        lt, lj = _torch_step(tm, topt, torch), _jg_step(jm, jopt)
        assert lj == pytest.approx(lt, rel=1e-10)
    _assert_same_model(jm, tm)
    _state_close(jopt.state_dict(), topt.state_dict())


def _to_jg(v):
    if isinstance(v, torch.Tensor):
        return jg.tensor(v.numpy().copy())
    if isinstance(v, list):
        return [_to_jg(x) for x in v]
    return v


def _convert(sd):
    return {"state": {i: {k: _to_jg(v) for k, v in s.items()} for i, s in sd["state"].items()},
            "param_groups": copy.deepcopy(sd["param_groups"])}


@pytest.mark.parametrize("name,kw", [_pick("Adagrad", 1), _pick("Adadelta", 1), _pick("Adamax", 1), _pick("NAdam", 2),
                                     _pick("RAdam", 1), _pick("Rprop", 1), _pick("ASGD", 1), _pick("Adafactor", 1)],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_loading_torch_state_dict_continues_like_torch(name, kw):
    """A jitgrad optimiser loaded from torch's state_dict takes the same next steps as a torch optimiser loaded
    from it (both cast the floating state to the parameters' dtype), and its own state_dict round trips."""
    tm, _ = _pair()
    topt = getattr(torch.optim, name)(tm.parameters(), **kw)
    for _ in range(4):
        _torch_step(tm, topt, torch)
    sd = topt.state_dict()
    jm = _mlp(nn)
    jm.load_state_dict({k: jg.tensor(v.numpy().copy()) for k, v in tm.state_dict().items()})
    jopt = getattr(jg.optim, name)(jm.parameters(), lr=0.5)
    jopt.load_state_dict(_convert(sd))
    topt2 = getattr(torch.optim, name)(tm.parameters(), lr=0.5)
    topt2.load_state_dict(copy.deepcopy(sd))
    assert jopt.param_groups[0]["lr"] == kw.get("lr", topt.defaults["lr"])
    for _ in range(4):
        _torch_step(tm, topt2, torch)
        _jg_step(jm, jopt)
    _assert_same_model(jm, tm)
    _state_close(jopt.state_dict(), topt2.state_dict())
    # round trip: a fresh jitgrad optimiser loaded from jitgrad's state_dict continues identically
    again = getattr(jg.optim, name)(jm.parameters())
    again.load_state_dict(jopt.state_dict())
    jm2 = _mlp(nn)
    jm2.load_state_dict(jm.state_dict())
    moved = getattr(jg.optim, name)(jm2.parameters())
    moved.load_state_dict(jopt.state_dict())
    for _ in range(2):
        _jg_step(jm, jopt)
        _jg_step(jm2, moved)
    for k, v in jm.state_dict().items():
        np.testing.assert_array_equal(jm2.state_dict()[k].numpy(), v.numpy(), err_msg=k)


NAMES = ["Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "Rprop", "ASGD", "Adafactor", "LBFGS"]


@pytest.mark.parametrize("name", NAMES)
def test_defaults_repr_and_signature_match_torch(name):
    import inspect
    t = getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))])
    j = getattr(jg.optim, name)([nn.Parameter(jg.zeros(2))])
    assert j.defaults == t.defaults
    assert repr(j) == repr(t)
    ts, js = inspect.signature(getattr(torch.optim, name)), inspect.signature(getattr(jg.optim, name))
    assert [(p.name, p.kind, p.default) for p in js.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in ts.parameters.values()]
    assert getattr(jg.optim, name).__doc__ and getattr(jg.optim, name).step.__doc__


ERRORS = [
    ("Adagrad", dict(lr=-1.0)), ("Adagrad", dict(lr_decay=-1)), ("Adagrad", dict(weight_decay=-1)),
    ("Adagrad", dict(initial_accumulator_value=-1)), ("Adagrad", dict(eps=-1)),
    ("Adagrad", dict(fused=True, foreach=True)),
    ("Adadelta", dict(lr=-1.0)), ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(eps=-1)),
    ("Adadelta", dict(weight_decay=-1)),
    ("Adamax", dict(betas=(1.0, 0.9))), ("Adamax", dict(betas=(0.9, -0.1))), ("Adamax", dict(eps=-1)),
    ("NAdam", dict(momentum_decay=-1)), ("NAdam", dict(weight_decay=-1)), ("NAdam", dict(lr=-1.0)),
    ("RAdam", dict(betas=(0.9, 1.0))), ("RAdam", dict(eps=-1e-3)),
    ("Rprop", dict(etas=(1.5, 2.0))), ("Rprop", dict(lr=-1.0)),
    ("ASGD", dict(lr=-1.0)), ("ASGD", dict(weight_decay=-1)),
    ("Adafactor", dict(lr=-1.0)), ("Adafactor", dict(beta2_decay=0.5)), ("Adafactor", dict(eps=(-1, 1e-3))),
    ("Adafactor", dict(eps=(None, -1))), ("Adafactor", dict(d=0.5)), ("Adafactor", dict(weight_decay=-1)),
    ("LBFGS", dict(lr=-1.0)),
]


@pytest.mark.parametrize("name,kw", ERRORS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ERRORS)])
def test_argument_errors_match_torch(name, kw):
    with pytest.raises(Exception) as te:
        getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))], **kw)
    with pytest.raises(type(te.value)) as je:
        getattr(jg.optim, name)([nn.Parameter(jg.zeros(2))], **kw)
    assert str(je.value) == str(te.value)


def test_lbfgs_rejects_groups_and_differentiable_is_refused():
    with pytest.raises(ValueError, match=r"LBFGS doesn't support per-parameter options \(parameter groups\)"):
        jg.optim.LBFGS([{"params": [nn.Parameter(jg.zeros(1))]}, {"params": [nn.Parameter(jg.zeros(1))]}])
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        jg.optim.NAdam([nn.Parameter(jg.zeros(1))], differentiable=True)


# ---- LBFGS ----------------------------------------------------------------------------------------------------

def _rosen(lib, x):
    return ((1 - x[:-1]) ** 2 + 100 * (x[1:] - x[:-1] ** 2) ** 2).sum()


LBFGS_CASES = [dict(lr=1, max_iter=5), dict(lr=0.5, max_iter=7, history_size=3),
               dict(lr=1, max_iter=6, line_search_fn="strong_wolfe"),
               dict(lr=1, max_iter=20, max_eval=25, history_size=4, line_search_fn="strong_wolfe",
                    tolerance_change=1e-12)]


@pytest.mark.parametrize("kw", LBFGS_CASES, ids=range(len(LBFGS_CASES)))
def test_lbfgs_matches_torch(kw):
    x0 = np.array([-1.2, 1.0, 0.5, -0.3])
    res = {}
    for lib in (torch, jg):
        x = lib.nn.Parameter(lib.tensor(x0.copy()))
        opt = lib.optim.LBFGS([x], **kw)
        calls = []

        def closure():
            opt.zero_grad()
            loss = _rosen(lib, x)
            loss.backward()
            calls.append(float(loss.detach()))
            return loss
        losses = [float(opt.step(closure).detach()) for _ in range(3)]
        res[lib.__name__] = (x.detach().numpy().copy(), losses, calls, opt.state_dict())
    (xt, lt, ct, st), (xj, lj, cj, sj) = res["torch"], res["jitgrad"]
    np.testing.assert_allclose(xj, xt, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(lj, lt, rtol=1e-9)
    assert len(cj) == len(ct)
    np.testing.assert_allclose(cj, ct, rtol=1e-9)
    assert list(sj["state"][0]) == list(st["state"][0])
    assert sj["state"][0]["func_evals"] == st["state"][0]["func_evals"]
    assert sj["state"][0]["n_iter"] == st["state"][0]["n_iter"]
    assert len(sj["state"][0]["old_dirs"]) == len(st["state"][0]["old_dirs"])


def test_lbfgs_with_compiled_closure_and_refused_inside_compile():
    """The closure (forward + backward) may be compiled; LBFGS.step itself is refused inside a trace."""
    tm, jm = _pair()
    topt = torch.optim.LBFGS(tm.parameters(), lr=0.5, max_iter=4, history_size=3)
    jopt = jg.optim.LBFGS(jm.parameters(), lr=0.5, max_iter=4, history_size=3)
    x, y = jg.tensor(X), jg.tensor(Y)

    @jg.compile(backend="interpret")
    def jclosure():
        jopt.zero_grad()
        loss = nn.functional.cross_entropy(jm(x), y)
        loss.backward()
        return loss

    def tclosure():
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(torch.tensor(X)), torch.tensor(Y))
        loss.backward()
        return loss
    for _ in range(2):
        assert float(jopt.step(jclosure)) == pytest.approx(float(topt.step(tclosure).detach()), rel=1e-9)
    _assert_same_model(jm, tm, rtol=1e-8, atol=1e-11)

    @jg.compile(backend="interpret")
    def bad():
        return jopt.step(lambda: nn.functional.cross_entropy(jm(x), y))
    with pytest.raises(RuntimeError, match="LBFGS.step cannot run inside a @jitgrad.compile function"):
        bad()


# ---- inside @jg.compile ---------------------------------------------------------------------------------------

COMPILED = [_pick("Adagrad", 1), _pick("Adadelta", 1), _pick("Adamax", 1), _pick("NAdam", 2), _pick("RAdam", 0),
            _pick("Rprop", 1), _pick("ASGD", 1), _pick("Adafactor", 1)]     # one option set per optimiser
COMPILED_STEPS = 7      # RAdam (default betas) switches to the rectified update at step 6


def _all_in_one(two_groups=False):
    ms = [_mlp(nn) for _ in COMPILED]
    opts = [getattr(jg.optim, n)(_groups(two_groups, m), **kw) for m, (n, kw) in zip(ms, COMPILED)]

    def step(x, y):
        out = []
        for m, o in zip(ms, opts):
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            o.zero_grad()
            out.append(loss.detach())
        return jg.stack(out)
    return ms, opts, step


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_compiled_steps_equal_eager_and_torch(backend):
    """Every optimiser's step in one compiled training step (forward, backward, opt.step(), zero_grad): one
    trace, the same losses and parameters as the eager loop, and as torch."""
    two = backend == "interpret"
    cms, copts, cstep = _all_in_one(two)
    ems, eopts, estep = _all_in_one(two)
    kw = {"background": False} if backend == "numba" else {}
    f = jg.compile(cstep, backend=backend, **kw)
    x, y = jg.tensor(X), jg.tensor(Y)
    tms = []
    for (name, okw) in COMPILED:
        tm = _mlp(torch.nn)
        tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in _mlp(nn).state_dict().items()})
        tms.append((tm, getattr(torch.optim, name)(_groups(two, tm), **okw)))
    for _ in range(COMPILED_STEPS):
        lc, le = f(x, y).numpy(), estep(x, y).numpy()
        lt = [_torch_step(tm, to, torch) for tm, to in tms]
        np.testing.assert_allclose(lc, le, rtol=1e-12)
        np.testing.assert_allclose(lc, lt, rtol=1e-10)
    assert f.stats["traces"] == 1
    if backend == "numba":
        assert f.stats["compiled_calls"] == COMPILED_STEPS
    for cm, em, (tm, _), (name, _) in zip(cms, ems, tms, COMPILED):
        for k, v in em.state_dict().items():
            np.testing.assert_allclose(cm.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, atol=1e-14,
                                       err_msg=f"{name} {k}")
        _assert_same_model(cm, tm)
    for co, eo in zip(copts, eopts):
        for p, q in zip(co.state, eo.state):
            for k, v in eo.state[q].items():
                np.testing.assert_allclose(co.state[p][k].numpy(), v.numpy(), rtol=1e-12, atol=1e-14)


def test_compiled_step_reads_lr_changes_without_retrace():
    """A scheduler changing lr between compiled calls is read afresh (no retrace) by the new optimisers."""
    ma, mb = _mlp(nn), _mlp(nn)
    oa, ob = jg.optim.NAdam(ma.parameters(), lr=0.02), jg.optim.NAdam(mb.parameters(), lr=0.02)
    sa, sb = jg.optim.lr_scheduler.ExponentialLR(oa, 0.5), jg.optim.lr_scheduler.ExponentialLR(ob, 0.5)

    @jg.compile(backend="interpret")
    def step(x, y):
        loss = nn.functional.cross_entropy(ma(x), y)
        loss.backward()
        oa.step()
        oa.zero_grad()
        return loss.detach()
    x, y = jg.tensor(X), jg.tensor(Y)
    for _ in range(4):
        assert float(step(x, y)) == pytest.approx(_jg_step(mb, ob), rel=1e-12)
        sa.step()
        sb.step()
    assert step.stats["traces"] == 1
    for k, v in mb.state_dict().items():
        np.testing.assert_allclose(ma.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, err_msg=k)


def test_float32_state_dtypes_match_torch():
    """float32 parameters keep float32 state; NAdam's mu_product and ASGD's eta/mu are float32 like torch's."""
    for name in ("NAdam", "ASGD", "Adafactor", "Rprop"):
        tp = torch.nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
        jp = nn.Parameter(jg.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=jg.float32))
        to, jo = getattr(torch.optim, name)([tp], lr=0.1), getattr(jg.optim, name)([jp], lr=0.1)
        for _ in range(3):
            for p, o, lib in ((tp, to, torch), (jp, jo, jg)):
                o.zero_grad()
                (p * p * lib.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
                o.step()
        assert jp.dtype == jg.float32
        np.testing.assert_allclose(jp.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
        for k, v in to.state[tp].items():
            assert jo.state[jp][k].dtype.name == str(v.dtype).replace("torch.", ""), (name, k)


def test_lbfgs_loads_torch_state_dict():
    """LBFGS's state (history lists of tensors, t, H_diag, counters) saved by torch loads and continues like a
    torch LBFGS loaded from the same dict."""
    x0 = np.array([-1.2, 1.0, 0.5, -0.3])
    tx = torch.nn.Parameter(torch.tensor(x0.copy()))
    topt = torch.optim.LBFGS([tx], max_iter=4, history_size=3)

    def closure_for(lib, x, opt):
        def closure():
            opt.zero_grad()
            loss = _rosen(lib, x)
            loss.backward()
            return loss
        return closure
    for _ in range(2):
        topt.step(closure_for(torch, tx, topt))
    sd = topt.state_dict()
    jx = nn.Parameter(jg.tensor(tx.detach().numpy().copy()))
    jopt = jg.optim.LBFGS([jx], max_iter=4, history_size=3)
    jopt.load_state_dict(_convert(sd))
    st = jopt.state[jx]
    assert st["n_iter"] == 8 and len(st["old_dirs"]) == 3 and isinstance(st["old_dirs"][0], jg.Tensor)
    topt2 = torch.optim.LBFGS([tx], max_iter=4, history_size=3)
    topt2.load_state_dict(copy.deepcopy(sd))
    for _ in range(2):
        topt2.step(closure_for(torch, tx, topt2))
        jopt.step(closure_for(jg, jx, jopt))
    np.testing.assert_allclose(jx.detach().numpy(), tx.detach().numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", NAMES[:-1])
def test_parameter_shapes_and_params_without_grad_match_torch(name):
    """0-d, vector, 3-d (Adafactor's batched factored moments) and matrix parameters, plus one that never
    gets a gradient (skipped; Adagrad still holds state for it, as torch)."""
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal(s) for s in [(), (3,), (2, 3, 4), (4, 2)]]
    res = []
    for lib in (torch, jg):
        ps = [lib.nn.Parameter(lib.tensor(v.copy())) for v in vals]
        idle = lib.nn.Parameter(lib.tensor([1.0, 2.0], dtype=lib.float64))
        opt = getattr(lib.optim, name)(ps + [idle], lr=0.05)
        for _ in range(6):
            opt.zero_grad()
            sum(((p - 0.3) ** 2).sum() * (k + 1) for k, p in enumerate(ps)).backward()
            opt.step()
        res.append(([p.detach().numpy().copy() for p in ps + [idle]], opt.state_dict()))
    (jp, js), (tp, ts) = res[1], res[0]
    for a, b in zip(jp, tp):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    _state_close(js, ts)
