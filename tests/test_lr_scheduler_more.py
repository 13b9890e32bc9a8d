"""jg.optim.lr_scheduler (every torch scheduler) and jg.optim.swa_utils against torch: learning-rate (and
momentum) sequences over 30 steps, closed forms, state_dict round trips, torch's warnings and errors;
AveragedModel / SWALR / update_bn values."""
import copy
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import nn
from test_optim import X, _jg_step, _pair, _torch_step

torch = pytest.importorskip("torch")

EPOCHS = 30
METRIC = [1.0, .9, .8, .8, .8, .8, .85, .79, .79, .79, .79, .79, .5, .5, .5, .5, .5, .5, .5, .5] * 2


def _opt(lib, opt_name="SGD"):
    kw = dict(lr=0.1, momentum=0.9) if opt_name == "SGD" else dict(lr=0.1)
    groups = [{"params": [lib.nn.Parameter(lib.zeros(2))]}, {"params": [lib.nn.Parameter(lib.zeros(1))], "lr": 0.3}]
    return getattr(lib.optim, opt_name)(groups, **kw)


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def _run(lib, make, opt_name="SGD", metric=None):
    opt = _opt(lib, opt_name)
    sched = make(lib.optim.lr_scheduler, opt)
    lrs, moms = [list(sched.get_last_lr())], [_momenta(opt)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no warning in the normal loop
        for e in range(EPOCHS):
            opt.step()
            sched.step() if metric is None else sched.step(metric[e])
            lrs.append(list(sched.get_last_lr()))
            moms.append(_momenta(opt))
            assert lrs[-1] == [g["lr"] for g in opt.param_groups]
    return np.array(lrs), moms, sched, opt


SCHEDULES = {
    "MultiplicativeLR": lambda L, o: L.MultiplicativeLR(o, lambda e: 0.95),
    "MultiStepLR": lambda L, o: L.MultiStepLR(o, [3, 7, 7, 12], 0.5),
    "ConstantLR": lambda L, o: L.ConstantLR(o, 0.5, 4),
    "LinearLR": lambda L, o: L.LinearLR(o, 0.2, 0.9, 7),
    "ExponentialLR": lambda L, o: L.ExponentialLR(o, 0.9),
    "PolynomialLR": lambda L, o: L.PolynomialLR(o, 10, 2.0),
    "SequentialLR": lambda L, o: L.SequentialLR(o, [L.LinearLR(o, 0.1, 1.0, 5), L.ExponentialLR(o, 0.9),
                                                    L.CosineAnnealingLR(o, 6)], [5, 12]),
    "ChainedScheduler": lambda L, o: L.ChainedScheduler([L.ConstantLR(o, 0.5, 5), L.ExponentialLR(o, 0.9),
                                                         L.MultiStepLR(o, [4, 9])]),
    "ChainedSequential": lambda L, o: L.ChainedScheduler([L.SequentialLR(o, [L.ConstantLR(o, 0.5, 3),
                                                                             L.StepLR(o, 4, 0.5)], [6]),
                                                          L.LambdaLR(o, lambda e: 1 / (1 + e))]),
    "ReduceLROnPlateau": lambda L, o: L.ReduceLROnPlateau(o, patience=2, factor=0.5, cooldown=1,
                                                          min_lr=[0.01, 0.02]),
    "ReduceLROnPlateau-max-abs": lambda L, o: L.ReduceLROnPlateau(o, mode="max", threshold_mode="abs",
                                                                  threshold=0.01, patience=1),
    "CyclicLR": lambda L, o: L.CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=4, step_size_down=3, mode="triangular2"),
    "CyclicLR-exp": lambda L, o: L.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range", gamma=0.97),
    "CyclicLR-fn": lambda L, o: L.CyclicLR(o, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 0.9 ** x,
                                           scale_mode="iterations", cycle_momentum=False),
    "OneCycleLR": lambda L, o: L.OneCycleLR(o, [0.5, 1.0], total_steps=EPOCHS + 1),
    "OneCycleLR-3": lambda L, o: L.OneCycleLR(o, 0.5, epochs=3, steps_per_epoch=11, three_phase=True,
                                              anneal_strategy="linear"),
    "CosineAnnealingWarmRestarts": lambda L, o: L.CosineAnnealingWarmRestarts(o, 4, 2, 0.01),
    "CosineAnnealingWarmRestarts-1": lambda L, o: L.CosineAnnealingWarmRestarts(o, 5),
}
CYCLIC = ("CyclicLR", "OneCycleLR")


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_matches_torch(name):
    metric = METRIC if name.startswith("ReduceLROnPlateau") else None
    for opt_name in ("SGD", "Adam") if name.startswith(CYCLIC) else ("SGD",):
        jl, jm, js, jopt = _run(jg, SCHEDULES[name], opt_name, metric)
        tl, tm, ts, topt = _run(torch, SCHEDULES[name], opt_name, metric)
        np.testing.assert_allclose(jl, tl, rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(np.array(jm, float), np.array(tm, float), rtol=1e-13)
        assert len(np.unique(jl[:, 0])) > 1          # the schedule does move
        # the state_dict holds the same entries as torch's
        assert sorted(js.state_dict()) == sorted(ts.state_dict())
        # round trip: a new scheduler loaded from it continues identically (replaying the same epoch)
        sd = copy.deepcopy(js.state_dict())
        saved = copy.deepcopy([dict(g) for g in jopt.param_groups])
        js.step() if metric is None else js.step(0.1)
        expect = js.get_last_lr()
        for g, s in zip(jopt.param_groups, saved):
            g.update({k: v for k, v in s.items() if k != "params"})
        js2 = SCHEDULES[name](jg.optim.lr_scheduler, jopt) if metric is None else \
            SCHEDULES[name](jg.optim.lr_scheduler, jopt)
        for g, s in zip(jopt.param_groups, saved):
            g.update({k: v for k, v in s.items() if k != "params"})
        js2.load_state_dict(sd)
        js2.step() if metric is None else js2.step(0.1)
        assert js2.get_last_lr() == expect


CLOSED = {
    "MultiStepLR": dict(milestones=[2, 5, 5], gamma=0.5), "ConstantLR": dict(factor=0.25, total_iters=3),
    "LinearLR": dict(start_factor=0.5, end_factor=0.8, total_iters=4), "ExponentialLR": dict(gamma=0.8),
    "PolynomialLR": dict(total_iters=6, power=0.5),
}


@pytest.mark.parametrize("name", list(CLOSED))
def test_closed_form_with_epoch_argument_warns_like_torch(name):
    out = []
    for lib in (jg, torch):
        opt = _opt(lib)
        s = getattr(lib.optim.lr_scheduler, name)(opt, **CLOSED[name])
        opt.step()
        lrs = []
        for e in (3, 5, 1, 8):
            with pytest.warns(UserWarning, match=r"The epoch parameter in `scheduler.step\(\)` was not necessary"):
                s.step(e)
            lrs.append(s.get_last_lr())
        out.append(lrs)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-13)


def test_warm_restarts_fractional_epochs_match_torch():
    out = []
    for lib in (jg, torch):
        opt = _opt(lib)
        s = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, 3, T_mult=2, eta_min=0.001)
        opt.step()
        lrs = []
        for e in np.arange(0, 20, 0.7):
            s.step(float(e))
            lrs.append(s.get_last_lr())
        out.append(lrs)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-13)


def test_warnings_match_torch():
    """scheduler.step() before optimizer.step(), an overridden optimizer.step, get_lr() outside step()."""
    for lib in (jg, torch):
        opt = _opt(lib)
        s = lib.optim.lr_scheduler.StepLR(opt, 2)
        with pytest.warns(UserWarning, match=r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`"):
            s.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s.step()            # only the first step warns
        with pytest.warns(UserWarning, match=r"please use `get_last_lr\(\)`"):
            s.get_lr()
        opt2 = _opt(lib)
        s2 = lib.optim.lr_scheduler.ExponentialLR(opt2, 0.5)
        opt2.step = lambda closure=None: None
        with pytest.warns(UserWarning, match=r"Seems like `optimizer.step\(\)` has been overridden"):
            s2.step()
        opt3 = _opt(lib)
        s3 = lib.optim.lr_scheduler.LinearLR(opt3)
        opt3.step()
        assert getattr(opt3, "_opt_called", False) and hasattr(opt3.step, "_wrapped_by_lr_sched")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s3.step()


def _err(fn_t, fn_j):
    with pytest.raises(Exception) as te:
        fn_t()
    with pytest.raises(type(te.value)) as je:
        fn_j()
    assert str(je.value) == str(te.value)


SCHED_ERRORS = [
    lambda L, o: L.ConstantLR(o, factor=2.0), lambda L, o: L.LinearLR(o, start_factor=0),
    lambda L, o: L.LinearLR(o, end_factor=2.0), lambda L, o: L.MultiplicativeLR(o, 3),
    lambda L, o: L.MultiplicativeLR(o, [lambda e: 1.0]),
    lambda L, o: L.SequentialLR(o, [L.ConstantLR(o), L.StepLR(o, 2)], [2, 4]),
    lambda L, o: L.SequentialLR(o, [], []), lambda L, o: L.ChainedScheduler([]),
    lambda L, o: L.ChainedScheduler([L.ReduceLROnPlateau(o)]),
    lambda L, o: L.ReduceLROnPlateau(o, factor=1.0), lambda L, o: L.ReduceLROnPlateau(o, mode="avg"),
    lambda L, o: L.ReduceLROnPlateau(o, threshold_mode="x"), lambda L, o: L.ReduceLROnPlateau(o, min_lr=[0.1]),
    lambda L, o: L.CyclicLR(o, 0.1, 1.0, mode="zigzag"), lambda L, o: L.CyclicLR(o, [0.1], 1.0),
    lambda L, o: L.OneCycleLR(o, 1.0), lambda L, o: L.OneCycleLR(o, 1.0, total_steps=0),
    lambda L, o: L.OneCycleLR(o, 1.0, total_steps=10, pct_start=1),
    lambda L, o: L.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy="exp"),
    lambda L, o: L.OneCycleLR(o, 1.0, epochs=0, steps_per_epoch=2),
    lambda L, o: L.CosineAnnealingWarmRestarts(o, 0), lambda L, o: L.CosineAnnealingWarmRestarts(o, 2, T_mult=0),
    lambda L, o: L.CosineAnnealingWarmRestarts(o, 2, eta_min="0"),
    lambda L, o: L.StepLR(o, 2, last_epoch=3),
    lambda L, o: L.StepLR("opt", 2),
]


@pytest.mark.parametrize("i", range(len(SCHED_ERRORS)))
def test_scheduler_errors_match_torch(i):
    make = SCHED_ERRORS[i]
    _err(lambda: make(torch.optim.lr_scheduler, _opt(torch)), lambda: make(jg.optim.lr_scheduler, _opt(jg)))


def test_one_cycle_past_total_steps_and_plateau_new_group_errors():
    for lib in (jg, torch):
        opt = _opt(lib)
        s = lib.optim.lr_scheduler.OneCycleLR(opt, 1.0, total_steps=2)
        opt.step()
        s.step()
        s.step()
        with pytest.raises(ValueError, match="Tried to step 3 times. The specified number of total steps is 2"):
            s.step()
        opt = _opt(lib)
        p = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, min_lr=[0.0, 0.0])
        opt.add_param_group({"params": [lib.nn.Parameter(lib.zeros(1))]})
        p.step(1.0)
        with pytest.raises(RuntimeError, match=r"The number of param groups in the `optimizer` \(3\) differs"):
            p.step(2.0)


# ---- swa_utils ------------------------------------------------------------------------------------------------

def _averaged(lib, kind, m):
    su = lib.optim.swa_utils
    kw = {"swa": {}, "ema_avg": dict(avg_fn=su.get_ema_avg_fn(0.9)),
          "ema_multi": dict(multi_avg_fn=su.get_ema_multi_avg_fn(0.3)),       # lerp weight 0.7: torch's 2nd form
          "swa_multi": dict(multi_avg_fn=su.get_swa_multi_avg_fn()),
          "swa_avg": dict(avg_fn=su.get_swa_avg_fn()),
          "buffers": dict(use_buffers=True, multi_avg_fn=su.get_ema_multi_avg_fn(0.5))}[kind]
    return su.AveragedModel(m, **kw)


@pytest.mark.parametrize("kind", ["swa", "ema_avg", "ema_multi", "swa_multi", "swa_avg", "buffers"])
def test_averaged_model_swalr_update_bn_match_torch(kind):
    tm, jm = _pair()
    ta, ja = _averaged(torch, kind, tm), _averaged(jg, kind, jm)
    topt, jopt = torch.optim.SGD(tm.parameters(), lr=0.1), jg.optim.SGD(jm.parameters(), lr=0.1)
    strategy = "linear" if kind == "swa_avg" else "cos"
    ts = torch.optim.swa_utils.SWALR(topt, 0.05, anneal_epochs=3, anneal_strategy=strategy)
    js = jg.optim.swa_utils.SWALR(jopt, 0.05, anneal_epochs=3, anneal_strategy=strategy)
    for _ in range(5):
        _torch_step(tm, topt, torch)
        _jg_step(jm, jopt)
        ta.update_parameters(tm)
        ja.update_parameters(jm)
        ts.step()
        js.step()
        np.testing.assert_allclose(js.get_last_lr(), ts.get_last_lr(), rtol=1e-14)
    tsd, jsd = ta.state_dict(), ja.state_dict()
    assert list(jsd) == list(tsd) and int(ja.n_averaged) == 5 and ja.n_averaged.dtype == jg.int64
    for k, v in tsd.items():
        np.testing.assert_allclose(jsd[k].numpy(), v.numpy(), rtol=1e-12, atol=1e-15, err_msg=k)
    torch.optim.swa_utils.update_bn([torch.tensor(X[:4]), torch.tensor(X[4:])], ta)
    jg.optim.swa_utils.update_bn([(jg.tensor(X[:4]), None), jg.tensor(X[4:])], ja)
    bn = ja.module[1]
    assert bn.momentum == 0.1 and int(bn.num_batches_tracked) == 2 and ja.training
    for k, v in ta.state_dict().items():
        np.testing.assert_allclose(ja.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, atol=1e-15, err_msg=k)
    ta.eval()
    ja.eval()
    with torch.no_grad(), jg.no_grad():
        np.testing.assert_allclose(ja(jg.tensor(X)).numpy(), ta(torch.tensor(X)).numpy(), rtol=1e-12)
    # SWALR's state_dict round trip
    sd = js.state_dict()
    assert "anneal_func" not in sd and sorted(sd) == sorted(ts.state_dict())
    js2 = jg.optim.swa_utils.SWALR(jopt, 0.05)
    js2.load_state_dict(sd)
    assert js2.anneal_func(0.5) == js.anneal_func(0.5) and js2.anneal_epochs == 3


def test_swa_errors_match_torch():
    su_t, su_j = torch.optim.swa_utils, jg.optim.swa_utils
    _err(lambda: su_t.get_ema_avg_fn(1.5), lambda: su_j.get_ema_avg_fn(1.5))
    _err(lambda: su_t.get_ema_multi_avg_fn(-0.1), lambda: su_j.get_ema_multi_avg_fn(-0.1))
    _err(lambda: su_t.SWALR(_opt(torch), 0.1, anneal_strategy="exp"),
         lambda: su_j.SWALR(_opt(jg), 0.1, anneal_strategy="exp"))
    _err(lambda: su_t.SWALR(_opt(torch), 0.1, anneal_epochs=-1), lambda: su_j.SWALR(_opt(jg), 0.1, anneal_epochs=-1))
    _err(lambda: su_t.AveragedModel(torch.nn.Linear(1, 1), avg_fn=su_t.get_swa_avg_fn(),
                                    multi_avg_fn=su_t.get_swa_multi_avg_fn()),
         lambda: su_j.AveragedModel(nn.Linear(1, 1), avg_fn=su_j.get_swa_avg_fn(),
                                    multi_avg_fn=su_j.get_swa_multi_avg_fn()))
    assert su_j.update_bn([jg.tensor(X)], nn.Linear(3, 2)) is None      # no BatchNorm: nothing to do


@pytest.mark.parametrize("mod,name", [("lr_scheduler", n) for n in torch.optim.lr_scheduler.__all__]
                         + [("swa_utils", n) for n in torch.optim.swa_utils.__all__])
def test_public_names_and_signatures_match_torch(mod, name):
    import inspect
    t, j = getattr(getattr(torch.optim, mod), name), getattr(getattr(jg.optim, mod), name)
    assert j.__doc__
    ts, js = inspect.signature(t), inspect.signature(j)
    assert [(p.name, p.kind, p.default) for p in js.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in ts.parameters.values()]
