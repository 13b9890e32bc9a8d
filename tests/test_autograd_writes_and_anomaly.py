"""Behaviours PyTorch's own autograd tests exercise (issue 31, item 7): writes into broadcast tensors, anomaly
mode's report for a NaN made in a (double) backward, gradcheck of a function that reads its input through a
closure, and a custom Function that writes a view in place.  Where torch is installed it is the oracle."""

import warnings

import numpy as np
import pytest

import jitgrad as jg

try:
    import torch
except ImportError:     # the oracle is optional: the checks below also state the expected values
    torch = None

oracle = pytest.mark.skipif(torch is None, reason="torch (the oracle) is not installed")


# ---- writes into an expanded tensor ----------------------------------------------------------------------------

def _write_one_element(lib):
    base = lib.zeros(1)
    e = base.expand(4)
    e[0] = 3.0              # one element: no location is written twice, so torch allows it
    e[0] /= 2.0             # the same through an in-place op on the one-element view
    return base.tolist(), e.tolist()


def test_one_element_of_an_expanded_tensor_can_be_written():
    assert _write_one_element(jg) == ([1.5], [1.5, 1.5, 1.5, 1.5])


@oracle
def test_one_element_of_an_expanded_tensor_is_written_as_torch():
    assert _write_one_element(jg) == _write_one_element(torch)


@pytest.mark.parametrize("write", [lambda e: e.fill_(1.0), lambda e: e.add_(1.0),
                                   lambda e: e.__setitem__((slice(None), 0), 1.0)])
def test_a_write_that_repeats_a_location_is_still_refused(write):
    e = jg.zeros(1, 4).expand(3, 4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        write(e)


def test_a_read_only_array_is_not_made_writable():
    a = np.arange(3.0)
    a.flags.writeable = False
    t = jg.from_numpy(a) if hasattr(jg, "from_numpy") else jg.tensor(a)
    if t._data.flags.writeable:
        pytest.skip("this tensor copied the array")
    with pytest.raises(RuntimeError):
        t[0] = 5.0
    assert a[0] == 0.0


# ---- anomaly mode: a NaN made in a backward ----------------------------------------------------------------------

class _NanInExpanded(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sum(0, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        gx = g.clone().expand(4)
        gx[0] = 0
        gx[0] /= 0          # 0/0: a NaN in every element (they share one location)
        return gx


def test_nan_written_into_an_expanded_gradient_is_reported():
    x = jg.rand(4, requires_grad=True)
    _NanInExpanded.apply(x).backward()      # outside anomaly mode: no check
    assert np.isnan(x.grad.numpy()).all()
    x = jg.rand(4, requires_grad=True)
    out = _NanInExpanded.apply(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="Function '_NanInExpandedBackward' returned nan values in its 0th"):
            with jg.autograd.detect_anomaly():
                out.backward()


class _Outer(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _Inner.apply(g * x)


class _Inner(jg.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        return y * 2.0

    @staticmethod
    def backward(ctx, g):
        r = g.clone()
        r[0] /= 0           # 0/0 or x/0: NaN or Inf
        r[0] = float("nan")
        return r


def _double_backward_report(forward_in_anomaly_mode):
    x = jg.ones(3, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Function '_InnerBackward' returned nan values in its 0th output"):
            if forward_in_anomaly_mode:
                with jg.autograd.detect_anomaly():
                    (gx,) = jg.autograd.grad(_Outer.apply(x).sum(), x, create_graph=True)
                    gx.sum().backward()
            else:
                (gx,) = jg.autograd.grad(_Outer.apply(x).sum(), x, create_graph=True)
                with jg.autograd.detect_anomaly():
                    gx.sum().backward()
    return [str(m.message) for m in w]


def test_anomaly_report_without_forward_information():
    msgs = _double_backward_report(False)
    assert "Anomaly Detection has been enabled" in msgs[0]
    # the report comes next: NumPy's "invalid value" warning is not in the way (the NaN check is the report)
    assert msgs[1].startswith("Error detected in _InnerBackward.")
    assert "No forward pass information" in msgs[1]
    assert len(msgs) == 2


def test_anomaly_report_names_the_backward_that_made_the_failing_node():
    msgs = _double_backward_report(True)
    assert msgs[1].startswith("Error detected in _InnerBackward.")
    assert "_Inner.apply" in msgs[1]
    # the node was made while _OuterBackward ran (create_graph): its forward call comes next
    assert "Previous calculation was induced by _OuterBackward" in msgs[2]
    assert "_Outer.apply" in msgs[2]


def test_no_numpy_warning_in_an_anomaly_mode_backward():
    x = jg.zeros(2, requires_grad=True)
    y = (x / x).sum()       # 0/0 in the forward is NaN, silently as in torch's backward below
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with jg.autograd.detect_anomaly(check_nan=False):
            y.backward()
    assert not [m for m in w if issubclass(m.category, RuntimeWarning)]


# ---- gradcheck of a function that reads its input through a closure -------------------------------------------

def test_gradcheck_perturbs_the_inputs_themselves():
    x = jg.rand(2, 2, dtype=jg.float64, requires_grad=True)
    v = jg.ones(2, dtype=jg.float64, requires_grad=True)

    def reads_closure(inp, vec):        # ignores ``inp``: torch perturbs x itself, so the Jacobian is still x's
        return jg.autograd.functional.vjp(lambda t: t.sum(dim=1), x, vec, create_graph=True)

    before = x.detach().clone()
    assert jg.autograd.gradcheck(reads_closure, (x, v))
    assert jg.autograd.gradgradcheck(reads_closure, (x, v))
    assert jg.equal(x.detach(), before)     # every perturbed entry is restored


def test_gradcheck_still_catches_a_wrong_closure_gradient():
    x = jg.rand(3, dtype=jg.float64, requires_grad=True)

    class Wrong(jg.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 3.0

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        jg.autograd.gradcheck(lambda inp: Wrong.apply(x), (x,))


# ---- a custom Function that writes a view in place ----------------------------------------------------------------

class _AddInto(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_dirty(x)
        x.add_(y)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, g


def _write_view_of_view(lib, fn):
    root = lib.arange(16.0, dtype=lib.float64).reshape(4, 4).requires_grad_()
    b = lib.arange(4.0, dtype=lib.float64).reshape(2, 2).requires_grad_()
    x = root.clone()
    fn.apply(x.narrow(1, 2, 2).narrow(0, 1, 2), b)
    (x * lib.arange(16.0, dtype=lib.float64).reshape(4, 4)).sum().backward()
    return x.tolist(), root.grad.tolist(), b.grad.tolist()


def test_custom_function_write_into_a_view_reaches_the_base():
    x, groot, gb = _write_view_of_view(jg, _AddInto)
    w = np.arange(16.0).reshape(4, 4)
    assert groot == w.tolist()                  # the written region's gradient goes to b, as the base's to root
    assert gb == w[1:3, 2:4].tolist()
    assert x[1][2:] == [6.0 + 0.0, 7.0 + 1.0]


@oracle
def test_custom_function_write_into_a_view_as_torch():
    class TorchAddInto(torch.autograd.Function):
        forward = _AddInto.forward
        backward = _AddInto.backward

    assert _write_view_of_view(jg, _AddInto) == _write_view_of_view(torch, TorchAddInto)


def test_custom_function_write_into_a_view_gradcheck():
    a = jg.randn(4, 4, dtype=jg.float64, requires_grad=True)
    b = jg.randn(2, 2, dtype=jg.float64, requires_grad=True)

    def func(root, b):
        x = root.clone()
        _AddInto.apply(x.narrow(1, 2, 2).narrow(0, 1, 2), b)
        _AddInto.apply(x.narrow(1, 0, 2).narrow(0, 1, 2), b)
        return x

    assert jg.autograd.gradcheck(func, (a, b))
    assert jg.autograd.gradgradcheck(func, (a, b))


# ---- pow saves what torch saves -----------------------------------------------------------------------------

def _saved_count_after_pow(lib):
    with lib.autograd.graph.allow_mutation_on_saved_tensors() as ctx:
        a = lib.randn(2, 3, requires_grad=True).clone()
        b = a ** 2
        c = a ** 2
        a.sin_()                # a is saved by both nodes: one clone, not one per saved output
        return len(ctx.cloned), len(ctx.tid_to_weakhandle)


def test_pow_with_a_number_exponent_saves_only_its_input():
    assert _saved_count_after_pow(jg) == (1, 2)     # one clone; torch counts the same


@oracle
def test_pow_saves_as_torch():
    assert _saved_count_after_pow(jg) == _saved_count_after_pow(torch)


def test_pow_gradients_with_a_tensor_exponent():
    x = (jg.rand(3, dtype=jg.float64) + 0.5).requires_grad_()
    y = jg.rand(3, dtype=jg.float64).requires_grad_()
    assert jg.autograd.gradcheck(lambda a, b: a ** b, (x, y))
    assert jg.autograd.gradgradcheck(lambda a, b: a ** b, (x, y))
    assert jg.autograd.gradgradcheck(lambda b: 2.0 ** b, (y,))


# ---- hooks on a view written in place -------------------------------------------------------------------------

def _hooks_around_a_view_write(lib):
    calls = []
    base = lib.tensor([1.0], requires_grad=True).clone()
    view, view2 = base[:], base[:]
    view.register_hook(lambda g: calls.append("view, before the write"))
    view2.register_hook(lambda g: calls.append("view2, before the write"))
    view.mul_(2)
    view2.grad_fn       # noqa: B018 - torch regenerates view2's node when it is read
    view2.register_hook(lambda g: calls.append(("view2, after the write", g.tolist())))
    (view + view2).sum().backward()
    return calls


def test_hooks_registered_on_a_view_before_a_write_into_it_are_left_behind():
    # the write reads the base's history (CopySlices), not the view's old node; a hook registered after it runs
    assert _hooks_around_a_view_write(jg) == [("view2, after the write", [1.0])]


@oracle
def test_hooks_around_a_view_write_as_torch():
    assert _hooks_around_a_view_write(jg) == _hooks_around_a_view_write(torch)


# ---- in-place view ops on a view a custom Function returned ------------------------------------------------------

class _ViewAs(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


@pytest.mark.parametrize("op", [lambda v: v.transpose_(0, 1), lambda v: v.t_(), lambda v: v.unsqueeze_(0),
                                lambda v: v.squeeze_(0), lambda v: v.as_strided_((1, 2), (2, 1))])
def test_in_place_view_op_on_a_custom_function_view_is_refused(op):
    base = jg.rand(1, 2, requires_grad=True).clone()
    v = _ViewAs.apply(base)
    with pytest.raises(RuntimeError, match="view was created inside a custom Function"):
        op(v)
    with jg.no_grad():      # not recorded: allowed (torch refuses the next recorded in-place op instead)
        op(_ViewAs.apply(base))
