"""Anomaly mode inside compiled code: checks in the generated kernels (and in the interpreter) raise the same
RuntimeError as eager mode, naming the backward function, the op and the user's line."""
import os
import warnings

import numpy as np
import pytest

import jitgrad as jg

pytestmark = [pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled"),
              pytest.mark.filterwarnings("error::jitgrad.codegen.program.cpu.CodegenWarning")]
HERE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("JITGRAD_BACKGROUND_COMPILE", "0")


@pytest.fixture(params=["interpret", "numba"])
def backend(request):
    return request.param


def _line_of(fn, needle):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if needle in ln:
            return start + k
    raise AssertionError(needle)


def sqrt_at_zero(x):
    r = jg.sqrt(x)                                   # MARK sqrt
    return jg.autograd.grad((r * 0.0).sum(), x)[0]


def log_of_zero(x):
    r = jg.log(x * 0.0)                              # MARK log
    return jg.autograd.grad((r * 0.0).sum(), x)[0]


def zero_div_zero(x):
    y = x * 0.0
    r = y / y                                        # MARK div
    return jg.autograd.grad(r.sum(), x)[0]


def inf_times_zero_matmul(x):
    w = jg.full((3, 2), float("inf"))
    h = x.unsqueeze(0) @ w                           # MARK matmul
    return jg.autograd.grad((h * 0.0).relu().sum(), x)[0]


def double_backward_nan(x):
    y = (x ** 3).sum()
    gx, = jg.autograd.grad(y, x, create_graph=True)
    z = jg.sqrt(gx - 3 * x * x).sum()                # MARK dbl
    return jg.autograd.grad(z, x)[0]


CASES = [
    (sqrt_at_zero, "MARK sqrt", "SqrtBackward0"),
    (log_of_zero, "MARK log", "LogBackward0"),
    (zero_div_zero, "MARK div", "DivBackward0"),
    (inf_times_zero_matmul, "MARK matmul", "MmBackward0"),
    (double_backward_nan, "MARK dbl", "SqrtBackward0"),
]


def _x():
    return jg.tensor([0.0, 1.0, 4.0], requires_grad=True)


@pytest.mark.parametrize("fn,mark,name", CASES, ids=[c[0].__name__ for c in CASES])
def test_compiled_anomaly_names_op_and_line(backend, fn, mark, name):
    line = _line_of(fn, mark)
    with jg.autograd.detect_anomaly():
        with pytest.raises(RuntimeError) as eager:
            fn(_x())
        with pytest.raises(RuntimeError) as compiled:
            jg.compile(fn, backend=backend)(_x())
    msg = str(compiled.value)
    assert msg.startswith(f"Function '{name}' returned nan values in its "), msg
    assert f"{HERE}:{line}" in msg and "MARK" in msg, msg            # the user's file:line and its source text
    assert "Traceback of forward call that caused the error" in msg and f'line {line}' in msg
    assert "checked inside compiled code" in msg
    # eager and compiled agree on the function and the forward line
    e = str(eager.value)
    assert e.splitlines()[0].split(" returned")[0] == msg.splitlines()[0].split(" returned")[0]
    assert f"{HERE}:{line}" in e


@pytest.mark.parametrize("fn,mark,name", CASES, ids=[c[0].__name__ for c in CASES])
def test_without_anomaly_nan_propagates_silently(backend, fn, mark, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no warning either
        out = jg.compile(fn, backend=backend)(_x())
    ref = fn(_x())
    assert not np.isfinite(out.numpy()).all()
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(ref.numpy()))


def test_anomaly_is_part_of_the_key(backend):
    f = jg.compile(sqrt_at_zero, backend=backend)
    f(_x())
    with jg.autograd.detect_anomaly():
        with pytest.raises(RuntimeError):
            f(_x())
    f(_x())
    assert f.stats["traces"] == 2
    plain = [e for k, v in f._cache.items() if not k[3][1] for e in v]
    checked = [e for k, v in f._cache.items() if k[3][1] for e in v]
    assert len(plain) == len(checked) == 1
    assert all(e.check is None for e in plain[0].graph.eqns)   # no checks at all without anomaly mode
    assert any(e.check is not None for e in checked[0].graph.eqns)


def test_check_nan_false_does_not_raise(backend):
    with jg.autograd.detect_anomaly(check_nan=False):
        out = jg.compile(sqrt_at_zero, backend=backend)(_x())
    assert np.isnan(out.numpy()[0])


def test_check_forward(backend):
    def f(x):
        return (jg.log(x - 1.0) * 2).sum()          # MARK fwd
    line = _line_of(f, "MARK fwd")
    x = jg.tensor([0.5, 2.0])
    with jg.autograd.detect_anomaly(check_forward=True):
        with pytest.raises(RuntimeError) as e:
            jg.compile(f, backend=backend)(x)
    msg = str(e.value)
    assert msg.startswith("Function 'log' (forward) returned nan values"), msg
    assert f"{HERE}:{line}" in msg


@pytest.mark.filterwarnings("error:Error detected in")   # the report is complete: no second wrapper
def test_outer_backward_of_compiled_function(backend):
    g = jg.compile(lambda x: (jg.sqrt(x) * 0.0).sum(), backend=backend)
    with jg.autograd.detect_anomaly():
        y = g(_x())
        with pytest.raises(RuntimeError, match="Function 'SqrtBackward0' returned nan values"):
            y.backward()


def test_anomaly_leaves_state_untouched(backend):
    w = jg.tensor([0.0, 1.0], requires_grad=True)

    def step(x):
        loss = (jg.sqrt(w) * x).sum()
        loss.backward()
        with jg.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None
        return loss.detach()
    f = jg.compile(step, backend=backend)
    before = w.detach().numpy().copy()
    with jg.autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="SqrtBackward0"):
            f(jg.tensor([0.0, 1.0]))
    np.testing.assert_array_equal(w.detach().numpy(), before)
    assert w.grad is None


def test_custom_function_backward_error_has_forward_traceback(backend):
    class Bad(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("broken backward")

    def f(x):
        y = Bad.apply(x)                             # MARK apply
        return jg.autograd.grad(y.sum(), x)[0]
    line = _line_of(f, "MARK apply")
    with jg.autograd.detect_anomaly():
        with pytest.raises(ValueError) as e:
            jg.compile(f, backend=backend)(jg.tensor([1.0], requires_grad=True))
    assert "broken backward" in str(e.value)
    assert "Traceback of forward call that caused the error" in str(e.value) and f"line {line}" in str(e.value)
