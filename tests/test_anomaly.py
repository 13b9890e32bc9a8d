"""Anomaly detection (seeds 000 and 002, API.md "Anomaly detection")."""
import inspect
import warnings

import numpy as np
import pytest

import jitgrad as jg
from jitgrad import autograd

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NumPy on purpose-made NaN/Inf

ENABLED_WARNING = "Anomaly Detection has been enabled"


@pytest.fixture
def quiet():
    """Silence the 'Anomaly Detection has been enabled' / 'Error detected in' warnings for tests about errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _state():
    return jg.is_anomaly_enabled(), jg.is_anomaly_check_nan_enabled()


# ---- the flag: warning, context manager, decorator, nesting ----------------------------------------------

def test_default_state():
    assert _state() == (False, True)
    assert autograd.is_anomaly_enabled is jg.is_anomaly_enabled
    assert autograd.is_anomaly_check_nan_enabled is jg.is_anomaly_check_nan_enabled


def test_warns_on_enable():
    with pytest.warns(UserWarning, match=ENABLED_WARNING + r". This mode will increase the runtime and should "
                                                           r"only be enabled for debugging."):
        autograd.detect_anomaly()


def test_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        autograd.detect_anomaly()
    assert len(w) == 1 and w[0].filename == __file__


def test_context_manager(quiet):
    assert not jg.is_anomaly_enabled()
    with autograd.detect_anomaly():
        assert _state() == (True, True)
    assert _state() == (False, True)


def test_context_manager_check_nan_false(quiet):
    with autograd.detect_anomaly(check_nan=False):
        assert _state() == (True, False)
    assert _state() == (False, True)


def test_context_manager_restores_on_exception(quiet):
    with pytest.raises(ValueError):
        with autograd.detect_anomaly(check_nan=False):
            raise ValueError("boom")
    assert _state() == (False, True)


def test_decorator_form():
    seen = []
    with pytest.warns(UserWarning, match=ENABLED_WARNING):
        @autograd.detect_anomaly()
        def train_step(x, target):
            seen.append(_state())
            loss = ((x - target) ** 2).sum()
            loss.backward()
            return loss

    assert not jg.is_anomaly_enabled()
    x = jg.tensor([1., 2., 3.], requires_grad=True)
    loss = train_step(x, jg.tensor([0., 0., 0.]))
    assert float(loss) == 14.
    np.testing.assert_allclose(x.grad.numpy(), [2., 4., 6.])
    assert seen == [(True, True)]
    assert not jg.is_anomaly_enabled()
    train_step(x, jg.tensor([0., 0., 0.]))        # each call enters afresh
    assert seen == [(True, True)] * 2
    assert not jg.is_anomaly_enabled()


def test_decorator_check_nan_false_and_restores_on_exception(quiet):
    @autograd.detect_anomaly(check_nan=False)
    def f():
        assert _state() == (True, False)
        raise KeyError("x")

    with pytest.raises(KeyError):
        f()
    assert _state() == (False, True)


def test_decorator_keeps_function_metadata(quiet):
    @autograd.detect_anomaly()
    def my_step():
        """doc"""
    assert my_step.__name__ == "my_step" and my_step.__doc__ == "doc"


def test_seed_002_context_manager_example(quiet):
    x = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with autograd.detect_anomaly():
        y = (x * x).sum()
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2., 4., 6.])


def test_nesting_restores_previous_state(quiet):
    with autograd.detect_anomaly():
        assert _state() == (True, True)
        with autograd.detect_anomaly(check_nan=False):
            assert _state() == (True, False)
            with autograd.set_detect_anomaly(False):
                assert _state() == (False, True)
            assert _state() == (True, False)
        assert _state() == (True, True)
    assert _state() == (False, True)


def test_set_detect_anomaly_as_call():
    autograd.set_detect_anomaly(True)
    assert _state() == (True, True)
    autograd.set_detect_anomaly(True, check_nan=False)
    assert _state() == (True, False)
    autograd.set_detect_anomaly(False)
    assert _state() == (False, True)


def test_set_detect_anomaly_as_context_manager_restores():
    with autograd.set_detect_anomaly(True):
        assert _state() == (True, True)
        with autograd.set_detect_anomaly(True, check_nan=False):
            assert _state() == (True, False)
        assert _state() == (True, True)
    assert _state() == (False, True)
    autograd.set_detect_anomaly(True)
    with autograd.set_detect_anomaly(False):
        assert _state() == (False, True)
    assert _state() == (True, True)


def test_set_detect_anomaly_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autograd.set_detect_anomaly(True):
            pass


def test_top_level_set_anomaly_enabled():
    jg.set_anomaly_enabled(True, False)
    assert _state() == (True, False)
    jg.set_anomaly_enabled(False)
    assert _state() == (False, True)


# ---- (1) errors in backward carry the forward traceback ---------------------------------------------------

class MyFunc(autograd.Function):
    @staticmethod
    def forward(ctx, inp):
        return inp.clone()

    @staticmethod
    def backward(ctx, gO):
        # Error during the backward pass
        raise RuntimeError("Some error in backward")
        return gO.clone()


def run_fn(a):
    out = MyFunc.apply(a)
    return out.sum()


APPLY_LINE = inspect.getsourcelines(run_fn)[1] + 1      # the line of ``MyFunc.apply(a)``


def test_backward_error_without_anomaly_has_no_forward_trace():
    inp = jg.rand(10, 10, requires_grad=True)
    out = run_fn(inp)
    with pytest.raises(RuntimeError, match="^Some error in backward$"):
        out.backward()


def test_backward_error_with_anomaly_has_forward_trace_in_message(quiet):
    with pytest.raises(RuntimeError) as ei:
        with autograd.detect_anomaly():
            inp = jg.rand(10, 10, requires_grad=True)
            out = run_fn(inp)
            out.backward()
    msg = str(ei.value)
    assert isinstance(ei.value, RuntimeError)
    assert "Some error in backward" in msg
    assert "Traceback of forward call that caused the error" in msg
    assert f'File "{__file__}", line {APPLY_LINE}, in run_fn' in msg
    assert "out = MyFunc.apply(a)" in msg
    assert "out = run_fn(inp)" in msg                 # the outer frame too, outermost first
    assert msg.index("out = run_fn(inp)") < msg.index("out = MyFunc.apply(a)")
    assert "MyFuncBackward" in msg                    # names the failing backward function
    assert "jitgrad/runtime" not in msg               # jitgrad's own frames are not in the forward trace


def test_backward_error_with_anomaly_also_warns():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError):
            with autograd.detect_anomaly():
                run_fn(jg.rand(3, requires_grad=True)).backward()
    texts = [str(x.message) for x in w]
    assert any("Error detected in MyFuncBackward" in t and "Traceback of forward call" in t for t in texts)


def test_backward_error_keeps_exception_type(quiet):
    class Bad(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise ValueError("bad value in backward")

    with autograd.detect_anomaly():
        y = Bad.apply(jg.ones(2, requires_grad=True)).sum()
        with pytest.raises(ValueError, match="bad value in backward") as ei:
            y.backward()
    assert "Traceback of forward call that caused the error" in str(ei.value)
    assert "y = Bad.apply(" in str(ei.value)


def test_forward_trace_for_builtin_op_error(quiet):
    # an in-place modification detected in backward: the error names the forward line that saved the tensor
    with autograd.detect_anomaly():
        x = jg.tensor([1., 2.], requires_grad=True)
        h = x * 1
        y = h.exp()      # the failing node
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as ei:
            y.sum().backward()
    assert "Traceback of forward call that caused the error" in str(ei.value)
    assert "y = h.exp()" in str(ei.value)


# ---- (2) NaN / Inf produced in backward -------------------------------------------------------------------

def _sqrt_at_zero():
    x = jg.tensor([0., 4.], requires_grad=True)
    y = x.sqrt()
    return x, (y * 0.).sum()         # d/dx = 0 * 1/(2 sqrt(0)) = 0 * inf = nan


def test_nan_in_backward_raises(quiet):
    with autograd.detect_anomaly():
        x = jg.tensor([0., 4.], requires_grad=True)
        y = x.sqrt()                     # NAN_LINE
        z = (y * 0.).sum()
        with pytest.raises(RuntimeError) as ei:
            z.backward()
    msg = str(ei.value)
    assert msg.startswith("Function 'SqrtBackward0' returned nan values in its 0th output.")
    assert "Traceback of forward call that caused the error" in msg
    assert "y = x.sqrt()                     # NAN_LINE" in msg
    assert __file__ in msg
    assert "[2]" in msg and "float32" in msg          # shape and dtype
    assert "sqrt" in msg.splitlines()[1]              # the op


def test_inf_in_backward_raises_the_same_error(quiet):
    # sqrt at 0 gives an infinite gradient: checked too (API.md: NaN/Inf)
    with autograd.detect_anomaly():
        x = jg.tensor([0.0], requires_grad=True)
        with pytest.raises(RuntimeError, match=r"^Function 'SqrtBackward0' returned nan values in its 0th "
                                               r"output\.") as ei:
            x.sqrt().sum().backward()
    assert "inf" in str(ei.value)


def test_nan_check_names_the_node_that_produced_it(quiet):
    with autograd.detect_anomaly():
        w = jg.tensor([-1., 4.], requires_grad=True)
        y = w.sqrt()                         # sqrt(-1) = nan in forward: its grad is nan too
        z = (y * 3.).sum()                   # MulBackward0 and SumBackward0 produce finite gradients
        with pytest.raises(RuntimeError, match="^Function 'SqrtBackward0' returned nan values"):
            z.backward()


def test_check_nan_false_does_not_raise(quiet):
    with autograd.detect_anomaly(check_nan=False):
        x, z = _sqrt_at_zero()
        z.backward()
    assert np.isnan(x.grad.numpy()[0])


def test_set_detect_anomaly_check_nan_false_does_not_raise():
    with autograd.set_detect_anomaly(True, check_nan=False):
        x, z = _sqrt_at_zero()
        z.backward()
    assert np.isnan(x.grad.numpy()[0])


def test_without_anomaly_nan_propagates_silently():
    x, z = _sqrt_at_zero()
    z.backward()                             # no error
    g = x.grad.numpy()
    assert np.isnan(g[0]) and g[1] == 0.


def test_nan_check_with_grad_and_create_graph(quiet):
    with autograd.detect_anomaly():
        x, z = _sqrt_at_zero()
        with pytest.raises(RuntimeError, match="^Function 'SqrtBackward0' returned nan values"):
            autograd.grad(z, x, create_graph=True)


def test_nan_in_custom_function_backward(quiet):
    class NanGrad(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    with autograd.detect_anomaly():
        x = jg.ones(3, requires_grad=True)
        y = NanGrad.apply(x)
        with pytest.raises(RuntimeError, match="^Function 'NanGradBackward' returned nan values in its 0th output."):
            y.sum().backward()


def test_nan_matches_torch_message_prefix(quiet):
    torch = pytest.importorskip("torch")
    with torch.autograd.detect_anomaly():
        xt = torch.tensor([0., 4.], requires_grad=True)
        with pytest.raises(RuntimeError) as et:
            (xt.sqrt() * 0.).sum().backward()
    with autograd.detect_anomaly():
        xj = jg.tensor([0., 4.], requires_grad=True)
        with pytest.raises(RuntimeError) as ej:
            (xj.sqrt() * 0.).sum().backward()
    first_t = str(et.value).splitlines()[0]
    assert str(ej.value).startswith(first_t)


# ---- check_forward (jitgrad extension) --------------------------------------------------------------------

def test_check_forward_catches_forward_nan(quiet):
    with autograd.detect_anomaly(check_forward=True):
        x = jg.tensor([-1., 4.], requires_grad=True)
        with pytest.raises(RuntimeError, match="nan") as ei:
            x.sqrt()                                   # FORWARD_NAN
    msg = str(ei.value)
    assert "sqrt" in msg and "forward" in msg
    assert "FORWARD_NAN" in msg or f"{__file__}" in msg or "test_anomaly.py" in msg


def test_check_forward_off_by_default(quiet):
    with autograd.detect_anomaly():
        y = jg.tensor([-1.]).sqrt()
    assert np.isnan(y.numpy()[0])
    assert not jg.autograd.detect_anomaly.__init__.__defaults__[1]


def test_check_forward_restored_after_exit(quiet):
    with autograd.detect_anomaly(check_forward=True):
        pass
    y = jg.tensor([-1.]).sqrt()                       # no error once the block is left
    assert np.isnan(y.numpy()[0])
    with autograd.detect_anomaly(check_forward=True):
        with autograd.detect_anomaly():
            jg.tensor([-1.]).sqrt()                   # the inner block turns forward checks off
        with pytest.raises(RuntimeError):
            jg.tensor([-1.]).sqrt()                   # and the outer state comes back


def test_no_anomaly_no_overhead_path_gives_same_gradients(quiet):
    def f(x):
        return (x.tanh() * x.sigmoid()).sum()

    x1 = jg.tensor([0.1, -0.7, 2.0], requires_grad=True)
    f(x1).backward()
    x2 = jg.tensor([0.1, -0.7, 2.0], requires_grad=True)
    with autograd.detect_anomaly():
        f(x2).backward()
    np.testing.assert_array_equal(x1.grad.numpy(), x2.grad.numpy())


def test_anomaly_only_during_backward_says_no_forward_information(quiet):
    y = run_fn(jg.rand(3, requires_grad=True))       # forward outside anomaly mode: no trace recorded
    with autograd.detect_anomaly():
        with pytest.raises(RuntimeError) as ei:
            y.backward()
    msg = str(ei.value)
    assert "Some error in backward" in msg
    assert "Error detected in MyFuncBackward" in msg
    assert "No forward pass information available. Enable detect anomaly during forward pass" in msg


def test_nan_error_when_anomaly_only_during_backward(quiet):
    x, z = _sqrt_at_zero()
    with autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="^Function 'SqrtBackward0' returned nan values in its 0th output."):
            z.backward()
