"""``jitgrad.autograd.forward_ad`` against torch's: dual tensors through ops, views and in-place ops, custom
Functions' ``jvp`` with ``save_for_forward``, torch's errors; ``gradcheck(check_forward_ad=True)``."""
import numpy as np
import pytest

import jitgrad as jg
import jitgrad.autograd.forward_ad as fwAD

torch = pytest.importorskip("torch")
tfwAD = torch.autograd.forward_ad

RNG = np.random.default_rng(0)


def _both(a):
    return jg.tensor(a), torch.tensor(a)


def _close(j, t):
    np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)


def _program(lib, fwd, x, v):
    """Ops, views of a dual tensor and in-place writes into it and into its views; returns primal and tangent
    of everything that should carry one."""
    with fwd.dual_level():
        d = fwd.make_dual(x.clone(), v)
        y = (d * d).tanh() + d.exp().sum(0, keepdim=True)
        view = d[1:]
        row = d.reshape(-1)[:2]
        d.mul_(2.0)                     # the views see it, tangents too
        view.add_(y[1:] * 0.5)          # through a view into d
        z = lib.cat([d.sin(), view.cos()], 0).softmax(-1) @ d.T
        outs = [y, view, row, d, z]
        return [(fwd.unpack_dual(o).primal.clone(), fwd.unpack_dual(o).tangent.clone()) for o in outs]


def test_dual_tensors_through_ops_views_and_inplace_match_torch():
    a, v = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    got = _program(jg, fwAD, *_both(a)[:1], jg.tensor(v))
    want = _program(torch, tfwAD, torch.tensor(a), torch.tensor(v))
    for (pj, tj), (pt, tt) in zip(got, want):
        _close(pj, pt)
        _close(tj, tt)


def test_unpack_dual_and_levels():
    x, v = jg.tensor([1.0, 2.0]), jg.tensor([0.5, -1.0])
    assert fwAD.unpack_dual(x) == (x, None)
    with fwAD.dual_level() as lvl:
        assert isinstance(lvl, int)
        d = fwAD.make_dual(x, v)
        u = fwAD.unpack_dual(d)
        assert isinstance(u, fwAD.UnpackedDualTensor) and u.tangent is v
        np.testing.assert_array_equal(u.primal.numpy(), x.numpy())
        assert fwAD.unpack_dual(u.primal).tangent is None      # the primal carries no tangent
        assert fwAD.unpack_dual(x).tangent is None              # make_dual made a new (view) tensor
        assert fwAD.unpack_dual(x + 1).tangent is None
    assert fwAD.unpack_dual(d).tangent is None                  # the level's tangents are gone


def test_errors_match_torch():
    x = jg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="no level exists, make sure to enter_dual_level"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="different size than that of the original Tensor.*size \\[2\\] while "
                                               "the given forward gradient is of size \\[3\\]"):
            fwAD.make_dual(x, jg.ones(3))
        with pytest.raises(ValueError, match="Expected primal to be floating point or complex, but got"):
            fwAD.make_dual(jg.tensor([1, 2]), x)
        with pytest.raises(ValueError, match="Expected tangent to be floating point or complex"):
            fwAD.make_dual(x, jg.tensor([1, 2]))
        with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported at the moment"):
            fwAD.enter_dual_level()
    with pytest.raises(RuntimeError, match="Trying to exit a forward AD level that was not the last one"):
        fwAD.exit_dual_level()


def _functions(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, k):
            r = a.exp() * k
            ctx.save_for_forward(r)
            ctx.save_for_backward(r)
            return r

        @staticmethod
        def backward(ctx, g):
            r, = ctx.saved_tensors
            return g * r, None

        @staticmethod
        def jvp(ctx, t, tk):
            r, = ctx.saved_tensors
            return t * r

    class NoJvp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    return Exp, NoJvp


def test_custom_function_jvp_and_save_for_forward():
    a, v = RNG.standard_normal(3), RNG.standard_normal(3)
    res = []
    for lib, fwd in ((jg, fwAD), (torch, tfwAD)):
        Exp, NoJvp = _functions(lib)
        with fwd.dual_level():
            d = fwd.make_dual(lib.tensor(a), lib.tensor(v))
            y = Exp.apply(d.sin(), 3.0)
            res.append(fwd.unpack_dual(y).tangent)
            with pytest.raises(NotImplementedError, match="You must implement the jvp function for custom "
                                                          "autograd.Function to use it with forward mode AD"):
                NoJvp.apply(d)
            # no tangent in: no jvp needed
            NoJvp.apply(lib.tensor(a))
    _close(*res)


def test_gradcheck_forward_ad():
    x = jg.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    y = jg.tensor(RNG.standard_normal(3), requires_grad=True)
    f = lambda a, b: ((a * b).tanh() @ b, a.softmax(-1).log())    # noqa: E731
    assert jg.autograd.gradcheck(f, (x, y), check_forward_ad=True)
    assert jg.autograd.gradcheck(f, (x, y), check_forward_ad=True, check_backward_ad=False, fast_mode=True)
    assert jg.autograd.gradcheck(f, (x, y), check_forward_ad=True, check_batched_forward_grad=True)
    assert jg.autograd.gradgradcheck(f, (x, y), check_fwd_over_rev=True)

    class Wrong(jg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.sin()

        @staticmethod
        def backward(ctx, g):
            return g      # wrong too: not checked with check_backward_ad=False

        @staticmethod
        def jvp(ctx, t):
            return t * 2.0
    with pytest.raises(jg.autograd.GradcheckError, match="Jacobian"):
        jg.autograd.gradcheck(Wrong.apply, (x,), check_forward_ad=True, check_backward_ad=False)


def test_dual_tensors_under_compile():
    """make_dual inside a compiled function: the tangent eqns are traced with the primal ones."""
    def f(a, t):
        with fwAD.dual_level():
            d = fwAD.make_dual(a, t)
            return fwAD.unpack_dual((d.sin() * d).sum(-1)).tangent
    a, t = jg.tensor(RNG.standard_normal((2, 3))), jg.tensor(RNG.standard_normal((2, 3)))
    want = f(a, t)
    for backend in ("interpret", "numba"):
        _close(jg.compile(f, backend=backend)(a, t), want)
    an, tn = a.numpy(), t.numpy()
    np.testing.assert_allclose(want.numpy(), ((np.cos(an) * an + np.sin(an)) * tn).sum(-1), rtol=1e-12)


def test_custom_function_with_setup_context():
    """forward without ctx, setup_context saving for forward and backward, a jvp whose missing tangent arrives as
    zeros (materialized, as torch's)."""
    res = []
    for lib, fwd in ((jg, fwAD), (torch, tfwAD)):
        class Mul(lib.autograd.Function):
            @staticmethod
            def forward(a, b):
                return a * b

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_forward(*inputs)
                ctx.save_for_backward(*inputs)

            @staticmethod
            def backward(ctx, g):
                a, b = ctx.saved_tensors
                return g * b, g * a

            @staticmethod
            def jvp(ctx, ta, tb):
                a, b = ctx.saved_tensors
                return ta * b + a * tb
        with fwd.dual_level():
            a = fwd.make_dual(lib.tensor([1.0, 2.0]), lib.tensor([1.0, -0.5]))
            res.append(fwd.unpack_dual(Mul.apply(a, lib.tensor([3.0, 4.0]))).tangent)
    _close(*res)


def test_tangents_pass_the_eager_fast_paths():
    """The flat call sites of operators and unary functions, basic indexing, the in-place ufunc shortcut and the
    array pullback of matmul (eager fast path) all step aside while a dual level is open."""
    import jitgrad.autograd.forward_ad as fwAD
    x = jg.tensor([1.0, 2.0, 3.0], dtype=jg.float64)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, jg.ones(3, dtype=jg.float64))
        y = (d * d + d.tanh())[1:3]
        z = y.clone()
        z += 1.0
        want = 2 * x.numpy()[1:] + 1 / np.cosh(x.numpy()[1:]) ** 2
        np.testing.assert_allclose(fwAD.unpack_dual(y).tangent.numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(fwAD.unpack_dual(z).tangent.numpy(), want, rtol=1e-12)
        w = jg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=jg.float64, requires_grad=True)
        a = fwAD.make_dual(jg.eye(2, dtype=jg.float64), jg.ones(2, 2, dtype=jg.float64))
        (g,) = jg.autograd.grad((a @ w).sum(), [w])      # matmul's pullback, first order: g = a.T @ 1
        np.testing.assert_allclose(fwAD.unpack_dual(g).tangent.numpy(), np.full((2, 2), 2.0))


def test_current_level_follows_the_open_level():
    import jitgrad.autograd.forward_ad as fw
    assert fw._current_level == -1
    with fw.dual_level() as lv:
        assert fw._current_level == lv >= 0
    assert fw._current_level == -1


def test_a_function_that_names_its_backward_vjp():
    class Double(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def vjp(ctx, g):            # torch's other name for backward
            return g * 2

        @staticmethod
        def jvp(ctx, t):
            return t * 2

    x = jg.tensor([1.0, 3.0], requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]

    class Both(Double):
        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match="Implementing both 'backward' and 'vjp'"):
        Both.apply(x).sum().backward()


def _dual(v=(1.0, 2.0, 3.0)):
    return fwAD.make_dual(jg.tensor(list(v), dtype=jg.float64), jg.ones(len(v), dtype=jg.float64))


def test_a_jvp_must_write_the_tangent_of_an_input_written_in_place():
    def make(in_place):
        class Triple(jg.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(3)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 3

            @staticmethod
            def jvp(ctx, t):
                return t.mul_(3) if in_place else t * 3
        return Triple

    with fwAD.dual_level():
        out = make(True).apply(_dual())
        assert fwAD.unpack_dual(out).tangent.tolist() == [3.0, 3.0, 3.0]
        with pytest.raises(RuntimeError, match="jvp function must modify the corresponding gradient inplace"):
            make(False).apply(_dual())


def test_a_jvp_returns_no_tangent_for_a_non_differentiable_output():
    class Pair(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            flag = x.clone()
            ctx.mark_non_differentiable(flag)
            return x.clone(), flag

        @staticmethod
        def jvp(ctx, t):
            return t, t.clone()

    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="You should return None at that position instead"):
            Pair.apply(_dual())


def test_a_jvp_returns_a_view_where_forward_returns_one():
    def make(how):
        class Head(jg.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.narrow(0, 0, 2)

            @staticmethod
            def backward(ctx, g):
                return jg.cat([g, g.new_zeros(1)])

            @staticmethod
            def jvp(ctx, t):
                r = t.narrow(0, 0, 2)
                return {"view": r, "copy": r.clone(), "other view": r.clone().view_as(r)}[how]
        return Head

    with fwAD.dual_level():
        make("view").apply(_dual())
        with pytest.raises(RuntimeError, match="the jvp is not returning a view"):
            make("copy").apply(_dual())
        with pytest.raises(RuntimeError, match="not returning a view of the"):
            make("other view").apply(_dual())


def test_a_dual_tensor_prints_its_tangent():
    with fwAD.dual_level():
        a = jg.tensor([1.0, 2.0])
        b = fwAD.make_dual(a, jg.tensor([0.5, 0.0]))
        assert "tangent=" not in repr(a)
        assert repr(b) == "tensor([1., 2.], tangent=tensor([0.5000, 0.0000]))"
        p, t = fwAD.unpack_dual(b)
        assert "tangent=" not in repr(p) and "tangent=" not in repr(t)


def test_make_dual_refuses_a_tangent_that_is_dual_at_the_same_level():
    with fwAD.dual_level():
        d = fwAD.make_dual(jg.ones(2), jg.ones(2))
        with pytest.raises(RuntimeError, match="has a forward gradient at the same level"):
            fwAD.make_dual(jg.zeros(2), d)


def test_make_dual_of_an_inference_tensor_aliases_it():
    with jg.inference_mode():
        x = jg.zeros(2)
        with fwAD.dual_level():
            d = fwAD.make_dual(x, jg.ones(2))
            assert not d._is_view()
            d += 1
    assert x.tolist() == [1.0, 1.0]


def test_out_functions_refuse_dual_tensors():
    with fwAD.dual_level():
        d = fwAD.make_dual(jg.ones(2), jg.ones(2))
        plain = jg.ones(2)
        with pytest.raises(RuntimeError, match="out= function"):
            jg.add(plain, plain, out=d)
        with pytest.raises(RuntimeError, match="out= function"):
            jg.add(d, plain, out=plain)
    out = jg.zeros(2)
    jg.add(plain, plain, out=out)
    assert out.tolist() == [2.0, 2.0]


def _write_through_view(lib, fwd, op, base_value, p, t, leaf=False):
    """``op(view, dual)`` with ``view`` a transpose of a plain ``base`` (a clone of a leaf requiring grad when
    ``leaf``: the recorded path), then ``view *= 3``; the base's primal and tangent after each write."""
    with fwd.dual_level():
        x = lib.tensor(base_value, requires_grad=leaf)
        base = x.clone() if leaf else x
        view = base.transpose(0, 1)
        op(view, fwd.make_dual(lib.tensor(p), lib.tensor(t)))
        first = [a.detach().clone() for a in fwd.unpack_dual(base)]
        view *= 3
        second = [a.detach().clone() for a in fwd.unpack_dual(base)]
        return first + second


WRITES = {"add_": lambda v, d: v.add_(d), "mul_": lambda v, d: v.mul_(d), "copy_": lambda v, d: v.copy_(d),
          "sub_ of a sum": lambda v, d: v.sub_(d.sin() * 2)}


@pytest.mark.parametrize("leaf", [False, True], ids=["plain base", "base with history"])
@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_through_a_view_gives_its_base_a_tangent(name, leaf):
    """A view with no tangent written in place with a dual value: the base gets the tangent at the view's
    positions (zero elsewhere) and later writes through the view reach it, as torch's; against torch and against
    central differences of the base as a function of the written value (float64)."""
    b, p, t = (RNG.standard_normal((2, 2)) for _ in range(3))
    op = WRITES[name]
    got = _write_through_view(jg, fwAD, op, b, p, t, leaf)
    want = _write_through_view(torch, tfwAD, op, b, p, t, leaf)
    for g, w in zip(got, want):
        _close(g, w)

    def base_after(pv):
        x = jg.tensor(b)
        op(x.transpose(0, 1), jg.tensor(pv))
        x.transpose(0, 1).mul_(3)
        return x.numpy()
    eps = 1e-6
    fd = (base_after(p + eps * t) - base_after(p - eps * t)) / (2 * eps)
    np.testing.assert_allclose(got[3].numpy(), fd, rtol=1e-6, atol=1e-8)


def test_a_write_into_part_of_a_base_leaves_the_rest_of_its_tangent_zero():
    with fwAD.dual_level():
        base = jg.zeros(3, 4, dtype=jg.float64)
        base[1:, 2].copy_(fwAD.make_dual(jg.ones(2, dtype=jg.float64), jg.tensor([5.0, 7.0], dtype=jg.float64)))
        t = fwAD.unpack_dual(base).tangent
        want = np.zeros((3, 4))
        want[1:, 2] = [5.0, 7.0]
        np.testing.assert_array_equal(t.numpy(), want)
        base.mul_(2)        # the base's own later writes keep the tangent the views share
        np.testing.assert_array_equal(fwAD.unpack_dual(base[1:, 2]).tangent.numpy(), [10.0, 14.0])


def test_make_dual_lays_the_tangent_out_as_the_primal():
    """torch's layout check: a tangent with other strides or a storage of another size is copied into one laid
    out as the primal (writes into the unpacked tangent leave the caller's alone, and ``as_strided`` of the dual
    reaches the whole storage); one laid out alike is kept as is, and so is one with no elements whatever its
    storage offset, or one that differs only in the stride of a dim of one element."""
    for lib, fwd in ((jg, fwAD), (torch, tfwAD)):
        cases = [
            (lambda: lib.randn(5, dtype=lib.float64)[:4].detach(), lambda: lib.randn(4, dtype=lib.float64), False),
            (lambda: lib.randn(3, 2, dtype=lib.float64).t(), lambda: lib.randn(2, 3, dtype=lib.float64), False),
            (lambda: lib.randn(2, 3, dtype=lib.float64), lambda: lib.randn(2, 3, dtype=lib.float64), True),
            (lambda: lib.tensor([1.0]).as_strided((0,), (1,), 1), lambda: lib.tensor([1.0]).as_strided((0,), (1,), 2),
             True),
            (lambda: lib.tensor([1.0]).as_strided((1,), (2,), 0), lambda: lib.tensor([1.0]).as_strided((1,), (1,), 0),
             True),     # a dim of one element: its stride does not matter
            (lambda: lib.randn(4, dtype=lib.float64)[::2], lambda: lib.randn(4, dtype=lib.float64)[:2], False),
        ]
        for make_primal, make_tangent, kept in cases:
            primal, tangent = make_primal(), make_tangent()
            with fwd.dual_level():
                dual = fwd.make_dual(primal, tangent)
                got = fwd.unpack_dual(dual).tangent
                assert (got is tangent) is kept, (lib.__name__, tuple(primal.shape))
                assert got.stride() == primal.stride() or kept
                assert len(got.untyped_storage()) == len(primal.untyped_storage())
                np.testing.assert_array_equal(got.numpy(), tangent.numpy())
                before = tangent.clone()
                got.mul_(2)
                if not kept:
                    np.testing.assert_array_equal(tangent.numpy(), before.numpy())
                dual[1:]


def test_detach_in_place_drops_the_tangent():
    for lib, fwd in ((jg, fwAD), (torch, tfwAD)):
        with fwd.dual_level():
            d = fwd.make_dual(lib.ones(2), lib.ones(2)).clone()
            d.detach_()
            assert fwd.unpack_dual(d).tangent is None
            assert fwd.unpack_dual(d * 2).tangent is None


def _as_strided_tangents(lib, fwd, rg):
    res = []
    with fwd.dual_level():
        base = lib.tensor(np.arange(6.0), dtype=lib.float64).requires_grad_(rg)
        d = fwd.make_dual(base.clone(), lib.tensor(np.arange(6.0) * 10 + 1, dtype=lib.float64))
        v = d[1:5]      # a view: its geometries reach the whole storage, tangent included
        for r in (v.as_strided((3,), (2,), 0), v.as_strided((2, 2), (1, 1), 2), d.as_strided((2, 3), (1, 2))):
            res.append(fwd.unpack_dual(r).tangent)
        # a tangent copied to the primal's layout (a larger storage): zero beyond the primal
        primal = lib.tensor(np.arange(5.0), dtype=lib.float64)[:4].detach()
        dd = fwd.make_dual(primal, lib.tensor([1.0, 2.0, 3.0, 4.0], dtype=lib.float64))
        res.append(fwd.unpack_dual(dd.as_strided((5,), (1,), 0)).tangent)
        e = fwd.make_dual(lib.tensor(np.arange(6.0), dtype=lib.float64),
                          lib.tensor(np.arange(6.0) + 100, dtype=lib.float64))
        e.as_strided_((2, 2), (1, 2), 1)
        res.append(fwd.unpack_dual(e).tangent)
        return [t.detach().clone() for t in res]


@pytest.mark.parametrize("rg", [False, True], ids=["no grad", "requires grad"])
def test_as_strided_reads_the_tangent_with_the_same_geometry(rg):
    for got, want in zip(_as_strided_tangents(jg, fwAD, rg), _as_strided_tangents(torch, tfwAD, rg)):
        _close(got, want)
    x = jg.tensor(RNG.standard_normal(8), requires_grad=True)
    assert jg.autograd.gradcheck(lambda a: (a * a)[1:7].as_strided((2, 3), (1, 2), 1), (x,), check_forward_ad=True)
