"""``nn.InstanceNorm1d/2d/3d``, ``F.instance_norm`` and ``nn.DataParallel`` (issue 20, missing API): outputs,
gradients and running statistics against torch, gradcheck/gradgradcheck in float64, eager against compiled."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.nn.functional as F
from jitgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("cls,shape", [("InstanceNorm1d", (2, 3, 5)), ("InstanceNorm2d", (2, 3, 4, 2)),
                                       ("InstanceNorm3d", (2, 3, 2, 2, 3)), ("InstanceNorm2d", (3, 4, 2))])
@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True)])
def test_instance_norm_matches_torch_train_and_eval(cls, shape, affine, track):
    a = rnd(*shape, seed=1) * 3 + 1
    m = getattr(jg.nn, cls)(3, affine=affine, track_running_stats=track, dtype=jg.float64)
    t = getattr(torch.nn, cls)(3, affine=affine, track_running_stats=track, dtype=torch.float64)
    if affine:
        w, b = rnd(3, seed=2), rnd(3, seed=3)
        with jg.no_grad():
            m.weight.copy_(jg.tensor(w))
            m.bias.copy_(jg.tensor(b))
        with torch.no_grad():
            t.weight.copy_(torch.tensor(w))
            t.bias.copy_(torch.tensor(b))
    for _ in range(2):
        x, tx = jg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        y, ty = m(x), t(tx)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
        (y * y.detach() + y).sum().backward()
        (ty * ty.detach() + ty).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
        if affine:
            np.testing.assert_allclose(m.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-12)
    if track:
        np.testing.assert_allclose(m.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(m.running_var.numpy(), t.running_var.numpy(), rtol=1e-12)
        m.eval()
        t.eval()
        np.testing.assert_allclose(m(jg.tensor(a)).detach().numpy(), t(torch.tensor(a)).detach().numpy(), rtol=1e-12)
    assert repr(m) == repr(t)


def test_instance_norm_gradcheck_and_compiled():
    x = jg.tensor(rnd(2, 2, 3, seed=4), requires_grad=True)
    w = jg.tensor(rnd(2, seed=5), requires_grad=True)
    b = jg.tensor(rnd(2, seed=6), requires_grad=True)

    def f(x, w, b):
        return F.instance_norm(x, weight=w, bias=b)
    assert gradcheck(f, (x, w, b)) and gradgradcheck(f, (x, w, b))
    m = jg.nn.InstanceNorm1d(2, affine=True, dtype=jg.float64)
    step = jg.compile(lambda x: m(x).sum((1, 2)) ** 2, backend="interpret")
    np.testing.assert_allclose(step(x.detach()).detach().numpy(), (m(x.detach()).sum((1, 2)) ** 2).detach().numpy(),
                               atol=1e-12)


def test_instance_norm_input_checks_as_torch():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        jg.nn.InstanceNorm2d(3)(jg.rand(3, 4))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features \(3\), but got: 2."):
        jg.nn.InstanceNorm2d(3, affine=True)(jg.rand(1, 2, 2, 2))
    with pytest.warns(UserWarning, match="does not match num_features"):
        out = jg.nn.InstanceNorm2d(2)(jg.tensor([[[[1.0, 1.0]]]]))
    assert out.tolist() == [[[[0.0, 0.0]]]]
    with pytest.raises(ValueError, match="Expected more than 1 spatial element"):
        F.instance_norm(jg.rand(2, 3, 1))


def test_instance_norm_then_inplace_relu_double_backward():
    # torch's test_inplace_on_view_backward (issue #10532): the in-place ReLU on the normalised output
    net = jg.nn.Sequential(jg.nn.InstanceNorm2d(2), jg.nn.ReLU(True))
    x = jg.tensor([[[[1.0, 1.0]]]], requires_grad=True)
    with pytest.warns(UserWarning):
        (g,) = jg.autograd.grad(net(x).pow(2), [x], grad_outputs=x.new_ones(x.shape), create_graph=True)
    jg.autograd.grad(g.sum(), [x])
    assert x.tolist() == [[[[1.0, 1.0]]]]


def test_data_parallel_runs_the_module():
    lin = jg.nn.Linear(3, 2)
    dp = jg.nn.DataParallel(lin)
    x = jg.rand(4, 3, requires_grad=True)
    assert np.array_equal(dp(x).detach().numpy(), lin(x).detach().numpy())
    dp(x).sum().backward()
    assert lin.weight.grad is not None and x.grad.shape == (4, 3)
    assert sorted(dp.state_dict()) == ["module.bias", "module.weight"] and dp.module is lin
    assert dp.device_ids == [] and list(dp.parameters()) == list(lin.parameters())
    assert jg.nn.parallel.data_parallel(lin, x).shape == (4, 2)
    with pytest.raises(TypeError, match="must be a jitgrad.nn.Module"):
        jg.nn.DataParallel(lambda t: t)


def test_data_parallel_forward_sees_saved_tensor_hooks():
    seen = []

    class Model(jg.nn.Module):
        def forward(self, x):
            return x * x
    x = jg.ones(5, 5, requires_grad=True)
    with jg.autograd.graph.saved_tensors_hooks(lambda t: seen.append(1) or t, lambda t: t):
        jg.nn.DataParallel(Model())(x)
    assert seen
