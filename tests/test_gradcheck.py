"""gradcheck / gradgradcheck: torch semantics, error messages, modes, and agreement with torch's verdicts."""
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad.autograd import GradcheckError, gradcheck, gradgradcheck

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def d(*shape, rg=True):
    return jg.randn(*shape, dtype=jg.float64, requires_grad=rg)


class ScaledSquare(jg.autograd.Function):
    """x * x with a backward off by ``scale``: a wrong gradient gradcheck must catch."""
    scale = 1.0

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a * (2.0 * ScaledSquare.scale)


class Drifting(jg.autograd.Function):
    """A backward that depends on how often it ran: not reentrant."""
    calls = 0

    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        Drifting.calls += 1
        return g * (2.0 + 1e-9 * Drifting.calls)


@pytest.fixture(autouse=True)
def _reset():
    ScaledSquare.scale = 1.0
    yield
    ScaledSquare.scale = 1.0


# ---- passing checks --------------------------------------------------------------------------------

@pytest.mark.parametrize("fast", [False, True])
def test_passes_on_correct_gradients(fast):
    x, w = d(3, 4), d(4, 2)
    assert gradcheck(lambda a, b: (a @ b).tanh(), (x, w), fast_mode=fast)
    assert gradgradcheck(lambda a, b: (a @ b).tanh(), (x, w), fast_mode=fast)
    assert gradcheck(lambda a, b: (a.exp(), (a * 2).sum(), b.sin()), (x, w), fast_mode=fast)
    assert gradgradcheck(lambda a, b: (a.exp(), (a * 2).sum(), b.sin()), (x, w), fast_mode=fast)


def test_single_tensor_input_and_non_tensor_arguments():
    x = d(5)
    assert gradcheck(lambda a: a.sigmoid(), x)
    assert gradcheck(lambda a, k, name: a * k, (x, 3.0, "ignored"))
    assert gradcheck(lambda a, b: a * b, (x, d(5, rg=False)))


def test_b7_model():
    x, w1, w2 = d(8, 16), d(16, 32), d(32, 4)

    def f(x, w1, w2):
        return jg.log_softmax(jg.tanh(x @ w1) @ w2, dim=1)
    assert gradcheck(f, (x, w1, w2))
    assert gradcheck(f, (x, w1, w2), fast_mode=True)
    assert gradgradcheck(f, (x, w1, w2), fast_mode=True)


def test_inputs_are_not_modified():
    x = d(2, 3)
    before = x.detach().numpy().copy()
    v = x._version
    assert gradcheck(lambda a: a.exp(), (x,))
    np.testing.assert_array_equal(x.detach().numpy(), before)
    assert x._version == v and x.grad is None


def test_aliased_inputs():
    x = d(4)
    assert gradcheck(lambda a, b: a * b, (x, x))
    assert gradgradcheck(lambda a, b: a * b.sin(), (x, x))


def test_zero_size_and_scalar_inputs():
    assert gradcheck(lambda a: a * 2, (d(0, 3),))
    assert gradgradcheck(lambda a: a * a, (d(0, 3),))
    assert gradcheck(lambda a: a.exp(), (d(),))
    assert gradgradcheck(lambda a: a.exp(), (d(),), fast_mode=True)


def test_function_that_differentiates_internally():
    def g(a):
        with jg.enable_grad():
            (r,) = jg.autograd.grad((a ** 3).sum(), a, create_graph=True)
        return r
    assert gradcheck(g, (d(3),))


def test_non_differentiable_outputs_are_skipped():
    x = d(4)
    assert gradcheck(lambda a: (a.argmax(), a * 2, a.detach(), a > 0), (x,))
    assert gradcheck(lambda a: (a > 0).double(), (x,))    # no differentiable output: numerical part is zero


def test_forward_ad_and_batched_checks():
    x, y = d(2, 3), d(3)
    assert gradcheck(lambda a, b: (a @ b).sin(), (x, y), check_forward_ad=True, check_batched_grad=True)
    assert gradcheck(lambda a, b: (a @ b).sin(), (x, y), check_forward_ad=True, fast_mode=True)
    assert gradcheck(lambda a, b: (a @ b).sin(), (x, y), check_forward_ad=True, check_backward_ad=False)
    assert gradgradcheck(lambda a, b: (a @ b).sin(), (x, y), check_fwd_over_rev=True,
                         gen_non_contig_grad_outputs=True)
    with pytest.raises(AssertionError):
        gradcheck(lambda a: a, (x,), check_forward_ad=False, check_backward_ad=False)


def test_float32_inputs_warn_and_use_float64_numerics():
    x = jg.randn(4, requires_grad=True)
    with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double precision"):
        assert gradcheck(lambda a: a.tanh() * a, (x,))


def test_explicit_grad_outputs_for_gradgradcheck():
    x = d(3)
    assert gradgradcheck(lambda a: a.exp() * a, (x,), (jg.randn(3, dtype=jg.float64, requires_grad=True),))
    assert gradgradcheck(lambda a: a.exp() * a, (x,), jg.randn(3, dtype=jg.float64))


# ---- failures ------------------------------------------------------------------------------------

def test_wrong_gradient_message_names_input_output_and_worst_element():
    ScaledSquare.scale = 1.05
    x, y = d(2, 3, rg=False), d(3)
    with pytest.raises(GradcheckError) as ei:
        gradcheck(lambda a, b: (a + 1, b.sin(), ScaledSquare.apply(b)), (x, y))
    msg = str(ei.value)
    assert msg.startswith("Jacobian mismatch for output 1 with respect to input 0,\nnumerical:tensor(")
    assert "\nanalytical:tensor(" in msg
    assert "(argument 1 of func)" in msg and "numerical" in msg and "The worst element" in msg
    assert gradcheck(lambda a, b: ScaledSquare.apply(b), (x, y), raise_exception=False) is False


def test_wrong_gradient_fast_mode_recomputes_slow_jacobians():
    ScaledSquare.scale = 1.05
    with pytest.raises(GradcheckError) as ei:
        gradcheck(ScaledSquare.apply, (d(4),), fast_mode=True)
    msg = str(ei.value)
    assert msg.startswith("Jacobian mismatch for output 0 with respect to input 0,")
    assert "we recompute numerical and analytical jacobians in slow mode" in msg
    assert "The max per-element difference (slow mode) is" in msg


def test_wrong_second_derivative_is_caught_by_gradgradcheck():
    class BadDouble(jg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a.exp()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a.detach().exp()    # right value, but its own derivative is lost
    x = d(3)
    assert gradcheck(BadDouble.apply, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        gradgradcheck(BadDouble.apply, (x,))
    assert gradgradcheck(BadDouble.apply, (x,), raise_exception=False) is False


def test_not_reentrant():
    with pytest.raises(GradcheckError, match="Backward is not reentrant"):
        gradcheck(Drifting.apply, (d(3),))
    assert gradcheck(Drifting.apply, (d(3),), nondet_tol=1e-6)


def test_nonzero_numerical_gradient_without_differentiable_outputs():
    for fast in (False, True):
        with pytest.raises(GradcheckError, match="Numerical gradient for function expected to be zero"):
            gradcheck(lambda a: a.detach() * 2, (d(3),), fast_mode=fast)


def test_input_checks():
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda a: a * 2, (d(3, rg=False),))
    x = jg.randn(1, 3, dtype=jg.float64).expand(4, 3).requires_grad_()
    with pytest.raises(RuntimeError, match="has a dimension with stride 0"):
        gradcheck(lambda a: a * 2, (x,))


def test_backward_not_multiplied_by_grad_output():
    class Ignores(jg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return jg.ones_like(g) * 2
    with pytest.raises(GradcheckError):
        gradcheck(Ignores.apply, (d(1),))


def test_check_grad_dtypes():
    class Float32Grad(jg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return (g * 2).float()
    # as in torch, the engine casts a gradient to its input's dtype, so leaves always see the right dtype
    assert gradcheck(Float32Grad.apply, (d(3),), check_grad_dtypes=True, atol=1e-4)
    assert gradcheck(lambda a: a.exp(), (d(3),), check_grad_dtypes=True)


# ---- torch agrees --------------------------------------------------------------------------------

TORCH_FUNCS = [
    lambda m, a, b: (a * b).sum(1),
    lambda m, a, b: m.tanh(a @ b.unsqueeze(1)) if m is torch else (a @ b.unsqueeze(1)).tanh(),
    lambda m, a, b: (a.exp(), (a - b).abs()),
    lambda m, a, b: m.log_softmax(a * b, 1) if m is torch else jg.log_softmax(a * b, 1),
]


@needs_torch
@pytest.mark.parametrize("k", range(len(TORCH_FUNCS)))
def test_same_verdict_as_torch(k):
    rng = np.random.default_rng(k)
    xa, xb = rng.standard_normal((3, 4)) + 3.0, rng.standard_normal(4)
    f = TORCH_FUNCS[k]
    for fast in (False, True):
        tj = (jg.tensor(xa, requires_grad=True), jg.tensor(xb, requires_grad=True))
        tt = (torch.tensor(xa, requires_grad=True), torch.tensor(xb, requires_grad=True))
        assert gradcheck(lambda a, b: f(jg, a, b), tj, fast_mode=fast) == \
            torch.autograd.gradcheck(lambda a, b: f(torch, a, b), tt, fast_mode=fast)
        assert gradgradcheck(lambda a, b: f(jg, a, b), tj, fast_mode=fast) == \
            torch.autograd.gradgradcheck(lambda a, b: f(torch, a, b), tt, fast_mode=fast)


@needs_torch
def test_message_shape_matches_torch():
    class TBad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a * 2.1
    ScaledSquare.scale = 1.05
    x = np.array([1.0, 2.0])
    with pytest.raises(RuntimeError) as et:
        torch.autograd.gradcheck(TBad.apply, (torch.tensor(x, requires_grad=True),))
    with pytest.raises(GradcheckError) as ej:
        gradcheck(ScaledSquare.apply, (jg.tensor(x, requires_grad=True),))
    first_t = str(et.value).split("\n")[0]
    first_j = str(ej.value).split("\n")[0]
    assert first_t == first_j
    assert "numerical:tensor([[2.0000, 0.0000],\n        [0.0000, 4.0000]], dtype=" in str(ej.value)
    assert str(et.value).split("\n")[1].startswith("numerical:tensor(")
    assert isinstance(ej.value, RuntimeError)


def _jvp_counting(lib):
    """A custom Function whose jvp counts its calls; and one whose jvp treats a missing tangent unlike a zero one
    (grads not materialized): the undefined-tangent check must refuse it."""
    calls = [0]

    class Copy(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x.clone(), y.clone()

        @staticmethod
        def jvp(ctx, x_t, y_t):
            calls[0] += 1
            return x_t, y_t

    class Careless(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.set_materialize_grads(False)
            return x + y

        @staticmethod
        def jvp(ctx, x_t, y_t):
            if x_t is None or y_t is None:
                return (x_t if y_t is None else y_t) * 3        # wrong: a missing tangent is a zero one
            return x_t + y_t
    return calls, Copy, Careless


@needs_torch
def test_forward_mode_undefined_tangent_check_like_torch():
    """With ``check_undefined_grad``, gradcheck runs the function once more per input with a zero tangent and
    once with none (torch's count of jvp calls), and refuses a jvp that treats the two differently."""
    for lib in (jg, torch):
        calls, Copy, Careless = _jvp_counting(lib)
        x = lib.rand(1, dtype=lib.float64, requires_grad=True)
        y = lib.rand(1, dtype=lib.float64, requires_grad=True)
        counts = []
        for undefined in (False, True):
            calls[0] = 0
            lib.autograd.gradcheck(Copy.apply, (x, y), check_forward_ad=True, check_backward_ad=False,
                                   check_undefined_grad=undefined, check_batched_grad=False)
            counts.append(calls[0])
        calls[0] = 0
        lib.autograd.gradcheck(Copy.apply, (x, y.detach()), check_forward_ad=True, check_backward_ad=False,
                               check_undefined_grad=True, check_batched_grad=False)
        counts.append(calls[0])
        assert counts == [2, 6, 2], lib.__name__
        lib.autograd.gradcheck(Careless.apply, (x, y), check_forward_ad=True, check_backward_ad=False,
                               check_undefined_grad=False)
        with pytest.raises(RuntimeError, match="Mismatch in tangent values for output with index") as e:
            lib.autograd.gradcheck(Careless.apply, (x, y), check_forward_ad=True, check_backward_ad=False,
                                   check_undefined_grad=True)
        assert type(e.value).__name__ == "GradcheckError"
