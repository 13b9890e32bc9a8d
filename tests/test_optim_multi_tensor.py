"""The eager multi-tensor paths (optim/multi_tensor.py, clip_grad_norm_'s eager loop) give bit-identical values to
the per-parameter tensor-op paths, and run only where they apply."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.utils.clip_grad as clip_grad
from jitgrad.optim import multi_tensor
from jitgrad.optim.multi_tensor_rules import ADAM


def _params(dtype):
    jg.manual_seed(0)
    return [jg.nn.Parameter(jg.randn(5, 7, dtype=dtype)), jg.nn.Parameter(jg.randn(7, dtype=dtype)),
            jg.nn.Parameter(jg.randn(3, 1, 2, dtype=dtype)), jg.nn.Parameter(jg.randn((), dtype=dtype))]


def _assert_bit_identical(fast, slow):
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _spy(monkeypatch, fast, name):
    """Turn the eager fast path on or off; returns the list of what each call of ``multi_tensor.<name>`` returned."""
    calls = []
    orig = getattr(multi_tensor, name)
    monkeypatch.setattr(multi_tensor, "eager_ready", lambda: fast)
    monkeypatch.setattr(multi_tensor, name, lambda *a: calls.append(orig(*a)) or calls[-1])
    return calls


def _adam_run(monkeypatch, fast, dtype, make):
    ps = _params(dtype)
    opt = make(ps)
    calls = _spy(monkeypatch, fast, "run_rule")
    for i in range(5):
        for j, p in enumerate(ps):
            # gradients over several decades; one parameter skips a step (no grad): its step count lags
            p.grad = None if (i == 2 and j == 1) else jg.randn(*p.shape, dtype=dtype) * (10.0 ** (i - 3))
        if i == 3:
            opt.param_groups[0]["lr"] = 0.0123
        opt.step()
    assert bool(calls) == fast
    state = [opt.state[p][k].numpy().copy() for p in ps for k in sorted(opt.state[p])]
    versions = [p._version for p in ps] + [(k, opt.state[p][k]._version) for p in ps for k in sorted(opt.state[p])]
    return [p.detach().numpy().copy() for p in ps] + state, versions


ADAMS = {
    "adamw_groups": lambda ps: jg.optim.AdamW([{"params": ps[:2], "weight_decay": 0.1},
                                               {"params": ps[2:], "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95)),
    "adam_l2": lambda ps: jg.optim.Adam(ps, lr=1e-2, weight_decay=0.05),
    "adam": lambda ps: jg.optim.Adam(ps, lr=1e-3, eps=1e-6),
    "adam_amsgrad_max": lambda ps: jg.optim.Adam(ps, lr=1e-2, amsgrad=True, maximize=True, weight_decay=0.05),
    "adamw_amsgrad": lambda ps: jg.optim.AdamW(ps, lr=1e-2, amsgrad=True, betas=(0.5, 0.9)),
}


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("which", sorted(ADAMS))
def test_adam_multi_tensor_bit_identical(monkeypatch, dtype, which):
    fast, v_fast = _adam_run(monkeypatch, True, dtype, ADAMS[which])
    slow, v_slow = _adam_run(monkeypatch, False, dtype, ADAMS[which])
    _assert_bit_identical(fast, slow)
    assert v_fast == v_slow           # one version bump per in-place write, as the per-parameter path


def test_adam_multi_tensor_declines_what_it_does_not_do(monkeypatch):
    ps = _params(jg.float32)
    for p in ps:
        p.grad = jg.ones(*p.shape)
    assert multi_tensor.eager_ready()
    ps[0].grad._data = ps[0].grad._data.astype(np.float64)     # a gradient of another dtype (as a device could)
    opt = jg.optim.Adam(ps)
    assert not multi_tensor.run_rule(opt, opt.param_groups[0], ADAM)
    opt = jg.optim.Adam([ps[1]], betas=(jg.tensor(0.9), 0.999))   # a tensor hyperparameter promotes otherwise
    assert not multi_tensor.run_rule(opt, opt.param_groups[0], ADAM)
    with jg.profiler.profile():
        assert not multi_tensor.eager_ready()


def test_adam_multi_tensor_checks_in_place_rules():
    p = jg.nn.Parameter(jg.randn(3))
    p.grad = jg.ones(3)
    with jg.inference_mode():
        q = jg.nn.Parameter(jg.randn(3))     # an inference tensor: not updatable outside inference mode
    q.grad = jg.ones(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        jg.optim.AdamW([p, q]).step()


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64], ids=["f32", "f64"])
def test_clip_grad_norm_eager_bit_identical(monkeypatch, dtype):
    out = []
    for fast in (True, False):
        ps = _params(dtype)
        for p in ps:
            p.grad = jg.randn(*p.shape, dtype=dtype) * 3
        monkeypatch.setattr(clip_grad, "eager_ready", lambda: fast)
        n = jg.nn.utils.clip_grad_norm_(ps, 1.0)
        out.append([n.numpy()] + [p.grad.numpy() for p in ps] + [[p.grad._version for p in ps]])
    assert out[0][-1] == out[1][-1]
    _assert_bit_identical(out[0][:-1], out[1][:-1])
    np.testing.assert_allclose(np.sqrt(sum((p.grad.numpy().astype(np.float64) ** 2).sum() for p in ps)), 1.0,
                               rtol=1e-5)


SGDS = {
    "plain": lambda ps: jg.optim.SGD(ps, lr=0.1),
    "momentum_wd": lambda ps: jg.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-2),
    "nesterov_max": lambda ps: jg.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True, maximize=True),
    "dampening": lambda ps: jg.optim.SGD(ps, lr=0.05, momentum=0.5, dampening=0.3),
}


def _sgd_run(monkeypatch, fast, dtype, make):
    ps = _params(dtype)
    opt = make(ps)
    calls = _spy(monkeypatch, fast, "run_rule")
    for i in range(4):
        for p in ps:
            p.grad = jg.randn(*p.shape, dtype=dtype) * (10.0 ** (i - 2))
        if i == 2:
            opt.param_groups[0]["lr"] = 0.0123
        opt.step()
    # the first momentum step makes the buffers on the per-parameter path; later steps take the fast one
    assert any(calls) == fast
    bufs = [opt.state[p]["momentum_buffer"].numpy().copy() for p in ps if "momentum_buffer" in opt.state[p]]
    return [p.detach().numpy().copy() for p in ps] + bufs, [p._version for p in ps]


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("which", sorted(SGDS))
def test_sgd_multi_tensor_bit_identical(monkeypatch, dtype, which):
    fast, v_fast = _sgd_run(monkeypatch, True, dtype, SGDS[which])
    slow, v_slow = _sgd_run(monkeypatch, False, dtype, SGDS[which])
    assert len(fast) == len(slow)
    _assert_bit_identical(fast, slow)
    assert v_fast == v_slow


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_fused_and_foreach_keywords_as_torch(name):
    """``fused=`` / ``foreach=`` (nanoGPT's configure_optimizers passes ``fused=``) are accepted and change nothing
    in the trajectory; both True is torch's RuntimeError."""
    torch = pytest.importorskip("torch")
    res = []
    for lib in (torch, jg):
        for kw in ({}, {"fused": True}, {"fused": False, "foreach": True}, {"foreach": False}):
            w = lib.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3), requires_grad=True)
            opt = getattr(lib.optim, name)([{"params": [w], "weight_decay": 0.1}], lr=0.05, **kw)
            for _ in range(3):
                (w.pow(3).sum() + w.sum(0).pow(2).sum()).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            res.append(w.detach().numpy())
        p = lib.tensor([1.0], requires_grad=True)
        with pytest.raises(Exception) as e:
            getattr(lib.optim, name)([p], lr=0.1, fused=True, foreach=True)
        res.append((type(e.value), str(e.value)))
    assert res[9] == res[4]         # (type, message) of the refusal
    for a, b in zip(res[5:9] + res[1:4], res[0:4] + res[:1] * 3):      # jitgrad == torch; every keyword the same
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("make", [lambda ps: jg.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
                                  lambda ps: jg.optim.Adam(ps, lr=1e-2, weight_decay=0.05),
                                  lambda ps: jg.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)],
                         ids=["adamw", "adam_l2", "sgd_nesterov"])
def test_multi_tensor_split_between_threads_bit_identical(monkeypatch, make):
    """Big parameters: the update is split between threads (SGD's NumPy rule between eager threads by parameter,
    Adam's native pass in pieces on the worker pool); the bits are those of one thread."""
    from jitgrad.codegen.native import gemm_blocks
    from jitgrad.ir import eager_threads, settings
    from jitgrad.ir.eager_threads import MIN_CHUNK
    from jitgrad.optim import adam_native
    if settings.default_threads() < 2 or gemm_blocks.runner() is None:
        pytest.skip("needs two cores and jitgrad's pool")
    monkeypatch.setattr(eager_threads._PACER, "left", 0)        # (a loaded machine must not make it serial)
    monkeypatch.setattr(eager_threads._Pacer, "SLOW", float("inf"))
    monkeypatch.setattr(gemm_blocks, "busy", lambda: False)

    def splits():
        return multi_tensor.STATS["split_steps"] + adam_native.STATS["pooled"]

    def run(threads):
        monkeypatch.setattr(settings.STATE, "num_threads", threads)
        rng = np.random.default_rng(0)
        ps = [jg.nn.Parameter(jg.tensor(rng.standard_normal(s, dtype=np.float32)))
              for s in [(MIN_CHUNK // 64, 96), (MIN_CHUNK // 32,), (MIN_CHUNK // 64, 64), (3, 5), ()]]
        opt = make(ps)
        before = splits()
        for _ in range(4):
            for p in ps:
                p.grad = jg.tensor(rng.standard_normal(tuple(p.shape), dtype=np.float32))
            opt.step()
        return [p.detach().numpy().copy() for p in ps], splits() - before
    one, split1 = run(1)
    two, split2 = run(2)
    assert split1 == 0 and split2 >= 3        # (SGD's first step makes its momentum buffers per parameter)
    _assert_bit_identical(two, one)


def test_multi_tensor_refusal_leaves_every_parameter_unchanged():
    """The in-place checks of every parameter run before any write: one refused parameter changes none."""
    p = jg.nn.Parameter(jg.randn(3))
    with jg.inference_mode():
        q = jg.nn.Parameter(jg.randn(3))
    opt = jg.optim.Adam([p, q])
    p.grad, q.grad = jg.ones(3), jg.ones(3)
    before = p.detach().numpy().copy()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), before)


RMSPROPS = {
    "plain": lambda ps: jg.optim.RMSprop(ps, lr=1e-2),
    "centered_momentum": lambda ps: jg.optim.RMSprop(ps, lr=1e-2, alpha=0.9, momentum=0.8, centered=True),
    "wd_max": lambda ps: jg.optim.RMSprop(ps, lr=1e-3, weight_decay=0.1, maximize=True, eps=1e-6),
    "momentum": lambda ps: jg.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
}


def _rmsprop_run(monkeypatch, fast, dtype, make):
    ps = _params(dtype)
    opt = make(ps)
    calls = _spy(monkeypatch, fast, "run_rule")
    for i in range(5):
        for j, p in enumerate(ps):
            p.grad = None if (i == 2 and j == 1) else jg.randn(*p.shape, dtype=dtype) * (10.0 ** (i - 3))
        if i == 3:
            opt.param_groups[0]["lr"] = 0.0123
        opt.step()
    assert any(calls) == fast
    state = [t.numpy().copy() for p in ps for t in opt.state[p].values()]
    versions = [p._version for p in ps] + [t._version for p in ps for t in opt.state[p].values()]
    return [p.detach().numpy().copy() for p in ps] + state, versions


@pytest.mark.parametrize("dtype", [jg.float32, jg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("which", sorted(RMSPROPS))
def test_rmsprop_multi_tensor_bit_identical(monkeypatch, dtype, which):
    fast, v_fast = _rmsprop_run(monkeypatch, True, dtype, RMSPROPS[which])
    slow, v_slow = _rmsprop_run(monkeypatch, False, dtype, RMSPROPS[which])
    assert len(fast) == len(slow)
    _assert_bit_identical(fast, slow)
    assert v_fast == v_slow           # one version bump per in-place write, as the per-parameter path
