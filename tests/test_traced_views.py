"""In-place writes into views inside @jg.compile reach their base, as eager mode's shared memory makes them
(runtime/traced.py: traced values are immutable, so each view a trace makes is recorded with its base and a
write into it is written through).  Compiled (both backends) == eager, and the refusals name the op."""
import numpy as np
import pytest

import jitgrad as jg


def _views_of_a_clone(x):
    y = x.clone() + jg.arange(6.0).reshape(2, 3)
    v = y[1]
    v[0] = 5.0                      # setitem on a view
    y[0][1:].mul_(-1.0)             # an in-place op on a view of a view
    y.T.add_(0.5)                   # a permuted view
    y.view(-1)[4] = 7.0             # a reshaped view
    a, b = y[0], y[:, 2]
    a.add_(100.0)                   # a sibling view (b) sees it
    vv = v[0:2]
    v.mul_(2.0)                     # a view of the written view (vv) sees it
    return y, b * 1.0, vv + 0.0


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_writes_into_views_reach_the_base_and_its_other_views(backend):
    x = jg.tensor(np.linspace(-1, 1, 6).reshape(2, 3))
    want = [t.numpy() for t in _views_of_a_clone(x)]
    got = jg.compile(_views_of_a_clone, backend=backend, background=False)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_write_into_a_view_of_captured_state_updates_it(backend):
    w = jg.tensor(np.zeros((2, 3)))

    @jg.compile(backend=backend, background=False)
    def step(x):
        with jg.no_grad():
            w[1].add_(x)                # a parameter updated through a view (was lost: w stayed 0)
            w[:, 0].mul_(2.0)
        return w.sum()
    assert float(step(jg.tensor(1.0))) == 4.0
    assert float(step(jg.tensor(1.0))) == 10.0
    np.testing.assert_array_equal(w.numpy(), [[0, 0, 0], [6, 2, 2]])


def test_writes_into_views_without_an_inverse_are_refused_by_name():
    def expanded(x):
        y = x.clone()
        y.expand(3, 2, 3).add_(1.0)
        return y
    x = jg.tensor(np.zeros((2, 3)))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        expanded(x)                     # eager: torch's refusal
    with pytest.raises(RuntimeError, match="broadcast_to"):
        jg.compile(expanded, backend="interpret")(x)


def test_a_recorded_write_into_a_view_inside_compile_is_refused_with_the_line():
    w = jg.tensor(np.ones((2, 3)), requires_grad=True)

    def f(x):
        y = w * 1.0
        y[1].mul_(x)                    # MARK
        return y.sum()
    with pytest.raises(RuntimeError, match="while gradients are recorded is not supported.*test_traced_views.py"):
        jg.compile(f, backend="interpret")(jg.tensor(2.0))


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_reshape_that_eager_mode_copies_stays_a_copy(backend):
    """``y.T.reshape(-1)`` is a copy in eager mode (the strides forbid a view): a write into it must not reach
    ``y``.  ``view``/``unsqueeze``/``squeeze`` are views whatever the strides: a write into them does."""
    def f(x):
        y = x * 1.0
        z = y.T.reshape(-1)
        z.add_(100.0)
        y.unsqueeze(0)[0, 1].mul_(-1.0)
        y.view(3, 2).squeeze()[0, 0] = 7.0
        return y, z
    x = jg.tensor(np.arange(6.0).reshape(2, 3))
    want = [t.numpy() for t in f(x)]
    got = jg.compile(f, backend=backend, background=False)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_an_index_by_a_python_bool_is_a_copy_as_in_eager_mode(backend):
    """``y[True]`` / ``y[None, False]`` index by a bool (advanced indexing, as torch): a copy, not a view; a write
    into it must not reach ``y`` inside @jg.compile either."""
    def f(x):
        y = x * 1.0
        z = y[True]
        z.add_(100.0)
        y[None, False].add_(5.0)
        return y, z
    x = jg.tensor(np.arange(6.0).reshape(2, 3))
    want = [t.numpy() for t in f(x)]
    got = jg.compile(f, backend=backend, background=False)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_assigning_data_inside_compile_writes_the_tensor(backend):
    """``p.data = v`` (a manual update of a captured parameter, or of an argument) inside @jg.compile: the
    interpreter lost it and Numba applied it once, a step behind; it is a recorded write, as eager mode's result."""
    def make():
        p = jg.nn.Parameter(jg.ones(3, dtype=jg.float64))

        def f(x, w):
            p.data = p.data * 0.5 + x
            w.data = w * 2.0
            y = x * 3.0
            y.data = y + 1.0             # an intermediate: its value changes, its history stays
            return p.sum(), y.sum()
        return p, f
    x = jg.tensor(np.array([1.0, -2.0, 0.5]))
    runs = []
    for compiled in (False, True):
        p, f = make()
        w = jg.tensor(np.arange(3.0))
        g = jg.compile(f, backend=backend, background=False) if compiled else f
        outs = [[float(t) for t in g(x, w)] for _ in range(3)]
        runs.append((outs, p.detach().numpy().copy(), w.numpy().copy()))
    (eo, ep, ew), (co, cp, cw) = runs
    assert co == eo
    np.testing.assert_array_equal(cp, ep)
    np.testing.assert_array_equal(cw, ew)
    p = jg.nn.Parameter(jg.ones(3, dtype=jg.float64))

    def reshape_data(x):
        p.data = x.reshape(3, 1)
        return p * 1.0
    with pytest.raises(jg.UnsupportedError, match="assigning .data of another shape"):
        jg.compile(reshape_data, backend=backend, background=False)(x)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_writes_through_detach_and_data_reach_the_tensor(backend):
    """``p.data.add_(u)`` / ``y.detach().mul_(2)`` share the tensor's storage (torch): inside @jg.compile the
    write reaches it too (was silently lost), also with grad mode on, where it is never recorded."""
    def make():
        p = jg.nn.Parameter(jg.tensor(np.arange(3.0)))

        def f(x, w):
            p.data.add_(x)              # a manual update of a captured parameter
            p.detach().mul_(2.0)
            w.data.sub_(x)
            y = x * 1.0
            d = y.detach()
            d.add_(1.0)
            return y, d * 1.0, p * 1.0
        return p, f
    x = jg.tensor(np.array([1.0, -2.0, 0.5]))
    p, f = make()
    w = jg.tensor(np.ones(3))
    want = [t.detach().numpy() for t in f(x, w)] + [p.detach().numpy(), w.numpy()]
    p, f = make()
    w = jg.tensor(np.ones(3))
    got = [t.detach().numpy() for t in jg.compile(f, backend=backend, background=False)(x, w)] + [
        p.detach().numpy(), w.numpy()]
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_write_through_an_alias_of_a_view_is_unrecorded_all_the_way_up(backend):
    """``y[1].detach().mul_(3)`` with ``y`` requiring grad: the write goes through an alias, which autograd never
    sees, so it reaches ``y`` as in eager mode (it is not the refused recorded write into a view)."""
    def f(x):
        y = x * 1.0
        y[1].detach().mul_(3.0)
        d = y.detach()
        d[0].add_(10.0)
        return y, d * 1.0
    x = jg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    want = [t.detach().numpy() for t in f(x)]
    got = jg.compile(f, backend=backend, background=False)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.detach().numpy(), w)


def test_an_alias_of_captured_state_is_read_afresh_at_each_call():
    """``x * p.detach()`` / ``p.data`` of a tensor from outside the function read ``p`` at each call (they were
    baked into the graph as constants: a later change of ``p`` was not seen)."""
    p = jg.tensor(np.ones(2))

    @jg.compile(backend="interpret", background=False)
    def f(x):
        return x * p.detach() + x * p.data
    np.testing.assert_array_equal(f(jg.tensor(np.ones(2))).numpy(), [2.0, 2.0])
    p.add_(1.0)
    np.testing.assert_array_equal(f(jg.tensor(np.ones(2))).numpy(), [4.0, 4.0])


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_reshape_that_eager_mode_views_is_a_view(backend):
    """``x.reshape(1, -1)`` of contiguous data is a view in eager mode: a later write into ``x`` (or ``y``) shows in
    it (the trace made every plain reshape a copy); ``y.T.reshape(-1)`` stays a copy, also of an argument or a
    captured tensor whose own strides forbid the view (the strides are part of the key and guards)."""
    s = jg.tensor(np.arange(6.0).reshape(3, 2)).T       # captured, transposed: its reshape copies

    def f(x):
        x.add_(1.0)
        v = x.reshape(1, -1)
        y = x * 2.0
        z, w, u = y.reshape(-1), y.T.reshape(-1), s.reshape(-1)
        x.mul_(-1.0)
        y.add_(10.0)
        s.add_(1.0)
        return v * 1.0, z * 1.0, w * 1.0, u * 1.0
    g = jg.compile(f, backend=backend, background=False)
    a = np.arange(6.0).reshape(2, 3)
    for x in (a, a.T.copy().T, a):      # contiguous, transposed (a new signature), contiguous
        s.copy_(jg.tensor(np.arange(6.0).reshape(3, 2).T))
        want = [t.numpy() for t in f(jg.tensor(x))] + [s.numpy().copy()]
        s.copy_(jg.tensor(np.arange(6.0).reshape(3, 2).T))
        got = [t.numpy() for t in g(jg.tensor(x))] + [s.numpy().copy()]
        for gv, wv in zip(got, want):
            np.testing.assert_array_equal(gv, wv)


@pytest.mark.parametrize("make", [lambda y: y.transpose(0, 1), lambda y: y.diagonal(0, 0, 1)],
                         ids=["transpose", "diagonal"])
def test_view_of_a_traced_value_whose_eager_strides_forbid_it_raises_as_eager(make):
    """(``diagonal`` is traced as a composition: its strides are the view's, not the composition's result's.)"""
    def f(x):
        return make(x * 1.0).view(-1) * 1.0
    x = jg.tensor(np.arange(24.0).reshape(4, 2, 3))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(x)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jg.compile(f, backend="interpret")(x)


@pytest.mark.parametrize("backend", [None, "interpret", "numba"])
def test_a_write_into_an_expand_that_repeats_nothing_reaches_the_base(backend):
    """``x.expand(1, *x.shape)`` adds a dim of size 1: no element repeats, so torch writes through it; eager mode
    refused it (NumPy's broadcast is read-only) and @jg.compile had no inverse for it."""
    def f(x):
        y = x * 1.0
        y.expand(1, 2, 3).mul_(2.0)
        y[None].expand(1, 2, 3)[0, 1].add_(1.0)
        y[:, 3:].expand(2, 2, 0).add_(5.0)     # empty: nothing repeats either
        return y
    x = np.arange(6.0).reshape(2, 3)
    g = f if backend is None else jg.compile(f, backend=backend, background=False)
    want = x * 2.0
    want[1] += 1.0
    np.testing.assert_array_equal(g(jg.tensor(x)).numpy(), want)


def _torch_eager_compiled(prog, *arrays, backends=("interpret", "numba")):
    """``prog(M, x, s)`` with ``s`` a captured tensor that requires grad: (output, s.grad) per way of running."""
    import torch
    res = {}
    for how in ("torch", "eager") + tuple(backends):
        M = torch if how == "torch" else jg
        s = M.tensor(arrays[1], requires_grad=True)

        def f(x):
            return prog(M, x, s)
        g = f if how in ("torch", "eager") else jg.compile(f, backend=how, background=False)
        try:
            res[how] = [g(M.tensor(arrays[0])).detach().numpy(), s.grad.numpy()]
        except RuntimeError as e:
            res[how] = type(e)
    return res


def test_a_view_with_a_history_follows_a_recorded_write_into_its_base():
    """``v = y.unsqueeze(0); y.add_(s * s)``: ``v``'s later uses differentiate through the write (eager mode and
    torch regenerate its node); in a trace ``v`` got the new values but kept its old history, so ``s.grad``
    silently missed the write's share."""
    def prog(M, x, s):
        y = x * 1.0 + s
        v = y.unsqueeze(0)
        y.add_(s * s)
        (y * 2.0 + v * 3.0).sum().backward()
        return v * 1.0
    res = _torch_eager_compiled(prog, np.ones(3), np.arange(3.0))
    for how, got in res.items():
        for g, w in zip(got, res["torch"]):
            np.testing.assert_allclose(g, w, err_msg=how)


@pytest.mark.parametrize("write", ["view", "alias"])
def test_a_write_through_a_view_bumps_the_base_version_as_eager(write):
    """``y.mul_(x)`` saves ``x``; a later write into ``x`` through ``x.unsqueeze(0)`` (or ``x.detach()``, which
    shares the version counter) makes backward raise in eager mode and torch.  In a trace the view's own counter
    was bumped, not ``x``'s: the write through a view was missed and the gradient silently used the old ``x``."""
    def prog(M, x, s):
        y = x * 1.0 + s
        y.mul_(x)
        (x.unsqueeze(0) if write == "view" else x.detach()).add_(-1.5)
        (y * 2.0).sum().backward()
        return y * 1.0
    res = _torch_eager_compiled(prog, np.ones(3), np.arange(3.0), backends=("interpret",))
    assert res["torch"] is RuntimeError
    assert res == {how: RuntimeError for how in res}


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_a_tensor_written_in_place_keeps_its_strides(backend):
    """A write makes the tensor's new traced value with another op (an index_put over a strided view, a copy_ of
    a transposed source), but its eager strides do not change: its reshape stays a view, which a later write into
    it reaches (the trace took the op's strides: unknown, so a copy)."""
    def f(x):
        x[::2].add_(x[::2] * 0.0 + 1.0)
        v = x.reshape(-1)
        w = x * 1.0
        w.copy_((x * 2.0).T.T)
        u = w.reshape(-1)
        x.add_(-1.5)
        w.add_(100.0)
        return v * 1.0, u * 1.0
    want = [t.numpy() for t in f(jg.tensor(np.arange(12.0).reshape(3, 4)))]
    got = jg.compile(f, backend=backend, background=False)(jg.tensor(np.arange(12.0).reshape(3, 4)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_writes_into_a_diagonal_reach_the_base(backend):
    """A write into ``y.diagonal(...)`` (any offset and pair of dims) reaches ``y`` and its other views (it was
    refused: diagonal had no inverse inside @jg.compile)."""
    def f(x):
        y = x * 1.0
        y.diagonal(0, 0, 1).mul_(-1.0)
        d = y.diagonal(1, 1, 2)
        y.diagonal(-1, 2, 0).add_(10.0)
        d.add_(100.0)
        return y, d * 1.0
    x = jg.tensor(np.arange(24.0).reshape(2, 3, 4))
    want = [t.numpy() for t in f(x)]
    for g, w in zip(jg.compile(f, backend=backend, background=False)(x), want):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_index_assignment_by_a_traced_mask_is_a_where(backend):
    """``y[y > 0.5] = v`` with a traced mask (a number, or a one-element tensor with history, into a float or an
    integer tensor, through a view too) agrees with torch (it was refused: an index by the mask needs its count,
    but the assignment's result does not)."""
    import torch

    def f(M, x, s):
        y = x * 1.0 + s
        y[y > 0.5] = 0.25
        y[y < -0.5] = x.sum() * 0.1
        q = x.detach() * 1.0
        q.T[q.T < 0.0] = q.sum()
        i = M.arange(6).reshape(2, 3)
        i[i > 2] = 1.7
        (y * y).sum().backward()
        return y * 1.0, i * 1, q * 1.0, x.grad * 1.0, s.grad * 1.0
    a = np.random.default_rng(0).uniform(-1, 1, (2, 3))
    res = []
    for how in ("torch", backend):
        M = torch if how == "torch" else jg
        s = M.tensor(a * 0.5, requires_grad=True)

        def g(x):
            return f(M, x, s)
        g = g if how == "torch" else jg.compile(g, backend=how, background=False)
        res.append([o.detach().numpy() for o in g(M.tensor(a, requires_grad=True))])
    for got, want in zip(*res):
        np.testing.assert_allclose(got, want, rtol=1e-12)
