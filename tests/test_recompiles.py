"""Why a compiled function retraces: ``f.stats["trace_reasons"]`` counts traces per kind, ``JITGRAD_LOG=recompiles``
prints one line per trace naming what changed, and optimiser hyperparameters that schedulers change become graph
inputs (one retrace, then none), with the same values as eager mode."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn as nn
import jitgrad.nn.functional as F
from jitgrad.optim import lr_scheduler


def test_trace_reasons_count_each_kind(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "recompiles")
    f = jg.compile(lambda x: x.sum(), backend="interpret", dynamic=False)
    f(jg.ones(3))
    f(jg.ones(4))
    f(jg.ones(4))
    f(jg.ones(4, dtype=jg.float64))
    with jg.no_grad():
        f(jg.ones(4))
    assert f.stats["trace_reasons"] == {"first call": 1, "shape": 1, "dtype": 1, "modes": 1}
    assert sum(f.stats["trace_reasons"].values()) == f.stats["traces"] == 4
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and all(ln.startswith("jitgrad recompiles: '<lambda>'") for ln in lines)
    assert "test_recompiles.py" in lines[0] and "[first call]" in lines[0]
    assert "[shape]" in lines[1] and "from shape [3] float32" in lines[1] and "to shape [4] float32" in lines[1]
    assert "[dtype]" in lines[2] and "[4] float64" in lines[2]
    assert "[modes]" in lines[3]


def test_a_size_change_makes_dims_symbolic_once(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "recompiles")
    f = jg.compile(lambda x: x.sum(), backend="interpret")
    for n in (3, 4, 5, 6):
        f(jg.ones(n, 2))
    assert f.stats["trace_reasons"] == {"first call": 1, "dynamic shape": 1}
    lines = capsys.readouterr().err.strip().splitlines()
    assert "[dynamic shape]" in lines[1] and "changed shape from [3, 2]: dims [0, 1] are symbolic" in lines[1]


def test_no_log_without_the_setting(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "other")
    f = jg.compile(lambda x: x * 2, backend="interpret")
    f(jg.ones(2))
    f(jg.ones(3))
    assert capsys.readouterr().err == ""


def test_guard_failures_are_named(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "recompiles")
    cfg = {"k": 3}
    m = nn.Dropout(0.5)

    def f(x):
        return m(x) * cfg["k"]
    cf = jg.compile(f, backend="interpret")
    x = jg.ones(3)
    cf(x)
    cfg["k"] = 4
    cf(x)
    m.eval()
    cf(x)
    assert cf.stats["trace_reasons"] == {"first call": 1, "python value": 2}
    err = capsys.readouterr().err.splitlines()
    assert "closure variable 'cfg'" in err[1] and "['k'] changed from 3 to 4" in err[1]
    assert "'m'" in err[2] and ".training changed from True to False" in err[2]


def test_optimizer_guard_names_the_hyperparameter(capsys, monkeypatch):
    monkeypatch.setenv("JITGRAD_LOG", "recompiles")
    w = nn.Parameter(jg.ones(3))
    opt = jg.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=False)

    @jg.compile(backend="interpret")
    def step(x):
        opt.zero_grad()
        (w * x).sum().backward()
        opt.step()
    x = jg.ones(3)
    step(x)
    step(x)
    opt.param_groups[0]["nesterov"] = True
    step(x)
    err = capsys.readouterr().err.splitlines()
    assert "its .grad is no longer None" in err[1]
    assert "hyperparameter 'nesterov' changed from False to True" in err[2]


def _train(opt_fn, sched_fn, n, compiled, backend="interpret"):
    jg.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = opt_fn(m.parameters())
    sched = sched_fn(opt)
    x, y = jg.randn(16, 4), jg.randint(0, 3, (16,))

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    f = jg.compile(step, backend=backend) if compiled else step
    losses = []
    for _ in range(n):
        losses.append(float(f(x, y)))
        sched.step()
    return np.array(losses), [p.detach().numpy().copy() for p in m.parameters()], f


CASES = {
    "sgd_onecycle": (lambda ps: jg.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
                     lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=200)),
    "adam_onecycle": (lambda ps: jg.optim.Adam(ps, lr=0.01),
                      lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=200)),
    "adamw_cyclic": (lambda ps: jg.optim.AdamW(ps, lr=0.01),
                     lambda o: lr_scheduler.CyclicLR(o, 0.001, 0.02, step_size_up=7)),
    "rmsprop_cyclic": (lambda ps: jg.optim.RMSprop(ps, lr=0.01, momentum=0.5),
                       lambda o: lr_scheduler.CyclicLR(o, 0.001, 0.02, step_size_up=5)),
    "sgd_cosine": (lambda ps: jg.optim.SGD(ps, lr=0.1, momentum=0.9),
                   lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=10)),
    # beta1 cycled by the schedulers (cycle_momentum), weight decay in both forms
    "nadam_onecycle": (lambda ps: jg.optim.NAdam(ps, lr=0.01, weight_decay=1e-3),
                       lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.02, total_steps=200)),
    "nadamw_cyclic": (lambda ps: jg.optim.NAdam(ps, lr=0.01, weight_decay=1e-2, decoupled_weight_decay=True),
                      lambda o: lr_scheduler.CyclicLR(o, 0.001, 0.02, step_size_up=6)),
    "radam_onecycle": (lambda ps: jg.optim.RAdam(ps, lr=0.01, weight_decay=1e-3),
                       lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=200)),
    "adamax_cyclic": (lambda ps: jg.optim.Adamax(ps, lr=0.01, weight_decay=1e-3),
                      lambda o: lr_scheduler.CyclicLR(o, 0.001, 0.02, step_size_up=5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scheduled_hyperparameters_do_not_retrace(case):
    # lr, momentum and betas change at every step: the first trace, the one .grad None -> tensor brings, no more
    opt_fn, sched_fn = CASES[case]
    n = 60
    l_eager, p_eager, _ = _train(opt_fn, sched_fn, n, False)
    l_comp, p_comp, f = _train(opt_fn, sched_fn, n, True)
    assert f.stats["traces"] <= 2 and f.stats["eager_fallbacks"] == 0, f.stats["trace_reasons"]
    np.testing.assert_allclose(l_comp, l_eager, rtol=1e-5, atol=1e-6)
    for a, b in zip(p_comp, p_eager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_hyperparameter_changed_by_hand_retraces_once_then_never():
    w = nn.Parameter(jg.ones(3))
    opt = jg.optim.SGD([w], lr=0.1, momentum=0.9)
    x = jg.ones(3)

    @jg.compile(backend="interpret")
    def step(x):
        opt.zero_grad()
        (w * w * x).sum().backward()
        opt.step()
    ref = nn.Parameter(jg.ones(3))
    ropt = jg.optim.SGD([ref], lr=0.1, momentum=0.9)
    for k in range(12):
        if k >= 3:
            opt.param_groups[0]["momentum"] = ropt.param_groups[0]["momentum"] = 0.5 + 0.03 * k
        step(x)
        ropt.zero_grad()
        (ref * ref * x).sum().backward()
        ropt.step()
        np.testing.assert_allclose(w.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
    assert step.stats["traces"] == 3, step.stats["trace_reasons"]   # first, .grad not None, momentum dynamic
    # its sign is still guarded: the step branches on momentum != 0
    opt.param_groups[0]["momentum"] = 0.0
    step(x)
    assert step.stats["traces"] == 4


def test_hyperparameter_changed_inside_the_step_raises():
    w = nn.Parameter(jg.ones(3))
    opt = jg.optim.SGD([w], lr=0.1, momentum=0.9)
    opt.param_groups[0]["momentum"] = 0.8      # dynamic from now on

    @jg.compile(backend="interpret")
    def step(x):
        (w * x).sum().backward()
        opt.step()
        opt.param_groups[0]["momentum"] = 0.7
    with pytest.raises(RuntimeError, match="changed inside a @jitgrad.compile"):
        step(jg.ones(3))
