"""The multi-tensor updates of Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop and ASGD (optim/multi_tensor_rules.py,
run by multi_tensor.run_rule): bit-identical with the per-parameter loops, state and versions included, for every
combination of their options; torch's values; refusals that change nothing; the split between threads."""
import itertools

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.optim import multi_tensor

# each optimiser's options, every combination of them tested (the first value of each is the default's branch)
OPTIONS = {
    "Adagrad": dict(lr=[0.1], weight_decay=[0, 0.1], maximize=[False, True], lr_decay=[0, 0.1],
                    initial_accumulator_value=[0, 0.3]),
    "Adadelta": dict(lr=[1.0, 0.5], rho=[0.9, 0.6], weight_decay=[0, 0.1], maximize=[False, True]),
    "Adamax": dict(lr=[2e-3], betas=[(0.9, 0.999), (0.3, 0.9)], weight_decay=[0, 0.1], maximize=[False, True]),
    "NAdam": dict(lr=[2e-3], betas=[(0.9, 0.999), (0.3, 0.9)], weight_decay=[0, 0.1],
                  decoupled_weight_decay=[False, True], maximize=[False, True], momentum_decay=[4e-3, 0.05]),
    # beta2 = 0.9: the rectified step from step 6 on (rho_t > 5); 0.999: from step 7
    "RAdam": dict(lr=[1e-3], betas=[(0.9, 0.999), (0.3, 0.9)], weight_decay=[0, 0.1],
                  decoupled_weight_decay=[False, True], maximize=[False, True]),
    "Rprop": dict(lr=[1e-2], etas=[(0.5, 1.2), (0.3, 1.5)], step_sizes=[(1e-6, 50), (1e-3, 0.02)],
                  maximize=[False, True]),
    # t0 = 2: mu != 1 from step 3 on
    "ASGD": dict(lr=[1e-2], lambd=[1e-4, 0.1], alpha=[0.75, 0.5], t0=[1e6, 2], weight_decay=[0, 0.1],
                 maximize=[False, True]),
}
# a numeric hyperparameter changed between steps, as a scheduler would (read through group.hyper when compiled)
CHANGED = {"Adagrad": ("lr_decay", 0.05), "Adadelta": ("rho", 0.8), "Adamax": ("betas", (0.8, 0.99)),
           "NAdam": ("betas", (0.8, 0.99)), "RAdam": ("betas", (0.8, 0.95)), "Rprop": ("etas", (0.4, 1.3)),
           "ASGD": ("lambd", 0.01)}


def _combinations():
    for name, opts in OPTIONS.items():
        for values in itertools.product(*opts.values()):
            kw = dict(zip(opts, values))
            yield pytest.param(name, kw, id=name + "-" + "-".join(f"{k}={v}" for k, v in kw.items()
                                                                   if v != opts[k][0]) or name)


def _params(dtype):
    jg.manual_seed(0)
    return [jg.nn.Parameter(jg.randn(5, 7, dtype=dtype)), jg.nn.Parameter(jg.randn(7, dtype=dtype)),
            jg.nn.Parameter(jg.randn(3, 1, 2, dtype=dtype)), jg.nn.Parameter(jg.randn((), dtype=dtype))]


def _spy(monkeypatch, fast):
    calls = []
    orig = multi_tensor.run_rule
    monkeypatch.setattr(multi_tensor, "eager_ready", lambda: fast)
    monkeypatch.setattr(multi_tensor, "run_rule", lambda *a: calls.append(orig(*a)) or calls[-1])
    return calls


def _snapshot(opt, ps):
    """Parameters, every state tensor, and the versions of both."""
    values = [p.detach().numpy().copy() for p in ps]
    versions = [p._version for p in ps]
    for p in ps:
        for k in sorted(opt.state[p]):
            t = opt.state[p][k]
            values.append(t.numpy().copy())
            versions.append((k, t._version, t.dtype.name))
    return values, versions


def _run(monkeypatch, fast, name, kw, dtype, steps=8):
    ps = _params(dtype)
    opt = getattr(jg.optim, name)(ps, **kw)
    calls = _spy(monkeypatch, fast)
    key, value = CHANGED[name]
    for i in range(steps):
        for j, p in enumerate(ps):
            # gradients over several decades; one parameter skips a step (no grad): its step count lags
            p.grad = None if (i == 2 and j == 1) else jg.randn(*p.shape, dtype=dtype) * (10.0 ** (i % 4 - 2))
        if i == 3:
            opt.param_groups[0]["lr"] = kw["lr"] * 0.7
        if i == 4:
            opt.param_groups[0][key] = value
            # new state tensors, floating ones cast to the parameter's dtype (0-d eta, mu, mu_product too)
            opt.load_state_dict(opt.state_dict())
        opt.step()
    assert calls == ([True] * steps if fast else [])
    return _snapshot(opt, ps)


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name, kw", list(_combinations()))
def test_multi_tensor_rule_bit_identical(monkeypatch, name, kw, dtype):
    fast, v_fast = _run(monkeypatch, True, name, kw, dtype)
    slow, v_slow = _run(monkeypatch, False, name, kw, dtype)
    assert v_fast == v_slow           # one version bump per in-place write, as the per-parameter path
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, kw", list(_combinations()))
def test_multi_tensor_rule_matches_torch(monkeypatch, name, kw):
    """The multi-tensor path's trajectory is torch.optim's (float64: to rounding)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    shapes = [(5, 7), (7,), (3, 1, 2), ()]
    init = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) * 10.0 ** (i % 4 - 2) for s in shapes] for i in range(8)]
    calls = _spy(monkeypatch, True)
    out = []
    for lib in (torch, jg):
        ps = [lib.nn.Parameter(lib.tensor(a.copy())) for a in init]
        opt = getattr(lib.optim, name)(ps, **kw)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = lib.tensor(g.copy())
            opt.step()
        out.append([p.detach().numpy() for p in ps])
    assert calls == [True] * 8
    for a, b in zip(*out):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_multi_tensor_rule_declines_and_changes_nothing(monkeypatch, name):
    """A gradient of another dtype (as a device could give), a view parameter, ``capturable``, a parameter listed
    twice: the rule declines before writing anything, and the per-parameter path runs."""
    ps = _params(jg.float32)
    kw = {"lr": 0.01}
    opt = getattr(jg.optim, name)(ps, **kw)
    for p in ps:
        p.grad = jg.ones(*p.shape)
    opt.step()                        # state made
    for p in ps:
        p.grad = jg.ones(*p.shape)
    assert multi_tensor.eager_ready()
    rule = {"Adagrad": "ADAGRAD", "Adadelta": "ADADELTA", "Adamax": "ADAMAX", "NAdam": "NADAM", "RAdam": "RADAM",
            "Rprop": "RPROP", "ASGD": "ASGD"}[name]
    from jitgrad.optim import multi_tensor_rules
    rule = getattr(multi_tensor_rules, rule)
    ps[-1].grad._data = ps[-1].grad._data.astype(np.float64)
    group = opt.param_groups[0]
    before = _snapshot(opt, ps)
    with jg.no_grad():                # (as step runs it)
        assert not multi_tensor.run_rule(opt, group, rule)
        after = _snapshot(opt, ps)
        assert before[1] == after[1]
        for a, b in zip(before[0], after[0]):
            np.testing.assert_array_equal(a, b)
        ps[-1].grad = jg.ones(())
        assert multi_tensor.run_rule(opt, group, rule)
        if "capturable" in opt.defaults:
            group["capturable"] = True
            assert not multi_tensor.run_rule(opt, group, rule)
        view = jg.randn(4, 3)[1]
        view.grad = jg.ones(3)
        opt = getattr(jg.optim, name)([view], **kw)
        assert not multi_tensor.run_rule(opt, opt.param_groups[0], rule)
        with pytest.warns(UserWarning, match="duplicate parameters"):
            opt = getattr(jg.optim, name)([ps[0], ps[1], ps[0]], **kw)
        assert not multi_tensor.run_rule(opt, opt.param_groups[0], rule)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_multi_tensor_rule_refusal_leaves_every_parameter_unchanged(name):
    """The in-place checks of every parameter and state tensor run before any write: one refused parameter
    changes none (step counts included)."""
    p = jg.nn.Parameter(jg.randn(3))
    with jg.inference_mode():
        q = jg.nn.Parameter(jg.randn(3))
    opt = getattr(jg.optim, name)([p, q], lr=0.01)
    p.grad = jg.ones(3)
    opt.step()                        # q has no gradient: p updated, its state made
    p.grad, q.grad = jg.ones(3) * 0.5, jg.ones(3)
    before = p.detach().numpy().copy()
    state = {k: (t.numpy().copy(), t._version) for k, t in opt.state[p].items()}
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), before)
    for k, t in opt.state[p].items():
        np.testing.assert_array_equal(t.numpy(), state[k][0], err_msg=k)
        assert t._version == state[k][1], k


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_multi_tensor_rule_split_between_threads_bit_identical(monkeypatch, name):
    """Big parameters: the update is split between eager threads by parameter; the bits are those of one thread."""
    from jitgrad.ir import eager_threads, settings
    from jitgrad.ir.eager_threads import MIN_CHUNK
    monkeypatch.setattr(eager_threads._PACER, "left", 0)        # (a loaded machine must not make it serial)
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", float("inf"))

    def run(threads):
        monkeypatch.setattr(settings.STATE, "num_threads", threads)
        rng = np.random.default_rng(0)
        ps = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s, dtype=np.float32)))
              for s in [(MIN_CHUNK // 64, 96), (MIN_CHUNK // 32,), (MIN_CHUNK // 64, 64), (3, 5), ()]]
        opt = getattr(jg.optim, name)(ps, lr=0.01)
        before = multi_tensor.STATS["split_steps"]
        for _ in range(3):
            for p in ps:
                p.grad = jg.tensor(rng.standard_normal(tuple(p.shape), dtype=np.float32))
            opt.step()
        return _snapshot(opt, ps), multi_tensor.STATS["split_steps"] - before
    (one, v_one), split1 = run(1)
    (two, v_two), split2 = run(2)
    assert split1 == 0 and split2 == 3
    assert v_one == v_two
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
